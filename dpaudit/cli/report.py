"""``dpaudit report RUN_DIR``: render report.html again from results.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from dpaudit.cli import _library as lib
from dpaudit.cli._common import console, fail
from dpaudit.errors import DpauditError
from dpaudit.store import atomic_write_text


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory holding results.json.")],
) -> None:
    """Re-render RUN_DIR/report.html from RUN_DIR/results.json (exit 2 if missing/invalid)."""
    path = run_dir / "results.json"
    if not path.is_file():
        raise fail(f"no results.json in {str(run_dir)!r}; run `dpaudit run FILE -o DIR` first")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise fail(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(results, dict):
        raise fail(f"{path}: not a results object (a JSON object is expected)")
    try:
        lib.validate_results(results)
    except DpauditError as exc:
        raise fail(f"{path}: {exc}") from None
    written = run_dir / "report.html"
    atomic_write_text(written, lib.render_report(results))
    console.print(str(written), markup=False, soft_wrap=True)
