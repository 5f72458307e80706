"""The threshold with the largest per-threshold bound, found without scanning them all.

A data-chosen threshold (the ``bonferroni`` bound, and the selection step of ``split``
in :mod:`dpaudit.bounds`) is the first maximiser, as ``np.argmax`` finds it, of a bound
evaluated at every threshold of a trade-off curve from the one-sided Clopper–Pearson
upper limits of its FPR and FNR. That full scan (:func:`full_scan`) inverts the Beta
distribution twice per distinct threshold: about 10⁶ times at 10⁶ trials.

:func:`best_threshold` is a speed device that returns the same answer, bit for bit
(index, bound value and both limits), from a few thousand inversions. It computes the
limits only at some counts (:class:`MonotoneLimits`) and brackets every other count's
limit between its computed neighbours. Because the bound decreases in both limits, the
brackets of the limits bracket the bound; a threshold whose bracket lies wholly below
another's cannot be the maximiser, nor tie it, and is dropped. The survivors' brackets
are narrowed until every survivor's limits are computed exactly, by the very function
the full scan calls, and the first maximiser among them is the full scan's. The device
changes no result: which counts get computed, and in what order, only decides how much
work is done.

The bound is passed in as a function of the two limits (in :mod:`dpaudit.bounds`, the ε
or the μ inequality), so this module knows nothing of what is being bounded. Pure
functions of arrays and numbers; no state beyond the optional table of computed limits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpaudit.stats import clopper_pearson_upper
from dpaudit.tradeoff import TradeoffCurve

#: A per-threshold bound ``bound(fpr_high, fnr_high)``: elementwise over arrays of the
#: FPR and FNR upper limits. See :func:`best_threshold` for what it must satisfy.
Bound = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Best:
    """The first maximiser of a per-threshold bound over a trade-off curve.

    Attributes:
        index: Index into the curve's thresholds (and its ``fp``, ``fn``).
        value: The bound at that threshold.
        fpr_high: The FPR upper limit that entered it.
        fnr_high: The FNR upper limit that entered it.
    """

    index: int
    value: float
    fpr_high: float
    fnr_high: float


def full_scan(
    curve: TradeoffCurve, *, level_fpr: float, level_fnr: float, bound: Bound
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every threshold's bound, with the rate upper limits it used: ``(values, fpr_high,
    fnr_high)``, one entry per threshold of ``curve``.

    The reference that :func:`best_threshold` reproduces: the first ``np.argmax`` of
    ``values`` is its answer. One Beta inversion per threshold and rate.
    """
    fpr_hi = clopper_pearson_upper(curve.fp, curve.negatives, level=level_fpr)
    fnr_hi = clopper_pearson_upper(curve.fn, curve.positives, level=level_fnr)
    return bound(fpr_hi, fnr_hi), fpr_hi, fnr_hi


