"""Every registered audit kind has its page, docs/kinds/<kind>.md, and the page documents
every option of its table.

The options are read from the kind's pydantic schema (``get_kind(name).section``), walking
into every sub-table: a field added to a schema and not to its page fails here. A page has
one heading per table (``### `[dpsgd.one_run]` ``, ``### `[[reconstruction.defences]]` ``)
followed by a Markdown table whose rows start with each key (`` | `trials` | ``). The
membership page also documents the shared tables its target is trained from.
"""

from __future__ import annotations

import re
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from dpaudit.kinds import get_kind, kind_names
from dpaudit.sections import (
    AuditSection,
    DataSection,
    ExecutionSection,
    GateSection,
    ModelSection,
    ReportSection,
    TargetSection,
    TrainingSection,
)

ROOT = Path(__file__).resolve().parent.parent
KINDS = ROOT / "docs" / "kinds"
MKDOCS = ROOT / "mkdocs.yml"

#: Tables a kind reads besides its own, documented on its page: table name → schema.
SHARED: dict[str, dict[str, type[BaseModel]]] = {
    "membership": {
        "data": DataSection,
        "model": ModelSection,
        "training": TrainingSection,
        "target": TargetSection,
    },
}


def _tables(annotation: object) -> list[tuple[type[BaseModel], bool]]:
    """The pydantic tables in a field's annotation, each with whether it is a list of them."""
    found: list[tuple[type[BaseModel], bool]] = []

    def walk(a: object, in_list: bool) -> None:
        if isinstance(a, type) and issubclass(a, BaseModel):
            found.append((a, in_list))
            return
        origin = typing.get_origin(a)
        listed = in_list or origin is list
        for arg in typing.get_args(a):
            walk(arg, listed)

    walk(annotation, False)
    return found


def _options(name: str, model: type[BaseModel], listed: bool = False) -> dict[str, list[str]]:
    """Heading of each table (``[a.b]`` or ``[[a.b]]``) → its keys, sub-tables included."""
    heading = f"[[{name}]]" if listed else f"[{name}]"
    out = {heading: list(model.model_fields)}
    for key, field in model.model_fields.items():
        for sub, sub_listed in _tables(field.annotation):
            out |= _options(f"{name}.{key}", sub, sub_listed)
    return out


def _expected(kind: str) -> dict[str, list[str]]:
    expected = _options(kind, get_kind(kind).section)
    for table, model in SHARED.get(kind, {}).items():
        expected |= _options(table, model)
    return expected


def _sections(text: str) -> dict[str, str]:
    """``### `[table]` `` heading → the text up to the next heading of any level."""
    parts = re.split(r"^#{1,6} (.*)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_the_walk_finds_nested_and_listed_tables() -> None:
    options = _options("reconstruction", get_kind("reconstruction").section)
    assert "[[reconstruction.defences]]" in options
    assert "sigma" in options["[[reconstruction.defences]]"]
    assert "claimed_noise_multiplier" in options["[reconstruction.game]"]
    dpsgd = _options("dpsgd", get_kind("dpsgd").section)
    assert "target_mu" in dpsgd["[dpsgd.training.dp]"]


@pytest.mark.parametrize("kind", kind_names())
def test_every_kind_has_a_page_in_the_site(kind: str) -> None:
    assert (KINDS / f"{kind}.md").is_file()
    assert f"kinds/{kind}.md" in MKDOCS.read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", kind_names())
def test_the_page_starts_with_the_shipped_example(kind: str) -> None:
    text = (KINDS / f"{kind}.md").read_text(encoding="utf-8")
    first_block = re.search(r"```(\w+)\n(.*?)```", text, flags=re.DOTALL)
    assert first_block is not None
    assert first_block.group(1) == "toml"
    example = ROOT / "dpaudit" / "examples" / f"{kind}.toml"
    assert example.is_file()
    assert first_block.group(2).strip() == f'--8<-- "dpaudit/examples/{kind}.toml"'


@pytest.mark.parametrize("kind", kind_names())
def test_the_page_documents_every_option(kind: str) -> None:
    sections = _sections((KINDS / f"{kind}.md").read_text(encoding="utf-8"))
    missing = []
    for table, keys in _expected(kind).items():
        body = sections.get(f"`{table}`")
        if body is None:
            missing.append(f"the heading ### `{table}`")
            continue
        rows = set(re.findall(r"^\| `([\w-]+)` \|", body, flags=re.MULTILINE))
        missing += [f"{table} {key}" for key in keys if key not in rows]
    assert not missing, f"docs/kinds/{kind}.md does not document: {', '.join(missing)}"


@pytest.mark.parametrize("kind", kind_names())
def test_the_page_documents_no_option_the_schema_lacks(kind: str) -> None:
    sections = _sections((KINDS / f"{kind}.md").read_text(encoding="utf-8"))
    expected = _expected(kind)
    extra = []
    for heading, body in sections.items():
        table = heading.strip("`")
        if table not in expected:
            continue
        rows = re.findall(r"^\| `([\w-]+)` \|", body, flags=re.MULTILINE)
        extra += [f"{table} {key}" for key in rows if key not in expected[table]]
    assert not extra, f"docs/kinds/{kind}.md documents keys no schema has: {', '.join(extra)}"


def test_a_missing_option_is_found() -> None:
    text = (KINDS / "local-central.md").read_text(encoding="utf-8")
    trimmed = re.sub(r"^\| `repeats` \|.*\n", "", text, flags=re.MULTILINE)
    rows = set(
        re.findall(
            r"^\| `([\w-]+)` \|", _sections(trimmed)["`[local-central]`"], flags=re.MULTILINE
        )
    )
    assert "repeats" not in rows
    assert "trials" in rows


@pytest.mark.parametrize(
    ("table", "model"),
    [
        ("audit", AuditSection),
        ("gate", GateSection),
        ("execution", ExecutionSection),
        ("report", ReportSection),
    ],
)
def test_the_index_lists_every_key_of_the_tables_every_file_shares(
    table: str, model: type[BaseModel]
) -> None:
    text = (KINDS / "index.md").read_text(encoding="utf-8")
    row = re.search(rf"^\| `\[{table}\]` \|(.*)$", text, flags=re.MULTILINE)
    assert row is not None, f"docs/kinds/index.md has no row for [{table}]"
    keys = set(re.findall(r"`([\w-]+)`", row.group(1)))
    missing = [key for key in model.model_fields if key not in keys]
    assert not missing, f"docs/kinds/index.md does not list [{table}] {', '.join(missing)}"
