"""The README is the front door: at most 200 lines, `make demo` then `make test` first,
and every page it links to exists."""

from __future__ import annotations

import re
from pathlib import Path

from dpaudit.config import load_config

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_LINES = 200


def test_the_readme_is_at_most_200_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES


def test_the_first_commands_are_make_demo_then_make_test() -> None:
    text = README.read_text(encoding="utf-8")
    first = re.search(r"```\w*\n(.*?)```", text, flags=re.DOTALL)
    assert first is not None
    assert first.group(1).split("\n")[:2] == ["make demo", "make test"]


def test_every_relative_link_resolves() -> None:
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    relative = [t for t in targets if "://" not in t]
    assert len(relative) >= 20  # the "which audit", kinds and documentation tables
    missing = [t for t in relative if not (ROOT / t).is_file()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_the_readme_says_what_make_test_covers() -> None:
    text = README.read_text(encoding="utf-8")
    assert "## What `make test` covers" in text
    assert "(#what-make-test-covers)" in text


def test_the_first_audit_is_the_shipped_laplace_audit(tmp_path: Path) -> None:
    """The README's TOML block is audits/laplace.toml without its comments: the same
    validated tables, so its stated results are that audit's (tests/golden/laplace.json)."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```toml\n(.*?)```", text, flags=re.DOTALL)
    assert block is not None
    shown = tmp_path / "laplace.toml"
    shown.write_text(block.group(1), encoding="utf-8")
    shipped = load_config(ROOT / "audits" / "laplace.toml").model_dump(exclude={"base_dir"})
    assert load_config(shown).model_dump(exclude={"base_dir"}) == shipped
