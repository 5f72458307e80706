"""Empirical lower bounds on ε (for (ε, δ)-DP) and on μ (for μ-GDP).

Every bound here is a statement "the audited procedure is NOT (ε, δ)-DP for any ε below
``value``", which holds with probability at least ``confidence_level`` over the audit's
own randomness, provided its trials were independent (or, for the one-run bound, the
canaries were included by independent fair coins). The corrections that make that true
are written where they happen:

1. Rates are bounded from above with one-sided Clopper–Pearson limits. An ε (or μ) lower
   bound needs UPPER limits on both FPR and FNR; each gets (1 − c)/2 of the failure
   budget, so that both hold jointly with probability ≥ c (union bound).
2. A threshold chosen by looking at the counted trials voids the level. ``split`` chooses it
   on one part of the trials and counts on the other; ``bonferroni`` makes the limits hold
   simultaneously for every threshold (union bound over all cut points of each sample) so
   that the maximum over thresholds is valid. An uncorrected maximum is never offered.
   Both take a maximum over thresholds; :mod:`dpaudit.bounds.threshold_search` finds it exactly
   (the full scan's first maximiser) with far fewer Beta inversions.

Pure functions of arrays and numbers; no state, no I/O.

References:
    Kairouz, Oh, Viswanath (2015), "The composition theorem for differential privacy",
    Thm. 2.1 (the hypothesis-testing region of (ε, δ)-DP).
    Dong, Roth, Su (2022), "Gaussian Differential Privacy", JRSS-B 84(1),
    arXiv:1905.02383v3, Def. 2.6 (μ-GDP is G_μ-DP), Cor. 2.13 (δ_μ(ε)).
    Jagielski, Ullman, Oprea (2020), "Auditing differentially private machine learning",
    §3 (Clopper–Pearson ε lower bounds).
    Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini, Terzis (2023), "Tight auditing
    of differentially private machine learning", §4 (μ-GDP auditing).
    Steinke, Nasr, Jagielski (2023), "Privacy auditing with one (1) training run",
    Thm. 3.1 and Prop. 5.2 (the one-run p-value with δ > 0).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
from scipy import special

from dpaudit.bounds.threshold_search import Bound, LimitsCache, best_threshold
from dpaudit.errors import (
    DpauditError,
    InsufficientTrialsError,
    check_choice,
    check_in_interval,
    check_integer,
)
from dpaudit.stats import (
    ConfidenceInterval,
    check_confidence_level,
    clopper_pearson,
)
from dpaudit.theory import check_candidates, gdp_epsilon
from dpaudit.tradeoff import GridCounts, TradeoffCurve, as_scores

ThresholdStrategy = Literal["split", "bonferroni"]
THRESHOLD_STRATEGIES: tuple[str, ...] = ("split", "bonferroni")

Validity = Literal[
    "rigorous-multi-run", "rigorous-one-run", "heuristic", "assumes-gdp", "asymptotic-one-run"
]
VALIDITIES: tuple[str, ...] = (
    "rigorous-multi-run",
    "rigorous-one-run",
    "heuristic",
    "assumes-gdp",
    "asymptotic-one-run",
)

VALIDITY_MEANING: dict[str, str] = {
    "rigorous-multi-run": (
        "holds at the stated confidence because every trial was an independent run of the "
        "audited procedure"
    ),
    "rigorous-one-run": (
        "holds at the stated confidence because each canary was included by an independent "
        "fair coin in one run (Steinke, Nasr, Jagielski 2023)"
    ),
    "heuristic": (
        "describes the attack on these examples; the examples are not independent trials, "
        "so it proves nothing about the DP guarantee"
    ),
    "assumes-gdp": (
        "valid only if the procedure's trade-off curve is Gaussian-shaped (μ-GDP); the μ "
        "bound itself is rigorous"
    ),
    "asymptotic-one-run": (
        "holds at the stated confidence only if the one run's canary scores are independent "
        "Gaussians with one variance, which white-box DP-SGD approaches as its steps grow "
        "(Agrawal et al. 2026) but no DP claim implies; never decides a verdict"
    ),
}


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class EpsilonBound:
    """An empirical lower bound on ε at a given δ.

    Attributes:
        value: The bound (≥ 0).
        confidence_level: Probability with which the bound holds.
        delta: The δ at which ε is bounded.
        method: ``"clopper-pearson"`` or ``"one-run-binomial"``.
        threshold: ``"split"``, ``"bonferroni"``, ``"fixed"`` (counts given) or ``"top-bottom"``
            (one-run guesses).
        validity: One of :data:`VALIDITIES`; see :data:`VALIDITY_MEANING`.
        fpr: The FPR interval used (its ``high`` entered the bound), if any.
        fnr: The FNR interval used, if any.
        threshold_value: The score threshold t of the test ``s ≥ t``, if any.
        counts: The counts that entered the bound (fp, negatives, fn, positives, or the
            one-run canaries, guesses, correct).
        details: Anything else needed to explain the bound (selection split sizes, the
            number of candidate thresholds, the numerical tolerance, ...).
    """

    value: float
    confidence_level: float
    delta: float
    method: str
    threshold: str
    validity: str
    fpr: ConfidenceInterval | None = None
    fnr: ConfidenceInterval | None = None
    threshold_value: float | None = field(default=None, repr=False)
    counts: dict[str, int] = field(default_factory=dict, repr=False)
    details: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return _bound_dict(self, "epsilon", delta=self.delta)


@dataclass(frozen=True)
class MuBound:
    """An empirical lower bound on μ for μ-GDP (same fields as :class:`EpsilonBound`)."""

    value: float
    confidence_level: float
    method: str
    threshold: str
    validity: str
    fpr: ConfidenceInterval | None = None
    fnr: ConfidenceInterval | None = None
    threshold_value: float | None = field(default=None, repr=False)
    counts: dict[str, int] = field(default_factory=dict, repr=False)
    details: dict[str, Any] = field(default_factory=dict, repr=False)

    def epsilon(self, delta: float) -> EpsilonBound:
        """The ε at ``delta`` implied by this μ: valid only under the GDP assumption.

        Solves δ_μ(ε) = δ (Dong, Roth, Su 2019, Cor. 2.13). The result is labelled
        ``"assumes-gdp"``: it is a lower bound on ε only when the audited trade-off curve
        is Gaussian-shaped.
        """
        d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
        eps = gdp_epsilon(self.value, d) if self.value > 0 else 0.0
        return EpsilonBound(
            value=float(eps),
            confidence_level=self.confidence_level,
            delta=d,
            method=f"{self.method}+gdp",
            threshold=self.threshold,
            validity="assumes-gdp",
            fpr=self.fpr,
            fnr=self.fnr,
            threshold_value=self.threshold_value,
            counts=dict(self.counts),
            details={"mu_lower_bound": self.value},
        )

    def to_dict(self) -> dict[str, Any]:
        return _bound_dict(self, "mu")


# ------------------------------------------------------------------ the two inequalities


def epsilon_inequalities(fpr: Any, fnr: Any, *, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """The ε each inequality of the (ε, δ)-DP region asks of a test's error rates (vectorised).

    (ε, δ)-DP forces every test into the region FPR + e^ε·FNR ≥ 1 − δ and
    FNR + e^ε·FPR ≥ 1 − δ (Kairouz, Oh, Viswanath 2015, Thm. 2.1), that is
        ε ≥ ln((1 − δ − FNR)/FPR)   and   ε ≥ ln((1 − δ − FPR)/FNR).
    This is the one place dpaudit writes that formula; every ε read from a pair of error
    rates (a bound, a posterior draw, a ranking statistic) goes through it.

    Returns:
        The two right sides, in that order. A numerator ≤ 0 makes its inequality say
        nothing: −inf. A zero rate under a positive numerator: +inf (no ε allows it).
    """
    fpr = np.asarray(fpr, dtype=float)
    fnr = np.asarray(fnr, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        num1 = 1.0 - delta - fnr
        num2 = 1.0 - delta - fpr
        t1 = np.where(num1 > 0, np.log(np.where(num1 > 0, num1, 1.0) / fpr), -np.inf)
        t2 = np.where(num2 > 0, np.log(np.where(num2 > 0, num2, 1.0) / fnr), -np.inf)
    return t1, t2


def epsilon_from_rates(fpr_high: Any, fnr_high: Any, *, delta: float) -> np.ndarray:
    """ε lower bound from upper limits on FPR and FNR (vectorised).

    Both inequalities of :func:`epsilon_inequalities` decrease in FPR and FNR, so upper
    limits on the rates give
        ε ≥ max( ln((1 − δ − FNR_hi)/FPR_hi), ln((1 − δ − FPR_hi)/FNR_hi) ).
    A term whose numerator is ≤ 0 says nothing and is dropped; a zero denominator cannot
    occur for Clopper–Pearson upper limits (they are > 0 for n ≥ 1), and such a term is
    dropped too rather than read as ε = ∞. Floored at 0.
    """
    fpr = np.asarray(fpr_high, dtype=float)
    fnr = np.asarray(fnr_high, dtype=float)
    t1, t2 = epsilon_inequalities(fpr, fnr, delta=delta)
    t1 = np.where(fpr > 0, t1, 0.0)
    t2 = np.where(fnr > 0, t2, 0.0)
    return np.maximum(0.0, np.maximum(t1, t2))


def mu_from_rates(fpr_high: Any, fnr_high: Any) -> np.ndarray:
    """μ lower bound from upper limits on FPR and FNR (vectorised).

    μ-GDP forces FNR ≥ G_μ(FPR) = Φ(Φ⁻¹(1 − FPR) − μ) (Dong, Roth, Su 2022, Def. 2.6),
    i.e. μ ≥ Φ⁻¹(1 − FPR) − Φ⁻¹(FNR). The right side decreases in both rates, so upper
    limits give a lower bound on μ. G_μ is symmetric, so the mirrored inequality gives the
    same expression. Floored at 0.
    """
    fpr = np.clip(np.asarray(fpr_high, dtype=float), 0.0, 1.0)
    fnr = np.clip(np.asarray(fnr_high, dtype=float), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        mu = -special.ndtri(fpr) - special.ndtri(fnr)
    mu = np.where(np.isnan(mu), 0.0, mu)
    return np.maximum(0.0, mu)


def _rate_level(confidence_level: float, tests: int = 1) -> float:
    # Each of the two rates gets (1 − c)/2 of the failure budget (union bound over FPR and
    # FNR), further divided by the number of simultaneous tests it must cover.
    return 1.0 - (1.0 - confidence_level) / (2.0 * tests)


def minimum_trials(*, delta: float, confidence_level: float, parameter: str = "epsilon") -> int:
    """Fewest trials per hypothesis for which a perfect attack (0 errors) gives a bound > 0.

    With FP = FN = 0 out of n, the Clopper–Pearson upper limit is u = 1 − a^(1/n) with
    a = (1 − c)/2. The ε bound is positive iff 1 − δ − u > u; the μ bound iff u < ½.
    """
    a = (1.0 - confidence_level) / 2.0
    target = (1.0 - delta) / 2.0 if parameter == "epsilon" else 0.5
    # 1 − a^(1/n) < target  ⇔  n > ln a / ln(1 − target)
    return math.floor(math.log(a) / math.log(1.0 - target)) + 1


def design_can_bound(
    trials_per_arm: int,
    *,
    delta: float,
    confidence_level: float,
    threshold: str = "split",
    parameter: str = "epsilon",
    selection_fraction: float = 0.5,
) -> bool:
    """Whether ``trials_per_arm`` trials can give a lower bound above 0 at all.

    The rule of :func:`minimum_trials` on the trials that are counted: with ``split``, the
    evaluation part (the trials left after ``selection_fraction``), each rate at
    1 − (1 − c)/2; with ``bonferroni``, all n trials, each rate at 1 − (1 − c)/(2(n + 1)).
    Zero errors in the counted n give the smallest possible upper limit u = 1 − a^(1/n);
    the ε bound is positive iff 1 − δ − u > u, the μ bound iff u < ½. A design for which
    this is False proves nothing even with a perfect attack, at this or any higher
    confidence level, so it can be refused before any trial runs.
    """
    n = int(trials_per_arm)
    if threshold == "split":
        chosen = round(selection_fraction * n)
        counted, tests = n - chosen, 1
        if min(chosen, counted) < 1:
            return False
    else:
        counted, tests = n, n + 1
    a = (1.0 - confidence_level) / (2.0 * tests)
    u = 1.0 - a ** (1.0 / max(counted, 1))
    return (1.0 - delta - u > u) if parameter == "epsilon" else u < 0.5


def trials_needed(
    *, delta: float, confidence_level: float, threshold: str = "split", parameter: str = "epsilon"
) -> int:
    """The fewest trials per arm for which :func:`design_can_bound` holds (it is monotone
    in the trials, so a doubling then a bisection finds it)."""
    high = 2
    while not design_can_bound(
        high,
        delta=delta,
        confidence_level=confidence_level,
        threshold=threshold,
        parameter=parameter,
    ):
        high *= 2
    low = high // 2
    while high - low > 1:
        mid = (low + high) // 2
        ok = design_can_bound(
            mid,
            delta=delta,
            confidence_level=confidence_level,
            threshold=threshold,
            parameter=parameter,
        )
        low, high = (low, mid) if ok else (mid, high)
    return high


# ------------------------------------------------------------------- fixed threshold


def require_design(
    trials_per_arm: int,
    *,
    delta: float,
    confidence_level: float,
    threshold: str = "split",
    what: str,
) -> None:
    """Refuse, before any trial runs, a design that can give no ε lower bound above 0.

    Args:
        trials_per_arm: Trials (or models) per arm.
        delta: The bound's δ.
        confidence_level: The audit's level c. The verdict's per-bound level is at least
            c, so a design that proves nothing at c proves nothing in the verdict either.
        threshold: ``"split"`` or ``"bonferroni"``.
        what: The setting as the message names it, e.g. ``"[mechanism] trials = 10 per
            arm"``.

    Raises:
        InsufficientTrialsError: With the number of trials per arm needed (by
            :func:`trials_needed`) even for a perfect attack.
    """
    c = confidence_level
    if design_can_bound(trials_per_arm, delta=delta, confidence_level=c, threshold=threshold):
        return
    needed = trials_needed(delta=delta, confidence_level=c, threshold=threshold)
    raise InsufficientTrialsError(
        f"{what} are too few for any ε lower bound above 0 at confidence {c:g} (threshold = "
        f"{threshold!r}): at least {needed} are needed even for a perfect attack"
    )


def _check_counts(fp: int, negatives: int, fn: int, positives: int) -> None:
    for name, k, n_name, n in (
        ("fp", fp, "negatives", negatives),
        ("fn", fn, "positives", positives),
    ):
        check_integer(n_name, n, low=1)
        check_integer(name, k, low=0)
        if not 0 <= k <= n:
            raise DpauditError(f"The {name!r} parameter must be in [0, {n}]. Got {k} instead.")


def _fixed_threshold_rates(
    fp: int, negatives: int, fn: int, positives: int, c: float, validity: str
) -> tuple[ConfidenceInterval, ConfidenceInterval]:
    """Validated one-sided upper limits on FPR and FNR, each at 1 − (1 − c)/2."""
    check_choice("validity", validity, VALIDITIES)
    _check_counts(fp, negatives, fn, positives)
    level = _rate_level(c)
    fpr = clopper_pearson(fp, negatives, confidence_level=level, alternative="less")
    fnr = clopper_pearson(fn, positives, confidence_level=level, alternative="less")
    return fpr, fnr


def epsilon_from_counts(
    fp: int,
    negatives: int,
    fn: int,
    positives: int,
    *,
    delta: float,
    confidence_level: float = 0.95,
    validity: Validity = "rigorous-multi-run",
) -> EpsilonBound:
    """ε lower bound from the counts of ONE threshold fixed before the trials were seen.

    Args:
        fp: False positives among ``negatives`` H0 trials.
        negatives: Number of H0 trials.
        fn: False negatives among ``positives`` H1 trials.
        positives: Number of H1 trials.
        delta: δ in [0, 1).
        confidence_level: Joint coverage c; each rate's one-sided upper limit is taken at
            1 − (1 − c)/2 (union bound).
        validity: The label the caller vouches for (independent trials by default).

    Returns:
        :class:`EpsilonBound` with ``threshold="fixed"``.

    Example:
        FP = 5 of 1000 and FN = 50 of 1000 at δ = 1e-5 and 95 % give ε ≥ 4.387.
    """
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    c = check_confidence_level(confidence_level)
    fpr, fnr = _fixed_threshold_rates(fp, negatives, fn, positives, c, validity)
    value = float(epsilon_from_rates(fpr.high, fnr.high, delta=d))
    return EpsilonBound(
        value=value,
        confidence_level=c,
        delta=d,
        method="clopper-pearson",
        threshold="fixed",
        validity=validity,
        fpr=fpr,
        fnr=fnr,
        counts={"fp": fp, "negatives": negatives, "fn": fn, "positives": positives},
    )


def mu_from_counts(
    fp: int,
    negatives: int,
    fn: int,
    positives: int,
    *,
    confidence_level: float = 0.95,
    validity: Validity = "rigorous-multi-run",
) -> MuBound:
    """μ lower bound from the counts of ONE threshold fixed in advance (see
    :func:`epsilon_from_counts` for the arguments and the union bound)."""
    c = check_confidence_level(confidence_level)
    fpr, fnr = _fixed_threshold_rates(fp, negatives, fn, positives, c, validity)
    return MuBound(
        value=float(mu_from_rates(fpr.high, fnr.high)),
        confidence_level=c,
        method="clopper-pearson",
        threshold="fixed",
        validity=validity,
        fpr=fpr,
        fnr=fnr,
        counts={"fp": fp, "negatives": negatives, "fn": fn, "positives": positives},
    )


# ------------------------------------------------------------ thresholds chosen from data


def _rate_bound(parameter: str, delta: float) -> Bound:
    """The per-threshold bound of ``parameter`` as a function of the two rate limits: the
    ε inequality at ``delta`` or the μ inequality. Both decrease in both limits, are ≥ 0
    and are 0 at an FNR limit of 1, as :func:`~dpaudit.bounds.threshold_search.best_threshold`
    requires."""
    if parameter == "epsilon":
        return functools.partial(epsilon_from_rates, delta=delta)
    return mu_from_rates


#: One bound to compute: ``(parameter, delta)``, parameter ``"epsilon"`` or ``"mu"``.
Target = tuple[str, float]


def _lower_bounds(
    negative_scores: Any,
    positive_scores: Any,
    *,
    targets: tuple[Target, ...],
    confidence_level: float,
    threshold: str,
    seed: int | None,
    selection_fraction: float,
    validity: str,
) -> list[dict[str, Any]]:
    """Validate, then bound with the chosen threshold strategy; returns each target's
    bound fields, in order. Several targets share the split, the curves and the computed
    Clopper–Pearson limits; each gets exactly what it would get alone."""
    c = check_confidence_level(confidence_level)
    check_choice("threshold", threshold, THRESHOLD_STRATEGIES)
    check_choice("validity", validity, VALIDITIES)
    neg = as_scores("negative_scores", negative_scores)
    pos = as_scores("positive_scores", positive_scores)
    if threshold == "split":
        frac = check_in_interval(
            "selection_fraction", selection_fraction, 0.0, 1.0, low_open=True, high_open=True
        )
        return _split_bounds(neg, pos, targets=targets, c=c, seed=seed, frac=frac)
    return _bonferroni_bounds(neg, pos, targets=targets, c=c)


def _split_samples(
    neg: np.ndarray, pos: np.ndarray, *, frac: float, seed: int | None
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """Shuffle each sample and cut it into a selection part (a share ``frac``) and an
    evaluation part: ``((selection neg, selection pos), (evaluation neg, evaluation pos))``."""
    rng = np.random.default_rng(seed)
    neg = rng.permutation(neg)
    pos = rng.permutation(pos)
    k0 = round(frac * neg.size)
    k1 = round(frac * pos.size)
    if min(k0, neg.size - k0, k1, pos.size - k1) < 1:
        raise InsufficientTrialsError(
            f"threshold='split' needs at least one trial per hypothesis in each part; got "
            f"{neg.size} negatives and {pos.size} positives with selection_fraction={frac}."
        )
    return (neg[:k0], pos[:k1]), (neg[k0:], pos[k1:])


def _select_threshold(
    sel: TradeoffCurve,
    *,
    parameter: str,
    delta: float,
    c: float,
    cache: LimitsCache | None = None,
) -> float:
    """The threshold t whose simultaneous (bonferroni-level) bound is largest on the
    selection part's curve ``sel``."""
    # Choose t on the selection part by the bound that holds there for ALL thresholds
    # at once (the bonferroni levels below). Maximising a per-threshold bound over
    # tens of thousands of thresholds picks a lucky tail (winner's curse); the
    # simultaneous bound penalises thin tails, so its maximiser is a threshold whose
    # bound on fresh trials is close to what it promised. Any rule is valid here: the
    # selection part is never counted.
    return float(
        sel.thresholds[_select_index(sel, parameter=parameter, delta=delta, c=c, cache=cache)]
    )


