"""Canary audits of DP-SGD and other trainers (multi-run and one-run): the ``dpsgd`` audit
kind, its canaries (:mod:`~dpaudit.dpsgd.canaries`) and a Python entry point
(:func:`run_dpsgd_from_section`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "DpsgdOutcome": "dpaudit.dpsgd.kind",
    "run_dpsgd_from_section": "dpaudit.dpsgd.kind",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from dpaudit.dpsgd.kind import (
        DpsgdOutcome,
        run_dpsgd_from_section,
    )
