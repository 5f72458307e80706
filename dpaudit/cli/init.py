"""``dpaudit init``: write a commented example audit file that runs as written."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated

import typer

from dpaudit.cli._common import console, fail
from dpaudit.kinds import kind_names


def init_command(
    kind: Annotated[
        str, typer.Option("--kind", "-k", help="An audit kind (dpaudit init --kind x lists them).")
    ] = "mechanism",
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write it.")] = Path(
        "audit.toml"
    ),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented example audit file that runs as written."""
    kinds = kind_names()
    if kind not in kinds:
        raise fail(f"--kind must be one of {', '.join(kinds)}. Got {kind!r} instead.")
    if output.exists() and not force:
        raise fail(f"{output} exists; pass --force to overwrite it")
    text = resources.files("dpaudit").joinpath("examples", f"{kind}.toml").read_text("utf-8")
    output.write_text(text, encoding="utf-8")
    console.print(f"wrote {output}; run it with: dpaudit run {output}", markup=False)