def _select_index(
    sel: TradeoffCurve,
    *,
    parameter: str,
    delta: float,
    c: float,
    cache: LimitsCache | None = None,
) -> int:
    """The row of ``sel`` that :func:`_select_threshold` chooses (the same rule)."""
    best = best_threshold(
        sel,
        level_fpr=_rate_level(c, tests=sel.negatives + 1),
        level_fnr=_rate_level(c, tests=sel.positives + 1),
        bound=_rate_bound(parameter, delta),
        cache=cache,
    )
    return best.index


def _split_bounds(
    neg: np.ndarray,
    pos: np.ndarray,
    *,
    targets: tuple[Target, ...],
    c: float,
    seed: int | None,
    frac: float,
) -> list[dict[str, Any]]:
    """``threshold="split"``: choose t on one part of the trials, count on the other."""
    (sel_neg, sel_pos), (ev_neg, ev_pos) = _split_samples(neg, pos, frac=frac, seed=seed)
    for parameter, delta in targets:
        _require_trials(min(ev_neg.size, ev_pos.size), parameter, delta, c, 1)
    # Every target sees the same split (same seed): one selection curve serves them all.
    sel = TradeoffCurve.from_scores(sel_neg, sel_pos)
    cache: LimitsCache = {}
    out = []
    for parameter, delta in targets:
        t = _select_threshold(sel, parameter=parameter, delta=delta, c=c, cache=cache)
        out.append(_count_at(t, sel_neg, sel_pos, ev_neg, ev_pos, parameter, delta, c, seed, frac))
    return out


