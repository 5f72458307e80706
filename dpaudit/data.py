"""Datasets by name, their encoding, and seeded splits for membership and attribute audits.

A dataset name is ``<source>:<what>``:

- ``sklearn:digits``, ``sklearn:breast_cancer``, ``sklearn:wine`` — the copies scikit-learn
  ships (no network). Label: the ``target`` column.
- ``statsmodels:fair`` — Fair's 1978 extramarital-affairs survey (6,366 rows). Default label:
  ``affairs > 0`` (binary: any affair at all); ``occupation`` and ``occupation_husb`` are
  categorical codes and are one-hot encoded.
- ``statsmodels:anes96`` — the 1996 American National Election Study extract (944 rows).
  Default label: ``vote`` (0 = Clinton, 1 = Dole); ``popul`` is dropped because
  ``logpopul`` carries the same information.
- ``statsmodels:randhie`` — the RAND health insurance experiment (20,190 rows). Default
  label: ``mdvis > 0`` (binary: at least one outpatient visit).
- ``csv:<path>`` and ``parquet:<path>`` — a table of your own (a CSV in UTF-8); relative
  paths resolve against ``base_dir``. Category and bool columns are one-hot encoded; a text
  column is one-hot encoded only when ``features`` (or ``sensitive``) names it, since a
  stray text column (an id, a name, a number column holding ``"?"``) is more often a
  mistake than a feature. Parquet needs pyarrow (``pip install pyarrow``), imported only
  when a parquet file is read.

A label is a column name, or ``"<column>><number>"`` (e.g. ``"affairs>0"``) to binarise a
numeric column. Label values are mapped to classes ``0..C-1`` in sorted order.

Standardisation is not part of loading: :func:`split_dataset` fits it on the rows it names
(by default the target's training rows, or the attacker's population), so no held-out row
ever shapes the features a model is trained on.
"""

from __future__ import annotations

import hashlib
import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from dpaudit.errors import DataError, DpauditError, check_choice, check_integer, not_a_regular_file

__all__ = [
    "BUILTIN_DATASETS",
    "Dataset",
    "PopulationSplit",
    "SensitiveColumn",
    "Split",
    "Standardizer",
    "load_dataset",
    "read_table",
    "split_dataset",
    "split_population",
]

# A label column with more distinct values than this is almost surely continuous: ask the
# user to binarise it ("col>value") rather than silently create hundreds of classes.
_MAX_LABEL_CLASSES = 100
# A numeric sensitive column with at most this many distinct values is treated as
# categorical (each value is a candidate); above it, quantile bins are used.
_MAX_DISCRETE_SENSITIVE = 12


@dataclass(frozen=True)
class _Builtin:
    loader: str
    label: str
    categorical: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()


BUILTIN_DATASETS: dict[str, _Builtin] = {
    "sklearn:digits": _Builtin("load_digits", "target"),
    "sklearn:breast_cancer": _Builtin("load_breast_cancer", "target"),
    "sklearn:wine": _Builtin("load_wine", "target"),
    "statsmodels:fair": _Builtin(
        "fair", "affairs>0", categorical=("occupation", "occupation_husb")
    ),
    "statsmodels:anes96": _Builtin("anes96", "vote", drop=("popul",)),
    "statsmodels:randhie": _Builtin("randhie", "mdvis>0"),
}


