"""Closed-form privacy theory: GDP, trade-off curves and the classic mechanisms.

Pure functions of numbers and arrays, no state and no I/O (STYLE.md: keep the pure
math apart from state). A trade-off curve ``f`` maps a type I error ``alpha`` (the
false-positive rate of a test of H0 = "D" against H1 = "D'") to the smallest type II
error ``beta = f(alpha)`` any test can reach at that ``alpha``.

References:
    Dong, Roth, Su 2019, "Gaussian Differential Privacy" (arXiv:1905.02383): f-DP,
    G_μ (Def. 2.7), the (ε, δ) trade-off f_{ε,δ} (Eq. 5), the primal-dual link between
    μ-GDP and (ε, δ)-DP (Cor. 2.13).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize, special

from dpaudit.errors import DpauditError, check_in_interval

__all__ = [
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu",
    "mu_from_pure_dp",
    "randomized_response_epsilon",
    "tradeoff_dp",
    "tradeoff_gdp",
    "tradeoff_laplace",
    "tradeoff_randomized_response",
]

# μ beyond which δ_μ(ε) is 1 to double precision for every ε we can represent; the
# root finders of gdp_mu never need to look further.
_MU_MAX = 1.0e4


# --------------------------------------------------------------------------------------
# μ-GDP and its (ε, δ) privacy profile
# --------------------------------------------------------------------------------------


def _gdp_delta_array(epsilon: NDArray[np.float64], mu: NDArray[np.float64]) -> NDArray:
    """δ_μ(ε) for arrays with μ > 0, evaluated in log space.

    Φ(a) − e^ε Φ(b) = Φ(a)·(1 − exp(ε + log Φ(b) − log Φ(a))); with log_ndtr both terms
    stay finite where e^ε overflows and Φ(b) underflows (the inf·0 of the naive form).
    """
    a = -epsilon / mu + mu / 2.0
    b = -epsilon / mu - mu / 2.0
    log_pa = special.log_ndtr(a)
    log_pb = special.log_ndtr(b)
    # ε + log Φ(b) − log Φ(a) < 0 always (δ_μ(ε) > 0 for μ > 0); -expm1 keeps the
    # relative accuracy when the two terms nearly cancel.
    with np.errstate(over="ignore", invalid="ignore"):
        diff = epsilon + log_pb - log_pa
        out = np.exp(log_pa) * -np.expm1(np.minimum(diff, 0.0))
    return np.clip(out, 0.0, 1.0)


def gdp_delta(epsilon: ArrayLike, mu: float) -> float | NDArray[np.float64]:
    """δ_μ(ε): the smallest δ such that μ-GDP implies (ε, δ)-DP.

    δ_μ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2).

    Args:
        epsilon: ε ≥ 0 (scalar or array; vectorised).
        mu: μ ≥ 0. μ = 0 gives δ = 0 (perfect privacy).

    Returns:
        δ_μ(ε), a float for scalar ``epsilon`` and an array otherwise.

    Raises:
        DpauditError: if ``mu`` < 0 or an ε is negative or NaN.

    References:
        Dong, Roth, Su 2019, Corollary 2.13.
    """
    mu = check_in_interval("mu", mu, 0.0, math.inf)
    eps = np.asarray(epsilon, dtype=float)
    if np.any(np.isnan(eps)) or np.any(eps < 0):
        raise DpauditError(f"The 'epsilon' parameter must be >= 0. Got {epsilon!r} instead.")
    if mu == 0.0:
        out = np.zeros_like(eps)
    elif math.isinf(mu):
        out = np.ones_like(eps)
    else:
        out = _gdp_delta_array(eps, np.full_like(eps, mu))
        # at ε = 0 the two terms cancel: δ_μ(0) = 2Φ(μ/2) − 1 = erf(μ/(2√2)) exactly
        out = np.where(eps == 0.0, special.erf(mu / (2.0 * math.sqrt(2.0))), out)
        out = np.where(np.isinf(eps), 0.0, out)
    return float(out) if out.ndim == 0 else out


def gdp_epsilon(mu: float, delta: float) -> float:
    """ε(μ, δ): the smallest ε such that μ-GDP implies (ε, δ)-DP.

    Solves δ_μ(ε) = δ for ε (δ_μ is strictly decreasing in ε); returns 0 when
    δ ≥ δ_μ(0) = 2Φ(μ/2) − 1.

    Args:
        mu: μ ≥ 0.
        delta: δ in (0, 1].

    Returns:
        ε ≥ 0.

    References:
        Dong, Roth, Su 2019, Corollary 2.13.
    """
    mu = check_in_interval("mu", mu, 0.0, math.inf)
    delta = check_in_interval("delta", delta, 0.0, 1.0, low_open=True)
    if mu == 0.0 or delta >= gdp_delta(0.0, mu):
        return 0.0

    def gap(e: float) -> float:
        return math.log(gdp_delta(e, mu)) - math.log(delta)

    # δ_μ(ε) ≤ Φ(−ε/μ + μ/2), so ε_hi = μ(μ/2 − Φ⁻¹(δ)) makes δ_μ(ε_hi) ≤ δ: a bracket.
    hi = max(mu * (mu / 2.0 - float(special.ndtri(delta))), 1e-12)
    while gdp_delta(hi, mu) > delta:  # guard against rounding at the edge
        hi *= 2.0
    return float(optimize.brentq(gap, 0.0, hi, xtol=1e-13, rtol=1e-13, maxiter=500))


def gdp_mu(epsilon: float, delta: float) -> float:
    """The μ with δ_μ(ε) = δ: the smallest μ whose GDP profile reaches δ at ε.

    δ_μ(ε) is strictly increasing in μ, so the root is unique.

    Args:
        epsilon: ε ≥ 0.
        delta: δ in [0, 1). δ = 0 gives μ = 0.

    Returns:
        μ ≥ 0.

    References:
        Dong, Roth, Su 2019, Corollary 2.13 (monotonicity in μ: G_μ decreases in μ).
    """
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    delta = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    if delta == 0.0:
        return 0.0
    if epsilon == 0.0:
        # δ_μ(0) = 2Φ(μ/2) − 1 = erf(μ / (2√2)): invert exactly
        return float(2.0 * math.sqrt(2.0) * special.erfinv(delta))
    log_delta = math.log(delta)

    def gap(log_mu: float) -> float:
        # solved in (log μ, log δ): δ_μ(ε) spans hundreds of orders of magnitude in μ
        return _gdp_log_delta(epsilon, math.exp(log_mu)) - log_delta

    lo, hi = 0.0, 0.0  # log μ
    while gap(hi) < 0.0:
        lo, hi = hi, hi + math.log(2.0)
        if hi > math.log(_MU_MAX):
            raise DpauditError(
                f"No μ below {_MU_MAX:g} reaches delta={delta!r} at epsilon={epsilon!r}."
            )
    while gap(lo) >= 0.0:
        lo, hi = lo - math.log(2.0), lo
        if lo < math.log(1e-300):
            return 0.0  # μ below 1e-300: zero to double precision
    return float(math.exp(optimize.brentq(gap, lo, hi, xtol=1e-15, rtol=1e-14, maxiter=500)))


def _gdp_log_delta(epsilon: float, mu: float) -> float:
    """log δ_μ(ε) for μ > 0, finite even where δ_μ(ε) underflows."""
    a = -epsilon / mu + mu / 2.0
    b = -epsilon / mu - mu / 2.0
    log_pa = float(special.log_ndtr(a))
    diff = epsilon + float(special.log_ndtr(b)) - log_pa
    return log_pa + math.log(-math.expm1(min(diff, -1e-300)))


def mu_from_pure_dp(epsilon: float) -> float:
    """The smallest μ such that every ε-DP mechanism is μ-GDP: −2Φ⁻¹(1/(1 + e^ε)).

    f_{ε,0} touches G_μ at its symmetric point α = β = 1/(1 + e^ε), where
    G_μ(α) = α means α = Φ(−μ/2).

    References:
        Dong, Roth, Su 2019, Eq. (5) for f_{ε,0}; Liu, Sun, Jiang, Kong 2022,
        "Identification, Amplification and Measurement: A bridge to Gaussian
        Differential Privacy" (NeurIPS), Sec. 5 (every ε-DP mechanism is GDP).
    """
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    # 1/(1 + e^ε) = expit(−ε), stable for large ε
    return float(-2.0 * special.ndtri(special.expit(-epsilon)))


# --------------------------------------------------------------------------------------
# Trade-off curves β = f(α)
# --------------------------------------------------------------------------------------


def _alpha_array(alpha: ArrayLike) -> NDArray[np.float64]:
    a = np.asarray(alpha, dtype=float)
    if np.any(np.isnan(a)) or np.any((a < 0) | (a > 1)):
        raise DpauditError(f"The 'alpha' parameter must be in [0, 1]. Got {alpha!r} instead.")
    return a


def _as_output(out: NDArray[np.float64]) -> float | NDArray[np.float64]:
    return float(out) if out.ndim == 0 else out


def tradeoff_dp(
    alpha: ArrayLike, *, epsilon: float, delta: float = 0.0
) -> float | NDArray[np.float64]:
    """f_{ε,δ}(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)).

    References:
        Dong, Roth, Su 2019, Eq. (5) (Kairouz, Oh, Viswanath 2015, Thm. 2.1).
    """
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    delta = check_in_interval("delta", delta, 0.0, 1.0)
    a = _alpha_array(alpha)
    out = np.maximum.reduce(
        [
            np.zeros_like(a),
            1.0 - delta - math.exp(epsilon) * a,
            math.exp(-epsilon) * (1 - delta - a),
        ]
    )
    return _as_output(out)


def tradeoff_gdp(alpha: ArrayLike, *, mu: float) -> float | NDArray[np.float64]:
    """G_μ(α) = Φ(Φ⁻¹(1 − α) − μ).

    References:
        Dong, Roth, Su 2019, Definition 2.7.
    """
    mu = check_in_interval("mu", mu, 0.0, math.inf, high_open=True)
    a = _alpha_array(alpha)
    # Φ⁻¹(1 − α) = −Φ⁻¹(α) keeps precision for α near 0; endpoints are exact (±inf)
    out = special.ndtr(-special.ndtri(a) - mu)
    return _as_output(np.asarray(out, dtype=float))


def tradeoff_laplace(alpha: ArrayLike, *, epsilon: float) -> float | NDArray[np.float64]:
    """Exact trade-off between Lap(0, 1/ε) and Lap(1, 1/ε) (Laplace mechanism, Δ = 1).

    The likelihood ratio is monotone, so Neyman–Pearson tests are thresholds t on the
    output; with b = 1/ε:
        α < e^{−ε}/2:           β = 1 − e^ε α            (t > 1)
        e^{−ε}/2 ≤ α ≤ 1/2:     β = e^{−ε} / (4α)        (0 ≤ t ≤ 1)
        α > 1/2:                β = e^{−ε} (1 − α)       (t < 0)

    References:
        Dong, Roth, Su 2019, the Laplace-mechanism example of Sec. 2 (trade-off of
        Lap(0, 1) against Lap(ε, 1)).
    """
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    a = _alpha_array(alpha)
    e = math.exp(-epsilon)
    with np.errstate(divide="ignore"):
        mid = e / (4.0 * np.maximum(a, np.finfo(float).tiny))
    out = np.where(a < e / 2.0, 1.0 - a / e, np.where(a <= 0.5, mid, e * (1.0 - a)))
    return _as_output(np.clip(out, 0.0, 1.0))


def tradeoff_randomized_response(alpha: ArrayLike, *, p: float) -> float | NDArray[np.float64]:
    """Trade-off of binary randomized response reporting the true bit with probability p.

    The test "say D' when the report is 1" has α = β = 1 − p; randomising between it and
    the trivial tests gives the exact (randomised-test) curve, piecewise linear through
    (0, 1), (1 − p, 1 − p) and (1, 0). It equals f_{ε,0} with ε = ln(p/(1 − p)).

    References:
        Warner 1965 (randomized response); Kairouz, Oh, Viswanath 2015, Thm. 2.1 (RR
        attains the ε-DP region); Dong, Roth, Su 2019, Eq. (5).
    """
    p = check_in_interval("p", p, 0.5, 1.0)
    a = _alpha_array(alpha)
    if p == 0.5:
        return _as_output(1.0 - a)
    if p == 1.0:
        return _as_output(np.where(a > 0, 0.0, 1.0))
    q = 1.0 - p
    # slopes −p/q = −e^ε then −q/p = −e^{−ε}: the two faces of the ε-DP region
    out = np.where(a <= q, 1.0 - a * p / q, q * (1.0 - a) / p)
    return _as_output(np.clip(out, 0.0, 1.0))


def randomized_response_epsilon(p: float) -> float:
    """ε = ln(p/(1 − p)) of randomized response reporting the truth with probability p.

    The fair-coin protocol (heads: answer truthfully; tails: answer a second fair coin)
    has p = 3/4 and ε = ln 3.

    References:
        Dwork, Roth 2014, "The Algorithmic Foundations of DP", Sec. 3.2 (ε = ln 3).
    """
    p = check_in_interval("p", p, 0.5, 1.0, high_open=True)
    return float(math.log(p) - math.log1p(-p))
