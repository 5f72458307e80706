"""The run directory: per-unit results written atomically, so runs resume.

Layout of a run directory (``reports/<audit name>/`` by default)::

    results.json                  the finished result (written last, atomically)
    report.html                   the rendered report
    units/<config hash>/<unit>.npz   one file per finished work unit

Units live under the hash of the configuration that produced them, so a changed audit
file never reuses old units: it simply finds none of its own. A unit file appears only
by an atomic rename of a fully written temporary file, so a run killed at any moment
leaves either a whole unit or none.

Every unit file carries a SHA-256 digest of its arrays (names, types, shapes, bytes) and
of its key (the configuration hash and the unit's name), written with them. A unit whose
arrays do not match its digest (edited, truncated, copied from another run), or that
cannot be read at all, is never trusted: :meth:`RunStore.verified` names it and moves it
aside, and the audit computes it again. The digests a result was computed from are
recorded in ``results.json`` (``dpaudit verify`` checks both). The digest is not a
signature: it catches corruption and edits made without dpaudit, not a forger who
recomputes it; a release pipeline keeps the run directory where only it can write.

The executors that run an audit's missing units and hand them to this store are
:mod:`dpaudit.store.executors` (formerly ``dpaudit.executors``).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import struct
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, cast

import numpy as np

try:  # POSIX; the run directory's lock is a no-op without it (Windows)
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

#: Serialises the os.umask fallback of current_umask within this process.
_UMASK_LOCK = threading.Lock()

_T = TypeVar("_T")


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


def atomic_write_bytes(path: Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename.

    ``data`` is the bytes, or a function that writes them to the open temporary file
    (a unit's arrays go straight to the file, with no copy of them in memory first).

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
            if callable(data):
                data(f)
            else:
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


#: The entry of a unit file that holds its digest (never a unit's own array name).
DIGEST_KEY = "__dpaudit_digest__"


def unit_digest(key: str, unit: str, arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the unit's key and name and each array's name, type, shape and bytes."""
    h = hashlib.sha256()
    h.update(f"dpaudit-unit\0{key}\0{unit}\0".encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(a.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


#: The entry of a unit file that names its arrays stored as ``int8`` (:func:`narrowed`).
NARROWED_KEY = "__dpaudit_narrowed__"
#: Values compared at a time when a unit's array is checked for narrowing (kept in cache).
_NARROW_CHUNK = 1 << 16


def narrow_losslessly(array: np.ndarray) -> np.ndarray | None:
    """A float64 array as ``int8`` when that keeps every bit (every value an integer in
    [−128, 127], and no −0.0), else ``None``.

    Mechanisms that release few-valued outputs (⊤/⊥ answers, counts, indices) return
    them as float64; stored as ``int8`` their unit files, digests and fsyncs are an
    eighth of the size. The check converts each chunk to ``int8`` and back and compares
    the 64-bit patterns, so it is exact (NaN, ±inf, fractions, −0.0 and values out of
    range all fail it); it stops at the first chunk that fails, which for continuous
    outputs is the first few values.
    """
    if array.dtype != np.float64 or array.size == 0 or not array.flags.c_contiguous:
        return None
    flat = array.reshape(-1)
    out = np.empty(array.shape, dtype=np.int8)
    narrow = out.reshape(-1)
    back = np.empty(min(flat.size, _NARROW_CHUNK))
    start, step = 0, 1024  # a small first chunk: continuous outputs fail at once
    while start < flat.size:
        stop = min(start + step, flat.size)
        with np.errstate(invalid="ignore", over="ignore"):
            np.copyto(narrow[start:stop], flat[start:stop], casting="unsafe")
        np.copyto(back[: stop - start], narrow[start:stop])
        same = back[: stop - start].view(np.uint64) == flat[start:stop].view(np.uint64)
        if not same.all():
            return None
        start, step = stop, _NARROW_CHUNK
    return out


def narrowed(arrays: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A unit's arrays as stored: each float64 array that :func:`narrow_losslessly`
    turns into ``int8`` so, the others as they are, and (if any was narrowed) their
    names under :data:`NARROWED_KEY`. The digest is computed over these, so the record
    of which arrays were narrowed is checked with the arrays themselves."""
    stored: dict[str, np.ndarray] = {}
    names = []
    for name, value in arrays.items():
        small = narrow_losslessly(np.asarray(value))
        if small is None:
            stored[name] = value
        else:
            stored[name] = small
            names.append(name)
    if names:
        stored[NARROWED_KEY] = np.array(sorted(names))
    return stored


def widened(stored: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays :func:`narrowed` stored, as they were (each narrowed one float64 again).

    Raises:
        ValueError: the record of narrowed arrays is not a list of this unit's ``int8``
            arrays.
    """
    names = stored.pop(NARROWED_KEY, None)
    if names is None:
        return stored
    if names.ndim != 1 or names.dtype.kind != "U" or names.size == 0:
        raise ValueError("its record of narrowed arrays is malformed")
    for name in names.tolist():
        array = stored.get(name)
        if array is None or array.dtype != np.int8:
            raise ValueError(f"its record of narrowed arrays names {name!r}, not an int8 array")
        stored[name] = array.astype(np.float64)
    return stored


class UnitRejected(Exception):
    """A stored unit that failed its integrity check; ``reason`` says why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


#: Bytes of unit arrays a run keeps in memory once it has them (the units it has just
#: written, and the units its bounds read): up to this, a unit is neither read back from
#: disk nor decoded twice; above it, units are read one at a time. A mechanism audit's
#: learned score holds all its outputs at once up to 2¹⁸ trials per arm (4 MB per output
#: coordinate and arm), so the budget keeps such an audit's units for up to 32 coordinates.
KEEP_BYTES = 256 << 20


class RunStore:
    """Finished work units of one configuration inside a run directory.

    The units this store has just written are remembered, with their digests and, while
    together they fit in ``keep_bytes``, their arrays, until :func:`read_back` takes them:
    the arrays the digest was computed from are the ones the audit then uses, so they are
    neither read from disk nor hashed again (every later read from disk is checked against
    that digest).
    """

    def __init__(self, run_dir: Path, config_hash: str, *, keep_bytes: int = KEEP_BYTES) -> None:
        self.run_dir = Path(run_dir)
        self.config_hash = config_hash
        self.units_dir = self.run_dir / "units" / config_hash
        self.keep_bytes = keep_bytes
        # unit → (digest, its arrays' bytes, the arrays or None once over keep_bytes)
        self._written: dict[str, tuple[str, int, dict[str, np.ndarray] | None]] = {}
        self._written_bytes = 0

    def path(self, unit: str) -> Path:
        return self.units_dir / f"{unit}.npz"

    def has(self, unit: str) -> bool:
        return self.path(unit).is_file()

    def save(self, unit: str, arrays: dict[str, np.ndarray]) -> str:
        """Store a unit's arrays and their digest atomically (an ``np.savez`` file,
        :func:`write_npz`, into a temporary file, fsync, then rename); returns the digest.

        Float64 arrays of small integers are stored as ``int8`` (:func:`narrowed`) and
        read back as they were; the digest is that of the arrays as stored."""
        for reserved in (DIGEST_KEY, NARROWED_KEY):
            if reserved in arrays:
                raise ValueError(f"a unit may not hold an array named {reserved!r}")
        if any(np.asarray(a).dtype.hasobject for a in arrays.values()):
            # a unit is read without pickles: one that holds objects could never be read
            raise ValueError(f"unit {unit} holds an array of Python objects")
        stored = narrowed(arrays)
        digest = unit_digest(self.config_hash, unit, stored)
        entries = {**stored, DIGEST_KEY: np.array(digest)}
        atomic_write_bytes(self.path(unit), lambda f: write_npz(f, entries))
        size = sum(np.asarray(a).nbytes for a in arrays.values())
        self._written_bytes += size
        if self._written_bytes <= self.keep_bytes:
            self._written[unit] = (digest, size, dict(arrays))
        else:  # over the budget: keep the digests only (as read_back would)
            self._written = {u: (d, n, None) for u, (d, n, _) in self._written.items()}
            self._written[unit] = (digest, size, None)
        return digest

    def take_written(self, unit: str) -> tuple[str, int, dict[str, np.ndarray] | None] | None:
        """The digest, size and (within ``keep_bytes``) arrays of a unit this store has
        just written, forgotten once taken; ``None`` for any other unit."""
        found = self._written.pop(unit, None)
        if not self._written:
            self._written_bytes = 0
        return found

    def load_verified(self, unit: str) -> tuple[dict[str, np.ndarray], str]:
        """A stored unit's arrays and digest, checked.

        Raises:
            UnitRejected: the file cannot be read as a unit, has no digest, or its arrays
                do not match its digest.
        """
        path = self.path(unit)
        try:
            arrays = _read_npz(path)
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, struct.error) as exc:
            raise UnitRejected(path, f"unreadable ({type(exc).__name__}: {exc})") from None
        stored = arrays.pop(DIGEST_KEY, None)
        if stored is None or stored.shape != () or stored.dtype.kind != "U":
            raise UnitRejected(path, "it carries no digest (written without dpaudit?)")
        if str(stored) != unit_digest(self.config_hash, unit, arrays):
            raise UnitRejected(
                path, "its arrays do not match the digest written with them (edited or corrupt)"
            )
        try:
            return widened(arrays), str(stored)
        except ValueError as exc:
            raise UnitRejected(path, str(exc)) from None

    def load(self, unit: str) -> dict[str, np.ndarray]:
        """A stored unit's arrays (checked: :meth:`load_verified`)."""
        return self.load_verified(unit)[0]

    def reject(self, unit: str) -> Path:
        """Move a unit that failed its check aside (kept for inspection, never read)."""
        path = self.path(unit)
        aside = path.with_name(f"{path.name}.rejected")
        os.replace(path, aside)
        return aside

    def finished(self) -> set[str]:
        if not self.units_dir.is_dir():
            return set()
        return {p.stem for p in self.units_dir.glob("*.npz")}


def read_back(
    store: RunStore, units: Iterable[str], *, keep_bytes: int = KEEP_BYTES
) -> tuple[dict[str, str], dict[str, Mapping[str, np.ndarray]]]:
    """Read units just stored back from the run directory and check them.

    Returns each unit's digest, and the arrays of the units read while together they fit
    in ``keep_bytes`` (for :class:`StoredOutputs` ``preloaded``: a unit the audit has
    read back is not decoded again for its bounds; beyond the budget none is kept, so a
    kind that reads its units one at a time still holds one unit at a time).

    Raises:
        UnitRejected: a unit does not read back as it was written.
    """
    digests: dict[str, str] = {}
    kept: dict[str, Mapping[str, np.ndarray]] = {}
    size = 0
    for unit in units:
        written = store.take_written(unit)
        held: Mapping[str, np.ndarray] | None
        if written is not None:
            # written by this store just now: its digest is that of the arrays it wrote,
            # which it still holds while they fit in its own budget; one it no longer
            # holds is not read back (a later read from disk is checked against the
            # digest), since its units together are over the budget anyway
            digests[unit], n, held = written
        else:  # written by another process (a worker): read and checked here
            held, digests[unit] = store.load_verified(unit)
            n = sum(a.nbytes for a in held.values())
        size += n
        if size > keep_bytes:
            kept.clear()
        elif held is not None:
            kept[unit] = held
    return digests, kept


def write_npz(file: BinaryIO, arrays: Mapping[str, Any]) -> None:
    """``np.savez(file, **arrays)``, the same bytes, without a copy of any array.

    ``np.savez`` writes each array into its zip member through ``tobytes`` (a member is
    not a real file), a copy of every byte in fresh memory; here each member receives
    the array's own memory. The zip file, each member's ``.npy`` header (format 1.0, or
    2.0 for a header too long for it) and the data's order are those ``np.savez`` writes.
    """
    with zipfile.ZipFile(file, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            array = np.asanyarray(value)
            if array.dtype.hasobject:
                raise ValueError(f"array {name!r} holds Python objects")
            header = np.lib.format.header_data_from_array_1_0(array)
            # Fortran order: the transpose is C-contiguous, the bytes in that order; else
            # C order (a copy only if the array is not contiguous)
            data = array.T if header["fortran_order"] else np.ascontiguousarray(array)
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                try:
                    np.lib.format.write_array_header_1_0(member, header)
                except ValueError:  # the header does not fit format 1.0
                    np.lib.format.write_array_header_2_0(member, header)
                if data.size:
                    member.write(data.reshape(-1).view(np.uint8).data)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an ``np.savez`` file, read straight into place.

    ``np.load`` reads each stored member through :mod:`zipfile` in small chunks, checks its
    CRC-32 and copies it again; a unit's members are stored uncompressed (``np.savez``),
    so each array is read with one ``readinto`` at its offset. Nothing is trusted from
    it: the caller checks every array against the unit's SHA-256 digest. A member that
    is not a plain stored ``.npy`` (compressed, or anything unusual) is read by numpy.

    Raises:
        OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, struct.error: the
            file is not a readable ``.npz``.
    """
    arrays: dict[str, np.ndarray] = {}
    with open(path, "rb") as f, zipfile.ZipFile(f) as z:
        for info in z.infolist():
            if not info.filename.endswith(".npy"):
                raise ValueError(f"member {info.filename!r} is not an array")
            name = info.filename[: -len(".npy")]
            if name in arrays:
                raise ValueError(f"array {name!r} is stored twice")
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                with z.open(info) as member:
                    arrays[name] = np.lib.format.read_array(member, allow_pickle=False)
                continue
            f.seek(info.header_offset)
            local = f.read(30)
            if len(local) != 30 or local[:4] != b"PK\x03\x04":
                raise ValueError(f"member {info.filename!r} has no local header")
            name_length, extra_length = struct.unpack("<HH", local[26:30])
            start = info.header_offset + 30 + name_length + extra_length
            f.seek(start)
            version = np.lib.format.read_magic(f)
            shape, fortran, dtype = (
                np.lib.format.read_array_header_1_0(f, max_header_size=10_000)
                if version == (1, 0)
                else np.lib.format.read_array_header_2_0(f, max_header_size=10_000)
            )
            if dtype.hasobject:
                raise ValueError(f"array {name!r} holds Python objects")
            data = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
            if (
                data.nbytes
                and f.readinto(data.reshape(-1, order="A").view(np.uint8).data) != data.nbytes
            ):
                raise EOFError(f"array {name!r} is truncated")
            if f.tell() - start != info.file_size:
                raise ValueError(f"array {name!r} does not fill its member")
            arrays[name] = data
    return arrays


class StoredOutputs(Mapping[str, Mapping[str, np.ndarray]]):
    """A kind's stored units as a read-only mapping, unit name → arrays, read on demand.

    A kind's ``comparisons`` and ``summarise`` receive this instead of every unit held in
    memory at once: a kind that reads its units one at a time (the ``mechanism`` kind at
    10⁸ trials per arm) needs memory for one unit only. When the units' files are small
    together (``cache_bytes``), each is kept after its first read. Every read is checked
    against the digest the audit verified before it started, so a unit that changes
    while the run reads it stops the run instead of entering a bound.

    ``preloaded`` hands over units the audit has just read and checked against the same
    digests (the read-back after a unit is stored), so that a cached unit is decoded once
    per run. :meth:`memo` keeps a value derived from the units (a kind's reading of them,
    which both ``comparisons`` and ``summarise`` need) under the same rule as the units.
    """

    def __init__(
        self,
        store: RunStore,
        digests: Mapping[str, str],
        *,
        cache_bytes: int = KEEP_BYTES,
        preloaded: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    ) -> None:
        self._store = store
        self._digests = dict(digests)
        size = sum(store.path(u).stat().st_size for u in self._digests)
        self._cache: dict[str, Mapping[str, np.ndarray]] | None = (
            {} if size <= cache_bytes else None
        )
        if self._cache is not None and preloaded:
            self._cache.update({u: a for u, a in preloaded.items() if u in self._digests})
        self._memo: dict[Hashable, Any] = {}

    def memo(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """``compute()``, once per ``key`` while the units are kept in memory.

        The units behind this mapping never change (every read is checked against the
        digests fixed when it was made), so a value computed from them stays right. It is
        kept only when the units themselves are cached: a derived value may hold their
        arrays, and a kind too large to cache reads its units one at a time.
        """
        if self._cache is None:
            return compute()
        if key not in self._memo:
            self._memo[key] = compute()
        return cast(_T, self._memo[key])

    def __getitem__(self, unit: str) -> Mapping[str, np.ndarray]:
        if self._cache is not None and unit in self._cache:
            return self._cache[unit]
        if unit not in self._digests:
            raise KeyError(unit)
        try:
            arrays, digest = self._store.load_verified(unit)
        except UnitRejected as exc:
            raise OSError(
                f"stored unit {unit} changed while the run read it: {exc.reason}"
            ) from None
        if digest != self._digests[unit]:
            raise OSError(f"stored unit {unit} was replaced while the run read it")
        if self._cache is not None:
            self._cache[unit] = arrays
        return arrays

    def __iter__(self) -> Iterator[str]:
        return iter(self._digests)

    def __len__(self) -> int:
        return len(self._digests)


# ------------------------------------------------------------------ the run directory's lock


#: The lock file in a run directory: held (``flock``) by the one run writing there.
LOCK_NAME = ".dpaudit.lock"


class RunDirectoryBusy(OSError):
    """Another dpaudit run holds the run directory's lock; ``holder`` describes it."""

    def __init__(self, run_dir: Path, holder: str) -> None:
        super().__init__(f"{run_dir} is in use by another dpaudit run ({holder})")
        self.run_dir, self.holder = run_dir, holder


class RunLock:
    """An exclusive lock on a run directory while a run writes it.

    The lock is an advisory ``flock`` on ``.dpaudit.lock``, which also records who holds
    it (process, host, start time, command) for the message the second run prints. The
    operating system releases a ``flock`` when its process ends, however it ends (kill -9
    included), so a lock left by a killed run is never stale: the next run simply takes
    it. A run that finds the lock held waits up to ``wait`` seconds for it (a run that is
    just ending), then gives up. Where ``fcntl`` does not exist (Windows) the lock is a
    no-op.

    The lock file is opened without following a symbolic link, and must be a regular
    file: a link (dangling or not) or a folder, pipe or device in its place is refused
    (:class:`LockRefused`), so a planted link can neither empty another file nor create
    one outside the run directory.
    """

    def __init__(self, run_dir: Path, *, wait: float = 5.0) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self.wait = wait
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        if fcntl is None:  # pragma: no cover - Windows
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = _open_lock(self.path)
        deadline = time.monotonic() + self.wait
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raw = os.pread(fd, 4096, 0)
                        holder = raw.decode("utf-8", "replace").strip() or "unknown"
                        raise RunDirectoryBusy(self.path.parent, holder) from None
                    time.sleep(0.05)
        except BaseException:
            os.close(fd)
            raise
        started = datetime.now(UTC).isoformat(timespec="seconds")
        who = f"pid {os.getpid()} on {socket.gethostname()} since {started}: {' '.join(sys.argv)}"
        os.ftruncate(fd, 0)
        os.pwrite(fd, who.encode("utf-8", "replace")[:4000], 0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None


class LockRefused(OSError):
    """The run directory's lock path is a symbolic link or not a regular file."""


def _open_lock(path: Path) -> int:
    """Open (or create) the lock file without following a link; refuse anything else."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    if path.is_symlink():
        raise LockRefused(f"{path} is a symbolic link; the run directory's lock must be a file")
    try:
        fd = os.open(path, flags, 0o666 & ~current_umask())
    except OSError as exc:
        raise LockRefused(
            f"{path} cannot be the run directory's lock ({exc.strerror}); remove it"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockRefused(f"{path} is not a regular file; the run directory's lock must be one")
    return fd


#: Every file a finished run leaves in its run directory besides its units: the result,
#: its report, and the card and registry record written from them (``dpaudit card``).
PREVIOUS_ARTEFACTS = ("results.json", "report.html", "model-card.md", "privacy-registry.json")


def remove_outputs(run_dir: Path) -> list[Path]:
    """Remove a previous run's artefacts (:data:`PREVIOUS_ARTEFACTS`) and any temporary
    file a killed run left (``.*.tmp``), so that nothing in the folder can be taken for
    the result of the run now starting. Returns what was removed. Call with the lock held."""
    removed = []
    candidates = [*(run_dir / name for name in PREVIOUS_ARTEFACTS), *run_dir.glob(".*.tmp")]
    units = run_dir / "units"
    if units.is_dir():
        candidates += list(units.glob("*/.*.tmp"))
    for path in candidates:
        if path.is_file() or path.is_symlink():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
