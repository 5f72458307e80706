"""Sequential many-run canary audits of DP training (``[audit] stopping = "sequential"``).

The models arrive one round at a time: a round is one unit of ``2·round_trials`` models
(model g trained with the canary iff g is odd, as in the fixed design, so every round
holds ``round_trials`` models per arm). Round 0 chooses the thresholds of the ε and μ
tests and is never counted; after every later round the anytime-valid limits of FPR and
FNR (:mod:`dpaudit.sequential`, the machinery the mechanism kind uses: the same tests,
the same decision rule, the same bounds) give the bounds, and the audit stops at the
first round where

- an ε or μ lower bound exceeds the upper bound read from what the models RAN (their
  DPSGDRecords through the accountant, or their Claim: ``violation``, exit 1),
- a point of the sequential claim-curve test (:mod:`dpaudit.sequential.curve`: the
  anytime-valid limits of FPR and FNR at a few thresholds placed on round 0) lies below
  the accountant's whole trade-off curve of what the records say ran (``violation``,
  exit 1): far more powerful than μ when the run departs from its records in the middle
  of the curve rather than in a far tail,
- a lower bound reaches what ``certify_tightness`` or ``certify_epsilon`` asks
  (``target``),
- or the cap, ``[dpsgd] trials`` rounded up to whole rounds, is reached (``cap``).

What enters the verdict is fixed before any model trains, since the verdict's per-bound
level must be known when the first decision is taken: the many-run ε, μ and claim-curve
comparisons, three shares of the budget as in the fixed design (:mod:`dpaudit.dpsgd
.summary`), whatever the records say (an infinite upper bound, or records without a
DP-SGD curve, then hold their share unused: conservative). The grey-box p-value
tests would need their shares counted from observations not yet made, so a sequential
audit reports only the deterministic grey-box checks (and a stated claim against the
records); run the fixed design for the others. The one-run audit is a single training
run with nothing to sequence: it is refused here.

The decision is a deterministic function of the stored rounds (:func:`outcome`): a run
killed with ``kill -9`` resumes from its stored rounds with the same decisions, and a rerun
with a larger cap finds its rounds (the cap is not part of the units' key) and continues
the same sequence, since model g's training depends only on the seed and g.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from dpaudit.accounting.upper_bounds import UpperBound
from dpaudit.bounds import EpsilonBound, MuBound
from dpaudit.dpsgd import summary as fixed
from dpaudit.dpsgd import units
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.kinds.base import (
    KindSummary,
    Outputs,
    RunContext,
    SequentialSettings,
    UnitPlan,
    dataset_digest,
    ordered_rounds,
)
from dpaudit.plugins import plugin_digest
from dpaudit.records import DPSGDRecord
from dpaudit.results import (
    Comparison,
    gdp_implied_comparison,
    null_result_warning,
    paired_comparisons,
)
from dpaudit.sequential import (
    ExtraTest,
    RoundsOutcome,
    SequentialRule,
    default_tuned_trials,
    outcome_bound,
    run_rounds,
)
from dpaudit.sequential.curve import (
    CURVE_METHOD,
    CurvePoint,
    CurveRule,
    SequentialCurveTest,
    curve_thresholds,
    dpsgd_curve_bound,
    dpsgd_curve_rule,
)

__all__ = [
    "COMPARISONS",
    "CURVE",
    "check_sequential",
    "outcome",
    "plan_rounds",
    "rounds_cap",
    "sequential_summary",
    "stop_reason",
]

#: In-verdict comparisons of a sequential dpsgd audit, fixed in advance: many-run ε, μ and
#: the claim curve (the fixed design's three many-run shares).
COMPARISONS = 3
#: The name of the sequential claim-curve test in the outcome's paths and results.json.
CURVE = "claim-curve"


def settings(context: RunContext) -> SequentialSettings:
    if context.sequential is None:
        raise DpauditError("internal error: a sequential dpsgd audit without its settings")
    return context.sequential


def rounds_cap(section: DpsgdSection, context: RunContext) -> int:
    """Rounds allowed: ⌈trials / round_trials⌉, at least 2 (round 0 and one counted)."""
    return max(2, math.ceil(section.trials / settings(context).round_trials))


def check_sequential(section: DpsgdSection) -> None:
    """What the sequential design supports, said before any model trains.

    Raises:
        ConfigError: a one-run audit (one training run: nothing to sequence), or no
            many-run models (``trials = 0``).
    """
    if section.one_run is not None:
        raise ConfigError(
            "[audit] stopping = 'sequential' trains the many-run models round by round; "
            "[dpsgd.one_run] is a single training run with nothing to sequence: remove one "
            "of them (audit the one run in a fixed-design file)"
        )
    if section.trials == 0:
        raise ConfigError(
            "[audit] stopping = 'sequential' needs many-run models: set [dpsgd] trials (the "
            "cap, models per arm) to at least 2 × [audit] round_trials"
        )


def plan_rounds(section: DpsgdSection, context: RunContext) -> UnitPlan:
    """One unit per round of ``2·round_trials`` models; the key leaves out the cap.

    A round is the fixed design's unit with ``unit_size = 2·round_trials``: model g trains
    from (seed, g) alone. The spec's ``trials`` is the cap rounded up to whole rounds, and
    the key holds everything but the cap (and the fixed design's ``models_per_unit``), so
    a rerun with a larger cap finds the rounds already run and continues.
    """
    check_sequential(section)
    s = settings(context)
    n = rounds_cap(section, context)
    whole = section.model_copy(update={"trials": n * s.round_trials, "models_per_unit": None})
    spec = DpsgdSpec(
        section=whole,
        seed=context.seed,
        unit_size=2 * s.round_trials,
        base_dir=str(context.base_dir),
    )
    key = spec.model_dump(
        mode="json",
        exclude={"base_dir": True, "section": {"trials", "models_per_unit", "claim"}},
    )
    return UnitPlan(
        fn=units.dpsgd_unit,
        spec=spec,
        units=tuple(f"dpsgd-{i:05d}" for i in range(n)),
        key_data={
            **key,
            "stopping": "sequential",
            "data_file": dataset_digest(section.dataset, context.base_dir),
            "trainer_file": plugin_digest(section.trainer, base_dir=context.base_dir)
            if ":" in section.trainer
            else None,
            **units.trainer_libraries(section.trainer, context.base_dir),
        },
        description="training canary models (sequential rounds)",
    )


def _ordered(outputs: Outputs) -> list[str]:
    return ordered_rounds(outputs)


def _arms(part: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(part["scores"], dtype=float)
    inc = np.asarray(part["included"]).astype(bool)
    return scores[~inc], scores[inc]


def _rules(upper: UpperBound, s: SequentialSettings, *, level: float) -> dict[str, SequentialRule]:
    """The ε and μ rules, both in the verdict at ``level``; an infinite upper bound has
    nothing to violate (its share is held unused)."""
    rules = {}
    for parameter, value in (("epsilon", upper.epsilon), ("mu", upper.mu)):
        finite = value is not None and math.isfinite(value)
        target = None
        if s.certify_tightness is not None and finite and value is not None:
            target = s.certify_tightness * value
        if parameter == "epsilon" and s.certify_epsilon is not None:
            target = s.certify_epsilon if target is None else min(target, s.certify_epsilon)
        rules[parameter] = SequentialRule(
            parameter=parameter,  # type: ignore[arg-type]
            delta=upper.epsilon_delta if parameter == "epsilon" else 0.0,
            level=level,
            upper=value if finite else None,
            target=target,
            tuned_trials=default_tuned_trials(s.round_trials),
        )
    return rules


def _round0_record(outputs: Outputs) -> DPSGDRecord | None:
    """The least private record of round 0's models (smallest σ, largest q and T), whose
    trade-off curve the claim-curve test holds against; None when round 0's units carry
    no DP-SGD records with σ > 0 (the test's share is then held unused)."""
    first = outputs[_ordered(outputs)[0]]
    return fixed._curve_record(fixed.StoredUnits((first,), None, None, ()))


def _curve_rule(
    record: DPSGDRecord | None, s: SequentialSettings, *, level: float
) -> CurveRule | None:
    if record is None:
        return None
    return dpsgd_curve_rule(
        noise_multiplier=record.noise_multiplier,
        sampling_rate=record.sampling_rate,
        steps=record.steps,
        level=level,
        tuned_trials=default_tuned_trials(s.round_trials),
    )


def _run(
    rounds: list[tuple[np.ndarray, np.ndarray]],
    rules: dict[str, SequentialRule],
    curve: CurveRule | None,
    *,
    last_round: int,
) -> RoundsOutcome:
    """Feed the stored rounds in order to the ε and μ tests and the claim-curve test;
    stop at the first round where the combined decision is not ``"continue"`` (every test
    here is in the verdict).

    The claim-curve test has no single upper value (its decision is a point below a
    curve) and no target to certify; each test's limits hold at every round at once, so
    stopping on whichever decides first keeps each one's level, and the verdict's union
    bound over the three shares holds as in the fixed design.
    """
    extra = {}
    if curve is not None:
        extra[CURVE] = ExtraTest(
            start=lambda neg, pos: SequentialCurveTest(neg, pos, curve), level=curve.level
        )
    entered = dict.fromkeys([*rules, *extra], True)
    return run_rounds(rounds, rules, entered=entered, last_round=last_round, extra=extra)


def outcome(
    section: DpsgdSection, context: RunContext, outputs: Outputs, *, level: float
) -> tuple[RoundsOutcome, UpperBound]:
    """The sequential test after the stored rounds, and the upper bound it was held
    against (read from what round 0's models ran: every round trains the same way, and
    a later round's records are checked against it by the summary's claim check).

    The outcome's paths hold ``"epsilon"``, ``"mu"`` and, when round 0's records state a
    DP-SGD run, :data:`CURVE` (:mod:`dpaudit.sequential.curve`).

    Raises:
        DpauditError: a stored round is missing (the rounds are not 0, 1, 2, ...).
    """
    names = _ordered(outputs)
    round0 = [outputs[names[0]]]
    upper = fixed._many_run_upper(
        round0,
        context.delta,
        claim=fixed.stated_claim(section, round0),
        source=fixed.claim_source(section),
    )
    assert upper is not None  # one many-run unit at least
    s = settings(context)
    rules = _rules(upper, s, level=level)
    curve = _curve_rule(_round0_record(outputs), s, level=level)
    result = _run(
        [_arms(outputs[u]) for u in names],
        rules,
        curve,
        last_round=rounds_cap(section, context) - 1,
    )
    return result, upper


def stop_reason(
    section: DpsgdSection, context: RunContext, outputs: Outputs, *, level: float
) -> str:
    """The decision after the rounds stored so far (the audit asks after each round)."""
    if len(outputs) < 2:
        return "continue"  # round 0 only chooses the thresholds
    return outcome(section, context, outputs, level=level)[0].decision


def describe(
    section: DpsgdSection,
    context: RunContext,
    result: RoundsOutcome,
    curve: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``sequential`` details of the test in results.json (``curve``: the claim-curve
    test's own, or None when round 0's records state no DP-SGD run)."""
    s = settings(context)
    cap = rounds_cap(section, context) * s.round_trials
    return {
        "trials_used": {"negative": result.trials, "positive": result.trials},
        "stopped_because": result.decision,
        "decided_by": result.decided_by,
        "rounds": result.rounds,
        "round_trials": s.round_trials,
        "cap_trials": cap,
        "trials_saved_against_cap": cap - result.trials,
        "thresholds": dict(result.thresholds),
        "targets": dict(result.targets),
        "path": {p: [pt.to_dict() for pt in pts] for p, pts in result.paths.items()},
        # no closed-form trade-off curve of a trained model: no fixed plan to set beside
        "fixed_plan": {p: None for p in result.paths},
        "claim_curve": curve,
    }


def sequential_summary(
    section: DpsgdSection, context: RunContext, outputs: Outputs, *, level: float
) -> KindSummary:
    """The many-run comparisons the sequential test stopped with (ε, μ and the claim curve,
    all in the verdict at ``level``), its test with the ``sequential`` details, the
    deterministic grey-box checks and the claim check, all of the rounds used (rounds
    stored after the decision are never read).

    Raises:
        DpauditError: only round 0 is stored (no bound yet).
    """
    if len(outputs) < 2:
        raise DpauditError(
            "a sequential audit needs round 0 (threshold) and at least one counted round; "
            "raise [dpsgd] trials to at least 2 × [audit] round_trials"
        )
    result, upper = outcome(section, context, outputs, level=level)
    used = {u: outputs[u] for u in _ordered(outputs)[: result.rounds]}
    stored = fixed.read_units(section, used, delta=context.delta)
    eps_lb = outcome_bound(result, "epsilon", delta=upper.epsilon_delta)
    mu_lb = outcome_bound(result, "mu", delta=upper.epsilon_delta)
    assert isinstance(eps_lb, EpsilonBound)
    assert isinstance(mu_lb, MuBound)
    label = fixed._label(section)
    comparisons = paired_comparisons(
        label,
        eps_lb,
        mu_lb,
        upper_epsilon=upper.epsilon,
        upper_mu=upper.mu,
        source=upper.source,
        in_verdict=("epsilon", "mu"),
    )
    curve_comparison, curve_details = _curve_comparison(
        section, context, outputs, result, label=label, level=level
    )
    comparisons.append(curve_comparison)
    if mu_lb.value > 0 and upper.mu is not None and upper.mu_finite:
        comparisons.append(
            gdp_implied_comparison(label, mu_lb, upper.mu, delta=context.delta, source=upper.source)
        )
    parts = [_arms(p) for p in used.values()]
    neg = np.concatenate([n for n, _ in parts])
    pos = np.concatenate([p for _, p in parts])
    test = fixed._many_run_test(
        section, upper, neg, pos, mu_lb, context.confidence_level, context.base_dir
    ).with_details(sequential=describe(section, context, result, curve_details))
    warnings = []
    if eps_lb.value == 0.0 and mu_lb.value == 0.0:
        warnings.append(null_result_warning(label, f"{result.trials} models per arm", eps_lb))
    skipped = [t.check for t in stored.greybox if t.chance]
    if skipped:
        warnings.append(
            f"{label}: a sequential audit fixes its verdict's shares before the first model "
            f"trains, so the grey-box p-value tests ({', '.join(skipped)}) were not run; "
            "run the fixed design (stopping = 'fixed') for them."
        )
    checks = tuple(
        fixed._greybox_check(t, 1.0 - level, in_verdict=False)
        for t in stored.greybox
        if not t.chance
    ) + fixed._claim_check(stored, context.delta)
    return KindSummary(
        (test,), tuple(comparisons), (), tuple(warnings), fixed._data_hash(section), checks=checks
    )


def _curve_comparison(
    section: DpsgdSection,
    context: RunContext,
    outputs: Outputs,
    result: RoundsOutcome,
    *,
    label: str,
    level: float,
) -> tuple[Any, dict[str, Any] | None]:
    """The claim-curve comparison the sequential test stopped with (in the verdict at
    ``level``: its share is announced whatever the records say), and its details for
    results.json.

    Its lower bound is the accountant's ε of the effective noise multiplier σ′ when the
    test stopped with a violation, else 0 (:func:`dpaudit.sequential.curve
    .dpsgd_curve_bound`), held against the accountant's ε of what ran, as in the fixed
    design. Without a DP-SGD record on round 0 nothing is tested: the bound is 0 against
    no upper bound, its share unused.
    """
    test = f"{label} (claim curve)"
    record = _round0_record(outputs)
    if record is None or CURVE not in result.paths:
        lower = EpsilonBound(
            value=0.0,
            confidence_level=level,
            delta=context.delta,
            method=CURVE_METHOD,
            threshold="sequential",
            validity="rigorous-multi-run",
            details={"not_tested": "the records of round 0 state no DP-SGD run with σ > 0"},
        )
        source = "none: the records state no DP-SGD run whose curve could be tested"
        comparison = Comparison(
            test=test,
            parameter="epsilon",
            lower=lower,
            upper=None,
            upper_source=source,
            in_verdict=True,
        )
        return comparison, None
    first = outputs[_ordered(outputs)[0]]
    rule = _curve_rule(record, settings(context), level=level)
    assert rule is not None
    thresholds = curve_thresholds(_arms(first)[0], rule.fpr_levels)
    path = [p for p in result.paths[CURVE] if isinstance(p, CurvePoint)]
    bound, accountant = dpsgd_curve_bound(
        thresholds,
        path,
        noise_multiplier=record.noise_multiplier,
        sampling_rate=record.sampling_rate,
        steps=record.steps,
        delta=context.delta,
        level=level,
        rounds=result.rounds,
        stopped_because=result.decision,
    )
    details = {
        "claim": bound.details["claim"],
        "decision_curve": rule.curve.name,
        "thresholds": [float(t) for t in thresholds],
        "fpr_levels": list(rule.fpr_levels),
        "level": rule.level,
        "violated": path[-1].decision == "violation",
    }
    comparison = Comparison(
        test=test,
        parameter="epsilon",
        lower=bound,
        upper=accountant,
        # the lower value reads σ′ through the accounted q and T; the violation does not
        upper_source="accountant's trade-off curve of what ran (ε of the effective σ′)",
        in_verdict=True,
    )
    return comparison, details
