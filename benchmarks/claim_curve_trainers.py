"""A DP-SGD trainer with a planted noise bug, for benchmarks/claim_curve.py.

User trainer for ``[dpsgd] trainer = "claim_curve_trainers:dpsgd_planted_noise"``
(protocol of :mod:`dpaudit.trainers`): it runs dpaudit's engine with noise multiplier
``PLANTED_RATIO``·σ and reports records that say σ, so the accountant (and the claim's
curve) describe more noise than ran. The white-box score is the engine's canary
observer's, computed with what ran.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from dpaudit.trainers import TrainerOutput, canary_observer
from dpaudit.training import GradientCanary, train_many

#: σ_run / σ_claimed.
PLANTED_RATIO = 0.7


def dpsgd_planted_noise(
    X: np.ndarray, y: np.ndarray, membership: np.ndarray, *, seed: int, canary: Any, settings: Any
) -> TrainerOutput:
    """BUGGY: runs noise multiplier PLANTED_RATIO·σ and reports σ."""
    dp = settings.training.dp
    ran = replace(
        settings.training, dp=replace(dp, noise_multiplier=dp.noise_multiplier * PLANTED_RATIO)
    )
    observer = canary_observer(
        membership,
        ran,
        score=canary.score,
        direction=canary.direction,
        model_offset=settings.model_offset,
    )
    result = train_many(
        X,
        y,
        membership,
        model=settings.model,
        training=ran,
        seed=seed,
        num_classes=settings.num_classes,
        model_offset=settings.model_offset,
        step_observer=observer,
        gradient_canary=GradientCanary(canary.direction, canary.included),
    )
    told = tuple(replace(r, noise_multiplier=dp.noise_multiplier) for r in result.records)
    return TrainerOutput(scores=observer.scores(canary.score), records=told)
