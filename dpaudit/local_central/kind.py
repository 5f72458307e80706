"""The ``local-central`` kind: one query answered under local DP and under central DP.

For each ε of ``epsilons``: the error of the local estimator (every record randomised,
then the randomiser inverted) and of the central Laplace mechanism, closed form and
simulated over ``repeats`` releases, their ratio, and the empirical ε lower bound of each
randomiser, measured as the ``mechanism`` kind measures one: ``trials`` runs of the
:mod:`dpaudit.mechanisms.noise` randomiser on two neighbouring inputs, then
:func:`dpaudit.bounds.epsilon_lower_bound` (δ = 0, the verdict's per-comparison level).
Both ε lower bounds enter the verdict against the ε the randomiser runs with. The math is
in :mod:`dpaudit.local_central.simulate`; the table is :mod:`~dpaudit.local_central.schema`,
the work units :mod:`~dpaudit.local_central.units` and the summary
:mod:`~dpaudit.local_central.summary` (each loaded when the audit reaches it).
"""

from __future__ import annotations

from dpaudit.kinds.base import AuditKind, KindSummary, Outputs, RunContext, UnitPlan
from dpaudit.local_central import summary, units
from dpaudit.local_central.schema import LocalCentralSection, measured_mechanisms


class LocalCentralKind(AuditKind[LocalCentralSection]):
    name = "local-central"
    section = LocalCentralSection
    description = "one query (a mean, a histogram) under local and under central DP: error and ε_LB"

    def plan(self, section: LocalCentralSection, context: RunContext) -> UnitPlan:
        spec = units.LocalCentralSpec(section=section, seed=context.seed)
        return UnitPlan(
            fn=units.local_central_unit,
            spec=spec,
            units=tuple(f"local-central-{i:05d}" for i in range(len(section.epsilons))),
            key_data=spec.model_dump(mode="json"),
            description="local vs central",
        )

    def comparisons(
        self, section: LocalCentralSection, context: RunContext, outputs: Outputs
    ) -> int:
        # the local and the central ε_LB at every ε
        return len(section.epsilons) * len(measured_mechanisms(section))

    def summarise(
        self, section: LocalCentralSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        return summary.local_central_summary(section, context, outputs, level=level)


KIND = LocalCentralKind()
