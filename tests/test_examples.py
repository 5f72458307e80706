"""Every shipped audit file runs as written, with the exit code it documents."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpaudit.cli import app
from dpaudit.schemas import validate_results

AUDITS = Path(__file__).resolve().parent.parent / "audits"
EXPECTED_EXIT = {"laplace-violation": 1}  # a planted false claim; every other example passes


@pytest.mark.parametrize("audit", sorted(p.stem for p in AUDITS.glob("*.toml")))
def test_shipped_audit_runs(audit: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["run", str(AUDITS / f"{audit}.toml"), "-q", "-o", str(run_dir)]
    )
    assert result.exit_code == EXPECTED_EXIT.get(audit, 0), result.output
    data = json.loads((run_dir / "results.json").read_text())
    validate_results(data)
    assert (run_dir / "report.html").is_file()
    assert data["name"] == audit
    shutil.rmtree(run_dir)
