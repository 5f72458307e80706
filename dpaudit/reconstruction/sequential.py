"""The identification game as a sequential audit (``[audit] stopping = "sequential"``).

The games of ``[reconstruction.game]`` run in **rounds** of ``[audit] round_trials`` games,
one unit per round (``reconstruction-game-00000`` is round 0), up to the cap
``[reconstruction.game] trials``. The game has no threshold to choose, so every round is
counted, round 0 included. After each round an anytime-valid LOWER limit on the success
probability gives an ε lower bound that holds over every round at once, and the audit stops
at the first round where

- the ε lower bound exceeds the accountant's ε (``violation``: the claim is refuted, exit 1),
- it reaches what ``[audit] certify_tightness`` (a share of the accountant's ε) or
  ``certify_epsilon`` asks (``target``: certified),
- or the cap is reached (``cap``).

The statistics (the confidence sequence, its map to ε and why it holds over every round)
are :mod:`dpaudit.sequential.game`, torch-free.

The decision is a deterministic function of the stored rounds (:func:`outcome`), asked by
the audit after each stored unit (:meth:`ReconstructionKind.stop_reason`) and again by the
summary, so a run killed and resumed, or rerun with a larger cap, continues the same
sequence: a round's games depend only on the seed and its index, never on the cap
(:func:`plan_rounds` keeps the cap out of the units' key). The inversion (and scaling)
units, descriptive, run first, one at a time, as the fixed design's do.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from dpaudit.errors import ConfigError, DpauditError
from dpaudit.kinds.base import (
    Outputs,
    RunContext,
    SequentialSettings,
    UnitPlan,
    ordered_rounds,
)
from dpaudit.reconstruction.game import game_in_verdict, game_test, game_upper_bound
from dpaudit.sequential import SequentialRule, default_tuned_trials
from dpaudit.sequential.game import GameOutcome, fixed_plan, game_bound, game_rounds

if TYPE_CHECKING:
    from dpaudit.accounting.upper_bounds import UpperBound
    from dpaudit.reconstruction.schema import GameTable, ReconstructionSection
    from dpaudit.results import Comparison, TestSummary

#: Unit names of the game's rounds (the fixed design's chunks have the same names).
ROUND_PREFIX = "reconstruction-game-"

# ------------------------------------------------------------------- the kind's wiring


def check_sequential(section: ReconstructionSection) -> None:
    """What the sequential design supports, said before any work.

    Raises:
        ConfigError: no ``[reconstruction.game]`` (the game's rounds are what stop).
    """
    if section.game is None:
        raise ConfigError(
            "[audit] stopping = 'sequential' stops the identification game's rounds, and "
            "this [reconstruction] has no [reconstruction.game]: add one, or set stopping = "
            "'fixed' (the inversion errors under defences are descriptive and have nothing "
            "to stop on)"
        )


def settings(context: RunContext) -> SequentialSettings:
    if context.sequential is None:
        raise DpauditError("internal error: a sequential reconstruction audit without its settings")
    return context.sequential


def _game(section: ReconstructionSection) -> GameTable:
    check_sequential(section)
    assert section.game is not None  # check_sequential raised otherwise
    return section.game


def rounds_cap(section: ReconstructionSection, context: RunContext) -> int:
    """Rounds allowed: ⌈trials / round_trials⌉ (whole rounds: a round never depends on
    the cap)."""
    return max(1, math.ceil(_game(section).trials / settings(context).round_trials))


def plan_rounds(section: ReconstructionSection, context: RunContext) -> UnitPlan:
    """The fixed design's inversion (and scaling) units first, then one unit per round of
    ``round_trials`` games; the key leaves out the cap and the claim, so a rerun with a
    larger cap finds the rounds already played and continues."""
    from dpaudit.reconstruction.units import (
        SequentialReconstructionSpec,
        descriptive_units,
        sequential_reconstruction_unit,
    )

    check_sequential(section)
    s = settings(context)
    spec = SequentialReconstructionSpec(
        section=section, seed=context.seed, round_games=s.round_trials
    )
    # Neither the cap nor the claimed σ changes a round's games: a rerun with a larger cap
    # or another claim reads the rounds already played.
    key = spec.model_dump(
        mode="json", exclude={"section": {"game": {"trials", "claimed_noise_multiplier"}}}
    )
    units = descriptive_units(section)
    units += [f"{ROUND_PREFIX}{j:05d}" for j in range(rounds_cap(section, context))]
    return UnitPlan(
        fn=sequential_reconstruction_unit,
        spec=spec,
        units=tuple(units),
        key_data={**key, "stopping": "sequential"},
        description="inverting gradients, then identification games (sequential rounds)",
    )


def _rule(
    upper: UpperBound, in_verdict: bool, context: RunContext, *, level: float
) -> SequentialRule:
    s = settings(context)
    finite = in_verdict and math.isfinite(upper.epsilon)
    target = None
    if s.certify_tightness is not None and finite:
        target = s.certify_tightness * upper.epsilon
    if s.certify_epsilon is not None:
        target = s.certify_epsilon if target is None else min(target, s.certify_epsilon)
    return SequentialRule(
        parameter="epsilon",
        delta=upper.epsilon_delta,
        # The in-verdict game at the verdict's per-bound level; otherwise descriptive.
        level=level if in_verdict else context.confidence_level,
        upper=upper.epsilon if finite else None,
        target=target,
        tuned_trials=default_tuned_trials(s.round_trials),
    )


def _round_names(outputs: Outputs) -> list[str]:
    return ordered_rounds(
        (u for u in outputs if u.startswith(ROUND_PREFIX)), what="a sequential game"
    )


def outcome(
    section: ReconstructionSection, context: RunContext, outputs: Outputs, *, level: float
) -> GameOutcome:
    """The game run over the stored rounds up to its first decision.

    Raises:
        DpauditError: no round stored, or the rounds are not 0, 1, 2, ...
    """
    game = _game(section)
    upper = game_upper_bound(game, context.delta)
    rule = _rule(upper, game_in_verdict(upper), context, level=level)
    rounds = [outputs[u]["correct"] for u in _round_names(outputs)]
    return game_rounds(
        rounds, rule, candidates=game.candidates, last_round=rounds_cap(section, context) - 1
    )


def stop_reason(
    section: ReconstructionSection, context: RunContext, outputs: Outputs, *, level: float
) -> str:
    """The decision after the units stored so far: ``continue`` until a game round is
    stored (the descriptive inversion units come first)."""
    if not any(u.startswith(ROUND_PREFIX) for u in outputs):
        return "continue"
    return outcome(section, context, outputs, level=level).decision


def describe(
    section: ReconstructionSection, context: RunContext, result: GameOutcome
) -> dict[str, Any]:
    """The ``sequential`` details of the game's test in results.json."""
    s = settings(context)
    cap = rounds_cap(section, context) * s.round_trials
    return {
        "trials_used": {"games": result.trials},
        "stopped_because": result.decision,
        "decided_by": "epsilon" if result.decision != "continue" else None,
        "rounds": result.rounds,
        "round_trials": s.round_trials,
        "cap_trials": cap,
        "trials_saved_against_cap": cap - result.trials,
        "targets": {"epsilon": result.rule.target},
        "prior_success": result.prior_success,
        "path": {"epsilon": [p.to_dict() for p in result.path]},
        "fixed_plan": {"epsilon": fixed_plan(result)},
    }


def sequential_game(
    section: ReconstructionSection, context: RunContext, outputs: Outputs, *, level: float
) -> tuple[TestSummary, Comparison, list[str]]:
    """The game's test and comparison from the rounds used (rounds stored after the
    decision are never read)."""
    result = outcome(section, context, outputs, level=level)
    used = _round_names(outputs)[: result.rounds]
    test, comparison, warnings = game_test(
        _game(section), context, [outputs[u] for u in used], game_bound(result)
    )
    return test.with_details(sequential=describe(section, context, result)), comparison, warnings
