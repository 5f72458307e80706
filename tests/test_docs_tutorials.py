"""The tutorials in docs/tutorials/ run as written.

Each page is run from top to bottom in an empty folder. Every fenced block is preceded by
one marker comment saying what to do with it:

- ``<!-- file: PATH -->``: the block is written to PATH (an audit file, a plug-in, a test);
- ``<!-- run -->``: a ``bash`` block's lines are commands, each ending with
  ``# exit N``, run in order; each must exit with the code it states;
- ``<!-- not run: REASON -->``: the block is shown only (the reason is required).

A block without a marker fails the test, so nothing on a tutorial goes unchecked.
Commands run with the interpreter's folder first on PATH, so ``dpaudit`` and ``python``
are the ones of this installation, and with the environment's PYTHONPATH.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "docs" / "tutorials"
PAGES = ("library-author.md", "dp-training.md", "release-engineer.md")

_BLOCK = re.compile(
    r"(?:<!-- (?P<marker>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```\n",
    flags=re.DOTALL | re.MULTILINE,
)
_EXIT = re.compile(r"^(?P<command>.*?)\s+# exit (?P<code>\d+)$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page, with what its marker says to do."""

    line: int
    lang: str
    body: str
    action: str  # "file", "run" or "not run"
    argument: str  # the file's path, or the reason it is not run


def blocks(text: str) -> list[Block]:
    """Every fenced block of ``text`` in order; ``ValueError`` for a block without a marker."""
    found = []
    for match in _BLOCK.finditer(text):
        line = text.count("\n", 0, match.start("lang")) + 1
        marker = (match.group("marker") or "").strip()
        action, _, argument = marker.partition(":")
        action, argument = action.strip(), argument.strip()
        if action not in ("file", "run", "not run") or (action != "run" and not argument):
            raise ValueError(
                f"the block at line {line} needs a marker <!-- file: PATH -->, <!-- run --> "
                f"or <!-- not run: REASON -->; got {marker!r}"
            )
        if action == "run" and match.group("lang") != "bash":
            raise ValueError(f"the block at line {line} is run, so it must be a bash block")
        found.append(Block(line, match.group("lang"), match.group("body"), action, argument))
    return found


def commands(block: Block) -> list[tuple[str, int]]:
    """A run block's commands with the exit code each states."""
    out = []
    for raw in block.body.splitlines():
        if not raw.strip():
            continue
        match = _EXIT.match(raw)
        if match is None:
            raise ValueError(
                f"the command {raw!r} (block at line {block.line}) must end with '# exit N'"
            )
        out.append((match.group("command"), int(match.group("code"))))
    return out


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in ("PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        env.pop(name, None)
    env.setdefault("PYTHONPATH", str(ROOT))
    return env


def test_a_block_without_a_marker_is_refused() -> None:
    with pytest.raises(ValueError, match="needs a marker"):
        blocks("text\n\n```bash\ndpaudit run x.toml   # exit 0\n```\n")


def test_a_command_without_its_exit_code_is_refused() -> None:
    (block,) = blocks("<!-- run -->\n```bash\ndpaudit run x.toml\n```\n")
    with pytest.raises(ValueError, match="must end with '# exit N'"):
        commands(block)


def test_markers_and_exit_codes_are_read() -> None:
    text = (
        "<!-- file: a/b.toml -->\n```toml\nx = 1\n```\n\n"
        "<!-- run -->\n```bash\ndpaudit run a/b.toml   # exit 1\n```\n\n"
        "<!-- not run: needs a GPU -->\n```python\nimport torch\n```\n"
    )
    file, run, shown = blocks(text)
    assert (file.action, file.argument, file.body) == ("file", "a/b.toml", "x = 1\n")
    assert commands(run) == [("dpaudit run a/b.toml", 1)]
    assert (shown.action, shown.argument) == ("not run", "needs a GPU")


@pytest.mark.parametrize("page", PAGES)
def test_every_tutorial_is_in_the_site(page: str) -> None:
    assert f"tutorials/{page}" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


@pytest.mark.parametrize("page", PAGES)
def test_the_tutorial_runs_as_written(page: str, tmp_path: Path) -> None:
    page_blocks = blocks((TUTORIALS / page).read_text(encoding="utf-8"))
    assert any(b.action == "run" for b in page_blocks)
    env = _environment()
    for block in page_blocks:
        if block.action == "file":
            target = tmp_path / block.argument
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.body, encoding="utf-8")
        elif block.action == "run":
            for command, code in commands(block):
                done = subprocess.run(
                    ["bash", "-c", command],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    stdin=subprocess.DEVNULL,
                    timeout=600,
                    check=False,
                )
                assert done.returncode == code, (
                    f"{page}, line {block.line}: {command!r} exited {done.returncode}, the page "
                    f"says {code}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )
