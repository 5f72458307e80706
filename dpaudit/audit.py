"""Orchestration: from an audit file to an :class:`~dpaudit.results.AuditResult`.

load → each kind's units (:mod:`dpaudit.kinds`) → executor and store → count the
comparisons every kind puts into the verdict → ONE confidence budget → each kind's
summary (every bound computed here, after the store) → gate → result → write.
The math lives in ``bounds``, ``theory``, ``accounting`` and the kinds; nothing here
computes a statistic itself.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import socket
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from dpaudit._version import __version__
from dpaudit.config import (
    AuditConfig,
    check_runnable,
    load_config,
    load_config_text,
    run_context,
)
from dpaudit.errors import DpauditError, KindContractError, check_in_interval
from dpaudit.kinds import get_kind
from dpaudit.kinds.base import (
    NO_UNITS,
    KindSummary,
    UnitPlan,
    UnitsNeeded,
    VerdictBudget,
    check_spending,
)
from dpaudit.planning import TrialPlan, plan_trials
from dpaudit.plugins import stderr_held
from dpaudit.report import render_report
from dpaudit.results import AuditResult
from dpaudit.results.gate import evaluate_gate
from dpaudit.store import (
    LockRefused,
    RunDirectoryBusy,
    RunLock,
    RunStore,
    StoredOutputs,
    UnitRejected,
    atomic_write_json,
    atomic_write_text,
    read_back,
    remove_outputs,
)
from dpaudit.store.executors import UnitStats, run_units

#: Progress callback: (description, total units, units just finished).
Progress = Callable[[str, int, int], None]

LIBRARIES = ("numpy", "scipy", "scikit-learn", "statsmodels", "torch", "dp-accounting", "pydantic")


def _run_plan(
    config: AuditConfig, plan: UnitPlan, store: RunStore, progress: Progress | None
) -> UnitStats:
    """Run a kind's missing units with the ``[execution]`` settings and a progress bar."""
    e = config.execution
    total = len(plan.units)
    tick = (lambda k: progress(plan.description, total, k)) if progress else None
    if progress is not None:
        progress(plan.description, total, 0)  # the clock of the estimate starts now
    return run_units(
        plan.fn,
        plan.spec,
        plan.units,
        store,
        workers=e.workers,
        progress=tick,
        executor=e.executor,
        address=e.address,
        timeout=e.unit_timeout,
    )


def _data_hash(summaries: list[KindSummary]) -> str | None:
    """The data every kind audited: one hash, or a hash of the kinds' distinct hashes."""
    hashes = sorted({s.data_hash for s in summaries if s.data_hash})
    if not hashes:
        return None
    if len(hashes) == 1:
        return hashes[0]
    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()


def check_environment(config: AuditConfig, run_dir: Path) -> None:
    """The environment a run needs, checked before any work: device, scheduler, output.

    Raises:
        DpauditError: One line naming the resource and what to do.
    """
    _check_device(config.execution.device)
    e = config.execution
    if e.executor == "dask":
        _check_dask(e.address)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=run_dir, prefix=".dpaudit-probe-"):
            pass
    except OSError as exc:
        raise DpauditError(
            f"cannot write to the run directory {str(run_dir)!r}: {exc.strerror or exc}; "
            "choose another with --output-dir or [report] output_dir"
        ) from None


def _check_device(device: str) -> None:
    if device == "cpu":
        return
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        raise DpauditError(
            f"[execution] device = {device!r} is not a torch device; use 'cpu' or 'cuda'"
        ) from None
    available = {
        "cpu": True,
        "cuda": torch.cuda.is_available(),
        "mps": torch.backends.mps.is_available(),
    }.get(dev.type, False)
    if not available:
        raise DpauditError(
            f"[execution] device = {device!r}: no such device is available on this machine "
            f"(torch {torch.__version__}); use device = 'cpu'"
        )


def _check_dask(address: str | None) -> None:
    try:
        import distributed  # noqa: F401  (the executor needs it)
    except ImportError:
        raise DpauditError(
            "[execution] executor = 'dask' needs Dask distributed, which is not installed; "
            'install it with: pip install "dpaudit[dask]"'
        ) from None
    if address is None:
        return  # a local cluster on 127.0.0.1 is started for the run
    host, _, port = address.removeprefix("tcp://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=5):
            pass
    except (OSError, ValueError) as exc:
        raise DpauditError(
            f"[execution] address = {address!r}: no Dask scheduler answers there "
            f"({getattr(exc, 'strerror', None) or exc}); start one, or remove 'address' to "
            "run on a local cluster"
        ) from None


def default_run_dir(config: AuditConfig) -> Path:
    """``reports/<audit name>/`` under the current folder, or ``[report] output_dir``."""
    if config.report.output_dir:
        return config.resolve(config.report.output_dir)
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in config.audit.name)
    return Path("reports") / (safe.strip("._") or "audit")


