"""Local versus central DP for counting queries: simulated errors, closed forms, and the
``local-central`` audit kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "LOCAL_RANDOMISERS": "dpaudit.local_central.simulate",
    "QUERIES": "dpaudit.local_central.simulate",
    "RmseEstimate": "dpaudit.local_central.simulate",
    "central_mechanism": "dpaudit.local_central.simulate",
    "central_rmse": "dpaudit.local_central.simulate",
    "local_probabilities": "dpaudit.local_central.simulate",
    "local_randomiser": "dpaudit.local_central.simulate",
    "local_rmse": "dpaudit.local_central.simulate",
    "rmse_estimate": "dpaudit.local_central.simulate",
    "rmse_ratio": "dpaudit.local_central.simulate",
    "rmse_ratio_estimate": "dpaudit.local_central.simulate",
    "simulate_errors": "dpaudit.local_central.simulate",
    "true_counts": "dpaudit.local_central.simulate",
}

__all__ = sorted(_EXPORTS)
# Submodules the kind adapter (dpaudit.local_central.kind) reaches on first use: validating an audit
# file loads none of them.
_SUBMODULES = ("summary", "units")

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, submodules=_SUBMODULES)

if TYPE_CHECKING:
    from dpaudit.local_central.simulate import (
        LOCAL_RANDOMISERS,
        QUERIES,
        RmseEstimate,
        central_mechanism,
        central_rmse,
        local_probabilities,
        local_randomiser,
        local_rmse,
        rmse_estimate,
        rmse_ratio,
        rmse_ratio_estimate,
        simulate_errors,
        true_counts,
    )
