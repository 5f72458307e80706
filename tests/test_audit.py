"""Runs: determinism, resumption after SIGKILL, config changes, parallel workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dpaudit.audit import run_audit
from dpaudit.config import load_config
from dpaudit.schemas import validate_results

SLOW_PLUGIN = """
import time
import numpy as np

def slow_laplace(data, *, rng, size):
    time.sleep(0.15)  # make each unit slow enough to be killed between units
    return float(np.sum(data)) + rng.laplace(0.0, 1.0, size)
"""

SLOW_AUDIT = """
[audit]
name = "slow"
kinds = ["mechanism"]
seed = 7
[mechanism]
name = "slow_plugin:slow_laplace"
trials = 24000
[mechanism.claim]
epsilon = 1.0
[execution]
unit_size = 1000
"""


def _write(tmp_path: Path, text: str, name: str = "audit.toml") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


def _bounds(results: dict) -> list[tuple]:
    return [(b["parameter"], b["lower"]["value"], b["upper"]) for b in results["bounds"]]


def _units(result, kind: str) -> dict[str, int]:
    """The unit counts of one kind (without its store key and digests)."""
    return {k: result.provenance["units"][kind][k] for k in ("total", "reused", "computed")}


def test_killed_run_resumes_and_matches_uninterrupted(tmp_path: Path) -> None:
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    audit = _write(tmp_path, SLOW_AUDIT)
    killed_dir = tmp_path / "killed"
    exe = Path(sys.executable).parent / "dpaudit"
    proc = subprocess.Popen([str(exe), "run", str(audit), "-o", str(killed_dir), "-q"])
    units_glob = killed_dir / "units"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = list(units_glob.glob("*/*.npz")) if units_glob.exists() else []
        if len(done) >= 5:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished_before = len(list(units_glob.glob("*/*.npz")))
    assert 5 <= finished_before < 24, finished_before
    assert not (killed_dir / "results.json").exists()
    # a torn temporary file (".<unit>.npz.<random>.tmp") may remain; it is never read as a unit

    resumed = run_audit(audit, output_dir=killed_dir)
    assert _units(resumed, "mechanism") == {
        "total": 24,
        "reused": finished_before,
        "computed": 24 - finished_before,
    }
    fresh = run_audit(audit, output_dir=tmp_path / "fresh")
    assert fresh.provenance["units"]["mechanism"]["computed"] == 24
    assert _bounds(resumed.to_dict()) == _bounds(fresh.to_dict())


def test_changed_config_never_reuses_units(tmp_path: Path) -> None:
    text = """
[audit]
name = "c"
kinds = ["mechanism"]
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 4000
[execution]
unit_size = 1000
"""
    run_dir = tmp_path / "run"
    first = run_audit(_write(tmp_path, text), output_dir=run_dir)
    again = run_audit(_write(tmp_path, text), output_dir=run_dir)
    changed = run_audit(
        _write(tmp_path, text.replace("epsilon = 1.0", "epsilon = 2.0")), output_dir=run_dir
    )
    assert first.provenance["units"]["mechanism"]["computed"] == 4
    assert again.provenance["units"]["mechanism"]["reused"] == 4
    assert _units(changed, "mechanism") == {"total": 4, "reused": 0, "computed": 4}
    assert len(list((run_dir / "units").iterdir())) == 2  # one folder per unit key


MECHANISM = """
[audit]
name = "reuse"
kinds = ["mechanism"]
confidence_level = 0.95
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 4000
[execution]
unit_size = 1000
"""


@pytest.mark.parametrize(
    "change",
    [
        "[gate]\nmax_epsilon_lower_bound = 0.5\nfail_on_violation = false",
        "[report]\nhtml = false",
        "[execution]\nunit_size = 1000\nworkers = 2\ndevice = 'cpu'",
    ],
)
def test_gate_report_and_execution_changes_reuse_every_unit(tmp_path: Path, change: str) -> None:
    # The unit key covers only what changes a unit's outputs (docs/design.md, "The run
    # directory"): the gate, the report and where units run (all but unit_size, which cuts
    # the work) do not.
    run_dir = tmp_path / "run"
    first = run_audit(_write(tmp_path, MECHANISM), output_dir=run_dir)
    text = MECHANISM.replace("[execution]\nunit_size = 1000\n", "") + change + "\n"
    if "unit_size" not in text:
        text += "[execution]\nunit_size = 1000\n"
    again = run_audit(_write(tmp_path, text, "changed.toml"), output_dir=run_dir)
    assert _units(first, "mechanism")["computed"] == 4
    assert _units(again, "mechanism") == {"total": 4, "reused": 4, "computed": 0}
    assert (
        first.provenance["units"]["mechanism"]["key"]
        == again.provenance["units"]["mechanism"]["key"]
    )
    assert _bounds(first.to_dict()) == _bounds(again.to_dict())


MEMBERSHIP = """
[audit]
name = "m"
kinds = ["membership", "attribute"]
seed = 1
confidence_level = {c}
delta = {delta}
[data]
dataset = "statsmodels:fair"
sensitive = "rate_marriage"
audited_size = 200
[model]
kind = "logistic"
[training]
epochs = 2
batch_size = 32
[training.dp]
target_epsilon = 2.0
[target]
variants = ["plain", "dp"]
[membership]
attacks = ["loss"]
[attribute]
"""


def test_membership_confidence_and_delta_changes_reuse_every_trained_model(
    tmp_path: Path,
) -> None:
    # Units store scores, coins and records only; every bound comes after the store, so
    # a new confidence level or δ re-measures the same trained targets.
    run_dir = tmp_path / "run"
    first = run_audit(_write(tmp_path, MEMBERSHIP.format(c=0.95, delta=1e-5)), output_dir=run_dir)
    again = run_audit(
        _write(tmp_path, MEMBERSHIP.format(c=0.9, delta=1e-6), "b.toml"), output_dir=run_dir
    )
    for kind in ("membership", "attribute"):
        assert _units(first, kind)["computed"] == 2
        assert _units(again, kind) == {"total": 2, "reused": 2, "computed": 0}
    in_verdict = [c for c in again.comparisons if c.in_verdict]
    assert in_verdict
    assert all(c.lower.confidence_level == pytest.approx(0.9) for c in in_verdict)
    assert all(c.lower.delta == 1e-6 for c in again.comparisons if c.parameter == "epsilon")
    # the accountant's ε is re-accounted at the new δ: larger for a smaller δ
    first_upper = max(c.upper for c in first.comparisons if c.upper is not None)
    again_upper = max(c.upper for c in again.comparisons if c.upper is not None)
    assert again_upper > first_upper
    assert len(first.provenance["data_hash"]) == 64


def test_workers_give_the_same_result(tmp_path: Path) -> None:
    text = """
