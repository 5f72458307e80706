"""Poisson sampling by geometric skips: the law of the batches and the cost per step.

The engine draws, per model and step, geometric gaps between sampled members instead of
one uniform per member (``dpaudit.training.engine._geometric_gaps``). These tests check
the batches' law against its definition (every member independently with probability
q), with the usual margin of gaps and with no margin at all (which makes the rare
"draw more gaps" path run in most steps), and that the random numbers drawn per step do
not grow with the number of rows.

Statistical tests fix their seeds; each test is at family-wise level 0.001, with the
Bonferroni split written where it is made.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

from dpaudit.models import ModelSpec, ModelStack
from dpaudit.training import DPConfig, StepInfo, TrainingSpec, engine, train_many
from dpaudit.training.engine import LinearStackBackend, run_engine

FAMILY_LEVEL = 0.001
LOGISTIC = ModelSpec(kind="logistic")


class _Batches:
    """Step observer: every active model's batch rows, per model."""

    def __init__(self) -> None:
        self.rows: dict[int, list[np.ndarray]] = {}

    def __call__(self, info: StepInfo) -> None:
        for i, k in enumerate(info.model_indices.tolist()):
            if bool(info.active[i]):
                self.rows.setdefault(k, []).append(info.batch_rows[i][info.batch_valid[i]].numpy())


def _chi_square_pvalue(sample: np.ndarray, law: stats.rv_discrete) -> float:
    """Chi-square goodness of fit of integer ``sample`` (values >= 0) to ``law``.

    Bins are consecutive values, each closed as soon as its expected count reaches 5
    (Cochran's rule); the upper tail is merged into the last bin, so the expected counts
    sum to the sample size."""
    size = len(sample)
    uppers: list[int] = []
    mass = 0.0
    for v in range(int(law.isf(1e-12)) + 1):
        mass += float(law.pmf(v))
        if mass * size >= 5:
            uppers.append(v)
            mass = 0.0
    inner = np.array(uppers[:-1])  # the last bin is (uppers[-2], ∞)
    cdf = law.cdf(inner)
    probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
    observed = np.bincount(np.searchsorted(inner, sample, side="left"), minlength=probs.size)
    expected = probs * size
    assert len(probs) >= 5
    assert expected.min() >= 5, expected
    return float(stats.chisquare(observed, expected).pvalue)


