"""The continuous-score ("Gaussian-pair") reading of a one-run audit, and what it is worth.

A one-run audit puts m canaries in one training run, each included by an independent fair
coin, and scores each canary from what the auditor saw. dpaudit's rigorous one-run bounds
(:func:`dpaudit.bounds.one_run_epsilon_lower_bound`,
:func:`dpaudit.bounds.fdp_one_run.one_run_mu_ladder_bound`) turn the scores into guesses on the
most extreme canaries and count the correct ones; the size of each score past its rank is
thrown away. Agrawal, Wei, Singh, Magdon-Ismail and Zikas read the scores themselves: in
white-box DP-SGD a canary's score is a sum over steps, asymptotically Gaussian, so the
scores of the included canaries and of the excluded ones are modelled as a pair of
Gaussians, and privacy is read from that pair (for ε, its closed-form hockey-stick
divergence).

What is computed here
---------------------
:func:`one_run_gaussian_mu_lower_bound` fits the equal-variance pair N(a₀, s²) (excluded)
and N(a₁, s²) (included) to the scores and bounds its standardised separation
κ = (a₁ − a₀)/s from below. N(a₀, s²) against N(a₁, s²) is exactly κ-GDP (Dong, Roth, Su
2022, Def. 2.6, by a shift and a scaling), so under the model a μ-GDP procedure has κ ≤ μ
(the marginal pair of one canary's score is a post-processing of the output, mixed over
the other canaries' coins with the same weights on both sides, which keeps μ-GDP), and a
lower confidence bound on κ is a lower bound on μ. The ε that this μ implies at δ
(:meth:`dpaudit.bounds.MuBound.epsilon`) is the hockey-stick divergence of the fitted pair
at e^ε, the quantity the paper reads.

The lower bound inverts Student's two-sample statistic
    t = (ȳ₁ − ȳ₀) / (s_p·k),  k = √(1/n₁ + 1/n₀),  s_p² the pooled variance,
which, given the group sizes, has the noncentral t law with n₁ + n₀ − 2 degrees of
freedom and noncentrality κ/k when the scores are independent N(a_b, s²) (Johnson, Kotz,
Balakrishnan 1995, Ch. 31). κ_LB solves P_κ(T ≥ t_obs) = 1 − c, floored at 0; the
tail probability increases in κ, so P[κ_LB > κ] = 1 − c exactly under the model: the
bound is finite-sample exact IF the model holds, at every m ≥ 4.

Its validity: ``"asymptotic-one-run"``, never in a verdict
---------------------------------------------------------
A μ-GDP claim implies neither half of the model. (1) Gaussian scores: the paper's own
guarantee is a central limit theorem (the normalised sum of a canary's per-step signals
is asymptotically Gaussian as the number of steps grows), so at a finite number of steps
the pair is an approximation, and for a procedure that is μ-GDP but not Gaussian the
fitted κ need not be ≤ μ: clipping an exactly 3-GDP Gaussian score to ±0.75 around its
midpoint (a post-processing, still 3-GDP) gives κ = 4.006 (tests/test_one_run_gauss.py).
(2) Independent canaries: the canaries share one run, and the
rigorous one-run theorems (Steinke, Nasr, Jagielski 2023; Mahloujifar, Melis, Chaudhuri
2025) exist precisely because nothing in a DP claim makes their scores independent. No
non-asymptotic guarantee against every μ-GDP procedure is known for this statistic, so
it is labelled ``"asymptotic-one-run"`` and reported beside the rigorous bounds; dpaudit
never lets it decide a verdict (:mod:`dpaudit.dpsgd.one_run`). Its coverage where the
model is only approximately true is measured, not assumed (tests and
benchmarks/RESULTS.md).

References:
    Agrawal, Wei, Singh, Magdon-Ismail, Zikas (2026), "Let's Ask Gauss: Improved One-Run
    Privacy Auditing", arXiv:2606.12733v1 (10 Jun 2026): the asymptotic Gaussianity of
    canary-aligned white-box DP-SGD signals and the Gaussian-pair auditor (abstract and
    summaries read; the full text and its theorem numbers were not available here, so no
    theorem number is cited and none of its results is relied on beyond the model).
    Dong, Roth, Su (2022), "Gaussian Differential Privacy", JRSS-B 84(1),
    arXiv:1905.02383v3, Def. 2.6 (G_μ) and Cor. 2.13 (δ(ε) of μ-GDP = the hockey-stick
    divergence of the Gaussian pair).
    Johnson, Kotz, Balakrishnan (1995), Continuous Univariate Distributions, Vol. 2, 2nd
    ed., Ch. 31 (the noncentral t law of the two-sample statistic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

from dpaudit.bounds import MuBound
from dpaudit.errors import DpauditError
from dpaudit.stats import check_confidence_level
from dpaudit.tradeoff import as_scores

__all__ = [
    "METHOD",
    "VALIDITY",
    "GaussianPairFit",
    "gaussian_pair_fit",
    "one_run_gaussian_mu_lower_bound",
    "separation_lower_limit",
]

METHOD = "one-run-gaussian-pair"
#: The label of every bound of this module (see the module docstring).
VALIDITY = "asymptotic-one-run"
REFERENCE = (
    "Agrawal, Wei, Singh, Magdon-Ismail, Zikas 2026 (arXiv:2606.12733v1), the Gaussian-pair "
    "one-run auditor; lower limit by the exact noncentral t inversion (equal-variance model)"
)
ASSUMPTION = (
    "the canaries' scores are independent and Gaussian with one variance (in and out); "
    "white-box DP-SGD approaches this as steps grow (a central limit theorem), no DP claim "
    "implies it"
)

# Relative width of the final root bracket on the noncentrality (far below any reported
# digit; the root is returned at the bracket's low end, so rounding never raises it).
_XTOL = 1e-12


@dataclass(frozen=True)
class GaussianPairFit:
    """The equal-variance Gaussian pair fitted to one run's scores.

    Attributes:
        included: n₁, canaries whose coin put them in.
        excluded: n₀, canaries left out.
        mean_in: ȳ₁.
        mean_out: ȳ₀.
        sd_in: s₁ (n₁ − 1 in the denominator).
        sd_out: s₀.
        pooled_sd: s_p, √(((n₁ − 1)s₁² + (n₀ − 1)s₀²)/(n₁ + n₀ − 2)).
        t: Student's two-sample statistic (ȳ₁ − ȳ₀)/(s_p·√(1/n₁ + 1/n₀)).
        df: n₁ + n₀ − 2.
    """

    included: int
    excluded: int
    mean_in: float
    mean_out: float
    sd_in: float
    sd_out: float
    pooled_sd: float
    t: float
    df: int

    @property
    def scale(self) -> float:
        """k = √(1/n₁ + 1/n₀): t·k is the estimated separation."""
        return math.sqrt(1.0 / self.included + 1.0 / self.excluded)

    @property
    def separation(self) -> float:
        """κ̂ = (ȳ₁ − ȳ₀)/s_p, the point estimate of the pair's μ (not a bound)."""
        return self.t * self.scale

    @property
    def variance_ratio(self) -> float:
        """s₁²/s₀²: far from 1 says the equal-variance model does not describe the scores."""
        return (self.sd_in / self.sd_out) ** 2 if self.sd_out > 0 else math.inf