def run_audit(
    path_or_config: str | Path | AuditConfig,
    *,
    output_dir: str | Path | None = None,
    progress: Progress | None = None,
    write: bool = True,
    log: Callable[[str], None] | None = None,
) -> AuditResult:
    """Run an audit end to end.

    Everything that can be checked before work starts is checked first (plug-ins import,
    brought models and data load, the device exists, the Dask scheduler answers, the run
    directory is writable), so a run never fails after hours on something it could have
    seen at second one.

    Args:
        path_or_config: An audit file or an already loaded :class:`AuditConfig`.
        output_dir: The run directory (default: ``reports/<audit name>/``).
        progress: Optional progress callback (description, total, just finished).
        log: Optional callback for one-line notes (e.g. that a run resumes).
        write: Write ``results.json`` (and ``report.html`` when configured) into the run
            directory.

    Returns:
        The :class:`AuditResult`; its ``verdict`` is ``"pass"`` when every gate check passed.

    Raises:
        DpauditError: For any unusable input (bad config, missing data, too few trials, ...).
    """
    config = (
        path_or_config if isinstance(path_or_config, AuditConfig) else load_config(path_or_config)
    )
    run_dir = Path(output_dir) if output_dir is not None else default_run_dir(config)
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    with stderr_held():  # a plug-in's stderr during the checks is quoted in their error
        check_runnable(config)
        check_environment(config, run_dir)
    with _locked(run_dir):
        if write:
            # From here on nothing in the folder may pass for this run's result: the
            # previous results.json and report.html go before any work (a run that then
            # fails leaves no verdict behind), and so do temporary files of killed runs.
            remove_outputs(run_dir)
        stored = _compute_units(config, run_dir, progress, log)
        result = _result(config, stored, run_dir, started, t0)
        if write:
            write_outputs(result, run_dir, html=config.report.html)
    return result


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock; a second run on the same folder exits 2, naming the
    run that holds it (:class:`dpaudit.store.RunLock`)."""
    try:
        with RunLock(run_dir):
            yield
    except RunDirectoryBusy as exc:
        raise DpauditError(
            f"the run directory {str(run_dir)!r} is in use by another dpaudit run "
            f"({exc.holder}); wait for it to finish, or give this run another --output-dir"
        ) from None
    except LockRefused as exc:
        raise DpauditError(str(exc)) from None


def _result(
    config: AuditConfig,
    stored: dict[str, _Stored],
    run_dir: Path,
    started: datetime,
    t0: float,
) -> AuditResult:
    """Steps 2–4 of :func:`run_audit`: the stored units → the budget → bounds → gate.

    BLAS and OpenMP run one thread here: a value fitted from the units (a learned score)
    changes in its last bits with the number of threads that summed it, and ``dpaudit
    verify`` must recompute the same bounds on any machine.
    """
    with threadpool_limits(limits=1):
        budget, counts = _allocate_budget(config, stored)
        summaries = _summarise(config, stored, budget, counts)
    tests = tuple(t for s in summaries for t in s.tests)
    comparisons = tuple(c for s in summaries for c in s.comparisons)
    attribute = tuple(a for s in summaries for a in s.attribute)
    kind_checks = tuple(c for s in summaries for c in s.checks)
    checks = evaluate_gate(
        config.gate,
        comparisons=comparisons,
        tests=tests,
        attribute=attribute,
        kind_checks=kind_checks,
    )
    timings = {name: st.seconds for name, st in stored.items()}
    timings["total"] = time.perf_counter() - t0
    provenance = {
        **_environment(),
        "config_hash": config.config_hash(),
        "data_hash": _data_hash(summaries),
        "seed": config.audit.seed,
        "started": started.isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "timings_seconds": timings,
        "units": {
            name: {
                **st.stats.to_dict(),
                "key": st.key,
                "digests": st.digests,
                **({"rejected": list(st.rejected)} if st.rejected else {}),
            }
            for name, st in stored.items()
        },
        "audit_file": None if config.source is None else str(config.source),
        "verdict_budget": {
            "confidence_level": budget.confidence_level,
            "comparisons": budget.comparisons,
            "per_kind": counts,
            "level_each": budget.level,
        },
        "run_dir": str(run_dir),
    }
    result = AuditResult(
        name=config.audit.name,
        verdict="pass" if all(c.passed for c in checks) else "fail",
        # A failed kind check (a grey-box test of what a DP-SGD run did) proves the run
        # is not the mechanism accounted, as a lower bound above its upper bound does.
        privacy_verdict="violation"
        if any(c.violation for c in comparisons) or any(c.status == "failed" for c in kind_checks)
        else "consistent",
        checks=checks,
        comparisons=comparisons,
        tests=tests,
        attribute=attribute,
        config=config.to_dict(),
        config_text=config.text,
        provenance=provenance,
        warnings=tuple(w for s in summaries for w in s.warnings)
        + tuple(
            f"gate check {c.name} was not evaluated: {c.message}"
            for c in checks
            if c.status == "not-evaluated" and c.passed
        )
        + tuple(
            f"{c.name} failed, but [gate] fail_on_violation = false leaves it out of the "
            f"gate: {c.message}"
            for c in kind_checks
            if c.status == "failed" and not config.gate.fail_on_violation
        )
        + tuple(w for st in stored.values() for w in st.rejected),
    )
    return result


@dataclass
class _Stored:
    """One kind's stored unit outputs, how they were obtained, and its time so far."""

    outputs: Mapping[str, Mapping[str, np.ndarray]]
    stats: UnitStats
    key: str
    seconds: float
    #: Each unit's digest (:func:`dpaudit.store.unit_digest`), as read back and checked.
    digests: dict[str, str]
    #: One line per stored unit that failed its integrity check and was computed again.
    rejected: tuple[str, ...] = ()


