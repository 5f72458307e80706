"""A privacy–utility sweep: one full membership audit per DP setting, in one verdict.

``[membership.sweep]`` (:class:`~dpaudit.membership.schema.SweepSection`) lists DP-SGD's
noise multiplier σ, or the ε each σ is calibrated to, and optionally adds local DP at the
same ε (each training record randomised once by local randomisers,
``[membership.sweep.input_perturbation]``). The question it answers is the user's "which ε should I
pick?": test accuracy, the accountant's ε, the rigorous one-run ε lower bound and the
attacks' TPR at low FPR and advantage, against ε, local next to central, as in Bernau,
Robl, Grassal, Schneider, Kerschbaum, "Comparing local and central differential privacy
using membership inference attacks" (arXiv 1912.11328v4, Sect. 5, Figs. 3–6).

Each point is a full membership audit at that setting: its unit trains the target exactly
as an audit whose ``[training.dp]`` names that σ (or ε) and whose ``[target] variants``
is ``["dp"]`` (``["input-perturbation"]`` with that record ε for a local point) would, and
scores it with every attack (:func:`dpaudit.membership.trained.own_unit`, the same code).
The points share what does not depend on the noise: the dataset, the audited rows, their
fair coins and the population split (all from the audit seed). Reference and shadow models
are trained with the target's recipe, noise included, so each point trains its own: sharing
them across noise levels would change what an audit at that point measures.

The budget: every point's in-verdict bounds are comparisons of the kind (one per held
attack per point, :func:`dpaudit.membership.verdict.entries` counts them from the stored
units), so the verdict's ONE confidence budget is split over the number of points × the
comparisons of one point. A point's bounds at a given level equal a single audit's at that
level, bit for bit (``tests/test_sweep.py``).

``[attribute.sweep]`` (the same table) does the same for the ``attribute`` kind: each
point's unit is the unit a single attribute audit at that setting runs
(:func:`dpaudit.membership.trained.attribute_unit`), so a point's accuracies, advantage
and DP-implied bound equal that audit's (``tests/test_attribute_sweep.py``). Nothing of
it enters the verdict (attribute rows are gated by policy), so it takes no budget.

Nothing here imports torch until a unit runs.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

import numpy as np

from dpaudit.errors import ConfigError
from dpaudit.kinds.base import RunContext, SharedTables, UnitPlan
from dpaudit.membership import trained
from dpaudit.membership.schema import (
    INPUT_PERTURBATION,
    AttributeSection,
    MembershipSection,
    OwnSpec,
    SweepSection,
    TargetSpec,
    variants,
)
from dpaudit.sections import DPSection, Table

__all__ = [
    "AttributeSweepSpec",
    "SweepPoint",
    "SweepSpec",
    "attribute_sweep_plan",
    "attribute_sweep_unit",
    "check_sweep",
    "point_spec",
    "sweep_plan",
    "sweep_points",
    "sweep_unit",
]

Setting = Literal["plain", "central", "local"]
Parameter = Literal["noise_multiplier", "target_epsilon", "epsilon"]
_SHORT = {"noise_multiplier": "sigma", "target_epsilon": "eps", "epsilon": "eps"}
Spec = TypeVar("Spec", bound=TargetSpec)


class SweepPoint(Table):
    """One setting of the sweep.

    Attributes:
        setting: ``"central"`` (DP-SGD), ``"local"`` (input perturbation) or ``"plain"``
            (no DP, the baseline when ``[target] variants`` lists ``"plain"``).
        parameter: the swept field (``noise_multiplier`` or ``target_epsilon`` of
            ``[training.dp]``, ``epsilon`` of ``[target.input_perturbation]``), ``None``
            for the baseline.
        value: its value at this point.
    """

    setting: Setting
    parameter: Parameter | None = None
    value: float | None = None

    @property
    def variant(self) -> str:
        """The ``[target] variants`` name a single audit at this point trains."""
        return {"plain": "plain", "central": "dp", "local": INPUT_PERTURBATION}[self.setting]

    @property
    def name(self) -> str:
        """The point's name in unit names and test labels: ``central-sigma-0.5``."""
        if self.parameter is None or self.value is None:
            return self.setting
        return f"{self.setting}-{_SHORT[self.parameter]}-{float(self.value)!r}"

    def to_dict(self) -> dict[str, Any]:
        """What each of the point's tests carries (``sweep`` details) for the report."""
        return {"point": self.name, **self.model_dump(mode="json")}


def sweep_points(sweep: SweepSection, *, plain: bool) -> list[SweepPoint]:
    """The points in run order: the plain baseline (when ``plain``), every central point
    in the order the file lists them, then every local point (``local = true``)."""
    out = [SweepPoint(setting="plain")] if plain else []
    central: Parameter = (
        "noise_multiplier" if sweep.noise_multiplier is not None else "target_epsilon"
    )
    out += [SweepPoint(setting="central", parameter=central, value=v) for v in sweep.values]
    if sweep.local:
        out += [SweepPoint(setting="local", parameter="epsilon", value=v) for v in sweep.values]
    return out


def check_sweep(
    section: MembershipSection | AttributeSection,
    shared: SharedTables,
    *,
    table: str = "[membership.sweep]",
) -> None:
    """Refuse a sweep that cannot run: a brought target, no ``[training.dp]`` to vary, or
    local points without their randomisers (``table`` names the sweep in the messages).

    Raises:
        ConfigError: with what to change.
    """
    sweep = section.sweep
    if sweep is None:
        return
    if shared.target.brought:
        raise ConfigError(
            f"{table} trains one target per setting: it needs dpaudit's own "
            "target, not a brought one ([target] path, factory or scores)"
        )
    if shared.training.dp is None:
        raise ConfigError(
            f"{table} {sweep.parameter} varies [training.dp]: add a "
            "[training.dp] table (its clipping_norm and target_delta are shared by every point)"
        )
    listed = set(variants(shared.target, shared.training)) - {"plain"}
    if shared.target.variants is not None and listed:
        raise ConfigError(
            f"{table} decides the DP targets itself: [target] variants may list "
            f"only 'plain' (a baseline without DP), got {sorted(shared.target.variants)}"
        )


