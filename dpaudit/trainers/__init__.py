"""The registry of trainers a canary audit can audit, and the user-trainer protocol.

A trainer trains K models, model ``k`` on the rows ``i`` of ``X`` with
``membership[k, i]``, and returns what the audit needs: the canary's score under every
model (or the models, from which the audit computes black-box scores) and **what it
actually ran** — a :class:`~dpaudit.records.DPSGDRecord` per model, which the
accountant turns into ε(δ) and μ, or a :class:`~dpaudit.accounting.upper_bounds.Claim` (ε, δ, μ) for
procedures without a DP-SGD accountant. The upper bound of the audit is read from that
output, never from the configuration.

Built-ins (:data:`TRAINERS`):

* ``dpsgd``: the engine's Poisson-subsampled DP-SGD (Abadi et al. 2016, Alg. 1).
* ``dpgd``: the engine's full-batch DP-GD (q = 1, every member in every step).
* ``output-perturbation``: λ-regularised logistic regression trained to its optimum,
  then noise b with density ∝ exp(−nλε‖b‖/2) (Chaudhuri, Monteleoni, Sarwate 2011,
  Alg. 1); claims ε-DP.
* ``multiparty``: m parties' λ-regularised models averaged, then noise of scale
  2G/(m·n₍₁₎·λ·ε) (Jayaraman et al. 2018, model aggregation); claims ε-DP.
* ``plain``: the engine without clipping or noise; claims nothing.
* ``gradient-laplace``: full-batch GD with Laplace noise of scale Δ1·T/ε on the
  clipped-gradient sum, Δ1 = m·√d·C; claims ε-DP by basic composition.

User trainers are given as ``"pkg.module:function"`` and follow this protocol::

    def my_trainer(X, y, membership, *, seed, canary, settings) -> TrainerOutput | dict

    X           (n, d) float32 features; with an input-space canary its row is X[canary.row]
    y           (n,) int64 labels
    membership  (K, n) bool: model k trains on rows i with membership[k, i]
                (the canary's column is ``canary.included``)
    seed        int: the base seed; a unit of models is ``settings.model_offset`` onwards,
                and model k must draw its randomness from (seed, model_offset + k) only
    canary      CanarySetup: kind, threat_model, row, direction (unit), included (K,)
    settings    TrainerSettings: model, training (TrainingSpec), num_classes, options

The white-box canary is one more example whose gradient is a large multiple of
``canary.direction``: add it BEFORE your clipping, clip it as you clip every example, in
each step its own Poisson coin (rate q) comes up, and score the privatised gradient's
projection on ``direction``. Unless the audit file says otherwise, a user trainer gets a
direction with a part in every parameter tensor (layer weight and bias), so that clipping
tensor by tensor with noise calibrated for one tensor shows up; a trainer that clips the
whole per-example gradient to one norm by construction may declare it, ``fn.clipping =
"flat"``, and gets the one-coordinate Dirac canary, exactly canary + noise.

returning a :class:`TrainerOutput` (or a dict with the same keys): ``scores`` (K,)
(larger = "canary in") or ``models`` (a ModelStack, scored black-box by the audit), and
``records`` (one DPSGDRecord per model) or ``claim`` (a Claim, or a dict
``{"epsilon": .., "delta": .., "mu": ..}``), and optionally ``observations`` (a
:class:`~dpaudit.bounds.greybox.GreyBoxObservations` of what ran step by step: batch sizes,
clipped norms, the noise on a coordinate no example touches, steps), which the audit
turns into grey-box gate checks.

White-box scores. A trainer that returns ``scores`` computes them itself; any function
of a model's transcript gives a valid audit, but its power depends on the choice.
``canary.score`` says which statistic the audit file asks for:

* ``"sum"``: Σ_t ⟨g_t, direction⟩, the plain sum of the privatised gradients g_t along
  the canary (Nasr et al. 2023, §3).
* ``"likelihood-ratio"`` (the default): for every step t, rescale the projection to
  the units of the noisy SUM, x_t = ⟨g_t, direction⟩ · (the divisor the trainer applied
  to the clipped sum + noise: the expected batch size q·n for Opacus-style DP-SGD, n
  for full-batch DP-GD, 1 if it does not divide), so that x_t ~ N(0, σ²C²) without
  the canary and (1 − q)·N(0, σ²C²) + q·N(C, σ²C²) with it, and return
  Σ_t ``mixture_log_likelihood_ratio(x_t, sampling_rate=q, noise_multiplier=σ,
  clipping_norm=C)`` (re-exported here from :mod:`dpaudit.theory.whitebox`). By the
  Neyman–Pearson lemma this is the most powerful test of "canary out" against
  "canary in" when the canary's coordinate is touched by no real gradient; for full
  batch (q = 1) it is an increasing affine map of the plain sum. Use the q, σ and C
  your training actually ran, and skip the steps a model did not take.

The built-in engine trainers do this with the sampling plan of the spec they run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.errors import ConfigError
from dpaudit.plugins import load_plugin
from dpaudit.theory.whitebox import mixture_log_likelihood_ratio
from dpaudit.trainers.engine import dpgd_trainer, dpsgd_trainer, plain_trainer
from dpaudit.trainers.observers import canary_observer
from dpaudit.trainers.perturbation import (
    gradient_laplace_trainer,
    intermediate_claim,
    multiparty_gradient_trainer,
    multiparty_trainer,
    output_perturbation_models,
    output_perturbation_trainer,
    regularised_logistic_optimum,
)
from dpaudit.trainers.protocol import (
    CanarySetup,
    CapturedOutput,
    Trainer,
    TrainerMessages,
    TrainerOutput,
    TrainerSettings,
    coerce_output,
)

__all__ = [
    "TRAINERS",
    "CanarySetup",
    "CapturedOutput",
    "Trainer",
    "TrainerMessages",
    "TrainerOutput",
    "TrainerSettings",
    "canary_observer",
    "coerce_output",
    "dpgd_trainer",
    "dpsgd_trainer",
    "get_trainer",
    "gradient_laplace_trainer",
    "intermediate_claim",
    "mixture_log_likelihood_ratio",
    "multiparty_gradient_trainer",
    "multiparty_trainer",
    "output_perturbation_models",
    "output_perturbation_trainer",
    "plain_trainer",
    "regularised_logistic_optimum",
]

#: The built-in trainers by the name ``[dpsgd] trainer`` gives them.
TRAINERS: dict[str, Trainer] = {
    "dpsgd": dpsgd_trainer,
    "dpgd": dpgd_trainer,
    "output-perturbation": output_perturbation_trainer,
    "multiparty": multiparty_trainer,
    "multiparty-gradient": multiparty_gradient_trainer,
    "plain": plain_trainer,
    "gradient-laplace": gradient_laplace_trainer,
}


def get_trainer(name: str, *, base_dir: str | Path | None = None) -> Trainer:
    """The trainer registered as ``name``, or a user trainer ``"pkg.module:function"``.

    Raises:
        ConfigError: An unknown name (the message lists the valid ones) or a user trainer
            that cannot be imported.
    """
    if name in TRAINERS:
        return TRAINERS[name]
    if isinstance(name, str) and ":" in name:
        fn = load_plugin(name, base_dir=base_dir, what="trainer")
        return _user_trainer(fn, name)
    valid = ", ".join(repr(t) for t in TRAINERS)
    raise ConfigError(
        f"The 'trainer' parameter must be one of {{{valid}}} or 'pkg.module:function'. "
        f"Got {name!r} instead."
    )


def _user_trainer(fn: Callable[..., Any], name: str) -> Trainer:
    def run(
        X: np.ndarray,
        y: np.ndarray,
        membership: np.ndarray,
        *,
        seed: int,
        canary: CanarySetup,
        settings: TrainerSettings,
    ) -> TrainerOutput:
        out = fn(X, y, membership, seed=seed, canary=canary, settings=settings)
        return coerce_output(out, num_models=membership.shape[0], name=name)

    return run
