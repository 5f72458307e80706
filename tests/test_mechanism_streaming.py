"""Mechanism audits in bounded memory: the streamed path of :mod:`dpaudit.mechanisms.summary`
and the count-to-bound code it rests on (:class:`dpaudit.tradeoff.GridCounts`,
:class:`dpaudit.bounds.threshold_search.ScoreSketch`, the grid bounds of :mod:`dpaudit.bounds`).

Above ``EXACT_TRIALS_LIMIT`` trials per arm the summary reads one unit at a time. The
tests lower that limit (monkeypatched) so that streamed audits run at small sizes.
"""

from __future__ import annotations

import functools
import json
import math
import tracemalloc
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

from dpaudit.bounds import (
    epsilon_and_mu_from_grid_bonferroni,
    epsilon_and_mu_from_grid_split,
    epsilon_and_mu_lower_bounds,
    epsilon_from_counts,
    epsilon_from_rates,
    mu_from_counts,
    mu_from_rates,
)
from dpaudit.bounds.threshold_search import ScoreSketch, full_scan
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.kinds.base import RunContext
from dpaudit.mechanisms import summary as mechanism_summary_module
from dpaudit.mechanisms.schema import MechanismSection
from dpaudit.mechanisms.summary import (
    mechanism_summary,
    stream_counts,
    streamed_bounds,
    unit_design,
)
from dpaudit.mechanisms.units import MechanismSpec, build_mechanism, mechanism_unit, upper_bound
from dpaudit.tradeoff import (
    GridCounts,
    TradeoffCurve,
    delong_auc_variance,
    delong_auc_variance_binned,
)

C = 0.95


# ------------------------------------------------------------------------------ helpers


class LazyUnits(Mapping[str, Mapping[str, np.ndarray]]):
    """A mechanism's units computed on access and never kept, as a run's stored units
    (``StoredOutputs`` without its cache) look to the summary."""

    def __init__(self, spec: MechanismSpec) -> None:
        self.spec = spec
        count = math.ceil(spec.section.trials / spec.unit_size)
        self.names = [f"mechanism-{i:05d}" for i in range(count)]

    def __getitem__(self, unit: str) -> Mapping[str, np.ndarray]:
        if unit not in self.names:
            raise KeyError(unit)
        return mechanism_unit(self.spec, unit)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def _laplace(trials: int, unit_size: int, *, seed: int = 0, epsilon: float = 1.0, **kw):
    section = MechanismSection(name="laplace", epsilon=epsilon, trials=trials, **kw)
    spec = MechanismSpec(section=section, seed=seed, unit_size=unit_size, base_dir=".")
    return section, LazyUnits(spec)