@dataclass(frozen=True, repr=False)
class SensitiveColumn:
    """A column whose value an attribute-inference attacker tries to recover.

    The column stays a model input; the attacker fills each candidate value into the
    encoded columns it maps to and asks the model which fits best.

    Attributes:
        name: the column's name in the source table.
        kind: ``"categorical"`` (one candidate per distinct value; one-hot columns for
            non-numeric data, the raw value for numeric data with few values) or
            ``"binned"`` (a numeric column cut into quantile bins; a candidate is a bin,
            filled in as the median of the column inside that bin).
        columns: indices of the encoded feature columns the value maps to.
        values: the candidate values (category names, or bin labels ``"[a, b)"``).
        encodings: ``(len(values), len(columns))`` float32, the feature entries of each
            candidate, in the same space as the dataset's ``X`` (standardised with it).
        codes: ``(n,)`` int64, each row's true candidate index.
    """

    name: str
    kind: Literal["categorical", "binned"]
    columns: tuple[int, ...]
    values: tuple[Any, ...]
    encodings: np.ndarray
    codes: np.ndarray

    @property
    def num_values(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return (
            f"SensitiveColumn(name={self.name!r}, kind={self.kind!r}, "
            f"columns={self.columns}, values={self.values})"
        )


@dataclass(frozen=True, repr=False)
class Dataset:
    """An encoded dataset: float32 features, int64 class labels.

    Attributes:
        name: the name it was loaded by.
        X: ``(n, d)`` float32 features (categorical columns one-hot encoded).
        y: ``(n,)`` int64 labels in ``0..num_classes-1``.
        feature_names: one per column of ``X`` (one-hot columns are ``"<col>=<value>"``).
        num_classes: number of classes.
        label: the label specification used (e.g. ``"affairs>0"``).
        class_names: the source value of each class.
        sensitive: the sensitive column, when one was named.
        data_hash: SHA-256 of the encoded features, labels and names (provenance).
    """

    name: str
    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...]
    num_classes: int
    label: str
    class_names: tuple[Any, ...]
    sensitive: SensitiveColumn | None = None
    data_hash: str = ""

    @property
    def num_rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.X.shape[1])

    def subset(self, rows: np.ndarray) -> Dataset:
        """The dataset restricted to ``rows`` (indices), sensitive codes included."""
        rows = np.asarray(rows, dtype=np.int64)
        sensitive = self.sensitive
        if sensitive is not None:
            sensitive = replace(sensitive, codes=sensitive.codes[rows])
        return replace(
            self, X=self.X[rows], y=self.y[rows], sensitive=sensitive, data_hash=""
        ).with_hash()

    def with_hash(self) -> Dataset:
        return replace(self, data_hash=_hash(self.X, self.y, self.feature_names))

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, rows={self.num_rows}, features={self.num_features}, "
            f"num_classes={self.num_classes}, label={self.label!r}, "
            f"sensitive={None if self.sensitive is None else self.sensitive.name!r}, "
            f"data_hash={self.data_hash[:12]!r})"
        )


@dataclass(frozen=True, repr=False)
class Standardizer:
    """Per-column affine map ``(x - mean) / scale`` fitted on chosen rows.

    Constant columns (scale 0 on the fitted rows) get scale 1, so they map to 0 rather than
    to NaN.
    """

    mean: np.ndarray
    scale: np.ndarray

    @classmethod
    def fit(cls, X: np.ndarray) -> Standardizer:
        X = np.asarray(X, dtype=np.float64)
        if X.shape[0] == 0:
            raise DataError("Cannot fit a standardisation on 0 rows.")
        mean = X.mean(axis=0)
        scale = X.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
        return cls(mean=mean.astype(np.float32), scale=scale.astype(np.float32))

    def transform(self, X: np.ndarray, columns: tuple[int, ...] | None = None) -> np.ndarray:
        """Standardise ``X``; with ``columns``, ``X`` holds only those feature columns."""
        mean, scale = self.mean, self.scale
        if columns is not None:
            mean, scale = mean[list(columns)], scale[list(columns)]
        return ((np.asarray(X, dtype=np.float32) - mean) / scale).astype(np.float32)

    def apply(self, dataset: Dataset) -> Dataset:
        """The dataset with standardised features and sensitive-candidate encodings."""
        sensitive = dataset.sensitive
        if sensitive is not None:
            sensitive = replace(
                sensitive, encodings=self.transform(sensitive.encodings, sensitive.columns)
            )
        return replace(dataset, X=self.transform(dataset.X), sensitive=sensitive).with_hash()

    def __repr__(self) -> str:
        return f"Standardizer(features={self.mean.shape[0]})"