def gaussian_pair_fit(scores: Any, included: Any) -> GaussianPairFit:
    """Fit the equal-variance Gaussian pair to one run's scores and coins.

    Args:
        scores: one finite score per canary, larger = "included".
        included: the fair coins, one bool per canary.

    Returns:
        :class:`GaussianPairFit`.

    Raises:
        DpauditError: scores and coins differ in length, a score is NaN or infinite,
            either group has fewer than 2 canaries, or the scores do not vary within the
            groups (the pair then has no variance to standardise by).
    """
    s = as_scores("scores", scores)
    coins = np.asarray(included, dtype=bool).reshape(-1)
    if coins.size != s.size:
        raise DpauditError(
            f"One-run scores and coins must have one entry per canary; got {s.size} scores "
            f"and {coins.size} coins."
        )
    y1, y0 = s[coins], s[~coins]
    if y1.size < 2 or y0.size < 2:
        raise DpauditError(
            "The Gaussian-pair statistic needs at least 2 included and 2 excluded canaries "
            f"to estimate a variance; got {y1.size} included and {y0.size} excluded of "
            f"{s.size}. Use more canaries (each coin is fair, so m ≥ 20 makes this rare)."
        )
    df = int(y1.size + y0.size - 2)
    v1, v0 = float(np.var(y1, ddof=1)), float(np.var(y0, ddof=1))
    pooled = math.sqrt(((y1.size - 1) * v1 + (y0.size - 1) * v0) / df)
    if not pooled > 0.0:
        raise DpauditError(
            "The Gaussian-pair statistic needs scores that vary within the included and the "
            "excluded canaries; every score in each group is the same here, so no Gaussian "
            "pair describes them (read the rigorous one-run bounds instead)."
        )
    diff = float(y1.mean() - y0.mean())
    k = math.sqrt(1.0 / y1.size + 1.0 / y0.size)
    return GaussianPairFit(
        included=int(y1.size),
        excluded=int(y0.size),
        mean_in=float(y1.mean()),
        mean_out=float(y0.mean()),
        sd_in=math.sqrt(v1),
        sd_out=math.sqrt(v0),
        pooled_sd=pooled,
        t=diff / (pooled * k),
        df=df,
    )


