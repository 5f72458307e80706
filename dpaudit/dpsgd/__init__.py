"""Canary audits of DP-SGD and other trainers (multi-run and one-run): the ``dpsgd`` audit
kind and a Python entry point (:func:`run_dpsgd_from_section`).

The ``[dpsgd]`` tables (:mod:`~dpaudit.dpsgd.schema`), the data, model and canary set-up
(:mod:`~dpaudit.dpsgd.setup`), the canaries (:mod:`~dpaudit.dpsgd.canaries`), the
many-run units (:mod:`~dpaudit.dpsgd.units`), the one-run audit
(:mod:`~dpaudit.dpsgd.one_run`), the summary of the stored units
(:mod:`~dpaudit.dpsgd.summary`), the kind adapter (:mod:`~dpaudit.dpsgd.kind`) and the
Python entry point (:mod:`~dpaudit.dpsgd.api`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "DpsgdOutcome": "dpaudit.dpsgd.api",
    "run_dpsgd_from_section": "dpaudit.dpsgd.api",
}

__all__ = sorted(_EXPORTS)
# Submodules the kind adapter (dpaudit.dpsgd.kind) reaches on first use: importing it,
# as validating an audit file does, loads none of them (nor torch).
_SUBMODULES = ("language", "sequential", "setup", "summary", "units")

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, submodules=_SUBMODULES)

if TYPE_CHECKING:
    from dpaudit.dpsgd.api import (
        DpsgdOutcome,
        run_dpsgd_from_section,
    )