def _stored(units: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    return {u: dict(units[u]) for u in units}


def _concat(units: Mapping[str, Mapping[str, np.ndarray]], names, key: str) -> np.ndarray:
    return np.concatenate([units[u][key] for u in names])


def _brute_counts(grid: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """#{s ≥ t} for every t of the grid by direct comparison (an independent reference)."""
    return np.array([int(np.sum(scores >= t)) for t in grid], dtype=np.int64)


def _brute_curve(grid: np.ndarray, neg: np.ndarray, pos: np.ndarray) -> TradeoffCurve:
    """The curve at +inf, the grid (decreasing) and -inf, from brute-force counts."""
    thresholds = np.concatenate([[np.inf], grid[::-1], [-np.inf]])
    fp = np.concatenate([[0], _brute_counts(grid, neg)[::-1], [neg.size]])
    tp = np.concatenate([[0], _brute_counts(grid, pos)[::-1], [pos.size]])
    return TradeoffCurve(thresholds, fp, tp, neg.size, pos.size)


def _laplace_fpr(t: np.ndarray) -> np.ndarray:
    """P[Lap(0, 1) ≥ t]."""
    t = np.asarray(t, dtype=float)
    return np.where(t >= 0, 0.5 * np.exp(-np.abs(t)), 1.0 - 0.5 * np.exp(-np.abs(t)))


def _laplace_fnr(t: np.ndarray) -> np.ndarray:
    """P[Lap(1, 1) < t] = 1 − P[Lap(0, 1) ≥ t − 1]."""
    return 1.0 - _laplace_fpr(np.asarray(t, dtype=float) - 1.0)


# ------------------------------------------------------------------- counts on a grid


def test_grid_counts_equal_direct_counts_and_add_up() -> None:
    rng = np.random.default_rng(1)
    # Discrete scores that sit exactly on grid thresholds: "s ≥ t" must count them.
    neg = rng.integers(0, 10, 3000).astype(float)
    pos = rng.integers(2, 12, 2500).astype(float)
    grid = np.array([0.0, 2.0, 2.5, 5.0, 9.0, 11.0])
    whole = GridCounts.count(grid, neg, pos)
    np.testing.assert_array_equal(whole.fp, _brute_counts(grid, neg))
    np.testing.assert_array_equal(whole.tp, _brute_counts(grid, pos))
    parts = GridCounts.zero(grid)
    for n_lo, p_lo in zip(range(0, 3000, 700), range(0, 2500, 500), strict=True):
        parts = parts + GridCounts.count(grid, neg[n_lo : n_lo + 700], pos[p_lo : p_lo + 500])
    np.testing.assert_array_equal(parts.fp, whole.fp)
    np.testing.assert_array_equal(parts.tp, whole.tp)
    assert (parts.negatives, parts.positives) == (3000, 2500)


def test_grid_counts_refuse_bad_grids_and_mixed_grids() -> None:
    with pytest.raises(DpauditError, match="strictly increasing"):
        GridCounts.zero([1.0, 1.0])
    with pytest.raises(DpauditError, match="strictly increasing"):
        GridCounts.zero([0.0, np.inf])
    with pytest.raises(DpauditError, match="different grids"):
        GridCounts.zero([0.0]) + GridCounts.zero([1.0])
    with pytest.raises(DpauditError, match="NaN or infinite"):
        GridCounts.count([0.0], [np.nan], [1.0])
    with pytest.raises(DpauditError, match="at least one score per hypothesis"):
        GridCounts.zero([0.0]).curve()


def test_grid_curve_is_the_curve_of_the_scores_rounded_down() -> None:
    rng = np.random.default_rng(2)
    neg, pos = rng.normal(0, 1, 4000), rng.normal(1, 1, 3000)
    grid = np.linspace(-2.0, 3.0, 41)
    curve = GridCounts.count(grid, neg, pos).curve()

    def rounded(s: np.ndarray) -> np.ndarray:
        at = np.searchsorted(grid, s, side="right") - 1
        return np.where(at >= 0, grid[np.maximum(at, 0)], -1e9)  # -1e9 stands for -inf

    exact = TradeoffCurve.from_scores(rounded(neg), rounded(pos))
    assert curve.auc() == pytest.approx(exact.auc(), rel=1e-12)
    assert delong_auc_variance_binned(curve) == pytest.approx(
        delong_auc_variance(rounded(neg), rounded(pos)), rel=1e-9
    )
    assert curve.advantage() == pytest.approx(exact.advantage(), rel=1e-12)
    # the rows at every grid threshold hold exactly the rates of the exact curve there
    for t, fpr, fnr in zip(curve.thresholds[1:-1], curve.fpr[1:-1], curve.fnr[1:-1], strict=True):
        assert fpr == np.mean(neg >= t)
        assert fnr == pytest.approx(np.mean(pos < t), abs=1e-15)
    assert (curve.fpr[0], curve.fnr[0], curve.fpr[-1], curve.fnr[-1]) == (0.0, 1.0, 1.0, 0.0)


# ----------------------------------------------------------------------- the sketch


def test_sketch_grid_comes_from_its_scores_and_reaches_both_tails() -> None:
    rng = np.random.default_rng(3)
    sketch = ScoreSketch()
    pieces = [(rng.normal(0, 1, 5000), rng.normal(1, 1, 5000)) for _ in range(8)]
    for neg, pos in pieces:
        sketch.add(neg, pos)
    grid = sketch.grid()
    every = np.concatenate([np.concatenate(p) for p in pieces])
    assert np.all(np.isin(grid, every))  # each candidate is a score that occurred
    assert np.all(np.diff(grid) > 0)
    negs = np.concatenate([n for n, _ in pieces])
    poss = np.concatenate([p for _, p in pieces])
    assert negs.max() in grid  # rank 1 of the negatives' top: FP = 1
    assert poss.min() in grid  # rank 1 of the positives' bottom: FN = 0 just above it
    assert grid.size <= 2048 + 2 * 256


def test_sketch_quantiles_stay_close_after_compression(monkeypatch) -> None:
    # Force many compressions: the quantiles' rank error stays a small share of n.
    monkeypatch.setattr(ScoreSketch, "CAP", 512)
    rng = np.random.default_rng(4)
    sketch = ScoreSketch()
    all_neg = []
    for _ in range(200):
        neg = rng.normal(0, 1, 1000)
        all_neg.append(neg)
        sketch.add(neg, neg + 1.0)
    neg = np.sort(np.concatenate(all_neg))
    probs = np.linspace(0.01, 0.99, 50)
    got = sketch.quantiles(probs, arm=0)
    ranks = np.searchsorted(neg, got) / neg.size
    # 256 points per piece give each a rank resolution of 1/256 of a piece; each of the
    # ~log2(200·256/512) compressions to 512 points adds at most one point's weight
    # (1/512 of everything counted so far): together well under 2 % of the ranks.
    assert np.max(np.abs(ranks - probs)) < 0.02


# ------------------------------------------------------------------- the unit design


def test_unit_design_is_fixed_by_unit_names_in_numeric_order() -> None:
    names = [f"mechanism-{i:05d}" for i in range(99_998, 100_002)]  # 100000 sorts first as text
    design = unit_design(list(reversed(names)), threshold="split", unit_size=10)
    assert design.grid_units == ("mechanism-99998", "mechanism-99999")
    assert design.counted_units == ("mechanism-100000", "mechanism-100001")
    b = unit_design(names, threshold="bonferroni", unit_size=1 << 15)
    assert (len(b.grid_units), len(b.counted_units)) == (2, 2)  # 2 units hold 2^16 trials
    b = unit_design(names, threshold="bonferroni", unit_size=1)
    assert (len(b.grid_units), len(b.counted_units)) == (3, 1)  # never all of them
    with pytest.raises(DpauditError, match="at least two stored units"):
        unit_design(names[:1], threshold="split", unit_size=10)


def test_unit_beyond_the_trials_is_refused() -> None:
    _, units = _laplace(1000, 400)
    with pytest.raises(ConfigError, match="beyond the 1000 trials"):
        mechanism_unit(units.spec, "mechanism-00003")
    assert mechanism_unit(units.spec, "mechanism-00002")["negative"].size == 200


# --------------------------------------------- (a) exact agreement with a reference


@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_streamed_bounds_equal_an_independent_computation(threshold: str) -> None:
    _, lazy = _laplace(6000, 500, threshold=threshold)
    units = _stored(lazy)
    design = unit_design(list(units), threshold=threshold, unit_size=500)
    counts = stream_counts(units, design)
    eps, mu = streamed_bounds(counts, delta=1e-5, confidence_level=C)
    grid = counts.counted.grid
    sel_neg, sel_pos = (_concat(units, design.grid_units, k) for k in ("negative", "positive"))
    ev_neg, ev_pos = (_concat(units, design.counted_units, k) for k in ("negative", "positive"))
    if threshold == "split":
        assert len(design.grid_units) == 6
        sel = _brute_curve(grid, sel_neg, sel_pos)
        for bound, rates, fixed in (
            (eps, lambda f, n: epsilon_from_rates(f, n, delta=1e-5), epsilon_from_counts),
            (mu, mu_from_rates, mu_from_counts),
        ):
            # the in-memory split's selection rule: limits simultaneous over n_sel + 1 cuts
            level = 1.0 - (1.0 - C) / (2.0 * (sel_neg.size + 1))
            values, _, _ = full_scan(sel, level_fpr=level, level_fnr=level, bound=rates)
            t = float(sel.thresholds[int(np.argmax(values))])
            fp, fn = int(np.sum(ev_neg >= t)), int(np.sum(ev_pos < t))
            kw = {"delta": 1e-5} if fixed is epsilon_from_counts else {}
            want = fixed(fp, ev_neg.size, fn, ev_pos.size, confidence_level=C, **kw)
            assert bound.threshold_value == t
            assert bound.counts == {"fp": fp, "negatives": 3000, "fn": fn, "positives": 3000}
            assert bound.value == want.value
            assert bound.fpr == want.fpr
            assert bound.fnr == want.fnr
    else:
        assert len(design.grid_units) == 11  # ⌈2^16 / 500⌉ = 132 units, capped at all but one
        assert ev_neg.size == 500
        curve = _brute_curve(grid, ev_neg, ev_pos)
        level = 1.0 - (1.0 - C) / (2.0 * grid.size)  # union bound over the grid
        for bound, rates in (
            (eps, lambda f, n: epsilon_from_rates(f, n, delta=1e-5)),
            (mu, mu_from_rates),
        ):
            values, fpr_hi, fnr_hi = full_scan(curve, level_fpr=level, level_fnr=level, bound=rates)
            i = int(np.argmax(values))
            assert bound.value == values[i]
            assert bound.counts["fp"] == curve.fp[i]
            assert bound.counts["fn"] == curve.fn[i]
            assert (bound.fpr.high, bound.fnr.high) == (fpr_hi[i], fnr_hi[i])
            assert bound.details["candidate_thresholds"] == grid.size
    assert eps.details["streamed"] is True
    assert eps.validity == "rigorous-multi-run"


@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_grid_and_threshold_ignore_the_counted_units(threshold: str) -> None:
    # Validity rests on this: what the counted units hold cannot move the grid or the
    # row chosen; replacing them changes only the counts at that row.
    _, lazy = _laplace(4000, 500, threshold=threshold)
    units = _stored(lazy)
    design = unit_design(list(units), threshold=threshold, unit_size=500)
    first = stream_counts(units, design)
    rng = np.random.default_rng(5)
    other = dict(units)
    for u in design.counted_units:
        other[u] = {"negative": rng.normal(9, 3, 500), "positive": rng.normal(-9, 3, 500)}
    second = stream_counts(other, design)
    np.testing.assert_array_equal(first.counted.grid, second.counted.grid)
    np.testing.assert_array_equal(first.selection.fp, second.selection.fp)
    if threshold == "split":
        a = streamed_bounds(first, delta=0.0, confidence_level=C)
        b = streamed_bounds(second, delta=0.0, confidence_level=C)
        assert [x.threshold_value for x in a] == [x.threshold_value for x in b]


def test_grid_bounds_refuse_counts_on_different_grids() -> None:
    a = GridCounts.count([0.0, 1.0], np.zeros(50), np.ones(50))
    b = GridCounts.count([0.0, 2.0], np.zeros(50), np.ones(50))
    with pytest.raises(DpauditError, match="same grid"):
        epsilon_and_mu_from_grid_split(a, b, delta=0.0)
    with pytest.raises(DpauditError, match="'delta' parameter"):
        epsilon_and_mu_from_grid_bonferroni(a, delta=1.0)


# ------------------------------------------------------------------------ (b) validity
# R repeated streamed audits; a bound at confidence c may exceed the truth in at most a
# 1 − c fraction. The ceiling binom.ppf(0.999, R, 1 − c) flags a correct bound only once
# in a thousand seeds. At c = 0.95 the rigorous bounds are conservative enough that even
# the forbidden uncorrected maximum stays near the ceiling, so each check also runs at
# c = 0.5, where the forbidden variant fails it by far (the control below): that is the
# check with power, and validity must hold at every c.
R = 400
LEVELS = (0.95, 0.5)
# 8 units of 250 trials per arm: small enough for 400 audits in a few seconds, large
# enough for bounds well above 0.
TRIALS, UNIT = 2000, 250


def _ceiling(c: float) -> int:
    return int(stats.binom.ppf(0.999, R, 1.0 - c))


@pytest.fixture
def small_bonferroni_grid(monkeypatch) -> None:
    # The bonferroni grid's units (2^16 trials by default, never counted) would leave one
    # unit of these small audits to count: 500 trials (2 units) draw the grid here.
    monkeypatch.setattr(mechanism_summary_module, "GRID_TRIALS", 500)


def _true_laplace_mu() -> float:
    """The largest μ any threshold test on Laplace(ε = 1) scores can certify: sup over t
    of Φ⁻¹(1 − FPR(t)) − Φ⁻¹(FNR(t)) (Dong, Roth, Su 2022, arXiv:1905.02383v3, Def. 2.6),
    on a fine grid of t."""
    t = np.linspace(-12.0, 13.0, 250_001)
    return float(np.max(-special.ndtri(_laplace_fpr(t)) - special.ndtri(_laplace_fnr(t))))


def _counts(units: Mapping[str, Mapping[str, np.ndarray]], threshold: str):
    return stream_counts(units, unit_design(list(units), threshold=threshold, unit_size=UNIT))


def _laplace_units(seed: int, epsilon: float = 1.0) -> dict[str, dict[str, np.ndarray]]:
    return _stored(_laplace(TRIALS, UNIT, seed=seed, epsilon=epsilon)[1])


@pytest.mark.usefixtures("small_bonferroni_grid")
@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_validity_correct_laplace(threshold: str) -> None:
    mu_true = _true_laplace_mu()
    # Every threshold test's rates obey μ ≥ Φ⁻¹(1 − FPR) − Φ⁻¹(FNR) at this μ (reached at
    # t = ½, where the two rates are equal), so a valid μ bound stays below it.
    assert 1.03 < mu_true < 1.031
    hits = {c: [0, 0] for c in LEVELS}
    for seed in range(R):
        counts = _counts(_laplace_units(seed), threshold)
        for c in LEVELS:
            eps, mu = streamed_bounds(counts, delta=0.0, confidence_level=c)
            hits[c][0] += eps.value > 1.0  # Laplace(1) is exactly 1-DP: the claim is tight
            hits[c][1] += mu.value > mu_true
    for c in LEVELS:
        assert max(hits[c]) <= _ceiling(c), (c, hits[c])


def test_validity_check_catches_the_uncorrected_maximum() -> None:
    # Control: the forbidden streamed variant (the best grid row chosen on the very units
    # that are counted, per-threshold limits) must fail the c = 0.5 check above.
    from dpaudit.bounds import _rate_level

    c = 0.5
    level = _rate_level(c)
    hits = 0
    for seed in range(R):
        counted = _counts(_laplace_units(seed), "split").counted.curve()
        bound = functools.partial(epsilon_from_rates, delta=0.0)
        values, _, _ = full_scan(counted, level_fpr=level, level_fnr=level, bound=bound)
        hits += float(values.max()) > 1.0
    assert hits > _ceiling(c)


@pytest.mark.usefixtures("small_bonferroni_grid")
@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_validity_identical_hypotheses(threshold: str) -> None:
    # Any bound above 0 is false when D and D' give the same output law.
    rng = np.random.default_rng(6)
    hits = {c: [0, 0] for c in LEVELS}
    for _ in range(R):
        units = {
            f"mechanism-{i:05d}": {
                "negative": rng.laplace(0, 1, UNIT),
                "positive": rng.laplace(0, 1, UNIT),
            }
            for i in range(TRIALS // UNIT)
        }
        counts = _counts(units, threshold)
        for c in LEVELS:
            eps, mu = streamed_bounds(counts, delta=0.0, confidence_level=c)
            hits[c][0] += eps.value > 0.0
            hits[c][1] += mu.value > 0.0
    for c in LEVELS:
        assert max(hits[c]) <= _ceiling(c), (c, hits[c])


@pytest.mark.usefixtures("small_bonferroni_grid")
@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_power_planted_epsilon_2_claimed_1(threshold: str) -> None:
    caught = 0
    for seed in range(20):
        eps, _ = streamed_bounds(
            _counts(_laplace_units(seed, epsilon=2.0), threshold), delta=0.0, confidence_level=0.95
        )
        caught += eps.value > 1.0
    assert caught == 20


# -------------------------------------------------- (c) streamed vs exact at 10⁶ trials


def _expected_bound(t: float, n: int, parameter: str, level: float) -> tuple[float, float]:
    """The bound at threshold t from the expected evaluation counts of Laplace(ε = 1)
    (Clopper–Pearson upper limits at real-valued counts), and its delta-method standard
    deviation from the binomial noise of the two counts."""
    p0, p1 = float(_laplace_fpr(t)), float(_laplace_fnr(t))
    hi0 = float(stats.beta.ppf(level, n * p0 + 1, n - n * p0))
    hi1 = float(stats.beta.ppf(level, n * p1 + 1, n - n * p1))
    if parameter == "epsilon":
        value = float(epsilon_from_rates(hi0, hi1, delta=0.0))
        # the active term: ln((1 − FNR)/FPR) or ln((1 − FPR)/FNR); Var ln p̂ ≈ (1 − p)/(np)
        if math.log((1 - hi1) / hi0) >= math.log((1 - hi0) / hi1):
            var = (1 - p0) / (n * p0) + p1 / (n * (1 - p1))
        else:
            var = (1 - p1) / (n * p1) + p0 / (n * (1 - p0))
    else:
        value = float(mu_from_rates(hi0, hi1))
        # dΦ⁻¹(p)/dp = 1/φ(Φ⁻¹(p))
        z0, z1 = special.ndtri(p0), special.ndtri(p1)
        var = p0 * (1 - p0) / (n * stats.norm.pdf(z0) ** 2) + p1 * (1 - p1) / (
            n * stats.norm.pdf(z1) ** 2
        )
    return value, math.sqrt(var)


def test_streamed_bound_close_to_exact_at_a_million_trials() -> None:
    _, lazy = _laplace(1_000_000, 25_000, seed=11)
    units = _stored(lazy)
    neg = np.concatenate([units[u]["negative"] for u in sorted(units)])
    pos = np.concatenate([units[u]["positive"] for u in sorted(units)])
    exact = epsilon_and_mu_lower_bounds(neg, pos, delta=0.0, confidence_level=C, seed=0)
    del neg, pos
    streamed = _streamed_at(units)
    level = 1.0 - (1.0 - C) / 2.0
    for e, s, parameter in zip(exact, streamed, ("epsilon", "mu"), strict=True):
        n_e, n_s = e.counts["negatives"], s.counts["negatives"]
        assert n_e == n_s == 500_000
        b_e, sd_e = _expected_bound(e.threshold_value, n_e, parameter, level)
        b_s, sd_s = _expected_bound(s.threshold_value, n_s, parameter, level)
        # Given its threshold (chosen on its own selection part), each bound is its
        # expected value plus the binomial noise of its evaluation counts, within
        # 4.5 sd (two-sided 7e-6 each); the two share trials, which only lowers the
        # variance of their difference below sd_e² + sd_s².
        tol = abs(b_e - b_s) + 4.5 * math.hypot(sd_e, sd_s)
        assert abs(e.value - s.value) <= tol, (parameter, e.value, s.value, tol)
        assert tol < 0.05  # the derivation leaves a tolerance that says something
    assert streamed[0].value > 0.95


def _streamed_at(units):
    design = unit_design(list(units), threshold="split", unit_size=25_000)
    return streamed_bounds(stream_counts(units, design), delta=0.0, confidence_level=C)


# ------------------------------------------------------------- the kind, end to end


def _context(unit_size: int) -> RunContext:
    return RunContext(
        seed=0, confidence_level=C, delta=1e-5, base_dir=Path("."), unit_size=unit_size
    )


def test_exact_path_up_to_the_limit_streamed_above(monkeypatch) -> None:
    section, lazy = _laplace(20_000, 2_500)
    units = _stored(lazy)
    exact = mechanism_summary(section, _context(2_500), units, level=0.975)
    neg = np.concatenate([units[u]["negative"] for u in sorted(units)])
    pos = np.concatenate([units[u]["positive"] for u in sorted(units)])
    delta = upper_bound(section, build_mechanism(section, "."), 1e-5).epsilon_delta
    want = epsilon_and_mu_lower_bounds(neg, pos, delta=delta, confidence_level=0.975, seed=0)
    assert [c.lower for c in exact.comparisons[:2]] == list(want)
    assert "streamed" not in exact.tests[0].details
    monkeypatch.setattr(mechanism_summary_module, "EXACT_TRIALS_LIMIT", 19_999)
    streamed = mechanism_summary(section, _context(2_500), units, level=0.975)
    test = streamed.tests[0]
    assert test.details["streamed"]["counted_units"] == 4
    assert test.metrics["auc_method"] == "delong, binned on the grid of thresholds"
    assert test.negatives == test.positives == 20_000
    assert sum(test.histogram["negatives"]) == 20_000
    assert abs(test.metrics["auc"] - exact.tests[0].metrics["auc"]) < 1e-3
    assert all(c.lower.details.get("streamed") for c in streamed.comparisons[:2])
    assert [c.in_verdict for c in streamed.comparisons] == [c.in_verdict for c in exact.comparisons]


def test_streamed_summary_memory_does_not_grow_with_the_units(monkeypatch) -> None:
    monkeypatch.setattr(mechanism_summary_module, "EXACT_TRIALS_LIMIT", 0)
    peaks = []
    for trials in (250_000, 1_000_000):
        section, units = _laplace(trials, 25_000)
        tracemalloc.start()
        mechanism_summary(section, _context(25_000), units, level=0.975)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # 4× the trials (10 → 40 units of 0.4 MB each): the peak is a few units' worth and
    # O(grid) either way; holding the scores would add 12 MB (and ~200 MB of curve).
    assert peaks[1] < peaks[0] + 4_000_000, peaks
    assert peaks[1] < 40_000_000, peaks


def test_streamed_run_writes_valid_results_and_verifies(monkeypatch, tmp_path: Path) -> None:
    from dpaudit.audit import run_audit, verify_run
    from dpaudit.schemas import validate_results

    monkeypatch.setattr(mechanism_summary_module, "EXACT_TRIALS_LIMIT", 1_000)
    audit = tmp_path / "a.toml"
    audit.write_text(
        '[audit]\nname = "s"\nkinds = ["mechanism"]\nseed = 0\n\n'
        '[mechanism]\nname = "laplace"\nepsilon = 1.0\ntrials = 8000\nthreshold = "bonferroni"\n\n'
        "[execution]\nunit_size = 1000\n"
    )
    run_audit(audit, output_dir=tmp_path / "run")
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    validate_results(data)
    assert data["tests"][0]["streamed"]["grid_units"] == 7
    assert data["bounds"][0]["lower"]["details"]["streamed"] is True
    assert data["bounds"][0]["lower"]["counts"]["negatives"] == 1000
    assert verify_run(tmp_path / "run") == []