[audit]
name = "w"
kinds = ["mechanism"]
seed = 3
[mechanism]
name = "gaussian"
mu = 1.0
trials = 6000
[execution]
unit_size = 1000
workers = {w}
"""
    one = run_audit(_write(tmp_path, text.format(w=1), "a.toml"), output_dir=tmp_path / "a")
    two = run_audit(_write(tmp_path, text.format(w=2), "b.toml"), output_dir=tmp_path / "b")
    # workers is part of the config (hash differs) but never of the random streams
    assert _bounds(one.to_dict()) == _bounds(two.to_dict())


def test_results_json_round_trips_and_has_provenance(tmp_path: Path) -> None:
    text = """
[audit]
name = "rt"
kinds = ["mechanism"]
[mechanism]
name = "randomized-response"
p = 0.75
trials = 5000
"""
    result = run_audit(_write(tmp_path, text), output_dir=tmp_path / "run")
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert data == json.loads(result.to_json())
    validate_results(data)  # the documented, versioned schema
    prov = data["provenance"]
    assert prov["config_hash"] == load_config(tmp_path / "audit.toml").config_hash()
    assert prov["libraries"]["torch"].startswith("2.13.0")
    assert data["config_text"] == text
    # ln 3 is RR's guarantee; μ from pure DP: −2Φ⁻¹(1/(1 + 3)) = 1.349
    uppers = {b["parameter"]: b["upper"] for b in data["bounds"] if b["in_verdict"]}
    assert uppers["epsilon"] == pytest.approx(np.log(3))
    assert uppers["mu"] == pytest.approx(1.3490, abs=1e-4)


def test_too_few_trials_is_a_clear_error(tmp_path: Path) -> None:
    from dpaudit.errors import InsufficientTrialsError

    text = (
        "[audit]\nname='few'\nkinds=['mechanism']\n"
        "[mechanism]\nname='laplace'\nepsilon=1.0\ntrials=8\n"
    )
    with pytest.raises(InsufficientTrialsError, match="needed even for a perfect attack"):
        run_audit(_write(tmp_path, text), output_dir=tmp_path / "run")


DPSGD_CSV = """
[audit]
name = "csv"
kinds = ["dpsgd"]
[dpsgd]
dataset = "csv:data.csv"
label = "y"
trainer = "dpgd"
trials = 20
[dpsgd.training]
epochs = 2
[dpsgd.training.dp]
noise_multiplier = 1.0
"""


def test_a_changed_data_file_never_reuses_units(tmp_path: Path) -> None:
    # The unit key covers the bytes of a csv/parquet dataset, not only its name.
    rng = np.random.default_rng(0)
    rows = ["a,b,y"] + [f"{a:.3f},{b:.3f},{int(a > 0)}" for a, b in rng.normal(size=(40, 2))]
    (tmp_path / "data.csv").write_text("\n".join(rows) + "\n")
    audit = _write(tmp_path, DPSGD_CSV)
    run_dir = tmp_path / "run"
    first = run_audit(audit, output_dir=run_dir, write=False)
    same = run_audit(audit, output_dir=run_dir, write=False)
    (tmp_path / "data.csv").write_text("\n".join([rows[0], *rows[2:]]) + "\n")  # one row less
    changed = run_audit(audit, output_dir=run_dir, write=False)
    assert _units(same, "dpsgd")["reused"] == _units(first, "dpsgd")["total"]
    assert _units(changed, "dpsgd")["reused"] == 0
    assert changed.provenance["units"]["dpsgd"]["key"] != first.provenance["units"]["dpsgd"]["key"]


def test_a_changed_user_mechanism_never_reuses_units(tmp_path: Path) -> None:
    plugin = tmp_path / "my_mech.py"
    plugin.write_text("def m(data, *, rng, size):\n    return data[0] + rng.laplace(0, 1, size)\n")
    audit = _write(
        tmp_path,
        '[audit]\nname = "u"\nkinds = ["mechanism"]\n[mechanism]\nname = "my_mech:m"\n'
        "trials = 1000\n[mechanism.claim]\nepsilon = 1.0\n",
    )
    first = run_audit(audit, output_dir=tmp_path / "r", write=False)
    plugin.write_text("def m(data, *, rng, size):\n    return data[0] + rng.laplace(0, 2, size)\n")
    changed = run_audit(audit, output_dir=tmp_path / "r", write=False)
    assert _units(changed, "mechanism")["reused"] == 0
    assert (
        changed.provenance["units"]["mechanism"]["key"]
        != first.provenance["units"]["mechanism"]["key"]
    )