@dataclass(frozen=True, repr=False)
class Split:
    """Disjoint row sets of one dataset, drawn with a seed.

    Attributes:
        dataset: the dataset, standardised by ``standardizer`` (all rows).
        train: indices of the target's training rows.
        holdout: indices of held-out rows of the target's distribution (never trained on).
        population: indices of the attacker's own data (disjoint from both).
        standardizer: the standardisation, fitted on the rows named by ``fitted_on``.
        fitted_on: ``"train"``, ``"population"`` or ``"none"``.
        seed: the seed of the draw.
    """

    dataset: Dataset
    train: np.ndarray
    holdout: np.ndarray
    population: np.ndarray
    standardizer: Standardizer | None
    fitted_on: str
    seed: int

    def part(self, name: Literal["train", "holdout", "population"]) -> Dataset:
        """One part as a :class:`Dataset`."""
        check_choice("name", name, ("train", "holdout", "population"))
        return self.dataset.subset(getattr(self, name))

    def __repr__(self) -> str:
        return (
            f"Split(dataset={self.dataset.name!r}, train={self.train.size}, "
            f"holdout={self.holdout.size}, population={self.population.size}, "
            f"fitted_on={self.fitted_on!r}, seed={self.seed})"
        )


def load_dataset(
    name: str,
    *,
    label: str | None = None,
    sensitive: str | None = None,
    features: tuple[str, ...] | list[str] | None = None,
    exclude: tuple[str, ...] | list[str] = (),
    sensitive_bins: int = 4,
    base_dir: str | Path | None = None,
) -> Dataset:
    """Load and encode a dataset by name (see the module docstring for the names).

    Args:
        name: ``sklearn:<name>``, ``statsmodels:<name>``, ``csv:<path>`` or
            ``parquet:<path>``.
        label: the label column, or ``"<column>><number>"`` to binarise; defaults to the
            built-in dataset's label (required for csv/parquet).
        sensitive: a column to keep recoverable for attribute inference.
        features: the feature columns to keep (default: every column but the label and
            ``exclude``; of a csv/parquet table these must then be numeric, bool or
            category columns).
        exclude: columns that are neither features nor the label when ``features`` is
            not given (e.g. a brought target's membership column).
        sensitive_bins: number of quantile bins for a continuous sensitive column.
        base_dir: directory that relative csv/parquet paths resolve against.

    Returns:
        The encoded :class:`Dataset` (not standardised).

    Raises:
        DataError: unknown dataset, a missing, unreadable or empty file, unknown column (the
            message lists the available ones), a text column not named in ``features``,
            missing values, a label with too many distinct values.
    """
    frame, default_label, categorical, source = _read_frame(name, base_dir=base_dir)
    if label is None:
        if default_label is None:
            raise DataError(
                f"The dataset {name!r} has no default label: pass label=<column>. "
                f"Available columns: {', '.join(map(str, frame.columns))}."
            )
        label = default_label
    label_column, threshold = _parse_label(label)
    _check_columns(frame, [label_column], name, "label")
    if features is None:
        feature_columns = [c for c in frame.columns if c != label_column and c not in exclude]
        if name.partition(":")[0] in ("csv", "parquet"):
            _check_no_text(frame, [c for c in feature_columns if c != sensitive], name)
    else:
        feature_columns = list(features)
        _check_columns(frame, feature_columns, name, "features")
        if label_column in feature_columns:
            raise DataError(f"The label column {label_column!r} cannot also be a feature.")
    if sensitive is not None:
        _check_columns(frame, [sensitive], name, "sensitive")
        if sensitive not in feature_columns:
            raise DataError(
                f"The sensitive column {sensitive!r} must be a feature (the attacker fills it "
                f"in); it is the label or was left out of 'features'."
            )
    used = [*feature_columns, label_column]
    missing = frame[used].isna().sum()
    missing = missing[missing > 0]
    if len(missing):
        detail = ", ".join(f"{c!r} ({int(k)} rows)" for c, k in missing.items())
        raise DataError(f"The dataset {name!r} has missing values in {detail}.")

    y, class_names = _encode_label(frame[label_column], threshold, label)
    blocks: list[np.ndarray] = []
    names: list[str] = []
    column_map: dict[str, tuple[int, ...]] = {}
    category_values: dict[str, tuple[Any, ...]] = {}
    for col in feature_columns:
        series = frame[col]
        is_categorical = col in categorical or not pd.api.types.is_numeric_dtype(series)
        if pd.api.types.is_bool_dtype(series):
            is_categorical = True
        start = len(names)
        if is_categorical:
            values = tuple(sorted(series.unique(), key=lambda v: (str(type(v)), v)))
            onehot = series.to_numpy()[:, None] == np.array(values, dtype=object)[None, :]
            blocks.append(onehot.astype(np.float32))
            names.extend(f"{col}={_fmt_value(v)}" for v in values)
            category_values[col] = values
        else:
            blocks.append(series.to_numpy(dtype=np.float64)[:, None].astype(np.float32))
            names.append(str(col))
        column_map[col] = tuple(range(start, len(names)))
    if not names:
        raise DataError(f"The dataset {name!r} has no feature columns left.")
    X = np.ascontiguousarray(np.concatenate(blocks, axis=1), dtype=np.float32)

    sensitive_column = None
    if sensitive is not None:
        sensitive_column = _sensitive(
            frame[sensitive],
            name=sensitive,
            columns=column_map[sensitive],
            category_values=category_values.get(sensitive),
            bins=sensitive_bins,
        )
    dataset = Dataset(
        name=source,
        X=X,
        y=y,
        feature_names=tuple(names),
        num_classes=len(class_names),
        label=label,
        class_names=class_names,
        sensitive=sensitive_column,
    )
    return dataset.with_hash()


