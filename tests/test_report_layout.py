"""The report leads with what was learned: one bounds row per test (heuristic twin folded
in), no curve from a handful of trials, utility beside privacy, the riskiest records with
what they mean, reconstruction led by recovered vs. defended, plain column names."""

from __future__ import annotations

import html
import re
from typing import Any

import numpy as np

from dpaudit.membership.summary import riskiest_records
from dpaudit.report import MIN_CURVE_TRIALS, fmt_number, render_report
from dpaudit.report.plots import roc_plot
from dpaudit.results import score_summary


def visible_text(page: str) -> str:
    """The page's text without tags and with entities decoded."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    return re.sub(r"\s+", " ", text.replace("\xa0", " "))


def bound(
    test: str,
    value: float,
    *,
    validity: str = "rigorous-one-run",
    parameter: str = "epsilon",
    upper: float | None = None,
    confidence_level: float = 0.95,
) -> dict[str, Any]:
    """One ``bounds[]`` entry of results.json."""
    rigorous = validity.startswith("rigorous")
    counts = (
        {"canaries": 500, "guesses": 50, "correct": 40}
        if rigorous
        else {"fp": 12, "negatives": 120, "fn": 7, "positives": 130}
    )
    return {
        "test": test,
        "parameter": parameter,
        "lower": {
            "parameter": parameter,
            "value": value,
            "confidence_level": confidence_level,
            "method": "one-run-binomial" if rigorous else "clopper-pearson",
            "threshold": "top-bottom" if rigorous else "split",
            "validity": validity,
            "delta": 1e-5,
            "counts": counts,
        },
        "upper": upper,
        "upper_source": "accountant ε (PLD)" if upper is not None else "none",
        "tightness": None if upper is None else value / upper,
        "limit_of_detection": 2.77,
        "violation": rigorous and upper is not None and value > upper,
        "in_verdict": rigorous and upper is not None,
        "validity_meaning": f"meaning of {validity}",
    }


def membership_test(label: str, rng: np.random.Generator, *, shift: float) -> dict[str, Any]:
    """A membership test as the kinds write it: scores, target accuracy, riskiest rows."""
    member = rng.random(200) < 0.5
    scores = rng.normal(0.0, 1.0, 200) + shift * member
    test = score_summary(
        label.replace(" ", "-"),
        label,
        scores[~member],
        scores[member],
        confidence_level=0.95,
        hypotheses=("non-member", "member"),
    ).to_dict()
    variant = "plain" if "plain" in label else "dp"
    test["target"] = {
        "variant": variant,
        "accuracy": {"members": 0.9123, "non_members": 0.6234, "held_out": 0.6351}
        if variant == "plain"
        else {"members": 0.6456, "non_members": 0.6167, "held_out": 0.6278},
    }
    test["riskiest_records"] = riskiest_records(scores, member)
    return test


def results(**parts: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "name": "layout",
        "verdict": "pass",
        "privacy_verdict": "consistent",
        "checks": [],
        "bounds": [],
        "tests": [],
        "config": {"audit": {"confidence_level": 0.95}},
        "provenance": {},
    }
    return base | parts


def bounds_rows(page: str) -> list[str]:
    """The visible text of each test's group of rows in the bounds table."""
    table = re.search(r'<table class="bounds[^"]*">(.*?)</table>', page, re.DOTALL)
    assert table, "no bounds table"
    return [
        visible_text(b).strip() for b in re.findall(r"<tbody>(.*?)</tbody>", table[1], re.DOTALL)
    ]


# ------------------------------------------------------------------------ riskiest rows


def test_riskiest_records_closed_form() -> None:
    scores = np.array([0.1, 3.0, 3.0, -1.0, 2.0])
    member = np.array([False, True, False, True, True])
    out = riskiest_records(scores, member, top=3)
    assert out["rows"] == 5
    assert out["members"] == 3
    assert out["non_members"] == 2
    # Highest first, a tie kept in row order; counts of each class scoring at least as high.
    assert out["top"] == [
        {"row": 1, "score": 3.0, "member": True, "members_at_or_above": 1,
         "non_members_at_or_above": 1},
        {"row": 2, "score": 3.0, "member": False, "members_at_or_above": 1,
         "non_members_at_or_above": 1},
        {"row": 4, "score": 2.0, "member": True, "members_at_or_above": 2,
         "non_members_at_or_above": 1},
    ]  # fmt: skip
    assert len(riskiest_records(scores, member, top=10)["top"]) == 5


# ----------------------------------------------------------------------- bounds table


