"""The ``attribute`` kind: Yeom et al.'s attribute inference on the fair-coin target.

A unit trains the same target as the ``membership`` kind (same recipe, same seed) and
stores the attack's raw guesses; accuracies, the advantage with its intervals, and the
DP-implied bound (at the audit's δ, from the target's DP-SGD record) come after the store.

References:
    Yeom, Giacomelli, Fredrikson, Jha (2018), IEEE CSF (attribute inference and its
    advantage).
"""

from __future__ import annotations

import json

import numpy as np

from dpaudit.kinds.base import AuditKind, KindSummary, Outputs, RunContext, SharedTables, UnitPlan
from dpaudit.membership import trained as _targets
from dpaudit.sections import Table


class AttributeSection(Table):
    """``[attribute]``: Yeom et al. attribute inference on ``[data] sensitive`` (no options yet)."""


def attribute_unit(spec: _targets.TargetSpec, unit: str) -> dict[str, np.ndarray]:
    """Train one target variant and guess the sensitive attribute of its audited rows."""
    from dpaudit.membership.pipeline import guess_attributes

    variant = unit.split("-", 2)[2]
    dataset = _targets.load(spec)
    target = _targets.train(spec, variant, dataset)
    g = guess_attributes(target)
    info = {"dataset": g.dataset, "sensitive": g.sensitive, "values": list(g.values)}
    return {
        "guesses": g.guesses,
        "truth": g.truth,
        "membership": g.membership,
        "prior": g.prior,
        "info": np.array(json.dumps(info, default=str)),
        "data_hash": np.array(dataset.data_hash),
        **_targets.store_target(target, spec),
    }


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
        _targets.check_variants(shared.target, shared.training)

    def check_runnable(self, section: AttributeSection, context: RunContext) -> None:
        """Load the data (its sensitive column included) before any target trains."""
        _targets.load(self._spec(context))

    def plan(self, section: AttributeSection, context: RunContext) -> UnitPlan:
        spec = self._spec(context)
        names = _targets.variants(context.shared.target, context.shared.training)
        return UnitPlan(
            fn=attribute_unit,
            spec=spec,
            units=tuple(f"attribute-{i}-{v}" for i, v in enumerate(names)),
            key_data=_targets.key_data(spec),
            description="training targets and guessing attributes",
        )

    @staticmethod
    def _spec(context: RunContext) -> _targets.TargetSpec:
        sh = context.shared
        assert sh.data is not None  # checked when the file loads
        return _targets.TargetSpec(
            data=sh.data,
            model=sh.model,
            training=sh.training,
            seed=context.seed,
            base_dir=str(context.base_dir),
            input_perturbation=sh.target.input_perturbation,
        )

    def comparisons(self, section: AttributeSection, context: RunContext, outputs: Outputs) -> int:
        return 0  # accuracies and advantages, gated by policy, not held against a bound

    def summarise(
        self, section: AttributeSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        from dpaudit.membership.pipeline import AttributeGuesses, attribute_result

        rows = []
        data_hash = None
        per_row = ("guesses", "truth", "membership", "prior")  # per-example arrays stay stored
        for unit in sorted(outputs, key=lambda u: int(u.split("-")[1])):
            part = outputs[unit]
            info = json.loads(str(part["info"]))
            data_hash = str(part["data_hash"])
            upper = _targets.stored_upper(part, context.delta)
            # the DP-implied advantage bound is computed at the audit's δ: only an upper
            # bound whose δ is no larger holds there
            eps = None
            if upper is not None and upper.epsilon_delta <= context.delta:
                eps = upper.epsilon
            guesses = AttributeGuesses(
                dataset=info["dataset"],
                sensitive=info["sensitive"],
                values=tuple(info["values"]),
                guesses=np.asarray(part["guesses"]),
                truth=np.asarray(part["truth"]),
                membership=np.asarray(part["membership"], dtype=bool),
                prior=np.asarray(part["prior"]),
            )
            result = attribute_result(
                guesses,
                confidence_level=context.confidence_level,
                delta=context.delta,
                accountant_epsilon=eps,
                seed=context.seed,
            )
            row = {k: v for k, v in result.to_dict().items() if k not in per_row}
            variant = unit.split("-", 2)[2]
            if "perturbation" in part:  # the randomisers as they ran
                row.update(_targets.stored_details(part, context.delta))
            row["label"] = f"attribute inference on the {variant} target ({info['sensitive']})"
            rows.append(row)
        return KindSummary(attribute=tuple(rows), data_hash=data_hash)


KIND = AttributeKind()
