"""JSON Schemas of dpaudit's outputs, and their validation.

``results.schema.json`` (JSON Schema draft 2020-12) describes ``results.json``; the
human-readable description of every key is ``docs/results.md``.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from dpaudit.errors import DataError

__all__ = ["results_schema", "validate_results"]


@cache
def _schema_text() -> str:
    return resources.files("dpaudit.schemas").joinpath("results.schema.json").read_text("utf-8")


def results_schema() -> dict[str, Any]:
    """The JSON Schema of ``results.json`` (a fresh copy each call)."""
    return json.loads(_schema_text())


def validate_results(results: dict[str, Any]) -> None:
    """Check a ``results.json`` dict against the schema and its cross-field rules.

    Beyond the schema, each test's six curve arrays must have one entry per threshold and
    its histogram one count per bin (JSON Schema cannot relate array lengths).

    Args:
        results: The parsed ``results.json``.

    Raises:
        DataError: The first problem found, naming its location, e.g.
            "results.json does not fit the schema at 'tests/0/metrics/auc': 'x' is not of
            type 'number'".
    """
    validator = jsonschema.Draft202012Validator(results_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(results))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise DataError(f"results.json does not fit the schema at {where!r}: {error.message}")
    for i, test in enumerate(results["tests"]):
        curve = test["curve"]
        sizes = {k: len(v) for k, v in curve.items() if isinstance(v, list)}
        if len(set(sizes.values())) > 1:
            raise DataError(
                f"results.json: 'tests/{i}/curve' arrays must have equal lengths. "
                f"Got {sizes} instead."
            )
        hist = test["histogram"]
        bins = len(hist["edges"]) - 1
        for key in ("negatives", "positives"):
            if len(hist[key]) != bins:
                raise DataError(
                    f"results.json: 'tests/{i}/histogram/{key}' must have one count per bin "
                    f"({bins}). Got {len(hist[key])} instead."
                )
