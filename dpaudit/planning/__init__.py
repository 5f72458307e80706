"""Planning an audit: the limit of detection of a design, and the trials a target needs.

An audit's lower bound can never exceed what a PERFECT attack (no false positive, no
false negative) would certify with the same trials, δ and confidence: that ceiling is the
design's **limit of detection**. A bound of 0 under a limit of 0.3 says little about a
claim of ε = 8; printed beside every bound, the limit says what the audit could have
shown at best. :func:`plan_trials` goes the other way: the fewest trials per arm with which
an ideal attack — one whose error rates are those of the mechanism's own trade-off curve —
reaches a target bound in expectation.

Pure functions of numbers (numpy/scipy, no torch), like :mod:`dpaudit.bounds`, whose
bounds they reuse so that a limit is exactly the bound a perfect attack would get.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from dpaudit.bounds import (
    EpsilonBound,
    MuBound,
    epsilon_from_counts,
    epsilon_from_rates,
    mu_from_counts,
    mu_from_rates,
    one_run_epsilon_lower_bound,
)
from dpaudit.errors import DpauditError, check_choice, check_integer
from dpaudit.theory import tradeoff_gdp, tradeoff_laplace

__all__ = [
    "DetectionLimit",
    "OneRunPlan",
    "TrialPlan",
    "expected_bound",
    "ideal_guess_accuracy",
    "limit_for_bound",
    "multi_run_limit",
    "one_run_limit",
    "plan_one_run",
    "plan_trials",
]

Parameter = Literal["epsilon", "mu"]
Threshold = Literal["split", "bonferroni", "fixed"]
Tradeoff = Literal["laplace", "gaussian", "perfect"]
_PARAMETERS: tuple[Parameter, ...] = ("epsilon", "mu")
_THRESHOLDS: tuple[Threshold, ...] = ("split", "bonferroni", "fixed")
_TRADEOFFS: tuple[Tradeoff, ...] = ("laplace", "gaussian", "perfect")
# Points of the trade-off curve searched for the ideal attack's best threshold (log-spaced
# FPRs: the bound is made at small FPR, where a linear grid would be too coarse).
_GRID = np.concatenate([np.logspace(-12, -1, 400), np.linspace(0.1, 0.5, 81)[1:]])


@dataclass(frozen=True)
class DetectionLimit:
    """The largest bound a design can certify: the bound of a perfect attack.

    Attributes:
        value: the limit (ε, or μ for ``parameter="mu"``).
        parameter: ``"epsilon"`` or ``"mu"``.
        design: ``"multi-run"`` (independent trials per arm) or ``"one-run"``.
        delta: δ of an ε limit (``None`` for μ).
        confidence_level: the confidence of the bound the limit caps.
        threshold: the threshold strategy (``"split"``, ``"bonferroni"``, ``"fixed"``) or
            ``"top-bottom"`` for one-run guesses.
        counts: the trials the limit was computed from: ``negatives`` / ``positives`` (all
            trials) and ``counted_negatives`` / ``counted_positives`` (those the bound
            counts: the evaluation part of a split), or ``canaries`` / ``guesses``.
    """

    value: float
    parameter: str
    design: str
    delta: float | None
    confidence_level: float
    threshold: str
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TrialPlan:
    """The fewest trials per arm with which an ideal attack reaches ``target``.

    Attributes:
        trials_per_arm: n (each of H0 and H1 gets n trials; a split counts part of them).
        target: the bound asked for; expected_value: the ideal attack's expected bound at n
            (≥ target); limit: the limit of detection at n (a perfect attack's bound).
        parameter, delta, confidence_level, threshold, selection_fraction: the design.
        tradeoff: the curve whose rates the ideal attack has, and its privacy parameter
            (``mechanism_epsilon`` for Laplace, ``mechanism_mu`` for Gaussian).
        fpr, fnr: the ideal attack's rates at its best threshold for n trials.
    """

    trials_per_arm: int
    target: float
    expected_value: float
    limit: float
    parameter: str
    delta: float | None
    confidence_level: float
    threshold: str
    selection_fraction: float
    tradeoff: str
    mechanism_epsilon: float | None
    mechanism_mu: float | None
    fpr: float
    fnr: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------- limits


def _counted(n: int, threshold: str, fraction: float) -> int:
    # The split counts only the evaluation part: the same rounding as bounds._split_samples.
    return n - round(fraction * n) if threshold == "split" else n


def multi_run_limit(
    negatives: int,
    positives: int | None = None,
    *,
    delta: float = 0.0,
    confidence_level: float = 0.95,
    threshold: Threshold = "split",
    selection_fraction: float = 0.5,
    parameter: Parameter = "epsilon",
) -> DetectionLimit:
    """Limit of detection of a multi-run audit: its bound when FP = FN = 0.

    Args:
        negatives: H0 trials (all of them, before any split).
        positives: H1 trials (default: as many as ``negatives``).
        delta: δ of the ε bound (ignored for μ).
        confidence_level: the confidence of the bound (for a comparison in a verdict, the
            level it is computed at after the verdict's Bonferroni share).
        threshold: ``"split"`` (the default of :func:`dpaudit.bounds.epsilon_lower_bound`:
            only the evaluation part is counted), ``"bonferroni"`` (every trial counted,
            each rate's limit at the level for n + 1 thresholds) or ``"fixed"`` (a
            threshold chosen in advance, every trial counted).
        selection_fraction: the split's selection share.
        parameter: ``"epsilon"`` or ``"mu"``.

    Returns:
        :class:`DetectionLimit`; its value equals the bound
        :func:`~dpaudit.bounds.epsilon_lower_bound` / ``mu_lower_bound`` give perfectly
        separated scores with these trials (0 when too few trials certify anything).
    """
    check_choice("threshold", threshold, _THRESHOLDS)
    check_choice("parameter", parameter, _PARAMETERS)
    n0 = check_integer("negatives", negatives, low=1)
    n1 = n0 if positives is None else check_integer("positives", positives, low=1)
    k0, k1 = (_counted(n, threshold, selection_fraction) for n in (n0, n1))
    value = 0.0
    if min(k0, k1) >= 1:
        if threshold == "bonferroni":
            # bounds._bonferroni_bound: each rate's one-sided limit at 1 − (1 − c)/(2(n + 1)).
            hi0 = _zero_error_upper(k0, confidence_level, tests=k0 + 1)
            hi1 = _zero_error_upper(k1, confidence_level, tests=k1 + 1)
            rates = (np.array(hi0), np.array(hi1))
            raw = (
                epsilon_from_rates(*rates, delta=delta)
                if parameter == "epsilon"
                else mu_from_rates(*rates)
            )
            value = float(raw)
        else:
            bound = _perfect_counts_bound(k0, k1, delta, confidence_level, parameter)
            value = bound.value
    return DetectionLimit(
        value=value,
        parameter=parameter,
        design="multi-run",
        delta=delta if parameter == "epsilon" else None,
        confidence_level=confidence_level,
        threshold=threshold,
        counts={
            "negatives": n0,
            "positives": n1,
            "counted_negatives": k0,
            "counted_positives": k1,
        },
    )


def one_run_limit(
    canaries: int,
    guesses: int | None = None,
    *,
    delta: float = 0.0,
    confidence_level: float = 0.95,
) -> DetectionLimit:
    """Limit of detection of a one-run audit: Steinke et al.'s bound with every guess right.

    Args:
        canaries: m, the canaries (audited rows) included by independent fair coins.
        guesses: r, how many of them the audit guesses (default: all m).
        delta, confidence_level: as for
            :func:`~dpaudit.bounds.one_run_epsilon_lower_bound`.

    References:
        Steinke, Nasr, Jagielski (2023), "Privacy Auditing with One (1) Training Run",
        NeurIPS, Theorem 3.1 (the bound the limit evaluates at v = r correct guesses).
    """
    r = canaries if guesses is None else guesses
    bound = one_run_epsilon_lower_bound(
        canaries=canaries, guesses=r, correct=r, delta=delta, confidence_level=confidence_level
    )
    return DetectionLimit(
        value=bound.value,
        parameter="epsilon",
        design="one-run",
        delta=delta,
        confidence_level=confidence_level,
        threshold="top-bottom",
        counts={"canaries": int(canaries), "guesses": int(r)},
    )


def limit_for_bound(bound: EpsilonBound | MuBound) -> DetectionLimit:
    """The limit of detection of the design that produced ``bound`` (same trials, δ, level).

    Reads the design from the bound itself: one-run counts (canaries, guesses), or the
    trials a multi-run bound counted (for ``"split"`` the evaluation part, which is what
    the perfect attack's bound counts too).

    Raises:
        DpauditError: the bound carries no counts to read the design from.
    """
    parameter: Parameter = "epsilon" if isinstance(bound, EpsilonBound) else "mu"
    delta = bound.delta if isinstance(bound, EpsilonBound) else 0.0
    c = bound.confidence_level
    counts = bound.counts
    if "canaries" in counts and parameter == "mu" and "limit_of_detection" in bound.details:
        # the f-DP one-run μ bound carries its own limit (every guess right, at the level
        # its rungs were tested at): dpaudit.bounds.fdp_one_run
        return DetectionLimit(
            value=float(bound.details["limit_of_detection"]),
            parameter="mu",
            design="one-run",
            delta=0.0,
            confidence_level=c,
            threshold=bound.threshold,
            counts={"canaries": counts["canaries"], "guesses": counts["guesses"]},
        )
    if "canaries" in counts:
        return one_run_limit(counts["canaries"], counts["guesses"], delta=delta, confidence_level=c)
    if "negatives" not in counts or "positives" not in counts:
        raise DpauditError(f"The bound carries no trial counts to plan from: {bound!r}.")
    # The counts of a split bound are its evaluation part already: count them as fixed.
    threshold: Threshold = "bonferroni" if bound.threshold == "bonferroni" else "fixed"
    limit = multi_run_limit(
        counts["negatives"],
        counts["positives"],
        delta=delta,
        confidence_level=c,
        threshold=threshold,
        parameter=parameter,
    )
    if bound.threshold == "split":
        sel0 = int(bound.details.get("selection_negatives", 0))
        sel1 = int(bound.details.get("selection_positives", 0))
        limit = DetectionLimit(
            value=limit.value,
            parameter=parameter,
            design="multi-run",
            delta=limit.delta,
            confidence_level=c,
            threshold="split",
            counts={
                "negatives": counts["negatives"] + sel0,
                "positives": counts["positives"] + sel1,
                "counted_negatives": counts["negatives"],
                "counted_positives": counts["positives"],
            },
        )
    return limit


# ----------------------------------------------------------------------------- planning


def expected_bound(
    trials_per_arm: int,
    *,
    fpr: Any,
    fnr: Any,
    delta: float = 0.0,
    confidence_level: float = 0.95,
    threshold: Threshold = "split",
    selection_fraction: float = 0.5,
    parameter: Parameter = "epsilon",
) -> tuple[float, int]:
    """The bound an attack with these rates gets in expectation, at its best point.

    Each candidate point (fpr[i], fnr[i]) of the attack's trade-off curve is counted as
    if its expected error counts n·fpr and n·fnr had been observed (the Clopper–Pearson
    limit is the Beta quantile, continuous in the count), and the best point is taken:
    the ideal attack knows its best threshold (a split's selection part finds it).

    Returns:
        ``(value, index)`` of the best point.
    """
    check_choice("threshold", threshold, _THRESHOLDS)
    trials = check_integer("trials_per_arm", trials_per_arm, low=1)
    n = _counted(trials, threshold, selection_fraction)
    if n < 1:
        return 0.0, 0
    tests = n + 1 if threshold == "bonferroni" else 1
    level = 1.0 - (1.0 - confidence_level) / (2.0 * tests)
    a, b = np.asarray(fpr, dtype=np.float64), np.asarray(fnr, dtype=np.float64)
    hi_a, hi_b = _upper(n * a, n, level), _upper(n * b, n, level)
    values = (
        epsilon_from_rates(hi_a, hi_b, delta=delta)
        if parameter == "epsilon"
        else mu_from_rates(hi_a, hi_b)
    )
    i = int(np.argmax(values))
    return float(values[i]), i


def plan_trials(
    target_epsilon: float,
    delta: float = 0.0,
    confidence_level: float = 0.95,
    *,
    tradeoff: Tradeoff = "laplace",
    mechanism_epsilon: float | None = None,
    mechanism_mu: float | None = None,
    parameter: Parameter = "epsilon",
    threshold: Threshold = "split",
    selection_fraction: float = 0.5,
    max_trials: int = 10**9,
) -> TrialPlan:
    """The fewest trials per arm for which an ideal attack reaches ``target_epsilon``.

    The ideal attack's rates are the mechanism's own trade-off curve: Laplace with
    ``mechanism_epsilon`` or Gaussian with ``mechanism_mu`` (the audited mechanism's true
    parameter, which must exceed the target: no attack certifies more than the mechanism
    leaks, and its expected bound only approaches that parameter as n grows). With
    ``tradeoff="perfect"`` the attack makes no error: the plan is then the fewest trials
    whose limit of detection reaches the target. The expected bound
    (:func:`expected_bound`) grows with n; the smallest n whose expected bound reaches the
    target is found by doubling, then bisection.

    Args:
        target_epsilon: the bound to reach (ε, or μ when ``parameter="mu"``).
        delta: δ of the ε bound.
        confidence_level: the bound's confidence.
        tradeoff: ``"laplace"`` (pure ε-DP, the curve of the Laplace mechanism),
            ``"gaussian"`` (G_μ) or ``"perfect"`` (FPR = FNR = 0).
        mechanism_epsilon: ε of the Laplace mechanism audited.
        mechanism_mu: μ of the Gaussian mechanism audited.
        parameter: ``"epsilon"`` or ``"mu"``.
        threshold, selection_fraction: the threshold strategy (as in :mod:`dpaudit.bounds`).
        max_trials: give up above this n.

    Raises:
        DpauditError: the target is not reachable (≥ the mechanism's own parameter for
            this design, or above ``max_trials``), or a parameter is invalid.
    """
    check_choice("tradeoff", tradeoff, _TRADEOFFS)
    check_choice("parameter", parameter, _PARAMETERS)
    if not target_epsilon > 0:
        raise DpauditError(f"The 'target_epsilon' parameter must be > 0. Got {target_epsilon!r}.")
    alpha, beta = _ideal_rates(tradeoff, target_epsilon, mechanism_epsilon, mechanism_mu, parameter)

    def value(n: int) -> tuple[float, int]:
        return expected_bound(
            n,
            fpr=alpha,
            fnr=beta,
            delta=delta,
            confidence_level=confidence_level,
            threshold=threshold,
            selection_fraction=selection_fraction,
            parameter=parameter,
        )

    low, high = 1, 2
    while value(high)[0] < target_epsilon:
        low, high = high, 2 * high
        if high > max_trials:
            raise DpauditError(
                f"An ideal attack does not reach {parameter} = {target_epsilon} within "
                f"{max_trials} trials per arm (the {tradeoff} mechanism's own parameter "
                f"caps what any attack can certify)."
            )
    while high - low > 1:
        mid = (low + high) // 2
        if value(mid)[0] >= target_epsilon:
            high = mid
        else:
            low = mid
    reached, i = value(high)
    limit = multi_run_limit(
        high,
        delta=delta,
        confidence_level=confidence_level,
        threshold=threshold,
        selection_fraction=selection_fraction,
        parameter=parameter,
    )
    return TrialPlan(
        trials_per_arm=high,
        target=float(target_epsilon),
        expected_value=reached,
        limit=limit.value,
        parameter=parameter,
        delta=delta if parameter == "epsilon" else None,
        confidence_level=confidence_level,
        threshold=threshold,
        selection_fraction=selection_fraction,
        tradeoff=tradeoff,
        mechanism_epsilon=(
            float(mechanism_epsilon)
            if tradeoff == "laplace" and mechanism_epsilon is not None
            else None
        ),
        mechanism_mu=(
            float(mechanism_mu) if tradeoff == "gaussian" and mechanism_mu is not None else None
        ),
        fpr=float(alpha[i]),
        fnr=float(beta[i]),
    )


# ------------------------------------------------------------------------------ helpers


def _ideal_rates(
    tradeoff: str,
    target: float,
    mechanism_epsilon: float | None,
    mechanism_mu: float | None,
    parameter: str,
) -> tuple[np.ndarray, np.ndarray]:
    """The ideal attack's (FPR, FNR) points on the mechanism's trade-off curve."""
    if tradeoff == "perfect":
        return np.zeros(1), np.zeros(1)
    name, value = (
        ("mechanism_epsilon", mechanism_epsilon)
        if tradeoff == "laplace"
        else ("mechanism_mu", mechanism_mu)
    )
    if value is None or isinstance(value, bool) or not float(value) > 0:
        raise DpauditError(
            f"tradeoff={tradeoff!r} needs {name!r}, the audited mechanism's parameter (> 0). "
            f"Got {value!r}."
        )
    # The curve's own parameter caps the bound any attack on it can reach (for μ of a
    # Gaussian, and ε of a Laplace mechanism; the other pairings are capped all the same,
    # by the ε or μ the curve implies, which the search below runs into).
    if (tradeoff, parameter) in (("laplace", "epsilon"), ("gaussian", "mu")) and target >= value:
        raise DpauditError(
            f"An ideal attack never reaches {parameter} = {target}: the {tradeoff} "
            f"mechanism's own {parameter} is {value}. Ask for less, or give a perfect attack "
            "(tradeoff='perfect') for the limit of detection."
        )
    curve = tradeoff_laplace if tradeoff == "laplace" else tradeoff_gdp
    kwargs = {"epsilon": float(value)} if tradeoff == "laplace" else {"mu": float(value)}
    return _GRID, np.asarray(curve(_GRID, **kwargs), dtype=np.float64)


def _upper(k: np.ndarray, n: int, level: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper limit for (possibly fractional) k errors of n."""
    # The upper limit is the level-quantile of Beta(k + 1, n − k); at k = n it is 1.
    from scipy import stats  # here, not at the top: writing a result never needs it

    k = np.clip(k, 0.0, float(n))
    out = np.ones_like(k)
    inside = k < n
    out[inside] = stats.beta.ppf(level, k[inside] + 1.0, n - k[inside])
    return out


def _zero_error_upper(n: int, confidence_level: float, *, tests: int) -> float:
    # 0 errors in n: the upper limit solves (1 − u)^n = a, a = (1 − c)/(2·tests).
    a = (1.0 - confidence_level) / (2.0 * tests)
    return -math.expm1(math.log(a) / n)


def _perfect_counts_bound(
    k0: int, k1: int, delta: float, c: float, parameter: str
) -> EpsilonBound | MuBound:
    if parameter == "epsilon":
        return epsilon_from_counts(0, k0, 0, k1, delta=delta, confidence_level=c)
    return mu_from_counts(0, k0, 0, k1, confidence_level=c)


@dataclass(frozen=True)
class OneRunPlan:
    """How many guesses (and canaries) a one-run audit needs to reach a target ε.

    Attributes:
        guesses: r, guesses the audit makes (even: top r/2 and bottom r/2).
        canaries: m, canaries included by fair coins (``canaries_per_guess`` × r).
        accuracy: the fraction of guesses the ideal attack gets right.
        expected_value: Steinke et al.'s bound at round(accuracy × r) correct guesses.
        limit: the design's limit of detection (every guess right).
    """

    guesses: int
    canaries: int
    target: float
    accuracy: float
    expected_value: float
    limit: float
    delta: float
    confidence_level: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ideal_guess_accuracy(
    *, mechanism_epsilon: float | None = None, mechanism_mu: float | None = None
) -> float:
    """The accuracy of the best guess of one fair coin from one release.

    Guessing a fair coin b from an output of a mechanism whose trade-off curve is f: the
    best test errs with probability min over thresholds of (α + f(α))/2, which for ε-DP
    (the curve of randomised response, Dong, Roth, Su 2022, arXiv 1905.02383v3, Prop. 2.5)
    is 1/(1 + e^ε), and for μ-GDP (G_μ, the same paper's Eq. (2.3)) is Φ(−μ/2). The
    accuracy is one minus that error.
    """
    if (mechanism_epsilon is None) == (mechanism_mu is None):
        raise DpauditError("Give exactly one of mechanism_epsilon and mechanism_mu.")
    if mechanism_epsilon is not None:
        if not mechanism_epsilon >= 0:
            raise DpauditError(f"mechanism_epsilon must be ≥ 0. Got {mechanism_epsilon!r}.")
        return float(1.0 / (1.0 + math.exp(-mechanism_epsilon)))
    assert mechanism_mu is not None
    if not mechanism_mu >= 0:
        raise DpauditError(f"mechanism_mu must be ≥ 0. Got {mechanism_mu!r}.")
    from scipy import stats  # here, not at the top (see _upper)

    return float(stats.norm.cdf(mechanism_mu / 2.0))


def plan_one_run(
    target_epsilon: float,
    delta: float = 0.0,
    confidence_level: float = 0.95,
    *,
    accuracy: float | None = None,
    mechanism_epsilon: float | None = None,
    mechanism_mu: float | None = None,
    canaries_per_guess: int = 1,
    max_guesses: int = 10**7,
) -> OneRunPlan:
    """The fewest guesses r with which a one-run audit is expected to certify the target.

    The ideal attack gets round(accuracy × r) of its r guesses right. The accuracy is
    given, or is that of the best guess against the ε-DP (``mechanism_epsilon``) or μ-GDP
    (``mechanism_mu``) mechanism audited (:func:`ideal_guess_accuracy`), or 1.0 when
    neither is given: a perfect attack, whose plan is the limit of detection. The bound is
    Steinke, Nasr, Jagielski (2023, NeurIPS, Theorem 3.1) via
    :func:`~dpaudit.bounds.one_run_epsilon_lower_bound`; r is found by doubling, then
    bisection over even r.

    Raises:
        DpauditError: the target is not reachable within ``max_guesses`` (an accuracy
            below e^ε/(1 + e^ε) cannot certify ε however many guesses are made), or both
            an accuracy and a mechanism are given.
    """
    if mechanism_epsilon is not None or mechanism_mu is not None:
        if accuracy is not None:
            raise DpauditError(
                "Give the guesses' accuracy or the mechanism it is derived from, not both."
            )
        accuracy = ideal_guess_accuracy(
            mechanism_epsilon=mechanism_epsilon, mechanism_mu=mechanism_mu
        )
    elif accuracy is None:
        accuracy = 1.0
    if not target_epsilon > 0:
        raise DpauditError(f"The 'target_epsilon' parameter must be > 0. Got {target_epsilon!r}.")
    if not 0.5 < accuracy <= 1.0:
        raise DpauditError(f"accuracy must be in (0.5, 1]. Got {accuracy!r}.")
    canaries_per_guess = check_integer("canaries_per_guess", canaries_per_guess, low=1)

    def value(half: int) -> float:
        r = 2 * half
        return one_run_epsilon_lower_bound(
            canaries=canaries_per_guess * r,
            guesses=r,
            correct=round(accuracy * r),
            delta=delta,
            confidence_level=confidence_level,
        ).value

    low, high = 0, 1
    while value(high) < target_epsilon:
        low, high = high, 2 * high
        if 2 * high > max_guesses:
            raise DpauditError(
                f"A one-run audit whose guesses are {accuracy:.4g} accurate does not reach "
                f"ε = {target_epsilon} within {max_guesses} guesses."
            )
    while high - low > 1:
        mid = (low + high) // 2
        if value(mid) >= target_epsilon:
            high = mid
        else:
            low = mid
    r = 2 * high
    return OneRunPlan(
        guesses=r,
        canaries=canaries_per_guess * r,
        target=float(target_epsilon),
        accuracy=float(accuracy),
        expected_value=value(high),
        limit=one_run_limit(
            canaries_per_guess * r, r, delta=delta, confidence_level=confidence_level
        ).value,
        delta=delta,
        confidence_level=confidence_level,
    )