def _compute_units(
    config: AuditConfig,
    run_dir: Path,
    progress: Progress | None,
    log: Callable[[str], None] | None = None,
) -> dict[str, _Stored]:
    """Step 1: every kind's units, computed where missing, stored, and read back."""
    context = run_context(config)
    sequential = _sequential_kinds(config)
    stored: dict[str, _Stored] = {}
    # Fixed kinds first: a sequential kind decides after each round at the verdict's
    # per-bound level, which counts every kind's comparisons.
    for name in sorted(config.audit.kinds, key=lambda k: k in sequential):
        t0 = time.perf_counter()
        plan = get_kind(name).plan(config.section(name), context)
        key = plan.key(name)
        store = RunStore(run_dir, key)
        digests, rejected = _check_stored(name, plan.units, store, log)
        if log is not None and digests:
            log(f"{name}: reused {len(digests)} of {len(plan.units)} units from {store.units_dir}")
        if name in sequential:
            level = _sequential_level(config, stored, name)
            stats, units = _run_rounds(config, name, plan, store, digests, progress, level)
        else:
            stats, units = _run_plan(config, plan, store, progress), plan.units
        # the units computed just now, read back and checked (and not decoded again)
        computed, read = read_back(store, [u for u in units if u not in digests])
        digests = {u: digests[u] if u in digests else computed[u] for u in units}
        outputs = StoredOutputs(store, digests, preloaded=read)
        stored[name] = _Stored(outputs, stats, key, time.perf_counter() - t0, digests, rejected)
    return {name: stored[name] for name in config.audit.kinds}


def _sequential_kinds(config: AuditConfig) -> set[str]:
    """The kinds whose units are rounds of a sequential test (``[audit] stopping``).

    Raises:
        DpauditError: the audit is sequential and a kind has no sequential design.
    """
    if config.audit.stopping != "sequential":
        return set()
    context = run_context(config)
    found = set()
    for name in config.audit.kinds:
        if not get_kind(name).is_sequential(config.section(name), context):
            raise DpauditError(
                f"[audit] stopping = 'sequential' is not supported by the {name!r} kind (only "
                "by 'mechanism', 'dpsgd' and 'reconstruction'); use stopping = 'fixed' or "
                "audit that kind in another file"
            )
        found.add(name)
    return found


def _sequential_level(config: AuditConfig, stored: dict[str, _Stored], name: str) -> float:
    """The per-bound level a sequential kind decides at: the verdict's budget over every
    kind's announced comparisons (the fixed kinds' from their stored units; a sequential
    kind's count must not depend on its units, which :func:`_allocate_budget` checks)."""
    context = run_context(config)
    counts = sum(
        get_kind(k).comparisons(
            config.section(k), context, stored[k].outputs if k in stored else {}
        )
        for k in config.audit.kinds
    )
    return VerdictBudget(config.audit.confidence_level, counts).level


def _run_rounds(
    config: AuditConfig,
    name: str,
    plan: UnitPlan,
    store: RunStore,
    digests: dict[str, str],
    progress: Progress | None,
    level: float,
) -> tuple[UnitStats, tuple[str, ...]]:
    """Run a sequential kind's rounds one at a time (stored ones are reused), asking the
    kind after each whether to stop; the rounds up to its decision are what it used.

    A killed run resumes here: the stored rounds are read again in order and the same
    decisions are taken, since a decision is a function of the stored rounds alone.
    """
    kind, section, context = get_kind(name), config.section(name), run_context(config)
    # a monitor keeps the tests between rounds: a round costs its own trials only
    monitor = kind.round_monitor(section, context, level=level)
    done: list[str] = []
    computed = 0
    if progress is not None:  # the cap's rounds are the total; a stop ends the bar early
        progress(plan.description, len(plan.units), 0)
    for unit in plan.units:
        if unit not in digests:
            _run_plan(config, replace(plan, units=(unit,)), store, None)
            digests[unit] = store.load_verified(unit)[1]
            computed += 1
            if progress is not None:
                progress(plan.description, len(plan.units), 1)
        done.append(unit)
        if monitor is not None:
            decision = monitor.add(unit, StoredOutputs(store, {unit: digests[unit]})[unit])
        else:
            outputs = StoredOutputs(store, {u: digests[u] for u in done})
            decision = kind.stop_reason(section, context, outputs, level=level)
        if decision != "continue":
            break
    stats = UnitStats(total=len(done), reused=len(done) - computed, computed=computed)
    return stats, tuple(done)


