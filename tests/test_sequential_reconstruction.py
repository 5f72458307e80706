"""The identification game as a sequential audit: the anytime-valid lower limit on the
success probability (dpaudit.sequential.game) keeps its level under monitoring where the
fixed bound checked after every round does not, and the ``reconstruction`` kind stops on a
planted bug (exit 1), passes a correct run, resumes and extends the same sequence, verifies,
and refuses what it cannot stop on."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats
from typer.testing import CliRunner

from dpaudit.audit import run_audit, verify_run
from dpaudit.bounds import identification_epsilon_lower_bound
from dpaudit.cli import app
from dpaudit.config import load_config_text, run_context
from dpaudit.errors import DpauditError
from dpaudit.kinds import get_kind
from dpaudit.schemas import validate_results
from dpaudit.sequential import SequentialRule
from dpaudit.sequential.game import (
    GAME_SEQUENTIAL_METHOD,
    epsilon_from_success,
    fixed_plan,
    game_rounds,
    success_lower_limit,
)
from dpaudit.stats import clopper_pearson
from dpaudit.theory import identification_success_bound

# DP-SGD reports σ = 3 (accountant ε ≈ 2.75 at δ = 1e-5, success ≤ 0.0087 of 1,797) but runs
# σ = {sigma}: about 7 % of games are won at σ = 0.2.
AUDIT = """
[audit]
name = "seq-game"
kinds = ["reconstruction"]
seed = 1
stopping = "sequential"
round_trials = 50

[reconstruction]
hidden = [4]
batches = 2
attack = "analytic"

