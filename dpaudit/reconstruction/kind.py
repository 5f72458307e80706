"""The ``reconstruction`` kind: a server reconstructs a batch from its shared gradient.

Threat model: an honest-but-curious server knows the model (a small MLP on 8×8 digits)
and sees the (possibly defended) gradient of one batch of B examples. For every defence
of ``[[reconstruction.defences]]`` the same ``batches`` batches are drawn, defended and
inverted (by optimisation, or in closed form for B = 1); units store the true and
reconstructed inputs, and the summary gives per-example errors after Hungarian matching
(normalised RMSE, PSNR, fraction recovered within ``tolerance``) with intervals over the
batches. Those are descriptive: they put no bound into the verdict. ``attack = "tensor"``
runs the tensor method of Wang, Lee, Lei (2023) instead (two-layer network, smooth
activation): it finds input directions, scored by sin∠(x̂, x). Each defence row carries
the lecture's complexity column at the run's B, d, m and the defence's parameters
(:func:`dpaudit.reconstruction.lecture_complexity`) and a few raw inputs with their
reconstructions (the report draws them). ``[reconstruction.scaling]`` repeats the
undefended attack on a grid of B and m and fits the error's slopes in log B and log m.

``[reconstruction.game]`` adds the k-candidate identification game against DP-SGD on one
example: its success count gives a rigorous ε lower bound
(:func:`dpaudit.bounds.identification_epsilon_lower_bound`), held against the
accountant's ε for the σ the implementation REPORTS (``claimed_noise_multiplier``,
default the σ that runs). The game's neighbours replace one record, whose clipped
gradient may move by 2C: one Gaussian step with noise σC is then exactly (2/σ)-GDP, the
guarantee of an add/remove step with noise multiplier σ/2, which is how the record is
handed to the accountant (:func:`dpaudit.upper_bounds.from_records`).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
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
    from dpaudit.reconstruction.methods import Defence, Network
    from dpaudit.results import Comparison, TestSummary
    from dpaudit.upper_bounds import UpperBound

#: Distinguishes this kind's random streams from other kinds' under the same audit seed.
_STREAM = 5
_GAMES_PER_UNIT = 1000
_DIGITS = 1797
_INPUTS = 64  # 8×8 digits
_WIDEST = 8192  # the tensor method's error falls like √(d/m): it needs m ≫ d
#: How many examples of each defence row results.json keeps (true and reconstructed).
_EXAMPLES = 4


class DefenceTable(Table):
    """One ``[[reconstruction.defences]]`` entry; only the named defence's keys matter."""

    name: Literal["none", "aggregation", "noise", "clipping", "dpsgd", "dropout", "pruning"]
    k: Annotated[int, Field(ge=1, le=64)] = 2
    sigma: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.0
    clipping_norm: Positive = 1.0
    p: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.5
    keep: Annotated[float, Field(gt=0.0, le=1.0)] = 0.1

    @property
    def batch_multiplier(self) -> int:
        return self.k if self.name == "aggregation" else 1


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


class ScalingTable(Table):
    """``[reconstruction.scaling]``: the undefended attack on a grid of B and m.

    Every (B, m) of ``batch_sizes`` × ``widths`` gets ``batches`` independent batches, each
    on a freshly drawn network of width m; the summary fits the slopes of log(median
    error) against log B and log m (:func:`dpaudit.reconstruction.fit_scaling`), next to
    the B√(d/m) rate's 1 and −1/2.
    """

    batch_sizes: list[Annotated[int, Field(ge=1, le=64)]] = Field(min_length=1)
    widths: list[Annotated[int, Field(ge=1, le=_WIDEST)]] = Field(min_length=1)
    batches: Annotated[int, Field(ge=2, le=10_000)] = 5

    @property
    def cells(self) -> list[tuple[int, int]]:
        return [(b, m) for b in self.batch_sizes for m in self.widths]


