"""Tests for dpaudit.theory: closed forms, round trips, trade-off curve properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from dpaudit import theory
from dpaudit.errors import DpauditError

ALPHAS = np.linspace(0.0, 1.0, 2001)


# --------------------------------------------------------------------------------------
# δ_μ(ε), ε(μ, δ), μ(ε, δ)
# --------------------------------------------------------------------------------------


def _naive_gdp_delta(eps: float, mu: float) -> float:
    # Dong, Roth, Su 2019, Cor. 2.13, written directly with scipy (fine where no overflow)
    return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


@pytest.mark.parametrize(("eps", "mu"), [(0.0, 1.0), (0.5, 0.5), (1.0, 1.0), (3.0, 2.0), (5, 4)])
def test_gdp_delta_matches_direct_formula(eps, mu):
    assert theory.gdp_delta(eps, mu) == pytest.approx(_naive_gdp_delta(eps, mu), rel=1e-9)


def test_gdp_delta_at_zero_is_tv_distance():
    # δ_μ(0) = TV(N(0,1), N(μ,1)) = 2Φ(μ/2) − 1
    for mu in [1e-8, 0.1, 1.0, 3.0]:
        assert theory.gdp_delta(0.0, mu) == pytest.approx(2 * stats.norm.cdf(mu / 2) - 1, rel=1e-9)


def test_gdp_delta_large_epsilon_is_finite_and_vectorised():
    eps = np.array([0.0, 1.0, 50.0, 800.0, 1e6, np.inf])
    out = theory.gdp_delta(eps, 2.0)
    assert out.shape == eps.shape
    assert np.all(np.isfinite(out))
    assert np.all(np.diff(out) <= 0)  # δ_μ(ε) decreases in ε
    assert out[-1] == 0.0
    # at ε = 800, μ = 40 the naive e^ε·Φ(·) is inf·0 = nan; log-space gives a value in (0, 1)
    assert 0.0 < theory.gdp_delta(800.0, 40.0) < 1.0


def test_gdp_epsilon_full_batch_published_value():
    # full-batch DP-GD with σ = 5, T = 100 is exactly μ = √T/σ = 2-GDP (Dong, Roth, Su 2019,
    # Cor. 3.3); ε(2, 1e-5) = 9.9973 (Dong, Roth, Su 2019 Cor. 2.13, solved numerically)
    assert theory.gdp_epsilon(2.0, 1e-5) == pytest.approx(9.9973, abs=5e-5)
    assert theory.gdp_delta(9.9973, 2.0) == pytest.approx(1e-5, rel=1e-4)


def test_gdp_epsilon_is_zero_above_delta_at_zero():
    mu = 1.0
    d0 = theory.gdp_delta(0.0, mu)
    assert theory.gdp_epsilon(mu, d0) == 0.0
    assert theory.gdp_epsilon(mu, min(1.0, d0 * 1.5)) == 0.0
    assert theory.gdp_epsilon(mu, d0 * 0.999) > 0.0
    assert theory.gdp_epsilon(0.0, 1e-5) == 0.0


@pytest.mark.parametrize("mu", [0.05, 0.5, 1.0, 2.0, 8.0, 30.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-5, 1e-2, 0.2])
def test_round_trips(mu, delta):
    eps = theory.gdp_epsilon(mu, delta)
    if eps == 0.0:
        assert delta >= theory.gdp_delta(0.0, mu)
        return
    # δ → ε → δ
    assert theory.gdp_delta(eps, mu) == pytest.approx(delta, rel=1e-8)
    # μ → ε → μ
    assert theory.gdp_mu(eps, delta) == pytest.approx(mu, rel=1e-8)


@settings(max_examples=60, deadline=None)
@given(
    mu=st.floats(min_value=0.01, max_value=20.0),
    log10_delta=st.floats(min_value=-15.0, max_value=-0.5),
)
def test_round_trip_property(mu, log10_delta):
    delta = 10.0**log10_delta
    eps = theory.gdp_epsilon(mu, delta)
    if eps > 0:
        assert theory.gdp_mu(eps, delta) == pytest.approx(mu, rel=1e-7)


def test_gdp_mu_monotone_and_edges():
    mus = [theory.gdp_mu(1.0, d) for d in [1e-10, 1e-6, 1e-3, 0.1, 0.5]]
    assert np.all(np.diff(mus) > 0)
    assert theory.gdp_mu(1.0, 0.0) == 0.0
    # ε = 0: δ = erf(μ/(2√2)) inverted exactly, even for tiny δ
    assert theory.gdp_mu(0.0, 1e-300) == pytest.approx(1e-300 * math.sqrt(2 * math.pi), rel=1e-9)


def test_mu_from_pure_dp_published_value():
    # −2Φ⁻¹(1/(1+e)) = 1.2320 (Liu, Sun, Jiang, Kong 2022, Sec. 5 unverified: ε-DP ⇒ μ-GDP)
    assert theory.mu_from_pure_dp(1.0) == pytest.approx(1.2320, abs=5e-5)
    assert theory.mu_from_pure_dp(0.0) == 0.0


@pytest.mark.parametrize("eps", [0.1, 1.0, 3.0])
def test_mu_from_pure_dp_is_tight(eps):
    mu = theory.mu_from_pure_dp(eps)
    f = theory.tradeoff_dp(ALPHAS, epsilon=eps)
    # every ε-DP curve lies above G_μ ...
    assert np.all(f >= theory.tradeoff_gdp(ALPHAS, mu=mu) - 1e-12)
    # ... and touches it at the symmetric point α = 1/(1 + e^ε), so no smaller μ works
    a_star = 1.0 / (1.0 + math.exp(eps))
    assert theory.tradeoff_gdp(a_star, mu=mu) == pytest.approx(a_star, rel=1e-10)
    assert np.any(f < theory.tradeoff_gdp(ALPHAS, mu=mu * 0.99))


# --------------------------------------------------------------------------------------
# trade-off curves
# --------------------------------------------------------------------------------------


def test_tradeoff_gdp_is_neyman_pearson_for_shifted_normals():
    # threshold test on N(0,1) vs N(μ,1): α = P0[X > t], β = P1[X ≤ t]
    t = np.linspace(-4, 6, 41)
    mu = 1.5
    alpha = stats.norm.sf(t)
    beta = stats.norm.cdf(t, loc=mu)
    np.testing.assert_allclose(theory.tradeoff_gdp(alpha, mu=mu), beta, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("eps", [0.3, 1.0, 2.5])
def test_tradeoff_laplace_is_neyman_pearson_for_shifted_laplace(eps):
    # likelihood ratio of Lap(1, 1/ε) to Lap(0, 1/ε) is monotone: threshold tests are optimal
    b = 1.0 / eps
    t = np.linspace(-5, 6, 221)
    alpha = stats.laplace.sf(t, loc=0.0, scale=b)
    beta = stats.laplace.cdf(t, loc=1.0, scale=b)
    np.testing.assert_allclose(theory.tradeoff_laplace(alpha, epsilon=eps), beta, rtol=1e-9)


def test_tradeoff_dp_closed_form_values():
    # f_{1,0}(0.1) = 1 − e·0.1; f_{1,0}(0.5) = e^{−1}·0.5; f with δ shifts the corner
    assert theory.tradeoff_dp(0.1, epsilon=1.0) == pytest.approx(1 - math.e * 0.1)
    assert theory.tradeoff_dp(0.5, epsilon=1.0) == pytest.approx(0.5 / math.e)
    assert theory.tradeoff_dp(0.0, epsilon=1.0, delta=0.1) == pytest.approx(0.9)
    assert theory.tradeoff_dp(0.95, epsilon=1.0, delta=0.1) == 0.0


def test_randomized_response_fair_coin():
    # heads: truth, tails: a second fair coin ⇒ p = 3/4, ε = ln 3 (Dwork, Roth 2014, Sec. 3.2)
    assert theory.randomized_response_epsilon(0.75) == pytest.approx(math.log(3.0))
    f = theory.tradeoff_randomized_response(ALPHAS, p=0.75)
    np.testing.assert_allclose(f, theory.tradeoff_dp(ALPHAS, epsilon=math.log(3.0)), atol=1e-12)
    # the deterministic test "report = 1" has α = β = 1 − p
    assert theory.tradeoff_randomized_response(0.25, p=0.75) == pytest.approx(0.25)


def test_randomized_response_matches_simulated_test():
    # randomised tests mixing "report = 1" with "always accept" reach the segment (0,1)-(q,q)
    p, q = 0.8, 0.2
    for lam in [0.0, 0.3, 1.0]:
        alpha = lam * q
        beta = lam * (1 - p) + (1 - lam) * 1.0
        assert theory.tradeoff_randomized_response(alpha, p=p) == pytest.approx(beta)


CURVES = {
    "dp": lambda a: theory.tradeoff_dp(a, epsilon=1.3),
    "dp-delta": lambda a: theory.tradeoff_dp(a, epsilon=0.7, delta=0.05),
    "gdp": lambda a: theory.tradeoff_gdp(a, mu=1.1),
    "laplace": lambda a: theory.tradeoff_laplace(a, epsilon=1.0),
    "rr": lambda a: theory.tradeoff_randomized_response(a, p=0.7),
}


@pytest.mark.parametrize("name", sorted(CURVES))
def test_curves_are_trade_off_functions(name):
    f = CURVES[name]
    beta = f(ALPHAS)
    assert np.all((beta >= 0) & (beta <= 1))
    assert np.all(np.diff(beta) <= 1e-12)  # non-increasing
    assert np.all(np.diff(beta, 2) >= -1e-9)  # convex (uniform grid)
    assert np.all(beta <= 1 - ALPHAS + 1e-12)  # below the random-guess line


@pytest.mark.parametrize("name", sorted(CURVES))
def test_symmetric_curves_are_involutions(name):
    f = CURVES[name]
    # symmetric trade-off curves satisfy f(f(α)) = α wherever f(α) > 0
    a = ALPHAS[(ALPHAS > 0.001) & (ALPHAS < 0.94)]
    np.testing.assert_allclose(f(f(a)), a, atol=1e-9)


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_laplace_agrees_with_dp_at_the_corners(eps):
    lap = theory.tradeoff_laplace(ALPHAS, epsilon=eps)
    dp = theory.tradeoff_dp(ALPHAS, epsilon=eps)
    assert np.all(lap >= dp - 1e-12)  # the Laplace mechanism is ε-DP
    first_kink = math.exp(-eps) / 2
    a = ALPHAS
    corner = (a <= first_kink) | (a >= 0.5)
    np.testing.assert_allclose(lap[corner], dp[corner], atol=1e-12)
    assert np.all(lap[~corner] > dp[~corner])  # and strictly inside the region between


def test_laplace_symmetric_point_gives_its_gdp_mu():
    # Laplace touches G_μ at α = β = e^{−ε/2}/2, so μ = 2Φ⁻¹(1 − e^{−ε/2}/2) = 1.0301 at ε = 1
    mu = 2 * stats.norm.ppf(1 - math.exp(-0.5) / 2)
    assert mu == pytest.approx(1.0301, abs=5e-5)
    lap = theory.tradeoff_laplace(ALPHAS, epsilon=1.0)
    assert np.all(lap >= theory.tradeoff_gdp(ALPHAS, mu=mu) - 1e-12)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: theory.gdp_delta(1.0, -1.0), r"The 'mu' parameter must be in \[0, inf\]"),
        (lambda: theory.gdp_delta(-1.0, 1.0), r"The 'epsilon' parameter must be >= 0"),
        (lambda: theory.gdp_epsilon(1.0, 0.0), r"The 'delta' parameter must be in \(0, 1\]"),
        (lambda: theory.gdp_mu(1.0, 1.0), r"The 'delta' parameter must be in \[0, 1\)"),
        (lambda: theory.tradeoff_gdp(1.5, mu=1.0), r"The 'alpha' parameter must be in \[0, 1\]"),
        (lambda: theory.tradeoff_randomized_response(0.1, p=0.3), r"The 'p' parameter"),
        (lambda: theory.randomized_response_epsilon(1.0), r"must be in \[0.5, 1\)"),
    ],
)
def test_bad_input_messages(call, match):
    with pytest.raises(DpauditError, match=match):
        call()


# --------------------------------------------------------------------------------------
# the seeds' classic results
# --------------------------------------------------------------------------------------


def test_laplace_scale_and_profile():
    # b = Δ/ε (Dwork, McSherry, Nissim, Smith 2006)
    assert theory.laplace_scale(2.0, 0.5) == pytest.approx(4.0)
    # the profile is the convex conjugate of the Laplace trade-off: sup_α 1 − f(α) − e^ε' α
    a = np.linspace(1e-6, 1.0, 200_001)
    f = theory.tradeoff_laplace(a, epsilon=1.0)
    for e in [0.0, 0.3, 0.8, 1.0, 1.5]:
        numeric = max(0.0, float(np.max(1.0 - f - math.exp(e) * a)))
        assert theory.laplace_profile(e, epsilon=1.0) == pytest.approx(numeric, abs=1e-6)


def test_pure_dp_profile_is_conjugate_of_f_eps_0():
    a = np.linspace(0.0, 1.0, 100_001)
    f = theory.tradeoff_dp(a, epsilon=1.2)
    for e in [0.0, 0.5, 1.2, 2.0]:
        numeric = max(0.0, float(np.max(1.0 - f - math.exp(e) * a)))
        exact = theory.pure_dp_profile(e, epsilon=1.2)
        # a grid maximum of a piecewise-linear function misses the kink by at most
        # spacing × (largest slope) = 1e-5 · (e^{1.2} + e^{ε})
        assert numeric - 1e-12 <= exact <= numeric + 1e-5 * (math.exp(1.2) + math.exp(e))


def test_gaussian_sigma_classic():
    # σ = Δ√(2 ln(1.25/δ))/ε (Dwork, Roth 2014, Thm. A.1): ε = 0.5, δ = 1e-5, Δ = 1 → 9.6896
    assert theory.gaussian_sigma(1.0, 0.5, 1e-5) == pytest.approx(
        math.sqrt(2 * math.log(1.25e5)) / 0.5
    )
    assert theory.gaussian_sigma(1.0, 0.5, 1e-5) == pytest.approx(9.6896, abs=1e-4)
    # the classic σ is conservative: its exact GDP μ = Δ/σ gives δ_μ(ε) below the target
    sigma = theory.gaussian_sigma(1.0, 0.9, 1e-6)
    assert theory.gdp_delta(0.9, 1.0 / sigma) < 1e-6
    with pytest.raises(DpauditError, match=r"The 'epsilon' parameter must be in \(0, 1\)"):
        theory.gaussian_sigma(1.0, 2.0, 1e-5)


def test_zcdp_conversions():
    # Bun, Steinke 2016: Prop. 1.4 (ε-DP ⇒ ε²/2-zCDP), 1.3 (ρ-zCDP ⇒ (ρ + 2√(ρ ln 1/δ), δ)),
    # 1.6 (Gaussian Δ²/(2σ²)), Lemma 1.7 (composition adds ρ)
    assert theory.pure_dp_to_zcdp(1.0) == pytest.approx(0.5)
    assert theory.zcdp_to_dp(0.5, 1e-5) == pytest.approx(0.5 + 2 * math.sqrt(0.5 * math.log(1e5)))
    assert theory.gaussian_zcdp(1.0, 2.0) == pytest.approx(0.125)
    assert theory.compose_zcdp(0.1, 0.2, 0.3) == pytest.approx(0.6)
    # zCDP's ε is an upper bound on the exact Gaussian ε: T steps of σ = 5 are 2-GDP
    rho = theory.compose_zcdp(*[theory.gaussian_zcdp(1.0, 5.0)] * 100)
    assert rho == pytest.approx(2.0)  # = μ²/2
    assert theory.zcdp_to_dp(rho, 1e-5) >= theory.gdp_epsilon(2.0, 1e-5)


def test_output_perturbation_and_jayaraman():
    # Chaudhuri, Monteleoni, Sarwate 2011, Cor. 8: sensitivity 2/(nλ)
    assert theory.output_perturbation_sensitivity(1000, 0.01) == pytest.approx(0.2)
    assert theory.output_perturbation_sensitivity(1000, 0.01, lipschitz=3.0) == pytest.approx(0.6)
    # Jayaraman et al. 2018: Laplace scale 2G/(m n₍₁₎ λ ε), σ² = 8G²T ln(1/δ)/(m² n₍₁₎² ε²)
    b = theory.multiparty_laplace_scale(
        lipschitz=1.0, parties=5, smallest_party_size=200, lam=0.01, epsilon=0.5
    )
    assert b == pytest.approx(2.0 / (5 * 200 * 0.01 * 0.5))
    # m = 1 party reduces to single-party output perturbation with the Laplace scale Δ/ε
    b1 = theory.multiparty_laplace_scale(
        lipschitz=1.0, parties=1, smallest_party_size=200, lam=0.01, epsilon=0.5
    )
    assert b1 == pytest.approx(
        theory.laplace_scale(theory.output_perturbation_sensitivity(200, 0.01), 0.5)
    )
    var = theory.multiparty_gradient_perturbation_variance(
        lipschitz=1.0, parties=5, smallest_party_size=200, steps=100, epsilon=1.0, delta=1e-5
    )
    assert var == pytest.approx(8 * 100 * math.log(1e5) / (25 * 200**2))
    with pytest.raises(
        DpauditError,
        match=r"The 'parties' parameter must be an integer in \[1, inf\)\. Got 0 instead\.",
    ):
        theory.multiparty_laplace_scale(
            lipschitz=1.0, parties=0, smallest_party_size=200, lam=0.01, epsilon=0.5
        )
