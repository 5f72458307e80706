"""The ``membership`` kind: membership inference on a target dpaudit trains, or on yours.

Own targets (``[target] variants``): each audited row joins the target by an independent
fair coin; the attacks named in ``[membership] attacks`` score the rows; a unit stores the
coins, every attack's scores and the target's DP-SGD record — nothing that depends on the
confidence level or δ, so changing those re-measures the same trained models. Attacks
that read reference models (every LiRA variant and RMIA) share ONE reference set per
unit, trained with the seed of the first of them in the list. Brought
targets (``[target] path`` / ``factory`` / ``scores``, :mod:`dpaudit.membership.brought`): a unit
per attack stores the scores and the user's membership; their shadow and reference
models follow ``[target] references`` (the ``[model]`` / ``[training]`` recipe by
default, clones of a scikit-learn estimator, or the user's training function), and each
such attack's test says which in ``details["references"]``.

One summariser serves both: per attack a test (ROC, AUC, TPR at low FPR, advantage with
intervals), the one-run ε lower bound (rigorous when membership was decided by fair
coins: Steinke, Nasr, Jagielski 2023, Thm. 3.1), held against the accountant's ε of
what ran when dpaudit trained the target with DP-SGD, and a heuristic bound that treats
rows as independent trials (they share one model, so it proves nothing).

Attack names (``[membership] attacks``):

- ``"loss"`` (Yeom et al. 2018), ``"shadow"`` (Shokri et al. 2017);
- ``"lira"``: LiRA online with variance "auto" (per-example from 64 reference models,
  global below), as in earlier releases;
- ``"lira-online"``, ``"lira-offline"``: LiRA with per-example variances, online (IN and
  OUT fits) or offline (OUT fit only); ``"lira-online-global"``,
  ``"lira-offline-global"``: the same with one global variance (Carlini et al. 2022);
  ``"lira-online-shrunk"``, ``"lira-offline-shrunk"``: per-example variances shrunk
  toward the global one by a conjugate prior whose strength is fitted across rows;
  ``"lira-online-shrunk-t"``, ``"lira-offline-shrunk-t"``: the same prior with the
  Student-t posterior predictive in place of the Gaussian;
- ``"rmia"``, ``"rmia-offline"``: RMIA (Zarifzadeh, Liu, Shokri 2024), online or offline
  with the linear approximation's ``rmia_offline_a``; ``rmia_gamma`` is its γ and
  ``rmia_population_samples`` the population rows z;
- ``"auto"`` (the default's reference attack): the online LiRA variant or RMIA with the
  highest TPR at low FPR when each reference model in turn plays the target and the
  others its references (:mod:`dpaudit.attacks.auto`); the choice depends on the
  reference models only, so it is no multiple comparison on the target. Needs
  ``reference_models >= 4``.

``headline`` names the attack whose one-run bound enters the verdict (and so the report's
headline and the gate's bound checks); the other attacks' tests (metrics, curves, their
own one-run and heuristic bounds in the test's details) still go into results.json.
Without ``headline`` every attack's one-run bound enters the verdict, as before.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import numpy as np
from pydantic import Field, model_validator

from dpaudit.errors import InsufficientTrialsError
from dpaudit.kinds.base import (
    AuditKind,
    KindSummary,
    Outputs,
    RunContext,
    SharedTables,
    UnitPlan,
)
from dpaudit.membership import trained as _targets
from dpaudit.plugins import plugin_digest
from dpaudit.sections import ByoSpec, Table

if TYPE_CHECKING:  # loaded where used: validating a file stays fast
    from dpaudit.bounds import EpsilonBound
    from dpaudit.results import Comparison, TestSummary

Attack = Literal[
    "loss",
    "shadow",
    "lira",
    "lira-online",
    "lira-offline",
    "lira-online-global",
    "lira-offline-global",
    "lira-online-shrunk",
    "lira-offline-shrunk",
    "lira-online-shrunk-t",
    "lira-offline-shrunk-t",
    "rmia",
    "rmia-offline",
    "auto",
]
#: Attacks that read one shared reference set (LiRA's variants and RMIA): all but two.
REFERENCE_ATTACKS: tuple[Attack, ...] = tuple(
    a for a in get_args(Attack) if a not in ("loss", "shadow")
)
#: Attacks that read RMIA's options ("auto" has RMIA among its candidates).
_RMIA_ATTACKS = ("rmia", "rmia-offline", "auto")
_TRAINS_REFERENCES = ("shadow", *REFERENCE_ATTACKS)
_ALL_ATTACKS: tuple[Attack, ...] = ("loss", "shadow", "auto")
#: OwnSpec fields that change only RMIA's scores (left out of the unit key without RMIA).
_RMIA_OPTIONS = ("rmia_offline_a", "rmia_gamma", "rmia_population_samples")
#: Said wherever reference models stand in for the unknown training of a brought target.
RECIPE_NOTE = (
    "Shadow and LiRA reference models are trained with the recipe in [model]/[training]; "
    "the attack's strength depends on how well that recipe matches the one that trained "
    "the target."
)
#: Said when a brought scikit-learn target's reference models are clones of it.
CLONE_NOTE = (
    "Shadow and LiRA reference models are clones of your estimator (sklearn.base.clone: "
    "its hyper-parameters, none of its fitted state), each fitted on its reference split "
    "of the raw [data] features, as your target was fitted ([target] references = 'clone')."
)


def references_note(references: str) -> str:
    """The report's sentence on how a brought target's reference models were trained."""
    if references == "recipe":
        return RECIPE_NOTE
    if references == "clone":
        return CLONE_NOTE
    return (
        f"Shadow and LiRA reference models are trained by your function {references} on "
        "their reference splits of the raw [data] features ([target] references)."
    )


class MembershipSection(Table):
    """``[membership]``: the attacks and their reference models."""

    attacks: Annotated[list[Attack], Field(min_length=1)] = Field(
        default_factory=lambda: list(_ALL_ATTACKS)
    )
    reference_models: Annotated[int, Field(ge=2)] = 64
    shadow_models: Annotated[int, Field(ge=1)] = 16
    headline: Attack | None = None
    rmia_offline_a: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    rmia_gamma: Annotated[float, Field(gt=0.0)] = 1.0
    rmia_population_samples: Annotated[int, Field(ge=1)] = 1000

    @model_validator(mode="after")
    def _headline_is_listed(self) -> MembershipSection:
        if self.headline is not None and self.headline not in self.attacks:
            raise ValueError(
                f"headline = {self.headline!r} is not one of the attacks {self.attacks}"
            )
        if len(set(self.attacks)) != len(self.attacks):
            raise ValueError(f"attacks lists an attack twice: {self.attacks}")
        if "auto" in self.attacks and self.reference_models < 4:
            raise ValueError(
                f"the 'auto' attack needs reference_models >= 4 (each reference model in "
                f"turn plays the target with the others as its references); got "
                f"{self.reference_models}. Raise reference_models or list another attack."
            )
        return self


class OwnSpec(_targets.TargetSpec):
    """An own target's units: the target recipe and the attacks."""

    attacks: tuple[str, ...]
    reference_models: int
    shadow_models: int
    rmia_offline_a: float = 0.3
    rmia_gamma: float = 1.0
    rmia_population_samples: int = 1000


