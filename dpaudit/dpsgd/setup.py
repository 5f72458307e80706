"""The data, model and canary of a dpsgd audit, made once per process and shared by units.

:func:`_setup` turns a :class:`~dpaudit.dpsgd.schema.DpsgdSpec` into the arrays every
model trains on (the data, the canary row or Dirac direction, the replaced record of a
worst-case pair), the model and the engine's training spec. It is a pure function of the
spec, cached, so that every unit of a run (in any process) trains on the same rows.

The worst-case set-up (:class:`WorstCaseSetup`) is the replace-one pair of an ERM audit
with the exact noise-free releases on both sides (:mod:`dpaudit.theory.erm`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dpaudit import theory
from dpaudit.data import Standardizer, load_dataset
from dpaudit.dpsgd.canaries import (
    GRADIENT_CANARY_KINDS,
    INPUT_CANARY_KINDS,
    CraftedCanary,
    CraftedRun,
    dirac_direction,
    every_group_direction,
    input_canary,
    with_zero_feature,
    worst_case_initial_parameters,
)
from dpaudit.dpsgd.schema import ENGINE_TRAINERS, DpsgdSection, DpsgdSpec, erm_mechanism
from dpaudit.errors import ConfigError, DpauditError, check_integer
from dpaudit.kinds.base import stream_seed
from dpaudit.models import ModelSpec, layer_shapes
from dpaudit.planning.ideal import ideal_lower_bound
from dpaudit.plugins import load_plugin
from dpaudit.recipes import sampling_plan, training_spec
from dpaudit.theory import erm
from dpaudit.training import TrainingSpec

__all__ = [
    "CanaryDirection",
    "WorstCaseSetup",
    "purpose_seed",
    "resolve_canary_direction",
    "worst_case_details",
]

#: Distinguishes this kind's random streams from other kinds' under the same audit seed.
_STREAM_DPSGD = 2


def purpose_seed(seed: int, *purpose: int) -> int:
    """The seed of one purpose of the dpsgd kind's random streams under the audit seed."""
    return stream_seed(seed, _STREAM_DPSGD, *purpose)


@dataclass(frozen=True)
class CanaryDirection:
    """Where a white-box gradient canary points, and why (echoed into ``results.json``).

    Attributes:
        chosen: ``"every-group"`` or ``"one-coordinate"``.
        asked: what ``[dpsgd] canary_direction`` said (``"auto"`` or the same).
        reason: one sentence on why this direction runs.
    """

    chosen: str
    asked: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"chosen": self.chosen, "asked": self.asked, "reason": self.reason}


def _declares_flat_clipping(trainer: str, base_dir: str) -> bool:
    """Whether a user trainer declares that it clips the whole per-example gradient to one
    norm: ``clipping = "flat"`` on the function (an Opacus adapter trainer declares it: the
    adapter refuses per-layer ``max_grad_norm`` lists)."""
    fn = load_plugin(trainer, base_dir=base_dir, what="trainer")
    return getattr(fn, "clipping", None) == "flat"


def resolve_canary_direction(s: DpsgdSection, base_dir: str) -> CanaryDirection | None:
    """The direction the white-box ``dirac`` canary takes (``None`` for other canaries).

    ``auto`` takes the strongest valid choice for the trainer: the one-coordinate Dirac
    canary when the trainer clips the whole per-example gradient to one norm C by
    construction (dpaudit's built-in trainers, a user trainer declaring ``clipping =
    "flat"``, the Opacus adapter), where the privatised gradient on it is exactly canary +
    noise; for any other user trainer, whose clipping dpaudit cannot see, a canary with a
    part in every parameter tensor, which per-tensor clipping with noise made for one
    tensor cannot hide from (:func:`~dpaudit.dpsgd.canaries.every_group_direction`).
    """
    if s.canary != "dirac":
        return None
    if s.canary_direction != "auto":
        return CanaryDirection(s.canary_direction, s.canary_direction, "set in [dpsgd]")
    if ":" not in s.trainer:
        engine = "the engine clips" if s.trainer in ENGINE_TRAINERS else "the trainer clips"
        return CanaryDirection(
            "one-coordinate",
            "auto",
            f"built-in trainer {s.trainer!r}: {engine} the whole per-example gradient to one "
            "norm, so one untouched coordinate is exactly canary + noise",
        )
    if _declares_flat_clipping(s.trainer, base_dir):
        return CanaryDirection(
            "one-coordinate",
            "auto",
            "the trainer declares flat clipping (one norm for the whole per-example "
            "gradient), so one untouched coordinate is exactly canary + noise",
        )
    return CanaryDirection(
        "every-group",
        "auto",
        "a user trainer's clipping is not visible to dpaudit: a part in every parameter "
        "tensor catches per-tensor clipping with noise calibrated for one tensor",
    )


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
    canary_direction: CanaryDirection | None = None


def _setup(spec: DpsgdSpec) -> _Setup:
    return _setup_cached(spec.section.model_dump_json(), spec.seed, spec.base_dir)


def _load_data(s: DpsgdSection, seed: int, base_dir: str) -> tuple[np.ndarray, np.ndarray, int]:
    if s.dataset == "synthetic":
        rng = np.random.default_rng([purpose_seed(seed, 1)])
        n = s.rows or 200
        y = rng.integers(0, 2, n)
        centre = np.zeros(s.features)
        centre[0] = 1.0
        X = rng.standard_normal((n, s.features)) * 0.5 + np.where(y[:, None] == 1, centre, -centre)
        return X.astype(np.float32), y.astype(np.int64), 2
    data = load_dataset(s.dataset, label=s.label, base_dir=base_dir)
    X, y = data.X, data.y
    if s.rows is not None and s.rows < X.shape[0]:
        keep = np.sort(
            np.random.default_rng([purpose_seed(seed, 2)]).permutation(X.shape[0])[: s.rows]
        )
        X, y = X[keep], y[keep]
    X = Standardizer.fit(X).transform(X)
    return X.astype(np.float32), y.astype(np.int64), data.num_classes


