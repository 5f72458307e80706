"""`dpaudit plan FILE`: the plan of an audit file, made from the parsed file, running nothing.

The level of a plan for a file is the share of the verdict's budget each of its bounds
gets: the audit spends ONE budget 1 − c over its k in-verdict comparisons (Bonferroni),
each bound at 1 − (1 − c)/k. A Laplace file with a pure ε claim holds three (the ε
bound, the μ bound of the μ its ε implies, and the Laplace claim curve); a Gaussian file
claiming μ alone holds two (μ, and ε at the file's δ from the μ it claims).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dpaudit.audit
from dpaudit.audit import run_audit
from dpaudit.cli import app
from dpaudit.config import load_config
from dpaudit.errors import DpauditError
from dpaudit.planning import plan_trials

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
LAPLACE = str(ROOT / "audits" / "laplace.toml")
GAUSSIAN = str(ROOT / "audits" / "gaussian.toml")
FILE_DELTA = 1e-5  # [audit] delta, which neither file sets: the schema's default


def _plan(*args: str) -> dict:
    res = runner.invoke(app, ["plan", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def test_a_laplace_file_is_planned_at_its_bounds_share_of_the_files_confidence() -> None:
    out = _plan(LAPLACE, "--target", "0.95")
    level = 1 - (1 - 0.95) / 3  # c = 0.95 of the file, three comparisons
    expected = plan_trials(
        0.95, FILE_DELTA, level, tradeoff="laplace", mechanism_epsilon=1.0, threshold="split"
    )
    assert out["comparisons"] == {"mechanism": 3}
    assert out["level_each"] == pytest.approx(level, abs=1e-15)
    assert out["confidence_level"] == pytest.approx(level, abs=1e-15)
    assert (out["verdict_confidence_level"], out["confidence_source"]) == (0.95, "file")
    assert out["trials_per_arm"] == expected.trials_per_arm == 43756
    assert (out["tradeoff"], out["mechanism_epsilon"], out["delta"]) == ("laplace", 1.0, 1e-5)
    assert out["claim"] == {"epsilon": 1.0, "delta": 0.0}
    assert out["file_trials_per_arm"] == 100_000
    assert "time" not in out


def test_the_plans_level_is_the_level_a_run_of_the_file_spends(tmp_path: Path) -> None:
    # The file's comparisons are counted before any unit exists; a run counts them after
    # its units (provenance.verdict_budget): the two must agree.
    out = _plan(LAPLACE, "--target", "0.95")
    config = load_config(LAPLACE).with_section("mechanism", trials=2_000)
    ran = run_audit(config, output_dir=tmp_path / "run")
    budget = ran.provenance["verdict_budget"]
    assert budget["per_kind"] == out["comparisons"]
    assert budget["level_each"] == pytest.approx(out["level_each"], abs=1e-15)


def test_a_mu_claim_plans_the_mu_bound_of_the_files_gaussian() -> None:
    out = _plan(GAUSSIAN, "--target", "0.8")
    level = 1 - (1 - 0.95) / 2
    expected = plan_trials(
        0.8, FILE_DELTA, level, tradeoff="gaussian", mechanism_mu=1.0, parameter="mu"
    )
    assert out["comparisons"] == {"mechanism": 2}
    assert (out["parameter"], out["tradeoff"], out["mechanism_mu"]) == ("mu", "gaussian", 1.0)
    assert out["trials_per_arm"] == expected.trials_per_arm


def test_the_confidence_level_flag_overrides_the_files() -> None:
    out = _plan(LAPLACE, "--target", "0.95", "--confidence-level", "0.99")
    level = 1 - (1 - 0.99) / 3  # the flag's c, still shared over the file's comparisons
    expected = plan_trials(0.95, FILE_DELTA, level, tradeoff="laplace", mechanism_epsilon=1.0)
    assert (out["verdict_confidence_level"], out["confidence_source"]) == (0.99, "given")
    assert out["level_each"] == pytest.approx(level, abs=1e-15)
    assert out["trials_per_arm"] == expected.trials_per_arm
    assert out["trials_per_arm"] > _plan(LAPLACE, "--target", "0.95")["trials_per_arm"]


def test_flags_override_the_files_mechanism_and_delta() -> None:
    out = _plan(LAPLACE, "--target", "0.95", "--mechanism-epsilon", "2", "--delta", "0")
    expected = plan_trials(0.95, 0.0, 1 - 0.05 / 3, tradeoff="laplace", mechanism_epsilon=2.0)
    assert (out["mechanism_epsilon"], out["delta"]) == (2.0, 0.0)
    assert out["trials_per_arm"] == expected.trials_per_arm


def test_plan_file_runs_no_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class TrialRan(DpauditError):
        pass

    def refuse(*args: object, **kwargs: object) -> None:
        raise TrialRan("a trial ran")

    monkeypatch.chdir(tmp_path)  # a run would write reports/<name>/ here
    monkeypatch.setattr(dpaudit.audit, "run_audit", refuse)
    monkeypatch.setattr(dpaudit.audit, "run_units", refuse)
    res = runner.invoke(app, ["plan", LAPLACE, "--target", "0.95"])
    assert res.exit_code == 0, res.output
    assert "43756 trials per arm" in res.output
    assert "shared over 3 comparisons (mechanism 3)" in " ".join(res.output.split())
    assert list(tmp_path.iterdir()) == []
    # power control: --time does run the kind, through the function refused here
    timed = runner.invoke(app, ["plan", LAPLACE, "--target", "0.95", "--time"])
    assert (timed.exit_code, timed.output) == (2, "error: a trial ran\n")


def test_plan_file_with_time_extrapolates_a_line_through_two_calibration_runs() -> None:
    # The estimate is the line through the two timed calibration runs: fixed + slope × n.
    out = _plan(LAPLACE, "--target", "0.95", "--time")
    t = out["time"]
    (n0, n1), (w0, w1) = t["calibration_trials"], t["calibration_wall"]
    slope = max(w1 - w0, 0.0) / (n1 - n0)
    expected = max(w0 - slope * n0, 0.0) + slope * out["trials_per_arm"]
    assert t["wall_seconds"] == pytest.approx(expected)
    assert (t["kind"], t["trials_per_arm"]) == ("mechanism", out["trials_per_arm"])
    assert out["level_each"] == pytest.approx(1 - 0.05 / 3)  # the file's, not the runs'


DPSGD = str(ROOT / "audits" / "dpsgd-dpsgd.toml")


def test_a_dpsgd_file_is_planned_at_the_most_comparisons_its_verdict_can_hold(
    tmp_path: Path,
) -> None:
    # dpsgd-dpsgd.toml: many-run ε, μ and claim curve (3), the one run (1), the grey-box
    # batch-size and noise p-value tests (2): at most 6, counted from the file.
    out = _plan(DPSGD, "--target", "0.5", "--mechanism-mu", "1.5")
    level = 1 - (1 - 0.95) / 6
    expected = plan_trials(0.5, FILE_DELTA, level, tradeoff="gaussian", mechanism_mu=1.5)
    assert (out["comparisons"], out["comparisons_maximum"]) == ({"dpsgd": 6}, ["dpsgd"])
    assert out["level_each"] == pytest.approx(level, abs=1e-15)
    assert out["trials_per_arm"] == expected.trials_per_arm
    text = runner.invoke(app, ["plan", DPSGD, "--target", "0.5", "--mechanism-mu", "1.5"])
    assert text.exit_code == 0, text.output
    assert (
        "shared over at most 6 comparisons (dpsgd 6): planned conservatively, as dpsgd "
        "counts from what a run stores." in " ".join(text.output.split())
    )
    # A small run of the same file records its k: never more than the planned maximum.
    config = load_config(DPSGD).with_section(
        "dpsgd", trials=20, one_run={"canaries": 40, "guesses": 20}
    )
    ran = run_audit(config, output_dir=tmp_path / "run")
    k = ran.provenance["verdict_budget"]["per_kind"]["dpsgd"]
    assert 1 <= k <= dpaudit.audit.planned_comparisons(config).counts["dpsgd"] == 6


MEMBERSHIP_AND_LAPLACE = """
[audit]
name = "membership-and-laplace"
kinds = ["mechanism", "membership"]
seed = 4
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 2000
[data]
dataset = "statsmodels:fair"
audited_size = 100
[model]
kind = "logistic"
[training]
epochs = 1
batch_size = 32
[training.dp]
target_epsilon = 2.0
[target]
variants = ["plain", "dp"]
[membership]
attacks = ["loss"]
"""


def test_a_membership_kind_counts_at_most_its_held_targets_shown_attacks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.toml"
    path.write_text(MEMBERSHIP_AND_LAPLACE, encoding="utf-8")
    # the dp target may be held against its accountant, the plain one never: 1 × 1 attack
    counted = dpaudit.audit.planned_comparisons(load_config(path))
    assert (counted.counts, counted.maximum) == ({"mechanism": 3, "membership": 1}, ("membership",))
    out = _plan(str(path), "--target", "0.5")
    level = 1 - (1 - 0.95) / 4
    expected = plan_trials(0.5, FILE_DELTA, level, tradeoff="laplace", mechanism_epsilon=1.0)
    assert out["trials_per_arm"] == expected.trials_per_arm
    assert out["comparisons_maximum"] == ["membership"]
    ran = run_audit(path, output_dir=tmp_path / "run")
    assert ran.provenance["verdict_budget"]["per_kind"] == {"mechanism": 3, "membership": 1}
    # every attack shown, every target held: variants × attacks; headline shows one
    both = load_config(path).with_section("membership", attacks=["loss", "lira"])
    assert dpaudit.audit.planned_comparisons(both).counts["membership"] == 2
    one = load_config(path).with_section("membership", attacks=["loss", "lira"], headline="loss")
    assert dpaudit.audit.planned_comparisons(one).counts["membership"] == 1


def test_a_kind_that_counts_from_its_units_and_gives_no_maximum_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dpaudit.dpsgd.kind import DpsgdKind
    from dpaudit.kinds.base import AuditKind

    monkeypatch.setattr(DpsgdKind, "planned_comparisons", AuditKind.planned_comparisons)
    res = runner.invoke(app, ["plan", DPSGD, "--target", "0.5", "--mechanism-epsilon", "1"])
    assert res.exit_code == 2
    assert " ".join(res.output.split()).startswith(
        "error: the 'dpsgd' kind counts its share of the verdict's confidence from its stored units"
    )


def test_a_file_without_a_laplace_or_gaussian_needs_the_attack_named() -> None:
    path = str(ROOT / "audits" / "randomized-response.toml")
    res = runner.invoke(app, ["plan", path, "--target", "0.5"])
    assert res.exit_code == 2
    assert "runs no built-in Laplace or Gaussian mechanism" in " ".join(res.output.split())
    out = _plan(path, "--target", "0.5", "--perfect")
    config = load_config(path)
    level = 1 - (1 - config.audit.confidence_level) / sum(out["comparisons"].values())
    expected = plan_trials(
        0.5, config.audit.delta, level, tradeoff="perfect", threshold=out["threshold"]
    )
    assert out["trials_per_arm"] == expected.trials_per_arm


def test_time_needs_a_file_and_a_file_needs_a_multi_run_design() -> None:
    res = runner.invoke(app, ["plan", "--target", "1", "--perfect", "--time"])
    assert (res.exit_code, res.output) == (
        2,
        "error: --time times an audit file's kind: give FILE\n",
    )
    res = runner.invoke(app, ["plan", LAPLACE, "--target", "1", "--sequential"])
    assert res.exit_code == 2
    assert "planning FILE is for --design multi-run without --sequential" in res.output


def test_verify_result_holds_the_problems_and_the_recomputed_verdict(tmp_path: Path) -> None:
    path = tmp_path / "laplace.toml"
    text = Path(LAPLACE).read_text(encoding="utf-8").replace("100_000", "2_000")
    path.write_text(text, encoding="utf-8")
    ran = run_audit(path, output_dir=tmp_path / "run")
    verified = dpaudit.audit.verify_result(tmp_path / "run")
    assert (verified.matches, verified.problems) == (True, ())
    assert verified.verdict == ran.verdict
    assert verified.to_dict() == {
        "run_dir": str(tmp_path / "run"),
        "matches": True,
        "problems": [],
        "verdict": ran.verdict,
    }
    doc = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    doc["name"] = "edited"
    (tmp_path / "run" / "results.json").write_text(json.dumps(doc), encoding="utf-8")
    edited = dpaudit.audit.verify_result(tmp_path / "run")
    assert edited.problems == ("results.json's 'name' differs from what its stored units give",)
    assert not edited.matches
