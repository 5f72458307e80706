"""Bayesian ε and μ (Zanella-Béguelin et al. 2023): the maps, the posterior, the coverage
computation that docs/equations.md and benchmarks/RESULTS.md report."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.stats import norm

from dpaudit.bounds.bayesian import (
    BAYESIAN_VALIDITY,
    DEFAULT_PRIOR,
    bayesian_estimate,
    epsilon_from_rates,
    measure_coverage,
    mu_from_rates,
)
from dpaudit.errors import DpauditError


def test_rate_maps_closed_forms():
    # Gaussian trade-off: every threshold gives μ back
    t = np.array([-0.5, 0.3, 1.2, 2.0])
    np.testing.assert_allclose(mu_from_rates(norm.sf(t), norm.cdf(t - 1.5)), 1.5, rtol=1e-12)
    # the (ε, δ) region: FPR = FNR = 1/(1 + e) is exactly ε = 1 at δ = 0
    r = 1 / (1 + math.e)
    assert float(epsilon_from_rates(np.array(r), np.array(r), delta=0.0)) == pytest.approx(1.0)
    # floors and edges: no evidence gives 0, a zero rate gives inf, never NaN
    assert float(epsilon_from_rates(np.array(0.5), np.array(0.5), delta=0.0)) == 0.0
    assert math.isinf(float(epsilon_from_rates(np.array(0.0), np.array(0.3), delta=0.0)))
    assert float(mu_from_rates(np.array(0.7), np.array(0.7))) == 0.0


def test_posterior_is_the_stated_beta_and_labelled_not_rigorous():
    est = bayesian_estimate(30, 1000, 400, 1000, quantity="mu", seed=3)
    assert est.prior == DEFAULT_PRIOR == (1.0, 1.0)
    assert est.fpr_posterior == (31.0, 971.0)
    assert est.fnr_posterior == (401.0, 601.0)
    assert est.validity == BAYESIAN_VALIDITY == "bayesian (not rigorous)"
    assert est.interval[0] <= est.lower <= est.median <= est.interval[1]
    # the posterior of μ is a monotone map of the two rates: its median lies within the
    # map of the two Beta medians' neighbourhood (1 % of each posterior's quantiles)
    f_lo, f_hi = stats.beta.ppf([0.01, 0.99], 31, 971)
    n_lo, n_hi = stats.beta.ppf([0.01, 0.99], 401, 601)
    assert mu_from_rates(np.array(f_hi), np.array(n_hi)) < est.median
    assert est.median < mu_from_rates(np.array(f_lo), np.array(n_lo))
    # same counts and seed, same estimate; the dict says what the prior was
    assert bayesian_estimate(30, 1000, 400, 1000, quantity="mu", seed=3) == est
    d = est.to_dict()
    assert d["prior"] == {"distribution": "beta", "a": 1.0, "b": 1.0}
    assert d["validity"] == "bayesian (not rigorous)"
    jeffreys = bayesian_estimate(30, 1000, 400, 1000, quantity="mu", prior=(0.5, 0.5))
    assert jeffreys.fpr_posterior == (30.5, 970.5)


def test_bayesian_lower_is_above_the_rigorous_bound_at_the_same_counts():
    from dpaudit.bounds import mu_from_counts

    est = bayesian_estimate(160, 2000, 1000, 2000, quantity="mu", seed=0)
    rigorous = mu_from_counts(160, 2000, 1000, 2000).value
    assert rigorous < est.lower  # narrower, and not rigorous: that is the trade


def test_errors():
    with pytest.raises(DpauditError, match="'fp' count must lie in"):
        bayesian_estimate(11, 10, 0, 10)
    with pytest.raises(DpauditError, match="'quantity' parameter must be one of"):
        bayesian_estimate(1, 10, 1, 10, quantity="delta")  # type: ignore[arg-type]
    with pytest.raises(DpauditError, match=r"'prior' parameter must be \(a, b\)"):
        bayesian_estimate(1, 10, 1, 10, prior=(0.0, 1.0))
    with pytest.raises(DpauditError, match="'draws' parameter must be ≥ 100"):
        bayesian_estimate(1, 10, 1, 10, draws=10)


def test_coverage_counts_match_an_independent_recount():
    # recompute the same repeats one by one from the same random stream
    fpr, fnr, trials, repeats, draws = 0.2, 0.4, 300, 30, 500
    r = measure_coverage(fpr=fpr, fnr=fnr, trials=trials, repeats=repeats, draws=draws, seed=5)
    rng = np.random.default_rng(5)
    fp = rng.binomial(trials, fpr, size=repeats)
    fn = rng.binomial(trials, fnr, size=repeats)
    a = rng.beta((1 + fp)[:, None], (1 + trials - fp)[:, None], size=(repeats, draws))
    b = rng.beta((1 + fn)[:, None], (1 + trials - fn)[:, None], size=(repeats, draws))
    vals = -norm.ppf(a) - norm.ppf(b)
    vals = np.maximum(vals, 0.0)
    truth = -norm.ppf(fpr) - norm.ppf(fnr)
    inside = [np.quantile(v, 0.025) <= truth <= np.quantile(v, 0.975) for v in vals]
    assert r.covered == sum(inside)
    assert r.truth == pytest.approx(truth)
    assert r.coverage == r.covered / repeats
    ci = stats.binomtest(r.covered, repeats).proportion_ci(confidence_level=0.95)
    assert r.coverage_interval == (pytest.approx(ci.low), pytest.approx(ci.high))


def test_reported_coverage_figures():
    """Two cells of the table in docs/equations.md / benchmarks/RESULTS.md, recomputed
    (``benchmarks/bayesian_coverage.py``: seed 11, 4,000 draws, 400 repeats)."""
    mu1 = measure_coverage(
        fpr=float(norm.sf(1.0)),
        fnr=float(norm.cdf(0.0)),
        trials=2000,
        repeats=400,
        quantity="mu",
        delta=1e-5,
        draws=4000,
        seed=11,
    )
    assert (mu1.covered, mu1.repeats) == (381, 400)  # 0.953
    eps2 = measure_coverage(
        fpr=float(norm.sf(1.0)),
        fnr=float(norm.cdf(-1.0)),
        trials=500,
        repeats=400,
        quantity="epsilon",
        delta=1e-5,
        draws=4000,
        seed=11,
    )
    assert (eps2.covered, eps2.lower_held) == (367, 341)  # 0.917 and 0.853: below 0.95


def test_coverage_power_control_a_wrong_prior_is_caught():
    # a prior worth 20,000 trials at FPR = FNR = 0.5 drags every posterior to μ ≈ 0
    r = measure_coverage(
        fpr=float(norm.sf(1.0)),
        fnr=float(norm.cdf(-1.0)),
        trials=500,
        repeats=400,
        prior=(10_000.0, 10_000.0),
        draws=1000,
        seed=2,
    )
    assert r.coverage == 0.0
    assert r.coverage_interval[1] < 0.01


def test_mechanism_audit_reports_bayesian_estimates_outside_the_verdict(tmp_path):
    import tomllib

    from dpaudit.audit import run_audit
    from dpaudit.config import parse_config

    cfg = {
        "audit": {"name": "t", "kinds": ["mechanism"]},
        "mechanism": tomllib.loads('name = "laplace"\nepsilon = 1.0\ntrials = 4000'),
    }
    result = run_audit(parse_config(cfg), output_dir=tmp_path, write=False)
    out = result.to_dict()
    test = out["tests"][0]
    for name in ("epsilon", "mu"):
        est = test["bayesian"][name]
        assert est["validity"] == "bayesian (not rigorous)"
        assert est["prior"] == {"distribution": "beta", "a": 1.0, "b": 1.0}
    # the rigorous bounds used the same counts; no bound or check names the estimate
    assert "bayesian" not in str(out["bounds"]) + str(out["checks"])
    assert all(b["lower"]["validity"] != "bayesian (not rigorous)" for b in out["bounds"])
