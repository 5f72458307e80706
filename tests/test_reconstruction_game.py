"""The k-candidate identification game, its ε lower bound, and the ``reconstruction`` kind.

The success bound P[correct] ≤ (e^ε + (k − 1)δ)/(e^ε + k − 1) is checked against the
optimum of the linear programme over every (ε, δ)-DP mechanism on k inputs; k-ary
randomised response meets it, so the validity test there is at the edge. The kind is run
end to end: a correct DP-SGD claim passes, σ/10 while claiming σ fails with exit 1.
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats
from typer.testing import CliRunner

from dpaudit.audit import run_audit
from dpaudit.bounds import identification_epsilon_lower_bound
from dpaudit.cli import app
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.reconstruction.methods import play_identification
from dpaudit.theory import gdp_epsilon, identification_success_bound

runner = CliRunner()


# ------------------------------------------------------------------- the success bound


def _best_success_lp(epsilon: float, delta: float, k: int) -> float:
    """max (1/k) Σ_i P[i → i] over every (ε, δ)-DP channel from k inputs to k guesses.

    Any attacker's guess is a post-processing of the release, so the channel input → guess
    is itself (ε, δ)-DP (replace-one: every pair of inputs are neighbours); conversely
    every such channel is an attack on itself. Constraints: P[i, S] ≤ e^ε P[j, S] + δ for
    every set S of guesses (all 2^k − 2 proper non-empty sets), rows sum to 1.
    """
    n = k * k
    rows, rhs = [], []
    for i, j in itertools.permutations(range(k), 2):
        for size in range(1, k):
            for subset in itertools.combinations(range(k), size):
                a = np.zeros(n)
                for s in subset:
                    a[i * k + s] += 1.0
                    a[j * k + s] -= math.exp(epsilon)
                rows.append(a)
                rhs.append(delta)
    eq = np.zeros((k, n))
    for i in range(k):
        eq[i, i * k : (i + 1) * k] = 1.0
    c = np.zeros(n)
    c[[i * k + i for i in range(k)]] = -1.0 / k
    res = optimize.linprog(c, A_ub=np.array(rows), b_ub=rhs, A_eq=eq, b_eq=np.ones(k))
    assert res.status == 0
    return -res.fun


@pytest.mark.parametrize(
    ("epsilon", "delta", "k"), [(0.5, 0.0, 3), (1.0, 0.05, 3), (2.0, 0.01, 4), (0.0, 0.1, 4)]
)
def test_success_bound_is_the_optimum_over_all_dp_channels(epsilon, delta, k) -> None:
    assert identification_success_bound(
        epsilon=epsilon, delta=delta, candidates=k
    ) == pytest.approx(_best_success_lp(epsilon, delta, k), abs=1e-7)


def test_success_bound_closed_forms() -> None:
    assert identification_success_bound(epsilon=0.0, delta=0.0, candidates=7) == pytest.approx(
        1 / 7
    )
    assert identification_success_bound(epsilon=math.inf, delta=0.0, candidates=7) == 1.0
    # k-ary randomised response at ε tells the truth with probability e^ε/(e^ε + k − 1).
    eps, k = 1.3, 10
    rr = math.exp(eps) / (math.exp(eps) + k - 1)
    assert identification_success_bound(epsilon=eps, delta=0.0, candidates=k) == pytest.approx(rr)
    assert identification_success_bound(epsilon=800.0, delta=0.0, candidates=k) == 1.0


def test_lower_bound_published_example_against_scipy() -> None:
    # k = 10, 60 of 100, δ = 0: p̂ from scipy's binomtest (one-sided, exact), then the formula.
    b = identification_epsilon_lower_bound(60, 100, candidates=10, delta=0.0)
    p = stats.binomtest(60, 100, alternative="greater").proportion_ci(0.95).low
    assert b.value == pytest.approx(math.log(9 * p / (1 - p)), rel=1e-10)
    assert b.value == pytest.approx(2.2491, abs=1e-4)
    assert b.validity == "rigorous-multi-run"
    assert b.counts["candidates"] == 10


def test_lower_bound_round_trip_and_edges() -> None:
    # ε → success bound p → ε: the inversion is exact when p is known.
    for eps, delta, k in [(0.7, 1e-3, 5), (3.0, 1e-5, 100)]:
        p = identification_success_bound(epsilon=eps, delta=delta, candidates=k)
        assert math.log((k - 1) * (p - delta) / (1 - p)) == pytest.approx(eps)
    assert identification_epsilon_lower_bound(0, 50, candidates=4, delta=0.0).value == 0.0
    assert identification_epsilon_lower_bound(50, 50, candidates=4, delta=0.0).value > 0
    chance = identification_epsilon_lower_bound(100, 1000, candidates=10, delta=0.0)
    assert chance.value == 0.0  # 10 % correct out of 10 candidates proves nothing
    with pytest.raises(
        DpauditError,
        match=r"The 'candidates' parameter must be an integer in \[2, inf\)\. Got 1 instead\.",
    ):
        identification_epsilon_lower_bound(1, 2, candidates=1, delta=0.0)
    with pytest.raises(DpauditError, match="'k' parameter must be in"):
        identification_epsilon_lower_bound(3, 2, candidates=3, delta=0.0)


def test_bound_falls_as_the_confidence_level_rises() -> None:
    values = [
        identification_epsilon_lower_bound(
            70, 100, candidates=10, delta=0.0, confidence_level=c
        ).value
        for c in (0.5, 0.9, 0.99, 0.999)
    ]
    assert values == sorted(values, reverse=True)
    assert values[0] < math.log(9 * 0.7 / 0.3)  # below the point estimate


# ------------------------------------------------------------------ validity over repeats
# A bound may exceed the truth in at most (1 − c) = 5 % of audits. P[Bin(1000, 0.05) > 65]
# ≈ 0.015 and P[Bin(400, 0.05) > 30] ≈ 0.011: the ceilings flag a 5 % failure rate about
# once in seventy to ninety seeds, and a bound that is invalid much more often.


def test_validity_at_the_edge_k_ary_randomised_response() -> None:
    # k-RR meets the success bound exactly: the hardest case for the bound's validity.
    eps, k, n = 1.0, 10, 300
    p = math.exp(eps) / (math.exp(eps) + k - 1)
    rng = np.random.default_rng(2024)
    wins = rng.binomial(n, p, 1000)
    over = sum(
        identification_epsilon_lower_bound(int(w), n, candidates=k, delta=0.0).value > eps
        for w in wins
    )
    assert over / 1000 <= 0.065
    # Power: with many trials the bound approaches the true ε (tightness).
    big = identification_epsilon_lower_bound(int(p * 200_000), 200_000, candidates=k, delta=0.0)
    assert 0.95 < big.value <= eps


@pytest.mark.slow
def test_validity_on_correct_dpsgd_over_400_repeats() -> None:
    # 400 independent audits of 300 games each against correct DP-SGD (σ = 0.5, k = 64):
    # the accountant's replace-one ε is that of μ = 2/σ = 4.
    sigma, k, n, delta = 0.5, 64, 300, 1e-5
    upper = gdp_epsilon(2.0 / sigma, delta)
    over, successes = 0, 0
    for r in range(400):
        games = play_identification(
            games=n,
            candidates=None,
            k=k,
            hidden=1,
            noise_multiplier=sigma,
            clipping_norm=1.0,
            target_value=10.0,
            seed=10_000 + r,
        )
        correct = int(games["correct"].sum())
        successes += correct
        bound = identification_epsilon_lower_bound(correct, n, candidates=k, delta=delta)
        over += bound.value > upper
    assert over / 400 <= 30 / 400
    assert successes / (400 * n) > 2.0 / k  # the attack does better than chance


def test_the_game_detects_sigma_over_ten() -> None:
    # Planted bug: σ/10 = 0.3 runs while σ = 3 is claimed (ε = 2.75 at δ = 1e-5).
    games = play_identification(
        games=10_000,
        candidates=None,
        k=1797,
        hidden=1,
        noise_multiplier=0.3,
        clipping_norm=1.0,
        target_value=10.0,
        seed=1,
    )
    bound = identification_epsilon_lower_bound(
        int(games["correct"].sum()), 10_000, candidates=1797, delta=1e-5
    )
    assert bound.value > gdp_epsilon(2.0 / 3.0, 1e-5)


# --------------------------------------------------------------------------- the kind

GAME_AUDIT = """
[audit]
name = "game"
kinds = ["reconstruction"]
seed = 0
delta = 1e-5

