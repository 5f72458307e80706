"""The mechanism kind held against the claim's exact trade-off curve.

Which curve a claim declares (:func:`dpaudit.mechanisms.summary.declared_curve`), the core
pieces it rests on (:mod:`dpaudit.bounds.claim_curve`: the Laplace curve's parameter, the
bisection, the streamed test), the kind's budget (announced = spent, every share at its
level), what results.json and the report show, a planted bug that only the claim curve
catches, and the test's validity with a power control.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from dpaudit.bounds import epsilon_and_mu_lower_bounds
from dpaudit.bounds.claim_curve import (
    claim_curve_parameter,
    claim_curve_test,
    claim_curve_test_from_grid,
    declared_curve_bound,
    gdp_claim,
    gdp_curve_parameter,
    laplace_claim,
    laplace_curve_parameter,
    laplace_epsilon_of_claim,
    tradeoff_from_profile,
)
from dpaudit.cli import app
from dpaudit.errors import DpauditError
from dpaudit.kinds.base import RunContext, SequentialSettings
from dpaudit.mechanisms.kind import KIND
from dpaudit.mechanisms.schema import MechanismSection
from dpaudit.mechanisms.summary import declared_curve, mechanism_summary
from dpaudit.mechanisms.units import MechanismSpec, build_mechanism, mechanism_unit, upper_bound
from dpaudit.stats import clopper_pearson
from dpaudit.theory import gdp_mu, mu_from_pure_dp, tradeoff_laplace
from dpaudit.tradeoff import GridCounts

C = 0.95
UNIT = "mechanism-00000"


def _context(seed: int = 0, **kw) -> RunContext:
    return RunContext(seed=seed, confidence_level=C, delta=1e-5, base_dir=Path("."), **kw)


def _curve(section: MechanismSection, context: RunContext | None = None):
    ctx = context or _context()
    upper = upper_bound(section, build_mechanism(section, "."), ctx.delta)
    return declared_curve(section, ctx, upper)


def _audit(section: MechanismSection, seed: int):
    """The kind end to end on one unit: announced shares, the summary at their level."""
    ctx = _context(seed)
    spec = MechanismSpec(section=section, seed=seed, unit_size=ctx.unit_size, base_dir=".")
    outputs = {UNIT: mechanism_unit(spec, UNIT)}
    k = KIND.comparisons(section, ctx, outputs)
    return k, mechanism_summary(section, ctx, outputs, level=1 - (1 - C) / k)


# ----------------------------------------------------------------------- the core


def test_laplace_profile_gives_the_epsilon_of_a_claim() -> None:
    # Laplace(ε₀)'s profile δ(ε) = 1 − e^{(ε − ε₀)/2}: its dual (Prop. 2.12) is the exact
    # curve, and at ε₀ = laplace_epsilon_of_claim(ε, δ) it reaches δ exactly at ε.
    e0 = 1.3
    eps = np.linspace(0.0, e0, 20_001)
    alpha = np.linspace(0.0, 1.0, 101)
    dual = tradeoff_from_profile(alpha, eps, 1.0 - np.exp((eps - e0) / 2.0))
    assert np.max(np.abs(dual - tradeoff_laplace(alpha, epsilon=e0))) < 1e-9
    for e, d in ((1.0, 0.0), (1.0, 1e-3), (0.5, 0.2)):
        got = laplace_epsilon_of_claim(e, d)
        assert 1.0 - math.exp((e - got) / 2.0) == pytest.approx(d, abs=1e-15)
    with pytest.raises(DpauditError, match=r"The 'epsilon' parameter"):
        laplace_epsilon_of_claim(0.0)


@pytest.mark.parametrize(
    ("criterion", "family"),
    [(laplace_curve_parameter, laplace_claim), (gdp_curve_parameter, gdp_claim)],
)
def test_closed_form_parameters_match_the_bisection(criterion, family) -> None:
    rng = np.random.default_rng(3)
    u = rng.uniform(0.001, 0.999, size=(60, 2))
    closed = criterion(u[:, 0], u[:, 1])
    for (u0, u1), want in zip(u, closed, strict=True):
        got = claim_curve_parameter(u0, u1, family=family, claimed=1.0)
        assert got == pytest.approx(want, abs=1e-9), (u0, u1)
    # a threshold rule: 0 at u1 = 1, never negative, falling in both limits
    assert criterion(np.array([0.3]), np.array([1.0]))[0] == 0.0
    assert np.all(closed >= 0)
    assert np.all(criterion(u[:, 0] * 1.01, u[:, 1]) <= closed + 1e-12)


def test_bisection_exceeds_the_claim_exactly_below_its_curve() -> None:
    curve = laplace_claim(1.0)
    for u0 in (0.05, 0.27, 0.6):
        f = float(curve(np.array([u0]))[0])
        above = claim_curve_parameter(u0, f, family=laplace_claim, claimed=1.0)
        below = claim_curve_parameter(u0, np.nextafter(f, 0.0), family=laplace_claim, claimed=1.0)
        assert above <= 1.0 < below
    assert claim_curve_parameter(0.5, 0.5, family=laplace_claim, claimed=1.0) == 0.0
    # the middle piece: −ln(4·u0·u1); beyond the ceiling the ceiling is returned
    got = claim_curve_parameter(1e-9, 1e-9, family=laplace_claim, claimed=1.0)
    assert got == pytest.approx(-math.log(4e-18), abs=1e-9)
    assert claim_curve_parameter(1e-30, 1e-30, family=laplace_claim, claimed=1.0) == 100.0


def test_declared_bound_refuses_a_test_of_another_curve() -> None:
    rng = np.random.default_rng(0)
    test = claim_curve_test(rng.normal(size=400), rng.normal(size=400), claim=gdp_claim(1.0))
    with pytest.raises(
        DpauditError, match=r"^The test is of '1-GDP', not of the claimed curve '2-GDP'\.$"
    ):
        declared_curve_bound(test, family=gdp_claim, claimed=2.0, parameter="mu")


def test_streamed_test_counts_at_the_chosen_grid_row() -> None:
    rng = np.random.default_rng(1)
    grid = np.array([0.5])
    # half the noise of the claimed Laplace(1): the one row's point lies below its curve
    neg, pos = rng.laplace(0.0, 0.5, 5_000), 1.0 + rng.laplace(0.0, 0.5, 5_000)
    counts = GridCounts.count(grid, neg, pos)
    test = claim_curve_test_from_grid(None, counts, claim=laplace_claim(1.0), confidence_level=C)
    # one grid threshold: each rate at 1 − (1 − c)/2, its row counted directly
    fp, fn = int(np.sum(neg >= 0.5)), int(np.sum(pos < 0.5))
    assert (
        test.fpr.high == clopper_pearson(fp, 5_000, confidence_level=0.975, alternative="less").high
    )
    assert (
        test.fnr.high == clopper_pearson(fn, 5_000, confidence_level=0.975, alternative="less").high
    )
    assert test.counts == {"fp": fp, "negatives": 5_000, "fn": fn, "positives": 5_000}
    assert test.violated
    assert test.threshold_value == 0.5


# ------------------------------------------------------------------ which curve


@pytest.mark.parametrize(
    ("table", "want"),
    [
        ({"name": "laplace", "epsilon": 1.0}, ("epsilon", 1.0)),
        ({"name": "laplace", "scale": 0.5, "claim": {"epsilon": 1.0}}, ("epsilon", 1.0)),
        (
            {"name": "laplace", "epsilon": 1.0, "claim": {"epsilon": 1.0, "delta": 1e-3}},
            ("epsilon", 1.0 - 2.0 * math.log1p(-1e-3)),
        ),
        ({"name": "local-laplace", "epsilon": 1.0, "domain": (0.0, 1.0)}, ("epsilon", 1.0)),
        ({"name": "gaussian", "sigma": 1.0, "claim": {"rho": 0.5}}, ("mu", 1.0)),
        (
            {"name": "gaussian", "sigma": 1.0, "claim": {"epsilon": 1.0, "delta": 1e-5}},
            ("mu", gdp_mu(1.0, 1e-5)),
        ),
        (
            {"name": "gaussian", "sigma": 1.0, "claim": {"epsilon": 1.0, "delta": 1e-5, "mu": 2}},
            ("mu", gdp_mu(1.0, 1e-5)),
        ),
        # the μ comparison already tests G_μ of a μ claim
        ({"name": "gaussian", "mu": 1.0}, None),
        ({"name": "gaussian", "epsilon": 1.0, "delta": 1e-5}, None),
        (
            {"name": "gaussian", "sigma": 1.0, "claim": {"epsilon": 1, "delta": 1e-5, "mu": 0.1}},
            None,
        ),
        # RR's curve is f_{ε,0}: the ε comparison is the same test
        ({"name": "randomized-response", "p": 0.75}, None),
        ({"name": "k-rr", "k": 4, "epsilon": 1.0}, None),
        # a 2-D Laplace pair's curve is a product of 1-D curves, not Laplace(ε)
        ({"name": "laplace", "epsilon": 1.0, "query": ([0.0, 0.0], [0.5, 0.5])}, None),
        ({"name": "laplace", "epsilon": 1.0, "claim_curve": False}, None),
        ({"name": "laplace", "epsilon": 1.0, "claim": {"rho": 0.5}}, None),
    ],
)
def test_the_curve_is_read_from_the_claim(table, want) -> None:
    curve = _curve(MechanismSection(**table))
    assert (curve and (curve.parameter, curve.claimed)) == (
        want and (want[0], pytest.approx(want[1]))
    )


def test_no_curve_under_sequential_stopping() -> None:
    section = MechanismSection(name="laplace", epsilon=1.0)
    sequential = SequentialSettings(round_trials=100)
    assert _curve(section, _context(sequential=sequential)) is None


# ------------------------------------------------------------- the kind's budget


def test_shares_announced_equal_shares_spent_at_their_level() -> None:
    section = MechanismSection(name="laplace", epsilon=1.0, trials=20_000)
    k, summary = _audit(section, 0)
    assert k == 3 == summary.spent
    curve = summary.comparisons[2]
    assert curve.test == "laplace mechanism (claim curve)"
    assert curve.upper_source == (
        "theoretical Laplace mechanism's exact curve (ε = 1, δ = 0 → ε₀ = 1)"
    )
    assert curve.lower.method == "claim-curve"
    assert curve.in_verdict
    for c in summary.comparisons[:3]:
        assert c.lower.confidence_level == pytest.approx(1 - (1 - C) / 3, abs=1e-15)
    assert 0.85 < curve.lower.value < 1.0  # correct, and the curve test is near-tight
    off = section.model_copy(update={"claim_curve": False})
    assert _audit(off, 0)[0] == 2


# ------------------------------------------------------------ the planted bug


def _bug_toml(tmp_path: Path, seed: int, trials: int) -> Path:
    path = tmp_path / "bug.toml"
    path.write_text(
        f'[audit]\nname = "laplace-half-scale"\nkinds = ["mechanism"]\nseed = {seed}\n\n'
        f'[mechanism]\nname = "laplace"\nscale = 0.5\ntrials = {trials}\n\n'
        "[mechanism.claim]\nepsilon = 1.0\n"
    )
    return path


def test_a_half_scale_laplace_is_caught_where_the_epsilon_route_is_not(tmp_path: Path) -> None:
    """Laplace run at b/2 (ε = 2) claiming ε = 1, 150 trials per arm, 400 audit seeds:
    the kind's own unit draws through the kind's bounds at its per-bound level (three
    shares); audits the claim curve alone fails against those the ε and μ comparisons
    alone fail (exact McNemar), then the first of them through the CLI (exit 1)."""
    section = MechanismSection(name="laplace", scale=0.5, trials=150, claim={"epsilon": 1.0})
    level = 1 - (1 - C) / 3
    mu_claim = mu_from_pure_dp(1.0)
    curve_only, old_only = [], []
    for seed in range(400):
        spec = MechanismSpec(section=section, seed=seed, unit_size=25_000, base_dir=".")
        unit = mechanism_unit(spec, UNIT)
        neg, pos = unit["negative"], unit["positive"]
        eps, mu = epsilon_and_mu_lower_bounds(
            neg, pos, delta=0.0, confidence_level=level, seed=seed
        )
        old = eps.value > 1.0 or mu.value > mu_claim
        curve = claim_curve_test(
            neg,
            pos,
            claim=laplace_claim(1.0),
            confidence_level=level,
            seed=seed,
            criterion=laplace_curve_parameter,
        ).violated
        if curve and not old:
            curve_only.append(seed)
        if old and not curve:
            old_only.append(seed)
    b, c = len(curve_only), len(old_only)
    # under equal power each discordant audit is a fair coin
    assert stats.binomtest(c, b + c, 0.5, alternative="less").pvalue < 0.001, (b, c)
    seed = curve_only[0]
    run = tmp_path / "run"
    toml = _bug_toml(tmp_path, seed, 150)
    result = CliRunner().invoke(app, ["run", str(toml), "-q", "-o", str(run)])
    assert result.exit_code == 1, result.output
    data = json.loads((run / "results.json").read_text())
    rows = {b["test"] + " " + b["parameter"]: b for b in data["bounds"]}
    assert not rows["laplace mechanism epsilon"]["violation"]
    assert not rows["laplace mechanism mu"]["violation"]
    hit = rows["laplace mechanism (claim curve) epsilon"]
    assert hit["violation"]
    assert hit["lower"]["details"]["below_claim_curve"]
    assert hit["lower"]["method"] == "claim-curve"
    html = (run / "report.html").read_text()
    assert "laplace mechanism (claim curve)" in html
    assert "exact curve (ε = 1, δ = 0 → ε₀ = 1)" in html


# -------------------------------------------------------------------- validity


def _laplace(rng, scale, n):
    return rng.laplace(0.0, scale, n), 1.0 + rng.laplace(0.0, scale, n)


def _gauss(rng, sigma, n):
    return rng.normal(0.0, sigma, n), 1.0 + rng.normal(0.0, sigma, n)


@pytest.mark.parametrize(
    ("draw", "family", "criterion", "bug"),
    [
        (_laplace, laplace_claim, laplace_curve_parameter, 0.7),
        (_gauss, gdp_claim, gdp_curve_parameter, 0.7),
    ],
)
def test_false_violations_stay_within_the_binomial_bound(draw, family, criterion, bug) -> None:
    """100 audits of the correct mechanism (scale 1, claimed θ = 1) through the kind's
    test: violations ≤ binom.ppf(0.999, 100, 1 − c); at 0.7× the noise (the power
    control) the same test exceeds that bound."""
    repeats, n = 100, 1_500
    ceiling = stats.binom.ppf(0.999, repeats, 1 - C)
    counts = []
    for scale in (1.0, bug):
        hits = 0
        for r in range(repeats):
            rng = np.random.default_rng([11, r, int(scale * 10)])
            neg, pos = draw(rng, scale, n)
            test = claim_curve_test(
                neg, pos, claim=family(1.0), confidence_level=C, seed=r, criterion=criterion
            )
            hits += test.violated
        counts.append(hits)
    assert counts[0] <= ceiling < counts[1], counts


@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_streamed_audits_count_the_curve_on_their_grid(monkeypatch, threshold) -> None:
    from dpaudit.mechanisms import summary as summary_module

    monkeypatch.setattr(summary_module, "EXACT_TRIALS_LIMIT", 0)
    monkeypatch.setattr(summary_module, "GRID_TRIALS", 2_500)
    section = MechanismSection(
        name="laplace", scale=0.5, trials=10_000, claim={"epsilon": 1.0}, threshold=threshold
    )
    ctx = _context(unit_size=2_500)
    spec = MechanismSpec(section=section, seed=0, unit_size=2_500, base_dir=".")
    outputs = {f"mechanism-{i:05d}": mechanism_unit(spec, f"mechanism-{i:05d}") for i in range(4)}
    k = KIND.comparisons(section, ctx, outputs)
    summary = mechanism_summary(section, ctx, outputs, level=1 - (1 - C) / k)
    curve = summary.comparisons[2]
    assert k == summary.spent == 3
    assert curve.lower.details["streamed"] is True
    assert curve.lower.threshold == threshold
    # split: the evaluation half (2 units); bonferroni: all but the grid's one unit
    assert curve.lower.counts["negatives"] == (5_000 if threshold == "split" else 7_500)
    assert curve.violation  # ε = 2 run, ε = 1 claimed, thousands of trials
