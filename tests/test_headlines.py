"""The verdict's words come from WHICH checks failed (dpaudit.results.verdict_findings).

A bound above its upper bound, a grey-box check of what a DP-SGD run did, a claim held
against the records of what ran and a gate limit each give their own headline, in
results.json (``headline``, ``findings``) and in the report; a passing audit's words do
not change.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from dpaudit.audit import run_audit
from dpaudit.bounds import epsilon_from_counts
from dpaudit.report import render_report
from dpaudit.results import Check, Comparison, verdict_findings, verdict_headline

ROOT = Path(__file__).resolve().parent.parent
GREYBOX = Path(__file__).parent / "plugins_greybox"

CONSISTENT = (
    "Privacy: consistent. No rigorous lower bound exceeds its upper bound (this is not a "
    "proof that the guarantee holds; see “What these numbers mean”)."
)


def _text(page: str) -> str:
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


def _run(path: Path, run_dir: Path) -> dict[str, Any]:
    run_audit(path, output_dir=run_dir)
    return json.loads((run_dir / "results.json").read_text(encoding="utf-8"))


def _laplace(tmp_path: Path, name: str, extra: str = "") -> Path:
    text = (ROOT / "audits" / f"{name}.toml").read_text(encoding="utf-8")
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace("trials = 100_000", "trials = 20_000") + extra, encoding="utf-8")
    return path


def _greybox(tmp_path: Path, bug: str) -> Path:
    shutil.copytree(GREYBOX, tmp_path / "plugins_greybox", dirs_exist_ok=True)
    path = tmp_path / "greybox.toml"
    path.write_text(
        f"""
[audit]
name = "greybox"
kinds = ["dpsgd"]
seed = 0

[dpsgd]
trainer = "plugins_greybox.simulated:dirac_dpsgd"
rows = 100
trials = 20
options = {{ bug = "{bug}" }}

[dpsgd.training]
epochs = 2
batch_size = 20
learning_rate = 0.5

