"""The ``membership`` kind: membership inference on a target dpaudit trains, or on yours.

A thin adapter over the family's modules (importing it loads no torch):

- the table is :class:`~dpaudit.membership.schema.MembershipSection`;
- own targets (``[target] variants``): a unit per variant trains the fair-coin target
  and scores its audited rows with every attack (:func:`dpaudit.membership.trained.own_unit`);
- brought targets (``[target] path`` / ``factory`` / ``scores``): a unit per attack
  (:func:`dpaudit.membership.brought_units.byo_unit`), checked whole before any unit runs
  (:func:`dpaudit.membership.brought.preflight`);
- :func:`dpaudit.membership.verdict.entries` decides which attack's bounds enter the
  verdict: ``comparisons`` counts them and ``summarise`` spends them
  (:func:`dpaudit.membership.verdict.membership_summary`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from dpaudit.errors import DataError
from dpaudit.kinds.base import AuditKind, KindSummary, Outputs, RunContext, SharedTables, UnitPlan
from dpaudit.membership import brought, brought_units, language_units, sweep, trained, verdict
from dpaudit.membership.schema import (
    MembershipSection,
    OwnSpec,
    check_language_attacks,
    check_variants,
    population_share,
    population_shortfall,
    variants,
)
from dpaudit.plugins import plugin_digest
from dpaudit.sections import PLUGIN_NAME, ByoSpec, DataSection

__all__ = [
    "KIND",
    "MembershipKind",
    "byo_key_data",
    "byo_spec",
    "byo_units",
    "check_own_population",
    "own_spec",
    "target_digest",
]


def own_spec(section: MembershipSection, context: RunContext) -> OwnSpec:
    """The spec of an own target's units: the target recipe and the attacks."""
    return OwnSpec.for_audit(
        context,
        attacks=tuple(section.attacks),
        reference_models=section.reference_models,
        shadow_models=section.shadow_models,
        rmia_offline_a=section.rmia_offline_a,
        rmia_gamma=section.rmia_gamma,
        rmia_population_samples=section.rmia_population_samples,
    )


def target_digest(config: ByoSpec) -> str:
    """Hash of the files the target is read from, so a changed file never reuses units."""
    t = config.target
    h = hashlib.sha256()
    preprocess_file = None
    if t.preprocess is not None and not PLUGIN_NAME.fullmatch(t.preprocess):
        preprocess_file = t.preprocess  # a skops file (a function's module: byo_key_data)
    for name in (t.path, t.scores, t.membership, preprocess_file):
        if name is None:
            continue
        p = config.resolve(name)
        if p.is_file():
            h.update(p.read_bytes())
        h.update(name.encode())
    return h.hexdigest()[:12]


def byo_spec(section: MembershipSection, context: RunContext) -> ByoSpec:
    """The spec of a brought target's units (the file digest included)."""
    sh = context.shared
    spec = ByoSpec(
        data=sh.data,
        target=sh.target,
        model=sh.model,
        training=sh.training,
        attacks=tuple(section.attacks),
        reference_models=section.reference_models,
        shadow_models=section.shadow_models,
        seed=context.seed,
        base_dir=str(context.base_dir),
    )
    return spec.model_copy(update={"digest": target_digest(spec)})


def byo_units(config: ByoSpec) -> list[str]:
    """A brought target's units: ``byo-<digest>-<attack>``, one per attack (one
    ``byo-<digest>-scores`` for a scores file)."""
    digest = target_digest(config)
    if config.target.scores is not None:
        return [f"byo-{digest}-scores"]
    return [f"byo-{digest}-{name}" for name in config.attacks]


def byo_key_data(spec: ByoSpec, context: RunContext) -> dict[str, Any]:
    """The unit key of a brought target.

    ``[target] references`` only when it is not the default recipe, and ``preprocess``
    and the population share (:func:`~dpaudit.membership.schema.population_share`, the
    default included) only when there is one, so units stored before those options
    existed are reused where they would not change; a training function's or preprocess
    function's module file (its code is part of what the units are). ``training_accuracy``
    changes no unit (it is read when the units are summarised): it is left out.
    """
    key = spec.model_dump(mode="json", exclude={"base_dir", "device"})
    t = spec.target
    target = key["target"]
    target.pop("training_accuracy", None)
    share = population_share(t, spec.attacks)
    if share is None:
        target.pop("population_share", None)
    else:
        target["population_share"] = share
    if t.preprocess is None:
        target.pop("preprocess", None)
    elif PLUGIN_NAME.fullmatch(t.preprocess):
        key["preprocess_file"] = plugin_digest(t.preprocess, base_dir=context.base_dir)
    references = t.references
    if references == "recipe":
        target.pop("references", None)
    elif references != "clone":
        key["references_file"] = plugin_digest(references, base_dir=context.base_dir)
    return key