class MonotoneLimits:
    """Clopper–Pearson upper limits of k out of ``n`` at ``level``, computed only at some
    counts; elsewhere a bracket from the nearest computed counts.

    The upper limit increases in k (a larger count never has a smaller upper limit), so
    the limits at the computed neighbours k_a ≤ k ≤ k_b bracket the limit at k. Every
    computed value comes from :func:`clopper_pearson_upper` itself, so a count that is
    computed has exactly the value a full scan would give it.
    """

    # Every count up to DENSE, then a geometric grid (ratio 1 + 1/GRID) up to n: about
    # DENSE + GRID·ln(n/DENSE) inversions instead of one per threshold. The constants
    # only set how the work is spread (they change no result): at 10⁶ trials per arm,
    # a finer first grid with brackets split in 4 per round inverts ~10⁴ Betas for the
    # ε and μ searches together, against ~5·10⁴ with (256, 16, 8192).
    DENSE = 256
    GRID = 512
    EXACT = 4096
    SPLIT = 4

    def __init__(self, n: int, level: float) -> None:
        self.n, self.level = n, level
        dense = np.arange(min(n, self.DENSE) + 1, dtype=np.int64)
        steps = max(0, math.ceil(math.log(max(n, 1) / self.DENSE) * (self.GRID + 1)) + 1)
        ratio = (1.0 + 1.0 / self.GRID) ** np.arange(steps)
        grid = np.round(self.DENSE * ratio).astype(np.int64)
        self.counts = np.unique(np.concatenate([dense, grid[grid <= n], [n]]))
        self.limits = clopper_pearson_upper(self.counts, n, level=level)

    def bracket(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(low, high, exact)``: limits bracketing each count's, and whether it is computed."""
        pos = np.searchsorted(self.counts, k, side="left")
        exact = self.counts[pos] == k
        high = self.limits[pos]
        low = np.where(exact, high, self.limits[np.maximum(pos - 1, 0)])
        return low, high, exact

    def refine(self, k: np.ndarray) -> None:
        """Narrow the brackets of the counts ``k`` (none computed yet): up to EXACT distinct
        counts are computed outright; more are bracketed anew by SPLIT evenly spaced
        counts inside each of their brackets (each bracket shrinks by that factor)."""
        k = _unique(k)
        if k.size > self.EXACT:
            pos = _unique(np.searchsorted(self.counts, k, side="left"))
            a, b = self.counts[pos - 1], self.counts[pos]
            inner = a[:, None] + ((b - a)[:, None] * np.arange(1, self.SPLIT)) // self.SPLIT
            k = _unique(inner.ravel())
        k = k[~np.isin(k, self.counts)]  # a shared table may hold some of them already
        counts = np.concatenate([self.counts, k])
        limits = np.concatenate([self.limits, clopper_pearson_upper(k, self.n, level=self.level)])
        order = np.argsort(counts, kind="stable")
        self.counts, self.limits = counts[order], limits[order]

    def exact(self, k: np.ndarray) -> np.ndarray:
        return self.limits[np.searchsorted(self.counts, k, side="left")]


def _unique(k: np.ndarray) -> np.ndarray:
    """``np.unique(k)`` for a 1-D integer array, in O(k) when ``k`` is monotone.

    The counts along a trade-off curve are monotone (FP rises and FN falls as the
    threshold falls), and so is every subsequence of them; ``np.unique`` would hash or
    sort 10⁶ of them anyway. Same values, same order (increasing), same dtype.
    """
    if k.size > 1:
        step = np.diff(k)
        if (step < 0).any():
            if (step > 0).any():
                return np.unique(k)
            k, step = k[::-1], -step[::-1]
        return k[np.concatenate(([True], step != 0))]
    return np.unique(k)


#: The Clopper–Pearson limits already computed, by (n, level): the ε and the μ search
#: on one curve (same n, same levels) share them; a shared table only holds more exact
#: counts, which narrows brackets and never changes a computed limit.
LimitsCache = dict[tuple[int, float], MonotoneLimits]


def _limits(n: int, level: float, cache: LimitsCache | None) -> MonotoneLimits:
    if cache is None:
        return MonotoneLimits(n, level)
    key = (int(n), float(level))
    if key not in cache:
        cache[key] = MonotoneLimits(n, level)
    return cache[key]


def _run_starts(*columns: np.ndarray) -> np.ndarray:
    """Indices where the tuple of ``columns`` differs from the previous row (0 included)."""
    change = np.zeros(columns[0].size, dtype=bool)
    change[:1] = True
    for col in columns:
        change[1:] |= col[1:] != col[:-1]
    return np.flatnonzero(change)


def _bracketed_values(
    bound: Bound,
    fp_low: np.ndarray,
    fp_high: np.ndarray,
    fn_low: np.ndarray,
    fn_high: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """``bound`` at the low and at the high limits, evaluated once per run of equal rows:
    between two computed counts every threshold shares one bracket, so 10⁶ thresholds
    have only a few thousand distinct brackets. Each row gets exactly the value the
    elementwise call would give it (same inputs, same function)."""
    starts = _run_starts(fp_low, fp_high, fn_low, fn_high)
    lengths = np.diff(np.append(starts, fp_low.size))
    upper = bound(fp_low[starts], fn_low[starts])
    lower = bound(fp_high[starts], fn_high[starts])
    return np.repeat(upper, lengths), np.repeat(lower, lengths)


def _keep(upper: np.ndarray, floor: float) -> np.ndarray:
    """Which thresholds can still reach the best bound: their ``upper`` is not below the
    best ``lower`` (``floor``), and positive."""
    # The slack (1e-9 relative) only keeps more thresholds: it absorbs any rounding
    # by which the computed limits could fail to be monotone in the count.
    return (upper >= floor - 1e-9 * max(1.0, abs(floor))) & (upper > 0.0)


def _first_pass(
    curve: TradeoffCurve, fp_limits: MonotoneLimits, fn_limits: MonotoneLimits, bound: Bound
) -> np.ndarray:
    """The indices that survive the first pruning of :func:`best_threshold`, found
    without visiting every threshold.

    Along the curve FP rises and FN falls, so the thresholds fall into runs whose FP and
    FN are bracketed by the same computed counts (a run ends where a count crosses one
    in a table, found by binary search in the curve): at 10⁶ thresholds, about as many
    runs as table entries. The brackets, the bound values and ``_keep`` are evaluated
    once per run, with the very values the per-threshold pass computes, so the same
    thresholds survive. Index 0 always survives. A curve whose counts are not monotone
    (not one from scores) gets the per-threshold pass.
    """
    size = curve.fp.size
    fp_all, tp_all = curve.fp, curve.tp
    if size < 2 or (np.diff(fp_all) < 0).any() or (np.diff(tp_all) < 0).any():
        return np.arange(size)
    # FN = positives − TP: FN meets a count c where TP meets positives − c.
    cuts = [np.zeros(1, dtype=np.int64)]
    for key, table in (
        (fp_all, fp_limits.counts),
        (tp_all, curve.positives - fn_limits.counts[::-1]),
    ):
        cuts += [np.searchsorted(key, table, side="left"), np.searchsorted(key, table, "right")]
    starts = np.unique(np.concatenate(cuts))
    starts = starts[starts < size]
    fp_low, fp_high, _ = fp_limits.bracket(fp_all[starts])
    fn_low, fn_high, _ = fn_limits.bracket(curve.positives - tp_all[starts])
    upper = bound(fp_low, fn_low)
    floor = float(bound(fp_high, fn_high).max())
    keep = np.repeat(_keep(upper, floor), np.diff(np.append(starts, size)))
    keep[0] = True
    return np.flatnonzero(keep)


def best_threshold(
    curve: TradeoffCurve,
    *,
    level_fpr: float,
    level_fnr: float,
    bound: Bound,
    cache: LimitsCache | None = None,
) -> Best:
    """The first index of the largest per-threshold bound of :func:`full_scan`, with that
    bound and its limits, bit-identical to ``np.argmax`` over the full scan.

    Bracketing each threshold's limits by the limits at computed counts brackets its
    bound: ``upper`` (from the lower limits) and ``lower``. A threshold whose ``upper``
    is below the best ``lower`` cannot be the maximiser, nor tie it. The survivors'
    brackets are refined until every survivor's limits are computed exactly; the
    maximum among them, and its first index, are then those of the full scan. Every
    threshold with a bound equal to the maximum M > 0 survives (its ``upper`` is ≥ M ≥
    every ``lower``), so ties are broken by the first index as ``np.argmax`` does; index
    0 (threshold +inf: FN = all positives, limit exactly 1) has bound 0, the first index
    of a maximum of 0.

    Args:
        curve: The trade-off curve whose thresholds are searched.
        level_fpr: Level of the one-sided Clopper–Pearson upper limit on each FPR.
        level_fnr: Level of the one-sided Clopper–Pearson upper limit on each FNR.
        bound: The per-threshold bound ``bound(fpr_high, fnr_high)``, evaluated
            elementwise on arrays (a row's value depends on that row alone). It must be
            non-increasing in both arguments, which is what makes the brackets valid: the
            limits increase in the counts, so the limits at the computed neighbours give
            an upper and a lower end for the bound in between. It must also be ≥ 0, and 0
            when ``fnr_high`` is 1 (index 0 is then a maximiser when nothing beats 0).
            The ε and μ inequalities of :mod:`dpaudit.bounds` are all three.
        cache: Shares computed limits between searches on curves with the same sample
            sizes and levels (the ε and μ searches of one audit); the result does not
            depend on it.

    Returns:
        :class:`Best`: the full scan's first maximiser, its bound and its two limits.
    """
    fp_limits = _limits(curve.negatives, level_fpr, cache)
    fn_limits = _limits(curve.positives, level_fnr, cache)
    fp_all, fn_all = curve.fp, curve.fn
    idx = _first_pass(curve, fp_limits, fn_limits, bound)
    while True:
        fp, fn = fp_all[idx], fn_all[idx]
        fp_low, fp_high, fp_exact = fp_limits.bracket(fp)
        fn_low, fn_high, fn_exact = fn_limits.bracket(fn)
        upper, lower = _bracketed_values(bound, fp_low, fp_high, fn_low, fn_high)
        floor = float(lower.max())
        keep = _keep(upper, floor)
        keep[idx == 0] = True
        if not keep.all():
            idx, fp, fn = idx[keep], fp[keep], fn[keep]
            fp_exact, fn_exact = fp_exact[keep], fn_exact[keep]
        if fp_exact.all() and fn_exact.all():
            break
        if not fp_exact.all():
            fp_limits.refine(fp[~fp_exact])
        if not fn_exact.all():
            fn_limits.refine(fn[~fn_exact])
    fpr_high = fp_limits.exact(fp_all[idx])
    fnr_high = fn_limits.exact(fn_all[idx])
    values = bound(fpr_high, fnr_high)
    j = int(np.argmax(values))
    return Best(int(idx[j]), float(values[j]), float(fpr_high[j]), float(fnr_high[j]))


# ------------------------------------------------------------ a grid fixed in advance


class ScoreSketch:
    """A summary of two samples of scores, built piece by piece in bounded memory, from
    which a grid of candidate thresholds is drawn (:meth:`grid`).

    Bounds that stream their trials (a mechanism audit at 10⁸ trials per arm) cannot hold
    every score, so they count FP and FN only at a grid of thresholds fixed before the
    counted trials are read (:class:`~dpaudit.tradeoff.GridCounts`). The grid is drawn
    from this sketch of OTHER trials (the selection part of a split, or trials set aside
    for a Bonferroni grid), which is what keeps the counts' limits at their level: any
    grid is valid, a good one only gives a larger bound.

    Per arm it keeps, for each piece added, ``POINTS`` evenly spaced order statistics
    with weight (piece size)/``POINTS`` each (compressed to ``CAP`` weighted points,
    again evenly spaced in cumulative weight, whenever more than 2·``CAP`` are held), and
    exactly the ``TAIL`` largest negatives and the ``TAIL`` smallest positives: the tails
    where a test has few false positives (resp. false negatives) and a small-δ ε bound
    is decided. Memory: O(``CAP`` + ``TAIL``) numbers per arm, however many pieces.
    """

    POINTS = 256
    CAP = 1 << 17
    TAIL = 4096

    def __init__(self) -> None:
        self.negatives = 0
        self.positives = 0
        # per arm: pieces of (values, weights), and how many points they hold
        self._pieces: tuple[list[tuple[np.ndarray, np.ndarray]], ...] = ([], [])
        self._held = [0, 0]
        self._top = np.empty(0)  # the largest negatives, increasing
        self._bottom = np.empty(0)  # the smallest positives, increasing

    def add(self, negative_scores: np.ndarray, positive_scores: np.ndarray) -> None:
        """Summarise one piece of each hypothesis' scores (finite, 1-D, non-empty)."""
        for arm, scores in enumerate((negative_scores, positive_scores)):
            s = np.sort(np.asarray(scores, dtype=float))
            m = min(self.POINTS, s.size)
            ranks = ((np.arange(m) + 0.5) * (s.size / m)).astype(np.int64)
            self._pieces[arm].append((s[ranks], np.full(m, s.size / m)))
            self._held[arm] += m
            if self._held[arm] > 2 * self.CAP:
                self._pieces[arm][:] = [_compress(*self._points(arm), self.CAP)]
                self._held[arm] = self.CAP
            if arm == 0:
                self.negatives += s.size
                self._top = np.sort(np.concatenate([self._top, s[-self.TAIL :]]))[-self.TAIL :]
            else:
                self.positives += s.size
                self._bottom = np.sort(np.concatenate([self._bottom, s[: self.TAIL]]))[: self.TAIL]

    def _points(self, arm: int) -> tuple[np.ndarray, np.ndarray]:
        """One arm's weighted points, sorted by value."""
        values = np.concatenate([v for v, _ in self._pieces[arm]])
        weights = np.concatenate([w for _, w in self._pieces[arm]])
        order = np.argsort(values, kind="stable")
        return values[order], weights[order]

    def quantiles(self, probabilities: np.ndarray, *, arm: int | None = None) -> np.ndarray:
        """Approximate quantiles (inverted CDF, so each is a score that occurred) of one
        arm (0 = negatives, 1 = positives) or of both pooled (``arm=None``)."""
        if self.negatives == 0 or self.positives == 0:
            raise ValueError("ScoreSketch: no scores of each hypothesis added yet")
        if arm is None:
            (v0, w0), (v1, w1) = self._points(0), self._points(1)
            values, weights = np.concatenate([v0, v1]), np.concatenate([w0, w1])
            order = np.argsort(values, kind="stable")
            values, weights = values[order], weights[order]
        else:
            values, weights = self._points(arm)
        return _weighted_quantiles(values, weights, np.asarray(probabilities, dtype=float))

    def grid(self, *, centre: int = 2048, tail: int = 256) -> np.ndarray:
        """Candidate thresholds, increasing and distinct, each a score that occurred.

        ``centre`` thresholds at evenly spaced quantiles of the pooled scores (where the
        full curve has most of its thresholds), and ``tail`` thresholds per arm at
        log-spaced ranks 1, …, n/2 from the negatives' top (FP small) and the positives'
        bottom (FN small): ranks up to ``TAIL`` are exact order statistics, deeper ones
        the sketch's quantiles. Ranks spaced by a constant ratio give every rate between
        1/n and ½ a threshold within that ratio of it, as a full curve would.
        """
        probs = (np.arange(centre) + 0.5) / centre
        parts = [self.quantiles(probs)]
        for arm, n, exact in ((0, self.negatives, self._top), (1, self.positives, self._bottom)):
            ranks = np.unique(np.round(np.geomspace(1, max(n / 2, 1), tail)).astype(np.int64))
            near, deep = ranks[ranks <= exact.size], ranks[ranks > exact.size]
            if arm == 0:  # the r-th largest negative
                parts.append(exact[exact.size - near])
                parts.append(self.quantiles(1.0 - (deep - 0.5) / n, arm=0))
            else:  # the r-th smallest positive
                parts.append(exact[near - 1])
                parts.append(self.quantiles((deep - 0.5) / n, arm=1))
        return np.unique(np.concatenate(parts))


def _weighted_quantiles(
    values: np.ndarray, weights: np.ndarray, probabilities: np.ndarray
) -> np.ndarray:
    """The first sorted value whose cumulative weight reaches p·(total weight), for each p."""
    cumulative = np.cumsum(weights)
    at = np.searchsorted(cumulative, probabilities * cumulative[-1], side="left")
    return values[np.minimum(at, values.size - 1)]


def _compress(values: np.ndarray, weights: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` points evenly spaced in cumulative weight, each carrying an equal share."""
    total = float(weights.sum())
    kept = _weighted_quantiles(values, weights, (np.arange(size) + 0.5) / size)
    return kept, np.full(size, total / size)
