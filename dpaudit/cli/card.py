"""``dpaudit card RUN_DIR``: a model card and a registry entry for a verified run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpaudit.cli import _library as lib
from dpaudit.cli._common import out, user_code


def card_command(
    run_dir: Annotated[Path, typer.Argument(help="A finished run directory (results.json).")],
    output: Annotated[
        Path | None, typer.Option("--out", help="Where to write the card (default RUN_DIR).")
    ] = None,
) -> None:
    """Write model-card.md and privacy-registry.json for a verified run (exit 0 written,
    2 a missing, broken or tampered run directory)."""
    with user_code():
        written = lib.card_for_run(run_dir, output)
    for path in written:
        out(f"wrote {path}")
