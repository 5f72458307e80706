"""A unit's round trip through the store: what is written is what is read, each read from
disk is checked against the unit's digest, and a unit just written is handed to the audit
without being read or hashed again."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from dpaudit import store
from dpaudit.store import (
    DIGEST_KEY,
    RunStore,
    StoredOutputs,
    UnitRejected,
    read_back,
    unit_digest,
)


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "negative": rng.normal(size=(500, 10)),
        "positive": rng.normal(size=(500, 10)).astype(np.float32),
        "fortran": np.asfortranarray(rng.normal(size=(30, 7))),
        "scalar": np.array(3),
        "empty": np.zeros((0, 4)),
        "bits": np.array([True, False, True]),
        "words": np.array(["ab", "c"]),
        "big_endian": np.arange(5, dtype=">i4"),
    }


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].shape == b[name].shape, name
        assert a[name].flags.f_contiguous == b[name].flags.f_contiguous, name
        np.testing.assert_array_equal(a[name], b[name])


def test_a_unit_reads_back_as_numpy_reads_it_with_its_digest(tmp_path: Path) -> None:
    runs = RunStore(tmp_path, "key")
    arrays = _arrays()
    digest = runs.save("u", arrays)
    assert digest == unit_digest("key", "u", arrays)
    got, stored = RunStore(tmp_path, "key").load_verified("u")
    assert stored == digest
    with np.load(runs.path("u"), allow_pickle=False) as z:
        reference = {k: z[k] for k in z.files if k != DIGEST_KEY}
    _same(got, reference)
    _same(got, arrays)


def test_a_compressed_unit_is_read_by_numpy_and_checked(tmp_path: Path) -> None:
    # np.savez never compresses; a compressed member (written by hand) is still read
    runs = RunStore(tmp_path, "key")
    arrays = _arrays()
    digest = unit_digest("key", "u", arrays)
    runs.units_dir.mkdir(parents=True)
    np.savez_compressed(runs.path("u"), **arrays, **{DIGEST_KEY: np.array(digest)})
    with zipfile.ZipFile(runs.path("u")) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    got, stored = runs.load_verified("u")
    assert stored == digest
    _same(got, arrays)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda b: b[: len(b) // 2], "unreadable"),
        (lambda b: b"PK" + b[2:100], "unreadable"),
        # one byte of the first array's data changed: the zip still reads, the digest not
        (
            lambda b: b[:2000] + bytes([b[2000] ^ 0xFF]) + b[2001:],
            "its arrays do not match the digest",
        ),
    ],
)
def test_a_damaged_unit_is_rejected(tmp_path: Path, damage, reason: str) -> None:  # type: ignore[no-untyped-def]
    runs = RunStore(tmp_path, "key")
    runs.save("u", {"x": np.arange(1000.0)})
    path = runs.path("u")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(UnitRejected) as caught:
        runs.load_verified("u")
    assert caught.value.reason.startswith(reason)


def test_a_unit_of_python_objects_is_refused_when_saved(tmp_path: Path) -> None:
    runs = RunStore(tmp_path, "key")
    with pytest.raises(ValueError, match="unit u holds an array of Python objects"):
        runs.save("u", {"x": np.array([{}, None], dtype=object)})
    assert not runs.has("u")


def test_units_just_written_are_handed_over_without_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = RunStore(tmp_path, "key")
    arrays = {f"u{i}": {"x": np.arange(10.0 * (i + 1))} for i in range(3)}
    digests = {u: runs.save(u, a) for u, a in arrays.items()}
    reads: list[str] = []
    real = RunStore.load_verified

    def counted(self: RunStore, unit: str) -> tuple[dict[str, np.ndarray], str]:
        reads.append(unit)
        return real(self, unit)

    monkeypatch.setattr(RunStore, "load_verified", counted)
    found, kept = read_back(runs, list(arrays))
    assert reads == []
    assert found == digests
    assert all(kept[u]["x"] is arrays[u]["x"] for u in arrays)  # the arrays hashed
    # taken once: a second read-back reads the disk, and finds the same
    found_again, kept_again = read_back(runs, list(arrays))
    assert reads == ["u0", "u1", "u2"]
    assert found_again == digests
    assert all(np.array_equal(kept_again[u]["x"], arrays[u]["x"]) for u in arrays)


def test_over_the_budget_only_digests_are_kept_and_every_read_is_checked(
    tmp_path: Path,
) -> None:
    # 80 + 160 bytes fit in 300, 240 more do not: no arrays are held, as read_back does
    runs = RunStore(tmp_path, "key", keep_bytes=300)
    digests = {f"u{i}": runs.save(f"u{i}", {"x": np.arange(10.0 * (i + 1))}) for i in range(3)}
    assert all(held is None for _, _, held in runs._written.values())
    found, kept = read_back(runs, list(digests), keep_bytes=300)
    assert found == digests
    assert kept == {}
    outputs = StoredOutputs(runs, found, cache_bytes=0)
    np.testing.assert_array_equal(outputs["u2"]["x"], np.arange(30.0))
    # a unit changed on disk after it was written is never trusted
    other = RunStore(tmp_path / "other", "key")
    other.save("u2", {"x": np.arange(30.0) + 1})
    runs.path("u2").write_bytes(other.path("u2").read_bytes())
    with pytest.raises(OSError, match="stored unit u2 was replaced while the run read it"):
        outputs["u2"]


def test_a_unit_is_written_straight_to_its_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the writer is handed to atomic_write_bytes (temporary file, fsync, rename): no copy
    # of the unit's bytes is made in memory first
    seen: list[object] = []
    real = store.atomic_write_bytes

    def spy(path: Path, data: object) -> None:
        seen.append(data)
        real(path, data)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "atomic_write_bytes", spy)
    RunStore(tmp_path, "key").save("u", {"x": np.arange(4.0)})
    assert len(seen) == 1
    assert callable(seen[0])
    assert not list(tmp_path.rglob("*.tmp"))
