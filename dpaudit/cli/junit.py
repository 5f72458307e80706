"""``dpaudit run --junit``: the audit's checks and bounds as a JUnit XML test suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree as ET

from dpaudit.cli._common import fail
from dpaudit.safe_text import for_xml
from dpaudit.store import LOCK_NAME, atomic_write_bytes

if TYPE_CHECKING:
    from dpaudit.results import AuditResult


def check_junit_path(junit: Path, run_dir: Path, audit_file: Path) -> None:
    """``--junit`` may not overwrite the audit file or anything in the run directory."""
    if junit == audit_file:
        raise fail(f"--junit {junit} is the audit file itself; give another path")
    owned = (run_dir, run_dir / "results.json", run_dir / "report.html", run_dir / LOCK_NAME)
    if junit in owned or run_dir / "units" in junit.parents or junit.name.endswith(".tmp"):
        raise fail(
            f"--junit {junit} would overwrite a file of the run directory {run_dir} "
            "(results.json, report.html, units, the lock); give another path"
        )
    if junit.is_dir():
        raise fail(f"--junit {junit} is a folder; give a file path")


def write_junit(result: AuditResult, path: Path) -> None:
    """Write the audit as a JUnit XML test suite: one test case per gate check and one
    per bound (lower bound held against its upper bound).

    - The suite's properties: the verdicts, the report and results paths, the config
      hash, dpaudit's version and each kind's compute seconds; its ``time`` is the run's.
    - A gate check fails when it failed (a check not evaluated under
      ``on_unmeasured = "warn"`` is ``skipped``); its properties are value, limit, status.
    - A bound fails only when it is a violation (rigorous and above its upper bound); its
      properties are what ``results.json`` says of it (value, confidence level, validity,
      method, δ, upper bound and its source, tightness, limit of detection, whether it
      is in the verdict), numbers written as ``results.json`` writes them.
    - ``time``: the checks and bounds carry no timing of their own, so each test case gets
      an even share of the kinds' compute seconds (the cases add up to them).

    Every string is made safe for XML (:func:`dpaudit.safe_text.for_xml`): an audit name
    or message with control characters still gives a file every CI system can parse.
    """

    data = result.to_dict()  # the numbers exactly as results.json holds them
    timings = {k: float(v) for k, v in data["provenance"].get("timings_seconds", {}).items()}
    total = timings.pop("total", sum(timings.values()))
    checks, bounds = data["checks"], data["bounds"]
    cases = len(checks) + len(bounds)
    share = f"{sum(timings.values()) / cases:.6f}" if cases else "0.000000"

    def properties(parent: ET.Element, values: dict[str, Any]) -> None:
        props = ET.SubElement(parent, "properties")
        for key, value in values.items():
            if value is not None:
                text = json.dumps(value) if isinstance(value, bool | float | int) else value
                ET.SubElement(props, "property", name=key, value=for_xml(text))

    failures = sum(not c["passed"] for c in checks) + sum(b["violation"] for b in bounds)
    unmeasured = ("not-evaluated", "not-applicable")
    skipped = sum(c["passed"] and c["status"] in unmeasured for c in checks)
    name = for_xml(f"dpaudit.{result.name}")
    suite = ET.Element(
        "testsuite",
        name=name,
        tests=str(cases),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{total:.6f}",
    )
    run_dir = Path(str(data["provenance"].get("run_dir", ".")))
    report = run_dir / "report.html"
    properties(
        suite,
        {
            "verdict": data["verdict"],
            "privacy_verdict": data["privacy_verdict"],
            "report": str(report) if report.is_file() else None,
            "results": str(run_dir / "results.json"),
            "config_hash": data["provenance"].get("config_hash"),
            "dpaudit_version": data["provenance"].get("dpaudit_version"),
            **{f"seconds.{kind}": seconds for kind, seconds in timings.items()},
        },
    )
    for check in checks:
        case = ET.SubElement(
            suite, "testcase", classname=name, name=for_xml(check["name"]), time=share
        )
        properties(
            case, {"value": check["value"], "limit": check["limit"], "status": check["status"]}
        )
        if not check["passed"]:
            failure = ET.SubElement(case, "failure", message=for_xml(check["message"]))
            failure.text = for_xml(f"value={check['value']} limit={check['limit']}")
        elif check["status"] in unmeasured:
            ET.SubElement(case, "skipped", message=for_xml(check["message"]))
    for bound in bounds:
        lower = bound["lower"]
        symbol = {"epsilon": "ε", "mu": "μ"}.get(lower["parameter"], lower["parameter"])
        at = f"δ={lower['delta']:g}, " if lower.get("delta") is not None else ""
        title = f"{bound['test']}: {symbol} lower bound ({at}{lower['validity']})"
        case = ET.SubElement(
            suite, "testcase", classname=f"{name}.bounds", name=for_xml(title), time=share
        )
        properties(
            case,
            {
                "parameter": lower["parameter"],
                "value": lower["value"],
                "confidence_level": lower["confidence_level"],
                "validity": lower["validity"],
                "method": lower["method"],
                "delta": lower.get("delta"),
                "upper": bound["upper"],
                "upper_source": bound["upper_source"],
                "tightness": bound["tightness"],
                "limit_of_detection": bound["limit_of_detection"],
                "in_verdict": bound["in_verdict"],
                "violation": bound["violation"],
            },
        )
        if bound["violation"]:
            failure = ET.SubElement(
                case, "failure", message=for_xml(f"{title} exceeds its upper bound")
            )
            failure.text = for_xml(
                f"lower={lower['value']} upper={bound['upper']} ({bound['upper_source']})"
            )
    atomic_write_bytes(path, ET.tostring(suite, encoding="utf-8", xml_declaration=True))
