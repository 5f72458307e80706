"""The contract every audit kind fulfils, and the verdict's one confidence budget.

An audit kind (``mechanism``, ``membership``, ...) is an :class:`AuditKind` registered in
:mod:`dpaudit.kinds`. The audit (:func:`dpaudit.audit.run_audit`) drives every kind through
the same four steps, in the manner of dp-accounting's ``compose()``, which asks "can I
handle this?" before it does anything:

1. ``check(section, shared)`` when the file loads: cross-table rules (the tables a kind
   needs are present, options fit together). Raises ``ValueError`` with one line.
2. ``plan(section, context)``: the kind's work units, each a pure function of a
   picklable spec and the unit's name, and the data that names them in the store (the
   unit key covers exactly what changes a unit's outputs: never ``[gate]``,
   ``[report]``, ``[execution]`` apart from ``unit_size``, the confidence level or δ).
3. ``comparisons(section, context, outputs)``: how many lower-vs-upper comparisons the kind
   will put into the verdict, once its units are stored and before any bound is computed,
   so that the audit allocates ONE failure budget 1 − c over every comparison of every
   kind (:class:`VerdictBudget`). ``planned_comparisons(section, context)`` counts them
   from the file alone, before any unit exists (``dpaudit plan FILE``): the exact count
   when ``comparisons`` reads no unit, else the most the verdict can hold.
4. ``summarise(section, context, outputs, level=...)``: stored raw outputs (scores, counts,
   records) → tests and comparisons; every in-verdict bound at ``level``.

A kind receives its own validated table and a :class:`RunContext`, never the whole
audit file.
"""

from __future__ import annotations

import hashlib
import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from dpaudit.errors import ConfigError, DpauditError, KindContractError
from dpaudit.plugins import file_digest
from dpaudit.sections import (
    DataSection,
    ModelSection,
    Table,
    TargetSection,
    TrainingSection,
)

if TYPE_CHECKING:  # results imports scipy: kinds load without it until they summarise
    from dpaudit.results import Check, Comparison, TestSummary

#: A work unit: ``fn(spec, unit name) -> arrays``; top-level, so processes can pickle it.
UnitFn = Callable[[Any, str], dict[str, np.ndarray]]
#: Stored outputs of a kind: unit name → that unit's arrays.
Outputs = Mapping[str, Mapping[str, np.ndarray]]

S = TypeVar("S", bound=Table)


