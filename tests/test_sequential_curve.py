"""The sequential claim-curve test (dpaudit.sequential.curve) and its wiring into the dpsgd
kind's sequential audits: thresholds and levels, a violation as a point below the curve,
validity of a correct DP-SGD run monitored after every round, and the power control
(the fixed design's limits checked after every round break the level the sequence holds).

benchmarks/sequential_curve.py runs the full versions (400 monitored audits; 20 seeds at
σ/2 and 0.7σ)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

from dpaudit.bounds.claim_curve import ClaimCurve, dpsgd_claim, gdp_claim, randomized_response_claim
from dpaudit.dpsgd.kind import DpsgdKind
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.dpsgd.sequential import CURVE, outcome, sequential_summary
from dpaudit.errors import DpauditError
from dpaudit.kinds.base import RunContext, SequentialSettings, check_spending
from dpaudit.records import DPSGDRecord
from dpaudit.sequential.curve import (
    FPR_LEVELS,
    CurveRule,
    SequentialCurveTest,
    curve_path,
    curve_thresholds,
    dpsgd_decision_sigma,
    plan_sequential_curve,
    whitebox_dpsgd_scores,
)

Q, T, CLIP = 0.25, 8, 1.0


def _dpsgd_round(
    rng: np.random.Generator, models: int, sigma_run: float, q: float = Q
) -> tuple[np.ndarray, np.ndarray]:
    return whitebox_dpsgd_scores(rng, models, noise_multiplier=sigma_run, sampling_rate=q, steps=T)


def test_whitebox_scores_of_full_batch_are_the_gaussian_law() -> None:
    """q = 1: each step's ratio is (x − ½)/σ², so the T-step score is N(∓T/(2σ²), T/σ²)
    out/in. 20,000 draws per arm: means within 4 standard errors, variances within 4
    standard errors of a sample variance (√(2/(n − 1))·T/σ²)."""
    sigma, n = 2.0, 20_000
    rng = np.random.default_rng(7)
    neg, pos = whitebox_dpsgd_scores(rng, n, noise_multiplier=sigma, sampling_rate=1.0, steps=T)
    var = T / sigma**2
    for scores, mean in ((neg, -T / (2 * sigma**2)), (pos, T / (2 * sigma**2))):
        assert abs(scores.mean() - mean) < 4 * np.sqrt(var / n)
        assert abs(scores.var(ddof=1) - var) < 4 * var * np.sqrt(2 / (n - 1))


def test_plan_at_half_sigma_is_seeded_and_under_three_hundred() -> None:
    kw = {
        "noise_multiplier": 1.0,
        "run_noise_multiplier": 0.5,
        "sampling_rate": Q,
        "steps": T,
        "level": 1 - 0.05 / 3,
        "repeats": 5,
    }
    plan = plan_sequential_curve(**kw)
    assert plan.detected == 1.0
    assert plan.median_trials <= 300
    assert plan == plan_sequential_curve(**kw)
    with pytest.raises(DpauditError, match="'run_noise_multiplier' parameter must be in"):
        plan_sequential_curve(**{**kw, "run_noise_multiplier": 0.0})


# ------------------------------------------------------------- thresholds and levels


def test_thresholds_sit_at_round_zero_quantiles_and_merge_ties() -> None:
    # 0..99: ⌊α·100⌋ + 1 negatives reach t, e.g. s ≥ 98 (2 of 100) for α = 1 %
    neg = np.arange(100, dtype=float)
    assert curve_thresholds(neg, FPR_LEVELS).tolist() == [69.0, 89.0, 96.0, 98.0]
    # fewer than 1/α scores: the largest one
    assert curve_thresholds(np.arange(50.0), (0.01,)).tolist() == [49.0]
    # binary scores: the four levels give two distinct tests, counted as two
    binary = np.r_[np.zeros(95), np.ones(5)]
    assert curve_thresholds(binary, FPR_LEVELS).tolist() == [0.0, 1.0]
    with pytest.raises(DpauditError, match="none of its 0 is a finite number"):
        curve_thresholds([], FPR_LEVELS)
    with pytest.raises(DpauditError, match="none of its 2 is a finite number"):
        curve_thresholds([np.inf, np.nan], FPR_LEVELS)
    # scores that are not finite place no threshold
    assert curve_thresholds([np.nan, 1.0, 2.0, np.inf], (0.3,)).tolist() == [2.0]
    with pytest.raises(DpauditError, match=r"rates in \(0, 1\)\. Got \(0\.5, 1\.0\)"):
        CurveRule(curve=gdp_claim(1.0), level=0.95, fpr_levels=(0.5, 1.0))


def test_union_bound_over_two_limits_per_threshold() -> None:
    rng = np.random.default_rng(0)
    neg, pos = rng.normal(0, 1, 200), rng.normal(1, 1, 200)
    test = SequentialCurveTest(neg, pos, CurveRule(curve=gdp_claim(1.0), level=0.95))
    k = test.thresholds.size
    assert k == 4
    assert test.rate_level == pytest.approx(1 - 0.05 / (2 * k))


def test_violation_is_a_point_below_the_curve() -> None:
    """Perfectly separated scores against 1-GDP: zero errors give limits whose point lies
    below G_1 after a few rounds; the decision is exactly u1 < f(u0) at the best point."""
    claim = gdp_claim(1.0)
    rounds = [(np.zeros(50) + np.arange(50) * 1e-3, np.ones(50) * 5.0) for _ in range(8)]
    _, path = curve_path(rounds, CurveRule(curve=claim, level=0.95), last_round=7)
    assert path[-1].decision == "violation"
    assert [p.decision for p in path[:-1]] == ["continue"] * (len(path) - 1)
    for p in path:
        below = [u1 < claim(np.array([u0]))[0] for u0, u1 in p.limits]
        assert any(below) == (p.decision == "violation")
        assert p.value > 0 if p.decision == "violation" else p.value == 0
    assert path[-1].fn == 0
    # limits are running minima: never loosen
    lims = np.array([p.limits for p in path])
    assert np.all(np.diff(lims, axis=0) <= 0)
    # the same scores against a curve nothing lies below (f = 0) stop at the cap
    zero = ClaimCurve("zero", lambda a: np.zeros_like(a))
    _, capped = curve_path(rounds[:3], CurveRule(curve=zero, level=0.95), last_round=2)
    assert capped[-1].decision == "cap"


def test_decision_sigma_is_the_effective_noise_grid_step_below() -> None:
    assert dpsgd_decision_sigma(1.0) == pytest.approx(2 ** (-1 / 64))
    assert dpsgd_decision_sigma(2.0) == pytest.approx(2 * 2 ** (-1 / 64))


# ------------------------------------------------------------- validity and power


def test_monitored_correct_dpsgd_run_holds_its_level() -> None:
    """A correct DP-SGD run (σ = 1 run and claimed, q = 0.25, T = 8), rounds of 50 per arm
    looked at after every round up to 500 per arm (9 looks), the test against the PLD
    curve of what ran at c = 0.95: false violations ≤ binom.ppf(0.999, 40, 0.05)."""
    claim = dpsgd_claim(noise_multiplier=1.0, sampling_rate=Q, steps=T)
    rule = CurveRule(curve=claim, level=0.95, tuned_trials=1000)
    repeats, looks = 40, 9
    rng = np.random.default_rng(2024)
    false = 0
    for _ in range(repeats):
        rounds = [_dpsgd_round(rng, 50, 1.0) for _ in range(looks + 1)]
        _, path = curve_path(rounds, rule, last_round=looks)
        false += path[-1].decision == "violation"
    assert false <= stats.binom.ppf(0.999, repeats, 0.05)


def test_power_control_uncorrected_looks_break_the_level_the_sequence_holds() -> None:
    """Randomized response at ε = 3 held against its own exact curve (correct: its one
    informative threshold sits on the curve's corner), c = 0.95, rounds of 50 per arm,
    19 looks. The fixed design's Clopper–Pearson limits (each at 1 − (1 − c)/2) checked
    after every round cross the curve in more than 5 % of 2,000 exact-binomial repeats
    (95 % lower limit above 0.05); the sequential test on 50 repeats of the same law stays
    at most binom.ppf(0.999, 50, 0.05)."""
    eps, c, size, looks = 3.0, 0.95, 50, 19
    p_flip = 1.0 / (1.0 + np.exp(eps))
    claim = randomized_response_claim(1.0 - p_flip)
    # the uncorrected rule, on exact binomial counts at the threshold "output = 1"
    repeats_u = 2000
    rng = np.random.default_rng(11)
    fp = rng.binomial(size, p_flip, (repeats_u, looks)).cumsum(axis=1)
    fn = rng.binomial(size, p_flip, (repeats_u, looks)).cumsum(axis=1)
    n = np.broadcast_to(size * np.arange(1, looks + 1), fp.shape)
    rate = 1 - (1 - c) / 2
    u0 = special.betaincinv(fp + 1.0, n - fp, rate)
    u1 = special.betaincinv(fn + 1.0, n - fn, rate)
    unc = int((u1 < claim(u0)).any(axis=1).sum())
    assert stats.beta.ppf(0.05, unc, repeats_u - unc + 1) > 1 - c, unc
    # the sequential test on rounds of the same law (outputs 0/1: D gives 1 w.p. p_flip)
    rule = CurveRule(curve=claim, level=c, tuned_trials=1000)
    repeats_s = 50
    rng = np.random.default_rng(12)
    false = 0
    for _ in range(repeats_s):
        rounds = [
            (
                (rng.random(size) < p_flip).astype(float),
                (rng.random(size) >= p_flip).astype(float),
            )
            for _ in range(looks + 1)
        ]
        _, path = curve_path(rounds, rule, last_round=looks)
        false += path[-1].decision == "violation"
    assert false <= stats.binom.ppf(0.999, repeats_s, 1 - c)


# ------------------------------------------------------------- the dpsgd kind's rounds


def _section(cap: int) -> DpsgdSection:
    return DpsgdSection(
        trainer="dpsgd",
        canary="dirac",
        threat_model="white-box",
        rows=32,
        trials=cap,
        training={
            "epochs": 2,
            "batch_size": 8,
            "learning_rate": 0.5,
            "dp": {"noise_multiplier": 1.0, "clipping_norm": CLIP},
        },
    )


def _context() -> RunContext:
    return RunContext(
        seed=0,
        confidence_level=0.95,
        delta=1e-5,
        base_dir=Path("."),
        sequential=SequentialSettings(round_trials=50),
    )


def _outputs(rounds: int, sigma_run: float, record: DPSGDRecord | None, seed: int) -> dict:
    """Stored rounds of 50 models per arm (model g has the canary iff g is odd) with the
    records ``record`` (None: a stated claim of ε = 2 at δ = 1e-5 instead of records)."""
    rng = np.random.default_rng(seed)
    q = Q if record is None else record.sampling_rate
    out = {}
    for r in range(rounds):
        neg, pos = _dpsgd_round(rng, 50, sigma_run, q)
        scores = np.empty(100)
        scores[0::2], scores[1::2] = neg, pos
        about = (
            {"claim": np.array([2.0, 1e-5, np.nan, np.nan])}
            if record is None
            else DPSGDRecord.to_arrays([record] * 100)
        )
        out[f"dpsgd-{r:05d}"] = {"scores": scores, "included": (np.arange(100) % 2) == 1, **about}
    return out


def _record(sigma: float, q: float) -> DPSGDRecord:
    return DPSGDRecord(noise_multiplier=sigma, sampling_rate=q, steps=T, clipping_norm=CLIP)


def test_dpsgd_sequential_stops_on_the_claim_curve_at_half_sigma() -> None:
    """Records say σ = 1 (q = 0.25, T = 8), the run has σ/2: the claim curve decides within
    300 models per arm (the ε and μ tests alone need about 1,400), and the kind announces
    its three shares before any round."""
    section, ctx = _section(2000), _context()
    level = 1 - 0.05 / 3
    assert DpsgdKind().comparisons(section, ctx, {}) == 3
    outputs = _outputs(7, 0.5, _record(1.0, Q), seed=3)
    result, _ = outcome(section, ctx, outputs, level=level)
    assert result.decision == "violation"
    assert result.decided_by == CURVE
    assert result.trials <= 300
    assert result.levels[CURVE] == pytest.approx(level)


def test_dpsgd_sequential_summary_spends_three_shares_and_reads_sigma_prime() -> None:
    """Full batch (q = 1, exact GDP: no PLD to account), records σ = 1, run σ/3: the
    summary puts ε, μ and the claim curve into the verdict at the per-bound level, spends
    exactly the three shares announced, and the claim-curve comparison is a violation
    exactly when its test stopped with one, its value the ε of σ′ < σ."""
    section, ctx = _section(2000), _context()
    level = 1 - 0.05 / 3
    outputs = _outputs(6, 1.0 / 3.0, _record(1.0, 1.0), seed=5)
    summary = sequential_summary(section, ctx, outputs, level=level)
    check_spending("dpsgd", 3, summary, level)
    curve = next(c for c in summary.comparisons if c.test.endswith("(claim curve)"))
    assert curve.in_verdict
    assert curve.lower.method == "claim-curve-cs"
    assert curve.lower.confidence_level == pytest.approx(level)
    seq = summary.tests[0].details["sequential"]
    stopped = seq["path"][CURVE][-1]["decision"] == "violation"
    assert stopped == curve.violation == seq["claim_curve"]["violated"]
    if stopped:
        assert curve.lower.details["effective_noise_multiplier"] < dpsgd_decision_sigma(1.0)
    assert len(seq["claim_curve"]["thresholds"]) == len(seq["path"][CURVE][-1]["limits"])
    assert seq["stopped_because"] == "violation"


def test_dpsgd_sequential_without_a_curve_holds_its_share_unused() -> None:
    """A trainer that states a claim but no records of what ran has no curve to test: the
    claim-curve comparison is in the verdict with no upper bound (its share unused), and
    the spending still matches the three shares announced."""
    section, ctx = _section(100), _context()
    level = 1 - 0.05 / 3
    outputs = _outputs(2, 1.0, None, seed=4)
    result, _ = outcome(section, ctx, outputs, level=level)
    assert CURVE not in result.paths
    summary = sequential_summary(section, ctx, outputs, level=level)
    check_spending("dpsgd", 3, summary, level)
    curve = next(c for c in summary.comparisons if c.test.endswith("(claim curve)"))
    assert curve.in_verdict
    assert curve.upper is None
    assert not curve.violation
    assert summary.tests[0].details["sequential"]["claim_curve"] is None