def _count_at(
    t: float,
    sel_neg: np.ndarray,
    sel_pos: np.ndarray,
    ev_neg: np.ndarray,
    ev_pos: np.ndarray,
    parameter: str,
    delta: float,
    c: float,
    seed: int | None,
    frac: float,
) -> dict[str, Any]:
    """The split bound's fields at the chosen threshold t, counted on the evaluation part."""
    # Count on the evaluation part only: t is independent of these trials, so the
    # fixed-threshold Clopper–Pearson limits keep their level.
    level = _rate_level(c)
    fp = int(np.sum(ev_neg >= t))
    fn = int(np.sum(ev_pos < t))
    fpr = clopper_pearson(fp, ev_neg.size, confidence_level=level, alternative="less")
    fnr = clopper_pearson(fn, ev_pos.size, confidence_level=level, alternative="less")
    value = float(_rate_bound(parameter, delta)(np.array(fpr.high), np.array(fnr.high)))
    return {
        "value": value,
        "fpr": fpr,
        "fnr": fnr,
        "threshold_value": t,
        "counts": {"fp": fp, "negatives": ev_neg.size, "fn": fn, "positives": ev_pos.size},
        "details": {
            "selection_fraction": frac,
            "selection_negatives": sel_neg.size,
            "selection_positives": sel_pos.size,
            "seed": seed,
        },
    }