class ReconstructionSection(Table):
    """``[reconstruction]``: gradient inversion on sklearn's digits under defences.

    The network is ``(64, *hidden, outputs)``: ``outputs = 1`` regresses the digit's value
    with the squared loss, ``outputs = 10`` classifies with cross-entropy; ``hidden = [m]``
    is the two-layer network Σ_j a_j σ(w_jᵀx + b_j). ``attack``: ``optimisation`` (L-BFGS
    on the gradient distance), ``analytic`` (the B = 1 closed form), or ``tensor`` (the
    tensor method of Wang, Lee, Lei 2023 for that two-layer network: input directions from
    the first layer's moment tensor, scored scale- and sign-free).
    """

    hidden: list[Annotated[int, Field(ge=1, le=_WIDEST)]] = Field(default_factory=lambda: [32])
    outputs: Literal[1, 10] = 1
    activation: Literal["relu", "tanh", "sigmoid"] = "relu"
    bias: bool = True
    batch_size: Annotated[int, Field(ge=1, le=64)] = 1
    batches: Annotated[int, Field(ge=2, le=10_000)] = 10
    attack: Literal["optimisation", "analytic", "tensor"] = "optimisation"
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
    scaling: ScalingTable | None = None

    @model_validator(mode="after")
    def _attack_fits(self) -> ReconstructionSection:
        if self.scaling is not None and len(self.hidden) != 1:
            raise ValueError(
                "[reconstruction.scaling] varies m of a two-layer network: hidden = [m]"
            )
        if self.attack == "tensor":
            if len(self.hidden) != 1 or self.outputs != 1:
                raise ValueError(
                    "attack 'tensor' needs a two-layer network with a scalar output: "
                    "hidden = [m], outputs = 1"
                )
            if self.activation == "relu":
                raise ValueError(
                    "attack 'tensor' needs activation 'tanh' or 'sigmoid': ReLU's third-order "
                    "moment tensor is 0"
                )
            sizes = [self.batch_size * d.batch_multiplier for d in self.defences]
            sizes += self.scaling.batch_sizes if self.scaling is not None else []
            if max(sizes) > _INPUTS:
                raise ValueError(
                    f"attack 'tensor' finds at most d = {_INPUTS} inputs: batch_size (times k "
                    f"for aggregation) must be ≤ {_INPUTS}, got {max(sizes)}"
                )
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


def _network(spec: ReconstructionSpec, hidden: list[int] | None = None, seed: int = 0) -> Network:
    from dpaudit.reconstruction.methods import Network

    s = spec.section
    return Network.random(
        (_INPUTS, *(s.hidden if hidden is None else hidden), s.outputs),
        activation=s.activation,
        bias=s.bias,
        seed=stream_seed(spec.seed, _STREAM, 0) if hidden is None else seed,
    )


def _defence(table: DefenceTable) -> Defence:
    from dpaudit.reconstruction.methods import Defence

    return Defence(**table.model_dump())


def _attack(
    spec: ReconstructionSpec,
    net: Network,
    x: np.ndarray,
    y: np.ndarray,
    defence: Defence,
    *,
    noise_seed: list[int],
    attack_seed: int,
) -> dict[str, np.ndarray]:
    """Defend the batch's gradient and attack it; the arrays a unit stores."""
    from dpaudit.reconstruction.methods import (
        analytic_inversion,
        infer_labels,
        invert_gradient,
        per_example_gradients,
        tensor_inversion,
    )

    s = spec.section
    per_example = per_example_gradients(net, x, y)
    g = defence.apply(per_example, np.random.default_rng(noise_seed))
    reconstruct = x.shape[0]
    if s.attack == "analytic":
        x_hat, labels = analytic_inversion(net, g), y
    elif s.attack == "tensor":
        # Directions ±x_i/‖x_i‖ only (no labels): scored by direction_nrmse.
        x_hat, labels = tensor_inversion(net, g, batch_size=reconstruct, seed=attack_seed), None
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
            seed=attack_seed,
        )
        x_hat, labels = inv.x, inv.labels
    return {
        "x_hat": x_hat,
        "labels_found": np.asarray(labels if labels is not None else [], dtype=np.float64),
        # ‖g‖ of each example (the DP-SGD row of the lecture's complexity column reads it).
        "gradient_norms": np.linalg.norm(per_example, axis=1),
    }


def _labels(spec: ReconstructionSpec, digits: np.ndarray) -> np.ndarray:
    return digits if spec.section.outputs > 1 else digits.astype(np.float64)


def inversion_unit(spec: ReconstructionSpec, unit: str) -> dict[str, np.ndarray]:
    """Draw batch ``b`` (the same for every defence), defend its gradient, invert it."""
    from dpaudit.reconstruction.methods import load_digits_images

    s = spec.section
    which = int(unit.split("-")[1][1:])
    b = unit_index(unit)
    defence = _defence(s.defences[which])
    net = _network(spec)
    images, digits = load_digits_images()
    # The batch depends on b only: every defence is measured on the same batches.
    pick = np.random.default_rng([spec.seed, _STREAM, 1, b])
    rows = pick.choice(images.shape[0], s.batch_size * defence.batch_multiplier, replace=False)
    x, y = images[rows], _labels(spec, digits[rows])
    out = _attack(
        spec,
        net,
        x,
        y,
        defence,
        noise_seed=[spec.seed, _STREAM, 2, which, b],
        attack_seed=stream_seed(spec.seed, _STREAM, 3, which, b),
    )
    return {
        "x_true": x[: s.batch_size],
        "y_true": np.asarray(y[: s.batch_size], dtype=np.float64),
        **out,
    }


