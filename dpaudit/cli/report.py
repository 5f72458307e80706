"""``dpaudit report RUN_DIR``: render report.html again from results.json."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpaudit.cli import _library as lib
from dpaudit.cli._common import console, fail
from dpaudit.errors import DpauditError


def report_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory holding results.json.")],
) -> None:
    """Re-render RUN_DIR/report.html from RUN_DIR/results.json (exit 2 if missing/invalid)."""
    try:
        written = lib.render_report_file(run_dir)
    except DpauditError as exc:
        raise fail(exc) from None
    console.print(str(written), markup=False, soft_wrap=True)