def test_a_heuristic_twin_is_folded_into_its_rigorous_row() -> None:
    bounds = [
        bound("loss on the plain target", 0.6705),
        bound("loss on the plain target", 0.8876, validity="heuristic"),
        bound("loss on the dp target", 0.0, upper=1.0, confidence_level=0.98),
        bound("loss on the dp target", 0.1234, parameter="mu", upper=0.27),
        bound("loss on the dp target", 0.0456, validity="heuristic", upper=1.0),
    ]
    page = render_report(results(bounds=bounds))
    rows = bounds_rows(page)
    # One row (group of lines) per test; every value in its own test's row.
    assert len(rows) == 2
    assert rows[0].startswith("loss on the plain target")
    assert "0.6705" in rows[0]
    assert "0.8876" in rows[0]
    # The twin sits on its rigorous bound's own line (<tr>), not on a line of its own.
    lines = re.findall(r"<tr[^>]*>(.*?)</tr>", page.split('id="bounds"')[1], re.DOTALL)
    plain = [visible_text(x) for x in lines if "0.6705" in x]
    assert len(plain) == 1
    assert "0.8876" in plain[0]
    assert not any("0.8876" in x and "0.6705" not in x for x in lines)
    assert rows[1].startswith("loss on the dp target")
    for b in bounds[2:]:
        assert fmt_number(b["lower"]["value"]) in rows[1]
    assert "0.27" in rows[1]
    assert "lower bound (descriptive only)" in visible_text(page)


def test_without_twins_there_is_no_descriptive_column() -> None:
    page = render_report(results(bounds=[bound("laplace mechanism", 0.96, upper=1.0)]))
    assert "descriptive only" not in page
    assert len(bounds_rows(page)) == 1


def test_column_headers_are_plain_and_explained() -> None:
    page = render_report(
        results(bounds=[bound("a test", 0.5), bound("a test", 0.7, validity="heuristic")])
    )
    head = re.search(r'<table class="bounds[^"]*">\s*<thead>(.*?)</thead>', page, re.DOTALL)
    assert head
    headers = re.findall(r"<th([^>]*)>(.*?)</th>", head[1], re.DOTALL)
    # Every header but the two self-evident ones carries a tooltip saying what it means.
    for attrs, name in headers:
        if name.strip() not in ("test", "status"):
            assert 'title="' in attrs, name
    assert "lecture" not in page


# ----------------------------------------------------------------------- few trials


def test_no_curve_from_a_handful_of_trials() -> None:
    few = score_summary(
        "few", "few trials", np.array([0.1, 0.5, 0.2]), np.array([0.9, 0.4, 0.8]),
        confidence_level=0.95,
    ).to_dict()  # fmt: skip
    page = render_report(results(tests=[few]))
    assert "<svg" not in page
    text = visible_text(page)
    assert f"Fewer than {MIN_CURVE_TRIALS} trials" in text
    # Its trade-off points are listed: (FPR, FNR) at each threshold, from (0, 1) to (1, 0).
    assert "(0, 1)" in text
    assert "(1, 0)" in text
    rng = np.random.default_rng(0)
    n = MIN_CURVE_TRIALS
    enough = score_summary(
        "enough", "enough trials", rng.normal(0, 1, n), rng.normal(1, 1, n),
        confidence_level=0.95,
    ).to_dict()  # fmt: skip
    assert render_report(results(tests=[enough])).count("<svg") == 3


def test_roc_ticks_are_decades_only() -> None:
    rng = np.random.default_rng(1)
    test = score_summary(
        "t", "t", rng.normal(0, 1, 40), rng.normal(1, 1, 40), confidence_level=0.95
    ).to_dict()
    svg = roc_plot(test)
    assert svg is not None
    # Tick labels are SVG text: only powers of ten (no crowded 2×10⁻¹, 3×10⁻¹, …).
    labels = set(re.findall(r">\s*([0-9.]+)\s*</text>", svg))
    assert labels <= {"0.01", "0.1", "1"}, labels
    assert "×" not in svg


# ------------------------------------------------------------- utility and riskiest rows


def test_utility_and_riskiest_records_come_before_the_bounds() -> None:
    rng = np.random.default_rng(2)
    tests = [
        membership_test("loss on the plain target", rng, shift=1.5),
        membership_test("loss on the dp target", rng, shift=0.0),
    ]
    bounds = [
        bound("loss on the plain target", 1.2345),
        bound("loss on the dp target", 0.0, upper=1.0),
    ]
    attribute = [
        {
            "label": "attribute inference on the plain target (sex)",
            "sensitive": "sex",
            "accuracy_members": 0.7,
            "accuracy_non_members": 0.6,
            "accuracy_baseline": 0.55,
            "advantage": 0.0987,
            "advantage_interval": [0.01, 0.19],
        }
    ]
    page = render_report(results(tests=tests, bounds=bounds, attribute=attribute))
    text = visible_text(page)
    utility, records, bounds_at = (
        text.index("Utility beside privacy"),
        text.index("The riskiest records"),
        text.index("Bounds: empirical lower"),
    )
    assert utility < records < bounds_at
    block = text[utility:records]
    # Accuracy of each target beside its leakage and the attribute advantage on it.
    for value in ("0.912", "0.623", "0.635", "0.646", "0.617", "1.23", "0.0987"):
        assert value in block, value
    assert block.index("The plain target") < block.index("The dp target")
    # The plain target's top rows, in score order, and what a high score does not mean.
    top = tests[0]["riskiest_records"]["top"]
    listed = [int(x) for x in re.findall(r"#(\d+)", text[records:bounds_at])]
    assert listed[:10] == [r["row"] for r in top]
    assert "is not proof that the row leaked" in text[records:bounds_at]