def _bonferroni_bounds(
    neg: np.ndarray, pos: np.ndarray, *, targets: tuple[Target, ...], c: float
) -> list[dict[str, Any]]:
    """``threshold="bonferroni"``: the best threshold under limits valid for all at once."""
    # bonferroni: limits that hold for every threshold at once. For the FPR, the events
    # "the true tail mass above the j-th largest negative exceeds its Clopper–Pearson upper
    # limit", j = 0..n0, cover every threshold (FP(t) is constant between consecutive
    # negatives and the true FPR is largest at the interval's lower end). Each such event
    # has probability ≤ a for a limit at level 1 − a: the tail mass at an order statistic
    # is Beta(j + 1, n0 − j) distributed for continuous scores (stochastically smaller for
    # discrete ones), whose (1 − a) quantile is the limit. So a union bound over n0 + 1
    # cuts (n1 + 1 for the FNR) makes the maximum over thresholds valid at level c.
    for parameter, delta in targets:
        _require_trials(min(neg.size, pos.size), parameter, delta, c, max(neg.size, pos.size) + 1)
    curve = TradeoffCurve.from_scores(neg, pos)
    level_fpr = _rate_level(c, tests=neg.size + 1)
    level_fnr = _rate_level(c, tests=pos.size + 1)
    cache: LimitsCache = {}
    out = []
    for parameter, delta in targets:
        best = best_threshold(
            curve,
            level_fpr=level_fpr,
            level_fnr=level_fnr,
            bound=_rate_bound(parameter, delta),
            cache=cache,
        )
        i = best.index
        fp, fn = int(curve.fp[i]), int(curve.fn[i])
        out.append(
            {
                "value": best.value,
                "fpr": ConfidenceInterval(0.0, best.fpr_high),
                "fnr": ConfidenceInterval(0.0, best.fnr_high),
                "threshold_value": float(curve.thresholds[i]),
                "counts": {"fp": fp, "negatives": neg.size, "fn": fn, "positives": pos.size},
                "details": {
                    "candidate_thresholds": int(curve.thresholds.size),
                    "fpr_level": level_fpr,
                    "fnr_level": level_fnr,
                },
            }
        )
    return out


def _require_trials(n: int, parameter: str, delta: float, c: float, tests: int) -> None:
    a = (1.0 - c) / (2.0 * tests)
    u = 1.0 - a ** (1.0 / n)  # the smallest possible upper limit: 0 errors in n
    ok = (1.0 - delta - u > u) if parameter == "epsilon" else u < 0.5
    if not ok:
        needed = minimum_trials(delta=delta, confidence_level=1.0 - 2.0 * a, parameter=parameter)
        raise InsufficientTrialsError(
            f"Too few trials for any {parameter} lower bound to exceed 0: {n} per hypothesis "
            f"are counted, at least {needed} are needed even for a perfect attack."
        )


def epsilon_lower_bound(
    negative_scores: Any,
    positive_scores: Any,
    *,
    delta: float,
    confidence_level: float = 0.95,
    threshold: ThresholdStrategy = "split",
    seed: int | None = None,
    selection_fraction: float = 0.5,
    validity: Validity = "rigorous-multi-run",
) -> EpsilonBound:
    """Empirical ε lower bound from the scores of independent trials under H0 and H1.

    Args:
        negative_scores: Scores of the trials run on D (H0: canary out / non-member).
        positive_scores: Scores of the trials run on D' (H1). Larger means "H1".
        delta: δ in [0, 1).
        confidence_level: Probability c with which the bound holds.
        threshold: ``"split"`` (choose t on a random ``selection_fraction`` of each
            sample, count on the rest) or ``"bonferroni"`` (simultaneous limits over every
            threshold, then the best one).
        seed: Seed of the ``split`` permutation.
        selection_fraction: Share of each sample used to choose t (``split`` only).
        validity: The label the caller vouches for.

    Returns:
        :class:`EpsilonBound`.

    Raises:
        DpauditError: Bad arguments, NaN/infinite scores, empty samples.
        InsufficientTrialsError: When no outcome of so few trials could give a bound > 0.
    """
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    (r,) = _lower_bounds(
        negative_scores,
        positive_scores,
        targets=(("epsilon", d),),
        confidence_level=confidence_level,
        threshold=threshold,
        seed=seed,
        selection_fraction=selection_fraction,
        validity=validity,
    )
    return _epsilon_bound(r, d, confidence_level, threshold, validity)


def mu_lower_bound(
    negative_scores: Any,
    positive_scores: Any,
    *,
    confidence_level: float = 0.95,
    threshold: ThresholdStrategy = "split",
    seed: int | None = None,
    selection_fraction: float = 0.5,
    validity: Validity = "rigorous-multi-run",
) -> MuBound:
    """Empirical μ-GDP lower bound (arguments as in :func:`epsilon_lower_bound`)."""
    (r,) = _lower_bounds(
        negative_scores,
        positive_scores,
        targets=(("mu", 0.0),),
        confidence_level=confidence_level,
        threshold=threshold,
        seed=seed,
        selection_fraction=selection_fraction,
        validity=validity,
    )
    return _mu_bound(r, confidence_level, threshold, validity)


def epsilon_and_mu_lower_bounds(
    negative_scores: Any,
    positive_scores: Any,
    *,
    delta: float,
    confidence_level: float = 0.95,
    threshold: ThresholdStrategy = "split",
    seed: int | None = None,
    selection_fraction: float = 0.5,
    validity: Validity = "rigorous-multi-run",
) -> tuple[EpsilonBound, MuBound]:
    """:func:`epsilon_lower_bound` and :func:`mu_lower_bound` of the same scores with the
    same arguments, computed together: the same two bounds, bit for bit, for about half
    the work (one validation, one split, one selection curve, shared Beta inversions).

    Each bound is still a separate comparison: a verdict that uses both must give each
    its share of the confidence budget (as separate calls would need).
    """
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    r_eps, r_mu = _lower_bounds(
        negative_scores,
        positive_scores,
        targets=(("epsilon", d), ("mu", 0.0)),
        confidence_level=confidence_level,
        threshold=threshold,
        seed=seed,
        selection_fraction=selection_fraction,
        validity=validity,
    )
    return (
        _epsilon_bound(r_eps, d, confidence_level, threshold, validity),
        _mu_bound(r_mu, confidence_level, threshold, validity),
    )


