"""The training engine against Opacus 1.6 as an oracle (Opacus is a test-only dependency).

Everything runs in float64, where both implementations agree to rounding (~1e-15); the
tolerance 1e-10 is far tighter than the 1e-6 the engine promises and far looser than
float64 rounding over a few hundred operations.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpaudit.models import ModelSpec, ModelStack
from dpaudit.training import (
    DPConfig,
    FunctionalBackend,
    LinearStackBackend,
    TrainingSpec,
    train_many,
)

opacus = pytest.importorskip("opacus")
from opacus import GradSampleModule  # noqa: E402
from opacus.optimizers import DPOptimizer  # noqa: E402

# Opacus' hooks warn when the inputs do not require gradients; that is expected here.
pytestmark = pytest.mark.filterwarnings("ignore:Full backward hook:UserWarning")
TOL = 1e-10
SPECS = [
    ModelSpec(kind="logistic"),
    ModelSpec(kind="mlp", hidden=(7,), activation="relu"),
    ModelSpec(kind="mlp", hidden=(6, 5), activation="tanh"),
    ModelSpec(kind="mlp", hidden=(6,), activation="sigmoid"),
    ModelSpec(kind="mlp", hidden=(6,), activation="gelu"),
]


def _data(n: int = 40, d: int = 5, classes: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = rng.integers(0, classes, size=n)
    return X, y


def _opacus_per_example(module: torch.nn.Module, xb: torch.Tensor, yb: torch.Tensor):
    gsm = GradSampleModule(module)
    loss = F.cross_entropy(gsm(xb), yb)  # mean reduction: Opacus rescales by batch size
    loss.backward()
    grads = torch.cat([p.grad_sample.reshape(len(xb), -1) for p in gsm.parameters()], dim=1)
    gsm._close()
    return grads


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.kind}-{s.hidden_widths}-{s.activation}")
def test_per_example_gradients_match_opacus(spec):
    X, y = _data()
    stack = ModelStack.init(
        spec, num_models=3, num_features=5, num_classes=3, seed=4, dtype=torch.float64
    )
    backend = LinearStackBackend(spec, 5, 3)
    xb = torch.as_tensor(X).expand(3, -1, -1).contiguous()
    yb = torch.as_tensor(y).expand(3, -1).contiguous()
    valid = torch.ones(yb.shape, dtype=torch.bool)
    theta = stack.flat_parameters()
    fast = backend.per_example_gradients(theta, xb, yb, valid)
    norms = backend.per_example_norms(theta, xb, yb, valid)
    generic = FunctionalBackend(stack.to_module(0)).per_example_gradients(theta, xb, yb, valid)
    for k in range(3):
        oracle = _opacus_per_example(stack.to_module(k), xb[k], yb[k])
        torch.testing.assert_close(fast[k], oracle, atol=TOL, rtol=0)
        torch.testing.assert_close(generic[k], oracle, atol=TOL, rtol=0)
        torch.testing.assert_close(norms[k], oracle.norm(dim=1), atol=TOL, rtol=0)


def _opacus_steps(module, batches, X, y, *, training: TrainingSpec, expected_batch_size):
    """Run Opacus' DPOptimizer (σ = 0) on the given batches of rows; return flat params."""
    gsm = GradSampleModule(module)
    optimizer = DPOptimizer(
        torch.optim.SGD(
            gsm.parameters(),
            lr=training.learning_rate,
            momentum=training.momentum,
            weight_decay=training.weight_decay,
        ),
        noise_multiplier=0.0,
        max_grad_norm=training.dp.clipping_norm,
        expected_batch_size=expected_batch_size,
    )
    for rows in batches:
        optimizer.zero_grad()
        xb, yb = torch.as_tensor(X[rows]), torch.as_tensor(y[rows])
        F.cross_entropy(gsm(xb), yb).backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in gsm.parameters()])
    gsm._close()
    return flat


