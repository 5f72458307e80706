"""The ``dpsgd`` kind: canary audits of DP training, many runs and one run.

Many runs: 2·``trials`` models are trained by the configured trainer on the same data,
the odd-numbered ones with the canary, the even-numbered ones without; each model gives
one score (black-box: minus the canary's loss on the final model; white-box: the sum over
steps of the log-likelihood ratio of each privatised update's projection on a Dirac
gradient canary, the Neyman–Pearson test of the Poisson mixture (``score =
"likelihood-ratio"``, :mod:`dpaudit.theory.whitebox`), or the plain sum of the projections
(``score = "sum"``)). The scores of the two arms are independent trials of H0 (canary
out) and H1 (canary in), so the ε and μ lower bounds of :mod:`dpaudit.bounds` are
``rigorous-multi-run``. They are held against the upper bounds read from what the trainer
says it RAN (its DPSGDRecords through the accountant, or its Claim) by
:mod:`dpaudit.accounting.upper_bounds`.

One run: m Dirac canaries on m distinct coordinates that no real example's gradient
touches, each included by an independent fair coin in ONE DP-SGD run; the auditor guesses
"in" for the r/2 largest scores (each canary's transcript scored as ``score`` says) and
"out" for the r/2 smallest, and the number of correct guesses gives the one-run bound
(Steinke, Nasr, Jagielski 2023, Thm. 3.1).

This module is the adapter between the audit and the family's modules: the tables
(:mod:`~dpaudit.dpsgd.schema`), the set-up (:mod:`~dpaudit.dpsgd.setup`), the units
(:mod:`~dpaudit.dpsgd.units`, :mod:`~dpaudit.dpsgd.one_run`) and the summary
(:mod:`~dpaudit.dpsgd.summary`). It loads none of them but the tables until the audit
runs, so that validating an audit file needs no torch, scipy or dp-accounting. Units store
raw outputs only; every bound is computed in :meth:`DpsgdKind.summarise`, after the store.
"""

from __future__ import annotations

from dpaudit.bounds import require_design
from dpaudit.dpsgd import language, sequential, setup, summary, units
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.errors import ConfigError
from dpaudit.kinds.base import (
    NO_UNITS,
    AuditKind,
    KindSummary,
    Outputs,
    RunContext,
    UnitPlan,
    dataset_digest,
)
from dpaudit.plugins import load_plugin, plugin_digest

__all__ = ["KIND", "DpsgdKind"]


def _unit_size(s: DpsgdSection, default: int) -> int:
    # The execution default (25 000, sized for scalar mechanism samples) is too coarse for
    # models: cap at 2 000 so a killed run loses little and workers share the load.
    return s.models_per_unit or max(1, min(default, 2000))


class DpsgdKind(AuditKind[DpsgdSection]):
    name = "dpsgd"
    section = DpsgdSection
    description = "canary audits of DP training (DP-SGD, DP-GD, ERM trainers, yours)"

    def check_runnable(self, section: DpsgdSection, context: RunContext) -> None:
        if section.language is not None:
            if context.sequential is not None:
                raise ConfigError("[dpsgd.language] is one run; it has no sequential rounds")
            return
        if context.sequential is not None:  # rounds of a sequential test
            if section.checkpoints is not None:
                raise ConfigError(
                    "[audit] stopping = 'sequential' audits one released model per run; "
                    "give one checkpoint t, not a list."
                )
            sequential.check_sequential(section)
        if ":" not in section.trainer:
            _check_trials(section, context)
            return
        # the user trainer imports and names a callable; one that can check itself on two
        # rows (an Opacus loop) does so now, before any model trains
        trainer = load_plugin(section.trainer, base_dir=context.base_dir, what="trainer")
        preflight = getattr(trainer, "preflight", None)
        if callable(preflight):
            X, y = setup.preflight_rows(section, context.seed, str(context.base_dir))
            preflight(X, y, white_box=section.threat_model == "white-box")

    def plan(self, section: DpsgdSection, context: RunContext) -> UnitPlan:
        if section.language is not None:
            return language.language_plan(section.language, context)
        if context.sequential is not None:  # rounds of a sequential test
            return sequential.plan_rounds(section, context)
        spec = DpsgdSpec(
            section=section,
            seed=context.seed,
            unit_size=_unit_size(section, context.unit_size),
            base_dir=str(context.base_dir),
        )
        return UnitPlan(
            fn=units.dpsgd_unit,
            spec=spec,
            units=units.unit_names(spec),
            key_data={
                # the claim ([dpsgd.claim]) changes no model: editing it reuses every unit
                **spec.model_dump(mode="json", exclude={"base_dir": True, "section": {"claim"}}),
                "data_file": dataset_digest(section.dataset, context.base_dir),
                "trainer_file": plugin_digest(section.trainer, base_dir=context.base_dir)
                if ":" in section.trainer
                else None,
                **units.trainer_libraries(section.trainer, context.base_dir),
            },
            description="training canary models",
        )

    def comparisons(self, section: DpsgdSection, context: RunContext, outputs: Outputs) -> int:
        if section.language is not None:
            return 1  # the one-run ε and μ bounds share one share; the claim check none
        if context.sequential is not None:  # fixed before the first round trains
            return sequential.COMPARISONS
        # The same list summarise() marks as in the verdict, counted before any bound.
        return summary.count_in_verdict(section, outputs, delta=context.delta)

    def planned_comparisons(self, section: DpsgdSection, context: RunContext) -> int:
        """Exact for the language and sequential designs (counted from the table); for the
        fixed design the most its verdict can hold (:func:`~dpaudit.dpsgd.summary.most_in_verdict`),
        since what enters depends on what the trainer recorded."""
        if section.language is not None or context.sequential is not None:
            return self.comparisons(section, context, NO_UNITS)
        return summary.most_in_verdict(section)

    def summarise(
        self, section: DpsgdSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        if section.language is not None:
            return language.language_summary(
                section.language, context, outputs, level=level, claim=section.claim
            )
        if context.sequential is not None:
            return sequential.sequential_summary(section, context, outputs, level=level)
        return summary.summarise(section, context, outputs, level=level)

    def is_sequential(self, section: DpsgdSection, context: RunContext) -> bool:
        return context.sequential is not None

    def stop_reason(
        self, section: DpsgdSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> str:
        return sequential.stop_reason(section, context, outputs, level=level)


def _check_trials(section: DpsgdSection, context: RunContext) -> None:
    """Too few models per arm for any canary bound above 0, even with a perfect attack:
    said before any model trains, with the number needed.

    Only for dpaudit's own trainers: their records state no claim, so the many-run
    canary bounds are the audit's only test. A plug-in trainer may state one (an Opacus
    loop's ``make_private_with_epsilon``), and then so few models still test the claim
    against what ran (the many-run bounds are skipped, not refused). A design that
    proves nothing at the audit's confidence level proves nothing at the verdict's
    higher per-bound level either.
    """
    if section.trials == 0:
        return  # a one-run audit only
    require_design(
        section.trials,
        delta=context.delta,
        confidence_level=context.confidence_level,
        threshold=section.threshold,
        what=f"[dpsgd] trials = {section.trials} models per arm",
    )


KIND = DpsgdKind()
