"""The one run session: the path every surface takes to an audit.

``dpaudit run``, the pytest plugin (:func:`dpaudit.testing.run_checked`, the fixture and
``pytest --dpaudit`` items), the notebook's :func:`~dpaudit.notebook.audit_model` and the
MLflow evaluator all run an audit through :func:`run_session`, which does the same steps
in the same order:

1. resolve the run directory (before any user code runs, so a plug-in that changes the
   working directory cannot move it);
2. take the run directory's lock (a lock path that is a symbolic link or not a regular
   file is refused, :class:`dpaudit.store.RunLock`) and remove every artefact of the
   previous run there (``results.json``, ``report.html``, the model card and registry
   record, and the JUnit file this run will write), before any step that can fail: a run
   that then fails, or an audit file that no longer loads, leaves no verdict behind;
3. load the audit file (in safe mode its code references are decided from the parsed
   file before any import, :func:`dpaudit.config.check_safe`);
4. run the audit, user code included, in a child process that is watched: a child that
   ends without reporting (``os._exit(0)`` in a plug-in, a crash) is an unusable run,
   never a pass. The command line is already such a child (its console script watches
   it), so it runs the audit in its own process;
5. write the artefacts in one fixed order (``report.html``, then ``results.json``, which
   marks a finished run); a supervised run's passing result counts only once
   :func:`dpaudit.audit.verify_run` accepts the ``results.json`` of this run.

A surface adds its own artefacts (a JUnit file, a card, MLflow metrics) only after
:func:`run_session` returned a result.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit.audit import default_run_dir, run_audit, verify_run
from dpaudit.config import AuditConfig, load_config
from dpaudit.errors import DpauditError
from dpaudit.plugins import end_with_parent, guard_user_exit, safe_mode, safe_mode_active
from dpaudit.results import AuditResult
from dpaudit.store import LockRefused, RunDirectoryBusy, RunLock, remove_outputs

__all__ = ["SessionError", "call_watched", "clear_previous", "run_session"]

#: The child's reply pipe and its parent's alive pipe (file descriptor numbers, "r,a"), in
#: its environment.
_REPLY = "DPAUDIT_SESSION_FD"


class SessionError(DpauditError):
    """The session could not produce a result of this run (exit 2 of ``dpaudit run``)."""


@dataclass(frozen=True)
class _Request:
    """What the watched child runs: a loaded configuration into a run directory."""

    config: AuditConfig
    run_dir: Path
    safe: bool


def clear_previous(run_dir: Path, *, junit: Path | None = None) -> list[Path]:
    """Under the run directory's lock, remove every artefact of the previous run.

    ``junit`` is removed too when it is a JUnit file dpaudit wrote (a test suite named
    ``dpaudit.…``); any other file there is left alone (writing it later fails instead).

    Raises:
        DpauditError: the lock is held by another run, or is a link or not a file.
    """
    if not run_dir.is_dir():
        removed: list[Path] = []
    else:
        try:
            with RunLock(run_dir):
                removed = remove_outputs(run_dir)
        except RunDirectoryBusy as exc:
            raise SessionError(
                f"the run directory {str(run_dir)!r} is in use by another dpaudit run "
                f"({exc.holder}); wait for it to finish, or give this run another --output-dir"
            ) from None
        except LockRefused as exc:
            raise SessionError(str(exc)) from None
    if junit is not None and _our_junit(junit):
        junit.unlink()
        removed.append(junit)
    return removed


def _our_junit(path: Path) -> bool:
    """Whether ``path`` is a regular file holding a JUnit suite dpaudit wrote."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            head = f.read(512)
    except OSError:
        return False
    return b'<testsuite name="dpaudit.' in head


