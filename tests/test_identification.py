"""GDP identification (Liu, Sun, Jiang, Kong 2022) and the exact profiles it reads."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpaudit.errors import DpauditError
from dpaudit.mechanisms.noise import k_rr_probabilities, unary_encoding_probabilities
from dpaudit.theory import (
    discrete_profile,
    gdp_bracket_from_grid,
    gdp_delta,
    gdp_mu,
    k_rr_profile,
    laplace_profile,
    mu_from_pure_dp,
    pure_dp_profile,
)
from dpaudit.theory.identification import (
    identify_bracket,
    identify_grid,
    identify_mechanism,
    identify_profile,
    mechanism_profile,
)


# ------------------------------------------------------------------ exact profiles
def test_k_rr_profile_matches_the_hockey_stick_of_its_output_laws() -> None:
    k, eps = 5, 1.2
    p, q = k_rr_probabilities(k=k, epsilon=eps)
    on_d = np.array([p] + [q] * (k - 1))
    on_d1 = np.array([q, p] + [q] * (k - 2))
    grid = np.linspace(0.0, 2.0, 41)
    np.testing.assert_allclose(
        k_rr_profile(grid, k=k, epsilon=eps), discrete_profile(grid, p=on_d, q=on_d1), atol=1e-15
    )
    # k = 2 is binary randomized response: the pure ε-DP profile
    np.testing.assert_allclose(
        k_rr_profile(grid, k=2, epsilon=eps), pure_dp_profile(grid, epsilon=eps), atol=1e-15
    )
    assert k_rr_profile(eps, k=k, epsilon=eps) == 0.0


def test_discrete_profile_edge_cases_and_errors() -> None:
    assert discrete_profile(0.0, p=[0.5, 0.5], q=[0.5, 0.5]) == 0.0
    assert discrete_profile(3.0, p=[1.0, 0.0], q=[0.0, 1.0]) == 1.0  # disjoint supports
    with pytest.raises(DpauditError, match="probability vectors"):
        discrete_profile(0.0, p=[0.5, 0.6], q=[0.5, 0.5])


def test_grid_bracket_contains_the_callable_bracket_and_needs_zero() -> None:
    grid = np.linspace(0.0, 1.0, 201)
    b = gdp_bracket_from_grid(grid, laplace_profile(grid, epsilon=1.0))
    mu_star = gdp_mu(0.0, float(laplace_profile(0.0, epsilon=1.0)))
    assert b.low <= mu_star <= b.high
    assert b.tail_delta == 0.0
    with pytest.raises(DpauditError, match="start at 0"):
        gdp_bracket_from_grid(grid[1:], laplace_profile(grid[1:], epsilon=1.0))
    with pytest.raises(DpauditError, match="non-increasing"):
        gdp_bracket_from_grid([0.0, 1.0], [0.1, 0.2])


# ------------------------------------------------------------------ identification
@pytest.mark.parametrize(("sensitivity", "sigma"), [(1.0, 1.0), (1.0, 0.5), (2.0, 5.0)])
def test_gaussian_is_exactly_gdp_with_its_mu(sensitivity: float, sigma: float) -> None:
    r = identify_mechanism("gaussian", {"sensitivity": sensitivity, "sigma": sigma})
    mu = sensitivity / sigma
    assert r.exact
    assert r.mu == pytest.approx(mu, rel=1e-9)
    assert r.bracket.low <= mu * (1 + 1e-12)
    assert mu <= r.bracket.high
    assert r.spread < 1e-9
    assert not r.complete  # the Gaussian profile never reaches 0
    assert "exactly" in r.summary


def test_laplace_is_gdp_but_not_exactly_with_its_bracket() -> None:
    r = identify_mechanism("laplace", {"epsilon": 1.0})
    assert not r.exact
    assert r.complete  # δ(ε') = 0 for ε' ≥ ε: the bracket covers every ε (tail condition)
    # independent check: μ_A on a fine grid by the scalar root finder; for ε = 1 its
    # maximum is at ε' = 0, μ* = 2√2·erfinv(1 − e^{−1/2}) = 1.03006...
    grid = np.linspace(0.0, 1.0, 2001)
    mu_a = [gdp_mu(e, float(laplace_profile(e, epsilon=1.0))) for e in grid[:-1]]
    mu_star = max(mu_a)
    assert r.bracket.low <= mu_star <= r.bracket.high
    assert mu_star == pytest.approx(1.030063997624434, rel=1e-9)
    assert r.bracket.relative_margin < 1e-3
    # ε-DP ⇒ μ-GDP with μ = −2Φ⁻¹(1/(1 + e^ε)) (Liu et al. §5, unverified): Laplace is
    # strictly better
    assert r.mu < mu_from_pure_dp(1.0)
    assert "not exactly GDP" in r.summary


@pytest.mark.parametrize("p", [0.75, 0.6, 0.9])
def test_randomized_response_is_gdp_at_the_pure_dp_mu(p: float) -> None:
    r = identify_mechanism("randomized-response", {"p": p})
    mu = mu_from_pure_dp(math.log(p / (1 - p)))  # f_{ε,0} touches G_μ at its kink
    assert not r.exact
    assert r.complete
    # μ_A(0) attains μ* for RR: low equals it up to the last bit of two formulas
    assert r.bracket.low <= mu * (1 + 1e-12)
    assert mu <= r.bracket.high


def test_k_rr_and_unary_encoding_are_gdp_below_the_pure_dp_mu() -> None:
    kr = identify_mechanism("k-rr", {"k": 4, "epsilon": 1.0})
    p, q = unary_encoding_probabilities(epsilon=1.0, variant="optimised")
    ue = identify_mechanism("unary-encoding", {"p": p, "q": q})
    for r in (kr, ue):
        assert not r.exact
        assert 0.0 < r.bracket.low <= r.bracket.high < mu_from_pure_dp(1.0)


def test_vector_laplace_pairs_stay_below_the_one_coordinate_profile() -> None:
    # mechanism_profile("laplace") in d dimensions is the pair differing in ONE
    # coordinate; the spread pairs' profiles, estimated from 10⁶ simulated privacy losses
    # (δ(ε') = E_{D'}[(1 − e^{ε' − L})₊]), lie below it, the e₁ pair on it (4 s.e. slack).
    from dpaudit.mechanisms.noise import vector_laplace

    eps = np.array([0.0, 0.25, 0.5, 0.75])
    profile = mechanism_profile("local-laplace", {"sensitivity": 1.0, "scale": 1.0})
    worst = profile(eps)
    rng = np.random.default_rng(9)
    for diff in ([1.0, 0, 0, 0, 0], [0.5, 0.5, 0, 0, 0], [0.2] * 5):
        loss = vector_laplace(query=([0.0] * 5, diff), sensitivity=1.0, scale=1.0).run(
            1, rng=rng, size=1_000_000
        )
        terms = np.maximum(0.0, 1.0 - np.exp(eps[:, None] - loss[None, :]))
        est, se = terms.mean(axis=1), terms.std(axis=1) / 1000.0
        assert np.all(est <= worst + 4 * se + 1e-12), diff
        if diff[0] == 1.0:
            np.testing.assert_allclose(est, worst, atol=float(4 * se.max()))


def test_identify_from_a_grid_and_from_a_callable() -> None:
    grid = np.linspace(0.0, 12.0, 3001)
    r = identify_grid(grid, gdp_delta(grid, 1.5), exact_rtol=1e-9)
    assert r.exact
    assert r.mu == pytest.approx(1.5, rel=1e-9)
    assert r.bracket.high >= 1.5
    r2 = identify_profile(lambda e: laplace_profile(e, epsilon=0.5), source="laplace")
    assert not r2.exact
    assert r2.to_dict()["summary"].startswith("laplace: μ-GDP for μ ≥")


def test_a_rising_tail_is_flagged() -> None:
    # A profile whose μ_A grows towards the grid's end: the max of two GDP profiles,
    # μ = 1 near 0 and μ = 2 far out, scaled down so that it is still a profile.
    grid = np.linspace(0.0, 6.0, 601)
    deltas = np.maximum(gdp_delta(grid, 1.0), 1e-3 * gdp_delta(grid, 2.0))
    r = identify_grid(grid, deltas)
    assert r.tail_rising
    assert not r.exact


def test_an_accountant_bracket_identifies_full_batch_dp_gd_as_exactly_gdp() -> None:
    # DP-GD (q = 1) for T steps is exactly (√T/σ)-GDP (Dong, Roth, Su 2019, Cor. 3.3);
    # through the PLD profile its μ_A is constant to ~1e-8; Poisson sampling is not GDP
    # exactly, and its μ_A still rises at the grid's end (the subsampled Gaussian's tail).
    from dpaudit.accounting import dpsgd_event, mu_bracket

    full = identify_bracket(
        mu_bracket(dpsgd_event(noise_multiplier=2.0, sampling_rate=1.0, steps=4))
    )
    assert full.exact
    assert full.mu == pytest.approx(1.0, rel=1e-4)
    assert not full.tail_rising
    sub = identify_bracket(
        mu_bracket(dpsgd_event(noise_multiplier=1.0, sampling_rate=0.01, steps=1000))
    )
    assert not sub.exact
    assert sub.tail_rising


def test_unknown_mechanism_and_missing_parameters() -> None:
    with pytest.raises(DpauditError, match="'name' parameter must be one of"):
        mechanism_profile("exponential", {})
    with pytest.raises(DpauditError, match="'sigma' parameter is required"):
        mechanism_profile("gaussian", {"sensitivity": 1.0})
    with pytest.raises(DpauditError, match="exact_rtol"):
        identify_bracket(gdp_bracket_from_grid([0.0, 1.0], [0.1, 0.0]), exact_rtol=2.0)


def test_identification_imports_neither_torch_nor_dp_accounting() -> None:
    code = (
        "import sys, dpaudit.theory.identification; "
        "print('torch' in sys.modules, 'dp_accounting' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_mechanism_audits_carry_the_identification_in_results_and_report(tmp_path) -> None:
    # The mechanism kind identifies the mechanism that RAN from its exact profile: Laplace
    # with ε = 1 is not exactly GDP and lies in the bracket identify_mechanism gives
    # (μ* ∈ [1.03006, 1.03109]); a user callable has no known profile (None).
    import json

    from dpaudit.audit import run_audit

    audits = Path(__file__).resolve().parents[1] / "audits"
    run_audit(audits / "laplace.toml", output_dir=tmp_path / "lap")
    data = json.loads((tmp_path / "lap" / "results.json").read_text(encoding="utf-8"))
    found = data["tests"][0]["mechanism"]["identification"]
    direct = identify_mechanism("laplace", {"sensitivity": 1.0, "scale": 1.0})
    assert found["exact"] is False
    assert found["bracket"] == [direct.bracket.low, direct.bracket.high]
    assert found["bracket"][0] == pytest.approx(1.03006, abs=1e-5)
    html = (tmp_path / "lap" / "report.html").read_text(encoding="utf-8")
    assert "GDP identification from the mechanism&#39;s exact privacy profile" in html or (
        "GDP identification from the mechanism's exact privacy profile" in html
    )
    user = run_audit(audits / "user-mechanism.toml", write=False)
    assert user.to_dict()["tests"][0]["mechanism"]["identification"] is None