def _epsilon_bound(
    r: dict[str, Any], delta: float, confidence_level: float, threshold: str, validity: str
) -> EpsilonBound:
    return EpsilonBound(
        confidence_level=float(confidence_level),
        delta=delta,
        method="clopper-pearson",
        threshold=threshold,
        validity=validity,
        **r,
    )


def _mu_bound(r: dict[str, Any], confidence_level: float, threshold: str, validity: str) -> MuBound:
    return MuBound(
        confidence_level=float(confidence_level),
        method="clopper-pearson",
        threshold=threshold,
        validity=validity,
        **r,
    )


# ------------------------------------------------- a learned score: the three-way split

#: A learned score: maps ``(n, d)`` outputs to n finite scores, larger meaning "H1".
Scorer = Callable[[np.ndarray], np.ndarray]
#: Fits a :data:`Scorer` on the fitting part's outputs under H0 and under H1 (in order).
Fitter = Callable[[np.ndarray, np.ndarray], Scorer]

#: The random stream (under the audit's seed) that picks the fitting trials; the split's
#: permutation uses the seed itself, so the two choices are made by different streams.
_FIT_STREAM = 0x66697420


@dataclass(frozen=True)
class FitPart:
    """Which trials a learned score is fitted on, and which it scores.

    Drawn from the number of trials and a seed alone, before any output is read: the
    trials are i.i.d., so the fitted score is independent of every trial it scores.

    Attributes:
        negatives: Positions of the H0 trials the score is fitted on (sorted).
        positives: Positions of the H1 trials the score is fitted on (sorted).
        rest_negatives: The other H0 positions (sorted): scored, then split and counted.
        rest_positives: The other H1 positions (sorted).
        seed: The seed the positions were drawn with.
    """

    negatives: np.ndarray = field(repr=False)
    positives: np.ndarray = field(repr=False)
    rest_negatives: np.ndarray = field(repr=False)
    rest_positives: np.ndarray = field(repr=False)
    seed: int | None = None

    def describe(self) -> dict[str, Any]:
        """The ``fit`` details of a learned bound: how many trials, chosen how."""
        return {
            "fit_negatives": int(self.negatives.size),
            "fit_positives": int(self.positives.size),
            "scored_negatives": int(self.rest_negatives.size),
            "scored_positives": int(self.rest_positives.size),
            "fit_trials": (
                f"a uniformly random subset of each arm's trial positions (seed {self.seed}, "
                f"stream {_FIT_STREAM}), drawn before any output was read; the score is "
                "fitted on these trials only, and they are never scored or counted"
            ),
        }


def fit_part(
    negatives: int,
    positives: int,
    *,
    fit_fraction: float,
    fit_limit: int | None = None,
    seed: int | None = None,
) -> FitPart:
    """Cut each arm's trial positions into a fitting part and the rest.

    Args:
        negatives: Number of H0 trials.
        positives: Number of H1 trials.
        fit_fraction: Share of each arm fitted on, in (0, 1) (rounded, at least one).
        fit_limit: At most this many fitting trials per arm (``None``: no cap).
        seed: Seed of the choice (a stream of its own, not the split's).

    Raises:
        DpauditError: bad arguments.
        InsufficientTrialsError: fewer than one fitting trial, or fewer than two trials
            left to score, in an arm.
    """
    frac = check_in_interval("fit_fraction", fit_fraction, 0.0, 1.0, low_open=True, high_open=True)
    n0 = check_integer("negatives", negatives, low=1)
    n1 = check_integer("positives", positives, low=1)
    limit = None if fit_limit is None else check_integer("fit_limit", fit_limit, low=1)
    rng = np.random.default_rng(None if seed is None else [seed, _FIT_STREAM])
    parts = []
    for n in (n0, n1):
        m = max(1, round(frac * n))
        if limit is not None:
            m = min(m, limit)
        if n - m < 2:
            raise InsufficientTrialsError(
                f"A learned score needs at least one trial per hypothesis to fit on and two "
                f"to score (one to choose the threshold, one to count); got {n0} negatives "
                f"and {n1} positives with fit_fraction={frac}."
            )
        # the first m positions of a seeded permutation, as two increasing index arrays
        # (a mask read back in order: the same arrays as sorting the two parts, 10x faster)
        chosen = np.zeros(n, dtype=bool)
        chosen[rng.permutation(n)[:m]] = True
        parts.append((np.flatnonzero(chosen), np.flatnonzero(~chosen)))
    (fit0, rest0), (fit1, rest1) = parts
    return FitPart(fit0, fit1, rest0, rest1, seed)


def _blocks(name: str, outputs: Any) -> OutputBlocks:
    """Outputs given as :class:`OutputBlocks` or as one array (one block)."""
    return outputs if isinstance(outputs, OutputBlocks) else OutputBlocks(name, [outputs])


def _as_outputs(name: str, outputs: Any) -> np.ndarray:
    """One hypothesis' raw outputs as ``(n, d)`` finite floats (a 1-D array is d = 1)."""
    arr = np.asarray(outputs, dtype=float)
    if arr.ndim == 1:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2 or arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DpauditError(
            f"The {name!r} parameter must be a non-empty (trials, d) array of outputs. Got "
            f"shape {arr.shape}."
        )
    if not np.all(np.isfinite(arr)):
        raise DpauditError(f"The {name!r} parameter must hold finite numbers only.")
    return arr


