"""Composition theorems side by side (dpaudit.accounting.composition) and
`dpaudit account --compare`.

Closed forms for the (ε, δ) theorems and GDP, dp-accounting's own calls for RDP and PLD,
and only those orderings that are theorems (the measured ones are in the results file).
"""

from __future__ import annotations

import json
import math

import dp_accounting
import pytest
from dp_accounting import pld, rdp
from typer.testing import CliRunner

from dpaudit import accounting
from dpaudit.accounting.composition import (
    advanced_composition,
    clt_mu,
    compare,
    format_markdown,
    gdp_compose,
    naive_composition,
    optimal_composition_delta,
    optimal_composition_epsilon,
    per_step_epsilon,
)
from dpaudit.cli import app
from dpaudit.errors import DpauditError
from dpaudit.theory import gdp_epsilon

DELTA = 1e-5
# (σ, q, T): the shipped audits' Poisson setting (dpsgd-dpsgd) and a full-batch one
POISSON = (0.8, 0.25, 8)
FULL = (math.sqrt(10.0), 1.0, 10)  # μ = √T/σ = 1 exactly (dpsgd-dpgd)
COMPARE = ["--compare"]
JSON = ["--compare", "--json", "--delta", "1e-6"]


@pytest.fixture(scope="module")
def poisson_table():
    s, q, t = POISSON
    return compare(noise_multiplier=s, sampling_rate=q, steps=t, delta=DELTA)


@pytest.fixture(scope="module")
def full_table():
    s, q, t = FULL
    return compare(noise_multiplier=s, sampling_rate=q, steps=t, delta=DELTA)


# ------------------------------------------------------------------ closed forms


def test_naive_composition_is_t_times_the_step():
    assert naive_composition(0.25, 1e-7, 12) == (3.0, 12 * 1e-7)


def test_advanced_composition_formula():
    eps0, t, d_prime = 0.1, 100, 1e-5
    # √(2·100·ln 10⁵)·0.1 + 100·0.1·(e^0.1 − 1) (Dwork, Roth 2014, Thm. 3.20)
    expected = math.sqrt(200.0 * math.log(1e5)) * 0.1 + 10.0 * (math.exp(0.1) - 1.0)
    eps, delta = advanced_composition(eps0, 1e-8, t, delta_prime=d_prime)
    assert eps == pytest.approx(expected, rel=1e-14)
    assert eps == pytest.approx(5.850235, abs=1e-6)
    assert delta == pytest.approx(100 * 1e-8 + 1e-5, rel=1e-14)


