"""Safe mode, walked over the schemas: every key that can name code goes through one rule.

The keys are not listed here. Every table of every schema (the shared tables and each
registered kind's, nested tables included) is walked; each of its string fields is given
hostile values in audit files whose folder (also the working directory, also on
``sys.path``) holds modules that record being imported:

- the field names code when the normal path (``check_runnable``) imports the module its
  value names; every such field must carry :class:`dpaudit.plugins.NamesCode`, or the
  test fails naming it (a new key that bypasses the resolver);
- in safe mode every marked field refuses every value that is not one of its built-in
  names, naming the key, and nothing at all is imported (the decision is taken from the
  parsed file, before any import; ``load_plugin`` refusing later would be a bug,
  :class:`dpaudit.plugins.UnresolvedCode`).
"""

from __future__ import annotations

import contextlib
import copy
import re
import sys
import tomllib
import typing
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from dpaudit import config as config_module
from dpaudit.config import (
    AuditConfig,
    check_runnable,
    check_safe,
    code_fields,
    load_config,
    parse_config,
    run_context,
    unsafe_references,
)
from dpaudit.errors import ConfigError
from dpaudit.kinds import get_kind, kind_names
from dpaudit.plugins import UnresolvedCode, load_plugin, safe_mode, split_spec

#: Module names the audit folder holds: named like a data source, a package, non-ASCII.
SENTINELS = ("probe", "synthetic", "parquet", "sklearn_x", "basemech", "basefactory")
#: Values of a string field, each naming code in the folder some way.
HOSTILE = (
    "probe:run",
    "synthetic:run",
    "parquet:run",
    "probe:run ",
    " probe:run",
    "prøbe:run",
    "probe:ru-n",
    "probe_pkg.sub:run",
    "probe.Thing",
    "probe",
    "dpaudit.plugins:load_plugin",
)

