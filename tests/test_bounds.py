from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit import DpauditError
from dpaudit.bounds import (
    EpsilonBound,
    InsufficientTrialsError,
    epsilon_from_counts,
    epsilon_from_rates,
    epsilon_lower_bound,
    minimum_trials,
    mu_from_counts,
    mu_from_rates,
    mu_lower_bound,
    one_run_epsilon_lower_bound,
    one_run_p_value,
)
from dpaudit.stats import clopper_pearson


# ------------------------------------------------------------------ fixed-threshold values
def test_published_count_example() -> None:
    # The worked example of docs/design.md and docs/statistics.md: FP 5/1000, FN 50/1000,
    # δ = 1e-5, one-sided 0.025 per rate.
    b = epsilon_from_counts(5, 1000, 50, 1000, delta=1e-5, confidence_level=0.95)
    assert b.value == pytest.approx(4.387, abs=1e-3)
    assert b.fpr.high == pytest.approx(
        clopper_pearson(5, 1000, confidence_level=0.975, alternative="less").high, abs=1e-14
    )
    assert b.threshold == "fixed"
    assert b.method == "clopper-pearson"


def test_zero_errors_closed_form() -> None:
    b = epsilon_from_counts(0, 1000, 0, 1000, delta=1e-5)
    u = 1 - 0.025 ** (1 / 1000)  # exact k = 0 Clopper–Pearson upper limit
    assert b.value == pytest.approx(math.log((1 - 1e-5 - u) / u), abs=1e-9)
    assert b.value == pytest.approx(5.601, abs=1e-3)


def test_mu_from_counts_closed_form() -> None:
    from scipy.stats import norm

    b = mu_from_counts(5, 1000, 50, 1000)
    assert b.value == pytest.approx(norm.ppf(1 - b.fpr.high) - norm.ppf(b.fnr.high), abs=1e-12)


def test_rates_to_bounds_edge_cases() -> None:
    # Numerators ≤ 0 drop their term; a useless test gives exactly 0, never NaN.
    assert epsilon_from_rates(0.6, 0.6, delta=0.0) == 0.0
    assert epsilon_from_rates(1.0, 1.0, delta=0.0) == 0.0
    assert mu_from_rates(1.0, 0.0) == 0.0
    assert mu_from_rates(0.5, 0.5) == 0.0
    # the ε region is tight for the DP trade-off curve: FNR = 1 − δ − e^ε FPR gives ε back
    eps, delta, fpr = 1.3, 1e-3, 0.05
    assert epsilon_from_rates(fpr, 1 - delta - math.exp(eps) * fpr, delta=delta) == pytest.approx(
        eps
    )


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(20, 2000),
    data=st.data(),
    c_lo=st.floats(0.5, 0.9),
    c_hi=st.floats(0.91, 0.999),
)
def test_bounds_fall_with_confidence_and_stay_below_point_estimate(n, data, c_lo, c_hi) -> None:
    fp = data.draw(st.integers(0, n))
    fn = data.draw(st.integers(0, n))
    lo = epsilon_from_counts(fp, n, fn, n, delta=1e-5, confidence_level=c_lo)
    hi = epsilon_from_counts(fp, n, fn, n, delta=1e-5, confidence_level=c_hi)
    assert hi.value <= lo.value + 1e-12
    point = float(epsilon_from_rates(max(fp / n, 1e-300), max(fn / n, 1e-300), delta=1e-5))
    assert lo.value <= point + 1e-9
    mlo = mu_from_counts(fp, n, fn, n, confidence_level=c_lo)
    mhi = mu_from_counts(fp, n, fn, n, confidence_level=c_hi)
    assert mhi.value <= mlo.value + 1e-12
    assert mlo.value <= max(0.0, float(mu_from_rates(fp / n, fn / n))) + 1e-9


# ------------------------------------------------------------- tightness at 100k trials
N_TIGHT = 100_000


def test_tightness_laplace() -> None:
    # The default strategy (split) must reach 0.95·ε; Bonferroni over all 100k cuts pays
    # z ≈ 4.9 instead of 1.96 per rate and lands just below (0.949 at this seed).
    rng = np.random.default_rng(2)
    neg, pos = rng.laplace(0.0, 1.0, N_TIGHT), rng.laplace(1.0, 1.0, N_TIGHT)  # ε = 1
    b = epsilon_lower_bound(neg, pos, delta=0.0, seed=3)
    assert b.value >= 0.95


def test_tightness_randomized_response() -> None:
    rng = np.random.default_rng(4)
    neg = (rng.random(N_TIGHT) < 0.25).astype(float)  # fair-coin RR reports 1 w.p. ¼ on D
    pos = (rng.random(N_TIGHT) < 0.75).astype(float)
    b = epsilon_lower_bound(neg, pos, delta=0.0, seed=5)
    assert b.value >= 0.95 * math.log(3)