def check_own_population(attacks: Sequence[str], data: DataSection, rows: int) -> None:
    """Refuse an own target's audit whose dataset leaves an attack short of population
    rows: ``[data] population_size``, else every row that is not audited.

    Raises:
        DataError: the dataset is smaller than the split, or an attack needs more rows.
    """
    audited = data.audited_size
    population = data.population_size
    if population is None:
        population = max(0, rows - audited)
    elif audited + population > rows:
        raise DataError(
            f"The dataset {data.dataset!r} has {rows} rows, too few for [data] "
            f"audited_size = {audited} + population_size = {population}."
        )
    problem = population_shortfall(attacks, population)
    if problem is not None:
        raise DataError(
            f"{problem} [data] population_size, or a dataset with more rows than "
            f"audited_size = {audited}, gives the attacker rows of its own. Or list attacks "
            "that need no population (loss, lira)."
        )


class MembershipKind(AuditKind[MembershipSection]):
    name = "membership"
    section = MembershipSection
    description = "membership inference on a target dpaudit trains, or on your own model"

    def check(self, section: MembershipSection, shared: SharedTables) -> None:
        language = shared.target.format == "huggingface"
        check_language_attacks(section, language=language)
        if language:
            return  # its member and non-member texts are in [target]
        if shared.data is None and shared.target.scores is None:
            # A scores file carries everything a membership audit needs.
            raise ValueError("audit kind 'membership' needs a [data] table")
        if not shared.target.brought:
            check_variants(shared.target, shared.training)
        if section.sweep is not None:
            sweep.check_sweep(section, shared)

    def check_runnable(self, section: MembershipSection, context: RunContext) -> None:
        """Load the data (and a brought model) once, before any unit trains or attacks,
        and check that every attack has the population rows it needs (what a unit would
        otherwise say after training)."""
        if context.shared.target.format == "huggingface":
            language_units.preflight_language(language_units.language_spec(section, context))
        elif context.shared.target.brought:
            brought.preflight(byo_spec(section, context))
        else:
            own = own_spec(section, context)
            check_own_population(section.attacks, own.data, trained.load(own).num_rows)

    def plan(self, section: MembershipSection, context: RunContext) -> UnitPlan:
        sh = context.shared
        if sh.target.format == "huggingface":
            lm = language_units.language_spec(section, context)
            return UnitPlan(
                fn=language_units.language_unit,
                spec=lm,
                units=(lm.unit,),
                key_data=lm.key_data(),
                description="scoring texts under your language model",
            )
        if sh.target.brought:
            spec = byo_spec(section, context)
            return UnitPlan(
                fn=brought_units.byo_unit,
                spec=spec,
                units=tuple(byo_units(spec)),
                key_data=byo_key_data(spec, context),
                description="attacking your target",
            )
        own = own_spec(section, context)
        if section.sweep is not None:
            return sweep.sweep_plan(own, section, context)
        names = variants(sh.target, sh.training)
        return UnitPlan(
            fn=trained.own_unit,
            spec=own,
            units=tuple(f"target-{i}-{v}" for i, v in enumerate(names)),
            key_data=own.key_data(),
            description="training targets and attacking",
        )

    def comparisons(self, section: MembershipSection, context: RunContext, outputs: Outputs) -> int:
        return sum(e.in_verdict for e in verdict.entries(section, context, outputs))

    def planned_comparisons(self, section: MembershipSection, context: RunContext) -> int:
        """The most one-run bounds the verdict can hold, from the tables alone.

        The rules of :func:`dpaudit.membership.verdict.entries`: an (target, attack) enters
        when its attack is shown (every attack, or only ``headline``) and its target is held
        against an upper bound (its stored DP-SGD record, or an input-perturbation claim
        valid at the audit's δ). A brought target is never held: 0. An own ``plain`` target
        stores neither record nor claim; every other target (``dp``, ``input-perturbation``,
        each point of a sweep) may be held: each counts its shown attacks.
        """
        sh = context.shared
        if sh.target.brought:
            return 0  # dpaudit does not know how a brought target was trained
        shown = sum(section.headline in (None, a) for a in section.attacks)
        if section.sweep is not None:
            return shown * len(self.plan(section, context).units)
        return shown * sum(v != "plain" for v in variants(sh.target, sh.training))

    def summarise(
        self, section: MembershipSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        return verdict.membership_summary(section, context, outputs, level=level)


KIND = MembershipKind()
