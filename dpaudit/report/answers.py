"""The answer to "does this mechanism satisfy DP?", generated from a mechanism audit's bounds.

A mechanism audit holds a DP mechanism (built in or a user's ``pkg.module:function``) to
an ε lower bound. What that bound means is one sentence, and the report writes it from
``results.json`` alone, whatever the audit file's ``[audit] description`` says: a rigorous
ε lower bound ε_LB > 0 at δ proves, at its confidence, that the mechanism is NOT
(ε, δ)-DP for any ε < ε_LB; a bound of 0 proves nothing either way. When ε_LB reaches the
design's limit of detection (the most a perfect attack could certify with these trials),
the trials, not the mechanism, capped it: more trials may prove a larger ε, and a
mechanism that releases its input without noise is not DP at any finite ε.

The report computes no bound here; it only puts the stored ones into words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["NEAR_LIMIT", "mechanism_answers"]

#: A bound at least this fraction of the design's limit of detection is "at the limit":
#: the trials, not the mechanism, may have capped it.
NEAR_LIMIT = 0.9

#: How the sentence names a rigorous bound's validity.
_KINDS = {"rigorous-multi-run": "multi-run", "rigorous-one-run": "one-run"}


def mechanism_answers(
    rows: list[dict[str, Any]],
    tests: list[dict[str, Any]],
    *,
    best_of_level: Callable[[list[dict[str, Any]]], float | None],
    number: Callable[..., str],
    percent: Callable[[Any], str],
) -> list[dict[str, str]]:
    """One answer per audited mechanism: its question and the sentence that answers it.

    Args:
        rows: the report's bound rows (``results.json`` ``bounds`` with ``symbol``,
            ``rigorous`` and ``validity`` added by the report).
        tests: ``results.json`` ``tests``; a mechanism test carries a ``mechanism`` key.
        best_of_level: the confidence of the largest of several bounds (the report's
            union-bound rule: a best-of is a multiple comparison).
        number: the report's number format (``number(x, digits)``).
        percent: the report's percentage format.

    Returns:
        ``[{"test", "question", "answer"}]`` in test order; empty for audits of no
        mechanism, or whose mechanisms have no rigorous ε bound.
    """
    answers = []
    for test in tests:
        if not test.get("mechanism"):
            continue
        label = str(test.get("label", ""))
        found = [
            r
            for r in rows
            if r.get("test") == label and r.get("parameter") == "epsilon" and r.get("rigorous")
        ]
        if not found:
            continue
        best = max(found, key=lambda r: (bool(r.get("violation")), r["lower"].get("value") or 0.0))
        lower = best["lower"]
        value = float(lower.get("value") or 0.0)
        delta = number(lower.get("delta"), 3)
        # The largest of several bounds holds only at the confidence of the best-of.
        level = best_of_level(found) if len(found) > 1 else None
        level = lower.get("confidence_level") if level is None else level
        subject = label if label.lower().startswith("the ") else f"the {label}"
        question = f"Does {subject} satisfy DP?"
        validity = str(best.get("validity", ""))
        kind = _KINDS.get(validity, validity)
        if value <= 0.0:
            answer = (
                f"The audit found no evidence against it: its rigorous ε lower bound is 0 "
                f"(δ = {delta}), which proves nothing either way; a stronger attack or more "
                "trials might still find leakage."
            )
        else:
            eps = number(value, 3)
            answer = (
                f"Not at any ε below {eps}: the rigorous {kind} lower bound proves, at "
                f"{percent(level)} confidence, that it is not (ε, {delta})-DP for any "
                f"ε < {eps}."
            )
        answer += _claim_sentence(best, number)
        answer += _limit_sentence(value, best.get("limit_of_detection"), number)
        answers.append({"test": label, "question": question, "answer": answer})
    return answers


def _claim_sentence(row: dict[str, Any], number: Callable[..., str]) -> str:
    """What the bound says of its upper bound, named by its source (nothing without one)."""
    upper = row.get("upper")
    if not isinstance(upper, int | float):
        return ""
    # "claimed ε", "calibrated ε", "accountant ε (PLD)": the upper bound as its source says
    source = str(row.get("upper_source") or "upper bound ε")
    head, symbol, rest = source.partition("ε")
    what = f"{head}ε = {number(upper, 3)}{rest}" if symbol else f"{source} = {number(upper, 3)}"
    what = f"The {what}"
    if row.get("violation"):
        return f" {what} is false at this confidence."
    return f" {what} is not contradicted."


def _limit_sentence(value: float, limit: Any, number: Callable[..., str]) -> str:
    """Whether the trials, not the mechanism, capped the bound."""
    if not isinstance(limit, int | float) or value <= 0.0 or value < NEAR_LIMIT * limit:
        return ""
    return (
        f" The bound is {round(100 * value / limit)} % of the most any attack could certify "
        f"with these trials (ε = {number(limit, 3)}): the trials capped it, and more "
        "trials may prove a larger ε."
    )
