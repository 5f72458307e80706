"""Anytime-valid (sequential) lower bounds on ε and μ: confidence sequences for FPR and FNR.

A fixed design fixes the number of trials, then looks once. A sequential design looks
after every round of trials and stops as soon as the answer is clear: a violation is
proven, or the bound reaches the target asked for, or the trials run out (the cap). Looking
after every round with a fixed-n interval (Clopper–Pearson) would void its level: each
look is another chance to be wrong. The limits here hold **simultaneously over every
round** (a confidence sequence), so the audit may stop at any round, for any reason, and
the bound it stops with keeps its confidence level.

The construction, per error rate at one threshold fixed before the counted rounds:

- **Mixture martingale.** For trials X_1, X_2, ... i.i.d. Bernoulli(p) with k successes in
  n, and a prior π on alternatives q, M_n(p) = ∫ Π_i (q/p)^{X_i} ((1 − q)/(1 − p))^{1 − X_i}
  dπ(q) is a nonnegative martingale with M_0 = 1 under p (a mixture of likelihood ratios;
  Robbins 1970, "Statistical methods related to the law of the iterated logarithm", Ann.
  Math. Statist. 41(5), §3; Howard, Ramdas, McAuliffe, Sekhon 2021, "Time-uniform,
  nonparametric, nonasymptotic confidence sequences", Ann. Statist. 49(2), §3.2 and
  Prop. 7's beta-binomial mixture).
- **Ville's inequality** (Ville 1939, "Étude critique de la notion de collectif", p. 100;
  Howard et al. 2021, Eq. (6)): P(∃ n: M_n(p) ≥ 1/α) ≤ α. So the set of p with
  M_n(p) < 1/α covers the true rate at every n at once with probability ≥ 1 − α.
- **One-sided.** A lower bound on ε needs UPPER limits on FPR and FNR, so the prior is a
  Beta(a, b) truncated to [0, p] (alternatives below the candidate p only). Then
  M_n(p) = B(a + k, b + n − k)·I_p(a + k, b + n − k) / (B(a, b)·I_p(a, b)·p^k (1 − p)^(n − k))
  in closed form (I the regularised incomplete beta), M_n(p) ≤ 1 for p ≤ k/n (no p below
  the estimate is rejected) and M_n(p) increases in p above it, so the confidence sequence
  is [0, u_n] with u_n the root of M_n(u) = 1/α, found by bisection. The running minimum
  min_{m ≤ n} u_m is as valid (the same event) and never loosens.
- **The prior** may depend on anything independent of the counted trials: its mean is the
  rate measured on the selection round (the round the threshold is chosen on, never
  counted) and its concentration s = a + b makes the boundary tightest near
  ``tuned_trials`` counted trials (s ≈ n*/(2 ln(1/α)), the normal-mixture optimum of
  Howard et al. 2021, Eq. (14) and §3.5, carried over to the beta-binomial mixture).

The two rates' limits each hold with probability ≥ 1 − (1 − level)/2, so both hold jointly
with probability ≥ level (union bound, as for the fixed design's Clopper–Pearson limits),
and the ε and μ bounds of :func:`dpaudit.bounds.epsilon_from_rates` and
:func:`dpaudit.bounds.mu_from_rates` made from them hold at ``level`` at every round at
once. A sequential verdict therefore spends the same share of the verdict's budget as the
fixed design's test of the same comparison: it IS that comparison's test.

**Certifying a target** (:class:`TargetTest`). Two rate limits at a round-0 threshold are a
poor way to show "ε ≥ target": the threshold stays as noisy as round 0 left it, and each
rate pays for α/2. When the rule has a target, a share s (``target_share``, 3/4 by
default) of α = 1 − level goes to ONE test of the null "the pair is as private as the
target", a betting e-process whose threshold and stake are re-chosen before every round
from all earlier rounds (predictable), so it converges on the best threshold; the rate
limits keep α(1 − s) and still watch for violations after every round. Union bound: the
rate limits and the target test all hold at every round at once with probability ≥ 1 − α.
Measured (benchmarks/RESULTS.md): Laplace ε = 1 asked to certify ε_LB ≥ 0.9 ε stops at a
median below the fixed split plan's trials, where the rate limits alone took 1.5× the plan.

Pure functions of counts and numbers (numpy/scipy, no torch, no I/O).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy import special

from dpaudit.bounds import EpsilonBound, MuBound, epsilon_from_rates, mu_from_rates
from dpaudit.errors import DpauditError, check_choice, check_in_interval, check_integer
from dpaudit.planning import plan_trials
from dpaudit.stats import ConfidenceInterval, clopper_pearson_upper
from dpaudit.tradeoff import TradeoffCurve

__all__ = [
    "CONSTANT_ROUNDS",
    "SEQUENTIAL_METHOD",
    "STOP_REASONS",
    "Bet",
    "ExtraTest",
    "RoundPoint",
    "RoundsOutcome",
    "RoundsRunner",
    "SequentialPlan",
    "SequentialPlanBeside",
    "SequentialRule",
    "SequentialTest",
    "TargetTest",
    "combined_decision",
    "cumulative_rounds",
    "feed_rounds",
    "log_mixture_martingale",
    "null_line",
    "outcome_bound",
    "plan_sequential",
    "plan_sequential_beside_fixed",
    "rate_upper_limit",
    "round_trials_at",
    "rounds_to_reach",
    "run_rounds",
    "select_threshold",
    "sequential_path",
    "simulate_stopping",
]

Parameter = Literal["epsilon", "mu"]
#: Why a sequential test stopped (or did not yet): ``violation`` (the lower bound exceeds
#: the upper bound: the claim is refuted), ``target`` (the bound reached what the audit
#: asked to certify), ``cap`` (the last round allowed was run), ``continue`` (not yet).
STOP_REASONS = ("violation", "target", "cap", "continue")
#: Bisection steps for u_n: 2⁻⁶⁰ of the unit interval, below float64 resolution near 1.
_BISECTION_STEPS = 60


# ------------------------------------------------------------- the confidence sequence


def _prior(mean: float, concentration: float) -> tuple[float, float]:
    m = min(max(float(mean), 1e-6), 1.0 - 1e-6)
    s = max(float(concentration), 1e-3)
    return m * s, (1.0 - m) * s


#: Below this, the regularised incomplete beta is replaced by a bound in log space.
_TINY = 1e-280


def _log_betainc(
    a: float, b: float, x: np.ndarray, *, side: Literal["upper", "lower"]
) -> np.ndarray:
    """log I_x(a, b), or a bound on it where I_x underflows, erring to the side asked for.

    ``side="upper"``: where I_x < 1e-280, log 1e-280 (an upper bound). ``side="lower"``:
    there, the first term of I_x's series, log(x^a (1 − x)^b / (a·B(a, b))), a lower bound
    because every term of the series is positive (DLMF 8.17.8). In M_n the numerator takes
    the upper and the denominator the lower bound, so M_n is never underestimated: an
    underflow can only make the limit wider.
    """
    value = special.betainc(a, b, x)
    safe = np.log(np.maximum(value, _TINY))
    if side == "upper":
        return safe
    with np.errstate(divide="ignore"):
        first = a * np.log(x) + b * np.log1p(-x) - math.log(a) - special.betaln(a, b)
    return np.where(value >= _TINY, safe, first)


def log_mixture_martingale(
    k: int, n: int, p: Any, *, prior_mean: float, prior_concentration: float
) -> np.ndarray:
    """log M_n(p): the one-sided beta-binomial mixture martingale of ``k`` successes in
    ``n`` Bernoulli trials against the rate ``p`` (vectorised over ``p`` in (0, 1)).

    The prior is Beta(a, b) with mean ``prior_mean`` and a + b = ``prior_concentration``,
    truncated to [0, p]:

        M_n(p) = B(a + k, b + n − k)·I_p(a + k, b + n − k) / (B(a, b)·I_p(a, b)·p^k(1 − p)^(n − k)).

    Under Bernoulli(p) it is a nonnegative martingale with M_0 = 1 (Robbins 1970, §3;
    Howard, Ramdas, McAuliffe, Sekhon 2021, Ann. Statist. 49(2), Prop. 7), so by Ville's
    inequality it exceeds 1/α at some n with probability at most α.
    """
    a, b = _prior(prior_mean, prior_concentration)
    q = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore"):
        log_lik = k * np.log(q) + (n - k) * np.log1p(-q)
    return (
        special.betaln(a + k, b + n - k)
        + _log_betainc(a + k, b + n - k, q, side="upper")
        - special.betaln(a, b)
        - _log_betainc(a, b, q, side="lower")
        - log_lik
    )


def rate_upper_limit(
    k: int, n: int, *, level: float, prior_mean: float, prior_concentration: float
) -> float:
    """The anytime-valid upper limit u_n of a Bernoulli rate after ``k`` of ``n``.

    u_n = sup{p : M_n(p) < 1/(1 − level)} (:func:`log_mixture_martingale`): with probability
    ≥ ``level`` the true rate is ≤ u_n at EVERY n at once (Ville's inequality). ``n = 0``
    and ``k = n`` give exactly 1 (nothing is known, or nothing can be excluded).

    Raises:
        DpauditError: ``k`` or ``n`` out of range, or ``level`` not in (0, 1).
    """
    n = check_integer("n", n, low=0)
    k = check_integer("k", k, low=0, high=n)
    level = check_in_interval("level", level, 0.0, 1.0, low_open=True, high_open=True)
    if n == 0 or k == n:
        return 1.0
    log_barrier = -math.log1p(-level)

    def rejected(p: float) -> bool:
        value = log_mixture_martingale(
            k, n, p, prior_mean=prior_mean, prior_concentration=prior_concentration
        )
        return bool(value >= log_barrier)

    # M_n(p) ≤ 1 < 1/α for p ≤ k/n (the truncated mixture's alternatives are no closer to
    # k/n than p itself), and M_n increases above k/n: bisect on [k/n, 1). The returned
    # end is the rejected side of the bracket, so u_n errs upward (conservative).
    low, high = k / n, 1.0
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        if mid <= low or mid >= high:
            break
        if rejected(mid):
            high = mid
        else:
            low = mid
    return float(high)


def tuned_concentration(tuned_trials: int, level: float) -> float:
    """The prior's a + b that makes the boundary tightest near ``tuned_trials``.

    A normal mixture of variance ρ² is tightest at n* when ρ² ≈ 2 ln(1/α)/n* in units of
    the data's standard deviation (Howard et al. 2021, §3.5); a Beta prior of mean m and
    concentration s has variance m(1 − m)/(s + 1) ≈ m(1 − m)/s, i.e. ρ² = 1/s in those
    units: s = n*/(2 ln(1/α)).
    """
    return max(2.0, tuned_trials / (2.0 * math.log(1.0 / (1.0 - level))))


# ---------------------------------------------------------------- threshold selection


def select_threshold(
    negatives: Any,
    positives: Any,
    *,
    parameter: Parameter,
    delta: float,
    level: float,
) -> tuple[float, float, float]:
    """The threshold t of the test ``s ≥ t``, chosen on the selection round only.

    Every distinct score is a candidate; t maximises the bound the selection round gives
    at Clopper–Pearson limits simultaneous over all candidates (Bonferroni at ``level``),
    as the fixed design's split selects: a thin tail with a lucky count cannot win. (A
    rule that projects each candidate's rates to the design's scale, ``tuned_trials``,
    was tried and chose thresholds with a worse true ratio more often: a median 20 %
    higher on the Laplace benchmark.) Any rule is valid here: the selection round is
    never counted.

    Returns:
        ``(t, fpr, fnr)``: the threshold and the rates measured at it on the selection
        round (what the priors of the counted rounds are centred on).
    """
    check_choice("parameter", parameter, ("epsilon", "mu"))
    curve = TradeoffCurve.from_scores(negatives, positives)
    n0, n1 = curve.negatives, curve.positives
    fp = np.rint(curve.fpr * n0).astype(np.int64)
    fn = np.rint(curve.fnr * n1).astype(np.int64)
    # Bonferroni over the candidates: limits that hold for all of them at once, as the
    # fixed design's split selects (a thin tail's lucky count cannot win).
    pess_level = 1.0 - (1.0 - level) / (2.0 * curve.thresholds.size)
    pess_fpr = clopper_pearson_upper(fp, n0, level=pess_level)
    pess_fnr = clopper_pearson_upper(fn, n1, level=pess_level)
    hi_fpr, hi_fnr = pess_fpr, pess_fnr
    values = (
        epsilon_from_rates(hi_fpr, hi_fnr, delta=delta)
        if parameter == "epsilon"
        else mu_from_rates(hi_fpr, hi_fnr)
    )
    finite = np.isfinite(curve.thresholds)
    values = np.where(finite, values, -1.0)  # +inf ("never positive") is no test
    # Ties (all 0 when the selection round shows nothing) go to the candidate whose
    # pessimistic rates sum least: the most telling event the round saw.
    i = int(np.lexsort((pess_fpr + pess_fnr, -values))[0])
    return float(curve.thresholds[i]), float(curve.fpr[i]), float(curve.fnr[i])


# ------------------------------------------------------- the target's betting e-process


#: Candidate thresholds of the target test: quantiles of round 0's pooled scores.
_TARGET_CANDIDATES = 200
#: Share of a bet's Kelly stake m/(v + m²) placed (half Kelly: the estimate of the drift m
#: is the best of many candidates, biased upward; at twice the Kelly stake the growth is 0).
_STAKE_SHRINK = 0.5
#: Largest fraction of the capital a bet may lose on one pair (keeps every factor ≥ 1/2).
_STAKE_CAP = 0.5


def null_line(
    parameter: Parameter, target: float, *, delta: float, fpr: Any
) -> tuple[np.ndarray, np.ndarray]:
    """The line E[Y] ≤ a + b·E[X] every test of a mechanism as private as ``target`` obeys.

    X is the error event of the first arm under the test (``s ≥ t`` on the H0 arm: E[X] is
    FPR) and Y the detection event on the second (``s ≥ t`` on the H1 arm: E[Y] = 1 − FNR).

    - ε (with δ): the definition of (ε, δ)-DP applied to the event ``s ≥ t`` gives
      P1(s ≥ t) ≤ e^ε·P0(s ≥ t) + δ, so a = δ, b = e^ε (for every t).
    - μ: a trade-off function is convex (Dong, Roth, Su 2022, "Gaussian differential
      privacy", J. R. Stat. Soc. B 84(1), Proposition 2.2), so G_μ lies above each of its
      tangents: FNR ≥ G_μ(FPR) ≥ c_b − b·FPR with c_b = min_x G_μ(x) + b·x, attained where
      G_μ'(x) = −b, i.e. at z = Φ⁻¹(1 − x) = (ln b + μ²/2)/μ: c_b = Φ(z − μ) + b·Φ(−z).
      The slope b is chosen where G_μ is touched at ``fpr`` (any b > 0 gives a valid line);
      a = 1 − c_b. A mechanism that is μ'-GDP with μ' ≤ μ obeys it too (G_μ' ≥ G_μ).

    Args:
        parameter: ``"epsilon"`` or ``"mu"``.
        target: ε or μ of the null.
        delta: δ of ε.
        fpr: where the line touches G_μ (μ only; elementwise), in (0, 1).

    Returns:
        ``(a, b)`` broadcast to the shape of ``fpr``.
    """
    x = np.asarray(fpr, dtype=float)
    if parameter == "epsilon":
        return np.full_like(x, float(delta)), np.full_like(x, math.exp(target))
    mu = max(float(target), 1e-9)
    z_at = special.ndtri(1.0 - np.clip(x, 1e-12, 1.0 - 1e-12))
    b = np.exp(mu * z_at - 0.5 * mu * mu)
    z = (np.log(b) + 0.5 * mu * mu) / mu
    c = special.ndtr(z - mu) + b * special.ndtr(-z)
    return np.clip(1.0 - c, 0.0, 1.0), b


@dataclass(frozen=True)
class Bet:
    """One round's bet of :class:`TargetTest`, fixed before the round is read.

    Attributes:
        direction: ``"up"`` (X = [negative ≥ t], Y = [positive ≥ t]) or ``"down"``
            (X = [positive < t], Y = [negative < t]: the same test with the arms' roles
            swapped, which a symmetric claim bounds alike).
        threshold: t.
        intercept, slope: the null's line E[Y] ≤ a + b·E[X] (:func:`null_line`).
        stake: λ, in [0, 1/(a + b)]: each pair multiplies the capital by 1 + λ(Y − bX − a).
    """

    direction: str
    threshold: float
    intercept: float
    slope: float
    stake: float


class TargetTest:
    """A betting e-process certifying ``parameter ≥ target`` (ε at δ, or μ).

    Null H: the audited pair is as private as ``target`` (every value below the target
    included). Each counted round pairs its i-th negative with its i-th positive score into
    X, Y ∈ {0, 1} (:class:`Bet`); under H, E[Y − bX − a] = E[Y] − b·E[X] − a ≤ 0
    (:func:`null_line`; by linearity, so X and Y of one pair need not be independent, only
    the pairs of one another and of the past, as the trials are). Before a round is read,
    the threshold t (among candidates placed at round 0's score quantiles), the direction
    and the stake λ ∈ [0, 1/(a + b)] are chosen from the rounds before it only (all their
    scores, round 0 included: a predictable choice), so each factor 1 + λ(Y − bX − a) is
    nonnegative with conditional mean ≤ 1, and the capital
    K_n = Π_i (1 + λ_i(Y_i − b_i X_i − a_i)) is a nonnegative supermartingale with K_0 = 1
    under H (testing by betting: Shafer 2021, "Testing by betting: a strategy for
    statistical and scientific communication", J. R. Stat. Soc. A 184(2); Waudby-Smith and
    Ramdas 2024, "Estimating means of bounded random variables by betting", J. R. Stat.
    Soc. B 86(1), whose capital process this is, for a mean bounded by a line instead of a
    point). By Ville's inequality (Howard et al. 2021, Eq. (6)) P_H(∃ n: K_n ≥ 1/α) ≤ α
    with α = 1 − ``level``: once the capital has reached 1/α the target is certified at
    ``level``, whatever the stopping rule, and it stays certified.

    Why it beats two rate limits: the threshold follows the data (it is re-chosen from
    every earlier trial, so it converges to the best candidate, where a round-0 choice
    stays noisy), every trial after round 0 is counted, and one null is tested at the
    whole α instead of two rates at α/2 each.

    The stake is half the Kelly stake m/(v + m²) of the drift m = Ê[Y] − b·Ê[X] − a and
    variance v = Ê[Y](1 − Ê[Y]) + b²·Ê[X](1 − Ê[X]) estimated on the earlier rounds at the
    candidate of largest m²/v (the growth rate per pair, to second order), capped so that
    one pair never loses more than half the capital; no bet (λ = 0) while no candidate
    shows a positive drift.
    """

    def __init__(
        self,
        negatives: Any,
        positives: Any,
        *,
        parameter: Parameter,
        target: float,
        delta: float,
        level: float,
    ) -> None:
        neg0, pos0 = np.asarray(negatives, dtype=float), np.asarray(positives, dtype=float)
        level = check_in_interval("level", level, 0.0, 1.0, low_open=True, high_open=True)
        self.parameter: Parameter = parameter
        self.target, self.delta = float(target), float(delta)
        # Certified once the capital reaches 1/(1 − level): Ville's barrier.
        self.log_barrier = -math.log1p(-level)
        pooled = np.concatenate([neg0, pos0])
        pooled = pooled[np.isfinite(pooled)]
        if pooled.size == 0:
            self.candidates = np.zeros(0)
        elif np.unique(pooled).size <= _TARGET_CANDIDATES:
            self.candidates = np.unique(pooled)
        else:
            grid = np.linspace(0.0, 1.0, _TARGET_CANDIDATES + 2)[1:-1]
            self.candidates = np.unique(np.quantile(pooled, grid, method="inverted_cdf"))
        self.ge_neg = np.zeros(self.candidates.size)
        self.ge_pos = np.zeros(self.candidates.size)
        self.n_neg = self.n_pos = 0
        self._count(neg0, pos0)
        self.log_evalue = 0.0
        self.max_log_evalue = 0.0

    def _count(self, neg: np.ndarray, pos: np.ndarray) -> None:
        for scores, tally in ((neg, self.ge_neg), (pos, self.ge_pos)):
            ordered = np.sort(scores)
            tally += ordered.size - np.searchsorted(ordered, self.candidates, side="left")
        self.n_neg += neg.size
        self.n_pos += pos.size

    @property
    def certified(self) -> bool:
        """Whether the capital has reached 1/α at some round so far."""
        return self.max_log_evalue >= self.log_barrier

    def bet(self) -> Bet | None:
        """The next round's bet, from the rounds read so far (None: no candidate)."""
        if self.candidates.size == 0 or self.n_neg == 0 or self.n_pos == 0:
            return None
        best: tuple[float, Bet] | None = None
        # Rates kept off 0 and 1 (k + 1/2)/(n + 1): an empty tail is not a sure thing, and
        # a tangent of G_μ taken at a rate of 0 would be vertical.
        up_x = (self.ge_neg + 0.5) / (self.n_neg + 1.0)
        up_y = (self.ge_pos + 0.5) / (self.n_pos + 1.0)
        for direction, px, py in (("up", up_x, up_y), ("down", 1.0 - up_y, 1.0 - up_x)):
            a, b = null_line(self.parameter, self.target, delta=self.delta, fpr=px)
            drift = py - b * px - a
            var = py * (1.0 - py) + b * b * px * (1.0 - px)
            growth = np.where(drift > 0, drift * drift / np.maximum(var, 1e-300), -1.0)
            i = int(np.argmax(growth))
            if growth[i] <= 0 or (best is not None and growth[i] <= best[0]):
                continue
            m, v = float(drift[i]), float(var[i])
            stake = min(_STAKE_SHRINK * m / (v + m * m), _STAKE_CAP / float(a[i] + b[i]))
            bet = Bet(direction, float(self.candidates[i]), float(a[i]), float(b[i]), stake)
            best = (float(growth[i]), bet)
        return best[1] if best is not None else None

    def add(self, negatives: Any, positives: Any) -> None:
        """Bet on one round (chosen before reading it), then learn from it."""
        neg, pos = np.asarray(negatives, dtype=float), np.asarray(positives, dtype=float)
        bet = self.bet()
        if bet is not None and bet.stake > 0:
            pairs = min(neg.size, pos.size)
            # Pair i: the i-th trial of each arm (independent trials; a longer arm's extra
            # trials are not bet on).
            n, p = neg[:pairs], pos[:pairs]
            if bet.direction == "up":
                x, y = n >= bet.threshold, p >= bet.threshold
            else:
                x, y = p < bet.threshold, n < bet.threshold
            z = y.astype(float) - bet.slope * x - bet.intercept
            self.log_evalue += float(np.sum(np.log1p(bet.stake * z)))
            self.max_log_evalue = max(self.max_log_evalue, self.log_evalue)
        self._count(neg, pos)


# ------------------------------------------------------------------------- the path


@dataclass(frozen=True)
class SequentialRule:
    """When a sequential test stops.

    Attributes:
        parameter: ``"epsilon"`` or ``"mu"``.
        delta: δ of an ε bound (0 for μ).
        level: the bound's confidence level, held over every round at once (the
            verdict's per-bound level for an in-verdict comparison).
        upper: the upper bound the lower bound is held against (a violation when the
            lower bound exceeds it), or None.
        target: stop when the lower bound reaches this value (certified), or None.
        tuned_trials: counted trials per arm near which the limits are tightest.
        target_share: with a ``target``, the share of 1 − ``level`` spent on the target's
            betting e-process (:class:`TargetTest`); the rate limits get the rest. 0: no
            target test (the rate limits alone, at the whole level). Without a target
            nothing is spent on it.
    """

    parameter: Parameter
    delta: float
    level: float
    upper: float | None = None
    target: float | None = None
    tuned_trials: int = 1000
    target_share: float = 0.75

    def __post_init__(self) -> None:
        check_choice("parameter", self.parameter, ("epsilon", "mu"))
        check_in_interval("level", self.level, 0.0, 1.0, low_open=True, high_open=True)
        check_integer("tuned_trials", self.tuned_trials, low=1)
        check_in_interval("target_share", self.target_share, 0.0, 1.0, high_open=True)

    @property
    def spent_on_target(self) -> float:
        """The share of 1 − ``level`` the target test spends (0 without a target)."""
        return self.target_share if self.target is not None else 0.0


@dataclass(frozen=True)
class RoundPoint:
    """The state of a sequential test after one counted round.

    Attributes:
        round: the round's index (round 0 chose the threshold and is never counted).
        trials: trials per arm run so far, the selection round included.
        fp, negatives, fn, positives: counted errors and trials (rounds 1..round).
        fpr_high, fnr_high: the anytime-valid upper limits (running minima).
        value: the lower bound these give, or the target once the target test has
            certified it if that is larger (non-decreasing over rounds).
        decision: one of :data:`STOP_REASONS`.
        log_evalue: the target test's largest log capital so far (None: no target test);
            the target is certified once it reaches ln(1/α) of the test's share.
    """

    round: int
    trials: int
    fp: int
    negatives: int
    fn: int
    positives: int
    fpr_high: float
    fnr_high: float
    value: float
    decision: str
    log_evalue: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if out["log_evalue"] is None:
            del out["log_evalue"]  # no target test: the record is as it always was
        return out


def _decide(value: float, rule: SequentialRule, last: bool) -> str:
    if rule.upper is not None and value > rule.upper:
        return "violation"
    if rule.target is not None and value >= rule.target:
        return "target"
    return "cap" if last else "continue"


class SequentialTest:
    """A sequential test fed one round at a time (what :func:`sequential_path` runs).

    Round 0's scores choose the threshold (:func:`select_threshold`) and centre the
    priors; every later round is counted at that threshold, and after each the upper
    limits of FPR and FNR (:func:`rate_upper_limit`) give the bound. With a target, a
    :class:`TargetTest` (threshold re-chosen before every round from all earlier ones)
    runs beside them, and once it certifies the target the bound is at least the target.

    The level: with α = 1 − ``level`` and s = the rule's :attr:`SequentialRule.spent_on_target`,
    each rate's limit holds at 1 − α(1 − s)/2 at every round at once and the target test
    errs with probability ≤ αs, so by the union bound all three hold together, at every
    round at once, with probability ≥ 1 − α: the bound reported, whichever of them made
    it, holds at ``level`` under any stopping rule.
    """

    def __init__(self, negatives: Any, positives: Any, rule: SequentialRule) -> None:
        neg0, pos0 = np.asarray(negatives, dtype=float), np.asarray(positives, dtype=float)
        self.rule = rule
        share = rule.spent_on_target
        self.rate_level = 1.0 - (1.0 - rule.level) * (1.0 - share) / 2.0
        self.target_test = (
            TargetTest(
                neg0,
                pos0,
                parameter=rule.parameter,
                target=rule.target,
                delta=rule.delta,
                level=1.0 - (1.0 - rule.level) * share,
            )
            if rule.target is not None and share > 0
            else None
        )
        self.threshold, fpr0, fnr0 = select_threshold(
            neg0,
            pos0,
            parameter=rule.parameter,
            delta=rule.delta,
            level=rule.level,
        )
        self.concentration = tuned_concentration(rule.tuned_trials, self.rate_level)
        # Centre each prior on the selection estimate, kept off 0 and 1.
        self.prior_fpr = (fpr0 * neg0.size + 0.5) / (neg0.size + 1.0)
        self.prior_fnr = (fnr0 * pos0.size + 0.5) / (pos0.size + 1.0)
        self.round = 0
        self.trials = max(neg0.size, pos0.size)
        self.fp = self.fn = self.negatives = self.positives = 0
        self.fpr_high = self.fnr_high = 1.0

    def add(self, negatives: Any, positives: Any, *, last: bool = False) -> RoundPoint:
        """Count one more round; ``last``: it is the last round allowed (the cap)."""
        neg, pos = np.asarray(negatives, dtype=float), np.asarray(positives, dtype=float)
        self.round += 1
        self.fp += int(np.count_nonzero(neg >= self.threshold))
        self.fn += int(np.count_nonzero(pos < self.threshold))
        self.negatives += neg.size
        self.positives += pos.size
        self.trials += max(neg.size, pos.size)
        s, lvl = self.concentration, self.rate_level
        # Running minima: the intersection of the sequence so far (the same event).
        self.fpr_high = min(
            self.fpr_high,
            rate_upper_limit(
                self.fp, self.negatives, level=lvl, prior_mean=self.prior_fpr, prior_concentration=s
            ),
        )
        self.fnr_high = min(
            self.fnr_high,
            rate_upper_limit(
                self.fn, self.positives, level=lvl, prior_mean=self.prior_fnr, prior_concentration=s
            ),
        )
        rule = self.rule
        value = float(
            epsilon_from_rates(self.fpr_high, self.fnr_high, delta=rule.delta)
            if rule.parameter == "epsilon"
            else mu_from_rates(self.fpr_high, self.fnr_high)
        )
        log_evalue = None
        if self.target_test is not None and rule.target is not None:
            self.target_test.add(neg, pos)
            log_evalue = self.target_test.max_log_evalue
            if self.target_test.certified:
                value = max(value, float(rule.target))
        return RoundPoint(
            self.round,
            self.trials,
            self.fp,
            self.negatives,
            self.fn,
            self.positives,
            self.fpr_high,
            self.fnr_high,
            value,
            _decide(value, rule, last),
            log_evalue,
        )


def sequential_path(
    rounds: Sequence[tuple[Any, Any]],
    rule: SequentialRule,
    *,
    last_round: int | None = None,
) -> tuple[float, list[RoundPoint]]:
    """Run the sequential test over stored rounds; stop at the first decision.

    The result is a deterministic function of the rounds given: the same stored rounds
    give the same path, so a resumed or extended run continues the same sequence, and
    rounds after the first decision are never read.

    Args:
        rounds: ``(negative scores, positive scores)`` per round, in order (round 0
            chooses the threshold and is never counted).
        rule: the parameter, level and stopping targets.
        last_round: index of the last round allowed (the cap); the path ends with
            ``"cap"`` there. None: no round is the last.

    Returns:
        ``(threshold, path)``: one :class:`RoundPoint` per counted round up to and
        including the first that is not ``"continue"`` (empty when only round 0 is
        given).
    """
    if not rounds:
        raise DpauditError("A sequential test needs at least its selection round (round 0).")
    test = SequentialTest(*rounds[0], rule)
    return test.threshold, feed_rounds(test, rounds, last_round=last_round)


def feed_rounds(test: Any, rounds: Sequence[Any], *, last_round: int | None = None) -> list[Any]:
    """Feed rounds 1, 2, ... to one test built on round 0 (``test.add(negatives,
    positives, *, last) -> point``), up to and including the first point that is not
    ``"continue"``; the round ``last_round`` (the cap) is marked last."""
    path: list[Any] = []
    for r in range(1, len(rounds)):
        point = test.add(*rounds[r], last=last_round is not None and r >= last_round)
        path.append(point)
        if point.decision != "continue":
            break
    return path


# --------------------------------------------------------------------------- planning


def _sample(
    law: str, parameter_value: float, rng: np.random.Generator, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Scores of the built-in scalar mechanisms with sensitivity 1 (the score is the
    output): Laplace of scale 1/ε, Gaussian of σ = 1/μ, on f(D) = 0 and f(D') = 1."""
    if law == "laplace":
        b = 1.0 / parameter_value
        return rng.laplace(0.0, b, size), 1.0 + rng.laplace(0.0, b, size)
    sigma = 1.0 / parameter_value
    return rng.normal(0.0, sigma, size), 1.0 + rng.normal(0.0, sigma, size)


def simulate_stopping(
    rule: SequentialRule,
    *,
    law: Literal["laplace", "gaussian"],
    true_value: float,
    round_trials: int,
    max_trials: int,
    repeats: int,
    seed: int,
) -> tuple[np.ndarray, list[str]]:
    """Trials per arm at which the sequential test stops, over ``repeats`` seeded audits
    of the exact mechanism law (Laplace with ε = ``true_value``, or Gaussian with μ).

    Returns:
        ``(trials, reasons)``: per repeat, the trials per arm used and why it stopped.
    """
    check_choice("law", law, ("laplace", "gaussian"))
    rounds_cap = max(2, math.ceil(max_trials / round_trials))
    used, reasons = np.zeros(repeats, dtype=np.int64), []
    for i in range(repeats):
        rng = np.random.default_rng([seed, i])
        test = SequentialTest(*_sample(law, true_value, rng, round_trials), rule)
        while True:
            point = test.add(
                *_sample(law, true_value, rng, round_trials), last=test.round + 1 >= rounds_cap - 1
            )
            if point.decision != "continue":
                break
        used[i] = point.trials
        reasons.append(point.decision)
    return used, reasons


@dataclass(frozen=True)
class SequentialPlan:
    """What a sequential design is expected to cost, by seeded simulation.

    Attributes:
        median_trials, mean_trials, p95_trials: trials per arm at stopping.
        stop_share: share of repeats stopped by each reason (:data:`STOP_REASONS`).
        repeats, seed: the simulation.
        law, true_value: the mechanism simulated (Laplace ε or Gaussian μ).
        parameter, target, upper, level, round_trials, max_trials, tuned_trials: the
            design.
        target_share: the share of 1 − level the target's e-process spent (0: none).
    """

    median_trials: float
    mean_trials: float
    p95_trials: float
    stop_share: dict[str, float]
    repeats: int
    seed: int
    law: str
    true_value: float
    parameter: str
    target: float | None
    upper: float | None
    level: float
    round_trials: int
    max_trials: int
    tuned_trials: int
    target_share: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_sequential(
    *,
    law: Literal["laplace", "gaussian"],
    true_value: float,
    parameter: Parameter,
    target: float | None,
    upper: float | None,
    delta: float = 0.0,
    level: float = 0.95,
    round_trials: int = 100,
    max_trials: int = 100_000,
    tuned_trials: int | None = None,
    repeats: int = 200,
    seed: int = 0,
) -> SequentialPlan:
    """Expected, median and 95th-percentile trials per arm of a sequential design, by
    simulation of the exact mechanism law (seeded: the same call gives the same plan).

    Raises:
        DpauditError: nothing to stop on (neither ``target`` nor ``upper``), or a bad value.
    """
    if target is None and upper is None:
        raise DpauditError(
            "A sequential plan needs a 'target' to certify or an 'upper' bound to refute; "
            "got neither."
        )
    check_integer("round_trials", round_trials, low=2)
    check_integer("repeats", repeats, low=1)
    rule = SequentialRule(
        parameter=parameter,
        delta=delta,
        level=level,
        upper=upper,
        target=target,
        tuned_trials=tuned_trials or default_tuned_trials(round_trials),
    )
    used, reasons = simulate_stopping(
        rule,
        law=law,
        true_value=true_value,
        round_trials=round_trials,
        max_trials=max_trials,
        repeats=repeats,
        seed=seed,
    )
    share = {r: reasons.count(r) / repeats for r in STOP_REASONS if r != "continue"}
    return SequentialPlan(
        median_trials=float(np.median(used)),
        mean_trials=float(np.mean(used)),
        p95_trials=float(np.quantile(used, 0.95)),
        stop_share=share,
        repeats=repeats,
        seed=seed,
        law=law,
        true_value=float(true_value),
        parameter=parameter,
        target=target,
        upper=upper,
        level=level,
        round_trials=round_trials,
        max_trials=max_trials,
        tuned_trials=rule.tuned_trials,
        target_share=rule.spent_on_target,
    )


def default_tuned_trials(round_trials: int) -> int:
    """Counted trials per arm the limits are tuned for when the audit does not say."""
    return 20 * round_trials


# ------------------------------------------------- several tests fed the same rounds


@dataclass(frozen=True)
class RoundsOutcome:
    """Several sequential tests (one per parameter) fed the same stored rounds, stopped at
    the first round where any of them decides (:func:`run_rounds`).

    Attributes:
        decision: one of :data:`STOP_REASONS`.
        rounds: rounds used (round 0 included).
        trials: trials per arm used (round 0 included).
        thresholds: per parameter, the threshold chosen on round 0.
        paths: per parameter, one point per counted round used.
        levels: per parameter, the level its bound holds at.
        uppers: per parameter, its upper bound (None: none).
        targets: per parameter, the value that certifies it (None: no target).
        entered: per parameter, whether its comparison is in the verdict.
    """

    decision: str
    rounds: int
    trials: int
    thresholds: dict[str, float]
    paths: dict[str, list[RoundPoint]]
    levels: dict[str, float]
    uppers: dict[str, float | None]
    targets: dict[str, float | None]
    entered: dict[str, bool]

    @property
    def decided_by(self) -> str | None:
        """The parameter whose test took the decision (None while continuing)."""
        if self.decision == "continue":
            return None
        return next(
            (p for p, pts in self.paths.items() if pts and pts[-1].decision == self.decision),
            None,
        )


def combined_decision(last: dict[str, str], entered: dict[str, bool]) -> str:
    """The audit's decision after a round from each test's: a violation of an in-verdict
    comparison first, then a certified target, then the cap, else continue."""
    if any(d == "violation" and entered[p] for p, d in last.items()):
        return "violation"
    if any(d == "target" for d in last.values()):
        return "target"
    if any(d == "cap" for d in last.values()):
        return "cap"
    return "continue"


@dataclass(frozen=True)
class ExtraTest:
    """A further test :func:`run_rounds` feeds the same rounds beside its rate tests (the
    DP-SGD claim-curve test): ``start(negatives, positives)`` builds it from round 0, and
    the object it returns has ``add(negatives, positives, *, last) -> RoundPoint``.

    Attributes:
        start: builds the test from round 0's scores.
        level: the level its decisions hold at (every round at once).
    """

    start: Callable[[Any, Any], Any]
    level: float


class RoundsRunner:
    """The tests of :func:`run_rounds`, fed one round at a time.

    Round 0 builds one test per rule (and per extra test); every later round is added to
    each, at a cost that depends on that round's trials only, never on how many rounds
    came before (each test keeps running counts and running limits). After each round
    :meth:`add` returns the combined decision (:func:`combined_decision`); once it is not
    ``"continue"`` the runner takes no more rounds, and :meth:`outcome` is what
    :func:`run_rounds` returns for the same rounds.

    Args:
        rules: per parameter, its :class:`SequentialRule`.
        entered: per parameter, whether its comparison is in the verdict.
        last_round: index of the last round allowed (the cap).
        extra: further tests by name (:class:`ExtraTest`).
    """

    def __init__(
        self,
        rules: dict[str, SequentialRule],
        *,
        entered: dict[str, bool],
        last_round: int,
        extra: Mapping[str, ExtraTest] | None = None,
    ) -> None:
        self.rules, self.entered, self.last_round = rules, dict(entered), last_round
        self.extra = dict(extra or {})
        self.tests: dict[str, Any] = {}
        self.paths: dict[str, list[RoundPoint]] = {}
        self.decision, self.rounds, self.trials = "continue", 0, 0

    def add(self, negatives: Any, positives: Any) -> str:
        """Feed the next round (round 0 first); returns the decision after it.

        Raises:
            DpauditError: a round after the decision.
        """
        if self.decision != "continue":
            raise DpauditError(
                f"internal error: round {self.rounds} fed to a sequential test that already "
                f"stopped ({self.decision})"
            )
        r = self.rounds
        if r == 0:
            self.tests = {
                p: SequentialTest(negatives, positives, rule) for p, rule in self.rules.items()
            }
            self.tests.update({p: e.start(negatives, positives) for p, e in self.extra.items()})
            self.paths = {p: [] for p in self.tests}
        else:
            for p, test in self.tests.items():
                self.paths[p].append(test.add(negatives, positives, last=r >= self.last_round))
            last = {p: pts[-1].decision for p, pts in self.paths.items()}
            self.decision = combined_decision(last, self.entered)
        self.rounds += 1
        self.trials += max(np.asarray(negatives).size, np.asarray(positives).size)
        return self.decision

    def outcome(self) -> RoundsOutcome:
        """The tests' state after the rounds fed so far.

        Raises:
            DpauditError: no round fed.
        """
        if self.rounds == 0:
            raise DpauditError("A sequential test needs at least its selection round (round 0).")
        rules, extra = self.rules, self.extra
        return RoundsOutcome(
            decision=self.decision,
            rounds=self.rounds,
            trials=self.trials,
            thresholds={p: self.tests[p].threshold for p in rules},
            paths={p: list(pts) for p, pts in self.paths.items()},
            levels={p: r.level for p, r in rules.items()} | {p: e.level for p, e in extra.items()},
            uppers={p: r.upper for p, r in rules.items()} | dict.fromkeys(extra),
            targets={p: r.target for p, r in rules.items()} | dict.fromkeys(extra),
            entered=dict(self.entered),
        )


def run_rounds(
    rounds: Sequence[tuple[Any, Any]],
    rules: dict[str, SequentialRule],
    *,
    entered: dict[str, bool],
    last_round: int,
    extra: Mapping[str, ExtraTest] | None = None,
) -> RoundsOutcome:
    """Feed stored rounds in order to one test per rule; stop at the first round where
    the combined decision (:func:`combined_decision`) is not ``"continue"``.

    A deterministic function of the rounds given: a resumed or extended run reads the same
    stored rounds and takes the same decisions, and rounds after the decision are never
    read. Any kind whose rounds are ``(negative scores, positive scores)`` uses it; an
    audit that decides after every round keeps a :class:`RoundsRunner` instead, so that
    each round costs what its own trials cost.

    Args:
        rounds: ``(negative scores, positive scores)`` per round; round 0 chooses the
            thresholds.
        rules: per parameter, its :class:`SequentialRule`.
        entered: per parameter, whether its comparison is in the verdict (only those can
            stop the test with a violation).
        last_round: index of the last round allowed (the cap).
        extra: further tests by name (:class:`ExtraTest`), each with no single upper
            value or target; their names must be in ``entered`` too. Each test's limits
            hold at every round at once, so stopping on whichever decides first keeps each
            one's level.

    Raises:
        DpauditError: no round given.
    """
    if not rounds:
        raise DpauditError("A sequential test needs at least its selection round (round 0).")
    runner = RoundsRunner(rules, entered=entered, last_round=last_round, extra=extra)
    for neg, pos in rounds:
        if runner.add(neg, pos) != "continue":
            break
    return runner.outcome()


# ------------------------------------------------------------------ the rounds' schedule

#: Rounds of ``round_trials`` each, round 0 included, before the rounds grow.
CONSTANT_ROUNDS = 20
#: The mantissas of the cumulative trials once the rounds grow: 1, 1.25, 1.5, 2, 2.5, 3, 4,
#: 5, 6, 8 times a power of ten times ``round_trials`` (each step at most × 4/3).
_SERIES = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


def cumulative_rounds(rounds: int) -> list[int]:
    """Cumulative trials per arm after rounds 0, 1, ..., ``rounds`` − 1, in units of
    ``round_trials``: 1, 2, ..., 20, then 25, 30, 40, 50, 60, 80, 100, 125, 150, 200, ...

    A schedule fixed before any trial is drawn (it depends on the round's index alone):
    the confidence sequences hold at every number of trials at once (Ville's inequality),
    so looking only at these numbers keeps every level, and a stopping rule that reads
    them is as valid as one that reads every trial. Constant rounds up to the tuned trials
    (20 rounds, where the mixture boundary is tightest, :func:`default_tuned_trials`),
    then rounds that grow with the trials already run (at most by a third): a correct
    mechanism run to a cap of N trials is looked at O(log N) times, and a violation found
    after n trials costs at most 4/3 · n.

    Raises:
        DpauditError: ``rounds`` < 1.
    """
    rounds = check_integer("rounds", rounds, low=1)
    out = list(range(1, min(rounds, CONSTANT_ROUNDS) + 1))
    power = 10
    while len(out) < rounds:
        for m in _SERIES:
            value = m * power
            if len(out) < rounds and value > out[-1] and value == int(value):
                out.append(int(value))
        power *= 10
    return out


def round_trials_at(index: int, round_trials: int) -> int:
    """Trials per arm of round ``index`` (:func:`cumulative_rounds` × ``round_trials``)."""
    index = check_integer("index", index, low=0)
    cumulative = cumulative_rounds(index + 1)
    previous = cumulative[-2] if index > 0 else 0
    return (cumulative[-1] - previous) * round_trials


def rounds_to_reach(trials: int, round_trials: int) -> int:
    """The fewest rounds whose cumulative trials reach ``trials`` (the cap, rounded up to
    whole rounds so that a round never depends on the cap), at least 2."""
    trials = check_integer("trials", trials, low=1)
    rounds = 2
    while cumulative_rounds(rounds)[-1] * round_trials < trials:
        rounds *= 2
    low = rounds // 2
    while low < rounds:  # the fewest: bisect between a short and a long enough schedule
        mid = (low + rounds) // 2
        if cumulative_rounds(mid)[-1] * round_trials >= trials:
            rounds = mid
        else:
            low = mid + 1
    return max(2, rounds)


def outcome_bound(result: RoundsOutcome, parameter: str, *, delta: float) -> Any:
    """The :class:`~dpaudit.bounds.EpsilonBound` or :class:`~dpaudit.bounds.MuBound` a
    sequential test stopped with (method ``beta-binomial-mixture-cs``), and its path's
    summary in ``details``."""
    point = result.paths[parameter][-1]
    common: dict[str, Any] = {
        "value": point.value,
        "confidence_level": result.levels[parameter],
        "method": SEQUENTIAL_METHOD,
        "threshold": "sequential",
        "validity": "rigorous-multi-run",
        "fpr": ConfidenceInterval(0.0, point.fpr_high),
        "fnr": ConfidenceInterval(0.0, point.fnr_high),
        "threshold_value": result.thresholds[parameter],
        "counts": {
            "fp": point.fp,
            "negatives": point.negatives,
            "fn": point.fn,
            "positives": point.positives,
        },
        "details": {
            "sequential": True,
            "rounds": result.rounds,
            "selection": "round 0 (never counted) chose the threshold",
            "stopped_because": result.decision,
            "limits": (
                "one-sided beta-binomial mixture confidence sequences for FPR and FNR, "
                "each at 1 - (1 - level)/2, valid over every round at once (Robbins 1970; "
                "Howard et al. 2021, Ann. Statist. 49(2))"
            ),
        },
    }
    if point.log_evalue is not None:
        target = result.targets[parameter]
        common["details"]["target_test"] = {
            "target": target,
            "certified": target is not None and point.value >= target,
            "log_evalue": point.log_evalue,
            "method": (
                "betting e-process for the null 'as private as the target' (threshold "
                "re-chosen before each round from the earlier ones; Ville's inequality), "
                "spending a share of 1 - level; the rate limits spend the rest"
            ),
        }
    if parameter == "epsilon":
        return EpsilonBound(delta=delta, **common)
    return MuBound(**common)


#: The method label of a sequential bound.
SEQUENTIAL_METHOD = "beta-binomial-mixture-cs"


@dataclass(frozen=True)
class SequentialPlanBeside:
    """A sequential plan and the fixed design's plan for the same goal, beside it (what
    stopping early saves: ``dpaudit plan --sequential``).

    Attributes:
        plan: the sequential design's simulated cost (:func:`plan_sequential`).
        fixed_trials_per_arm: the fixed split design's trials per arm for the same goal
            (:func:`dpaudit.planning.plan_trials`), or ``"none (why)"`` when no fixed
            design certifies it.
    """

    plan: SequentialPlan
    fixed_trials_per_arm: int | str

    def to_dict(self) -> dict[str, Any]:
        return {**self.plan.to_dict(), "fixed_plan_trials_per_arm": self.fixed_trials_per_arm}


def plan_sequential_beside_fixed(
    *,
    law: Literal["laplace", "gaussian"],
    true_value: float,
    parameter: Parameter,
    target: float | None,
    upper: float | None,
    delta: float = 0.0,
    level: float = 0.95,
    round_trials: int = 100,
    max_trials: int = 100_000,
    repeats: int = 200,
    seed: int = 0,
) -> SequentialPlanBeside:
    """:func:`plan_sequential`, and the fixed plan for the same goal (``target``, else the
    ``upper`` bound to refute) on the same mechanism law.

    Raises:
        DpauditError: as :func:`plan_sequential`.
    """
    plan = plan_sequential(
        law=law,
        true_value=true_value,
        parameter=parameter,
        target=target,
        upper=upper,
        delta=delta,
        level=level,
        round_trials=round_trials,
        max_trials=max_trials,
        repeats=repeats,
        seed=seed,
    )
    goal = target if target is not None else upper
    assert goal is not None  # plan_sequential refuses neither
    fixed: int | str
    try:
        fixed = plan_trials(
            goal,
            delta,
            level,
            tradeoff=law,
            mechanism_epsilon=true_value if law == "laplace" else None,
            mechanism_mu=true_value if law == "gaussian" else None,
            parameter=parameter,
        ).trials_per_arm
    except DpauditError as exc:
        fixed = f"none ({exc})"
    return SequentialPlanBeside(plan, fixed)
