"""Train K models as one batched computation, plain or DP-SGD.

The engine runs the step loop for a chunk of models at once: every model draws its own
Poisson batch (padded to the largest batch of the chunk and masked), a *backend*
computes the sum of clipped per-example gradients of every model in one batched pass,
and the engine adds each model's own Gaussian noise, divides by the expected batch size
and makes the (momentum) SGD update. Two backends exist: the closed-form one below for
the linear-layer models of :mod:`dpaudit.models` (per-example gradients are never
materialised) and the generic ``torch.func`` one in :mod:`dpaudit.training.generic`.

Randomness: model ``k`` (global index ``model_offset + k``) owns independent streams
for its initialisation, its Poisson samples, its noise and its canary coins, derived
from ``(seed, model index, purpose)`` (:func:`dpaudit.models.derive_generator`). A
model's result therefore does not depend on the other models, on the chunk size, or on
the work unit it was trained in.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from dpaudit.errors import ConfigError, DataError, DpauditError
from dpaudit.models import (
    PURPOSE_CANARY,
    PURPOSE_NOISE,
    PURPOSE_SAMPLING,
    ModelSpec,
    ModelStack,
    derive_generator,
    layer_shapes,
)
from dpaudit.records import DPSGDRecord
from dpaudit.training.specs import GradientCanary, StepInfo, TrainingSpec, TrainResult

__all__ = ["LinearStackBackend", "train_many"]

# Opacus 1.6 (optimizers/optimizer.py, DPOptimizer.clip_and_accumulate) clips with the
# factor min(1, C / (‖g‖ + 1e-6)); the same constant keeps parity with the oracle.
CLIP_EPSILON = 1e-6


class ClippedSumBackend(Protocol):
    """Computes, for a chunk of models, the sum over each model's batch of its clipped
    per-example gradients, as a ``(Kc, P)`` tensor in flat parameter order."""

    num_parameters: int

    def clipped_sum(
        self,
        theta: torch.Tensor,
        xb: torch.Tensor,
        yb: torch.Tensor,
        valid: torch.Tensor,
        clipping_norm: float | None,
    ) -> torch.Tensor: ...

    def bytes_per_example(self, itemsize: int) -> int: ...


# ----------------------------------------------------------------------------- backend
def _activation_and_derivative(
    name: str, z: torch.Tensor
) -> tuple[torch.Tensor, Callable[[], torch.Tensor]]:
    if name == "relu":
        a = torch.relu(z)
        return a, lambda: (z > 0).to(z.dtype)
    if name == "tanh":
        a = torch.tanh(z)
        return a, lambda: 1 - a * a
    if name == "sigmoid":
        a = torch.sigmoid(z)
        return a, lambda: a * (1 - a)
    # Exact GELU z·Φ(z): derivative Φ(z) + z·φ(z).
    a = torch.nn.functional.gelu(z)
    return (
        a,
        lambda: (
            0.5 * (1 + torch.erf(z * math.sqrt(0.5)))
            + z * torch.exp(-0.5 * z * z) * (1 / math.sqrt(2 * math.pi))
        ),
    )


class LinearStackBackend:
    """Closed-form forward/backward of stacked logistic / MLP models with cross-entropy.

    For a linear layer with input ``a`` and output gradient ``δ`` (both per example),
    the per-example weight gradient is ``δ aᵀ`` and the bias gradient ``δ``, so the
    squared per-example gradient norm is ``‖δ‖²(‖a‖² + 1)`` summed over layers, and the
    clipped sum is ``Σᵢ cᵢ δᵢ aᵢᵀ = (c ⊙ δ)ᵀ A``: one batched matrix product per layer.
    Per-example gradients are never materialised.

    References:
        Goodfellow 2015, "Efficient Per-Example Gradient Computations" (the ‖a‖·‖δ‖ norm
        identity); Abadi et al. 2016, Algorithm 1 (clip, sum, noise).
    """

    def __init__(self, spec: ModelSpec, num_features: int, num_classes: int) -> None:
        self.spec = spec
        self.shapes = layer_shapes(spec, num_features, num_classes)
        self.num_parameters = sum(o * i + o for o, i in self.shapes)
        self.num_features = num_features
        self.num_classes = num_classes

    def bytes_per_example(self, itemsize: int) -> int:
        widths = sum(o for o, _ in self.shapes)
        # input, pre-activations, activations, deltas and temporaries of every layer.
        return itemsize * (self.num_features + 5 * widths) + 16

    def split(self, theta: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        kc = theta.shape[0]
        weights, biases, offset = [], [], 0
        for out, inp in self.shapes:
            weights.append(theta[:, offset : offset + out * inp].view(kc, out, inp))
            offset += out * inp
            biases.append(theta[:, offset : offset + out])
            offset += out
        return weights, biases

    def _forward_backward(
        self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, valid: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Return each layer's inputs ``a_l`` (Kc, B, in) and output gradients ``δ_l``."""
        weights, biases = self.split(theta)
        inputs = [xb]
        derivatives: list[Callable[[], torch.Tensor]] = []
        a = xb
        last = len(weights) - 1
        for layer, (w, b) in enumerate(zip(weights, biases, strict=True)):
            z = torch.bmm(a, w.transpose(1, 2)).add_(b.unsqueeze(1))
            if layer < last:
                a, derivative = _activation_and_derivative(self.spec.activation, z)
                inputs.append(a)
                derivatives.append(derivative)
            else:
                a = z
        # d(cross-entropy)/d(logits) = softmax − one-hot, per example (no 1/B: the engine
        # divides the clipped sum by the expected batch size, as Opacus does).
        # Softmax by hand: torch.softmax over a short last dimension is several times
        # slower on CPU than these three vectorised operations (same stable formula).
        delta = (a - a.amax(dim=-1, keepdim=True)).exp_()
        delta.div_(delta.sum(dim=-1, keepdim=True))
        delta.scatter_add_(-1, yb.unsqueeze(-1), torch.full_like(delta[..., :1], -1.0))
        # Zero the padded rows' deltas (their inputs are finite real rows or zeros), so they
        # add nothing to the norms or to the clipped sum.
        delta = torch.where(valid.unsqueeze(-1), delta, 0.0)
        deltas = [delta]
        for layer in range(last, 0, -1):
            delta = torch.bmm(delta, weights[layer]) * derivatives[layer - 1]()
            deltas.append(delta)
        deltas.reverse()
        return inputs, deltas

    def per_example_norms(
        self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Return the ``(Kc, B)`` per-example gradient norms (0 on padded rows)."""
        inputs, deltas = self._forward_backward(theta, xb, yb, valid)
        return self._norms(inputs, deltas, valid)

    @staticmethod
    def _norms(
        inputs: Sequence[torch.Tensor], deltas: Sequence[torch.Tensor], valid: torch.Tensor
    ) -> torch.Tensor:
        squared = torch.zeros(valid.shape, dtype=deltas[0].dtype, device=deltas[0].device)
        for a, d in zip(inputs, deltas, strict=True):
            a2 = torch.where(valid, (a * a).sum(-1), 0.0)
            squared += (d * d).sum(-1) * (a2 + 1)
        return squared.sqrt()

    def per_example_gradients(
        self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Return ``(Kc, B, P)`` per-example gradients; for tests and diagnostics only."""
        inputs, deltas = self._forward_backward(theta, xb, yb, valid)
        parts = []
        for a, d in zip(inputs, deltas, strict=True):
            parts.append(torch.einsum("kbo,kbi->kboi", d, a).flatten(2))
            parts.append(d)
        return torch.cat(parts, dim=-1)

    def clipped_sum(
        self,
        theta: torch.Tensor,
        xb: torch.Tensor,
        yb: torch.Tensor,
        valid: torch.Tensor,
        clipping_norm: float | None,
    ) -> torch.Tensor:
        inputs, deltas = self._forward_backward(theta, xb, yb, valid)
        if clipping_norm is not None:
            norms = self._norms(inputs, deltas, valid)
            factor = (clipping_norm / (norms + CLIP_EPSILON)).clamp(max=1.0)
            factor = torch.where(valid, factor, 0.0).unsqueeze(-1)
            deltas = [d * factor for d in deltas]
        parts = []
        for a, d in zip(inputs, deltas, strict=True):
            parts.append(torch.bmm(d.transpose(1, 2), a).flatten(1))
            parts.append(d.sum(1))
        return torch.cat(parts, dim=1)


# ------------------------------------------------------------------------------ inputs
def _prepare_data(
    X: Any, y: Any, membership: Any, *, num_classes: int | None, dtype: torch.dtype, device: Any
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, int]:
    x = X.detach().cpu().numpy() if isinstance(X, torch.Tensor) else np.asarray(X)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise DataError(f"The 'X' parameter must be a non-empty (n, d) array. Got shape {x.shape}.")
    if not np.issubdtype(x.dtype, np.number) or not np.all(np.isfinite(x)):
        raise DataError("The 'X' parameter must hold finite numbers only.")
    labels = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    if labels.shape != (x.shape[0],):
        raise DataError(f"The 'y' parameter must have shape ({x.shape[0]},). Got {labels.shape}.")
    if not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"The 'y' parameter must hold integer labels. Got dtype {labels.dtype}.")
    if labels.min() < 0:
        raise DataError(f"The 'y' parameter must hold labels >= 0. Got {labels.min()}.")
    classes = int(labels.max()) + 1 if num_classes is None else num_classes
    classes = max(classes, 2)
    if labels.max() >= classes:
        raise DataError(
            f"The 'y' parameter must hold labels in [0, {classes - 1}]. Got {labels.max()}."
        )
    mask = (
        membership.detach().cpu().numpy()
        if isinstance(membership, torch.Tensor)
        else np.asarray(membership)
    )
    if mask.dtype != bool or mask.ndim != 2 or mask.shape[1] != x.shape[0] or mask.shape[0] == 0:
        raise DataError(
            f"The 'membership' parameter must be a (K, {x.shape[0]}) boolean array. "
            f"Got dtype {mask.dtype} and shape {mask.shape} instead."
        )
    empty = np.flatnonzero(mask.sum(axis=1) == 0)
    if empty.size:
        raise DataError(
            f"Every model needs at least one member. Models {empty[:5].tolist()} have none."
        )
    xt = torch.as_tensor(x).to(dtype=dtype, device=device).contiguous()
    yt = torch.as_tensor(labels).to(dtype=torch.int64, device=device)
    return xt, yt, mask, classes


