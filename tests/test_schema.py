"""results.json against its JSON Schema: every example audit validates; broken ones do not."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dpaudit.audit import run_audit
from dpaudit.bounds import VALIDITY_MEANING
from dpaudit.config import load_config
from dpaudit.errors import DataError, DpauditError
from dpaudit.schemas import results_schema, validate_results

AUDITS = Path(__file__).resolve().parents[1] / "audits"
MECHANISM_AUDITS = [
    "laplace",
    "gaussian",
    "randomized-response",
    "laplace-violation",
    "user-mechanism",
]


def run_small(name: str, out: Path, *, trials: int = 4_000) -> dict[str, Any]:
    """Run an example audit with fewer trials and return its results.json dict."""
    config = load_config(AUDITS / f"{name}.toml")
    small = config.with_section("mechanism", trials=trials)
    run_audit(small, output_dir=out)
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def example_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.mktemp("runs")
    return {name: run_small(name, base / name) for name in MECHANISM_AUDITS}


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(results_schema())


def test_schema_validity_labels_match_the_code() -> None:
    # Every validity label the bounds can carry is documented, and no other.
    assert set(results_schema()["$defs"]["validity"]["enum"]) == set(VALIDITY_MEANING)


@pytest.mark.parametrize("name", MECHANISM_AUDITS)
def test_every_example_audit_validates(
    example_results: dict[str, dict[str, Any]], name: str
) -> None:
    results = example_results[name]
    validate_results(results)  # raises on any problem
    assert results["name"] == name


def test_the_violation_example_is_a_failing_result(
    example_results: dict[str, dict[str, Any]],
) -> None:
    r = example_results["laplace-violation"]
    assert r["verdict"] == "fail"
    assert r["privacy_verdict"] == "violation"


@pytest.fixture
def good(example_results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return copy.deepcopy(example_results["laplace"])


@pytest.mark.parametrize(
    ("path", "where"),
    [
        (["verdict"], "(top level)"),
        (["provenance", "seed"], "provenance"),
        (["bounds", 0, "lower", "validity"], "bounds/0/lower"),
        (["tests", 0, "metrics", "auc"], "tests/0/metrics"),
        (["checks", 0, "passed"], "checks/0"),
    ],
)
def test_a_missing_required_key_fails(good: dict[str, Any], path: list[Any], where: str) -> None:
    node = good
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    with pytest.raises(
        DataError, match=re.escape(where) + f".*'{path[-1]}' is a required property"
    ):
        validate_results(good)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["verdict"], "maybe", "is not one of"),
        (["tests", 0, "metrics", "auc"], "0.9", "is not of type 'number'"),
        (["tests", 0, "negatives"], 1.5, "is not of type 'integer'"),
        (["bounds", 0, "lower", "value"], -0.1, "less than the minimum of 0"),
        (["bounds", 0, "violation"], "no", "is not of type 'boolean'"),
        (["provenance", "units", "mechanism", "total"], "1", "is not of type 'integer'"),
        (["warnings"], "none", "is not of type 'array'"),
        (["tests", 0, "curve", "fpr", 0], 1.5, "greater than the maximum of 1"),
    ],
)
def test_a_wrong_type_or_value_fails(
    good: dict[str, Any], path: list[Any], value: Any, message: str
) -> None:
    node = good
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(DataError, match=message):
        validate_results(good)


def test_epsilon_bounds_need_their_delta(good: dict[str, Any]) -> None:
    eps = next(b for b in good["bounds"] if b["parameter"] == "epsilon")
    del eps["lower"]["delta"]
    with pytest.raises(DataError, match="'delta' is a required property"):
        validate_results(good)


def test_curve_arrays_must_have_equal_lengths(good: dict[str, Any]) -> None:
    good["tests"][0]["curve"]["fnr_high"].pop()
    with pytest.raises(DataError, match=r"'tests/0/curve' arrays must have equal lengths"):
        validate_results(good)


def test_histogram_needs_one_count_per_bin(good: dict[str, Any]) -> None:
    good["tests"][0]["histogram"]["positives"].append(0)
    with pytest.raises(DataError, match=r"one count per bin \(60\)\. Got 61 instead"):
        validate_results(good)


def attribute_entry(**spelling: str) -> dict[str, Any]:
    non = spelling.get("non", "accuracy_non_members")
    prior = spelling.get("prior", "accuracy_baseline")
    return {
        "label": "attribute inference on the DP target (sex)",
        "sensitive": "sex",
        "accuracy_members": 0.71,
        "accuracy_members_interval": [0.66, 0.76],
        non: 0.69,
        f"{non}_interval": [0.64, 0.74],
        prior: 0.67,
        f"{prior}_interval": [0.63, 0.71],
        "advantage": 0.02,
        "advantage_interval": [-0.05, 0.09],
        "dp_bound": {"yeom": 1.72, "region": 0.46},
    }


@pytest.mark.parametrize(
    "spelling",
    [{}, {"non": "accuracy_nonmembers", "prior": "accuracy_prior"}],
)
def test_attribute_entries_validate(good: dict[str, Any], spelling: dict[str, str]) -> None:
    good["attribute"] = [attribute_entry(**spelling)]
    validate_results(good)


def test_attribute_entry_without_non_member_accuracy_fails(good: dict[str, Any]) -> None:
    entry = attribute_entry()
    del entry["accuracy_non_members"], entry["accuracy_non_members_interval"]
    good["attribute"] = [entry]
    with pytest.raises(DataError, match="attribute/0"):
        validate_results(good)


def test_validation_error_is_a_dpaudit_error() -> None:
    with pytest.raises(DpauditError, match="'schema_version' is a required property"):
        validate_results({})


def test_histogram_shows_both_classes_despite_outliers() -> None:
    # Loss-attack scores: most near 0, a few huge losses. The min–max range made one spike.
    import numpy as np

    from dpaudit.results import histogram_edges, score_summary

    rng = np.random.default_rng(0)
    neg = np.concatenate([-rng.exponential(0.5, 995), [-800.0] * 5])
    pos = -rng.exponential(0.2, 1000)
    edges = histogram_edges(neg, pos, bins=60)
    assert edges[0] > -800.0  # the outliers do not set the range
    assert edges[0] <= np.quantile(neg, 0.01)  # each class's 1 %–99 % range fits
    h = score_summary("t", "t", neg, pos, confidence_level=0.95, bins=60).histogram
    assert sum(h["negatives"]) == 1000  # outliers clipped into the end bin, not lost
    assert sum(h["positives"]) == 1000
    assert sum(c > 0 for c in h["positives"]) >= 10  # not one spike
    same = histogram_edges(np.zeros(5), np.zeros(5), bins=4)
    assert same.tolist() == [-0.5, -0.25, 0.0, 0.25, 0.5]
