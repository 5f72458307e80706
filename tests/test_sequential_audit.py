"""``[audit] stopping = "sequential"`` end to end: the mechanism kind stops at the first
decisive round, resumes and extends the same sequence from the stored rounds, records
its path in results.json, and refuses what it does not support."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpaudit.audit import run_audit, verify_run
from dpaudit.config import load_config_text
from dpaudit.errors import DpauditError

VIOLATION = """
[audit]
name = "seq"
kinds = ["mechanism"]
seed = 3
stopping = "sequential"
round_trials = 50

[mechanism]
name = "laplace"
epsilon = 2.0
trials = {cap}

[mechanism.claim]
epsilon = 1.0
"""


def _config(text: str, tmp_path: Path):
    return load_config_text(text, base_dir=tmp_path, source="test.toml")


def test_violation_stops_early_and_records_its_path(tmp_path: Path) -> None:
    result = run_audit(_config(VIOLATION.format(cap=5000), tmp_path), output_dir=tmp_path / "r")
    assert result.privacy_verdict == "violation"
    seq = result.tests[0].details["sequential"]
    assert seq["stopped_because"] == "violation"
    used = seq["trials_used"]["negative"]
    assert used == 50 * seq["rounds"] < 5000
    eps = next(c for c in result.comparisons if c.parameter == "epsilon")
    path = seq["path"][seq["decided_by"]]
    assert [p["decision"] for p in path][-1] == "violation"
    assert all(p["decision"] == "continue" for p in path[:-1])
    assert eps.lower.details["rounds"] == seq["rounds"]
    assert eps.lower.method == "beta-binomial-mixture-cs"
    assert eps.lower.confidence_level == pytest.approx(0.975)  # ε and μ share 0.05
    # only the rounds used were run and recorded; verify recomputes the same result
    assert result.provenance["units"]["mechanism"]["computed"] == seq["rounds"]
    assert verify_run(tmp_path / "r") == []


def test_cap_then_larger_cap_continues_the_same_sequence(tmp_path: Path) -> None:
    run = tmp_path / "run"
    small = run_audit(_config(VIOLATION.format(cap=100), tmp_path), output_dir=run)
    assert small.tests[0].details["sequential"]["stopped_because"] == "cap"
    again = run_audit(_config(VIOLATION.format(cap=5000), tmp_path), output_dir=run)
    fresh = run_audit(_config(VIOLATION.format(cap=5000), tmp_path), output_dir=tmp_path / "f")
    units = again.provenance["units"]["mechanism"]
    assert units["reused"] == 2  # the two rounds of the capped run, not drawn again
    a, b = again.tests[0].details["sequential"], fresh.tests[0].details["sequential"]
    assert a["path"] == b["path"]
    assert a["stopped_because"] == "violation"
    # a rerun after a kill finds every round stored and decides the same
    resumed = run_audit(_config(VIOLATION.format(cap=5000), tmp_path), output_dir=run)
    assert resumed.provenance["units"]["mechanism"]["computed"] == 0
    assert resumed.tests[0].details["sequential"] == a


def test_certify_target_stops_a_passing_audit(tmp_path: Path) -> None:
    text = (
        VIOLATION.format(cap=20_000)
        .replace("epsilon = 2.0", "epsilon = 1.0")
        .replace("round_trials = 50", "round_trials = 100\ncertify_tightness = 0.4")
    )
    result = run_audit(_config(text, tmp_path), output_dir=tmp_path / "r")
    seq = result.tests[0].details["sequential"]
    assert result.verdict == "pass"
    assert seq["stopped_because"] == "target"
    decided = seq["decided_by"]
    last = seq["path"][decided][-1]
    assert last["value"] >= seq["targets"][decided]
    assert seq["trials_used"]["negative"] < 20_000
    # the target's betting e-process ran beside the rate limits and says what it reached
    bound = next(c for c in result.comparisons if c.parameter == decided).lower
    assert last["log_evalue"] == bound.details["target_test"]["log_evalue"]
    assert bound.details["target_test"]["certified"] == (last["value"] >= seq["targets"][decided])
    assert seq["fixed_plan"]["epsilon"]["trials_per_arm"] > 0


def test_unsupported_and_misplaced_keys_are_named(tmp_path: Path) -> None:
    with pytest.raises(DpauditError, match="'round_trials' configures a sequential audit"):
        _config(VIOLATION.format(cap=100).replace('stopping = "sequential"\n', ""), tmp_path)
    learned = VIOLATION.format(cap=1000).replace(
        'name = "laplace"', 'name = "laplace"\nscore = "learned"'
    )
    with pytest.raises(DpauditError, match="score = 'learned' is fitted on a share"):
        run_audit(_config(learned, tmp_path), output_dir=tmp_path / "r")