def split_dataset(
    dataset: Dataset,
    *,
    target_size: int,
    population_size: int,
    holdout_size: int | None = None,
    seed: int,
    standardize: Literal["train", "population", "none"] = "train",
) -> Split:
    """Draw disjoint target-train, target-holdout and population rows with a seed.

    Args:
        dataset: the encoded dataset.
        target_size: rows the target model trains on.
        population_size: rows the attacker owns (shadow/reference models train on them).
        holdout_size: held-out rows of the target's distribution; defaults to
            ``target_size`` (a balanced member / non-member evaluation).
        seed: seed of the permutation.
        standardize: which rows the standardisation is fitted on. ``"train"`` is what a
            model owner would do; ``"population"`` keeps the private rows out of the
            preprocessing altogether (use it when the audited guarantee must cover the
            whole pipeline: mean and scale of the members are not protected by DP-SGD).

    Raises:
        DataError: the dataset has fewer rows than the split asks for, or a size is < 1.
    """
    check_choice("standardize", standardize, ("train", "population", "none"))
    if holdout_size is None:
        holdout_size = target_size
    target_size = _check_size("target_size", target_size, low=1)
    population_size = _check_size("population_size", population_size, low=0)
    holdout_size = _check_size("holdout_size", holdout_size, low=0)
    needed = target_size + holdout_size + population_size
    if needed > dataset.num_rows:
        raise DataError(
            f"The dataset {dataset.name!r} has {dataset.num_rows} rows, too few for "
            f"target_size={target_size} + holdout_size={holdout_size} + "
            f"population_size={population_size} = {needed}."
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(dataset.num_rows)
    train = np.sort(order[:target_size])
    holdout = np.sort(order[target_size : target_size + holdout_size])
    population = np.sort(order[target_size + holdout_size : needed])
    standardizer = None
    if standardize != "none":
        rows = train if standardize == "train" else population
        standardizer = Standardizer.fit(dataset.X[rows])
        dataset = standardizer.apply(dataset)
    return Split(
        dataset=dataset,
        train=train,
        holdout=holdout,
        population=population,
        standardizer=standardizer,
        fitted_on=standardize,
        seed=seed,
    )


@dataclass(frozen=True, repr=False)
class PopulationSplit:
    """Rows of a plain train/test split set aside for the attacker (disjoint, sorted).

    Positions index the rows that were split (the audited rows of a brought target).

    Attributes:
        audited: positions that stay audited.
        population: positions of non-members that became the attacker's population.
        set_aside: positions of members that left the audited rows unused (only when
            the coins must stay fair), else empty.
        share: the share asked for; seed: the seed of the draw.
    """

    audited: np.ndarray
    population: np.ndarray
    set_aside: np.ndarray
    share: float
    seed: int

    def __repr__(self) -> str:
        return (
            f"PopulationSplit(audited={self.audited.size}, population={self.population.size}, "
            f"set_aside={self.set_aside.size}, share={self.share:g}, seed={self.seed})"
        )


def split_population(
    membership: np.ndarray, *, share: float, seed: int, keep_coins_fair: bool
) -> PopulationSplit:
    """Set a share of a train/test split's non-members aside as the attacker's population.

    Each row draws one uniform number from ``seed`` alone (never from its membership);
    a non-member whose number is below ``share`` becomes population. With
    ``keep_coins_fair`` a member whose number is below ``share`` leaves the audited rows
    too, unused: then whether a row stays audited is independent of its membership, so
    memberships decided by independent fair coins are still independent fair coins on
    the rows that stay (the premise of the one-run bound, Steinke, Nasr, Jagielski 2023,
    Thm. 3.1). Without it, members all stay, and the audited rows hold relatively fewer
    non-members than before.

    Args:
        membership: ``(m,)`` bool, True for rows that trained the target.
        share: the expected share of non-members (and, with ``keep_coins_fair``, of
            members) that leave the audited rows, in [0, 1).
        seed: seed of the draw.
        keep_coins_fair: also set members aside at the same rate.

    Raises:
        DataError: ``share`` outside [0, 1).
    """
    membership = np.asarray(membership, dtype=bool)
    if not 0.0 <= share < 1.0:
        raise DataError(f"The 'share' parameter must lie in [0, 1). Got {share!r} instead.")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x909]))
    leaves = rng.random(membership.size) < share
    stays = ~leaves if keep_coins_fair else ~leaves | membership
    return PopulationSplit(
        audited=np.flatnonzero(stays),
        population=np.flatnonzero(leaves & ~membership),
        set_aside=np.flatnonzero(leaves & membership & keep_coins_fair),
        share=share,
        seed=seed,
    )


