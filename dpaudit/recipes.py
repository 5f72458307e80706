"""Recipes: ``[model]`` / ``[training]`` → the engine's specs.

The ONE formula for q and T, :func:`~dpaudit.training.sampling.sampling_plan`, lives with
the engine that runs it (:mod:`dpaudit.training.sampling`, torch-free) and is re-exported
here: the engine, noise calibration in every kind and ``dpaudit account`` all ask it, so
what is accounted is what the engine runs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dpaudit.errors import ConfigError
from dpaudit.training.sampling import sampling_plan, steps_from_rate

if TYPE_CHECKING:
    from dpaudit.models import ModelSpec
    from dpaudit.sections import ModelSection, TrainingSection
    from dpaudit.training.specs import TrainingSpec

__all__ = ["model_spec", "noise_multiplier", "sampling_plan", "steps_from_rate", "training_spec"]


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
