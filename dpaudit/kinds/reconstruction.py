"""The ``reconstruction`` kind: a server reconstructs a batch from its shared gradient.

Threat model: an honest-but-curious server knows the model (a small MLP on 8×8 digits)
and sees the (possibly defended) gradient of one batch of B examples. For every defence
of ``[[reconstruction.defences]]`` the same ``batches`` batches are drawn, defended and
inverted (by optimisation, or in closed form for B = 1); units store the true and
reconstructed inputs, and the summary gives per-example errors after Hungarian matching
(normalised RMSE, PSNR, fraction recovered within ``tolerance``) with intervals over the
batches. Those are descriptive: they put no bound into the verdict.

``[reconstruction.game]`` adds the k-candidate identification game against DP-SGD on one
example: its success count gives a rigorous ε lower bound
(:func:`dpaudit.reconstruction.identification_epsilon_lower_bound`), held against the
accountant's ε for the σ the implementation REPORTS (``claimed_noise_multiplier``,
default the σ that runs). The game's neighbours replace one record, whose clipped
gradient may move by 2C: one Gaussian step with noise σC is then exactly (2/σ)-GDP, the
guarantee of an add/remove step with noise multiplier σ/2, which is how the record is
handed to the accountant (:func:`dpaudit.upper_bounds.from_records`).
"""

from __future__ import annotations

import hashlib
import math
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from dpaudit.kinds.base import (
    AuditKind,
    KindSummary,
    Outputs,
    RunContext,
    UnitPlan,
    stream_seed,
    unit_index,
)
from dpaudit.sections import Positive, Table

if TYPE_CHECKING:  # scipy, torch and sklearn load when units run or summarise, not with the file
    from dpaudit.reconstruction import Defence, Network
    from dpaudit.results import Comparison, TestSummary
    from dpaudit.upper_bounds import UpperBound

#: Distinguishes this kind's random streams from other kinds' under the same audit seed.
_STREAM = 5
_GAMES_PER_UNIT = 1000
_DIGITS = 1797


class DefenceTable(Table):
    """One ``[[reconstruction.defences]]`` entry; only the named defence's keys matter."""

    name: Literal["none", "aggregation", "noise", "clipping", "dpsgd", "dropout", "pruning"]
    k: Annotated[int, Field(ge=1, le=64)] = 2
    sigma: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.0
    clipping_norm: Positive = 1.0
    p: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.5
    keep: Annotated[float, Field(gt=0.0, le=1.0)] = 0.1


class GameTable(Table):
    """``[reconstruction.game]``: the k-candidate identification game against DP-SGD.

    ``candidates`` = k (default: all 1,797 digits); ``noise_multiplier`` is the σ that
    RUNS, ``claimed_noise_multiplier`` the σ reported to the accountant (default: the
    same; a smaller σ that runs than the one claimed is the planted bug of the tests).
    ``target_value`` is the regression target y of every game: far from the network's
    outputs, so that every gradient is clipped to exactly C.
    """

    candidates: Annotated[int, Field(ge=2, le=_DIGITS)] = _DIGITS
    trials: Annotated[int, Field(ge=1, le=10_000_000)] = 2000
    hidden: Annotated[int, Field(ge=1, le=256)] = 1
    noise_multiplier: Positive
    clipping_norm: Positive = 1.0
    claimed_noise_multiplier: Positive | None = None
    target_value: Annotated[float, Field(allow_inf_nan=False)] = 10.0

    @property
    def claimed(self) -> float:
        return (
            self.noise_multiplier
            if self.claimed_noise_multiplier is None
            else self.claimed_noise_multiplier
        )