# --------------------------------------------------------------------------------------
# helpers


def _check_size(name: str, value: Any, *, low: int) -> int:
    """:func:`~dpaudit.errors.check_integer`, raised as the :class:`DataError` that the
    callers of this module catch."""
    try:
        return check_integer(name, value, low=low)
    except DpauditError as exc:
        raise DataError(str(exc)) from None


def _read_frame(
    name: str, *, base_dir: str | Path | None
) -> tuple[pd.DataFrame, str | None, tuple[str, ...], str]:
    if not isinstance(name, str) or ":" not in name:
        raise DataError(
            f"The dataset name must be '<source>:<name>' with source in "
            f"{{'sklearn', 'statsmodels', 'csv', 'parquet'}}. Got {name!r} instead."
        )
    source, _, rest = name.partition(":")
    if source in ("csv", "parquet"):
        path = Path(rest).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        frame = read_table(path, fmt="csv" if source == "csv" else "parquet")
        return frame, None, (), f"{source}:{path}"
    builtin = BUILTIN_DATASETS.get(name)
    if builtin is None:
        known = ", ".join(repr(k) for k in BUILTIN_DATASETS)
        raise DataError(
            f"Unknown dataset {name!r}. Built-in datasets: {known}; or use 'csv:<path>' or "
            f"'parquet:<path>'."
        )
    if source == "sklearn":
        import sklearn.datasets

        bunch = getattr(sklearn.datasets, builtin.loader)(as_frame=True)
        frame = bunch.frame
    else:
        import statsmodels.api as sm

        frame = getattr(sm.datasets, builtin.loader).load_pandas().data
    frame = frame.drop(columns=list(builtin.drop))
    return frame.reset_index(drop=True), builtin.label, builtin.categorical, name


