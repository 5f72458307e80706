"""A ``[dpsgd]`` audit from Python, without an audit file (tests, notebooks)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from dpaudit.dpsgd.kind import KIND
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.errors import ConfigError
from dpaudit.kinds.base import RunContext, VerdictBudget, check_spending
from dpaudit.sections import format_validation_error
from dpaudit.store import RunStore
from dpaudit.store.executors import run_units

if TYPE_CHECKING:
    from dpaudit.results import Check, Comparison, TestSummary
    from dpaudit.store.executors import UnitStats

__all__ = ["DpsgdOutcome", "run_dpsgd_from_section"]


@dataclass(frozen=True)
class DpsgdOutcome:
    """What :func:`run_dpsgd_from_section` found."""

    tests: tuple[TestSummary, ...]
    comparisons: tuple[Comparison, ...]
    warnings: tuple[str, ...]
    units: UnitStats
    checks: tuple[Check, ...] = ()


def run_dpsgd_from_section(
    section: DpsgdSection | dict[str, Any],
    *,
    seed: int,
    confidence_level: float = 0.95,
    delta: float = 1e-5,
    run_dir: str | Path,
    workers: int = 1,
    base_dir: str | Path = ".",
    progress: Any = None,
) -> DpsgdOutcome:
    """Run a ``[dpsgd]`` audit without the rest of an audit file (tests, notebooks).

    The same steps as :func:`dpaudit.audit.run_audit` for one kind: plan, run the missing
    units into ``run_dir``, count the in-verdict comparisons, summarise with one budget.

    Args:
        section: the ``[dpsgd]`` table (validated here if a dict).
        seed: the audit seed.
        confidence_level: c; every in-verdict bound is at 1 − (1 − c)/k.
        delta: δ of the ε comparisons.
        run_dir: where the units are stored (a run resumes from them).
        workers: worker processes.
        base_dir: folder that user plug-ins and csv paths resolve against.
        progress: optional ``(units just finished)`` callback.

    Raises:
        ConfigError: an invalid section (one line per pydantic's first error).
    """
    if not isinstance(section, DpsgdSection):
        try:
            section = DpsgdSection.model_validate(section)
        except ValidationError as exc:
            raise ConfigError(
                format_validation_error(
                    exc, source="run_dpsgd_from_section", model=DpsgdSection, prefix=("dpsgd",)
                )
            ) from None
    context = RunContext(
        seed=int(seed),
        confidence_level=confidence_level,
        delta=float(delta),
        base_dir=Path(base_dir).resolve(),
    )
    plan = KIND.plan(section, context)
    store = RunStore(Path(run_dir), plan.key(KIND.name))
    stats = run_units(plan.fn, plan.spec, plan.units, store, workers=workers, progress=progress)
    outputs = {u: store.load(u) for u in plan.units}
    budget = VerdictBudget(confidence_level, KIND.comparisons(section, context, outputs))
    summary = KIND.summarise(section, context, outputs, level=budget.level)
    check_spending(KIND.name, budget.comparisons, summary, budget.level)
    return DpsgdOutcome(summary.tests, summary.comparisons, summary.warnings, stats, summary.checks)