@dataclass(frozen=True)
class SharedTables:
    """The shared tables a kind may read (``[data]``, ``[model]``, ``[training]``, ``[target]``)."""

    data: DataSection | None = None
    model: ModelSection = field(default_factory=ModelSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    target: TargetSection = field(default_factory=TargetSection)


@dataclass(frozen=True)
class SequentialSettings:
    """``[audit] stopping = "sequential"``: rounds of ``round_trials`` per arm, and when
    to stop for a certified target (:mod:`dpaudit.sequential`)."""

    round_trials: int = 100
    certify_tightness: float | None = None
    certify_epsilon: float | None = None


@dataclass(frozen=True)
class RunContext:
    """What a kind knows of the audit beyond its own table.

    Attributes:
        seed: ``[audit] seed``.
        confidence_level: c of the verdict (and of every descriptive interval).
        delta: δ at which ε is measured and accounted.
        base_dir: the audit file's folder: relative paths and user plug-ins resolve here.
        unit_size: ``[execution] unit_size``, how many trials a unit holds (it cuts the
            work, so it is part of what a unit is).
        shared: the shared tables.
        sequential: the sequential design, or None for a fixed one.
        device: ``[execution] device``, the torch device units run on (where a unit
            runs, not what it computes: no unit key holds it).
    """

    seed: int
    confidence_level: float
    delta: float
    base_dir: Path
    unit_size: int = 25_000
    shared: SharedTables = field(default_factory=SharedTables)
    sequential: SequentialSettings | None = None
    device: str = "cpu"

    def resolve(self, path: str | Path) -> Path:
        """``path`` relative to the audit file's folder."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self.base_dir / p).resolve()


@dataclass(frozen=True)
class UnitPlan:
    """A kind's work: the unit function, its input, the unit names and their store key.

    Attributes:
        fn: ``fn(spec, unit) -> dict of arrays`` (a pure function).
        spec: the picklable input every unit of this kind receives.
        units: unit names, in the order to run them.
        key_data: JSON-able data covering everything that changes the units' outputs;
            its hash names the folder the units are stored in.
        description: what the progress bar says while these units run.
    """

    fn: UnitFn
    spec: Any
    units: tuple[str, ...]
    key_data: Mapping[str, Any]
    description: str

    def key(self, kind: str) -> str:
        text = json.dumps({"kind": kind, **self.key_data}, sort_keys=True, default=str)
        return f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class KindSummary:
    """What one kind contributes to the result (built whole, never amended).

    ``checks`` are the kind's own in-verdict gate checks (the dpsgd kind's grey-box
    checks): a failed one makes the verdict a violation; the gate lists them under
    ``fail_on_violation`` (:func:`dpaudit.results.gate.evaluate_gate`).
    """

    tests: tuple[TestSummary, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    attribute: tuple[Mapping[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    data_hash: str | None = None
    checks: tuple[Check, ...] = ()

    @property
    def spent(self) -> int:
        """The shares of the verdict's budget this summary used: its in-verdict comparisons
        and its checks that can fail by chance. The audit holds it against what the kind's
        ``comparisons`` announced (:func:`check_spending`)."""
        return sum(c.in_verdict for c in self.comparisons) + sum(
            c.spends_budget for c in self.checks
        )


def check_spending(name: str, announced: int, summary: KindSummary, level: float) -> None:
    """Stop the audit when kind ``name`` spent other than it announced.

    The verdict's level rests on the union bound over exactly the comparisons counted
    before any bound was computed (:class:`VerdictBudget`): a kind whose ``summarise``
    puts more bounds into the verdict than its ``comparisons`` announced, or computes an
    in-verdict bound at another level, would make the stated confidence false without
    any sign of it. This turns that into an error at run time.

    Raises:
        KindContractError: the counts differ, or an in-verdict bound is not at ``level``.
    """
    if summary.spent != announced:
        raise KindContractError(
            f"internal error in audit kind {name!r}: its comparisons() announced {announced} "
            f"in-verdict comparison(s) but its summarise() put {summary.spent} into the "
            "verdict; the verdict's confidence level would not hold, so the audit stops "
            "(a bug in the kind, not in your audit file)."
        )
    for c in summary.comparisons:
        if c.in_verdict and not math.isclose(c.lower.confidence_level, level, abs_tol=1e-12):
            raise KindContractError(
                f"internal error in audit kind {name!r}: the in-verdict bound of "
                f"{c.test!r} ({c.parameter}) is at confidence level "
                f"{c.lower.confidence_level!r}, not the verdict's per-bound level {level!r}; "
                "the audit stops (a bug in the kind, not in your audit file)."
            )


@dataclass(frozen=True)
class VerdictBudget:
    """ONE failure budget 1 − c spread over every comparison that enters the verdict.

    The verdict says "violation" when ANY in-verdict lower bound exceeds its upper bound.
    By the union bound (Bonferroni), if each of the k bounds fails with probability at
    most (1 − c)/k, the probability that any of them fails is at most 1 − c: the verdict
    then holds at confidence c whatever the kinds, however the bounds depend on each
    other. Bounds outside the verdict (heuristic, GDP-assuming, no upper bound) are
    computed at c itself and take no share.

    Attributes:
        confidence_level: c of the verdict.
        comparisons: k, the in-verdict comparisons counted over every kind.
    """

    confidence_level: float
    comparisons: int

    @property
    def level(self) -> float:
        """The confidence level of each in-verdict bound: 1 − (1 − c)/k (c when k = 0)."""
        return 1.0 - (1.0 - self.confidence_level) / max(self.comparisons, 1)


class UnitsNeeded(Exception):
    """A kind read its stored units to count its comparisons, and there are none yet
    (:data:`NO_UNITS`)."""


class NoUnits(Mapping[str, Mapping[str, np.ndarray]]):
    """Stored outputs that do not exist yet: a kind that counts its in-verdict comparisons
    from the file alone never reads them; one that reads them raises :class:`UnitsNeeded`."""

    def __getitem__(self, unit: str) -> Mapping[str, np.ndarray]:
        raise UnitsNeeded

    def __iter__(self) -> Iterator[str]:
        raise UnitsNeeded

    def __len__(self) -> int:
        raise UnitsNeeded

    def __contains__(self, unit: object) -> bool:
        raise UnitsNeeded


#: The outputs a kind's ``comparisons`` receives when it is asked before any unit exists.
NO_UNITS = NoUnits()


class AuditKind(ABC, Generic[S]):
    """One audit kind: its table schema, its units and its summary.

    Class attributes:
        name: the kind's name in ``[audit] kinds`` and its table's name.
        section: the pydantic model of its table (unknown keys are errors).
        description: one line for ``dpaudit init --kind`` and messages.
    """

    name: ClassVar[str]
    section: type[S]
    description: ClassVar[str] = ""

    def check(self, section: S, shared: SharedTables) -> None:
        """Cross-table rules, checked when the file loads; raise ``ValueError`` with one line."""

    def check_runnable(self, section: S, context: RunContext) -> None:
        """What can be checked before work starts (plug-ins import, ...); raise DpauditError."""

    def size_notes(self, section: S, context: RunContext) -> list[str]:
        """Lines that say how large this kind's work is, when it is large (units, disk,
        memory), for ``dpaudit validate`` and ``dpaudit plan``; none by default."""
        return []

    @abstractmethod
    def plan(self, section: S, context: RunContext) -> UnitPlan:
        """The kind's work units."""

    @abstractmethod
    def comparisons(self, section: S, context: RunContext, outputs: Outputs) -> int:
        """How many comparisons this kind puts into the verdict (given its stored units)."""

    def planned_comparisons(self, section: S, context: RunContext) -> int:
        """The most comparisons (and checks that spend a share) this kind's verdict can
        hold, counted from its table alone, before any unit exists (``dpaudit plan FILE``).

        A plan made at 1 − (1 − c)/k_max with this k_max is conservative: the run's own
        k is at most k_max, so its per-bound level is at most the planned one, and the
        planned trials are never fewer than it needs. By default it is ``comparisons``
        asked with no units (:data:`NO_UNITS`), exact for a kind that counts from its table;
        a kind that counts from what its units stored (what a run recorded) overrides it
        with the maximum of the rules its ``comparisons`` applies.

        Raises:
            UnitsNeeded: the kind counts from its stored units and does not override this.
        """
        return self.comparisons(section, context, NO_UNITS)

    @abstractmethod
    def summarise(
        self, section: S, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        """Turn stored unit outputs into tests and comparisons (in-verdict ones at ``level``)."""

    def is_sequential(self, section: S, context: RunContext) -> bool:
        """Whether this kind's units are rounds of a sequential test (run one at a time,
        :meth:`stop_reason` asked after each); False by default."""
        return False

    def stop_reason(
        self, section: S, context: RunContext, outputs: Outputs, *, level: float
    ) -> str:
        """A sequential kind's decision after the rounds stored so far (their unit names
        in ``outputs``, in order): ``"continue"``, or why it stops (``"violation"``,
        ``"target"``, ``"cap"``). A deterministic function of the stored rounds, so a
        resumed run decides as the killed one would have. Only asked when
        :meth:`is_sequential` is True."""
        raise KindContractError(f"audit kind {self.name!r} has no sequential design")

    def round_monitor(
        self, section: S, context: RunContext, *, level: float
    ) -> RoundMonitor | None:
        """An object that takes the decision round by round, keeping its state between
        rounds (``add(unit, stored) -> decision``), so that a round costs what its own
        trials cost; it must decide as :meth:`stop_reason` would after the same rounds.
        None (the default): the audit asks :meth:`stop_reason` after each round."""
        return None


class RoundMonitor(Protocol):
    """What :meth:`AuditKind.round_monitor` returns: fed each stored round in order."""

    def add(self, unit: str, stored: Mapping[str, Any], /) -> str: ...


def unit_index(unit: str) -> int:
    """The trailing number of a unit name such as ``mechanism-00003``."""
    try:
        return int(unit.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        raise ConfigError(f"not a numbered unit name: {unit!r}") from None


def ordered_rounds(units: Iterable[str], *, what: str = "a sequential audit") -> list[str]:
    """A sequential design's stored round units in order, checked to be 0, 1, 2, ...

    Raises:
        DpauditError: a round is missing (the rounds are read in order from round 0).
    """
    names = sorted(units, key=unit_index)
    if [unit_index(u) for u in names] != list(range(len(names))):
        raise DpauditError(
            f"{what} reads its rounds in order from round 0; the stored rounds are {names}"
        )
    return names


def claim_left_out(dump: Mapping[str, Any], *path: str) -> dict[str, Any]:
    """A unit key's data with the claim at ``path`` (keys into nested tables) read as absent.

    A claim changes no unit's arrays, so it is in no unit key: editing it reuses every
    stored unit. It is set to ``None`` rather than dropped, so that a file stating no
    claim keeps the key it always had and its run directory resumes.
    """
    out = dict(dump)
    *tables, name = path
    inner = out
    for table in tables:
        value = inner.get(table)
        if not isinstance(value, Mapping):
            return out  # the table holding the claim is absent: nothing to leave out
        inner[table] = dict(value)
        inner = inner[table]
    if name in inner:
        inner[name] = None
    return out


def stream_seed(seed: int, *purpose: int) -> int:
    """A 32-bit seed for one purpose of one kind, derived from the audit seed."""
    return int(np.random.SeedSequence([seed, *purpose]).generate_state(1)[0])


def dataset_digest(dataset: str, base_dir: Path) -> str | None:
    """The digest of a ``csv:``/``parquet:`` dataset's file; built-in datasets have none
    (they come with an installed package, whose version provenance records)."""
    source, _, rest = dataset.partition(":")
    if source not in ("csv", "parquet") or not rest:
        return None
    path = Path(rest).expanduser()
    return file_digest(path if path.is_absolute() else base_dir / path)
