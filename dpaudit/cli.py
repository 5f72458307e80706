"""The ``dpaudit`` command line: a thin Typer app over the public API.

Exit codes: 0 every gate check passed, 1 a check failed, 2 unusable input.
User mistakes (any :class:`~dpaudit.errors.DpauditError`) print one line, no traceback.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from dpaudit.errors import DpauditError

app = typer.Typer(
    name="dpaudit",
    help="Audit differential privacy: attacks, empirical lower bounds, accountant upper bounds.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True, highlight=False)

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2


def fail(message: str) -> typer.Exit:
    """Print one error line to stderr and return the exit to raise (code 2)."""
    err_console.print(f"error: {message}", markup=False)
    return typer.Exit(EXIT_BAD_INPUT)


@app.callback()
def _root() -> None:
    """dpaudit: audit differential privacy in machine learning."""


def main() -> None:
    """Console-script entry point."""
    try:
        app()
    except DpauditError as exc:  # a user mistake that escaped a command: one line, exit 2
        err_console.print(f"error: {exc}", markup=False)
        sys.exit(EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()
