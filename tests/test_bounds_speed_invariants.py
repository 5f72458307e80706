"""The fast paths of threshold_search.py, bounds.py and tradeoff.py give exactly what
they replaced.

``best_threshold`` inverts the Beta distribution only at the counts where the best
bound can be; these tests hold it, bit for bit (index, value and both rate limits), to
the full scan of ``full_scan`` followed by ``np.argmax`` (first maximiser), on
continuous, discrete, tied, null, separated and unbalanced samples. The same goes for
the merged trade-off curve, DeLong's variance read off the curve, the ε and μ bounds
computed together, and the normal quantile without scipy.stats.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import dpaudit.bounds as bounds_module
from dpaudit.bounds import (
    _rate_bound,
    _rate_level,
    epsilon_and_mu_lower_bounds,
    epsilon_lower_bound,
    mu_lower_bound,
)
from dpaudit.bounds.threshold_search import (
    Best,
    LimitsCache,
    MonotoneLimits,
    _bracketed_values,
    _first_pass,
    _keep,
    _unique,
    best_threshold,
    full_scan,
)
from dpaudit.errors import InsufficientTrialsError
from dpaudit.stats import clopper_pearson_upper, normal_quantile
from dpaudit.tradeoff import TradeoffCurve, delong_auc_variance, delong_auc_variance_from_curve

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
    values, fpr_hi, fnr_hi = full_scan(curve, **kw)  # type: ignore[arg-type]
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
        "bound": _rate_bound(parameter, delta),
    }
    best = best_threshold(curve, **kw)  # type: ignore[arg-type]
    assert (best.index, best.value, best.fpr_high, best.fnr_high) == _full_scan(curve, **kw)


def test_ties_go_to_the_first_threshold_as_argmax_does() -> None:
    # Every bound is 0 on a tiny null sample: the full scan's argmax is index 0 (+inf).
    curve = TradeoffCurve.from_scores([0.0, 1.0], [0.0, 1.0])
    best = best_threshold(
        curve, level_fpr=0.975, level_fnr=0.975, bound=_rate_bound("epsilon", 0.0)
    )
    assert (best.index, best.value) == (0, 0.0)


def test_monotone_limits_bracket_and_compute_exactly() -> None:
    n, level = 100_000, 1 - 0.025 / 100_001
    limits = MonotoneLimits(n, level)
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


# ------------------------------------------------ fast paths for 10⁶ trials per arm
#
# Each fast path below is held, bit for bit, to the computation it replaced: the old
# code is kept here verbatim as the reference.


def _curve_reference(neg: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, ...]:
    """``TradeoffCurve.from_scores`` before the merge: np.unique, then searchsorted."""
    neg, pos = np.sort(np.asarray(neg, float)), np.sort(np.asarray(pos, float))
    distinct = np.unique(np.concatenate([neg, pos]))[::-1]
    thresholds = np.concatenate([[np.inf], distinct])
    fp = neg.size - np.searchsorted(neg, thresholds, side="left")
    tp = pos.size - np.searchsorted(pos, thresholds, side="left")
    return thresholds, fp, tp


# Scores with many ties (small integers, halves) or none; x + 0.0 turns −0.0 into +0.0
# (the two compare equal, and which one np.unique kept for a tie between them was
# never specified).
_tied = st.integers(-6, 6).map(lambda i: i / 2.0)
_wide = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False).map(lambda x: x + 0.0)
score_arrays = st.one_of(
    arrays(np.float64, st.integers(1, 60), elements=_tied),
    arrays(np.float64, st.integers(1, 60), elements=_wide),
)


@settings(max_examples=300, deadline=None)
@given(neg=score_arrays, pos=score_arrays)
def test_merged_curve_equals_the_unique_and_searchsorted_curve(
    neg: np.ndarray, pos: np.ndarray
) -> None:
    curve = TradeoffCurve.from_scores(neg, pos)
    thresholds, fp, tp = _curve_reference(neg, pos)
    assert curve.thresholds.tobytes() == thresholds.tobytes()
    assert curve.fp.dtype == fp.dtype
    assert curve.tp.dtype == tp.dtype
    np.testing.assert_array_equal(curve.fp, fp)
    np.testing.assert_array_equal(curve.tp, tp)


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_merged_curve_equals_the_reference_at_scale(sampler: str) -> None:
    neg, pos = SAMPLERS[sampler](np.random.default_rng(len(sampler)), 20_000)
    curve = TradeoffCurve.from_scores(neg, pos)
    thresholds, fp, tp = _curve_reference(neg, pos)
    assert curve.thresholds.tobytes() == thresholds.tobytes()
    assert curve.fp.tobytes() == fp.tobytes()
    assert curve.tp.tobytes() == tp.tobytes()


def test_signed_zeros_are_one_threshold() -> None:
    curve = TradeoffCurve.from_scores([-0.0, 1.0], [0.0, 2.0])
    np.testing.assert_array_equal(curve.thresholds, [np.inf, 2.0, 1.0, 0.0])
    np.testing.assert_array_equal(curve.fp, [0, 0, 1, 2])
    np.testing.assert_array_equal(curve.tp, [0, 1, 1, 2])


@settings(max_examples=300, deadline=None)
@given(neg=score_arrays, pos=score_arrays)
def test_delong_variance_from_the_curve_is_bit_identical(neg: np.ndarray, pos: np.ndarray) -> None:
    want = delong_auc_variance(neg, pos)
    got = delong_auc_variance_from_curve(TradeoffCurve.from_scores(neg, pos))
    assert (np.isnan(want) and np.isnan(got)) or got == want


@settings(max_examples=200, deadline=None)
@given(neg=score_arrays, pos=score_arrays)
def test_auc_with_fewer_temporaries_is_the_trapezoid_sum(neg: np.ndarray, pos: np.ndarray) -> None:
    curve = TradeoffCurve.from_scores(neg, pos)
    fpr, tpr = curve.fp / curve.negatives, curve.tp / curve.positives
    assert curve.auc() == float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0))


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
def test_delong_variance_from_the_curve_at_scale(sampler: str) -> None:
    neg, pos = SAMPLERS[sampler](np.random.default_rng(len(sampler)), 20_000)
    curve = TradeoffCurve.from_scores(neg, pos)
    assert delong_auc_variance_from_curve(curve) == delong_auc_variance(neg, pos)


def test_normal_quantile_is_scipys_norm_ppf_bit_for_bit() -> None:
    from scipy.stats import norm

    p = np.concatenate([np.linspace(1e-12, 1 - 1e-12, 2001), 0.5 + np.array([0.9, 0.95]) / 2])
    assert all(normal_quantile(float(x)) == float(norm.ppf(x)) for x in p)


_counts = st.lists(st.integers(0, 50), min_size=0, max_size=40).map(
    lambda v: np.array(v, dtype=np.int64)
)


@given(k=_counts, order=st.sampled_from(["up", "down", "any"]))
def test_unique_of_monotone_counts_is_np_unique(k: np.ndarray, order: str) -> None:
    if order != "any":
        k = np.sort(k) if order == "up" else np.sort(k)[::-1]
    got, want = _unique(k), np.unique(k)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("parameter", ["epsilon", "mu"])
def test_bracketed_values_are_the_elementwise_values(parameter: str) -> None:
    # Runs of equal rows, as along a curve whose counts share brackets, and single rows.
    rng = np.random.default_rng(3)
    cols = [np.repeat(rng.random(60), rng.integers(1, 5, 60)) for _ in range(4)]
    size = min(c.size for c in cols)
    fp_low, fp_high, fn_low, fn_high = (np.sort(c[:size]) for c in cols)
    bound = _rate_bound(parameter, 1e-5)
    upper, lower = _bracketed_values(bound, fp_low, fp_high, fn_low, fn_high[::-1])
    want_upper = bound(fp_low, fn_low)
    want_lower = bound(fp_high, fn_high[::-1])
    assert upper.tobytes() == want_upper.tobytes()
    assert lower.tobytes() == want_lower.tobytes()


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("n", [3, 40, 5_000])
def test_searches_sharing_one_limits_table_equal_the_full_scan(sampler: str, n: int) -> None:
    # ε then μ on one curve with one table (the fp and fn limits too, when n0 = n1): each
    # answer is the full scan's, whatever the other searches left in the table.
    neg, pos = SAMPLERS[sampler](np.random.default_rng([n, 7]), n)
    curve = TradeoffCurve.from_scores(neg, pos)
    cache: LimitsCache = {}
    for parameter, delta in (("epsilon", 1e-5), ("mu", 0.0), ("epsilon", 0.0)):
        kw = {
            "level_fpr": _rate_level(0.95, tests=neg.size + 1),
            "level_fnr": _rate_level(0.95, tests=pos.size + 1),
            "bound": _rate_bound(parameter, delta),
        }
        best = best_threshold(curve, cache=cache, **kw)  # type: ignore[arg-type]
        assert (best.index, best.value, best.fpr_high, best.fnr_high) == _full_scan(curve, **kw)


def _full_scan_best(curve: TradeoffCurve, **kw: object) -> Best:
    kw.pop("cache", None)
    return Best(*_full_scan(curve, **kw))


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
@pytest.mark.parametrize("n", [40, 3_000])
def test_both_bounds_at_once_equal_each_alone_and_the_full_scan(
    sampler: str, threshold: str, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    neg, pos = SAMPLERS[sampler](np.random.default_rng([n, 11]), n)
    kw = {"confidence_level": 0.95, "threshold": threshold, "seed": 4}

    def separately() -> list[dict | str]:
        try:
            eps = epsilon_lower_bound(neg, pos, delta=1e-5, **kw).to_dict()  # type: ignore[arg-type]
            mu = mu_lower_bound(neg, pos, **kw).to_dict()  # type: ignore[arg-type]
        except InsufficientTrialsError as exc:
            return [str(exc)]
        return [eps, mu]

    try:
        eps, mu = epsilon_and_mu_lower_bounds(neg, pos, delta=1e-5, **kw)  # type: ignore[arg-type]
        together: list[dict | str] = [eps.to_dict(), mu.to_dict()]
    except InsufficientTrialsError as exc:
        together = [str(exc)]
    assert together == separately()
    # ... and both are what the full scan (one Beta inversion per threshold) gives.
    # bounds.py calls best_threshold by the name it imported: patch that name.
    monkeypatch.setattr(bounds_module, "best_threshold", _full_scan_best)
    assert together == separately()


def test_a_mechanism_run_loads_neither_scipy_stats_nor_scipy_optimize(tmp_path: Path) -> None:
    # ≈ 0.5 s and ≈ 0.15 s of imports that a Laplace audit never uses (the speed goal:
    # a mechanism audit at 10⁶ trials per arm in ≤ 3 s of CPU end to end).
    root = Path(__file__).resolve().parent.parent
    audit = (root / "audits" / "laplace.toml").read_text()
    path = tmp_path / "laplace.toml"
    path.write_text(audit.replace("trials = 100_000 ", "trials = 2_000 "))
    code = (
        "import sys\nfrom dpaudit.audit import run_audit\n"
        f"run_audit({str(path)!r}, output_dir={str(tmp_path / 'run')!r})\n"
        "print(sorted(m for m in ('scipy.stats', 'scipy.optimize') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (tmp_path / "run" / "report.html").is_file()
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


@pytest.mark.parametrize("sampler", sorted(SAMPLERS))
@pytest.mark.parametrize("parameter", ["epsilon", "mu"])
def test_first_pass_over_runs_keeps_what_the_per_threshold_pass_keeps(
    sampler: str, parameter: str
) -> None:
    neg, pos = SAMPLERS[sampler](np.random.default_rng([5, len(sampler)]), 20_000)
    curve = TradeoffCurve.from_scores(neg, pos)
    fp_limits = MonotoneLimits(curve.negatives, _rate_level(0.95, tests=neg.size + 1))
    fn_limits = MonotoneLimits(curve.positives, _rate_level(0.95, tests=pos.size + 1))
    fp_low, fp_high, _ = fp_limits.bracket(curve.fp)
    fn_low, fn_high, _ = fn_limits.bracket(curve.fn)
    bound = _rate_bound(parameter, 1e-5)
    keep = _keep(bound(fp_low, fn_low), float(bound(fp_high, fn_high).max()))
    keep[0] = True
    got = _first_pass(curve, fp_limits, fn_limits, bound)
    np.testing.assert_array_equal(got, np.flatnonzero(keep))
    assert got.size < curve.fp.size  # it prunes (else the test would prove little)


def test_first_pass_visits_every_threshold_of_a_curve_that_is_not_monotone() -> None:
    curve = TradeoffCurve(
        np.array([np.inf, 2.0, 1.0]), np.array([0, 2, 1]), np.array([0, 1, 2]), 2, 2
    )
    limits = MonotoneLimits(2, 0.975)
    bound = _rate_bound("mu", 0.0)
    np.testing.assert_array_equal(_first_pass(curve, limits, limits, bound), [0, 1, 2])
