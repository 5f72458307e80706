"""Claims, gates and confidence levels are never inputs to stored work.

A unit's key is what changes its arrays: editing ``[dpsgd.claim]``, ``[mechanism.claim]``,
a reconstruction game's claimed σ, the gate or the confidence level reuses every stored
unit, and run directories made before a claim table existed keep their keys.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from dpaudit import accounting
from dpaudit.audit import run_audit
from dpaudit.cli import app
from dpaudit.config import load_config_text, run_context
from dpaudit.kinds import get_kind
from dpaudit.kinds.base import claim_left_out

runner = CliRunner()

# 100 rows, batches of 25: q = 0.25, one epoch of 4 steps, σ = 0.8, C = 1.
DPSGD = """
[audit]
name = "claims-not-inputs"
kinds = ["dpsgd"]
seed = 3
{audit}

[dpsgd]
trainer = "dpsgd"
canary = "dirac"
threat_model = "white-box"
rows = 100
trials = 20
models_per_unit = 10

[dpsgd.training]
epochs = 1
batch_size = 25
learning_rate = 0.5

[dpsgd.training.dp]
noise_multiplier = 0.8
clipping_norm = 1.0

[report]
html = false
{claim}
"""


def _dpsgd(tmp_path: Path, name: str, *, claim: str = "", audit: str = "") -> Path:
    path = tmp_path / name
    path.write_text(DPSGD.format(claim=claim, audit=audit), encoding="utf-8")
    return path


def _accountant_epsilon() -> float:
    return accounting.dpsgd_epsilon(noise_multiplier=0.8, sampling_rate=0.25, steps=4, delta=1e-5)


def test_a_dpsgd_claim_table_added_to_a_finished_run_reuses_every_unit(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = runner.invoke(app, ["run", str(_dpsgd(tmp_path, "a.toml")), "-o", str(run_dir)])
    assert first.exit_code == 0, first.output
    assert "reused" not in first.output
    # The claim, the confidence level and the gate change; no model does.
    honest = _accountant_epsilon() + 0.5
    claim = (
        f"\n[dpsgd.claim]\nepsilon = {honest}\ndelta = 1e-5\n"
        "\n[gate]\nmax_epsilon_lower_bound = 50.0\n"
    )
    again = runner.invoke(
        app,
        [
            "run",
            str(_dpsgd(tmp_path, "b.toml", claim=claim, audit="confidence_level = 0.9")),
            "-o",
            str(run_dir),
        ],
    )
    assert again.exit_code == 0, again.output
    assert "dpsgd: reused 4 of 4 units" in again.output
    assert "claim_vs_records" in again.output


def test_the_claim_table_is_what_the_check_and_the_comparisons_hold(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = run_audit(_dpsgd(tmp_path, "a.toml"), output_dir=run_dir, write=False)
    accountant = _accountant_epsilon()
    # A claim below what ran allows: the records alone refute it (exit 1 through the CLI),
    # and the ε comparison is held against it, from the same stored units.
    claim = "\n[dpsgd.claim]\nepsilon = 1.0\ndelta = 1e-5\n"
    low = run_audit(_dpsgd(tmp_path, "b.toml", claim=claim), output_dir=run_dir, write=False)
    units = low.provenance["units"]["dpsgd"]
    assert (units["total"], units["reused"], units["computed"]) == (4, 4, 0)
    assert units["key"] == first.provenance["units"]["dpsgd"]["key"]
    assert not any(c.name == "claim_vs_records" for c in first.checks)
    check = next(c for c in low.checks if c.name == "claim_vs_records")
    assert not check.passed
    assert check.limit == 1.0
    assert check.value is not None
    assert 1.0 < check.value <= accountant
    eps = next(c for c in low.comparisons if c.parameter == "epsilon" and c.in_verdict)
    assert eps.upper == 1.0
    assert eps.upper_source.startswith("[dpsgd.claim] (ε)")
    assert low.verdict != "pass"
    # The same file without the claim is held against the accountant of what ran.
    eps_first = next(c for c in first.comparisons if c.parameter == "epsilon" and c.in_verdict)
    assert eps_first.upper == accountant


def test_files_without_a_claim_keep_the_keys_their_run_directories_have(tmp_path: Path) -> None:
    # The key of a file with no claim is the dump the key always was: nothing to rerun.
    config = load_config_text(DPSGD.format(claim="", audit=""), base_dir=tmp_path, source="a")
    plan = get_kind("dpsgd").plan(config.section("dpsgd"), run_context(config))
    assert "claim" not in plan.key_data["section"]
    text = """
[audit]
name = "m"
kinds = ["mechanism"]
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 2000
"""
    plain = load_config_text(text, base_dir=tmp_path, source="a")
    claimed = load_config_text(
        text + "[mechanism.claim]\nepsilon = 0.5\n", base_dir=tmp_path, source="b"
    )
    kind = get_kind("mechanism")
    key = kind.plan(plain.section("mechanism"), run_context(plain))
    assert key.key_data["section"]["claim"] is None  # as before the claim was left out
    assert kind.plan(claimed.section("mechanism"), run_context(claimed)).key(
        "mechanism"
    ) == key.key("mechanism")


def test_a_mechanism_claim_change_resamples_nothing(tmp_path: Path) -> None:
    text = """
[audit]
name = "m"
kinds = ["mechanism"]
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 4000
[mechanism.claim]
epsilon = {claim}
[execution]
unit_size = 1000
"""
    run_dir = tmp_path / "run"
    (tmp_path / "a.toml").write_text(text.format(claim=1.0), encoding="utf-8")
    (tmp_path / "b.toml").write_text(text.format(claim=0.5), encoding="utf-8")
    first = run_audit(tmp_path / "a.toml", output_dir=run_dir, write=False)
    again = run_audit(tmp_path / "b.toml", output_dir=run_dir, write=False)
    assert first.provenance["units"]["mechanism"]["computed"] == 4
    assert again.provenance["units"]["mechanism"]["reused"] == 4
    uppers = {c.upper for c in again.comparisons if c.parameter == "epsilon" and c.in_verdict}
    assert uppers == {0.5}


def test_a_reconstruction_games_claimed_sigma_is_no_input() -> None:
    dump = {"section": {"game": {"noise_multiplier": 0.3, "claimed_noise_multiplier": 3.0}}}
    out = claim_left_out(dump, "section", "game", "claimed_noise_multiplier")
    assert out == {"section": {"game": {"noise_multiplier": 0.3, "claimed_noise_multiplier": None}}}
    assert dump["section"]["game"]["claimed_noise_multiplier"] == 3.0  # the input is kept
    assert claim_left_out({"section": {"game": None}}, "section", "game", "x") == {
        "section": {"game": None}
    }
