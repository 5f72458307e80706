"""The one loader of user plug-ins given as ``"pkg.module:function"``.

An audit file names user code (a mechanism, a log density or score, a trainer, a target
factory, a reference trainer) as ``"pkg.module:function"``. Every such name is resolved
here, the same way:

- the audit file's folder is searched for the module, but AFTER every installed package:
  the folder is appended to ``sys.path``, never put first, so a ``jinja2.py`` or
  ``numpy.py`` lying next to a plug-in can never replace the library dpaudit itself uses;
- the folder is made absolute first, so a plug-in that changes the working directory
  cannot move where later plug-ins (or the run's own files) are found;
- a bad name, a missing module, or an attribute that is not callable is one
  :class:`~dpaudit.errors.ConfigError` naming the key and the value;
- a plug-in cannot decide how dpaudit exits: ``sys.exit()``, ``SystemExit``,
  ``EOFError`` (``input()`` with no stdin, as in CI), ``KeyboardInterrupt`` raised by code
  (not by a real Ctrl-C) or any other ``BaseException`` raised while it is imported or
  called becomes a :class:`PluginError` naming the plug-in (exit 2 from the CLI). A plug-in
  that kills its process (``os._exit``) is caught by the CLI, which runs audits in a child
  process it watches.

:func:`locate_plugin` finds the module's file WITHOUT importing it (for the digest that
makes a changed plug-in start new work units).

**Safe mode** (``dpaudit run --no-plugins``, ``DPAUDIT_NO_PLUGINS=1`` for every command
and Python entry): the audit file's code references are decided from the parsed file
before any import (:func:`dpaudit.config.check_safe`, fed by the schema fields marked
:class:`NamesCode`), and :func:`load_plugin` itself refuses every plug-in
(:class:`UnresolvedCode`), so a key that escaped the schemas still imports nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import io
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from dpaudit.errors import ConfigError, DpauditError, with_example

__all__ = [
    "NO_PLUGINS_ENV",
    "NamesCode",
    "PluginError",
    "UnresolvedCode",
    "file_digest",
    "guard_user_exit",
    "interrupt_handler",
    "load_plugin",
    "locate_plugin",
    "plugin_digest",
    "safe_mode",
    "safe_mode_active",
    "split_spec",
]

#: Set when a real Ctrl-C (SIGINT) arrived, by :func:`interrupt_handler`: only then is a
#: ``KeyboardInterrupt`` an interruption rather than user code raising one.
_CTRL_C = threading.Event()


class PluginError(DpauditError):
    """User code (a plug-in) tried to end or abort the run itself."""


class UnresolvedCode(ConfigError):
    """Safe mode met a code reference that the audit file's check did not decide (a key
    whose schema does not mark it :class:`NamesCode`): refused at import, a bug to fix."""


#: The environment variable that turns safe mode on for every command and Python entry.
NO_PLUGINS_ENV = "DPAUDIT_NO_PLUGINS"
#: Safe mode switched on in this process by :func:`safe_mode` (nesting counts).
_SAFE_DEPTH = [0]


def safe_mode_active() -> bool:
    """Whether safe mode is on: inside :func:`safe_mode`, or ``DPAUDIT_NO_PLUGINS=1``.

    Raises:
        ConfigError: ``DPAUDIT_NO_PLUGINS`` is set to anything but ``0`` or ``1`` (a
            misspelt value must not silently turn the protection off).
    """
    value = os.environ.get(NO_PLUGINS_ENV)
    if value is not None and value not in ("0", "1"):
        raise ConfigError(
            f"The environment variable {NO_PLUGINS_ENV} must be 0, 1 or unset. "
            f"Got {value!r} instead."
        )
    return _SAFE_DEPTH[0] > 0 or value == "1"


@contextlib.contextmanager
def safe_mode(on: bool = True) -> Iterator[None]:
    """Run the block in safe mode when ``on`` (``--no-plugins``); a no-op otherwise."""
    if not on:
        yield
        return
    _SAFE_DEPTH[0] += 1
    try:
        yield
    finally:
        _SAFE_DEPTH[0] -= 1


@dataclass(frozen=True)
class NamesCode:
    """Schema metadata: the key's value may name code (``Annotated[str, NamesCode(...)]``).

    Every such key of every schema is found by walking the models
    (:func:`dpaudit.config.code_references`), so a new key that names code is decided by
    the same rule as the old ones. A value is code unless it is one of ``builtins`` (the
    key's built-in names) or, for ``suffixes``, a path ending in one of them (a data file,
    such as a ``.skops`` transformer).

    Attributes:
        builtins: the names that select dpaudit's own code.
        suffixes: file suffixes that make the value a path, not code.
        form: ``"function"`` for ``"pkg.module:function"``, ``"type"`` for a dotted type
            name (``"pkg.module.Class"``, which a loader imports).
    """

    builtins: tuple[str, ...] = ()
    suffixes: tuple[str, ...] = ()
    form: str = "function"

    def is_code(self, value: str) -> bool:
        """Whether ``value`` of this key names code (not a built-in, not a data path)."""
        if value in self.builtins:
            return False
        return not (self.suffixes and Path(value).suffix.lower() in self.suffixes)


#: ``pkg.module:function`` with ASCII identifiers only (no spaces, no other letters).
_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
_SPEC = re.compile(rf"{_IDENTIFIER}(?:\.{_IDENTIFIER})*:{_IDENTIFIER}")
_LAST_INTERRUPT = [0.0]


def interrupt_handler(signum: int, frame: FrameType | None) -> None:
    """SIGINT handler: note the real Ctrl-C, then interrupt as Python's default does.

    A second SIGINT within a second of the first is ignored: a supervised run gets a
    terminal's Ctrl-C twice (from the terminal and from its supervisor), and the second
    must not interrupt the clean-up of the first.
    """
    now = time.monotonic()
    if _CTRL_C.is_set() and now - _LAST_INTERRUPT[0] < 1.0:
        return
    _CTRL_C.set()
    _LAST_INTERRUPT[0] = now
    signal.default_int_handler(signum, frame)


def guard_user_exit(exc: BaseException, where: str) -> BaseException:
    """What a ``BaseException`` escaping user code becomes.

    A real Ctrl-C (see :func:`interrupt_handler`) stays a ``KeyboardInterrupt``; an
    ordinary ``Exception`` (other than ``EOFError``) is returned unchanged; anything else
    (``SystemExit``, ``EOFError``, a ``KeyboardInterrupt`` raised by code,
    ``GeneratorExit``, ...) becomes a :class:`PluginError` naming ``where``.
    """
    if isinstance(exc, KeyboardInterrupt) and _CTRL_C.is_set():
        return exc
    if isinstance(exc, Exception) and not isinstance(exc, EOFError):
        return exc
    if isinstance(exc, SystemExit):
        what = f"called sys.exit({exc.code!r})" if exc.code is not None else "called sys.exit()"
    elif isinstance(exc, EOFError):
        what = "read from standard input, which is closed (EOFError)"
    else:
        what = f"raised {type(exc).__name__}"
    return PluginError(
        f"{where} {what}: user code cannot end or abort a dpaudit run, so the run stops "
        "here with exit code 2 (no results were written)"
    )


class _Guarded:
    """A plug-in callable whose exits and aborts become :class:`PluginError`.

    Every other attribute (e.g. a trainer's ``library_versions``, a property) is read
    from the plug-in itself; ``inspect.signature`` sees its signature through
    ``__wrapped__``; and it pickles (by reference to the plug-in) for worker processes.
    """

    def __init__(self, fn: Callable[..., Any], where: str) -> None:
        self.__wrapped__ = fn
        self._where = where

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.__wrapped__(*args, **kwargs)
        except BaseException as exc:
            converted = guard_user_exit(exc, self._where)
            if converted is exc:
                raise
            raise converted from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_where",):
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"<plug-in {self.__wrapped__!r}>"


def split_spec(spec: object, *, what: str) -> tuple[str, str]:
    """``"pkg.module:function"`` → ``("pkg.module", "function")``, or a one-line error.

    Module and function names must be ASCII identifiers: a non-ASCII name, a space, or a
    name Python would not accept as an identifier is refused before anything is searched.
    """
    if not isinstance(spec, str) or not _SPEC.fullmatch(spec):
        raise ConfigError(
            f"A user {what} must be given as 'pkg.module:function' (ASCII identifiers). "
            f"Got {spec!r} instead."
        )
    module_name, attr = spec.split(":")
    return module_name, attr


def _search_folder(base_dir: str | Path | None) -> None:
    """Append the audit file's folder (absolute) to ``sys.path`` if it is not there."""
    if base_dir is None:
        return
    folder = str(Path(base_dir).expanduser().resolve())
    if folder not in sys.path:
        sys.path.append(folder)  # last: installed libraries are never shadowed


def load_plugin(
    spec: str, *, base_dir: str | Path | None = None, what: str = "mechanism"
) -> Callable[..., Any]:
    """Import ``"pkg.module:function"`` and return the callable.

    Args:
        spec: the name as written in the audit file.
        base_dir: the audit file's folder, searched after the installed packages.
        what: what the callable is, for messages ("mechanism", "trainer", "[target] factory").

    Returns:
        The callable, wrapped so that an exit or abort from it becomes a
        :class:`PluginError` (its attributes, e.g. ``library_versions``, are kept).

    Raises:
        ConfigError: a malformed name, a module that cannot be imported, or no callable
            of that name in it.
        PluginError: the module tried to exit or abort while it was imported.
    """
    module_name, attr = split_spec(spec, what=what)
    if safe_mode_active():
        raise UnresolvedCode(
            f"the {what} {spec!r} is user code: safe mode (--no-plugins, "
            f"{NO_PLUGINS_ENV}=1) imports none"
        )
    _search_folder(base_dir)
    where = f"the {what} plug-in {spec!r}"
    # What the module writes to stderr while it is imported (an argparse usage text) is
    # held back: quoted in dpaudit's one line if the import fails, passed on if it works.
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"Cannot import module {module_name!r} for {what} {spec!r}: {exc}{_quoted(said)}. "
            "Is it installed, or next to the audit file?"
        ) from None
    except BaseException as exc:
        converted = guard_user_exit(exc, f"{where}, while it was imported,")
        if converted is exc:
            raise
        if said.getvalue().strip():
            if isinstance(converted, DpauditError):
                converted = with_example(
                    type(converted)(f"{converted.message}{_quoted(said)}"), *converted.example
                )
            else:
                converted = type(converted)(f"{converted}{_quoted(said)}")
        raise converted from None
    sys.stderr.write(said.getvalue())
    _check_imported_is_named(module, module_name, base_dir, f"{what} {spec!r}")
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise ConfigError(f"Module {module_name!r} has no callable {attr!r} (from {spec!r}).")
    return _Guarded(fn, where)


