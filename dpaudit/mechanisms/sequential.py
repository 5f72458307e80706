"""The ``mechanism`` kind's sequential design (``[audit] stopping = "sequential"``).

The trials run in **rounds**, one unit per round (unit ``mechanism-00000`` is round 0), up
to the cap ``[mechanism] trials`` (rounded up to whole rounds): rounds of ``[audit]
round_trials`` per arm up to 20 rounds, then rounds that bring the cumulative trials to
25, 30, 40, 50, 60, 80, 100, 125, ... times ``round_trials``
(:func:`dpaudit.sequential.cumulative_rounds`), so a run to a cap of N trials looks
O(log N) times. The audit keeps the tests between rounds (:class:`RoundsMonitor`), so a
round costs what its own trials cost, whatever the rounds before it. Round 0 chooses the
threshold of each bound and is never counted; after every later round the anytime-valid
limits of :mod:`dpaudit.sequential` give ε and μ lower bounds that hold over every round at
once, and the audit stops at the first round where

- an in-verdict lower bound exceeds its upper bound (``violation``: the claim is refuted),
- a lower bound reaches what ``[audit] certify_tightness`` (a share of its upper bound) or
  ``certify_epsilon`` asks (``target``: certified), either through the rate limits or
  through the target's betting e-process (:class:`dpaudit.sequential.TargetTest`: its
  threshold is re-chosen before every round from the earlier ones and it spends 3/4 of
  the comparison's 1 − level, the rate limits the rest),
- or the cap is reached (``cap``).

The decision is a deterministic function of the stored rounds (:func:`outcome`), asked by
the audit after each stored round (:meth:`MechanismKind.stop_reason`) and again by the
summary, so a run killed and resumed, or rerun with a larger cap, continues the same
sequence: a round's trials depend only on the seed and its index, never on the cap
(:func:`plan_rounds` keeps the cap out of the units' key).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from dpaudit.bounds import EpsilonBound, MuBound
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.kinds.base import (
    Outputs,
    RunContext,
    SequentialSettings,
    UnitPlan,
    ordered_rounds,
    unit_index,
)
from dpaudit.mechanisms.schema import LEARNED, MechanismSection
from dpaudit.mechanisms.units import MechanismSpec, build_mechanism, in_verdict, sample_trials
from dpaudit.mechanisms.units import upper_bound as mechanism_upper_bound
from dpaudit.plugins import plugin_digest
from dpaudit.sequential import (
    RoundsOutcome,
    RoundsRunner,
    SequentialRule,
    cumulative_rounds,
    default_tuned_trials,
    outcome_bound,
    round_trials_at,
    rounds_to_reach,
    run_rounds,
)

#: The rounds' schedule in words (results.json, and the units' key: stored rounds of
#: another schedule are never reused).
SCHEDULE = (
    "round_trials per round up to 20 rounds, then cumulative trials of 25, 30, 40, 50, 60, "
    "80, 100, 125, ... x round_trials"
)


def settings(context: RunContext) -> SequentialSettings:
    if context.sequential is None:
        raise DpauditError("internal error: a sequential mechanism audit without its settings")
    return context.sequential


def rounds_cap(section: MechanismSection, context: RunContext) -> int:
    """Rounds allowed: the fewest whose cumulative trials reach ``trials`` (the last round
    is whole: the cap is rounded up to whole rounds, so a round never depends on the cap)."""
    return rounds_to_reach(section.trials, settings(context).round_trials)


def cap_trials(section: MechanismSection, context: RunContext) -> int:
    """Trials per arm of all the rounds allowed (the cap rounded up to whole rounds)."""
    return cumulative_rounds(rounds_cap(section, context))[-1] * settings(context).round_trials


def mechanism_round(spec: MechanismSpec, unit: str) -> dict[str, np.ndarray]:
    """Round ``unit`` of a sequential audit: its own trials (``spec.unit_size`` is
    ``round_trials``; :func:`dpaudit.sequential.round_trials_at`) from its own stream."""
    index = unit_index(unit)
    if index >= rounds_to_reach(spec.section.trials, spec.unit_size):
        raise ConfigError(
            f"unit {unit!r} is beyond the {spec.section.trials} trials of the sequential "
            "[mechanism] audit"
        )
    return sample_trials(spec, index, round_trials_at(index, spec.unit_size))


def check_sequential(section: MechanismSection) -> None:
    """What the sequential design supports, said before any work.

    Raises:
        ConfigError: a learned score (it would need a fitting share of its own), or a
            neighbour search (it audits several pairs).
    """
    if getattr(section, "search", None) is not None:
        raise ConfigError(
            "[audit] stopping = 'sequential' audits one pair of inputs; [mechanism.search] "
            "audits several: remove one of them"
        )
    if section.score == LEARNED:
        raise ConfigError(
            "[audit] stopping = 'sequential' counts a fixed score round by round; "
            "score = 'learned' is fitted on a share of all trials: remove one of them"
        )
    for key in ("learner", "fit_fraction"):
        if getattr(section, key) is not None:
            raise ConfigError(
                f"[audit] stopping = 'sequential' counts a fixed score round by round; "
                f"'{key}' configures a learned score, which it cannot fit: remove '{key}'"
            )


def plan_rounds(section: MechanismSection, context: RunContext) -> UnitPlan:
    """One unit per round, named as the fixed design's units; the key leaves out the cap.

    A round is the fixed design's unit with ``unit_size = round_trials``: its trials come
    from the stream (seed, index) alone. The spec's ``trials`` is the cap rounded up to
    whole rounds, and the key holds everything but the cap, so a rerun with a larger cap
    finds the rounds already run and continues.
    """
    check_sequential(section)
    s = settings(context)
    whole = section.model_copy(update={"trials": cap_trials(section, context)})
    n = rounds_cap(section, context)
    spec = MechanismSpec(
        section=whole, seed=context.seed, unit_size=s.round_trials, base_dir=str(context.base_dir)
    )
    key = spec.model_dump(
        mode="json",
        exclude={"base_dir": True, "section": {"trials", "claim", "threshold", "claim_curve"}},
    )
    return UnitPlan(
        fn=mechanism_round,
        spec=spec,
        units=tuple(f"mechanism-{i:05d}" for i in range(n)),
        key_data={
            **key,
            "stopping": "sequential",
            "schedule": SCHEDULE,
            "mechanism_file": plugin_digest(section.name, base_dir=context.base_dir)
            if ":" in section.name
            else None,
            **{
                f"{k}_file": plugin_digest(getattr(section, k), base_dir=context.base_dir)
                for k in ("log_density", "score")
                if getattr(section, k) is not None
            },
        },
        description="sampling mechanism (sequential rounds)",
    )


def _rules(
    section: MechanismSection, context: RunContext, *, level: float
) -> tuple[dict[str, SequentialRule], dict[str, bool]]:
    """The ε and μ rules; both comparisons' decisions come from :func:`in_verdict`, as the
    kind's ``comparisons`` count them."""
    mech = build_mechanism(section, str(context.base_dir))
    upper = mechanism_upper_bound(section, mech, context.delta)
    entered = in_verdict(upper)
    s = settings(context)
    rules = {}
    for parameter, value in (("epsilon", upper.epsilon), ("mu", upper.mu)):
        finite = entered[parameter] and value is not None and math.isfinite(value)
        target = None
        if s.certify_tightness is not None and finite and value is not None:
            target = s.certify_tightness * value
        if parameter == "epsilon" and s.certify_epsilon is not None:
            target = s.certify_epsilon if target is None else min(target, s.certify_epsilon)
        rules[parameter] = SequentialRule(
            parameter=parameter,  # type: ignore[arg-type]
            delta=upper.epsilon_delta if parameter == "epsilon" else 0.0,
            # In-verdict bounds at the verdict's per-bound level; the others are
            # descriptive and at the audit's level, outside the budget.
            level=level if entered[parameter] else context.confidence_level,
            upper=value if finite else None,
            target=target,
            tuned_trials=default_tuned_trials(s.round_trials),
        )
    return rules, entered


