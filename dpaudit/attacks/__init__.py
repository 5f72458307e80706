"""Attacks: membership inference (loss, shadow, LiRA) and attribute inference (Yeom).

Every attack returns scores, never a verdict (larger means "member" for membership
attacks; per candidate value for attribute inference). A registry maps the names used in
audit files to the attack classes; :func:`get_attack` builds one with its options.
"""

from __future__ import annotations

from typing import Any

from dpaudit.attacks.attribute import AttributeAttack, sensitive_prior
from dpaudit.attacks.base import AttackContext, MembershipAttack, logit_confidence
from dpaudit.attacks.lira import LiraAttack, balanced_halves, lira_scores
from dpaudit.attacks.loss import LossAttack
from dpaudit.attacks.shadow import ShadowAttack
from dpaudit.errors import ConfigError

__all__ = [
    "ATTACKS",
    "MEMBERSHIP_ATTACKS",
    "AttackContext",
    "AttributeAttack",
    "LiraAttack",
    "LossAttack",
    "MembershipAttack",
    "ShadowAttack",
    "balanced_halves",
    "get_attack",
    "lira_scores",
    "logit_confidence",
    "sensitive_prior",
]

MEMBERSHIP_ATTACKS: dict[str, type[MembershipAttack]] = {
    LossAttack.name: LossAttack,
    ShadowAttack.name: ShadowAttack,
    LiraAttack.name: LiraAttack,
}

ATTACKS: dict[str, type[Any]] = {**MEMBERSHIP_ATTACKS, AttributeAttack.name: AttributeAttack}


def get_attack(name: str, **options: Any) -> Any:
    """Build the attack registered under ``name`` with its keyword options.

    Raises:
        ConfigError: unknown name (the message lists the valid ones) or unknown option.
    """
    cls = ATTACKS.get(name)
    if cls is None:
        valid = ", ".join(repr(k) for k in ATTACKS)
        raise ConfigError(
            f"The 'attack' parameter must be one of {{{valid}}}. Got {name!r} instead."
        )
    valid_options = sorted(cls().options())
    unknown = sorted(set(options) - set(valid_options))
    if unknown:
        raise ConfigError(
            f"Unknown option(s) {unknown} for attack {name!r}. Valid options: {valid_options}."
        )
    return cls(**options)
