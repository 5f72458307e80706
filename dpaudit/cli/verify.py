"""``dpaudit verify RUN_DIR``: recompute every bound from the stored units."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpaudit.cli import _library as lib
from dpaudit.cli._common import EXIT_CHECK_FAILED, out, say, user_code


def verify_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory with results.json.")],
) -> None:
    """Recompute every bound from the stored units and check results.json (exit 0 it
    matches, 1 it does not, 2 nothing to verify)."""
    with user_code():
        verified = lib.verify_result(run_dir)
    if not verified.matches:
        for line in verified.problems:
            say(f"MISMATCH {line}")
        say(
            f"{run_dir}: results.json does NOT match its stored units "
            f"({len(verified.problems)} problems)"
        )
        raise typer.Exit(EXIT_CHECK_FAILED)
    out(f"{run_dir}: results.json matches its stored units")