def _tail(t: float, df: int, noncentrality: float) -> float:
    """P[T ≥ t] for T noncentral t (df, noncentrality); increasing in the noncentrality."""
    return float(stats.nct.sf(t, df, noncentrality))


def separation_lower_limit(fit: GaussianPairFit, *, confidence_level: float = 0.95) -> float:
    """The exact lower confidence limit on κ = (a₁ − a₀)/s under the Gaussian-pair model.

    Solves P_κ(T ≥ t_obs) = 1 − c for κ (the tail probability increases in κ, so the root
    is unique), floored at 0: under the model, given n₁ and n₀, P[limit > κ] = 1 − c.
    The root is returned at the low end of its final bracket.

    Args:
        fit: the fitted pair (:func:`gaussian_pair_fit`).
        confidence_level: c in (0, 1).

    Returns:
        κ_LB ≥ 0.
    """
    c = check_confidence_level(confidence_level)
    target = 1.0 - c
    if _tail(fit.t, fit.df, 0.0) >= target:
        return 0.0  # t_obs is not above the central t's c-quantile: nothing to bound
    low, high = 0.0, max(1.0, 2.0 * fit.t)
    while _tail(fit.t, fit.df, high) < target:  # the root lies above: widen the bracket
        low, high = high, 2.0 * high
    root = optimize.brentq(
        lambda nc: _tail(fit.t, fit.df, nc) - target, low, high, xtol=_XTOL * high, rtol=1e-14
    )
    # brentq's root is within xtol + rtol·|root| of the true one; stepping down by twice
    # xtol keeps the returned limit below the true root
    return max(0.0, (root - 2.0 * _XTOL * high) * fit.scale)


def one_run_gaussian_mu_lower_bound(
    scores: Any, included: Any, *, confidence_level: float = 0.95
) -> MuBound:
    """μ lower bound of the Gaussian-pair model of one run's continuous canary scores.

    Valid at level c only if the scores are independent and Gaussian with one variance
    (see the module docstring): labelled ``"asymptotic-one-run"``, never rigorous, so it
    must not enter a verdict. It reads every score, not only the most extreme ones, so
    where the model holds it is far tighter than the rigorous one-run bounds.

    Args:
        scores: one finite score per canary, larger = "included" (white-box: the sum over
            steps of the canary's per-step signals, e.g. its likelihood ratios).
        included: the fair coins, one bool per canary.
        confidence_level: c in (0, 1).

    Returns:
        :class:`~dpaudit.bounds.MuBound` with method ``"one-run-gaussian-pair"``, threshold
        ``"none (continuous scores)"``, validity ``"asymptotic-one-run"``; ``counts``: the
        included and excluded canaries; ``details``: the fit (means, standard deviations,
        pooled sd, t, df), the point estimate, the variance ratio (far from 1: the model is
        off), the assumption and the reference.

    Raises:
        DpauditError: see :func:`gaussian_pair_fit`.

    Example:
        1,000 canaries with independent N(coin, 1) scores (exactly 1-GDP) give, at
        c = 0.95, typically about 1 − 1.645·√(4/1000 + 1/2000) ≈ 0.89 (κ̂ minus z_c times
        its standard error; seed 0 of ``numpy.random.default_rng``: 0.851).

    References:
        Agrawal, Wei, Singh, Magdon-Ismail, Zikas (2026), arXiv:2606.12733v1 (the
        Gaussian-pair one-run auditor); Dong, Roth, Su (2022), JRSS-B, Def. 2.6.
    """
    c = check_confidence_level(confidence_level)
    fit = gaussian_pair_fit(scores, included)
    value = separation_lower_limit(fit, confidence_level=c)
    return MuBound(
        value=float(value),
        confidence_level=c,
        method=METHOD,
        threshold="none (continuous scores)",
        validity=VALIDITY,
        counts={"included": fit.included, "excluded": fit.excluded},
        details={
            "canaries": fit.included + fit.excluded,
            "mean_in": fit.mean_in,
            "mean_out": fit.mean_out,
            "sd_in": fit.sd_in,
            "sd_out": fit.sd_out,
            "pooled_sd": fit.pooled_sd,
            "t": fit.t,
            "df": fit.df,
            "point_estimate": fit.separation,
            "variance_ratio": fit.variance_ratio,
            "assumption": ASSUMPTION,
            "reference": REFERENCE,
        },
    )
