"""The ``dpsgd`` kind: canary audits of DP training, many runs and one run.

Many runs: 2·``trials`` models are trained by the configured trainer on the same data,
the odd-numbered ones with the canary, the even-numbered ones without; each model gives
one score (black-box: minus the canary's loss on the final model; white-box: the sum over
steps of the log-likelihood ratio of each privatised update's projection on a Dirac
gradient canary, the Neyman–Pearson test of the Poisson mixture (``score =
"likelihood-ratio"``, :mod:`dpaudit.whitebox`), or the plain sum of the projections
(``score = "sum"``)). The scores of
the two arms are independent trials of H0 (canary out) and H1 (canary in), so the ε and
μ lower bounds of :mod:`dpaudit.bounds` are ``rigorous-multi-run``. They are held against
the upper bounds read from what the trainer says it RAN (its DPSGDRecords through the
accountant, or its Claim) by :mod:`dpaudit.upper_bounds`.

One run: m Dirac canaries on m distinct coordinates that no real example's gradient
touches, each included by an independent fair coin in ONE DP-SGD run; the auditor guesses
"in" for the r/2 largest scores (each canary's transcript scored as ``score`` says) and
"out" for the r/2 smallest, and the number of correct
guesses gives the one-run bound (Steinke, Nasr, Jagielski 2023, Thm. 3.1).

Units store raw outputs only (scores, arm flags, records or claims); every bound is
computed in :meth:`DpsgdKind.summarise`, after the store.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from dpaudit.dpsgd.canaries import INPUT_CANARY_KINDS
from dpaudit.errors import ConfigError, DataError, DpauditError
from dpaudit.kinds.base import (
    AuditKind,
    KindSummary,
    Outputs,
    RunContext,
    UnitPlan,
    dataset_digest,
    null_result_warning,
    stream_seed,
    unit_index,
)
from dpaudit.plugins import load_plugin, plugin_digest
from dpaudit.records import DPSGDRecord
from dpaudit.sections import Table, TrainingSection

if TYPE_CHECKING:
    # Bounds, results and accounting load scipy: imported where a summary is made, so
    # that validating an audit file stays fast.
    from dpaudit.bounds import EpsilonBound, MuBound
    from dpaudit.dpsgd.canaries import CraftedCanary
    from dpaudit.executors import UnitStats
    from dpaudit.greybox import GreyBoxTest
    from dpaudit.models import ModelSpec, ModelStack
    from dpaudit.results import Check, Comparison, TestSummary
    from dpaudit.trainers import TrainerOutput
    from dpaudit.training import TrainingSpec
    from dpaudit.upper_bounds import UpperBound

__all__ = [
    "BUILTIN_TRAINERS",
    "BlackBoxSection",
    "DpsgdKind",
    "DpsgdOutcome",
    "DpsgdSection",
    "DpsgdSpec",
    "dpsgd_unit",
    "run_dpsgd_from_section",
]

#: Distinguishes this kind's random streams from other kinds' under the same audit seed.
_STREAM_DPSGD = 2
#: The trainers of :data:`dpaudit.trainers.TRAINERS` (kept here so that validating an
#: audit file needs no torch; a test checks the two agree).
BUILTIN_TRAINERS = (
    "dpsgd",
    "dpgd",
    "output-perturbation",
    "multiparty",
    "multiparty-gradient",
    "plain",
)
_ENGINE_TRAINERS = ("dpsgd", "dpgd")
_ONE_RUN_UNIT = "dpsgd-one-run"


class DpsgdTrainingSection(TrainingSection):
    """``[dpsgd.training]``: the shared ``[training]`` schema; only ``epochs`` defaults to 1."""

    epochs: Annotated[int, Field(ge=1)] = 1


class OneRunSection(Table):
    """``[dpsgd.one_run]``: m canaries in one run, r guesses (top r/2 and bottom r/2)."""

    canaries: Annotated[int, Field(ge=2, le=100_000)] = 1000
    guesses: Annotated[int, Field(ge=2)] = 100

    @model_validator(mode="after")
    def _guesses_fit(self) -> OneRunSection:
        if self.guesses > self.canaries or self.guesses % 2:
            raise ValueError("'guesses' must be even and at most 'canaries'")
        return self


class BlackBoxSection(Table):
    """``[dpsgd.black_box]``: the black-box levers of Annamalai and De Cristofaro (2024).

    Attributes:
        initial: ``random`` (each model's own random initialisation) or ``worst-case``: one
            θ₀ shared by every model of both arms, all zeros except the decoy class's
            weight on the crafted canary's feature, far enough ahead that the canary stays
            misclassified and its clipped gradient is the same known vector in every step
            (:func:`dpaudit.dpsgd.canaries.worst_case_initial_parameters`).
        score: ``loss`` (minus the canary's loss on the final model) or ``logit-shift``:
            the final model's logit margin of the canary's label over its decoy class on
            the canary, minus the same margin on the canary with its feature set to 0,
            divided by the canary's value. Two queries of the final model; for a logistic
            regression it is exactly the canary's weight difference W[label, j] −
            W[decoy, j], which is Gaussian under full-batch DP-GD.

    References:
        Annamalai and De Cristofaro 2024, "Nearly Tight Black-Box Auditing of
        Differentially Private Machine Learning", arXiv 2405.14106v4, §3 (worst-case
        initial parameters; full-batch training; the final model's output on the target).
    """

    initial: Literal["random", "worst-case"] = "random"
    score: Literal["loss", "logit-shift"] = "loss"


class DpsgdSection(Table):
    """``[dpsgd]``: a canary audit of a training procedure.

    Attributes:
        dataset: ``"synthetic"`` (two Gaussian classes) or a name for
            :func:`dpaudit.data.load_dataset` (``"sklearn:digits"``, ``"csv:path"``, ...).
        label: the label column for csv/parquet (or ``"col>value"``).
        rows: keep this many rows (seeded choice); synthetic: how many to make.
        features: synthetic only: number of features.
        zero_features: all-zero feature columns appended; a Dirac canary sits on the
            first layer's weight of one of them, which no real gradient touches.
        normalize: scale every row (canary included) to norm ≤ 1 (needed by the ERM
            trainers, whose loss must be 1-Lipschitz).
        model: ``"logistic"`` or ``"mlp"`` (with ``hidden``).
        training: the shared training table (``epochs`` defaults to 1 here).
        trainer: a registered trainer (:data:`BUILTIN_TRAINERS`) or ``"pkg.module:function"``.
        options: trainer options (``epsilon``, ``lam``, ``parties``, or a user trainer's).
        canary: ``mislabeled`` | ``ood`` | ``clipbkd`` | ``crafted`` (input rows) | ``dirac``
            (gradient). ``crafted`` sits on an appended all-zero feature that only it uses.
            ``worst-case`` (ERM trainers): the replace-one pair of unit records that moves
            the exact minimiser most, scored by the exact log-likelihood ratio of the
            released model under the mechanism's noise density (:mod:`dpaudit.erm`).
        mechanism: the ERM mechanism whose density the ``worst-case`` score uses
            (``output-perturbation`` or ``multiparty``); default: the trainer's own.
        threat_model: ``black-box`` (final model's canary loss) or ``white-box`` (a
            score of every step's update projected on the Dirac canary).
        score: the white-box statistic: ``likelihood-ratio`` (default; the sum over
            steps of the log-likelihood ratio of (1 − q)N(0, σ²C²) + qN(C, σ²C²) to
            N(0, σ²C²), the Neyman–Pearson test for Poisson-subsampled steps, see
            :mod:`dpaudit.whitebox`) or ``sum`` (the plain sum of the projections,
            Nasr et al. 2023 §3). The one-run audit scores its canaries the same way.
        trials: models per arm (with and without the canary).
        threshold: ``split`` or ``bonferroni`` (see :mod:`dpaudit.bounds`).
        models_per_unit: models per work unit (default ``[execution] unit_size``, capped).
        one_run: optional one-run audit.
        black_box: optional black-box levers (worst-case θ₀, logit-shift score).
    """

    dataset: str = "synthetic"
    label: str | None = None
    rows: Annotated[int, Field(ge=2)] | None = None
    features: Annotated[int, Field(ge=1)] = 4
    zero_features: Annotated[int, Field(ge=0)] | None = None
    normalize: bool = False
    model: Literal["logistic", "mlp"] = "logistic"
    hidden: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [32])
    training: DpsgdTrainingSection = DpsgdTrainingSection()
    trainer: str = "dpsgd"
    options: dict[str, float | int | str] = Field(default_factory=dict)
    canary: Literal["mislabeled", "ood", "clipbkd", "crafted", "dirac", "worst-case"] = "dirac"
    mechanism: Literal["output-perturbation", "multiparty"] | None = None
    threat_model: Literal["black-box", "white-box"] = "white-box"
    score: Literal["likelihood-ratio", "sum"] = "likelihood-ratio"
    trials: Annotated[int, Field(ge=0, le=10_000_000)] = 1000
    threshold: Literal["split", "bonferroni"] = "split"
    models_per_unit: Annotated[int, Field(ge=1)] | None = None
    one_run: OneRunSection | None = None
    black_box: BlackBoxSection | None = None

    @property
    def full_batch(self) -> bool:
        return self.trainer == "dpgd" or self.training.full_batch

    @model_validator(mode="after")
    def _consistent(self) -> DpsgdSection:
        t = self.trainer
        if t not in BUILTIN_TRAINERS and ":" not in t:
            raise ValueError(
                f"unknown trainer {t!r}; allowed: {', '.join(BUILTIN_TRAINERS)} or "
                "'pkg.module:function'"
            )
        if (self.canary == "dirac") != (self.threat_model == "white-box"):
            raise ValueError(
                "a 'dirac' gradient canary is observed white-box and input canaries "
                f"({', '.join((*INPUT_CANARY_KINDS, 'worst-case'))}) black-box; "
                f"got canary={self.canary!r} "
                f"with threat_model={self.threat_model!r}"
            )
        if t in _ENGINE_TRAINERS and self.training.dp is None:
            raise ValueError(f"the {t!r} trainer needs [dpsgd.training.dp]")
        if self.threat_model == "white-box" and t in ("plain", "output-perturbation", "multiparty"):
            raise ValueError(f"the {t!r} trainer supports black-box audits only")
        if t in ("output-perturbation", "multiparty"):
            need = ["epsilon", "lam"] + (["parties"] if t == "multiparty" else [])
            missing = [k for k in need if k not in self.options]
            if missing:
                raise ValueError(f"the {t!r} trainer needs options {missing}")
        problem = self.training.target_mu_problem(full_batch=self.full_batch)
        if problem is not None:
            raise ValueError(problem)
        if self.trials == 0 and self.one_run is None:
            raise ValueError("set 'trials' > 0, or a [dpsgd.one_run] table, or both")
        if self.one_run is not None and (t != "dpsgd" or self.canary != "dirac"):
            raise ValueError("[dpsgd.one_run] audits the 'dpsgd' trainer with 'dirac' canaries")
        return self

    @model_validator(mode="after")
    def _black_box_levers(self) -> DpsgdSection:
        problem = _black_box_problem(self) or _worst_case_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self


def _black_box_problem(s: DpsgdSection) -> str | None:
    """Why the crafted canary or ``[dpsgd.black_box]`` cannot be used as configured."""
    if s.canary == "crafted":
        if s.zero_features == 0:
            return "the 'crafted' canary needs an all-zero feature: zero_features >= 1"
        if s.normalize:
            return "the 'crafted' canary is not normalised: set normalize = false"
    b = s.black_box
    if b is None:
        return None
    if s.threat_model != "black-box":
        return "[dpsgd.black_box] needs threat_model = 'black-box'"
    if (b.initial == "worst-case" or b.score == "logit-shift") and s.canary != "crafted":
        return (
            "initial = 'worst-case' and score = 'logit-shift' need canary = 'crafted'; "
            f"got canary={s.canary!r}"
        )
    if b.initial == "worst-case":
        if s.trainer not in _ENGINE_TRAINERS:
            return (
                "initial = 'worst-case' needs the 'dpsgd' or 'dpgd' trainer (the engine "
                f"starts every model from it); got trainer={s.trainer!r}"
            )
        if s.model != "logistic":
            return f"initial = 'worst-case' is made for model = 'logistic'; got {s.model!r}"
        if s.training.momentum != 0.0 or s.training.weight_decay != 0.0:
            return "initial = 'worst-case' needs momentum = 0 and weight_decay = 0"
    return None


_ERM_TRAINERS = ("output-perturbation", "multiparty")


def _erm_mechanism(s: DpsgdSection) -> str | None:
    """The ERM mechanism whose noise density scores a worst-case canary, if any."""
    if s.mechanism is not None:
        return s.mechanism
    return s.trainer if s.trainer in _ERM_TRAINERS else None


def _worst_case_problem(s: DpsgdSection) -> str | None:
    """Why ``canary = "worst-case"`` (or ``mechanism``) cannot be used as configured."""
    if s.canary != "worst-case":
        return "'mechanism' is used by canary = 'worst-case' only" if s.mechanism else None
    mechanism = _erm_mechanism(s)
    if mechanism is None:
        return (
            "canary = 'worst-case' needs an ERM trainer ('output-perturbation', "
            f"'multiparty') or 'mechanism' naming the density; got trainer={s.trainer!r}"
        )
    need = ["epsilon", "lam"] + (["parties"] if mechanism == "multiparty" else [])
    missing = [k for k in need if k not in s.options]
    if missing:
        return f"canary = 'worst-case' with mechanism {mechanism!r} needs options {missing}"
    if s.black_box is not None:
        return "[dpsgd.black_box] does not apply to canary = 'worst-case'"
    return None


class DpsgdSpec(Table):
    """What a dpsgd unit depends on: a pure, picklable function input."""

    section: DpsgdSection
    seed: int
    unit_size: int
    base_dir: str


# ---------------------------------------------------------------------------- the setup


@dataclass(frozen=True)
class _Setup:
    X: np.ndarray
    y: np.ndarray
    num_classes: int
    canary_row: int | None
    direction: np.ndarray | None
    model: ModelSpec
    training: TrainingSpec
    crafted: CraftedCanary | None = None
    replaced_row: int | None = None
    worst_case: WorstCaseSetup | None = None


def _stream_seed(seed: int, *purpose: int) -> int:
    return stream_seed(seed, _STREAM_DPSGD, *purpose)


def _load_data(s: DpsgdSection, seed: int, base_dir: str) -> tuple[np.ndarray, np.ndarray, int]:
    if s.dataset == "synthetic":
        rng = np.random.default_rng([_stream_seed(seed, 1)])
        n = s.rows or 200
        y = rng.integers(0, 2, n)
        centre = np.zeros(s.features)
        centre[0] = 1.0
        X = rng.standard_normal((n, s.features)) * 0.5 + np.where(y[:, None] == 1, centre, -centre)
        return X.astype(np.float32), y.astype(np.int64), 2
    from dpaudit.data import Standardizer, load_dataset

    data = load_dataset(s.dataset, label=s.label, base_dir=base_dir)
    X, y = data.X, data.y
    if s.rows is not None and s.rows < X.shape[0]:
        keep = np.sort(
            np.random.default_rng([_stream_seed(seed, 2)]).permutation(X.shape[0])[: s.rows]
        )
        X, y = X[keep], y[keep]
    X = Standardizer.fit(X).transform(X)
    return X.astype(np.float32), y.astype(np.int64), data.num_classes


@functools.lru_cache(maxsize=8)
def _setup_cached(section_json: str, seed: int, base_dir: str) -> _Setup:
    from dpaudit.dpsgd.canaries import (
        CraftedCanary,
        dirac_direction,
        input_canary,
        with_zero_feature,
    )
    from dpaudit.models import ModelSpec, layer_shapes
    from dpaudit.recipes import training_spec

    s = DpsgdSection.model_validate_json(section_json)
    X, y, num_classes = _load_data(s, seed, base_dir)
    canary_row = None
    crafted = None
    zero = s.zero_features
    if zero is None:
        zero = 1 if s.canary in ("dirac", "crafted") else 0
    if zero:
        # Appended before an input canary is made: ClipBKD then finds the all-zero column
        # as the direction of least variance, where no real example pulls the model.
        X = with_zero_feature(X, zero)
    if s.canary in INPUT_CANARY_KINDS:
        c = input_canary(s.canary, X, y, seed=_stream_seed(seed, 3), num_classes=num_classes)
        crafted = c if isinstance(c, CraftedCanary) else None
        X = np.concatenate([X, c.x[None, :].astype(np.float32)])
        y = np.concatenate([y, [c.y]]).astype(np.int64)
        canary_row = X.shape[0] - 1
    if s.normalize:
        X = (X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))).astype(np.float32)
    replaced_row, worst = None, None
    if s.canary == "worst-case":
        X, y, worst = _worst_case_rows(s, X, y, num_classes)
        canary_row, replaced_row = X.shape[0] - 1, X.shape[0] - 2
    model = ModelSpec(kind=s.model, hidden=tuple(s.hidden))
    shapes = layer_shapes(model, X.shape[1], num_classes)
    num_parameters = sum(o * i + o for o, i in shapes)
    direction = None
    if s.canary == "dirac":
        # First layer, unit 0, weight on the last feature: flat index 0·d + (d − 1). When
        # that feature is all-zero, every real gradient is 0 there (∂/∂W = δ·aᵀ, a = 0).
        direction = dirac_direction(num_parameters, X.shape[1] - 1)
    # The canary row is an extra record: q and T are those of the real rows.
    members = int(X.shape[0]) - (canary_row is not None) - (replaced_row is not None)
    training = training_spec(s.training, members=members, full_batch=s.full_batch)
    if crafted is not None and s.black_box is not None and s.black_box.initial == "worst-case":
        training = _worst_case_training(crafted, training, members, X.shape[1], num_classes)
    return _Setup(
        X, y, num_classes, canary_row, direction, model, training, crafted, replaced_row, worst
    )


@dataclass(frozen=True)
class WorstCaseSetup:
    """The worst-case replace-one pair of an ERM audit and its exact noise-free releases.

    Attributes:
        mechanism: ``output-perturbation`` or ``multiparty``.
        centre_out: the noise-free release on D (the replaced record r, no canary).
        centre_in: the same on D′ (the canary c instead of r).
        scale: s of the noise density ∝ exp(−‖b‖/s) the mechanism is calibrated with.
        bound: the ℓ2 sensitivity that calibration assumes (s = bound/ε).
        epsilon: the claimed ε (``options.epsilon``).
        pair: what the search found (records, labels, candidates).
    """

    mechanism: str
    centre_out: np.ndarray
    centre_in: np.ndarray
    scale: float
    bound: float
    epsilon: float
    pair: dict[str, Any]

    @property
    def realised(self) -> float:
        """‖θ*(D′) − θ*(D)‖ of the noise-free releases."""
        return float(np.linalg.norm(self.centre_in - self.centre_out))

    @property
    def realised_epsilon(self) -> float:
        """The largest privacy loss of the pair: ‖c₁ − c₀‖/s = ε·realised/bound."""
        return self.realised / self.scale


def _worst_case_rows(
    s: DpsgdSection, X: np.ndarray, y: np.ndarray, num_classes: int
) -> tuple[np.ndarray, np.ndarray, WorstCaseSetup]:
    """Append the worst-case replaced record r then the canary c; compute both releases.

    The relation is replace-one (Chaudhuri et al. 2011 calibrate for it, ‖x‖ ≤ 1): every
    model trains on the n₀ data rows plus r (without the canary) or plus c (with it).
    """
    from dpaudit import erm, theory

    if num_classes != 2:
        raise ConfigError(
            f"canary = 'worst-case' audits binary logistic regression: the dataset must have "
            f"2 classes. Got {num_classes} classes."
        )
    mechanism = _erm_mechanism(s)
    assert mechanism is not None  # the section checked it
    eps, lam = float(s.options["epsilon"]), float(s.options["lam"])
    n0 = X.shape[0]
    signs = np.where(y == 1, 1.0, -1.0)
    parties = int(float(s.options["parties"])) if mechanism == "multiparty" else 1
    if parties < 1:
        raise ConfigError(f"The 'parties' parameter must be an integer >= 1. Got {parties}.")
    owner = erm.multiparty_owners(n0 + 2, parties, (n0, n0 + 1))
    # Only party 0's model moves (r and c are its rows): search over party 0's rows.
    pair = erm.worst_case_pair(X, signs, lam=lam, rows=owner[:n0] == 0)
    Xa = np.concatenate([X, pair.replaced[None, :], pair.canary[None, :]]).astype(np.float32)
    ya = np.concatenate([y, [int(pair.replaced_sign > 0), int(pair.canary_sign > 0)]])
    sa = np.where(ya == 1, 1.0, -1.0)
    membership = np.ones((2, n0 + 2), dtype=bool)
    membership[0, n0 + 1] = False  # D: r, no canary
    membership[1, n0] = False  # D′: c instead of r
    if mechanism == "output-perturbation":
        centres = erm.regularised_logistic_optimum(Xa, sa, membership, lam=lam)
        bound = theory.output_perturbation_sensitivity(n0 + 1, lam)
    else:
        try:
            centres, smallest = erm.multiparty_average(
                Xa, sa, membership, lam=lam, owner=owner, parties=parties
            )
        except DpauditError as exc:
            raise ConfigError(str(exc)) from None
        bound = eps * theory.multiparty_laplace_scale(
            lipschitz=1.0, parties=parties, smallest_party_size=smallest, lam=lam, epsilon=eps
        )
    found = {
        "relation": "replace one record (Chaudhuri et al. 2011), ‖x‖ ≤ 1",
        "replaced": [float(v) for v in pair.replaced],
        "replaced_label": int(pair.replaced_sign > 0),
        "canary": [float(v) for v in pair.canary],
        "canary_label": int(pair.canary_sign > 0),
        "candidates": pair.candidates,
    }
    setup = WorstCaseSetup(mechanism, centres[0], centres[1], bound / eps, bound, eps, found)
    return Xa, ya.astype(np.int64), setup


def _worst_case_scores(out: TrainerOutput, worst: WorstCaseSetup) -> np.ndarray:
    """The exact log-likelihood ratio of each released linear model (D′ against D)."""
    from dpaudit import erm

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


def _worst_case_details(
    worst: WorstCaseSetup, *, trials: int, threshold: str, level: float, seed: int
) -> dict[str, Any]:
    """Realised sensitivity, the ε it allows, and the ideal bound at this budget.

    The ideal bound simulates the exact log-likelihood ratio of the pair (10⁶ draws per
    hypothesis of the mechanism's own noise, :func:`dpaudit.erm.gamma_ball_pair_llr`)
    and counts it at the audit's trials (half of them with the ``split`` threshold) and
    per-bound confidence level (:func:`dpaudit.ideal.ideal_lower_bound`).
    """
    from dpaudit import erm
    from dpaudit.ideal import ideal_lower_bound

    rng = np.random.default_rng([seed, _STREAM_DPSGD, 11])
    d, draws = worst.centre_out.size, 1_000_000
    neg, pos = (
        erm.gamma_ball_pair_llr(worst.realised, worst.scale, d, rng=rng, size=draws, arm=arm)
        for arm in (0, 1)
    )
    counted = trials // 2 if threshold == "split" else trials
    ideal = ideal_lower_bound(neg, pos, trials=max(counted, 1), confidence_level=level)
    return {
        "mechanism": worst.mechanism,
        **worst.pair,
        "realised_sensitivity": worst.realised,
        "calibrated_sensitivity": worst.bound,
        "noise_scale": worst.scale,
        "claimed_epsilon": worst.epsilon,
        "realised_epsilon": worst.realised_epsilon,
        "ideal_epsilon": ideal.value,
        "ideal": ideal.to_dict(),
        "ideal_draws": draws,
    }


def _worst_case_training(
    crafted: CraftedCanary, training: TrainingSpec, members: int, d: int, num_classes: int
) -> TrainingSpec:
    """``training`` started from the worst-case θ₀ of the crafted canary (shared by all)."""
    from dpaudit.dpsgd.canaries import CraftedRun, worst_case_initial_parameters
    from dpaudit.recipes import sampling_plan

    dp = training.dp
    assert dp is not None  # the engine trainers need [dpsgd.training.dp]
    # The arm with the canary has members + 1 rows: its T may be one epoch-step longer.
    _, steps = sampling_plan(
        members + 1,
        batch_size=training.batch_size,
        epochs=training.epochs,
        full_batch=training.full_batch,
    )
    run = CraftedRun(
        steps=int(steps),
        learning_rate=training.learning_rate,
        clipping_norm=dp.clipping_norm,
        noise_multiplier=dp.noise_multiplier,
        # the smallest divisor of either arm: n (full batch) or b = q·n (Poisson)
        divisor=float(members if training.full_batch else training.batch_size),
        batch_rows=members + 1,
    )
    theta = worst_case_initial_parameters(crafted, run, num_features=d, num_classes=num_classes)
    return replace(training, initial_parameters=tuple(theta.tolist()))


def _setup(spec: DpsgdSpec) -> _Setup:
    return _setup_cached(spec.section.model_dump_json(), spec.seed, spec.base_dir)


# ------------------------------------------------------------------------------- units


def _total_models(s: DpsgdSection) -> int:
    return 2 * s.trials


def _unit_names(spec: DpsgdSpec) -> tuple[str, ...]:
    n = math.ceil(_total_models(spec.section) / spec.unit_size)
    units = [f"dpsgd-{i:05d}" for i in range(n)]
    if spec.section.one_run is not None:
        units.append(_ONE_RUN_UNIT)
    return tuple(units)


def dpsgd_unit(spec: DpsgdSpec, unit: str) -> dict[str, np.ndarray]:
    """Train one unit of models and return their scores and what they ran."""
    from dpaudit.trainers import CanarySetup, TrainerSettings, coerce_output, get_trainer

    if unit == _ONE_RUN_UNIT:
        return _one_run_unit(spec)
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
    out = coerce_output(
        trainer(
            setup.X,
            setup.y,
            membership,
            seed=_stream_seed(spec.seed, 4),
            canary=canary,
            settings=settings,
        ),
        num_models=stop - start,
        name=s.trainer,
    )
    return {
        "included": included,
        "scores": _scores(out, setup, s.black_box)
        if setup.worst_case is None
        else _worst_case_scores(out, setup.worst_case),
        **_ran_arrays(out),
        **_greybox_arrays(out),
    }


def _scores(out: TrainerOutput, setup: _Setup, black_box: BlackBoxSection | None) -> np.ndarray:
    if out.scores is not None:
        return np.asarray(out.scores, dtype=np.float64).reshape(-1)
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


def _ran_arrays(out: TrainerOutput) -> dict[str, np.ndarray]:

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


# ---------------------------------------------------------------------- grey-box checks

#: Built-in trainers that run no DP-SGD: the grey-box checks do not apply to them.
_NOT_DPSGD = ("output-perturbation", "multiparty", "multiparty-gradient", "plain")
#: dpaudit's own DP-SGD trainers (the engine).
_ENGINE_DPSGD = ("dpsgd", "dpgd")


def _greybox_arrays(out: TrainerOutput) -> dict[str, np.ndarray]:
    """The trainer's grey-box observations as raw unit arrays (none when it gave none)."""
    return {} if out.observations is None else out.observations.to_arrays()


def _greybox_tests(
    s: DpsgdSection, many: list[Mapping[str, np.ndarray]]
) -> tuple[GreyBoxTest, ...]:
    """Every grey-box test of the stored units: evaluated when every unit carries
    observations, listed as not evaluated when a DP-SGD trainer gave none, absent for
    trainers that run no DP-SGD (and gave none)."""
    from dpaudit.greybox import GreyBoxObservations, greybox_tests

    if not many:
        return ()
    obs = GreyBoxObservations.from_arrays(many)
    if obs is None and s.trainer in _NOT_DPSGD:
        return ()
    tests = greybox_tests(obs)
    if s.trainer in _ENGINE_DPSGD:
        # dpaudit's own engine clips inside its fused step and does not report the
        # clipped norms (its clipped steps match Opacus in tests/test_training_opacus.py): the
        # unobserved clipping check would only add a warning to every audit.
        tests = tuple(t for t in tests if not (t.check == "greybox_clipping" and t.p_value is None))
    return tests


def _greybox_check(test: GreyBoxTest, alpha: float) -> Check:
    """A grey-box test as a gate check: p-value tests fail when p < α = (1 − c)/k, the
    verdict's per-comparison share; deterministic ones fail when p = 0 and take no share."""
    from dpaudit.results import Check

    what = f"{test.title}: {test.reason}"
    if test.p_value is None:
        return Check(test.check, None, alpha if test.chance else None, True, what, "not-evaluated")
    ok = test.passed(alpha)
    bug = "" if ok else ": the run did not do what was accounted"
    if not test.chance:
        return Check(test.check, test.p_value, None, ok, f"{what} (deterministic){bug}")
    sign = "≥" if ok else "<"
    return Check(
        test.check,
        test.p_value,
        alpha,
        ok,
        f"{test.title}: p = {test.p_value:.3g} {sign} {alpha:.3g} ({test.reason}){bug}",
    )


# ------------------------------------------------------------------------------ one run


def _one_run_unit(spec: DpsgdSpec) -> dict[str, np.ndarray]:
    from dpaudit.dpsgd.canaries import with_zero_feature
    from dpaudit.trainers import canary_observer
    from dpaudit.training import CoordinateCanaries, train_many

    s = spec.section
    one = s.one_run
    assert one is not None  # only listed when configured
    base = _setup(spec)
    m = one.canaries
    if s.model != "logistic":
        raise ConfigError("The one-run audit puts its canaries on a logistic regression.")
    # One all-zero feature per canary: canary j is class 0's weight on zero feature j.
    real = base.X[:, : base.X.shape[1] - (1 if base.direction is not None else 0)]
    X = with_zero_feature(real, m)
    d = X.shape[1]
    indices = np.arange(d - m, d)  # flat index c·d + j with c = 0
    included = np.random.default_rng([_stream_seed(spec.seed, 5)]).random(m) < 0.5
    n = X.shape[0]
    membership = np.ones((1, n), dtype=bool)
    # The engine adds each included canary as an extra record of norm C, sampled with
    # the model's own q, and sums the privatised gradient at each canary's coordinate;
    # the observer sees those coordinates every step and scores each canary's
    # transcript with the likelihood ratio (Steinke, Nasr, Jagielski 2023 allow any
    # score that is a function of what the auditor sees).
    observer = canary_observer(membership, base.training, columns=indices, score=s.score)
    result = train_many(
        X,
        base.y,
        membership,
        model=base.model,
        training=base.training,
        seed=_stream_seed(spec.seed, 7),
        num_classes=base.num_classes,
        coordinate_canaries=CoordinateCanaries(indices, included, seed=_stream_seed(spec.seed, 6)),
        step_observer=observer,
    )
    r = result.records[0]
    assert r is not None
    assert result.canary_sums is not None  # asked for with coordinate_canaries
    # "sum": the engine's own running sums (the observer's are the same numbers).
    scores = result.canary_sums if s.score == "sum" else observer.scores(s.score)[0]
    return {
        "one_run_scores": scores,
        "one_run_included": included,
        **DPSGDRecord.to_arrays([r]),
    }


# ----------------------------------------------------------------------- upper bounds


def _claim_upper(parts: list[Mapping[str, np.ndarray]], delta: float) -> UpperBound:
    from dpaudit.mechanisms.noise import Claim
    from dpaudit.upper_bounds import from_claim

    # (ε, δ, μ, ρ) per unit; units stored before ρ claims existed hold the first three.
    claims = np.concatenate(
        [
            np.pad(
                p["claim"].reshape(1, -1),
                ((0, 0), (0, 4 - p["claim"].size)),
                constant_values=np.nan,
            )
            for p in parts
        ]
    )

    def largest(column: np.ndarray) -> float | None:
        # The claim must cover every model: keep the weakest (largest) one stated.
        finite_or_inf = column[~np.isnan(column)]
        return float(finite_or_inf.max()) if finite_or_inf.size else None

    claim = Claim(
        epsilon=largest(claims[:, 0]),
        delta=float(claims[:, 1].max()),
        mu=largest(claims[:, 2]),
        rho=largest(claims[:, 3]),
    )
    return from_claim(claim, delta)


def _many_run_upper(many: list[Mapping[str, np.ndarray]], delta: float) -> UpperBound | None:
    from dpaudit.upper_bounds import from_records

    if not many:
        return None
    if "claim" in many[0] and "noise_multiplier" in many[0]:
        return _tighter(
            from_records(DPSGDRecord.from_arrays(many), delta), _claim_upper(many, delta)
        )
    if "claim" in many[0]:
        return _claim_upper(many, delta)
    return from_records(DPSGDRecord.from_arrays(many), delta)


def _tighter(accountant: UpperBound, claim: UpperBound) -> UpperBound:
    """The accountant's bounds for what ran and a claim, both held: the smaller decides.

    Each must hold on its own, so a lower bound above either proves one of them false:
    comparing with the smaller of the two is the same test as comparing with both, at no
    extra share of the verdict's budget. A claim at δ' ≤ δ also holds at δ ((ε, δ')-DP
    implies (ε, δ)-DP); a claim at a larger δ' says nothing at δ and is only reported.
    """
    from dpaudit.upper_bounds import UpperBound

    use_claim = claim.epsilon_delta <= accountant.epsilon_delta
    eps = claim if use_claim and claim.epsilon < accountant.epsilon else accountant
    mu = claim if claim.mu is not None and claim.mu < (accountant.mu or math.inf) else accountant
    source = eps.source if mu is eps or mu.mu is None else f"{eps.source} (ε), {mu.source} (μ)"
    return UpperBound(
        eps.epsilon,
        accountant.epsilon_delta,
        mu.mu,
        source,
        {**accountant.detail, **claim.detail, "accountant_epsilon": accountant.epsilon},
        mu.mu_tail,
    )


# ----------------------------------------------------------------------------- summary


def _many_run_bounds(
    s: DpsgdSection, upper: UpperBound, neg: np.ndarray, pos: np.ndarray, *, level: float, seed: int
) -> tuple[EpsilonBound, MuBound]:
    """The ε and μ lower bounds of the two arms, each at the verdict's per-bound level."""
    from dpaudit.bounds import epsilon_lower_bound, mu_bound_against_bracket, mu_lower_bound

    eps_lb = epsilon_lower_bound(
        neg,
        pos,
        delta=upper.epsilon_delta,
        confidence_level=level,
        threshold=s.threshold,
        seed=seed,
    )
    mu_lb = mu_lower_bound(neg, pos, confidence_level=level, threshold=s.threshold, seed=seed)
    return eps_lb, mu_bound_against_bracket(mu_lb, upper.mu_tail)


def _many_run_test(
    s: DpsgdSection,
    upper: UpperBound,
    neg: np.ndarray,
    pos: np.ndarray,
    mu_lb: MuBound,
    c: float,
    base_dir: Path | str = ".",
) -> TestSummary:
    from dpaudit.results import score_summary, theory_curves

    label = _label(s)
    curves = theory_curves(
        epsilon=upper.epsilon, delta=upper.epsilon_delta, mu=upper.mu, label=f"{upper.source}: "
    ) + theory_curves(mu=mu_lb.value if mu_lb.value > 0 else None, label="lower bound: ")
    return score_summary(
        "dpsgd", label, neg, pos, confidence_level=c, hypotheses=("canary out", "canary in")
    ).with_details(
        theory_curves=curves,
        dpsgd={
            "trainer": s.trainer,
            **_trainer_libraries(s.trainer, base_dir),
            "canary": s.canary,
            "threat_model": s.threat_model,
            "trials_per_arm": int(neg.size),
            "upper_bound": {
                "epsilon": upper.epsilon,
                "delta": upper.epsilon_delta,
                "mu": upper.mu,
                "source": upper.source,
                **upper.detail,
            },
        },
    )


def _trainer_libraries(trainer: str, base_dir: Path | str) -> dict[str, dict[str, str]]:
    """The training library a user trainer declares (its ``library_versions``, e.g. the
    Opacus adapter's ``{"opacus": "1.6.0"}``): provenance, and part of the units' key."""
    if ":" not in trainer:
        return {}
    libraries = getattr(
        load_plugin(trainer, base_dir=base_dir, what="trainer"), "library_versions", None
    )
    return {"trainer_libraries": dict(libraries)} if libraries else {}


def _label(s: DpsgdSection) -> str:
    return f"{s.canary} canary, {s.threat_model}, trainer {s.trainer}"


def _one_run_comparison(
    one: Mapping[str, np.ndarray], s: DpsgdSection, *, delta: float, level: float
) -> Comparison:
    from dpaudit.bounds import one_run_epsilon_lower_bound, one_run_guesses
    from dpaudit.results import Comparison
    from dpaudit.upper_bounds import from_records

    assert s.one_run is not None
    r, v = one_run_guesses(
        one["one_run_scores"],
        one["one_run_included"].astype(bool),
        guesses_per_side=s.one_run.guesses // 2,
    )
    bound = one_run_epsilon_lower_bound(
        canaries=s.one_run.canaries, guesses=r, correct=v, delta=delta, confidence_level=level
    )
    upper = from_records(DPSGDRecord.from_arrays([one]), delta, with_mu=False)
    label = f"one run, {s.one_run.canaries} dirac canaries, trainer {s.trainer}"
    return Comparison(
        test=label,
        parameter="epsilon",
        lower=bound,
        upper=upper.epsilon,
        upper_source="accountant ε",
        in_verdict=True,
    )


def _unit_size(s: DpsgdSection, default: int) -> int:
    # The execution default (25 000, sized for scalar mechanism samples) is too coarse for
    # models: cap at 2 000 so a killed run loses little and workers share the load.
    return s.models_per_unit or max(1, min(default, 2000))


def _split(
    outputs: Outputs,
) -> tuple[list[Mapping[str, np.ndarray]], Mapping[str, np.ndarray] | None]:
    many = [outputs[u] for u in sorted(outputs) if u != _ONE_RUN_UNIT]
    return many, outputs.get(_ONE_RUN_UNIT)


class DpsgdKind(AuditKind[DpsgdSection]):
    name = "dpsgd"
    section = DpsgdSection
    description = "canary audits of DP training (DP-SGD, DP-GD, ERM trainers, yours)"

    def check_runnable(self, section: DpsgdSection, context: RunContext) -> None:
        if ":" in section.trainer:
            from dpaudit.trainers import get_trainer

            get_trainer(section.trainer, base_dir=str(context.base_dir))

    def plan(self, section: DpsgdSection, context: RunContext) -> UnitPlan:
        spec = DpsgdSpec(
            section=section,
            seed=context.seed,
            unit_size=_unit_size(section, context.unit_size),
            base_dir=str(context.base_dir),
        )
        return UnitPlan(
            fn=dpsgd_unit,
            spec=spec,
            units=_unit_names(spec),
            key_data={
                **spec.model_dump(mode="json", exclude={"base_dir"}),
                "data_file": dataset_digest(section.dataset, context.base_dir),
                "trainer_file": plugin_digest(section.trainer, base_dir=context.base_dir)
                if ":" in section.trainer
                else None,
                **_trainer_libraries(section.trainer, context.base_dir),
            },
            description="training canary models",
        )

    def comparisons(self, section: DpsgdSection, context: RunContext, outputs: Outputs) -> int:
        many, one = _split(outputs)
        upper = _many_run_upper(many, context.delta)
        k = int(one is not None)  # held against the one run's own accountant ε
        # Each grey-box p-value test is one comparison of the budget (it fails when
        # p < (1 − c)/k); deterministic checks cannot fail by chance and take no share.
        k += sum(t.chance and t.evaluated for t in _greybox_tests(section, many))
        if upper is not None:
            # An infinite claim (the plain trainer's ε = ∞) can never be violated: it is
            # reported but kept out of the verdict, so it takes no share of the budget.
            k += int(upper.epsilon_finite) + int(upper.mu_finite)
        return k

    def summarise(
        self, section: DpsgdSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        from dpaudit.results import Comparison, gdp_implied_comparison

        s, delta = section, context.delta
        many, one = _split(outputs)
        upper = _many_run_upper(many, delta)
        comparisons: list[Comparison] = []
        tests: list[TestSummary] = []
        warnings: list[str] = []
        if upper is not None:
            scores = np.concatenate([p["scores"] for p in many])
            inc = np.concatenate([p["included"] for p in many]).astype(bool)
            neg, pos = scores[~inc], scores[inc]
            eps_lb, mu_lb = _many_run_bounds(s, upper, neg, pos, level=level, seed=context.seed)
            label = _label(s)
            comparisons.append(
                Comparison(
                    test=label,
                    parameter="epsilon",
                    lower=eps_lb,
                    upper=upper.epsilon,
                    upper_source=f"{upper.source} ε",
                    in_verdict=upper.epsilon_finite,
                )
            )
            mu_source = f"{upper.source} μ" if upper.mu is not None else "none"
            comparisons.append(
                Comparison(
                    test=label,
                    parameter="mu",
                    lower=mu_lb,
                    upper=upper.mu,
                    upper_source=mu_source,
                    in_verdict=upper.mu_finite,
                )
            )
            if mu_lb.value > 0 and upper.mu is not None and upper.mu_finite:
                # Informational: the ε that μ_LB implies IF the trade-off curve is Gaussian
                # ("assumes-gdp"); the white-box Dirac score of DP-GD is exactly Gaussian.
                comparisons.append(
                    gdp_implied_comparison(label, mu_lb, upper.mu, delta=delta, source=upper.source)
                )
            test = _many_run_test(
                s, upper, neg, pos, mu_lb, context.confidence_level, context.base_dir
            )
            if s.canary == "worst-case":
                test = test.with_details(
                    worst_case=_summary_worst_case(s, context, trials=int(neg.size), level=level)
                )
            tests.append(test)
            if eps_lb.value == 0.0 and mu_lb.value == 0.0:
                warnings.append(null_result_warning(label, f"{neg.size} models per arm", eps_lb))
        if one is not None:
            comparisons.append(_one_run_comparison(one, s, delta=delta, level=level))
        checks = tuple(_greybox_check(t, 1.0 - level) for t in _greybox_tests(s, many))
        return KindSummary(
            tuple(tests), tuple(comparisons), (), tuple(warnings), _data_hash(s), checks=checks
        )


def _summary_worst_case(
    s: DpsgdSection, context: RunContext, *, trials: int, level: float
) -> dict[str, Any]:
    """The worst-case pair's realised sensitivity, realised ε and ideal bound (details)."""
    spec = DpsgdSpec(section=s, seed=context.seed, unit_size=1, base_dir=str(context.base_dir))
    worst = _setup(spec).worst_case
    assert worst is not None  # canary = "worst-case" builds it
    return _worst_case_details(
        worst, trials=trials, threshold=s.threshold, level=level, seed=context.seed
    )


def _data_hash(s: DpsgdSection) -> str:
    keys = ("dataset", "label", "rows", "features", "zero_features", "normalize", "canary")
    return hashlib.sha256(
        json.dumps({k: getattr(s, k) for k in keys}, sort_keys=True).encode()
    ).hexdigest()


KIND = DpsgdKind()


# ---------------------------------------------------------------- without an audit file


@dataclass(frozen=True)
class DpsgdOutcome:
    """What :func:`run_dpsgd_from_section` found."""

    tests: tuple[TestSummary, ...]
    comparisons: tuple[Comparison, ...]
    warnings: tuple[str, ...]
    units: UnitStats
    checks: tuple[Check, ...] = ()


def run_dpsgd_from_section(
    section: DpsgdSection | dict[str, Any],
    *,
    seed: int,
    confidence_level: float = 0.95,
    delta: float = 1e-5,
    run_dir: str | Path,
    workers: int = 1,
    base_dir: str | Path = ".",
    progress: Any = None,
) -> DpsgdOutcome:
    """Run a ``[dpsgd]`` audit without the rest of an audit file (tests, notebooks).

    The same steps as :func:`dpaudit.audit.run_audit` for one kind: plan, run the missing
    units into ``run_dir``, count the in-verdict comparisons, summarise with one budget.

    Args:
        section: the ``[dpsgd]`` table (validated here if a dict).
        seed: the audit seed.
        confidence_level: c; every in-verdict bound is at 1 − (1 − c)/k.
        delta: δ of the ε comparisons.
        run_dir: where the units are stored (a run resumes from them).
        workers: worker processes.
        base_dir: folder that user plug-ins and csv paths resolve against.
        progress: optional ``(units just finished)`` callback.

    Raises:
        ConfigError: an invalid section (one line per pydantic's first error).
    """
    from dpaudit.executors import run_units
    from dpaudit.kinds.base import VerdictBudget
    from dpaudit.store import RunStore

    if not isinstance(section, DpsgdSection):
        try:
            section = DpsgdSection.model_validate(section)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in err["loc"]) or "dpsgd"
            raise ConfigError(
                f"[dpsgd] {where}: {err['msg'].removeprefix('Value error, ')}"
            ) from None
    context = RunContext(
        seed=int(seed),
        confidence_level=confidence_level,
        delta=float(delta),
        base_dir=Path(base_dir).resolve(),
    )
    plan = KIND.plan(section, context)
    store = RunStore(Path(run_dir), plan.key(KIND.name))
    stats = run_units(plan.fn, plan.spec, plan.units, store, workers=workers, progress=progress)
    outputs = {u: store.load(u) for u in plan.units}
    budget = VerdictBudget(confidence_level, KIND.comparisons(section, context, outputs))
    summary = KIND.summarise(section, context, outputs, level=budget.level)
    return DpsgdOutcome(summary.tests, summary.comparisons, summary.warnings, stats, summary.checks)
