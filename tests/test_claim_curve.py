"""Tests of dpaudit.bounds.claim_curve: curves from profiles, the claim-curve test, σ′."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpaudit import theory
from dpaudit.bounds import mu_from_rates
from dpaudit.bounds.claim_curve import (
    SIGMA_STEPS_PER_DOUBLING,
    claim_curve_epsilon,
    claim_curve_test,
    dp_claim,
    dpsgd_claim,
    effective_noise_multiplier,
    gdp_claim,
    laplace_claim,
    randomized_response_claim,
    tradeoff_from_profile,
)
from dpaudit.errors import DpauditError, InsufficientTrialsError

ALPHA = np.linspace(0.0005, 0.9995, 1999)
EPS = np.linspace(0.0, 20.0, 4001)


# ------------------------------------------------------------------ curves from profiles


def test_profile_dual_of_gdp_is_g_mu() -> None:
    # Dong, Roth, Su 2022, Cor. 2.13 + Prop. 2.12: the dual of δ_μ(ε) is G_μ. On a grid it
    # is a lower envelope; the gap is the grid's (ε step 0.005).
    f = tradeoff_from_profile(ALPHA, EPS, theory.gdp_delta(EPS, 1.5))
    exact = np.asarray(theory.tradeoff_gdp(ALPHA, mu=1.5))
    assert np.all(f <= exact + 1e-12)
    assert np.max(exact - f) < 1e-5


def test_profile_dual_of_laplace_is_its_curve() -> None:
    f = tradeoff_from_profile(ALPHA, EPS, theory.laplace_profile(EPS, epsilon=1.0))
    exact = np.asarray(theory.tradeoff_laplace(ALPHA, epsilon=1.0))
    assert np.all(f <= exact + 1e-12)
    assert np.max(exact - f) < 1e-5


def test_single_guarantee_is_the_dp_region() -> None:
    f = tradeoff_from_profile(ALPHA, [1.0], [0.01])
    assert np.allclose(f, theory.tradeoff_dp(ALPHA, epsilon=1.0, delta=0.01), atol=1e-15)
    assert np.allclose(dp_claim(1.0, 0.01)(ALPHA), f, atol=1e-15)


def test_exact_claims_match_theory() -> None:
    assert np.allclose(gdp_claim(1.0)(ALPHA), theory.tradeoff_gdp(ALPHA, mu=1.0))
    assert np.allclose(laplace_claim(2.0)(ALPHA), theory.tradeoff_laplace(ALPHA, epsilon=2.0))
    rr = randomized_response_claim(0.75)(ALPHA)
    assert np.allclose(rr, theory.tradeoff_randomized_response(ALPHA, p=0.75))


def test_full_batch_dpsgd_is_exact_gdp() -> None:
    c = dpsgd_claim(noise_multiplier=2.0, sampling_rate=1.0, steps=9)
    assert c.exact
    assert np.allclose(c(ALPHA), theory.tradeoff_gdp(ALPHA, mu=1.5))


def test_one_poisson_step_against_its_neyman_pearson_curve() -> None:
    # One Poisson-subsampled Gaussian step, H0 = N(0, σ²), H1 = (1 − q)N(0, σ²) + qN(1, σ²):
    # the likelihood ratio is increasing in x, so the tests are thresholds on x and
    # β(α) = (1 − q)(1 − α) + qΦ(Φ⁻¹(1 − α) − 1/σ). The accountant's profile covers both
    # directions (add and remove), so its curve lies below this one everywhere and meets
    # it where this direction is the worse one (small α).
    q, sigma = 0.5, 1.0
    f = dpsgd_claim(noise_multiplier=sigma, sampling_rate=q, steps=1)(ALPHA)
    z = stats.norm.ppf(1.0 - ALPHA)
    exact = (1 - q) * (1 - ALPHA) + q * stats.norm.cdf(z - 1.0 / sigma)
    assert np.all(f <= exact + 1e-9)
    small = ALPHA <= 0.3
    assert np.max(exact[small] - f[small]) < 1e-4


def test_profile_shapes_are_checked() -> None:
    with pytest.raises(DpauditError, match="must be 1-D arrays of one length"):
        tradeoff_from_profile(ALPHA, [0.0, 1.0], [0.1])


# ------------------------------------------------------------------ the test


def _gdp_scores(n: int, mu: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    # Full-batch DP-GD's white-box sum score is exactly N(0, 1) vs N(μ, 1), μ = √T/σ.
    return rng.normal(0.0, 1.0, n), rng.normal(mu, 1.0, n)


@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_validity_and_power_on_exact_gdp(threshold: str) -> None:
    # A correct mechanism (μ_run = μ_claim) may be declared in violation at most a 1 − c
    # fraction of the time: the count must stay below the binomial 0.999 quantile. The
    # power control (μ_run = 2 μ_claim) must violate nearly always, or the test is vacuous.
    c, n, repeats = 0.9, 300, 200
    claim = dpsgd_claim(noise_multiplier=2.0, sampling_rate=1.0, steps=4)  # 1-GDP
    rng = np.random.default_rng(20261125)
    false = power = 0
    for i in range(repeats):
        neg, pos = _gdp_scores(n, 1.0, rng)
        false += claim_curve_test(
            neg, pos, claim=claim, confidence_level=c, threshold=threshold, seed=i
        ).violated
        neg, pos = _gdp_scores(n, 2.0, rng)
        power += claim_curve_test(
            neg, pos, claim=claim, confidence_level=c, threshold=threshold, seed=i
        ).violated
    assert false <= stats.binom.ppf(0.999, repeats, 1.0 - c)
    assert power >= 0.9 * repeats


def test_violation_is_a_point_below_the_curve() -> None:
    rng = np.random.default_rng(3)
    neg, pos = _gdp_scores(2000, 3.0, rng)
    r = claim_curve_test(neg, pos, claim=gdp_claim(1.0), confidence_level=0.95, seed=0)
    assert r.violated
    assert r.margin > 0
    assert (
        r.fnr.high < r.curve_at_fpr == pytest.approx(float(theory.tradeoff_gdp(r.fpr.high, mu=1.0)))
    )
    # the margin in probit units is exactly the μ gap at this point
    mu_point = float(mu_from_rates(r.fpr.high, r.fnr.high))
    assert r.margin == pytest.approx(mu_point - 1.0, rel=1e-9)
    assert r.counts["negatives"] == 1000
    assert r.to_dict()["violated"] is True


def test_too_few_trials_teaches() -> None:
    with pytest.raises(InsufficientTrialsError, match=r"1 per hypothesis are counted, at least 6"):
        claim_curve_test([0.0, 1.0], [2.0, 3.0], claim=gdp_claim(1.0), confidence_level=0.95)
    with pytest.raises(DpauditError, match="'threshold' parameter"):
        claim_curve_test([0.0] * 50, [1.0] * 50, claim=gdp_claim(1.0), threshold="max")


# ------------------------------------------------------------------ effective σ


def _grid_above(x: float, ref: float) -> float:
    # the least grid point ref·2^((k + ½)/n) strictly above x
    n = SIGMA_STEPS_PER_DOUBLING
    k = math.floor(n * math.log2(x / ref) - 0.5) + 1
    return ref * 2.0 ** ((k + 0.5) / n)


def test_effective_sigma_closed_form_full_batch() -> None:
    # q = 1: DP-GD is exactly √T/σ-GDP, and (u0, u1) lies below G_{√T/σ} iff √T/σ is
    # below μ_point = Φ⁻¹(1 − u0) − Φ⁻¹(u1), i.e. iff σ > √T/μ_point (more noise, higher
    # curve). σ′ is the least grid point excluded: the first one above √T/μ_point.
    u0, u1, steps = 0.01, 0.2, 4
    mu_point = float(mu_from_rates(u0, u1))
    e = effective_noise_multiplier(
        u0, u1, reference=1.0, sampling_rate=1.0, steps=steps, delta=1e-5, confidence_level=0.95
    )
    assert e.sigma == pytest.approx(_grid_above(math.sqrt(steps) / mu_point, 1.0), rel=1e-12)
    assert e.epsilon == pytest.approx(
        theory.gdp_epsilon(math.sqrt(steps) / e.sigma, 1e-5), rel=1e-3
    )
    assert "q = 1 and T = 4" in e.assumption
    none = effective_noise_multiplier(
        0.6, 0.5, reference=1.0, sampling_rate=1.0, steps=steps, delta=1e-5, confidence_level=0.95
    )
    assert none.sigma is None
    assert none.epsilon is None


def test_effective_sigma_coverage_full_batch() -> None:
    # "no more private than σ′": for a correct run of σ_run, σ′ < σ_run at most a 1 − c
    # fraction of the time; power control: a run with half the noise gives σ′ < σ_claimed
    # nearly always.
    c, n, repeats, steps, sigma = 0.9, 300, 150, 4, 2.0
    rng = np.random.default_rng(11)
    miss = found = 0
    for i in range(repeats):
        neg, pos = _gdp_scores(n, math.sqrt(steps) / sigma, rng)
        r = claim_curve_test(neg, pos, claim=gdp_claim(1.0), confidence_level=c, seed=i)
        e = effective_noise_multiplier(
            r.fpr.high,
            r.fnr.high,
            reference=sigma,
            sampling_rate=1.0,
            steps=steps,
            delta=1e-5,
            confidence_level=c,
        )
        miss += e.sigma is not None and e.sigma < sigma
        neg, pos = _gdp_scores(n, 2 * math.sqrt(steps) / sigma, rng)
        r = claim_curve_test(neg, pos, claim=gdp_claim(1.0), confidence_level=c, seed=i)
        e = effective_noise_multiplier(
            r.fpr.high,
            r.fnr.high,
            reference=sigma,
            sampling_rate=1.0,
            steps=steps,
            delta=1e-5,
            confidence_level=c,
        )
        found += e.sigma is not None and e.sigma < sigma
    assert miss <= stats.binom.ppf(0.999, repeats, 1.0 - c)
    assert found >= 0.9 * repeats


# ------------------------------------------------------------------ in the dpsgd verdict


def test_claim_curve_epsilon_full_batch() -> None:
    # DP-GD, σ = 2, T = 4: exactly 1-GDP. A run with twice the signal (σ_run = 1) is
    # caught: its ε exceeds the accountant's and σ′ < σ; a correct run is not.
    rng = np.random.default_rng(5)
    kw = {"noise_multiplier": 2.0, "sampling_rate": 1.0, "steps": 4, "delta": 1e-5}
    neg, pos = _gdp_scores(2000, 2.0, rng)
    bound, accountant = claim_curve_epsilon(neg, pos, confidence_level=0.95, seed=0, **kw)
    assert accountant == pytest.approx(theory.gdp_epsilon(1.0, 1e-5), rel=1e-12)
    assert bound.value > accountant
    assert bound.details["effective_noise_multiplier"] < 2.0
    assert bound.details["below_claim_curve"] is True
    assert bound.method == "claim-curve"
    neg, pos = _gdp_scores(2000, 1.0, rng)
    ok, _ = claim_curve_epsilon(neg, pos, confidence_level=0.95, seed=0, **kw)
    assert ok.value == 0.0
    assert ok.details["below_claim_curve"] is False


def test_dpsgd_verdict_lists_the_claim_curve() -> None:
    # The kind announces the claim-curve comparison exactly when the units carry records
    # of what ran with a finite curve (σ > 0); it is held against the least private one.
    from dpaudit.accounting.upper_bounds import UpperBound
    from dpaudit.dpsgd.summary import StoredUnits, _curve_record, in_verdict
    from dpaudit.records import DPSGDRecord

    records = [
        DPSGDRecord(noise_multiplier=s, sampling_rate=q, steps=t, clipping_norm=1.0)
        for s, q, t in ((1.0, 0.25, 8), (0.9, 0.2, 10))
    ]
    part = {**DPSGDRecord.to_arrays(records), "scores": np.zeros(2), "included": np.array([0, 1])}
    stored = StoredUnits((part,), None, UpperBound(6.0, 1e-5, 1.5, "accountant"), ())
    assert "many-run claim curve" in in_verdict(stored)
    least = _curve_record(stored)
    assert least is not None
    assert (least.noise_multiplier, least.sampling_rate, least.steps) == (0.9, 0.25, 10)
    bare = {"scores": np.zeros(2), "included": np.array([0, 1])}
    no_records = StoredUnits((bare,), None, None, ())
    assert _curve_record(no_records) is None
