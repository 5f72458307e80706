"""The release gate: turn an audit's findings into named checks and a verdict.

Each policy of the ``[gate]`` table becomes one :class:`~dpaudit.results.Check` with the
value measured, its limit, pass/fail and a one-line reason. A metric that is maximised
over several tests (attacks, canaries) takes the worst test: the gate guards the release.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit.results import Check, Comparison, TestSummary
from dpaudit.sections import GateSection


def _metric_max(tests: Sequence[TestSummary], key: str) -> tuple[float, str] | None:
    best: tuple[float, str] | None = None
    for t in tests:
        m = t.metrics
        if key in m and m[key] is not None and (best is None or m[key] > best[0]):
            best = (float(m[key]), t.label)
    return best


def evaluate_gate(
    gate: GateSection,
    *,
    comparisons: Sequence[Comparison],
    tests: Sequence[TestSummary],
    attribute: Sequence[Mapping[str, Any]] = (),
) -> tuple[Check, ...]:
    """Evaluate every configured policy.

    Args:
        gate: The ``[gate]`` table.
        comparisons: Lower bounds held against upper bounds.
        tests: Test summaries (with ``metrics`` from :func:`~dpaudit.tradeoff.membership_metrics`).
        attribute: Attribute-inference summaries with an ``advantage`` key.
    """
    checks: list[Check] = []
    if gate.fail_on_violation:
        bad = [c for c in comparisons if c.violation]
        if bad:
            worst = max(bad, key=lambda c: c.lower.value - (c.upper or 0.0))
            msg = (
                f"{worst.parameter} lower bound {worst.lower.value:.4g} exceeds the "
                f"{worst.upper_source} upper bound {worst.upper:.4g} in {worst.test} "
                f"(at {worst.lower.confidence_level:.4g} confidence): the DP claim is false"
            )
            checks.append(Check("fail_on_violation", worst.lower.value, worst.upper, False, msg))
        else:
            checks.append(
                Check(
                    "fail_on_violation",
                    float(len(bad)),
                    0.0,
                    True,
                    f"no rigorous lower bound exceeds its upper bound "
                    f"({sum(c.in_verdict for c in comparisons)} compared)",
                )
            )
    if gate.max_epsilon_lower_bound is not None:
        eps = [
            c
            for c in comparisons
            if c.parameter == "epsilon" and c.lower.validity.startswith("rigorous")
        ]
        value = max((c.lower.value for c in eps), default=0.0)
        limit = gate.max_epsilon_lower_bound
        checks.append(
            Check(
                "max_epsilon_lower_bound",
                value,
                limit,
                value <= limit,
                f"largest rigorous ε lower bound {value:.4g} "
                f"{'≤' if value <= limit else '>'} {limit:g}",
            )
        )
    if gate.max_auc is not None:
        checks.append(_limit_check("max_auc", "AUC", _metric_max(tests, "auc"), gate.max_auc))
    for target_fpr, limit in gate.max_tpr_at_fpr:
        found: tuple[float, str] | None = None
        for t in tests:
            for row in t.metrics.get("tpr_at_fpr", []):
                if abs(row["target_fpr"] - target_fpr) < 1e-12 and (
                    found is None or row["tpr"] > found[0]
                ):
                    found = (row["tpr"], t.label)
        checks.append(
            _limit_check(
                f"max_tpr_at_fpr[{target_fpr:g}]", f"TPR at FPR {target_fpr:g}", found, limit
            )
        )
    if gate.max_advantage is not None:
        checks.append(
            _limit_check(
                "max_advantage",
                "membership advantage",
                _metric_max(tests, "advantage"),
                gate.max_advantage,
            )
        )
    if gate.max_attribute_advantage is not None:
        best: tuple[float, str] | None = None
        for a in attribute:
            if best is None or a["advantage"] > best[0]:
                best = (float(a["advantage"]), a["label"])
        checks.append(
            _limit_check(
                "max_attribute_advantage", "attribute advantage", best, gate.max_attribute_advantage
            )
        )
    return tuple(checks)


def _limit_check(name: str, what: str, found: tuple[float, str] | None, limit: float) -> Check:
    if found is None:
        return Check(name, None, limit, True, f"no test measured {what}; nothing to check")
    value, where = found
    ok = value <= limit
    return Check(
        name, value, limit, ok, f"{what} {value:.4g} {'≤' if ok else '>'} {limit:g} ({where})"
    )
