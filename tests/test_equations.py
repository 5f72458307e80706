"""Guarantees given as privacy–utility equations (Liu, Sun, Jiang, Kong 2022): the three
running examples, plug-ins, amplification, and Figure 1."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

from dpaudit.errors import ConfigError, DpauditError
from dpaudit.theory import (
    discrete_profile,
    gdp_delta,
    laplace_profile,
    refined_profile,
)
from dpaudit.theory.equations import (
    PrivacyEquation,
    amplify_by_mixing,
    equation_from_name,
    gdp_comparison,
    gdp_comparisons,
    icea_equation,
    identify_equation,
    implied_delta,
    laplace_equation,
    mu_transform,
    naive_profile,
    plugin_equation,
    refined_equation_profile,
    sgd_equation,
)

EPS = np.linspace(0.0, 40.0, 4001)
ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------
# Thm. 2.1: the partial order and the refined profile
# --------------------------------------------------------------------------------------


def _worst_pair(eps0: float, delta0: float) -> tuple[np.ndarray, np.ndarray]:
    """The four-outcome pair that is (ε₀, δ₀)-DP and nothing better (Kairouz, Oh,
    Viswanath 2015, Thm. 2.1's extremal mechanism): its exact profile is what (ε₀, δ₀)-DP
    implies, so Thm. 2.1's δ must equal it at every ε (the "only if")."""
    hi, lo = (
        (1 - delta0) * math.exp(eps0) / (1 + math.exp(eps0)),
        (1 - delta0) / (1 + math.exp(eps0)),
    )
    return np.array([delta0, hi, lo, 0.0]), np.array([0.0, lo, hi, delta0])


@pytest.mark.parametrize(("eps0", "delta0"), [(0.0, 0.3), (1.0, 0.0), (1.0, 0.1), (3.0, 0.05)])
def test_theorem21_is_the_profile_of_the_extremal_pair(eps0, delta0):
    p, q = _worst_pair(eps0, delta0)
    grid = np.linspace(0.0, 5.0, 501)
    got = implied_delta(grid, epsilon0=eps0, delta0=delta0)
    np.testing.assert_allclose(got, discrete_profile(grid, p=p, q=q), atol=1e-15)
    # closed-form corners: δ₀ from ε₀ on; tanh(ε₀/2) at ε = 0 for pure DP
    assert np.all(got[grid >= eps0] == pytest.approx(delta0))
    if delta0 == 0.0:
        assert got[0] == pytest.approx(math.tanh(eps0 / 2), rel=1e-14)
    # one guarantee: the joint f-DP refinement (Dong, Roth, Su Prop. 2.12) agrees
    np.testing.assert_allclose(
        got, refined_profile(grid, epsilons=[eps0], deltas=[delta0]), atol=1e-12
    )


def test_implied_delta_errors():
    with pytest.raises(DpauditError, match=r"'delta0' parameter must be in \[0, 1\)"):
        implied_delta(1.0, epsilon0=1.0, delta0=1.0)
    with pytest.raises(DpauditError, match="'epsilon0' parameter must be ≥ 0"):
        implied_delta(1.0, epsilon0=-1.0, delta0=0.0)


@pytest.mark.parametrize("name", ["sgd", "icea"])
def test_refined_profile_matches_scipy_minimisation_over_eps0(name):
    """The paper's refined profile is a minimum over every ε₀ ≥ 0; the family's minimum
    is never below it and exceeds it by at most the largest step of the minimised
    function between two neighbouring family points (it is smooth and unimodal here)."""
    eq = sgd_equation() if name == "sgd" else icea_equation()
    refined, fam, _ = refined_equation_profile(eq)

    def h(e0: float, e: float) -> float:
        d0 = float(naive_profile(eq, [e0])[0])
        return d0 + (1 - d0) * max(math.exp(e0) - math.exp(e), 0.0) / (1 + math.exp(e0))

    for e in (0.0, 0.3, 0.8, 1.5):
        best = optimize.minimize_scalar(
            h, bounds=(e, 60.0), args=(e,), method="bounded", options={"xatol": 1e-10}
        )
        want = min(float(best.fun), float(naive_profile(eq, [e])[0]))
        got = float(refined(np.array([e]))[0])
        vals = np.array([h(float(x), e) for x in fam[(fam > e) & (fam < 60)]])
        step = float(np.max(np.abs(np.diff(vals))))
        assert want - 1e-9 <= got <= want + step, (name, e, got, want, step)


@pytest.mark.parametrize("mu", [1.0, 2.0, 4.0])
def test_log_space_gdp_profile_follows_lemma_3_1_in_the_tail(mu):
    """Lemma 3.1: δ_μ(ε) / δ̃_μ(ε) → 1 with δ̃_μ(ε) = μ e^{−a²/2} / (√(2π) a²),
    a = ε/μ − μ/2 (the minus lost in extraction). The μ that matches δ̃ is within the
    leading-order gap: ln(δ̃/δ_μ) ≈ ln(1 + μ/a) ≤ μ/a over a slope d ln δ_μ/dμ ≈ aε/μ²,
    a relative μ²/(a²ε); twice that covers the next terms, O(1/a²) of it."""
    for eps in (50.0, 100.0, 1000.0):
        a = eps / mu - mu / 2
        log_tilde = math.log(mu) - a * a / 2 - 0.5 * math.log(2 * math.pi) - 2 * math.log(a)
        got = float(mu_transform([eps], [log_tilde])[0])
        assert 0.0 < got / mu - 1.0 <= 2 * mu**2 / (a * a * eps), (mu, eps, got)


# --------------------------------------------------------------------------------------
# The paper's three examples and the statements of its Figure 1
# --------------------------------------------------------------------------------------


def _relations(eq: PrivacyEquation) -> dict[float, str]:
    cmps = gdp_comparisons(identify_equation(eq), (1.0, 2.0, 4.0))
    return {c.mu: c.relation for c in cmps}


def _laplace_tradeoff(alpha: float, theta: float) -> float:
    """Lap(0, 1) against Lap(θ, 1) (Dong, Roth, Su 2019, §2), written out here."""
    e = math.exp(-theta)
    if alpha < e / 2:
        return 1 - alpha / e
    return e / (4 * alpha) if alpha <= 0.5 else e * (1 - alpha)


def test_laplace_example_profile_quoted_from_balle_et_al():
    eq = laplace_equation(scale=2.0, sensitivity=2.0)  # θ = Δ/b = 1
    e = np.linspace(0.0, 3.0, 301)
    quoted = np.maximum(1 - np.exp(e / 2 - 2.0 / (2 * 2.0)), 0.0)  # max(1 − e^{ε/2−Δ/(2b)}, 0)
    np.testing.assert_allclose(naive_profile(eq, e), quoted, atol=1e-15)
    np.testing.assert_allclose(naive_profile(eq, e), laplace_profile(e, epsilon=1.0), atol=1e-15)
    for x in (0.2, 0.7):  # the equation b = Δ/(ε + 2 ln(1/(1 − δ))) inverts the profile
        assert eq.g(x, float(naive_profile(eq, [x])[0])) == pytest.approx(2.0, rel=1e-12)
    refined, _, _ = refined_equation_profile(eq)
    np.testing.assert_allclose(refined(e), quoted, atol=1e-12)  # exact: nothing to refine
    r = identify_equation(eq, rtol=1e-5)
    assert r.gdp
    assert r.tail_mu == 0.0
    # independent: the optimal μ is sup_α Φ⁻¹(1 − α) − Φ⁻¹(f(α)) of the trade-off curve
    best = optimize.minimize_scalar(
        lambda a: -(stats.norm.ppf(1 - a) - stats.norm.ppf(_laplace_tradeoff(a, 1.0))),
        bounds=(1e-6, 0.999),
        method="bounded",
        options={"xatol": 1e-12},
    )
    low, high = r.mu_bracket
    assert low <= -best.fun <= high
    assert _relations(eq) == {1.0: "crosses", 2.0: "below", 4.0: "below"}


def test_laplace_statement_holds_for_theta_between_0_9655_and_2_2957():
    """The printed "b = 2/ε" lost a symbol; the statement (crosses 1-GDP, below 2-GDP)
    holds exactly while the optimal μ is in (1, 2]: θ in (0.9655, 2.2957)."""

    def bracket(theta: float) -> tuple[float, float]:
        return identify_equation(
            laplace_equation(scale=1.0, sensitivity=theta), rtol=1e-4
        ).mu_bracket

    assert bracket(0.9650)[1] < 1.0 < bracket(0.9660)[0]
    assert bracket(2.2950)[1] < 2.0 < bracket(2.2965)[0]


def test_sgd_example_a2_b1_sigma2():
    eq = sgd_equation(sigma=2.0, a=2.0, b=1.0)
    e = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(naive_profile(eq, e), np.exp(-(e**2)), rtol=1e-14)
    assert naive_profile(eq, [0.0])[0] == 1.0  # the equation asks for σ = ∞ at ε = 0
    for x in e:  # round trip: the naive δ makes the equation hold with equality
        assert eq.g(float(x), float(np.exp(-(x**2)))) == pytest.approx(2.0, rel=1e-12)
    # Thm. 3.3: μ_t = √(lim ε²/(−2 ln δ)) = √(1/2), read far out in log space
    mus = mu_transform([64.0, 1024.0], eq.log_naive(np.array([64.0, 1024.0])))
    assert mus[1] == pytest.approx(1 / math.sqrt(2), rel=2e-3)
    r = identify_equation(eq)
    assert r.gdp
    assert r.tail_mu == pytest.approx(1 / math.sqrt(2))
    assert r.tail_mu <= r.tail_high < 2.0
    refined, _, _ = refined_equation_profile(eq)
    d = refined(EPS)
    assert np.all(d <= naive_profile(eq, EPS) + 1e-15)  # never above the naive
    assert float(refined(np.array([0.0]))[0]) == pytest.approx(0.64669, abs=1e-4)
    low, high = r.mu_bracket
    assert 1.855 < low <= high < 1.859
    assert np.all(d <= gdp_delta(EPS, high) + 1e-12)  # the bracket's top dominates
    assert _relations(eq) == {1.0: "crosses", 2.0: "below", 4.0: "below"}


def test_icea_example_m20_n4_is_not_gdp():
    eq = icea_equation(messages=20, parties=4)  # m > 10 ln(n/(εδ))
    e = np.array([0.6, 2.0, 30.0])
    np.testing.assert_allclose(naive_profile(eq, e), 4 * np.exp(-2.0) / e, rtol=1e-12)
    assert naive_profile(eq, [0.5])[0] == 1.0  # 4e^{−2}/0.5 > 1
    refined, _, _ = refined_equation_profile(eq)
    assert float(refined(np.array([0.0]))[0]) == pytest.approx(0.7454, abs=1e-4)
    assert eq.g(2.0, 4 * math.exp(-2.0) / 2.0) == pytest.approx(20.0)
    r = identify_equation(eq)
    assert not r.gdp
    assert math.isinf(r.mu_bracket[1])
    assert np.all(np.diff(r.tail_mus[1:]) > 0)  # from ε = 2, μ_A rises at every doubling
    assert "not GDP" in r.summary
    # not μ-GDP for μ in {1, 2, 4}: above 1-GDP at every ε shown, crossing 2 and 4
    one, two, four = gdp_comparisons(r, (1.0, 2.0, 4.0))
    assert (one.relation, two.relation, four.relation) == ("above", "crosses", "crosses")
    assert (one.above_at, one.below_at) == (0.0, None)
    assert (two.above_at, two.below_at) == (0.0, pytest.approx(1.1))
    assert (four.above_at, four.below_at) == (pytest.approx(14.29), 0.0)
    assert gdp_comparison(r, 4.0) == four
    # with a base-10 log the profile is 0.04/ε and crosses all three
    ten = icea_equation(messages=20, parties=4, log_base=10.0)
    np.testing.assert_allclose(naive_profile(ten, e), 0.04 / e, rtol=1e-12)
    assert _relations(ten) == {1.0: "crosses", 2.0: "crosses", 4.0: "crosses"}


def test_docs_table_is_what_the_figure_script_computes():
    script = _figure_script()
    text = (ROOT / "docs" / "equations.md").read_text()
    rows = script.statements()
    assert len(rows) == 9
    for row in rows:
        line = f"| {row['example']} | {row['mu']:g} | {row['paper']} | {row['dpaudit']} |"
        assert line in text, line
    assert {r["verdict_agrees"] for r in rows} == {True, None}


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
    eq = icea_equation(messages=20, parties=4, field_size=1024)
    amp = amplify_by_mixing(eq, mix=0.5)
    assert amp.epsilon_star == pytest.approx(math.log(1025.0))
    assert amp.identification.complete
    assert 2.31 < amp.to_dict()["mu_high"] < 2.32 < amp.mu_pure
    with pytest.raises(DpauditError, match="needs the size q"):
        amplify_by_mixing(sgd_equation(), mix=0.5)
    with pytest.raises(DpauditError, match=r"'mix' parameter must be in \(0, 1\)"):
        amplify_by_mixing(eq, mix=1.0)


# --------------------------------------------------------------------------------------
# Figure 1
# --------------------------------------------------------------------------------------


def _figure_script():
    spec = importlib.util.spec_from_file_location(
        "liu_figure1", ROOT / "scripts" / "liu_figure1.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_figure1_script_regenerates_the_committed_png(tmp_path):
    out = _figure_script().draw(tmp_path / "f.png")
    assert out.read_bytes() == (ROOT / "docs" / "figures" / "liu-figure1.png").read_bytes()


def test_profile_figure_writes_svg_and_png(tmp_path):
    from dpaudit.report.profile_plots import liu_figure1_examples, write_profile_figure

    examples = liu_figure1_examples()
    assert [eq.name for eq, _ in examples] == ["laplace", "sgd", "icea"]
    amp = amplify_by_mixing(examples[2][0], mix=0.5)
    # one panel (drawing is what costs here: log axes' ticks)
    svg = write_profile_figure(tmp_path / "f.svg", examples[2:], amplified={"icea": amp})
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml")
    assert "refined" in text
    assert "4-GDP" in text
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
        "messages=20",
        "--param",
        "parties=4",
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
    assert "mu-GDP for mu >= 1.031" in res.output  # θ = Δ/b = 2/2: the Laplace example
    res = runner.invoke(app, ["account", "--equation", "sgd", "--param", "sigma"])
    assert res.exit_code == 2
    assert "--param must be KEY=NUMBER" in res.output
    res = runner.invoke(app, ["account", "--sampling-rate", "1", "--steps", "3"])
    assert res.exit_code == 2
    assert "Give --noise-multiplier (DP-SGD) or --equation" in res.output
