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
  :class:`~dpaudit.errors.ConfigError` naming the key and the value.

:func:`locate_plugin` finds the module's file WITHOUT importing it (for the digest that
makes a changed plug-in start new work units).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpaudit.errors import ConfigError

__all__ = ["file_digest", "load_plugin", "locate_plugin", "plugin_digest", "split_spec"]


def split_spec(spec: object, *, what: str) -> tuple[str, str]:
    """``"pkg.module:function"`` → ``("pkg.module", "function")``, or a one-line error."""
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ConfigError(
            f"A user {what} must be given as 'pkg.module:function'. Got {spec!r} instead."
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

    Raises:
        ConfigError: a malformed name, a module that cannot be imported, or no callable
            of that name in it.
    """
    module_name, attr = split_spec(spec, what=what)
    _search_folder(base_dir)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"Cannot import module {module_name!r} for {what} {spec!r}: {exc}. Is it installed, "
            "or next to the audit file?"
        ) from None
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise ConfigError(f"Module {module_name!r} has no callable {attr!r} (from {spec!r}).")
    return fn


def locate_plugin(spec: str, *, base_dir: str | Path | None = None) -> Path | None:
    """The file of the module behind ``spec`` (found, not imported), or ``None``."""
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
