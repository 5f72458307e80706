"""Accountant upper bounds: what ran, described as dp-accounting events, then accounted.

The public names are those of :mod:`dpaudit.accounting._accountants` (dp-accounting's PLD
and RDP accountants over a described event); they load on first use (PEP 562), so that
importing this package or its light modules (:mod:`dpaudit.accounting.upper_bounds`,
which a mechanism audit's file needs to be validated) does not pay for dp-accounting.

Modules:
    ``_accountants``: events, ε(δ), δ(ε), privacy profiles, μ brackets, noise calibration.
    ``upper_bounds``: records of what ran, or a stated claim → the (ε, δ, μ) upper bounds.
    ``composition``: composition theorems side by side (basic, advanced, RDP, PLD, GDP).
    ``statement``: what ``dpaudit account`` states, assembled (a result object).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_VALUE_DISCRETIZATION_INTERVAL",
    "FLAT_PLD_POINTS",
    "MAX_PLD_POINTS",
    "MAX_PLD_SPAN",
    "WIDE_PLD_POINTS",
    "calibrate_noise",
    "delta",
    "dpsgd_epsilon",
    "dpsgd_event",
    "dpsgd_mu_bracket",
    "epsilon",
    "epsilon_floor",
    "event_from_record",
    "laplace_event",
    "mu_bracket",
    "mu_floor",
    "pld_discretization",
    "privacy_profile",
]

_IMPLEMENTATION = "dpaudit.accounting._accountants"
# Submodules are imported by the import system, never looked up in the implementation:
# ``from dpaudit.accounting import upper_bounds`` must not load dp-accounting.
_SUBMODULES = frozenset({"composition", "statement", "upper_bounds", "_accountants"})


def __getattr__(name: str) -> Any:
    if name.startswith("__") or name in _SUBMODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(_IMPLEMENTATION), name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # the names as static type checkers should see them
    from dpaudit.accounting._accountants import (
        ACCOUNTANTS,
        DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
        FLAT_PLD_POINTS,
        MAX_PLD_POINTS,
        MAX_PLD_SPAN,
        WIDE_PLD_POINTS,
        calibrate_noise,
        delta,
        dpsgd_epsilon,
        dpsgd_event,
        dpsgd_mu_bracket,
        epsilon,
        epsilon_floor,
        event_from_record,
        laplace_event,
        mu_bracket,
        mu_floor,
        pld_discretization,
        privacy_profile,
    )
