"""The Gaussian-pair reading of a one-run audit (dpaudit.bounds.one_run_gauss): its fit against
scipy, its exactness under the model, its validity over repeated one-run audits, the
controls that must fail, why it is not rigorous, and its place outside the verdict.

Validity: R repeated one-run audits of a mechanism that IS μ₀-GDP (m canaries, fair coins,
one N(μ₀·coin, 1) score each: no interference, Gaussian, one variance, so the model holds).
A bound above μ₀ is a false violation; a valid rule commits one with probability ≤ 1 − c
per audit, so over R audits the count is below Bin(R, 1 − c) and the ceiling is that law's
99.9 % quantile. Under the model the bound is exact, so the count IS Bin(R, 1 − c) and it
must also stay above the 0.1 % quantile (a conservative bound fails that).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from dpaudit.bounds.one_run_gauss import (
    VALIDITY,
    gaussian_pair_fit,
    one_run_gaussian_mu_lower_bound,
    separation_lower_limit,
)
from dpaudit.dpsgd.kind import KIND
from dpaudit.dpsgd.one_run import ONE_RUN_UNIT
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.errors import DpauditError
from dpaudit.kinds.base import RunContext, check_spending
from dpaudit.records import DPSGDRecord
from dpaudit.results.gate import evaluate_gate
from dpaudit.sections import GateSection
from dpaudit.theory.whitebox import mixture_log_likelihood_ratio

M, MU0, R = 200, 1.0, 400


def _ceiling(repeats: int, c: float) -> int:
    return int(sps.binom.ppf(0.999, repeats, 1 - c))


def _floor(repeats: int, c: float) -> int:
    return int(sps.binom.ppf(0.001, repeats, 1 - c))


def _gaussian_audits(seed: int, mu: float, repeats: int = R, m: int = M):
    """``repeats`` one-run audits of μ-GDP: (coins, scores), each (repeats, m)."""
    rng = np.random.default_rng(seed)
    coins = rng.random((repeats, m)) < 0.5
    return coins, rng.normal(mu * coins, 1.0)


def _bounds(coins: np.ndarray, scores: np.ndarray, c: float) -> np.ndarray:
    return np.array(
        [
            one_run_gaussian_mu_lower_bound(s, k, confidence_level=c).value
            for s, k in zip(scores, coins, strict=True)
        ]
    )


# ---------------------------------------------------------------------------- the fit


def test_fit_matches_scipy_two_sample_t() -> None:
    coins, scores = _gaussian_audits(1, 0.7, repeats=1, m=301)
    fit = gaussian_pair_fit(scores[0], coins[0])
    y1, y0 = scores[0][coins[0]], scores[0][~coins[0]]
    ref = sps.ttest_ind(y1, y0, equal_var=True)
    assert fit.t == pytest.approx(float(ref.statistic), rel=1e-12)
    assert fit.df == 299 == int(ref.df)
    assert (fit.included, fit.excluded) == (y1.size, y0.size)
    pooled = math.sqrt(((y1.size - 1) * y1.var(ddof=1) + (y0.size - 1) * y0.var(ddof=1)) / 299)
    assert fit.pooled_sd == pytest.approx(pooled, rel=1e-12)
    assert fit.separation == pytest.approx((y1.mean() - y0.mean()) / pooled, rel=1e-12)
    assert fit.variance_ratio == pytest.approx(y1.var(ddof=1) / y0.var(ddof=1), rel=1e-12)


@pytest.mark.parametrize("c", [0.5, 0.9, 0.99])
def test_lower_limit_inverts_the_noncentral_t(c) -> None:
    coins, scores = _gaussian_audits(2, 1.0, repeats=1, m=500)
    fit = gaussian_pair_fit(scores[0], coins[0])
    value = separation_lower_limit(fit, confidence_level=c)
    assert value > 0
    nc = value / fit.scale
    # P_κ(T ≥ t_obs) = 1 − c at the limit (sf), and t_obs is the c-quantile there (ppf)
    assert sps.nct.sf(fit.t, fit.df, nc) == pytest.approx(1 - c, rel=1e-7)
    assert sps.nct.ppf(c, fit.df, nc) == pytest.approx(fit.t, rel=1e-7)
    # returned below the root, never above it
    assert sps.nct.sf(fit.t, fit.df, nc) <= 1 - c


def test_large_sample_closed_form() -> None:
    # For large df the noncentral t is N(nc, 1 + nc²/(2df)) up to terms of relative order
    # 1/df (its mean is nc·(1 + 3/(4df) + ...), Johnson, Kotz, Balakrishnan, Ch. 31), so
    # κ_LB ≈ κ̂ − z_c·√(k² + κ̂²/(2df)). At m = 20,000 (df ≈ 2·10⁴, k ≈ 0.014, κ ≈ 1) the
    # neglected terms are O(κ/df + z_c²·k·κ²/df) < 1e-4; 1e-3 leaves room for the skew.
    coins, scores = _gaussian_audits(3, 1.0, repeats=1, m=20_000)
    fit = gaussian_pair_fit(scores[0], coins[0])
    z = sps.norm.ppf(0.95)
    approx = fit.separation - z * math.sqrt(fit.scale**2 + fit.separation**2 / (2 * fit.df))
    assert separation_lower_limit(fit, confidence_level=0.95) == pytest.approx(approx, abs=1e-3)


def test_floor_at_zero_and_monotone_in_the_level() -> None:
    coins, scores = _gaussian_audits(4, 0.0, repeats=1, m=400)
    s, k = scores[0], coins[0]
    s = s - (s[k].mean() - s[~k].mean()) * k  # group means equal: t = 0
    assert gaussian_pair_fit(s, k).t == pytest.approx(0.0, abs=1e-9)
    assert one_run_gaussian_mu_lower_bound(s, k, confidence_level=0.5).value == 0.0
    coins, scores = _gaussian_audits(5, 1.0, repeats=1, m=400)
    values = [
        one_run_gaussian_mu_lower_bound(scores[0], coins[0], confidence_level=c).value
        for c in (0.5, 0.9, 0.99, 0.999)
    ]
    assert values == sorted(values, reverse=True)
    # c = 0.5: the median-unbiased limit, below the point estimate (which is biased up)
    assert values[0] < gaussian_pair_fit(scores[0], coins[0]).separation


def test_null_distribution_is_scipys_noncentral_t() -> None:
    # Under the model, given the group sizes, t ~ noncentral t(n₁ + n₀ − 2, κ/k). Fix the
    # coins (so df and k are fixed) and redraw the scores 2,000 times: the t's must pass a
    # Kolmogorov–Smirnov test against scipy's law (fixed seed; p ≥ 0.001).
    rng = np.random.default_rng(6)
    coins = np.arange(40) % 2 == 0
    kappa = 0.8
    ts = [gaussian_pair_fit(rng.normal(kappa * coins, 1.0), coins).t for _ in range(2000)]
    k = math.sqrt(1 / 20 + 1 / 20)
    assert sps.kstest(ts, sps.nct(38, kappa / k).cdf).pvalue >= 1e-3
    # and the central t is rejected (the check can fail)
    assert sps.kstest(ts, sps.t(38).cdf).pvalue < 1e-6


# ----------------------------------------------------------------------- validity


@pytest.mark.parametrize("c", [0.5, 0.9])
def test_validity_and_exactness_on_a_gaussian_mechanism(c) -> None:
    coins, scores = _gaussian_audits(2026, MU0)
    hits = int((_bounds(coins, scores, c) > MU0).sum())
    assert hits <= _ceiling(R, c)
    assert hits >= _floor(R, c)  # exact under the model: not conservative either


def test_control_the_point_estimate_fails_the_validity_check() -> None:
    # Control: reporting κ̂ itself (no confidence limit) as the "bound" must fail the check
    # the limit passes at c = 0.9: κ̂ is above μ₀ in about half of the audits.
    coins, scores = _gaussian_audits(2026, MU0)
    hits = sum(gaussian_pair_fit(s, k).separation > MU0 for s, k in zip(scores, coins, strict=True))
    assert hits > _ceiling(R, 0.9)


def test_power_against_a_false_claim() -> None:
    # 1.5-GDP scores against the claim 1-GDP at c = 0.95: rejected in nearly every audit
    # (κ̂'s standard error at m = 200 is ≈ √(4/200 + 1.5²/400) ≈ 0.16, so the limit sits
    # near 1.5 − 0.27 > 1).
    coins, scores = _gaussian_audits(7, 1.5)
    hits = int((_bounds(coins, scores, 0.95) > MU0).sum())
    assert hits > _ceiling(R, 0.95)
    assert hits >= 0.9 * R


def _clipped_pair_separation(mu: float, b: float) -> float:
    """κ of the pair clip(N(0,1) − μ/2, ±b) vs clip(N(μ,1) − μ/2, ±b), by quadrature."""

    def moment(power: int, shift: float) -> float:
        def f(y: float) -> float:
            return float(np.clip(y - mu / 2, -b, b)) ** power * sps.norm.pdf(y - shift)

        return integrate.quad(f, -15.0, 15.0 + mu, points=[mu / 2 - b, mu / 2 + b])[0]

    m0, m1 = moment(1, 0.0), moment(1, mu)
    v0, v1 = moment(2, 0.0) - m0**2, moment(2, mu) - m1**2
    return (m1 - m0) / math.sqrt((v0 + v1) / 2)


def test_not_rigorous_a_gdp_procedure_with_clipped_scores_breaks_it() -> None:
    # Why the bound is labelled asymptotic and never decides: clipping the score of an
    # exactly 3-GDP Gaussian output (a post-processing, so still 3-GDP) to ±0.75 around
    # the midpoint gives a pair whose standardised separation is 4.006 > 3 (quadrature),
    # and the Gaussian-pair "bound" then exceeds the true μ in nearly every audit.
    mu, b = 3.0, 0.75
    kappa = _clipped_pair_separation(mu, b)
    assert kappa == pytest.approx(4.006, abs=2e-3)
    coins, scores = _gaussian_audits(8, mu, repeats=200, m=1000)
    clipped = np.clip(scores - mu / 2, -b, b)
    hits = int((_bounds(coins, clipped, 0.95) > mu).sum())
    assert hits > _ceiling(200, 0.95)
    # the identity score of the same runs is fine (the model holds there)
    assert int((_bounds(coins, scores, 0.95) > mu).sum()) <= _ceiling(200, 0.95)


def test_small_m_poisson_scores_stay_below_the_accountant() -> None:
    # The model is only approximate for Poisson DP-SGD's white-box scores (T = 8 steps of
    # a mixture, summed): 400 one-run audits with m = 50 canaries scored by the exact law
    # (per step x ~ N(b_t, σ²), b_t ~ Bernoulli(q) for an included canary), against the
    # high end of the accountant's μ bracket (q 0.25, T 8, σ 1: 1.4287,
    # dpaudit.accounting.dpsgd_mu_bracket). Coverage of the pair's own κ at small m is
    # measured in benchmarks/one_run_gauss.py.
    q, steps, sigma, m, c = 0.25, 8, 1.0, 50, 0.9
    rng = np.random.default_rng(9)
    coins = rng.random((R, m)) < 0.5
    sampled = (rng.random((R, m, steps)) < q) & coins[..., None]
    x = rng.normal(sampled * 1.0, sigma)
    llr = mixture_log_likelihood_ratio(
        x, sampling_rate=q, noise_multiplier=sigma, clipping_norm=1.0
    ).sum(axis=2)
    values = _bounds(coins, llr, c)
    assert int((values > 1.4287).sum()) <= _ceiling(R, c)
    assert np.median(values) > 0.3  # it does read the leak (power)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("scores", "coins", "match"),
    [
        ([0.1, 0.2, 0.3], [True, False], "one entry per canary; got 3 scores and 2 coins"),
        ([0.1, np.nan, 0.3, 0.4], [True, False, True, False], "finite numbers"),
        ([0.1, 0.2, 0.3, 0.4], [True, False, False, False], "got 1 included and 3 excluded"),
        ([1.0, 1.0, 0.0, 0.0], [True, True, False, False], "vary within the included"),
    ],
)
def test_bad_inputs(scores, coins, match) -> None:
    with pytest.raises(DpauditError, match=match):
        one_run_gaussian_mu_lower_bound(scores, coins)


def test_bad_confidence_level() -> None:
    with pytest.raises(DpauditError, match="confidence_level"):
        one_run_gaussian_mu_lower_bound([0.0, 1.0, 0.5, 0.2], [1, 1, 0, 0], confidence_level=1.0)


def test_result_object() -> None:
    coins, scores = _gaussian_audits(10, 1.0, repeats=1, m=1000)
    b = one_run_gaussian_mu_lower_bound(scores[0], coins[0], confidence_level=0.95)
    assert b.validity == VALIDITY == "asymptotic-one-run"
    assert b.method == "one-run-gaussian-pair"
    assert b.counts == {"included": int(coins[0].sum()), "excluded": int((~coins[0]).sum())}
    assert 0 < b.value < b.details["point_estimate"]
    assert "independent" in b.details["assumption"]
    assert "arXiv:2606.12733v1" in b.details["reference"]
    d = b.to_dict()
    assert d["validity"] == "asymptotic-one-run"
    assert d["value"] == b.value


# ------------------------------------------------------------ outside the verdict


def _stored(scores: np.ndarray, coins: np.ndarray, sigma: float, steps: int) -> dict:
    record = DPSGDRecord(
        noise_multiplier=sigma,
        sampling_rate=1.0,
        steps=steps,
        clipping_norm=1.0,
        sampling="full-batch",
    )
    return {"one_run_scores": scores, "one_run_included": coins, **DPSGDRecord.to_arrays([record])}


def _section(m: int) -> DpsgdSection:
    return DpsgdSection.model_validate(
        {
            "trainer": "dpsgd",
            "canary": "dirac",
            "threat_model": "white-box",
            "rows": 100,
            "trials": 0,
            "training": {
                "epochs": 2,
                "batch_size": 25,
                "learning_rate": 0.5,
                "dp": {"noise_multiplier": 1.0},
            },
            "one_run": {"canaries": m, "guesses": 100},
        }
    )


CONTEXT = RunContext(seed=0, confidence_level=0.95, delta=1e-5, base_dir=Path("."))


def test_reported_never_in_the_verdict_and_no_check_reads_it() -> None:
    # Full-batch DP-GD with σ = 2/3, T = 4: exactly 3-GDP (√T/σ). Its canaries' scores,
    # clipped as in the test above, make the Gaussian-pair bound exceed the accountant's
    # μ = 3 while the rigorous one-run bounds stay below: the gate must still pass, and no
    # share of the budget may go to the Gaussian-pair bound.
    m, mu, b = 1000, 3.0, 0.75
    coins, scores = _gaussian_audits(11, mu, repeats=1, m=m)
    clipped = np.clip(scores[0] - mu / 2, -b, b)
    outputs = {ONE_RUN_UNIT: _stored(clipped, coins[0], 2.0 / 3.0, 4)}
    section = _section(m)
    announced = KIND.comparisons(section, CONTEXT, outputs)
    assert announced == 1  # the one-run share, as before
    level = 1 - (1 - CONTEXT.confidence_level) / announced
    summary = KIND.summarise(section, CONTEXT, outputs, level=level)
    check_spending("dpsgd", announced, summary, level)  # raises if it took a share
    gauss = [c for c in summary.comparisons if c.lower.validity == VALIDITY]
    assert len(gauss) == 1
    (g,) = gauss
    assert g.parameter == "mu"
    assert g.upper == pytest.approx(mu)
    assert g.lower.value > g.upper  # above the claim ...
    assert not g.in_verdict  # ... and still no violation
    assert not g.violation
    assert g.lower.confidence_level == pytest.approx(level)
    assert g.limit_of_detection is None
    assert g.to_dict()["validity_meaning"].startswith("holds at the stated confidence only if")
    rigorous = [c for c in summary.comparisons if c.lower.validity == "rigorous-one-run"]
    assert rigorous
    assert all(c.lower.value < c.upper for c in rigorous)
    checks = evaluate_gate(
        GateSection(max_epsilon_lower_bound=0.0),
        comparisons=summary.comparisons,
        tests=summary.tests,
    )
    by_name = {c.name: c for c in checks}
    assert by_name["fail_on_violation"].passed
    # the ε policy reads only rigorous ε bounds; the Gaussian-pair μ is not among them
    assert "ε lower bound" in by_name["max_epsilon_lower_bound"].message
    # and with only the Gaussian-pair bound, the violation policy has nothing to compare:
    # left at its default it is not applicable, set by the file it is not evaluated
    alone = evaluate_gate(GateSection(on_unmeasured="warn"), comparisons=(g,), tests=())
    assert alone[0].status == "not-applicable"
    asked = GateSection(on_unmeasured="warn", fail_on_violation=True)
    assert evaluate_gate(asked, comparisons=(g,), tests=())[0].status == "not-evaluated"
