"""The engine's coordinate canaries (the one-run white-box audit's Dirac canaries).

``CoordinateCanaries`` replaced an observer of the one-run audit that wrote into the
engine's gradient buffer. The first tests keep a copy of that observer and require the
engine feature to reproduce it bit for bit; the statistical test fixes its seed and is a
test at level 0.001 (a correct engine fails it with probability at most 0.001 for a
fresh seed, and deterministically never for this one).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

from dpaudit.errors import ConfigError
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.training import (
    CoordinateCanaries,
    DPConfig,
    TrainingSpec,
    train_many,
    train_many_module,
)

LEVEL = 0.001
LOGISTIC = ModelSpec(kind="logistic")


class _OldOneRunCanaries:
    """A verbatim copy of the step observer the one-run audit used before (canary_audit's
    ``_OneRunCanaries``): the reference the engine feature must reproduce bit for bit."""

    def __init__(
        self,
        indices: np.ndarray,
        included: np.ndarray,
        *,
        q: float,
        clip: float,
        denominator: float,
        seed: int,
        full_batch: bool,
    ) -> None:
        self.indices = torch.as_tensor(indices)
        self.included = included
        self.q = q
        self.add = clip / denominator
        self.rng = np.random.default_rng([seed, 9])
        self.full_batch = full_batch
        self.sums = np.zeros(indices.size)

    def __call__(self, info: Any) -> None:
        if not bool(info.active[0]):
            return
        m = self.indices.numel()
        coins = np.ones(m, dtype=bool) if self.full_batch else self.rng.random(m) < self.q
        bump = torch.as_tensor((coins & self.included) * self.add, dtype=info.gradients.dtype)
        info.gradients[0, self.indices] += bump
        self.sums += info.gradients[0, self.indices].double().numpy()


def _one_run_setup(m: int, *, n: int = 150, d: int = 4, seed: int = 0):
    """A 2-class logistic regression with ``m`` all-zero features, one canary each.

    Canary j sits on class 0's weight on zero feature j: flat index ``0·D + (d + j)``
    in the ``(weight (C, D), bias (C,))`` layout, as in the one-run audit.
    """
    rng = np.random.default_rng(seed)
    real = rng.normal(size=(n, d)).astype(np.float32)
    y = (real[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    X = np.concatenate([real, np.zeros((n, m), dtype=np.float32)], axis=1)
    indices = np.arange(d, d + m)
    included = np.random.default_rng([seed, 5]).random(m) < 0.5
    return X, y, indices, included


@pytest.mark.parametrize("full_batch", [False, True], ids=["poisson", "full-batch"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_coordinate_canaries_reproduce_the_old_observer_bit_for_bit(full_batch, dtype):
    m = 40
    X, y, indices, included = _one_run_setup(m)
    n = X.shape[0]
    training = TrainingSpec(
        epochs=3,
        batch_size=30,
        learning_rate=0.3,
        momentum=0.5,
        dp=DPConfig(noise_multiplier=0.8, clipping_norm=0.7),
        full_batch=full_batch,
    )
    q = 1.0 if full_batch else training.batch_size / n
    membership = np.ones((1, n), dtype=bool)
    kwargs = {"model": LOGISTIC, "training": training, "seed": 11, "dtype": dtype}
    observer = _OldOneRunCanaries(
        indices, included, q=q, clip=0.7, denominator=q * n, seed=23, full_batch=full_batch
    )
    old = train_many(X, y, membership, step_observer=observer, **kwargs)
    canaries = CoordinateCanaries(indices=indices, included=included, seed=23)
    new = train_many(X, y, membership, coordinate_canaries=canaries, **kwargs)
    assert old.canary_sums is None
    assert new.canary_sums is not None
    assert new.canary_sums.dtype == np.float64
    np.testing.assert_array_equal(new.canary_sums, observer.sums)
    assert torch.equal(new.models.flat_parameters(), old.models.flat_parameters())
    assert new.records == old.records
    # The canaries moved the scores: included ones have been bumped at least once.
    assert np.any(new.canary_sums[included] != 0)


def test_an_observer_sees_the_gradient_with_the_canaries_in_it():
    X, y, indices, included = _one_run_setup(10)
    training = TrainingSpec(epochs=1, batch_size=30, dp=DPConfig(1.0, 1.0))
    seen = np.zeros(indices.size)

    def observer(info):
        nonlocal seen
        seen = seen + info.gradients[0, torch.as_tensor(indices)].double().numpy()

    result = train_many(
        X,
        y,
        np.ones((1, X.shape[0]), dtype=bool),
        model=LOGISTIC,
        training=training,
        seed=1,
        step_observer=observer,
        coordinate_canaries=CoordinateCanaries(indices, included, seed=2),
    )
    np.testing.assert_array_equal(seen, result.canary_sums)
    assert "canary_sums=<10 sums>" in repr(result)


def test_bump_frequency_of_included_canaries_is_q():
    # With σ = 0 and all-zero features, a canary coordinate of the privatised gradient is
    # exactly its bump C / (q·n) when its coin comes up and 0 otherwise (real examples
    # give those weights a zero gradient), so each sum counts the canary's steps.
    m, n, batch_size, epochs = 200, 200, 20, 5
    X, y, indices, included = _one_run_setup(m, n=n, seed=3)
    training = TrainingSpec(
        epochs=epochs, batch_size=batch_size, dp=DPConfig(noise_multiplier=0.0, clipping_norm=2.0)
    )
    result = train_many(
        X,
        y,
        np.ones((1, n), dtype=bool),
        model=LOGISTIC,
        training=training,
        seed=4,
        dtype=torch.float64,
        coordinate_canaries=CoordinateCanaries(indices, included, seed=5),
    )
    q, steps = batch_size / n, epochs * (n // batch_size)
    assert result.records[0] is not None
    assert result.records[0].steps == steps
    bump = 2.0 / (q * n)
    counts = result.canary_sums / bump
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-9)
    assert np.all(counts[~included] == 0)
    # Every (included canary, step) coin is an independent Bernoulli(q): the total is
    # Binomial(steps × included, q); a two-sided Clopper–Pearson interval at 1 − 0.001.
    trials = steps * int(included.sum())
    total = int(np.round(counts[included]).sum())
    ci = stats.binomtest(total, trials).proportion_ci(confidence_level=1 - LEVEL)
    assert ci.low <= q <= ci.high


def test_full_batch_canaries_are_in_every_step():
    X, y, indices, included = _one_run_setup(12)
    training = TrainingSpec(epochs=4, full_batch=True, dp=DPConfig(0.0, 1.5))
    n = X.shape[0]
    result = train_many(
        X,
        y,
        np.ones((1, n), dtype=bool),
        model=LOGISTIC,
        training=training,
        seed=0,
        dtype=torch.float64,
        coordinate_canaries=CoordinateCanaries(indices, included, seed=0),
    )
    assert result.canary_sums is not None
    expected = np.where(included, 4 * 1.5 / n, 0.0)
    np.testing.assert_allclose(result.canary_sums, expected, rtol=1e-12, atol=0)


def test_generic_path_agrees_with_fast_path():
    X, y, indices, included = _one_run_setup(8, n=60)
    training = TrainingSpec(epochs=2, batch_size=10, dp=DPConfig(0.9, 0.6))
    canaries = CoordinateCanaries(indices, included, seed=3)
    membership = np.ones((1, X.shape[0]), dtype=bool)
    fast = train_many(
        X,
        y,
        membership,
        model=LOGISTIC,
        training=training,
        seed=2,
        dtype=torch.float64,
        coordinate_canaries=canaries,
    )
    init = ModelStack.init(
        LOGISTIC, num_models=1, num_features=X.shape[1], num_classes=2, seed=2, dtype=torch.float64
    )
    generic = train_many_module(
        init.to_module(0),
        X,
        y,
        membership,
        training=training,
        seed=2,
        initial_state=init.state_dict(),
        dtype=torch.float64,
        coordinate_canaries=canaries,
    )
    assert fast.canary_sums is not None
    assert generic.canary_sums is not None
    np.testing.assert_allclose(generic.canary_sums, fast.canary_sums, atol=1e-10, rtol=0)


# -------------------------------------------------------------------------- errors
def test_coordinate_canaries_need_exactly_one_model():
    X, y, indices, included = _one_run_setup(5)
    with pytest.raises(ConfigError, match=r"exactly 1 row \(K = 1\)\. Got K = 2"):
        train_many(
            X,
            y,
            np.ones((2, X.shape[0]), dtype=bool),
            model=LOGISTIC,
            training=TrainingSpec(epochs=1, batch_size=10, dp=DPConfig(1.0, 1.0)),
            seed=0,
            coordinate_canaries=CoordinateCanaries(indices, included, seed=0),
        )


def test_coordinate_canaries_need_dp():
    X, y, indices, included = _one_run_setup(5)
    with pytest.raises(ConfigError, match="need DP-SGD: the 'dp' parameter is None"):
        train_many(
            X,
            y,
            np.ones((1, X.shape[0]), dtype=bool),
            model=LOGISTIC,
            training=TrainingSpec(epochs=1, batch_size=10),
            seed=0,
            coordinate_canaries=CoordinateCanaries(indices, included, seed=0),
        )


def test_coordinate_canary_indices_must_fit_the_model():
    X, y, _, _ = _one_run_setup(5)
    num_parameters = 2 * X.shape[1] + 2
    with pytest.raises(ConfigError, match=f"must be below {num_parameters}"):
        train_many(
            X,
            y,
            np.ones((1, X.shape[0]), dtype=bool),
            model=LOGISTIC,
            training=TrainingSpec(epochs=1, batch_size=10, dp=DPConfig(1.0, 1.0)),
            seed=0,
            coordinate_canaries=CoordinateCanaries(
                np.array([0, num_parameters]), np.array([True, False]), seed=0
            ),
        )


@pytest.mark.parametrize(
    ("indices", "included", "seed", "match"),
    [
        (np.array([], dtype=np.int64), np.array([], dtype=bool), 0, "non-empty 1-D array"),
        (np.array([0.0, 1.0]), np.array([True, True]), 0, "integers. Got dtype float64"),
        (np.array([1, 1]), np.array([True, True]), 0, "distinct integers >= 0"),
        (np.array([-1, 2]), np.array([True, True]), 0, "distinct integers >= 0"),
        (np.array([0, 1]), np.array([1, 0]), 0, "must be 2 booleans"),
        (np.array([0, 1]), np.array([True]), 0, r"Got dtype bool and shape \(1,\)"),
        (
            np.array([0, 1]),
            np.array([True, False]),
            -1,
            r"The 'seed' parameter must be an integer in \[0, inf\)\. Got -1 instead\.",
        ),
    ],
)
def test_coordinate_canaries_validate_their_fields(indices, included, seed, match):
    with pytest.raises(ConfigError, match=match):
        CoordinateCanaries(indices, included, seed=seed)


def test_coordinate_canaries_repr():
    canaries = CoordinateCanaries([3, 4, 5], [True, False, True], seed=7)
    assert repr(canaries) == "CoordinateCanaries(canaries=3, included=2, seed=7)"
    assert canaries.indices.dtype == np.int64