# ---------------------------------------------------------------------- reconstruction


def reconstruction_test(defence: str, label: str, recovered: float) -> dict[str, Any]:
    pixels = np.linspace(0, 1, 64).tolist()
    return {
        "id": defence,
        "label": f"gradient inversion, defence {label}",
        "hypotheses": ["another batch's input", "the batch's input"],
        "negatives": 3,
        "positives": 3,
        "metrics": {},
        "curve": {"fpr": [0.0, 1.0], "fnr": [1.0, 0.0]},
        "histogram": {},
        "theory_curves": [],
        "reconstruction": {
            "defence": {"name": defence},
            "defence_label": label,
            "attack": "optimisation",
            "batch_size": 1,
            "metrics": {
                "median_nrmse": 1e-9 if recovered else 0.99,
                "median_nrmse_interval": [0.0, 1.0],
                "fraction_recovered": recovered,
                "fraction_recovered_interval": [0.29, 1.0],
                "tolerance": 0.001,
                "examples": 3,
                "confidence_level": 0.95,
                "interval_method": "order-statistic",
                "error": "normalised RMSE",
            },
            "complexity": {"formula": "B√(d/m)", "value": 2.83, "parameters": {"B": 1}},
            "examples": {"side": 8, "x_true": [pixels], "x_hat": [pixels], "scale": "pixels"},
        },
    }


def test_reconstruction_leads_with_recovered_vs_defended() -> None:
    game = {
        "id": "game",
        "label": "identification game (k=10)",
        "hypotheses": ["another candidate", "the target"],
        "negatives": 1000,
        "positives": 1000,
        "metrics": {},
        "curve": {},
        "histogram": {},
        "theory_curves": [],
        "reconstruction": {
            "game": {"candidates": 10, "noise_multiplier": 3.0, "clipping_norm": 1.0,
                     "claimed_noise_multiplier": None},
            "correct": 123, "trials": 1000, "success_rate": 0.123, "chance": 0.1,
            "accountant": {"epsilon": 2.75, "delta": 1e-5, "mu": 0.667},
        },
    }  # fmt: skip
    tests = [
        reconstruction_test("none", "none", 1.0),
        reconstruction_test("dpsgd", "dpsgd(σ=0.1, C=1)", 0.0),
        game,
    ]
    page = render_report(results(tests=tests, bounds=[bound(game["label"], 0.0, upper=2.75)]))
    text = visible_text(page)
    lead = text.index("Recovered vs. defended")
    assert lead < text.index("Bounds: empirical lower") < text.index("Identification game:")
    assert "Without a defence the server recovered 3 of 3 inputs exactly" in text
    assert "Under DP-SGD (dpsgd(σ=0.1, C=1)): 0 of 3 inputs" in text
    # The images (originals over reconstructions) are in the lead, before the bounds.
    assert page.index('class="digit"') < page.index('id="bounds"')
    game_block = text[text.index("Identification game:") :]
    for value in ("123", "0.123", "0.1", "2.75", "0.667"):
        assert value in game_block
    assert "lecture" not in text


def test_a_claim_curve_bound_reads_as_an_effective_noise_multiplier() -> None:
    # A claim-curve bound carries σ′ and its ε in its details (dpaudit.bounds.claim_curve); the
    # bounds table says what they mean, with the one assumption in the title.
    curve = bound("dirac canary (claim curve)", 3.21, upper=2.5)
    curve["lower"]["details"] = {
        "effective_noise_multiplier": 0.7305,
        "effective_epsilon": 3.2104,
        "assumption": "assumes the accounted q = 0.25 and T = 8",
    }
    plain = bound("dirac canary", 1.9, upper=2.5)
    page = render_report(results(bounds=[curve, plain]))
    text = visible_text(page)
    assert "no more private than DP-SGD with σ ≤ 0.731 (ε 3.21 at δ = 1e-5)" in text
    assert 'title="The effective noise multiplier: the largest σ′ whose DP-SGD' in page
    assert "assumes the accounted q = 0.25 and T = 8" in page
    assert text.count("no more private than DP-SGD") == 1  # only the claim-curve bound