class ReconstructionSection(Table):
    """``[reconstruction]``: gradient inversion on sklearn's digits under defences.

    The network is ``(64, *hidden, outputs)``: ``outputs = 1`` regresses the digit's value
    with the squared loss, ``outputs = 10`` classifies with cross-entropy; ``hidden = [m]``
    is the two-layer network Σ_j a_j σ(w_jᵀx + b_j).
    """

    hidden: list[Annotated[int, Field(ge=1, le=1024)]] = Field(default_factory=lambda: [32])
    outputs: Literal[1, 10] = 1
    activation: Literal["relu", "tanh", "sigmoid"] = "relu"
    bias: bool = True
    batch_size: Annotated[int, Field(ge=1, le=64)] = 1
    batches: Annotated[int, Field(ge=2, le=10_000)] = 10
    attack: Literal["optimisation", "analytic"] = "optimisation"
    distance: Literal["l2", "cosine"] = "l2"
    restarts: Annotated[int, Field(ge=1, le=100)] = 2
    steps: Annotated[int, Field(ge=1, le=100_000)] = 200
    tv: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.0
    labels: Literal["known", "inferred"] = "inferred"
    tolerance: Positive = 0.01
    defences: list[DefenceTable] = Field(
        default_factory=lambda: [DefenceTable(name="none")], min_length=1
    )
    game: GameTable | None = None

    @model_validator(mode="after")
    def _attack_fits(self) -> ReconstructionSection:
        if self.attack == "analytic":
            if not self.bias:
                raise ValueError("attack 'analytic' needs bias = true (x = ∇_W / ∇_b)")
            if self.batch_size != 1 or any(d.name == "aggregation" for d in self.defences):
                raise ValueError(
                    "attack 'analytic' reconstructs one example: batch_size = 1, no aggregation"
                )
        return self


class ReconstructionSpec(Table):
    """What a reconstruction unit depends on (picklable; its JSON names the units)."""

    section: ReconstructionSection
    seed: int


def _network(spec: ReconstructionSpec) -> Network:
    from dpaudit.reconstruction import Network

    s = spec.section
    return Network.random(
        (64, *s.hidden, s.outputs),
        activation=s.activation,
        bias=s.bias,
        seed=stream_seed(spec.seed, _STREAM, 0),
    )


def _defence(table: DefenceTable) -> Defence:
    from dpaudit.reconstruction import Defence

    return Defence(**table.model_dump())


def inversion_unit(spec: ReconstructionSpec, unit: str) -> dict[str, np.ndarray]:
    """Draw batch ``b`` (the same for every defence), defend its gradient, invert it."""
    from dpaudit.reconstruction import (
        analytic_inversion,
        defended_gradient,
        infer_labels,
        invert_gradient,
        load_digits_images,
    )

    s = spec.section
    which = int(unit.split("-")[1][1:])
    b = unit_index(unit)
    defence = _defence(s.defences[which])
    net = _network(spec)
    images, digits = load_digits_images()
    # The batch depends on b only: every defence is measured on the same batches.
    pick = np.random.default_rng([spec.seed, _STREAM, 1, b])
    rows = pick.choice(images.shape[0], s.batch_size * defence.batch_multiplier, replace=False)
    x = images[rows]
    y = digits[rows] if s.outputs > 1 else digits[rows].astype(np.float64)
    g = defended_gradient(
        net, x, y, defence, np.random.default_rng([spec.seed, _STREAM, 2, which, b])
    )
    reconstruct = x.shape[0]
    if s.attack == "analytic":
        x_hat, labels = analytic_inversion(net, g), y
    else:
        if s.labels == "known":
            labels = y
        elif s.outputs > 1:
            labels = infer_labels(net, g, reconstruct)
        else:
            labels = None  # regression targets fitted jointly (DLG)
        inv = invert_gradient(
            net,
            g,
            batch_size=reconstruct,
            labels=labels,
            distance=s.distance,
            restarts=s.restarts,
            steps=s.steps,
            tv=s.tv,
            zeros=defence.zeros,
            seed=stream_seed(spec.seed, _STREAM, 3, which, b),
        )
        x_hat, labels = inv.x, inv.labels
    return {
        "x_true": x[: s.batch_size],
        "y_true": np.asarray(y[: s.batch_size], dtype=np.float64),
        "x_hat": x_hat,
        "labels_found": np.asarray(labels if labels is not None else [], dtype=np.float64),
    }


