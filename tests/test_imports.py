"""The import graph: no circles, nothing imports the package itself, and light entry points.

import-linter's layer contracts (``make lint``) keep imports pointing down; this test
searches the same graph (grimp, every import statement anywhere in a file, inside
functions and under ``TYPE_CHECKING`` too) for any cycle, package ``__init__`` modules
included, which the layer contract does not list.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from dpaudit.kinds import get_kind, kind_names, register_kind
from dpaudit.mechanisms.kind import MechanismKind

GRAPH = grimp.build_graph("dpaudit", exclude_type_checking_imports=False)


def _strongly_connected(graph: grimp.ImportGraph) -> list[set[str]]:
    """Tarjan's algorithm over the direct-import graph: the cycles, as components."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.find_modules_directly_imported_by(v):
                out.append(component)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return out


def test_no_import_cycle_anywhere() -> None:
    assert _strongly_connected(GRAPH) == []


def test_the_cycle_search_finds_a_planted_cycle() -> None:
    # Power control: the same search on a graph with a circle must report it.
    g = grimp.ImportGraph()
    for m in ("p.a", "p.b", "p.c"):
        g.add_module(m)
    g.add_import(importer="p.a", imported="p.b")
    g.add_import(importer="p.b", imported="p.c")
    g.add_import(importer="p.c", imported="p.a")
    assert _strongly_connected(g) == [{"p.a", "p.b", "p.c"}]


def test_no_submodule_imports_the_package_itself() -> None:
    assert GRAPH.find_modules_that_directly_import("dpaudit") == set()


@pytest.mark.parametrize(
    "statement",
    ["import dpaudit.bounds", "import dpaudit.config", "import dpaudit.cli", "import dpaudit"],
)
def test_light_entry_points_load_no_torch(statement: str) -> None:
    code = (
        f"{statement}\nimport sys\n"
        "print(sorted(m for m in ('torch', 'dp_accounting') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


# ------------------------------------------------------------------------------ registry


def test_registry_lists_the_kinds_and_names_valid_ones_on_a_miss() -> None:
    assert kind_names() == (
        "mechanism",
        "membership",
        "attribute",
        "dpsgd",
        "reconstruction",
        "local-central",
    )
    assert get_kind("dpsgd").name == "dpsgd"
    with pytest.raises(ValueError, match=r"^unknown audit kind 'x'; valid kinds: mechanism, "):
        get_kind("x")


def test_a_name_registers_once() -> None:
    with pytest.raises(ValueError, match="'mechanism' is already registered"):
        register_kind(MechanismKind())


def test_builtin_trainer_names_match_the_trainer_registry() -> None:
    from dpaudit.dpsgd.schema import BUILTIN_TRAINERS
    from dpaudit.trainers import TRAINERS

    assert set(BUILTIN_TRAINERS) == set(TRAINERS)


@pytest.mark.parametrize("command", [["--help"], ["validate", "audits/laplace.toml"]])
def test_help_and_validate_load_no_torch_accounting_or_scipy_stats(command: list[str]) -> None:
    # `dpaudit --help` and `dpaudit validate` start in well under a second of CPU
    # (benchmarks/cli_start.py): they load neither torch, dp-accounting nor scipy.stats.

    root = Path(__file__).resolve().parent.parent
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom dpaudit.cli import app\n"
        f"r = CliRunner().invoke(app, {command!r})\nassert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in ('torch', 'dp_accounting', 'scipy.stats') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root
    )
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


# ------------------------------------------------------------------- lazy submodules


def test_a_kind_adapter_loads_its_family_machinery_on_first_use() -> None:
    # dpaudit.mechanisms.summary imports dpaudit.bounds.bayesian, which nothing the kind
    # adapter needs at import time does: it is loaded only once the summary runs
    code = (
        "import sys\n"
        "import dpaudit.mechanisms.kind as kind\n"
        "names = ('dpaudit.bounds.bayesian', 'dpaudit.mechanisms.summary')\n"
        "print(*(n in sys.modules for n in names))\n"
        "kind.summary.declared_curve\n"
        "print(*(n in sys.modules for n in names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["False False", "True True"]


def test_a_lazy_submodule_is_the_module_itself_and_patches_go_through() -> None:
    code = (
        "import pytest\n"
        "from dpaudit.mechanisms import summary as lazy\n"
        "import dpaudit.mechanisms.summary as real\n"
        "assert lazy.declared_curve is real.declared_curve\n"
        "patch = pytest.MonkeyPatch()\n"
        "patch.setattr(lazy, 'GRID_TRIALS', 500)\n"
        "print(real.GRID_TRIALS)\n"
        "patch.undo()\n"
        "print(real.GRID_TRIALS)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["500", "65536"]


def test_a_dpsgd_run_in_a_fresh_process_loads_its_machinery() -> None:
    # torch, while it loads, walks every module in sys.modules (inspect.getmodule): a
    # deferred module is never there, so nothing starts an import half-way through another
    # (a lazily loaded sys.modules entry did: "cannot import name ... from dpaudit.dpsgd").
    code = (
        "import dpaudit.dpsgd.kind as kind\n"
        "import torch\n"
        "print(kind.summary.summarise.__module__, kind.language.language_summary.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["dpaudit.dpsgd.summary", "dpaudit.dpsgd.language"]


@pytest.mark.parametrize(
    "family", ["mechanisms", "dpsgd", "membership", "reconstruction", "local_central"]
)
def test_every_lazy_submodule_a_family_names_is_one_of_its_modules(family: str) -> None:
    import importlib

    package = importlib.import_module(f"dpaudit.{family}")
    assert package._SUBMODULES
    for name in package._SUBMODULES:
        assert importlib.util.find_spec(f"dpaudit.{family}.{name}") is not None, name
        assert name in dir(package)
