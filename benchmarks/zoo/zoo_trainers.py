"""The bug zoo's DP-SGD trainers: what ran is not what the accountant was told.

User trainers for ``[dpsgd] trainer = "zoo_trainers:function"`` (protocol of
:mod:`dpaudit.trainers`). Each runs dpaudit's engine (Poisson-subsampled DP-SGD as
Opacus runs it) and returns the white-box canary scores of what RAN, and records that
describe what the trainer BELIEVES it ran: the configured σ and q. The accountant reads
those records, so a trainer that runs something else is caught only if the audit's lower
bound exceeds the upper bound computed from the records.

- :func:`dpsgd_correct` (fixed): runs the configuration and reports it.
- :func:`dpsgd_half_noise` (buggy): adds noise σ/2 (e.g. a noise multiplier divided
  by two when it was meant to be split between two calls), reports σ.
- :func:`dpsgd_wrong_rate` (buggy): samples at rate 5·q (batches five times the
  configured size, as when a data loader ignores the privacy engine's sampler) over as
  many steps, reports q.

The white-box score is the sum over steps of the mixture log-likelihood ratio of the
privatised gradient along the Dirac canary (:func:`dpaudit.trainers.canary_observer`),
computed with what ran: any function of the transcript gives a valid audit, and this
one is the most powerful against what ran.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from dpaudit.trainers import TrainerOutput, canary_observer
from dpaudit.training import GradientCanary, train_many
from dpaudit.training.specs import TrainingSpec

#: The wrong-rate bug samples at this multiple of the configured rate.
RATE_FACTOR = 5


def _run(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: Any,
    settings: Any,
    training: TrainingSpec,
) -> tuple[np.ndarray, tuple[Any, ...]]:
    """Train with ``training`` (what runs); the canary's white-box scores and records."""
    observer = canary_observer(
        membership,
        training,
        score=canary.score,
        direction=canary.direction,
        model_offset=settings.model_offset,
    )
    result = train_many(
        X,
        y,
        membership,
        model=settings.model,
        training=training,
        seed=seed,
        num_classes=settings.num_classes,
        model_offset=settings.model_offset,
        step_observer=observer,
        gradient_canary=GradientCanary(canary.direction, canary.included),
    )
    return observer.scores(canary.score), tuple(result.records)


def dpsgd_correct(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, *, seed: int, canary: Any, settings: Any
) -> TrainerOutput:
    """FIXED: runs the configured DP-SGD and reports the engine's own records."""
    scores, records = _run(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=settings.training
    )
    return TrainerOutput(scores=scores, records=records)


def dpsgd_half_noise(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, *, seed: int, canary: Any, settings: Any
) -> TrainerOutput:
    """BUGGY: runs noise multiplier σ/2 and reports σ."""
    dp = settings.training.dp
    ran = replace(settings.training, dp=replace(dp, noise_multiplier=dp.noise_multiplier / 2.0))
    scores, records = _run(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=ran
    )
    told = tuple(replace(r, noise_multiplier=dp.noise_multiplier) for r in records)
    return TrainerOutput(scores=scores, records=told)


def dpsgd_wrong_rate(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, *, seed: int, canary: Any, settings: Any
) -> TrainerOutput:
    """BUGGY: samples at rate RATE_FACTOR·q for as many steps, and reports q.

    The engine takes ``n // batch_size`` steps per epoch, so RATE_FACTOR times the batch
    size over RATE_FACTOR times the epochs runs the same number of steps whenever the
    batch size divides the members (the shipped audit: 100 rows, batch 10 → 50).
    """
    cfg = settings.training
    ran = replace(cfg, batch_size=cfg.batch_size * RATE_FACTOR, epochs=cfg.epochs * RATE_FACTOR)
    scores, records = _run(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=ran
    )
    told = tuple(replace(r, sampling_rate=r.sampling_rate / RATE_FACTOR) for r in records)
    return TrainerOutput(scores=scores, records=told)