[reconstruction]
hidden = [8]
batches = 2
attack = "analytic"

[[reconstruction.defences]]
name = "none"

[[reconstruction.defences]]
name = "dpsgd"
sigma = 0.01

[reconstruction.game]
noise_multiplier = {run}
claimed_noise_multiplier = 3.0
trials = 10000
"""


def test_kind_passes_a_correct_claim_and_fails_sigma_over_ten(tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    f.write_text(GAME_AUDIT.format(run=3.0))
    ok = runner.invoke(app, ["run", str(f), "-q", "-o", str(tmp_path / "ok")])
    assert ok.exit_code == 0, ok.output
    f.write_text(GAME_AUDIT.format(run=0.3))
    bad = runner.invoke(app, ["run", str(f), "-q", "-o", str(tmp_path / "bad")])
    assert bad.exit_code == 1, bad.output
    data = json.loads((tmp_path / "bad" / "results.json").read_text())
    assert data["privacy_verdict"] == "violation"
    (bound,) = data["bounds"]
    assert bound["upper"] == pytest.approx(gdp_epsilon(2.0 / 3.0, 1e-5))
    assert bound["lower"]["value"] > bound["upper"]
    budget = data["provenance"]["verdict_budget"]
    assert budget["per_kind"] == {"reconstruction": 1}
    assert budget["level_each"] == 0.95
    tests = {t["id"]: t for t in data["tests"]}
    assert tests["reconstruction-0"]["reconstruction"]["metrics"]["median_nrmse"] < 1e-10
    assert tests["reconstruction-game"]["reconstruction"]["trials"] == 10_000


def test_kind_counts_one_comparison_and_shares_the_budget(tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    text = GAME_AUDIT.format(run=3.0).replace(
        'kinds = ["reconstruction"]', 'kinds = ["reconstruction", "mechanism"]'
    )
    f.write_text(text + '\n[mechanism]\nname = "laplace"\nepsilon = 1.0\ntrials = 2000\n')
    result = run_audit(f, output_dir=tmp_path / "run", write=False)
    assert result.provenance["verdict_budget"]["per_kind"] == {"reconstruction": 1, "mechanism": 3}
    game = next(c for c in result.comparisons if c.test.startswith("identification"))
    # ε and μ of the Laplace test, its claim curve, and the game: four shares
    assert game.lower.confidence_level == pytest.approx(1 - 0.05 / 4)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (('attack = "analytic"', 'attack = "analytic"\nbias = false'), "needs bias = true"),
        (('name = "none"', 'name = "telepathy"'), r"reconstruction\.defences\.0\.name"),
        (("trials = 10000", "trials = 10000\ncandidates = 1"), r"reconstruction\.game\.candidates"),
        (("batches = 2", "batches = 2\nbatch_size = 2"), "batch_size = 1"),
    ],
)
def test_bad_tables_are_one_clear_error(tmp_path: Path, change, match) -> None:
    f = tmp_path / "a.toml"
    f.write_text(GAME_AUDIT.format(run=3.0).replace(*change))
    with pytest.raises(ConfigError, match=match):
        run_audit(f, output_dir=tmp_path / "run", write=False)


def test_init_writes_a_reconstruction_example_that_runs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    made = runner.invoke(app, ["init", "--kind", "reconstruction", "-o", "audit.toml"])
    assert made.exit_code == 0, made.output
    assert runner.invoke(app, ["validate", "audit.toml"]).exit_code == 0
    run = runner.invoke(app, ["run", "audit.toml", "-q"])
    assert run.exit_code == 0, run.output