def own_attacks(spec: OwnSpec) -> list[Any]:
    """The attack objects of ``spec.attacks``, in order, with the section's options."""
    from dpaudit.attacks import LiraAttack, LossAttack, ShadowAttack, get_attack

    out: list[Any] = []
    for name in spec.attacks:
        if name == "loss":
            out.append(LossAttack())
        elif name == "shadow":
            out.append(ShadowAttack(num_shadow_models=spec.shadow_models))
        elif name == "lira":
            out.append(LiraAttack(num_reference_models=spec.reference_models))
        elif name in _RMIA_ATTACKS:
            out.append(
                get_attack(
                    name,
                    num_reference_models=spec.reference_models,
                    offline_a=spec.rmia_offline_a,
                    gamma=spec.rmia_gamma,
                    population_samples=spec.rmia_population_samples,
                )
            )
        else:
            out.append(get_attack(name, num_reference_models=spec.reference_models))
    return out


@dataclass(frozen=True)
class _OwnScores:
    attack: str
    options: dict[str, Any]
    scores: np.ndarray
    seconds: float
    reference_set: str | None


def score_own_attacks(target: Any, spec: OwnSpec) -> list[_OwnScores]:
    """Every attack's scores of the audited rows; reference attacks share one set.

    The attack at position i gets ``attack_seed(seed, i)`` (as
    :func:`dpaudit.membership.score_attacks` gives it); the shared reference set is
    trained with the seed of the FIRST reference attack in the list, so appending an
    attack to the list changes no earlier attack's scores (with ``["loss", "shadow",
    "lira"]`` LiRA's reference models are exactly those it trained alone).

    Raises:
        DpauditError: an attack returned non-finite scores.
    """
    import time

    from dpaudit.attacks import ReferenceAttack, score_with_shared_references
    from dpaudit.errors import DpauditError
    from dpaudit.membership.pipeline import attack_seed

    attacks = own_attacks(spec)
    X, y = target.audited_X, target.audited_y
    context = target.context(device=spec.device)
    found: dict[int, _OwnScores] = {}
    shared = [i for i, a in enumerate(attacks) if isinstance(a, ReferenceAttack)]
    for i, attack in enumerate(attacks):
        if i in shared:
            continue
        t0 = time.perf_counter()
        scores = attack.score(context, X, y, seed=attack_seed(spec.seed, i))
        found[i] = _OwnScores(
            spec.attacks[i], attack.described_options(), scores, time.perf_counter() - t0, None
        )
    if shared:
        t0 = time.perf_counter()
        first = spec.attacks[shared[0]]
        all_scores = score_with_shared_references(
            context, X, y, [attacks[i] for i in shared], seed=attack_seed(spec.seed, shared[0])
        )
        seconds = time.perf_counter() - t0
        for i, scores in zip(shared, all_scores, strict=True):
            found[i] = _OwnScores(
                spec.attacks[i], attacks[i].described_options(), scores, seconds, first
            )
    out = []
    for i in range(len(attacks)):
        s = found[i]
        row = np.asarray(s.scores, dtype=np.float64)[0]
        if not np.all(np.isfinite(row)):
            raise DpauditError(
                f"The {s.attack!r} attack returned {int((~np.isfinite(row)).sum())} "
                "non-finite scores."
            )
        out.append(dataclasses.replace(s, scores=row))
    return out


