"""Learned scores counted at array speed (:mod:`dpaudit.mechanisms.learned`).

The ``counts`` learner finds each output in its fitted table by a row hash and
:func:`numpy.searchsorted` (:class:`~dpaudit.mechanisms.learned.ValueTable`), its table
is built from the rows' bytes (:func:`~dpaudit.mechanisms.learned.distinct_rows`), and a
fitted score scores in chunks. Tested here against the previous path, written out below
as the reference (``numpy.unique(..., axis=0)`` and a dictionary keyed by each row's
bytes, looked up in a Python loop): the same scores bit for bit, so the same bounds.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from sklearn.preprocessing import SplineTransformer

from dpaudit.bounds import learned_lower_bounds
from dpaudit.mechanisms import learned
from dpaudit.mechanisms.learned import (
    PSEUDO_COUNT,
    ValueTable,
    distinct_rows,
    fit_score,
    one_thread,
)


def reference_counts_score(neg: np.ndarray, pos: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The ``counts`` score as it was computed before (the smoothed log-likelihood ratio
    of each fitted value, unseen values sharing one cell), looked up row by row."""
    values, inverse = np.unique(np.concatenate([neg, pos]) + 0.0, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    n0, n1 = neg.shape[0], pos.shape[0]
    c0 = np.bincount(inverse[:n0], minlength=values.shape[0])
    c1 = np.bincount(inverse[n0:], minlength=values.shape[0])
    cells, a = values.shape[0] + 1, PSEUDO_COUNT
    table = np.log((c1 + a) / (n1 + a * cells)) - np.log((c0 + a) / (n0 + a * cells))
    unseen = float(np.log(a / (n1 + a * cells)) - np.log(a / (n0 + a * cells)))
    lookup = {row.tobytes(): float(s) for row, s in zip(values, table, strict=True)}
    rows, back = np.unique(out + 0.0, axis=0, return_inverse=True)
    per_row = np.array([lookup.get(r.tobytes(), unseen) for r in rows])
    return per_row[back.reshape(-1)]


def _discrete(rng: np.random.Generator, n: int, d: int, k: int) -> np.ndarray:
    x = rng.integers(-k, k + 1, (n, d)).astype(float) * rng.choice([1.0, 0.5, -0.25], (1, d))
    x[rng.random(x.shape) < 0.05] = -0.0  # −0.0 is the value 0.0
    return x


@pytest.mark.parametrize("seed", range(40))
def test_counts_scores_are_the_previous_paths_bit_for_bit(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d, k = int(rng.integers(1, 11)), int(rng.integers(1, 4))
    neg, pos = _discrete(rng, 300, d, k), _discrete(rng, 250, d, k)
    out = _discrete(rng, 2_000, d, k + 1)  # values beyond k were never fitted on
    score = fit_score(neg, pos, learner="counts")
    expected = reference_counts_score(neg, pos, out)
    assert score(out).tobytes() == expected.tobytes()
    assert score(np.zeros((0, d))).shape == (0,)


@pytest.mark.parametrize("collide", [False, True])
def test_the_table_is_numpys_unique_whether_or_not_row_hashes_collide(
    collide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # distinct_rows tells rows apart by a 64-bit hash first; when two different rows share
    # one (forced here: every row hashes to 0) it falls back to sorting their bytes, and
    # the table is numpy's either way, with -0.0 read as 0.0.
    from dpaudit.mechanisms import learned

    if collide:
        monkeypatch.setattr(
            learned, "_hash", lambda words, m: np.zeros(words.shape[0], dtype=np.uint64)
        )
    rng = np.random.default_rng(17)
    x = _discrete(rng, 3_000, 4, 3) * np.array([1.0, -1.0, 0.5, 0.0])  # -0.0 appears
    assert np.signbit(x).any()
    assert (x == 0).any()
    values, inverse = distinct_rows(x)
    v0, i0 = np.unique(x + 0.0, axis=0, return_inverse=True)
    assert values.tobytes() == v0.tobytes()
    assert np.array_equal(inverse, i0.reshape(-1))


def test_the_table_and_its_description_are_numpys_unique_bit_for_bit() -> None:
    rng = np.random.default_rng(7)
    for d in (1, 2, 5, 10):
        x = _discrete(rng, 5_000, d, 2)
        values, inverse = distinct_rows(x)
        v0, i0 = np.unique(x + 0.0, axis=0, return_inverse=True)
        assert values.tobytes() == v0.tobytes()
        assert np.array_equal(inverse, i0.reshape(-1))
    neg, pos = _discrete(rng, 400, 3, 1), _discrete(rng, 400, 3, 1)
    top = fit_score(neg, pos, learner="counts").model["most_frequent"]
    v0, i0 = np.unique(np.concatenate([neg, pos]) + 0.0, axis=0, return_inverse=True)
    counts = np.bincount(i0.reshape(-1), minlength=v0.shape[0])
    first = int(np.argsort(-counts, kind="stable")[0])
    assert top[0]["output"] == v0[first].tolist()
    assert sum(top[0]["fit_counts"]) == counts[first]


def test_value_table_misses_are_the_unseen_cell() -> None:
    values = np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    table = ValueTable(values)
    out = np.array([[1.0, 0.0], [0.0, 0.0], [-0.0, 1.0], [1.0, 1.0], [2.0, 1.0], [1.0, 2.0]])
    assert table.index(out).tolist() == [1, 3, 0, 2, 3, 3]


def test_chunked_scores_are_the_whole_batch_scores_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(1)
    neg = rng.normal(0.0, 1.0, (3_000, 3))
    pos = rng.normal(0.3, 1.2, (3_000, 3))
    out = rng.normal(0.0, 1.5, (10_001, 3))
    for learner in ("logistic", "boosting", "knn"):
        score = fit_score(neg, pos, learner=learner)
        with one_thread():
            whole = np.asarray(score.scorer(out), dtype=float).reshape(-1)
        monkeypatch.setattr(learned, "SCORE_CHUNK", 1_000)
        assert score(out).tobytes() == whole.tobytes()
        monkeypatch.undo()


def test_a_learned_bound_on_sparse_vector_outputs_is_the_previous_paths() -> None:
    """The same ε and μ bounds, to the bit, from the new lookup and the reference one,
    on the outputs of the sparse vector without query noise (ten ⊤/⊥ answers)."""
    rng = np.random.default_rng(0)

    def svt(q: np.ndarray, n: int) -> np.ndarray:
        rho = rng.laplace(0.0, 2.0, (n, 1))
        return (q[None, :] >= 0.5 + rho).astype(float)

    q0 = np.array([1.0] * 5 + [0.0] * 5)
    neg, pos = svt(q0, 30_000), svt(1.0 - q0, 30_000)

    def new_fit(fn: np.ndarray, fp: np.ndarray) -> learned.LearnedScore:
        return fit_score(fn, fp, learner="counts")

    def old_fit(fn: np.ndarray, fp: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        return lambda out: reference_counts_score(fn, fp, np.asarray(out, dtype=float))

    new = learned_lower_bounds(neg, pos, fit=new_fit, delta=0.0, seed=0)
    old = learned_lower_bounds(neg, pos, fit=old_fit, delta=0.0, seed=0)
    assert new.negative_scores.tobytes() == old.negative_scores.tobytes()
    assert new.epsilon.value == old.epsilon.value
    assert new.mu.value == old.mu.value
    assert new.epsilon.value > 3.0  # Alg. 5 is ∞-DP: a pattern out of order never happens


@pytest.mark.parametrize("seed", range(12))
def test_the_spline_basis_is_scikit_learns_constant_extrapolation_bit_for_bit(seed: int) -> None:
    """``spline_basis`` (scipy's design matrix at the clipped column) equals
    ``SplineTransformer(extrapolation="constant").transform`` to the bit: inside the
    knots, at every knot, and beyond both ends, on continuous and on tied columns."""
    rng = np.random.default_rng(seed)
    column = rng.standard_t(3, 5_000) if seed % 2 else rng.normal(size=5_000)
    if seed % 3 == 0:
        column = np.round(column * 4) / 4  # ties, as outputs of few values have
    knots = np.unique(np.quantile(column, np.linspace(0.0, 1.0, learned.SPLINE_KNOTS)))
    spline = SplineTransformer(knots=knots.reshape(-1, 1), degree=3, extrapolation="constant")
    spline.fit(column.reshape(-1, 1))
    x = np.concatenate([column, 10.0 * rng.normal(size=500), knots, [-1e300, 1e300]])
    expected = spline.transform(x.reshape(-1, 1))
    got = learned.spline_basis(spline, x)
    assert got.shape == expected.shape
    assert got.tobytes() == expected.tobytes()


def test_the_spline_basis_refuses_what_is_not_finite_with_scikit_learns_error() -> None:
    column = np.linspace(-1.0, 1.0, 50)
    spline = SplineTransformer(knots=np.quantile(column, [0, 0.5, 1]).reshape(-1, 1))
    spline.fit(column.reshape(-1, 1))
    with pytest.raises(ValueError, match="Input X contains NaN"):
        learned.spline_basis(spline, np.array([0.0, np.nan]))
