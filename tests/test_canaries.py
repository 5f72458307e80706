"""Canary construction: closed-form properties of each canary."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.dpsgd.canaries import (
    clipbkd_canary,
    dirac_direction,
    input_canary,
    mislabeled_canary,
    ood_canary,
    with_zero_feature,
)
from dpaudit.errors import DpauditError


def _data(seed=0, n=200, d=5):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * np.array([3.0, 2.0, 1.0, 0.5, 0.1])
    y = rng.integers(0, 3, n)
    return X, y


def test_mislabeled_is_a_data_row_with_another_label():
    X, y = _data()
    c = mislabeled_canary(X, y, seed=1)
    np.testing.assert_array_equal(c.x, X[c.source_row])
    assert c.y != y[c.source_row]
    assert 0 <= c.y < 3


def test_ood_is_outside_every_row():
    X, y = _data()
    c = ood_canary(X, y, seed=1, scale=3.0)
    dist = np.linalg.norm(c.x - X.mean(axis=0))
    assert dist == pytest.approx(3.0 * np.linalg.norm(X, axis=1).max())


def test_clipbkd_points_along_least_variance():
    # Column 4 has variance 0.01, the smallest by a factor 25: the last singular vector.
    X, y = _data()
    c = clipbkd_canary(X, y, seed=0)
    u = c.x / np.linalg.norm(c.x)
    assert abs(u[4]) > 0.99
    assert np.linalg.norm(c.x) == pytest.approx(np.linalg.norm(X, axis=1).max())
    assert c.y == np.argmin(np.bincount(y))


def test_clipbkd_finds_an_all_zero_feature():
    X, y = _data()
    c = clipbkd_canary(with_zero_feature(X), y, seed=0)
    assert abs(c.x[-1] / np.linalg.norm(c.x)) == pytest.approx(1.0, abs=1e-6)


def test_dirac_direction_and_errors():
    e = dirac_direction(6, 2)
    np.testing.assert_array_equal(e, [0, 0, 1, 0, 0, 0])
    with pytest.raises(
        DpauditError,
        match=r"The 'index' parameter must be an integer in \[0, 5\]\. Got 6 instead\.",
    ):
        dirac_direction(6, 6)
    with pytest.raises(DpauditError, match="'canary' parameter must be one of"):
        input_canary("dirac", *_data(), seed=0)


def test_canaries_are_seeded():
    X, y = _data()
    for kind in ("mislabeled", "ood", "clipbkd"):
        a, b = input_canary(kind, X, y, seed=5), input_canary(kind, X, y, seed=5)
        np.testing.assert_array_equal(a.x, b.x)