def _check_stored(
    name: str, units: tuple[str, ...], store: RunStore, log: Callable[[str], None] | None
) -> tuple[dict[str, str], tuple[str, ...]]:
    """The digests of the kind's stored units that pass their integrity check (read one
    at a time); the others are named, moved aside and left for the executor to compute
    again (never trusted)."""
    digests: dict[str, str] = {}
    rejected = []
    finished = store.finished()
    for unit in (u for u in units if u in finished):
        try:
            digests[unit] = store.load_verified(unit)[1]
        except UnitRejected as exc:
            aside = store.reject(unit)
            line = (
                f"{name}: stored unit {unit} was not used: {exc.reason}; it was moved to "
                f"{aside.name} and computed again"
            )
            rejected.append(line)
            if log is not None:
                log(line)
    return digests, tuple(rejected)


@dataclass(frozen=True)
class TrialCost:
    """What one more trial (model) per arm of a kind costs on this machine, measured.

    Two calibration runs of the kind's own units (``trials[0]`` and ``trials[1]`` per
    arm, same file otherwise) give a line: ``fixed`` seconds (data, set-up) plus
    ``per_trial`` seconds per trial per arm. Wall and CPU seconds are both kept: the
    machine may be shared, and CPU time is what the work itself costs.
    """

    kind: str
    trials: tuple[int, int]
    wall: tuple[float, float]
    cpu: tuple[float, float]
    #: The confidence level of each in-verdict bound in the calibration run (the file's c
    #: shared over its comparisons): the level a plan for this file must use.
    level_each: float = 0.95

    def _line(self, seconds: tuple[float, float], trials_per_arm: int) -> float:
        (n0, n1), (t0, t1) = self.trials, seconds
        per_trial = max(t1 - t0, 0.0) / (n1 - n0)
        fixed = max(t0 - per_trial * n0, 0.0)
        return fixed + per_trial * trials_per_arm

    def wall_seconds(self, trials_per_arm: int) -> float:
        """Expected wall time of an audit with ``trials_per_arm`` (linear extrapolation)."""
        return self._line(self.wall, trials_per_arm)

    def cpu_seconds(self, trials_per_arm: int) -> float:
        """Expected CPU time (all threads of this process) with ``trials_per_arm``."""
        return self._line(self.cpu, trials_per_arm)


def measure_trial_cost(
    config: AuditConfig, kind: str | None = None, *, trials: tuple[int, int] = (200, 400)
) -> TrialCost:
    """Time the whole audit of one kind of ``config`` at two trial counts.

    After one untimed warm-up run, each calibration run is :func:`run_audit` end to end
    (units, every bound, the gate, results.json and the report) on the file with only that
    kind, its ``trials`` set to the count and any one-run part (``[dpsgd.one_run]``) left
    out, in a temporary folder that is removed afterwards; the line through the two
    timings is the cost of the multi-run audit.

    Raises:
        DpauditError: the kind is not in the file or counts no trials.
    """
    name = kind or config.audit.kinds[0]
    if name not in config.audit.kinds:
        raise DpauditError(f"kind {name!r} is not in this audit file's kinds {config.audit.kinds}")
    section = config.section(name)
    if "trials" not in type(section).model_fields:
        raise DpauditError(
            f"kind {name!r} has no 'trials' to plan; planning times the kinds with trials "
            "(mechanism, dpsgd)"
        )
    walls, cpus, level = [], [], config.audit.confidence_level
    # The first run warms up (imports, data loading caches, allocator) and is not timed.
    for i, n in enumerate((trials[0], *trials)):
        update: dict[str, Any] = {"trials": n}
        if "one_run" in type(section).model_fields:
            update["one_run"] = None
        calibration = config.with_section(name, **update).only_kind(name)
        with tempfile.TemporaryDirectory(prefix="dpaudit-plan-") as tmp:
            w0, c0 = time.perf_counter(), time.process_time()
            result = run_audit(calibration, output_dir=tmp)  # report written, as a run does
            level = float(result.provenance["verdict_budget"]["level_each"])
            if i:
                walls.append(time.perf_counter() - w0)
                cpus.append(time.process_time() - c0)
    return TrialCost(name, trials, (walls[0], walls[1]), (cpus[0], cpus[1]), level)


#: Calibration trial counts per kind for a plan's time estimate (``dpaudit plan FILE
#: --time``): mechanism trials are cheap (microseconds), models are not (milliseconds or
#: more each); a kind not listed is timed at :data:`CALIBRATION_DEFAULT`.
CALIBRATION: dict[str, tuple[int, int]] = {"mechanism": (20_000, 100_000)}
CALIBRATION_DEFAULT = (32, 96)