def preflight_rows(s: DpsgdSection, seed: int, base_dir: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows (features, labels) a trainer receives in this audit, for its preflight."""
    setup = _setup_cached(s.model_dump_json(), seed, base_dir)
    return setup.X, setup.y


@functools.lru_cache(maxsize=8)
def _setup_cached(section_json: str, seed: int, base_dir: str) -> _Setup:
    s = DpsgdSection.model_validate_json(section_json)
    X, y, num_classes = _load_data(s, seed, base_dir)
    canary_row = None
    crafted = None
    zero = s.zero_features
    if zero is None:
        zero = 1 if s.canary in ("dirac", "crafted", "gradient") else 0
    if zero:
        # Appended before an input canary is made: ClipBKD then finds the all-zero column
        # as the direction of least variance, where no real example pulls the model.
        X = with_zero_feature(X, zero)
    if s.canary in INPUT_CANARY_KINDS:
        c = input_canary(s.canary, X, y, seed=purpose_seed(seed, 3), num_classes=num_classes)
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
    pointing = resolve_canary_direction(s, base_dir)
    if pointing is not None and pointing.chosen == "every-group":
        direction = every_group_direction(shapes)
    elif s.canary in GRADIENT_CANARY_KINDS:
        # First layer, unit 0, weight on the last feature: flat index 0·d + (d − 1). When
        # that feature is all-zero, every real gradient is 0 there (∂/∂W = δ·aᵀ, a = 0).
        direction = dirac_direction(num_parameters, X.shape[1] - 1)
    # The canary row is an extra record: q and T are those of the real rows.
    members = int(X.shape[0]) - (canary_row is not None) - (replaced_row is not None)
    training = training_spec(s.training, members=members, full_batch=s.full_batch)
    if crafted is not None and s.black_box is not None and s.black_box.initial == "worst-case":
        training = _worst_case_training(crafted, training, members, X.shape[1], num_classes)
    if s.canary == "gradient":
        # One θ₀ for every model, 0 on the canary's coordinate: the final parameter there is
        # then the plain sum of the steps (canaries.gradient_canary_scores); any fixed θ₀
        # keeps DP-SGD's guarantee, so the auditor may choose it. A logistic model starts at
        # 0; an MLP at 0 would never break the symmetry of its hidden units, so it starts
        # from one draw of torch's default init, shared by every model.
        theta0 = (
            np.zeros(num_parameters)
            if s.model == "logistic"
            else shared_default_init(shapes, seed=purpose_seed(seed, 8))
        )
        assert direction is not None  # the gradient canary is a Dirac direction
        theta0[int(np.argmax(direction))] = 0.0
        training = replace(training, initial_parameters=tuple(theta0.tolist()))
    return _Setup(
        X,
        y,
        num_classes,
        canary_row,
        direction,
        model,
        training,
        crafted,
        replaced_row,
        worst,
        pointing,
    )


def shared_default_init(shapes: list[tuple[int, int]], *, seed: int) -> np.ndarray:
    """One flat θ₀ laid out as :meth:`dpaudit.models.ModelStack.flat_parameters` (weight,
    bias, weight, …), every entry of a layer with ``in`` inputs drawn from
    U(−1/√in, 1/√in), torch.nn.Linear's default, from a numpy stream of ``seed``."""
    rng = np.random.default_rng([seed])
    parts = []
    for out, inp in shapes:
        bound = 1.0 / np.sqrt(inp)
        parts.append(rng.uniform(-bound, bound, size=out * inp))
        parts.append(rng.uniform(-bound, bound, size=out))
    return np.concatenate(parts)


def _worst_case_training(
    crafted: CraftedCanary, training: TrainingSpec, members: int, d: int, num_classes: int
) -> TrainingSpec:
    """``training`` started from the worst-case θ₀ of the crafted canary (shared by all)."""
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


# ------------------------------------------------------------------ the worst-case pair


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
    if num_classes != 2:
        raise ConfigError(
            f"canary = 'worst-case' audits binary logistic regression: the dataset must have "
            f"2 classes. Got {num_classes} classes."
        )
    mechanism = erm_mechanism(s)
    assert mechanism is not None  # the section checked it
    eps, lam = s.number("epsilon"), s.number("lam")
    n0 = X.shape[0]
    signs = np.where(y == 1, 1.0, -1.0)
    parties = 1
    if mechanism == "multiparty":
        parties = check_integer("parties", int(s.number("parties")), low=1)
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


def worst_case_details(
    worst: WorstCaseSetup, *, trials: int, threshold: str, level: float, seed: int
) -> dict[str, Any]:
    """Realised sensitivity, the ε it allows, and the ideal bound at this budget.

    The ideal bound simulates the exact log-likelihood ratio of the pair (10⁶ draws per
    hypothesis of the mechanism's own noise, :func:`dpaudit.theory.erm.gamma_ball_pair_llr`)
    and counts it at the audit's trials (half of them with the ``split`` threshold) and
    per-bound confidence level (:func:`dpaudit.planning.ideal.ideal_lower_bound`).
    """
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
