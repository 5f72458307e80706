"""The generic path: DP-SGD for any per-example ``torch.nn.Module`` via ``torch.func``.

Per-example gradients come from ``vmap(grad(loss))`` over the examples of a batch,
itself ``vmap``-ed over the K stacked models (``functional_call`` swaps in each model's
parameters). Unlike :class:`~dpaudit.training.engine.LinearStackBackend` this
materialises the ``(K, B, P)`` per-example gradients, so it is slower and hungrier; it
exists for architectures the closed form does not cover. The step loop, sampling, noise
and random streams are the engine's, so both paths give the same models for the same
architecture and seed (tested).

The module must treat examples independently (no batch normalisation) and map a
``(B, d)`` input to ``(B, C)`` logits; the loss is the cross-entropy.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from dpaudit.errors import ConfigError, DpauditError
from dpaudit.models import PURPOSE_INIT, derive_generator
from dpaudit.training.engine import CLIP_EPSILON, _check_common, _prepare_data, run_engine
from dpaudit.training.specs import (
    CoordinateCanaries,
    GradientCanary,
    StepInfo,
    TrainingSpec,
    TrainResult,
)

__all__ = ["FunctionalBackend", "init_module_stack", "train_many_module"]


class FunctionalBackend:
    """Clipped per-example gradient sums of stacked copies of a module (torch.func)."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        named = list(module.named_parameters())
        if not named:
            raise ConfigError("The 'module' parameter must have trainable parameters.")
        self.names = [name for name, _ in named]
        self.shapes = [tuple(p.shape) for _, p in named]
        self.sizes = [p.numel() for _, p in named]
        self.num_parameters = sum(self.sizes)
        buffers = {name: b for name, b in module.named_buffers()}

        def loss_one(params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor):
            logits = functional_call(module, (params, buffers), (x.unsqueeze(0),))
            return torch.nn.functional.cross_entropy(logits, y.unsqueeze(0))

        per_example = vmap(grad(loss_one), in_dims=(None, 0, 0))
        self._per_model = vmap(per_example, in_dims=(0, 0, 0))

    def bytes_per_example(self, itemsize: int) -> int:
        # per-example gradients, their flat copy and the clipped product.
        return 3 * itemsize * self.num_parameters + 64

    def split(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        kc, out, offset = theta.shape[0], {}, 0
        for name, shape, size in zip(self.names, self.shapes, self.sizes, strict=True):
            out[name] = theta[:, offset : offset + size].reshape(kc, *shape)
            offset += size
        return out

    def per_example_gradients(
        self, theta: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        """Return ``(Kc, B, P)`` per-example gradients (zero on padded rows)."""
        grads = self._per_model(self.split(theta), xb, yb)
        kc, b = xb.shape[0], xb.shape[1]
        flat = torch.cat([grads[name].reshape(kc, b, -1) for name in self.names], dim=-1)
        return torch.where(valid.unsqueeze(-1), flat, 0.0)

    def clipped_sum(
        self,
        theta: torch.Tensor,
        xb: torch.Tensor,
        yb: torch.Tensor,
        valid: torch.Tensor,
        clipping_norm: float | None,
    ) -> torch.Tensor:
        per_example = self.per_example_gradients(theta, xb, yb, valid)
        if clipping_norm is None:
            return per_example.sum(dim=1)
        norms = torch.linalg.vector_norm(per_example, dim=-1)
        # Opacus 1.6's clipping factor, as in the fast path.
        factor = (clipping_norm / (norms + CLIP_EPSILON)).clamp(max=1.0)
        factor = torch.where(valid, factor, 0.0)
        return torch.einsum("kb,kbp->kp", factor, per_example)


def init_module_stack(
    module: nn.Module,
    *,
    num_models: int,
    seed: int,
    model_offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Return ``(K, P)`` flat initial parameters: each model's copy of ``module`` reset
    with its submodules' own ``reset_parameters`` under the seed of ``(seed, model_offset
    + k, init)``. The global torch RNG is left as it was (``torch.random.fork_rng``)."""
    rows = []
    for k in range(num_models):
        copy_k = copy.deepcopy(module).to(dtype=dtype, device=device)
        init_seed = derive_generator(seed, model_offset + k, PURPOSE_INIT).initial_seed()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            for sub in copy_k.modules():
                reset = getattr(sub, "reset_parameters", None)
                if callable(reset):
                    reset()
        rows.append(torch.cat([p.detach().reshape(-1) for p in copy_k.parameters()]))
    return torch.stack(rows)


def train_many_module(
    module: nn.Module,
    X: Any,
    y: Any,
    membership: Any,
    *,
    training: TrainingSpec,
    seed: int,
    num_classes: int | None = None,
    initial_state: dict[str, torch.Tensor] | None = None,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    memory_budget_bytes: int = 2**30,
    progress: Callable[[int, int], None] | None = None,
    model_offset: int = 0,
    step_observer: Callable[[StepInfo], None] | None = None,
    gradient_canary: GradientCanary | None = None,
    coordinate_canaries: CoordinateCanaries | None = None,
) -> TrainResult:
    """Train K copies of an arbitrary per-example ``torch.nn.Module`` at once.

    Same semantics, random streams and extension points as
    :func:`~dpaudit.training.train_many` (Poisson sampling at q = b / n_k, Opacus'
    clipping factor, N(0, σ²C²) noise, division by the expected batch size); only the
    per-example gradients come from ``torch.func`` instead of the closed form.

    Args:
        module: a template; it is copied, never modified.
        X: ``(n, d)`` features.
        y: ``(n,)`` integer labels.
        membership: ``(K, n)`` booleans.
        training: the optimiser and DP mechanism.
        seed: the base seed.
        num_classes: C, used only to validate labels; defaults to ``max(y) + 1``.
        initial_state: stacked ``(K, *shape)`` parameters under the module's parameter
            names; by default each copy is reset from its own seed
            (:func:`init_module_stack`).
        device: where to train.
        dtype: parameter dtype.
        memory_budget_bytes: working-memory budget for chunks of models.
        progress: called as ``progress(models_done, num_models)`` after every chunk.
        model_offset: global index of the first model.
        step_observer: see :func:`~dpaudit.training.train_many`.
        gradient_canary: see :class:`~dpaudit.training.GradientCanary`.
        coordinate_canaries: see :class:`~dpaudit.training.CoordinateCanaries` (K = 1
            and DP only); ``indices`` are in the order of the module's parameters.

    Returns:
        A :class:`~dpaudit.training.TrainResult` whose ``models`` is the dict of stacked
        trained parameters under the module's parameter names (and, with
        ``coordinate_canaries``, whose ``canary_sums`` are their sums).

    References:
        Abadi et al. 2016, Algorithm 1; torch.func per-sample-gradients tutorial.
    """
    started = time.perf_counter()
    if not isinstance(module, nn.Module):
        raise ConfigError(f"The 'module' parameter must be a torch.nn.Module. Got {module!r}.")
    _check_common(training, memory_budget_bytes, model_offset)
    x, labels, mask, _ = _prepare_data(
        X, y, membership, num_classes=num_classes, dtype=dtype, device=device
    )
    template = copy.deepcopy(module).to(dtype=dtype, device=device)
    backend = FunctionalBackend(template)
    num_models = mask.shape[0]
    if initial_state is None:
        theta0 = init_module_stack(
            module,
            num_models=num_models,
            seed=seed,
            model_offset=model_offset,
            dtype=dtype,
            device=device,
        )
    else:
        try:
            parts = [
                torch.as_tensor(initial_state[name])
                .to(dtype=dtype, device=device)
                .reshape(num_models, -1)
                for name in backend.names
            ]
        except (KeyError, RuntimeError) as exc:
            raise DpauditError(
                f"The 'initial_state' parameter must hold ({num_models}, *shape) tensors "
                f"under the names {backend.names}. Problem: {exc}."
            ) from None
        theta0 = torch.cat(parts, dim=1)
        if theta0.shape[1] != backend.num_parameters:
            raise DpauditError("The 'initial_state' parameter has the wrong parameter shapes.")
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
    state = {name: t.clone() for name, t in backend.split(run.parameters).items()}
    return TrainResult(
        models=state,
        records=run.records,
        seconds=time.perf_counter() - started,
        canary_sums=run.canary_sums,
    )