def run_session(
    audit: str | Path | AuditConfig,
    *,
    output_dir: str | Path | None = None,
    safe: bool = False,
    supervise: bool = True,
    junit: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> AuditResult:
    """Run an audit through the one session (see the module docstring for the steps).

    Args:
        audit: an audit file, or a loaded configuration.
        output_dir: the run directory (default ``reports/<audit name>/``).
        safe: safe mode (``--no-plugins``); ``DPAUDIT_NO_PLUGINS=1`` turns it on too.
        supervise: run the audit in a watched child process (every surface but the
            command line, whose console script is already that watcher).
        junit: the JUnit file the caller will write (an old one is removed first).
        progress, log: progress and note callbacks (in this process only).

    Returns:
        The run's :class:`~dpaudit.results.AuditResult`.

    Raises:
        DpauditError: unusable input, a run directory in use, user code that ended the
            child, or a supervised result that ``dpaudit verify`` does not accept.
    """
    safe = safe or safe_mode_active()
    given = None if output_dir is None else Path(output_dir).resolve()
    if given is not None:
        clear_previous(given, junit=junit)
    with safe_mode(safe):
        config = audit if isinstance(audit, AuditConfig) else load_config(audit)
    run_dir = given if given is not None else default_run_dir(config).resolve()
    if given is None:
        clear_previous(run_dir, junit=junit)
    if not supervise:
        with safe_mode(safe):
            return run_audit(config, output_dir=run_dir, progress=progress, log=log)
    result = _run_child(_Request(config, run_dir, safe))
    if result.verdict == "pass":
        with safe_mode(safe):
            problems = verify_run(run_dir, config=config)
        if problems:
            remove_outputs(run_dir)
            raise SessionError(
                f"the results.json of this run in {str(run_dir)!r} does not verify against "
                f"its stored units ({problems[0]}); nothing passed"
            )
    return result


def _run_child(request: _Request) -> AuditResult:
    """Run ``request`` in a child process; its result, or its one-line error."""
    read, write = os.pipe()
    # The child holds the read end of `alive`: when this process ends, however it ends
    # (kill -9 included), the child reads EOF and ends too.
    alive_read, alive_write = os.pipe()
    env = {**os.environ, _REPLY: f"{write},{alive_read}"}
    try:
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "dpaudit.session"],
                stdin=subprocess.PIPE,
                env=env,
                pass_fds=(write, alive_read),
            )
        finally:
            os.close(write)
            os.close(alive_read)
        assert child.stdin is not None  # stdin=PIPE
        with os.fdopen(read, "rb") as pipe:
            try:
                child.stdin.write(pickle.dumps(request))
                child.stdin.close()
            except BrokenPipeError:
                pass
            reply = pipe.read()
        status = child.wait()
    finally:
        os.close(alive_write)
    try:
        outcome, value = pickle.loads(reply) if reply else (None, None)
    except (pickle.UnpicklingError, EOFError, ValueError):
        outcome, value = None, None
    if outcome == "result" and isinstance(value, AuditResult):
        return value
    if outcome == "error":
        raise SessionError(str(value))
    remove_outputs(request.run_dir)
    how = f"was killed by signal {-status}" if status < 0 else f"ended with status {status}"
    raise SessionError(
        f"the audit's process {how} without finishing the audit (user code that called "
        "os._exit() or crashed the interpreter); nothing was decided, the finished units "
        f"are kept in {str(request.run_dir)!r}"
    )


def _child_main() -> int:
    """The watched child: read a request on stdin, run it, reply on the pipe."""
    fd, alive = (int(x) for x in os.environ.pop(_REPLY).split(","))
    end_with_parent(alive)
    request: _Request = pickle.loads(sys.stdin.buffer.read())
    reply: tuple[str, Any]
    try:
        with safe_mode(request.safe):
            reply = ("result", run_audit(request.config, output_dir=request.run_dir))
    except DpauditError as exc:
        reply = ("error", str(exc))
    except OSError as exc:
        where = exc.filename or request.run_dir
        reply = ("error", f"{where}: {exc.strerror or exc}")
    except BaseException as exc:
        converted = guard_user_exit(exc, "user code run by this audit (a plug-in or model)")
        if converted is exc and not isinstance(exc, Exception):
            raise
        reply = ("error", str(converted) if converted is not exc else _unexpected(exc))
    with os.fdopen(fd, "wb") as pipe:
        pipe.write(pickle.dumps(reply))
    return 0


def call_watched(fn: Callable[..., Any], *args: Any, what: str) -> Any:
    """``fn(*args)`` run in a forked child that is watched, for user code a surface must
    call on an object it was handed (an MLflow model's ``predict``).

    The child sends back the value (pickled) or the one-line error; a child that ends
    without sending either (``os._exit(0)`` in the user's code, a crash, a signal) is a
    :class:`SessionError`, never a value. A :class:`~dpaudit.errors.DpauditError` raised in
    the child is raised again here with its class and message.

    Args:
        fn: the function (it and ``args`` need not pickle: the child is a fork).
        what: who runs, for the messages ("the MLflow model's predict").

    Raises:
        SessionError: the child ended without an answer; DpauditError: the error it sent.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's lines run in the fork (its reply is tested)
        try:
            os.close(read)
            reply: tuple[str, Any]
            try:
                reply = ("value", fn(*args))
            except DpauditError as exc:
                reply = ("error", (type(exc), str(exc)))
            except BaseException as exc:
                converted = guard_user_exit(exc, what)
                text = str(converted) if converted is not exc else _unexpected(exc)
                reply = ("error", (SessionError, text))
            try:
                data = pickle.dumps(reply)
            except Exception as exc:
                data = pickle.dumps(("error", (SessionError, f"{what} gave {exc}")))
            with os.fdopen(write, "wb") as pipe:
                pipe.write(data)
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    outcome: str | None = None
    value: Any = None
    with contextlib.suppress(
        pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError
    ):
        outcome, value = pickle.loads(data) if data else (None, None)
    if outcome == "value":
        return value
    if outcome == "error":
        kind, text = value
        try:
            error = kind(text) if issubclass(kind, DpauditError) else SessionError(text)
        except TypeError:  # an error class with other arguments: its message all the same
            error = SessionError(text)
        raise error
    code = os.waitstatus_to_exitcode(status)
    how = f"was killed by signal {-code}" if code < 0 else f"ended with status {code}"
    raise SessionError(
        f"the process that ran {what} {how} without answering (user code that called "
        "os._exit() or crashed the interpreter); nothing was decided"
    )


def _unexpected(exc: BaseException) -> str:
    return f"unexpected {type(exc).__name__}: {exc} (in a plug-in of yours or a bug in dpaudit)"


if __name__ == "__main__":
    sys.exit(_child_main())
