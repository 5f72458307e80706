"""Empirical trade-off curves (type I vs type II error) and membership-inference metrics.

Convention (docs/design.md, "Hypotheses and scores"): H0 = the output came from D (canary
out, non-member), H1 = from D' (canary in, member). A score is larger when the attack
believes H1. A threshold t rejects H0 when s ≥ t, so FPR(t) = P[s ≥ t | H0] and
FNR(t) = P[s < t | H1].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from dpaudit.errors import DpauditError
from dpaudit.stats import (
    ConfidenceInterval,
    check_confidence_level,
    clopper_pearson,
    normal_quantile,
)

DEFAULT_FPRS: tuple[float, ...] = (0.1, 0.01, 0.001)


def as_scores(name: str, scores: Any) -> np.ndarray:
    """Validate one hypothesis' scores: a non-empty 1-D array of finite numbers."""
    arr = np.asarray(scores, dtype=float)
    if arr.ndim != 1:
        raise DpauditError(f"The {name!r} parameter must be a 1-D array. Got shape {arr.shape}.")
    if arr.size == 0:
        raise DpauditError(f"The {name!r} parameter must hold at least one score. Got none.")
    bad = ~np.isfinite(arr)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DpauditError(
            f"The {name!r} parameter must hold finite numbers. Got {int(bad.sum())} NaN or "
            f"infinite value(s) (first at index {first}: {arr[first]!r})."
        )
    return arr