def game_unit(spec: ReconstructionSpec, unit: str) -> dict[str, np.ndarray]:
    """One chunk of identification games (independent of every other chunk)."""
    from dpaudit.reconstruction import play_identification

    game = spec.section.game
    assert game is not None  # planned only with a [reconstruction.game] table
    index = unit_index(unit)
    games = min(_GAMES_PER_UNIT, game.trials - index * _GAMES_PER_UNIT)
    return play_identification(
        games=games,
        candidates=None,
        k=game.candidates,
        hidden=game.hidden,
        noise_multiplier=game.noise_multiplier,
        clipping_norm=game.clipping_norm,
        target_value=game.target_value,
        seed=stream_seed(spec.seed, _STREAM, 4, index),
    )


def reconstruction_unit(spec: ReconstructionSpec, unit: str) -> dict[str, np.ndarray]:
    """Dispatch on the unit's name: ``reconstruction-d<i>-<b>`` or ``reconstruction-game-<j>``."""
    if unit.startswith("reconstruction-game-"):
        return game_unit(spec, unit)
    return inversion_unit(spec, unit)


def game_upper_bound(game: GameTable, delta: float) -> UpperBound:
    """The accountant's ε for one replace-one DP-SGD step with the CLAIMED σ.

    Replacing a record moves the clipped sum by up to 2C, so the step with noise σC is
    (2/σ)-GDP: an add/remove step with noise multiplier σ/2 (sampling rate 1, one step),
    which :func:`~dpaudit.upper_bounds.from_records` accounts exactly (Dong, Roth, Su
    2019, Cor. 2.13).
    """
    from dpaudit.records import DPSGDRecord
    from dpaudit.upper_bounds import from_records

    record = DPSGDRecord(
        noise_multiplier=game.claimed / 2.0,
        sampling_rate=1.0,
        steps=1,
        clipping_norm=game.clipping_norm,
        sampling="full-batch",
    )
    return from_records([record], delta)


