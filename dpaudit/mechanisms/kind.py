"""The ``mechanism`` kind: a DP mechanism run many times on two neighbouring inputs.

Each trial runs the mechanism once on D (H0) and once on D' (H1); the outputs are the
scores. Trials are independent, so the ε and μ lower bounds of :mod:`dpaudit.bounds` are
rigorous. They are held against the mechanism's claim (``[mechanism.claim]``) or, for a
built-in without one, the guarantee its parameters give.

The table is :mod:`~dpaudit.mechanisms.schema`, the work units
:mod:`~dpaudit.mechanisms.units` and the summary :mod:`~dpaudit.mechanisms.summary`
(loaded when the kind summarises: validating a file needs neither the bounds nor scipy's
statistics).
"""

from __future__ import annotations

import math
from dataclasses import replace

from dpaudit.accounting.upper_bounds import UpperBound
from dpaudit.bounds import require_design
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.kinds.base import (
    AuditKind,
    KindSummary,
    Outputs,
    RoundMonitor,
    RunContext,
    UnitPlan,
    claim_left_out,
)
from dpaudit.mechanisms import search, sequential, summary
from dpaudit.mechanisms.auto_score import choose_score, resolved
from dpaudit.mechanisms.schema import (
    EXACT_TRIALS_LIMIT,
    LEARNED,
    LEARNED_EXACT_LIMIT,
    MechanismSection,
)
from dpaudit.mechanisms.units import (
    MechanismSpec,
    build_mechanism,
    in_verdict,
    mechanism_unit,
    upper_bound,
)
from dpaudit.plugins import plugin_digest


