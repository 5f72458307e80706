"""The engine's speed-ups change no number.

* ReLU's backward uses autograd's ``threshold_backward`` kernel instead of multiplying
  by a float copy of the mask ``z > 0``;
* the first layer's input norms ‖x_i‖² are computed once per run and gathered per step
  (``LinearStackBackend.cache_inputs`` and ``clipped_sum(..., rows=...)``);
* clipping scales the deltas in place.

Each is compared bit for bit with the computation it replaced, and a whole DP-SGD run
with the cache against one without it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpaudit.models import ModelSpec, ModelStack
from dpaudit.training import DPConfig, TrainingSpec, train_many
from dpaudit.training.engine import (
    CLIP_EPSILON,
    LinearStackBackend,
    _activation_and_backward,
    run_engine,
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_relu_backward_equals_the_float_mask_product(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    z = torch.randn((4, 33, 17), generator=g, dtype=dtype)
    z[0, :3] = 0.0  # the kink: derivative 0, as (z > 0) says
    delta = torch.randn((4, 33, 17), generator=g, dtype=dtype)
    want = delta * (z > 0).to(dtype)
    a, backward = _activation_and_backward("relu", z.clone())
    assert torch.equal(a, torch.relu(z))
    assert torch.equal(backward(delta.clone()), want)


def _problem(k: int = 6, n: int = 120, d: int = 9, classes: int = 3):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, classes, n)
    membership = rng.random((k, n)) < 0.7
    return x, y, membership


def test_cached_input_norms_give_the_same_clipped_sum() -> None:
    x, y, _ = _problem()
    spec = ModelSpec(hidden=(16, 8))
    backend = LinearStackBackend(spec, x.shape[1], 3)
    stack = ModelStack.init(spec, num_models=4, num_features=x.shape[1], num_classes=3, seed=1)
    theta = stack.flat_parameters()
    xt, yt = torch.as_tensor(x), torch.as_tensor(y)
    rows = torch.as_tensor(np.random.default_rng(2).integers(0, x.shape[0], (4, 21)))
    valid = torch.arange(21).unsqueeze(0) < torch.tensor([[21], [5], [0], [13]])
    xb, yb = xt[rows.reshape(-1)].view(4, 21, -1), yt[rows.reshape(-1)].view(4, 21)
    plain = backend.clipped_sum(theta, xb, yb, valid, 0.5)
    backend.cache_inputs(xt)
    cached = backend.clipped_sum(theta, xb, yb, valid, 0.5, rows=rows)
    assert torch.equal(plain, cached)


class _NoCache:
    """The closed-form backend without its input-norm cache (the engine checks for
    ``cache_inputs``), i.e. the computation before the cache."""

    def __init__(self, inner: LinearStackBackend) -> None:
        self.inner = inner
        self.num_parameters = inner.num_parameters

    def clipped_sum(self, *args: object) -> torch.Tensor:
        return self.inner.clipped_sum(*args)  # type: ignore[arg-type]

    def bytes_per_example(self, itemsize: int) -> int:
        return self.inner.bytes_per_example(itemsize)


@pytest.mark.parametrize("full_batch", [False, True])
def test_dp_run_with_the_cache_equals_the_run_without(full_batch: bool) -> None:
    x, y, membership = _problem()
    spec = ModelSpec(hidden=(16,))
    training = TrainingSpec(
        epochs=3, batch_size=16, learning_rate=0.5, dp=DPConfig(1.0, 0.7), full_batch=full_batch
    )
    fast = train_many(x, y, membership, model=spec, training=training, seed=3)
    stack = ModelStack.init(
        spec, num_models=membership.shape[0], num_features=x.shape[1], num_classes=3, seed=3
    )
    slow = run_engine(
        _NoCache(LinearStackBackend(spec, x.shape[1], 3)),
        stack.flat_parameters(),
        torch.as_tensor(x),
        torch.as_tensor(y),
        membership,
        training=training,
        seed=3,
    )
    assert torch.equal(fast.models.flat_parameters(), slow.parameters)


def _reference_clipped_sum(
    backend: LinearStackBackend,
    theta: torch.Tensor,
    xb: torch.Tensor,
    yb: torch.Tensor,
    valid: torch.Tensor,
    clip: float | None,
) -> torch.Tensor:
    """``LinearStackBackend.clipped_sum`` as it was before the workspace (commit 1691db8):
    fresh temporaries, the padded rows masked in the norms and in the factors, and the
    layers' parts concatenated."""
    inputs, deltas = backend._forward_backward(theta, xb, yb, valid)
    if clip is not None:
        norms = backend._norms(inputs, deltas, valid)
        factor = (clip / (norms + CLIP_EPSILON)).clamp(max=1.0)
        factor = torch.where(valid, factor, 0.0).unsqueeze(-1)
        deltas = [d.mul_(factor) for d in deltas]
    parts = []
    for a, d in zip(inputs, deltas, strict=True):
        parts.append(torch.bmm(d.transpose(1, 2), a).flatten(1))
        parts.append(d.sum(1))
    return torch.cat(parts, dim=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("clip", [None, 0.5, 1e3])
@pytest.mark.parametrize(
    "spec",
    [
        ModelSpec(kind="logistic"),
        ModelSpec(hidden=(16, 8)),
        ModelSpec(hidden=(7,), activation="tanh"),
        ModelSpec(hidden=(7,), activation="sigmoid"),
        ModelSpec(hidden=(7,), activation="gelu"),
    ],
    ids=lambda s: f"{s.kind}-{s.hidden_widths}-{s.activation}",
)
def test_workspace_clipped_sum_equals_the_fresh_computation(
    spec: ModelSpec, clip: float | None, dtype: torch.dtype
) -> None:
    # Widths that grow, shrink and grow past the workspace's headroom, with finite garbage
    # in the padded rows: every call must give the old numbers bit for bit.
    x, y, _ = _problem()
    xt, yt = torch.as_tensor(x, dtype=dtype), torch.as_tensor(y)
    backend = LinearStackBackend(spec, x.shape[1], 3)
    backend.cache_inputs(xt)
    theta = ModelStack.init(
        spec, num_models=4, num_features=x.shape[1], num_classes=3, seed=1, dtype=dtype
    ).flat_parameters()
    rng = np.random.default_rng(5)
    out = torch.empty((4, backend.num_parameters), dtype=dtype)
    for width in (21, 30, 9, 60):
        rows = torch.as_tensor(rng.integers(0, x.shape[0], (4, width)))
        counts = torch.as_tensor(rng.integers(0, width + 1, (4, 1)))
        counts[0] = width
        valid = torch.arange(width).unsqueeze(0) < counts
        xb, yb = xt[rows.reshape(-1)].view(4, width, -1), yt[rows.reshape(-1)].view(4, width)
        want = _reference_clipped_sum(backend, theta, xb.clone(), yb, valid, clip)
        assert torch.equal(backend.clipped_sum(theta, xb, yb, valid, clip), want)
        got = backend.clipped_sum(theta, xb, yb, valid, clip, rows=rows, out=out)
        assert got.data_ptr() == out.data_ptr()
        assert torch.equal(got, want)
