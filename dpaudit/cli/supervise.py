"""The console script's supervision: commands that run user code run in a child process.

User code that kills its process (``os._exit`` in a plug-in, a crash of the interpreter,
a signal) cannot report an exit code of its own choosing: the parent watches the child,
and a child that ends without reporting is exit 2 with one line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from dpaudit.cli._common import EXIT_BAD_INPUT, err_console
from dpaudit.safe_text import ASCII_ERRORS

#: Commands that run user code: the console script runs them in a child process it
#: watches, so that user code that kills its process (``os._exit``) is still reported.
SUPERVISED = ("run", "validate", "plan", "verify", "card")
CHILD = "DPAUDIT_SUPERVISED_FD"


def ascii_if_needed() -> None:
    """Streams that cannot encode the field's letters write them by name (ε → eps), so a
    run never fails after its work because of the terminal's encoding."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "ascii"
        try:
            "εμδσ≥−…".encode(encoding)
        except (UnicodeEncodeError, LookupError):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors=ASCII_ERRORS)


def run_supervised(argv: list[str]) -> int:
    """Run ``dpaudit ARGV`` in a child process and return the exit code to use.

    The child reports the exit code it chose through a pipe just before it exits. A child
    that ends without reporting (``os._exit`` in a plug-in, a crash of the interpreter, a
    signal) did not finish its command: that is exit 2 with one line, never the child's
    own code (``os._exit(0)`` must not read as "every gate check passed").
    """
    read, write = os.pipe()
    # The child holds the read end of `alive`: when this process ends, however it ends
    # (kill -9 included), the child reads EOF and ends too, as one process would.
    alive_read, alive_write = os.pipe()
    env = {**os.environ, CHILD: f"{write},{alive_read}"}
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: object) -> None:
        # A terminal's Ctrl-C reaches both processes; a SIGINT sent to this one alone
        # (kill -INT) is passed on. The child ignores a second one that arrives at once.
        if child is not None:
            child.send_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, forward)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "dpaudit.cli", *argv],
            env=env,
            pass_fds=(write, alive_read),
        )
        os.close(write)
        os.close(alive_read)
        with os.fdopen(read, "rb") as pipe:
            reported = pipe.read()
        status = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        os.close(alive_write)
    if reported.strip().isdigit():
        return int(reported)
    how = f"was killed by signal {-status}" if status < 0 else f"ended with status {status}"
    err_console.print(
        f"error: the dpaudit process {how} without finishing its command (an uncaught error "
        "shown above, or user code that called os._exit() or crashed the interpreter); "
        "nothing was decided, the finished units are kept and the same command resumes",
        markup=False,
    )
    return EXIT_BAD_INPUT


def child_fds() -> tuple[int, int] | None:
    """In a supervised child: (the fd to report the exit code on, the parent's alive fd)."""
    value = os.environ.get(CHILD)
    if value is None:
        return None
    try:
        report, alive = (int(x) for x in value.split(","))
    except ValueError:
        return None
    return report, alive


def report_exit(code: int) -> None:
    """In a supervised child, tell the parent which exit code this process chose."""
    fds = child_fds()
    if fds is None:
        return
    try:
        os.write(fds[0], str(code).encode())
        os.close(fds[0])
    except OSError:
        pass