class ReconstructionKind(AuditKind[ReconstructionSection]):
    name = "reconstruction"
    section = ReconstructionSection
    description = "gradient inversion under defences, and an identification-game ε bound"

    def plan(self, section: ReconstructionSection, context: RunContext) -> UnitPlan:
        spec = ReconstructionSpec(section=section, seed=context.seed)
        units = [
            f"reconstruction-d{i}-{b:05d}"
            for i in range(len(section.defences))
            for b in range(section.batches)
        ]
        if section.game is not None:
            chunks = math.ceil(section.game.trials / _GAMES_PER_UNIT)
            units += [f"reconstruction-game-{j:05d}" for j in range(chunks)]
        return UnitPlan(
            fn=reconstruction_unit,
            spec=spec,
            units=tuple(units),
            key_data=spec.model_dump(mode="json"),
            description="inverting gradients",
        )

    def comparisons(
        self, section: ReconstructionSection, context: RunContext, outputs: Outputs
    ) -> int:
        if section.game is None:
            return 0
        return int(game_upper_bound(section.game, context.delta).epsilon_finite)

    def summarise(
        self,
        section: ReconstructionSection,
        context: RunContext,
        outputs: Outputs,
        *,
        level: float,
    ) -> KindSummary:
        from dpaudit.reconstruction import load_digits_images

        tests = [
            self._defence_test(section, context, i, outputs) for i in range(len(section.defences))
        ]
        comparisons: list[Comparison] = []
        warnings: list[str] = []
        if section.game is not None:
            test, comparison, warning = self._game(section.game, context, outputs, level)
            tests.append(test)
            comparisons.append(comparison)
            warnings += warning
        images = load_digits_images()[0]
        data_hash = hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()
        return KindSummary(tuple(tests), tuple(comparisons), (), tuple(warnings), data_hash)

    def _defence_test(
        self, section: ReconstructionSection, context: RunContext, i: int, outputs: Outputs
    ) -> TestSummary:
        from dpaudit.reconstruction import matched_errors, psnr, summarise_errors
        from dpaudit.results import score_summary

        defence = _defence(section.defences[i])
        parts = [outputs[f"reconstruction-d{i}-{b:05d}"] for b in range(section.batches)]
        errors, psnrs, wrong = [], [], []
        labels_right = labels_total = 0
        for b, part in enumerate(parts):
            e, match = matched_errors(part["x_true"], part["x_hat"])
            errors.append(e)
            psnrs.append(psnr(part["x_true"], part["x_hat"][match]))
            # Negatives: the same reconstructions matched against the NEXT batch's inputs.
            other = parts[(b + 1) % len(parts)]["x_true"]
            wrong.append(matched_errors(other, part["x_hat"])[0])
            found = part["labels_found"]
            if section.outputs > 1 and found.size >= part["y_true"].size:
                truth = np.sort(part["y_true"])
                labels_right += int(np.sum(np.sort(found[: truth.size]) == truth))
                labels_total += truth.size
        summary = summarise_errors(
            errors,
            psnrs,
            tolerance=section.tolerance,
            confidence_level=context.confidence_level,
            seed=context.seed,
        )
        label = f"gradient inversion, defence {defence.label}"
        details = summary.to_dict()
        if labels_total:
            details["label_accuracy"] = labels_right / labels_total
        # Score = −error: larger means "this input is the one reconstructed" (H1).
        return score_summary(
            f"reconstruction-{i}",
            label,
            -np.concatenate(wrong),
            -np.concatenate(errors),
            confidence_level=context.confidence_level,
            hypotheses=("another batch's input", "the batch's input"),
        ).with_details(
            reconstruction={
                "defence": section.defences[i].model_dump(),
                "attack": section.attack,
                "batch_size": section.batch_size,
                "metrics": details,
            }
        )

    def _game(
        self, game: GameTable, context: RunContext, outputs: Outputs, level: float
    ) -> tuple[TestSummary, Comparison, list[str]]:
        from dpaudit.reconstruction import identification_epsilon_lower_bound
        from dpaudit.results import Comparison, score_summary

        parts = [outputs[u] for u in sorted(outputs) if u.startswith("reconstruction-game-")]
        correct = int(sum(int(p["correct"].sum()) for p in parts))
        trials = int(sum(p["correct"].size for p in parts))
        upper = game_upper_bound(game, context.delta)
        # One in-verdict comparison: the bound is taken at the budget's level.
        bound = identification_epsilon_lower_bound(
            correct, trials, candidates=game.candidates, delta=context.delta, confidence_level=level
        )
        label = (
            f"identification game (k={game.candidates}, DP-SGD σ={game.claimed:g} claimed, "
            f"C={game.clipping_norm:g})"
        )
        comparison = Comparison(
            label,
            "epsilon",
            bound,
            upper.epsilon,
            "accountant ε (replace-one: μ = 2/σ)",
            upper.epsilon_finite,
        )
        test = score_summary(
            "reconstruction-game",
            label,
            np.concatenate([p["other_score"] for p in parts]),
            np.concatenate([p["target_score"] for p in parts]),
            confidence_level=context.confidence_level,
            hypotheses=("another candidate", "the target"),
        ).with_details(
            reconstruction={
                "game": game.model_dump(),
                "correct": correct,
                "trials": trials,
                "success_rate": correct / trials,
                "chance": 1.0 / game.candidates,
                "accountant": {
                    "epsilon": upper.epsilon,
                    "delta": upper.epsilon_delta,
                    "mu": upper.mu,
                },
            }
        )
        warnings = []
        if bound.value == 0.0:
            warnings.append(
                f"{label}: {correct} of {trials} identifications give no ε lower bound above 0 "
                "at the verdict's confidence"
            )
        return test, comparison, warnings


KIND = ReconstructionKind()