def _sample(margin: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[np.ndarray, _Batches]:
    if not margin:
        # ⌈n·q⌉ gaps per step: about half of all steps run out of gaps and draw more.
        monkeypatch.setattr(engine, "GAP_SIGMAS", 0.0)
        monkeypatch.setattr(engine, "GAP_MARGIN", 0)
    rng = np.random.default_rng(11)
    n = 300
    x = rng.normal(size=(n, 2)).astype(np.float32)
    y = rng.integers(0, 2, n)
    # Three models with 60, 150 and 300 members and b = 12: q = 0.2, 0.08, 0.04.
    membership = np.zeros((3, n), dtype=bool)
    for k, members in enumerate((60, 150, 300)):
        membership[k, rng.choice(n, size=members, replace=False)] = True
    batches = _Batches()
    train_many(
        x,
        y,
        membership,
        model=LOGISTIC,
        training=TrainingSpec(epochs=40, batch_size=12),
        seed=5,
        step_observer=batches,
    )
    return membership, batches


@pytest.mark.parametrize("margin", [True, False], ids=["margin", "no-margin"])
def test_batches_follow_the_poisson_sampling_law(
    margin: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    membership, batches = _sample(margin, monkeypatch)
    # Bonferroni over 3 models × 3 checks: each at 0.001 / 9.
    level = FAMILY_LEVEL / 9
    for k in range(3):
        members = np.flatnonzero(membership[k])
        n = members.size
        q = 12 / n
        steps = 40 * (n // 12)
        assert len(batches.rows[k]) == steps
        included = np.zeros((steps, n), dtype=bool)
        position = np.full(membership.shape[1], -1)
        position[members] = np.arange(n)
        for t, rows in enumerate(batches.rows[k]):
            assert np.all(np.diff(rows) > 0)  # increasing: no row twice
            assert np.all(position[rows] >= 0)  # members only
            included[t, position[rows]] = True
        # 1. Batch sizes ~ Binomial(n, q), the steps independent.
        assert _chi_square_pvalue(included.sum(axis=1), stats.binom(n, q)) > level
        # 2. Each member's count over the steps ~ Binomial(steps, q), independently of
        #    the other members (Poisson sampling includes every member independently).
        assert _chi_square_pvalue(included.sum(axis=0), stats.binom(steps, q)) > level
        # 3. Neighbours in the member list are included independently (gaps that were
        #    not geometric would correlate them): pairs ~ Binomial(steps·(n − 1), q²),
        #    exact two-sided binomial test.
        pairs = int(np.sum(included[:, 1:] & included[:, :-1]))
        assert stats.binomtest(pairs, steps * (n - 1), q * q).pvalue > level


def test_no_margin_gives_the_same_results_whatever_the_chunking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The "draw more gaps" path continues each model's own stream, so a model's batches
    # do not depend on the chunk it is trained in (float64: equal to rounding).
    monkeypatch.setattr(engine, "GAP_SIGMAS", 0.0)
    monkeypatch.setattr(engine, "GAP_MARGIN", 0)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(90, 3))
    y = rng.integers(0, 3, 90)
    membership = rng.random((4, 90)) < 0.6
    kwargs: dict[str, Any] = {
        "model": ModelSpec(hidden=(5,)),
        "training": TrainingSpec(epochs=3, batch_size=7, dp=DPConfig(1.0, 1.0)),
        "seed": 4,
        "dtype": torch.float64,
    }
    together = train_many(x, y, membership, **kwargs).models.flat_parameters()
    one_by_one = train_many(x, y, membership, memory_budget_bytes=1, **kwargs)
    torch.testing.assert_close(one_by_one.models.flat_parameters(), together, atol=1e-10, rtol=0)
    alone = train_many(x, y, membership[2:3], model_offset=2, **kwargs)
    torch.testing.assert_close(alone.models.flat_parameters()[0], together[2], atol=1e-10, rtol=0)


def test_a_models_noise_does_not_depend_on_how_many_models_share_its_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The noise block was once shortened for large chunks (to cap the chunk's noise
    # memory), which cut each model's noise stream into other calls: a model trained
    # among 1,000 on digits differed from the same model trained among 64 by up to 0.4
    # after one epoch; here (one chunk of 300, block 11 instead of 16) by 0.025. Now the
    # block depends on the model's size only, so the two agree to float32 rounding of
    # the padded batch products.
    monkeypatch.setattr(engine, "STEP_WORKING_SET_BYTES", 2**40)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(256, 64)).astype(np.float32)
    y = rng.integers(0, 10, 256)
    membership = np.ones((300, 256), dtype=bool)
    kwargs: dict[str, Any] = {
        "model": ModelSpec(hidden=(64,)),
        "training": TrainingSpec(epochs=5, batch_size=64, dp=DPConfig(1.0, 1.0)),
        "seed": 3,
        "processes": 1,
    }
    together = train_many(x, y, membership, **kwargs).models.flat_parameters()
    alone = train_many(x, y, membership[7:8], model_offset=7, **kwargs).models
    torch.testing.assert_close(alone.flat_parameters()[0], together[7], atol=1e-5, rtol=0)
    assert (
        engine._chunk_size(  # one chunk of 300 (the old block: 11 of the 20 steps)
            2**30,
            num_models=300,
            num_parameters=4810,
            max_members=256,
            batch=136,
            gaps_per_step=64,
            bytes_per_example=1752,
            itemsize=4,
            momentum=False,
            noise_block=16,
        )
        == 300
    )


def test_rate_one_samples_every_member() -> None:
    # batch_size = n: q = 1, ln(1 − q) = −∞, every gap is 1.
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40, 2)).astype(np.float32)
    y = rng.integers(0, 2, 40)
    membership = np.zeros((2, 40), dtype=bool)
    membership[0, :25] = True
    membership[1, 10:35] = True
    batches = _Batches()
    training = TrainingSpec(epochs=5, batch_size=25)
    train_many(x, y, membership, model=LOGISTIC, training=training, seed=1, step_observer=batches)
    for k in range(2):
        assert len(batches.rows[k]) == 5
        for rows in batches.rows[k]:
            assert rows.tolist() == np.flatnonzero(membership[k]).tolist()


def _uniforms_per_step(n: int, monkeypatch: pytest.MonkeyPatch) -> float:
    """Uniforms the engine draws per model and step for plain SGD on ``n`` members with
    batch size 32 (plain SGD draws no noise and no canary coins: every ``torch.rand``
    call inside ``run_engine`` samples batches)."""
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.normal(size=(n, 2)).astype(np.float32))
    y = torch.as_tensor(rng.integers(0, 2, n))
    membership = np.ones((2, n), dtype=bool)
    spec = LOGISTIC
    theta0 = ModelStack.init(spec, num_models=2, num_features=2, num_classes=2, seed=0)
    training = TrainingSpec(epochs=1, batch_size=32)
    drawn = [0]
    rand = torch.rand

    def counting_rand(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = rand(*args, **kwargs)
        drawn[0] += out.numel()
        return out

    monkeypatch.setattr(torch, "rand", counting_rand)
    run = run_engine(
        LinearStackBackend(spec, 2, 2),
        theta0.flat_parameters(),
        x,
        y,
        membership,
        training=training,
        seed=1,
    )
    monkeypatch.setattr(torch, "rand", rand)
    assert run.records == (None, None)
    return drawn[0] / (2 * (n // 32))


def test_sampling_cost_per_step_does_not_grow_with_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    small = _uniforms_per_step(1_000, monkeypatch)
    large = _uniforms_per_step(20_000, monkeypatch)
    # One uniform per member would be 1,000 and 20,000. The gap count is
    # ⌈b + 8·√(b(1 − q))⌉ + 8 per step (≈ 86 for b = 32), the same for both sizes up to
    # √(1 − q); "draw more" steps are far rarer than 1 in 20 at this margin.
    assert small <= 3 * 32
    assert large <= 3 * 32
    assert large <= 1.05 * small
