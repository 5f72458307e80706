"""The run directory: per-unit results written atomically, so runs resume.

Layout of a run directory (``reports/<audit name>/`` by default)::

    results.json                  the finished result (written last, atomically)
    report.html                   the rendered report
    units/<config hash>/<unit>.npz   one file per finished work unit

Units live under the hash of the configuration that produced them, so a changed audit
file never reuses old units: it simply finds none of its own. A unit file appears only
by an atomic rename of a fully written temporary file, so a run killed at any moment
leaves either a whole unit or none.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, cast

import numpy as np

#: Serialises the os.umask fallback of current_umask within this process.
_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process's file-mode creation mask, read without changing it where possible.

    Linux (4.7 and later) reports it in ``/proc/self/status`` ("Umask:", octal). Elsewhere
    the only portable way is ``os.umask(0)`` followed by restoring the old value: that sets
    the process-wide mask for an instant, so a file another thread creates in that instant
    gets mode 0666 / 0777. A lock keeps our own callers from racing each other; nothing can
    protect other threads, which is why the ``/proc`` reading comes first.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0)
        os.umask(mask)
    return mask


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename.

    Readers see either the old file or the whole new one, never a part: the data goes to
    a temporary file in the same folder (same file system, so the rename is atomic), is
    flushed to disk with ``fsync``, and only then renamed over ``path``. On any failure the
    temporary file is removed and ``path`` is left as it was.

    The new file gets mode ``0o666 & ~umask``, as ``open(path, "w")`` would give it.
    ``tempfile.mkstemp`` creates its file with mode 0600 whatever the umask (so that no one
    else can read a secret temporary file); without the ``fchmod`` below, results.json and
    report.html would be readable by their owner only.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            _set_mode(f.fileno(), tmp, 0o666 & ~current_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def _set_mode(fd: int, name: str, mode: int) -> None:
    if hasattr(os, "fchmod"):  # POSIX (and Windows from Python 3.13)
        os.fchmod(fd, mode)
    else:
        os.chmod(name, mode)


def _fsync_directory(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the data itself is on disk
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")


class RunStore:
    """Finished work units of one configuration inside a run directory."""

    def __init__(self, run_dir: Path, config_hash: str) -> None:
        self.run_dir = Path(run_dir)
        self.config_hash = config_hash
        self.units_dir = self.run_dir / "units" / config_hash

    def path(self, unit: str) -> Path:
        return self.units_dir / f"{unit}.npz"

    def has(self, unit: str) -> bool:
        return self.path(unit).is_file()

    def save(self, unit: str, arrays: dict[str, np.ndarray]) -> None:
        """Store a unit's arrays atomically (``np.savez`` into memory, then rename)."""
        import io

        buffer = io.BytesIO()
        # The cast only tells mypy that the arrays' names are not savez's own keyword
        # (allow_pickle), which numpy's stub types as bool.
        np.savez(buffer, **cast(dict[str, Any], arrays))
        atomic_write_bytes(self.path(unit), buffer.getvalue())

    def load(self, unit: str) -> dict[str, np.ndarray]:
        with np.load(self.path(unit), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def finished(self) -> set[str]:
        if not self.units_dir.is_dir():
            return set()
        return {p.stem for p in self.units_dir.glob("*.npz")}
