"""What every command shares: the consoles, the exit codes, one-line errors, and the
conversion of whatever user code raises into the exit-code contract."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console

from dpaudit.errors import DpauditError
from dpaudit.plugins import guard_user_exit
from dpaudit.safe_text import one_line

EXIT_CODES_HELP = (
    "Exit codes: 0 every gate check passed; 1 a gate check failed; 2 unusable input or "
    "environment (one line says which file, key or resource); 130 interrupted."
)

# No emoji codes and no markup in what users wrote: ":train:" in a trainer's name stays text.
err_console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
console = Console(highlight=False, soft_wrap=True, emoji=False)

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

NO_PLUGINS = typer.Option(
    "--no-plugins",
    help="Safe mode for untrusted audit files: import no user code (plug-ins), unpickle "
    "nothing, touch no path outside the audit file's folder (also DPAUDIT_NO_PLUGINS=1, "
    "which every command honours).",
)


def fail(message: str | DpauditError) -> typer.Exit:
    """Print one error line to stderr and return the exit to raise (code 2).

    The message is made one safe line (control characters shown as escapes, cut to a
    readable length): it may echo a value from the audit file or a plug-in's text. An
    error that carries an example (``DpauditError.example``, dpaudit's own text) has its
    lines printed under it, indented, each a safe line too.
    """
    print_error(message)
    return typer.Exit(EXIT_BAD_INPUT)


def print_error(message: str | DpauditError) -> None:
    """The error line of :func:`fail` (and the example lines of an error with one)."""
    if isinstance(message, DpauditError):
        err_console.print(f"error: {one_line(message.message)}", markup=False)
        for line in message.example:
            err_console.print(f"    {one_line(line)}", markup=False)
    else:
        err_console.print(f"error: {one_line(message)}", markup=False)


def say(line: str) -> None:
    """One safe line on stderr (progress notes, failed checks, mismatches)."""
    err_console.print(one_line(line), markup=False)


def out(line: str) -> None:
    """One safe line on stdout, as text (never markup)."""
    console.print(one_line(line), markup=False)


@contextmanager
def user_code(run_dir: Path | None = None) -> Iterator[None]:
    """Turn what user code can throw at a command into the exit-code contract.

    Inside, dpaudit runs plug-ins, brought models and data readers. Whatever they raise
    ends as exit 2 with one line (a :class:`DpauditError` with its own message, an
    ``OSError`` naming the file, ``SystemExit`` / ``EOFError`` / a ``KeyboardInterrupt``
    raised by code as "user code cannot end a run", a dead worker process), except a real
    Ctrl-C, which is exit 130 and says the finished units are kept.
    """
    kept = f"every finished unit is kept in {run_dir}; " if run_dir is not None else ""
    try:
        yield
    except DpauditError as exc:
        raise fail(exc) from None
    except OSError as exc:  # disk full, permissions, ... while the run was under way
        where = exc.filename or run_dir or "the run"
        raise fail(
            f"{where}: {exc.strerror or exc}; {kept}fix this, then run the same command again"
        ) from None
    except typer.Exit:
        raise
    except BaseException as exc:
        # A dead worker of a process pool: its module is loaded whenever one can exist, so
        # a command that runs no pool (--help, validate) need not import multiprocessing.
        pool = sys.modules.get("concurrent.futures.process")
        if pool is not None and isinstance(exc, pool.BrokenProcessPool):
            raise fail(
                f"a worker process died while computing units (user code may have called "
                f"os._exit() or crashed the interpreter); {kept}the same command resumes"
            ) from None
        converted = guard_user_exit(exc, "user code run by this audit (a plug-in or model)")
        if isinstance(converted, KeyboardInterrupt):
            say(f"interrupted: {kept}run the same command again to resume")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if converted is not exc:
            shown = converted if isinstance(converted, DpauditError) else str(converted)
            raise fail(shown) from None
        raise


def duration(seconds: float) -> str:
    """A time span as people read it: ``0.3 s``, ``42 s``, ``17 min``, ``2.5 h``."""
    seconds = max(0.0, seconds)
    if seconds < 9.5:
        return f"{seconds:.1g} s" if seconds < 1 else f"{seconds:.0f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