#: The most columns a CSV or Parquet table may have (checked before it is parsed).
MAX_COLUMNS = 10_000
#: The longest CSV header read to count columns.
_MAX_HEADER_BYTES = 1 << 20
#: The most a model archive (zip: skops, torch) may unpack to, and the largest ratio of
#: unpacked to packed size above 16 MiB (a "zip bomb" inflates kilobytes to gigabytes).
MAX_ARCHIVE_BYTES = 2 << 30
MAX_ARCHIVE_RATIO = 100.0


def check_file(path: Path, what: str) -> Path:
    """``path`` if it is a regular file, else a :class:`DataError` naming ``what`` it
    should be and what it is (missing, a folder, a named pipe, a device, a link loop)."""
    problem = not_a_regular_file(path)
    if problem == "is a folder":
        raise DataError(f"The {what} {str(path)!r} is a folder; name the file itself.")
    if problem is not None:
        raise DataError(f"The {what} {str(path)!r} {problem}.")
    return path


def check_archive(path: Path, what: str) -> None:
    """Refuse a zip archive that would unpack past :data:`MAX_ARCHIVE_BYTES`, or inflate
    more than :data:`MAX_ARCHIVE_RATIO`-fold beyond 16 MiB, from its directory alone
    (nothing is unpacked). Not a zip: nothing to check here (its loader says more)."""
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return
    packed = max(path.stat().st_size, 1)
    if unpacked > MAX_ARCHIVE_BYTES or (
        unpacked > 16 << 20 and unpacked / packed > MAX_ARCHIVE_RATIO
    ):
        raise DataError(
            f"The {what} {str(path)!r} would unpack to {unpacked} bytes from {packed} "
            f"(at most {MAX_ARCHIVE_BYTES} bytes, and at most {MAX_ARCHIVE_RATIO:g} times "
            "its size beyond 16 MiB); it was not unpacked."
        )


def _check_csv_header(path: Path, what: str) -> None:
    """Count a CSV's columns from its first line before pandas parses it."""
    with path.open("rb") as f:
        head = f.read(_MAX_HEADER_BYTES + 1)
    line = head.split(b"\n", 1)[0]
    if len(line) > _MAX_HEADER_BYTES:
        raise DataError(
            f"The {what} {str(path)!r} has a header line longer than {_MAX_HEADER_BYTES} "
            f"bytes; a table has at most {MAX_COLUMNS} columns."
        )
    columns = line.count(b",") + 1
    if columns > MAX_COLUMNS:
        raise DataError(
            f"The {what} {str(path)!r} has {columns} columns; at most {MAX_COLUMNS} are read."
        )


def _check_finite(frame: pd.DataFrame, shown: str, what: str) -> None:
    """Name the file, column and row of the first infinite number (NaN is a missing value
    and is handled where columns are used)."""
    for col in frame.columns:
        series = frame[col]
        if not pd.api.types.is_float_dtype(series):
            continue
        bad = np.isinf(series.to_numpy(dtype=float))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"The {what} {shown} has an infinite value in column {str(col)!r} (row "
                f"{row + 1} of the data, {float(series.iloc[row])!r}); values must be finite."
            )


def library_reason(exc: BaseException) -> str:
    """A library's error message as a short clause for a one-line message.

    The first sentence, without the tags libraries put before it (``[enforce fail at
    ...]``, ``[ONNXRuntimeError] : 7 : ...``) and, when the cause after the last colon
    is more than one word, without the context before it ("Error while deserializing
    header: header too large" gives "header too large").
    """
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    text = re.sub(r"^(\[[^\]]*\][\s.:]*)+", "", " ".join(text.split()))
    first = text.split(". ")[0].rstrip(".").strip()
    cause = first.rsplit(":", 1)[-1].strip()
    return (cause if len(cause.split()) > 1 else first or type(exc).__name__)[:160]


