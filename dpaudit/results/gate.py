"""The release gate: turn an audit's findings into named checks and a verdict.

Each policy of the ``[gate]`` table becomes one :class:`~dpaudit.results.Check` with the
value measured, its limit, its status and a one-line reason. A metric that is maximised
over several tests (attacks, canaries) takes the worst test: the gate guards the release.

The gate fails closed: a policy that nothing in the audit measured is ``not-evaluated``
and counts as failed, with a message naming the kinds that would measure it, unless the
policy says ``on_unmeasured = "warn"`` (then it passes and the audit carries a warning).
A gate that measures nothing must never read as a green light.

A check nobody asked for never decides alone: ``fail_on_violation`` is on by default, and
where the audit holds no lower bound against an upper bound (a brought model: nothing
claims a guarantee) the default is ``not-applicable``, shown as such and passing; the
policies the file sets decide. Set ``fail_on_violation = true`` in the file and the same
audit fails closed, as every policy the user set does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from dpaudit.results import WITHHELD, Check, Comparison, TestSummary
from dpaudit.sections import GateSection

#: Which kinds measure what each policy needs (for the not-evaluated message).
_MEASURED_BY = {
    "fail_on_violation": (
        "a bound held against an upper bound: the mechanism or dpsgd kind, the "
        "membership kind on a DP target dpaudit trains, or the reconstruction kind's "
        "identification game"
    ),
    "max_epsilon_lower_bound": (
        "a rigorous ε lower bound: the mechanism, dpsgd or membership kind (own targets, "
        "or yours with membership_by_coin = true)"
    ),
    "max_auc": "a membership, dpsgd or mechanism test",
    "max_tpr_at_fpr": "a membership, dpsgd or mechanism test",
    "max_advantage": "a membership, dpsgd or mechanism test",
    "max_attribute_advantage": "the attribute kind",
}


def _withheld(tests: Sequence[TestSummary]) -> list[str]:
    """The reasons, one per withheld target, in the order met."""
    reasons: list[str] = []
    for t in tests:
        why = t.details.get(WITHHELD)
        if why and why not in reasons:
            reasons.append(str(why))
    return reasons


def _withheld_check(gate: GateSection, name: str, limit: float, reasons: list[str]) -> Check:
    """A metric policy that a withheld test would have fed: not evaluated, failing closed.

    The other tests' metrics are not enough: the policy bounds the worst test, and a
    withheld test's worst is unknown (its target is not the model that would be released).
    """
    more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return _unmeasured(gate, name, limit, f"{reasons[0]}{more}")


def _metric_max(tests: Sequence[TestSummary], key: str) -> tuple[float, str] | None:
    best: tuple[float, str] | None = None
    for t in tests:
        m = t.metrics
        if key in m and m[key] is not None and (best is None or m[key] > best[0]):
            best = (float(m[key]), t.label)
    return best


def _not_evaluated(gate: GateSection, name: str, policy: str, limit: float | None) -> Check:
    why = f"nothing in this audit measures it; it needs {_MEASURED_BY[policy]}"
    return _unmeasured(gate, name, limit, why)


def _unmeasured(gate: GateSection, name: str, limit: float | None, why: str) -> Check:
    """A policy not evaluated, for ``why``: it fails closed unless ``on_unmeasured = "warn"``."""
    warn = gate.on_unmeasured == "warn"
    what = "warning only (on_unmeasured = 'warn')" if warn else "fails closed"
    return Check(name, None, limit, warn, f"not evaluated: {why} ({what})", status="not-evaluated")


def _violation_check(
    gate: GateSection, comparisons: Sequence[Comparison], kind_checks: Sequence[Check] = ()
) -> Check:
    compared = [c for c in comparisons if c.in_verdict]
    bad = [c for c in compared if c.violation]
    if bad:
        worst = max(bad, key=lambda c: c.lower.value - (c.upper or 0.0))
        msg = (
            f"{worst.parameter} lower bound {worst.lower.value:.4g} exceeds the "
            f"{worst.upper_source} upper bound {worst.upper:.4g} in {worst.test} "
            f"(at {worst.lower.confidence_level:.4g} confidence): the DP claim is false"
        )
        return Check("fail_on_violation", worst.lower.value, worst.upper, False, msg)
    evaluated = [c for c in kind_checks if c.status != "not-evaluated"]
    if not compared and evaluated:
        # No bound, but checks of what ran (a claim against its records, the grey-box
        # tests) were evaluated: they speak to the policy, each listed with its result.
        return Check(
            "fail_on_violation",
            0.0,
            0.0,
            True,
            f"no lower bound was held against an upper bound; {len(evaluated)} check(s) of "
            "what ran decide instead (listed beside this one)",
        )
    if not compared and "fail_on_violation" not in gate.model_fields_set:
        # The default policy with nothing to compare: not the user's policy, so it must not
        # decide the release alone (nor headline it); shown as not applicable.
        return Check(
            "fail_on_violation",
            None,
            0.0,
            True,
            "not applicable: nothing in this audit states a guarantee to hold a lower bound "
            f"against (that needs {_MEASURED_BY['fail_on_violation']}); set [gate] "
            "fail_on_violation = true to require one",
            status="not-applicable",
        )
    if not compared:
        return _not_evaluated(gate, "fail_on_violation", "fail_on_violation", 0.0)
    n = len(compared)
    return Check(
        "fail_on_violation",
        0.0,
        0.0,
        True,
        f"no rigorous lower bound exceeds its upper bound ({n} compared)",
    )


def _kind_check(gate: GateSection, check: Check) -> Check:
    """A kind's own check under ``fail_on_violation``; a not-evaluated one is resolved here.

    Such a check refines a policy that the bounds already evaluate (a grey-box check of
    a DP-SGD run next to its canary bounds), so the gate does not read as a green light
    on nothing when it is missing: it is listed as not evaluated, with a warning, and
    fails the gate only when the audit file sets ``on_unmeasured = "fail"`` itself.
    """
    if check.status != "not-evaluated":
        return check
    strict = gate.on_unmeasured == "fail" and "on_unmeasured" in gate.model_fields_set
    what = (
        "fails closed (on_unmeasured = 'fail')"
        if strict
        else "not counted against the gate; set [gate] on_unmeasured = 'fail' to require it"
    )
    return replace(check, passed=not strict, message=f"{check.message} ({what})")


def _epsilon_check(gate: GateSection, comparisons: Sequence[Comparison], limit: float) -> Check:
    eps = [
        c
        for c in comparisons
        if c.parameter == "epsilon" and c.lower.validity.startswith("rigorous")
    ]
    if not eps:
        return _not_evaluated(gate, "max_epsilon_lower_bound", "max_epsilon_lower_bound", limit)
    value = max(c.lower.value for c in eps)
    return Check(
        "max_epsilon_lower_bound",
        value,
        limit,
        value <= limit,
        f"largest rigorous ε lower bound {value:.4g} {'≤' if value <= limit else '>'} {limit:g}",
    )


def _tpr_at(tests: Sequence[TestSummary], target_fpr: float) -> tuple[float, str] | None:
    found: tuple[float, str] | None = None
    for t in tests:
        for row in t.metrics.get("tpr_at_fpr", []):
            if abs(row["target_fpr"] - target_fpr) < 1e-12 and (
                found is None or row["tpr"] > found[0]
            ):
                found = (row["tpr"], t.label)
    return found


def _attribute_max(attribute: Sequence[Mapping[str, Any]]) -> tuple[float, str] | None:
    best: tuple[float, str] | None = None
    for a in attribute:
        if best is None or a["advantage"] > best[0]:
            best = (float(a["advantage"]), a["label"])
    return best


def evaluate_gate(
    gate: GateSection,
    *,
    comparisons: Sequence[Comparison],
    tests: Sequence[TestSummary],
    attribute: Sequence[Mapping[str, Any]] = (),
    kind_checks: Sequence[Check] = (),
) -> tuple[Check, ...]:
    """Evaluate every configured policy.

    Args:
        gate: The ``[gate]`` table.
        comparisons: Lower bounds held against upper bounds.
        tests: Test summaries (with ``metrics`` from :func:`~dpaudit.tradeoff.membership_metrics`).
        attribute: Attribute-inference summaries with an ``advantage`` key.
        kind_checks: The kinds' own in-verdict checks (the dpsgd kind's grey-box checks),
            part of ``fail_on_violation`` (:func:`_kind_check`).
    """
    checks: list[Check] = []
    if gate.fail_on_violation:
        checks.append(_violation_check(gate, comparisons, kind_checks))
        checks.extend(_kind_check(gate, c) for c in kind_checks)
    if gate.max_epsilon_lower_bound is not None:
        checks.append(_epsilon_check(gate, comparisons, gate.max_epsilon_lower_bound))
    withheld = _withheld(tests)
    if withheld:
        # every metric policy reads the worst test; one withheld test leaves it unknown
        for name, limit in _metric_policies(gate):
            checks.append(_withheld_check(gate, name, limit, withheld))
        tests = ()
    if gate.max_auc is not None and not withheld:
        found = _metric_max(tests, "auc")
        checks.append(_limit_check(gate, "max_auc", "max_auc", "AUC", found, gate.max_auc))
    for target_fpr, limit in () if withheld else gate.max_tpr_at_fpr:
        name = f"max_tpr_at_fpr[{target_fpr:g}]"
        what = f"TPR at FPR {target_fpr:g}"
        checks.append(
            _limit_check(gate, name, "max_tpr_at_fpr", what, _tpr_at(tests, target_fpr), limit)
        )
    if gate.max_advantage is not None and not withheld:
        found = _metric_max(tests, "advantage")
        checks.append(
            _limit_check(
                gate, "max_advantage", "max_advantage", "membership advantage", found,
                gate.max_advantage,
            )
        )  # fmt: skip
    if gate.max_attribute_advantage is not None:
        checks.append(
            _limit_check(
                gate, "max_attribute_advantage", "max_attribute_advantage",
                "attribute advantage", _attribute_max(attribute), gate.max_attribute_advantage,
            )
        )  # fmt: skip
    return tuple(checks)


def _metric_policies(gate: GateSection) -> list[tuple[str, float]]:
    """The configured policies that read the tests' metrics, as (check name, limit)."""
    found: list[tuple[str, float]] = []
    if gate.max_auc is not None:
        found.append(("max_auc", gate.max_auc))
    found += [(f"max_tpr_at_fpr[{f:g}]", limit) for f, limit in gate.max_tpr_at_fpr]
    if gate.max_advantage is not None:
        found.append(("max_advantage", gate.max_advantage))
    return found


def _limit_check(
    gate: GateSection,
    name: str,
    policy: str,
    what: str,
    found: tuple[float, str] | None,
    limit: float,
) -> Check:
    if found is None:
        return _not_evaluated(gate, name, policy, limit)
    value, where = found
    ok = value <= limit
    return Check(
        name, value, limit, ok, f"{what} {value:.4g} {'≤' if ok else '>'} {limit:g} ({where})"
    )