class OutputBlocks:
    """One hypothesis' raw outputs held as consecutive blocks (e.g. stored units, in
    order), read as the one ``(n, d)`` array they make up without ever building it.

    :func:`learned_lower_bounds` takes rows by position from the blocks: the fitting rows
    are copied out, the others are scored block by block, so the audit's memory holds no
    second copy of its outputs. Each block is checked as an array of outputs would be
    (finite, at least one row, the same dimension as the others).
    """

    def __init__(self, name: str, blocks: Any) -> None:
        self.blocks = tuple(_as_outputs(name, b) for b in blocks)
        if not self.blocks:
            raise DpauditError(f"The {name!r} parameter must hold at least one block of outputs.")
        dims = {b.shape[1] for b in self.blocks}
        if len(dims) > 1:
            raise DpauditError(
                f"The blocks of {name!r} must have one dimension; got {sorted(dims)}."
            )
        self.dimension = dims.pop()
        self.starts = np.cumsum([0] + [b.shape[0] for b in self.blocks])

    @property
    def rows(self) -> int:
        return int(self.starts[-1])

    def _pieces(self, positions: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Each block with the (increasing) positions that fall in it, made local."""
        cuts = np.searchsorted(positions, self.starts)
        for i, block in enumerate(self.blocks):
            local = positions[cuts[i] : cuts[i + 1]] - self.starts[i]
            if local.size:
                yield block, local

    def take(self, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` (increasing), as one new array."""
        out = np.empty((positions.size, self.dimension))
        at = 0
        for block, local in self._pieces(positions):
            np.take(block, local, axis=0, out=out[at : at + local.size])
            at += local.size
        return out

    def scores(self, scorer: Scorer, positions: np.ndarray, name: str) -> np.ndarray:
        """The score of each row at ``positions`` (increasing), one block at a time."""
        parts = [score_with(scorer, block[local], name) for block, local in self._pieces(positions)]
        return np.concatenate(parts) if parts else np.zeros(0)


def score_with(scorer: Scorer, outputs: np.ndarray, name: str) -> np.ndarray:
    """Apply a learned score, checking it gave one finite score per output."""
    scores = as_scores(name, np.asarray(scorer(outputs), dtype=float).reshape(-1))
    if scores.size != outputs.shape[0]:
        raise DpauditError(
            f"The learned score gave {scores.size} {name} for {outputs.shape[0]} outputs; one "
            "per output is needed."
        )
    return scores


@dataclass(frozen=True)
class LearnedBounds:
    """The ε and μ lower bounds of a learned score, and the scores they were computed from.

    Attributes:
        epsilon: The ε lower bound (its ``details["fit"]`` says how the score was fitted).
        mu: The μ lower bound.
        negative_scores: The learned scores of the H0 trials not fitted on.
        positive_scores: The learned scores of the H1 trials not fitted on.
    """

    epsilon: EpsilonBound
    mu: MuBound
    negative_scores: np.ndarray = field(repr=False)
    positive_scores: np.ndarray = field(repr=False)


def learned_lower_bounds(
    negative_outputs: Any,
    positive_outputs: Any,
    *,
    fit: Fitter,
    delta: float,
    confidence_level: float = 0.95,
    threshold: ThresholdStrategy = "split",
    seed: int | None = None,
    fit_fraction: float = 1.0 / 3.0,
    fit_limit: int | None = None,
    selection_fraction: float = 0.5,
    validity: Validity = "rigorous-multi-run",
    details: dict[str, Any] | None = None,
) -> LearnedBounds:
    """ε and μ lower bounds of a score LEARNED from the trials themselves.

    A three-way split, each cut fixed before the trials it protects are seen:

    1. **fit**: :func:`fit_part` picks a share ``fit_fraction`` of each arm by position
       and seed alone; ``fit`` sees those outputs and nothing else, and returns a score;
    2. **choose** and 3. **count**: the other trials are scored, and
       :func:`epsilon_and_mu_lower_bounds` chooses the threshold on one part of them and
       counts on the other (``split``), or counts them all under limits simultaneous over
       every threshold (``bonferroni``).

    The score is a fixed function of trials that are never counted, and the counted trials
    are independent of them (i.i.d. trials), so the bounds hold at ``confidence_level``
    whatever ``fit`` does: a poor or even adversarial learner weakens the bound, never
    its validity. Nothing assumes which hypothesis makes outputs large: the learner
    decides the direction (larger scores mean "H1", as everywhere).

    Args:
        negative_outputs: Raw outputs under H0, ``(n0, d)`` (or ``(n0,)``), or the same
            as :class:`OutputBlocks` (e.g. one block per stored unit, never concatenated).
        positive_outputs: Raw outputs under H1, ``(n1, d)``, or :class:`OutputBlocks`.
        fit: ``fit(fit_negatives, fit_positives) -> scorer``.
        delta, confidence_level, threshold, selection_fraction, validity: As in
            :func:`epsilon_and_mu_lower_bounds`, on the scored trials.
        seed: Seed of the fitting cut (its own stream) and of the split.
        fit_fraction: Share of each arm fitted on.
        fit_limit: At most this many fitting trials per arm.
        details: More details for both bounds (e.g. what the learner was).

    Returns:
        :class:`LearnedBounds`; ε and μ are separate comparisons, as in
        :func:`epsilon_and_mu_lower_bounds`.

    Raises:
        DpauditError: bad arguments or outputs, or a score that is not one finite number
            per output.
        InsufficientTrialsError: too few trials left to count for any bound above 0.
    """
    neg = _blocks("negative_outputs", negative_outputs)
    pos = _blocks("positive_outputs", positive_outputs)
    if neg.dimension != pos.dimension:
        raise DpauditError(
            f"Outputs under H0 and H1 must have the same dimension. Got {neg.dimension} and "
            f"{pos.dimension}."
        )
    part = fit_part(neg.rows, pos.rows, fit_fraction=fit_fraction, fit_limit=fit_limit, seed=seed)
    # The learner receives copies of the fitting rows only: it cannot reach the rest.
    scorer = fit(neg.take(part.negatives), pos.take(part.positives))
    neg_scores = neg.scores(scorer, part.rest_negatives, "negative scores")
    pos_scores = pos.scores(scorer, part.rest_positives, "positive scores")
    eps_lb, mu_lb = epsilon_and_mu_lower_bounds(
        neg_scores,
        pos_scores,
        delta=delta,
        confidence_level=confidence_level,
        threshold=threshold,
        seed=seed,
        selection_fraction=selection_fraction,
        validity=validity,
    )
    fitted = {**part.describe(), "fit_fraction": float(fit_fraction), "fit_limit": fit_limit}
    more = {"fit": fitted, **(details or {})}
    return LearnedBounds(
        replace(eps_lb, details={**eps_lb.details, **more}),
        replace(mu_lb, details={**mu_lb.details, **more}),
        neg_scores,
        pos_scores,
    )


# --------------------------------------------------- counts on a grid fixed in advance


def epsilon_and_mu_from_grid_split(
    selection: GridCounts,
    evaluation: GridCounts,
    *,
    delta: float,
    confidence_level: float = 0.95,
    validity: Validity = "rigorous-multi-run",
    details: dict[str, Any] | None = None,
) -> tuple[EpsilonBound, MuBound]:
    """ε and μ lower bounds (``threshold="split"``) from counts at a grid of thresholds,
    for trials too many to hold in memory (streamed one work unit at a time).

    The trials are cut into a selection part and an evaluation part BEFORE any is seen
    (e.g. whole work units, the first ones; trials are i.i.d., so any cut fixed in advance
    is a fair one), the grid is drawn from the selection part alone
    (:class:`~dpaudit.bounds.threshold_search.ScoreSketch`), and both parts are counted on it. A
    threshold is chosen on ``selection`` by the rule of the in-memory ``split``
    (:func:`_select_threshold`, restricted to the grid); FP and FN of the evaluation part
    at that threshold are then ``evaluation``'s counts at the same grid row: exactly what
    counting the evaluation trials at the chosen threshold gives. Each target's threshold
    is chosen separately, as in :func:`epsilon_and_mu_lower_bounds`.

    Args:
        selection: The selection part's counts (they choose the threshold only).
        evaluation: The evaluation part's counts on the same grid (they enter the bound).
        delta: δ of the ε bound, in [0, 1).
        confidence_level: Joint coverage c of each bound.
        validity: The label the caller vouches for.
        details: More details for both bounds (how the parts and the grid were drawn).

    Returns:
        ``(EpsilonBound, MuBound)``; each a separate comparison, as in
        :func:`epsilon_and_mu_lower_bounds`.

    Raises:
        DpauditError: bad arguments, counts on different grids.
        InsufficientTrialsError: too few evaluation trials for any bound above 0.
    """
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    c = check_confidence_level(confidence_level)
    check_choice("validity", validity, VALIDITIES)
    targets: tuple[Target, ...] = (("epsilon", d), ("mu", 0.0))
    _same_grid(selection, evaluation)
    for parameter, dt in targets:
        _require_trials(min(evaluation.negatives, evaluation.positives), parameter, dt, c, 1)
    sel, ev = selection.curve(), evaluation.curve()
    cache: LimitsCache = {}
    fields = []
    for parameter, dt in targets:
        # Chosen on the selection counts alone: any rule is valid there, since the
        # selection part is never counted in the bound.
        i = _select_index(sel, parameter=parameter, delta=dt, c=c, cache=cache)
        # Count on the evaluation part only: neither the grid nor the row depends on its
        # trials, so the fixed-threshold Clopper–Pearson limits keep their level, each
        # rate at 1 − (1 − c)/2 (union bound over the two rates).
        fp, fn = int(ev.fp[i]), int(ev.fn[i])
        level = _rate_level(c)
        fpr = clopper_pearson(fp, ev.negatives, confidence_level=level, alternative="less")
        fnr = clopper_pearson(fn, ev.positives, confidence_level=level, alternative="less")
        value = float(_rate_bound(parameter, dt)(np.array(fpr.high), np.array(fnr.high)))
        fields.append(
            {
                "value": value,
                "fpr": fpr,
                "fnr": fnr,
                "threshold_value": float(sel.thresholds[i]),
                "counts": {
                    "fp": fp,
                    "negatives": ev.negatives,
                    "fn": fn,
                    "positives": ev.positives,
                },
                "details": {
                    "selection_negatives": sel.negatives,
                    "selection_positives": sel.positives,
                    "candidate_thresholds": int(selection.grid.size),
                    **(details or {}),
                },
            }
        )
    return (
        _epsilon_bound(fields[0], d, c, "split", validity),
        _mu_bound(fields[1], c, "split", validity),
    )


def epsilon_and_mu_from_grid_bonferroni(
    counts: GridCounts,
    *,
    delta: float,
    confidence_level: float = 0.95,
    validity: Validity = "rigorous-multi-run",
    details: dict[str, Any] | None = None,
) -> tuple[EpsilonBound, MuBound]:
    """ε and μ lower bounds (``threshold="bonferroni"``) from counts at a grid of
    thresholds fixed before the counted trials were seen (drawn from other trials, or
    from the mechanism's parameters): the best grid threshold under limits that hold for
    every grid threshold at once.

    Args:
        counts: The counted trials' counts on the grid.
        delta: δ of the ε bound, in [0, 1).
        confidence_level: Joint coverage c of each bound.
        validity: The label the caller vouches for.
        details: More details for both bounds (how the grid was drawn).

    Returns:
        ``(EpsilonBound, MuBound)``.

    Raises:
        DpauditError: bad arguments.
        InsufficientTrialsError: too few trials for any bound above 0 at these levels.
    """
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    c = check_confidence_level(confidence_level)
    check_choice("validity", validity, VALIDITIES)
    targets: tuple[Target, ...] = (("epsilon", d), ("mu", 0.0))
    # Union bound over the G grid thresholds, each fixed before these trials were counted,
    # so each rate's limit at 1 − (1 − c)/(2G) fails with at most that probability at
    # each threshold, and all 2G limits hold together with probability ≥ c (no
    # order-statistics argument is needed, unlike the in-memory bonferroni's n + 1 cuts).
    # The curve's two end rows (+inf, −inf) need no share: their FN (resp. FP) is the
    # whole sample, its limit is exactly 1, and their bound is 0 whatever happens.
    tests = int(counts.grid.size)
    for parameter, dt in targets:
        _require_trials(min(counts.negatives, counts.positives), parameter, dt, c, tests)
    curve = counts.curve()
    level = _rate_level(c, tests=tests)
    cache: LimitsCache = {}
    fields = []
    for parameter, dt in targets:
        best = best_threshold(
            curve, level_fpr=level, level_fnr=level, bound=_rate_bound(parameter, dt), cache=cache
        )
        i = best.index
        fields.append(
            {
                "value": best.value,
                "fpr": ConfidenceInterval(0.0, best.fpr_high),
                "fnr": ConfidenceInterval(0.0, best.fnr_high),
                "threshold_value": float(curve.thresholds[i]),
                "counts": {
                    "fp": int(curve.fp[i]),
                    "negatives": counts.negatives,
                    "fn": int(curve.fn[i]),
                    "positives": counts.positives,
                },
                "details": {
                    "candidate_thresholds": tests,
                    "fpr_level": level,
                    "fnr_level": level,
                    **(details or {}),
                },
            }
        )
    return (
        _epsilon_bound(fields[0], d, c, "bonferroni", validity),
        _mu_bound(fields[1], c, "bonferroni", validity),
    )


def _same_grid(a: GridCounts, b: GridCounts) -> None:
    if a.grid is not b.grid and not np.array_equal(a.grid, b.grid):
        raise DpauditError(
            "The selection and evaluation counts must be taken on the same grid of thresholds."
        )


# ---------------------------------------------------------------------------- one run


def one_run_guesses(scores: Any, included: Any, *, guesses_per_side: int) -> tuple[int, int]:
    """The one-run guessing rule: ``(guesses, correct)`` from canary scores and coins.

    Rank the m canaries by score, largest first; ties are broken by position, the earlier
    canary ranking higher (a rule that never looks at the coins, so the guesses stay a
    function of the scores alone, as the theorem requires). Guess "included" for the k
    highest-ranked and "excluded" for the k lowest-ranked, with k = min(guesses_per_side,
    ⌊m/2⌋), and abstain on the rest; count the correct guesses.

    Args:
        scores: one score per canary, larger = "included".
        included: the fair coins, one bool per canary.
        guesses_per_side: k, the guesses on each side (2k in all).

    Returns:
        ``(2k, correct)``, the r and v of :func:`one_run_epsilon_lower_bound`.

    References:
        Steinke, Nasr, Jagielski (2023), "Privacy Auditing with One (1) Training Run",
        NeurIPS, Algorithm 1 (guess on the k₊ largest and k₋ smallest scores, abstain on
        the rest).
    """
    s = as_scores("scores", scores)
    coins = np.asarray(included, dtype=bool).reshape(-1)
    if coins.size != s.size:
        raise DpauditError(
            f"One-run scores and coins must have one entry per canary; got {s.size} scores "
            f"and {coins.size} coins."
        )
    k = min(check_integer("guesses_per_side", guesses_per_side, low=0), s.size // 2)
    order = np.argsort(-s, kind="stable")  # stable: equal scores keep position order
    top, bottom = order[:k], order[s.size - k :]
    return 2 * k, int(coins[top].sum() + (~coins[bottom]).sum())


def one_run_p_value(
    *, canaries: int, guesses: int, correct: int, epsilon: float, delta: float
) -> float:
    """P-value of "the procedure is (ε, δ)-DP" given a one-run audit's outcome.

    With m canaries each included by an independent fair coin, r guesses and v of them
    correct, (ε, δ)-DP implies (Steinke, Nasr, Jagielski 2023, Thm. 3.1 with δ handled as
    in their Prop. 5.2)
        P[W ≥ v] ≤ P[Bin(r, q) ≥ v] + 2mδ · max_{1≤i≤v} (1/i)·P[v − i ≤ Bin(r, q) < v],
    where q = e^ε / (1 + e^ε) is the accuracy of ε-DP randomized response.
    """
    from scipy import stats as sps  # loaded here: multi-run audits never need it

    m, r, v = canaries, guesses, correct
    q = special.expit(epsilon)
    head = float(sps.binom.sf(v - 1, r, q))
    alpha = 0.0
    if delta > 0 and v > 0:
        # P[v − i ≤ Bin < v] for i = 1..v is the running sum of pmf(v − 1), pmf(v − 2), ...
        pmf = sps.binom.pmf(np.arange(v - 1, -1, -1), r, q)
        alpha = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))
    return min(1.0, head + 2.0 * m * delta * alpha)


