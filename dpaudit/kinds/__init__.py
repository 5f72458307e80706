"""The registry of audit kinds.

A kind is one module holding its audit-file table, its work units and its summary (the
contract is :class:`dpaudit.kinds.base.AuditKind`), plus one line below. The audit-file
schema, ``dpaudit init --kind`` and every "valid kinds" message read this registry.
"""

from __future__ import annotations

from typing import Any

from dpaudit.errors import ConfigError
from dpaudit.kinds import attribute, dpsgd, local_central, mechanism, membership, reconstruction
from dpaudit.kinds.base import AuditKind

_REGISTRY: dict[str, AuditKind[Any]] = {}


def register_kind(kind: AuditKind[Any]) -> AuditKind[Any]:
    """Add ``kind`` under ``kind.name`` (a name can be registered once)."""
    if kind.name in _REGISTRY:
        raise ConfigError(f"an audit kind named {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    return kind


def get_kind(name: str) -> AuditKind[Any]:
    """The registered kind ``name``; an unknown name lists the valid ones."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown audit kind {name!r}; valid kinds: {', '.join(kind_names())}"
        ) from None


def kind_names() -> tuple[str, ...]:
    """The registered kinds, in registration order."""
    return tuple(_REGISTRY)


register_kind(mechanism.KIND)
register_kind(membership.KIND)
register_kind(attribute.KIND)
register_kind(dpsgd.KIND)
register_kind(reconstruction.KIND)
register_kind(local_central.KIND)

__all__ = ["AuditKind", "get_kind", "kind_names", "register_kind"]
