"""The ``reconstruction`` kind's summary: per defence, the matched reconstruction errors
with intervals, the lecture's complexity column and a few examples; the scaling grid's
fitted slopes; and the identification game's ε lower bound held against the accountant.

Only the game puts a bound into the verdict; :func:`verdict_comparisons` (the kind's
``comparisons``) and the summary decide that through the same
:func:`~dpaudit.reconstruction.game.game_in_verdict`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

import numpy as np

from dpaudit.errors import DpauditError
from dpaudit.kinds.base import KindSummary, Outputs, RunContext
from dpaudit.reconstruction.game import fixed_game, game_in_verdict, game_upper_bound
from dpaudit.reconstruction.methods import (
    Defence,
    best_multiple,
    direction_nrmse,
    fit_scaling,
    lecture_complexity,
    load_digits_images,
    matched_errors,
    median_interval,
    psnr,
    summarise_errors,
)
from dpaudit.reconstruction.schema import INPUTS, ReconstructionSection
from dpaudit.reconstruction.sequential import sequential_game
from dpaudit.reconstruction.units import build_defence
from dpaudit.results import Comparison, TestSummary, score_summary

#: How many examples of each defence row results.json keeps (true and reconstructed).
_EXAMPLES = 4


def verdict_comparisons(section: ReconstructionSection, delta: float) -> int:
    """How many comparisons the summary puts into the verdict: the game's, or none."""
    if section.game is None:
        return 0
    return int(game_in_verdict(game_upper_bound(section.game, delta)))


_ERROR_NAMES = {
    False: "normalised RMSE ‖x̂ − x‖/‖x‖",
    True: "direction error sin∠(x̂, x) (normalised RMSE at the best scale and sign)",
}


def _scored(
    section: ReconstructionSection, parts: list[Mapping[str, np.ndarray]]
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Per batch: matched errors, PSNRs, the errors against the NEXT batch's inputs (the
    negatives of the score test), and the matching."""
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
    if len(section.hidden) != 1:
        return {"formula": "the table covers two-layer networks", "value": None}
    norms = [p["gradient_norms"] for p in parts if "gradient_norms" in p]
    norm = float(np.median(np.concatenate(norms))) if norms else None
    return lecture_complexity(
        defence,
        batch_size=section.batch_size,
        input_size=INPUTS,
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


def reconstruction_summary(
    section: ReconstructionSection, context: RunContext, outputs: Outputs, *, level: float
) -> KindSummary:
    """The ``reconstruction`` kind's summary; the game's in-verdict bound at ``level``."""
    tests = [_defence_test(section, context, i, outputs) for i in range(len(section.defences))]
    comparisons: list[Comparison] = []
    warnings: list[str] = []
    if section.scaling is not None:
        scaling_test, scaling_warnings = _scaling_test(section, context, outputs)
        tests.append(scaling_test)
        warnings += scaling_warnings
    if section.game is not None and context.sequential is not None:
        test, comparison, warning = sequential_game(section, context, outputs, level=level)
        tests.append(test)
        comparisons.append(comparison)
        warnings += warning
    elif section.game is not None:
        test, comparison, warning = fixed_game(section.game, context, outputs, level)
        tests.append(test)
        comparisons.append(comparison)
        warnings += warning
    images = load_digits_images()[0]
    data_hash = hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()
    return KindSummary(tuple(tests), tuple(comparisons), (), tuple(warnings), data_hash)


def _defence_test(
    section: ReconstructionSection, context: RunContext, i: int, outputs: Outputs
) -> TestSummary:
    defence = build_defence(section.defences[i])
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
    section: ReconstructionSection, context: RunContext, outputs: Outputs
) -> tuple[TestSummary, list[str]]:
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
                "rate": batch_size * math.sqrt(INPUTS / width),
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
            "input_size": INPUTS,
            "rate": "B√(d/m)",
            "cells": rows,
            "fit": fit,
        }
    )
    return test, warnings