def one_run_epsilon_lower_bound(
    *,
    canaries: int,
    guesses: int,
    correct: int,
    delta: float,
    confidence_level: float = 0.95,
    tolerance: float = 1e-6,
) -> EpsilonBound:
    """ε lower bound from ONE training run with m randomly included canaries.

    The bound is the largest ε (to within ``tolerance``, found by bisection) at which the
    one-run p-value (:func:`one_run_p_value`) is still below 1 − c. Bisection keeps the
    invariant p(ε_low) < 1 − c, so the returned value is itself rejected: the procedure is
    not (ε, δ)-DP at it, nor (since DP is monotone in ε) at any smaller ε.

    Args:
        canaries: m, the number of canaries, each included by an independent fair coin.
        guesses: r ≤ m, the canaries on which the auditor guessed (e.g. the top and
            bottom scores); it abstained on the rest.
        correct: v ≤ r, the correct guesses.
        delta: δ in [0, 1).
        confidence_level: c in (0, 1).
        tolerance: Width of the final bisection bracket (the reported value is its lower end).

    Returns:
        :class:`EpsilonBound` with method ``"one-run-binomial"`` and validity
        ``"rigorous-one-run"``.

    Example:
        m = 1000, r = 100 all correct, δ = 0, 95 %: ε ≥ 3.493.
    """
    for name, count in (("canaries", canaries), ("guesses", guesses), ("correct", correct)):
        check_integer(name, count, low=0)
    if not 0 <= correct <= guesses <= canaries or canaries < 1:
        raise DpauditError(
            "One-run counts must satisfy 0 ≤ correct ≤ guesses ≤ canaries and canaries ≥ 1. "
            f"Got canaries={canaries}, guesses={guesses}, correct={correct}."
        )
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    c = check_confidence_level(confidence_level)
    tol = check_in_interval("tolerance", tolerance, 0.0, 1.0, low_open=True)
    target = 1.0 - c

    def p(eps: float) -> float:
        return one_run_p_value(
            canaries=canaries, guesses=guesses, correct=correct, epsilon=eps, delta=d
        )

    low, high = 0.0, 1.0
    if guesses == 0 or p(0.0) >= target:
        value = 0.0
    else:
        while p(high) < target:
            low, high = high, 2.0 * high
            if high > 1e3:  # every guess right with δ = 0 still caps the bound; guard anyway
                break
        while high - low > tol:
            mid = 0.5 * (low + high)
            if p(mid) < target:
                low = mid
            else:
                high = mid
        value = low
    return EpsilonBound(
        value=float(value),
        confidence_level=c,
        delta=d,
        method="one-run-binomial",
        threshold="top-bottom",
        validity="rigorous-one-run",
        counts={"canaries": canaries, "guesses": guesses, "correct": correct},
        details={"tolerance": tol, "p_value_at_bound": p(value) if value > 0 else None},
    )


