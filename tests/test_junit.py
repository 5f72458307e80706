"""The ``--junit`` file: gate checks and bounds as test cases, read back with ElementTree.

Every number in the XML must be the very number ``results.json`` holds (both are written
from one result), the report's path a property, each case's time an even share of the
kinds' compute seconds (they add up to them), and the failures exactly the failed checks
plus the violations.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from typer.testing import CliRunner

from dpaudit.cli import app

runner = CliRunner()

# Laplace noise for ε = 2 claimed as ε = 0.5: a rigorous ε lower bound above 0.5 (a
# violation), a passed AUC limit, and an unmeasured attribute policy that only warns.
VIOLATION = """
[audit]
name = "junit-violation"
kinds = ["mechanism"]
seed = 0
[mechanism]
name = "laplace"
epsilon = 2.0
trials = 20_000
claim_curve = false  # ε and μ only (the curve's share: tests/test_claim_curve_mechanism.py)
[mechanism.claim]
epsilon = 0.5
[gate]
on_unmeasured = "warn"
max_auc = 0.99
max_attribute_advantage = 0.5
"""

# Laplace ε = 1 held against its true ε: no violation; the default gate passes.
CONSISTENT = """
[audit]
name = "junit-consistent"
kinds = ["mechanism"]
seed = 1
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 4_000
"""


def _run(tmp_path: Path, text: str, expected_exit: int) -> tuple[ET.Element, dict]:
    audit = tmp_path / "audit.toml"
    audit.write_text(text)
    junit = tmp_path / "out" / "checks.xml"
    junit.parent.mkdir()
    result = runner.invoke(
        app, ["run", str(audit), "-q", "-o", str(tmp_path / "run"), "--junit", str(junit)]
    )
    assert result.exit_code == expected_exit, result.output
    return ET.parse(junit).getroot(), json.loads((tmp_path / "run" / "results.json").read_text())


@pytest.fixture(scope="module")
def violation(tmp_path_factory: pytest.TempPathFactory) -> tuple[ET.Element, dict, Path]:
    tmp = tmp_path_factory.mktemp("junit-violation")
    suite, results = _run(tmp, VIOLATION, 1)
    return suite, results, tmp


def _props(element: ET.Element) -> dict[str, str]:
    found = element.find("properties")
    assert found is not None
    return {p.get("name", ""): p.get("value", "") for p in found.findall("property")}


def _cases(suite: ET.Element, classname: str) -> list[ET.Element]:
    return [c for c in suite.findall("testcase") if c.get("classname") == classname]


def test_every_check_and_every_bound_is_a_test_case(violation) -> None:
    suite, results, _ = violation
    checks = _cases(suite, "dpaudit.junit-violation")
    bounds = _cases(suite, "dpaudit.junit-violation.bounds")
    assert [c.get("name") for c in checks] == [c["name"] for c in results["checks"]]
    assert [b["lower"]["parameter"] for b in results["bounds"]] == ["epsilon", "mu"]
    assert len(bounds) == 2
    assert int(suite.get("tests", "")) == len(checks) + len(bounds) == len(suite) - 1
    (eps,) = [b for b in results["bounds"] if b["lower"]["parameter"] == "epsilon"]
    assert eps["upper"] == 0.5  # the claim


def test_bound_properties_are_the_numbers_of_results_json(violation) -> None:
    suite, results, _ = violation
    bounds = _cases(suite, "dpaudit.junit-violation.bounds")
    for case, bound in zip(bounds, results["bounds"], strict=True):
        props, lower = _props(case), bound["lower"]
        # Exact: the XML holds the float's shortest repr, as JSON does.
        assert float(props["value"]) == lower["value"]
        assert float(props["confidence_level"]) == lower["confidence_level"]
        assert props["validity"] == lower["validity"]
        assert props["method"] == lower["method"]
        assert props["parameter"] == lower["parameter"]
        assert float(props["upper"]) == bound["upper"]  # the claim (ε) or its μ
        assert props["upper_source"] == bound["upper_source"]
        assert props["in_verdict"] == json.dumps(bound["in_verdict"])
        assert props["violation"] == json.dumps(bound["violation"])
        if bound["limit_of_detection"] is not None:
            assert float(props["limit_of_detection"]) == bound["limit_of_detection"]
        assert lower["validity"] in case.get("name", "")
        assert bound["test"] in case.get("name", "")


def test_a_violation_is_a_failed_bound_case_and_counts_once_per_case(violation) -> None:
    suite, results, _ = violation
    bounds = _cases(suite, "dpaudit.junit-violation.bounds")
    violated = [b["violation"] for b in results["bounds"]]
    assert any(violated)  # power control: the planted bug is found
    assert [c.find("failure") is not None for c in bounds] == violated
    failed_checks = sum(not c["passed"] for c in results["checks"])
    assert failed_checks == 1  # fail_on_violation; max_auc passed
    assert int(suite.get("failures", "")) == failed_checks + sum(violated)
    failure = next(c for c in bounds if c.find("failure") is not None).find("failure")
    assert failure is not None
    assert "exceeds its upper bound" in failure.get("message", "")


def test_an_unmeasured_policy_under_warn_is_skipped_not_failed(violation) -> None:
    suite, _, _ = violation
    (case,) = [c for c in suite.findall("testcase") if c.get("name") == "max_attribute_advantage"]
    assert case.find("failure") is None
    skipped = case.find("skipped")
    assert skipped is not None
    assert skipped.get("message", "").startswith("not evaluated")
    assert suite.get("skipped") == "1"
    props = _props(case)
    assert props["status"] == "not-evaluated"
    assert "value" not in props  # nothing measured it: no value is invented
    assert float(props["limit"]) == 0.5


def test_check_properties_are_value_limit_status(violation) -> None:
    suite, results, _ = violation
    (case,) = [c for c in suite.findall("testcase") if c.get("name") == "max_auc"]
    (check,) = [c for c in results["checks"] if c["name"] == "max_auc"]
    props = _props(case)
    assert float(props["value"]) == check["value"]
    assert float(props["limit"]) == 0.99
    assert props["status"] == "passed"


def test_suite_properties_name_the_report_and_the_times_add_up(violation) -> None:
    suite, results, tmp = violation
    props = _props(suite)
    assert props["report"] == str((tmp / "run" / "report.html").resolve())
    assert Path(props["report"]).is_file()
    assert props["results"] == str((tmp / "run" / "results.json").resolve())
    assert props["verdict"] == "fail"
    assert props["privacy_verdict"] == "violation"
    assert props["config_hash"] == results["provenance"]["config_hash"]
    timings = results["provenance"]["timings_seconds"]
    assert float(props["seconds.mechanism"]) == timings["mechanism"]
    assert float(suite.get("time", "")) == pytest.approx(timings["total"], abs=1e-6)
    times = [float(c.get("time", "")) for c in suite.findall("testcase")]
    # Each time is written to 1e-6 s: the sum may be off by half that per case.
    assert math.fsum(times) == pytest.approx(timings["mechanism"], abs=len(times) * 5e-7)
    assert len(set(times)) == 1


def test_a_consistent_audit_has_no_failure_and_no_report_when_html_is_off(tmp_path) -> None:
    suite, results = _run(tmp_path, CONSISTENT + "[report]\nhtml = false\n", 0)
    assert suite.get("failures") == "0"
    assert suite.get("skipped") == "0"
    assert not any(c.find("failure") is not None for c in suite.findall("testcase"))
    assert "report" not in _props(suite)  # no report.html was written: no path to it
    assert len(_cases(suite, "dpaudit.junit-consistent.bounds")) == len(results["bounds"])
