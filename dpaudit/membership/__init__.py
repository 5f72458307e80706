"""Membership and attribute inference on a target model: the ``membership`` and ``attribute``
audit kinds and their Python API (:func:`audit_membership`, :func:`audit_attribute`).

One home: the tables (:mod:`~dpaudit.membership.schema`), the Python API
(:mod:`~dpaudit.membership.pipeline`), the one scoring path
(:mod:`~dpaudit.membership.scoring`) and the one summariser of an attack's scores
(:mod:`~dpaudit.membership.summary`) that the API and the kinds share, the units of
targets dpaudit trains (:mod:`~dpaudit.membership.trained`, what they store:
:mod:`~dpaudit.membership.stored`), targets a user brings (loading:
:mod:`~dpaudit.membership.brought`, units: :mod:`~dpaudit.membership.brought_units`), the
input-perturbation target (:mod:`~dpaudit.membership.input_perturbation`), and the kind
adapters (:mod:`~dpaudit.membership.kind`, :mod:`~dpaudit.membership.attribute`) with
their summaries (:mod:`~dpaudit.membership.verdict`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "AttackOutcome": "dpaudit.membership.summary",
    "AttackScores": "dpaudit.membership.summary",
    "AttributeAuditResult": "dpaudit.membership.summary",
    "AttributeGuesses": "dpaudit.membership.summary",
    "AuditedTarget": "dpaudit.membership.pipeline",
    "MembershipAuditResult": "dpaudit.membership.pipeline",
    "attack_seed": "dpaudit.membership.summary",
    "attribute_result": "dpaudit.membership.summary",
    "audit_attribute": "dpaudit.membership.pipeline",
    "audit_membership": "dpaudit.membership.pipeline",
    "dp_attribute_advantage_bound": "dpaudit.theory",
    "fair_coins": "dpaudit.membership.pipeline",
    "guess_attributes": "dpaudit.membership.pipeline",
    "one_run_bound": "dpaudit.membership.summary",
    "prepare_target": "dpaudit.membership.pipeline",
    "resolve_attacks": "dpaudit.membership.scoring",
    "score_attacks": "dpaudit.membership.pipeline",
    "summarise_attack": "dpaudit.membership.summary",
}

__all__ = sorted(_EXPORTS)
# Submodules the kind adapters (dpaudit.membership.kind, .attribute) reach on first use:
# importing them, as validating an audit file does, loads none of these (nor torch).
_SUBMODULES = (
    "brought",
    "brought_units",
    "language_units",
    "pipeline",
    "scoring",
    "sweep",
    "trained",
    "verdict",
)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, submodules=_SUBMODULES)

if TYPE_CHECKING:
    from dpaudit.membership.pipeline import (
        AuditedTarget,
        MembershipAuditResult,
        audit_attribute,
        audit_membership,
        fair_coins,
        guess_attributes,
        prepare_target,
        score_attacks,
    )
    from dpaudit.membership.scoring import resolve_attacks
    from dpaudit.membership.summary import (
        AttackOutcome,
        AttackScores,
        AttributeAuditResult,
        AttributeGuesses,
        attack_seed,
        attribute_result,
        one_run_bound,
        summarise_attack,
    )
    from dpaudit.theory import dp_attribute_advantage_bound