def read_table(
    path: str | Path, *, fmt: Literal["csv", "parquet"], what: str = "data file"
) -> pd.DataFrame:
    """Read a CSV (UTF-8) or Parquet table that has at least one row.

    Args:
        path: The file.
        fmt: ``"csv"`` or ``"parquet"``.
        what: What the file is, for messages (``"data file"``, ``"scores file"``, ...).

    Returns:
        The table.

    Raises:
        DataError: One line naming the file and what to do: it is missing or a folder, is
            not UTF-8, cannot be parsed, is corrupt, or has no rows.
    """
    path = check_file(Path(path), what)
    shown = repr(str(path))
    if fmt == "csv":
        _check_csv_header(path, what)
        try:
            frame = pd.read_csv(path)
        except UnicodeDecodeError as exc:
            byte = exc.object[exc.start : exc.start + 1].hex()
            raise DataError(
                f"The {what} {shown} is not UTF-8 text (byte 0x{byte} at position "
                f"{exc.start}); save it as UTF-8 CSV."
            ) from None
        except pd.errors.EmptyDataError:
            raise DataError(
                f"The {what} {shown} is empty; it needs a header row and data rows."
            ) from None
        except pd.errors.ParserError as exc:
            reason = " ".join(str(exc).split())
            raise DataError(f"Cannot read the {what} {shown} as CSV: {reason}.") from None
    else:
        try:
            import pyarrow
        except ImportError:
            raise DataError(
                f"Reading {shown} needs pyarrow, which is not installed: run 'pip install pyarrow'."
            ) from None
        try:
            frame = pd.read_parquet(path)
        # pyarrow reports a bad footer as ArrowInvalid (an ArrowException) but a body it
        # cannot decode ("Couldn't deserialize thrift") as a plain OSError, its
        # ArrowIOError; OSError is caught only around this one read of a file known to exist.
        except (pyarrow.ArrowException, OSError) as exc:
            raise DataError(
                f"The {what} {shown} is not a readable Parquet file ({library_reason(exc)}); "
                "it may be truncated or corrupt: write it again (e.g. DataFrame.to_parquet)."
            ) from None
    if len(frame) == 0:
        raise DataError(f"The {what} {shown} has a header but no rows; it needs data rows.")
    if frame.shape[1] > MAX_COLUMNS:
        raise DataError(f"The {what} {shown} has {frame.shape[1]} columns; at most {MAX_COLUMNS}.")
    _check_finite(frame, shown, what)
    return frame


def _check_no_text(frame: pd.DataFrame, columns: list[Any], name: str) -> None:
    """Refuse text columns among features nobody named (``features`` not given)."""
    for col in columns:
        series = frame[col]
        numeric = pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series)
        if numeric or isinstance(series.dtype, pd.CategoricalDtype):
            continue
        # The first value that is not a number: "?" in a number column, or the first name.
        words = series[pd.to_numeric(series, errors="coerce").isna() & series.notna()]
        example = f" (e.g. {words.iloc[0]!r})" if len(words) else ""
        raise DataError(
            f"The column {col!r} of {name!r} holds text{example}; features must be numeric, "
            "or name the columns to use in [data] features (text columns named there are "
            "one-hot encoded)."
        )


def _parse_label(label: str) -> tuple[str, float | None]:
    if not isinstance(label, str) or not label:
        raise DataError(f"The 'label' parameter must be a column name. Got {label!r} instead.")
    match = re.fullmatch(r"\s*(.+?)\s*>\s*([-+0-9.eE]+)\s*", label)
    if match is None:
        return label, None
    try:
        return match.group(1), float(match.group(2))
    except ValueError:
        raise DataError(
            f"The 'label' parameter must be '<column>' or '<column>><number>'. Got {label!r}."
        ) from None