@dataclass(frozen=True)
class PlannedComparisons:
    """Every kind's in-verdict comparisons, counted from the parsed file alone.

    Attributes:
        counts: per kind, its count (k is their sum, :attr:`total`).
        maximum: the kinds whose count is the most their verdict can hold rather than
            exact: they count from what their units stored (a DP-SGD run's records and
            checks, a membership target's bounds), so the plan takes the maximum.
    """

    counts: dict[str, int]
    maximum: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def planned_comparisons(config: AuditConfig) -> PlannedComparisons:
    """Every kind's in-verdict comparisons, counted from the parsed file alone.

    These are the counts :func:`run_audit` gives :class:`VerdictBudget` before any bound is
    computed (each kind's ``comparisons``), asked before any unit exists. A kind whose
    count depends on what its units stored gives the most its verdict can hold instead
    (:meth:`~dpaudit.kinds.base.AuditKind.planned_comparisons`), named in ``maximum``: a
    plan at 1 − (1 − c)/k_max is conservative, never fewer trials than the run needs.

    Raises:
        DpauditError: a kind counts its comparisons from its stored units and gives no
            maximum (a kind registered without ``planned_comparisons``).
    """
    context = run_context(config)
    counts: dict[str, int] = {}
    maximum: list[str] = []
    for name in config.audit.kinds:
        kind, section = get_kind(name), config.section(name)
        try:
            counts[name] = kind.comparisons(section, context, NO_UNITS)
            continue
        except UnitsNeeded:
            pass
        try:
            counts[name] = kind.planned_comparisons(section, context)
        except UnitsNeeded:
            raise DpauditError(
                f"the {name!r} kind counts its share of the verdict's confidence from its "
                "stored units (what the run recorded), not from the file: plan it without "
                "the file, with --confidence-level 1 − (1 − c)/k for the k comparisons its "
                "verdict holds (results.json provenance.verdict_budget of a run says k)"
            ) from None
        maximum.append(name)
    return PlannedComparisons(counts, tuple(maximum))


@dataclass(frozen=True)
class FilePlan:
    """The plan of an audit file, made from the parsed file (no trial runs).

    The audit spends ONE confidence budget over every in-verdict comparison of every kind
    (:class:`~dpaudit.kinds.base.VerdictBudget`): each bound is computed at
    ``level_each`` = 1 − (1 − c)/k, so the trials are planned at that level.

    Attributes:
        file: the audit file; kind: the kind planned.
        confidence_level: c of the verdict: the file's ``[audit] confidence_level`` or the
            one given instead (``confidence_source`` says which: ``"file"`` or ``"given"``).
        comparisons: per kind, its in-verdict comparisons (k is their sum).
        comparisons_maximum: the kinds whose count is the most their verdict can hold
            (counted from what a run stores): k is then a maximum and the plan
            conservative.
        level_each: the level of each in-verdict bound, the plan's level.
        claim: the kind's claim as the file states it (None: the kind's own guarantee).
        file_trials: the trials per arm the file runs.
        plan: the trials an ideal attack needs (:func:`dpaudit.planning.plan_trials`).
        size_notes: the kind's notes on its size at the planned trials (memory, disk).
        time: the cost measured on this machine (:func:`measure_trial_cost`), only when
            asked for: it runs the kind on a few trials.
    """

    file: str | None
    kind: str
    confidence_level: float
    confidence_source: str
    comparisons: dict[str, int]
    level_each: float
    claim: dict[str, Any] | None
    file_trials: int
    plan: TrialPlan
    size_notes: tuple[str, ...] = ()
    time: TrialCost | None = None
    comparisons_maximum: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The plan's fields (as :meth:`TrialPlan.to_dict`), then the file's and the time's."""
        out: dict[str, Any] = {
            **self.plan.to_dict(),
            "file": self.file,
            "kind": self.kind,
            "verdict_confidence_level": self.confidence_level,
            "confidence_source": self.confidence_source,
            "comparisons": dict(self.comparisons),
            "comparisons_maximum": list(self.comparisons_maximum),
            "level_each": self.level_each,
            "claim": self.claim,
            "file_trials_per_arm": self.file_trials,
            "size_notes": list(self.size_notes),
        }
        if self.time is not None:
            t = self.time
            out["time"] = {
                "kind": t.kind,
                "trials_per_arm": self.plan.trials_per_arm,
                "wall_seconds": t.wall_seconds(self.plan.trials_per_arm),
                "cpu_seconds": t.cpu_seconds(self.plan.trials_per_arm),
                "calibration_trials": list(t.trials),
                "calibration_wall": list(t.wall),
                "calibration_cpu": list(t.cpu),
            }
        return out


def _file_mechanism(section: Any) -> tuple[str, float] | None:
    """The trade-off curve of a built-in Laplace or Gaussian mechanism as the file runs it:
    ("laplace", ε) with ε = sensitivity/scale, or ("gaussian", μ) with μ =
    sensitivity/σ; None for any other mechanism (or kind)."""
    name = getattr(section, "name", None)
    sensitivity = getattr(section, "sensitivity", 1.0)
    if name == "laplace":
        if getattr(section, "epsilon", None) is not None:
            return "laplace", float(section.epsilon)
        if getattr(section, "scale", None) is not None:
            return "laplace", float(sensitivity / section.scale)
    if name == "gaussian":
        if getattr(section, "mu", None) is not None:
            return "gaussian", float(section.mu)
        if getattr(section, "sigma", None) is not None:
            return "gaussian", float(sensitivity / section.sigma)
    return None


