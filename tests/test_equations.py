"""Guarantees given as privacy–utility equations (Liu, Sun, Jiang, Kong 2022): the three
running examples, plug-ins, amplification, and Figure 1."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpaudit.errors import ConfigError, DpauditError
from dpaudit.theory import discrete_profile, gdp_delta, mu_from_pure_dp, pure_dp_profile
from dpaudit.theory.equations import (
    PrivacyEquation,
    amplify_by_mixing,
    equation_from_name,
    icea_equation,
    identify_equation,
    laplace_equation,
    mu_transform,
    naive_profile,
    plugin_equation,
    refined_equation_profile,
    sgd_equation,
)

EPS = np.linspace(0.0, 40.0, 4001)
ROOT = Path(__file__).resolve().parents[1]


def _position(profile_values: np.ndarray, mu: float) -> tuple[bool, bool]:
    """(somewhere above δ_μ, somewhere below δ_μ) on EPS, beyond 1e-12 of rounding."""
    g = gdp_delta(EPS, mu)
    return bool(np.any(profile_values > g + 1e-12)), bool(np.any(profile_values < g - 1e-12))


# --------------------------------------------------------------------------------------
# The paper's three examples
# --------------------------------------------------------------------------------------


def test_laplace_example_below_2_and_4_gdp_crossing_1_gdp():
    eq = laplace_equation(scale=2.0, sensitivity=2.0)  # b = 2/ε at b = 2: ε₀ = 1
    # naive: nothing below ε₀, (ε, 0) from ε₀ on
    assert naive_profile(eq, [0.5, 0.999, 1.0, 3.0]).tolist() == [1.0, 1.0, 0.0, 0.0]
    refined, _, _ = refined_equation_profile(eq)
    # the refinement of the single guarantee (ε₀, 0) is the ε₀-DP profile, closed form
    np.testing.assert_allclose(refined(EPS), pure_dp_profile(EPS, epsilon=1.0), atol=1e-12)
    r = identify_equation(eq)
    assert r.gdp
    assert r.tail_mu == 0.0
    low, high = r.mu_bracket
    mu_star = mu_from_pure_dp(1.0)  # −2Φ⁻¹(1/(1 + e)) = 1.2326...
    assert low <= mu_star <= high
    assert high - low <= 1e-3 * low * 1.01
    d = refined(EPS)
    assert _position(d, 2.0) == (False, True)
    assert _position(d, 4.0) == (False, True)
    assert _position(d, 1.0) == (True, True)


def test_sgd_example_a2_b1_sigma2():
    eq = sgd_equation(sigma=2.0, a=2.0, b=1.0)
    e = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(naive_profile(eq, e), np.exp(-(e**2)), rtol=1e-14)
    # round trip: the naive δ makes the equation hold with equality
    for x in e:
        assert eq.g(float(x), float(np.exp(-(x**2)))) == pytest.approx(2.0, rel=1e-12)
    # the tail value μ_t = A/(σ√2) = 1/√2, read far out in log space
    mus = mu_transform([64.0, 1024.0], eq.log_naive(np.array([64.0, 1024.0])))
    assert mus[1] == pytest.approx(1 / math.sqrt(2), rel=2e-3)
    r = identify_equation(eq)
    assert r.gdp
    assert r.tail_mu == pytest.approx(1 / math.sqrt(2))
    refined, _, _ = refined_equation_profile(eq)
    d = refined(EPS)
    assert np.all(d <= naive_profile(eq, EPS) + 1e-12)  # Thm. 2.1: never above the naive
    assert d[0] < 1.0 == naive_profile(eq, [0.0])[0]
    low, high = r.mu_bracket
    assert 1.0 < low <= high < 2.0
    assert np.all(d <= gdp_delta(EPS, high) + 1e-12)  # the bracket's top dominates
    assert _position(d, 2.0) == (False, True)
    assert _position(d, 4.0) == (False, True)
    assert _position(d, 1.0) == (True, True)


def test_icea_example_is_not_gdp_and_crosses_every_curve():
    eq = icea_equation(messages=12, parties=1000, a=1.0, field_size=1024)
    e = np.array([0.5, 2.0, 30.0])
    np.testing.assert_allclose(naive_profile(eq, e), 1000 * np.exp(-12.0) / e, rtol=1e-12)
    assert eq.g(2.0, 1000 * math.exp(-12.0) / 2.0) == pytest.approx(12.0)
    r = identify_equation(eq)
    assert not r.gdp
    assert math.isinf(r.mu_bracket[1])
    # μ_A rises at every doubling of ε: no finite μ dominates the tail
    assert np.all(np.diff(r.tail_mus) > 0)
    assert r.tail_mus[-1] > 50
    refined, _, _ = refined_equation_profile(eq)
    d = refined(EPS)
    for mu in (1.0, 2.0, 4.0):
        assert _position(d, mu) == (True, True), mu
    assert "not GDP" in r.summary


# --------------------------------------------------------------------------------------
# Plug-ins
# --------------------------------------------------------------------------------------


def test_plugin_equation_matches_the_closed_form_and_its_tail(tmp_path):
    (tmp_path / "my_equations_liu.py").write_text(
        "import math\n"
        "def sgd(eps, delta):\n"
        "    return 2.0 * math.sqrt(math.log(1.0 / delta)) / eps\n"
        "def icea(eps, delta):\n"
        "    return math.log(1000.0 / (eps * delta))\n"
    )
    eq = equation_from_name("my_equations_liu:sgd", {"sigma": 2.0}, base_dir=tmp_path)
    e = np.array([0.3, 1.0, 2.5])
    got = naive_profile(eq, e)
    want = np.exp(-(e**2))
    # bisection keeps the safe end: never below the closed form, within 2^-60·690 in ln δ
    assert np.all(got >= want * (1 - 1e-12))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    r = identify_equation(eq)
    assert r.gdp
    assert r.tail_source.startswith("numerical")
    assert r.tail_mu == pytest.approx(1 / math.sqrt(2), rel=5e-3)
    builtin = identify_equation(sgd_equation())
    assert r.mu_bracket == pytest.approx(builtin.mu_bracket, rel=1e-9)
    bad = equation_from_name("my_equations_liu:icea", {"sigma": 12.0}, base_dir=tmp_path)
    assert not identify_equation(bad).gdp


def test_plugin_equation_errors(tmp_path):
    eq = plugin_equation(lambda e, d: float("nan"), sigma=1.0)
    with pytest.raises(DpauditError, match="returned NaN"):
        naive_profile(eq, [1.0])
    with pytest.raises(ConfigError, match="Cannot import module"):
        equation_from_name("no_such_module_liu:g", {"sigma": 1.0})
    with pytest.raises(DpauditError, match=r"must be one of .'sgd', 'laplace', 'icea'. or"):
        equation_from_name("gauss", {})
    with pytest.raises(DpauditError, match=r"takes parameters \['a', 'b', 'sigma'\]"):
        equation_from_name("sgd", {"sigma": 2, "c": 1})
    with pytest.raises(DpauditError, match="exactly the parameter 'sigma'"):
        equation_from_name("m:g", {})


# --------------------------------------------------------------------------------------
# Amplification
# --------------------------------------------------------------------------------------


def _non_gdp_pair(q: int) -> tuple[np.ndarray, np.ndarray]:
    """A pair of output laws on q outcomes with an outcome only D can produce: the profile
    never reaches 0 (δ(ε) ≥ P(y₀) for every ε), so it is not GDP."""
    rng = np.random.default_rng(7)
    p = rng.dirichlet(np.ones(q))
    p_prime = rng.dirichlet(np.ones(q))
    p_prime[0] = 0.0
    return p, p_prime / p_prime.sum()


def _exact_equation(p: np.ndarray, p_prime: np.ndarray) -> PrivacyEquation:
    def log_naive(e: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(discrete_profile(e, p=p, q=p_prime), dtype=float))

    def g(eps: float, delta: float) -> float:
        raise AssertionError("not used")

    return PrivacyEquation(
        name="exact-pair",
        sigma=1.0,
        g=g,
        log_naive=log_naive,
        tail_mu=math.inf,
        parameters={"field_size": float(p.size)},
    )


def test_amplification_turns_a_non_gdp_mechanism_gdp_and_the_guarantee_holds():
    q, mix = 16, 0.3
    p, p_prime = _non_gdp_pair(q)
    eq = _exact_equation(p, p_prime)
    e = 2.0 ** np.arange(0, 10, dtype=float)
    assert np.all(np.diff(mu_transform(e, eq.log_naive(e))) > 0)  # non-GDP: μ_A unbounded
    amp = amplify_by_mixing(eq, mix=mix)
    assert amp.epsilon_star == pytest.approx(math.log(1 + q * (1 - mix) / mix))
    assert amp.identification.complete
    assert amp.identification.bracket.bounded
    # the post-processed mechanism, exactly: (1 − p)·A + p·uniform
    m, m_prime = (1 - mix) * p + mix / q, (1 - mix) * p_prime + mix / q
    grid = np.linspace(0.0, 12.0, 2401)
    exact = np.asarray(discrete_profile(grid, p=m, q=m_prime))
    assert np.all(exact <= amp.profile(grid) + 1e-12)  # the guarantee it produces holds
    assert np.all(exact <= gdp_delta(grid, amp.identification.bracket.high) + 1e-12)
    assert np.all(exact[grid >= amp.epsilon_star] == 0.0)
    assert amp.identification.bracket.high <= amp.mu_pure


def test_amplification_epsilon_star_is_attained():
    # point masses on different outputs: the worst pair; the mixture's ε is exactly ε*
    q, mix = 8, 0.25
    p, p_prime = np.eye(q)[0], np.eye(q)[1]
    m, m_prime = (1 - mix) * p + mix / q, (1 - mix) * p_prime + mix / q
    eps_star = math.log1p(q * (1 - mix) / mix)
    assert float(discrete_profile(eps_star * (1 - 1e-9), p=m, q=m_prime)) > 0.0
    assert float(discrete_profile(eps_star * (1 + 1e-12), p=m, q=m_prime)) == 0.0


def test_amplification_of_icea_and_its_errors():
    eq = icea_equation(messages=12, parties=1000, field_size=1024)
    amp = amplify_by_mixing(eq, mix=0.5)
    assert amp.epsilon_star == pytest.approx(math.log(1025.0))
    assert amp.identification.complete
    assert amp.to_dict()["mu_high"] < 2.0
    with pytest.raises(DpauditError, match="needs the size q"):
        amplify_by_mixing(sgd_equation(), mix=0.5)
    with pytest.raises(DpauditError, match=r"'mix' parameter must be in \(0, 1\)"):
        amplify_by_mixing(eq, mix=1.0)


# --------------------------------------------------------------------------------------
# Figure 1
# --------------------------------------------------------------------------------------


def test_figure1_regenerates_the_committed_file(tmp_path):
    from dpaudit.report.profile_plots import liu_figure1_examples, write_profile_figure

    examples = liu_figure1_examples()
    amp = amplify_by_mixing(examples[2][0], mix=0.5)
    out = write_profile_figure(tmp_path / "f.svg", examples, amplified={"icea": amp})
    text = out.read_text()
    assert text.lstrip().startswith("<?xml")
    assert "refined" in text
    assert "4-GDP" in text
    committed = ROOT / "docs" / "figures" / "liu-figure1.svg"
    assert text == committed.read_text()
    assert write_profile_figure(tmp_path / "f.png", examples[:1]).read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(DpauditError, match=r"must end in '\.svg' or '\.png'"):
        write_profile_figure(tmp_path / "f.pdf", examples)


# --------------------------------------------------------------------------------------
# dpaudit account --equation
# --------------------------------------------------------------------------------------


def test_cli_account_equation(tmp_path):
    import json

    from typer.testing import CliRunner

    from dpaudit.cli import app

    runner = CliRunner()
    fig = tmp_path / "icea.svg"
    args = [
        "account",
        "--equation",
        "icea",
        "--param",
        "messages=12",
        "--param",
        "parties=1000",
        "--param",
        "field_size=1024",
        "--amplify-mix",
        "0.5",
    ]
    res = runner.invoke(app, [*args, "--figure", str(fig), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["gdp"] is False
    assert out["mu_high"] is None
    assert out["amplified"]["epsilon_star"] == pytest.approx(math.log(1025.0))
    assert fig.read_text().lstrip().startswith("<?xml")
    res = runner.invoke(app, ["account", "--equation", "laplace", "--param", "scale=2"])
    assert res.exit_code == 0
    assert "GDP (tail value mu_t = 0" in res.output
    res = runner.invoke(app, ["account", "--equation", "sgd", "--param", "sigma"])
    assert res.exit_code == 2
    assert "--param must be KEY=NUMBER" in res.output
    res = runner.invoke(app, ["account", "--sampling-rate", "1", "--steps", "3"])
    assert res.exit_code == 2
    assert "Give --noise-multiplier (DP-SGD) or --equation" in res.output
