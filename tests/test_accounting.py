"""Tests for dpaudit.accounting: published values, oracles, round trips, GDP brackets."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from dpaudit import accounting, theory
from dpaudit.errors import DpauditError
from dpaudit.records import DPSGDRecord

MNIST = {"noise_multiplier": 1.1, "sampling_rate": 256 / 60000, "steps": 14063}


# --------------------------------------------------------------------------------------
# events
# --------------------------------------------------------------------------------------


def test_event_from_record_poisson():
    rec = DPSGDRecord(noise_multiplier=1.1, sampling_rate=0.01, steps=7, clipping_norm=2.0)
    ev = accounting.event_from_record(rec)
    assert ev == dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 7
    )


def test_event_from_record_full_batch():
    rec = DPSGDRecord(5.0, 1.0, 100, 1.0, sampling="full-batch")
    ev = accounting.event_from_record(rec)
    assert ev == dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(5.0), 100)
    with pytest.raises(DpauditError, match=r"full-batch record must have sampling_rate 1\.0"):
        accounting.event_from_record(DPSGDRecord(5.0, 0.5, 100, 1.0, sampling="full-batch"))


def test_record_and_event_give_same_epsilon():
    rec = DPSGDRecord(1.0, 0.01, 1000, 1.0)
    ev = accounting.dpsgd_event(noise_multiplier=1.0, sampling_rate=0.01, steps=1000)
    assert accounting.epsilon(rec, delta=1e-5) == accounting.epsilon(ev, delta=1e-5)


# --------------------------------------------------------------------------------------
# published values and exact closed forms
# --------------------------------------------------------------------------------------


def test_mnist_setting_pld_and_rdp():
    # Abadi et al. 2016 MNIST setting: q = 256/60000, σ = 1.1, 60 epochs = 14063 steps.
    # RDP ε = 2.597: TF-Privacy's compute_dp_sgd_privacy / dp-accounting RDP for this setting;
    # PLD ε = 2.38: dp-accounting's PLD accountant (e.g. TF-Privacy tutorials' PLD figure).
    pld_eps = accounting.dpsgd_epsilon(**MNIST, delta=1e-5)
    rdp_eps = accounting.dpsgd_epsilon(**MNIST, delta=1e-5, accountant="rdp")
    assert pld_eps == pytest.approx(2.38, abs=0.01)
    assert rdp_eps == pytest.approx(2.597, abs=0.005)
    assert pld_eps < rdp_eps  # PLD is tight, RDP's conversion is not


def test_full_batch_is_exact_gdp():
    # q = 1: T Gaussian steps with σ are exactly √T/σ = 2-GDP (Dong, Roth, Su 2019, Cor. 3.3),
    # so ε(1e-5) = ε_GDP(2, 1e-5) = 9.9973 (Cor. 2.13)
    exact = theory.gdp_epsilon(2.0, 1e-5)
    assert exact == pytest.approx(9.9973, abs=5e-5)
    pld_eps = accounting.dpsgd_epsilon(
        noise_multiplier=5.0, sampling_rate=1.0, steps=100, delta=1e-5
    )
    assert exact - 1e-9 <= pld_eps <= exact + 0.01  # pessimistic PLD: above, within 0.01
    # the whole PLD profile sits on δ_2(ε), above it by at most the discretisation
    eps = np.linspace(0.0, 12.0, 25)
    prof = accounting.privacy_profile(
        accounting.dpsgd_event(noise_multiplier=5.0, sampling_rate=1.0, steps=100), eps
    )
    exact_prof = theory.gdp_delta(eps, 2.0)
    assert np.all(prof >= exact_prof * (1 - 1e-6))
    np.testing.assert_allclose(prof, exact_prof, rtol=0.01, atol=1e-12)


def test_laplace_event_profile_matches_closed_form():
    # dp-accounting's Laplace PLD against the exact profile 1 − e^{(ε' − ε)/2}
    eps = np.linspace(0.0, 1.5, 31)
    prof = accounting.privacy_profile(accounting.laplace_event(epsilon=1.0), eps)
    exact = theory.laplace_profile(eps, epsilon=1.0)
    np.testing.assert_allclose(prof, exact, atol=2e-4)
    assert np.all(prof >= exact - 1e-12)  # pessimistic
    assert accounting.epsilon(accounting.laplace_event(epsilon=1.0), delta=1e-9) <= 1.0 + 1e-3


def test_laplace_event_composition_is_pure_dp():
    # k Laplace mechanisms at ε each are kε-DP: δ(kε) = 0 (basic composition)
    ev = accounting.laplace_event(epsilon=0.5, count=3)
    assert accounting.delta(ev, epsilon=1.5 + 1e-3) == pytest.approx(0.0, abs=1e-12)
    assert accounting.delta(ev, epsilon=1.0) > 0.0


# --------------------------------------------------------------------------------------
# Opacus' PRV accountant as an independent oracle
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sigma", "q", "steps"),
    [(1.1, 256 / 60000, 14063), (1.0, 0.01, 1000), (0.8, 0.02, 2000)],
)
def test_agrees_with_opacus_prv(sigma, q, steps):
    opacus_prv = pytest.importorskip("opacus.accountants").PRVAccountant
    acc = opacus_prv()
    acc.history = [(sigma, q, steps)]
    ref = acc.get_epsilon(delta=1e-5, eps_error=0.01)
    ours = accounting.dpsgd_epsilon(
        noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5
    )
    assert ours == pytest.approx(ref, rel=0.01)


# --------------------------------------------------------------------------------------
# round trips and profile
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pld", "rdp"])
def test_epsilon_delta_round_trip(kind):
    ev = accounting.dpsgd_event(noise_multiplier=1.0, sampling_rate=0.01, steps=1000)
    eps = accounting.epsilon(ev, delta=1e-5, accountant=kind)
    back = accounting.delta(ev, epsilon=eps, accountant=kind)
    # PLD: ε is the smallest grid-consistent ε with δ(ε) ≤ δ, so δ(ε) ≤ δ and close to it;
    # RDP: ε and δ come from the same optimised conversion, so the round trip is near exact
    assert back <= 1e-5 * (1 + 1e-9)
    assert back == pytest.approx(1e-5, rel=0.05)


def test_privacy_profile_is_non_increasing_and_matches_delta():
    ev = accounting.dpsgd_event(noise_multiplier=1.0, sampling_rate=0.01, steps=1000)
    eps = np.array([3.0, 0.0, 1.0, 2.0])  # unsorted on purpose
    prof = accounting.privacy_profile(ev, eps)
    assert prof[1] > prof[2] > prof[3] > prof[0] > 0
    assert prof[2] == pytest.approx(accounting.delta(ev, epsilon=1.0), rel=1e-12)


def test_calibrate_noise_reaches_target():
    kw = {"sampling_rate": 0.02, "steps": 200, "delta": 1e-5}
    for kind in ["rdp", "pld"]:
        sigma = accounting.calibrate_noise(target_epsilon=1.5, accountant=kind, **kw)
        eps = accounting.dpsgd_epsilon(noise_multiplier=sigma, accountant=kind, **kw)
        assert eps <= 1.5
        # and not wastefully: 0.2 % less noise already exceeds the target
        assert accounting.dpsgd_epsilon(noise_multiplier=sigma * 0.998, accountant=kind, **kw) > 1.5


# --------------------------------------------------------------------------------------
# μ brackets
# --------------------------------------------------------------------------------------


def test_full_batch_mu_bracket_contains_exact_mu():
    low, high = accounting.dpsgd_mu_bracket(noise_multiplier=5.0, sampling_rate=1.0, steps=100)
    # exact μ = √T/σ = 2 (Dong, Roth, Su 2019, Cor. 3.3); the pessimistic PLD may put
    # low a hair above 2 by its discretisation (δ rounded up), never by more than 1e-6
    assert low <= 2.0 + 1e-6
    assert high >= 2.0
    assert high - low <= 0.01


def test_subsampled_gaussian_mu_bracket_is_narrow():
    # q = 0.01, σ = 1, T = 1000: width ≤ 1 % (time measured in benchmarks/gdp_bracket_speed.py)
    b = accounting.mu_bracket(
        accounting.dpsgd_event(noise_multiplier=1.0, sampling_rate=0.01, steps=1000)
    )
    assert (b.high - b.low) / b.high <= 0.01
    assert b.tail_delta <= 1e-10
    # the CLT μ = q√(T(e^{1/σ²} − 1)) (Bu, Dong, Long, Su 2020) is below the rigorous high
    clt = 0.01 * math.sqrt(1000 * math.expm1(1.0))
    assert clt < b.high
    # rigorous: on [0, ε_max] the PLD profile stays under δ_high
    eps = np.linspace(0.0, b.epsilon_max, 997)
    prof = accounting.privacy_profile(
        accounting.dpsgd_event(noise_multiplier=1.0, sampling_rate=0.01, steps=1000), eps
    )
    assert np.all(prof <= theory.gdp_delta(eps, b.high))


def test_laplace_mu_bracket_contains_closed_form():
    # Laplace with ε = 1 touches G_μ at its symmetric point: μ = 2Φ⁻¹(1 − e^{−1/2}/2) = 1.0301
    mu = 2 * stats.norm.ppf(1 - math.exp(-0.5) / 2)
    b = accounting.mu_bracket(accounting.laplace_event(epsilon=1.0))
    # the pessimistic PLD rounds δ up, which may lift low by a rounding above μ (≤ 1e-6)
    assert b.low <= mu + 1e-6
    assert mu <= b.high
    assert b.high - b.low <= 0.01


def test_bracket_of_exact_profiles():
    # exact profiles go through theory.gdp_bracket directly
    b = theory.gdp_bracket(lambda e: theory.laplace_profile(e, epsilon=1.0))
    mu = 2 * stats.norm.ppf(1 - math.exp(-0.5) / 2)
    assert b.low <= mu <= b.high
    assert b.tail_delta == 0.0  # the profile reaches 0 at ε = 1: the bracket holds for all ε
    for eps in [0.5, 1.0, 2.0]:
        b = theory.gdp_bracket(lambda e, eps=eps: theory.pure_dp_profile(e, epsilon=eps))
        assert b.low <= theory.mu_from_pure_dp(eps) + 1e-12 <= b.high + 1e-12
        assert b.margin <= 2e-3 * b.high
    b = theory.gdp_bracket(lambda e: theory.gdp_delta(e, 0.7))
    # 1e-12: the profile's own floating-point evaluation can put low a rounding above μ
    assert b.low - 1e-12 <= 0.7 <= b.high
    assert "MuBracket(low=" in repr(b)
    assert "grid" not in repr(b)


def test_refined_profile_theorem_2_1():
    eps = np.linspace(0.0, 3.0, 61)
    # a single pure-DP pair (1, 0) refines to f_{1,0}'s profile (randomized response)
    np.testing.assert_allclose(
        theory.refined_profile(eps, epsilons=[1.0], deltas=[0.0]),
        theory.pure_dp_profile(eps, epsilon=1.0),
        atol=1e-12,
    )
    # pairs sampled from δ_μ: refined profile lies between the true one and the naive step
    ei = np.linspace(0.0, 6.0, 13)
    di = theory.gdp_delta(ei, 1.5)
    refined = theory.refined_profile(eps, epsilons=ei, deltas=di)
    naive = np.array([di[ei <= e].min() for e in eps])
    assert np.all(refined <= naive + 1e-12)
    assert np.all(refined >= theory.gdp_delta(eps, 1.5) - 1e-12)
    assert np.mean(refined < naive - 1e-6) > 0.5  # strictly better between the given ε_i
    np.testing.assert_allclose(refined[:: 5 * 2], di[: len(refined[::10])], atol=1e-12)


# --------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"noise_multiplier": 0.0}, r"The 'noise_multiplier' parameter must be in \(0, inf\)"),
        ({"sampling_rate": 1.5}, r"The 'sampling_rate' parameter must be in \(0, 1\]"),
        ({"steps": 0}, r"The 'steps' parameter must be an integer in \[1, inf\)\. Got 0 instead\."),
        ({"delta": 1.0}, r"The 'delta' parameter must be in \(0, 1\)"),
        ({"accountant": "prv"}, r"The 'accountant' parameter must be one of \{'pld', 'rdp'\}"),
    ],
)
def test_bad_input(kwargs, match):
    args = {**MNIST, "delta": 1e-5, **kwargs}
    with pytest.raises(DpauditError, match=match):
        accounting.dpsgd_epsilon(**args)


def test_bad_record_type():
    with pytest.raises(DpauditError, match=r"Expected a DPSGDRecord or a dp_accounting\.DpEvent"):
        accounting.epsilon({"sigma": 1.0}, delta=1e-5)


@pytest.mark.parametrize(("sigma", "steps"), [(5.0, 100), (1.0, 1), (0.8, 30)])
def test_full_batch_mu_bracket_is_the_exact_gaussian_composition(sigma, steps):
    """q = 1: the bracket is measured on the closed-form profile of √T/σ-GDP (Dong, Roth,
    Su 2019, Cor. 3.3) and agrees with the measurement of dp-accounting's PLD profile."""
    from dpaudit.accounting import _profile_function
    from dpaudit.theory import gdp_bracket

    event = accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=1.0, steps=steps)
    b = accounting.mu_bracket(event)
    mu = math.sqrt(steps) / sigma
    assert b.low <= mu * (1 + 1e-9)
    assert b.high >= mu * (1 - 1e-9)
    assert b.low == pytest.approx(mu, rel=1e-9)  # μ_A is constant on the exact profile
    assert (b.high - b.low) / b.low <= 1e-3
    pld = dp_accounting.pld.PLDAccountant(
        value_discretization_interval=accounting.DEFAULT_VALUE_DISCRETIZATION_INTERVAL
    ).compose(event)
    reference = gdp_bracket(_profile_function(event), epsilon_max=float(pld.get_epsilon(1e-10)))
    assert b.low == pytest.approx(reference.low, rel=1e-3)
    assert b.high == pytest.approx(reference.high, rel=1e-3)
