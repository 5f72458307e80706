"""The release gate: every policy is a named check with value, limit and reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpaudit.bounds import epsilon_from_counts, mu_from_counts
from dpaudit.cli import app
from dpaudit.results import Comparison, TestSummary
from dpaudit.results.gate import evaluate_gate
from dpaudit.sections import GateSection


def _test(label: str, auc: float, advantage: float, tprs: dict[float, float]) -> TestSummary:
    rows = [{"target_fpr": f, "tpr": t} for f, t in tprs.items()]
    metrics = {"auc": auc, "advantage": advantage, "tpr_at_fpr": rows}
    return TestSummary(label, label, ("H0", "H1"), 10, 10, metrics, {}, {})


TESTS = [
    _test("loss", 0.61, 0.12, {0.1: 0.2, 0.01: 0.03}),
    _test("lira", 0.74, 0.30, {0.1: 0.35, 0.01: 0.14}),
]
# FP = FN = 0 of 1000 gives ε ≥ 5.601 (rigorous); FP 5, FN 50 gives ε ≥ 4.387
STRONG = epsilon_from_counts(0, 1000, 0, 1000, delta=1e-5)
HEURISTIC = epsilon_from_counts(0, 1000, 0, 1000, delta=1e-5, validity="heuristic")


def _check(gate: GateSection, comparisons=(), tests=TESTS, attribute=()):
    checks = evaluate_gate(gate, comparisons=comparisons, tests=tests, attribute=attribute)
    return {c.name: c for c in checks}


def test_violation_needs_a_rigorous_bound_above_its_upper_bound() -> None:
    above = Comparison(
        test="t",
        parameter="epsilon",
        lower=STRONG,
        upper=5.0,
        upper_source="claimed ε",
        in_verdict=True,
    )
    below = Comparison(
        test="t",
        parameter="epsilon",
        lower=STRONG,
        upper=6.0,
        upper_source="claimed ε",
        in_verdict=True,
    )
    heuristic = Comparison(
        test="t",
        parameter="epsilon",
        lower=HEURISTIC,
        upper=5.0,
        upper_source="claimed ε",
        in_verdict=True,
    )
    outside = Comparison(
        test="t",
        parameter="epsilon",
        lower=STRONG,
        upper=5.0,
        upper_source="claimed ε",
        in_verdict=False,
    )
    gate = GateSection()
    failed = _check(gate, [above])["fail_on_violation"]
    assert not failed.passed
    assert failed.value == pytest.approx(5.6006, abs=1e-4)
    assert failed.limit == 5.0
    assert "exceeds the claimed ε upper bound 5" in failed.message
    for ok in ([below], [heuristic]):
        assert _check(gate, ok)["fail_on_violation"].status == "passed"
    # a comparison outside the verdict compares nothing: the default policy does not apply,
    # and the policy the file sets is not evaluated (it fails closed)
    default = _check(gate, [outside])["fail_on_violation"]
    assert (default.passed, default.status, default.value) == (True, "not-applicable", None)
    assert default.message.startswith("not applicable: nothing in this audit states a guarantee")
    assert default.message.endswith("set [gate] fail_on_violation = true to require one")
    asked = _check(GateSection(fail_on_violation=True), [outside])["fail_on_violation"]
    assert (asked.passed, asked.status) == (False, "not-evaluated")
    assert "fail_on_violation" not in _check(GateSection(fail_on_violation=False), [above])


def test_max_epsilon_lower_bound_counts_only_rigorous_epsilon_bounds() -> None:
    mu = mu_from_counts(0, 1000, 0, 1000)  # a large μ must not count as ε
    comps = [
        Comparison(
            test="a",
            parameter="epsilon",
            lower=epsilon_from_counts(5, 1000, 50, 1000, delta=1e-5),
            upper=None,
            upper_source="none",
            in_verdict=False,
        ),
        Comparison(
            test="b",
            parameter="epsilon",
            lower=HEURISTIC,
            upper=None,
            upper_source="none",
            in_verdict=False,
        ),
        Comparison(
            test="c", parameter="mu", lower=mu, upper=None, upper_source="none", in_verdict=False
        ),
    ]
    check = _check(GateSection(max_epsilon_lower_bound=4.0), comps)["max_epsilon_lower_bound"]
    assert check.value == pytest.approx(4.3866, abs=1e-4)
    assert not check.passed
    assert _check(GateSection(max_epsilon_lower_bound=4.5), comps)["max_epsilon_lower_bound"].passed


@pytest.mark.parametrize(
    ("gate", "name", "value", "passed"),
    [
        (GateSection(max_auc=0.7), "max_auc", 0.74, False),
        (GateSection(max_auc=0.75), "max_auc", 0.74, True),
        (GateSection(max_advantage=0.25), "max_advantage", 0.30, False),
        (GateSection(max_tpr_at_fpr=[(0.01, 0.1)]), "max_tpr_at_fpr[0.01]", 0.14, False),
        (GateSection(max_tpr_at_fpr=[(0.1, 0.4)]), "max_tpr_at_fpr[0.1]", 0.35, True),
    ],
)
def test_metric_limits_take_the_worst_test(gate, name, value, passed) -> None:
    check = _check(gate)[name]
    assert check.value == pytest.approx(value)
    assert check.passed is passed
    assert "(lira)" in check.message  # names the test that set the value


def test_attribute_advantage_and_missing_metrics() -> None:
    attribute = [{"label": "plain", "advantage": 0.08}, {"label": "dp", "advantage": -0.02}]
    check = _check(GateSection(max_attribute_advantage=0.05), attribute=attribute)
    assert not check["max_attribute_advantage"].passed
    assert check["max_attribute_advantage"].value == pytest.approx(0.08)
    # nothing measured: the gate fails closed and names the kind that would measure it
    none = _check(GateSection(max_attribute_advantage=0.05), tests=[])["max_attribute_advantage"]
    assert (none.passed, none.status, none.value) == (False, "not-evaluated", None)
    assert none.message == (
        "not evaluated: nothing in this audit measures it; it needs the attribute kind "
        "(fails closed)"
    )


@pytest.mark.parametrize(
    ("gate", "name"),
    [
        (GateSection(max_attribute_advantage=0.05), "max_attribute_advantage"),
        (GateSection(max_auc=0.5), "max_auc"),
        (GateSection(max_advantage=0.5), "max_advantage"),
        (GateSection(max_tpr_at_fpr=[(0.01, 0.5)]), "max_tpr_at_fpr[0.01]"),
        (GateSection(max_epsilon_lower_bound=1.0), "max_epsilon_lower_bound"),
        (GateSection(fail_on_violation=True), "fail_on_violation"),
    ],
)
def test_every_unmeasured_policy_fails_closed_unless_it_warns(gate, name) -> None:
    closed = _check(gate, comparisons=(), tests=[])[name]
    assert (closed.passed, closed.status) == (False, "not-evaluated")
    assert closed.message.startswith("not evaluated: nothing in this audit measures it")
    warn = gate.model_copy(update={"on_unmeasured": "warn"})
    warned = _check(warn, comparisons=(), tests=[])[name]
    assert (warned.passed, warned.status) == (True, "not-evaluated")
    assert warned.message.endswith("(warning only (on_unmeasured = 'warn'))")


MECHANISM_WITH_ATTRIBUTE_GATE = """
[audit]
name = "fail-closed"
kinds = ["mechanism"]
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 2000
[gate]
max_attribute_advantage = 0.05
{extra}
"""


@pytest.mark.parametrize(("extra", "code"), [("", 1), ('on_unmeasured = "warn"', 0)])
def test_an_unmeasured_policy_fails_the_run_by_default(tmp_path: Path, extra, code) -> None:
    audit = tmp_path / "a.toml"
    audit.write_text(MECHANISM_WITH_ATTRIBUTE_GATE.format(extra=extra))
    result = CliRunner().invoke(app, ["run", str(audit), "-q", "-o", str(tmp_path / "r")])
    assert result.exit_code == code, result.output
    if code:
        assert result.stderr.startswith(
            "FAIL max_attribute_advantage: not evaluated: nothing in this audit measures it"
        )


def test_gate_fails_a_run_end_to_end(tmp_path: Path) -> None:
    # Laplace ε = 2 on 4,000 trials: its AUC is about 0.82, above a 0.6 limit.
    audit = tmp_path / "a.toml"
    audit.write_text(
        '[audit]\nname = "gate"\nkinds = ["mechanism"]\n'
        '[mechanism]\nname = "laplace"\nepsilon = 2.0\ntrials = 4000\n'
        "[gate]\nmax_auc = 0.6\n"
    )
    junit = tmp_path / "j.xml"
    result = CliRunner().invoke(
        app, ["run", str(audit), "-q", "-o", str(tmp_path / "r"), "--junit", str(junit)]
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("FAIL max_auc: AUC 0.8")
    xml = junit.read_text()
    assert 'name="max_auc"' in xml
    assert 'failures="1"' in xml
