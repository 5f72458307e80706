"""The composite GitHub action, run locally by scripts/run_action_locally.py.

One workspace, two runs of the action on a tiny Laplace audit: first as written (every
gate check passes: exit 0), then with a gate limit the audit misses (exit 1). The gate is
not part of the units' key, so the second run has the same unit hash (the cache key) and
reuses every stored unit: what the cache gives a rerun. Every path the upload and cache
steps name must exist after each run, and the unit hash must be derived from the unit
folders the run actually stored.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from dpaudit._version import __version__

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "run_action_locally.py"
AUDIT = """
[audit]
name = "ci-laplace"
kinds = ["mechanism"]
seed = 0
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 2_000
"""
FAILING_GATE = "[gate]\nmax_auc = 0.5\n"  # Laplace ε = 1 has AUC ≈ 0.66 > 0.5


def _run_action(workdir: Path, **inputs: str) -> dict:
    args = [sys.executable, str(SCRIPT), "--workdir", str(workdir), "--json"]
    for name, value in {"install": "false", **inputs}.items():
        args += ["--input", f"{name}={value}"]
    # dpaudit and python of this environment on PATH, as setup-python would put them.
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                   os.environ.get("PATH", "")])}  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=False)
    assert done.stdout, done.stderr
    run = json.loads(done.stdout)
    assert done.returncode == run["exit_code"], done.stderr
    run["stderr"] = done.stderr
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict, Path]:
    workdir = tmp_path_factory.mktemp("ci")
    audit = workdir / "audits" / "privacy.toml"
    audit.parent.mkdir()
    audit.write_text(AUDIT)
    first = _run_action(workdir, audit="audits/privacy.toml")
    first["results"] = json.loads((workdir / "dpaudit-run" / "results.json").read_text())
    first["junit"] = ET.parse(workdir / "dpaudit-junit.xml").getroot()
    audit.write_text(AUDIT + FAILING_GATE)
    second = _run_action(workdir, audit="audits/privacy.toml")
    second["results"] = json.loads((workdir / "dpaudit-run" / "results.json").read_text())
    return first, second, workdir


def _step(run: dict, name: str) -> dict:
    (step,) = [s for s in run["steps"] if s["name"] == name]
    return step


def test_a_passing_audit_exits_0_with_every_output(runs) -> None:
    first, _, _ = runs
    assert first["exit_code"] == 0, first["stderr"]
    assert first["outputs"]["verdict"] == "pass"
    assert first["outputs"]["exit-code"] == "0"
    assert first["outputs"]["report"] == "dpaudit-run/report.html"
    assert first["missing_paths"] == []
    assert all(s["status"] in ("passed", "not-run") for s in first["steps"])
    assert "verdict: **pass** (exit code 0)" in first["summary"]
    assert first["junit"].get("failures") == "0"


def test_a_failing_gate_exits_1_and_still_leaves_every_artifact(runs) -> None:
    _, second, workdir = runs
    assert second["exit_code"] == 1, second["stderr"]
    assert second["outputs"]["verdict"] == "fail"
    assert second["outputs"]["exit-code"] == "1"
    last = _step(second, "Fail the job unless every gate check passed")
    assert (last["status"], last["exit_code"]) == ("failed", 1)
    assert _step(second, "Run the audit")["status"] == "passed"  # the uploads still run
    assert second["missing_paths"] == []
    uploaded = [
        p
        for s in second["steps"]
        if s["kind"] == "uses" and s["name"].startswith("Upload")
        for p in s["with"]["path"].split()
    ]
    assert sorted(uploaded) == sorted(
        [
            "dpaudit-junit.xml",
            "dpaudit-run/report.html",
            "dpaudit-run/results.json",
            "dpaudit-run/model-card.md",
            "dpaudit-run/privacy-registry.json",
        ]
    )
    for path in uploaded:
        assert (workdir / path).is_file(), path
    suite = ET.parse(workdir / "dpaudit-junit.xml").getroot()
    (case,) = [c for c in suite.findall("testcase") if c.get("name") == "max_auc"]
    assert case.find("failure") is not None
    card = json.loads((workdir / "dpaudit-run" / "privacy-registry.json").read_text())
    assert card["audit"]["verdict"] == "fail"


def test_the_cache_key_is_the_hash_of_the_stored_units(runs) -> None:
    first, second, workdir = runs
    units = first["results"]["provenance"]["units"]
    keys = sorted(u["key"] for u in units.values())
    want = hashlib.sha256("\n".join([__version__, *keys]).encode()).hexdigest()[:16]
    assert first["outputs"]["unit-hash"] == want
    for key in keys:
        assert (workdir / "dpaudit-run" / "units" / key).is_dir()
    restore = _step(first, "Restore the run directory")["with"]
    assert restore["key"].endswith(f"-{want}")
    assert restore["path"] == "dpaudit-run"
    assert _step(first, "Save the run directory")["with"]["key"] == restore["key"]
    # A gate change keeps the key, and the rerun computes no unit again.
    assert second["outputs"]["unit-hash"] == want
    for stats in second["results"]["provenance"]["units"].values():
        assert stats["computed"] == 0
        assert stats["reused"] == stats["total"] >= 1


def test_the_action_declares_what_the_runner_substitutes() -> None:
    spec = yaml.safe_load((ROOT / "action.yml").read_text())
    assert spec["runs"]["using"] == "composite"
    assert set(spec["inputs"]) >= {"audit", "python-version", "extra", "out-dir", "junit"}
    assert spec["inputs"]["audit"]["required"] is True
    uses = [s["uses"].split("@")[0] for s in spec["runs"]["steps"] if "uses" in s]
    assert uses == [
        "actions/setup-python",
        "actions/cache/restore",
        "actions/cache/save",
        "actions/upload-artifact",
        "actions/upload-artifact",
        "actions/upload-artifact",
    ]
    # The install step pins what constraints.txt pins, from the action's own checkout.
    (install,) = [s for s in spec["runs"]["steps"] if s.get("name") == "Install dpaudit"]
    assert '-c "$ACTION_PATH/constraints.txt"' in install["run"]


def test_the_runner_refuses_an_unknown_input(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--workdir", str(tmp_path), "--input", "colour=red"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "unknown inputs ['colour']" in done.stderr


def test_the_documented_form_runs_the_audit_given_as_an_argument(tmp_path: Path) -> None:
    """``scripts/run_action_locally.py AUDIT`` from the workspace, as the README shows: the
    script runs itself (its shebang), the audit is the ``audit`` input, the workspace is the
    current folder, install is off, and the steps find the dpaudit of the running Python."""
    (tmp_path / "audits").mkdir()
    (tmp_path / "audits" / "privacy.toml").write_text(AUDIT)
    # An activated environment: its python first on PATH, nothing else of it.
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin",
                                                  "/bin"])}  # fmt: skip
    done = subprocess.run(
        [str(SCRIPT), "audits/privacy.toml", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)
    assert (run["exit_code"], run["outputs"]["verdict"], run["missing_paths"]) == (0, "pass", [])
    assert "install = false: using the dpaudit on PATH" in done.stderr
    assert (tmp_path / "dpaudit-run" / "results.json").is_file()


def test_the_runner_refuses_two_different_audits(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "a.toml", "--input", "audit=b.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "AUDIT 'a.toml' and --input audit='b.toml' differ" in done.stderr