def end_with_parent(alive: int) -> None:
    """End this process when its supervising parent ends: a thread waits for EOF on the
    parent's ``alive`` pipe (the parent holds its write end and never writes), then kills
    this process, so a watched child (``dpaudit run``'s, a run session's) never outlives
    the process that watches it, however that one ended (``kill -9`` included)."""

    def watch() -> None:
        with contextlib.suppress(OSError):
            os.read(alive, 1)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="dpaudit-parent-watch", daemon=True).start()


@contextlib.contextmanager
def stderr_held() -> Iterator[None]:
    """Hold back what is written to ``sys.stderr`` inside the block (user code checked
    before a run: a preflight call of a mechanism or trainer): quoted in the one-line
    message of a :class:`~dpaudit.errors.DpauditError` that ends the block, passed on
    unchanged when the block ends otherwise."""
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            yield
    except DpauditError as exc:
        quoted = _quoted(said)
        if quoted:
            exc.args = (f"{exc}{quoted}", *exc.args[1:])
        raise
    except BaseException:
        sys.stderr.write(said.getvalue())
        raise
    sys.stderr.write(said.getvalue())


def _quoted(said: io.StringIO) -> str:
    """What user code wrote to stderr, as a clause of a one-line message ('' if nothing)."""
    text = " ".join(said.getvalue().split())
    if not text:
        return ""
    return f" (it wrote to stderr: {text[:300]!r}{'...' if len(text) > 300 else ''})"