def own_unit(spec: OwnSpec, unit: str) -> dict[str, np.ndarray]:
    """Train one target variant and score its audited rows with every attack."""
    variant = unit.split("-", 2)[2]
    dataset = _targets.load(spec)
    target = _targets.train(spec, variant, dataset)
    scored = score_own_attacks(target, spec)
    coins = target.membership
    from dpaudit.attacks.base import stack_logits

    correct = stack_logits(target.models, target.audited_X)[0].argmax(axis=-1) == target.audited_y
    info = {
        "attacks": [
            {"attack": s.attack, "options": s.options, "seconds": s.seconds}
            | ({"reference_set": s.reference_set} if s.reference_set else {})
            for s in scored
        ],
        "accuracy": {
            "members": float(correct[coins].mean()),
            "non_members": float(correct[~coins].mean()),
        },
        "data_hash": dataset.data_hash,
    }
    return {
        "membership": coins,
        "scores": np.stack([s.scores for s in scored]),
        "info": np.array(json.dumps(info)),
        **_targets.store_target(target, spec),
    }


def byo_spec(section: MembershipSection, context: RunContext) -> ByoSpec:
    """The spec of a brought target's units (the file digest included)."""
    from dpaudit.membership.brought import target_digest

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


def byo_key_data(spec: ByoSpec, context: RunContext) -> dict[str, Any]:
    """The unit key of a brought target: ``[target] references`` only when it is not the
    default recipe (so units stored before the option existed are reused), and a training
    function's module file (its code is part of what the units are)."""
    key = spec.model_dump(mode="json", exclude={"base_dir", "device"})
    references = spec.target.references
    if references == "recipe":
        key["target"].pop("references", None)
    elif references != "clone":
        key["references_file"] = plugin_digest(references, base_dir=context.base_dir)
    return key


