"""``dpaudit card``: the model-card section and the registry-shaped privacy record.

``tests/card_inputs.json`` holds the ``results.json`` of the shipped audits of every kind,
as run on the tree this test was written on, cut to what a card reads (curves,
histograms and the audit file's text left out). They are real results, so a card made
from them must say exactly what they say (the round trip below); the live check, a card
for the results of every shipped audit as it runs today, is in ``tests/test_examples.py``.
Remake the stored results with:

    for f in audits/*.toml; do
        .venv/bin/dpaudit run "$f" -q -o /tmp/runs/$(basename "$f" .toml)
    done
    .venv/bin/python tests/test_card.py /tmp/runs
"""

from __future__ import annotations

import json
import math
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from dpaudit.card import (
    FLAVORS,
    MODEL_CARD_NAME,
    REGISTRY_NAME,
    build_card,
    card_for_run,
    card_metadata,
    render_model_card,
    to_yaml,
    validate_card,
    write_card,
)
from dpaudit.cli import app
from dpaudit.errors import DataError, DpauditError

ROOT = Path(__file__).resolve().parent.parent
INPUTS = Path(__file__).resolve().parent / "card_inputs.json"
AUDITS = ROOT / "audits"


def trim(results: dict[str, Any]) -> dict[str, Any]:
    """What a card reads of a results.json (the stored inputs of these tests)."""
    keep_test = ("id", "label", "hypotheses", "negatives", "positives", "record")
    tests = []
    for t in results["tests"]:
        row = {k: t[k] for k in keep_test if k in t}
        if "mechanism" in t:
            row["mechanism"] = {
                k: t["mechanism"].get(k)
                for k in ("name", "parameters", "claim", "claim_source", "claim_rho")
            }
        if "dpsgd" in t:
            row["dpsgd"] = {
                k: t["dpsgd"].get(k) for k in ("trainer", "canary", "threat_model", "upper_bound")
            }
        for key in ("attack", "local_central", "reconstruction", "input_perturbation"):
            if key in t:
                row[key] = {}  # the card reads only that the test is of this kind
        tests.append(row)
    provenance = dict(results["provenance"])
    provenance["units"] = {k: {"total": v["total"]} for k, v in provenance.get("units", {}).items()}
    return {
        **{k: results[k] for k in ("schema_version", "name", "verdict", "privacy_verdict")},
        **{k: results[k] for k in ("headline", "checks", "warnings")},
        "bounds": [
            {**b, "lower": {k: v for k, v in b["lower"].items() if k != "details"}}
            for b in results["bounds"]
        ],
        "tests": tests,
        "config": {"audit": results["config"]["audit"]},
        "provenance": provenance,
    }


def _inputs() -> dict[str, dict[str, Any]]:
    return json.loads(INPUTS.read_text(encoding="utf-8"))


STORED = sorted(json.loads(INPUTS.read_text(encoding="utf-8")))


# ------------------------------------------------------------- every stored audit


def test_stored_results_cover_every_kind() -> None:
    kinds = {k for r in _inputs().values() for k in r["config"]["audit"]["kinds"]}
    assert kinds == {"mechanism", "dpsgd", "membership", "attribute", "reconstruction",
                     "local-central"}  # fmt: skip