def _rounds(outputs: Outputs) -> list[str]:
    return ordered_rounds(outputs)


def outcome(
    section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
) -> RoundsOutcome:
    """Feed the stored rounds in order to both tests (:func:`dpaudit.sequential.run_rounds`);
    stop at the first round where either decides (a violation before a target, as the gate
    would read them).

    Raises:
        DpauditError: the rounds are not 0, 1, 2, ... (a stored round is missing).
    """
    rules, entered = _rules(section, context, level=level)
    rounds = [(outputs[u]["negative"], outputs[u]["positive"]) for u in _rounds(outputs)]
    return run_rounds(rounds, rules, entered=entered, last_round=rounds_cap(section, context) - 1)


class RoundsMonitor:
    """The decision after each round as the audit runs them, kept between rounds
    (:class:`dpaudit.sequential.RoundsRunner`): what :func:`stop_reason` would say after
    the same rounds, without reading the earlier rounds again."""

    def __init__(self, section: MechanismSection, context: RunContext, *, level: float) -> None:
        rules, entered = _rules(section, context, level=level)
        last = rounds_cap(section, context) - 1
        self._runner = RoundsRunner(rules, entered=entered, last_round=last)

    def add(self, unit: str, stored: Mapping[str, np.ndarray]) -> str:
        """The next round's stored unit (rounds in order from round 0); the decision.

        Raises:
            DpauditError: a round out of order.
        """
        if unit_index(unit) != self._runner.rounds:
            raise DpauditError(
                f"a sequential audit reads its rounds in order from round 0; got {unit!r} "
                f"after {self._runner.rounds} round(s)"
            )
        return self._runner.add(stored["negative"], stored["positive"])


