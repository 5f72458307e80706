"""Tests against the claim's own trade-off curve, and the effective noise multiplier.

A privacy claim is more than its ε at one δ or its μ: an accountant knows the whole
privacy profile δ(ε) of what it accounts, and so the whole trade-off curve f_claim of
the mechanism. Every test of "canary out" against "canary in" of a mechanism that meets
the claim has FNR ≥ f_claim(FPR). An observed point (FPR upper limit, FNR upper limit)
strictly below f_claim therefore refutes the claim, with no GDP assumption and no loss to
the (ε, δ) region's corners.

The test's level: the two one-sided Clopper–Pearson upper limits u0 ≥ FPR and u1 ≥ FNR
each fail with probability (1 − c)/2, so both hold jointly with probability ≥ c (union
bound). On that event, a mechanism that meets the claim has FNR ≥ f_claim(FPR) ≥
f_claim(u0) (f_claim is non-increasing), so u1 ≥ FNR ≥ f_claim(u0): a point with
u1 < f_claim(u0) occurs with probability ≤ 1 − c. The threshold is chosen as for the ε
and μ bounds (:mod:`dpaudit.bounds`): on a split of the trials, or with limits that hold
for every threshold at once (Bonferroni); the machinery is that module's.

The effective noise multiplier σ′ reads the same observation as a statement on DP-SGD:
the trade-off curve of T Poisson-subsampled Gaussian steps rises with σ (more noise is a
post-processing), so a point below the curve of σ′ lies below the curve of every σ ≥ σ′.
"This run is no more private than DP-SGD with noise multiplier σ′ (same q and T)" holds
at the test's level; it assumes the claimed q and T, which the grey-box checks test.

Pure functions of arrays and numbers; no state beyond a cache of accounted profiles, no
I/O, no torch.

References:
    Dong, Roth, Su (2022), "Gaussian Differential Privacy", JRSS-B 84(1),
    arXiv:1905.02383v3, Prop. 2.12 (a trade-off function from a collection of (ε, δ(ε))
    guarantees: f(α) = sup_ε max(0, 1 − δ(ε) − e^ε α, e^{−ε}(1 − δ(ε) − α))), Prop. 2.8
    (post-processing raises the curve), Def. 2.6 (G_μ).
    Kairouz, Oh, Viswanath (2015), Thm. 2.1 (the (ε, δ) region).
    Nasr et al. (2023), "Tight auditing of differentially private machine learning",
    §4 (auditing against the exact trade-off curve of DP-SGD).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from dpaudit import accounting
from dpaudit.bounds import (
    THRESHOLD_STRATEGIES,
    EpsilonBound,
    MuBound,
    _rate_level,
    _split_samples,
)
from dpaudit.bounds.threshold_search import best_threshold
from dpaudit.errors import (
    DpauditError,
    InsufficientTrialsError,
    check_choice,
    check_in_interval,
    check_integer,
)
from dpaudit.stats import ConfidenceInterval, check_confidence_level, clopper_pearson
from dpaudit.theory import (
    gdp_epsilon,
    tradeoff_dp,
    tradeoff_gdp,
    tradeoff_laplace,
    tradeoff_randomized_response,
)
from dpaudit.tradeoff import GridCounts, TradeoffCurve, as_scores

__all__ = [
    "ClaimCurve",
    "ClaimCurveTest",
    "Criterion",
    "EffectiveNoise",
    "claim_curve_epsilon",
    "claim_curve_parameter",
    "claim_curve_test",
    "claim_curve_test_from_grid",
    "declared_curve_bound",
    "dp_claim",
    "dpsgd_claim",
    "effective_noise_multiplier",
    "gdp_claim",
    "gdp_curve_parameter",
    "laplace_claim",
    "laplace_curve_parameter",
    "laplace_epsilon_of_claim",
    "randomized_response_claim",
    "tradeoff_from_profile",
]

#: The ε grid on which an accountant's profile is read (step 0.01 up to 30): a grid
#: takes the supremum of Prop. 2.12 over fewer ε, so the curve it gives lies BELOW the
#: true one and a point below it is below the true curve too (the test stays valid).
PROFILE_EPSILONS: NDArray[np.float64] = np.round(np.arange(0.0, 30.0 + 1e-9, 0.01), 10)
#: Resolution of the σ′ search: the grid σ_claim·2^((k + ½)/32), about 2.2 % per step.
SIGMA_STEPS_PER_DOUBLING = 32


# ----------------------------------------------------------------------------- curves


def tradeoff_from_profile(
    alpha: ArrayLike, epsilons: ArrayLike, deltas: ArrayLike
) -> NDArray[np.float64]:
    """The trade-off function of a privacy profile: Dong, Roth, Su 2022, Prop. 2.12.

    f(α) = sup_ε max(0, 1 − δ(ε) − e^ε α, e^{−ε}(1 − δ(ε) − α)), the sup over the given
    ε (each (ε, δ(ε)) pair is one (ε, δ)-DP guarantee, whose region is Kairouz, Oh,
    Viswanath's). Over a finite grid the result is a lower envelope of the true curve
    (fewer guarantees, a weaker constraint); with δ(ε) from a pessimistic accountant it
    is lower still. Both err on the side of not finding a violation.

    Args:
        alpha: FPR values in [0, 1], any shape.
        epsilons: 1-D grid of ε ≥ 0.
        deltas: δ(ε) on that grid, in [0, 1].

    Returns:
        f(α), the shape of ``alpha``.
    """
    a = np.asarray(alpha, dtype=float)
    eps = np.asarray(epsilons, dtype=float).reshape(-1)
    dlt = np.clip(np.asarray(deltas, dtype=float).reshape(-1), 0.0, 1.0)
    if eps.shape != dlt.shape or eps.size == 0 or np.any(eps < 0) or np.any(np.isnan(eps)):
        raise DpauditError(
            "The 'epsilons' and 'deltas' parameters must be 1-D arrays of one length, with "
            f"ε ≥ 0. Got shapes {eps.shape} and {dlt.shape} instead."
        )
    flat = np.clip(a.reshape(-1), 0.0, 1.0)
    out = np.zeros(flat.shape)
    grow, shrink, rest = np.exp(eps), np.exp(-eps), 1.0 - dlt
    # Chunks keep the α × ε table below ~4 M entries.
    step = max(1, 4_000_000 // eps.size)
    for i in range(0, flat.size, step):
        x = flat[i : i + step, None]
        lines = np.maximum(rest - grow * x, shrink * (rest - x))
        out[i : i + step] = np.maximum(0.0, lines.max(axis=1))
    return out.reshape(a.shape)


@dataclass(frozen=True)
class ClaimCurve:
    """A claim's trade-off function f_claim, with what it is the curve of.

    Attributes:
        name: what the claim is, e.g. ``"DP-SGD σ = 1, q = 0.25, T = 8 (PLD)"``.
        f: the curve, f(α) elementwise on arrays of FPR values; non-increasing.
        exact: whether f is the exact curve (True) or a lower envelope of it (an
            accountant's pessimistic profile on a grid).
        parameters: the numbers that define it.
    """

    name: str
    f: Callable[[np.ndarray], np.ndarray] = field(repr=False, compare=False)
    exact: bool = True
    parameters: dict[str, float] = field(default_factory=dict)

    def __call__(self, alpha: ArrayLike) -> NDArray[np.float64]:
        return np.asarray(self.f(np.asarray(alpha, dtype=float)), dtype=float)


def gdp_claim(mu: float) -> ClaimCurve:
    """μ-GDP: G_μ(α) = Φ(Φ⁻¹(1 − α) − μ) (Dong, Roth, Su 2022, Def. 2.6)."""
    m = check_in_interval("mu", mu, 0.0, math.inf, high_open=True)
    return ClaimCurve(f"{m:g}-GDP", lambda a: np.asarray(tradeoff_gdp(a, mu=m)), True, {"mu": m})


def dp_claim(epsilon: float, delta: float = 0.0) -> ClaimCurve:
    """(ε, δ)-DP: f_{ε,δ} (Kairouz, Oh, Viswanath 2015, Thm. 2.1)."""
    e = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    return ClaimCurve(
        f"({e:g}, {d:g})-DP",
        lambda a: np.asarray(tradeoff_dp(a, epsilon=e, delta=d)),
        True,
        {"epsilon": e, "delta": d},
    )


def laplace_claim(epsilon: float) -> ClaimCurve:
    """The Laplace mechanism of scale Δ/ε: its exact curve."""
    e = check_in_interval("epsilon", epsilon, 0.0, math.inf, low_open=True, high_open=True)
    return ClaimCurve(
        f"Laplace ε = {e:g}",
        lambda a: np.asarray(tradeoff_laplace(a, epsilon=e)),
        True,
        {"epsilon": e},
    )


def randomized_response_claim(p: float) -> ClaimCurve:
    """Binary randomized response reporting the true bit with probability p."""
    pp = check_in_interval("p", p, 0.5, 1.0, high_open=True)
    return ClaimCurve(
        f"randomized response p = {pp:g}",
        lambda a: np.asarray(tradeoff_randomized_response(a, p=pp)),
        True,
        {"p": pp},
    )


@functools.lru_cache(maxsize=256)
def _dpsgd_profile(sigma: float, q: float, steps: int) -> NDArray[np.float64]:
    # One PLD per (σ, q, T): about a second each, so the σ′ search and repeated audits
    # reuse them. The accountant (dp-accounting, with scipy.stats and scipy.optimize) is
    # loaded only here (dpaudit.accounting loads it on first use), so mechanism audits that
    # test other curves never load it.
    event = accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=steps)
    deltas: NDArray[np.float64] = accounting.privacy_profile(event, PROFILE_EPSILONS)
    deltas.setflags(write=False)
    return deltas


def dpsgd_claim(*, noise_multiplier: float, sampling_rate: float, steps: int) -> ClaimCurve:
    """The trade-off curve of T steps of DP-SGD: Poisson-subsampled Gaussian at rate q.

    For q = 1 (full batch) the run is exactly √T/σ-GDP and the curve is G_μ. Otherwise
    it is Prop. 2.12 of Dong, Roth, Su (2022) applied to dp-accounting's PLD profile on
    :data:`PROFILE_EPSILONS` (a lower envelope: a violation of it is a violation of the
    true curve).
    """
    sigma = check_in_interval(
        "noise_multiplier", noise_multiplier, 0.0, math.inf, low_open=True, high_open=True
    )
    q = check_in_interval("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    t = check_integer("steps", steps, low=1)
    params = {"noise_multiplier": sigma, "sampling_rate": q, "steps": float(t)}
    name = f"DP-SGD σ = {sigma:.4g}, q = {q:g}, T = {t}"
    if q == 1.0:
        mu = math.sqrt(t) / sigma
        return ClaimCurve(
            f"{name} (exact GDP)", lambda a: np.asarray(tradeoff_gdp(a, mu=mu)), True, params
        )
    deltas = _dpsgd_profile(sigma, q, t)
    return ClaimCurve(
        f"{name} (PLD profile)",
        lambda a: tradeoff_from_profile(a, PROFILE_EPSILONS, deltas),
        False,
        params,
    )


# ----------------------------------------------------------------------------- the test

#: A rule that chooses a threshold from its limits: ``criterion(fpr_high, fnr_high)``.
Criterion = Callable[[np.ndarray, np.ndarray], np.ndarray]


def laplace_curve_parameter(fpr_high: ArrayLike, fnr_high: ArrayLike) -> NDArray[np.float64]:
    """The largest ε₀ whose Laplace curve the point (u0, u1) lies below, elementwise.

    From the three pieces of the exact curve (:func:`dpaudit.theory.tradeoff_laplace`),
    each falling in ε₀: for u0 ≥ ½, ln((1 − u0)/u1); for u0 < ½, −ln(4·u0·u1) when
    u1 < ½ and ln((1 − u1)/u0) when u1 ≥ ½ (continuous across u0 = ½ and u1 = ½).
    Floored at 0; non-increasing in both limits, 0 at u1 = 1: a threshold rule for
    :func:`claim_curve_test`. (A point at u0 = 0 is capped at 700.)
    """
    u0 = np.clip(np.asarray(fpr_high, dtype=float), 0.0, 1.0)
    u1 = np.clip(np.asarray(fnr_high, dtype=float), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        right = np.log(1.0 - u0) - np.log(u1)
        middle = -np.log(4.0 * u0 * u1)
        top = np.log(1.0 - u1) - np.log(u0)
        out = np.where(u0 >= 0.5, right, np.where(u1 < 0.5, middle, top))
    return np.clip(np.nan_to_num(out, nan=0.0, posinf=700.0, neginf=0.0), 0.0, 700.0)


def gdp_curve_parameter(fpr_high: ArrayLike, fnr_high: ArrayLike) -> NDArray[np.float64]:
    """The largest μ whose G_μ the point (u0, u1) lies below: Φ⁻¹(1 − u0) − Φ⁻¹(u1),
    floored at 0 (capped at 80), elementwise: the μ lower bound's inequality
    (Dong, Roth, Su 2022, Def. 2.6), a threshold rule for :func:`claim_curve_test`."""
    u0 = np.clip(np.asarray(fpr_high, dtype=float), 0.0, 1.0)
    u1 = np.clip(np.asarray(fnr_high, dtype=float), 0.0, 1.0)
    out = -special.ndtri(u0) - special.ndtri(u1)
    return np.clip(np.nan_to_num(out, nan=0.0, posinf=80.0, neginf=0.0), 0.0, 80.0)


def _probit_margin(curve: ClaimCurve) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """How far (u0, u1) lies below the curve, in probit units: Φ⁻¹(f(u0)) − Φ⁻¹(u1),
    floored at 0. Non-increasing in both limits (f is non-increasing), ≥ 0, and 0 at
    u1 = 1, as :func:`dpaudit.bounds.threshold_search.best_threshold` requires. It is > 0
    exactly when u1 < f(u0): the violation event. Probit units weigh a point near a
    corner (small rates) as much as one in the middle."""

    def margin(u0: np.ndarray, u1: np.ndarray) -> np.ndarray:
        f = curve(np.asarray(u0, dtype=float))
        with np.errstate(divide="ignore", invalid="ignore"):
            m = special.ndtri(f) - special.ndtri(np.asarray(u1, dtype=float))
        m = np.where(np.isnan(m), 0.0, m)
        # f = 0 gives −inf: no point lies below a zero curve.
        return np.maximum(0.0, np.where(np.isinf(m) & (m < 0), 0.0, m))

    return margin


@dataclass(frozen=True)
class ClaimCurveTest:
    """An observed point held against a claim's trade-off curve.

    Attributes:
        violated: whether the point (FPR upper limit, FNR upper limit) lies strictly
            below the curve: the claim is then false at ``confidence_level``.
        margin: Φ⁻¹(f_claim(u0)) − Φ⁻¹(u1), floored at 0 (> 0 exactly when violated).
        claim: the curve's name.
        curve_at_fpr: f_claim(u0).
        confidence_level: the level at which the two limits hold jointly.
        threshold: ``"split"`` or ``"bonferroni"``.
        fpr: the FPR interval whose ``high`` is u0.
        fnr: the FNR interval whose ``high`` is u1.
        threshold_value: the score threshold t of the test ``s ≥ t``.
        counts: fp, negatives, fn, positives.
        details: split sizes or the Bonferroni levels.
    """

    violated: bool
    margin: float
    claim: str
    curve_at_fpr: float
    confidence_level: float
    threshold: str
    fpr: ConfidenceInterval
    fnr: ConfidenceInterval
    threshold_value: float | None = field(default=None, repr=False)
    counts: dict[str, int] = field(default_factory=dict, repr=False)
    details: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "violated": self.violated,
            "margin": self.margin,
            "claim": self.claim,
            "curve_at_fpr": self.curve_at_fpr,
            "confidence_level": self.confidence_level,
            "threshold": self.threshold,
            "fpr_interval": [self.fpr.low, self.fpr.high],
            "fnr_interval": [self.fnr.low, self.fnr.high],
            "threshold_value": self.threshold_value,
            "counts": dict(self.counts),
            "validity": "rigorous-multi-run",
        }


def _need_trials(counted: int, tests: int, c: float) -> None:
    # A point below any curve needs u0 + u1 < 1 at least; with 0 errors in n the
    # limit is 1 − a^(1/n), a = (1 − c)/(2·tests), so u < ½ is the least requirement.
    a = (1.0 - c) / (2.0 * tests)
    if 1.0 - a ** (1.0 / max(counted, 1)) >= 0.5:
        needed = math.floor(math.log(a) / math.log(0.5)) + 1
        raise InsufficientTrialsError(
            f"Too few trials for any claim-curve violation: {counted} per hypothesis are "
            f"counted, at least {needed} are needed even for a perfect attack."
        )


def claim_curve_test(
    negative_scores: Any,
    positive_scores: Any,
    *,
    claim: ClaimCurve,
    confidence_level: float = 0.95,
    threshold: str = "split",
    seed: int | None = None,
    selection_fraction: float = 0.5,
    criterion: Criterion | None = None,
) -> ClaimCurveTest:
    """Whether the scores of independent trials put a point below the claim's curve.

    Args:
        negative_scores: scores of the trials under H0 (canary out).
        positive_scores: scores under H1 (canary in); larger means "H1".
        claim: the claimed trade-off curve (:func:`dpsgd_claim`, :func:`gdp_claim`, ...).
        confidence_level: c; the violation is a false alarm with probability ≤ 1 − c.
        threshold: ``"split"`` or ``"bonferroni"`` (as :func:`dpaudit.bounds.epsilon_lower_bound`).
        seed: seed of the split's permutation.
        selection_fraction: share of each sample that chooses t (``split`` only).
        criterion: the rule that chooses t, ``criterion(fpr_high, fnr_high)`` on arrays
            (default: the probit margin below the curve, 0 wherever the point is above
            it). It only chooses, so any rule keeps the level; it must be ≥ 0,
            non-increasing in both limits and 0 at ``fnr_high`` = 1
            (:func:`dpaudit.bounds.threshold_search.best_threshold`). A family's parameter
            (:func:`laplace_curve_parameter`, :func:`gdp_curve_parameter`) also ranks the
            thresholds whose points lie above the curve.

    Returns:
        :class:`ClaimCurveTest`.

    Raises:
        DpauditError: bad arguments or scores.
        InsufficientTrialsError: too few trials for any violation.
    """
    c = check_confidence_level(confidence_level)
    check_choice("threshold", threshold, THRESHOLD_STRATEGIES)
    neg = as_scores("negative_scores", negative_scores)
    pos = as_scores("positive_scores", positive_scores)
    margin = _probit_margin(claim)
    choose = margin if criterion is None else criterion
    if threshold == "split":
        frac = check_in_interval(
            "selection_fraction", selection_fraction, 0.0, 1.0, low_open=True, high_open=True
        )
        (sn, sp), (en, ep) = _split_samples(neg, pos, frac=frac, seed=seed)
        _need_trials(min(en.size, ep.size), 1, c)
        sel = TradeoffCurve.from_scores(sn, sp)
        # Any rule may choose t on the selection part (it is never counted); the
        # simultaneous limits penalise thin tails, as for the ε and μ bounds.
        best = best_threshold(
            sel,
            level_fpr=_rate_level(c, tests=sel.negatives + 1),
            level_fnr=_rate_level(c, tests=sel.positives + 1),
            bound=choose,
        )
        t = float(sel.thresholds[best.index])
        # Counted on the evaluation part only: t is independent of it, so each one-sided
        # limit holds at 1 − (1 − c)/2 and both jointly at c (union bound).
        level = _rate_level(c)
        fp, fn = int(np.sum(en >= t)), int(np.sum(ep < t))
        fpr = clopper_pearson(fp, en.size, confidence_level=level, alternative="less")
        fnr = clopper_pearson(fn, ep.size, confidence_level=level, alternative="less")
        counts = {"fp": fp, "negatives": int(en.size), "fn": fn, "positives": int(ep.size)}
        details: dict[str, Any] = {
            "selection_fraction": frac,
            "selection_negatives": int(sn.size),
            "selection_positives": int(sp.size),
            "seed": seed,
        }
    else:
        # Limits that hold for every threshold at once (union bound over the n0 + 1 and
        # n1 + 1 cut points; dpaudit.bounds._bonferroni_bounds writes down why), so the
        # best threshold keeps the level.
        _need_trials(min(neg.size, pos.size), max(neg.size, pos.size) + 1, c)
        curve = TradeoffCurve.from_scores(neg, pos)
        lf, ln = _rate_level(c, tests=neg.size + 1), _rate_level(c, tests=pos.size + 1)
        best = best_threshold(curve, level_fpr=lf, level_fnr=ln, bound=choose)
        i = best.index
        t = float(curve.thresholds[i])
        fpr = ConfidenceInterval(0.0, best.fpr_high)
        fnr = ConfidenceInterval(0.0, best.fnr_high)
        counts = {
            "fp": int(curve.fp[i]),
            "negatives": int(neg.size),
            "fn": int(curve.fn[i]),
            "positives": int(pos.size),
        }
        details = {
            "candidate_thresholds": int(curve.thresholds.size),
            "fpr_level": lf,
            "fnr_level": ln,
        }
    f_at = float(claim(np.array([fpr.high]))[0])
    value = float(margin(np.array([fpr.high]), np.array([fnr.high]))[0])
    return ClaimCurveTest(
        violated=bool(fnr.high < f_at),
        margin=value,
        claim=claim.name,
        curve_at_fpr=f_at,
        confidence_level=c,
        threshold=threshold,
        fpr=fpr,
        fnr=fnr,
        threshold_value=t,
        counts=counts,
        details=details,
    )


def claim_curve_test_from_grid(
    selection: GridCounts | None,
    evaluation: GridCounts,
    *,
    claim: ClaimCurve,
    confidence_level: float = 0.95,
    details: dict[str, Any] | None = None,
    criterion: Criterion | None = None,
) -> ClaimCurveTest:
    """:func:`claim_curve_test` from counts at a grid of thresholds fixed in advance, for
    trials streamed one work unit at a time (the rules of
    :func:`dpaudit.bounds.epsilon_and_mu_from_grid_split` and ``..._bonferroni``).

    With ``selection`` (``split``): the threshold is chosen on the selection counts alone
    and FP, FN are the evaluation counts at that grid row, each rate's one-sided limit at
    1 − (1 − c)/2. Without it (``bonferroni``): every grid row of ``evaluation`` is a
    candidate and each rate's limit is at 1 − (1 − c)/(2G), G the grid's size (union bound
    over the G thresholds fixed before these trials were counted; the two end rows give
    no violation whatever happens and need no share).

    Args:
        selection: the selection part's counts, or ``None`` for ``bonferroni``.
        evaluation: the counted part's counts, on the same grid.
        claim: the claimed trade-off curve.
        confidence_level: c; a violation is a false alarm with probability ≤ 1 − c.
        details: more details for the result (how the parts and the grid were drawn).
        criterion: the rule that chooses the threshold (as :func:`claim_curve_test`).

    Raises:
        DpauditError: bad arguments, counts on different grids.
        InsufficientTrialsError: too few counted trials for any violation.
    """
    c = check_confidence_level(confidence_level)
    margin = _probit_margin(claim)
    choose = margin if criterion is None else criterion
    ev = evaluation.curve()
    more: dict[str, Any] = dict(details or {})
    if selection is not None:
        if not np.array_equal(selection.grid, evaluation.grid):
            raise DpauditError("The selection and evaluation counts must be on one grid.")
        _need_trials(min(evaluation.negatives, evaluation.positives), 1, c)
        sel = selection.curve()
        # Chosen on the selection counts alone (never counted), as claim_curve_test does.
        best = best_threshold(
            sel,
            level_fpr=_rate_level(c, tests=sel.negatives + 1),
            level_fnr=_rate_level(c, tests=sel.positives + 1),
            bound=choose,
        )
        i = best.index
        level = _rate_level(c)
        fpr = clopper_pearson(
            int(ev.fp[i]), ev.negatives, confidence_level=level, alternative="less"
        )
        fnr = clopper_pearson(
            int(ev.fn[i]), ev.positives, confidence_level=level, alternative="less"
        )
        more.update(selection_negatives=sel.negatives, selection_positives=sel.positives)
        strategy = "split"
    else:
        tests = int(evaluation.grid.size)
        _need_trials(min(evaluation.negatives, evaluation.positives), tests, c)
        level = _rate_level(c, tests=tests)
        best = best_threshold(ev, level_fpr=level, level_fnr=level, bound=choose)
        i = best.index
        fpr = ConfidenceInterval(0.0, best.fpr_high)
        fnr = ConfidenceInterval(0.0, best.fnr_high)
        more.update(fpr_level=level, fnr_level=level)
        strategy = "bonferroni"
    more["candidate_thresholds"] = int(evaluation.grid.size)
    f_at = float(claim(np.array([fpr.high]))[0])
    return ClaimCurveTest(
        violated=bool(fnr.high < f_at),
        margin=float(margin(np.array([fpr.high]), np.array([fnr.high]))[0]),
        claim=claim.name,
        curve_at_fpr=f_at,
        confidence_level=c,
        threshold=strategy,
        fpr=fpr,
        fnr=fnr,
        threshold_value=float(ev.thresholds[i]),
        counts={
            "fp": int(ev.fp[i]),
            "negatives": int(ev.negatives),
            "fn": int(ev.fn[i]),
            "positives": int(ev.positives),
        },
        details=more,
    )


# ------------------------------------------------------------- effective noise multiplier


@dataclass(frozen=True)
class EffectiveNoise:
    """ "This run is no more private than DP-SGD with noise multiplier σ ≤ ``sigma``."

    Attributes:
        sigma: σ′, an excluded noise multiplier: the observed point lies below the curve
            of DP-SGD(σ′, q, T), hence below that of every σ ≥ σ′. ``None`` when the point
            is below no curve of the searched range.
        epsilon: the accountant's ε at ``delta`` of DP-SGD(σ′, q, T): the ε such a run
            would have at least, IF it is DP-SGD with the claimed q and T.
        delta: the δ of ``epsilon``.
        sampling_rate: the claimed q.
        steps: the claimed T.
        confidence_level: the level of the observed limits.
        assumption: the one assumption of the statement, in words.
    """

    sigma: float | None
    epsilon: float | None
    delta: float
    sampling_rate: float
    steps: int
    confidence_level: float
    assumption: str = field(repr=False, default="")

    def to_dict(self) -> dict[str, Any]:
        return {
            "sigma": self.sigma,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sampling_rate": self.sampling_rate,
            "steps": self.steps,
            "confidence_level": self.confidence_level,
            "assumption": self.assumption,
            "validity": "assumes-claimed-q-and-T",
        }


def _below(u0: float, u1: float, sigma: float, q: float, steps: int) -> bool:
    f = dpsgd_claim(noise_multiplier=sigma, sampling_rate=q, steps=steps)
    return bool(u1 < float(f(np.array([u0]))[0]))


def effective_noise_multiplier(
    fpr_high: float,
    fnr_high: float,
    *,
    reference: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    confidence_level: float,
    doublings: int = 6,
) -> EffectiveNoise:
    """The smallest σ′ on the grid ``reference``·2^((k + ½)/32), |k| ≤ 32·``doublings``,
    whose DP-SGD curve (same q and T) lies above the observed point.

    The curve of DP-SGD rises with σ (Dong, Roth, Su 2022, Prop. 2.8: adding noise is a
    post-processing), so the excluded σ form an upward-closed set and a bisection over
    the grid finds its least member. The statement holds for σ′ itself (a point below a
    pessimistic curve is below the true one) and so for every σ ≥ σ′. The grid is offset
    by half a step from ``reference`` (the claimed σ), so σ′ < reference implies the
    claim's own curve is violated.

    Args:
        fpr_high: u0, the observed FPR upper limit.
        fnr_high: u1, the observed FNR upper limit (jointly with u0 at ``confidence_level``).
        reference: the claimed σ, the grid's centre.
        sampling_rate: the claimed q.
        steps: the claimed T.
        delta: δ of the reported ε.
        confidence_level: the level of (u0, u1), carried to the result.
        doublings: the grid spans ``reference``·2^(±doublings).

    Returns:
        :class:`EffectiveNoise`.
    """
    ref = check_in_interval("reference", reference, 0.0, math.inf, low_open=True, high_open=True)
    q = check_in_interval("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    t = check_integer("steps", steps, low=1)
    d = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    u0 = check_in_interval("fpr_high", fpr_high, 0.0, 1.0)
    u1 = check_in_interval("fnr_high", fnr_high, 0.0, 1.0)
    n = SIGMA_STEPS_PER_DOUBLING

    def sigma_at(k: int) -> float:
        return ref * 2.0 ** ((k + 0.5) / n)

    low, high = -n * doublings, n * doublings
    assumption = (
        f"assumes the run is DP-SGD with the claimed q = {q:g} and T = {t} (only σ unknown)"
    )
    if not _below(u0, u1, sigma_at(high), q, t):
        return EffectiveNoise(None, None, d, q, t, confidence_level, assumption)
    if _below(u0, u1, sigma_at(low), q, t):
        high = low
    else:
        # invariant: sigma_at(low) not excluded, sigma_at(high) excluded
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if _below(u0, u1, sigma_at(mid), q, t) else (mid, high)
    s = sigma_at(high)
    if q == 1.0:
        # full batch: exactly √T/σ-GDP, whose ε at δ is closed-form (Cor. 2.13)
        eps = gdp_epsilon(math.sqrt(t) / s, d)
    else:
        event = accounting.dpsgd_event(noise_multiplier=s, sampling_rate=q, steps=t)
        eps = accounting.epsilon(event, delta=d)
    return EffectiveNoise(s, float(eps), d, q, t, confidence_level, assumption)


# ------------------------------------------------ a declared mechanism's curve as a bound


def laplace_epsilon_of_claim(epsilon: float, delta: float = 0.0) -> float:
    """The largest ε₀ of a Laplace mechanism (scale Δ/ε₀) that is (ε, δ)-DP.

    The privacy loss of Laplace(ε₀) on a pair at distance Δ is ε₀ with probability ½,
    −ε₀ with probability e^{−ε₀}/2 and linear in the output between, so its privacy
    profile is δ(ε) = 1 − e^{(ε − ε₀)/2} for 0 ≤ ε ≤ ε₀ (0 above; ``tests`` check it
    against :func:`tradeoff_from_profile`, Dong, Roth, Su 2022, Prop. 2.12, of the exact
    curve). It is (ε, δ)-DP iff δ(ε) ≤ δ, that is iff ε₀ ≤ ε − 2 ln(1 − δ): ε itself
    for a pure claim.
    """
    e = check_in_interval("epsilon", epsilon, 0.0, math.inf, low_open=True, high_open=True)
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    return e - 2.0 * math.log1p(-d)


def claim_curve_parameter(
    fpr_high: float,
    fnr_high: float,
    *,
    family: Callable[[float], ClaimCurve],
    claimed: float,
    ceiling: float = 100.0,
) -> float:
    """The largest θ whose curve ``family(θ)`` the point (u0, u1) lies strictly below.

    ``family`` is a nested family of trade-off curves that fall as θ rises (Laplace in ε,
    G_μ in μ: more noise is a post-processing, Dong, Roth, Su 2022, Prop. 2.8), so the θ
    whose curve the point lies below form an interval [0, θ*). The bisection keeps a θ
    the point is verified below (returned) and one it is not; it starts from
    ``claimed``, so the result exceeds ``claimed`` exactly when the point lies below the
    claimed curve (the test's violation event; the supremum is then strictly above
    ``claimed``, the family being continuous in θ), and never otherwise.

    Args:
        fpr_high: u0, the FPR upper limit.
        fnr_high: u1, the FNR upper limit.
        family: θ ↦ the curve of the declared mechanism at θ (θ > 0).
        claimed: the claimed θ.
        ceiling: returned when the point lies below the curve at ``ceiling`` too.

    Returns:
        θ ≥ 0 (0 when the point lies below no curve of the family).
    """
    u0 = check_in_interval("fpr_high", fpr_high, 0.0, 1.0)
    u1 = check_in_interval("fnr_high", fnr_high, 0.0, 1.0)
    theta = check_in_interval("claimed", claimed, 0.0, ceiling, low_open=True)

    def below(t: float) -> bool:
        return bool(u1 < float(family(t)(np.array([u0]))[0]))

    if below(theta):
        lo, hi = theta, min(2.0 * theta, ceiling)
        while below(hi):
            if hi >= ceiling:
                return float(ceiling)
            lo, hi = hi, min(2.0 * hi, ceiling)
    else:
        lo, hi = 0.0, theta
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if below(mid) else (lo, mid)
    if lo == theta:
        # strictly below the claimed curve, which is continuous in θ: θ* > claimed
        lo = math.nextafter(theta, math.inf)
    return float(lo)


def declared_curve_bound(
    test: ClaimCurveTest,
    *,
    family: Callable[[float], ClaimCurve],
    claimed: float,
    parameter: str,
    delta: float = 0.0,
    assumption: str = "",
) -> EpsilonBound | MuBound:
    """A claim-curve test of a declared mechanism at its claimed parameter, read as a
    bound on that parameter to hold against the claim.

    ``test`` (:func:`claim_curve_test` or :func:`claim_curve_test_from_grid` against
    ``family(claimed)``) decides; the bound's value is :func:`claim_curve_parameter` at
    its limits, above ``claimed`` exactly when the point lies below the claimed curve.
    That conclusion ("this is not the declared mechanism at the claimed parameter")
    assumes nothing beyond the test's level; the value itself reads the point through the
    declared family (``details["assumption"]``).

    Args:
        test: the test against ``family(claimed)``.
        family: θ ↦ the declared mechanism's curve at θ, falling as θ rises.
        claimed: the claimed θ.
        parameter: ``"epsilon"`` (an :class:`EpsilonBound` at ``delta``) or ``"mu"``.
        delta: δ of an ε bound.
        assumption: what the value assumes, in words.

    Raises:
        DpauditError: bad arguments, or a test of another curve.
    """
    check_choice("parameter", parameter, ("epsilon", "mu"))
    name = family(claimed).name
    if test.claim != name:
        raise DpauditError(f"The test is of {test.claim!r}, not of the claimed curve {name!r}.")
    value = claim_curve_parameter(test.fpr.high, test.fnr.high, family=family, claimed=claimed)
    details: dict[str, Any] = {
        **test.details,
        "claim": test.claim,
        "below_claim_curve": test.violated,
        "claim_curve_at_fpr": test.curve_at_fpr,
        "margin_probit": test.margin,
        "claimed": claimed,
        "assumption": assumption,
    }
    common: dict[str, Any] = {
        "value": value,
        "confidence_level": test.confidence_level,
        "method": "claim-curve",
        "threshold": test.threshold,
        "validity": "rigorous-multi-run",
        "fpr": test.fpr,
        "fnr": test.fnr,
        "threshold_value": test.threshold_value,
        "counts": dict(test.counts),
        "details": details,
    }
    if parameter == "mu":
        return MuBound(**common)
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    return EpsilonBound(delta=d, **common)


# ------------------------------------------------------------------ as a verdict bound


def claim_curve_epsilon(
    negative_scores: Any,
    positive_scores: Any,
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    confidence_level: float,
    threshold: str = "split",
    seed: int | None = None,
) -> tuple[EpsilonBound, float]:
    """The claim-curve test of DP-SGD(σ, q, T), read as an ε to hold against the
    accountant's: returns the bound and the accountant's ε of the claim at ``delta``.

    The bound's value is the accountant's ε at δ of the effective noise multiplier σ′
    when the observed point lies below the claim's curve (:func:`claim_curve_test`) and
    σ′ < σ (:func:`effective_noise_multiplier`, whose grid is offset by half a step from
    σ, so a point below the curve of σ but above that of σ·2^(−1/64) is not counted: a
    loss of at most one grid step, never a false alarm); 0 otherwise. The value exceeds
    the accountant's ε exactly when the run is proven to be no DP-SGD(σ, q, T): that
    conclusion assumes nothing; the value itself reads σ′ through the claimed q and T
    (``details["assumption"]``).
    """
    claim = dpsgd_claim(noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps)
    d = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    event = accounting.dpsgd_event(
        noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps
    )
    accountant = (
        gdp_epsilon(math.sqrt(steps) / noise_multiplier, d)
        if sampling_rate == 1.0
        else float(accounting.epsilon(event, delta=d))
    )
    test = claim_curve_test(
        negative_scores,
        positive_scores,
        claim=claim,
        confidence_level=confidence_level,
        threshold=threshold,
        seed=seed,
    )
    details: dict[str, Any] = {
        **test.details,
        "claim": claim.name,
        "below_claim_curve": test.violated,
        "claim_curve_at_fpr": test.curve_at_fpr,
        "margin_probit": test.margin,
    }
    value = 0.0
    if test.violated:
        eff = effective_noise_multiplier(
            test.fpr.high,
            test.fnr.high,
            reference=noise_multiplier,
            sampling_rate=sampling_rate,
            steps=steps,
            delta=d,
            confidence_level=confidence_level,
        )
        details.update(
            effective_noise_multiplier=eff.sigma,
            effective_epsilon=eff.epsilon,
            assumption=eff.assumption,
        )
        if eff.sigma is not None and eff.epsilon is not None and eff.sigma < noise_multiplier:
            value = eff.epsilon
    bound = EpsilonBound(
        value=float(value),
        confidence_level=test.confidence_level,
        delta=d,
        method="claim-curve",
        threshold=threshold,
        validity="rigorous-multi-run",
        fpr=test.fpr,
        fnr=test.fnr,
        threshold_value=test.threshold_value,
        counts=test.counts,
        details=details,
    )
    return bound, accountant