def own_spec(section: MembershipSection, context: RunContext) -> OwnSpec:
    sh = context.shared
    assert sh.data is not None  # checked when the file loads
    return OwnSpec(
        data=sh.data,
        model=sh.model,
        training=sh.training,
        seed=context.seed,
        base_dir=str(context.base_dir),
        input_perturbation=sh.target.input_perturbation,
        attacks=tuple(section.attacks),
        reference_models=section.reference_models,
        shadow_models=section.shadow_models,
        rmia_offline_a=section.rmia_offline_a,
        rmia_gamma=section.rmia_gamma,
        rmia_population_samples=section.rmia_population_samples,
    )


def own_key_data(own: OwnSpec) -> dict[str, Any]:
    """The unit key of own targets: RMIA's options only when an RMIA attack runs."""
    key = _targets.key_data(own, attacks=list(own.attacks))
    if not set(_RMIA_ATTACKS) & set(own.attacks):
        for name in _RMIA_OPTIONS:
            key.pop(name, None)
    return key


# ----------------------------------------------------------------------------- summary


@dataclass(frozen=True)
class _Scored:
    """One attack's stored scores on one target, with what the summary needs."""

    test_id: str
    label: str
    attack: str
    scores: np.ndarray
    membership: np.ndarray
    seed: int
    upper: float | None
    details: dict[str, Any]
    upper_source: str = "accountant ε (PLD)"


def _heuristic(s: _Scored, *, delta: float, c: float) -> tuple[EpsilonBound | None, list[str]]:
    """ε (and μ, for the note only) treating rows as independent trials: descriptive."""
    from dpaudit.bounds import epsilon_lower_bound, mu_lower_bound

    neg, pos = s.scores[~s.membership], s.scores[s.membership]
    notes: list[str] = []
    eps = None
    kw: dict[str, Any] = {"confidence_level": c, "threshold": "split", "seed": s.seed}
    try:
        eps = epsilon_lower_bound(neg, pos, delta=delta, validity="heuristic", **kw)
    except InsufficientTrialsError as exc:
        notes.append(f"heuristic epsilon: {exc}")
    try:
        mu_lower_bound(neg, pos, validity="heuristic", **kw)
    except InsufficientTrialsError as exc:
        notes.append(f"heuristic mu: {exc}")
    return eps, notes


def _summarise_one(
    s: _Scored, context: RunContext, *, level: float, rigorous: bool
) -> tuple[TestSummary, list[Comparison]]:
    """One attack on one target, own or brought: its test, its one-run bound (held against
    the accountant's ε, at the verdict's ``level``, when dpaudit trained the target with
    DP-SGD) and the heuristic bound that treats rows as independent trials."""
    from dpaudit.membership.pipeline import DEFAULT_GUESS_FRACTION, one_run_bound
    from dpaudit.results import Comparison, score_summary, theory_curves

    c, delta = context.confidence_level, context.delta
    summary = score_summary(
        s.test_id,
        s.label,
        s.scores[~s.membership],
        s.scores[s.membership],
        confidence_level=c,
        hypotheses=("non-member", "member"),
    )
    if s.upper is not None:
        curves = theory_curves(epsilon=s.upper, delta=delta, label="accountant: ")
        summary = summary.with_details(theory_curves=curves)
    one_run = one_run_bound(
        s.scores,
        s.membership,
        guesses_per_side=max(1, int(DEFAULT_GUESS_FRACTION * s.scores.size)),
        delta=delta,
        confidence_level=level if s.upper is not None else c,
    )
    if not rigorous:
        # Without fair coins the one-run theorem's premise fails (Steinke et al. 2023,
        # §3): the same count is only a description of the attack.
        one_run = dataclasses.replace(one_run, validity="heuristic")
    source = s.upper_source if s.upper is not None else "none"
    comparisons = [
        Comparison(
            test=s.label,
            parameter="epsilon",
            lower=one_run,
            upper=s.upper,
            upper_source=source,
            in_verdict=s.upper is not None,
        )
    ]
    heuristic, notes = _heuristic(s, delta=delta, c=c)
    if heuristic is not None:
        comparisons.append(
            Comparison(
                test=s.label,
                parameter="epsilon",
                lower=heuristic,
                upper=s.upper,
                upper_source=source,
                in_verdict=False,
            )
        )
    details = dict(s.details)
    attack = dict(details.pop("attack"))
    attack["notes"] = list(attack.get("notes", [])) + notes
    return summary.with_details(attack=attack, **details), comparisons


