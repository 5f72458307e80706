"""The pruned threshold search of bounds.py gives exactly what the full scan gives.

``_best_threshold`` inverts the Beta distribution only at the counts where the best
bound can be; these tests hold it, bit for bit (index, value and both rate limits), to
the full scan of ``_curve_bounds`` followed by ``np.argmax`` (first maximiser), on
continuous, discrete, tied, null, separated and unbalanced samples.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from dpaudit.bounds import _best_threshold, _curve_bounds, _MonotoneLimits, _rate_level
from dpaudit.stats import clopper_pearson_upper
from dpaudit.tradeoff import TradeoffCurve

Sampler = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]

SAMPLERS: dict[str, Sampler] = {
    "laplace": lambda r, n: (r.laplace(0, 1, n), r.laplace(1, 1, n)),
    "gaussian": lambda r, n: (r.normal(0, 1, n), r.normal(1.5, 1, n)),
    "null": lambda r, n: (r.normal(0, 1, n), r.normal(0, 1, n)),
    "coin": lambda r, n: (r.integers(0, 2, n) * 1.0, (r.random(n) < 0.75) * 1.0),
    "few values": lambda r, n: (r.integers(0, 5, n) * 1.0, r.integers(0, 7, n) * 1.0),
    "rounded": lambda r, n: (np.round(r.normal(0, 1, n), 1), np.round(r.normal(2, 1, n), 1)),
    "separated": lambda r, n: (r.normal(0, 1, n), r.normal(9, 1, n)),
    "unbalanced": lambda r, n: (r.laplace(0, 1, n), r.laplace(0.3, 1, 3 * n + 1)),
}


def _full_scan(curve: TradeoffCurve, **kw: object) -> tuple[int, float, float, float]:
    values, fpr_hi, fnr_hi = _curve_bounds(curve, **kw)  # type: ignore[arg-type]
    i = int(np.argmax(values))
    return i, float(values[i]), float(fpr_hi[i]), float(fnr_hi[i])


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("n", [1, 3, 40, 5_000])
@pytest.mark.parametrize("parameter", ["epsilon", "mu"])
@pytest.mark.parametrize(
    ("c", "simultaneous", "delta"), [(0.95, True, 0.0), (0.95, False, 1e-5), (1 - 1e-6, True, 0.2)]
)
def test_pruned_search_equals_full_scan(
    sampler: str, n: int, parameter: str, c: float, simultaneous: bool, delta: float
) -> None:
    rng = np.random.default_rng([n, len(sampler)])
    neg, pos = SAMPLERS[sampler](rng, n)
    curve = TradeoffCurve.from_scores(neg, pos)
    kw = {
        "level_fpr": _rate_level(c, tests=neg.size + 1 if simultaneous else 1),
        "level_fnr": _rate_level(c, tests=pos.size + 1 if simultaneous else 1),
        "parameter": parameter,
        "delta": delta,
    }
    best = _best_threshold(curve, **kw)  # type: ignore[arg-type]
    assert (best.index, best.value, best.fpr_high, best.fnr_high) == _full_scan(curve, **kw)


def test_ties_go_to_the_first_threshold_as_argmax_does() -> None:
    # Every bound is 0 on a tiny null sample: the full scan's argmax is index 0 (+inf).
    curve = TradeoffCurve.from_scores([0.0, 1.0], [0.0, 1.0])
    best = _best_threshold(curve, level_fpr=0.975, level_fnr=0.975, parameter="epsilon", delta=0.0)
    assert (best.index, best.value) == (0, 0.0)


def test_monotone_limits_bracket_and_compute_exactly() -> None:
    n, level = 100_000, 1 - 0.025 / 100_001
    limits = _MonotoneLimits(n, level)
    k = np.array([0, 1, 255, 256, 257, 5_000, 77_777, 99_999, n])
    low, high, exact = limits.bracket(k)
    truth = clopper_pearson_upper(k, n, level=level)
    assert np.all(low <= truth)
    assert np.all(truth <= high)
    assert np.array_equal(truth[exact], low[exact])
    limits.refine(k[~exact])
    np.testing.assert_array_equal(limits.exact(k), truth)  # bit-identical once computed
    # The grid is much smaller than n: the point of the exercise.
    assert limits.counts.size < n // 10