def scaling_unit(spec: ReconstructionSpec, unit: str) -> dict[str, np.ndarray]:
    """Cell j = (B, m) of the scaling grid, batch b: a fresh width-m network, no defence."""
    from dpaudit.reconstruction.methods import Defence, load_digits_images

    scaling = spec.section.scaling
    assert scaling is not None  # planned only with a [reconstruction.scaling] table
    j = int(unit.split("-")[1][1:])
    b = unit_index(unit)
    batch_size, width = scaling.cells[j]
    images, digits = load_digits_images()
    # The same digits for every width at one B (a paired design for the slope in m).
    pick = np.random.default_rng([spec.seed, _STREAM, 5, batch_size, b])
    rows = pick.choice(images.shape[0], batch_size, replace=False)
    net = _network(spec, [width], stream_seed(spec.seed, _STREAM, 6, width, b))
    x, y = images[rows], _labels(spec, digits[rows])
    out = _attack(
        spec,
        net,
        x,
        y,
        Defence("none"),
        noise_seed=[spec.seed, _STREAM, 7, j, b],
        attack_seed=stream_seed(spec.seed, _STREAM, 8, j, b),
    )
    return {"x_true": x, "y_true": np.asarray(y, dtype=np.float64), **out}


def game_unit(spec: ReconstructionSpec, unit: str) -> dict[str, np.ndarray]:
    """One chunk of identification games (independent of every other chunk)."""
    from dpaudit.reconstruction.methods import play_identification

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
    """Dispatch on the unit's name: ``reconstruction-d<i>-<b>`` (defence i),
    ``reconstruction-s<j>-<b>`` (scaling cell j) or ``reconstruction-game-<j>``."""
    if unit.startswith("reconstruction-game-"):
        return game_unit(spec, unit)
    if unit.startswith("reconstruction-s"):
        return scaling_unit(spec, unit)
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


_ERROR_NAMES = {
    False: "normalised RMSE ‖x̂ − x‖/‖x‖",
    True: "direction error sin∠(x̂, x) (normalised RMSE at the best scale and sign)",
}