[dpsgd.training.dp]
noise_multiplier = 1.0
clipping_norm = 1.0
""",
        encoding="utf-8",
    )
    return path


def test_a_bound_above_its_upper_bound_is_said_so(tmp_path: Path) -> None:
    data = _run(_laplace(tmp_path, "laplace-violation"), tmp_path / "run")
    bad = [b for b in data["bounds"] if b["violation"]]
    worst = max(bad, key=lambda b: b["lower"]["value"] - b["upper"])
    assert [f["kind"] for f in data["findings"]] == ["bound"]
    finding = data["findings"][0]
    assert finding["check"] == "fail_on_violation"
    assert finding["privacy"]
    symbol = "ε" if worst["parameter"] == "epsilon" else "μ"
    assert finding["statement"].startswith(
        "a rigorous empirical lower bound exceeds its upper bound: "
        f"{symbol} ≥ {worst['lower']['value']:.4g} in {worst['test']} (rigorous multi-run, "
    )
    assert (
        f"against the {worst['upper_source']} upper bound {worst['upper']:.4g}"
        in (finding["statement"])
    )
    assert data["headline"] == f"Privacy violation proven: {finding['statement']}"
    text = _text((tmp_path / "run" / "report.html").read_text(encoding="utf-8"))
    assert f"Privacy violation proven: {finding['statement']}." in text
    assert CONSISTENT not in text


@pytest.mark.parametrize(
    ("bug", "check", "words"),
    [
        (
            "fixed-batches",
            "greybox_batch_sizes",
            r"batches had a fixed size; the stated ε assumes Poisson sampling at q, so it "
            r"does not hold",
        ),
        (
            "sigma/10",
            "greybox_noise",
            r"the run added less noise than σC \(0\.\d+·σC on a coordinate no example "
            r"touches\); the stated ε assumes σC, so it does not hold",
        ),
        (
            "missing-step",
            "greybox_steps",
            r"\d+ of \d+ models ran a number of steps other than the accounted; model \d+ ran "
            r"9 steps, 10 accounted: the accountant's ε is that of the steps accounted, not "
            r"of the steps run",
        ),
    ],
)
def test_a_greybox_check_says_what_the_run_did(
    tmp_path: Path, bug: str, check: str, words: str
) -> None:
    data = _run(_greybox(tmp_path, bug), tmp_path / "run")
    assert data["privacy_verdict"] == "violation"
    # No bound exceeds its upper bound: the words must not say one does.
    assert not any(b["violation"] for b in data["bounds"])
    assert [(f["check"], f["kind"]) for f in data["findings"]] == [(check, "greybox")]
    statement = data["findings"][0]["statement"]
    assert re.fullmatch(words, statement), statement
    assert data["headline"] == f"The run did not do what was accounted: {statement}"
    if bug == "sigma/10":  # the σ/10 run shows about a tenth of the noise
        ratio = float(re.search(r"\((0\.\d+)·σC", statement).group(1))  # type: ignore[union-attr]
        assert 0.05 < ratio < 0.2
    text = _text((tmp_path / "run" / "report.html").read_text(encoding="utf-8"))
    assert f"The run did not do what was accounted: {statement}." in text
    assert "Privacy violation proven" not in text


def test_a_passing_audit_keeps_its_words(tmp_path: Path) -> None:
    data = _run(_laplace(tmp_path, "laplace"), tmp_path / "run")
    assert data["verdict"] == "pass"
    assert data["findings"] == []
    assert data["headline"] == "privacy: consistent"
    text = _text((tmp_path / "run" / "report.html").read_text(encoding="utf-8"))
    assert CONSISTENT in text
    assert "Privacy violation" not in text


def test_a_gate_limit_is_not_a_privacy_violation(tmp_path: Path) -> None:
    data = _run(_laplace(tmp_path, "laplace", "\n[gate]\nmax_auc = 0.5\n"), tmp_path / "run")
    assert data["verdict"] == "fail"
    assert data["privacy_verdict"] == "consistent"
    (finding,) = data["findings"]
    auc = next(c for c in data["checks"] if c["name"] == "max_auc")
    assert finding == {
        "check": "max_auc",
        "kind": "gate",
        "title": "Gate limit exceeded",
        "privacy": False,
        "statement": f"{auc['message']}: the release gate's limit max_auc is exceeded",
    }
    assert data["headline"] == f"Gate limit exceeded: {finding['statement']}"
    text = _text((tmp_path / "run" / "report.html").read_text(encoding="utf-8"))
    assert CONSISTENT in text


def _bound(value_fp: int, upper: float) -> Comparison:
    lower = epsilon_from_counts(value_fp, 1000, 50, 1000, delta=1e-5)
    return Comparison(
        test="t", parameter="epsilon", lower=lower, upper=upper, upper_source="claimed ε",
        in_verdict=True,
    )  # fmt: skip


def test_each_kind_of_failed_check_has_its_own_words() -> None:
    # ε ≥ 4.387 from FP = 5 and FN = 50 of 1,000 each (docs/design.md's example)
    bounds = [_bound(5, 1.0), _bound(5, 10.0)]
    assert bounds[0].violation
    assert not bounds[1].violation
    checks = [
        Check("fail_on_violation", 4.387, 1.0, False, "ε lower bound exceeds"),
        Check("greybox_clipping", 0.0, None, False, "clipping", finding=""),
        Check("claim_vs_records", 5.0, 2.0, False, "msg", finding="the claim states ε = 2"),
        Check("max_advantage", None, 0.1, False, "nothing measured", status="not-evaluated"),
        Check("max_auc", 0.9, 0.6, True, "AUC 0.9 ≤ 0.6 would not pass; passed here"),
    ]
    found = verdict_findings(checks, bounds)
    assert [f["kind"] for f in found] == ["bound", "greybox", "claim", "unmeasured"]
    assert found[0]["statement"].startswith(
        "a rigorous empirical lower bound exceeds its upper bound: ε ≥ 4.387 in t "
        "(rigorous multi-run, 95 % confidence) against the claimed ε upper bound 1, so "
    )
    # A check without words of its own is worded by its name.
    assert found[1]["statement"].startswith("per-example gradients were not clipped to C")
    assert found[2]["statement"] == "the claim states ε = 2"
    assert found[3] == {
        "check": "max_advantage",
        "kind": "unmeasured",
        "title": "Not evaluated",
        "privacy": False,
        "statement": "max_advantage: nothing measured",
    }
    # Privacy findings lead the one-line headline, with a count of the rest.
    headline = verdict_headline(list(reversed(found)), privacy_verdict="violation")
    assert headline.startswith("The claim does not cover what ran: the claim states ε = 2")
    assert headline.endswith("(and 3 more failed checks)")
    assert verdict_headline((), privacy_verdict="consistent") == "privacy: consistent"


def test_an_older_results_file_without_findings_keeps_the_general_words() -> None:
    results = {
        "name": "old",
        "verdict": "fail",
        "privacy_verdict": "violation",
        "checks": [
            {"name": "greybox_noise", "value": 0.0, "limit": 0.01, "passed": False,
             "message": "noise too small", "status": "failed"},
        ],
        "bounds": [],
        "tests": [],
        "config": {"audit": {"confidence_level": 0.95}},
        "provenance": {},
        "warnings": [],
    }  # fmt: skip
    text = _text(render_report(results))
    assert "Privacy violation proven: a rigorous empirical lower bound exceeds its upper" in text
