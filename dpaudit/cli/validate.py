"""``dpaudit validate FILE``: check an audit file without running it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from dpaudit.cli._common import NO_PLUGINS, out, user_code
from dpaudit.config import check_runnable, load_config, size_notes
from dpaudit.plugins import safe_mode, safe_mode_active


def validate_command(
    file: Annotated[Path, typer.Argument(help="The audit file (TOML).")],
    no_plugins: Annotated[bool, NO_PLUGINS] = False,
) -> None:
    """Check an audit file without running it (exit 0 valid, 2 invalid).

    It runs the same checks as ``run`` before any work: plug-ins import, data and brought
    models load. With ``--no-plugins`` it imports and opens nothing the file names and
    refuses plug-ins and paths outside the file's folder.
    """
    no_plugins = no_plugins or safe_mode_active()
    with user_code(), safe_mode(no_plugins):
        config = load_config(file)
        if not no_plugins:
            check_runnable(config)
    for line in size_notes(config):
        out(line)
    mode = "; safe mode: no user code imported" if no_plugins else ""
    out(
        f"{file}: valid ({', '.join(config.audit.kinds)}; config hash {config.config_hash()}{mode})"
    )
