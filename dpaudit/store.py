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
from pathlib import Path
from typing import Any

import numpy as np


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
        np.savez(buffer, **arrays)
        atomic_write_bytes(self.path(unit), buffer.getvalue())

    def load(self, unit: str) -> dict[str, np.ndarray]:
        with np.load(self.path(unit), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def finished(self) -> set[str]:
        if not self.units_dir.is_dir():
            return set()
        return {p.stem for p in self.units_dir.glob("*.npz")}
