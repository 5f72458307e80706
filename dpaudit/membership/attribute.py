"""The ``attribute`` kind: Yeom et al.'s attribute inference on the fair-coin target.

A thin adapter (importing it loads no torch): a unit trains the same target as the
``membership`` kind (same recipe, same seed) and stores the attack's raw guesses
(:func:`dpaudit.membership.trained.attribute_unit`); accuracies, the advantage with its
intervals, and the DP-implied bound (at the audit's δ, from the target's DP-SGD record)
come after the store (:func:`dpaudit.membership.verdict.attribute_summary`). Nothing of
it enters the verdict: accuracies and advantages are gated by policy.

References:
    Yeom, Giacomelli, Fredrikson, Jha (2018), IEEE CSF (attribute inference and its
    advantage).
"""

from __future__ import annotations

from dpaudit.kinds.base import AuditKind, KindSummary, Outputs, RunContext, SharedTables, UnitPlan
from dpaudit.membership import sweep, trained, verdict
from dpaudit.membership.schema import AttributeSection, TargetSpec, check_variants, variants

__all__ = ["KIND", "AttributeKind"]


class AttributeKind(AuditKind[AttributeSection]):
    name = "attribute"
    section = AttributeSection
    description = "attribute inference (Yeom et al.) on a target dpaudit trains"

    def check(self, section: AttributeSection, shared: SharedTables) -> None:
        if shared.data is None:
            raise ValueError("audit kind 'attribute' needs a [data] table")
        if shared.data.sensitive is None:
            raise ValueError("audit kind 'attribute' needs [data] sensitive = '<column>'")
        if shared.target.brought:
            raise ValueError(
                "audit kind 'attribute' attacks a target dpaudit trains; it cannot run on "
                "[target] path, factory or scores"
            )
        check_variants(shared.target, shared.training)
        if section.sweep is not None:
            sweep.check_sweep(section, shared, table="[attribute.sweep]")

    def check_runnable(self, section: AttributeSection, context: RunContext) -> None:
        """Load the data (its sensitive column included) before any target trains."""
        trained.load(TargetSpec.for_audit(context))

    def plan(self, section: AttributeSection, context: RunContext) -> UnitPlan:
        spec = TargetSpec.for_audit(context)
        if section.sweep is not None:
            return sweep.attribute_sweep_plan(spec, section, context)
        names = variants(context.shared.target, context.shared.training)
        return UnitPlan(
            fn=trained.attribute_unit,
            spec=spec,
            units=tuple(f"attribute-{i}-{v}" for i, v in enumerate(names)),
            key_data=spec.key_data(),
            description="training targets and guessing attributes",
        )

    def comparisons(self, section: AttributeSection, context: RunContext, outputs: Outputs) -> int:
        return 0  # accuracies and advantages, gated by policy, not held against a bound

    def summarise(
        self, section: AttributeSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        return verdict.attribute_summary(context, outputs)


KIND = AttributeKind()
