"""The HTML report: escaping, no URLs, verdict first, attribute table, `dpaudit report`."""

from __future__ import annotations

import copy
import html
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from dpaudit.audit import run_audit
from dpaudit.cli import app
from dpaudit.config import load_config
from dpaudit.report import fmt_count, fmt_interval, fmt_number, render_report
from dpaudit.report.plots import (
    histogram_plot,
    is_concentrated,
    svg_fragment,
    tradeoff_plot,
)
from dpaudit.schemas import validate_results

AUDITS = Path(__file__).resolve().parents[1] / "audits"
EVIL = "<script>alert(1)</script>"
runner = CliRunner()


def run_small(name: str, out: Path, *, trials: int = 4_000, audit_name: str | None = None) -> Path:
    """Run an example audit with fewer trials (and optionally another name) into ``out``."""
    config = load_config(AUDITS / f"{name}.toml").with_section("mechanism", trials=trials)
    update: dict[str, Any] = {}
    if audit_name is not None:
        update["audit"] = config.audit.model_copy(update={"name": audit_name})
    run_audit(config.model_copy(update=update), output_dir=out)
    return out


@pytest.fixture(scope="module")
def violation_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_small("laplace-violation", tmp_path_factory.mktemp("violation"))


@pytest.fixture(scope="module")
def violation(violation_dir: Path) -> dict[str, Any]:
    return json.loads((violation_dir / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def evil_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_small("laplace", tmp_path_factory.mktemp("evil"), audit_name=EVIL)


def visible_text(page: str) -> str:
    """The page's text without tags and entities decoded (roughly what a reader sees)."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page)))


# ------------------------------------------------------------------------------- escaping


def test_audit_name_is_escaped(evil_dir: Path) -> None:
    page = (evil_dir / "report.html").read_text(encoding="utf-8")
    assert EVIL not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page.lower()  # the report itself needs no script at all


def test_every_user_string_is_escaped(violation: dict[str, Any]) -> None:
    r = copy.deepcopy(violation)
    r["warnings"] = [EVIL]
    r["config_text"] = f'name = "{EVIL}"\n'
    r["checks"][0]["message"] = EVIL
    r["bounds"][0]["test"] = EVIL
    r["tests"][0]["label"] = EVIL
    r["tests"][0]["hypotheses"] = [EVIL, "<b>D'</b>"]  # lands in the histogram's SVG legend
    r["tests"][0]["theory_curves"][0]["label"] = EVIL + " $x$ cost $5"  # SVG legend, mathtext
    r["provenance"]["libraries"][EVIL] = EVIL
    page = render_report(r)
    assert EVIL not in page
    assert "<b>D'</b>" not in page
    assert page.count("&lt;script&gt;") >= 8
    # Dollars are shown as written, never interpreted as mathtext.
    assert "$x$ cost $5" in page


def test_svg_text_from_user_strings_is_escaped() -> None:
    test = {
        "hypotheses": ["<i>a</i>", "x & y"],
        "histogram": {"edges": [0.0, 1.0, 2.0], "negatives": [3, 1], "positives": [1, 3]},
    }
    svg = histogram_plot(test)
    assert svg is not None
    assert "<i>" not in svg
    assert "&lt;i&gt;a&lt;/i&gt;" in svg
    assert "x &amp; y" in svg


# ---------------------------------------------------------------------------- offline


def test_no_url_anywhere(violation: dict[str, Any]) -> None:
    r = copy.deepcopy(violation)
    # Even user text that holds URLs must not put one in the file.
    r["config_text"] = "# see https://example.org and HTTP://example.org\n" + r["config_text"]
    r["warnings"] = ["details at http://example.org/x"]
    page = render_report(r)
    assert "http://" not in page.lower()
    assert "https://" not in page.lower()
    assert "see https://example.org" in visible_text(page)  # still readable


def test_self_contained(violation_dir: Path) -> None:
    page = (violation_dir / "report.html").read_text(encoding="utf-8")
    assert "http://" not in page
    assert "https://" not in page
    assert re.search(r"<link\b|<script\b|<img\b|<iframe\b|@import|url\((?!#)", page) is None
    assert page.count("<svg") == 3  # trade-off, ROC, histogram
    assert "<?xml" not in page
    assert "<!DOCTYPE svg" not in page


def test_svg_ids_are_unique_in_the_page(violation: dict[str, Any]) -> None:
    page = render_report(violation)
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    # Every internal reference points at an id of the page.
    refs = set(re.findall(r'url\(#([^)]+)\)|href="#([^"]+)"', page))
    assert {a or b for a, b in refs} <= set(ids)


def test_svg_fragment_strips_prolog_and_namespaces() -> None:
    from matplotlib.figure import Figure

    fig = Figure()
    fig.subplots().plot([0, 1], [0, 1], marker="o")
    svg = svg_fragment(fig)
    assert svg.startswith("<svg ")
    assert "xmlns" not in svg
    assert "http" not in svg
    assert "<metadata" not in svg


# ----------------------------------------------------------------------------- content


def test_verdict_and_failed_check_come_first(violation: dict[str, Any]) -> None:
    page = render_report(violation)
    text = visible_text(page)
    reason = violation["checks"][0]["message"]
    assert violation["verdict"] == "fail"
    assert reason in text
    assert "Privacy violation proven" in text
    # The verdict banner precedes every other section.
    start = text.index("FAIL")
    assert start < text.index(reason) < text.index("Bounds: empirical lower")
    assert text.index(reason) < text.index("What these numbers mean")


def test_bounds_table_shows_lower_upper_tightness_and_meaning(violation: dict[str, Any]) -> None:
    text = visible_text(render_report(violation))
    for b in violation["bounds"]:
        assert fmt_number(b["lower"]["value"]) in text
        assert fmt_number(b["upper"]) in text
        assert fmt_number(b["tightness"], 3) in text
        assert b["validity_meaning"] in text
    assert "VIOLATION" in text


def test_sections_of_the_report(violation: dict[str, Any]) -> None:
    text = visible_text(render_report(violation))
    for heading in (
        "Gate checks",
        "Test: laplace mechanism",
        "What these numbers mean",
        "The audit file",
        "Provenance",
    ):
        assert heading in text
    assert "A lower bound above the upper bound proves a bug" in text
    assert "proves nothing about safety" in text
    assert "describe an attack, not a guarantee" in text
    prov = violation["provenance"]
    for value in (prov["config_hash"], prov["dpaudit_version"], prov["started"]):
        assert value in text
    assert "epsilon = 0.5" in text  # the audit file, as written
    m = violation["tests"][0]["metrics"]
    assert fmt_interval(m["auc_interval"]) in text


def test_pass_verdict(tmp_path: Path) -> None:
    out = run_small("laplace", tmp_path)
    r = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert r["verdict"] == "pass"
    text = visible_text(render_report(r))
    assert "PASS" in text
    assert "Privacy: consistent" in text
    assert "FAIL" not in text.split("Gate checks")[0]


def test_warnings_are_shown(violation: dict[str, Any]) -> None:
    r = copy.deepcopy(violation)
    r["warnings"] = ["no lower bound exceeds 0 with 10 trials per hypothesis"]
    assert "Warning: no lower bound exceeds 0 with 10 trials" in visible_text(render_report(r))


ATTRIBUTE = {
    "label": "attribute inference on the DP target (sex)",
    "sensitive": "sex",
    "accuracy_members": 0.7123,
    "accuracy_members_interval": [0.6612, 0.7591],
    "accuracy_non_members": 0.6871,
    "accuracy_non_members_interval": [0.6344, 0.7365],
    "accuracy_baseline": 0.6502,
    "accuracy_baseline_interval": [0.6143, 0.6849],
    "advantage": 0.0252,
    "advantage_interval": [-0.0563, 0.1071],
    "dp_bound": {"yeom": 1.718, "region": 0.4621},
}


def test_without_attribute_there_is_no_attribute_table(violation: dict[str, Any]) -> None:
    r = copy.deepcopy(violation)
    r.pop("attribute", None)
    assert "Attribute inference" not in visible_text(render_report(r))
    r["attribute"] = []
    assert "Attribute inference" not in visible_text(render_report(r))


@pytest.mark.parametrize("spelling", ["code", "brief"])
def test_attribute_table(violation: dict[str, Any], spelling: str) -> None:
    entry = dict(ATTRIBUTE)
    if spelling == "brief":  # the alternative key names (accuracy_nonmembers, accuracy_prior)
        for old, new in (
            ("accuracy_non_members", "accuracy_nonmembers"),
            ("accuracy_baseline", "accuracy_prior"),
        ):
            entry[new] = entry.pop(old)
            entry[f"{new}_interval"] = entry.pop(f"{old}_interval")
    r = copy.deepcopy(violation)
    r["attribute"] = [entry]
    text = visible_text(render_report(r))
    assert "Attribute inference" in text
    row = text[text.index(ATTRIBUTE["label"]) :]
    # Members, non-members, prior, advantage with intervals, then the DP bound, in order.
    expected = [
        "0.712",
        "[0.661, 0.759]",
        "0.687",
        "[0.634, 0.737]",
        "0.65",
        "[0.614, 0.685]",
        "0.0252",
        "[−0.0563, 0.107]",
        "0.462",
        "e^ε − 1: 1.72",
    ]
    positions = [row.index(x) for x in expected]
    assert positions == sorted(positions)


def test_attribute_dp_bound_as_a_number_or_missing(violation: dict[str, Any]) -> None:
    r = copy.deepcopy(violation)
    r["attribute"] = [{**ATTRIBUTE, "dp_bound": 0.25}, {**ATTRIBUTE, "dp_bound": None}]
    text = visible_text(render_report(r))
    assert "0.25" in text
    assert "e^ε − 1" not in text


def test_tradeoff_plot_skips_a_broken_curve() -> None:
    assert tradeoff_plot({"curve": {"fpr": [0.0, 1.0], "fnr": [1.0]}}) is None
    assert tradeoff_plot({}) is None


def test_renders_from_the_result_object(tmp_path: Path) -> None:
    config = load_config(AUDITS / "laplace.toml")
    small = config.with_section("mechanism", trials=2_000)
    result = run_audit(small, write=False)
    assert render_report(result) == render_report(result.to_dict())


def test_number_formatting() -> None:
    assert fmt_number(None) == "—"
    assert fmt_number(float("nan")) == "—"
    assert fmt_number(float("inf")) == "∞"
    assert fmt_number(20000) == "20,000"
    assert fmt_number(1.883737) == "1.884"
    assert fmt_number(-0.5) == "−0.5"
    assert fmt_interval([0.0, 0.0700107]) == "[0, 0.07]"
    assert fmt_interval(None) == "—"


def test_number_formatting_is_compact() -> None:
    # Short exponents and separators instead of scientific notation: cells stay narrow.
    assert fmt_number(1e-5) == "1e-5"
    assert fmt_number(2.5e-7) == "2.5e-7"
    assert fmt_number(-1e-5) == "−1e-5"
    assert fmt_number(1e20) == "1e20"
    assert fmt_number(12345.678) == "12,346"
    assert fmt_number(-3) == "−3"
    assert fmt_number(0.9999977742666772, 3) == "1"
    assert fmt_number(1.3895244598388672, 3) == "1.39"


def test_count_agrees_with_its_number() -> None:
    assert fmt_count(1, "gate check") == "1 gate check"
    assert fmt_count(3, "gate check") == "3 gate checks"
    assert fmt_count(0, "bound") == "0 bounds"
    assert fmt_count(1, "canary", "canaries") == "1 canary"
    assert fmt_count(2, "canary", "canaries") == "2 canaries"
    assert fmt_count(20000, "trial") == "20,000 trials"


# --------------------------------------------------------------------------------- CLI


def test_cli_report_rerenders(violation_dir: Path) -> None:
    target = violation_dir / "report.html"
    target.unlink()
    result = runner.invoke(app, ["report", str(violation_dir)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(target)
    page = target.read_text(encoding="utf-8")
    assert "laplace-violation" in page
    assert "FAIL" in page


def test_cli_report_missing_dir(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    result = runner.invoke(app, ["report", str(missing)])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert re.match(r"error: no results\.json in .*nowhere", lines[0])
    assert not missing.exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not readable JSON"),
        ("[1, 2]", "not a results object"),
        ('{"name": "x"}', "does not fit the schema at '\\(top level\\)'"),
    ],
)
def test_cli_report_invalid_results(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "results.json").write_text(content, encoding="utf-8")
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1
    assert re.search(message, lines[0])
    assert not (tmp_path / "report.html").exists()


# ---------------------------------------------------------------------------- headline

MEANING = {
    "rigorous-one-run": "holds because each canary was included by an independent fair coin",
    "rigorous-multi-run": "holds because every trial was an independent run",
    "heuristic": "describes the attack on these examples",
}


def comparison(
    test: str,
    value: float,
    *,
    validity: str = "rigorous-one-run",
    upper: float | None = None,
    upper_source: str = "accountant ε (PLD)",
    parameter: str = "epsilon",
    confidence_level: float = 0.95,
) -> dict[str, Any]:
    """One ``bounds[]`` entry of results.json (the shape the schema requires)."""
    lower: dict[str, Any] = {
        "parameter": parameter,
        "value": value,
        "confidence_level": confidence_level,
        "method": "one-run-binomial" if validity == "rigorous-one-run" else "clopper-pearson",
        "threshold": "top-bottom",
        "validity": validity,
        "fpr_interval": None,
        "fnr_interval": None,
        "threshold_value": None,
        "counts": {"canaries": 500, "guesses": 50, "correct": 45},
        "details": {},
    }
    if parameter == "epsilon":
        lower["delta"] = 1e-5
    rigorous = validity.startswith("rigorous")
    return {
        "test": test,
        "parameter": parameter,
        "lower": lower,
        "upper": upper,
        "upper_source": upper_source if upper is not None else "none",
        "tightness": None if upper is None else value / upper,
        "violation": rigorous and upper is not None and value > upper,
        "in_verdict": rigorous and upper is not None,
        "validity_meaning": MEANING[validity],
    }


#: The quickstart's bounds as the shipped audit measures them (tests/golden/quickstart.json):
#: the plain target's largest rigorous bound is LiRA's 1.39, and a heuristic bound (1.534)
#: is larger still but must not lead; every bound on the DP target is 0.
ACCOUNTANT = 0.9999977742666772
QUICKSTART_BOUNDS = [
    comparison("loss on the plain target", 0.5742),
    comparison("loss on the plain target", 1.2525, validity="heuristic"),
    comparison("shadow on the plain target", 1.1116),
    comparison("shadow on the plain target", 0.8563, validity="heuristic"),
    comparison("lira on the plain target", 1.3895244598388672),
    comparison("lira on the plain target", 1.5339, validity="heuristic"),
    *[
        comparison(f"{attack} on the dp target", 0.0, upper=ACCOUNTANT, confidence_level=0.98333)
        for attack in ("loss", "shadow", "lira")
    ],
    comparison("lira on the dp target", 0.0, upper=ACCOUNTANT, validity="heuristic"),
]


def with_bounds(results: dict[str, Any], bounds: list[dict[str, Any]]) -> dict[str, Any]:
    r = copy.deepcopy(results)
    r["bounds"] = bounds
    r["privacy_verdict"] = "violation" if any(b["violation"] for b in bounds) else "consistent"
    validate_results(r)  # the report is tested on results.json as the schema allows it
    return r


def headline_text(page: str) -> str:
    """The visible text of the headline list, with no-break spaces as plain spaces."""
    found = re.search(r'<ul class="headline" id="headline">(.*?)</ul>', page, re.DOTALL)
    assert found, "no headline"
    # Only inline elements in it: drop the tags without putting spaces in their place.
    text = html.unescape(re.sub(r"<[^>]+>", "", found[1]))
    return re.sub(r"\s+", " ", text.replace("\xa0", " ")).strip()


def test_headline_names_the_largest_rigorous_bound_per_target(violation: dict[str, Any]) -> None:
    page = render_report(with_bounds(violation, QUICKSTART_BOUNDS))
    headline = headline_text(page)
    # The largest of the plain target's 3 rigorous bounds (each at 95 %, none in the
    # verdict) is a best-of-3: by the union bound it holds at 1 − 3 × 0.05 = 85 %.
    assert (
        "The plain target leaks: ε ≥ 1.39 (rigorous one-run bound from the lira attack, "
        "the largest of 3, so 85 % confidence, not 95 %: picking the best is a multiple "
        "comparison); there is no DP claim to hold it against." in headline
    )
    assert "1.53" not in headline  # the larger heuristic number does not lead
    assert (
        "The dp target: no evidence of leakage above 0 at this budget (rigorous one-run "
        "bounds from 3 attacks, 98.3 % confidence each) against the accountant's ε = 1 (PLD)."
        in headline
    )
    # Verdict first, then the headline, before any table; and nothing is called private.
    text = visible_text(page).replace("\xa0", " ")
    assert text.index("FAIL") < text.index("ε ≥ 1.39") < text.index("Gate checks")
    assert re.search(r"\bprivate\b", text, re.IGNORECASE) is None


def test_a_best_of_verdict_bounds_holds_at_the_verdict_level(violation: dict[str, Any]) -> None:
    # Three in-verdict bounds at 1 − 0.05/3 each: their largest holds at the verdict's 95 %
    # jointly (not at 98.3 %, the level of the single bound picked), and a leaking
    # statement names the design's limit of detection too.
    bounds = [
        {
            **comparison(f"{a} on the dp target", v, upper=2.0, confidence_level=1 - 0.05 / 3),
            "limit_of_detection": 3.25,
        }
        for a, v in (("loss", 0.4), ("shadow", 0.9), ("lira", 0.7))
    ]
    results = with_bounds(violation, bounds)
    results["provenance"]["verdict_budget"] = {
        "confidence_level": 0.95,
        "comparisons": 3,
        "per_kind": {"membership": 3},
        "level_each": 1 - 0.05 / 3,
    }
    headline = headline_text(render_report(results))
    assert (
        "The dp target leaks: ε ≥ 0.9 (rigorous one-run bound from the shadow attack, the "
        "largest of the verdict's 3, which hold jointly at 95 % confidence) against the "
        "accountant's ε = 2 (PLD) (tightness 0.45). A perfect attack could certify at most "
        "ε = 3.25 with this design." in headline
    )


def test_headline_of_a_violation(violation: dict[str, Any]) -> None:
    headline = headline_text(render_report(violation))
    rigorous = [b for b in violation["bounds"] if b["lower"]["validity"].startswith("rigorous")]
    eps = max(b["lower"]["value"] for b in rigorous if b["parameter"] == "epsilon")
    mu = max(b["lower"]["value"] for b in rigorous if b["parameter"] == "mu")
    level = fmt_number(100 * rigorous[0]["lower"]["confidence_level"], 3)
    assert headline.startswith(
        f"The laplace mechanism leaks: ε ≥ {fmt_number(eps, 3)} (rigorous multi-run bound, "
        f"{level} % confidence) against the claimed ε = 0.5: the claim is false"
    )
    assert f"Also μ ≥ {fmt_number(mu, 3)}" in headline


def test_headline_picks_the_violation_and_gives_tightness(violation: dict[str, Any]) -> None:
    bounds = [
        # A larger bound against a looser claim, and a smaller one that breaks its claim.
        comparison("gaussian mechanism", 2.0, upper=4.0, upper_source="claimed ε"),
        comparison("gaussian mechanism", 1.2, upper=1.0, upper_source="claimed ε"),
        comparison("canary, trainer x", 0.8, upper=4.0, validity="rigorous-multi-run"),
    ]
    headline = headline_text(render_report(with_bounds(violation, bounds)))
    assert "The gaussian mechanism leaks: ε ≥ 1.2" in headline
    assert "against the claimed ε = 1: the claim is false" in headline
    # A label the report cannot read a subject from is named as it is.
    assert (
        "Canary, trainer x: ε ≥ 0.8 (rigorous multi-run bound, 95 % confidence) against the "
        "accountant's ε = 4 (PLD) (tightness 0.2)." in headline
    )


def test_headline_for_mu_and_for_heuristic_only(violation: dict[str, Any]) -> None:
    bounds = [
        comparison("a test", 0.0, upper=2.0),
        comparison("a test", 0.7, upper=1.0, parameter="mu", upper_source="theoretical μ"),
        comparison("loss attack on your target (m.skops)", 0.9, validity="heuristic"),
    ]
    headline = headline_text(render_report(with_bounds(violation, bounds)))
    # ε is 0 but μ is not: the μ bound leads, the zero ε is not repeated.
    assert "A test: μ ≥ 0.7 (rigorous one-run bound, 95 % confidence) against the " in headline
    assert "theoretical μ = 1 (tightness 0.7)." in headline
    assert "no evidence" not in headline
    assert "Your target (m.skops): no rigorous bound was computed" in headline


def test_headline_escapes_labels(violation: dict[str, Any]) -> None:
    bounds = [comparison(f"lira on the {EVIL} target", 1.0)]
    page = render_report(with_bounds(violation, bounds))
    assert EVIL not in page
    assert f"The {EVIL} target leaks: ε ≥ 1" in headline_text(page)


def test_without_bounds_there_is_no_headline(violation: dict[str, Any]) -> None:
    page = render_report(with_bounds(violation, []))
    assert 'id="headline"' not in page
    assert "No bounds were computed." in visible_text(page)


# ---------------------------------------------------------------------------- plurals


def check(passed: bool = True) -> dict[str, Any]:
    return {"name": "max_auc", "value": 0.5, "limit": 0.6, "passed": passed, "message": "m"}


@pytest.mark.parametrize(
    ("checks", "sentence"),
    [
        ([check()], "The 1 gate check passed."),
        ([check(), check(), check()], "All 3 gate checks passed."),
        ([check(False)], "1 of 1 gate check failed:"),
        ([check(), check(False), check()], "1 of 3 gate checks failed:"),
        ([], "No gate checks were configured."),
    ],
)
def test_gate_check_sentence(violation: dict[str, Any], checks: list[Any], sentence: str) -> None:
    r = copy.deepcopy(violation)
    r["checks"] = checks
    r["verdict"] = "pass" if all(c["passed"] for c in checks) else "fail"
    text = visible_text(render_report(r))
    assert sentence in text
    assert "All 1 " not in text


@pytest.mark.parametrize(
    ("warnings", "sentence"),
    [
        (["a"], "Read the warning below."),
        (["a", "b"], "Read the 2 warnings below."),
    ],
)
def test_warning_count(violation: dict[str, Any], warnings: list[str], sentence: str) -> None:
    r = copy.deepcopy(violation)
    r["warnings"] = warnings
    assert sentence in visible_text(render_report(r))


def test_singular_counts(violation: dict[str, Any]) -> None:
    r = with_bounds(violation, [comparison("lira on the plain target", 1.0)])
    r["bounds"][0]["lower"]["counts"] = {"canaries": 1, "guesses": 1, "correct": 1}
    r["tests"][0]["negatives"] = 1
    r["tests"][0]["positives"] = 2
    r["provenance"]["units"] = {"mechanism": {"total": 1, "computed": 1, "reused": 0}}
    text = visible_text(render_report(r))
    assert "1 bound, 1 of them rigorous." in text
    assert "1 of 1 guess correct" in text
    assert "1 canary" in text
    assert "(1 trial) vs. D' (2 trials)" in text
    assert "1 work unit: 1 computed, 0 reused" in text
    for wrong in ("1 bounds", "1 guesses", "1 canaries", "1 trials", "1 work units"):
        assert wrong not in text


def test_bounds_table_cells(violation: dict[str, Any]) -> None:
    page = render_report(with_bounds(violation, QUICKSTART_BOUNDS))
    # δ in the compact form and kept on one line with its symbol; the test name may wrap.
    assert '<span class="nowrap">ε at δ&nbsp;=&nbsp;1e-5</span>' in page
    assert "1e-05" not in page
    assert '<td class="test-name">lira on the plain target</td>' in page
    # Each validity's meaning once, below the table, not in every row.
    text = visible_text(page)
    assert text.count(MEANING["rigorous-one-run"]) == 1
    assert text.count(MEANING["heuristic"]) == 1


# -------------------------------------------------------------------------- histograms

#: The loss attack's histogram on the quickstart's DP target: outliers stretch the range to
#: [-327, 0], so 65 % of all scores fall into the last of 60 bins, 69 % into the fullest 3.
SPIKE = {
    "edges": np.linspace(-327.6, 0.0, 61).tolist(),
    "negatives": [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0,
                  1, 1, 0, 0, 1, 1, 1, 1, 1, 3, 3, 1, 2, 3, 1, 6, 2, 1, 2, 8, 4, 1, 0, 5, 4,
                  3, 2, 5, 2, 6, 2, 2, 6, 4, 157],
    "positives": [1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 1, 2, 1, 0, 2, 1, 0, 0,
                  0, 0, 0, 0, 0, 1, 1, 2, 0, 0, 0, 1, 1, 2, 2, 2, 3, 2, 3, 2, 6, 3, 3, 4, 4,
                  6, 4, 4, 3, 1, 4, 3, 4, 5, 168],
}  # fmt: skip


def spread_histogram() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    edges = np.linspace(-4, 5, 31)
    return {
        "edges": edges.tolist(),
        "negatives": np.histogram(rng.normal(0, 1, 500), edges)[0].tolist(),
        "positives": np.histogram(rng.normal(1, 1, 500), edges)[0].tolist(),
    }


def stroke_colours(svg: str) -> set[str]:
    return {c.lower() for c in re.findall(r"stroke: ?(#[0-9a-fA-F]{6})", svg)}


def test_a_concentrated_histogram_is_drawn_on_a_log_scale() -> None:
    assert is_concentrated(np.asarray(SPIKE["negatives"]), np.asarray(SPIKE["positives"]))
    svg = histogram_plot({"hypotheses": ["non-member", "member"], "histogram": SPIKE})
    assert svg is not None
    assert "Log scale: 69 % of the scores fall in 3 of 60 bins" in svg
    assert "density (log scale)" in svg
    # Both classes are drawn: the first solid, the second dashed on top of it.
    assert {"#0072b2", "#d55e00"} <= stroke_colours(svg)
    assert "stroke-dasharray" in svg


def test_a_spread_histogram_stays_linear() -> None:
    hist = spread_histogram()
    assert not is_concentrated(np.asarray(hist["negatives"]), np.asarray(hist["positives"]))
    svg = histogram_plot({"histogram": hist})
    assert svg is not None
    assert "log scale" not in svg.lower()
    assert {"#0072b2", "#d55e00"} <= stroke_colours(svg)


def test_histogram_crops_empty_end_bins() -> None:
    from dpaudit.report.plots import _crop_empty_ends

    edges = np.arange(11.0)
    neg = np.array([0, 0, 0, 2, 1, 0, 0, 0, 0, 0])
    pos = np.array([0, 0, 0, 0, 1, 3, 0, 0, 0, 0])
    e, n, p = _crop_empty_ends(edges, neg, pos)
    np.testing.assert_array_equal(e, [3, 4, 5, 6])
    np.testing.assert_array_equal(n, [2, 1, 0])
    np.testing.assert_array_equal(p, [0, 1, 3])
    # Nothing at all to draw: kept as it is (and still drawn, empty).
    zeros = np.zeros(10)
    assert _crop_empty_ends(edges, zeros, zeros)[0].size == 11
    assert (
        histogram_plot(
            {"histogram": {"edges": edges.tolist(), "negatives": [0] * 10, "positives": [0] * 10}}
        )
        is not None
    )


def test_histogram_with_degenerate_edges_is_skipped() -> None:
    assert (
        histogram_plot({"histogram": {"edges": [1.0, 1.0], "negatives": [3], "positives": [2]}})
        is None
    )


def test_a_check_not_evaluated_says_so(tmp_path: Path) -> None:
    audit = tmp_path / "a.toml"
    audit.write_text(
        '[audit]\nname = "ne"\nkinds = ["mechanism"]\n'
        '[mechanism]\nname = "laplace"\nepsilon = 1.0\ntrials = 2000\n'
        '[gate]\nmax_attribute_advantage = 0.1\non_unmeasured = "warn"\n'
    )
    run_audit(audit, output_dir=tmp_path / "r")
    html = (tmp_path / "r" / "report.html").read_text()
    assert '<span class="tag warn">not evaluated</span>' in html


def test_every_bound_carries_its_limit_of_detection_and_a_null_headline_names_it(
    tmp_path: Path,
) -> None:
    # A perfect attack's bound with the same design is the limit (dpaudit.planning); a
    # randomized-response audit with p = 0.5 leaks nothing, so its headline must say what
    # the design could have certified at most, not that the mechanism is private.
    from dpaudit.planning import limit_for_bound

    audit = tmp_path / "a.toml"
    audit.write_text(
        '[audit]\nname = "null"\nkinds = ["mechanism"]\n'
        '[mechanism]\nname = "randomized-response"\np = 0.5\ntrials = 4000\n'
        "[mechanism.claim]\nepsilon = 1.0\n"
    )
    result = run_audit(audit, output_dir=tmp_path / "r")
    data = json.loads((tmp_path / "r" / "results.json").read_text())
    for comparison, row in zip(result.comparisons, data["bounds"], strict=True):
        assert row["limit_of_detection"] == pytest.approx(limit_for_bound(comparison.lower).value)
        assert row["limit_of_detection"] > row["lower"]["value"]
    eps_limit = data["bounds"][0]["limit_of_detection"]
    html = (tmp_path / "r" / "report.html").read_text()
    assert "no evidence of leakage above 0" in html
    assert "even a perfect attack could certify at most ε =" in html
    assert "private" not in html.lower().replace("differential privacy", "")
    assert f"{eps_limit:.3g}"[:3] in html
