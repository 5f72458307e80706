"""The training engine: sampling and noise statistics, independence, records, extension
points, the generic path, and input errors.

Statistical tests fix their seeds; each is a test at family-wise level 0.001, with the
correction written where it is made, so a correct engine fails one of them with
probability at most 0.001 for a fresh seed (and deterministically never for these).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from dpaudit.errors import ConfigError, DataError, DpauditError
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.training import (
    DPConfig,
    GradientCanary,
    TrainingSpec,
    init_module_stack,
    train_many,
    train_many_module,
)

FAMILY_LEVEL = 0.001
LOGISTIC = ModelSpec(kind="logistic")
MLP = ModelSpec(hidden=(6,), activation="tanh")


def _data(n=200, d=3, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, classes, size=n)
    return X, y


def _equal_membership(num_models, n, members, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.zeros((num_models, n), dtype=bool)
    for k in range(num_models):
        mask[k, rng.choice(n, size=members, replace=False)] = True
    return mask


class _Recorder:
    def __init__(self):
        self.rows: dict[int, list[np.ndarray]] = {}
        self.grads: dict[int, list[torch.Tensor]] = {}
        self.params: dict[int, list[torch.Tensor]] = {}
        self.canary: dict[int, list[bool]] = {}

    def __call__(self, info):
        for i, k in enumerate(info.model_indices.tolist()):
            if not bool(info.active[i]):
                continue
            self.rows.setdefault(k, []).append(info.batch_rows[i][info.batch_valid[i]].numpy())
            self.grads.setdefault(k, []).append(info.gradients[i].clone())
            self.params.setdefault(k, []).append(info.parameters[i].clone())
            if info.canary_sampled is not None:
                self.canary.setdefault(k, []).append(bool(info.canary_sampled[i]))


# ------------------------------------------------------------------- Poisson sampling
@pytest.fixture(scope="module")
def sampled():
    # 20 models, each with exactly 100 of 200 rows, b = 10: q = 0.1, 10 epochs of 10 steps.
    X, y = _data()
    membership = _equal_membership(20, 200, 100, seed=1)
    recorder = _Recorder()
    result = train_many(
        X,
        y,
        membership,
        model=LOGISTIC,
        training=TrainingSpec(epochs=10, batch_size=10, dp=DPConfig(1.0, 1.0)),
        seed=7,
        step_observer=recorder,
    )
    return membership, recorder, result


def test_non_members_are_never_sampled(sampled):
    membership, recorder, _ = sampled
    for k, batches in recorder.rows.items():
        rows = np.concatenate(batches)
        assert membership[k, rows].all()
        for batch in batches:
            assert len(set(batch.tolist())) == len(batch)  # no row twice in a batch


def test_each_member_is_included_at_rate_q(sampled):
    membership, recorder, result = sampled
    q, steps = 0.1, 100
    assert all(r.sampling_rate == q and r.steps == steps for r in result.records)
    # The records state what ran: every model made exactly `steps` observed steps.
    assert all(len(recorder.rows[k]) == steps for k in range(20))
    pairs = int(membership.sum())
    # Bonferroni over all (model, member) pairs: each two-sided Clopper–Pearson interval
    # at 1 − 0.001 / pairs, so that all hold jointly with probability ≥ 0.999.
    level = 1 - FAMILY_LEVEL / pairs
    for k, batches in recorder.rows.items():
        counts = np.bincount(np.concatenate(batches), minlength=200)
        for i in np.flatnonzero(membership[k]):
            ci = stats.binomtest(int(counts[i]), steps).proportion_ci(confidence_level=level)
            assert ci.low <= q <= ci.high, (k, i, counts[i])
    # Pooled over all pairs the rate is pinned much tighter: 200,000 Bernoulli(q) trials.
    total = sum(len(b) for batches in recorder.rows.values() for b in batches)
    ci = stats.binomtest(total, pairs * steps).proportion_ci(confidence_level=1 - FAMILY_LEVEL)
    assert ci.low <= q <= ci.high
    assert ci.high - ci.low < 0.005


def test_batch_sizes_follow_binomial(sampled):
    _, recorder, _ = sampled
    sizes = np.array([len(b) for batches in recorder.rows.values() for b in batches])
    assert len(sizes) == 20 * 100
    distribution = stats.binom(100, 0.1)
    # Chi-square goodness of fit on bins with expected counts >= 5 (Cochran's rule); the
    # tails are merged into the end bins so the expected counts sum to the sample size.
    edges = np.arange(3, 19)  # bins (-inf, 3], 4, ..., 17, [18, inf)
    observed = [np.sum(sizes <= 3)] + [np.sum(sizes == v) for v in edges[1:-1]]
    observed.append(np.sum(sizes >= 18))
    probs = [distribution.cdf(3)] + [distribution.pmf(v) for v in edges[1:-1]]
    probs.append(distribution.sf(17))
    expected = np.array(probs) * len(sizes)
    assert expected.min() >= 5
    assert stats.chisquare(observed, expected).pvalue > FAMILY_LEVEL
    # Padding never truncates: the largest batch exceeds the expected size.
    assert sizes.max() > 10


def test_noise_has_standard_deviation_sigma_c():
    # Same seed with σ = 0 gives the same batches (sampling and noise are separate
    # streams) and the same step-0 parameters, so the difference of the step-0 gradients
    # times the expected batch size is exactly the noise N(0, σ²C²).
    X, y = _data(d=8)
    membership = _equal_membership(30, 200, 100, seed=2)
    sigma, clip = 2.0, 0.5
    grads = {}
    for s in (sigma, 0.0):
        recorder = _Recorder()
        train_many(
            X,
            y,
            membership,
            model=MLP,
            seed=3,
            dtype=torch.float64,
            step_observer=recorder,
            training=TrainingSpec(epochs=1, batch_size=10, dp=DPConfig(s, clip)),
        )
        grads[s] = torch.stack([recorder.grads[k][0] for k in range(30)])
        rows = [recorder.rows[k][0] for k in range(30)]
        if s == sigma:
            rows_noisy = rows
    assert all(np.array_equal(a, b) for a, b in zip(rows, rows_noisy, strict=True))
    z = ((grads[sigma] - grads[0.0]) * 10 / (sigma * clip)).flatten().numpy()
    n = z.size  # 30 models × P = 30 × (8·6 + 6 + 6·3 + 3) = 2,250
    # Σ z² ~ χ²_n when the noise is N(0, 1) after scaling; two-sided interval, and the mean
    # ~ N(0, 1/n); Bonferroni over the two checks at 0.001 / 2 each.
    low, high = stats.chi2.ppf([FAMILY_LEVEL / 4, 1 - FAMILY_LEVEL / 4], df=n)
    assert low <= float(np.sum(z**2)) <= high
    assert abs(z.mean()) <= stats.norm.ppf(1 - FAMILY_LEVEL / 4) / np.sqrt(n)
    # Different models draw different noise.
    assert abs(np.corrcoef(z.reshape(30, -1)[0], z.reshape(30, -1)[1])[0, 1]) < 0.3


def test_full_batch_uses_every_member_every_step():
    X, y = _data(n=50)
    membership = _equal_membership(3, 50, 30, seed=3)
    membership[2, :] = False
    membership[2, :7] = True
    recorder = _Recorder()
    result = train_many(
        X,
        y,
        membership,
        model=LOGISTIC,
        seed=1,
        step_observer=recorder,
        training=TrainingSpec(epochs=4, full_batch=True, dp=DPConfig(1.0, 1.0)),
    )
    for k in range(3):
        assert len(recorder.rows[k]) == 4
        for rows in recorder.rows[k]:
            assert sorted(rows.tolist()) == np.flatnonzero(membership[k]).tolist()
        record = result.records[k]
        assert record.sampling == "full-batch"
        assert (record.sampling_rate, record.steps) == (1.0, 4)
        assert record.dataset_size == membership[k].sum()


# --------------------------------------------------------------------- independence
def _varied_membership():
    rng = np.random.default_rng(4)
    mask = np.zeros((5, 120), dtype=bool)
    for k, size in enumerate((37, 45, 50, 61, 80)):
        mask[k, rng.choice(120, size=size, replace=False)] = True
    return mask


def test_stacked_models_equal_models_trained_one_at_a_time():
    X, y = _data(n=120, d=4)
    membership = _varied_membership()
    training = TrainingSpec(
        epochs=3,
        batch_size=8,
        learning_rate=0.2,
        momentum=0.5,
        weight_decay=1e-3,
        dp=DPConfig(1.3, 0.7),
    )
    kwargs = {
        "model": MLP,
        "training": training,
        "seed": 21,
        "num_classes": 3,
        "dtype": torch.float64,
    }
    stacked = train_many(X, y, membership, **kwargs)
    # Models have different numbers of steps (8 // 37 ... 80 // 8 per epoch): the short
    # ones sit out the chunk's last steps.
    assert [r.steps for r in stacked.records] == [3 * (m // 8) for m in (37, 45, 50, 61, 80)]
    chunked = train_many(X, y, membership, memory_budget_bytes=1, **kwargs)
    torch.testing.assert_close(
        chunked.models.flat_parameters(), stacked.models.flat_parameters(), atol=1e-10, rtol=0
    )
    for k in range(5):
        alone = train_many(X, y, membership[k : k + 1], model_offset=k, **kwargs)
        torch.testing.assert_close(
            alone.models.flat_parameters()[0],
            stacked.models.flat_parameters()[k],
            atol=1e-10,
            rtol=0,
        )
        assert alone.records[0] == stacked.records[k]


def test_deterministic_in_float32_and_seed_dependent():
    X, y = _data(n=120, d=4)
    membership = _varied_membership()
    training = TrainingSpec(epochs=2, batch_size=8, dp=DPConfig(1.0, 1.0))
    a = train_many(X, y, membership, model=MLP, training=training, seed=5)
    b = train_many(X, y, membership, model=MLP, training=training, seed=5)
    c = train_many(X, y, membership, model=MLP, training=training, seed=6)
    assert a.models.dtype == torch.float32
    assert torch.equal(a.models.flat_parameters(), b.models.flat_parameters())
    assert not torch.equal(a.models.flat_parameters(), c.models.flat_parameters())


def test_generic_path_agrees_with_fast_path():
    X, y = _data(n=120, d=4)
    membership = _varied_membership()
    training = TrainingSpec(epochs=2, batch_size=8, momentum=0.3, dp=DPConfig(0.8, 0.5))
    fast = train_many(
        X, y, membership, model=MLP, training=training, seed=8, num_classes=3, dtype=torch.float64
    )
    init = ModelStack.init(
        MLP, num_models=5, num_features=4, num_classes=3, seed=8, dtype=torch.float64
    )
    generic = train_many_module(
        init.to_module(0),
        X,
        y,
        membership,
        training=training,
        seed=8,
        initial_state=init.state_dict(),
        dtype=torch.float64,
    )
    assert generic.records == fast.records
    for key, value in fast.models.state_dict().items():
        torch.testing.assert_close(generic.models[key], value, atol=1e-10, rtol=0)


def test_generic_default_init_is_seeded_per_model():
    module = torch.nn.Sequential(torch.nn.Linear(4, 3))
    state = torch.get_rng_state()
    a = init_module_stack(module, num_models=4, seed=1)
    b = init_module_stack(module, num_models=2, seed=1, model_offset=2)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is untouched
    torch.testing.assert_close(a[2:], b, atol=0, rtol=0)
    assert not torch.equal(a[0], a[1])


# ------------------------------------------------------------------------ plain SGD
def test_plain_sgd_step_is_the_unclipped_sum_over_the_expected_batch_size():
    X, y = _data(n=60, d=4)
    membership = _equal_membership(3, 60, 40, seed=5)
    recorder = _Recorder()
    result = train_many(
        X,
        y,
        membership,
        model=MLP,
        seed=2,
        dtype=torch.float64,
        step_observer=recorder,
        training=TrainingSpec(epochs=1, batch_size=8),
    )
    assert result.records == (None, None, None)
    init = ModelStack.init(
        MLP, num_models=3, num_features=4, num_classes=3, seed=2, dtype=torch.float64
    )
    for k in range(3):
        module = init.to_module(k)
        rows = recorder.rows[k][0]
        loss = F.cross_entropy(
            module(torch.as_tensor(X[rows], dtype=torch.float64)),
            torch.as_tensor(y[rows]),
            reduction="sum",
        )
        loss.backward()
        expected = torch.cat([p.grad.reshape(-1) for p in module.parameters()]) / 8
        torch.testing.assert_close(recorder.grads[k][0], expected, atol=1e-12, rtol=0)


def test_plain_sgd_learns_digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    membership = np.zeros((4, len(y)), dtype=bool)
    membership[:, :1000] = True
    result = train_many(
        X,
        y,
        membership,
        model=ModelSpec(hidden=(32,)),
        seed=0,
        training=TrainingSpec(epochs=10, batch_size=32, learning_rate=0.5),
    )
    # Sanity bar: a 64-32-10 MLP reaches ~95 % on held-out digits; chance is 10 %.
    accuracy = result.models.accuracy(X[1000:], y[1000:])
    assert float(accuracy.min()) > 0.85


# --------------------------------------------------------------------- extensions
def test_gradient_canary_adds_c_times_direction_when_sampled():
    X, y = _data(n=100, d=4)
    membership = _equal_membership(40, 100, 50, seed=6)
    training = TrainingSpec(epochs=10, batch_size=10, dp=DPConfig(1.0, 0.5))
    num_params = 4 * 3 + 3
    direction = np.arange(1, num_params + 1, dtype=float)
    included = np.arange(40) % 2 == 0
    canary = GradientCanary(direction=direction, included=included)
    with_canary, without = _Recorder(), _Recorder()
    kwargs = {"model": LOGISTIC, "training": training, "seed": 4, "dtype": torch.float64}
    train_many(X, y, membership, step_observer=with_canary, gradient_canary=canary, **kwargs)
    train_many(X, y, membership, step_observer=without, **kwargs)
    unit = torch.as_tensor(direction / np.linalg.norm(direction))
    sampled = 0
    for k in range(40):
        flags = with_canary.canary[k]
        assert len(flags) == 50
        if not included[k]:
            assert not any(flags)
            continue
        sampled += sum(flags)
        # At step 0 the parameters, batch and noise agree; only the canary differs.
        difference = with_canary.grads[k][0] - without.grads[k][0]
        expected = unit * 0.5 / 10 if flags[0] else torch.zeros_like(unit)
        torch.testing.assert_close(difference, expected, atol=1e-12, rtol=0)
        assert np.array_equal(with_canary.rows[k][0], without.rows[k][0])
    # The canary's inclusion coin has rate q = 10 / 50 = 0.2: 20 models × 50 steps.
    ci = stats.binomtest(sampled, 20 * 50).proportion_ci(confidence_level=1 - FAMILY_LEVEL)
    assert ci.low <= 0.2 <= ci.high


def test_progress_and_repr():
    X, y = _data(n=40)
    membership = _equal_membership(5, 40, 20)
    calls = []
    result = train_many(
        X,
        y,
        membership,
        model=LOGISTIC,
        seed=0,
        memory_budget_bytes=1,
        training=TrainingSpec(epochs=1, batch_size=5, dp=DPConfig(1.0, 1.0)),
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls == [(k, 5) for k in range(1, 6)]
    text = repr(result)
    assert "5 × DPSGDRecord(noise_multiplier=1, sampling_rate=0.25, steps=4" in text
    assert result.seconds > 0


# ------------------------------------------------------------------------- errors
def test_bad_inputs_raise_clear_errors():
    X, y = _data(n=20)
    membership = np.ones((2, 20), dtype=bool)
    spec = TrainingSpec(batch_size=5)
    with pytest.raises(
        ConfigError, match=r"The 'noise_multiplier' parameter must be in \[0, inf\)"
    ):
        DPConfig(noise_multiplier=-1.0, clipping_norm=1.0)
    with pytest.raises(ConfigError, match=r"The 'clipping_norm' parameter must be in \(0, inf\)"):
        DPConfig(noise_multiplier=1.0, clipping_norm=0.0)
    with pytest.raises(
        ConfigError,
        match=r"The 'epochs' parameter must be an integer in \[1, inf\)\. Got 0 instead\.",
    ):
        TrainingSpec(epochs=0)
    with pytest.raises(ConfigError, match=r"The 'momentum' parameter must be in \[0, 1\)"):
        TrainingSpec(momentum=1.0)
    with pytest.raises(ConfigError, match="batch_size' parameter must be at most the number"):
        train_many(X, y, membership, model=LOGISTIC, seed=0, training=TrainingSpec(batch_size=21))
    with pytest.raises(DataError, match=r"must be a \(K, 20\) boolean array"):
        train_many(X, y, membership.astype(int), model=LOGISTIC, training=spec, seed=0)
    empty = membership.copy()
    empty[1] = False
    with pytest.raises(DataError, match=r"Models \[1\] have none"):
        train_many(X, y, empty, model=LOGISTIC, training=spec, seed=0)
    with pytest.raises(DataError, match="finite"):
        train_many(np.full_like(X, np.nan), y, membership, model=LOGISTIC, training=spec, seed=0)
    with pytest.raises(DataError, match="integer labels"):
        train_many(X, y.astype(float), membership, model=LOGISTIC, training=spec, seed=0)
    with pytest.raises(ConfigError, match="A gradient canary needs DP-SGD"):
        train_many(
            X,
            y,
            membership,
            model=LOGISTIC,
            training=spec,
            seed=0,
            gradient_canary=GradientCanary(direction=np.ones(12), included=np.ones(2, bool)),
        )
    with pytest.raises(ConfigError, match="must have 12 entries"):
        train_many(
            X,
            y,
            membership,
            model=LOGISTIC,
            seed=0,
            training=TrainingSpec(batch_size=5, dp=DPConfig(1.0, 1.0)),
            gradient_canary=GradientCanary(direction=np.ones(5), included=np.ones(2, bool)),
        )
    with pytest.raises(DpauditError, match="memory_budget_bytes"):
        train_many(X, y, membership, model=LOGISTIC, training=spec, seed=0, memory_budget_bytes=0)
