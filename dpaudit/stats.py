"""Confidence intervals for the rates an audit counts.

Pure functions of counts; no state, no I/O (the torch-free statistics core:
docs/architecture.md, "The statistics core").
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np
from scipy import special

from dpaudit.errors import DpauditError, check_choice, check_in_interval, check_integer

Alternative = Literal["two-sided", "less", "greater"]
ALTERNATIVES: tuple[str, ...] = ("two-sided", "less", "greater")


class ConfidenceInterval(NamedTuple):
    """A closed interval ``(low, high)`` for a probability or another parameter."""

    low: float
    high: float


def check_confidence_level(confidence_level: float) -> float:
    """Validate a confidence level: a real number in the open interval (0, 1)."""
    return check_in_interval(
        "confidence_level", confidence_level, 0.0, 1.0, low_open=True, high_open=True
    )


def clopper_pearson(
    k: int,
    n: int,
    *,
    confidence_level: float = 0.95,
    alternative: Alternative = "two-sided",
) -> ConfidenceInterval:
    """Clopper–Pearson ("exact") confidence interval for a binomial proportion.

    With ``alternative="two-sided"`` each tail gets (1 − c)/2. ``"less"`` gives the
    one-sided interval ``(0, high)`` whose ``high`` is an upper confidence bound at level c
    (the alternative hypothesis of the matching test is "p is less than ..."), and
    ``"greater"`` gives ``(low, 1)``. These match
    ``binomtest(k, n, alternative=...).proportion_ci(confidence_level, method="exact")``
    from scipy.stats.

    The ends are exact at the edges: ``low = 0`` when k = 0 and ``high = 1`` when k = n
    (the Beta quantiles there are degenerate and never NaN here).

    Args:
        k: Number of successes, 0 ≤ k ≤ n.
        n: Number of independent trials, n ≥ 1.
        confidence_level: Coverage probability c in (0, 1).
        alternative: ``"two-sided"``, ``"less"`` (upper bound) or ``"greater"`` (lower bound).

    Returns:
        The interval ``(low, high)``.

    Raises:
        DpauditError: For k < 0, k > n, n < 1, or a confidence level outside (0, 1).

    References:
        Clopper, Pearson (1934), "The use of confidence or fiducial limits illustrated in the
        case of the binomial", Biometrika 26(4). The Beta-quantile form: the upper limit is
        the (1 − a) quantile of Beta(k + 1, n − k), the lower the a quantile of Beta(k, n − k + 1).
    """
    k = check_integer("k", k, low=0)
    n = check_integer("n", n, low=1)
    c = check_confidence_level(confidence_level)
    check_choice("alternative", alternative, ALTERNATIVES)
    if not 0 <= k <= n:
        raise DpauditError(f"The 'k' parameter must be in [0, n] = [0, {n}]. Got {k} instead.")
    tail = (1.0 - c) / 2.0 if alternative == "two-sided" else 1.0 - c
    low = 0.0
    high = 1.0
    if alternative in ("two-sided", "greater") and k > 0:
        low = float(special.betaincinv(k, n - k + 1, tail))
    if alternative in ("two-sided", "less") and k < n:
        high = float(special.betaincinv(k + 1, n - k, 1.0 - tail))
    return ConfidenceInterval(low, high)


def clopper_pearson_upper(k: np.ndarray, n: int, *, level: float) -> np.ndarray:
    """Vectorised one-sided Clopper–Pearson upper limits at coverage ``level``.

    ``k`` may be an array of counts out of the same ``n``; ``k == n`` gives exactly 1.
    Inputs are trusted (internal helper for scanning many thresholds).
    """
    k = np.asarray(k)
    out = np.ones(k.shape, dtype=float)
    below = k < n
    out[below] = special.betaincinv(k[below] + 1, n - k[below], level)
    return out


def normal_quantile(p: float) -> float:
    """Φ⁻¹(p), the standard normal quantile, for p in (0, 1).

    ``scipy.special.ndtri`` is what ``scipy.stats.norm.ppf`` evaluates for p in (0, 1)
    (then times scale 1 plus loc 0, which changes no bit); calling it directly keeps
    scipy.stats (≈ 0.5 s of imports) out of every command that only needs a quantile.
    """
    return float(special.ndtri(p))