def _own_scored(outputs: Outputs, context: RunContext) -> tuple[list[_Scored], str | None]:
    """Every (variant, attack) of own targets, in the order the file lists them."""
    from dpaudit.membership.pipeline import attack_seed

    out: list[_Scored] = []
    data_hash = None
    for unit in sorted(outputs, key=_variant_order):
        part = outputs[unit]
        variant = unit.split("-", 2)[2]
        info = json.loads(str(part["info"]))
        data_hash = info["data_hash"]
        upper = _targets.stored_upper(part, context.delta)
        membership = np.asarray(part["membership"], dtype=bool)
        attacks = info["attacks"]
        for i, a in enumerate(attacks):
            details: dict[str, Any] = {
                "attack": {"name": a["attack"], "options": a["options"], "notes": []}
            }
            last = i == len(attacks) - 1
            if last:
                details.update(_targets.stored_details(part, context.delta))
            scored = _Scored(
                test_id=f"{variant}-{a['attack']}",
                label=f"{a['attack']} on the {variant} target",
                attack=a["attack"],
                scores=np.asarray(part["scores"][i], dtype=np.float64),
                membership=membership,
                seed=attack_seed(context.seed, i),
                upper=None if upper is None else upper.epsilon,
                details=details,
                upper_source="none" if upper is None else _targets.upper_source(upper),
            )
            out.append(scored)
    return out, data_hash


def _variant_order(unit: str) -> int:
    # Units are summarised in the order [target] variants lists them (target-0-plain, ...).
    return int(unit.split("-")[1])


