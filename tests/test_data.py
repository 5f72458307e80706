"""Tests for dpaudit.data: loading, encoding, sensitive columns, splits, errors."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
import sklearn.datasets
import statsmodels.api as sm

from dpaudit.data import (
    BUILTIN_DATASETS,
    Standardizer,
    library_reason,
    load_dataset,
    split_dataset,
)
from dpaudit.errors import DataError, DpauditError


@pytest.mark.parametrize("name", sorted(BUILTIN_DATASETS))
def test_builtin_datasets_load(name: str) -> None:
    ds = load_dataset(name)
    assert ds.X.dtype == np.float32
    assert ds.y.dtype == np.int64
    assert ds.X.shape == (ds.num_rows, len(ds.feature_names))
    assert set(np.unique(ds.y)) == set(range(ds.num_classes))
    assert np.isfinite(ds.X).all()
    assert len(ds.data_hash) == 64


def test_fair_label_is_any_affair_against_statsmodels() -> None:
    raw = sm.datasets.fair.load_pandas().data
    ds = load_dataset("statsmodels:fair")
    np.testing.assert_array_equal(ds.y, (raw["affairs"] > 0).to_numpy().astype(np.int64))
    # 8 raw features; occupation and occupation_husb have 6 codes each, one-hot encoded
    assert ds.num_features == 6 + 6 + 6
    occ = [i for i, n in enumerate(ds.feature_names) if n.startswith("occupation=")]
    np.testing.assert_array_equal(ds.X[:, occ].sum(axis=1), 1.0)
    codes = np.argmax(ds.X[:, occ], axis=1) + 1
    np.testing.assert_array_equal(codes, raw["occupation"].to_numpy().astype(int))


def test_digits_matches_sklearn() -> None:
    bunch = sklearn.datasets.load_digits()
    ds = load_dataset("sklearn:digits")
    np.testing.assert_array_equal(ds.X, bunch.data.astype(np.float32))
    np.testing.assert_array_equal(ds.y, bunch.target)
    assert ds.num_classes == 10


def test_anes96_drops_redundant_population() -> None:
    ds = load_dataset("statsmodels:anes96")
    assert "popul" not in ds.feature_names
    assert "logpopul" in ds.feature_names


def test_hash_is_deterministic_and_sensitive_to_content() -> None:
    a = load_dataset("sklearn:wine")
    b = load_dataset("sklearn:wine")
    assert a.data_hash == b.data_hash
    c = a.subset(np.arange(10))
    assert c.data_hash != a.data_hash


def test_categorical_sensitive_column_round_trips() -> None:
    ds = load_dataset("statsmodels:fair", sensitive="occupation")
    s = ds.sensitive
    assert s is not None
    assert s.kind == "categorical"
    assert s.values == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    # Filling each row's true candidate reproduces the row exactly.
    filled = s.encodings[s.codes]
    np.testing.assert_array_equal(ds.X[:, list(s.columns)], filled)


def test_discrete_numeric_sensitive_is_categorical() -> None:
    ds = load_dataset("statsmodels:fair", sensitive="religious")
    s = ds.sensitive
    assert s is not None
    assert s.kind == "categorical"
    assert len(s.columns) == 1
    np.testing.assert_array_equal(ds.X[:, s.columns[0]], s.encodings[s.codes, 0])


def test_continuous_sensitive_uses_quantile_bins() -> None:
    ds = load_dataset("statsmodels:anes96", sensitive="age", sensitive_bins=4)
    s = ds.sensitive
    assert s is not None
    assert s.kind == "binned"
    assert s.num_values == 4
    age = ds.X[:, s.columns[0]]
    # Quantile bins hold about a quarter of the rows each (ties can shift a few rows).
    counts = np.bincount(s.codes, minlength=4) / ds.num_rows
    np.testing.assert_allclose(counts, 0.25, atol=0.03)
    # The fill value of each bin lies inside the bin, and bins are ordered.
    for b in range(4):
        inside = age[s.codes == b]
        assert inside.min() <= s.encodings[b, 0] <= inside.max()
    assert np.all(np.diff(s.encodings[:, 0]) > 0)


def test_split_is_disjoint_seeded_and_sized() -> None:
    ds = load_dataset("sklearn:breast_cancer")
    a = split_dataset(ds, target_size=100, population_size=200, seed=3)
    b = split_dataset(ds, target_size=100, population_size=200, seed=3)
    c = split_dataset(ds, target_size=100, population_size=200, seed=4)
    assert (a.train.size, a.holdout.size, a.population.size) == (100, 100, 200)
    parts = np.concatenate([a.train, a.holdout, a.population])
    assert np.unique(parts).size == parts.size
    np.testing.assert_array_equal(a.train, b.train)
    assert not np.array_equal(a.train, c.train)


def test_standardisation_fitted_only_on_named_rows() -> None:
    ds = load_dataset("sklearn:breast_cancer")
    split = split_dataset(ds, target_size=150, population_size=200, seed=0)
    Xs = split.dataset.X
    np.testing.assert_allclose(Xs[split.train].mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(Xs[split.train].std(axis=0), 1.0, atol=1e-4)
    # Leakage check: changing held-out rows does not change the fitted map.
    X2 = ds.X.copy()
    X2[split.holdout] *= 10.0
    refit = Standardizer.fit(X2[split.train])
    np.testing.assert_array_equal(refit.mean, split.standardizer.mean)
    pop = split_dataset(ds, target_size=150, population_size=200, seed=0, standardize="population")
    np.testing.assert_allclose(pop.dataset.X[pop.population].mean(axis=0), 0.0, atol=1e-4)


def test_standardisation_carries_sensitive_encodings() -> None:
    ds = load_dataset("statsmodels:fair", sensitive="religious")
    split = split_dataset(ds, target_size=200, population_size=200, seed=0)
    s = split.dataset.sensitive
    np.testing.assert_allclose(split.dataset.X[:, s.columns[0]], s.encodings[s.codes, 0], atol=1e-6)


def test_constant_column_is_not_nan() -> None:
    st = Standardizer.fit(np.array([[1.0, 5.0], [3.0, 5.0]]))
    np.testing.assert_array_equal(st.transform(np.array([[2.0, 5.0]])), [[0.0, 0.0]])


def test_csv_with_categorical_and_label(tmp_path) -> None:
    frame = pd.DataFrame(
        {
            "colour": ["red", "blue", "red", "green"] * 5,
            "size": np.arange(20, dtype=float),
            "label": ["yes", "no"] * 10,
        }
    )
    frame.to_csv(tmp_path / "t.csv", index=False)
    ds = load_dataset("csv:t.csv", label="label", sensitive="colour", base_dir=tmp_path)
    assert ds.feature_names == ("colour=blue", "colour=green", "colour=red", "size")
    np.testing.assert_array_equal(ds.y, [1, 0] * 10)  # classes sorted: "no" = 0, "yes" = 1
    assert ds.class_names == ("no", "yes")
    assert ds.sensitive.values == ("blue", "green", "red")
    # A text column is a feature only when named (here in 'features').
    binarised = load_dataset(f"csv:{tmp_path / 't.csv'}", label="size>9.5", features=["colour"])
    np.testing.assert_array_equal(binarised.y, (np.arange(20) > 9.5).astype(int))
    assert binarised.feature_names == ("colour=blue", "colour=green", "colour=red")


def test_csv_text_column_not_named_is_refused(tmp_path) -> None:
    frame = pd.DataFrame({"age": ["31", "?", "40"] * 3, "size": np.arange(9.0), "y": [0, 1, 1] * 3})
    frame.to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(DataError, match=r"column 'age' of 'csv:t\.csv' holds text \(e\.g\. '\?'\)"):
        load_dataset("csv:t.csv", label="y", base_dir=tmp_path)
    ds = load_dataset("csv:t.csv", label="y", features=["age", "size"], base_dir=tmp_path)
    assert ds.feature_names == ("age=31", "age=40", "age=?", "size")
    assert load_dataset(
        "csv:t.csv", label="y", exclude=["age"], base_dir=tmp_path
    ).feature_names == ("size",)


def test_unreadable_tables_say_what_is_wrong(tmp_path) -> None:
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(DataError, match=r"data file '.*dir\.csv' is a folder"):
        load_dataset("csv:dir.csv", label="y", base_dir=tmp_path)
    (tmp_path / "head.csv").write_text("a,y\n")
    with pytest.raises(DataError, match=r"'.*head\.csv' has a header but no rows"):
        load_dataset("csv:head.csv", label="y", base_dir=tmp_path)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match=r"'.*empty\.csv' is empty"):
        load_dataset("csv:empty.csv", label="y", base_dir=tmp_path)
    (tmp_path / "ragged.csv").write_text("a,y\n1,0\n1,2,3\n")
    with pytest.raises(
        DataError, match=r"as CSV: Error tokenizing data\. C error: Expected 2 fields"
    ):
        load_dataset("csv:ragged.csv", label="y", base_dir=tmp_path)
    (tmp_path / "u16.csv").write_text("a,y\n1,0\n", encoding="utf-16")
    with pytest.raises(DataError, match=r"not UTF-8 text \(byte 0xff at position 0\)"):
        load_dataset("csv:u16.csv", label="y", base_dir=tmp_path)


def test_csv_missing_values_are_an_error(tmp_path) -> None:
    pd.DataFrame({"a": [1.0, None, 3.0], "b": [0, 1, 0]}).to_csv(tmp_path / "m.csv", index=False)
    with pytest.raises(DataError, match=r"missing values in 'a' \(1 rows\)"):
        load_dataset("csv:m.csv", label="b", base_dir=tmp_path)


def test_errors_are_clear() -> None:
    with pytest.raises(DataError, match=r"does not exist"):
        load_dataset("csv:/nonexistent/file.csv", label="x")
    with pytest.raises(DataError, match=r"Unknown dataset 'sklearn:iris'.*'sklearn:digits'"):
        load_dataset("sklearn:iris")
    with pytest.raises(DataError, match=r"Unknown label column 'nope'.*Available columns: "):
        load_dataset("statsmodels:fair", label="nope")
    with pytest.raises(DataError, match=r"Unknown sensitive column 'nope'.*rate_marriage"):
        load_dataset("statsmodels:fair", sensitive="nope")
    with pytest.raises(DataError, match=r"looks continuous.*label='affairs>0'"):
        load_dataset("statsmodels:fair", label="affairs")
    with pytest.raises(DataError, match=r"'<source>:<name>'"):
        load_dataset("digits")
    wine = load_dataset("sklearn:wine")
    with pytest.raises(DataError, match=r"has 178 rows, too few .* = 250"):
        split_dataset(wine, target_size=50, population_size=150, seed=0)
    with pytest.raises(DpauditError, match=r"'standardize' parameter must be one of"):
        split_dataset(wine, target_size=5, population_size=5, seed=0, standardize="all")


def test_parquet_without_pyarrow_names_the_fix(tmp_path, monkeypatch) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes "import pyarrow" fail
    with pytest.raises(DataError, match=r"needs pyarrow.*pip install pyarrow"):
        load_dataset(f"parquet:{path}", label="y")


def test_parquet_round_trip(tmp_path) -> None:
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"a": [0.5, 1.5, 2.5, 3.5], "c": ["x", "y", "x", "y"], "y": [0, 1, 0, 1]})
    frame.to_parquet(tmp_path / "t.parquet")
    ds = load_dataset("parquet:t.parquet", label="y", features=["a", "c"], base_dir=tmp_path)
    assert ds.feature_names == ("a", "c=x", "c=y")
    np.testing.assert_array_equal(ds.y, [0, 1, 0, 1])
    # A truncated file is named, with what to do.
    data = (tmp_path / "t.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"'.*cut\.parquet' is not a readable Parquet file"):
        load_dataset("parquet:cut.parquet", label="y", base_dir=tmp_path)


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        # Messages as safetensors, ONNX Runtime, torch and pyarrow raise them.
        (RuntimeError("Error while deserializing header: header too large"), "header too large"),
        (
            RuntimeError(
                "[ONNXRuntimeError] : 7 : INVALID_PROTOBUF : Load model from m.onnx "
                "failed:Protobuf parsing failed."
            ),
            "Protobuf parsing failed",
        ),
        (
            RuntimeError(
                "[enforce fail at inline_container.cc:180] . file in archive is not "
                "in a subdirectory: 1407.npy"
            ),
            "file in archive is not in a subdirectory: 1407.npy",
        ),
        (
            OSError(
                "Could not open Parquet input source 'x': Parquet magic bytes not found "
                "in footer. Either the file is corrupted or this is not a parquet file."
            ),
            "Parquet magic bytes not found in footer",
        ),
        (
            KeyError("There is no item named 'schema.json' in the archive"),
            "There is no item named 'schema.json' in the archive",
        ),
        (RuntimeError(""), "RuntimeError"),
    ],
)
def test_library_reason_is_one_short_clause(exc: BaseException, reason: str) -> None:
    assert library_reason(exc) == reason
