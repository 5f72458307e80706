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


# ------------------------------------------------------------- the flat top, the packages

PACKAGE = Path(dpaudit.__file__).parent


def test_at_most_22_modules_sit_at_the_top_of_the_package() -> None:
    # every dpaudit/*.py counts, __init__ and the private ones included
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 22, top


@pytest.mark.parametrize(
    ("moved", "now", "name"),
    [
        ("dpaudit.executors", "dpaudit.store.executors", "run_units"),
        ("dpaudit.gate", "dpaudit.results.gate", "evaluate_gate"),
    ],
)
def test_moved_modules_live_in_their_package(moved: str, now: str, name: str) -> None:
    assert not (PACKAGE / f"{moved.split('.')[-1]}.py").exists()
    assert callable(getattr(importlib.import_module(now), name))


def _imports_inside_functions(path: Path) -> int:
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sum(
        isinstance(node, ast.Import | ast.ImportFrom)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(function)
    )


def test_kind_adapters_import_nothing_inside_their_functions() -> None:
    # they reach their family's machinery through lazy submodules (dpaudit._lazy)
    adapters = [*PACKAGE.glob("*/kind.py"), PACKAGE / "membership" / "attribute.py"]
    assert len(adapters) == 6
    assert {str(p.relative_to(PACKAGE)): _imports_inside_functions(p) for p in adapters} == {
        str(p.relative_to(PACKAGE)): 0 for p in adapters
    }


def test_few_imports_hide_inside_functions() -> None:
    # Optional dependencies (mlflow, dask, pandas, matplotlib, tensorly, ...) and the
    # scipy.stats that most runs never load stay inside functions; the rest of the package
    # imports at the top; the command-line interface reaches the library through its lazy
    # names (cli/_library.py) and imports nothing inside its functions.
    counts = {
        str(p.relative_to(PACKAGE)): _imports_inside_functions(p) for p in PACKAGE.rglob("*.py")
    }
    assert sum(counts.values()) < 60, sorted(counts.items(), key=lambda kv: -kv[1])[:10]
    assert sum(n for name, n in counts.items() if name.startswith("cli")) == 0


def test_the_trainers_package_registers_its_sibling_modules_trainers() -> None:
    from dpaudit import trainers

    assert {name: fn.__module__ for name, fn in trainers.TRAINERS.items()} == {
        "dpsgd": "dpaudit.trainers.engine",
        "dpgd": "dpaudit.trainers.engine",
        "plain": "dpaudit.trainers.engine",
        "output-perturbation": "dpaudit.trainers.perturbation",
        "multiparty": "dpaudit.trainers.perturbation",
        "multiparty-gradient": "dpaudit.trainers.perturbation",
        "gradient-laplace": "dpaudit.trainers.perturbation",
    }
    for name in trainers.__all__:
        assert getattr(trainers, name) is not None
    assert trainers.CanarySetup.__module__ == "dpaudit.trainers.protocol"
