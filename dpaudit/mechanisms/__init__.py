"""Built-in DP mechanisms and user mechanisms, and the ``mechanism`` audit kind.

The noise primitives (:mod:`dpaudit.mechanisms.noise`) are the one part of a family other
families may import; :mod:`~dpaudit.mechanisms.schema` is the ``[mechanism]`` table,
:mod:`~dpaudit.mechanisms.units` the work units and the upper bound,
:mod:`~dpaudit.mechanisms.summary` the summary, :mod:`~dpaudit.mechanisms.learned` the
classifiers of ``score = "learned"`` and :mod:`~dpaudit.mechanisms.kind` the kind adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Mechanism": "dpaudit.mechanisms.noise",
    "laplace": "dpaudit.mechanisms.noise",
    "gaussian": "dpaudit.mechanisms.noise",
    "randomized_response": "dpaudit.mechanisms.noise",
    "k_rr_probabilities": "dpaudit.mechanisms.noise",
    "k_randomized_response": "dpaudit.mechanisms.noise",
    "unary_encoding_probabilities": "dpaudit.mechanisms.noise",
    "unary_encoding": "dpaudit.mechanisms.noise",
    "vector_laplace": "dpaudit.mechanisms.noise",
    "laplace_llr": "dpaudit.mechanisms.noise",
    "vector_gaussian": "dpaudit.mechanisms.noise",
    "gaussian_calibrated": "dpaudit.mechanisms.noise",
    "user_mechanism": "dpaudit.mechanisms.noise",
    "theoretical_claim": "dpaudit.mechanisms.noise",
    "fit_score": "dpaudit.mechanisms.learned",
    "LearnedScore": "dpaudit.mechanisms.learned",
    "Claim": "dpaudit.accounting.upper_bounds",
}

__all__ = sorted(_EXPORTS)
# Submodules the kind adapter (dpaudit.mechanisms.kind) and the summaries reach on first
# use: validating a mechanism audit loads none of them (nor sklearn).
_SUBMODULES = ("learned", "search", "sequential", "summary")

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, submodules=_SUBMODULES)

if TYPE_CHECKING:
    from dpaudit.accounting.upper_bounds import (
        Claim,
    )
    from dpaudit.mechanisms.learned import LearnedScore, fit_score
    from dpaudit.mechanisms.noise import (
        Mechanism,
        gaussian,
        gaussian_calibrated,
        k_randomized_response,
        k_rr_probabilities,
        laplace,
        laplace_llr,
        randomized_response,
        theoretical_claim,
        unary_encoding,
        unary_encoding_probabilities,
        user_mechanism,
        vector_gaussian,
        vector_laplace,
    )
