"""Each command is one library call that returns a result object: the objects' values,
computed independently here (the commands' printed lines are tested in test_cli*.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpaudit.audit import run_audit
from dpaudit.config import load_config, validate_file
from dpaudit.errors import DpauditError
from dpaudit.planning import plan_trials
from dpaudit.report import render_report_file
from dpaudit.sequential import plan_sequential, plan_sequential_beside_fixed

ROOT = Path(__file__).resolve().parents[1]


def test_validate_file_reports_the_files_kinds_hash_and_mode() -> None:
    path = ROOT / "audits" / "laplace.toml"
    checked = validate_file(path)
    config = load_config(path)
    assert (checked.file, checked.kinds, checked.config_hash, checked.safe) == (
        path,
        tuple(config.audit.kinds),
        config.config_hash(),
        False,
    )
    assert validate_file(path, safe=True).safe is True
    assert checked.to_dict()["kinds"] == ["mechanism"]


def test_validate_file_raises_for_an_invalid_file(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('[audit]\nname = "x"\nkinds = ["nope"]\n')
    with pytest.raises(DpauditError, match="unknown audit kind 'nope'"):
        validate_file(tmp_path / "a.toml")


def test_render_report_file_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(DpauditError, match=r"^no results\.json in "):
        render_report_file(tmp_path)
    (tmp_path / "results.json").write_text("[1]")
    with pytest.raises(DpauditError, match=r"not a results object"):
        render_report_file(tmp_path)


def test_render_report_file_writes_the_report_of_a_run(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(
        '[audit]\nname = "r"\nkinds = ["mechanism"]\n[mechanism]\nname = "laplace"\n'
        "epsilon = 1.0\ntrials = 2000\n[report]\nhtml = false\n"
    )
    run_audit(tmp_path / "a.toml", output_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "report.html").exists()
    written = render_report_file(tmp_path / "run")
    assert written == tmp_path / "run" / "report.html"
    assert "<html" in written.read_text(encoding="utf-8").lower()


def test_the_sequential_plan_beside_the_fixed_one() -> None:
    settings = dict(law="gaussian", true_value=2.0, parameter="mu", target=None, upper=1.0)
    beside = plan_sequential_beside_fixed(**settings, repeats=20, seed=3)  # type: ignore[arg-type]
    assert beside.plan == plan_sequential(**settings, repeats=20, seed=3)  # type: ignore[arg-type]
    fixed = plan_trials(1.0, 0.0, 0.95, tradeoff="gaussian", mechanism_mu=2.0, parameter="mu")
    assert beside.fixed_trials_per_arm == fixed.trials_per_arm
    assert beside.to_dict()["fixed_plan_trials_per_arm"] == fixed.trials_per_arm
