"""The package's layout: concern-named packages keep their public import paths.

The statistics core moved into packages (``dpaudit.bounds``, ``theory``, ``accounting``,
``planning``, ``sequential``) and the Opacus adapter into ``dpaudit.trainers.opacus``;
these tests hold the public paths to what they were and the light paths to staying light.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dpaudit


def test_the_documented_opacus_adapter_path_is_the_trainers_module() -> None:
    old = importlib.import_module("dpaudit.opacus_adapter")
    new = importlib.import_module("dpaudit.trainers.opacus")
    assert old.__all__ == new.__all__
    for name in new.__all__:
        assert getattr(old, name) is getattr(new, name)


def test_accounting_reexports_its_implementation_names() -> None:
    accounting = importlib.import_module("dpaudit.accounting")
    implementation = importlib.import_module("dpaudit.accounting._accountants")
    assert accounting.__all__ == implementation.__all__
    for name in accounting.__all__:
        assert getattr(accounting, name) is getattr(implementation, name)
    assert accounting._RDP_ORDERS is implementation._RDP_ORDERS  # private names too
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        _ = accounting.no_such_name


@pytest.mark.parametrize("package", ["bounds", "theory", "accounting", "planning", "sequential"])
def test_every_name_a_core_package_exports_resolves(package: str) -> None:
    module = importlib.import_module(f"dpaudit.{package}")
    names = getattr(module, "__all__", [n for n in vars(module) if not n.startswith("_")])
    assert names
    for name in names:
        assert getattr(module, name) is not None


def test_every_top_level_public_name_resolves() -> None:
    for name in dpaudit.__all__:
        assert getattr(dpaudit, name) is not None


@pytest.mark.parametrize(
    "statement",
    ["import dpaudit.accounting.upper_bounds", "from dpaudit.accounting import upper_bounds"],
)
def test_the_accountants_light_modules_load_no_dp_accounting(statement: str) -> None:
    code = f"{statement}\nimport sys\nprint('dp_accounting' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_sampling_formula_lives_with_the_engine_and_loads_no_torch() -> None:
    from dpaudit import recipes
    from dpaudit.training import sampling

    assert recipes.sampling_plan is sampling.sampling_plan
    assert sampling.sampling_plan(1000, batch_size=100, epochs=3, full_batch=False) == (0.1, 30)
    code = "import dpaudit.training.sampling, sys\nprint('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_run_directory_of_the_previous_release_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tests/previous_release/run/ was written by the release before the move (55bcc81):
    # its units are stored under their key and checked against their digests. Every unit
    # must be reused (nothing trained, nothing saved) and give the bounds it gave then.
    from dpaudit.audit import run_audit
    from dpaudit.store import RunStore

    source = Path(__file__).parent / "previous_release"
    expected = json.loads((source / "expected.json").read_text())
    shutil.copytree(source / "run", tmp_path / "run")
    saved: list[str] = []
    monkeypatch.setattr(RunStore, "save", lambda self, unit, arrays: saved.append(unit))
    lines: list[str] = []
    result = run_audit(source / "laplace.toml", output_dir=tmp_path / "run", log=lines.append)
    assert saved == []
    assert any(line.startswith("mechanism: reused 2 of 2 units") for line in lines), lines
    data = json.loads(result.to_json())
    # (the file's config_hash may change: new tables with defaults enter it; the units' keys
    # are what must survive, and they did: nothing was saved)
    assert data["verdict"] == expected["verdict"]
    got = [
        {"test": b["test"], "parameter": b["parameter"], "lower": b["lower"]["value"]}
        for b in data["bounds"]
    ]
    assert got == expected["bounds"]
