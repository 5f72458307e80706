"""The many-run units: 2·``trials`` models trained by the configured trainer, and the
raw arrays each unit stores.

Model g of the run is trained with the canary iff g is odd, so every unit holds both arms.
A unit stores only what the trainer gave: one score per model (black-box: minus the
canary's loss, or the crafted canary's logit shift, or the worst-case pair's exact
log-likelihood ratio; white-box: the trainer's own score of the Dirac canary), the arm
flags, what ran (DPSGDRecords through :meth:`~dpaudit.records.DPSGDRecord.to_arrays`,
or a claim), the grey-box observations and what the trainer's user code said (its printed
lines and warnings, counted: :class:`~dpaudit.trainers.TrainerMessages`). Every bound is
computed after the store (:mod:`dpaudit.dpsgd.summary`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np

from dpaudit.dpsgd.canaries import CraftedCanary, gradient_canary_scores
from dpaudit.dpsgd.one_run import ONE_RUN_UNIT, one_run_unit
from dpaudit.dpsgd.schema import BlackBoxSection, DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.setup import WorstCaseSetup, _Setup, _setup, purpose_seed
from dpaudit.errors import ConfigError, DataError
from dpaudit.kinds.base import unit_index
from dpaudit.models import ModelStack
from dpaudit.plugins import load_plugin
from dpaudit.records import DPSGDRecord
from dpaudit.theory import erm
from dpaudit.trainers import (
    CanarySetup,
    TrainerOutput,
    TrainerSettings,
    coerce_output,
    get_trainer,
)

__all__ = ["CHECKPOINTS_KEY", "dpsgd_unit", "trainer_libraries", "unit_names"]

#: The unit array listing the checkpoints t of ``checkpoint = [t₁, t₂, ...]``.
CHECKPOINTS_KEY = "checkpoints"


def _total_models(s: DpsgdSection) -> int:
    return 2 * s.trials


def unit_names(spec: DpsgdSpec) -> tuple[str, ...]:
    """The many-run units (``unit_size`` models each), then the one-run unit if any."""
    n = math.ceil(_total_models(spec.section) / spec.unit_size)
    units = [f"dpsgd-{i:05d}" for i in range(n)]
    if spec.section.one_run is not None:
        units.append(ONE_RUN_UNIT)
    return tuple(units)


def trainer_libraries(trainer: str, base_dir: Path | str) -> dict[str, dict[str, str]]:
    """The training library a user trainer declares (its ``library_versions``, e.g. the
    Opacus adapter's ``{"opacus": "1.6.0"}``): provenance, and part of the units' key."""
    if ":" not in trainer:
        return {}
    libraries = getattr(
        load_plugin(trainer, base_dir=base_dir, what="trainer"), "library_versions", None
    )
    return {"trainer_libraries": dict(libraries)} if libraries else {}


def dpsgd_unit(spec: DpsgdSpec, unit: str) -> dict[str, np.ndarray]:
    """Train one unit of models and return their scores and what they ran."""
    if unit == ONE_RUN_UNIT:
        return one_run_unit(spec)
    s = spec.section
    start = unit_index(unit) * spec.unit_size
    stop = min(_total_models(s), start + spec.unit_size)
    setup = _setup(spec)
    # Model g is "in" iff g is odd: both arms in every unit, so a partial run stays balanced.
    included = (np.arange(start, stop) % 2) == 1
    membership = np.ones((stop - start, setup.X.shape[0]), dtype=bool)
    if setup.canary_row is not None:
        membership[:, setup.canary_row] = included
    if setup.replaced_row is not None:  # replace-one: the record the canary replaces
        membership[:, setup.replaced_row] = ~included
    canary = CanarySetup(
        kind=s.canary,
        threat_model=s.threat_model,
        included=included,
        row=setup.canary_row,
        direction=setup.direction,
        score=s.score,
        replaced=setup.replaced_row,
    )
    settings = TrainerSettings(
        model=setup.model,
        training=setup.training,
        num_classes=setup.num_classes,
        model_offset=start,
        options=dict(s.options),
    )
    trainer = get_trainer(s.trainer, base_dir=spec.base_dir)

    def trained(settings: TrainerSettings) -> dict[str, np.ndarray]:
        out = coerce_output(
            trainer(
                setup.X,
                setup.y,
                membership,
                seed=purpose_seed(spec.seed, 4),
                canary=canary,
                settings=settings,
            ),
            num_models=stop - start,
            name=s.trainer,
        )
        return {
            "scores": _scores(out, setup, s.black_box, gradient=s.canary == "gradient")
            if setup.worst_case is None
            else _worst_case_scores(out, setup.worst_case),
            **_ran_arrays(out),
            **_greybox_arrays(out),
            **_message_arrays(out),
        }

    steps = s.checkpoints
    if steps is None:
        return {"included": included, **trained(settings)}
    # Several checkpoints of ONE training run: the trainer releases θ_t for each t from the
    # same seed and model indices, so θ_t is the model the T-step run holds after t steps
    # (its noise draws are the first t of the run's). Each θ_t's arrays are stored under
    # "<name>@t" (:func:`dpaudit.dpsgd.summary.checkpoint_views` reads them back).
    arrays = {"included": included, CHECKPOINTS_KEY: np.array(steps, dtype=np.int64)}
    for t in steps:
        at = replace(settings, options={**settings.options, "checkpoint": t})
        arrays.update({f"{key}@{t}": value for key, value in trained(at).items()})
    return arrays


# ------------------------------------------------------------------------------ scores


def _scores(
    out: TrainerOutput, setup: _Setup, black_box: BlackBoxSection | None, *, gradient: bool = False
) -> np.ndarray:
    if out.scores is not None:
        return np.asarray(out.scores, dtype=np.float64).reshape(-1)
    if gradient and out.models is not None:  # the black-box gradient canary
        return _gradient_scores(out.models, setup)
    if setup.canary_row is None or out.models is None:
        raise ConfigError("A trainer returning models needs an input-space canary to score.")
    if black_box is not None and black_box.score == "logit-shift":
        assert setup.crafted is not None  # the section requires the crafted canary
        return _logit_shift_scores(out.models, setup.crafted)
    x = setup.X[setup.canary_row : setup.canary_row + 1]
    y = setup.y[setup.canary_row : setup.canary_row + 1]
    # Black-box score: minus the canary's loss on the final model (lower loss ⇒ "in").
    double = out.models.dtype.itemsize == 8  # a float64 stack takes float64 rows
    losses = out.models.losses(x.astype(np.float64) if double else x, y)
    scores: np.ndarray = -losses[:, 0].double().numpy()
    if not np.all(np.isfinite(scores)):
        raise DataError("A model gave the canary an infinite or NaN loss.")
    return scores


def _gradient_scores(models: ModelStack, setup: _Setup) -> np.ndarray:
    """The black-box gradient canary's scores: the final parameter on its coordinate."""
    # canary = "gradient": a Dirac direction and DP training (the section checked both)
    t, dp = setup.training, setup.training.dp
    assert setup.direction is not None
    assert dp is not None
    theta0 = t.initial_parameters
    index = int(np.flatnonzero(setup.direction)[0])
    return gradient_canary_scores(
        models.flat_parameters().double().numpy(),
        index=index,
        initial=0.0 if theta0 is None else float(theta0[index]),
        learning_rate=t.learning_rate,
        clipping_norm=dp.clipping_norm,
        # the engine divides the noisy sum by the expected batch size (n for full batch)
        divisor=float(setup.X.shape[0] if t.full_batch else t.batch_size),
    )


def _logit_shift_scores(models: ModelStack, crafted: CraftedCanary) -> np.ndarray:
    """Black-box logit-shift scores of the crafted canary (see :class:`BlackBoxSection`).

    Two queries per model, the canary and the canary with its feature at 0 (for the
    crafted canary: the all-zero input); the difference of the label-over-decoy margins
    cancels every parameter the canary's feature does not multiply.
    """
    queries = np.stack([crafted.x, np.zeros_like(crafted.x)])
    double = models.dtype.itemsize == 8
    logits = models.logits(queries if double else queries.astype(np.float32)).double()
    margin = logits[:, :, crafted.y] - logits[:, :, crafted.decoy]  # (K, 2)
    scores: np.ndarray = ((margin[:, 0] - margin[:, 1]) / crafted.value).numpy()
    if not np.all(np.isfinite(scores)):
        raise DataError("A model gave the crafted canary an infinite or NaN logit.")
    return scores


def _worst_case_scores(out: TrainerOutput, worst: WorstCaseSetup) -> np.ndarray:
    """The exact log-likelihood ratio of each released linear model (D′ against D)."""
    if out.models is None:
        raise ConfigError("canary = 'worst-case' scores the released models: return 'models'.")
    weight = out.models.weights[0].double().numpy()
    if weight.ndim != 3 or weight.shape[1] != 2:
        raise ConfigError(
            "canary = 'worst-case' scores binary linear models (a 2-class logistic stack)."
        )
    # A binary linear model w as a 2-class stack: logits (0, ⟨w, x⟩) up to a shift.
    w = weight[:, 1, :] - weight[:, 0, :]
    scores = erm.gamma_ball_log_ratio(w, worst.centre_out, worst.centre_in, worst.scale)
    if not np.all(np.isfinite(scores)):
        raise DataError("A released model gave an infinite or NaN likelihood ratio.")
    return scores


# ---------------------------------------------------------------------- what ran, seen


def _ran_arrays(out: TrainerOutput) -> dict[str, np.ndarray]:
    """What the trainer says it ran: its records' arrays, its claim, or both."""
    if out.records is not None:
        if any(not isinstance(r, DPSGDRecord) for r in out.records):
            raise ConfigError("Trainer records must be DPSGDRecord objects (DP training).")
        if out.claim is None:
            return DPSGDRecord.to_arrays(out.records)
        # A claim beside the records (the Opacus adapter's stated ε): both are held.
        return {**DPSGDRecord.to_arrays(out.records), **_ran_arrays(replace(out, records=None))}
    c = out.claim
    assert c is not None  # TrainerOutput guarantees records or claim
    nan = float("nan")
    return {
        "claim": np.array(
            [
                c.epsilon if c.epsilon is not None else nan,
                c.delta,
                c.mu if c.mu is not None else nan,
                c.rho if c.rho is not None else nan,
            ]
        )
    }


def _greybox_arrays(out: TrainerOutput) -> dict[str, np.ndarray]:
    """The trainer's grey-box observations as raw unit arrays (none when it gave none)."""
    return {} if out.observations is None else out.observations.to_arrays()


def _message_arrays(out: TrainerOutput) -> dict[str, np.ndarray]:
    """What the trainer's user code said, counted, as raw unit arrays (none when the
    trainer reports nothing): the run's warnings are read from them after the store."""
    return {} if out.messages is None else out.messages.to_arrays()
