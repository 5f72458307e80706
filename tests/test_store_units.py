"""A unit's round trip through the store: what is written is what is read, each read from
disk is checked against the unit's digest, and a unit just written is handed to the audit
without being read or hashed again."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The units read from disk from now on (``RunStore.load_verified``), in order."""
    reads: list[str] = []
    real = RunStore.load_verified

    def counted(self: RunStore, unit: str) -> tuple[dict[str, np.ndarray], str]:
        reads.append(unit)
        return real(self, unit)

    monkeypatch.setattr(RunStore, "load_verified", counted)
    return reads


def test_units_just_written_are_handed_over_without_a_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = RunStore(tmp_path, "key")
    arrays = {f"u{i}": {"x": np.arange(10.0 * (i + 1))} for i in range(3)}
    digests = {u: runs.save(u, a) for u, a in arrays.items()}
    reads = _count_reads(monkeypatch)
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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 80 + 160 bytes fit in 300, 240 more do not: no arrays are held, as read_back does
    runs = RunStore(tmp_path, "key", keep_bytes=300)
    digests = {f"u{i}": runs.save(f"u{i}", {"x": np.arange(10.0 * (i + 1))}) for i in range(3)}
    assert all(held is None for _, _, held in runs._written.values())
    reads = _count_reads(monkeypatch)
    found, kept = read_back(runs, list(digests), keep_bytes=300)
    assert found == digests
    assert kept == {}
    assert reads == []  # the digests written are known: nothing is read back to keep
    monkeypatch.undo()
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


@pytest.mark.filterwarnings("ignore:Stored array in format 2.0:UserWarning")
def test_a_unit_file_is_the_bytes_numpy_savez_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``write_npz`` writes what ``np.savez`` writes, byte for byte, for arrays in C and
    Fortran order, strided, empty, boolean, small integers and the digest's 0-d string,
    and for a header too long for the .npy format 1.0."""
    import io
    import time

    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.0)  # the zip members' date
    rng = np.random.default_rng(0)
    cases = [
        {"negative": rng.normal(size=(1000, 10)), "positive": rng.normal(size=1000)},
        {
            "f": np.asfortranarray(rng.normal(size=(30, 7))),
            "strided": rng.normal(size=(40, 6))[:, ::2],
            "empty": np.zeros((0, 3)),
            "small": np.arange(5, dtype=np.int8),
            "flags": np.array([True, False]),
            DIGEST_KEY: np.array("ab" * 32),
        },
        {"long_header": np.zeros(2, dtype=[(f"field{i}", "<f8") for i in range(5000)])},
    ]
    for arrays in cases:
        expected, got = io.BytesIO(), io.BytesIO()
        np.savez(expected, **arrays)
        store.write_npz(got, arrays)
        assert got.getvalue() == expected.getvalue()


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.integers(-130, 130).map(float),
            st.sampled_from([-0.0, 0.5, float("nan"), float("inf"), -float("inf"), 1e300]),
        ),
        min_size=1,
        max_size=3000,
    ),
    shape_2d=st.booleans(),
)
def test_a_unit_reads_back_bit_for_bit_whether_or_not_it_was_narrowed(
    tmp_path_factory: pytest.TempPathFactory, values: list[float], shape_2d: bool
) -> None:
    """Any float64 array (small integers, −0.0, fractions, NaN, ±inf, out of int8's
    range) reads back from its unit with the same bits; it is stored as int8 exactly
    when every value is an integer in [−128, 127] and none is −0.0."""
    array = np.array(values)
    if shape_2d and array.size % 2 == 0:
        array = array.reshape(-1, 2)
    runs = RunStore(tmp_path_factory.mktemp("narrow"), "key")
    digest = runs.save("u", {"negative": array, "other": np.arange(3)})
    arrays, found = RunStore(runs.run_dir, "key").load_verified("u")
    assert found == digest
    assert arrays["negative"].dtype == np.float64
    assert arrays["negative"].shape == array.shape
    assert arrays["negative"].tobytes() == array.tobytes()
    np.testing.assert_array_equal(arrays["other"], np.arange(3))
    with np.load(runs.path("u")) as z:
        small = all(
            float(v).is_integer() and -128 <= v <= 127 and not (v == 0 and np.signbit(v))
            for v in values
        )
        assert (z["negative"].dtype == np.int8) is small
        assert (store.NARROWED_KEY in z.files) is small


def test_a_unit_whose_record_of_narrowed_arrays_was_edited_is_rejected(tmp_path: Path) -> None:
    runs = RunStore(tmp_path, "key")
    runs.save("u", {"negative": np.array([0.0, 1.0, 1.0]), "positive": np.array([0.5])})
    with np.load(runs.path("u")) as z:
        entries = {k: z[k] for k in z.files}
    assert entries[store.NARROWED_KEY].tolist() == ["negative"]
    # a record naming an array stored as float64, with a digest recomputed to match
    entries[store.NARROWED_KEY] = np.array(["negative", "positive"])
    del entries[DIGEST_KEY]
    entries[DIGEST_KEY] = np.array(store.unit_digest("key", "u", entries))
    np.savez(runs.path("u"), **entries)
    with pytest.raises(UnitRejected, match="names 'positive', not an int8 array"):
        RunStore(tmp_path, "key").load_verified("u")
    # the record itself changed without a new digest: the digest check refuses it first
    entries[store.NARROWED_KEY] = np.array(["negative"])
    np.savez(runs.path("u"), **entries)
    with pytest.raises(UnitRejected, match="do not match the digest"):
        RunStore(tmp_path, "key").load_verified("u")


def test_a_unit_may_not_name_an_array_as_the_store_does(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="may not hold an array named '__dpaudit_narrowed__'"):
        RunStore(tmp_path, "key").save("u", {store.NARROWED_KEY: np.zeros(2)})