def stop_reason(
    section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
) -> str:
    """The decision after the rounds stored so far (the audit asks after each round)."""
    if len(outputs) < 2:
        return "continue"  # round 0 only chooses the thresholds
    return outcome(section, context, outputs, level=level).decision


def fixed_plan(
    section: MechanismSection, context: RunContext, result: RoundsOutcome, parameter: str
) -> dict[str, Any] | None:
    """The fixed design's plan for what the sequential test reached (:mod:`dpaudit.planning`):
    for a violation, the trials an ideal attack needs for its expected bound to reach the
    upper bound; for a target, to reach the target. Only for the built-in scalar Laplace
    and Gaussian mechanisms, whose trade-off curve is known."""
    from dpaudit.planning import plan_trials

    mech = build_mechanism(section, str(context.base_dir))
    params = mech.parameters
    if mech.name == "laplace" and "scale" in params and "distance" not in params:
        tradeoff, kwargs = "laplace", {"mechanism_epsilon": params["sensitivity"] / params["scale"]}
    elif mech.name == "gaussian" and "sigma" in params and "distance" not in params:
        tradeoff, kwargs = "gaussian", {"mechanism_mu": params["sensitivity"] / params["sigma"]}
    else:
        return None
    goal = result.uppers[parameter] if result.decision == "violation" else result.targets[parameter]
    if goal is None:
        return None
    try:
        plan = plan_trials(
            goal,
            context.delta if parameter == "epsilon" else 0.0,
            result.levels[parameter],
            tradeoff=tradeoff,  # type: ignore[arg-type]
            parameter=parameter,  # type: ignore[arg-type]
            threshold="split",
            **kwargs,
        )
    except DpauditError as exc:
        return {"goal": goal, "trials_per_arm": None, "note": str(exc)}
    return {
        "goal": goal,
        "trials_per_arm": plan.trials_per_arm,
        "threshold": "split",
        "trials_saved": plan.trials_per_arm - result.trials,
    }


def describe(
    section: MechanismSection, context: RunContext, result: RoundsOutcome
) -> dict[str, Any]:
    """The ``sequential`` details of the test in results.json."""
    s = settings(context)
    stopped = (
        next(p for p in result.paths if result.paths[p][-1].decision == result.decision)
        if result.decision != "continue" and result.paths[next(iter(result.paths))]
        else None
    )
    return {
        "trials_used": {"negative": result.trials, "positive": result.trials},
        "stopped_because": result.decision,
        "decided_by": stopped,
        "rounds": result.rounds,
        "round_trials": s.round_trials,
        "schedule": SCHEDULE,
        "cap_trials": cap_trials(section, context),
        "trials_saved_against_cap": cap_trials(section, context) - result.trials,
        "thresholds": dict(result.thresholds),
        "targets": dict(result.targets),
        "path": {p: [pt.to_dict() for pt in pts] for p, pts in result.paths.items()},
        "fixed_plan": {p: fixed_plan(section, context, result, p) for p in result.paths},
    }


def sequential_summary(
    section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
) -> tuple[EpsilonBound, MuBound, dict[str, Any], Outputs]:
    """The bounds, the test's ``sequential`` details, and the rounds used (the summary
    reads only those: rounds stored after the decision are never looked at).

    Raises:
        DpauditError: only round 0 is stored (no bound yet).
    """
    if len(outputs) < 2:
        raise DpauditError(
            "a sequential audit needs round 0 (threshold) and at least one counted round; "
            "raise [mechanism] trials to at least 2 × [audit] round_trials"
        )
    result = outcome(section, context, outputs, level=level)
    mech = build_mechanism(section, str(context.base_dir))
    delta = mechanism_upper_bound(section, mech, context.delta).epsilon_delta
    eps = outcome_bound(result, "epsilon", delta=delta)
    mu = outcome_bound(result, "mu", delta=delta)
    assert isinstance(eps, EpsilonBound)  # by the parameter asked for
    assert isinstance(mu, MuBound)
    used = _rounds(outputs)[: result.rounds]
    return eps, mu, describe(section, context, result), {u: outputs[u] for u in used}