class MembershipKind(AuditKind[MembershipSection]):
    name = "membership"
    section = MembershipSection
    description = "membership inference on a target dpaudit trains, or on your own model"

    def check(self, section: MembershipSection, shared: SharedTables) -> None:
        if shared.data is None and shared.target.scores is None:
            # A scores file carries everything a membership audit needs.
            raise ValueError("audit kind 'membership' needs a [data] table")
        if not shared.target.brought:
            _targets.check_variants(shared.target, shared.training)

    def check_runnable(self, section: MembershipSection, context: RunContext) -> None:
        """Load the data (and a brought model) once, before any unit trains or attacks."""
        if context.shared.target.brought:
            from dpaudit.membership.brought import preflight

            preflight(byo_spec(section, context))
        else:
            _targets.load(own_spec(section, context))

    def plan(self, section: MembershipSection, context: RunContext) -> UnitPlan:
        sh = context.shared
        if sh.target.brought:
            from dpaudit.membership.brought import byo_unit, byo_units

            spec = byo_spec(section, context)
            return UnitPlan(
                fn=byo_unit,
                spec=spec,
                units=tuple(byo_units(spec)),
                key_data=byo_key_data(spec, context),
                description="attacking your target",
            )
        own = own_spec(section, context)
        names = _targets.variants(sh.target, sh.training)
        return UnitPlan(
            fn=own_unit,
            spec=own,
            units=tuple(f"target-{i}-{v}" for i, v in enumerate(names)),
            key_data=own_key_data(own),
            description="training targets and attacking",
        )

    def comparisons(self, section: MembershipSection, context: RunContext, outputs: Outputs) -> int:
        if context.shared.target.brought:
            return 0  # dpaudit does not know how a brought target was trained
        with_record = sum(_targets.has_upper(part, context.delta) for part in outputs.values())
        return with_record * (1 if section.headline else len(section.attacks))

    def summarise(
        self, section: MembershipSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        if context.shared.target.brought:
            return _summarise_brought(section, context, outputs)
        tests, comparisons = [], []
        scored, data_hash = _own_scored(outputs, context)
        for s in scored:
            # An attack outside the verdict (not the headline) takes no share of its budget.
            outside = section.headline not in (None, s.attack)
            lvl = context.confidence_level if outside else level
            test, comps = _summarise_one(s, context, level=lvl, rigorous=True)
            if section.headline is not None:
                test, comps = _with_headline(test, comps, s, headline=section.headline)
            tests.append(test)
            comparisons += comps
        return KindSummary(tuple(tests), tuple(comparisons), data_hash=data_hash)


def _with_headline(
    test: TestSummary, comps: list[Comparison], s: _Scored, *, headline: str
) -> tuple[TestSummary, list[Comparison]]:
    """With ``headline`` set, only that attack's bounds are comparisons (verdict, report
    headline); another attack's bounds stay in its test's details, out of the verdict."""
    attack = dict(test.details.get("attack", {}))
    attack["headline"] = s.attack == headline
    test = test.with_details(attack=attack)
    if s.attack == headline:
        return test, comps
    bounds = [dataclasses.replace(c, in_verdict=False).to_dict() for c in comps]
    return test.with_details(bounds=bounds), []


def _unit_attack(unit: str) -> str:
    return unit.rsplit("-", 1)[1]


def _summarise_brought(
    section: MembershipSection, context: RunContext, outputs: Outputs
) -> KindSummary:
    """The membership kind on a target the user brought (model file, factory or scores).

    Neither bound is held against an upper bound: dpaudit does not know how the target was
    trained. The one-run bound is rigorous only when the user states that membership was
    decided by independent fair coins.
    """
    t = context.shared.target
    warnings: list[str] = []
    what = f"your target ({t.path or t.factory or t.scores})"
    coin_note = _coin_note(t.membership_by_coin)
    if not t.membership_by_coin:
        warnings.append(coin_note)
    attacks = list(section.attacks)
    reference_note = references_note(t.references)
    if t.scores is None and set(_TRAINS_REFERENCES) & set(attacks) and t.references == "recipe":
        warnings.append(RECIPE_NOTE)  # a caveat only when the recipe stands in for yours
    if t.scores is not None:
        skipped = [a for a in attacks if a != "loss"]
        if skipped:
            warnings.append(
                f"A scores file supports only the loss attack; skipped: {', '.join(skipped)} "
                "(they query the model: give [target] path or factory)."
            )
    tests, comparisons = [], []
    order: dict[str, int] = {name: i for i, name in enumerate(attacks)}
    for unit in sorted(outputs, key=lambda u: order.get(_unit_attack(u), 0)):
        part = outputs[unit]
        info = json.loads(str(part["info"]))
        for w in info.get("warnings", []):
            if w not in warnings:
                warnings.append(w)
        membership = np.asarray(part["membership"], dtype=bool)
        attack = info["attack"]
        trains = attack in _TRAINS_REFERENCES
        notes = [coin_note] + ([reference_note] if trains else [])
        target = {
            **info.get("target", {"format": "scores", "source": info.get("source")}),
            "membership_by_coin": t.membership_by_coin,
            "audited": int(membership.size),
            "members": int(membership.sum()),
        }
        if "accuracy" in info:
            target["accuracy"] = info["accuracy"]
        scored = _Scored(
            test_id=f"byo-{attack}",
            label=f"{attack} attack on {what}",
            attack=attack,
            scores=np.asarray(part["scores"], dtype=np.float64),
            membership=membership,
            seed=context.seed,
            upper=None,
            details={
                "attack": {"name": attack, "options": info["options"], "notes": notes},
                "target": target,
            }
            # How this attack's reference models were trained (report's test section).
            | ({"references": info.get("references", "recipe")} if trains else {}),
        )
        # No upper bound: every bound at c, none in the verdict.
        level = context.confidence_level
        test, comps = _summarise_one(scored, context, level=level, rigorous=t.membership_by_coin)
        tests.append(test)
        comparisons += comps
    return KindSummary(tuple(tests), tuple(comparisons), (), tuple(warnings))


def _coin_note(by_coin: bool) -> str:
    if by_coin:
        return (
            "Membership of the audited rows was decided by independent fair coins (stated in "
            "[target] membership_by_coin): the one-run ε lower bound is rigorous."
        )
    return (
        "Membership of the audited rows was not stated to be decided by independent fair "
        "coins ([target] membership_by_coin = false): the one-run ε lower bound is "
        "heuristic, not a proof."
    )


KIND = MembershipKind()

__all__ = [
    "CLONE_NOTE",
    "KIND",
    "RECIPE_NOTE",
    "MembershipKind",
    "MembershipSection",
    "byo_key_data",
    "byo_spec",
    "own_spec",
    "own_unit",
]
