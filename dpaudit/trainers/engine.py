"""The engine trainers: ``dpsgd`` (Poisson-subsampled DP-SGD), ``dpgd`` (full batch) and
``plain`` (no clipping, no noise), each returning the engine's records of what ran."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from dpaudit.accounting.upper_bounds import Claim
from dpaudit.errors import ConfigError
from dpaudit.models import ModelStack
from dpaudit.records import DPSGDRecord
from dpaudit.trainers.observers import _chain, _GreyBoxObserver, canary_observer
from dpaudit.trainers.protocol import CanarySetup, TrainerOutput, TrainerSettings
from dpaudit.training import GradientCanary, TrainingSpec, train_many


def _engine_train(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
    training: TrainingSpec,
    greybox: _GreyBoxObserver | None = None,
) -> tuple[np.ndarray | None, ModelStack, tuple[DPSGDRecord | None, ...]]:
    observer = None
    gradient_canary = None
    if canary.threat_model == "white-box":
        if canary.direction is None:
            raise ConfigError("A white-box canary audit needs a gradient canary ('dirac').")
        observer = canary_observer(
            membership,
            training,
            score=canary.score,
            direction=canary.direction,
            model_offset=settings.model_offset,
        )
        gradient_canary = GradientCanary(canary.direction, canary.included)
    elif canary.direction is not None:
        # The black-box gradient canary: added to every step like the Dirac canary, but
        # only the final model is scored (dpaudit.dpsgd.canaries.gradient_canary_scores).
        gradient_canary = GradientCanary(canary.direction, canary.included)
    result = train_many(
        X,
        y,
        membership,
        model=settings.model,
        training=training,
        seed=seed,
        num_classes=settings.num_classes,
        model_offset=settings.model_offset,
        step_observer=_chain(observer, greybox),
        gradient_canary=gradient_canary,
    )
    scores = observer.scores(canary.score) if observer is not None else None
    return scores, result.models, result.records  # type: ignore[return-value]


def _require_dp(training: TrainingSpec, name: str) -> None:
    if training.dp is None:
        raise ConfigError(f"The {name!r} trainer needs [dpsgd.training.dp] (noise, clipping).")


def _engine_dp_trainer(name: str, *, full_batch: bool, doc: str) -> Callable[..., TrainerOutput]:
    """A built-in trainer that runs the engine's DP-SGD (``full_batch`` = DP-GD)."""

    def trainer(
        X: np.ndarray,
        y: np.ndarray,
        membership: np.ndarray,
        *,
        seed: int,
        canary: CanarySetup,
        settings: TrainerSettings,
    ) -> TrainerOutput:
        _require_dp(settings.training, name)
        training = _replace(settings.training, full_batch=full_batch)
        greybox = _GreyBoxObserver.for_run(X, membership, canary, settings.model_offset)
        scores, models, records = _engine_train(
            X,
            y,
            membership,
            seed=seed,
            canary=canary,
            settings=settings,
            training=training,
            greybox=greybox,
        )
        return TrainerOutput(
            scores=scores,
            models=models,
            records=records,  # type: ignore[arg-type]
            observations=greybox.observations(records),
        )

    trainer.__name__ = f"{name}_trainer"
    trainer.__doc__ = doc
    return trainer


dpsgd_trainer = _engine_dp_trainer(
    "dpsgd",
    full_batch=False,
    doc="The engine's Poisson-subsampled DP-SGD; returns the engine's records.",
)
dpgd_trainer = _engine_dp_trainer(
    "dpgd",
    full_batch=True,
    doc="The engine's full-batch DP-GD (q = 1); returns the engine's records.",
)


def plain_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
) -> TrainerOutput:
    """The engine without clipping or noise: no privacy is claimed (ε = ∞)."""
    if canary.threat_model == "white-box":
        raise ConfigError(
            "The 'plain' trainer supports black-box audits only (no DP, no canary hook)."
        )
    training = _replace(settings.training, dp=None)
    _, models, _ = _engine_train(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=training
    )
    return TrainerOutput(models=models, claim=Claim(epsilon=math.inf, delta=0.0))


def _replace(training: TrainingSpec, **changes: Any) -> TrainingSpec:
    return replace(training, **changes)