@dataclass(frozen=True)
class TradeoffCurve:
    """The empirical trade-off curve of a threshold test on two samples of scores.

    Every distinct threshold is listed in decreasing order, preceded by ``+inf`` (reject
    nothing). Row i holds the counts of the test "s ≥ thresholds[i]". A curve known only
    at a grid of thresholds (:meth:`GridCounts.curve`) lists the grid instead, and ends
    with ``-inf`` (reject everything).

    Attributes:
        thresholds: Decreasing thresholds, the first one ``+inf``.
        fp: Negatives (H0) with s ≥ t.
        tp: Positives (H1) with s ≥ t.
        negatives: Number of H0 scores.
        positives: Number of H1 scores.
    """

    thresholds: np.ndarray = field(repr=False)
    fp: np.ndarray = field(repr=False)
    tp: np.ndarray = field(repr=False)
    negatives: int
    positives: int

    @classmethod
    def from_scores(cls, negative_scores: Any, positive_scores: Any) -> TradeoffCurve:
        """Build the curve from the H0 (negative) and H1 (positive) scores."""
        neg = np.sort(as_scores("negative_scores", negative_scores))
        pos = np.sort(as_scores("positive_scores", positive_scores))
        return cls.from_sorted(neg, pos)

    @classmethod
    def from_sorted(cls, negative_sorted: np.ndarray, positive_sorted: np.ndarray) -> TradeoffCurve:
        """Build the curve from each hypothesis' scores already sorted in increasing order.

        The two sorted samples are merged in O(n) (a stable sort of two ascending runs is
        one merge), and each distinct score's counts are read off running counts of the
        merged labels: the negatives strictly below a distinct value are those that come
        before its first occurrence. This gives exactly the thresholds and counts of
        ``np.unique`` and ``np.searchsorted`` (the construction this replaced), at a
        fraction of the cost at 10⁶ scores. Inputs are trusted: finite, 1-D, sorted.
        """
        neg = np.asarray(negative_sorted, dtype=float)
        pos = np.asarray(positive_sorted, dtype=float)
        n0, n1 = int(neg.size), int(pos.size)
        # At 10⁶ scores every temporary is megabytes of fresh pages (page faults cost
        # more than the arithmetic here): each is dropped as soon as it has been used,
        # and the outputs are written in place rather than concatenated.
        merged = np.concatenate([neg, pos])
        order = np.argsort(merged, kind="stable")
        merged = merged[order]
        is_neg = order < n0
        del order
        first = np.empty(merged.size, dtype=bool)  # the first occurrence of each value
        first[:1] = True
        np.not_equal(merged[1:], merged[:-1], out=first[1:])
        starts = np.flatnonzero(first)[::-1]  # decreasing values from here on
        del first
        m = starts.size
        # Decreasing thresholds, +inf first (reject nothing: no score is >= +inf).
        thresholds = np.empty(m + 1)
        thresholds[0] = np.inf
        np.take(merged, starts, out=thresholds[1:])
        del merged
        # negatives among the first i merged scores; those before a value's first
        # occurrence are the negatives strictly below it
        seen = np.empty(is_neg.size + 1, dtype=np.int64)
        seen[0] = 0
        np.cumsum(is_neg, out=seen[1:])
        del is_neg
        fp = np.empty(m + 1, dtype=np.int64)
        tp = np.empty(m + 1, dtype=np.int64)
        fp[0] = tp[0] = 0
        np.take(seen, starts, out=fp[1:])  # negatives strictly below each value
        del seen
        np.subtract(starts, fp[1:], out=tp[1:])  # positives strictly below
        np.subtract(n0, fp[1:], out=fp[1:])
        np.subtract(n1, tp[1:], out=tp[1:])
        return cls(thresholds, fp, tp, n0, n1)

    @property
    def fn(self) -> np.ndarray:
        return self.positives - self.tp

    @property
    def tn(self) -> np.ndarray:
        return self.negatives - self.fp

    @cached_property
    def fpr(self) -> np.ndarray:
        # Cached: the metrics read it at several targets, and at 10⁶ thresholds each fresh
        # division is an 8 MB array. The curve is frozen, so the cache never goes stale.
        return self.fp / self.negatives

    @cached_property
    def tpr(self) -> np.ndarray:
        return self.tp / self.positives

    @property
    def fnr(self) -> np.ndarray:
        return 1.0 - self.tpr

    def auc(self) -> float:
        """Area under the ROC curve: P[s₁ > s₀] + ½·P[s₁ = s₀] (the trapezoid rule)."""
        fpr, tpr = self.fpr, self.tpr
        # np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0), the same operations in the
        # same order, with one temporary fewer than three (megabytes at 10⁶ thresholds).
        width = np.diff(fpr)
        height = np.add(tpr[1:], tpr[:-1])
        np.multiply(width, height, out=width)
        del height
        np.divide(width, 2.0, out=width)
        return float(np.sum(width))

    def tpr_at(self, fpr: float) -> float:
        """The largest TPR among thresholds whose empirical FPR is at most ``fpr``."""
        ok = self.fpr <= fpr
        return float(self.tpr[ok].max())

    def index_at(self, fpr: float) -> int:
        """Index of the threshold that gives :meth:`tpr_at` (the lowest such threshold)."""
        ok = np.flatnonzero(self.fpr <= fpr)
        return int(ok[-1])

    def advantage(self) -> float:
        """Yeom et al. (2018) membership advantage: max over thresholds of TPR − FPR."""
        return float(np.max(self.tpr - self.fpr))

    def __repr__(self) -> str:
        return (
            f"TradeoffCurve(negatives={self.negatives}, positives={self.positives}, "
            f"thresholds={self.thresholds.size}, auc={self.auc():.4f})"
        )


