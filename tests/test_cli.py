"""The command line through Typer's CliRunner: exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpaudit.cli import app
from dpaudit.schemas import validate_results

runner = CliRunner()
AUDITS = Path(__file__).resolve().parent.parent / "audits"

GOOD = """
[audit]
name = "small-laplace"
kinds = ["mechanism"]
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 4000
"""

MALFORMED = {
    "unknown top-level key": (
        "[audit]\nname='a'\nkinds=['mechanism']\n[mechanism]\nname='laplace'\nepsilon=1.0\n[bogus]\nx=1\n",
        r"unknown key 'bogus'",
    ),
    "unknown nested key": (
        GOOD + "epslon = 2\n",
        r"unknown key 'mechanism.epslon'; allowed keys: name,",
    ),
    "delta 2": (
        GOOD.replace('kinds = ["mechanism"]', 'kinds = ["mechanism"]\ndelta = 2'),
        r"'audit.delta'.*less than 1.*got 2",
    ),
    "confidence 1.5": (
        GOOD.replace('kinds = ["mechanism"]', 'kinds = ["mechanism"]\nconfidence_level = 1.5'),
        r"'audit.confidence_level'",
    ),
    "missing module": (
        GOOD.replace('"laplace"', '"no_such_pkg.mod:fn"') + "[mechanism.claim]\nepsilon = 1.0\n",
        r"Cannot import module 'no_such_pkg.mod'",
    ),
    "unknown mechanism": (
        GOOD.replace('"laplace"', '"exponential"'),
        r"unknown mechanism 'exponential'; allowed: laplace, gaussian",
    ),
    "wrong type": (
        GOOD.replace("trials = 4000", 'trials = "many"'),
        r"'mechanism.trials'.*got 'many'",
    ),
    "missing name": (
        GOOD.replace('name = "small-laplace"\n', ""),
        r"missing required key 'audit.name'",
    ),
    "kind without table": ("[audit]\nname='a'\nkinds=['mechanism']\n", r"\[mechanism\] is missing"),
    "not TOML": ("[audit\nname=", r"not valid TOML"),
    "laplace without noise": (
        GOOD.replace("epsilon = 1.0\n", ""),
        r"needs exactly one of 'epsilon' or 'scale'",
    ),
    "empty claim": (GOOD + "[mechanism.claim]\ndelta = 0.1\n", r"a claim needs 'epsilon'"),
    "unknown kind": (
        GOOD.replace('kinds = ["mechanism"]', 'kinds = ["mechanism", "telepathy"]'),
        r"'audit.kinds.1'",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_audit_files_exit_2_with_one_line(case: str, tmp_path: Path) -> None:
    text, pattern = MALFORMED[case]
    f = tmp_path / "bad.toml"
    f.write_text(text)
    for command in (["run", str(f), "-o", str(tmp_path / "run")], ["validate", str(f)]):
        result = runner.invoke(app, command)
        assert result.exit_code == 2, (case, result.output)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, lines
        assert "Traceback" not in result.output
        import re

        assert re.search(pattern, lines[0]), (pattern, lines[0])
    assert not (tmp_path / "run" / "results.json").exists()  # never a half-written result


def test_missing_file_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(tmp_path / "nope.toml")])
    assert result.exit_code == 2
    assert "audit file not found" in result.stderr


def test_consistent_mechanism_exits_0_and_writes_results(tmp_path: Path) -> None:
    f = tmp_path / "ok.toml"
    f.write_text(GOOD)
    junit = tmp_path / "checks.xml"
    result = runner.invoke(app, ["run", str(f), "-o", str(tmp_path / "run"), "--junit", str(junit)])
    assert result.exit_code == 0, result.output
    assert "verdict: pass" in result.stdout
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    validate_results(data)
    assert data["verdict"] == "pass"
    assert data["privacy_verdict"] == "consistent"
    assert 'failures="0"' in junit.read_text()


def test_shipped_violation_example_exits_1_with_reason(tmp_path: Path) -> None:
    # audits/laplace-violation.toml claims ε = 0.5 and runs Laplace noise for ε = 2.
    junit = tmp_path / "checks.xml"
    result = runner.invoke(
        app,
        [
            "run",
            str(AUDITS / "laplace-violation.toml"),
            "-o",
            str(tmp_path),
            "-q",
            "--junit",
            str(junit),
        ],
    )
    assert result.exit_code == 1
    assert "FAIL fail_on_violation: epsilon lower bound" in result.stderr
    # the largest violation names its claim: ε, or the Laplace curve the claim declares
    assert "exceeds the claimed " in result.stderr
    assert "upper bound 0.5 in laplace mechanism" in result.stderr
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["privacy_verdict"] == "violation"
    assert "<failure" in junit.read_text()


def test_validate_good_file(tmp_path: Path) -> None:
    f = tmp_path / "ok.toml"
    f.write_text(GOOD)
    result = runner.invoke(app, ["validate", str(f)])
    assert result.exit_code == 0
    assert "valid (mechanism; config hash" in result.stdout


@pytest.mark.parametrize("name", sorted(p.stem for p in AUDITS.glob("*.toml")))
def test_shipped_audit_files_validate(name: str) -> None:
    # Every shipped audit: validate runs run's checks before any work, and passes.
    result = runner.invoke(app, ["validate", str(AUDITS / f"{name}.toml")])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("kind", ["mechanism", "membership", "attribute", "dpsgd"])
def test_init_writes_an_example_that_runs(kind: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the run directory defaults to ./reports/<name>/
    result = runner.invoke(app, ["init", "--kind", kind, "-o", "audit.toml"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "audit.toml").read_text()
    assert text.startswith("# A dpaudit audit file")
    assert runner.invoke(app, ["validate", "audit.toml"]).exit_code == 0
    run = runner.invoke(app, ["run", "audit.toml", "-q"])
    assert run.exit_code == 0, run.output
    assert list((tmp_path / "reports").glob("*/results.json"))


def test_init_refuses_to_overwrite_and_unknown_kind(tmp_path: Path) -> None:
    target = tmp_path / "audit.toml"
    target.write_text("keep me")
    result = runner.invoke(app, ["init", "-o", str(target)])
    assert result.exit_code == 2
    assert "exists; pass --force" in result.stderr
    assert target.read_text() == "keep me"
    bad = runner.invoke(app, ["init", "--kind", "telepathy", "-o", str(tmp_path / "x.toml")])
    assert bad.exit_code == 2
    assert "--kind must be one of mechanism, membership, attribute, dpsgd" in bad.stderr
