"""The last-iterate reference: what the final model of Poisson DP-SGD can show at best.

An accountant bounds the privacy of the whole transcript of DP-SGD (every noisy update).
An audit that sees only the final model (black-box, the hidden-state threat model) sees
less. For a canary whose clipped gradient is the same vector of norm C at every step, on a
coordinate no other example moves, the final model's projection on that coordinate is the
sum of the steps: B·C + N(0, Tσ²C²) with B ~ Binomial(T, q) when the canary is in, and
N(0, Tσ²C²) when it is out. Steinke et al. propose the privacy of this one-dimensional
pair as the realistic (heuristic) reference for final-model audits: it is not an upper
bound for every loss (the paper gives artificial counter-examples), but it is what the strongest
final-model canary, the gradient canary of every step, reaches.

In units of C the pair is P = Σ_k b_k·N(k, s²) against Q = N(0, s²), with
b_k = C(T, k)·q^k·(1 − q)^(T−k) and s² = Tσ². Its privacy loss

    L(x) = ln p(x)/q(x) = ln Σ_k b_k·exp((2kx − k²)/(2s²))

is strictly increasing in x (a positive mixture of increasing exponentials), so
{p > e^ε q} is the half-line x > L⁻¹(ε) and the hockey-stick divergences are exact
closed forms once L⁻¹ is found by a bracketed root search:

    δ_{P‖Q}(ε) = Σ_k b_k·Φ̄((x_ε − k)/s) − e^ε·Φ̄(x_ε/s),           L(x_ε) = ε,
    δ_{Q‖P}(ε) = Φ(x'_ε/s) − e^ε·Σ_k b_k·Φ((x'_ε − k)/s),          L(x'_ε) = −ε.

The reference's ε at δ is the larger of the two directions (add and remove). At q = 1
the pair is N(T, s²) against N(0, s²): μ-GDP with μ = √T/σ exactly.

Its "μ reading" (:attr:`LastIterateReference.mu`) is the GDP μ with the same ε at δ
(δ_μ(ε) = δ). The pair's trade-off curve is not Gaussian, so this is a reading, not a
bound; :func:`last_iterate_ideal` gives what a perfect final-model distinguisher of the
pair certifies with an audit's own number of trials, the finite-sample yardstick.

Pure functions of numbers; no torch.

References:
    Steinke, Nasr, Ganesh, Balle, Choquette-Choo, Jagielski, Hayes, Thakurta, Smith,
    Terzis 2025, "The Last Iterate Advantage: Empirical Auditing and Principled Heuristic
    Analysis of Differentially Private SGD" (ICLR 2025, arXiv 2410.06186v4): the
    heuristic (linear losses, last iterate only) and its definition
    δ = max(H_{e^ε}(P‖Q), H_{e^ε}(Q‖P)) with P = Binomial(T, q) + N(0, σ²T), Q = N(0, σ²T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, special, stats

from dpaudit.errors import DpauditError, check_in_interval, check_integer
from dpaudit.planning.ideal import ideal_lower_bound
from dpaudit.theory import gdp_mu

__all__ = [
    "LastIterateReference",
    "last_iterate_delta",
    "last_iterate_epsilon",
    "last_iterate_ideal",
    "last_iterate_log_ratio",
    "last_iterate_reference",
    "last_iterate_sample",
]

#: The largest ε searched for a given δ; a pair needing more is reported as infinite.
_EPSILON_MAX = 500.0


def _check(sampling_rate: float, steps: int, noise_multiplier: float) -> tuple[float, int, float]:
    q = check_in_interval("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    t = check_integer("steps", steps, low=1)
    sigma = float(noise_multiplier)
    if not (math.isfinite(sigma) and sigma > 0.0):
        raise DpauditError(
            "The 'noise_multiplier' parameter must be a positive finite number (the last "
            f"iterate of noiseless training has no finite ε). Got {noise_multiplier!r}."
        )
    return q, t, sigma


def _weights(q: float, t: int) -> tuple[np.ndarray, np.ndarray]:
    """Log-weights ln b_k and the means k of the mixture (atoms of weight 0 dropped)."""
    k = np.arange(t + 1, dtype=np.float64)
    log_b = stats.binom.logpmf(k, t, q)
    keep = np.isfinite(log_b)
    return log_b[keep], k[keep]


def last_iterate_log_ratio(
    x: Any, *, sampling_rate: float, steps: int, noise_multiplier: float
) -> np.ndarray:
    """The privacy loss L(x) = ln p(x)/q(x) of the last-iterate pair, x in units of C.

    Args:
        x: points (the final model's projection on the canary, divided by C).
        sampling_rate: q.
        steps: T.
        noise_multiplier: σ.

    Returns:
        ``L(x)``, same shape as ``x`` (an array).
    """
    q, t, sigma = _check(sampling_rate, steps, noise_multiplier)
    log_b, k = _weights(q, t)
    s2 = t * sigma * sigma
    xs = np.asarray(x, dtype=np.float64)
    terms = log_b + (2.0 * k * xs[..., None] - k * k) / (2.0 * s2)
    return np.asarray(special.logsumexp(terms, axis=-1))


def _inverse_loss(value: float, log_b: np.ndarray, k: np.ndarray, s2: float) -> float:
    """The x with L(x) = value (L is strictly increasing; ``value`` > L(−∞) = ln b_0)."""

    def f(x: float) -> float:
        return float(special.logsumexp(log_b + (2.0 * k * x - k * k) / (2.0 * s2))) - value

    lo, hi = -1.0, 1.0
    while f(lo) > 0.0:
        lo *= 2.0
    while f(hi) < 0.0:
        hi *= 2.0
    return float(optimize.brentq(f, lo, hi, xtol=1e-13, rtol=1e-15, maxiter=500))


def last_iterate_delta(
    epsilon: float, *, sampling_rate: float, steps: int, noise_multiplier: float
) -> float:
    """δ(ε) of the last-iterate pair: the larger of its two hockey-stick divergences.

    Args:
        epsilon: ε ≥ 0.
        sampling_rate: q (Poisson sampling rate).
        steps: T.
        noise_multiplier: σ.

    Returns:
        max(δ_{P‖Q}(ε), δ_{Q‖P}(ε)), exact up to the root search (closed forms in the
        module docstring).
    """
    q, t, sigma = _check(sampling_rate, steps, noise_multiplier)
    eps = float(epsilon)
    if not (math.isfinite(eps) and eps >= 0.0):
        raise DpauditError(
            f"The 'epsilon' parameter must be a finite number >= 0. Got {epsilon!r}."
        )
    log_b, k = _weights(q, t)
    s2 = t * sigma * sigma
    s = math.sqrt(s2)
    b = np.exp(log_b)
    # P‖Q ("add"): the set {p > e^ε q} is x > x_ε.
    x = _inverse_loss(eps, log_b, k, s2)
    add = float(np.sum(b * stats.norm.sf((x - k) / s))) - math.exp(eps) * float(
        stats.norm.sf(x / s)
    )
    # Q‖P ("remove"): the set {q > e^ε p} is x < x'_ε; L(−∞) = ln b_0 (−∞ at q = 1, where
    # there is no atom at 0), so the set is empty, and δ_{Q‖P}(ε) = 0, when −ε ≤ ln b_0.
    floor = float(log_b[0]) if k[0] == 0.0 else -math.inf
    remove = 0.0
    if -eps > floor:
        x2 = _inverse_loss(-eps, log_b, k, s2)
        remove = float(stats.norm.cdf(x2 / s)) - math.exp(eps) * float(
            np.sum(b * stats.norm.cdf((x2 - k) / s))
        )
    return max(0.0, add, remove)


def last_iterate_epsilon(
    delta: float, *, sampling_rate: float, steps: int, noise_multiplier: float
) -> float:
    """The smallest ε with δ(ε) ≤ ``delta`` for the last-iterate pair.

    Returns:
        ε ≥ 0 (``inf`` when even ε = 500 leaves δ(ε) above ``delta``).
    """
    d = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)

    def g(eps: float) -> float:
        return (
            last_iterate_delta(
                eps, sampling_rate=sampling_rate, steps=steps, noise_multiplier=noise_multiplier
            )
            - d
        )

    if g(0.0) <= 0.0:
        return 0.0
    hi = 1.0
    while g(hi) > 0.0:
        if hi >= _EPSILON_MAX:
            return math.inf
        hi = min(2.0 * hi, _EPSILON_MAX)
    return float(optimize.brentq(g, 0.0, hi, xtol=1e-10, rtol=1e-12, maxiter=500))


@dataclass(frozen=True)
class LastIterateReference:
    """The last-iterate heuristic's privacy of a Poisson DP-SGD run.

    Attributes:
        epsilon: ε at ``delta`` of the last-iterate pair (exact, both directions).
        delta: δ.
        mu: the GDP μ with the same ε at δ (a reading: the pair is not exactly GDP).
        sampling_rate: q.
        steps: T.
        noise_multiplier: σ.
        validity: ``"heuristic-last-iterate"``: a reference, never a bound to violate.
    """

    epsilon: float
    delta: float
    mu: float
    sampling_rate: float
    steps: int
    noise_multiplier: float
    validity: str = "heuristic-last-iterate"

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def last_iterate_reference(
    *, sampling_rate: float, steps: int, noise_multiplier: float, delta: float
) -> LastIterateReference:
    """ε at δ and its μ reading for the final model of Poisson DP-SGD (q, T, σ).

    At q = 1 the pair is exactly GDP and ``mu`` is √T/σ.
    """
    eps = last_iterate_epsilon(
        delta, sampling_rate=sampling_rate, steps=steps, noise_multiplier=noise_multiplier
    )
    mu = gdp_mu(eps, delta) if math.isfinite(eps) and eps > 0.0 else (0.0 if eps == 0 else math.inf)
    q, t, sigma = _check(sampling_rate, steps, noise_multiplier)
    return LastIterateReference(float(eps), float(delta), float(mu), q, t, sigma)


def last_iterate_sample(
    *,
    sampling_rate: float,
    steps: int,
    noise_multiplier: float,
    included: bool,
    size: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Draws of the final model's projection on the canary (units of C) under one arm."""
    q, t, sigma = _check(sampling_rate, steps, noise_multiplier)
    n = check_integer("size", size, low=1)
    noise = rng.standard_normal(n) * (sigma * math.sqrt(t))
    return noise + (rng.binomial(t, q, size=n) if included else 0.0)


def last_iterate_ideal(
    *,
    sampling_rate: float,
    steps: int,
    noise_multiplier: float,
    trials: int,
    confidence_level: float,
    delta: float = 0.0,
    parameter: str = "mu",
    draws: int = 1_000_000,
    seed: int = 0,
) -> Any:
    """What a perfect final-model distinguisher of the last-iterate pair certifies.

    The exact log-likelihood ratio of ``draws`` simulated final-model projections per arm,
    counted by :func:`dpaudit.planning.ideal.ideal_lower_bound` at ``trials`` per hypothesis
    (half of an audit's models per arm with ``threshold = "split"``) and the audit's
    per-bound ``confidence_level``. Since L is increasing, the projection itself is the
    Neyman–Pearson score.

    Returns:
        :class:`dpaudit.planning.ideal.IdealBound`.
    """
    rng = np.random.default_rng([int(seed), 29])
    neg, pos = (
        last_iterate_sample(
            sampling_rate=sampling_rate,
            steps=steps,
            noise_multiplier=noise_multiplier,
            included=included,
            size=draws,
            rng=rng,
        )
        for included in (False, True)
    )
    return ideal_lower_bound(
        neg,
        pos,
        trials=trials,
        delta=delta,
        confidence_level=confidence_level,
        parameter=parameter,
    )


def last_iterate_details(
    *,
    sampling_rate: float,
    steps: int,
    noise_multiplier: float,
    delta: float,
    mu_lower: float,
    epsilon_lower: float,
    trials: int,
    confidence_level: float,
    seed: int = 0,
) -> dict[str, Any]:
    """The reference, the finite-trial ideal and the audit's ratios, for results and report.

    Args:
        sampling_rate, steps, noise_multiplier: q, T, σ of what ran.
        delta: δ of the ε values.
        mu_lower, epsilon_lower: the audit's μ and ε lower bounds.
        trials: trials per arm the audit counted (half its models with ``split``).
        confidence_level: the audit's per-bound confidence level.
        seed: seed of the ideal's simulation.

    Returns:
        ``epsilon``, ``mu`` (the reference), ``ideal_mu`` (a perfect final-model
        distinguisher of the pair at ``trials``), ``mu_ratio`` = μ_LB/μ,
        ``ideal_mu_ratio`` = μ_LB/ideal μ, ``epsilon_ratio`` = ε_LB/ε (``None`` when the
        denominator is 0 or infinite), with q, T, σ, δ and the validity label.
    """
    ref = last_iterate_reference(
        sampling_rate=sampling_rate, steps=steps, noise_multiplier=noise_multiplier, delta=delta
    )
    ideal = last_iterate_ideal(
        sampling_rate=sampling_rate,
        steps=steps,
        noise_multiplier=noise_multiplier,
        trials=max(int(trials), 1),
        confidence_level=confidence_level,
        seed=seed,
    )

    def ratio(a: float, b: float) -> float | None:
        return float(a) / b if math.isfinite(b) and b > 0 else None

    return {
        **ref.to_dict(),
        "ideal_mu": float(ideal.value),
        "ideal_trials": int(ideal.trials),
        "mu_lower": float(mu_lower),
        "epsilon_lower": float(epsilon_lower),
        "mu_ratio": ratio(mu_lower, ref.mu),
        "ideal_mu_ratio": ratio(mu_lower, ideal.value),
        "epsilon_ratio": ratio(epsilon_lower, ref.epsilon),
    }