def check_grid(grid: Any) -> np.ndarray:
    """Validate a grid of candidate thresholds: a non-empty 1-D array of finite numbers in
    strictly increasing order."""
    arr = np.asarray(grid, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise DpauditError(
            f"The 'grid' parameter must be a non-empty 1-D array. Got shape {arr.shape}."
        )
    if not np.all(np.isfinite(arr)) or np.any(np.diff(arr) <= 0):
        raise DpauditError(
            "The 'grid' parameter must hold finite thresholds in strictly increasing order."
        )
    return arr


def count_at_least(scores: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """For each threshold t of the increasing ``grid``, the number of ``scores`` with
    s ≥ t (int64), in O(n log G) time and O(n + G) memory.

    ``searchsorted(grid, s, "right")`` is the number of grid thresholds ≤ s, i.e. the
    number of tests "s ≥ t" that s passes; s passes the test at grid[j] exactly when that
    number is at least j + 1, so the counts are the tail sums of its histogram.
    """
    passed = np.searchsorted(grid, scores, side="right")
    per = np.bincount(passed, minlength=grid.size + 1)
    del passed
    return np.cumsum(per[::-1])[::-1][1:].astype(np.int64)


@dataclass(frozen=True)
class GridCounts:
    """Counts of two samples of scores at a grid of thresholds fixed in advance.

    For each threshold t of ``grid`` (finite, strictly increasing), ``fp`` holds the
    number of negatives (H0) with s ≥ t and ``tp`` the number of positives (H1) with
    s ≥ t. Counts of disjoint samples on the same grid add up (``a + b``), so a sample
    too large for memory is counted piece by piece (one work unit at a time) and merged;
    the result is exactly the count of the whole sample.

    Attributes:
        grid: The thresholds, increasing.
        fp: Negatives with s ≥ t, one per threshold.
        tp: Positives with s ≥ t, one per threshold.
        negatives: Number of H0 scores counted.
        positives: Number of H1 scores counted.
    """

    grid: np.ndarray = field(repr=False)
    fp: np.ndarray = field(repr=False)
    tp: np.ndarray = field(repr=False)
    negatives: int
    positives: int

    @classmethod
    def zero(cls, grid: Any) -> GridCounts:
        """No scores counted yet (the start of a merge)."""
        g = check_grid(grid)
        return cls(g, np.zeros(g.size, np.int64), np.zeros(g.size, np.int64), 0, 0)

    @classmethod
    def count(cls, grid: Any, negative_scores: Any, positive_scores: Any) -> GridCounts:
        """The counts of one sample of each hypothesis' scores on ``grid``."""
        g = check_grid(grid)
        neg = as_scores("negative_scores", negative_scores)
        pos = as_scores("positive_scores", positive_scores)
        return cls(g, count_at_least(neg, g), count_at_least(pos, g), neg.size, pos.size)

    def __add__(self, other: GridCounts) -> GridCounts:
        if other.grid is not self.grid and not np.array_equal(other.grid, self.grid):
            raise DpauditError("Counts on different grids of thresholds cannot be merged.")
        return GridCounts(
            self.grid,
            self.fp + other.fp,
            self.tp + other.tp,
            self.negatives + other.negatives,
            self.positives + other.positives,
        )

    def curve(self) -> TradeoffCurve:
        """The trade-off curve at the grid's thresholds, decreasing, between ``+inf``
        (reject nothing) and ``-inf`` (reject everything: every score passes).

        It is exactly :meth:`TradeoffCurve.from_scores` of the scores rounded down to the
        nearest grid threshold (−inf below the lowest), except that a grid threshold no
        score rounds to gives a row equal to its neighbour's. Neither changes a rate, the
        AUC or a bound; the end rows always give a bound of 0 (an FNR of 1, resp. an FPR
        of 1).
        """
        if self.negatives < 1 or self.positives < 1:
            raise DpauditError(
                "A trade-off curve needs at least one score per hypothesis; got "
                f"{self.negatives} negatives and {self.positives} positives."
            )
        rows = self.grid.size + 2
        thresholds = np.empty(rows)
        fp = np.empty(rows, dtype=np.int64)
        tp = np.empty(rows, dtype=np.int64)
        thresholds[0], fp[0], tp[0] = np.inf, 0, 0
        thresholds[1:-1], fp[1:-1], tp[1:-1] = self.grid[::-1], self.fp[::-1], self.tp[::-1]
        thresholds[-1], fp[-1], tp[-1] = -np.inf, self.negatives, self.positives
        return TradeoffCurve(thresholds, fp, tp, self.negatives, self.positives)


@dataclass(frozen=True)
class RateAtFpr:
    """TPR at a target FPR, with the threshold that achieves it and its intervals."""

    target_fpr: float
    threshold: float
    fpr: float
    tpr: float
    tpr_interval: ConfidenceInterval
    fpr_interval: ConfidenceInterval

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_fpr": self.target_fpr,
            "threshold": _finite_or_none(self.threshold),
            "fpr": self.fpr,
            "tpr": self.tpr,
            "tpr_interval": list(self.tpr_interval),
            "fpr_interval": list(self.fpr_interval),
        }


@dataclass(frozen=True)
class MembershipMetrics:
    """Descriptive metrics of a membership (or any two-hypothesis) attack.

    The intervals are two-sided at ``confidence_level``. The thresholds for TPR-at-FPR
    and for the advantage are chosen on the same scores that are counted, so those
    intervals describe the attack on this data; they are not a rigorous privacy bound
    (use :mod:`dpaudit.bounds` for that).
    """

    auc: float
    auc_interval: ConfidenceInterval
    tpr_at_fpr: tuple[RateAtFpr, ...]
    advantage: float
    advantage_interval: ConfidenceInterval
    negatives: int
    positives: int
    confidence_level: float
    auc_method: str = "delong"

    def to_dict(self) -> dict[str, Any]:
        return {
            "auc": self.auc,
            "auc_interval": list(self.auc_interval),
            "auc_method": self.auc_method,
            "tpr_at_fpr": [r.to_dict() for r in self.tpr_at_fpr],
            "advantage": self.advantage,
            "advantage_interval": list(self.advantage_interval),
            "negatives": self.negatives,
            "positives": self.positives,
            "confidence_level": self.confidence_level,
        }


def delong_auc_variance(negative_scores: np.ndarray, positive_scores: np.ndarray) -> float:
    """DeLong's variance of the empirical AUC (ties counted ½).

    References:
        DeLong, DeLong, Clarke-Pearson (1988), "Comparing the areas under two or more
        correlated receiver operating characteristic curves", Biometrics 44(3), eq. for
        the structural components V10, V01 and S = S10/m + S01/n.
    """
    neg = np.asarray(negative_scores, dtype=float)
    pos = np.asarray(positive_scores, dtype=float)
    m, n = pos.size, neg.size
    if m < 2 or n < 2:
        return float("nan")
    neg_sorted = np.sort(neg)
    pos_sorted = np.sort(pos)
    # V10(x) = P[neg < x] + ½ P[neg = x] over positives x; V01(y) = P[pos > y] + ½ P[pos = y]
    # over negatives y. With c_< and c_≤ the counts strictly below and at most, the
    # component is (c_< + c_≤)/2. The variances do not depend on the order of the
    # components, so the queries are the SORTED scores (searchsorted then walks memory in
    # order: about 8× faster at 10⁶ scores than querying in the original order).
    lo = np.searchsorted(neg_sorted, pos_sorted, side="left")
    hi = np.searchsorted(neg_sorted, pos_sorted, side="right")
    v10 = (lo + hi) * (0.5 / n)
    lo = np.searchsorted(pos_sorted, neg_sorted, side="left")
    hi = np.searchsorted(pos_sorted, neg_sorted, side="right")
    v01 = (2 * m - lo - hi) * (0.5 / m)
    return float(np.var(v10, ddof=1) / m + np.var(v01, ddof=1) / n)


def delong_auc_variance_from_curve(curve: TradeoffCurve) -> float:
    """:func:`delong_auc_variance` of the scores that ``curve`` was built from, read off its
    counts in O(thresholds), bit for bit the same value.

    At the distinct score t_i (row i ≥ 1; row i − 1 is the next larger score, or +inf),
    the negatives below t_i number n − fp[i], those at most t_i n − fp[i − 1], and
    tp[i] − tp[i − 1] positives score exactly t_i; so each positive's component
    (c_< + c_≤)/2n is a function of its row, and the components of the sorted positives
    are those per-row values repeated by the multiplicities, in increasing order of t.
    The integer sums and the one scaling are the ones :func:`delong_auc_variance`
    computes, and ``np.var`` sees the same array in the same order: the same bits.
    The negatives' components V01(y) = (c_> + c_≥)/2m likewise, with tp[i] + tp[i − 1].
    """
    m, n = curve.positives, curve.negatives
    if m < 2 or n < 2:
        return float("nan")
    fp, tp = curve.fp, curve.tp
    # Rows 1.. in increasing order of the score (the thresholds decrease with the row).
    fp_at, fp_above = fp[:0:-1], fp[-2::-1]
    tp_at, tp_above = tp[:0:-1], tp[-2::-1]
    # (n − fp[i]) + (n − fp[i − 1]) = 2n − (fp[i] + fp[i − 1]): the same integer.
    below = np.add(fp_at, fp_above)
    np.subtract(2 * n, below, out=below)
    v10 = np.repeat(below * (0.5 / n), tp_at - tp_above)
    del below
    above = np.add(tp_at, tp_above)
    v01 = np.repeat(above * (0.5 / m), fp_at - fp_above)
    del above
    return float(np.var(v10, ddof=1) / m + np.var(v01, ddof=1) / n)


def delong_auc_variance_binned(curve: TradeoffCurve) -> float:
    """DeLong's variance of the AUC of the scores a trade-off curve was built from, with
    every threshold's group of scores tied: for a grid curve (:meth:`GridCounts.curve`),
    the scores rounded down to the grid. O(thresholds) time and memory, whatever the
    number of scores.

    The structural components are those of :func:`delong_auc_variance_from_curve` (one
    value per row, shared by every score at that row); instead of repeating each value
    once per score (an array of all the scores), the sample variance (ddof = 1) is taken
    with the multiplicities as weights: Σ wᵢ(vᵢ − v̄)² / (Σ wᵢ − 1), v̄ = Σ wᵢvᵢ / Σ wᵢ.
    Equal to :func:`delong_auc_variance` of the rounded scores up to rounding.

    References:
        DeLong, DeLong, Clarke-Pearson (1988), Biometrics 44(3) (V10, V01 and
        S = S10/m + S01/n).
    """
    m, n = curve.positives, curve.negatives
    if m < 2 or n < 2:
        return float("nan")
    fp, tp = curve.fp, curve.tp
    fp_at, fp_above = fp[:0:-1], fp[-2::-1]
    tp_at, tp_above = tp[:0:-1], tp[-2::-1]
    v10 = (2 * n - (fp_at + fp_above)) * (0.5 / n)
    v01 = (tp_at + tp_above) * (0.5 / m)
    return (
        _weighted_variance(v10, tp_at - tp_above) / m
        + _weighted_variance(v01, fp_at - fp_above) / n
    )


def _weighted_variance(values: np.ndarray, weights: np.ndarray) -> float:
    """Sample variance (ddof = 1) of ``values`` each repeated ``weights`` times."""
    w = weights.astype(float)
    total = float(w.sum())
    mean = float(np.dot(w, values)) / total
    return float(np.dot(w, (values - mean) ** 2)) / (total - 1.0)


def membership_metrics(
    negative_scores: Any,
    positive_scores: Any,
    *,
    confidence_level: float = 0.95,
    fprs: tuple[float, ...] = DEFAULT_FPRS,
    curve: TradeoffCurve | None = None,
) -> MembershipMetrics:
    """ROC summary of an attack: AUC, TPR at low FPR, and advantage, with intervals.

    Args:
        negative_scores: Scores of non-members (H0).
        positive_scores: Scores of members (H1).
        confidence_level: Two-sided coverage of each interval.
        fprs: Target false-positive rates for TPR-at-FPR.
        curve: ``TradeoffCurve.from_scores(negative_scores, positive_scores)`` when the
            caller has built it already (it is not built twice); it must be that curve.

    Returns:
        :class:`MembershipMetrics`. The AUC interval is DeLong's normal interval clipped to
        [0, 1]; TPR and FPR intervals are Clopper–Pearson; the advantage interval is
        [TPR_low − FPR_high, TPR_high − FPR_low] with each rate's two-sided interval at
        1 − (1 − c)/2, so that both hold jointly with probability ≥ c (union bound).
    """
    c = check_confidence_level(confidence_level)
    neg = as_scores("negative_scores", negative_scores)
    pos = as_scores("positive_scores", positive_scores)
    if curve is None:
        curve = TradeoffCurve.from_scores(neg, pos)
    elif (curve.negatives, curve.positives) != (neg.size, pos.size):
        raise ValueError("membership_metrics: 'curve' is not the curve of these scores")
    return _curve_metrics(curve, c, fprs, delong_auc_variance_from_curve(curve), "delong")


def binned_metrics(
    curve: TradeoffCurve, *, confidence_level: float = 0.95, fprs: tuple[float, ...] = DEFAULT_FPRS
) -> MembershipMetrics:
    """:func:`membership_metrics` of a curve known only at a grid of thresholds
    (:meth:`GridCounts.curve`), without the scores.

    Such a curve is exactly the curve of the scores rounded down to the nearest grid
    threshold (``s ≥ t`` and "s rounded down ≥ t" agree for every grid threshold t), so
    every metric is that of the rounded scores: the AUC counts two scores in the same bin
    as a tie (½), TPR at FPR is read at grid thresholds only (never above the exact
    curve's), the advantage is the largest over grid thresholds. The AUC interval is
    DeLong's for the rounded scores (:func:`delong_auc_variance_binned`); ``auc_method``
    says so.
    """
    c = check_confidence_level(confidence_level)
    var = delong_auc_variance_binned(curve)
    return _curve_metrics(curve, c, fprs, var, "delong, binned on the grid of thresholds")


def _curve_metrics(
    curve: TradeoffCurve, c: float, fprs: tuple[float, ...], var: float, auc_method: str
) -> MembershipMetrics:
    """The metrics of :func:`membership_metrics` read off ``curve``, with the DeLong
    variance ``var`` of its AUC."""
    auc = curve.auc()
    if np.isfinite(var):
        z = normal_quantile(0.5 + c / 2.0)
        se = float(np.sqrt(max(var, 0.0)))
        auc_ci = ConfidenceInterval(max(0.0, auc - z * se), min(1.0, auc + z * se))
    else:  # one score in a class: no variance estimate, the honest interval is everything
        auc_ci = ConfidenceInterval(0.0, 1.0)
    rows = []
    for target in fprs:
        i = curve.index_at(target)
        rows.append(
            RateAtFpr(
                target_fpr=float(target),
                threshold=float(curve.thresholds[i]),
                fpr=float(curve.fpr[i]),
                tpr=float(curve.tpr[i]),
                tpr_interval=clopper_pearson(int(curve.tp[i]), curve.positives, confidence_level=c),
                fpr_interval=clopper_pearson(int(curve.fp[i]), curve.negatives, confidence_level=c),
            )
        )
    j = int(np.argmax(curve.tpr - curve.fpr))
    joint = 1.0 - (1.0 - c) / 2.0  # union bound over the two rates
    tpr_ci = clopper_pearson(int(curve.tp[j]), curve.positives, confidence_level=joint)
    fpr_ci = clopper_pearson(int(curve.fp[j]), curve.negatives, confidence_level=joint)
    adv_ci = ConfidenceInterval(
        max(-1.0, tpr_ci.low - fpr_ci.high), min(1.0, tpr_ci.high - fpr_ci.low)
    )
    return MembershipMetrics(
        auc=auc,
        auc_interval=auc_ci,
        tpr_at_fpr=tuple(rows),
        advantage=float(curve.tpr[j] - curve.fpr[j]),
        advantage_interval=adv_ci,
        negatives=curve.negatives,
        positives=curve.positives,
        confidence_level=c,
        auc_method=auc_method,
    )


def _finite_or_none(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None
