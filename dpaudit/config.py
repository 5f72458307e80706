"""The audit file: its schema (pydantic, unknown keys are errors) and loading from TOML.

An audit file is a TOML document with an ``[audit]`` table naming the audit and its kinds,
one table per kind (``[mechanism]``, ``[dpsgd]``, ...: each kind's own schema, from the
registry in :mod:`dpaudit.kinds`), and the shared tables of :mod:`dpaudit.sections`.
Paths resolve relative to the file. Any mistake is a single
:class:`~dpaudit.errors.ConfigError` line naming the key path, the value and what is allowed.

Nothing here imports torch: validating a file is fast.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, Field, PrivateAttr, ValidationError

from dpaudit.errors import ConfigError, not_a_regular_file
from dpaudit.kinds import get_kind, kind_names
from dpaudit.kinds.base import RunContext, SequentialSettings, SharedTables
from dpaudit.plugins import NamesCode, safe_mode, safe_mode_active
from dpaudit.sections import (
    TARGET_FORMATS,
    AuditSection,
    DataSection,
    ExecutionSection,
    GateSection,
    ModelSection,
    ReportSection,
    Table,
    TargetSection,
    TrainingSection,
    format_validation_error,
    target_format_from_suffix,
)

__all__ = [
    "TARGET_FORMATS",
    "AuditConfig",
    "Validation",
    "check_runnable",
    "check_safe",
    "code_references",
    "format_validation_error",
    "load_config",
    "parse_config",
    "run_context",
    "target_format_from_suffix",
    "unsafe_references",
    "validate_file",
]


class AuditConfig(Table):
    """The whole audit file: the shared tables, and each kind's table in ``sections``.

    ``sections`` maps a kind's name to its validated table (``config.section("dpsgd")``);
    a kind's table sits at the top level of the TOML file (``[dpsgd]``) and of
    :meth:`to_dict`.
    """

    audit: AuditSection
    data: DataSection | None = None
    model: ModelSection = ModelSection()
    training: TrainingSection = TrainingSection()
    target: TargetSection = TargetSection()
    gate: GateSection = GateSection()
    execution: ExecutionSection = ExecutionSection()
    report: ReportSection = ReportSection()
    sections: dict[str, Any] = Field(default_factory=dict)

    # Where the file came from (not part of the schema, nor of the config hash).
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source: Path | None = PrivateAttr(default=None)
    _text: str = PrivateAttr(default="")

    @property
    def base_dir(self) -> Path:
        """The folder relative paths resolve against (the audit file's folder)."""
        return self._base_dir

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def text(self) -> str:
        """The audit file as written (shown in the report)."""
        return self._text

    def resolve(self, path: str | Path) -> Path:
        """Resolve ``path`` relative to the audit file's folder."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self._base_dir / p).resolve()

    def section(self, kind: str) -> Any:
        """The validated table of ``kind`` (``None`` when the file has none)."""
        get_kind(kind)
        return self.sections.get(kind)

    def shared(self) -> SharedTables:
        """The shared tables, as kinds receive them."""
        return SharedTables(
            data=self.data, model=self.model, training=self.training, target=self.target
        )

    def with_section(self, kind: str, **changes: Any) -> AuditConfig:
        """A copy whose ``kind`` table has ``changes`` (validated again)."""
        table = self.section(kind)
        updated = type(table).model_validate({**table.model_dump(), **changes})
        copy = self.model_copy(update={"sections": {**self.sections, kind: updated}})
        copy._base_dir, copy._source, copy._text = self._base_dir, self._source, self._text
        return copy

    def only_kind(self, kind: str) -> AuditConfig:
        """A copy that runs ``kind`` alone (the other kinds' tables dropped)."""
        audit = self.audit.model_copy(update={"kinds": [kind]})
        copy = self.model_copy(update={"audit": audit, "sections": {kind: self.section(kind)}})
        copy._base_dir, copy._source, copy._text = self._base_dir, self._source, self._text
        return copy

    def to_dict(self) -> dict[str, Any]:
        """The configuration as the file's tables (kinds' tables at the top level)."""
        out = self.model_dump(mode="json", exclude={"sections"})
        for name, table in self.sections.items():
            out[name] = table.model_dump(mode="json")
        return out

    def canonical_json(self) -> str:
        """The configuration as sorted JSON: what the config hash is taken of."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def config_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]


def run_context(config: AuditConfig) -> RunContext:
    """What every kind of ``config`` is told about the audit beyond its own table."""
    a = config.audit
    return RunContext(
        seed=a.seed,
        confidence_level=a.confidence_level,
        delta=a.delta,
        base_dir=config.base_dir,
        unit_size=config.execution.unit_size,
        shared=config.shared(),
        sequential=SequentialSettings(
            round_trials=a.round_trials,
            certify_tightness=a.certify_tightness,
            certify_epsilon=a.certify_epsilon,
        )
        if a.stopping == "sequential"
        else None,
        device=config.execution.device,
    )


def size_notes(config: AuditConfig) -> list[str]:
    """Every kind's notes on how large its work is (:meth:`AuditKind.size_notes`)."""
    context = run_context(config)
    return [
        line
        for name in config.audit.kinds
        for line in get_kind(name).size_notes(config.section(name), context)
    ]


def check_runnable(config: AuditConfig) -> None:
    """Everything each kind can check before work starts (plug-ins import, files load).

    Raises:
        DpauditError: With one line naming the problem.
    """
    context = run_context(config)
    for name in config.audit.kinds:
        get_kind(name).check_runnable(config.section(name), context)


#: Keys whose value is a path dpaudit reads or writes.
_PATH_KEYS = ("path", "scores", "output_dir", "preprocess")


def code_references(config: AuditConfig) -> list[tuple[str, str, NamesCode]]:
    """Every value of the file at a key that can name code, with its dotted key.

    The keys are not listed by hand: every field of every table (the shared tables and
    each kind's, nested tables included) whose schema carries :class:`NamesCode` is one,
    so a key added to a schema is decided by the same rule.
    """
    tables: list[tuple[str, BaseModel]] = [
        (name, getattr(config, name)) for name in AuditConfig.model_fields if name != "sections"
    ]
    tables += list(config.sections.items())
    found: list[tuple[str, str, NamesCode]] = []
    for where, table in tables:
        if isinstance(table, BaseModel):
            found += _walk_code(table, where)
    return found


def code_fields(model: type[BaseModel]) -> dict[str, NamesCode]:
    """The fields of ``model`` (not nested) whose schema marks them as naming code."""
    out = {}
    for name, field in model.model_fields.items():
        marker = _names_code(field.annotation, field.metadata)
        if marker is not None:
            out[name] = marker
    return out


def _names_code(annotation: Any, metadata: list[Any]) -> NamesCode | None:
    """The :class:`NamesCode` in a field's metadata or anywhere inside its type."""
    for item in metadata:
        if isinstance(item, NamesCode):
            return item
    for item in getattr(annotation, "__metadata__", ()) or ():
        if isinstance(item, NamesCode):
            return item
    for arg in get_args(annotation):
        found = _names_code(arg, [])
        if found is not None:
            return found
    return None


def _walk_code(table: BaseModel, where: str) -> list[tuple[str, str, NamesCode]]:
    found: list[tuple[str, str, NamesCode]] = []
    marked = code_fields(type(table))
    for name in type(table).model_fields:
        value = getattr(table, name)
        key = f"{where}.{name}"
        if name in marked:
            found += [(k, v, marked[name]) for k, v in _strings(value, key)]
        elif isinstance(value, BaseModel):
            found += _walk_code(value, key)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                if isinstance(item, BaseModel):
                    found += _walk_code(item, f"{key}.{i}")
    return found


def unsafe_references(config: AuditConfig) -> list[tuple[str, str]]:
    """The ``(key, value)`` pairs safe mode refuses as code: every value at a key that can
    name code (:func:`code_references`) that is not one of the key's built-in names (nor,
    where the key takes one, a data file path such as ``preprocess``'s ``.skops``)."""
    return [(w, v) for w, v, marker in code_references(config) if marker.is_code(v)]


def check_safe(config: AuditConfig) -> None:
    """Refuse what an audit file from an untrusted source could use to run code or reach
    files elsewhere, WITHOUT importing or opening any of it (safe mode: ``--no-plugins``,
    ``DPAUDIT_NO_PLUGINS=1``).

    The rule (``docs/safe-mode.md``): every key whose schema says it can name code
    (:func:`code_references`) must hold one of that key's built-in names (or, for
    ``preprocess``, a ``.skops`` file); any other value is refused, whatever it looks
    like (a module named like a data source, a non-ASCII or malformed name, a dpaudit
    module). Also refused: a model file that may be unpickled (``allow_pickle``), a path
    (data, model, scores, index file, output folder) outside the audit file's folder once
    symbolic links are resolved, and a remote Dask scheduler.

    Raises:
        ConfigError: one line naming the key and the value refused.
    """
    for where, value in unsafe_references(config):
        raise ConfigError(f"'{where}' = {value!r} is a plug-in: --no-plugins imports no user code")
    folder = config.base_dir.resolve()
    for where, value in _strings(config.to_dict()):
        key = where.rsplit(".", 1)[-1]
        path: str | None = None
        source, _, rest = value.partition(":")
        if key == "dataset" and source in ("csv", "parquet"):
            path = rest
        elif key in _PATH_KEYS or (key == "membership" and Path(value).suffix):
            path = value
        if path is not None:
            resolved = (folder / Path(path).expanduser()).resolve()
            if not resolved.is_relative_to(folder):
                raise ConfigError(
                    f"'{where}' = {value!r} is outside the audit file's folder {str(folder)!r}: "
                    "--no-plugins reads and writes nothing elsewhere"
                )
    if config.target.allow_pickle:
        raise ConfigError("'target.allow_pickle' = true unpickles a model (runs its code)")
    if config.execution.address is not None:
        raise ConfigError("'execution.address' names a remote scheduler: --no-plugins runs locally")


def _strings(obj: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every string in a nested configuration, with its dotted key."""
    if isinstance(obj, str):
        yield where, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _strings(v, f"{where}.{k}" if where else str(k))
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from _strings(v, f"{where}.{i}")


def parse_config(data: dict[str, Any], *, source: str = "audit file") -> AuditConfig:
    """Validate a dict (as parsed from TOML) into an :class:`AuditConfig`.

    The shared tables first, then each kind's table with its own schema, then each listed
    kind's cross-table rules (:meth:`dpaudit.kinds.base.AuditKind.check`).
    """
    data = dict(data)
    if "sections" in data:
        raise ConfigError(f"{source}: unknown key 'sections'; allowed keys: {_top_keys()}")
    tables = {name: data.pop(name) for name in kind_names() if name in data}
    try:
        config = AuditConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            format_validation_error(exc, source=source, model=AuditConfig, top_keys=_top_keys())
        ) from None
    sections = {}
    for name, table in tables.items():
        schema = get_kind(name).section
        try:
            sections[name] = schema.model_validate(table)
        except ValidationError as exc:
            raise ConfigError(
                format_validation_error(exc, source=source, model=schema, prefix=(name,))
            ) from None
    for i, name in enumerate(config.audit.kinds):
        if name not in kind_names():
            raise ConfigError(
                f"{source}: 'audit.kinds.{i}': unknown audit kind {name!r}; valid kinds: "
                f"{', '.join(kind_names())}"
            )
        if name not in sections:
            raise ConfigError(
                f"{source}: audit kind {name!r} is listed in [audit] kinds but [{name}] is missing"
            )
        try:
            get_kind(name).check(sections[name], config.shared())
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    return config.model_copy(update={"sections": sections})


def _top_keys() -> str:
    return ", ".join([k for k in AuditConfig.model_fields if k != "sections"] + list(kind_names()))


#: The largest audit file read (an audit file is a few kilobytes of TOML).
MAX_AUDIT_FILE_BYTES = 1 << 20


def load_config(path: str | Path) -> AuditConfig:
    """Read and validate an audit file.

    Args:
        path: A TOML audit file (UTF-8; a byte-order mark is accepted).

    Returns:
        The validated configuration; ``.base_dir`` is the folder its relative paths
        resolve against and ``.text`` the file as written.

    Raises:
        ConfigError: The file is missing, is not a regular file (a folder, a named pipe,
            a device, a symbolic-link loop), is too large, is not TOML, or does not fit
            the schema.
    """
    p = Path(path)
    _check_regular_file(p)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the audit file: {exc.strerror}") from None
    return load_config_text(text, base_dir=p.resolve().parent, source=str(p), path=p.resolve())


def _check_regular_file(p: Path) -> None:
    """One line for every way a path can fail to be an audit file, before reading it."""
    problem = not_a_regular_file(p)
    if problem == "does not exist":
        raise ConfigError(f"audit file not found: {str(p)!r}")
    if problem == "is a folder":
        raise ConfigError(f"{str(p)!r} is a folder; give the audit file (a .toml file) inside it")
    if problem is not None:
        raise ConfigError(f"{str(p)!r} {problem.replace('not a file', 'not an audit file')}")
    size = p.stat().st_size
    if size > MAX_AUDIT_FILE_BYTES:
        raise ConfigError(
            f"{str(p)!r} is {size} bytes; an audit file is at most "
            f"{MAX_AUDIT_FILE_BYTES} bytes (data belongs in a data file it names)"
        )


def load_config_text(
    text: str, *, base_dir: Path, source: str, path: Path | None = None
) -> AuditConfig:
    """Validate an audit file given as text (e.g. the copy a ``results.json`` keeps).

    Args:
        text: the TOML text; a leading byte-order mark is ignored.
        base_dir: the folder relative paths and plug-ins resolve against.
        source: what messages call the file.
        path: the audit file, when there is one.
    """
    try:
        data = tomllib.loads(text.removeprefix("\ufeff"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    config = parse_config(data, source=source)
    config._base_dir = Path(base_dir)
    config._source = path
    config._text = text
    if safe_mode_active():
        check_safe(config)
    return config


@dataclass(frozen=True)
class Validation:
    """What ``dpaudit validate FILE`` found in a valid file (an invalid one raises).

    Attributes:
        file: the audit file; kinds: its kinds; config_hash: its configuration's hash.
        safe: whether it was checked in safe mode (no user code imported or opened).
        size_notes: each kind's notes on how large its work is.
    """

    file: Path
    kinds: tuple[str, ...]
    config_hash: str
    safe: bool
    size_notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.file),
            "kinds": list(self.kinds),
            "config_hash": self.config_hash,
            "safe": self.safe,
            "size_notes": list(self.size_notes),
        }


def validate_file(file: str | Path, *, safe: bool = False) -> Validation:
    """Check an audit file as ``dpaudit run`` does before any work, without running it:
    it loads, and (outside safe mode) its plug-ins import and its data and models load.

    Args:
        file: the audit file.
        safe: safe mode (``DPAUDIT_NO_PLUGINS=1`` turns it on too): nothing the file names
            is imported or opened, and what would be is refused.

    Raises:
        DpauditError: the file is not a valid, runnable audit.
    """
    safe = safe or safe_mode_active()
    with safe_mode(safe):
        config = load_config(file)
        if not safe:
            check_runnable(config)
    return Validation(
        Path(file),
        tuple(config.audit.kinds),
        config.config_hash(),
        safe,
        tuple(size_notes(config)),
    )
