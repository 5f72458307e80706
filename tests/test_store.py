"""The run directory's atomic writes: file modes follow the umask, failures leave nothing."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from dpaudit import store
from dpaudit.store import RunStore, atomic_write_bytes, atomic_write_json, current_umask

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")


@pytest.fixture
def umask() -> Iterator[Callable[[int], int]]:
    """``os.umask`` for one test: the process's mask is restored afterwards."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# ------------------------------------------------------------------------------ modes


@posix_only
@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_new_file_mode_follows_the_umask(
    tmp_path: Path, umask: Callable[[int], int], mask: int, expected: int
) -> None:
    umask(mask)
    target = tmp_path / "results.json"
    atomic_write_bytes(target, b"{}\n")
    assert target.read_bytes() == b"{}\n"
    assert mode(target) == expected
    # The same mode as a plain open() gives under this umask.
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    assert mode(plain) == expected


@posix_only
def test_replacing_a_file_gives_the_umask_mode(tmp_path: Path, umask: Callable[[int], int]) -> None:
    # The old file's mode does not carry over: the new file is a new inode.
    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")
    target.chmod(0o600)
    umask(0o022)
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert mode(target) == 0o644


@posix_only
def test_unit_files_follow_the_umask(tmp_path: Path, umask: Callable[[int], int]) -> None:
    umask(0o027)
    runs = RunStore(tmp_path, "abc123")
    runs.save("unit-0", {"scores": np.arange(3.0)})
    assert mode(runs.path("unit-0")) == 0o640
    np.testing.assert_array_equal(runs.load("unit-0")["scores"], [0.0, 1.0, 2.0])
    assert runs.finished() == {"unit-0"}


@posix_only
def test_umask_is_read_without_changing_it(umask: Callable[[int], int]) -> None:
    umask(0o037)
    assert current_umask() == 0o037
    assert current_umask() == 0o037  # reading it twice changed nothing
    assert os.umask(0o037) == 0o037


@posix_only
def test_umask_fallback_without_proc(
    tmp_path: Path, umask: Callable[[int], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where /proc/self/status cannot be read (macOS, a container without /proc), the
    # os.umask round trip answers the same and leaves the mask as it was.
    real_open = open

    def no_proc(file: object, *args: object, **kwargs: object) -> object:
        if str(file) == "/proc/self/status":
            raise FileNotFoundError(file)
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", no_proc)
    umask(0o027)
    assert current_umask() == 0o027
    assert os.umask(0o027) == 0o027
    atomic_write_bytes(tmp_path / "x", b"x")
    assert mode(tmp_path / "x") == 0o640


# --------------------------------------------------------------------------- atomicity


def test_failure_mid_write_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.json"
    target.write_bytes(b"old")

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_bytes(target, b"new" * 1000)
    assert leftovers(tmp_path) == []
    assert target.read_bytes() == b"old"  # the old file is untouched


def test_interrupt_mid_write_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C (a BaseException, not an Exception) cleans up too.
    def interrupted(src: object, dst: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(store.os, "replace", interrupted)
    target = tmp_path / "units" / "h" / "unit.npz"
    with pytest.raises(KeyboardInterrupt):
        atomic_write_bytes(target, b"data")
    assert not target.exists()
    assert leftovers(target.parent) == []


def test_a_value_json_cannot_hold_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    with pytest.raises(ValueError, match="Out of range float"):
        atomic_write_json(target, {"value": float("nan")})
    assert list(tmp_path.iterdir()) == []


def test_write_creates_the_folder_and_replaces_the_file(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "results.json"
    atomic_write_json(target, {"x": 1})
    atomic_write_json(target, {"x": 2})
    assert target.read_text(encoding="utf-8") == '{\n  "x": 2\n}\n'
    assert leftovers(target.parent) == []
