"""The ``dpaudit`` command line: a thin Typer app over the public API.

Each command is a module of this package that parses its options, calls one library
function that returns a result object, and prints it: ``run``, ``validate``, ``account``,
``plan``, ``verify``, ``card``, ``report``, ``init``. The library functions are imported
on first use (:mod:`dpaudit.cli._library`): ``--help``, ``--version``, ``init`` and
``validate`` load neither torch, dp-accounting nor scipy's statistics. The console
script runs the commands that execute user code in a watched child process
(:mod:`dpaudit.cli.supervise`).

Exit codes are a contract (README, ``--help``): 0 every gate check passed; 1 a gate check
failed; 2 unusable input or environment (a bad or unreadable file, a missing resource, an
unavailable device or scheduler, an unwritable output), with one line naming it and no
traceback; 130 interrupted (Ctrl-C), with a line saying what was kept. Nothing else exits 1.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from dpaudit._lazy import lazy_exports
from dpaudit._version import __version__
from dpaudit.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    console,
    err_console,
    fail,
    print_error,
)
from dpaudit.cli.account import account_command
from dpaudit.cli.card import card_command
from dpaudit.cli.init import init_command
from dpaudit.cli.plan import plan_command
from dpaudit.cli.progress import PlainProgress
from dpaudit.cli.report import report_command
from dpaudit.cli.run import run_command
from dpaudit.cli.supervise import (
    CHILD,
    SUPERVISED,
    ascii_if_needed,
    child_fds,
    report_exit,
    run_supervised,
)
from dpaudit.cli.validate import validate_command
from dpaudit.cli.verify import verify_command
from dpaudit.errors import DpauditError
from dpaudit.plugins import end_with_parent, interrupt_handler, safe_mode_active
from dpaudit.safe_text import one_line

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CHECK_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "SUPERVISED",
    "PlainProgress",
    "app",
    "console",
    "err_console",
    "fail",
    "main",
    "write_junit",
]

# The JUnit writer loads when used (it needs xml.etree): ``from dpaudit.cli import write_junit``.
__getattr__, __dir__ = lazy_exports(__name__, {"write_junit": "dpaudit.cli.junit"})

if TYPE_CHECKING:
    from dpaudit.cli.junit import write_junit

app = typer.Typer(
    name="dpaudit",
    help="Audit differential privacy: attacks, empirical lower bounds, accountant upper bounds.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        console.print(f"dpaudit {__version__}", markup=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """dpaudit: audit differential privacy in machine learning."""


# The commands, in the order --help lists them.
app.command("run")(run_command)
app.command("validate")(validate_command)
app.command("account")(account_command)
app.command("plan")(plan_command)
app.command("verify")(verify_command)
app.command("card")(card_command)
app.command("report")(report_command)
app.command("init")(init_command)


def main() -> None:
    """Console-script entry point."""
    ascii_if_needed()
    try:
        safe_mode_active()  # a misspelt DPAUDIT_NO_PLUGINS is one line, for every command
    except DpauditError as exc:
        print_error(exc)
        sys.exit(EXIT_BAD_INPUT)
    argv = sys.argv[1:]
    if argv and argv[0] in SUPERVISED and CHILD not in os.environ and hasattr(os, "pipe"):
        sys.exit(run_supervised(argv))
    fds = child_fds()
    if fds is not None:
        end_with_parent(fds[1])
    code = _main()
    report_exit(code)
    sys.exit(code)


def _main() -> int:
    """Run the app in this process; the exit code it chose."""
    # dp-accounting's RDP code logs every order it drops while calibrating noise; the
    # accountant's answer is what matters on a terminal.
    logging.getLogger("absl").setLevel(logging.ERROR)
    signal.signal(signal.SIGINT, interrupt_handler)
    try:
        app()
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return EXIT_OK
        if isinstance(code, int):
            return code
        err_console.print(one_line(code), markup=False)
        return EXIT_BAD_INPUT
    except DpauditError as exc:  # a user mistake that escaped a command: one line, exit 2
        print_error(exc)
        return EXIT_BAD_INPUT
    except Exception as exc:
        # Exit 1 means "a gate check failed": a crash (in a plug-in, or a bug in dpaudit)
        # must never read as that. One line, exit 2; the traceback on request.
        if os.environ.get("DPAUDIT_TRACEBACK"):
            raise
        err_console.print(
            one_line(
                f"error: unexpected {type(exc).__name__}: {exc} (in a plug-in of yours or a "
                "bug in dpaudit; set DPAUDIT_TRACEBACK=1 to see where)"
            ),
            markup=False,
        )
        return EXIT_BAD_INPUT
    return EXIT_OK
