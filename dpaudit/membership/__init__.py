"""Membership and attribute inference on a target model: the ``membership`` and ``attribute``
audit kinds and their Python API (:func:`audit_membership`, :func:`audit_attribute`).

Targets dpaudit trains (:mod:`~dpaudit.membership.trained`), targets a user brings
(:mod:`~dpaudit.membership.brought`), the input-perturbation target
(:mod:`~dpaudit.membership.input_perturbation`), the scoring pipeline shared by the kind
and the Python API (:mod:`~dpaudit.membership.pipeline`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "AttackOutcome": "dpaudit.membership.pipeline",
    "AttackScores": "dpaudit.membership.pipeline",
    "AttributeAuditResult": "dpaudit.membership.pipeline",
    "AttributeGuesses": "dpaudit.membership.pipeline",
    "AuditedTarget": "dpaudit.membership.pipeline",
    "MembershipAuditResult": "dpaudit.membership.pipeline",
    "attack_seed": "dpaudit.membership.pipeline",
    "attribute_result": "dpaudit.membership.pipeline",
    "audit_attribute": "dpaudit.membership.pipeline",
    "audit_membership": "dpaudit.membership.pipeline",
    "dp_attribute_advantage_bound": "dpaudit.theory",
    "fair_coins": "dpaudit.membership.pipeline",
    "guess_attributes": "dpaudit.membership.pipeline",
    "one_run_bound": "dpaudit.membership.pipeline",
    "prepare_target": "dpaudit.membership.pipeline",
    "resolve_attacks": "dpaudit.membership.pipeline",
    "score_attacks": "dpaudit.membership.pipeline",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from dpaudit.membership.pipeline import (
        AttackOutcome,
        AttackScores,
        AttributeAuditResult,
        AttributeGuesses,
        AuditedTarget,
        MembershipAuditResult,
        attack_seed,
        attribute_result,
        audit_attribute,
        audit_membership,
        fair_coins,
        guess_attributes,
        one_run_bound,
        prepare_target,
        resolve_attacks,
        score_attacks,
    )
    from dpaudit.theory import dp_attribute_advantage_bound