@pytest.mark.parametrize("audit", STORED)
def test_card_of_stored_audit(audit: str, tmp_path: Path) -> None:
    results = _inputs()[audit]

    model_card, registry = write_card(results, tmp_path)
    card = json.loads(registry.read_text(encoding="utf-8"))
    validate_card(card)

    # Round trip: every number of the card is the one in results.json.
    audit_block = card["audit"]
    assert audit_block["verdict"] == results["verdict"]
    assert audit_block["privacy_verdict"] == results["privacy_verdict"]
    assert audit_block["kinds"] == results["config"]["audit"]["kinds"]
    assert len(audit_block["lower_bounds"]) == len(results["bounds"])
    for got, b in zip(audit_block["lower_bounds"], results["bounds"], strict=True):
        assert got["test"] == b["test"]
        assert got["value"] == b["lower"]["value"]
        assert got["confidence_level"] == b["lower"]["confidence_level"]
        assert got["validity"] == b["lower"]["validity"]
        assert got["upper"] == b["upper"]
        assert got["limit_of_detection"] == b["limit_of_detection"]
        assert got["violation"] == b["violation"]
    provenance = results["provenance"]
    for key in ("config_hash", "data_hash", "dpaudit_version"):
        assert audit_block["provenance"][key] == provenance[key]
    assert [c["name"] for c in audit_block["checks"]] == [c["name"] for c in results["checks"]]
    ran = {t["test"]: t for t in audit_block["ran"]["tests"]}
    for t in results["tests"]:
        assert (ran[t["label"]]["negatives"], ran[t["label"]]["positives"]) == (
            t["negatives"],
            t["positives"],
        )
    # The strongest rigorous bounds are the largest rigorous values.
    for parameter in ("epsilon", "mu"):
        rigorous = [
            b["lower"]["value"]
            for b in results["bounds"]
            if b["parameter"] == parameter and b["lower"]["validity"].startswith("rigorous")
        ]
        best = audit_block[f"{parameter}_lower_bound"]
        assert (best is None) == (not rigorous)
        if rigorous:
            assert best["value"] == max(rigorous)

    # The YAML block parses with a safe loader into the card's key figures.
    text = model_card.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    meta = yaml.safe_load(front)
    assert meta["tags"] == ["differential-privacy", "dpaudit"]
    assert meta["dpaudit"] == card_metadata(card)
    validate_card(meta["dpaudit"], definition="metadata")
    assert f"**Verdict: {results['verdict']}**" in body
    # One table row per bound: user text cannot add or remove rows.
    table = [line for line in body.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(results["bounds"])


# ------------------------------------------------------------------ the claim itself


def _toml(audit: str) -> dict[str, Any]:
    return tomllib.loads((AUDITS / f"{audit}.toml").read_text(encoding="utf-8"))


def _deployment(audit: str) -> dict[str, Any]:
    return build_card(_inputs()[audit])["deployment"]


def test_pure_dp_claim_is_the_audit_files() -> None:
    claim = _toml("laplace")["mechanism"]["claim"]
    d = _deployment("laplace")
    assert d["dp_flavor"]["name"] == "Pure DP"
    params = d["privacy_loss"]["privacy_parameters"]
    assert (params["epsilon"], params["delta"]) == (claim["epsilon"], claim["delta"])
    # A pure ε-DP mechanism is μ-GDP with μ = −2Φ⁻¹(1/(1 + e^ε)) (Dong, Roth, Su 2019,
    # arXiv 1905.02383v3, Corollary 2.13 read through Proposition 2.12): 1.2320 at ε = 1.
    assert params["mu"] == pytest.approx(1.2320353853449, rel=1e-12)
    assert d["accounting"]["kind"] == "claim"
    assert d["privacy_loss"]["privacy_unit"] == "record-level"


def test_gdp_and_zcdp_claims() -> None:
    gdp = _deployment("gaussian")
    assert gdp["dp_flavor"]["name"] == "Gaussian DP"
    assert (
        gdp["privacy_loss"]["privacy_parameters"]["mu"]
        == _toml("gaussian")["mechanism"]["claim"]["mu"]
    )
    zcdp = _deployment("gaussian-zcdp")
    rho = _toml("gaussian-zcdp")["mechanism"]["claim"]["rho"]
    params = zcdp["privacy_loss"]["privacy_parameters"]
    assert zcdp["dp_flavor"]["name"] == "zCDP"
    assert params["rho"] == rho
    # ρ-zCDP ⇒ (ρ + 2√(ρ ln(1/δ)), δ)-DP (Bun, Steinke 2016, Proposition 1.3).
    delta = params["delta"]
    assert params["epsilon"] == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1 / delta)))


