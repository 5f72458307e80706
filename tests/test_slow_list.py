"""Every node id in ``tests/slow_tests.txt`` names a test that exists: a renamed or moved
test would otherwise fall silently back into ``make test`` and its CPU budget."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _listed() -> list[str]:
    lines = (ROOT / "tests" / "slow_tests.txt").read_text(encoding="utf-8").splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def _defined(path: Path) -> set[str]:
    """``name`` and ``Class::name`` of every test function the file defines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}
    for cls in (c for c in tree.body if isinstance(c, ast.ClassDef)):
        names |= {f"{cls.name}::{f.name}" for f in cls.body if isinstance(f, ast.FunctionDef)}
    return names


def test_every_listed_slow_test_exists() -> None:
    missing = []
    for node in _listed():
        file, _, name = node.partition("::")
        path = ROOT / file
        function = name.split("[", 1)[0]
        if not path.is_file() or function not in _defined(path):
            missing.append(node)
    assert missing == []
    assert len(set(_listed())) == len(_listed())  # no id twice