def point_spec(own: Spec, sweep: SweepSection, point: SweepPoint) -> Spec:
    """The spec a single audit at ``point`` gives its units (its ``[training.dp]`` or
    ``[target.input_perturbation]``, :meth:`~dpaudit.membership.schema.LocalRandomisers.at`,
    at the point's value; every other field as given)."""
    if point.setting == "central":
        dp = own.training.dp
        if dp is None:  # check_sweep refuses such a file when it loads
            raise ConfigError("[membership.sweep] needs a [training.dp] table")
        fields = dp.model_dump() | {"noise_multiplier": None, "target_epsilon": None}
        fields[str(point.parameter)] = point.value
        training = own.training.model_copy(update={"dp": DPSection.model_validate(fields)})
        return own.model_copy(update={"training": training})
    if point.setting == "local":
        local = sweep.input_perturbation.at(float(point.value or 0.0))
        return own.model_copy(update={"input_perturbation": local})
    return own


class SweepSpec(Table):
    """What every sweep unit receives: the audit's own-target spec and the points."""

    own: OwnSpec
    sweep: SweepSection
    points: tuple[SweepPoint, ...]

    def unit_names(self) -> tuple[str, ...]:
        """``target-<i>-<point>``: the position first, as every own-target unit name."""
        return tuple(f"target-{i}-{p.name}" for i, p in enumerate(self.points))


def sweep_unit(spec: SweepSpec, unit: str) -> dict[str, np.ndarray]:
    """Train and attack the target of one point: exactly the unit a single audit at that
    point runs (:func:`~dpaudit.membership.trained.own_unit`), its ``info`` tagged with
    the point."""
    i = int(unit.split("-")[1])
    point = spec.points[i]
    if unit != f"target-{i}-{point.name}":
        raise ConfigError(f"unit {unit!r} is not a point of this sweep: {spec.unit_names()}")
    out = trained.own_unit(point_spec(spec.own, spec.sweep, point), f"target-{i}-{point.variant}")
    return _tagged(out, point)


def _tagged(out: dict[str, np.ndarray], point: SweepPoint) -> dict[str, np.ndarray]:
    """The unit's arrays with its ``info`` tagged with the point (for the report)."""
    info = json.loads(str(out["info"]))
    info["sweep"] = point.to_dict()
    return out | {"info": np.array(json.dumps(info))}


class AttributeSweepSpec(Table):
    """What every unit of ``[attribute.sweep]`` receives: the target recipe and the points."""

    target: TargetSpec
    sweep: SweepSection
    points: tuple[SweepPoint, ...]

    def unit_names(self) -> tuple[str, ...]:
        """``attribute-<i>-<point>``: the position first, as every attribute unit name."""
        return tuple(f"attribute-{i}-{p.name}" for i, p in enumerate(self.points))


def attribute_sweep_unit(spec: AttributeSweepSpec, unit: str) -> dict[str, np.ndarray]:
    """Train the target of one point and guess its rows' attribute: exactly the unit a
    single attribute audit at that point runs (:func:`~dpaudit.membership.trained.
    attribute_unit`), its ``info`` tagged with the point."""
    i = int(unit.split("-")[1])
    point = spec.points[i]
    if unit != f"attribute-{i}-{point.name}":
        raise ConfigError(f"unit {unit!r} is not a point of this sweep: {spec.unit_names()}")
    out = trained.attribute_unit(
        point_spec(spec.target, spec.sweep, point), f"attribute-{i}-{point.variant}"
    )
    return _tagged(out, point)


def attribute_sweep_plan(
    target: TargetSpec, section: AttributeSection, context: RunContext
) -> UnitPlan:
    """The attribute kind's plan for ``[attribute.sweep]``: one unit per point (the plain
    baseline first when ``[target] variants`` lists it), keyed by the shared recipe."""
    if section.sweep is None:
        raise ConfigError("attribute_sweep_plan needs [attribute.sweep]")
    sh = context.shared
    plain = sh.target.variants is not None and "plain" in sh.target.variants
    sweep = section.sweep
    spec = AttributeSweepSpec(
        target=target, sweep=sweep, points=tuple(sweep_points(sweep, plain=plain))
    )
    return UnitPlan(
        fn=attribute_sweep_unit,
        spec=spec,
        units=spec.unit_names(),
        key_data={**target.key_data(), "sweep": sweep.input_perturbation.model_dump(mode="json")},
        description="sweeping the DP noise: training targets and guessing attributes",
    )


def sweep_plan(own: OwnSpec, section: MembershipSection, context: RunContext) -> UnitPlan:
    """The kind's plan for a sweep: one unit per point, keyed by the shared recipe (a
    point's value is in its unit name, so adding a point at the end reuses the others)."""
    if section.sweep is None:
        raise ConfigError("sweep_plan needs [membership.sweep]")
    sh = context.shared
    plain = sh.target.variants is not None and "plain" in sh.target.variants
    sweep = section.sweep
    spec = SweepSpec(own=own, sweep=sweep, points=tuple(sweep_points(sweep, plain=plain)))
    return UnitPlan(
        fn=sweep_unit,
        spec=spec,
        units=spec.unit_names(),
        # the local randomisers change local points; the values are in the unit names
        key_data={**own.key_data(), "sweep": sweep.input_perturbation.model_dump(mode="json")},
        description="sweeping the DP noise: training targets and attacking",
    )
