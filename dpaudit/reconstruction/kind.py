"""The ``reconstruction`` kind: a server reconstructs a batch from its shared gradient.

Threat model: an honest-but-curious server knows the model (a small MLP on 8×8 digits)
and sees the (possibly defended) gradient of one batch of B examples. For every defence
of ``[[reconstruction.defences]]`` the same ``batches`` batches are drawn, defended and
inverted (by optimisation, or in closed form for B = 1); units store the true and
reconstructed inputs, and the summary gives per-example errors after Hungarian matching
(normalised RMSE, PSNR, fraction recovered within ``tolerance``) with intervals over the
batches. Those are descriptive: they put no bound into the verdict. ``attack = "tensor"``
runs the tensor method of Wang, Lee, Lei (2023) instead (two-layer network, smooth
activation): it finds input directions, scored by sin∠(x̂, x). Each defence row carries
the lecture's complexity column at the run's B, d, m and the defence's parameters
(:func:`dpaudit.reconstruction.lecture_complexity`) and a few raw inputs with their
reconstructions (the report draws them). ``[reconstruction.scaling]`` repeats the
undefended attack on a grid of B and m and fits the error's slopes in log B and log m.

``[reconstruction.game]`` adds the k-candidate identification game against DP-SGD on one
example: its success count gives a rigorous ε lower bound
(:func:`dpaudit.bounds.identification_epsilon_lower_bound`), held against the
accountant's ε for the σ the implementation REPORTS (``claimed_noise_multiplier``,
default the σ that runs). The game's neighbours replace one record, whose clipped
gradient may move by 2C: one Gaussian step with noise σC is then exactly (2/σ)-GDP, the
guarantee of an add/remove step with noise multiplier σ/2, which is how the record is
handed to the accountant (:func:`dpaudit.accounting.upper_bounds.from_records`).

The table is :mod:`~dpaudit.reconstruction.schema`; the work units
(:mod:`~dpaudit.reconstruction.units`) and the summary
(:mod:`~dpaudit.reconstruction.summary`) need torch and are loaded when the audit reaches
them, so that loading an audit file does not.
"""

from __future__ import annotations

import math

from dpaudit.kinds.base import (
    AuditKind,
    KindSummary,
    Outputs,
    RunContext,
    UnitPlan,
    claim_left_out,
)
from dpaudit.reconstruction import sequential, summary, units
from dpaudit.reconstruction.schema import ReconstructionSection


class ReconstructionKind(AuditKind[ReconstructionSection]):
    name = "reconstruction"
    section = ReconstructionSection
    description = "gradient inversion under defences, and an identification-game ε bound"

    def check_runnable(self, section: ReconstructionSection, context: RunContext) -> None:
        if context.sequential is not None:  # the game's rounds are what stop
            sequential.check_sequential(section)

    def plan(self, section: ReconstructionSection, context: RunContext) -> UnitPlan:
        if context.sequential is not None:  # the game in rounds of a sequential test
            return sequential.plan_rounds(section, context)
        spec = units.ReconstructionSpec(section=section, seed=context.seed)
        names = units.descriptive_units(section)
        if section.game is not None:
            chunks = math.ceil(section.game.trials / units.GAMES_PER_UNIT)
            names += [f"reconstruction-game-{j:05d}" for j in range(chunks)]
        return UnitPlan(
            fn=units.reconstruction_unit,
            spec=spec,
            units=tuple(names),
            # the σ claimed changes no game: the accountant reads it after the store
            key_data=claim_left_out(
                spec.model_dump(mode="json"), "section", "game", "claimed_noise_multiplier"
            ),
            description="inverting gradients",
        )

    def comparisons(
        self, section: ReconstructionSection, context: RunContext, outputs: Outputs
    ) -> int:
        return summary.verdict_comparisons(section, context.delta)

    def summarise(
        self,
        section: ReconstructionSection,
        context: RunContext,
        outputs: Outputs,
        *,
        level: float,
    ) -> KindSummary:
        return summary.reconstruction_summary(section, context, outputs, level=level)

    def is_sequential(self, section: ReconstructionSection, context: RunContext) -> bool:
        return context.sequential is not None

    def stop_reason(
        self,
        section: ReconstructionSection,
        context: RunContext,
        outputs: Outputs,
        *,
        level: float,
    ) -> str:
        return sequential.stop_reason(section, context, outputs, level=level)


KIND = ReconstructionKind()
