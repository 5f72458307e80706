"""Closed-form privacy theory: GDP, trade-off curves and the classic mechanisms.

Pure functions of numbers and arrays, no state and no I/O (the torch-free statistics
core: docs/architecture.md, "The statistics core"). A trade-off curve ``f`` maps a type I
error ``alpha`` (the false-positive rate of a test of H0 = "D" against H1 = "D'") to the
smallest type II error ``beta = f(alpha)`` any test can reach at that ``alpha``.

References:
    Dong, Roth, Su (2022), "Gaussian Differential Privacy", JRSS-B 84(1), arXiv:1905.02383v3:
    f-DP, μ-GDP as G_μ-DP (Def. 2.6), the (ε, δ) trade-off f_{ε,δ} (Eq. 5), the
    primal-dual link between μ-GDP and (ε, δ)-DP (Cor. 2.13).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from dpaudit.errors import DpauditError, check_in_interval, check_integer

__all__ = [
    "MuBracket",
    "check_candidates",
    "compose_zcdp",
    "discrete_profile",
    "dp_attribute_advantage_bound",
    "exact_gdp_bracket",
    "full_batch_zcdp",
    "gaussian_sigma",
    "gaussian_zcdp",
    "gdp_bracket",
    "gdp_bracket_from_grid",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu",
    "identification_success_bound",
    "k_rr_profile",
    "laplace_profile",
    "laplace_scale",
    "mu_from_pure_dp",
    "multiparty_gradient_perturbation_variance",
    "multiparty_laplace_scale",
    "output_perturbation_sensitivity",
    "pure_dp_profile",
    "pure_dp_to_zcdp",
    "randomized_response_epsilon",
    "refined_profile",
    "tradeoff_dp",
    "tradeoff_gdp",
    "tradeoff_laplace",
    "tradeoff_randomized_response",
    "zcdp_to_dp",
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
    from scipy import optimize  # here, not at the top: most runs never solve for ε or μ

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
    from scipy import optimize  # here, not at the top (see gdp_epsilon)

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
        Differential Privacy" (NeurIPS), Sec. 5 (every ε-DP mechanism is GDP; section
        number unverified).
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
        Dong, Roth, Su (2022), arXiv:1905.02383v3, Def. 2.6 (μ-GDP is G_μ-DP).
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


# --------------------------------------------------------------------------------------
# Privacy profiles of the classic mechanisms
# --------------------------------------------------------------------------------------


def _epsilon_array(epsilon: ArrayLike, name: str = "epsilon") -> NDArray[np.float64]:
    e = np.asarray(epsilon, dtype=float)
    if np.any(np.isnan(e)) or np.any(e < 0):
        raise DpauditError(f"The {name!r} parameter must be >= 0. Got {epsilon!r} instead.")
    return e


def laplace_scale(sensitivity: float, epsilon: float) -> float:
    """Scale b = Δ/ε of the Laplace mechanism that is ε-DP for ℓ1-sensitivity Δ.

    References:
        Dwork, McSherry, Nissim, Smith 2006, Prop. 1; Dwork, Roth 2014, Thm. 3.6.
    """
    sensitivity = check_in_interval("sensitivity", sensitivity, 0.0, math.inf, low_open=True)
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, low_open=True)
    return sensitivity / epsilon


def laplace_profile(eps: ArrayLike, *, epsilon: float) -> float | NDArray[np.float64]:
    """Exact privacy profile δ(ε') of the Laplace mechanism with privacy ε (b = Δ/ε).

    δ(ε') = max(0, 1 − e^{(ε' − ε)/2}): the convex conjugate of :func:`tradeoff_laplace`,
    δ(ε') = sup_α 1 − f(α) − e^{ε'} α, attained at α = e^{−(ε + ε')/2} / 2.

    References:
        Dong, Roth, Su 2019, Prop. 2.12 (profile of a trade-off function);
        Balle, Barthe, Gaboardi 2018, "Privacy amplification by subsampling", Sec. 3.
    """
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    e = _epsilon_array(eps, "eps")
    out = np.maximum(0.0, -np.expm1(np.minimum(e - epsilon, 0.0) / 2.0))
    return _as_output(out)


def pure_dp_profile(eps: ArrayLike, *, epsilon: float) -> float | NDArray[np.float64]:
    """Privacy profile of f_{ε,0} (randomized response with ε = ln(p/(1 − p))).

    δ(ε') = max(0, 1 − (1 + e^{ε'})/(1 + e^ε)), attained at the symmetric point
    α = 1/(1 + e^ε) of f_{ε,0}. Every ε-DP mechanism has a profile below this one.

    References:
        Dong, Roth, Su 2019, Eq. (5) and Prop. 2.12; Kairouz, Oh, Viswanath 2015, Thm. 2.1.
    """
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    e = _epsilon_array(eps, "eps")
    # 1 − (1 + e^{ε'})/(1 + e^ε) = (e^ε − e^{ε'}) / (1 + e^ε), computed in log space
    with np.errstate(over="ignore"):
        out = np.where(
            e < epsilon,
            -np.expm1(np.logaddexp(0.0, e) - np.logaddexp(0.0, epsilon)),
            0.0,
        )
    return _as_output(np.maximum(out, 0.0))


def k_rr_profile(eps: ArrayLike, *, k: int, epsilon: float) -> float | NDArray[np.float64]:
    """Exact privacy profile of k-ary randomized response with privacy ε.

    δ(ε') = max(0, e^ε − e^{ε'}) / (e^ε + k − 1): of the sum Σ_y (P'(y) − e^{ε'}P(y))₊
    over reports y, only the report naming D''s value is positive for ε' ≥ 0. For k = 2
    this is :func:`pure_dp_profile`; for k > 2 it is smaller (k-RR is not the worst
    ε-DP mechanism).

    References:
        Kairouz, Oh, Viswanath 2016 (ICML), Sec. 2 (k-RR); Balle, Barthe, Gaboardi 2018,
        Sec. 3 (δ(ε') as a hockey-stick divergence).
    """
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    k = check_integer("k", k, low=2)
    e = _epsilon_array(eps, "eps")
    # (e^ε − e^{ε'})/(e^ε + k − 1) = (1 − e^{ε'−ε}) / (1 + (k − 1)e^{−ε}), no overflow
    out = -np.expm1(np.minimum(e - epsilon, 0.0)) / (1.0 + (k - 1) * math.exp(-epsilon))
    return _as_output(np.maximum(out, 0.0))


def discrete_profile(eps: ArrayLike, *, p: ArrayLike, q: ArrayLike) -> float | NDArray[np.float64]:
    """Exact privacy profile of a mechanism with finitely many outputs, both directions.

    δ(ε') = max( Σ_y (q_y − e^{ε'} p_y)₊, Σ_y (p_y − e^{ε'} q_y)₊ ): the hockey-stick
    divergences of the output laws p (on D) and q (on D') in both orders, so that the
    profile holds for the pair as neighbours either way round.

    Args:
        eps: ε' ≥ 0 (vectorised).
        p: output probabilities on D (non-negative, summing to 1).
        q: output probabilities on D', same length.

    References:
        Balle, Barthe, Gaboardi 2018, "Privacy amplification by subsampling", Thm. 1
        (δ(ε) of (ε, δ)-DP is the hockey-stick divergence); Dong, Roth, Su 2019,
        Prop. 2.12.
    """
    e = _epsilon_array(eps, "eps")
    pa = np.asarray(p, dtype=float).ravel()
    qa = np.asarray(q, dtype=float).ravel()
    if (
        pa.shape != qa.shape
        or pa.size == 0
        or np.any(~np.isfinite(pa) | (pa < 0))
        or np.any(~np.isfinite(qa) | (qa < 0))
        or not (
            math.isclose(pa.sum(), 1.0, abs_tol=1e-9) and math.isclose(qa.sum(), 1.0, abs_tol=1e-9)
        )
    ):
        raise DpauditError(
            "The 'p' and 'q' parameters must be probability vectors of the same length."
        )
    w = np.exp(np.minimum(e.ravel(), 700.0))[:, None]
    fwd = np.maximum(qa[None, :] - w * pa[None, :], 0.0).sum(axis=1)
    bwd = np.maximum(pa[None, :] - w * qa[None, :], 0.0).sum(axis=1)
    return _as_output(np.clip(np.maximum(fwd, bwd), 0.0, 1.0).reshape(e.shape))


def gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """Classic Gaussian-mechanism σ = Δ·√(2 ln(1.25/δ))/ε for (ε, δ)-DP.

    The classic analysis only holds for ε < 1; for larger ε calibrate with the exact
    Gaussian profile (σ = Δ/μ with μ = :func:`gdp_mu`) instead.

    Raises:
        DpauditError: if ε ∉ (0, 1) or δ ∉ (0, 1).

    References:
        Dwork, Roth 2014, "The Algorithmic Foundations of DP", Thm. A.1.
    """
    sensitivity = check_in_interval("sensitivity", sensitivity, 0.0, math.inf, low_open=True)
    # Thm. A.1 is stated (and only true) for ε in (0, 1)
    epsilon = check_in_interval("epsilon", epsilon, 0.0, 1.0, low_open=True, high_open=True)
    delta = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def pure_dp_to_zcdp(epsilon: float) -> float:
    """ρ = ε²/2: every ε-DP mechanism is ε²/2-zCDP.

    References:
        Bun, Steinke 2016, "Concentrated Differential Privacy: Simplifications,
        Extensions, and Lower Bounds", Prop. 1.4.
    """
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    return epsilon**2 / 2.0


def zcdp_to_dp(rho: float, delta: float) -> float:
    """ε = ρ + 2√(ρ ln(1/δ)): ρ-zCDP implies (ε, δ)-DP for every δ > 0.

    References:
        Bun, Steinke 2016, Prop. 1.3.
    """
    rho = check_in_interval("rho", rho, 0.0, math.inf, high_open=True)
    delta = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def gaussian_zcdp(sensitivity: float, sigma: float) -> float:
    """ρ = Δ²/(2σ²): the Gaussian mechanism N(0, σ²) with ℓ2-sensitivity Δ is ρ-zCDP.

    References:
        Bun, Steinke 2016, Prop. 1.6.
    """
    sensitivity = check_in_interval("sensitivity", sensitivity, 0.0, math.inf, high_open=True)
    sigma = check_in_interval("sigma", sigma, 0.0, math.inf, low_open=True, high_open=True)
    return sensitivity**2 / (2.0 * sigma**2)


def compose_zcdp(*rhos: float) -> float:
    """Adaptive composition of ρ_i-zCDP mechanisms is (Σ ρ_i)-zCDP.

    References:
        Bun, Steinke 2016, Lemma 1.7 (composition).
    """
    return float(sum(check_in_interval("rho", r, 0.0, math.inf, high_open=True) for r in rhos))


def full_batch_zcdp(*, noise_multiplier: float, steps: int) -> float:
    """ρ = T/(2σ²): T full-batch DP-GD steps (q = 1), each a Gaussian mechanism of
    sensitivity C with noise σC, compose to ρ-zCDP. A subsampled Gaussian (q < 1) has no
    such ρ.

    References:
        Bun, Steinke 2016, Prop. 1.6 (the Gaussian mechanism is Δ²/(2σ²)-zCDP) and
        Lemma 1.7 (composition).
    """
    sigma = check_in_interval(
        "noise_multiplier", noise_multiplier, 0.0, math.inf, low_open=True, high_open=True
    )
    # T compositions of Δ²/(2σ²) with Δ = C and noise σC: the C cancels.
    return check_integer("steps", steps, low=1) / (2.0 * sigma**2)


def dp_attribute_advantage_bound(epsilon: float, delta: float) -> dict[str, float]:
    """Largest attribute advantage an (ε, δ)-DP training algorithm allows.

    For a record z and the guess event E = "the attacker recovers z's sensitive value",
    (ε, δ)-DP between the training set with z and without it (add/remove neighbours: with
    fair-coin membership, a non-member's target is exactly the member's target without
    it) gives, for the accuracies a_in = P[E | z in], a_out = P[E | z out], averaged over
    records:

        a_in ≤ e^ε·a_out + δ                       (DP applied to E)
        1 − a_in ≥ e^{−ε}·(1 − a_out − δ)          (DP applied to the complement of E)

    so the advantage a_in − a_out is at most min((e^ε − 1)·a_out + δ,
    (1 − e^{−ε})·(1 − a_out) + e^{−ε}·δ). The first term grows and the second shrinks with
    a_out; they meet at a_out = (1 − δ)/(e^ε + 1), where the advantage is

        (e^ε − 1 + 2δ) / (e^ε + 1)      ("region", tight for the (ε, δ) region),

    and the cruder first term alone gives Yeom et al.'s e^ε − 1 (plus δ; "yeom").

    References:
        Yeom, Giacomelli, Fredrikson, Jha (2018), IEEE CSF, attribute-inference section
        (the attribute advantage of an ε-DP algorithm is at most e^ε − 1, by the same
        argument as their Theorem 1 for membership); Kairouz, Oh, Viswanath (2015), "The
        Composition Theorem for Differential Privacy", ICML, Theorem 2.1 (the (ε, δ)
        region, whose extreme point gives the "region" value).
    """
    e = math.exp(epsilon)
    return {"yeom": e - 1.0 + delta, "region": min(1.0, (e - 1.0 + 2.0 * delta) / (e + 1.0))}


def identification_success_bound(*, epsilon: float, delta: float, candidates: int) -> float:
    """Largest success probability of any attacker in the k-candidate identification game.

    The game: D_1, …, D_k differ only in one record (the target, candidate i in D_i);
    I is uniform on {1..k}, the attacker sees M(D_I) and names Î. If M is (ε, δ)-DP
    for replace-one neighbours, then P[Î = I] ≤ (e^ε + (k − 1)δ)/(e^ε + k − 1).

    Proof. Let p_i = P[A(M(D_i)) = i] and, for j ≠ i, q_ji = P[A(M(D_j)) = i]. D_i and
    D_j are neighbours and {A = i} is an event, so p_i ≤ e^ε q_ji + δ. Summing over the
    k − 1 values j ≠ i and then over i:
        (k − 1) Σ_i p_i ≤ e^ε Σ_i Σ_{j≠i} q_ji + k(k − 1)δ.
    Swapping the sums, Σ_i Σ_{j≠i} q_ji = Σ_j P[A(M(D_j)) ≠ j] ≤ Σ_j (1 − p_j) = k − S
    with S = Σ_i p_i (≤ because an attacker may also abstain). Hence
    (k − 1)S ≤ e^ε(k − S) + k(k − 1)δ, i.e. S(e^ε + k − 1) ≤ k e^ε + k(k − 1)δ, and
    P[Î = I] = S/k ≤ (e^ε + (k − 1)δ)/(e^ε + k − 1). At ε = δ = 0 this is 1/k, blind
    guessing; k-ary randomised response (truth with probability e^ε/(e^ε + k − 1)) is
    ε-DP and meets it with equality, so it cannot be improved at δ = 0.
    """
    k = check_candidates(candidates)
    eps = check_in_interval("epsilon", epsilon, 0.0, math.inf)
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    if math.isinf(eps):
        return 1.0
    # Divide through by e^ε to stay finite for large ε.
    return (1.0 + (k - 1) * d * math.exp(-eps)) / (1.0 + (k - 1) * math.exp(-eps))


def check_candidates(candidates: int) -> int:
    """k ≥ 2 candidates of the identification game, as an int."""
    return check_integer("candidates", candidates, low=2)


def output_perturbation_sensitivity(n: int, lam: float, *, lipschitz: float = 1.0) -> float:
    """ℓ2-sensitivity 2L/(nλ) of the minimiser of a λ-strongly-regularised ERM objective.

    For (1/n)Σℓ(w; x_i) + (λ/2)‖w‖² with ℓ convex, differentiable and L-Lipschitz in w,
    changing one of the n records moves the minimiser by at most 2L/(nλ).

    References:
        Chaudhuri, Monteleoni, Sarwate 2011, "Differentially Private Empirical Risk
        Minimization" (JMLR), Corollary 8 (L = 1).
    """
    n = check_integer("n", n, low=1)
    lam = check_in_interval("lam", lam, 0.0, math.inf, low_open=True, high_open=True)
    lipschitz = check_in_interval("lipschitz", lipschitz, 0.0, math.inf, low_open=True)
    return 2.0 * lipschitz / (n * lam)


def multiparty_laplace_scale(
    *, lipschitz: float, parties: int, smallest_party_size: int, lam: float, epsilon: float
) -> float:
    """Laplace scale 2G/(m·n₍₁₎·λ·ε) for aggregating m locally trained models.

    Averaging m output-perturbed models, each party's model moves by at most
    2G/(n₍₁₎λ) (Chaudhuri et al. 2011), and the average by 1/m of that; one Laplace
    draw of this scale on the aggregate is ε-DP.

    References:
        Jayaraman, Wang, Evans, Gu 2018, "Distributed Learning without Distress:
        Privacy-Preserving Empirical Risk Minimization" (NeurIPS), model aggregation
        by output perturbation.
    """
    lipschitz = check_in_interval("lipschitz", lipschitz, 0.0, math.inf, low_open=True)
    m = check_integer("parties", parties, low=1)
    n1 = check_integer("smallest_party_size", smallest_party_size, low=1)
    lam = check_in_interval("lam", lam, 0.0, math.inf, low_open=True, high_open=True)
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, low_open=True)
    return 2.0 * lipschitz / (m * n1 * lam * epsilon)


def multiparty_gradient_perturbation_variance(
    *,
    lipschitz: float,
    parties: int,
    smallest_party_size: int,
    steps: int,
    epsilon: float,
    delta: float,
) -> float:
    """Noise variance σ² = 8G²T·ln(1/δ)/(m²·n₍₁₎²·ε²) for multi-party gradient perturbation.

    This is the paper's calibration: ρ = ε²/(4 ln(1/δ)) zCDP, converted as if ρ-zCDP gave
    (2√(ρ ln(1/δ)), δ)-DP, which drops the ρ term of the conversion (Bun, Steinke 2016,
    Prop. 1.3: (ρ + 2√(ρ ln(1/δ)), δ)). The Gaussian steps are exactly μ-GDP with
    μ = ε/√(2 ln(1/δ)), and that profile meets the stated ε at δ = 1e-5 only up to
    ε ≈ 7.97 (at ε = 10 it is 10.52; tests/test_multiparty_gradient.py). dpaudit's
    ``multiparty-gradient`` trainer therefore returns records of what ran (held against
    the accountant), not the paper's (ε, δ).

    References:
        Jayaraman, Wang, Evans, Gu 2018 (NeurIPS), multi-party gradient perturbation
        (zCDP composition over T iterations, Bun, Steinke 2016).
    """
    lipschitz = check_in_interval("lipschitz", lipschitz, 0.0, math.inf, low_open=True)
    m = check_integer("parties", parties, low=1)
    n1 = check_integer("smallest_party_size", smallest_party_size, low=1)
    t = check_integer("steps", steps, low=1)
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, low_open=True)
    delta = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    return 8.0 * lipschitz**2 * t * math.log(1.0 / delta) / (m**2 * n1**2 * epsilon**2)


# --------------------------------------------------------------------------------------
# GDP identification and measurement (Liu, Sun, Jiang, Kong 2022)
# --------------------------------------------------------------------------------------

Profile = Callable[[NDArray[np.float64]], ArrayLike]


def _gdp_log_delta_vec(eps: NDArray[np.float64], mu: NDArray[np.float64]) -> NDArray:
    """log δ_μ(ε), elementwise, for ε > 0 and μ > 0 (finite where δ underflows; −inf
    where even log Φ(−ε/μ + μ/2) does, for μ so small that ε/μ overflows its square)."""
    a = -eps / mu + mu / 2.0
    b = -eps / mu - mu / 2.0
    log_pa = special.log_ndtr(a)
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = eps + special.log_ndtr(b) - log_pa
        out = log_pa + np.log(-np.expm1(np.minimum(diff, -1e-300)))
    return np.where(np.isneginf(log_pa), -np.inf, out)


def _gdp_mu_vec(
    eps: NDArray[np.float64], delta: NDArray[np.float64], *, upper: bool
) -> NDArray[np.float64]:
    """Vectorised μ with δ_μ(ε) = δ by bisection in log μ.

    ``upper=True`` returns the bisection's upper end, a μ with δ_μ(ε) ≥ δ as evaluated
    in floating point: the rounding then never makes an upper bound too small.
    δ ≤ 0 gives 0. δ ≥ 1 gives inf with ``upper=True`` (no μ reaches it) and, with
    ``upper=False``, the μ of the largest double below 1: a profile that rounds to 1 was
    at least that before rounding. A μ beyond ``_MU_MAX`` is inf with ``upper=True`` (the
    search does not go further, so no finite upper end is known) and ``_MU_MAX`` with
    ``upper=False`` (a lower end).
    """
    eps = np.asarray(eps, dtype=float)
    delta = np.asarray(delta, dtype=float)
    eps, delta = np.broadcast_arrays(eps, delta)
    if not upper:
        delta = np.minimum(delta, np.nextafter(1.0, 0.0))
    out = np.zeros(eps.shape)
    at_zero = (eps == 0.0) & (delta > 0) & (delta < 1)
    # ε = 0: δ_μ(0) = erf(μ/(2√2)) inverts exactly
    out[at_zero] = 2.0 * math.sqrt(2.0) * special.erfinv(delta[at_zero])
    out[delta >= 1.0] = math.inf
    todo = (eps > 0) & (delta > 0) & (delta < 1)
    if np.any(todo):
        e, log_d = eps[todo], np.log(delta[todo])
        lo = np.full(e.shape, math.log(1e-300))
        hi = np.full(e.shape, math.log(_MU_MAX))
        with np.errstate(invalid="ignore"):
            beyond = ~(_gdp_log_delta_vec(e, np.full(e.shape, _MU_MAX)) >= log_d)
        for _ in range(110):  # interval width 700 in log μ: 2^-110·700 < 1e-30
            mid = 0.5 * (lo + hi)
            above = _gdp_log_delta_vec(e, np.exp(mid)) >= log_d
            hi = np.where(above, mid, hi)
            lo = np.where(above, lo, mid)
        found = np.exp(hi if upper else lo)
        out[todo] = np.where(beyond, math.inf if upper else _MU_MAX, found)
    return out


@dataclass(frozen=True)
class MuBracket:
    """A rigorous bracket around the smallest μ whose GDP profile dominates a profile.

    With μ_A(ε) the μ solving δ_μ(ε) = δ_A(ε), the optimal μ over [0, ``epsilon_max``]
    is μ* = sup_{0 ≤ ε ≤ ε_max} μ_A(ε), and ``low`` ≤ μ* ≤ ``high``: δ_A(ε) ≤
    δ_high(ε) for every ε in [0, ε_max], not only on the grid. Beyond the grid,
    δ_A(ε) ≤ ``tail_delta`` = δ_A(ε_max) (δ_A is non-increasing); hence for every ε ≥ 0,
    δ_A(ε) ≤ δ_high(ε) + tail_delta, i.e. the trade-off curve satisfies
    f_A(α) ≥ G_high(α + tail_delta) − tail_delta. When ``tail_delta`` is 0 the bracket
    holds for all ε and ``high`` is a plain μ-GDP guarantee.

    Attributes:
        low: max of μ_A over the grid, a lower bound on μ*.
        high: a guaranteed upper bound on μ* (cell bounds from monotonicity).
        tail_mu: μ_A(ε_max), the finite-grid value of Liu et al.'s tail value
            μ_t = lim_{ε→∞} μ_A(ε) (0 when the profile reaches 0 on the grid).
        margin: high − low, the stated margin of error.
        epsilon_max: the end of the grid.
        tail_delta: δ_A(ε_max), a bound on δ_A(ε) for every ε ≥ ε_max.
        grid: the ε grid (ascending).
        mu_values: μ_A on the grid.

    References:
        Liu, Sun, Jiang, Kong 2022, "Identification, Amplification and Measurement: A
        bridge to Gaussian Differential Privacy" (NeurIPS), Sec. 4 (GDP measurement;
        section number unverified).
    """

    low: float
    high: float
    tail_mu: float
    margin: float
    epsilon_max: float
    tail_delta: float
    grid: tuple[float, ...] = field(repr=False)
    mu_values: tuple[float, ...] = field(repr=False)
    #: Why ``high`` is not the measurement's own finite bound: why it is infinite (no
    #: finite μ could be certified), or where it comes from instead; "" otherwise.
    reason: str = ""

    def __contains__(self, mu: object) -> bool:
        return isinstance(mu, int | float) and self.low <= float(mu) <= self.high

    @property
    def bounded(self) -> bool:
        """Whether a finite μ was certified (``high`` finite)."""
        return math.isfinite(self.high)

    @property
    def relative_margin(self) -> float:
        """(high − low) / high, the margin as a fraction of the upper bound."""
        if not self.bounded:
            return 1.0
        return self.margin / self.high if self.high > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the grid and μ values included; ``reason`` when unbounded)."""
        out: dict[str, Any] = {
            "low": self.low,
            "high": self.high,
            "tail_mu": self.tail_mu,
            "margin": self.margin,
            "epsilon_max": self.epsilon_max,
            "tail_delta": self.tail_delta,
            "grid": list(self.grid),
            "mu_values": list(self.mu_values),
        }
        if self.reason:
            out["reason"] = self.reason
        return out


def exact_gdp_bracket(mu: float) -> MuBracket:
    """The bracket of a mechanism known to be exactly μ-GDP: [μ, μ] for every ε.

    For a closed-form guarantee (T Gaussian steps of noise multiplier σ are exactly
    √T/σ-GDP) nothing needs measuring; :func:`gdp_bracket` on its profile agrees while
    δ_μ(0) = erf(μ/(2√2)) is resolved in double precision, and returns no finite bound
    once it rounds to 1 (μ ≳ 17).

    References:
        Dong, Roth, Su 2019, Cor. 3.3 (composition of Gaussian mechanisms is exactly GDP).
    """
    mu = check_in_interval("mu", mu, 0.0, math.inf, high_open=True)
    return MuBracket(
        low=mu,
        high=mu,
        tail_mu=mu,
        margin=0.0,
        epsilon_max=math.inf,
        tail_delta=0.0,
        grid=(0.0,),
        mu_values=(mu,),
    )


def _eval_profile(profile: Profile, eps: NDArray[np.float64]) -> NDArray[np.float64]:
    d = np.asarray(profile(eps), dtype=float).reshape(eps.shape)
    if np.any(np.isnan(d)) or np.any((d < 0) | (d > 1)):
        raise DpauditError("The privacy profile must return values in [0, 1], never NaN.")
    return d


def _find_epsilon_max(profile: Profile, delta_floor: float) -> float:
    """A grid end where δ_A(ε_max) ≤ delta_floor: doubling, then one refining pass."""
    coarse = np.concatenate([[0.0], 2.0 ** np.arange(-4, 14)])
    d = _eval_profile(profile, coarse)
    below = np.nonzero(d <= delta_floor)[0]
    if below.size == 0:
        raise DpauditError(
            f"The privacy profile stays above delta_floor={delta_floor:g} up to "
            f"epsilon={coarse[-1]:g}; pass a larger 'delta_floor' or an 'epsilon_max'."
        )
    k = int(below[0])
    if k == 0:
        return 0.0
    fine = np.linspace(coarse[k - 1], coarse[k], 257)
    d = _eval_profile(profile, fine)
    return float(fine[int(np.nonzero(d <= delta_floor)[0][0])])


def gdp_bracket(
    profile: Profile,
    *,
    epsilon_max: float | None = None,
    delta_floor: float = 1e-10,
    rtol: float = 1e-3,
    initial_points: int = 256,
    refine: int = 16,
    max_rounds: int = 6,
) -> MuBracket:
    """GDP measurement: bracket the optimal μ of a privacy profile δ_A(ε).

    μ_A(ε) solves δ_μ(ε) = δ_A(ε); μ-GDP dominates the profile on a range iff μ ≥ μ_A
    there (δ_μ(ε) increases in μ), so μ* = sup μ_A. On a grid ε_0 < … < ε_K:
    ``low`` = max_i μ_A(ε_i). For ε in a cell [ε_i, ε_{i+1}], δ_A(ε) ≤ δ_A(ε_i) (δ_A is
    non-increasing in ε) and δ_μ(ε) ≥ δ_μ(ε_{i+1}) (so is δ_μ), hence the μ solving
    δ_μ(ε_{i+1}) = δ_A(ε_i) dominates δ_A on the whole cell; ``high`` is the largest of
    these cell bounds. Cells whose bound exceeds low·(1 + rtol) are split ``refine``
    ways, one vectorised profile call per round, until the margin is met.

    The profile is evaluated with sorted 1-D arrays (one call per round), so a
    dp-accounting PLD's vectorised ``get_delta`` can be passed directly.

    Args:
        profile: δ_A, non-increasing, values in [0, 1] (any true privacy profile is).
        epsilon_max: end of the grid; by default the first ε found with
            δ_A(ε) ≤ ``delta_floor``. What lies beyond is reported as ``tail_delta``.
        delta_floor: how far down the profile the measurement goes.
        rtol: target relative margin (high − low)/low.
        initial_points: size of the first uniform grid on [0, ε_max].
        refine: sub-cells per refined cell.
        max_rounds: refinement rounds at most.

    Returns:
        A :class:`MuBracket`.

    References:
        Liu, Sun, Jiang, Kong 2022 (NeurIPS), Sec. 4 (unverified): GDP measurement by the μ_A(ε)
        transform on a grid, with the monotonicity bracket between grid points.
    """
    delta_floor = check_in_interval("delta_floor", delta_floor, 0.0, 1.0, high_open=True)
    rtol = check_in_interval("rtol", rtol, 0.0, math.inf, low_open=True)
    if epsilon_max is None:
        epsilon_max = _find_epsilon_max(profile, delta_floor)
    epsilon_max = check_in_interval("epsilon_max", epsilon_max, 0.0, math.inf, high_open=True)

    grid = np.linspace(0.0, epsilon_max, max(int(initial_points), 2))
    deltas = _eval_profile(profile, grid)
    for _ in range(max_rounds + 1):
        # δ_A is non-increasing for every true profile; a grid violation beyond float
        # noise means the callable is not a privacy profile and the bracket would lie
        if np.any(np.diff(deltas) > 1e-12 + 1e-9 * deltas[1:]):
            raise DpauditError("The privacy profile must be non-increasing in epsilon.")
        mus = _gdp_mu_vec(grid, deltas, upper=False)
        cell_high = _gdp_mu_vec(grid[1:], deltas[:-1], upper=True)
        low = float(mus.max())
        flagged = np.nonzero(cell_high > low * (1.0 + rtol))[0]
        # An unbounded cell stays unbounded however it is split (its left end rounds to
        # δ = 1, or its μ is beyond the search): refining would only multiply points.
        if flagged.size == 0 or _ == max_rounds or not np.all(np.isfinite(cell_high)):
            break
        frac = np.arange(1, refine) / refine
        new = (grid[flagged, None] + frac[None, :] * np.diff(grid)[flagged, None]).ravel()
        new_deltas = _eval_profile(profile, np.sort(new))
        grid_all = np.concatenate([grid, np.sort(new)])
        order = np.argsort(grid_all, kind="stable")
        grid = grid_all[order]
        deltas = np.concatenate([deltas, new_deltas])[order]
    high = float(max(cell_high.max() if cell_high.size else 0.0, low))
    if grid.size == 1:  # ε_max = 0: the single point ε = 0 is the whole range
        cell_high = _gdp_mu_vec(grid, deltas, upper=True)
        high = float(cell_high.max())
    return MuBracket(
        low=low,
        high=high,
        tail_mu=float(mus[-1]),
        margin=high - low,
        epsilon_max=float(epsilon_max),
        tail_delta=float(deltas[-1]) + 0.0,  # + 0.0 turns -0.0 into 0.0
        grid=tuple(float(x) for x in grid),
        mu_values=tuple(float(x) for x in mus),
        reason=_unbounded_reason(grid, deltas, cell_high),
    )


def _unbounded_reason(
    grid: NDArray[np.float64], deltas: NDArray[np.float64], cell_high: NDArray[np.float64]
) -> str:
    """Why a measurement certified no finite μ ("" when it did)."""
    unbounded = np.nonzero(~np.isfinite(cell_high))[0]
    if unbounded.size == 0:
        return ""
    i = int(unbounded[0])
    if deltas[i] >= 1.0:
        return (
            f"the privacy profile is 1 to double precision at ε = {grid[i]:.4g} (the two "
            "output laws barely overlap), so the measurement certifies no finite μ"
        )
    right = grid[min(i + 1, grid.size - 1)]
    return (
        f"the profile needs μ above {_MU_MAX:g} near ε = {right:.4g}, beyond what the "
        "measurement searches, so it certifies no finite μ"
    )


def gdp_bracket_from_grid(epsilons: ArrayLike, deltas: ArrayLike) -> MuBracket:
    """GDP measurement of a privacy profile known only on a grid.

    The same bracket as :func:`gdp_bracket`, with no refinement possible: ``low`` is the
    largest μ_A(ε_i) on the grid; on each cell [ε_i, ε_{i+1}] monotonicity gives
    δ_A(ε) ≤ δ_i and δ_μ(ε) ≥ δ_μ(ε_{i+1}), so μ(ε_{i+1}, δ_i) dominates the cell;
    ``high`` is the largest of these. Beyond the last point δ_A ≤ ``tail_delta`` = δ_K.

    Args:
        epsilons: the grid, strictly increasing from ε = 0 (two points at least).
        deltas: δ_A on the grid, in [0, 1], non-increasing.

    References:
        Liu, Sun, Jiang, Kong 2022 (NeurIPS), Sec. 4, unverified (GDP measurement on a grid).
    """
    grid = _epsilon_array(epsilons, "epsilons").ravel()
    d = np.asarray(deltas, dtype=float).ravel()
    if grid.size < 2 or d.shape != grid.shape or not np.all(np.isfinite(grid)):
        raise DpauditError(
            "The 'epsilons' and 'deltas' parameters must be finite, of equal length, with at "
            f"least two points. Got {grid.size} and {d.size} instead."
        )
    if grid[0] != 0.0 or np.any(np.diff(grid) <= 0):
        # the cells must cover [0, ε_max]: below ε_0 nothing bounds δ_A but 1
        raise DpauditError(
            "The 'epsilons' grid must start at 0 and be strictly increasing. "
            f"Got {grid[:3].tolist()}... instead."
        )
    if np.any(np.isnan(d)) or np.any((d < 0) | (d > 1)):
        raise DpauditError("The privacy profile must take values in [0, 1], never NaN.")
    if np.any(np.diff(d) > 1e-12 + 1e-9 * d[1:]):
        raise DpauditError("The privacy profile must be non-increasing in epsilon.")
    mus = _gdp_mu_vec(grid, d, upper=False)
    cell_high = _gdp_mu_vec(grid[1:], d[:-1], upper=True)
    low = float(mus.max())
    high = float(max(cell_high.max(), low))
    return MuBracket(
        low=low,
        high=high,
        tail_mu=float(mus[-1]),
        margin=high - low,
        epsilon_max=float(grid[-1]),
        tail_delta=float(d[-1]) + 0.0,
        grid=tuple(float(x) for x in grid),
        mu_values=tuple(float(x) for x in mus),
    )


def refined_profile(
    eps: ArrayLike, *, epsilons: ArrayLike, deltas: ArrayLike
) -> float | NDArray[np.float64]:
    """Refine a naive privacy profile given by a family of (ε_i, δ_i)-DP guarantees.

    The naive profile is the step function δ(ε) = min{δ_i : ε_i ≤ ε}. A mechanism that
    is (ε_i, δ_i)-DP for every i is f-DP with f = max_i f_{ε_i, δ_i}, and hence
    (ε, δ_f(ε))-DP for every ε with δ_f(ε) = sup_α [1 − f(α) − e^ε α] (the convex
    conjugate). f is piecewise linear, so the supremum is attained at one of its
    vertices; those are among the pairwise intersections of its lines, all evaluated
    here. δ_f never exceeds the naive profile and is tight between the given ε_i.

    Args:
        eps: where to evaluate the refined profile (ε ≥ 0; vectorised).
        epsilons: the ε_i of the family.
        deltas: the δ_i of the family, same length.

    References:
        Liu, Sun, Jiang, Kong 2022 (NeurIPS), Thm. 2.1 (unverified); Dong, Roth, Su 2019, Prop. 2.12
        (an (ε, δ) family is equivalent to f-DP with f = sup f_{ε_i,δ_i}; its profile is
        1 + f*(−e^ε)).
    """
    e_q = _epsilon_array(eps, "eps")
    ei = _epsilon_array(epsilons, "epsilons").ravel()
    di = np.asarray(deltas, dtype=float).ravel()
    if ei.shape != di.shape or ei.size == 0:
        raise DpauditError(
            "The 'epsilons' and 'deltas' parameters must be non-empty and of equal length. "
            f"Got {ei.size} and {di.size} instead."
        )
    if np.any(np.isnan(di)) or np.any((di < 0) | (di > 1)):
        raise DpauditError(f"The 'deltas' parameter must be in [0, 1]. Got {deltas!r} instead.")
    finite = np.isfinite(ei)
    ei, di = ei[finite], di[finite]
    # lines β = c + sα of every f_{ε_i,δ_i}, plus β = 0 (Dong, Roth, Su 2019, Eq. (5))
    slopes = np.concatenate([-np.exp(ei), -np.exp(-ei), [0.0]])
    icepts = np.concatenate([1.0 - di, np.exp(-ei) * (1.0 - di), [0.0]])
    s1, s2 = np.meshgrid(slopes, slopes, indexing="ij")
    c1, c2 = np.meshgrid(icepts, icepts, indexing="ij")
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = (c2 - c1) / (s1 - s2)
    cand = np.concatenate([[0.0, 1.0], cross[np.isfinite(cross)].ravel()])
    cand = np.unique(cand[(cand >= 0.0) & (cand <= 1.0)])
    f = np.max(icepts[:, None] + slopes[:, None] * cand[None, :], axis=0)  # f on vertices
    flat = np.exp(np.minimum(e_q.ravel(), 700.0))
    best = np.empty(flat.shape)
    step = max(1, 4_000_000 // cand.size)  # bound the (ε × vertex) block to ~32 MB
    for start in range(0, flat.size, step):
        block = flat[start : start + step]
        best[start : start + step] = (1.0 - f[None, :] - block[:, None] * cand[None, :]).max(axis=1)
    out = np.clip(best, 0.0, 1.0).reshape(e_q.shape)
    return _as_output(out)