def _check_columns(frame: pd.DataFrame, columns: list[Any], name: str, what: str) -> None:
    unknown = [c for c in columns if c not in frame.columns]
    if unknown:
        available = ", ".join(map(str, frame.columns))
        raise DataError(
            f"Unknown {what} column {', '.join(map(repr, unknown))} in dataset {name!r}. "
            f"Available columns: {available}."
        )


def _encode_label(
    series: pd.Series, threshold: float | None, label: str
) -> tuple[np.ndarray, tuple[Any, ...]]:
    if threshold is not None:
        if not pd.api.types.is_numeric_dtype(series):
            raise DataError(f"The label {label!r} compares a non-numeric column with a number.")
        return (series.to_numpy() > threshold).astype(np.int64), (False, True)
    values = series.unique()
    continuous = pd.api.types.is_float_dtype(series) and not np.all(np.mod(values, 1) == 0)
    if continuous or len(values) > _MAX_LABEL_CLASSES:
        raise DataError(
            f"The label column {series.name!r} looks continuous ({len(values)} distinct values, "
            f"non-integer or more than {_MAX_LABEL_CLASSES}); binarise it, e.g. "
            f"label='{series.name}>0'."
        )
    if len(values) < 2:
        raise DataError(f"The label column {series.name!r} has a single value; need 2 classes.")
    classes = tuple(sorted(values, key=lambda v: (str(type(v)), v)))
    lookup = {v: i for i, v in enumerate(classes)}
    y = np.fromiter((lookup[v] for v in series.to_numpy()), dtype=np.int64, count=len(series))
    return y, tuple(_plain(v) for v in classes)


def _sensitive(
    series: pd.Series,
    *,
    name: str,
    columns: tuple[int, ...],
    category_values: tuple[Any, ...] | None,
    bins: int,
) -> SensitiveColumn:
    if category_values is not None:  # one-hot: candidate v is the indicator vector of v
        values = category_values
        encodings = np.eye(len(values), dtype=np.float32)
        lookup = {v: i for i, v in enumerate(values)}
        codes = np.fromiter((lookup[v] for v in series.to_numpy()), np.int64, len(series))
        return SensitiveColumn(
            name, "categorical", columns, tuple(map(_plain, values)), encodings, codes
        )
    raw = series.to_numpy(dtype=np.float64)
    distinct = np.unique(raw)
    if distinct.size <= _MAX_DISCRETE_SENSITIVE:
        codes = np.searchsorted(distinct, raw).astype(np.int64)
        return SensitiveColumn(
            name,
            "categorical",
            columns,
            tuple(float(v) for v in distinct),
            distinct.astype(np.float32)[:, None],
            codes,
        )
    bins = _check_size("sensitive_bins", bins, low=2)
    edges = np.unique(np.quantile(raw, np.linspace(0.0, 1.0, bins + 1)))
    # Interior edges only: searchsorted(side="right") puts the maximum in the last bin.
    codes = np.searchsorted(edges[1:-1], raw, side="right").astype(np.int64)
    labels: list[str] = []
    fills: list[float] = []
    for b in range(edges.size - 1):
        inside = raw[codes == b]
        close = "]" if b == edges.size - 2 else ")"
        labels.append(f"[{edges[b]:g}, {edges[b + 1]:g}{close}")
        fills.append(float(np.median(inside)) if inside.size else float(edges[b]))
    return SensitiveColumn(
        name,
        "binned",
        columns,
        tuple(labels),
        np.asarray(fills, dtype=np.float32)[:, None],
        codes,
    )


def _plain(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def _fmt_value(value: Any) -> str:
    value = _plain(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _hash(X: np.ndarray, y: np.ndarray, names: tuple[str, ...]) -> str:
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(X, dtype=np.float32).tobytes())
    digest.update(np.ascontiguousarray(y, dtype=np.int64).tobytes())
    digest.update("\x1f".join(names).encode())
    return digest.hexdigest()