# -------------------------------------------------------------------- against a μ bracket


def mu_bound_against_bracket(bound: MuBound, tail: float) -> MuBound:
    """The μ lower bound to hold against the high end of a μ bracket with tail δ ``tail``.

    A bracket [μ_low, μ_high] measured with tail δ t (:mod:`dpaudit.theory.identification`)
    guarantees only f_A(α) ≥ G_{μ_high}(α + t) − t. A test with error rates (α, β) then
    proves μ_high ≥ Φ⁻¹(1 − (α + t)) − Φ⁻¹(β + t): the bound is recomputed from the upper
    limits on both rates, each inflated by t. ``tail = 0`` returns ``bound`` unchanged.

    References:
        Liu, Sun, Jiang, Kong (2022), "Identification, Amplification and Measurement: A
        bridge to Gaussian Differential Privacy", NeurIPS, arXiv 2210.09269v2, §2.3
        (the μ measurement with a tail).
    """
    t = check_in_interval("tail", tail, 0.0, 1.0, high_open=True)
    if t == 0.0 or bound.fpr is None or bound.fnr is None:
        return bound
    return replace(
        bound,
        value=float(mu_from_rates(bound.fpr.high + t, bound.fnr.high + t)),
        details={**bound.details, "bracket_tail_delta": t},
    )


# ------------------------------------------------------------------ identification game


def identification_epsilon_lower_bound(
    correct: int,
    trials: int,
    *,
    candidates: int,
    delta: float,
    confidence_level: float = 0.95,
) -> EpsilonBound:
    """ε lower bound from ``correct`` identifications in ``trials`` independent games.

    Inverting :func:`dpaudit.theory.identification_success_bound`:
    p ≤ (e^ε + (k − 1)δ)/(e^ε + k − 1)
    ⇔ e^ε(1 − p) ≥ (k − 1)(p − δ) ⇔ ε ≥ ln((k − 1)(p − δ)/(1 − p)), whose right side
    increases in p. So with p̂ the one-sided Clopper–Pearson LOWER limit on the success
    rate at level c (P[p ≥ p̂] ≥ c), ε ≥ ln((k − 1)(p̂ − δ)/(1 − p̂)) holds with
    probability ≥ c; floored at 0 (a non-positive argument says nothing). Independent
    trials whose success probabilities p_t differ (fresh candidates, fresh models) are
    each ≤ the bound, so their count is stochastically below Bin(n, bound): the limit
    stays valid. p̂ = 1 (n = 0 failures never gives it) cannot occur.

    Args:
        correct: games the attacker won.
        trials: independent games played.
        candidates: k ≥ 2.
        delta: δ of the (ε, δ) statement.
        confidence_level: c; in a verdict, the share the budget gives this bound.

    Returns:
        :class:`~dpaudit.bounds.EpsilonBound` (method ``clopper-pearson-identification``,
        validity ``rigorous-multi-run``); ``details`` holds p̂, the point estimate and
        chance 1/k.

    Example:
        k = 10, 60 of 100 correct, δ = 0, c = 0.95: p̂ = 0.5130, ε ≥ ln(9·0.5130/0.4870)
        = 2.2491.
    """
    k = check_candidates(candidates)
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    c = check_confidence_level(confidence_level)
    ci = clopper_pearson(correct, trials, confidence_level=c, alternative="greater")
    p_low = ci.low
    value = 0.0
    if p_low > d and p_low < 1.0:
        value = max(0.0, math.log((k - 1) * (p_low - d) / (1.0 - p_low)))
    return EpsilonBound(
        value=float(value),
        confidence_level=c,
        delta=d,
        method="clopper-pearson-identification",
        threshold="nearest-candidate",
        validity="rigorous-multi-run",
        counts={"correct": int(correct), "trials": int(trials), "candidates": k},
        details={
            "success_rate": correct / trials,
            "success_rate_lower": p_low,
            "chance": 1.0 / k,
        },
    )


# ------------------------------------------------------------------------------ helpers


def _bound_dict(b: EpsilonBound | MuBound, parameter: str, **extra: Any) -> dict[str, Any]:
    """The JSON form shared by both bound types (results.json's ``lower`` objects)."""
    return {
        "parameter": parameter,
        "value": b.value,
        "confidence_level": b.confidence_level,
        **extra,
        "method": b.method,
        "threshold": b.threshold,
        "validity": b.validity,
        "fpr_interval": None if b.fpr is None else list(b.fpr),
        "fnr_interval": None if b.fnr is None else list(b.fnr),
        "threshold_value": _json_float(b.threshold_value),
        "counts": dict(b.counts),
        "details": _jsonable(b.details),
    }


def _json_float(x: float | None) -> float | None:
    if x is None:
        return None
    return float(x) if math.isfinite(x) else None


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating | float):
        return _json_float(float(obj))
    return obj
