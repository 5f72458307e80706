"""The kinds' stored unit outputs → tests, comparisons and attribute rows.

:func:`entries` decides, from what the units stored, which attack's bounds enter the
verdict; the ``membership`` kind counts its comparisons with it (before any bound is
computed) and :func:`membership_summary` spends exactly those, so what is spent is what
was announced. Every attack's numbers come from the one summariser,
:func:`dpaudit.membership.summary.summarise_attack`, as in the Python API.

- Own targets: per (variant, attack) a test (ROC, AUC, TPR at low FPR, advantage with
  intervals), the one-run ε lower bound (rigorous: membership was decided by fair coins,
  Steinke, Nasr, Jagielski 2023, Thm. 3.1), held against the accountant's ε of what ran
  (or the input-perturbation claim), and a heuristic bound that treats rows as
  independent trials (they share one model, so it proves nothing). With ``headline``
  only that attack's bounds are comparisons; another attack's stay in its test's details.
- Brought targets: the same test and bounds, none held against an upper bound (dpaudit
  does not know how the target was trained); the one-run bound is rigorous only when the
  user states that membership was decided by independent fair coins.

Every target's accuracy (members, non-members, held-out rows, the members' majority-class
rate) is in its tests' ``target`` details. A target that does no better on its own members
than a constant guess of their most common label (:mod:`dpaudit.membership.sanity`) is
named in a warning. A brought one is then not queried as it was trained, so its tests and
bounds are withheld (none is ever in the verdict): the gate policies that need them are
not evaluated and fail closed. An own one is queried exactly as dpaudit trained it: its
tests stand.

Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.accounting.upper_bounds import UpperBound, from_records
from dpaudit.bounds.fdp_one_run import stronger
from dpaudit.kinds.base import KindSummary, Outputs, RunContext
from dpaudit.membership.sanity import accuracy_problem
from dpaudit.membership.schema import TRAINS_REFERENCES, MembershipSection
from dpaudit.membership.stored import (
    has_upper,
    stored_details,
    stored_record,
    stored_upper,
    upper_source,
)
from dpaudit.membership.summary import (
    AttackOutcome,
    AttackScores,
    AttributeGuesses,
    attack_seed,
    attribute_result,
    riskiest_records,
    summarise_attack,
)
from dpaudit.results import (
    WITHHELD,
    Comparison,
    TestSummary,
    paired_comparisons,
    score_summary,
    theory_curves,
)

__all__ = [
    "CLONE_NOTE",
    "RECIPE_NOTE",
    "Entry",
    "attribute_summary",
    "entries",
    "membership_summary",
    "references_note",
]

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


# --------------------------------------------------------------------------- entries


@dataclass(frozen=True)
class Entry:
    """One attack on one stored target, and where its bounds go.

    Attributes:
        unit: the unit that stored the scores.
        position: the attack's row of the unit's scores (own targets; 0 for a brought
            target's unit, which stores one attack).
        attack: the attack's name.
        shown: whether its bounds are the kind's comparisons (not when ``headline``
            names another attack: they stay in its test's details).
        held: whether its target is held against an upper bound (the accountant's ε of
            its DP-SGD record, or a claim valid at the audit's δ).
    """

    unit: str
    position: int
    attack: str
    shown: bool
    held: bool

    @property
    def in_verdict(self) -> bool:
        """Whether its one-run bound enters the verdict (and takes a share of its budget)."""
        return self.shown and self.held


def _info(part: Mapping[str, np.ndarray]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(str(part["info"]))
    return out


def _attacks(info: Mapping[str, Any]) -> list[str]:
    """A brought target's unit holds one attack (``"attack"``), a language model's unit
    every attack (``"attacks"``, one row of its scores each)."""
    return list(info["attacks"]) if "attacks" in info else [info["attack"]]


def entries(section: MembershipSection, context: RunContext, outputs: Outputs) -> list[Entry]:
    """Every stored (target, attack), in the order the file lists them, and where its
    bounds go: what ``comparisons`` counts and ``summarise`` spends.

    Own targets are summarised in the order ``[target] variants`` lists them (units
    ``target-<i>-<variant>``), each unit's attacks in the order ``[membership] attacks``
    lists them; a brought target's units (one per attack) in that order too.
    """
    if context.shared.target.brought:
        # dpaudit does not know how a brought target was trained: no bound is held
        order: dict[str, int] = {name: i for i, name in enumerate(section.attacks)}
        found = [
            Entry(u, i, a, True, False)
            for u, p in outputs.items()
            for i, a in enumerate(_attacks(_info(p)))
        ]
        return sorted(found, key=lambda e: order.get(e.attack, 0))
    out = []
    for unit in sorted(outputs, key=lambda u: int(u.split("-")[1])):
        part = outputs[unit]
        held = has_upper(part, context.delta)
        for i, a in enumerate(_info(part)["attacks"]):
            shown = section.headline in (None, a["attack"])
            out.append(Entry(unit, i, a["attack"], shown, held))
    return out


# ------------------------------------------------------------------------ membership


def membership_summary(
    section: MembershipSection, context: RunContext, outputs: Outputs, *, level: float
) -> KindSummary:
    """The membership kind's tests and comparisons, every in-verdict bound at ``level``."""
    found = entries(section, context, outputs)
    if context.shared.target.brought:
        return _brought_summary(section, context, outputs, found)
    return _own_summary(section, context, outputs, found, level=level)


def _attack_test(
    outcome: AttackOutcome,
    membership: np.ndarray,
    context: RunContext,
    *,
    test_id: str,
    label: str,
    upper: float | None,
    source: str,
    in_verdict: bool,
    details: dict[str, Any],
    notes: list[str],
    mu_upper: float | None = None,
) -> tuple[TestSummary, list[Comparison]]:
    """One attack's test and its comparisons: the one-run ε bound (held against
    ``upper``), the one-run μ bound (held against ``mu_upper``) and the heuristic bound
    (never in the verdict). When ``in_verdict``, the one-run ε and μ bounds share one
    share (:func:`dpaudit.bounds.fdp_one_run.one_run_bounds`) and the stronger of the two enters
    the verdict (:func:`dpaudit.bounds.fdp_one_run.stronger`)."""
    scores = outcome.scores
    summary = score_summary(
        test_id,
        label,
        scores[~membership],
        scores[membership],
        confidence_level=context.confidence_level,
        hypotheses=("non-member", "member"),
    )
    if upper is not None:
        curves = theory_curves(epsilon=upper, delta=context.delta, label="accountant: ")
        summary = summary.with_details(theory_curves=curves)
    source = source if upper is not None else "none"
    mu = outcome.one_run_mu
    decides = stronger(
        (outcome.one_run.value, upper),
        None if mu is None or mu_upper is None else (mu.value, mu_upper),
    )
    comparisons = paired_comparisons(
        label,
        outcome.one_run,
        mu,
        upper_epsilon=upper,
        upper_mu=mu_upper,
        source=(source, "accountant μ"),
        in_verdict=(decides,) if in_verdict else (),
    )
    if outcome.epsilon_heuristic is not None:
        comparisons.append(
            Comparison(
                test=label,
                parameter="epsilon",
                lower=outcome.epsilon_heuristic,
                upper=upper,
                upper_source=source,
                in_verdict=False,
            )
        )
    attack = {
        "name": outcome.attack,
        "options": outcome.options,
        "notes": notes + list(outcome.notes),
    }
    # The highest-scored audited rows, which the report lists (with what a score means).
    records = riskiest_records(scores, membership)
    return summary.with_details(attack=attack, riskiest_records=records, **details), comparisons


def _mu_upper(part: Mapping[str, np.ndarray], delta: float) -> UpperBound | None:
    """The accountant's μ bracket (high end, tail) of a stored DP-SGD record, or ``None``
    (no record, or no finite μ): what the one-run μ bound is held against."""
    record = stored_record(part)
    if record is None:
        return None
    upper = from_records([record], delta)
    return upper if upper.mu_finite else None


def _own_warnings(outputs: Outputs, units: list[str]) -> dict[str, tuple[str, str]]:
    """For each own target that fails :func:`~dpaudit.membership.sanity.accuracy_problem`,
    by unit: the reason its tests are withheld from the gate, and the report's warning.

    dpaudit trains its own targets on the very features it queries them with, so their
    bounds measure the model as trained, however weak it is, and stand: a rigorous lower
    bound above the accountant's ε proves a bug whatever the model's accuracy. Their
    metrics (AUC, TPR at low FPR, advantage) are another matter: a target that answers
    like a constant guess scores near chance, and a gate reading that as "private" would
    pass a model nobody would release. So each such target is named and its tests carry
    :data:`~dpaudit.results.WITHHELD`: the gate policies that read tests are not evaluated
    (failing closed). The warning says why it may be weak: a ``dp`` or
    ``input-perturbation`` target by its noise (or its randomised labels), a ``plain``
    one because its recipe did not train it.
    """
    warnings: dict[str, tuple[str, str]] = {}
    for unit in units:
        part = outputs[unit]
        problem = accuracy_problem(_info(part)["accuracy"], reported=None)
        if problem is None:
            continue
        variant = unit.split("-", 2)[2]
        why = (
            "its privacy noise can explain it"
            if "noise_multiplier" in part or "perturbation" in part
            else "its recipe did not train it: train it longer or at another learning rate "
            "([training])"
        )
        reason = f"the {variant} target predicts no better than a constant: {problem}"
        warnings[unit] = (
            reason,
            (
                f"{reason[0].upper()}{reason[1:]}; {why}. "
                "Its bounds stand (they measure the recipe as configured); its AUC, TPR and "
                "advantage feed no gate policy, so max_auc, max_tpr_at_fpr and max_advantage "
                "are not evaluated (they fail unless [gate] on_unmeasured = 'warn')."
            ),
        )
    return warnings


#: What a brought target that fails the accuracy check loses, said in its warning.
_WITHHELD = (
    "Its membership tests are not evaluated: a [gate] policy that needs them (max_auc, "
    "max_tpr_at_fpr, max_advantage, max_epsilon_lower_bound) fails unless "
    "[gate] on_unmeasured = 'warn'."
)


def _own_summary(
    section: MembershipSection,
    context: RunContext,
    outputs: Outputs,
    found: list[Entry],
    *,
    level: float,
) -> KindSummary:
    """Every (variant, attack) of own targets: tests and comparisons, and a warning for
    each target that does no better than the majority class (:func:`_own_warnings`)."""
    c, delta = context.confidence_level, context.delta
    tests: list[TestSummary] = []
    comparisons: list[Comparison] = []
    data_hash = None
    units = sorted({e.unit for e in found}, key=lambda u: int(u.split("-")[1]))
    uppers = {unit: stored_upper(outputs[unit], delta) for unit in units}
    mu_uppers = {unit: _mu_upper(outputs[unit], delta) for unit in units}
    weak = _own_warnings(outputs, units)
    warnings = [w for _, w in weak.values()]
    for e in found:
        part = outputs[e.unit]
        info = _info(part)
        data_hash = info["data_hash"]
        variant = e.unit.split("-", 2)[2]
        a = info["attacks"][e.position]
        upper = uppers[e.unit]
        # the μ bound shares the ε bound's share only when held against a μ upper bound
        mu_upper = mu_uppers[e.unit] if e.in_verdict else None
        membership = np.asarray(part["membership"], dtype=bool)
        scores = np.asarray(part["scores"][e.position], dtype=np.float64)
        scored = AttackScores(a["attack"], a["options"], scores, a["seconds"])
        outcome = summarise_attack(
            scored,
            membership,
            confidence_level=c,
            delta=delta,
            seed=attack_seed(context.seed, e.position),
            # an attack outside the verdict takes no share of its budget
            one_run_level=level if e.in_verdict else c,
            mu_tail=None if mu_upper is None else mu_upper.mu_tail,
        )
        last = e.position == len(info["attacks"]) - 1
        test, comps = _attack_test(
            outcome,
            membership,
            context,
            test_id=f"{variant}-{e.attack}",
            label=f"{e.attack} on the {variant} target",
            upper=None if upper is None else upper.epsilon,
            source="none" if upper is None else upper_source(upper),
            in_verdict=e.in_verdict,
            mu_upper=None if mu_upper is None else mu_upper.mu,
            details={"target": {"variant": variant, "accuracy": info["accuracy"]}}
            | (stored_details(part, delta) if last else {})
            # a sweep's point ([membership.sweep]), for the report's sweep figure
            | ({"sweep": info["sweep"]} if "sweep" in info else {}),
            notes=[],
        )
        if e.unit in weak:
            test = dataclasses.replace(test, details={**test.details, WITHHELD: weak[e.unit][0]})
        if section.headline is not None:
            attack = {**test.details["attack"], "headline": e.shown}
            test = test.with_details(attack=attack)
            if not e.shown:
                bounds = [dataclasses.replace(b, in_verdict=False).to_dict() for b in comps]
                test, comps = test.with_details(bounds=bounds), []
        tests.append(test)
        comparisons += comps
    return KindSummary(
        tuple(tests), tuple(comparisons), warnings=tuple(warnings), data_hash=data_hash
    )


def _brought_summary(
    section: MembershipSection, context: RunContext, outputs: Outputs, found: list[Entry]
) -> KindSummary:
    """Every attack on a target the user brought (model file, factory or scores file)."""
    t = context.shared.target
    c = context.confidence_level
    coin_note = _coin_note(t.membership_by_coin)
    reference_note = references_note(t.references)
    warnings = _brought_warnings(section, context, coin_note)
    what = f"your target ({t.path or t.factory or t.scores})"
    infos = [_info(outputs[e.unit]) for e in found]
    for info in infos:
        for w in info.get("warnings", []):
            if w not in warnings:
                warnings.append(w)
    split = next((i["population_split"] for i in infos if "population_split" in i), None)
    if split is not None:
        warnings.append(_split_note(split, by_coin=t.membership_by_coin))
    # Every unit queried the same target on the same rows: one accuracy (none for scores).
    accuracy = next((i["accuracy"] for i in infos if "accuracy" in i), None)
    problem = None if accuracy is None else accuracy_problem(accuracy, reported=t.training_accuracy)
    if problem is not None:
        # Not one test of it enters the result, so no gate policy reads its scores;
        # nothing of a brought target is ever in the verdict, so nothing announced is lost.
        warnings.append(
            f"{what[0].upper()}{what[1:]} is not queried as it was trained: {problem}. "
            f"{_WITHHELD} Check that it receives the features it was trained on ([data] "
            "features, and [target] preprocess for a transformation such as "
            "standardisation)."
        )
        return KindSummary(warnings=tuple(warnings))
    tests: list[TestSummary] = []
    comparisons: list[Comparison] = []
    for e, info in zip(found, infos, strict=True):
        part = outputs[e.unit]
        membership = np.asarray(part["membership"], dtype=bool)
        trains = e.attack in TRAINS_REFERENCES
        target = {
            **info.get("target", {"format": "scores", "source": info.get("source")}),
            "membership_by_coin": t.membership_by_coin,
            "audited": int(membership.size),
            "members": int(membership.sum()),
        }
        if "accuracy" in info:
            target["accuracy"] = info["accuracy"]
        if "population_split" in info:
            target["population_split"] = info["population_split"]
        scores = np.asarray(part["scores"], dtype=np.float64)
        options = info["options"]
        if "attacks" in info:  # a language model's unit: a row and options per attack
            scores, options = scores[e.position], options[e.attack]
        scored = AttackScores(e.attack, options, scores, 0.0)
        outcome = summarise_attack(
            scored,
            membership,
            confidence_level=c,
            delta=context.delta,
            # the audit seed, as the stored audits of brought targets were computed with
            seed=context.seed,
            by_coin=t.membership_by_coin,
        )
        test, comps = _attack_test(
            outcome,
            membership,
            context,
            test_id=f"byo-{e.attack}",
            label=f"{e.attack} attack on {what}",
            upper=None,
            source="none",
            in_verdict=False,
            # how this attack's reference models were trained (report's test section)
            details={"target": target}
            | ({"references": info.get("references", "recipe")} if trains else {}),
            notes=[coin_note] + ([reference_note] if trains else []),
        )
        tests.append(test)
        comparisons += comps
    return KindSummary(tuple(tests), tuple(comparisons), (), tuple(warnings))


def _split_note(split: Mapping[str, Any], *, by_coin: bool) -> str:
    """What ``[target] population_share`` did to a train/test split, in one line."""
    note = (
        f"Every row's membership is 1 or 0 (a train/test split): {split['population']} of "
        f"the {split['non_members']} non-member rows became the attacker's population by a "
        f"seeded random split ([target] population_share = {split['share']:g}, seed "
        f"{split['seed']}) and are not audited"
    )
    if by_coin:
        note += (
            f"; {split['set_aside']} member rows were set aside unused at the same rate, so "
            "the audited rows' membership stays fair coins"
        )
    return note + "."


def _brought_warnings(section: MembershipSection, context: RunContext, coin_note: str) -> list[str]:
    """What the report must say of a brought target before its tests."""
    t = context.shared.target
    warnings = [] if t.membership_by_coin else [coin_note]
    if t.format == "huggingface":
        return warnings  # its attacks read the model alone (reference: the user's models)
    attacks = list(section.attacks)
    if t.scores is None and set(TRAINS_REFERENCES) & set(attacks) and t.references == "recipe":
        warnings.append(RECIPE_NOTE)  # a caveat only when the recipe stands in for yours
    if t.scores is not None:
        skipped = [a for a in attacks if a != "loss"]
        if skipped:
            warnings.append(
                f"A scores file supports only the loss attack; skipped: {', '.join(skipped)} "
                "(they query the model: give [target] path or factory)."
            )
    return warnings


# ------------------------------------------------------------------------- attribute


def attribute_summary(context: RunContext, outputs: Outputs) -> KindSummary:
    """The attribute kind's rows: accuracies, advantage and the DP bound per variant
    (accuracies and advantages are gated by policy, never held against a bound)."""
    rows = []
    data_hash = None
    per_row = ("guesses", "truth", "membership", "prior")  # per-example arrays stay stored
    for unit in sorted(outputs, key=lambda u: int(u.split("-")[1])):
        part = outputs[unit]
        info = _info(part)
        data_hash = str(part["data_hash"])
        upper = stored_upper(part, context.delta)
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
            row.update(stored_details(part, context.delta))
        row["label"] = f"attribute inference on the {variant} target ({info['sensitive']})"
        if "sweep" in info:  # a point of [attribute.sweep]
            row["sweep"] = info["sweep"]
        rows.append(row)
    return KindSummary(attribute=tuple(rows), data_hash=data_hash)