def test_optimal_composition_matches_kairouz_oh_viswanath_delta_i():
    # Thm. 3.3: at ε = (T − 2i)ε₀, δ_i = Σ_{l<i} C(T,l)(e^{(T−l)ε₀} − e^{(T−2i+l)ε₀})/(1+e^{ε₀})^T
    eps0, t = 0.3, 10
    for i in range(1, t // 2 + 1):
        delta_i = (
            sum(
                math.comb(t, ell)
                * (math.exp((t - ell) * eps0) - math.exp((t - 2 * i + ell) * eps0))
                for ell in range(i)
            )
            / (1.0 + math.exp(eps0)) ** t
        )
        got = optimal_composition_delta(eps0, t, (t - 2 * i) * eps0)
        assert got == pytest.approx(delta_i, rel=1e-11)


def test_optimal_composition_single_step_is_randomised_response():
    # one ε₀-DP step: δ(ε) = (e^{ε₀} − e^{ε})/(1 + e^{ε₀}) for ε < ε₀, 0 beyond
    eps0 = 1.0
    for eps in (0.0, 0.4, 0.9):
        want = (math.exp(eps0) - math.exp(eps)) / (1.0 + math.exp(eps0))
        assert optimal_composition_delta(eps0, 1, eps) == pytest.approx(want, rel=1e-13)
    assert optimal_composition_delta(eps0, 1, 1.0) == 0.0
    # solving for ε at that δ gives the ε back (the bisection's tolerance)
    target = (math.exp(eps0) - math.exp(0.4)) / (1.0 + math.exp(eps0))
    assert optimal_composition_epsilon(eps0, 0.0, 1, target) == pytest.approx(0.4, abs=1e-9)


def test_gdp_composition_of_equal_mus_is_root_t_times_mu():
    assert gdp_compose([0.3] * 16) == pytest.approx(1.2, rel=1e-15)
    assert gdp_compose([3.0, 4.0]) == 5.0


def test_full_batch_gdp_is_exactly_root_t_over_sigma(full_table):
    exact = full_table.row("gdp-exact")
    assert exact.mu == pytest.approx(1.0, rel=1e-15)
    assert exact.epsilon == gdp_epsilon(exact.mu, DELTA)
    assert exact.validity == "exact"
    liu = full_table.row("liu-composition")
    # each step identified exactly (1/√10)-GDP from its profile: √(10 · (1/√10)²) = 1
    assert liu.mu == pytest.approx(1.0, rel=1e-12)
    assert liu.validity == "exact"


def test_clt_mu_closed_form(poisson_table):
    s, q, t = POISSON
    mu = 0.25 * math.sqrt(8 * (math.exp(1.0 / 0.64) - 1.0))
    assert clt_mu(s, q, t) == pytest.approx(mu, rel=1e-14)
    row = poisson_table.row("gdp-clt")
    assert row.mu == pytest.approx(mu, rel=1e-14)
    assert row.validity == "approximation"  # the CLT is not a bound
    # Poisson: the per-step μ* ≤ 1/σ, so Liu et al.'s composition is the full-batch μ
    assert poisson_table.row("liu-composition").mu == pytest.approx(math.sqrt(8) / 0.8, rel=1e-14)


# ------------------------------------------------------------------ dp-accounting's own calls


def _event(sigma, q, t):
    step = dp_accounting.GaussianDpEvent(sigma)
    if q < 1.0:
        step = dp_accounting.PoissonSampledDpEvent(q, step)
    return dp_accounting.SelfComposedDpEvent(step, t)


@pytest.mark.parametrize("setting", [POISSON, FULL])
def test_rdp_and_pld_rows_equal_dp_accounting(setting, poisson_table, full_table):
    table = poisson_table if setting is POISSON else full_table
    acc_rdp = rdp.RdpAccountant(orders=accounting._RDP_ORDERS)
    acc_rdp.compose(_event(*setting))
    assert table.row("rdp").epsilon == acc_rdp.get_epsilon(DELTA)
    # dp-accounting's own PLD accountant at the loss step dpaudit sizes for the run: both
    # runs' losses span more than FLAT_PLD_POINTS default steps (20 nats), so the step
    # keeps WIDE_PLD_POINTS points instead (memory flat in σ)
    step = accounting.pld_discretization(_event(*setting))
    assert step > accounting.DEFAULT_VALUE_DISCRETIZATION_INTERVAL
    acc_pld = pld.PLDAccountant(value_discretization_interval=step)
    acc_pld.compose(_event(*setting))
    assert table.row("pld").epsilon == acc_pld.get_epsilon(DELTA)
    # and within the excess that step can add over the default one (measured: 9e-9)
    acc_fine = pld.PLDAccountant(
        value_discretization_interval=accounting.DEFAULT_VALUE_DISCRETIZATION_INTERVAL
    )
    acc_fine.compose(_event(*setting))
    fine = acc_fine.get_epsilon(DELTA)
    assert fine <= table.row("pld").epsilon <= fine * (1 + 1e-6)


def test_per_step_epsilon_is_one_step_of_pld():
    acc = pld.PLDAccountant(
        value_discretization_interval=accounting.DEFAULT_VALUE_DISCRETIZATION_INTERVAL
    )
    acc.compose(_event(1.5, 0.5, 1))
    assert per_step_epsilon(1.5, 0.5, 1e-6) == acc.get_epsilon(1e-6)


# ------------------------------------------------------------------ orderings that are theorems


def test_every_bound_is_at_least_the_exact_full_batch_epsilon(full_table):
    # full batch is exactly (√T/σ)-GDP, so its true ε(δ) is the gdp-exact row; every valid
    # upper bound is at least that (the 1e-9 is the root-finders' relative precision)
    exact = full_table.row("gdp-exact").epsilon
    for row in full_table.rows:
        if row.validity == "upper bound":
            assert row.epsilon >= exact * (1.0 - 1e-9), row.method
    # PLD's pessimistic rounding: above the exact value by less than the loss grid allows
    assert full_table.row("pld").epsilon - exact < 1e-2


@pytest.mark.parametrize("setting", [POISSON, FULL])
def test_optimal_composition_is_at_most_advanced_and_basic(setting, poisson_table, full_table):
    # same per-step (ε₀, δ/(2T)): KOV's composition is optimal over all (ε₀, δ₀)-DP
    # mechanisms, so no valid theorem for that class — advanced, basic — is below it
    table = poisson_table if setting is POISSON else full_table
    s, q, t = setting
    e0 = per_step_epsilon(s, q, DELTA / (2 * t))
    optimal = table.row("optimal-dp").epsilon
    assert optimal <= table.row("advanced").epsilon
    assert optimal <= t * e0 * (1.0 + 1e-12)


# ------------------------------------------------------------------ CLI


def test_account_compare_prints_the_table():
    s, q, t = POISSON
    res = CliRunner().invoke(
        app,
        [
            "account",
            "--noise-multiplier",
            "0.8",
            "--sampling-rate",
            "0.25",
            "--steps",
            "8",
            *COMPARE,
        ],
    )
    assert res.exit_code == 0, res.output
    table = compare(noise_multiplier=s, sampling_rate=q, steps=t, delta=DELTA)
    assert res.stdout == format_markdown(table) + "\n"


def test_account_compare_json():
    s, q, t = FULL
    res = CliRunner().invoke(
        app,
        ["account", "--noise-multiplier", repr(s), "--sampling-rate", "1", "--steps", "10", *JSON],
    )
    assert res.exit_code == 0, res.output
    table = compare(noise_multiplier=s, sampling_rate=q, steps=t, delta=1e-6)
    assert json.loads(res.stdout) == table.to_dict()
    assert [r["method"] for r in json.loads(res.stdout)["rows"]] == [
        "naive",
        "advanced",
        "optimal-dp",
        "rdp",
        "pld",
        "gdp-exact",
        "liu-composition",
    ]


def test_unknown_row_lists_the_methods(full_table):
    with pytest.raises(DpauditError) as info:
        full_table.row("gdp-clt")
    assert str(info.value) == (
        "The 'method' parameter must be one of {naive, advanced, optimal-dp, rdp, pld, "
        "gdp-exact, liu-composition}. Got 'gdp-clt' instead."
    )
