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
from dpaudit.report import fmt_interval, fmt_number, render_report
from dpaudit.report.plots import (
    histogram_plot,
    is_concentrated,
    svg_fragment,
    tradeoff_plot,
)

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
