"""An anytime-valid (sequential) test of a claim's whole trade-off curve.

The fixed-design claim-curve test (:mod:`dpaudit.bounds.claim_curve`) holds one observed point
(FPR upper limit, FNR upper limit) against the claim's trade-off curve f_claim: every test
of a mechanism that meets the claim has FNR ≥ f_claim(FPR), so a point strictly below the
curve refutes the claim. This module runs that test round by round and may stop at any
round, with the level held under continuous monitoring.

The construction:

- **Round 0 chooses the thresholds and is never counted.** A fixed small grid of FPR
  levels (:data:`FPR_LEVELS`, one per half decade) is located on round 0's negative
  scores: threshold t_j is the score that round 0's negatives exceed at about rate α_j.
  A violation of a subsampled mechanism's curve may live anywhere from the middle of the
  curve to a far tail, and round 0 is too small to tell where: several thresholds are
  tested at once instead of one guessed.
- **Counted rounds.** At each threshold t_j, FPR_j and FNR_j are Bernoulli rates of the
  counted trials (t_j is independent of them), and their upper limits u0_j(n), u1_j(n)
  are the beta-binomial mixture confidence sequences of :func:`dpaudit.sequential
  .rate_upper_limit` (Robbins 1970, §3; Howard, Ramdas, McAuliffe, Sekhon 2021, Ann.
  Statist. 49(2), Prop. 7 with Ville's inequality, Eq. (6)), each valid at every round
  at once; their running minima are as valid (the same event).
- **The union bound**, written out: with K distinct thresholds there are 2K one-sided
  limits. Each is given 1 − (1 − level)/(2K), so all 2K hold at every round at once with
  probability ≥ level. On that event, a mechanism that meets the claim has, at every
  threshold and every round, u1_j ≥ FNR_j ≥ f_claim(FPR_j) ≥ f_claim(u0_j) (f_claim is
  non-increasing): no point (u0_j, u1_j) is ever strictly below the curve. So
  "violation" (some u1_j < f_claim(u0_j) at some round) is a false alarm with probability
  ≤ 1 − level, however the rounds are monitored and whenever the audit stops.
- **Its share.** ``level`` is the verdict's per-bound level: the sequential test takes the
  one share the fixed design's claim-curve comparison takes (:mod:`dpaudit.dpsgd.summary`),
  beside the ε and μ shares.

A curve given as a lower envelope (an accountant's PLD profile on a grid, Dong, Roth, Su
2022 Prop. 2.12) lies below the true one, so a point below the envelope is below the true
curve too: the test stays valid.

Pure functions and a small stateful test fed one round at a time; numpy/scipy, no torch,
no I/O.

References:
    Robbins (1970), "Statistical methods related to the law of the iterated logarithm",
    Ann. Math. Statist. 41(5), §3 (mixture martingales).
    Howard, Ramdas, McAuliffe, Sekhon (2021), "Time-uniform, nonparametric, nonasymptotic
    confidence sequences", Ann. Statist. 49(2), Eq. (6) (Ville's inequality), Prop. 7.
    Dong, Roth, Su (2022), "Gaussian Differential Privacy", JRSS-B 84(1),
    arXiv:1905.02383v3, Prop. 2.8 (post-processing raises the curve), Prop. 2.12.
    Nasr et al. (2023), "Tight auditing of differentially private machine learning", §4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import special

from dpaudit.accounting import dpsgd_event, epsilon
from dpaudit.bounds import EpsilonBound
from dpaudit.bounds.claim_curve import (
    SIGMA_STEPS_PER_DOUBLING,
    ClaimCurve,
    dpsgd_claim,
    effective_noise_multiplier,
)
from dpaudit.errors import DpauditError, check_choice, check_in_interval, check_integer
from dpaudit.sequential import RoundPoint, feed_rounds, rate_upper_limit, tuned_concentration
from dpaudit.stats import ConfidenceInterval
from dpaudit.theory import gdp_epsilon
from dpaudit.theory.whitebox import mixture_log_likelihood_ratio

__all__ = [
    "CURVE_METHOD",
    "FPR_LEVELS",
    "RUN_SAMPLINGS",
    "CurvePlan",
    "CurvePoint",
    "CurveRule",
    "RunSampling",
    "SequentialCurveTest",
    "curve_path",
    "curve_thresholds",
    "dpsgd_curve_bound",
    "dpsgd_curve_rule",
    "dpsgd_decision_sigma",
    "plan_sequential_curve",
    "shuffled_dpsgd_scores",
    "steps_per_epoch",
    "whitebox_dpsgd_scores",
]

#: The FPR levels whose thresholds round 0 locates: one per half decade from 1 % to 30 %.
#: Fixed before any data (round 0 only places them), so K = 4 at most.
FPR_LEVELS: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3)
#: The method label of a sequential claim-curve bound.
CURVE_METHOD = "claim-curve-cs"

#: How a simulated run forms its batches: Poisson sampling (what the claim accounts) or
#: shuffling into fixed batches (each record once per epoch).
RunSampling = Literal["poisson", "shuffled"]
RUN_SAMPLINGS: tuple[RunSampling, ...] = ("poisson", "shuffled")


# ------------------------------------------------------------------------- the rule


@dataclass(frozen=True)
class CurveRule:
    """When a sequential claim-curve test stops.

    Attributes:
        curve: the trade-off curve a point must lie strictly below for a violation.
        level: the level at which the 2K limits hold jointly, over every round at once
            (the verdict's per-bound level for an in-verdict comparison).
        fpr_levels: the FPR levels whose thresholds round 0 locates.
        tuned_trials: counted trials per arm near which the limits are tightest.
    """

    curve: ClaimCurve
    level: float
    fpr_levels: tuple[float, ...] = FPR_LEVELS
    tuned_trials: int = 500

    def __post_init__(self) -> None:
        check_in_interval("level", self.level, 0.0, 1.0, low_open=True, high_open=True)
        check_integer("tuned_trials", self.tuned_trials, low=1)
        if not self.fpr_levels or any(not 0.0 < a < 1.0 for a in self.fpr_levels):
            raise DpauditError(
                "The 'fpr_levels' of a sequential claim-curve test must be a non-empty list "
                f"of rates in (0, 1). Got {self.fpr_levels!r} instead."
            )


def curve_thresholds(negatives: Any, fpr_levels: Sequence[float]) -> np.ndarray:
    """The distinct thresholds of the tests ``s ≥ t`` that round 0's negatives exceed at
    about the given rates: t_j = the (⌊α_j·n0⌋ + 1)-th largest of the n0 negative scores,
    so that at least that many (a share just above α_j) reach it; sorted increasing (the
    largest FPR level first).

    Any rule is valid here (round 0 is never counted); duplicates are merged so that the
    union bound counts only the tests made. Scores that are not finite place no threshold.

    Raises:
        DpauditError: round 0 has no finite negative score.
    """
    given = np.asarray(negatives, dtype=float).reshape(-1)
    neg = np.sort(given[np.isfinite(given)])
    if neg.size == 0:
        raise DpauditError(
            "A sequential claim-curve test places its thresholds on round 0's negative "
            f"scores, and none of its {given.size} is a finite number."
        )
    n0 = neg.size
    index = [max(0, n0 - (math.floor(a * n0) + 1)) for a in fpr_levels]
    return np.unique(neg[index])


# ------------------------------------------------------------------------- the path


@dataclass(frozen=True)
class CurvePoint(RoundPoint):
    """The state of a sequential claim-curve test after one counted round.

    The fields of :class:`~dpaudit.sequential.RoundPoint` describe the threshold whose
    point lies furthest below the curve (in probit units); ``value`` is that margin,
    Φ⁻¹(f(u0)) − Φ⁻¹(u1), floored at 0 (> 0 exactly when the point is below the curve).

    Attributes:
        best: index of that threshold among :attr:`SequentialCurveTest.thresholds`.
        curve_at_fpr: f(u0) at that threshold.
        limits: per threshold, ``[fpr_high, fnr_high]`` (running minima).
    """

    best: int = 0
    curve_at_fpr: float = 1.0
    limits: tuple[tuple[float, float], ...] = field(default=())


def _margins(curve: ClaimCurve, u0: np.ndarray, u1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """f(u0) and the probit margin Φ⁻¹(f(u0)) − Φ⁻¹(u1) (−inf where f(u0) = 0 or u1 = 1:
    nothing lies below a zero curve, and an upper limit of 1 says nothing)."""
    f = curve(u0)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = special.ndtri(f) - special.ndtri(u1)
    m = np.where(np.isnan(m) | (f <= 0.0) | (u1 >= 1.0), -np.inf, m)
    return f, m


class SequentialCurveTest:
    """A sequential claim-curve test fed one round at a time.

    Round 0 places the thresholds (:func:`curve_thresholds`) and centres each limit's
    prior on its round-0 rate; every later round is counted at those thresholds, and
    after each the 2K anytime-valid upper limits (each at 1 − (1 − level)/(2K): all hold
    jointly at ``level`` by the union bound, at every round at once) are held against
    the curve.
    """

    def __init__(self, negatives: Any, positives: Any, rule: CurveRule) -> None:
        neg0, pos0 = np.asarray(negatives, dtype=float), np.asarray(positives, dtype=float)
        if pos0.size == 0:
            raise DpauditError("A sequential claim-curve test needs positive scores on round 0.")
        self.rule = rule
        self.thresholds = curve_thresholds(neg0, rule.fpr_levels)
        k = self.thresholds.size
        # The union bound over 2K one-sided limits (FPR and FNR at each threshold).
        self.rate_level = 1.0 - (1.0 - rule.level) / (2.0 * k)
        self.concentration = tuned_concentration(rule.tuned_trials, self.rate_level)
        fp0 = (neg0[:, None] >= self.thresholds[None, :]).sum(axis=0)
        fn0 = (pos0[:, None] < self.thresholds[None, :]).sum(axis=0)
        # Each prior centred on its round-0 estimate, kept off 0 and 1.
        self.prior_fpr = (fp0 + 0.5) / (neg0.size + 1.0)
        self.prior_fnr = (fn0 + 0.5) / (pos0.size + 1.0)
        self.round = 0
        self.trials = max(neg0.size, pos0.size)
        self.fp = np.zeros(k, dtype=np.int64)
        self.fn = np.zeros(k, dtype=np.int64)
        self.negatives = self.positives = 0
        self.fpr_high = np.ones(k)
        self.fnr_high = np.ones(k)

    def _limit(self, errors: int, trials: int, prior: float) -> float:
        return rate_upper_limit(
            int(errors),
            trials,
            level=self.rate_level,
            prior_mean=float(prior),
            prior_concentration=self.concentration,
        )

    def add(self, negatives: Any, positives: Any, *, last: bool = False) -> CurvePoint:
        """Count one more round; ``last``: it is the last round allowed (the cap)."""
        neg, pos = np.asarray(negatives, dtype=float), np.asarray(positives, dtype=float)
        t = self.thresholds
        self.round += 1
        self.fp += (neg[:, None] >= t[None, :]).sum(axis=0)
        self.fn += (pos[:, None] < t[None, :]).sum(axis=0)
        self.negatives += neg.size
        self.positives += pos.size
        self.trials += max(neg.size, pos.size)
        for j in range(t.size):
            # Running minima: the intersection of each sequence so far (the same event).
            self.fpr_high[j] = min(
                self.fpr_high[j], self._limit(self.fp[j], self.negatives, self.prior_fpr[j])
            )
            self.fnr_high[j] = min(
                self.fnr_high[j], self._limit(self.fn[j], self.positives, self.prior_fnr[j])
            )
        f, margin = _margins(self.rule.curve, self.fpr_high, self.fnr_high)
        j = int(np.argmax(margin))
        below = bool(self.fnr_high[j] < f[j])
        decision = "violation" if below else ("cap" if last else "continue")
        return CurvePoint(
            round=self.round,
            trials=self.trials,
            fp=int(self.fp[j]),
            negatives=self.negatives,
            fn=int(self.fn[j]),
            positives=self.positives,
            fpr_high=float(self.fpr_high[j]),
            fnr_high=float(self.fnr_high[j]),
            value=float(max(0.0, margin[j])) if np.isfinite(margin[j]) else 0.0,
            decision=decision,
            best=j,
            curve_at_fpr=float(f[j]),
            limits=tuple(
                (float(a), float(b)) for a, b in zip(self.fpr_high, self.fnr_high, strict=True)
            ),
        )


def curve_path(
    rounds: Sequence[tuple[Any, Any]], rule: CurveRule, *, last_round: int | None = None
) -> tuple[np.ndarray, list[CurvePoint]]:
    """Run the sequential claim-curve test over stored rounds; stop at the first decision.

    Args:
        rounds: ``(negative scores, positive scores)`` per round; round 0 places the
            thresholds and is never counted.
        rule: the curve, the level and the threshold grid.
        last_round: index of the last round allowed (the cap); None: no round is.

    Returns:
        ``(thresholds, path)``: one :class:`CurvePoint` per counted round up to and
        including the first that is not ``"continue"``.

    Raises:
        DpauditError: no round given.
    """
    if not rounds:
        raise DpauditError("A sequential test needs at least its selection round (round 0).")
    test = SequentialCurveTest(*rounds[0], rule)
    return test.thresholds, feed_rounds(test, rounds, last_round=last_round)


# ------------------------------------------------------------------ DP-SGD's curve


def dpsgd_decision_sigma(noise_multiplier: float) -> float:
    """The noise multiplier whose curve a sequential DP-SGD test must be below to stop.

    σ·2^(−½/32): the largest σ below the claimed σ on the grid of
    :func:`dpaudit.bounds.claim_curve.effective_noise_multiplier`. Its curve lies below the
    claim's (Dong, Roth, Su 2022, Prop. 2.8), so a point below it is below the claim's
    curve too; and the effective noise multiplier σ′ of that point is then below σ, so
    the ε of σ′ exceeds the accountant's ε exactly when the test stops with a violation
    (as in the fixed design, a point between the two curves is lost: one grid step,
    about 1.1 % of σ, never a false alarm).
    """
    return float(noise_multiplier) * 2.0 ** (-0.5 / SIGMA_STEPS_PER_DOUBLING)


def dpsgd_curve_rule(
    *, noise_multiplier: float, sampling_rate: float, steps: int, level: float, tuned_trials: int
) -> CurveRule:
    """The rule of a sequential test of DP-SGD(σ, q, T)'s trade-off curve: the PLD curve
    of :func:`dpsgd_decision_sigma` (σ) with the same q and T."""
    curve = dpsgd_claim(
        noise_multiplier=dpsgd_decision_sigma(noise_multiplier),
        sampling_rate=sampling_rate,
        steps=steps,
    )
    return CurveRule(curve=curve, level=level, tuned_trials=tuned_trials)


def dpsgd_curve_bound(
    thresholds: np.ndarray,
    path: Sequence[CurvePoint],
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    level: float,
    rounds: int,
    stopped_because: str,
) -> tuple[EpsilonBound, float]:
    """The bound a sequential DP-SGD claim-curve test stopped with, as an ε to hold
    against the accountant's (the fixed design's reading,
    :func:`dpaudit.bounds.claim_curve.claim_curve_epsilon`), and that accountant ε at ``delta``.

    Its value is the accountant's ε at δ of the effective noise multiplier σ′ of the last
    point when the test stopped with a violation (σ′ < σ, so the value exceeds the
    accountant's ε of σ), else 0. The conclusion "this run is no DP-SGD(σ, q, T)" assumes
    nothing; the value reads σ′ through the claimed q and T (``details["assumption"]``).

    Raises:
        DpauditError: an empty path.
    """
    if not path:
        raise DpauditError("A sequential claim-curve bound needs at least one counted round.")
    d = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    accountant = _dpsgd_epsilon(noise_multiplier, sampling_rate, steps, d)
    point = path[-1]
    details: dict[str, Any] = {
        "sequential": True,
        "rounds": rounds,
        "selection": "round 0 (never counted) placed the thresholds",
        "stopped_because": stopped_because,
        "thresholds": [float(t) for t in thresholds],
        "fpr_levels": list(FPR_LEVELS),
        "limits_per_threshold": [list(x) for x in point.limits],
        "claim": f"DP-SGD σ = {noise_multiplier:.4g}, q = {sampling_rate:g}, T = {steps}",
        "decision_noise_multiplier": dpsgd_decision_sigma(noise_multiplier),
        "below_claim_curve": point.decision == "violation",
        "claim_curve_at_fpr": point.curve_at_fpr,
        "margin_probit": point.value,
        "limits": (
            "one-sided beta-binomial mixture confidence sequences for FPR and FNR at each of "
            f"{len(thresholds)} thresholds, each at 1 - (1 - level)/{2 * len(thresholds)}, "
            "valid over every round at once (Robbins 1970; Howard et al. 2021, Ann. "
            "Statist. 49(2))"
        ),
    }
    value = 0.0
    if point.decision == "violation":
        eff = effective_noise_multiplier(
            point.fpr_high,
            point.fnr_high,
            reference=noise_multiplier,
            sampling_rate=sampling_rate,
            steps=steps,
            delta=d,
            confidence_level=level,
        )
        # The point is below the curve of dpsgd_decision_sigma(σ), a member of σ′'s grid,
        # so σ′ is at most that; the minimum guards the bisection against a non-monotone
        # step of the numerically accounted curves.
        decision_sigma = dpsgd_decision_sigma(noise_multiplier)
        sigma = decision_sigma if eff.sigma is None else min(eff.sigma, decision_sigma)
        value = _dpsgd_epsilon(sigma, sampling_rate, steps, d)
        details.update(
            effective_noise_multiplier=sigma,
            effective_epsilon=value,
            assumption=eff.assumption,
        )
    bound = EpsilonBound(
        value=float(value),
        confidence_level=level,
        delta=d,
        method=CURVE_METHOD,
        threshold="sequential",
        validity="rigorous-multi-run",
        fpr=ConfidenceInterval(0.0, point.fpr_high),
        fnr=ConfidenceInterval(0.0, point.fnr_high),
        threshold_value=float(thresholds[point.best]),
        counts={
            "fp": point.fp,
            "negatives": point.negatives,
            "fn": point.fn,
            "positives": point.positives,
        },
        details=details,
    )
    return bound, accountant


def _dpsgd_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    if q == 1.0:
        # full batch: exactly √T/σ-GDP, whose ε at δ is closed-form (Dong, Roth, Su 2022,
        # Cor. 2.13)
        return float(gdp_epsilon(math.sqrt(steps) / sigma, delta))
    event = dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=steps)
    return float(epsilon(event, delta=delta))


# ------------------------------------------------------------------------- planning


def whitebox_dpsgd_scores(
    rng: np.random.Generator,
    models: int,
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
) -> tuple[np.ndarray, np.ndarray]:
    """White-box canary scores of ``models`` runs per arm, drawn from the exact law of T
    Poisson DP-SGD steps with a Dirac gradient canary (C = 1): per step the canary's
    coordinate is N(0, σ²) without the canary and N(b, σ²), b ~ Bernoulli(q), with it;
    the score is the sum of the per-step log-likelihood ratios at that σ
    (:func:`dpaudit.theory.whitebox.mixture_log_likelihood_ratio`), the Neyman–Pearson test of
    the transcript.

    Returns:
        ``(negative scores, positive scores)``.
    """
    out = rng.normal(0.0, noise_multiplier, (models, steps))
    inc = rng.normal(0.0, noise_multiplier, (models, steps))
    inc += rng.random((models, steps)) < sampling_rate

    def score(x: np.ndarray) -> np.ndarray:
        llr = mixture_log_likelihood_ratio(
            x, sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, clipping_norm=1.0
        )
        return np.asarray(llr.sum(axis=1), dtype=float)

    return score(out), score(inc)


def steps_per_epoch(sampling_rate: float) -> int:
    """Steps in one epoch of a run that shuffles n records into batches of b = n·q:
    ⌊1/q⌋ = ⌊n/b⌋ (the remainder of n − ⌊n/b⌋·b records dropped, as a data loader with
    ``drop_last`` does), the rule of dpaudit's training engine
    (``dpaudit.training.sampling.steps_from_rate``, with its 1e-9 for rates such as 0.01;
    not imported: the statistics core stands below the engine)."""
    q = check_in_interval("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    return max(1, math.floor(1.0 / q + 1e-9))


def shuffled_dpsgd_scores(
    rng: np.random.Generator,
    models: int,
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
) -> tuple[np.ndarray, np.ndarray]:
    """White-box canary scores of ``models`` runs per arm that SHUFFLE fixed batches while
    the claim (and the score) assume Poisson sampling at rate q, drawn from the exact law.

    Each epoch shuffles the n records and cuts m = :func:`steps_per_epoch` (q) batches of
    b = n·q from the permutation: the canary's rank is uniform over the n places, so it is
    in batch i (step i of the epoch) with probability b/n = q for each i < m, and in the
    dropped remainder with probability 1 − m·q (0 when 1/q is an integer); it is never in
    two batches of one epoch. A last, partial epoch of r < m steps runs the first r
    batches of its shuffle. Per step the canary's coordinate is N(0, σ²) without the
    canary and N(1, σ²) at its step (C = 1). Each step's observation thus has the Poisson
    run's marginal law, (1 − q)N(0, σ²) + qN(1, σ²); only the joint law differs (at most
    one canary step per epoch instead of Binomial(m, q)). The score is the one dpaudit
    computes from what was accounted: the sum of the per-step log-likelihood ratios at the
    claimed q and σ (:func:`dpaudit.theory.whitebox.mixture_log_likelihood_ratio`).

    Returns:
        ``(negative scores, positive scores)``.
    """
    q = check_in_interval("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    m = steps_per_epoch(q)
    epochs = -(-steps // m)
    out = rng.normal(0.0, noise_multiplier, (models, steps))
    inc = rng.normal(0.0, noise_multiplier, (models, steps))
    # the canary's batch in each epoch's shuffle: ⌊rank/b⌋ with rank/n uniform on [0, 1)
    batch = np.floor(rng.random((models, epochs)) / q).astype(np.int64)
    at = batch + m * np.arange(epochs)[None, :]
    rows = np.broadcast_to(np.arange(models)[:, None], at.shape)
    ran = (batch < m) & (at < steps)
    inc[rows[ran], at[ran]] += 1.0

    def score(x: np.ndarray) -> np.ndarray:
        llr = mixture_log_likelihood_ratio(
            x, sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, clipping_norm=1.0
        )
        return np.asarray(llr.sum(axis=1), dtype=float)

    return score(out), score(inc)


@dataclass(frozen=True)
class CurvePlan:
    """What a sequential claim-curve test of DP-SGD is expected to cost, by seeded
    simulation of the exact white-box law (:func:`plan_sequential_curve`).

    Attributes:
        median_trials, mean_trials, p95_trials: models per arm at stopping (round 0
            included; a repeat stopped by the cap counts the cap).
        detected: share of repeats that stopped with a violation.
        noise_multiplier: the claimed σ (whose curve is tested).
        run_noise_multiplier: the σ the simulated run has.
        sampling_rate, steps: q and T of both.
        level, round_trials, max_trials, repeats, seed: the design and the simulation.
        run_sampling: how the simulated run forms its batches (``"poisson"``, as the
            claim, or ``"shuffled"`` fixed batches).
    """

    median_trials: float
    mean_trials: float
    p95_trials: float
    detected: float
    noise_multiplier: float
    run_noise_multiplier: float
    sampling_rate: float
    steps: int
    level: float
    round_trials: int
    max_trials: int
    repeats: int
    seed: int
    run_sampling: RunSampling = "poisson"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_sequential_curve(
    *,
    noise_multiplier: float,
    run_noise_multiplier: float | None = None,
    sampling_rate: float,
    steps: int,
    level: float = 0.95,
    round_trials: int = 50,
    max_trials: int = 5000,
    repeats: int = 20,
    seed: int = 0,
    run_sampling: RunSampling = "poisson",
) -> CurvePlan:
    """Models per arm a sequential claim-curve test of DP-SGD(σ, q, T) needs to refute a
    run that has ``run_noise_multiplier`` instead (None: σ itself), or that shuffles fixed
    batches (``run_sampling="shuffled"``), white-box with a Dirac canary, simulated from
    the exact law (:func:`whitebox_dpsgd_scores`, :func:`shuffled_dpsgd_scores`; seeded:
    the same call gives the same plan). The test is the audit's (:func:`dpsgd_curve_rule`,
    tuned for 20 rounds); the ε and μ tests that run beside it in an audit can only stop
    it sooner.

    Raises:
        DpauditError: a bad value.
    """
    sigma = check_in_interval(
        "noise_multiplier", noise_multiplier, 0.0, math.inf, low_open=True, high_open=True
    )
    run = check_in_interval(
        "run_noise_multiplier",
        sigma if run_noise_multiplier is None else run_noise_multiplier,
        0.0,
        math.inf,
        low_open=True,
        high_open=True,
    )
    sampling = check_choice("run_sampling", run_sampling, RUN_SAMPLINGS)
    scores = shuffled_dpsgd_scores if sampling == "shuffled" else whitebox_dpsgd_scores
    q = check_in_interval("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    t = check_integer("steps", steps, low=1)
    size = check_integer("round_trials", round_trials, low=2)
    cap_rounds = max(2, math.ceil(check_integer("max_trials", max_trials, low=1) / size))
    check_integer("repeats", repeats, low=1)
    rule = dpsgd_curve_rule(
        noise_multiplier=sigma, sampling_rate=q, steps=t, level=level, tuned_trials=20 * size
    )
    used = np.zeros(repeats)
    found = 0
    for i in range(repeats):
        rng = np.random.default_rng([seed, i])

        def draw(rng: np.random.Generator = rng) -> tuple[np.ndarray, np.ndarray]:
            return scores(rng, size, noise_multiplier=run, sampling_rate=q, steps=t)

        test = SequentialCurveTest(*draw(), rule)
        while True:
            point = test.add(*draw(), last=test.round + 1 >= cap_rounds - 1)
            if point.decision != "continue":
                break
        used[i] = point.trials
        found += point.decision == "violation"
    return CurvePlan(
        median_trials=float(np.median(used)),
        mean_trials=float(np.mean(used)),
        p95_trials=float(np.quantile(used, 0.95)),
        detected=found / repeats,
        noise_multiplier=sigma,
        run_noise_multiplier=run,
        sampling_rate=q,
        steps=t,
        level=float(level),
        round_trials=size,
        max_trials=cap_rounds * size,
        repeats=repeats,
        seed=seed,
        run_sampling=sampling,
    )
