"""The identification game's test: the accountant's ε for the claimed σ, whether the game
enters the verdict, and the test and comparison from the games played (the fixed design's
chunks or the sequential design's rounds). The summary and the sequential design both read
it, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dpaudit.accounting.upper_bounds import UpperBound, from_records
from dpaudit.bounds import EpsilonBound, identification_epsilon_lower_bound
from dpaudit.kinds.base import Outputs, RunContext
from dpaudit.reconstruction.schema import GameTable
from dpaudit.records import DPSGDRecord
from dpaudit.results import Comparison, TestSummary, score_summary


def game_upper_bound(game: GameTable, delta: float) -> UpperBound:
    """The accountant's ε for one replace-one DP-SGD step with the CLAIMED σ.

    Replacing a record moves the clipped sum by up to 2C, so the step with noise σC is
    (2/σ)-GDP: an add/remove step with noise multiplier σ/2 (sampling rate 1, one step),
    which :func:`~dpaudit.accounting.upper_bounds.from_records` accounts exactly (Dong, Roth, Su
    2019, Cor. 2.13).
    """
    record = DPSGDRecord(
        noise_multiplier=game.claimed / 2.0,
        sampling_rate=1.0,
        steps=1,
        clipping_norm=game.clipping_norm,
        sampling="full-batch",
    )
    return from_records([record], delta)


def game_in_verdict(upper: UpperBound) -> bool:
    """The game's comparison enters the verdict where the accountant's ε is finite."""
    return upper.epsilon_finite


def fixed_game(
    game: GameTable, context: RunContext, outputs: Outputs, level: float
) -> tuple[TestSummary, Comparison, list[str]]:
    """The fixed design: every chunk of games counted once, Clopper–Pearson at ``level``."""
    parts = [outputs[u] for u in sorted(outputs) if u.startswith("reconstruction-game-")]
    correct = int(sum(int(p["correct"].sum()) for p in parts))
    trials = int(sum(p["correct"].size for p in parts))
    # One in-verdict comparison: the bound is taken at the budget's level.
    bound = identification_epsilon_lower_bound(
        correct, trials, candidates=game.candidates, delta=context.delta, confidence_level=level
    )
    return game_test(game, context, parts, bound)


def game_test(
    game: GameTable,
    context: RunContext,
    parts: Sequence[Mapping[str, np.ndarray]],
    bound: EpsilonBound,
) -> tuple[TestSummary, Comparison, list[str]]:
    """The game's test, its comparison with the accountant's ε, and its warning, from the
    chunks (or sequential rounds) of games ``parts`` the ``bound`` was computed on."""
    correct = int(sum(int(p["correct"].sum()) for p in parts))
    trials = int(sum(p["correct"].size for p in parts))
    upper = game_upper_bound(game, context.delta)
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
        in_verdict=game_in_verdict(upper),
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