class MechanismKind(AuditKind[MechanismSection]):
    name = "mechanism"
    section = MechanismSection
    description = (
        "a DP mechanism run on two neighbouring inputs (Laplace, Gaussian, RR, local "
        "randomisers, yours)"
    )

    def check_runnable(self, section: MechanismSection, context: RunContext) -> None:
        section = _scored(section, context)
        if section.search is not None and context.sequential is not None:
            raise ConfigError(
                "[mechanism.search] audits its chosen pairs with a fixed number of trials; "
                "it cannot run with [audit] stopping = 'sequential' (remove one of them)"
            )
        mech = build_mechanism(section, str(context.base_dir))
        try:  # the upper bound at the audit's δ: what summarise will need, checked now
            upper_bound(section, mech, context.delta)
        except DpauditError as exc:
            raise ConfigError(f"[audit] delta = {context.delta:g} does not fit: {exc}") from None
        self._check_trials(section, context, upper_bound(section, mech, context.delta))

    @staticmethod
    def _check_trials(section: MechanismSection, context: RunContext, upper: UpperBound) -> None:
        """Too few trials for any bound above 0 even with a perfect attack: said now, with
        the number needed, not after sampling (the verdict's per-bound level is at least
        c, so a design that proves nothing at c proves nothing in the verdict either)."""
        if section.score == LEARNED or section.trials > EXACT_TRIALS_LIMIT:
            return  # the learned path counts fewer; the streamed path always has enough
        require_design(
            section.trials,
            delta=upper.epsilon_delta,
            confidence_level=context.confidence_level,
            threshold=section.threshold,
            what=f"[mechanism] trials = {section.trials} per arm",
        )

    def size_notes(self, section: MechanismSection, context: RunContext) -> list[str]:
        section = _scored(section, context)
        limit = LEARNED_EXACT_LIMIT if section.score == LEARNED else EXACT_TRIALS_LIMIT
        if section.trials <= limit:
            return []
        size = min(context.unit_size, section.trials)
        units = -(-section.trials // size)
        disk = section.trials * 2 * 8  # float64 outputs on D and D'
        if section.score == LEARNED:
            return [
                f"mechanism: {section.trials:,} trials per arm in {units:,} units of {size:,}, "
                f"each holding raw outputs: about {disk / 2**30:.2g} GiB of unit files per "
                f"output coordinate; the score is fitted on the first units, and memory stays "
                f"near one unit's outputs plus the fitting trials (units are read one at a "
                f"time above {LEARNED_EXACT_LIMIT:,} trials per arm)"
            ]
        return [
            f"mechanism: {section.trials:,} trials per arm in {units:,} units of {size:,}: about "
            f"{disk / 2**30:.2g} GiB of unit files in the run directory; memory stays near one "
            f"unit ({size * 2 * 8 / 2**20:.3g} MiB of outputs) plus about 150 MB whatever the "
            f"number of trials (units are read one at a time above {EXACT_TRIALS_LIMIT:,} "
            "trials per arm)"
        ]

    def plan(self, section: MechanismSection, context: RunContext) -> UnitPlan:
        section = _scored(section, context)
        if context.sequential is not None:  # rounds of a sequential test
            return sequential.plan_rounds(section, context)
        if section.search is not None:  # screening decides the pairs the units run
            return search.search_plan(section, context)
        spec = MechanismSpec(
            section=section,
            seed=context.seed,
            unit_size=context.unit_size,
            base_dir=str(context.base_dir),
        )
        n = math.ceil(section.trials / context.unit_size)
        return UnitPlan(
            fn=mechanism_unit,
            spec=spec,
            units=tuple(f"mechanism-{i:05d}" for i in range(n)),
            key_data={
                # how a learned score is fitted, which tests the summary runs and what is
                # claimed change no unit: the units hold raw outputs (or scores)
                **claim_left_out(
                    spec.model_dump(
                        mode="json",
                        exclude={
                            "base_dir": True,
                            "section": {"learner", "fit_fraction", "claim_curve"},
                        },
                    ),
                    "section",
                    "claim",
                ),
                # a user mechanism's code is part of what its units are
                "mechanism_file": plugin_digest(section.name, base_dir=context.base_dir)
                if ":" in section.name
                else None,
                # ... and so is the code that scores its outputs
                **{
                    f"{key}_file": plugin_digest(getattr(section, key), base_dir=context.base_dir)
                    for key in ("log_density", "score")
                    if getattr(section, key) not in (None, LEARNED)
                },
            },
            description="sampling mechanism",
        )

    def comparisons(self, section: MechanismSection, context: RunContext, outputs: Outputs) -> int:
        section = _scored(section, context)
        mech = build_mechanism(section, str(context.base_dir))
        upper = upper_bound(section, mech, context.delta)
        per_pair = sum(in_verdict(upper).values())
        if section.search is not None:  # k audited pairs, each a Bonferroni share
            return per_pair * search.audited_pairs(section, context.seed)
        # the claim's exact curve, where one is known: one more share (summary decides)
        return per_pair + (summary.declared_curve(section, context, upper) is not None)

    def summarise(
        self, section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        choice = choose_score(section, sequential=context.sequential is not None)
        section = _scored(section, context)
        if section.search is not None:
            found = search.search_summary(section, context, outputs, level=level)
        else:
            found = summary.mechanism_summary(section, context, outputs, level=level)
        # which score was counted, and why: in results.json's test and in the report
        tests = tuple(
            t.with_details(
                score=choice.to_dict(learner=(t.details.get("learned") or {}).get("learner"))
            )
            for t in found.tests
        )
        return replace(found, tests=tests)

    def is_sequential(self, section: MechanismSection, context: RunContext) -> bool:
        return context.sequential is not None

    def stop_reason(
        self, section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> str:
        return sequential.stop_reason(_scored(section, context), context, outputs, level=level)

    def round_monitor(
        self, section: MechanismSection, context: RunContext, *, level: float
    ) -> RoundMonitor:
        return sequential.RoundsMonitor(_scored(section, context), context, level=level)


def _scored(section: MechanismSection, context: RunContext) -> MechanismSection:
    """The table with ``score = "auto"`` resolved (:mod:`dpaudit.mechanisms.auto_score`):
    every method of the kind sees the score the audit counts."""
    return resolved(section, sequential=context.sequential is not None)


KIND = MechanismKind()
