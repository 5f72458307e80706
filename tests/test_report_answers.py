"""The report's answer to "does this mechanism satisfy DP?" (dpaudit.report.answers):
exact sentences from stored bounds, and the list experiment's answer in its HTML report,
generated from its results whatever ``[audit] description`` says."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dpaudit.audit import run_audit
from dpaudit.report import (
    _best_of_level,
    _bound_rows,
    fmt_number,
    fmt_percent,
    render_report,
)
from dpaudit.report.answers import mechanism_answers

AUDITS = Path(__file__).resolve().parents[1] / "audits"


def _answers(bounds: list[dict[str, Any]], tests: list[dict[str, Any]]) -> list[dict[str, str]]:
    return mechanism_answers(
        _bound_rows(bounds),
        tests,
        best_of_level=lambda found: _best_of_level(found, 0.95),
        number=fmt_number,
        percent=fmt_percent,
    )


def _bound(value: float, **extra: Any) -> dict[str, Any]:
    lower = {
        "parameter": "epsilon",
        "value": value,
        "confidence_level": 0.975,
        "delta": 1e-5,
        "validity": "rigorous-multi-run",
    }
    return {
        "test": "laplace mechanism",
        "parameter": "epsilon",
        "lower": lower,
        "upper_source": "claimed ε",
        **extra,
    }


_TEST = {"label": "laplace mechanism", "mechanism": {"name": "laplace"}}


def test_positive_bound_under_its_claim() -> None:
    (a,) = _answers([_bound(0.8123, upper=1.0, limit_of_detection=3.0)], [_TEST])
    assert a["question"] == "Does the laplace mechanism satisfy DP?"
    assert a["answer"] == (
        "Not at any ε below 0.812: the rigorous multi-run lower bound proves, at 97.5 % "
        "confidence, that it is not (ε, 1e-5)-DP for any ε < 0.812. The claimed ε = 1 is not "
        "contradicted."
    )


def test_violation_and_the_limit_of_detection() -> None:
    (a,) = _answers([_bound(2.9, upper=1.0, violation=True, limit_of_detection=3.0)], [_TEST])
    assert a["answer"] == (
        "Not at any ε below 2.9: the rigorous multi-run lower bound proves, at 97.5 % "
        "confidence, that it is not (ε, 1e-5)-DP for any ε < 2.9. The claimed ε = 1 is false "
        "at this confidence. The bound is 97 % of the most any attack could certify with "
        "these trials (ε = 3): the trials capped it, and more trials may prove a larger ε."
    )


def test_zero_bound_proves_nothing() -> None:
    (a,) = _answers([_bound(0.0, upper=1.0, limit_of_detection=3.0)], [_TEST])
    assert a["answer"] == (
        "The audit found no evidence against it: its rigorous ε lower bound is 0 "
        "(δ = 1e-5), which proves nothing either way; a stronger attack or more trials "
        "might still find leakage. The claimed ε = 1 is not contradicted."
    )


def test_best_of_two_states_the_joint_confidence() -> None:
    # Two rigorous ε bounds of one mechanism, one in the verdict and one outside it: the
    # largest holds at 1 − (0.025 + 0.05) = 92.5 %, not at either bound's own level.
    outside = _bound(0.5)
    outside["lower"] = {**outside["lower"], "confidence_level": 0.95}
    (a,) = _answers([_bound(0.7, in_verdict=True), outside], [_TEST])
    assert "at 92.5 % confidence" in a["answer"]
    assert "below 0.7:" in a["answer"]


def test_no_answer_without_a_mechanism_or_a_rigorous_bound() -> None:
    heuristic = _bound(1.0)
    heuristic["lower"] = {**heuristic["lower"], "validity": "heuristic"}
    assert _answers([heuristic], [_TEST]) == []
    assert _answers([_bound(1.0)], [{"label": "laplace mechanism"}]) == []


def test_list_experiment_report_answers_from_its_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(AUDITS))
    result = run_audit(AUDITS / "list-experiment.toml", output_dir=tmp_path, write=False)
    result = result.to_dict()
    # Without the audit's own description the report still answers: the sentence comes
    # from the stored bound alone.
    result["config"]["audit"]["description"] = None
    bound = next(b for b in result["bounds"] if b["parameter"] == "epsilon")
    value, limit = bound["lower"]["value"], bound["limit_of_detection"]
    # The default score (auto: a learned score on a third of the trials, counted on the
    # rest) and the seed fix the bound; the sentence must carry exactly these stored numbers.
    assert fmt_number(value, 3) == "7.53"
    assert fmt_number(limit, 3) == "8.24"
    html = render_report(result)
    (text,) = re.findall(r'id="dp-answer-1">(.*?)</p>', html)
    assert text == (
        "<strong>Does the plugins.list_experiment:list_experiment mechanism satisfy "
        "DP?</strong> Not at any ε below 7.53: the rigorous multi-run lower bound proves, "
        "at 97.5 % confidence, that it is not (ε, 0)-DP for any ε &lt; 7.53. The claimed "
        "ε = 100 is not contradicted. The bound is 91 % of the most any attack could "
        "certify with these trials (ε = 8.24): the trials capped it, and more trials may "
        "prove a larger ε."
    )