def test_tightness_gaussian_mu() -> None:
    rng = np.random.default_rng(6)
    b = mu_lower_bound(rng.normal(0, 1, N_TIGHT), rng.normal(1, 1, N_TIGHT), seed=7)
    assert b.value >= 0.93


# ------------------------------------------------------------- validity over repeats
# Each bound may exceed its target in at most a (1 − c) = 5 % fraction of audits. Over
# R = 1000 independent repeats, P[Bin(1000, 0.05) > 65] ≈ 0.011, so the 6.5 % ceiling
# flags a bound whose true failure rate is 5 % only about once in a hundred seeds.
REPEATS, TRIALS, CEILING = 1000, 1000, 0.065


def _failure_rate(sample, bound, target: float, threshold: str) -> float:
    rng = np.random.default_rng(12345)
    hits = 0
    for i in range(REPEATS):
        neg, pos = sample(rng)
        if bound(neg, pos, threshold=threshold, seed=i).value > target:
            hits += 1
    return hits / REPEATS


def _eps(neg, pos, **kw):
    return epsilon_lower_bound(neg, pos, delta=1e-5, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_validity_null(threshold: str) -> None:
    def same(rng):
        return rng.normal(0, 1, TRIALS), rng.normal(0, 1, TRIALS)

    assert _failure_rate(same, _eps, 0.0, threshold) <= CEILING
    assert _failure_rate(same, mu_lower_bound, 0.0, threshold) <= CEILING


@pytest.mark.slow
@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_validity_laplace_eps_1(threshold: str) -> None:
    def lap(rng):
        return rng.laplace(0, 1, TRIALS), rng.laplace(1, 1, TRIALS)

    rate = _failure_rate(
        lap, lambda n, p, **kw: epsilon_lower_bound(n, p, delta=0.0, **kw), 1.0, threshold
    )
    assert rate <= CEILING


@pytest.mark.slow
@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_validity_gaussian_mu_1(threshold: str) -> None:
    def gauss(rng):
        return rng.normal(0, 1, TRIALS), rng.normal(1, 1, TRIALS)

    assert _failure_rate(gauss, mu_lower_bound, 1.0, threshold) <= CEILING


# ------------------------------------------------------------- strategies and errors
def test_split_is_deterministic_under_seed_and_reports_details() -> None:
    rng = np.random.default_rng(8)
    neg, pos = rng.normal(0, 1, 500), rng.normal(2, 1, 500)
    a = epsilon_lower_bound(neg, pos, delta=1e-5, seed=9)
    b = epsilon_lower_bound(neg, pos, delta=1e-5, seed=9)
    assert a == b
    assert a.counts["negatives"] == 250
    assert a.details["selection_negatives"] == 250
    assert isinstance(a, EpsilonBound)
    assert a.validity == "rigorous-multi-run"
    d = a.to_dict()
    assert d["threshold"] == "split"
    assert d["fpr_interval"][1] == a.fpr.high


def test_mu_bound_converts_to_epsilon_with_gdp_label() -> None:
    from dpaudit import theory

    b = mu_from_counts(5, 1000, 50, 1000)
    e = b.epsilon(1e-5)
    assert e.validity == "assumes-gdp"
    assert theory.gdp_delta(e.value, b.value) == pytest.approx(1e-5, rel=1e-6)


def test_too_few_trials_says_how_many() -> None:
    needed = minimum_trials(delta=0.0, confidence_level=0.95)
    assert needed == 6  # 1 − 0.025^(1/n) < ½ first holds at n = 6
    with pytest.raises(InsufficientTrialsError, match=r"at least 6 are needed"):
        epsilon_lower_bound([0.0] * 8, [1.0] * 8, delta=0.0, threshold="split", seed=0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"delta": 2.0}, r"'delta' parameter must be in \[0, 1\)"),
        (
            {"delta": 0.0, "threshold": "max"},
            r"'threshold' parameter must be one of \{'split', 'bonferroni'\}",
        ),
        ({"delta": 0.0, "confidence_level": 1.5}, r"'confidence_level'"),
        ({"delta": 0.0, "validity": "trust-me"}, r"'validity' parameter must be one of"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(DpauditError, match=match):
        epsilon_lower_bound(np.zeros(100), np.ones(100), **kwargs)


def test_nan_scores_are_an_error() -> None:
    with pytest.raises(DpauditError, match="NaN or infinite"):
        mu_lower_bound([0.0, float("nan")], [1.0, 2.0])


# --------------------------------------------------------------------------- one run
@pytest.mark.parametrize(
    ("m", "r", "v", "delta", "expected"),
    [
        # Reference values of the one-run bound (Steinke, Nasr, Jagielski 2023, Thm. 3.1;
        # δ > 0 as in their Prop. 5.2).
        (1000, 100, 100, 0.0, 3.493),
        (1000, 1000, 1000, 1e-5, 5.782),
        (1000, 500, 400, 1e-5, 1.198),
    ],
)
def test_one_run_reference_values(m, r, v, delta, expected) -> None:
    b = one_run_epsilon_lower_bound(canaries=m, guesses=r, correct=v, delta=delta)
    assert b.value == pytest.approx(expected, abs=1e-3)
    assert b.validity == "rigorous-one-run"


def test_one_run_pure_dp_closed_form() -> None:
    # δ = 0, all r guesses right: q^r = 1 − c  ⇒  ε = logit((1 − c)^(1/r)).
    q = 0.05 ** (1 / 100)
    b = one_run_epsilon_lower_bound(canaries=1000, guesses=100, correct=100, delta=0.0)
    assert b.value == pytest.approx(math.log(q / (1 - q)), abs=1e-5)
    assert one_run_p_value(canaries=1000, guesses=100, correct=100, epsilon=b.value, delta=0) < 0.05


def test_one_run_chance_level_gives_zero() -> None:
    b = one_run_epsilon_lower_bound(canaries=1000, guesses=200, correct=100, delta=1e-5)
    assert b.value == 0.0


def test_one_run_errors() -> None:
    with pytest.raises(DpauditError, match="correct ≤ guesses ≤ canaries"):
        one_run_epsilon_lower_bound(canaries=10, guesses=20, correct=5, delta=0.0)


def test_validity_check_has_power_against_an_uncorrected_maximum() -> None:
    # Control: the forbidden strategy (maximise per-threshold Clopper–Pearson bounds over all
    # thresholds on the same trials) must fail the same check, or the check proves nothing.
    from dpaudit.bounds import _rate_level
    from dpaudit.bounds.threshold_search import full_scan
    from dpaudit.tradeoff import TradeoffCurve

    def uncorrected(neg, pos, **_):
        curve = TradeoffCurve.from_scores(neg, pos)
        level = _rate_level(0.95)
        values, _, _ = full_scan(curve, level_fpr=level, level_fnr=level, bound=mu_from_rates)

        class Max:
            value = float(values.max())

        return Max()

    def same(rng):
        return rng.normal(0, 1, TRIALS), rng.normal(0, 1, TRIALS)

    assert _failure_rate(same, uncorrected, 0.0, "split") > CEILING


# ----------------------------------------------------- the one ε-from-error-rates formula


def test_epsilon_inequalities_closed_form_and_edges() -> None:
    from dpaudit.bounds import epsilon_inequalities

    # Kairouz, Oh, Viswanath 2015, Thm. 2.1: ε ≥ ln((1 − δ − FNR)/FPR), ln((1 − δ − FPR)/FNR)
    one, two = epsilon_inequalities(0.1, 0.2, delta=0.01)
    assert float(one) == pytest.approx(math.log(0.79 / 0.1), rel=1e-15)
    assert float(two) == pytest.approx(math.log(0.89 / 0.2), rel=1e-15)
    # a numerator ≤ 0 says nothing (−inf); a zero rate under a positive numerator: +inf
    one, two = epsilon_inequalities(np.array([0.0, 0.6]), np.array([0.3, 1.0]), delta=0.0)
    assert one.tolist() == [math.inf, -math.inf]
    assert two.tolist() == [pytest.approx(math.log(1 / 0.3)), pytest.approx(math.log(0.4))]


def test_every_epsilon_from_rates_reads_the_one_formula() -> None:
    from dpaudit.bounds import bayesian, epsilon_inequalities

    rng = np.random.default_rng(7)
    fpr, fnr = rng.random(1000), rng.random(1000)
    one, two = epsilon_inequalities(fpr, fnr, delta=1e-5)
    expected = np.maximum(0.0, np.maximum(one, two))
    np.testing.assert_array_equal(epsilon_from_rates(fpr, fnr, delta=1e-5), expected)
    np.testing.assert_array_equal(bayesian.epsilon_from_rates(fpr, fnr, delta=1e-5), expected)
    # the rigorous bound drops a term with a zero upper limit (Clopper–Pearson never gives
    # one); the posterior draws read it as ε = ∞
    assert float(epsilon_from_rates(0.0, 0.3, delta=0.0)) == pytest.approx(math.log(1 / 0.3))
    assert math.isinf(float(bayesian.epsilon_from_rates(np.array(0.0), np.array(0.3), delta=0.0)))
