"""``dpaudit validate FILE``: check an audit file without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpaudit.cli._common import NO_PLUGINS, out, user_code
from dpaudit.config import validate_file


def validate_command(
    file: Annotated[Path, typer.Argument(help="The audit file (TOML).")],
    no_plugins: Annotated[bool, NO_PLUGINS] = False,
) -> None:
    """Check an audit file without running it (exit 0 valid, 2 invalid).

    It runs the same checks as ``run`` before any work: plug-ins import, data and brought
    models load. With ``--no-plugins`` it imports and opens nothing the file names and
    refuses plug-ins and paths outside the file's folder.
    """
    with user_code():
        checked = validate_file(file, safe=no_plugins)
    for line in checked.size_notes:
        out(line)
    mode = "; safe mode: no user code imported" if checked.safe else ""
    out(f"{file}: valid ({', '.join(checked.kinds)}; config hash {checked.config_hash}{mode})")
