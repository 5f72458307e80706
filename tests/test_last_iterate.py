"""The last-iterate reference: closed forms at q = 1, an independent integration for q < 1,
dp-accounting at T = 1 (where the last iterate is the whole transcript), error messages."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import integrate, stats

from dpaudit.errors import DpauditError
from dpaudit.planning.last_iterate import (
    last_iterate_delta,
    last_iterate_details,
    last_iterate_epsilon,
    last_iterate_log_ratio,
    last_iterate_reference,
    last_iterate_sample,
)
from dpaudit.theory import gdp_delta, gdp_epsilon


@pytest.mark.parametrize(("steps", "sigma"), [(1, 0.5), (4, 1.0), (8, 2.0), (25, 3.0)])
def test_full_batch_is_exactly_gdp(steps: int, sigma: float) -> None:
    # q = 1: N(T, Tσ²) against N(0, Tσ²), μ = √T/σ exactly (Dong, Roth, Su 2019, GDP).
    mu = math.sqrt(steps) / sigma
    kw = {"sampling_rate": 1.0, "steps": steps, "noise_multiplier": sigma}
    for eps in (0.0, 0.5, 2.0, 5.0):
        assert last_iterate_delta(eps, **kw) == pytest.approx(float(gdp_delta(eps, mu)), abs=1e-12)
    ref = last_iterate_reference(delta=1e-5, **kw)
    assert ref.epsilon == pytest.approx(gdp_epsilon(mu, 1e-5), rel=1e-8)
    assert ref.mu == pytest.approx(mu, rel=1e-8)
    assert ref.validity == "heuristic-last-iterate"


def _integrated_delta(eps: float, q: float, t: int, sigma: float) -> float:
    """max of the two hockey-stick divergences by numerical integration of the densities."""
    s = math.sqrt(t) * sigma
    k = np.arange(t + 1)
    b = stats.binom.pmf(k, t, q)

    def p(x: float) -> float:
        return float(np.sum(b * stats.norm.pdf(x, loc=k, scale=s)))

    def q0(x: float) -> float:
        return float(stats.norm.pdf(x, scale=s))

    lo, hi = -12 * s, t + 12 * s
    points = list(np.linspace(lo, hi, 21))
    add = integrate.quad(
        lambda x: max(p(x) - math.exp(eps) * q0(x), 0.0),
        lo,
        hi,
        points=points,
        limit=400,
        epsabs=1e-13,
    )[0]
    remove = integrate.quad(
        lambda x: max(q0(x) - math.exp(eps) * p(x), 0.0),
        lo,
        hi,
        points=points,
        limit=400,
        epsabs=1e-13,
    )[0]
    return max(add, remove)


@pytest.mark.parametrize(("q", "t", "sigma"), [(0.25, 8, 1.0), (0.1, 5, 0.7)])
def test_delta_matches_numerical_integration(q: float, t: int, sigma: float) -> None:
    kw = {"sampling_rate": q, "steps": t, "noise_multiplier": sigma}
    for eps in (0.0, 1.0, 2.5):
        assert last_iterate_delta(eps, **kw) == pytest.approx(
            _integrated_delta(eps, q, t, sigma), abs=1e-9
        )


@pytest.mark.parametrize(("q", "sigma"), [(0.25, 1.0), (0.05, 0.8)])
def test_one_step_equals_dp_accounting(q: float, sigma: float) -> None:
    # T = 1: the last iterate is the whole transcript, a Poisson-subsampled Gaussian step,
    # which dp-accounting's PLD accounts tightly (pessimistic discretisation 1e-3, which
    # overstates ε by at most about that interval).
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)))
    for delta in (1e-3, 1e-5):
        ours = last_iterate_epsilon(delta, sampling_rate=q, steps=1, noise_multiplier=sigma)
        assert ours <= acc.get_epsilon(delta) + 1e-9
        assert ours == pytest.approx(acc.get_epsilon(delta), abs=3e-3)


def test_below_the_accountant_and_round_trip() -> None:
    # The final model shows less than every update: q 0.25, T 8, σ 1 (PLD ε 5.458 at 1e-5).
    kw = {"sampling_rate": 0.25, "steps": 8, "noise_multiplier": 1.0}
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.25, dp_accounting.GaussianDpEvent(1.0)), 8
        )
    )
    eps = last_iterate_epsilon(1e-5, **kw)
    assert 0 < eps < acc.get_epsilon(1e-5)
    assert last_iterate_delta(eps, **kw) == pytest.approx(1e-5, rel=1e-6)
    # more noise, less privacy loss; larger q, more
    assert last_iterate_epsilon(1e-5, **{**kw, "noise_multiplier": 2.0}) < eps
    assert last_iterate_epsilon(1e-5, **{**kw, "sampling_rate": 0.5}) > eps


def test_log_ratio_is_increasing_and_matches_the_densities() -> None:
    kw = {"sampling_rate": 0.3, "steps": 6, "noise_multiplier": 1.2}
    x = np.linspace(-20, 30, 501)
    llr = last_iterate_log_ratio(x, **kw)
    assert np.all(np.diff(llr) > 0)
    s = math.sqrt(6) * 1.2
    k = np.arange(7)
    p = (stats.binom.pmf(k, 6, 0.3) * stats.norm.pdf(x[:, None], loc=k, scale=s)).sum(axis=1)
    np.testing.assert_allclose(
        llr[100:400], np.log(p / stats.norm.pdf(x, scale=s))[100:400], rtol=1e-10, atol=1e-12
    )


def test_sample_follows_the_pair() -> None:
    rng = np.random.default_rng(3)
    kw = {"sampling_rate": 0.25, "steps": 8, "noise_multiplier": 1.0}
    pos = last_iterate_sample(**kw, included=True, size=20_000, rng=rng)
    s = math.sqrt(8)
    k = np.arange(9)
    b = stats.binom.pmf(k, 8, 0.25)

    def cdf(x: np.ndarray) -> np.ndarray:
        return (b * stats.norm.cdf((np.asarray(x)[..., None] - k) / s)).sum(axis=-1)

    # a correct sampler fails at this level with probability 1e-3
    assert stats.kstest(pos, cdf).pvalue > 1e-3
    neg = last_iterate_sample(**kw, included=False, size=20_000, rng=rng)
    assert stats.kstest(neg, stats.norm(0, s).cdf).pvalue > 1e-3
    assert stats.kstest(neg, cdf).pvalue < 1e-6  # power: the arms differ


def test_details_ratios() -> None:
    d = last_iterate_details(
        sampling_rate=1.0,
        steps=4,
        noise_multiplier=2.0,
        delta=1e-5,
        mu_lower=0.5,
        epsilon_lower=1.0,
        trials=500,
        confidence_level=0.95,
        seed=1,
    )
    assert d["mu"] == pytest.approx(1.0, rel=1e-8)
    assert d["mu_ratio"] == pytest.approx(0.5, rel=1e-8)
    assert 0 < d["ideal_mu"] < 1.0  # finite trials certify less than μ
    assert d["ideal_mu_ratio"] == pytest.approx(0.5 / d["ideal_mu"])
    assert d["epsilon_ratio"] == pytest.approx(1.0 / d["epsilon"])


def test_errors_teach() -> None:
    kw = {"sampling_rate": 0.25, "steps": 8}
    with pytest.raises(DpauditError, match="'noise_multiplier' parameter must be a positive"):
        last_iterate_reference(noise_multiplier=0.0, delta=1e-5, **kw)
    with pytest.raises(DpauditError, match="'sampling_rate' parameter must be in"):
        last_iterate_delta(1.0, sampling_rate=0.0, steps=8, noise_multiplier=1.0)
    with pytest.raises(DpauditError, match="'steps'"):
        last_iterate_delta(1.0, sampling_rate=0.5, steps=0, noise_multiplier=1.0)
    with pytest.raises(DpauditError, match="'epsilon' parameter must be a finite number"):
        last_iterate_delta(-1.0, sampling_rate=0.5, steps=2, noise_multiplier=1.0)
    with pytest.raises(DpauditError, match="'delta' parameter must be in"):
        last_iterate_epsilon(0.0, sampling_rate=0.5, steps=2, noise_multiplier=1.0)