def _run_and_capture(X, y, membership, spec, training, seed=11):
    batches: dict[int, list] = {}
    norms_seen: list[torch.Tensor] = []
    backend = LinearStackBackend(spec, X.shape[1], 3)

    def observer(info):
        for i, k in enumerate(info.model_indices.tolist()):
            rows = info.batch_rows[i][info.batch_valid[i]].tolist()
            batches.setdefault(k, []).append(rows)
        xb = torch.as_tensor(X)[info.batch_rows]
        yb = torch.as_tensor(y)[info.batch_rows]
        norms = backend.per_example_norms(info.parameters, xb, yb, info.batch_valid)
        norms_seen.append(norms[info.batch_valid])

    result = train_many(
        X,
        y,
        membership,
        model=spec,
        training=training,
        seed=seed,
        num_classes=3,
        dtype=torch.float64,
        step_observer=observer,
    )
    init = ModelStack.init(
        spec,
        num_models=len(membership),
        num_features=X.shape[1],
        num_classes=3,
        seed=seed,
        dtype=torch.float64,
    )
    return result, init, batches, torch.cat(norms_seen)


@pytest.mark.parametrize("spec", [SPECS[0], SPECS[1]], ids=["logistic", "mlp"])
@pytest.mark.parametrize("regime", ["all-clipped", "none-clipped"])
def test_one_noiseless_step_matches_opacus(spec, regime):
    # 20 members and batch 12: q = 0.6, 20 // 12 = 1 step. Six models in one chunk draw
    # different batch sizes, so every model but the largest runs on a padded batch and
    # is compared with Opacus on its valid rows only.
    X, y = _data(n=30)
    rng = np.random.default_rng(1)
    membership = np.zeros((6, 30), dtype=bool)
    for k in range(6):
        membership[k, rng.choice(30, size=20, replace=False)] = True
    clip = 0.05 if regime == "all-clipped" else 1e3
    training = TrainingSpec(
        epochs=1,
        batch_size=12,
        learning_rate=0.7,
        dp=DPConfig(noise_multiplier=0.0, clipping_norm=clip),
    )
    result, init, batches, norms = _run_and_capture(X, y, membership, spec, training)
    if regime == "all-clipped":
        assert bool((norms > clip).all())
    else:
        assert bool((norms < clip).all())
    sizes = {len(b[0]) for b in batches.values()}
    assert len(sizes) > 1, "the test needs padded batches of different sizes"
    for k in range(6):
        assert len(batches[k]) == 1
        oracle = _opacus_steps(
            init.to_module(k), batches[k], X, y, training=training, expected_batch_size=12
        )
        torch.testing.assert_close(result.models.flat_parameters()[k], oracle, atol=TOL, rtol=0)


def test_several_steps_with_momentum_and_weight_decay_match_opacus():
    X, y = _data(n=30)
    membership = np.zeros((3, 30), dtype=bool)
    membership[0, :20] = True
    membership[1, 5:25] = True
    membership[2, 10:] = True
    spec = SPECS[2]
    training = TrainingSpec(
        epochs=3,
        batch_size=5,
        learning_rate=0.3,
        momentum=0.9,
        weight_decay=0.01,
        dp=DPConfig(noise_multiplier=0.0, clipping_norm=0.5),
    )
    result, init, batches, _ = _run_and_capture(X, y, membership, spec, training)
    for k in range(3):
        assert len(batches[k]) == 3 * (20 // 5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Opacus warns about empty batches, if any
            oracle = _opacus_steps(
                init.to_module(k), batches[k], X, y, training=training, expected_batch_size=5
            )
        torch.testing.assert_close(result.models.flat_parameters()[k], oracle, atol=TOL, rtol=0)


def test_padded_rows_do_not_contribute():
    # Garbage (finite) in the padded rows must not change the clipped sum of the valid rows.
    X, y = _data(n=12)
    spec = SPECS[1]
    stack = ModelStack.init(
        spec, num_models=2, num_features=5, num_classes=3, seed=2, dtype=torch.float64
    )
    backend = LinearStackBackend(spec, 5, 3)
    xb = torch.as_tensor(X).expand(2, -1, -1).clone()
    yb = torch.as_tensor(y).expand(2, -1).clone()
    valid = torch.ones(yb.shape, dtype=torch.bool)
    valid[0, 7:] = False
    xb[0, 7:] = 1e3 * torch.randn(
        5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    total = backend.clipped_sum(stack.flat_parameters(), xb, yb, valid, 0.1)
    grads = _opacus_per_example(stack.to_module(0), xb[0, :7], yb[0, :7])
    factor = (0.1 / (grads.norm(dim=1) + 1e-6)).clamp(max=1.0)
    torch.testing.assert_close(total[0], (factor[:, None] * grads).sum(0), atol=TOL, rtol=0)
