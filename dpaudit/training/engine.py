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
the work unit it was trained in. (The coins of
:class:`~dpaudit.training.CoordinateCanaries`, for a single model, come from their own
seed.)

Poisson sampling costs O(batch) per model and step, not O(members): each model draws the
geometric gaps between its sampled members (:func:`_geometric_gaps`), so an epoch costs
O(n) however large n is.

One step of a chunk is: draw the block's randomness (:func:`_draw_noise`,
:func:`_draw_gaps`), sample the batch (:func:`_sample_batch`), privatise
(:func:`_privatise`: clipped sum, noise, canaries, division), observe, update
(:func:`_update`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from dpaudit.errors import ConfigError, DataError, check_integer
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
from dpaudit.training.sampling import sampling_plan
from dpaudit.training.specs import (
    CoordinateCanaries,
    GradientCanary,
    StepInfo,
    TrainingSpec,
    TrainResult,
)

__all__ = ["EngineRun", "LinearStackBackend", "one_intra_op_thread", "run_engine", "train_many"]

# Opacus 1.6 (optimizers/optimizer.py, DPOptimizer.clip_and_accumulate) clips with the
# factor min(1, C / (‖g‖ + 1e-6)); the same constant keeps parity with the oracle.
CLIP_EPSILON = 1e-6
# Poisson sampling by geometric skips (see _geometric_gaps): each model draws its gaps for
# SAMPLING_BLOCK steps in one call, GAP_SIGMAS standard deviations + GAP_MARGIN beyond its
# expected batch size per step. Constants, not tuned per chunk: they fix the layout of
# every model's sampling stream.
SAMPLING_BLOCK = 16
GAP_SIGMAS = 8.0
GAP_MARGIN = 8
# Each model's noise is drawn for up to 16 steps per call, at most this many bytes per
# model and call (see _noise_block).
NOISE_BLOCK_BYTES = 4 * 2**20
# A chunk is never larger than a step's working set of about this many bytes, whatever
# the memory budget allows: larger chunks outgrow the caches and each model costs more
# (64 to 128 MLPs 64→64→10 per chunk trained 1,000 models fastest, benchmarks/RESULTS.md,
# "Chunk cap"); small models still get large chunks, which amortise each step's fixed
# cost.
STEP_WORKING_SET_BYTES = 24 * 2**20


# ----------------------------------------------------------------------------- backend
class _Workspace:
    """Named flat buffers reused from step to step.

    ``take(name, shape)`` returns a contiguous view of the first ``prod(shape)``
    elements of the buffer ``name``, allocating it (with 25 % headroom, since batch
    widths vary from step to step) only when it is too small. Steady-state steps then
    allocate nothing large, which removes the page faults and system time of fresh
    multi-megabyte temporaries at every step of a large chunk. Views of one name alias:
    a caller takes each name once per use. Not thread-safe (one backend per thread).
    """

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        # (name, shape, dtype, device) -> the view last handed out: a step asks for the
        # same few dozen shapes again and again, and building a view costs more Python
        # than the small operations it feeds.
        self._views: dict[tuple[Any, ...], torch.Tensor] = {}

    def take(
        self, name: str, shape: tuple[int, ...], *, dtype: torch.dtype, device: Any
    ) -> torch.Tensor:
        key = (name, shape, dtype, device)
        view = self._views.get(key)
        if view is not None:
            return view
        numel = math.prod(shape)
        buffer = self._buffers.get(name)
        if (
            buffer is None
            or buffer.numel() < numel
            or buffer.dtype != dtype
            or buffer.device != torch.device(device)
        ):
            buffer = torch.empty(numel + numel // 4, dtype=dtype, device=device)
            self._buffers[name] = buffer
            # views of the old buffer are stale
            self._views = {k: v for k, v in self._views.items() if k[0] != name}
        view = buffer[:numel].view(shape)
        self._views[key] = view
        return view


def _activation_and_backward(
    name: str, z: torch.Tensor
) -> tuple[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
    """The activation of ``z`` (``z`` may be overwritten) and the map δ ↦ δ ⊙ σ'(z)."""
    if name == "relu":
        a = z.relu_()  # z is not needed again: a > 0 exactly where z > 0
        # δ where a > 0, else 0: the kernel autograd uses for ReLU, with no float mask
        # (δ·1 = δ and δ·0 = ±0, so the same numbers as multiplying by (z > 0)).
        # In place (the out= overload writing over δ): the same kernel and numbers.
        return a, lambda delta: torch.ops.aten.threshold_backward.grad_input(
            delta, a, 0.0, grad_input=delta
        )
    if name == "tanh":
        a = torch.tanh(z)
        return a, lambda delta: delta.mul_(1 - a * a)
    if name == "sigmoid":
        a = torch.sigmoid(z)
        return a, lambda delta: delta.mul_(a * (1 - a))
    # Exact GELU z·Φ(z): derivative Φ(z) + z·φ(z).
    a = torch.nn.functional.gelu(z)
    return (
        a,
        lambda delta: delta.mul_(
            0.5 * (1 + torch.erf(z * math.sqrt(0.5)))
            + z * torch.exp(-0.5 * z * z) * (1 / math.sqrt(2 * math.pi))
        ),
    )


# Layers with fewer outputs than this compute their pre-activations transposed (below).
NARROW_LAYER = 32


def _affine_t(
    a: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Every model's pre-activations output-major, ``(Kc, out, B)``: ``w aᵀ + b``, one
    ``baddbmm`` (the bias comes free).

    The last layer's logits stay this way, never transposed back: the softmax's
    reductions then run over the classes with the rows contiguous (vectorised over rows:
    197 → 100 µs for 64 models, 83 rows, 10 classes), and the last layer's weight
    gradient ``δᵀ a`` reads δ as it lies. Narrow hidden layers go through it too
    (:func:`_affine`).
    """
    return torch.baddbmm(b.unsqueeze(2), w, a.transpose(1, 2), out=out)


def _affine(
    a: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    scratch: torch.Tensor | None = None,
) -> torch.Tensor:
    """Every model's pre-activations ``a wᵀ + b``: ``(Kc, B, in)`` → ``(Kc, B, out)``,
    contiguous (in ``out`` when given).

    A narrow layer (the classifier's few outputs) is computed as ``(w aᵀ + b)ᵀ``, one
    ``baddbmm`` into ``scratch`` and a copy: on CPU the batched product with only ``out``
    columns runs at a fraction of the speed of the transposed one (measured 487 → 217 µs
    for 64 models, 83 rows, 64 → 10 on one thread), and the bias comes free.

    A wide layer is one ``baddbmm`` onto the broadcast bias too, which saves a pass over
    the output (``bmm`` then ``add_``: 559 → 519 µs for 64 models, 83 rows, 64 → 64);
    in float32 the same numbers as before, in float64 they differ in the last bits.
    """
    if w.shape[1] < NARROW_LAYER:
        transposed = _affine_t(a, w, b, out=scratch)
        if out is None:
            return transposed.transpose(1, 2).contiguous()
        return out.copy_(transposed.transpose(1, 2))
    bias = b.unsqueeze(1).expand(a.shape[0], a.shape[1], w.shape[1])
    return torch.baddbmm(bias, a, w.transpose(1, 2), out=out)


def _softmax_minus_one_hot_(
    logits_t: torch.Tensor, yb: torch.Tensor, valid: torch.Tensor, peak: torch.Tensor
) -> torch.Tensor:
    """d(cross-entropy)/d(logits) = softmax − one-hot of class-major logits, in place,
    with padded rows' columns zeroed; returned as the ``(Kc, B, classes)`` view.

    Per example, no 1/B: the engine divides the clipped sum by the expected batch size,
    as Opacus does. Softmax by hand, the stable exp(z − max z) / Σ exp(z − max z): faster
    on CPU than ``torch.softmax`` over a short class dimension. ``peak`` is a
    ``(Kc, 1, B)`` buffer. Zeroing the padded rows (finite real rows or zeros) makes
    them add nothing to the norms or to the clipped sum.
    """
    kc, _, width = logits_t.shape
    delta = logits_t
    torch.amax(delta, dim=1, keepdim=True, out=peak)
    delta.sub_(peak).exp_()
    torch.sum(delta, dim=1, keepdim=True, out=peak)
    delta.div_(peak)
    minus_one = torch.full((), -1.0, dtype=delta.dtype, device=delta.device)
    delta.scatter_add_(1, yb.unsqueeze(1), minus_one.expand(kc, 1, width))
    delta.masked_fill_(torch.logical_not(valid.unsqueeze(1)), 0.0)
    return delta.transpose(1, 2)


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
        self._data: torch.Tensor | None = None
        self._data_sq_norms: torch.Tensor | None = None
        self._workspace = _Workspace()

    def cache_inputs(self, x: torch.Tensor) -> None:
        """Keep ‖x_i‖² of every data row: the first layer's input norms, which every
        step would otherwise recompute for its batch. ``clipped_sum(..., rows=...)``
        reads them (the same reduction per row, so the same numbers)."""
        self._data = x
        self._data_sq_norms = (x * x).sum(-1)

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
        """Return each layer's inputs ``a_l`` (Kc, B, in) and output gradients ``δ_l``
        (Kc, B, out); the last layer's δ is a view of class-major memory (see
        :func:`_affine_t`)."""
        weights, biases = self.split(theta)
        inputs = [xb]
        backwards: list[Callable[[torch.Tensor], torch.Tensor]] = []
        a = xb
        last = len(weights) - 1
        for w, b in zip(weights[:last], biases[:last], strict=True):
            a, backward = _activation_and_backward(self.spec.activation, _affine(a, w, b))
            inputs.append(a)
            backwards.append(backward)
        logits_t = _affine_t(a, weights[last], biases[last])
        peak = logits_t.new_empty((logits_t.shape[0], 1, logits_t.shape[2]))
        delta = _softmax_minus_one_hot_(logits_t, yb, valid, peak)
        deltas = [delta]
        for layer in range(last, 0, -1):
            delta = backwards[layer - 1](torch.bmm(delta, weights[layer]))
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
        inputs: Sequence[torch.Tensor],
        deltas: Sequence[torch.Tensor],
        valid: torch.Tensor,
        input_sq_norms: torch.Tensor | None = None,
    ) -> torch.Tensor:
        squared = torch.zeros(valid.shape, dtype=deltas[0].dtype, device=deltas[0].device)
        for layer, (a, d) in enumerate(zip(inputs, deltas, strict=True)):
            a2 = input_sq_norms if layer == 0 and input_sq_norms is not None else (a * a).sum(-1)
            a2 = torch.where(valid, a2, 0.0)
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
        *,
        rows: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The ``(Kc, P)`` sums of clipped per-example gradients. ``rows`` (the data rows
        of ``xb``, with ``xb`` drawn from the tensor given to :meth:`cache_inputs`) lets
        the first layer's input norms come from the cache; ``out`` receives the result
        (a fresh tensor otherwise).

        The same operations, in the same order, as :meth:`per_example_norms` followed by
        clipping and the per-layer products, so the same numbers to the last bit; only
        their memory is reused (:class:`_Workspace`) and the masking of padded rows is
        done once, on the output gradient: a padded row's δ is exactly 0 in every layer,
        so its squared norm ‖δ‖²(‖a‖² + 1) and its clipped contribution are 0 whatever
        its (finite) inputs, and the norms and factors need no mask of their own.
        """
        kc = xb.shape[0]
        dtype, device = theta.dtype, theta.device
        inputs, deltas = self._fused_forward_backward(theta, xb, yb, valid)
        if clipping_norm is not None:
            squared = self._fused_squared_norms(inputs, deltas, rows)
            factor = squared.sqrt_().add_(CLIP_EPSILON).reciprocal_().mul_(clipping_norm)
            factor = factor.clamp_(max=1.0).unsqueeze(-1)
            # Opacus' min(1, C / (‖g‖ + 1e-6)); `C / t` is `t.reciprocal() * C` in torch.
            for d in deltas:
                d.mul_(factor)
        if out is None:
            out = torch.empty((kc, self.num_parameters), dtype=dtype, device=device)
        offset = 0
        for layer, ((o, i), a, d) in enumerate(zip(self.shapes, inputs, deltas, strict=True)):
            # Into a contiguous buffer, then copied: bmm writing straight into the strided
            # slice of `out` takes another kernel path (slower here, other rounding).
            product = torch.bmm(
                d.transpose(1, 2),
                a,
                out=self._workspace.take(f"grad{layer}", (kc, o, i), dtype=dtype, device=device),
            )
            out[:, offset : offset + o * i].copy_(product.view(kc, o * i))
            offset += o * i
            torch.sum(d, dim=1, out=out[:, offset : offset + o])
            offset += o
        return out

    def _fused_forward_backward(
        self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, valid: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """:meth:`_forward_backward` with every large temporary in the workspace."""
        kc, width, _ = xb.shape
        take = self._take(theta)
        weights, biases = self.split(theta)
        inputs = [xb]
        backwards: list[Callable[[torch.Tensor], torch.Tensor]] = []
        a = xb
        last = len(weights) - 1
        for layer, (w, b) in enumerate(zip(weights[:last], biases[:last], strict=True)):
            z = _affine(
                a,
                w,
                b,
                out=take(f"z{layer}", (kc, width, w.shape[1])),
                scratch=take("transposed", (kc, w.shape[1], width)),
            )
            a, backward = _activation_and_backward(self.spec.activation, z)
            inputs.append(a)
            backwards.append(backward)
        classes = weights[last].shape[1]
        logits_t = _affine_t(
            a, weights[last], biases[last], out=take("logits", (kc, classes, width))
        )
        delta = _softmax_minus_one_hot_(logits_t, yb, valid, take("peak", (kc, 1, width)))
        deltas = [delta]
        for layer in range(last, 0, -1):
            w = weights[layer]
            back = take(f"delta{layer - 1}", (kc, width, w.shape[2]))
            delta = backwards[layer - 1](torch.bmm(delta, w, out=back))
            deltas.append(delta)
        deltas.reverse()
        return inputs, deltas

    def _fused_squared_norms(
        self,
        inputs: Sequence[torch.Tensor],
        deltas: Sequence[torch.Tensor],
        rows: torch.Tensor | None,
    ) -> torch.Tensor:
        """Σ_l ‖δ_l‖²(‖a_l‖² + 1) per example, summed over layers in order (0 on padded
        rows, whose δ are 0), as :meth:`_norms` computes it before the square root."""
        kc, width = deltas[0].shape[:2]
        take = self._take(deltas[0])
        squared = take("squared", (kc, width))
        a2 = take("a2", (kc, width))
        d2 = take("d2", (kc, width))
        for layer, (a, d) in enumerate(zip(inputs, deltas, strict=True)):
            if layer == 0 and rows is not None and self._data_sq_norms is not None:
                torch.index_select(self._data_sq_norms, 0, rows.reshape(-1), out=a2.view(-1))
            else:
                torch.sum(torch.mul(a, a, out=take("square", a.shape)), dim=-1, out=a2)
            if d.stride(-1) == 1:
                torch.sum(torch.mul(d, d, out=take("square", d.shape)), dim=-1, out=d2)
            else:  # the last layer's class-major δ: reduce over classes, rows contiguous
                d_t = d.transpose(1, 2)
                torch.sum(torch.mul(d_t, d_t, out=take("square", d_t.shape)), dim=1, out=d2)
            if layer == 0:
                torch.mul(d2, a2.add_(1.0), out=squared)
            else:
                squared.add_(d2.mul_(a2.add_(1.0)))
        return squared

    def _take(self, like: torch.Tensor) -> Callable[..., torch.Tensor]:
        """``take(name, shape[, dtype])``: a workspace buffer on ``like``'s device, of
        ``like``'s dtype unless told."""
        workspace = self._workspace

        def take(
            name: str, shape: tuple[int, ...], dtype: torch.dtype | None = None
        ) -> torch.Tensor:
            return workspace.take(name, shape, dtype=dtype or like.dtype, device=like.device)

        return take


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
    """Return per-model sampling rates q, step counts T and expected batch sizes q·n.

    q and T come from :func:`dpaudit.training.sampling.sampling_plan`, the one formula that noise
    calibration and ``dpaudit account`` use too: what is accounted is what runs here.
    """
    if not training.full_batch and np.any(sizes < training.batch_size):
        raise ConfigError(
            f"The 'batch_size' parameter must be at most the number of members of every "
            f"model ({int(sizes.min())}), since q = batch_size / members must be <= 1. "
            f"Got {training.batch_size} instead."
        )
    rates, steps = sampling_plan(
        sizes,
        batch_size=training.batch_size,
        epochs=training.epochs,
        full_batch=training.full_batch,
    )
    expected = sizes.astype(float) if training.full_batch else rates * sizes
    return rates, steps, expected


def _chunk_size(
    budget: int,
    *,
    num_models: int,
    num_parameters: int,
    max_members: int,
    batch: int,
    gaps_per_step: int,
    bytes_per_example: int,
    itemsize: int,
    momentum: bool,
    noise_block: int,
) -> int:
    per_model = itemsize * num_parameters * (7 + int(momentum) + noise_block)
    per_model += max_members * (8 + 1)  # member index, member mask
    per_model += SAMPLING_BLOCK * gaps_per_step * 8  # the block of Poisson gaps
    per_model += batch * (bytes_per_example + 4 * 8)  # + positions, rows, masks
    # what one step reads and writes per model: its batch's activations and deltas,
    # and parameters, clipped sum, products and noise
    working = batch * bytes_per_example + 4 * num_parameters * itemsize
    cap = max(1, STEP_WORKING_SET_BYTES // max(working, 1))
    return int(max(1, min(num_models, cap, budget // max(per_model, 1))))


# -------------------------------------------------------------------------------- loop
@contextlib.contextmanager
def one_intra_op_thread(device: torch.device) -> Iterator[None]:
    """Run torch on one intra-op thread on the CPU (restored afterwards).

    The engine's steps are many small batched operations (a chunk's step working set is
    kept under :data:`STEP_WORKING_SET_BYTES`); intra-op threads only wait for each other
    on them. Measured on the 2-core development machine under load (2,000 white-box
    logistic models, T = 500, benchmarks/RESULTS.md): 38.5 CPU-s and 118 s wall with
    torch's default two threads, 4.9 CPU-s and 16 s wall with one, bit for bit the same
    models. Parallelism across models comes from worker processes instead
    (:mod:`dpaudit.training.parallel`, one thread each).
    """
    before = torch.get_num_threads()
    if device.type != "cpu" or before == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _noise_block(num_parameters: int, itemsize: int) -> int:
    """Steps of noise a model draws per call: up to 16, keeping one model's block under
    4 MiB (one step for models of more than a million float32 parameters).

    A function of the model's size alone, never of the chunk: the block fixes how a
    model's noise stream is cut into calls, and torch's Gaussian sampler pairs its
    uniforms within a call, so another block length would give the model other noise.
    """
    return int(max(1, min(16, NOISE_BLOCK_BYTES // max(num_parameters * itemsize, 1))))


def _gaps_per_step(sizes: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """How many geometric gaps each model draws per step: its expected batch size
    n·q plus ``GAP_SIGMAS`` standard deviations √(n·q(1 − q)) plus ``GAP_MARGIN``, and
    never more than n (n gaps of at least 1 always pass the last member).

    A function of (n, q) alone, so that a model's stream layout does not depend on its
    chunk. Too few gaps are not an error: :func:`_more_positions` then continues the
    same stream; the margin only makes that rare (Binomial(n, q) exceeds its mean by
    8 standard deviations with probability < 1e-13 by Bernstein's inequality).
    """
    mean = sizes * rates
    count = np.ceil(mean + GAP_SIGMAS * np.sqrt(mean * (1 - rates))) + GAP_MARGIN
    return np.minimum(count, sizes).astype(np.int64)


def _geometric_gaps(uniforms: torch.Tensor, log_keep: torch.Tensor) -> torch.Tensor:
    """Turn uniforms U ∈ [0, 1) into gaps G = 1 + ⌊ln(1 − U) / ln(1 − q)⌋, in place.

    P(G > k) = P(1 − U ≤ (1 − q)^k) = (1 − q)^k, so G ~ Geometric(q) on {1, 2, ...}: the
    distance from one Poisson-sampled member to the next when each is kept
    independently with probability q. ``log_keep`` is ln(1 − q) (−∞ for q = 1, when
    every gap is 1). float64 throughout: the law is exact up to float64 rounding.

    References:
        Devroye 1986, "Non-Uniform Random Variate Generation", Ch. X.2 (inversion for
        the geometric law); Ahrens, Dieter 1985 (sequential sampling by skips).
    """
    return uniforms.neg_().log1p_().div_(log_keep).floor_().add_(1.0)


def _draw_gaps(t: int, chunk: _Chunk, active_idx: np.ndarray) -> None:
    """Fill the next ``SAMPLING_BLOCK`` steps of Poisson gaps, one call per model.

    Model i draws min(SAMPLING_BLOCK, steps left) × g_i uniforms (g_i from
    :func:`_gaps_per_step`) on its own sampling generator; the block length is a
    constant, so the stream's layout depends only on (seed, model), not on the chunk.
    Unused columns hold +∞ gaps, which never reach a member. The block's positions (the
    partial sums of the gaps, minus 1) are summed here, once, while the gaps are in
    cache, into a step-major buffer, so that a step reads one contiguous slice.
    """
    gaps = chunk.gaps
    for i in active_idx:
        steps_i = int(min(SAMPLING_BLOCK, int(chunk.steps[i]) - t))
        m_i = int(chunk.gap_counts[i])
        gaps[:steps_i, i, :m_i] = torch.rand(
            (steps_i, m_i), generator=chunk.gens_sampling[i], dtype=torch.float64
        )
    _geometric_gaps(gaps, chunk.log_keep)
    gaps.masked_fill_(chunk.gap_padding, math.inf)
    torch.cumsum(gaps, dim=2, out=chunk.positions).sub_(1.0)


def _draw_noise(
    t: int,
    block: int,
    active_idx: np.ndarray,
    chunk_steps: np.ndarray,
    noise: torch.Tensor,
    gens_noise: list[torch.Generator],
) -> None:
    """Fill the next block of noise, one call per model.

    Model i draws min(block, steps left) steps' worth, so its stream depends only on
    (seed, model, step), not on the chunk it is trained in.
    """
    for i in active_idx:
        steps_i = int(min(block, int(chunk_steps[i]) - t))
        torch.randn((steps_i, noise.shape[2]), generator=gens_noise[i], out=noise[i, :steps_i])


# ---------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class _RunPlan:
    """What every chunk of a run shares: each model's sampling plan and the mechanism.

    Attributes:
        sizes: ``(K,)`` members n_k of each model.
        rates: ``(K,)`` sampling rates q_k.
        gap_counts: ``(K,)`` geometric gaps drawn per step (0 for full batch).
        steps: ``(K,)`` step counts T_k.
        expected: ``(K,)`` expected batch sizes q_k·n_k, the divisor of the noisy sum.
        chunk: models trained as one batched computation.
        noise_std: σ·C, or 0 for plain SGD and σ = 0.
        clip: C, or ``None`` for plain SGD.
        canary_direction: the gradient canary's unit direction ``(P,)``, or ``None``.
        canary_included: ``(K,)`` whether each model holds the gradient canary, or ``None``.
    """

    sizes: np.ndarray
    rates: np.ndarray
    gap_counts: np.ndarray
    steps: np.ndarray
    expected: np.ndarray
    chunk: int
    noise_std: float
    clip: float | None
    canary_direction: torch.Tensor | None
    canary_included: np.ndarray | None


def _plan_run(
    backend: Any,
    theta0: torch.Tensor,
    membership: np.ndarray,
    *,
    training: TrainingSpec,
    memory_budget_bytes: int,
    gradient_canary: GradientCanary | None,
) -> _RunPlan:
    """Check the run's arguments against each other and fix what every step will use."""
    num_models, num_parameters = theta0.shape
    dp = training.dp
    sizes = membership.sum(axis=1).astype(np.int64)
    rates, steps, expected = _sampling_plan(sizes, training)
    canary_direction = canary_included = None
    if gradient_canary is not None:
        if dp is None:
            raise ConfigError("A gradient canary needs DP-SGD: the 'dp' parameter is None.")
        canary_direction = gradient_canary.direction_tensor(
            dtype=theta0.dtype, device=theta0.device
        )
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
    gap_counts = np.zeros(num_models, np.int64)
    if not training.full_batch:
        gap_counts = _gaps_per_step(sizes, rates)
    chunk = _chunk_size(
        memory_budget_bytes,
        num_models=num_models,
        num_parameters=num_parameters,
        max_members=max_members,
        batch=batch_estimate,
        gaps_per_step=int(gap_counts.max()),
        bytes_per_example=backend.bytes_per_example(theta0.element_size()),
        itemsize=theta0.element_size(),
        momentum=training.momentum > 0,
        noise_block=_noise_block(num_parameters, theta0.element_size()) if dp is not None else 0,
    )
    return _RunPlan(
        sizes=sizes,
        rates=rates,
        gap_counts=gap_counts,
        steps=steps,
        expected=expected,
        chunk=chunk,
        noise_std=dp.noise_multiplier * dp.clipping_norm if dp is not None else 0.0,
        clip=dp.clipping_norm if dp is not None else None,
        canary_direction=canary_direction,
        canary_included=canary_included,
    )


class _CoordinateCanaryRun:
    """The running state of :class:`~dpaudit.training.CoordinateCanaries` in one run.

    Holds the canaries' coin stream, the bump C / (q·n) a sampled canary adds to its
    coordinate of the privatised gradient, and the running sums the auditor scores.
    The class docstring of ``CoordinateCanaries`` says why the bump has that size.
    """

    def __init__(
        self,
        canaries: CoordinateCanaries,
        *,
        num_parameters: int,
        clip: float,
        rate: float,
        expected: float,
        full_batch: bool,
        device: Any,
    ) -> None:
        self.indices = canaries.indices_tensor(num_parameters, device=device)
        self.included = canaries.included
        self.rate = rate
        # A canary's clipped gradient C·e_j enters the sum that is divided by q·n, so
        # after the division it moves coordinate j by C / (q·n).
        self.add = clip / expected
        self.full_batch = full_batch
        self.rng = np.random.default_rng([canaries.seed, 9])
        self.sums = np.zeros(self.included.size)

    def add_to(self, gradient: torch.Tensor) -> None:
        """Add the sampled, included canaries to model 0's privatised ``gradient`` in
        place, then add its canary coordinates to the running sums."""
        m = self.included.size
        # Each canary's per-step Poisson coin at the model's rate q, as for a member.
        coins = np.ones(m, dtype=bool) if self.full_batch else self.rng.random(m) < self.rate
        bump = torch.as_tensor(
            (coins & self.included) * self.add, dtype=gradient.dtype, device=gradient.device
        )
        gradient[0, self.indices] += bump
        self.sums += gradient[0, self.indices].double().cpu().numpy()


def _start_coordinate_canaries(
    canaries: CoordinateCanaries | None,
    plan: _RunPlan,
    *,
    training: TrainingSpec,
    num_parameters: int,
    device: Any,
) -> _CoordinateCanaryRun | None:
    """Check that coordinate canaries fit this run (one model, DP on) and start them."""
    if canaries is None:
        return None
    if not isinstance(canaries, CoordinateCanaries):
        raise ConfigError(
            "The 'coordinate_canaries' parameter must be CoordinateCanaries or None. "
            f"Got {canaries!r} instead."
        )
    if plan.clip is None:
        raise ConfigError("Coordinate canaries need DP-SGD: the 'dp' parameter is None.")
    if plan.sizes.size != 1:
        # The one-run bound counts canaries of ONE run; their sums are of model 0 only.
        raise ConfigError(
            "Coordinate canaries audit one model: the 'membership' parameter must have "
            f"exactly 1 row (K = 1). Got K = {plan.sizes.size} instead."
        )
    return _CoordinateCanaryRun(
        canaries,
        num_parameters=num_parameters,
        clip=plan.clip,
        rate=plan.rates[0],
        expected=plan.expected[0],
        full_batch=training.full_batch,
        device=device,
    )


# ------------------------------------------------------------------------------- chunks
@dataclass
class _Chunk:
    """One chunk of models in training: parameters, members, streams, random blocks.

    ``theta`` is updated in place; ``momentum`` may be replaced by the update.
    """

    local: np.ndarray  # the chunk's models, as indices into the run's K models
    theta: torch.Tensor  # (Kc, P)
    momentum: torch.Tensor | None
    members: torch.Tensor  # (Kc, n_max) row indices, padded
    member_valid: torch.Tensor  # (Kc, n_max)
    log_keep: torch.Tensor  # (Kc, 1) float64 ln(1 − q)
    size_col: torch.Tensor  # (Kc, 1) float64 members n
    denominators: torch.Tensor  # (Kc, 1) expected batch sizes
    steps: np.ndarray  # (Kc,)
    sizes: np.ndarray  # (Kc,)
    model_indices: torch.Tensor  # (Kc,) global model indices
    gens_sampling: list[torch.Generator]
    gens_noise: list[torch.Generator] | None
    gens_canary: dict[int, torch.Generator]  # chunk position -> stream, included models
    block: int  # steps per noise block
    gap_counts: np.ndarray  # (Kc,) gaps drawn per step
    gap_count_col: torch.Tensor  # (Kc,) the same, int64
    last_gap_col: torch.Tensor  # (Kc, 1) int64 index of each model's last drawn gap
    gaps: torch.Tensor  # (SAMPLING_BLOCK, Kc, max gap count) float64 geometric gaps
    positions: torch.Tensor  # the same shape: their partial sums − 1, member positions
    gap_padding: torch.Tensor  # (Kc, max gap count) the columns a model does not draw
    noise: torch.Tensor | None  # (Kc, block, P)
    full: tuple[torch.Tensor, torch.Tensor] | None  # every member's (x, y), full batch
    arange_cache: dict[int, torch.Tensor]
    cached_inputs: bool = False  # the backend caches ‖x_i‖² (LinearStackBackend)
    # the batch's inputs and the clipped sum, reused from step to step
    workspace: _Workspace = field(default_factory=_Workspace)
    # (Kc, SAMPLING_BLOCK) the gradient canary's coins of the block's steps (CPU only)
    canary_coins: torch.Tensor | None = None
    canary_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def _gather_members(
    membership: np.ndarray, local: np.ndarray, n_max: int, device: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each model's member rows, padded to the chunk's largest membership ``n_max``."""
    members = torch.zeros((local.size, n_max), dtype=torch.int64, device=device)
    member_valid = torch.zeros((local.size, n_max), dtype=torch.bool, device=device)
    for i, k in enumerate(local):
        rows = np.flatnonzero(membership[k])
        members[i, : rows.size] = torch.as_tensor(rows, device=device)
        member_valid[i, : rows.size] = True
    return members, member_valid


def _chunk_streams(
    plan: _RunPlan, local: np.ndarray, *, seed: int, model_offset: int, device: Any
) -> tuple[list[torch.Generator], list[torch.Generator] | None, dict[int, torch.Generator]]:
    """The chunk's models' sampling, noise and canary generators, each derived from
    ``(seed, global model index, purpose)`` alone, so that chunking changes nothing."""
    globals_ = [model_offset + int(k) for k in local]
    sampling = [derive_generator(seed, g, PURPOSE_SAMPLING, device=device) for g in globals_]
    noise = (
        [derive_generator(seed, g, PURPOSE_NOISE, device=device) for g in globals_]
        if plan.noise_std > 0
        else None
    )
    canary: dict[int, torch.Generator] = {}
    if plan.canary_included is not None:
        canary = {
            i: derive_generator(seed, globals_[i], PURPOSE_CANARY, device=device)
            for i, k in enumerate(local)
            if plan.canary_included[k]
        }
    return sampling, noise, canary


def _plan_chunk(
    plan: _RunPlan,
    theta0: torch.Tensor,
    x: torch.Tensor,
    y: torch.Tensor,
    membership: np.ndarray,
    start: int,
    stop: int,
    *,
    training: TrainingSpec,
    seed: int,
    model_offset: int,
    noise: torch.Tensor | None,
    workspace: _Workspace,
) -> _Chunk:
    """Gather the members of models ``start:stop`` and derive their random streams.

    ``noise`` is the run's ``(chunk, block, P)`` noise buffer (``None`` without noise)
    and ``workspace`` its reused step buffers: both are shared by the run's chunks, so
    that a run of many chunks touches fresh memory once, not once per chunk.
    """
    local = np.arange(start, stop)
    kc, num_parameters = local.size, theta0.shape[1]
    device, dtype = theta0.device, theta0.dtype
    theta = theta0[start:stop].clone()
    n_max = int(plan.sizes[local].max())
    members, member_valid = _gather_members(membership, local, n_max, device)
    # Gaps from float64 uniforms and ln(1 − q): the executed inclusion probability is the
    # recorded q up to float64 rounding.
    rates = torch.as_tensor(plan.rates[local], dtype=torch.float64, device=device)
    gap_counts = plan.gap_counts[local]
    m_max = max(int(gap_counts.max()), 1)
    gens_sampling, gens_noise, gens_canary = _chunk_streams(
        plan, local, seed=seed, model_offset=model_offset, device=device
    )
    # Each model's Poisson gaps and noise are drawn for a block of steps in one call on
    # its own generator (blocks start at multiples of their length), which keeps
    # results independent of chunking while making two calls per model per block
    # instead of two per model per step: per-call overhead, not the random numbers
    # themselves, dominated small models' steps.
    block = _noise_block(num_parameters, theta0.element_size())
    full = None
    if training.full_batch:
        full = (x[members.view(-1)].view(kc, n_max, -1), y[members.view(-1)].view(kc, n_max))
    return _Chunk(
        local=local,
        theta=theta,
        momentum=torch.zeros_like(theta) if training.momentum > 0 else None,
        members=members,
        member_valid=member_valid,
        log_keep=torch.log1p(-rates).unsqueeze(1),
        size_col=torch.as_tensor(plan.sizes[local], dtype=torch.float64, device=device)[:, None],
        denominators=torch.as_tensor(plan.expected[local], dtype=dtype, device=device).unsqueeze(1),
        steps=plan.steps[local],
        sizes=plan.sizes[local],
        model_indices=torch.as_tensor(local + model_offset, device=device),
        gens_sampling=gens_sampling,
        gens_noise=gens_noise,
        gens_canary=gens_canary,
        block=block,
        gap_counts=gap_counts,
        gap_count_col=torch.as_tensor(gap_counts, dtype=torch.int64, device=device),
        last_gap_col=torch.as_tensor(
            np.maximum(gap_counts - 1, 0), dtype=torch.int64, device=device
        ).unsqueeze(1),
        gaps=torch.full((SAMPLING_BLOCK, kc, m_max), math.inf, dtype=torch.float64, device=device),
        positions=torch.full(
            (SAMPLING_BLOCK, kc, m_max), math.inf, dtype=torch.float64, device=device
        ),
        gap_padding=(
            torch.arange(m_max, device=device)[None, :]
            >= torch.as_tensor(gap_counts, device=device)[:, None]
        ),
        noise=noise[:kc] if gens_noise and noise is not None else None,
        full=full,
        arange_cache={},
        workspace=workspace,
        # torch's CPU generator fills a tensor element by element from its stream, so a
        # block of the canary's coins is the same numbers as one call per step; other
        # devices' generators need not be, and keep a call per step (_add_gradient_canary)
        canary_coins=torch.empty((kc, SAMPLING_BLOCK))
        if gens_canary and device.type == "cpu"
        else None,
        canary_rows=np.fromiter(sorted(gens_canary), dtype=np.int64, count=len(gens_canary)),
    )


# -------------------------------------------------------------------------------- steps
def _sample_batch(
    chunk: _Chunk, x: torch.Tensor, y: torch.Tensor, j: int, active: torch.Tensor, all_active: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each model's batch of this step: ``(rows, xb, yb, valid)``, padded to a common width.

    ``j`` is the step's position in the current random block; inactive models get an
    empty batch.
    """
    if chunk.full is not None:
        valid = chunk.member_valid if all_active else chunk.member_valid & active.unsqueeze(1)
        return chunk.members, chunk.full[0], chunk.full[1], valid
    kc, device = chunk.members.shape[0], chunk.members.device
    positions, counts = _positions(chunk, j, active, all_active)
    width = max(int(counts.max()), 1)
    if width not in chunk.arange_cache:
        chunk.arange_cache[width] = torch.arange(width, device=device)
    valid = chunk.arange_cache[width].unsqueeze(0) < counts.unsqueeze(1)
    # Positions are increasing, so each model's batch is a prefix of its positions; the
    # padded entries point at member 0 (valid masks them).
    index = torch.where(valid, positions[:, :width], 0.0).to(torch.int64)
    rows = chunk.members.gather(1, index)
    # index_select into reused buffers: the same rows as x[rows], several times faster
    # than advanced indexing on CPU, and no fresh allocation per step.
    flat = rows.view(-1)
    take = chunk.workspace.take
    xb = torch.index_select(
        x, 0, flat, out=take("xb", (flat.numel(), x.shape[1]), dtype=x.dtype, device=device)
    )
    yb = torch.index_select(
        y, 0, flat, out=take("yb", (flat.numel(),), dtype=y.dtype, device=device)
    )
    return rows, xb.view(kc, width, -1), yb.view(kc, width), valid


def _positions(
    chunk: _Chunk, j: int, active: torch.Tensor, all_active: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """This step's sampled member positions ``(Kc, W)`` (float64, increasing per model,
    entries ≥ n past the batch) and batch sizes ``(Kc,)``; inactive models get none.

    The positions are the partial sums of the gaps minus 1 (the first member is position
    0). A model whose drawn gaps end before its last member (rare, see
    :func:`_gaps_per_step`) continues its own stream in :func:`_more_positions`.
    """
    positions = chunk.positions[j]
    counts = (positions < chunk.size_col).sum(dim=1)
    if not all_active:
        counts = torch.where(active, counts, 0)
    # A model is short of gaps when all its m drawn gaps landed on members (count = m;
    # inactive models have count 0 < m) and the last lands before its last member n − 1:
    # the next gap might still land on one. The first test is one cheap comparison per
    # step; the second runs only when the first fires (rarely, except when q = 1).
    full = counts == chunk.gap_count_col
    if not bool(full.any()):
        return positions, counts
    last = positions.gather(1, chunk.last_gap_col).squeeze(1)
    short = full & (last < chunk.size_col.squeeze(1) - 1)
    if not bool(short.any()):
        return positions, counts
    extra: dict[int, torch.Tensor] = {}
    for i in torch.nonzero(short).flatten().tolist():
        extra[i] = _more_positions(
            chunk.gens_sampling[i],
            float(last[i]),
            n=float(chunk.size_col[i, 0]),
            log_keep=chunk.log_keep[i],
            count=int(chunk.gap_counts[i]),
        )
    width = max(
        positions.shape[1], *(int(chunk.gap_counts[i]) + e.numel() for i, e in extra.items())
    )
    grown = torch.full(
        (positions.shape[0], width), math.inf, dtype=positions.dtype, device=positions.device
    )
    grown[:, : positions.shape[1]] = positions
    counts = counts.clone()
    for i, e in extra.items():
        m_i = int(chunk.gap_counts[i])
        grown[i, m_i : m_i + e.numel()] = e
        counts[i] = m_i + e.numel()
    return grown, counts


def _more_positions(
    generator: torch.Generator, last: float, *, n: float, log_keep: torch.Tensor, count: int
) -> torch.Tensor:
    """Continue one model's gaps past position ``last`` until they pass its last member
    ``n − 1``, drawing ``count`` uniforms at a time from its sampling stream; return the
    new positions that are members (< n).

    The gaps are i.i.d. Geometric(q) whichever call draws them, so the batch has the same
    law as if enough gaps had been drawn at once.
    """
    found = []
    while last < n - 1:
        gaps = _geometric_gaps(
            torch.rand(count, generator=generator, dtype=torch.float64), log_keep
        )
        positions = gaps.cumsum(0).add_(last)
        found.append(positions[positions < n])
        last = float(positions[-1])
    return torch.cat(found)


def _draw_canary_coins(t: int, chunk: _Chunk, active_np: np.ndarray) -> None:
    """Fill the next ``SAMPLING_BLOCK`` steps of the gradient canary's coins, one call per
    included model: model i draws min(SAMPLING_BLOCK, steps left) uniforms on its own
    canary generator, one per step it runs, as one call per step would (CPU only; see
    :func:`_plan_chunk`). One call per model per block instead of per step: the calls'
    overhead, not the numbers, was a fifth of a small model's step."""
    coins = chunk.canary_coins
    assert coins is not None  # set for CPU chunks with a gradient canary
    for i in chunk.canary_rows[active_np[chunk.canary_rows]].tolist():
        steps_i = int(min(SAMPLING_BLOCK, int(chunk.steps[i]) - t))
        coins[i, :steps_i] = torch.rand(steps_i, generator=chunk.gens_canary[i])


def _add_gradient_canary(
    total: torch.Tensor,
    chunk: _Chunk,
    plan: _RunPlan,
    active_np: np.ndarray,
    full_batch: bool,
    *,
    j: int,
) -> torch.Tensor | None:
    """Add C·direction to the clipped sums of the included models whose coin comes up.

    ``j`` is the step's place in its block of coins (:func:`_draw_canary_coins`).
    Returns which models got the canary, or ``None`` without a gradient canary. The
    canary is summed before the division by q·n, as a clipped example gradient is.
    """
    if plan.canary_direction is None:
        return None
    sampled = torch.zeros(total.shape[0], dtype=torch.bool, device=total.device)
    if chunk.canary_coins is None:  # off the CPU: one coin per model and step
        for i, generator in chunk.gens_canary.items():
            if not active_np[i]:
                continue
            coin = torch.rand(1, generator=generator, device=total.device)
            if full_batch or float(coin) < plan.rates[chunk.local[i]]:
                sampled[i] = True
                total[i].add_(plan.canary_direction, alpha=plan.clip)
        return sampled
    rows = chunk.canary_rows[active_np[chunk.canary_rows]]
    if not full_batch:
        # float32 (or the default dtype's) coins against float64 q: numpy compares them
        # in float64, exactly as float(coin) < q did
        coins = chunk.canary_coins[:, j].numpy()[rows]
        rows = rows[coins < plan.rates[chunk.local[rows]]]
    for i in rows.tolist():
        sampled[i] = True
        total[i].add_(plan.canary_direction, alpha=plan.clip)
    return sampled


def _privatise(
    backend: Any,
    chunk: _Chunk,
    plan: _RunPlan,
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    *,
    j: int,
    active_np: np.ndarray,
    full_batch: bool,
    coordinate: _CoordinateCanaryRun | None,
    coin: int = 0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The privatised gradient (clipped sum + noise [+ canary]) / q·n of every model.

    ``j`` is the step's place in its noise block, ``coin`` in its block of canary coins.

    Coordinate canaries are then added to model 0's (see ``CoordinateCanaries``).
    Returns the gradient with the gradient canary's per-model flags (``None`` without).

    References:
        Abadi et al. 2016, Algorithm 1 (clip, sum, add N(0, σ²C²), divide).
    """
    rows, xb, yb, valid = batch
    if chunk.cached_inputs:
        out = chunk.workspace.take(
            "total", tuple(chunk.theta.shape), dtype=chunk.theta.dtype, device=chunk.theta.device
        )
        total = backend.clipped_sum(chunk.theta, xb, yb, valid, plan.clip, rows=rows, out=out)
    else:
        total = backend.clipped_sum(chunk.theta, xb, yb, valid, plan.clip)
    if chunk.noise is not None:
        # inactive models' rows are ignored below (their update is masked out)
        total.add_(chunk.noise[:, j], alpha=plan.noise_std)
    canary_sampled = _add_gradient_canary(total, chunk, plan, active_np, full_batch, j=coin)
    gradient = total.div_(chunk.denominators)
    if coordinate is not None and active_np[0]:
        # C / (q·n) each, after the division: the same number as C·e_j in the sum up to
        # rounding, added where the one-run audit always added it (bit-identical scores).
        coordinate.add_to(gradient)
    return gradient, canary_sampled


def _update(
    chunk: _Chunk,
    gradient: torch.Tensor,
    active: torch.Tensor,
    all_active: bool,
    training: TrainingSpec,
) -> None:
    """Weight decay, momentum and the SGD step, for the active models only."""
    theta = chunk.theta
    if training.weight_decay > 0:
        gradient = gradient.add(theta, alpha=training.weight_decay)
    if chunk.momentum is not None:
        if all_active:
            chunk.momentum.mul_(training.momentum).add_(gradient)
        else:
            chunk.momentum = torch.where(
                active.unsqueeze(1),
                chunk.momentum * training.momentum + gradient,
                chunk.momentum,
            )
        gradient = chunk.momentum
    if all_active:
        theta.add_(gradient, alpha=-training.learning_rate)
    else:
        theta.sub_(torch.where(active.unsqueeze(1), gradient, 0.0) * training.learning_rate)


def _train_chunk(
    backend: Any,
    chunk: _Chunk,
    plan: _RunPlan,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    training: TrainingSpec,
    step_observer: Callable[[StepInfo], None] | None,
    coordinate: _CoordinateCanaryRun | None,
) -> None:
    """Run the chunk's steps: draw randomness, sample, privatise, observe, update."""
    device = chunk.theta.device
    for t in range(int(chunk.steps.max())):
        active_np = chunk.steps > t
        all_active = bool(active_np.all())
        active = torch.as_tensor(active_np, device=device)
        j = t % chunk.block
        if j == 0 and chunk.noise is not None and chunk.gens_noise is not None:
            _draw_noise(
                t,
                chunk.block,
                np.flatnonzero(active_np),
                chunk.steps,
                chunk.noise,
                chunk.gens_noise,
            )
        if t % SAMPLING_BLOCK == 0 and not training.full_batch:
            _draw_gaps(t, chunk, np.flatnonzero(active_np))
        if t % SAMPLING_BLOCK == 0 and chunk.canary_coins is not None:
            _draw_canary_coins(t, chunk, active_np)
        batch = _sample_batch(chunk, x, y, t % SAMPLING_BLOCK, active, all_active)
        gradient, canary_sampled = _privatise(
            backend,
            chunk,
            plan,
            batch,
            j=j,
            active_np=active_np,
            full_batch=training.full_batch,
            coordinate=coordinate,
            coin=t % SAMPLING_BLOCK,
        )
        if step_observer is not None:
            step_observer(
                StepInfo(
                    step=t,
                    model_indices=chunk.model_indices,
                    active=active,
                    batch_rows=batch[0],
                    batch_valid=batch[3],
                    gradients=gradient,
                    parameters=chunk.theta,
                    canary_sampled=canary_sampled,
                )
            )
        _update(chunk, gradient, active, all_active, training)


def _records(plan: _RunPlan, training: TrainingSpec) -> tuple[DPSGDRecord | None, ...]:
    """One record per model of the σ, q, steps and C executed (``None`` for plain SGD)."""
    dp = training.dp
    if dp is None:
        return (None,) * plan.sizes.size
    return tuple(
        DPSGDRecord(
            noise_multiplier=dp.noise_multiplier,
            sampling_rate=float(plan.rates[k]),
            steps=int(plan.steps[k]),
            clipping_norm=dp.clipping_norm,
            sampling="full-batch" if training.full_batch else "poisson",
            dataset_size=int(plan.sizes[k]),
        )
        for k in range(plan.sizes.size)
    )


class EngineRun(NamedTuple):
    """What :func:`run_engine` returns."""

    parameters: torch.Tensor
    """``(K, P)`` trained flat parameters."""
    records: tuple[DPSGDRecord | None, ...]
    """One record per model, ``None`` for plain SGD."""
    canary_sums: np.ndarray | None
    """The coordinate canaries' running sums, or ``None`` without them."""


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
    coordinate_canaries: CoordinateCanaries | None = None,
) -> EngineRun:
    """Train the ``K`` models whose initial flat parameters are ``theta0`` (K, P).

    Returns the trained ``(K, P)`` parameters, one record per model and, with
    ``coordinate_canaries``, their running sums (see :func:`train_many`).
    """
    num_models, num_parameters = theta0.shape
    plan = _plan_run(
        backend,
        theta0,
        membership,
        training=training,
        memory_budget_bytes=memory_budget_bytes,
        gradient_canary=gradient_canary,
    )
    coordinate = _start_coordinate_canaries(
        coordinate_canaries,
        plan,
        training=training,
        num_parameters=num_parameters,
        device=theta0.device,
    )
    theta_out = torch.empty_like(theta0)
    cached_inputs = callable(getattr(backend, "cache_inputs", None))
    if cached_inputs:
        backend.cache_inputs(x)
    # Shared by the chunks (see _plan_chunk); zeros, so that the rows of models past
    # their last step hold finite numbers.
    noise = (
        torch.zeros(
            (
                min(plan.chunk, num_models),
                _noise_block(num_parameters, theta0.element_size()),
                num_parameters,
            ),
            dtype=theta0.dtype,
            device=theta0.device,
        )
        if plan.noise_std > 0
        else None
    )
    workspace = _Workspace()
    for start in range(0, num_models, plan.chunk):
        stop = min(num_models, start + plan.chunk)
        chunk = _plan_chunk(
            plan,
            theta0,
            x,
            y,
            membership,
            start,
            stop,
            training=training,
            seed=seed,
            model_offset=model_offset,
            noise=noise,
            workspace=workspace,
        )
        chunk.cached_inputs = cached_inputs
        _train_chunk(
            backend,
            chunk,
            plan,
            x,
            y,
            training=training,
            step_observer=step_observer,
            coordinate=coordinate,
        )
        theta_out[start:stop] = chunk.theta
        if progress is not None:
            progress(stop, num_models)
    sums = coordinate.sums if coordinate is not None else None
    return EngineRun(theta_out, _records(plan, training), sums)


def _check_common(training: Any, memory_budget_bytes: Any, model_offset: Any) -> None:
    if not isinstance(training, TrainingSpec):
        raise ConfigError(f"The 'training' parameter must be a TrainingSpec. Got {training!r}.")
    check_integer("memory_budget_bytes", memory_budget_bytes, low=1)
    check_integer("model_offset", model_offset, low=0)


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
    coordinate_canaries: CoordinateCanaries | None = None,
    processes: int | None = None,
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
    their working memory stays within ``memory_budget_bytes`` and a step's working set
    within about 24 MiB (:data:`STEP_WORKING_SET_BYTES`: larger chunks run slower per
    model once they outgrow the caches). Every model draws from
    its own random streams derived from ``(seed, model_offset + k)``, so every chunking
    draws the same batches and noise; in float32 the sums of a padded batch depend on
    the chunk's width in the last bits (in float64 they agree to 1e-10, as the
    tests check), which is why worker processes train whole chunks of this plan.

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
        coordinate_canaries: m Dirac canaries for a one-run white-box audit of ONE
            model (K = 1, DP-SGD), see :class:`~dpaudit.training.CoordinateCanaries`;
            each is an extra record whose clipped gradient C·e_j joins the sum before
            the division by q·n. Their running sums come back in
            :attr:`~dpaudit.training.TrainResult.canary_sums`.
        processes: worker processes that train the run's chunks (one intra-op thread
            each; :mod:`dpaudit.training.parallel`), bit for bit the models of one
            process. ``None`` (auto): one per available core, but 1 inside a pool
            worker, 1 when the run is a single chunk or too small to pay for process
            start-up, and ``DPAUDIT_TRAINING_PROCESSES`` when set. ``1``: this process.
            In this process the run uses one torch intra-op thread on the CPU (restored
            afterwards; :func:`one_intra_op_thread`), as each worker process does.

    Returns:
        A :class:`~dpaudit.training.TrainResult`: the trained
        :class:`~dpaudit.models.ModelStack`, one :class:`~dpaudit.records.DPSGDRecord`
        per model (``None`` for plain SGD) stating the σ, q, number of steps and C
        actually executed, the wall-clock time and, with ``coordinate_canaries``, the
        canaries' sums.

    Raises:
        DataError: malformed ``X``, ``y`` or ``membership``, or a model without members.
        ConfigError: a ``batch_size`` larger than some model's number of members, a
            canary without DP, or coordinate canaries with more than one model.

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
    from dpaudit.training.parallel import plan_processes, train_in_processes

    sizer = LinearStackBackend(model, x.shape[1], classes)
    # Shape, dtype and device of the (K, P) parameters without allocating them.
    like = torch.empty((1, sizer.num_parameters), dtype=dtype, device=x.device)
    workers, chunks = plan_processes(
        processes,
        membership=mask,
        training=training,
        num_parameters=sizer.num_parameters,
        chunk=lambda: (
            _plan_run(
                sizer,
                like.expand(mask.shape[0], -1),
                mask,
                training=training,
                memory_budget_bytes=memory_budget_bytes,
                gradient_canary=None,
            ).chunk
        ),
        extensions=(step_observer, gradient_canary, coordinate_canaries),
        device=x.device,
    )
    if workers > 1:
        return train_in_processes(
            train_many,
            x,
            labels,
            mask,
            chunks=chunks,
            processes=workers,
            model=model,
            num_classes=classes,
            progress=progress,
            started=started,
            training=training,
            seed=seed,
            dtype=dtype,
            memory_budget_bytes=memory_budget_bytes,
            model_offset=model_offset,
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
    theta0 = stack.flat_parameters()
    if training.initial_parameters is not None:
        shared = torch.as_tensor(training.initial_parameters, dtype=dtype, device=device)
        if shared.numel() != theta0.shape[1]:
            raise ConfigError(
                f"The 'initial_parameters' must have {theta0.shape[1]} entries (one per "
                f"parameter). Got {shared.numel()} instead."
            )
        theta0 = shared.unsqueeze(0).expand_as(theta0).clone()
    backend = LinearStackBackend(model, x.shape[1], classes)
    with one_intra_op_thread(x.device):
        run = run_engine(
            backend,
            theta0,
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
            coordinate_canaries=coordinate_canaries,
        )
    models = ModelStack.from_flat(
        model, run.parameters, num_features=x.shape[1], num_classes=classes
    )
    return TrainResult(
        models=models,
        records=run.records,
        seconds=time.perf_counter() - started,
        canary_sums=run.canary_sums,
    )