def test_accountant_claim_carries_what_ran() -> None:
    config = _toml("dpsgd-dpsgd")["dpsgd"]
    d = _deployment("dpsgd-dpsgd")
    assert d["dp_flavor"]["name"] == "Approximate DP"
    assert d["accounting"]["kind"] == "accountant"
    (record,) = d["accounting"]["records"]
    assert record["noise_multiplier"] == config["training"]["dp"]["noise_multiplier"]
    # q = B/N and T = epochs·⌊N/B⌋ (dpaudit.recipes.sampling_plan).
    rows, batch, epochs = (
        config["rows"],
        config["training"]["batch_size"],
        config["training"]["epochs"],
    )
    assert record["sampling_rate"] == batch / rows
    assert record["steps"] == epochs * (rows // batch)
    threat = build_card(_inputs()["dpsgd-dpsgd"])["audit"]["threat_models"]
    assert threat == [
        "white-box: the adversary sees every update of the training run (canary: dirac)"
    ]


def test_no_claim_states_no_flavor() -> None:
    d = _deployment("byo-sklearn")
    assert d["dp_flavor"]["name"] is None
    assert set(d["privacy_loss"]["privacy_parameters"].values()) == {None}
    assert d["accounting"] is None
    text = render_model_card(build_card(_inputs()["byo-sklearn"]))
    assert "No differential-privacy claim was held against this audit." in text


def test_weakest_claim_is_stated_for_several_tests() -> None:
    # local-vs-central audits ε ∈ {0.5, ln 3, 2}: the registry states the weakest, ε = 2.
    d = _deployment("local-vs-central")
    epsilons = sorted(c["epsilon"] for c in d["privacy_loss"]["per_test"])
    assert d["privacy_loss"]["privacy_parameters"]["epsilon"] == epsilons[-1] == 2.0
    assert epsilons[0] == 0.5
    assert d["dp_flavor"]["name"] in FLAVORS


def test_violation_is_in_the_card() -> None:
    card = build_card(_inputs()["laplace-violation"])
    assert card["audit"]["verdict"] == "fail"
    assert card["audit"]["privacy_verdict"] == "violation"
    assert any(r["violation"] for r in card["audit"]["lower_bounds"])
    assert "**VIOLATION**" in render_model_card(card)


def test_schema_rejects_a_broken_card() -> None:
    card = build_card(_inputs()["laplace"])
    card["audit"]["verdict"] = "maybe"
    with pytest.raises(DataError, match=r"at 'audit/verdict': 'maybe' is not one of"):
        validate_card(card)
    with pytest.raises(DataError, match=r"cannot be made into a card: missing or malformed"):
        build_card({"name": "x"})


# ---------------------------------------------------------------------- YAML, Markdown

HOSTILE = [
    "plain",
    "ε ≥ 1: δ = 1e-5 # not a comment",
    'quote " and \\ backslash',
    "line\nbreak\r\tand tab",
    "\x1b[31mred\x00nul\x7fdel\x85next",
    "sep\u2028arator\u2029 and bom \ufeff",
    "null",
    "yes",
    "- leading dash",
    "{flow: [1, 2]}",
    "  spaces  ",
    "",
    "😀 astral",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_yaml_strings_round_trip(text: str) -> None:
    assert yaml.safe_load(to_yaml({"k": text, "l": [text], "m": [{"n": text}]})) == {
        "k": text,
        "l": [text],
        "m": [{"n": text}],
    }


def test_yaml_numbers_round_trip() -> None:
    values = [0.0, 1.0, 0.1, 1e-05, 1e20, 5e-324, 1.7976931348623157e308, -2.5e-7, 3, -4]
    assert yaml.safe_load(to_yaml({"v": values, "b": [True, False, None]})) == {
        "v": values,
        "b": [True, False, None],
    }
    # JSON and YAML have no infinity for an unbounded value: it is null, as in results.json.
    assert yaml.safe_load(to_yaml({"x": math.inf, "y": math.nan})) == {"x": None, "y": None}
    assert yaml.safe_load(to_yaml({"e": {}, "l": [], "n": [[1, 2], []]})) == {
        "e": {},
        "l": [],
        "n": [[1, 2], []],
    }


def test_markdown_user_text_cannot_forge_rows_or_lines() -> None:
    results = json.loads(json.dumps(_inputs()["laplace"]))
    forged = "x | 99 | 0 |\n| forged | row"
    for b in results["bounds"]:
        b["test"] = forged
    for t in results["tests"]:
        t["label"] = forged
    results["checks"][0]["message"] = "ok\n- passed `forged`: line"
    text = render_model_card(build_card(results))
    body = text.split("\n---\n", 1)[1]
    assert not any(line.startswith("| forged") for line in body.splitlines())
    assert len([line for line in body.splitlines() if line.startswith("| ")]) == 3
    assert sum(line.startswith("- ") for line in body.splitlines()) == (
        len(results["checks"]) + 2  # the checks and the two strongest bounds
    )
    assert yaml.safe_load(text.split("---\n")[1])["dpaudit"]["audit"] == "laplace"


# ----------------------------------------------------------------------------- CLI

TINY = """
[audit]
name = "tiny-laplace"
kinds = ["mechanism"]
seed = 3

[mechanism]
name = "laplace"
epsilon = 1.0
trials = 2_000

[mechanism.claim]
epsilon = 1.0
"""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("card")
    (folder / "tiny.toml").write_text(TINY, encoding="utf-8")
    run_dir = folder / "run"
    result = CliRunner().invoke(app, ["run", str(folder / "tiny.toml"), "-q", "-o", str(run_dir)])
    assert result.exit_code == 0, result.output
    return run_dir


def _copy(run_dir: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(run_dir, to)
    return to


def test_cli_writes_the_card(finished_run: Path, tmp_path: Path) -> None:
    run_dir = _copy(finished_run, tmp_path / "run")
    result = CliRunner().invoke(app, ["card", str(run_dir)])
    assert result.exit_code == 0, result.output
    card = json.loads((run_dir / REGISTRY_NAME).read_text(encoding="utf-8"))
    validate_card(card)
    results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    assert card["audit"]["lower_bounds"][0]["value"] == results["bounds"][0]["lower"]["value"]
    assert card["deployment"]["dp_flavor"]["name"] == "Pure DP"
    assert (run_dir / MODEL_CARD_NAME).is_file()
    out = tmp_path / "elsewhere" / "card"
    result = CliRunner().invoke(app, ["card", str(run_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [MODEL_CARD_NAME, REGISTRY_NAME]
    # The run itself still verifies: the card files are not part of it.
    assert CliRunner().invoke(app, ["verify", str(run_dir)]).exit_code == 0


def test_cli_refuses_missing_or_broken_runs(finished_run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["card", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert "no results.json in" in result.output

    broken = _copy(finished_run, tmp_path / "broken")
    (broken / "results.json").write_text("{not json", encoding="utf-8")
    result = runner.invoke(app, ["card", str(broken)])
    assert result.exit_code == 2
    assert "is not a readable results file" in result.output
    assert not (broken / REGISTRY_NAME).exists()


def test_cli_refuses_a_tampered_run(finished_run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    tampered = _copy(finished_run, tmp_path / "tampered")
    path = tampered / "results.json"
    results = json.loads(path.read_text(encoding="utf-8"))
    results["bounds"][0]["lower"]["value"] = 0.0  # a lower bound made to look harmless
    path.write_text(json.dumps(results), encoding="utf-8")
    result = runner.invoke(app, ["card", str(tampered)])
    assert result.exit_code == 2
    assert "does not match its stored units" in result.output
    assert "no card is made from an unverified run" in result.output
    assert not (tampered / REGISTRY_NAME).exists()

    lost = _copy(finished_run, tmp_path / "lost")
    next((lost / "units").rglob("*.npz")).unlink()  # a unit the result was made from
    result = runner.invoke(app, ["card", str(lost)])
    assert result.exit_code == 2
    assert re.search(r"unit mechanism-\d+: unreadable \(FileNotFoundError", result.output)


# ---------------------------------------------------------------- stored inputs


def _remake(runs: Path) -> None:
    """Store the trimmed results.json of every shipped audit run under ``runs``."""
    out = {}
    for run in sorted(runs.iterdir()):
        if (run / "results.json").is_file():
            out[run.name] = trim(json.loads((run / "results.json").read_text(encoding="utf-8")))
    INPUTS.write_text(json.dumps(out, indent=0, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    _remake(Path(sys.argv[1]))


# ----------------------------------------------- verify compares the whole document


_WARNED = """
[audit]
name = "whole-document"
description = "as written"
kinds = ["mechanism"]
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 2_000
[gate]
on_unmeasured = "warn"
max_attribute_advantage = 0.1
"""


def _forge(data: dict[str, Any], edit: str) -> None:
    if edit == "warnings removed":
        assert data["warnings"]
        data["warnings"] = []
    elif edit == "confidence level":
        data["config"]["audit"]["confidence_level"] = 0.5
    elif edit == "description":
        data["config"]["audit"]["description"] = "rewritten"
    elif edit == "budget":
        data["provenance"]["verdict_budget"]["confidence_level"] = 0.5
    elif edit == "finished":  # a time: documented as not recomputable
        data["provenance"]["finished"] = "2000-01-01T00:00:00+00:00"


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ("warnings removed", "results.json's 'warnings' differs"),
        ("confidence level", "results.json's 'config' differs"),
        ("description", "results.json's 'config' differs"),
        ("budget", "results.json's 'provenance.verdict_budget' differs"),
        ("finished", None),
    ],
)
def test_verify_compares_every_recomputable_field(
    tmp_path: Path, edit: str, problem: str | None
) -> None:
    from dpaudit.audit import run_audit, verify_run

    audit = tmp_path / "a.toml"
    audit.write_text(_WARNED)
    run_dir = tmp_path / "run"
    run_audit(audit, output_dir=run_dir)
    path = run_dir / "results.json"
    data = json.loads(path.read_text())
    _forge(data, edit)
    path.write_text(json.dumps(data))
    if problem is None:
        assert verify_run(run_dir) == []
        card = json.loads(card_for_run(run_dir)[1].read_text())
        assert card["audit"]["verdict"] == "pass"
        return
    assert verify_run(run_dir) == [f"{problem} from what its stored units give"]
    with pytest.raises(DpauditError, match="no card is made from an unverified run"):
        card_for_run(run_dir)