def plan_from_file(
    path_or_config: str | Path | AuditConfig,
    target: float,
    *,
    kind: str | None = None,
    confidence_level: float | None = None,
    mechanism_epsilon: float | None = None,
    mechanism_mu: float | None = None,
    perfect: bool = False,
    parameter: str | None = None,
    delta: float | None = None,
    threshold: str | None = None,
    time: bool = False,
) -> FilePlan:
    """Plan the trials per arm of one kind of an audit file, from the parsed file alone.

    What the file says is used where nothing else is given: the verdict's confidence
    level (``[audit] confidence_level``; ``confidence_level`` overrides it), δ (``[audit]
    delta``), the threshold strategy, the mechanism (a built-in Laplace's ε or Gaussian's
    μ, unless ``mechanism_epsilon``, ``mechanism_mu`` or ``perfect`` says which attack to
    plan for) and the claim (a μ claim alone plans the μ bound). The plan's level is the
    share of the verdict's budget each bound gets: the kinds' in-verdict comparisons are
    counted from the file (:func:`planned_comparisons`), as the audit counts them before
    any bound; a kind that counts from what its units store (fixed-design ``dpsgd``,
    ``membership``) gives the most its verdict can hold, so the plan is conservative.
    Nothing runs, unless ``time`` is set: then the kind is run on a few trials
    (:func:`measure_trial_cost`, in a temporary folder) to extrapolate its wall and CPU
    time to the planned trials.

    Args:
        path_or_config: the audit file, or its loaded config.
        target: the ε (or μ) to certify.
        kind: the kind to plan (default: the file's first kind).
        confidence_level: c of the verdict, instead of the file's.
        mechanism_epsilon, mechanism_mu, perfect: the ideal attack's trade-off curve,
            instead of the file's mechanism.
        parameter: ``"epsilon"`` or ``"mu"`` (default: ``"mu"`` for a claim of μ alone).
        delta: δ of the ε bound, instead of the file's.
        threshold: the threshold strategy, instead of the kind's.
        time: also measure the kind's cost on this machine (runs it on a few trials).

    Raises:
        DpauditError: an unreadable or invalid file, a kind not in the file or without
            trials, a kind whose comparisons depend on its stored units and that gives no
            maximum, no mechanism to
            plan for, or an unreachable target.
    """
    config = (
        path_or_config if isinstance(path_or_config, AuditConfig) else load_config(path_or_config)
    )
    name = kind or config.audit.kinds[0]
    if name not in config.audit.kinds:
        raise DpauditError(f"kind {name!r} is not in this audit file's kinds {config.audit.kinds}")
    section = config.section(name)
    if "trials" not in type(section).model_fields:
        raise DpauditError(
            f"kind {name!r} has no 'trials' to plan; a file is planned for the kinds with "
            "trials (mechanism, dpsgd)"
        )
    c = config.audit.confidence_level if confidence_level is None else confidence_level
    check_in_interval("confidence_level", c, 0.0, 1.0, low_open=True, high_open=True)
    counted = planned_comparisons(config)
    level = VerdictBudget(c, counted.total).level
    claim_table = getattr(section, "claim", None)
    claim = None if claim_table is None else claim_table.model_dump(exclude_none=True)
    tradeoff: str
    if perfect or mechanism_epsilon is not None or mechanism_mu is not None:
        given = [perfect, mechanism_epsilon is not None, mechanism_mu is not None]
        if sum(given) != 1:
            raise DpauditError(
                "Give at most one of mechanism_epsilon (Laplace), mechanism_mu (Gaussian), perfect."
            )
        tradeoff = (
            "perfect" if perfect else "laplace" if mechanism_epsilon is not None else "gaussian"
        )
    else:
        found = _file_mechanism(section)
        if found is None:
            raise DpauditError(
                f"the file's {name!r} table runs no built-in Laplace or Gaussian mechanism "
                "whose trade-off curve the ideal attack could have; give --mechanism-epsilon "
                "(Laplace), --mechanism-mu (Gaussian) or --perfect"
            )
        tradeoff, value = found
        mechanism_epsilon, mechanism_mu = (value, None) if tradeoff == "laplace" else (None, value)
    if parameter is None:
        only_mu = claim is not None and "mu" in claim and "epsilon" not in claim
        parameter = "mu" if only_mu else "epsilon"
    plan = plan_trials(
        target,
        config.audit.delta if delta is None else delta,
        level,
        tradeoff=tradeoff,  # type: ignore[arg-type]  # one of the three, chosen above
        mechanism_epsilon=mechanism_epsilon,
        mechanism_mu=mechanism_mu,
        parameter=parameter,  # type: ignore[arg-type]  # plan_trials checks the choice
        threshold=(threshold or getattr(section, "threshold", "split")),  # type: ignore[arg-type]
    )
    planned = section.model_copy(update={"trials": plan.trials_per_arm})
    notes = get_kind(name).size_notes(planned, run_context(config))
    cost = (
        measure_trial_cost(config, name, trials=CALIBRATION.get(name, CALIBRATION_DEFAULT))
        if time
        else None
    )
    return FilePlan(
        file=None if config.source is None else str(config.source),
        kind=name,
        confidence_level=c,
        confidence_source="file" if confidence_level is None else "given",
        comparisons=dict(counted.counts),
        level_each=level,
        claim=claim,
        file_trials=int(section.trials),
        plan=plan,
        size_notes=tuple(notes),
        time=cost,
        comparisons_maximum=counted.maximum,
    )