def _check_imported_is_named(
    module: Any, module_name: str, base_dir: str | Path | None, what: str
) -> None:
    """Refuse to run another file's code than the one the audit file's folder holds.

    Python imports a module name once per process, and installed packages come before
    the audit file's folder: a ``plugins.loop`` imported earlier from another folder (two
    audits in one process) or an installed package of that name would otherwise run in
    place of the plug-in next to the audit file, silently. A file with the same bytes is
    the same code (a copied folder) and is accepted.
    """
    if base_dir is None:
        return
    root = Path(base_dir).expanduser().resolve()
    relative = Path(*module_name.split("."))
    here = next(
        (c for c in (root / f"{relative}.py", root / relative / "__init__.py") if c.is_file()),
        None,
    )
    origin = getattr(module, "__file__", None)
    if here is None or origin is None:
        return
    imported = Path(origin).resolve()
    if imported != here.resolve() and file_digest(imported) != file_digest(here):
        raise ConfigError(
            f"{what}: Python runs {str(imported)!r} for the module {module_name!r}, not the "
            f"file next to the audit file ({str(here)!r}); an installed package or a module "
            "imported earlier in this process has that name: give your module a name of "
            "its own"
        )


def locate_plugin(spec: str, *, base_dir: str | Path | None = None) -> Path | None:
    """The file of the module behind ``spec`` (found, not imported), or ``None``.

    Finding ``pkg.module`` imports ``pkg``: in safe mode nothing is looked for, and a
    name that is not ``pkg.module:function`` is never searched.
    """
    if not isinstance(spec, str) or not _SPEC.fullmatch(spec):
        return None
    if safe_mode_active():
        return None
    module_name = spec.partition(":")[0]
    _search_folder(base_dir)
    try:
        found = importlib.util.find_spec(module_name)
    except (ImportError, ValueError):
        return None
    if found is None or found.origin is None:
        return None
    return Path(found.origin)


def file_digest(path: Path) -> str | None:
    """SHA-256 of a file's bytes (``None`` when it is not a file): part of a unit key, so
    that a changed data file or plug-in never reuses units computed from the old one."""
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def plugin_digest(spec: str, *, base_dir: str | Path | None = None) -> str | None:
    """The digest of the module file behind a plug-in (``None`` if it cannot be found)."""
    path = locate_plugin(spec, base_dir=base_dir)
    return None if path is None else file_digest(path)