SENTINEL = """
import pathlib
pathlib.Path({marker!r}).open("a").write(__name__ + "\\n")

def run(*args, **kwargs):
    import numpy as np
    return np.zeros(kwargs.get("size", 1))

def build(*args, **kwargs):
    from sklearn.linear_model import LogisticRegression
    return LogisticRegression()

class Thing:
    pass
"""


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An audit folder of sentinel modules; the working directory and on ``sys.path``."""
    marker = tmp_path / "imported.txt"
    for name in (*SENTINELS, "prøbe"):
        (tmp_path / f"{name}.py").write_text(SENTINEL.format(marker=str(marker)))
    pkg = tmp_path / "probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(SENTINEL.format(marker=str(marker)))
    (pkg / "sub.py").write_text(SENTINEL.format(marker=str(marker)))
    (tmp_path / "data.csv").write_text(
        "a,b,y,member\n" + "".join(f"{i % 7},{i % 3},{i % 2},{i % 2}\n" for i in range(40))
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    _forget()


def _forget() -> None:
    """Drop the sentinels from ``sys.modules``: the next import runs them again."""
    for name in list(sys.modules):
        if name.split(".")[0] in (*SENTINELS, "prøbe", "probe_pkg"):
            del sys.modules[name]


def _imported(folder: Path) -> list[str]:
    marker = folder / "imported.txt"
    return marker.read_text().split() if marker.exists() else []


def _example(kind: str) -> dict[str, Any]:
    text = resources.files("dpaudit").joinpath("examples", f"{kind}.toml").read_text("utf-8")
    return tomllib.loads(text)


def _bases() -> list[dict[str, Any]]:
    """Audit files that between them reach every table (a brought target, a user
    mechanism and every kind's example)."""
    user_mechanism = {
        "audit": {"name": "m", "kinds": ["mechanism"]},
        "mechanism": {
            "name": "basemech:run",
            "data": [[0.0], [1.0]],
            "trials": 200,
            "claim": {"epsilon": 1.0},
        },
    }
    brought = {
        "audit": {"name": "b", "kinds": ["membership"]},
        "data": {"dataset": "csv:data.csv", "label": "y", "features": ["a", "b"]},
        "target": {"factory": "basefactory:build", "membership": "member"},
        "membership": {"attacks": ["loss"]},
    }
    fine_tuning = {  # [dpsgd.language]: DP fine-tuning of a causal language model
        "audit": {"name": "f", "kinds": ["dpsgd"]},
        "dpsgd": {"language": {"noise_multiplier": 2.0, "sampling_rate": 0.05, "steps": 10}},
    }
    return [user_mechanism, brought, fine_tuning, *(_example(k) for k in kind_names())]


def _string_capable(annotation: Any) -> bool:
    if annotation is str or annotation is Any:
        return True
    return any(_string_capable(a) for a in typing.get_args(annotation))


def _schema_models() -> list[type[BaseModel]]:
    """Every table model: the file's and every registered kind's, nested ones included."""
    seen: list[type[BaseModel]] = []

    def visit(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation in seen:
                return
            seen.append(annotation)
            for field in annotation.model_fields.values():
                visit(field.annotation)
        for arg in typing.get_args(annotation):
            visit(arg)

    visit(AuditConfig)
    for kind in kind_names():
        visit(get_kind(kind).section)
    return seen


def _string_fields() -> set[tuple[type[BaseModel], str]]:
    return {
        (model, name)
        for model in _schema_models()
        if model is not AuditConfig
        for name, field in model.model_fields.items()
        if _string_capable(field.annotation)
    }


def _tables(config: AuditConfig) -> Iterator[tuple[tuple[str, ...], BaseModel]]:
    """Every table of a parsed file with its key path (defaults included)."""

    def walk(path: tuple[str, ...], table: BaseModel) -> Iterator[tuple[tuple[str, ...], Any]]:
        yield path, table
        for name in type(table).model_fields:
            value = getattr(table, name)
            if isinstance(value, BaseModel):
                yield from walk((*path, name), value)

    for name in AuditConfig.model_fields:
        if name != "sections" and isinstance(getattr(config, name), BaseModel):
            yield from walk((name,), getattr(config, name))
    for name, table in config.sections.items():
        yield from walk((name,), table)


def _with(base: dict[str, Any], path: tuple[str, ...], field: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(base)
    table = data
    for part in path:
        table = table.setdefault(part, {})
    table[field] = value
    return data


def _shaped(annotation: Any, value: str) -> Any:
    """``value`` as the field holds strings: itself, in a list, or in a table."""
    origins = {typing.get_origin(a) for a in (annotation, *typing.get_args(annotation))}
    if dict in origins:
        return {"key": value}
    if list in origins or tuple in origins:
        return [value]
    return value


def _parsed(data: dict[str, Any], folder: Path) -> AuditConfig | None:
    try:
        config = parse_config(data, source="probe")
    except ConfigError:
        return None  # the schema itself refuses the value: it never reaches any code
    config._base_dir = folder
    return config


def _probes(
    folder: Path, values: tuple[str, ...] = HOSTILE, bases: list[dict[str, Any]] | None = None
) -> Iterator[tuple[type[BaseModel], str, str, AuditConfig | None]]:
    """(model, field, key, config) for every string field of every table a base file
    has, given each of ``values`` (in the shape the field takes); config is ``None`` when
    the schema itself refuses the value (it then never reaches any code)."""
    for base in _bases() if bases is None else bases:
        parsed = _parsed(base, folder)
        assert parsed is not None, base
        for path, table in _tables(parsed):
            model = type(table)
            for name, field in model.model_fields.items():
                if not _string_capable(field.annotation):
                    continue
                for value in values:
                    data = _with(base, path, name, _shaped(field.annotation, value))
                    yield model, name, ".".join((*path, name)), _parsed(data, folder)


def _names_code_found(
    folder: Path, bases: list[dict[str, Any]] | None = None
) -> tuple[set[tuple[type[BaseModel], str]], set[Any]]:
    """Fields whose value the normal path imports (probe discovery), and fields reached."""
    found, reached = set(), set()
    for model, name, _, config in _probes(folder, ("probe:run",), bases):
        reached.add((model, name))
        if config is None:
            continue
        before = _imported(folder)
        _forget()
        # data, model or value problems are fine: what matters is what it imported
        with contextlib.suppress(Exception):
            check_runnable(config)
        fresh = [m for m in _imported(folder)[len(before) :] if not m.startswith("base")]
        if fresh:
            found.add((model, name))
    return found, reached


def test_every_field_that_names_code_is_marked_and_every_string_field_is_reached(
    folder: Path,
) -> None:
    found, reached = _names_code_found(folder)
    unmarked = sorted(
        f"{model.__name__}.{name}" for model, name in found if name not in code_fields(model)
    )
    assert unmarked == [], f"fields that import code but bypass the resolver: {unmarked}"
    missed = sorted(f"{m.__name__}.{n}" for m, n in _string_fields() - reached)
    assert missed == [], f"string fields no base file reached: {missed}"
    # the discovery is real: the normal path imports code for these keys
    names = {f"{m.__name__}.{n}" for m, n in found}
    assert {"MechanismSection.name", "MechanismSection.score", "TargetSection.factory"} <= names


def test_safe_mode_refuses_every_hostile_code_value_and_imports_nothing(folder: Path) -> None:
    refused, ran = 0, set()
    for model, name, key, config in _probes(folder):
        if config is None:
            continue
        marker = code_fields(model).get(name)
        keys = {where.rsplit(".", 1)[0] if where[-1].isdigit() else where for where, _ in
                unsafe_references(config)}  # fmt: skip
        if marker is not None:
            value = getattr(_table_at(config, key), name)
            values = value if isinstance(value, list) else [value]
            if any(isinstance(v, str) and marker.is_code(v) for v in values):
                assert key in keys, f"{key} = {value!r} is not refused in safe mode"
                refused += 1
        with safe_mode():
            try:
                check_safe(config)
            except UnresolvedCode:
                raise
            except ConfigError:
                continue
            if (config.audit.kinds[0], key) in ran:
                continue  # one accepted value per key runs the checks (they are slow)
            ran.add((config.audit.kinds[0], key))
            try:
                check_runnable(config)
                context = run_context(config)
                for kind in config.audit.kinds:
                    get_kind(kind).plan(config.section(kind), context)
            except UnresolvedCode as exc:
                pytest.fail(f"{key}: refused only at import, not from the parsed file: {exc}")
            except Exception:
                pass  # a data or value problem, after the decision
        assert _imported(folder) == [], key
    assert refused > 40  # every marked key, every hostile value


def _table_at(config: AuditConfig, key: str) -> BaseModel:
    parts = key.split(".")[:-1]
    table: Any = config.sections.get(parts[0]) or getattr(config, parts[0])
    for part in parts[1:]:
        table = getattr(table, part)
    return table


def test_a_field_whose_marker_is_removed_is_caught(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk's test can fail: without the mark on ``score`` its import is discovered."""
    original = config_module.code_fields

    def without_score(model: type[BaseModel]) -> dict[str, Any]:
        return {k: v for k, v in original(model).items() if k != "score"}

    monkeypatch.setattr(config_module, "code_fields", without_score)
    found, _ = _names_code_found(folder, _bases()[:1])
    unmarked = {f"{m.__name__}.{n}" for m, n in found if n not in config_module.code_fields(m)}
    assert unmarked == {"MechanismSection.score"}


@pytest.mark.parametrize("value", ["probe:run", "prøbe:run", "probe:run ", "a:b:c", "p:-x"])
def test_load_plugin_refuses_in_safe_mode_and_names_must_be_ascii(folder: Path, value: str) -> None:
    with safe_mode(), pytest.raises(ConfigError):
        load_plugin(value, base_dir=folder)
    assert _imported(folder) == []
    if value != "probe:run":
        with pytest.raises(ConfigError, match=r"\(ASCII identifiers\)"):
            split_spec(value, what="mechanism")


def test_the_environment_turns_safe_mode_on_for_loading(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    audit = folder / "a.toml"
    audit.write_text(
        '[audit]\nname = "a"\nkinds = ["mechanism"]\n[mechanism]\nname = "synthetic:run"\n'
        "data = [[0.0], [1.0]]\n[mechanism.claim]\nepsilon = 1.0\n"
    )
    monkeypatch.setenv("DPAUDIT_NO_PLUGINS", "1")
    with pytest.raises(
        ConfigError, match=re.escape("'mechanism.name' = 'synthetic:run' is a plug-in")
    ):
        load_config(audit)
    monkeypatch.setenv("DPAUDIT_NO_PLUGINS", "yes")
    with pytest.raises(
        ConfigError, match=re.escape("DPAUDIT_NO_PLUGINS must be 0, 1 or unset. Got 'yes' instead.")
    ):
        load_config(audit)
    monkeypatch.setenv("DPAUDIT_NO_PLUGINS", "0")
    assert load_config(audit).section("mechanism").name == "synthetic:run"
    assert _imported(folder) == []