def _allocate_budget(
    config: AuditConfig, stored: dict[str, _Stored]
) -> tuple[VerdictBudget, dict[str, int]]:
    """Step 2: count every kind's in-verdict comparisons before any bound is computed."""
    context = run_context(config)
    counts = {
        name: get_kind(name).comparisons(config.section(name), context, st.outputs)
        for name, st in stored.items()
    }
    budget = VerdictBudget(config.audit.confidence_level, sum(counts.values()))
    if _sequential_kinds(config) and not math.isclose(
        budget.level, _sequential_level(config, stored, ""), abs_tol=1e-15
    ):
        raise KindContractError(
            "internal error: a sequential kind's comparisons changed once its rounds were "
            "stored; the level its rounds were decided at would not be the verdict's"
        )
    return budget, counts


def _summarise(
    config: AuditConfig, stored: dict[str, _Stored], budget: VerdictBudget, counts: dict[str, int]
) -> list[KindSummary]:
    """Step 3: every bound, after the store, each in-verdict one at the budget's level; each
    kind must spend exactly the shares it announced in step 2 (checked here, at run time)."""
    context = run_context(config)
    summaries = []
    for name, st in stored.items():
        t0 = time.perf_counter()
        kind = get_kind(name)
        summary = kind.summarise(config.section(name), context, st.outputs, level=budget.level)
        check_spending(name, counts[name], summary, budget.level)
        summaries.append(summary)
        st.seconds += time.perf_counter() - t0
    return summaries


def _environment() -> dict[str, Any]:
    return {
        "dpaudit_version": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "libraries": _library_versions(),
    }


#: What ``verify_run`` cannot recompute, and so does not compare: when, where and with what
#: the run happened (``provenance``'s start and end times, seconds, dpaudit's, Python's and
#: the libraries' versions, the platform, the run directory and audit file paths, how
#: many units were computed or reused, and the warnings about units found damaged and
#: computed again, which ``provenance.units.<kind>.rejected`` lists). Every other field of
#: ``results.json`` is recomputed from the stored units and the audit file text it holds,
#: and compared.
UNVERIFIED_PROVENANCE = (
    "started",
    "finished",
    "timings_seconds",
    "dpaudit_version",
    "python",
    "platform",
    "libraries",
    "run_dir",
    "audit_file",
)
#: Of each kind's ``provenance.units`` entry, what is compared (its counts are not).
_VERIFIED_UNIT_KEYS = ("key", "digests", "total")


