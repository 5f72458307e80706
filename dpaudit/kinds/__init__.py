"""The registry of audit kinds.

A kind is an :class:`~dpaudit.kinds.base.AuditKind` (the contract, in
:mod:`dpaudit.kinds.base`) registered under its name. The built-in kinds live in their
families' packages and are named here by module path, imported on first use, so that
loading an audit file imports only the kinds it asks for. A user's kind is one module and
one :func:`register_kind` line. The audit-file schema, ``dpaudit init --kind`` and every
"valid kinds" message read this registry.
"""

from __future__ import annotations

import importlib
from typing import Any

from dpaudit.errors import ConfigError
from dpaudit.kinds.base import AuditKind

#: Built-in kind name → the module whose ``KIND`` it is (registration order).
_BUILTINS: dict[str, str] = {
    "mechanism": "dpaudit.mechanisms.kind",
    "membership": "dpaudit.membership.kind",
    "attribute": "dpaudit.membership.attribute",
    "dpsgd": "dpaudit.dpsgd.kind",
    "reconstruction": "dpaudit.reconstruction.kind",
    "local-central": "dpaudit.local_central.kind",
}

_REGISTRY: dict[str, AuditKind[Any]] = {}


def register_kind(kind: AuditKind[Any]) -> AuditKind[Any]:
    """Add ``kind`` under ``kind.name`` (a name can be registered once; the built-in
    names are taken)."""
    if kind.name in _REGISTRY or kind.name in _BUILTINS:
        raise ConfigError(f"an audit kind named {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    return kind


def get_kind(name: str) -> AuditKind[Any]:
    """The registered kind ``name``; an unknown name lists the valid ones."""
    kind = _REGISTRY.get(name)
    if kind is not None:
        return kind
    module = _BUILTINS.get(name)
    if module is None:
        raise ConfigError(f"unknown audit kind {name!r}; valid kinds: {', '.join(kind_names())}")
    builtin: AuditKind[Any] = importlib.import_module(module).KIND
    _REGISTRY[name] = builtin
    return builtin


def kind_names() -> tuple[str, ...]:
    """The built-in kinds, then the user kinds in registration order."""
    return (*_BUILTINS, *(name for name in _REGISTRY if name not in _BUILTINS))


__all__ = ["AuditKind", "get_kind", "kind_names", "register_kind"]