def _sampling_plan(
    sizes: np.ndarray, training: TrainingSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return per-model sampling rates q, step counts T and expected batch sizes q·n."""
    if training.full_batch:
        return np.ones(len(sizes)), np.full(len(sizes), training.epochs), sizes.astype(float)
    small = np.flatnonzero(sizes < training.batch_size)
    if small.size:
        raise ConfigError(
            f"The 'batch_size' parameter must be at most the number of members of every "
            f"model ({int(sizes.min())}), since q = batch_size / members must be <= 1. "
            f"Got {training.batch_size} instead."
        )
    rates = training.batch_size / sizes
    # Opacus' DPDataLoader makes int(1 / q) steps per epoch; n // b is the same number
    # computed without floating-point rounding.
    steps = training.epochs * (sizes // training.batch_size)
    return rates, steps.astype(np.int64), rates * sizes


def _chunk_size(
    budget: int,
    *,
    num_models: int,
    num_parameters: int,
    max_members: int,
    batch: int,
    bytes_per_example: int,
    itemsize: int,
    momentum: bool,
) -> int:
    per_model = itemsize * num_parameters * (7 + int(momentum))
    per_model += max_members * (4 + 8 + 8 + 2)  # uniforms, member index, cumsum, masks
    per_model += batch * (bytes_per_example + 3 * 8)
    return int(max(1, min(num_models, budget // max(per_model, 1))))


# -------------------------------------------------------------------------------- loop
def _random_block(kc: int, num_parameters: int, n_max: int, dtype: torch.dtype) -> int:
    """Steps per random-number block: up to 16, keeping a block's buffers under ~64 MiB."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    per_step = kc * (num_parameters * itemsize + n_max * 4)
    return int(max(1, min(16, (64 * 2**20) // max(per_step, 1))))


def _draw_block(
    t: int,
    block: int,
    active_idx: np.ndarray,
    chunk_steps: np.ndarray,
    sizes: np.ndarray,
    uniforms: torch.Tensor | None,
    gens_sampling: list[torch.Generator],
    noise: torch.Tensor | None,
    gens_noise: list[torch.Generator] | None,
) -> None:
    """Fill the next block of Poisson uniforms and noise, one call per model and kind.

    Model i draws min(block, steps left) steps' worth from each of its generators, so its
    stream depends only on (seed, model, step), not on the chunk it is trained in.
    """
    for i in active_idx:
        steps_i = int(min(block, int(chunk_steps[i]) - t))
        if uniforms is not None:
            n_i = int(sizes[i])
            uniforms[i, :steps_i, :n_i] = torch.rand((steps_i, n_i), generator=gens_sampling[i])
        if noise is not None:
            torch.randn((steps_i, noise.shape[2]), generator=gens_noise[i], out=noise[i, :steps_i])


def run_engine(
    backend: Any,
    theta0: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    membership: np.ndarray,
    *,
    training: TrainingSpec,
    seed: int,
    model_offset: int = 0,
    memory_budget_bytes: int = 2**30,
    progress: Callable[[int, int], None] | None = None,
    step_observer: Callable[[StepInfo], None] | None = None,
    gradient_canary: GradientCanary | None = None,
) -> tuple[torch.Tensor, tuple[DPSGDRecord | None, ...]]:
    """Train the ``K`` models whose initial flat parameters are ``theta0`` (K, P).

    Returns the trained ``(K, P)`` parameters and one record per model.
    """
    num_models, num_parameters = theta0.shape
    device, dtype = theta0.device, theta0.dtype
    dp = training.dp
    sizes = membership.sum(axis=1).astype(np.int64)
    rates, steps, expected = _sampling_plan(sizes, training)
    if gradient_canary is not None:
        if dp is None:
            raise ConfigError("A gradient canary needs DP-SGD: the 'dp' parameter is None.")
        canary_direction = gradient_canary.direction_tensor(dtype=dtype, device=device)
        if canary_direction.numel() != num_parameters:
            raise ConfigError(
                f"The canary 'direction' must have {num_parameters} entries (one per "
                f"parameter). Got {canary_direction.numel()} instead."
            )
        canary_included = gradient_canary.included_array(num_models)
    max_members = int(sizes.max())
    batch_estimate = (
        max_members
        if training.full_batch
        # Binomial(n, q) stays below its mean + 8 standard deviations except with
        # probability < 1e-15 (Chernoff); this only sizes chunks, it never truncates.
        else int(training.batch_size + 8 * math.sqrt(training.batch_size) + 8)
    )
    chunk = _chunk_size(
        memory_budget_bytes,
        num_models=num_models,
        num_parameters=num_parameters,
        max_members=max_members,
        batch=batch_estimate,
        bytes_per_example=backend.bytes_per_example(theta0.element_size()),
        itemsize=theta0.element_size(),
        momentum=training.momentum > 0,
    )
    theta_out = torch.empty_like(theta0)
    noise_std = dp.noise_multiplier * dp.clipping_norm if dp is not None else 0.0
    clip = dp.clipping_norm if dp is not None else None
    for start in range(0, num_models, chunk):
        stop = min(num_models, start + chunk)
        kc = stop - start
        local = np.arange(start, stop)
        theta = theta0[start:stop].clone()
        momentum_buf = torch.zeros_like(theta) if training.momentum > 0 else None
        # Each model's members, padded to the chunk's largest membership.
        n_max = int(sizes[local].max())
        members = torch.zeros((kc, n_max), dtype=torch.int64, device=device)
        member_valid = torch.zeros((kc, n_max), dtype=torch.bool, device=device)
        for i, k in enumerate(local):
            rows = np.flatnonzero(membership[k])
            members[i, : rows.size] = torch.as_tensor(rows, device=device)
            member_valid[i, : rows.size] = True
        # Float32 uniforms compared with a float32 q (as Opacus' sampler does): the executed
        # inclusion probability is q rounded up to the 2^-24 grid, within 6e-8 of the
        # recorded q, which moves ε by far less than any accountant's own tolerance.
        q_col = torch.as_tensor(rates[local], dtype=torch.float32, device=device).unsqueeze(1)
        denominators = torch.as_tensor(expected[local], dtype=dtype, device=device).unsqueeze(1)
        chunk_steps = steps[local]
        gens_sampling = [
            derive_generator(seed, model_offset + k, PURPOSE_SAMPLING, device=device) for k in local
        ]
        gens_noise = (
            [derive_generator(seed, model_offset + k, PURPOSE_NOISE, device=device) for k in local]
            if noise_std > 0
            else None
        )
        canary_models: list[int] = []
        if gradient_canary is not None:
            canary_models = [i for i, k in enumerate(local) if canary_included[k]]
            gens_canary = {
                i: derive_generator(seed, model_offset + local[i], PURPOSE_CANARY, device=device)
                for i in canary_models
            }
        # Each model's Poisson uniforms and noise are drawn for a block of `block` steps in
        # one call on its own generator (blocks start at multiples of `block`, whatever the
        # chunk), which keeps results independent of chunking while making two calls per
        # model per block instead of two per model per step: per-call overhead, not the
        # random numbers themselves, dominated small models' steps.
        block = _random_block(kc, num_parameters if gens_noise else 0, n_max, dtype)
        uniforms_block = torch.ones((kc, block, n_max), dtype=torch.float32, device=device)
        noise_block = (
            torch.zeros((kc, block, num_parameters), dtype=dtype, device=device)
            if gens_noise
            else None
        )
        model_indices = torch.as_tensor(local + model_offset, device=device)
        x_full = y_full = None
        if training.full_batch:
            x_full = x[members.view(-1)].view(kc, n_max, -1)
            y_full = y[members.view(-1)].view(kc, n_max)
        arange_cache: dict[int, torch.Tensor] = {}
        for t in range(int(chunk_steps.max())):
            active_np = chunk_steps > t
            all_active = bool(active_np.all())
            active_idx = np.flatnonzero(active_np)
            active = torch.as_tensor(active_np, device=device)
            j = t % block
            if j == 0:
                _draw_block(
                    t,
                    block,
                    active_idx,
                    chunk_steps,
                    sizes[local],
                    uniforms_block if not training.full_batch else None,
                    gens_sampling,
                    noise_block,
                    gens_noise,
                )
            if training.full_batch:
                rows_b, xb, yb = members, x_full, y_full
                valid = member_valid if all_active else member_valid & active.unsqueeze(1)
            else:
                selected = (uniforms_block[:, j] < q_col) & member_valid
                if not all_active:
                    selected &= active.unsqueeze(1)
                counts = selected.sum(dim=1)
                width = max(int(counts.max()), 1)
                # Compact each model's selected members to the front of a (Kc, width)
                # matrix: selected entries go to their rank, the rest to a spill column.
                position = torch.where(selected, selected.cumsum(dim=1) - 1, width)
                rows_b = torch.zeros((kc, width + 1), dtype=torch.int64, device=device)
                rows_b.scatter_(1, position, members)
                rows_b = rows_b[:, :width]
                if width not in arange_cache:
                    arange_cache[width] = torch.arange(width, device=device)
                valid = arange_cache[width].unsqueeze(0) < counts.unsqueeze(1)
                xb = x[rows_b.reshape(-1)].view(kc, width, -1)
                yb = y[rows_b.reshape(-1)].view(kc, width)
            total = backend.clipped_sum(theta, xb, yb, valid, clip)
            if noise_block is not None:
                # inactive models' rows are ignored below (their update is masked out)
                total.add_(noise_block[:, j], alpha=noise_std)
            canary_sampled = None
            if gradient_canary is not None:
                canary_sampled = torch.zeros(kc, dtype=torch.bool, device=device)
                for i in canary_models:
                    if not active_np[i]:
                        continue
                    coin = torch.rand(1, generator=gens_canary[i], device=device)
                    if training.full_batch or float(coin) < rates[local[i]]:
                        canary_sampled[i] = True
                        total[i].add_(canary_direction, alpha=clip)
            gradient = total.div_(denominators)
            if step_observer is not None:
                step_observer(
                    StepInfo(
                        step=t,
                        model_indices=model_indices,
                        active=active,
                        batch_rows=rows_b,
                        batch_valid=valid,
                        gradients=gradient,
                        parameters=theta,
                        canary_sampled=canary_sampled,
                    )
                )
            if training.weight_decay > 0:
                gradient = gradient.add(theta, alpha=training.weight_decay)
            if momentum_buf is not None:
                if all_active:
                    momentum_buf.mul_(training.momentum).add_(gradient)
                else:
                    momentum_buf = torch.where(
                        active.unsqueeze(1),
                        momentum_buf * training.momentum + gradient,
                        momentum_buf,
                    )
                gradient = momentum_buf
            if all_active:
                theta.add_(gradient, alpha=-training.learning_rate)
            else:
                theta.sub_(torch.where(active.unsqueeze(1), gradient, 0.0) * training.learning_rate)
        theta_out[start:stop] = theta
        if progress is not None:
            progress(stop, num_models)
    records: tuple[DPSGDRecord | None, ...]
    if dp is None:
        records = (None,) * num_models
    else:
        records = tuple(
            DPSGDRecord(
                noise_multiplier=dp.noise_multiplier,
                sampling_rate=float(rates[k]),
                steps=int(steps[k]),
                clipping_norm=dp.clipping_norm,
                sampling="full-batch" if training.full_batch else "poisson",
                dataset_size=int(sizes[k]),
            )
            for k in range(num_models)
        )
    return theta_out, records


def _check_common(training: Any, memory_budget_bytes: Any, model_offset: Any) -> None:
    if not isinstance(training, TrainingSpec):
        raise ConfigError(f"The 'training' parameter must be a TrainingSpec. Got {training!r}.")
    if (
        isinstance(memory_budget_bytes, bool)
        or not isinstance(memory_budget_bytes, int | np.integer)
        or memory_budget_bytes < 1
    ):
        raise DpauditError(
            "The 'memory_budget_bytes' parameter must be a positive integer. "
            f"Got {memory_budget_bytes!r} instead."
        )
    if (
        isinstance(model_offset, bool)
        or not isinstance(model_offset, int | np.integer)
        or model_offset < 0
    ):
        raise DpauditError(
            f"The 'model_offset' parameter must be an integer >= 0. Got {model_offset!r} instead."
        )


def train_many(
    X: Any,
    y: Any,
    membership: Any,
    *,
    model: ModelSpec,
    training: TrainingSpec,
    seed: int,
    num_classes: int | None = None,
    device: str | torch.device = "cpu",
    memory_budget_bytes: int = 2**30,
    progress: Callable[[int, int], None] | None = None,
    dtype: torch.dtype = torch.float32,
    model_offset: int = 0,
    step_observer: Callable[[StepInfo], None] | None = None,
    gradient_canary: GradientCanary | None = None,
) -> TrainResult:
    """Train K logistic-regression or MLP models at once, plain or with DP-SGD.

    Model ``k`` trains only on the rows ``i`` with ``membership[k, i]``; non-members are
    never sampled. In each step every member of model ``k`` joins the batch
    independently with probability q_k = ``batch_size`` / n_k (Poisson sampling, also
    for plain SGD), so batch sizes vary; an epoch is ``n_k // batch_size`` steps, as
    Opacus' ``DPDataLoader`` makes ``int(1/q)``. With ``training.dp`` each per-example
    gradient g is scaled by min(1, C / (‖g‖ + 1e-6)) (Opacus' factor), the clipped sum
    gets N(0, σ²C²) noise per coordinate, and the result is divided by the expected
    batch size q_k·n_k (Opacus' ``expected_batch_size``, ``loss_reduction="mean"``).
    Plain SGD is the same step without clipping and noise (still divided by q_k·n_k).
    ``training.full_batch`` makes (DP-)GD: q = 1, one step per epoch with all members.

    All K models of a chunk run as one batched computation; chunks are sized so that
    their working memory stays within ``memory_budget_bytes``. Every model draws from
    its own random streams derived from ``(seed, model_offset + k)``, so the result is
    the same whatever the chunking, and the same as training the models one at a time.

    Args:
        X: ``(n, d)`` features (numpy array or tensor).
        y: ``(n,)`` integer labels.
        membership: ``(K, n)`` booleans, the training set of every model.
        model: the architecture.
        training: the optimiser and, in ``training.dp``, the DP mechanism.
        seed: the base seed.
        num_classes: C; defaults to ``max(y) + 1`` (at least 2).
        device: where to train.
        memory_budget_bytes: working-memory budget that sizes the chunks of models.
        progress: called as ``progress(models_done, num_models)`` after every chunk.
        dtype: parameter dtype (float32 by default; float64 for exact comparisons).
        model_offset: global index of the first model, for work units that train a
            slice of a larger set (model ``k`` gets the streams of ``model_offset + k``).
        step_observer: extension point; called once per step and chunk with a
            :class:`~dpaudit.training.StepInfo` (batches, privatised gradients, parameters).
        gradient_canary: extension point for white-box canary audits, see
            :class:`~dpaudit.training.GradientCanary`.

    Returns:
        The trained :class:`~dpaudit.models.ModelStack`, one
        :class:`~dpaudit.records.DPSGDRecord` per model (``None`` for plain SGD) stating
        the σ, q, number of steps and C actually executed, and the wall-clock time.

    Raises:
        DataError: malformed ``X``, ``y`` or ``membership``, or a model without members.
        ConfigError: a ``batch_size`` larger than some model's number of members, or a
            canary without DP.

    References:
        Abadi et al. 2016, "Deep Learning with Differential Privacy", Algorithm 1;
        Yousefpour et al. 2021, "Opacus: User-Friendly Differential Privacy Library in
        PyTorch" (Poisson sampling, expected batch size, clipping factor).
    """
    started = time.perf_counter()
    if not isinstance(model, ModelSpec):
        raise ConfigError(f"The 'model' parameter must be a ModelSpec. Got {model!r} instead.")
    _check_common(training, memory_budget_bytes, model_offset)
    x, labels, mask, classes = _prepare_data(
        X, y, membership, num_classes=num_classes, dtype=dtype, device=device
    )
    stack = ModelStack.init(
        model,
        num_models=mask.shape[0],
        num_features=x.shape[1],
        num_classes=classes,
        seed=seed,
        dtype=dtype,
        device=device,
        model_offset=model_offset,
    )
    backend = LinearStackBackend(model, x.shape[1], classes)
    theta, records = run_engine(
        backend,
        stack.flat_parameters(),
        x,
        labels,
        mask,
        training=training,
        seed=seed,
        model_offset=model_offset,
        memory_budget_bytes=memory_budget_bytes,
        progress=progress,
        step_observer=step_observer,
        gradient_canary=gradient_canary,
    )
    models = ModelStack.from_flat(model, theta, num_features=x.shape[1], num_classes=classes)
    return TrainResult(models=models, records=records, seconds=time.perf_counter() - started)