def _comparable(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` without the fields :data:`UNVERIFIED_PROVENANCE` names."""
    out = dict(document)
    provenance = out.get("provenance")
    if isinstance(provenance, dict):
        kept = {k: v for k, v in provenance.items() if k not in UNVERIFIED_PROVENANCE}
        units = kept.get("units")
        if isinstance(units, dict):
            kept["units"] = {
                name: {k: v for k, v in u.items() if k in _VERIFIED_UNIT_KEYS}
                if isinstance(u, dict)
                else u
                for name, u in units.items()
            }
        out["provenance"] = kept
    return out


def verify_run(
    run_dir: str | Path,
    *,
    config: AuditConfig | None = None,
    recompute: dict[str, Any] | None = None,
) -> list[str]:
    """Recompute every bound of a finished run from its stored units and compare.

    The configuration comes from ``results.json`` itself (the audit file as written, its
    folder for relative paths and plug-ins). Every unit that result was computed from must
    be in the run directory, pass its integrity check and carry the digest results.json
    recorded for it; the whole document recomputed from those units (verdict, checks,
    bounds, tests, findings, warnings, configuration, confidence levels, name and
    description, provenance) must equal results.json, except the fields
    :data:`UNVERIFIED_PROVENANCE` names (times, host, versions, paths). Nothing is
    computed anew and nothing is written.

    Args:
        run_dir: the run directory.
        config: the configuration the run was started with (a session verifying its own
            run, whose plug-ins may live beside it rather than beside an audit file); its
            hash must still be the one recorded.
        recompute: when given (an empty dict), filled with the recomputed document: what
            a card or report is rendered from, never the file's own values.

    Returns:
        One line per difference found; an empty list means results.json is what its
        stored units give.

    Raises:
        DpauditError: no readable results.json, or its audit file text no longer loads.
    """
    run_dir = Path(run_dir).resolve()
    path = run_dir / "results.json"
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DpauditError(f"{str(path)!r} not found: no finished run to verify there") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DpauditError(f"{str(path)!r} is not a readable results file: {exc}") from None
    provenance = recorded.get("provenance") or {}
    audit_file = provenance.get("audit_file")
    base_dir = Path(audit_file).parent if audit_file else run_dir
    if config is None:
        config = load_config_text(
            str(recorded.get("config_text", "")), base_dir=base_dir, source=str(path)
        )
    problems: list[str] = []
    if config.config_hash() != provenance.get("config_hash"):
        problems.append("the configuration text does not give the config hash recorded")
    units = provenance.get("units") or {}
    stored: dict[str, _Stored] = {}
    context = run_context(config)
    for name in config.audit.kinds:
        plan = get_kind(name).plan(config.section(name), context)
        key = plan.key(name)
        want = units.get(name) or {}
        if key != want.get("key"):
            problems.append(f"{name}: the units' key is {key}, results.json says {want.get('key')}")
        store = RunStore(run_dir, key)
        digests = {}
        if get_kind(name).is_sequential(config.section(name), context):
            # a sequential run used the rounds up to its decision: those it recorded
            used = set(want.get("digests") or {})
            plan = replace(plan, units=tuple(u for u in plan.units if u in used))
        for unit in plan.units:
            try:
                digests[unit] = store.load_verified(unit)[1]
            except (UnitRejected, FileNotFoundError) as exc:
                reason = exc.reason if isinstance(exc, UnitRejected) else "missing"
                problems.append(f"{name}: unit {unit}: {reason}")
                continue
            if digests[unit] != (want.get("digests") or {}).get(unit):
                problems.append(f"{name}: unit {unit} is not the unit results.json was made from")
        if len(digests) < len(plan.units):
            missing = len(plan.units) - len(digests)
            problems.append(f"{name}: {missing} of {len(plan.units)} units missing or rejected")
        stats = UnitStats(total=len(plan.units), reused=len(digests), computed=0)
        stored[name] = _Stored(StoredOutputs(store, digests), stats, key, 0.0, digests)
    if problems:
        return problems
    again = json.loads(
        json.dumps(_result(config, stored, run_dir, datetime.now(UTC), 0.0).to_dict())
    )
    mine, theirs = _comparable(again), _comparable(recorded)
    history = {
        line
        for unit in (recorded.get("provenance") or {}).get("units", {}).values()
        if isinstance(unit, dict)
        for line in unit.get("rejected") or ()
    }
    if isinstance(theirs.get("warnings"), list):
        theirs["warnings"] = [w for w in theirs["warnings"] if w not in history]
    for key in sorted(set(mine) | set(theirs)):
        if key == "provenance":
            for sub in sorted(set(mine[key]) | set(theirs.get(key) or {})):
                if mine[key].get(sub) != (theirs.get(key) or {}).get(sub):
                    problems.append(
                        f"results.json's 'provenance.{sub}' differs from what its stored units give"
                    )
        elif mine.get(key) != theirs.get(key):
            problems.append(f"results.json's {key!r} differs from what its stored units give")
    if recompute is not None:
        # what verify could not recompute is taken from the file; the rest is recomputed
        kept = recorded.get("provenance") or {}
        recompute["provenance"] = {
            **again["provenance"],
            **{k: v for k, v in kept.items() if k in UNVERIFIED_PROVENANCE},
        }
        recompute.update({k: v for k, v in again.items() if k != "provenance"})
    return problems


@dataclass(frozen=True)
class VerifyResult:
    """What ``dpaudit verify`` found: a run's results.json against its stored units.

    Attributes:
        run_dir: the run directory verified.
        problems: one line per difference (:func:`verify_run`); empty when it matches.
        verdict: the verdict recomputed from the stored units (None when units were
            missing or rejected, so that nothing was recomputed).
    """

    run_dir: Path
    problems: tuple[str, ...]
    verdict: Any = None

    @property
    def matches(self) -> bool:
        """Whether results.json is what its stored units give."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "matches": self.matches,
            "problems": list(self.problems),
            "verdict": self.verdict,
        }


def verify_result(run_dir: str | Path) -> VerifyResult:
    """:func:`verify_run` as a result object (what ``dpaudit verify`` prints).

    Raises:
        DpauditError: no readable results.json, or its audit file text no longer loads.
    """
    recomputed: dict[str, Any] = {}
    problems = verify_run(run_dir, recompute=recomputed)
    return VerifyResult(Path(run_dir), tuple(problems), recomputed.get("verdict"))


def write_outputs(result: AuditResult, run_dir: Path, *, html: bool = True) -> None:
    """Write ``results.json`` and ``report.html``, each atomically.

    Raises:
        DpauditError: The files could not be written (disk full, permissions): the run
            directory keeps every unit, so the same command resumes and only writes again.
    """
    try:
        # The report first, results.json last: results.json is what marks a finished run,
        # so a run killed between the two renames leaves no result that a stale report
        # could contradict (the next run removes the orphaned report).
        data = result.to_dict()
        if html:
            atomic_write_text(run_dir / "report.html", render_report(data))
        else:
            (run_dir / "report.html").unlink(missing_ok=True)
        atomic_write_json(run_dir / "results.json", data)
    except OSError as exc:
        raise DpauditError(
            f"cannot write the results into {str(run_dir)!r}: {exc.strerror or exc}; every "
            "finished unit is kept there: fix this, then run the same command again"
        ) from None


def _library_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


__all__ = ["AuditResult", "DpauditError", "TrialCost", "measure_trial_cost", "run_audit"]