[reconstruction.game]
noise_multiplier = {sigma}
claimed_noise_multiplier = 3.0
trials = {cap}
"""


def _config(text: str, tmp_path: Path):
    return load_config_text(text, base_dir=tmp_path, source="test.toml")


def _plan_key(text: str, tmp_path: Path) -> str:
    config = _config(text, tmp_path)
    plan = get_kind("reconstruction").plan(config.section("reconstruction"), run_context(config))
    return plan.key("reconstruction")


def _sequential(result) -> dict:
    return next(t for t in result.tests if t.id == "reconstruction-game").details["sequential"]


# ------------------------------------------------------------------------ statistics


def test_the_map_to_epsilon_is_the_fixed_bound_and_inverts_the_success_bound() -> None:
    # g(p*(ε)) = ε: the map inverts dpaudit.theory's success bound (closed form)
    for k, eps, delta in ((2, 0.5, 0.0), (10, 2.0, 1e-5), (1797, 2.7533813795291815, 1e-5)):
        p = identification_success_bound(epsilon=eps, delta=delta, candidates=k)
        assert epsilon_from_success(p, candidates=k, delta=delta) == pytest.approx(eps, rel=1e-9)
    # at the Clopper–Pearson limit it is the fixed bound: k = 10, 60 of 100, c = 0.95, the
    # limit the Beta(60, 41) 5 % quantile 0.51298 (scipy), ε = ln(9·0.51298/0.48702) = 2.2491
    low = clopper_pearson(60, 100, confidence_level=0.95, alternative="greater").low
    assert low == pytest.approx(stats.beta.ppf(0.05, 60, 41), rel=1e-10)
    fixed = identification_epsilon_lower_bound(60, 100, candidates=10, delta=0.0)
    assert epsilon_from_success(low, candidates=10, delta=0.0) == pytest.approx(fixed.value)
    assert fixed.value == pytest.approx(2.249139515, abs=1e-8)
    # edges: nothing above δ proves nothing; below chance it is floored at 0
    assert epsilon_from_success(1e-6, candidates=10, delta=1e-5) == 0.0
    assert epsilon_from_success(0.05, candidates=10, delta=0.0) == 0.0


def test_the_anytime_limit_is_wider_than_the_fixed_one_and_exact_at_the_edges() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        games = int(rng.integers(5, 2000))
        won = int(rng.integers(0, games + 1))
        mean = float(rng.uniform(0.01, 0.99))
        low = success_lower_limit(won, games, level=0.95, prior_mean=mean, prior_concentration=50.0)
        cp = clopper_pearson(won, games, confidence_level=0.95, alternative="greater").low
        # at each n the sequence is a level-c test that rejects on few failures (the
        # mixture decreases in them), and Clopper–Pearson's is the largest such region:
        # the anytime limit is never tighter than the one-look limit
        assert 0.0 <= low <= cp + 1e-12, (won, games, low, cp)
    assert success_lower_limit(0, 0, level=0.95, prior_mean=0.5, prior_concentration=10) == 0.0
    assert success_lower_limit(0, 40, level=0.95, prior_mean=0.5, prior_concentration=10) == 0.0


def test_monitored_validity_holds_and_the_uncorrected_rule_fails_it() -> None:
    """k = 4, claimed ε = 1, δ = 0: every game is won at exactly p*(1) = e/(e + 3), the
    largest rate the claim allows. 400 audits of 10 rounds of 50 games, c = 0.95, looked at
    after every round. The anytime-valid rule (the audit's own game_rounds) may refute the
    claim in at most the Binomial(400, 0.05) 0.999 quantile of them; the fixed
    Clopper–Pearson bound checked after every round, on the same games, refutes it more
    often than that ceiling (its rate is about 14 %: ten looks, each spending 5 %; 65 of
    these 400 against the anytime rule's 1)."""
    k, eps, c, size, looks, repeats = 4, 1.0, 0.95, 50, 10, 400
    p = identification_success_bound(epsilon=eps, delta=0.0, candidates=k)
    ceiling = stats.binom.ppf(0.999, repeats, 1 - c)
    rng = np.random.default_rng(2026)
    games = (rng.random((repeats, looks, size)) < p).astype(np.int8)
    # the uncorrected rule: the fixed bound after every round (vectorised Clopper–Pearson
    # lower limits, the same Beta quantile dpaudit.stats uses)
    won = games.sum(axis=2).cumsum(axis=1)
    n = size * np.arange(1, looks + 1)
    low = np.where(won > 0, special.betaincinv(won, n - won + 1.0, 1 - c), 0.0)
    uncorrected = int((low > p).any(axis=1).sum())
    assert uncorrected > ceiling, (uncorrected, ceiling)
    # the anytime-valid rule, through the audit's code path
    rule = SequentialRule("epsilon", 0.0, c, upper=eps, tuned_trials=20 * size)
    false = 0
    for r in range(repeats):
        out = game_rounds(list(games[r]), rule, candidates=k, last_round=looks - 1)
        assert out.decision in ("violation", "cap")
        false += out.decision == "violation"
    assert false <= ceiling, (false, ceiling)
    # both rules saw the same games: the anytime rule refutes no more often
    assert false < uncorrected


def test_power_a_planted_bug_is_refuted_within_a_few_rounds() -> None:
    """Power control at the statistics level: k = 4, claimed ε = 1 (p* = 0.475) but every
    game is won with probability 0.7 (ε ≈ 2.0): the test stops with a violation well
    before a cap of 2,000 games in all 20 seeded audits."""
    rule = SequentialRule("epsilon", 0.0, 0.95, upper=1.0, tuned_trials=1000)
    rng = np.random.default_rng(7)
    used = []
    for _ in range(20):
        rounds = list((rng.random((40, 50)) < 0.7).astype(np.int8))
        out = game_rounds(rounds, rule, candidates=4, last_round=39)
        assert out.decision == "violation"
        assert out.path[-1].value > 1.0
        assert all(pt.decision == "continue" for pt in out.path[:-1])
        values = [pt.value for pt in out.path]
        assert values == sorted(values)  # the running bound never loosens
        used.append(out.trials)
    assert max(used) <= 500, used
    plan = fixed_plan(out)
    assert plan is not None
    assert plan["goal"] == 1.0
    assert plan["trials_per_arm"] < plan["trials_per_arm_power"]


# ---------------------------------------------------------------------- the audit kind


def test_planted_bug_stops_early_exit_1_records_its_path_and_verifies(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(AUDIT.format(sigma=0.2, cap=10_000))
    run = tmp_path / "run"
    cli = CliRunner().invoke(app, ["run", str(tmp_path / "a.toml"), "-q", "-o", str(run)])
    assert cli.exit_code == 1, cli.output
    data = json.loads((run / "results.json").read_text())
    validate_results(data)
    test = next(t for t in data["tests"] if t["id"] == "reconstruction-game")
    seq = test["sequential"]
    assert seq["stopped_because"] == "violation"
    assert seq["trials_used"]["games"] == 50 * seq["rounds"] < 10_000
    path = seq["path"]["epsilon"]
    assert [pt["decision"] for pt in path] == ["continue"] * (len(path) - 1) + ["violation"]
    bound = next(b for b in data["bounds"] if b["test"].startswith("identification game"))
    assert bound["lower"]["method"] == GAME_SEQUENTIAL_METHOD
    assert bound["lower"]["value"] == path[-1]["value"] > bound["upper"]
    assert bound["lower"]["counts"]["trials"] == seq["trials_used"]["games"]
    assert test["reconstruction"]["trials"] == seq["trials_used"]["games"]
    # only the rounds used were played; verify recomputes the same result
    units = data["provenance"]["units"]["reconstruction"]
    assert units["computed"] == 2 + seq["rounds"]  # two inversion units, then the rounds
    assert verify_run(run) == []
    assert "reconstruction-game-path" in (run / "report.html").read_text()  # the path, drawn


def test_resume_after_losing_the_last_round_equals_the_uninterrupted_run(
    tmp_path: Path,
) -> None:
    text = AUDIT.format(sigma=0.2, cap=10_000)
    whole = run_audit(_config(text, tmp_path), output_dir=tmp_path / "whole", write=False)
    seq = _sequential(whole)
    assert seq["rounds"] >= 2
    # a run killed before its deciding round was stored: that round's file is missing
    killed = tmp_path / "killed"
    shutil.copytree(tmp_path / "whole", killed)
    last = f"reconstruction-game-{seq['rounds'] - 1:05d}.npz"
    (unit,) = killed.glob(f"units/*/{last}")
    unit.unlink()
    resumed = run_audit(_config(text, tmp_path), output_dir=killed, write=False)
    assert resumed.provenance["units"]["reconstruction"]["computed"] == 1
    assert _sequential(resumed) == seq
    assert resumed.comparisons[0].lower == whole.comparisons[0].lower
    # a small cap stops at the cap; raising it continues the same sequence
    grown = tmp_path / "grown"
    small = run_audit(
        _config(AUDIT.format(sigma=0.2, cap=50), tmp_path), output_dir=grown, write=False
    )
    assert _sequential(small)["stopped_because"] == "cap"
    again = run_audit(_config(text, tmp_path), output_dir=grown, write=False)
    assert again.provenance["units"]["reconstruction"]["reused"] == 3  # 2 inversions, round 0
    assert _sequential(again)["path"] == seq["path"]
    # neither the cap nor the claimed σ is part of what a round is: one store key for all
    keys = {
        again.provenance["units"]["reconstruction"]["key"],
        whole.provenance["units"]["reconstruction"]["key"],
        _plan_key(
            text.replace("claimed_noise_multiplier = 3.0", "claimed_noise_multiplier = 2.0"),
            tmp_path,
        ),
    }
    assert len(keys) == 1
    assert (
        _plan_key(text.replace("noise_multiplier = 0.2", "noise_multiplier = 0.25"), tmp_path)
        not in keys
    )


def test_a_correct_run_passes_at_the_cap(tmp_path: Path) -> None:
    result = run_audit(
        _config(AUDIT.format(sigma=3.0, cap=120), tmp_path), output_dir=tmp_path / "r", write=False
    )
    seq = _sequential(result)
    assert result.verdict == "pass"
    # 120 games are three whole rounds of 50: the cap is rounded up, never cut
    assert seq["stopped_because"] == "cap"
    assert seq["rounds"] == 3
    assert seq["cap_trials"] == 150
    assert seq["fixed_plan"]["epsilon"] is None
    assert not result.comparisons[0].violation


def test_refused_combination_has_an_exact_message(tmp_path: Path) -> None:
    text = AUDIT.format(sigma=0.2, cap=100)
    no_game = text[: text.index("[reconstruction.game]")]
    message = (
        "[audit] stopping = 'sequential' stops the identification game's rounds, and this "
        "[reconstruction] has no [reconstruction.game]: add one, or set stopping = 'fixed' "
        "(the inversion errors under defences are descriptive and have nothing to stop on)"
    )
    with pytest.raises(DpauditError, match=re.escape(message)):
        run_audit(_config(no_game, tmp_path), output_dir=tmp_path / "r")
    assert not (tmp_path / "r" / "results.json").exists()
