"""The sequential mechanism audit's rounds: a schedule fixed in advance that grows after
20 rounds, and tests kept between rounds (a round costs what its own trials cost)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from dpaudit.audit import run_audit, verify_run
from dpaudit.config import load_config_text
from dpaudit.errors import DpauditError
from dpaudit.sequential import (
    CONSTANT_ROUNDS,
    RoundsRunner,
    SequentialRule,
    cumulative_rounds,
    round_trials_at,
    rounds_to_reach,
    run_rounds,
)


def test_schedule_by_hand() -> None:
    assert cumulative_rounds(1) == [1]
    assert cumulative_rounds(CONSTANT_ROUNDS) == list(range(1, 21))
    assert cumulative_rounds(36)[19:] == [
        20, 25, 30, 40, 50, 60, 80, 100, 125, 150, 200, 250, 300, 400, 500, 600, 800
    ]  # fmt: skip
    # each step grows the trials run by at most a third once the rounds grow
    c = cumulative_rounds(80)
    assert max(b / a for a, b in itertools.pairwise(c[19:])) == pytest.approx(4 / 3)
    # a round's trials are a function of its index alone (never of the cap) ...
    sizes = [round_trials_at(i, 50) for i in range(40)]
    assert sizes[:20] == [50] * 20
    assert sizes[20] == 250
    assert sizes[22] == 500
    assert np.cumsum(sizes).tolist() == [50 * m for m in cumulative_rounds(40)]
    # ... and the cap is reached by the fewest whole rounds: 10⁶ = 10⁴ × 100 exactly
    assert cumulative_rounds(rounds_to_reach(10**6, 100))[-1] == 10**4
    for trials in (1, 99, 100, 2_000, 2_001, 123_457):
        n = rounds_to_reach(trials, 100)
        assert cumulative_rounds(n)[-1] * 100 >= trials
        assert n == 2 or cumulative_rounds(n - 1)[-1] * 100 < trials
    # a correct mechanism run to a cap of 10⁶ trials in rounds of 100 is looked at 47 times
    assert rounds_to_reach(10**6, 100) == 47
    with pytest.raises(DpauditError, match="'rounds'"):
        cumulative_rounds(0)


def _rounds(eps: float, sizes: list[int], seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.laplace(0, 1 / eps, n), 1 + rng.laplace(0, 1 / eps, n)) for n in sizes]


@pytest.mark.parametrize(("eps", "decision"), [(3.0, "violation"), (1.0, "cap")])
def test_runner_fed_round_by_round_is_run_rounds(eps: float, decision: str) -> None:
    sizes = [round_trials_at(i, 100) for i in range(25)]
    rounds = _rounds(eps, sizes, seed=4)
    rules = {
        "epsilon": SequentialRule(parameter="epsilon", delta=0.0, level=0.975, upper=1.0),
        "mu": SequentialRule(parameter="mu", delta=0.0, level=0.975, upper=None),
    }
    entered = {"epsilon": True, "mu": False}
    whole = run_rounds(rounds, rules, entered=entered, last_round=24)
    runner = RoundsRunner(rules, entered=entered, last_round=24)
    decisions = []
    for neg, pos in rounds:
        decisions.append(runner.add(neg, pos))
        if decisions[-1] != "continue":
            break
    assert runner.outcome() == whole
    assert whole.decision == decision == decisions[-1]
    assert whole.trials == sum(sizes[: whole.rounds])
    with pytest.raises(DpauditError, match="already stopped"):
        runner.add(*rounds[0])


AUDIT = """
[audit]
name = "seq"
kinds = ["mechanism"]
seed = 1
stopping = "sequential"
round_trials = 10

[mechanism]
name = "gaussian"
sigma = 1.0
trials = {cap}

[mechanism.claim]
mu = 1.0
"""


def test_a_correct_audit_runs_the_growing_rounds_to_its_cap(tmp_path: Path) -> None:
    config = load_config_text(AUDIT.format(cap=2_000), base_dir=tmp_path, source="t.toml")
    result = run_audit(config, output_dir=tmp_path / "r")
    assert result.verdict == "pass"
    seq = result.tests[0].details["sequential"]
    assert seq["stopped_because"] == "cap"
    # 10 × (1..20, 25, 30, 40, ..., 200): 30 rounds, the last ending exactly at the cap
    assert seq["rounds"] == rounds_to_reach(2_000, 10) == 30
    assert seq["trials_used"]["negative"] == seq["cap_trials"] == 2_000
    assert [p["trials"] for p in seq["path"]["mu"]] == [10 * m for m in cumulative_rounds(30)[1:]]
    assert result.provenance["units"]["mechanism"]["computed"] == 30
    # the decisions taken round by round are those the stored rounds give again
    assert verify_run(tmp_path / "r") == []
