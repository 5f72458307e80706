"""The ``reconstruction`` kind's work units: draw a batch, defend its gradient and invert
it (per defence, and per cell of the scaling grid), or play a chunk of identification
games. Each unit is a pure function of the spec and its name.
"""

from __future__ import annotations

import numpy as np

from dpaudit.kinds.base import stream_seed, unit_index
from dpaudit.reconstruction.methods import (
    Defence,
    Network,
    analytic_inversion,
    infer_labels,
    invert_gradient,
    load_digits_images,
    per_example_gradients,
    play_identification,
    tensor_inversion,
)
from dpaudit.reconstruction.schema import INPUTS, DefenceTable, ReconstructionSection
from dpaudit.sections import Table

#: Distinguishes this kind's random streams from other kinds' under the same audit seed.
_STREAM = 5
#: Identification games per unit.
GAMES_PER_UNIT = 1000


class ReconstructionSpec(Table):
    """What a reconstruction unit depends on (picklable; its JSON names the units)."""

    section: ReconstructionSection
    seed: int


def _network(spec: ReconstructionSpec, hidden: list[int] | None = None, seed: int = 0) -> Network:
    s = spec.section
    return Network.random(
        (INPUTS, *(s.hidden if hidden is None else hidden), s.outputs),
        activation=s.activation,
        bias=s.bias,
        seed=stream_seed(spec.seed, _STREAM, 0) if hidden is None else seed,
    )


def build_defence(table: DefenceTable) -> Defence:
    """The defence of one ``[[reconstruction.defences]]`` entry."""
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
    s = spec.section
    which = int(unit.split("-")[1][1:])
    b = unit_index(unit)
    defence = build_defence(s.defences[which])
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
    game = spec.section.game
    assert game is not None  # planned only with a [reconstruction.game] table
    index = unit_index(unit)
    games = min(GAMES_PER_UNIT, game.trials - index * GAMES_PER_UNIT)
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


class SequentialReconstructionSpec(ReconstructionSpec):
    """``[audit] stopping = "sequential"``: the game is played in rounds of
    ``round_games`` games (:mod:`dpaudit.reconstruction.sequential`)."""

    round_games: int


def descriptive_units(section: ReconstructionSection) -> list[str]:
    """The inversion units (per defence) and the scaling grid's: everything but the game."""
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
    return units


def game_round_unit(spec: SequentialReconstructionSpec, unit: str) -> dict[str, np.ndarray]:
    """Round j of a sequential game: ``round_games`` games from the round's own stream,
    which depends on the seed and j only (never on the cap)."""
    game = spec.section.game
    assert game is not None  # planned only with a [reconstruction.game] table
    return play_identification(
        games=spec.round_games,
        candidates=None,
        k=game.candidates,
        hidden=game.hidden,
        noise_multiplier=game.noise_multiplier,
        clipping_norm=game.clipping_norm,
        target_value=game.target_value,
        seed=stream_seed(spec.seed, _STREAM, 9, unit_index(unit)),
    )


def sequential_reconstruction_unit(
    spec: SequentialReconstructionSpec, unit: str
) -> dict[str, np.ndarray]:
    """:func:`reconstruction_unit`, with the game's units played as sequential rounds."""
    if unit.startswith("reconstruction-game-"):
        return game_round_unit(spec, unit)
    return reconstruction_unit(spec, unit)


def reconstruction_unit(spec: ReconstructionSpec, unit: str) -> dict[str, np.ndarray]:
    """Dispatch on the unit's name: ``reconstruction-d<i>-<b>`` (defence i),
    ``reconstruction-s<j>-<b>`` (scaling cell j) or ``reconstruction-game-<j>``."""
    if unit.startswith("reconstruction-game-"):
        return game_unit(spec, unit)
    if unit.startswith("reconstruction-s"):
        return scaling_unit(spec, unit)
    return inversion_unit(spec, unit)
