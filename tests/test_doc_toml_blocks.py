"""Every TOML block of the README and the docs runs as written and gives the exit it states.

A block states what it does in its first comment lines:

- ``# expect: exit N`` (N = 0, 1 or 2): the block is a whole audit file; it is run and
  must give that exit (``dpaudit run``: 0 every gate check passed, 1 one failed, 2
  unusable input). ``# run from: DIR`` resolves its paths against DIR of the repository
  (default: the repository's root); ``# expect: headline CHECK`` names the check the
  verdict's headline must be about (its first finding).
- ``# not run: why``: a fragment (one table to add to a file, say), never run.

A block that says neither fails here, so no example can drift unnoticed. Two kinds of
block are run elsewhere and skipped here: a tutorial's block, whose HTML marker
(``<!-- file: PATH -->`` and the like) ``tests/test_docs_tutorials.py`` acts on, and a kind
page's include of its shipped example (``--8<-- "dpaudit/examples/KIND.toml"``), which
``dpaudit init --kind KIND`` writes and ``tests/test_cli.py`` runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpaudit.audit import run_audit
from dpaudit.config import load_config_text
from dpaudit.errors import DpauditError

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"(<!-- [^>]*-->\n)?^```toml\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
_INCLUDE = re.compile(r'\A--8<-- "dpaudit/examples/[a-z-]+\.toml"\s*\Z')
_EXIT = re.compile(r"^# expect: exit ([012])\b", flags=re.MULTILINE)
_HEADLINE = re.compile(r"^# expect: headline (\S+)", flags=re.MULTILINE)
_FROM = re.compile(r"^# run from: (\S+)", flags=re.MULTILINE)
_NOT_RUN = re.compile(r"^# not run: \S", flags=re.MULTILINE)


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _blocks() -> list[tuple[str, str]]:
    """(where, text) of every TOML block: ``where`` is the page and the block's line."""
    found = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for match in _BLOCK.finditer(text):
            if match.group(1) or _INCLUDE.match(match.group(2)):
                continue  # run by the tutorials' test, or dpaudit init's example
            line = text.count("\n", 0, match.start(2))
            found.append((f"{page.relative_to(ROOT)}:{line}", match.group(2)))
    return found


def _runnable() -> list[tuple[str, str]]:
    return [(where, text) for where, text in _blocks() if _EXIT.search(text)]


def test_every_block_states_its_exit_or_why_it_is_not_run() -> None:
    blocks = _blocks()
    assert len(blocks) >= 4  # the README's examples at least: the scan found the blocks
    unmarked = [w for w, t in blocks if not _EXIT.search(t) and not _NOT_RUN.search(t)]
    assert unmarked == [], (
        "each TOML block needs '# expect: exit N' (a whole audit file) or '# not run: why' "
        f"(a fragment): {unmarked}"
    )
    both = [w for w, t in blocks if _EXIT.search(t) and _NOT_RUN.search(t)]
    assert both == []


def _exit_code(text: str, where: str, run_dir: Path) -> tuple[int, str]:
    """What ``dpaudit run`` would exit with on ``text``, and the verdict's first finding."""
    folder = _FROM.search(text)
    base = (ROOT / folder.group(1)).resolve() if folder else ROOT
    try:
        config = load_config_text(text, base_dir=base, source=where)
        result = run_audit(config, output_dir=run_dir, write=False)
    except DpauditError as exc:
        return 2, str(exc)
    first = result.findings[0]["check"] if result.findings else ""
    return (0 if result.verdict == "pass" else 1), first


@pytest.mark.parametrize(("where", "text"), _runnable(), ids=[w for w, _ in _runnable()])
def test_a_block_gives_the_exit_it_states(where: str, text: str, tmp_path: Path) -> None:
    exit_match = _EXIT.search(text)
    assert exit_match is not None
    code, first = _exit_code(text, where, tmp_path / "run")
    assert code == int(exit_match.group(1)), f"{where}: exit {code} ({first})"
    headline = _HEADLINE.search(text)
    if headline is not None:
        assert first == headline.group(1)


def test_the_brought_model_example_headlines_the_policy_its_file_sets() -> None:
    # A brought model states no guarantee: the default fail_on_violation has nothing to
    # compare and must not decide (or headline) the release; max_auc, which the file sets,
    # does.
    (text,) = [t for w, t in _runnable() if 'path = "byo-sklearn/model.skops"' in t]
    assert "[membership]" in text
    assert "fail_on_violation" not in text
    assert _HEADLINE.search(text) is not None
