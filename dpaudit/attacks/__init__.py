"""Attacks: membership inference (loss, shadow, LiRA, RMIA, white-box gradient norms) and
attribute inference (Yeom).

Every attack returns scores, never a verdict (larger means "member" for membership
attacks; per candidate value for attribute inference). A registry maps the names used in
audit files to the attack classes; :func:`get_attack` builds one with its options.

Named variants (:data:`ATTACK_VARIANTS`) are registered attacks with fixed options:

- ``"lira-online"``, ``"lira-offline"``: LiRA with per-example variances, online
  (likelihood ratio of the IN and OUT fits) or offline (OUT fit only);
- ``"lira-online-global"``, ``"lira-offline-global"``: the same with one global variance;
- ``"lira-online-shrunk"``, ``"lira-offline-shrunk"`` (and ``-shrunk-t``): per-example
  variances shrunk toward the global one by a conjugate prior fitted across rows
  (Gaussian, or Student-t predictive);
- ``"rmia-offline"``: RMIA with OUT models only (``"rmia"`` itself is online).

``"auto"`` (:class:`AutoAttack`) scores with whichever online LiRA variant or RMIA has the
highest TPR at low FPR when each reference model in turn plays the target.

LiRA's variants and RMIA read the same reference models:
:func:`score_with_shared_references` trains them once for all of them.
"""

from __future__ import annotations

from typing import Any

from dpaudit.attacks.attribute import AttributeAttack, sensitive_prior
from dpaudit.attacks.auto import AUTO_CANDIDATES, AutoAttack
from dpaudit.attacks.base import AttackContext, MembershipAttack, logit_confidence
from dpaudit.attacks.lira import LIRA_VARIANTS, LiraAttack, balanced_halves, lira_scores
from dpaudit.attacks.loss import LossAttack
from dpaudit.attacks.reference import (
    ReferenceAttack,
    ReferenceLogits,
    score_with_shared_references,
    train_reference_logits,
)
from dpaudit.attacks.rmia import RMIA_VARIANTS, RmiaAttack, rmia_scores
from dpaudit.attacks.shadow import ShadowAttack
from dpaudit.attacks.whitebox import WhiteboxAttack
from dpaudit.errors import ConfigError

__all__ = [
    "ATTACKS",
    "ATTACK_VARIANTS",
    "AUTO_CANDIDATES",
    "MEMBERSHIP_ATTACKS",
    "AttackContext",
    "AttributeAttack",
    "AutoAttack",
    "LiraAttack",
    "LossAttack",
    "MembershipAttack",
    "ReferenceAttack",
    "ReferenceLogits",
    "RmiaAttack",
    "ShadowAttack",
    "WhiteboxAttack",
    "balanced_halves",
    "get_attack",
    "lira_scores",
    "logit_confidence",
    "rmia_scores",
    "score_with_shared_references",
    "sensitive_prior",
    "train_reference_logits",
]

MEMBERSHIP_ATTACKS: dict[str, type[MembershipAttack]] = {
    LossAttack.name: LossAttack,
    ShadowAttack.name: ShadowAttack,
    LiraAttack.name: LiraAttack,
    RmiaAttack.name: RmiaAttack,
    AutoAttack.name: AutoAttack,
    WhiteboxAttack.name: WhiteboxAttack,
}

ATTACKS: dict[str, type[Any]] = {**MEMBERSHIP_ATTACKS, AttributeAttack.name: AttributeAttack}

#: Named variants: name → (registered attack, the options the name fixes).
ATTACK_VARIANTS: dict[str, tuple[type[MembershipAttack], dict[str, Any]]] = {
    **{name: (LiraAttack, opts) for name, opts in LIRA_VARIANTS.items()},
    **{name: (RmiaAttack, opts) for name, opts in RMIA_VARIANTS.items() if name != "rmia"},
}


def get_attack(name: str, **options: Any) -> Any:
    """Build the attack registered under ``name`` (or a named variant) with its options.

    Raises:
        ConfigError: unknown name (the message lists the valid ones), unknown option, or
            an option the variant's name already fixes.
    """
    fixed: dict[str, Any] = {}
    cls = ATTACKS.get(name)
    if cls is None and name in ATTACK_VARIANTS:
        cls, fixed = ATTACK_VARIANTS[name]
    if cls is None:
        valid = ", ".join(repr(k) for k in (*ATTACKS, *ATTACK_VARIANTS))
        raise ConfigError(
            f"The 'attack' parameter must be one of {{{valid}}}. Got {name!r} instead."
        )
    valid_options = sorted(set(cls().options()) - set(fixed))
    unknown = sorted(set(options) - set(valid_options))
    if unknown:
        raise ConfigError(
            f"Unknown option(s) {unknown} for attack {name!r}. Valid options: {valid_options}."
        )
    return cls(**fixed, **options)
