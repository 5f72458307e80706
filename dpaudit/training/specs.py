"""What to train and what came out: the engine's frozen input and result objects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from dpaudit.errors import ConfigError, DpauditError, check_in_interval, check_integer
from dpaudit.records import DPSGDRecord

if TYPE_CHECKING:
    from dpaudit.models import ModelStack

__all__ = [
    "CoordinateCanaries",
    "DPConfig",
    "GradientCanary",
    "StepInfo",
    "TrainResult",
    "TrainingSpec",
]


def _check_interval(name: str, value: Any, low: float, high: float, **kwargs: bool) -> float:
    # The shared checker raises the root DpauditError; a training spec is configuration.
    try:
        return check_in_interval(name, value, low, high, **kwargs)
    except DpauditError as exc:
        raise ConfigError(str(exc)) from None


def _check_int(name: str, value: Any, low: int) -> int:
    # As _check_interval: the shared integer checker, raised as a ConfigError.
    try:
        return check_integer(name, value, low=low)
    except DpauditError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class DPConfig:
    """The privacy mechanism of DP-SGD.

    Attributes:
        noise_multiplier: σ ≥ 0; the Gaussian noise on the sum of clipped per-example
            gradients has standard deviation σ·C.
        clipping_norm: C > 0, the ℓ2 bound every per-example gradient is clipped to.

    References:
        Abadi et al. 2016, "Deep Learning with Differential Privacy", Algorithm 1.
    """

    noise_multiplier: float
    clipping_norm: float

    def __post_init__(self) -> None:
        sigma = _check_interval(
            "noise_multiplier", self.noise_multiplier, 0.0, float("inf"), high_open=True
        )
        clip = _check_interval(
            "clipping_norm", self.clipping_norm, 0.0, float("inf"), low_open=True, high_open=True
        )
        object.__setattr__(self, "noise_multiplier", sigma)
        object.__setattr__(self, "clipping_norm", clip)


@dataclass(frozen=True)
class TrainingSpec:
    """How to train: (DP-)SGD hyper-parameters.

    Attributes:
        epochs: passes over the data; an epoch of model ``k`` is ``n_k // batch_size``
            Poisson steps (Opacus' ``DPDataLoader`` makes ``int(1/q)``), or one step when
            ``full_batch``.
        batch_size: the expected batch size b; model ``k`` samples each of its ``n_k``
            members independently with probability q = b / n_k in every step.
        learning_rate: SGD step size.
        momentum: heavy-ball momentum as in ``torch.optim.SGD`` (no dampening).
        weight_decay: L2 penalty added to the (privatised) gradient as ``torch.optim.SGD``
            does, i.e. after clipping and noise, as with an Opacus-wrapped optimizer.
        dp: the DP mechanism, or ``None`` for plain (non-private) SGD.
        full_batch: ``True`` for (DP-)GD: q = 1, every member in every step.
        initial_parameters: one flat ``(P,)`` starting point shared by every model (the
            order of :meth:`dpaudit.models.ModelStack.flat_parameters`), or ``None`` for
            each model's own random initialisation. DP-SGD's guarantee holds for any
            fixed starting point, so an auditor may choose the worst one.
    """

    epochs: int = 10
    batch_size: int = 64
    learning_rate: float = 0.1
    momentum: float = 0.0
    weight_decay: float = 0.0
    dp: DPConfig | None = None
    full_batch: bool = False
    initial_parameters: tuple[float, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check_int("epochs", self.epochs, 1)
        _check_int("batch_size", self.batch_size, 1)
        for name, low, high, low_open, high_open in (
            ("learning_rate", 0.0, float("inf"), True, True),
            ("momentum", 0.0, 1.0, False, True),
            ("weight_decay", 0.0, float("inf"), False, True),
        ):
            value = _check_interval(
                name, getattr(self, name), low, high, low_open=low_open, high_open=high_open
            )
            object.__setattr__(self, name, value)
        if self.dp is not None and not isinstance(self.dp, DPConfig):
            raise ConfigError(
                f"The 'dp' parameter must be a DPConfig or None. Got {self.dp!r} instead."
            )
        if not isinstance(self.full_batch, bool):
            raise ConfigError(
                f"The 'full_batch' parameter must be a bool. Got {self.full_batch!r} instead."
            )
        if self.initial_parameters is not None:
            theta = np.asarray(self.initial_parameters, dtype=np.float64)
            if theta.ndim != 1 or theta.size == 0 or not np.all(np.isfinite(theta)):
                raise ConfigError(
                    "The 'initial_parameters' parameter must be a non-empty 1-D sequence of "
                    f"finite numbers or None. Got shape {theta.shape} instead."
                )
            object.__setattr__(self, "initial_parameters", tuple(float(v) for v in theta))


@dataclass(frozen=True)
class GradientCanary:
    """A white-box gradient canary: a fixed vector added to some models' clipped sums.

    In every step, each model whose ``included`` flag is set draws a Poisson coin with
    its own sampling rate q (from a dedicated random stream, so adding a canary changes
    neither the batches nor the noise of that model); when the coin comes up, the canary
    gradient ``C · direction / ‖direction‖`` (norm exactly C, like a clipped example
    gradient at the clipping bound) is added to the model's clipped sum before the noise.
    With ``full_batch`` the canary is in every step. The canary is an extra record: it is
    not one of the model's ``n_k`` members and does not change q.

    Attributes:
        direction: ``(P,)`` vector in the flat parameter order of
            :meth:`dpaudit.models.ModelStack.flat_parameters` (weight, bias, weight, …).
        included: ``(K,)`` booleans, whether each model's dataset holds the canary.

    References:
        Nasr et al. 2023, "Tight Auditing of Differentially Private Machine Learning",
        §3 (gradient canaries, Dirac canaries); Steinke, Nasr, Jagielski 2023.
    """

    direction: Any
    included: Any

    def direction_tensor(self, *, dtype: torch.dtype, device: Any) -> torch.Tensor:
        d = torch.as_tensor(np.asarray(self.direction, dtype=np.float64)).to(dtype=torch.float64)
        norm = float(torch.linalg.vector_norm(d))
        if d.dim() != 1 or not np.isfinite(norm) or norm == 0.0:
            raise ConfigError(
                "The 'direction' of a gradient canary must be a finite, nonzero 1-D vector."
            )
        return (d / norm).to(dtype=dtype, device=device)

    def included_array(self, num_models: int) -> np.ndarray:
        inc = np.asarray(self.included)
        if inc.dtype != bool or inc.shape != (num_models,):
            raise ConfigError(
                f"The 'included' flags of a gradient canary must be {num_models} booleans. "
                f"Got an array of dtype {inc.dtype} and shape {inc.shape} instead."
            )
        return inc


@dataclass(frozen=True, eq=False)
class CoordinateCanaries:
    """m Dirac gradient canaries on ONE model, for a one-run white-box audit.

    Canary j is an extra record whose clipped gradient is ``C · e_{indices[j]}``: norm
    exactly C, the most a single record can move the clipped sum (Nasr et al. 2023, §3,
    Dirac canaries). It is in the model's dataset iff ``included[j]``; an included canary
    joins each step's batch by its own Poisson coin at the model's rate q (always, when
    full batch), like any member, so it is one more record of Abadi et al.'s Algorithm 1:
    not one of the model's n members, and it changes neither q nor the divisor q·n.
    Because a record's clipped gradient enters the SUM before the division by the
    expected batch size q·n, a sampled canary moves its coordinate of the privatised
    gradient by C / (q·n). The engine adds exactly that, after the division (where the
    one-run audit has always added it, so its scores stay bit for bit the same; it equals
    adding ``C · e_j`` before the division up to floating-point rounding). The coins come
    from numpy's ``default_rng([seed, 9])``, apart from the engine's torch streams, so the
    canaries change neither the batches nor the noise. The auditor's view is the one of
    white-box DP-SGD auditing: after every step the engine adds the privatised gradient at
    ``indices`` to running sums (:attr:`TrainResult.canary_sums`), the scores that
    Steinke, Nasr, Jagielski's guesser ranks.

    Attributes:
        indices: ``(m,)`` distinct flat parameter indices (the order of
            :meth:`dpaudit.models.ModelStack.flat_parameters`), one per canary.
        included: ``(m,)`` booleans, whether each canary is in the training set. The
            one-run bound (Steinke, Nasr, Jagielski 2023, Thm. 3.1) holds only if these
            are independent fair coins.
        seed: seed of the canaries' per-step inclusion coins.

    References:
        Abadi et al. 2016, "Deep Learning with Differential Privacy", Algorithm 1 (clip,
        sum, noise, divide); Nasr et al. 2023, "Tight Auditing of Differentially Private
        Machine Learning", §3 (Dirac gradient canaries); Steinke, Nasr, Jagielski 2023,
        "Privacy Auditing with One (1) Training Run", Algorithm 1 (m canaries, each
        included by a fair coin, in one white-box DP-SGD run).
    """

    indices: Any
    included: Any
    seed: int

    def __post_init__(self) -> None:
        idx = np.asarray(self.indices)
        if idx.ndim != 1 or idx.size == 0 or not np.issubdtype(idx.dtype, np.integer):
            raise ConfigError(
                "The 'indices' of coordinate canaries must be a non-empty 1-D array of "
                f"integers. Got dtype {idx.dtype} and shape {idx.shape} instead."
            )
        if idx.min() < 0 or np.unique(idx).size != idx.size:
            raise ConfigError(
                "The 'indices' of coordinate canaries must be distinct integers >= 0 "
                "(flat parameter indices)."
            )
        inc = np.asarray(self.included)
        if inc.dtype != bool or inc.shape != idx.shape:
            raise ConfigError(
                f"The 'included' flags of coordinate canaries must be {idx.size} booleans, "
                f"one per index. Got dtype {inc.dtype} and shape {inc.shape} instead."
            )
        seed = _check_int("seed", self.seed, 0)
        object.__setattr__(self, "indices", idx.astype(np.int64))
        object.__setattr__(self, "included", inc)
        object.__setattr__(self, "seed", seed)

    def indices_tensor(self, num_parameters: int, *, device: Any) -> torch.Tensor:
        """The indices as a tensor on ``device``, checked against the model's size."""
        if int(self.indices.max()) >= num_parameters:
            raise ConfigError(
                f"The 'indices' of coordinate canaries must be below {num_parameters}, the "
                f"number of parameters. Got {int(self.indices.max())} instead."
            )
        return torch.as_tensor(self.indices, device=device)

    def __repr__(self) -> str:
        return (
            f"CoordinateCanaries(canaries={self.indices.size}, "
            f"included={int(self.included.sum())}, seed={self.seed})"
        )


@dataclass(frozen=True)
class StepInfo:
    """What a ``step_observer`` sees after the privatised gradient of a step is formed.

    The tensors are views of the engine's buffers for one chunk of models, valid only
    during the call: clone what you keep, and treat them as read-only (the update uses
    ``gradients`` after the call; canaries belong in :class:`GradientCanary` or
    :class:`CoordinateCanaries`, not in an observer).

    Attributes:
        step: the step index (0-based) of the models in this chunk.
        model_indices: ``(Kc,)`` global indices of the chunk's models.
        active: ``(Kc,)`` whether each model makes this step (models with fewer steps
            sit out the chunk's last steps).
        batch_rows: ``(Kc, B)`` row indices into ``X`` of each model's batch, padded.
        batch_valid: ``(Kc, B)`` which entries of ``batch_rows`` are real.
        gradients: ``(Kc, P)`` the privatised gradient (clipped sum + noise [+ canary]) /
            expected batch size [+ coordinate canaries], before weight decay and
            momentum; the update is
            ``-learning_rate`` times it when both are 0.
        parameters: ``(Kc, P)`` the parameters before the update.
        canary_sampled: ``(Kc,)`` whether the gradient canary was added, or ``None``.
    """

    step: int
    model_indices: torch.Tensor
    active: torch.Tensor
    batch_rows: torch.Tensor
    batch_valid: torch.Tensor
    gradients: torch.Tensor
    parameters: torch.Tensor
    canary_sampled: torch.Tensor | None


@dataclass(frozen=True)
class TrainResult:
    """K trained models and what was run for each.

    Attributes:
        models: the trained :class:`~dpaudit.models.ModelStack` (or, from the generic
            path, a dict of stacked parameters).
        records: one :class:`~dpaudit.records.DPSGDRecord` per model with the σ, q, steps
            and C that were executed, or ``None`` per model for plain SGD.
        seconds: wall-clock training time.
        canary_sums: with :class:`CoordinateCanaries`, the ``(m,)`` float64 sums over the
            model's steps of its privatised gradient at the canaries' indices (canary
            included); ``None`` otherwise.
    """

    models: ModelStack | dict[str, torch.Tensor]
    records: tuple[DPSGDRecord | None, ...]
    seconds: float
    canary_sums: np.ndarray | None = None

    def __repr__(self) -> str:
        models = _dict_repr(self.models) if isinstance(self.models, dict) else repr(self.models)
        sums = "" if self.canary_sums is None else f", canary_sums=<{self.canary_sums.size} sums>"
        return (
            f"TrainResult(models={models}, "
            f"records={_records_repr(self.records)}, seconds={self.seconds:.3g}{sums})"
        )


def _dict_repr(state: dict[str, torch.Tensor]) -> str:
    return "{" + ", ".join(f"{k!r}: {tuple(v.shape)}" for k, v in state.items()) + "}"


def _records_repr(records: Sequence[DPSGDRecord | None]) -> str:
    if not records:
        return "()"
    if all(r is None for r in records):
        return f"{len(records)} × None"
    rs = [r for r in records if r is not None]
    qs = [r.sampling_rate for r in rs]
    ts = [r.steps for r in rs]
    first = rs[0]
    q = f"{qs[0]:.4g}" if min(qs) == max(qs) else f"[{min(qs):.4g}, {max(qs):.4g}]"
    t = f"{ts[0]}" if min(ts) == max(ts) else f"[{min(ts)}, {max(ts)}]"
    return (
        f"{len(records)} × DPSGDRecord(noise_multiplier={first.noise_multiplier:g}, "
        f"sampling_rate={q}, steps={t}, clipping_norm={first.clipping_norm:g}, "
        f"sampling={first.sampling!r})"
    )