def _scored(
    section: ReconstructionSection, parts: list[Mapping[str, np.ndarray]]
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per batch: matched errors, PSNRs, the errors against the NEXT batch's inputs (the
    negatives of the score test), and the matching."""
    from dpaudit.reconstruction.methods import best_multiple, direction_nrmse, matched_errors, psnr

    tensor = section.attack == "tensor"
    errors, psnrs, wrong, matches = [], [], [], []
    for b, part in enumerate(parts):
        x, x_hat = part["x_true"], part["x_hat"]
        other = parts[(b + 1) % len(parts)]["x_true"]
        if tensor:
            e, match = direction_nrmse(x, x_hat)
            shown = best_multiple(x, x_hat[match])
            wrong.append(direction_nrmse(other, x_hat)[0])
        else:
            e, match = matched_errors(x, x_hat)
            shown = x_hat[match]
            wrong.append(matched_errors(other, x_hat)[0])
        errors.append(e)
        psnrs.append(psnr(x, shown))
        matches.append(match)
    return errors, psnrs, wrong, matches


def _complexity(
    section: ReconstructionSection, defence: Defence, parts: list[Mapping[str, np.ndarray]]
) -> dict[str, object]:
    """The lecture's complexity of the row at the run's B, d, m (two-layer networks only)."""
    from dpaudit.reconstruction.methods import lecture_complexity

    if len(section.hidden) != 1:
        return {"formula": "the table covers two-layer networks", "value": None}
    norms = [p["gradient_norms"] for p in parts if "gradient_norms" in p]
    norm = float(np.median(np.concatenate(norms))) if norms else None
    return lecture_complexity(
        defence,
        batch_size=section.batch_size,
        input_size=_INPUTS,
        width=section.hidden[0],
        gradient_norm=norm,
    ).to_dict()


def _examples(
    section: ReconstructionSection,
    parts: list[Mapping[str, np.ndarray]],
    matches: list[np.ndarray],
) -> dict[str, object]:
    """A few true inputs and their matched reconstructions, raw (the report draws them)."""
    true: list[list[float]] = []
    found: list[list[float]] = []
    for part, match in zip(parts, matches, strict=True):
        for k in range(part["x_true"].shape[0]):
            if len(true) == _EXAMPLES:
                break
            true.append(np.round(part["x_true"][k], 4).tolist())
            found.append(np.round(np.nan_to_num(part["x_hat"][match[k]]), 4).tolist())
    return {
        "side": 8,
        "x_true": true,
        "x_hat": found,
        # Directions (tensor method) are drawn at their own scale and sign.
        "scale": "direction" if section.attack == "tensor" else "pixels",
    }


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
        if section.scaling is not None:
            units += [
                f"reconstruction-s{j}-{b:05d}"
                for j in range(len(section.scaling.cells))
                for b in range(section.scaling.batches)
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
        from dpaudit.reconstruction.methods import load_digits_images

        tests = [
            self._defence_test(section, context, i, outputs) for i in range(len(section.defences))
        ]
        comparisons: list[Comparison] = []
        warnings: list[str] = []
        if section.scaling is not None:
            scaling_test, scaling_warnings = self._scaling_test(section, context, outputs)
            tests.append(scaling_test)
            warnings += scaling_warnings
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
        from dpaudit.reconstruction.methods import summarise_errors
        from dpaudit.results import score_summary

        defence = _defence(section.defences[i])
        parts = [outputs[f"reconstruction-d{i}-{b:05d}"] for b in range(section.batches)]
        errors, psnrs, wrong, matches = _scored(section, parts)
        labels_right = labels_total = 0
        for part in parts:
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
        if section.attack == "tensor":
            label = f"tensor method, defence {defence.label}"
        details = summary.to_dict()
        details["error"] = _ERROR_NAMES[section.attack == "tensor"]
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
                "defence_label": defence.label,
                "attack": section.attack,
                "batch_size": section.batch_size,
                "metrics": details,
                "complexity": _complexity(section, defence, parts),
                "examples": _examples(section, parts, matches),
            }
        )

    def _scaling_test(
        self, section: ReconstructionSection, context: RunContext, outputs: Outputs
    ) -> tuple[TestSummary, list[str]]:
        from dpaudit.errors import DpauditError
        from dpaudit.reconstruction.methods import fit_scaling, median_interval
        from dpaudit.results import score_summary

        scaling = section.scaling
        assert scaling is not None  # called only with a [reconstruction.scaling] table
        cells, rows, all_errors, all_wrong = [], [], [], []
        for j, (batch_size, width) in enumerate(scaling.cells):
            parts = [outputs[f"reconstruction-s{j}-{b:05d}"] for b in range(scaling.batches)]
            errors, _, wrong, _ = _scored(section, parts)
            medians = np.array([float(np.median(e)) for e in errors])
            cells.append((batch_size, width, medians))
            ci = median_interval(medians, confidence_level=context.confidence_level)
            rows.append(
                {
                    "batch_size": batch_size,
                    "width": width,
                    "median_error": float(np.median(medians)),
                    "median_error_interval": [ci.low, ci.high],
                    "batches": int(medians.size),
                    "rate": batch_size * math.sqrt(_INPUTS / width),
                }
            )
            all_errors += errors
            all_wrong += wrong
        warnings: list[str] = []
        fit: dict[str, object] | None = None
        try:
            fit = fit_scaling(
                cells, confidence_level=context.confidence_level, seed=context.seed
            ).to_dict()
        except DpauditError as exc:
            warnings.append(f"reconstruction scaling: no slopes fitted ({exc})")
        attack = "tensor method" if section.attack == "tensor" else "gradient inversion"
        test = score_summary(
            "reconstruction-scaling",
            f"{attack} across batch size B and width m (no defence)",
            -np.concatenate(all_wrong),
            -np.concatenate(all_errors),
            confidence_level=context.confidence_level,
            hypotheses=("another batch's input", "the batch's input"),
        ).with_details(
            reconstruction={
                "attack": section.attack,
                "error": _ERROR_NAMES[section.attack == "tensor"],
                "input_size": _INPUTS,
                "rate": "B√(d/m)",
                "cells": rows,
                "fit": fit,
            }
        )
        return test, warnings

    def _game(
        self, game: GameTable, context: RunContext, outputs: Outputs, level: float
    ) -> tuple[TestSummary, Comparison, list[str]]:
        from dpaudit.bounds import identification_epsilon_lower_bound
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
            test=label,
            parameter="epsilon",
            lower=bound,
            upper=upper.epsilon,
            upper_source="accountant ε (replace-one: μ = 2/σ)",
            in_verdict=upper.epsilon_finite,
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
