"""Recipes: ``[model]`` / ``[training]`` → the engine's specs; the ONE formula for q and T.

Every part of dpaudit that needs the sampling rate q or the number of steps T of a
training recipe — the engine, noise calibration in every kind, ``dpaudit account`` —
asks :func:`sampling_plan`, so what is accounted is what the engine runs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, overload

import numpy as np

from dpaudit.errors import ConfigError

if TYPE_CHECKING:
    from dpaudit.models import ModelSpec
    from dpaudit.sections import ModelSection, TrainingSection
    from dpaudit.training.specs import TrainingSpec

__all__ = ["model_spec", "noise_multiplier", "sampling_plan", "steps_from_rate", "training_spec"]


@overload
def sampling_plan(
    members: int, *, batch_size: int, epochs: int, full_batch: bool
) -> tuple[float, int]: ...
@overload
def sampling_plan(
    members: np.ndarray, *, batch_size: int, epochs: int, full_batch: bool
) -> tuple[np.ndarray, np.ndarray]: ...
def sampling_plan(
    members: int | np.ndarray, *, batch_size: int, epochs: int, full_batch: bool
) -> tuple[float, int] | tuple[np.ndarray, np.ndarray]:
    """The sampling rate q and number of steps T of a model with ``members`` rows.

    Full batch (DP-GD): q = 1 and T = epochs. Poisson sampling: q = b / n and an epoch is
    ⌊n / b⌋ steps — Opacus' ``DPDataLoader`` makes ``int(1 / q)`` steps per epoch, and
    n // b is that number computed without floating-point rounding.

    Args:
        members: n, the rows the model samples from (an int, or an array of one per model).
        batch_size: b, the expected batch size.
        epochs: passes over the data.
        full_batch: every member in every step.

    Returns:
        ``(q, T)``: floats and ints for an int ``members``, arrays for an array.
    """
    n = np.asarray(members, dtype=np.int64)
    if full_batch:
        q = np.ones(n.shape)
        steps = np.full(n.shape, epochs, dtype=np.int64)
    else:
        q = batch_size / n
        steps = (epochs * (n // batch_size)).astype(np.int64)
    if n.ndim == 0:
        return float(q), int(steps)
    return q, steps


def steps_from_rate(sampling_rate: float, *, epochs: int) -> int:
    """T for ``epochs`` at Poisson rate q when only q is known: epochs · ⌊1/q⌋.

    The same rule as :func:`sampling_plan` (⌊1/q⌋ = ⌊n/b⌋ when q = b/n); 1e-9 absorbs the
    rounding of 1/q for rates such as 0.01.
    """
    return int(epochs * max(1, math.floor(1.0 / sampling_rate + 1e-9)))


def model_spec(section: ModelSection) -> ModelSpec:
    """The :class:`~dpaudit.models.ModelSpec` of a ``[model]`` table."""
    from dpaudit.models import ModelSpec

    return ModelSpec(kind=section.kind, hidden=tuple(section.hidden), activation=section.activation)


def noise_multiplier(training: TrainingSection, *, members: int, full_batch: bool) -> float:
    """σ of ``[training.dp]`` for a model with ``members`` rows.

    ``noise_multiplier`` as given; ``target_mu``: σ = √T/μ, since full-batch DP-GD is
    exactly (√T/σ)-GDP (Dong, Roth, Su 2019, Cor. 3.3); ``target_epsilon``: the smallest σ
    whose PLD ε at ``target_delta`` is at most the target, for the q and T that will run.

    Raises:
        ConfigError: no DP table, or the batch exceeds the members (no step would run).
    """
    from dpaudit.accounting import calibrate_noise

    dp = training.dp
    if dp is None:
        raise ConfigError("[training.dp] is missing: no noise to calibrate")
    if dp.noise_multiplier is not None:
        return dp.noise_multiplier
    q, steps = sampling_plan(
        members, batch_size=training.batch_size, epochs=training.epochs, full_batch=full_batch
    )
    if steps < 1 or q > 1.0:
        raise ConfigError(
            f"[training] batch_size={training.batch_size} exceeds the {members} rows the model "
            "trains on, so no DP-SGD step would run; lower batch_size or use more rows"
        )
    if dp.target_mu is not None:
        return math.sqrt(steps) / dp.target_mu
    assert dp.target_epsilon is not None  # the schema requires one of the three
    return calibrate_noise(
        target_epsilon=dp.target_epsilon, delta=dp.target_delta, sampling_rate=q, steps=steps
    )


def training_spec(
    training: TrainingSection, *, members: int, dp: bool = True, full_batch: bool | None = None
) -> TrainingSpec:
    """The engine's :class:`~dpaudit.training.TrainingSpec` for a ``[training]`` table.

    Args:
        training: the table.
        members: n, the rows each model trains on (q = b/n, T = epochs·⌊n/b⌋).
        dp: use ``[training.dp]`` when present (``False``: plain training).
        full_batch: override the table's ``full_batch`` (the ``dpgd`` trainer sets it).
    """
    from dpaudit.training.specs import DPConfig, TrainingSpec

    full = training.full_batch if full_batch is None else full_batch
    dp_config = None
    if dp and training.dp is not None:
        dp_config = DPConfig(
            noise_multiplier=noise_multiplier(training, members=members, full_batch=full),
            clipping_norm=training.dp.clipping_norm,
        )
    return TrainingSpec(
        epochs=training.epochs,
        batch_size=training.batch_size,
        learning_rate=training.learning_rate,
        momentum=training.momentum,
        weight_decay=training.weight_decay,
        dp=dp_config,
        full_batch=full,
    )
