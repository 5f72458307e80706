"""Train a run's chunks of models in worker processes (docs/architecture.md, "The
training engine"; measurements in benchmarks/RESULTS.md).

K models are embarrassingly parallel, and the engine's steps are many small operations
that intra-op threads speed up little (under contention two threads fell to 0.9 to
16 GFLOP/s against 50 to 108 for one; benchmarks/RESULTS.md). So :func:`train_in_processes` hands
the run's chunks of models to worker processes, one intra-op thread each.

Bit for bit the same models as one process. The engine trains a run in contiguous
chunks of ``chunk`` models (the largest that the memory budget and the engine's
step working set allow), and a chunk's numbers depend only on the chunk: its models'
streams come from ``(seed, global model index, purpose)``, but its padded batch width
(the largest batch of the chunk) changes the order of the float sums in the
clipped-sum products, so the same model trained in a different chunk can differ in the
last bit. Workers therefore get whole chunks of the
single-process run, contiguous, and train each chunk as one ``train_many`` call on
exactly those models (``model_offset`` = the chunk's first global index, the same
memory budget, under which a chunk always fits in one piece since its largest
membership is at most the run's). The parent reassembles parameters and records in
model order. ``memory_budget_bytes`` holds per process: each worker trains one chunk at
a time, of the size the budget gives the single-process run.

Processes: the ``forkserver`` start method (``spawn`` where there is none) with the
engine preloaded: ``fork`` after torch has started its thread pools is unsafe. The first
pool of a parent process pays the server's start (torch and dpaudit imported once,
about 1.4 s of wall time measured on the 2-core development machine); later pools fork
from the server in about 0.03 s.

How many (``processes=None``): 1 in a daemonic process (it may not have children) and
inside a worker process (a ``multiprocessing`` child, such as the audit's process pool
or a Dask worker, or a process that sets ``DPAUDIT_TRAINING_WORKER``), so that pools
never nest; otherwise the value of the ``DPAUDIT_TRAINING_PROCESSES`` environment
variable when set (a caller that already runs several trainings side by side sets it
to 1); otherwise the cores this process may run on, but never more than the run has
chunks, nor more than its estimated work pays for (:data:`MIN_SECONDS_PER_PROCESS` of
estimated single-thread training per process).
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import queue as queue_module
import resource
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dpaudit.errors import ConfigError, DpauditError, check_integer
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.records import DPSGDRecord
from dpaudit.training.sampling import sampling_plan
from dpaudit.training.specs import TrainingSpec, TrainResult

__all__ = [
    "MIN_SECONDS_PER_PROCESS",
    "PROCESSES_ENV",
    "WORKER_ENV",
    "ParallelRun",
    "WorkerUsage",
    "available_cores",
    "check_processes",
    "choose_processes",
    "chunk_bounds",
    "estimated_seconds",
    "in_worker_process",
    "last_parallel_run",
    "plan_processes",
    "split_chunks",
    "train_in_processes",
]

WORKER_ENV = "DPAUDIT_TRAINING_WORKER"
"""Set (to ``"1"``) in every training worker; ``processes=None`` then means 1."""

PROCESSES_ENV = "DPAUDIT_TRAINING_PROCESSES"
"""When set, the number of processes ``processes=None`` uses (still capped by chunks)."""

MIN_SECONDS_PER_PROCESS = 2.0
"""Estimated single-thread training seconds a worker process must get to be started.

A pool costs about 1.4 s of wall time the first time in a parent process (the fork
server imports torch and dpaudit) and then ~0.03 s, plus pickling the data and the
parameters; 2 s of work per process keeps that overhead a minority even when cold."""

EXAMPLE_PARAMETERS_PER_SECOND = 4e9
"""Engine speed assumed by :func:`estimated_seconds`: (examples × parameters) per CPU
second of DP-SGD on one thread. Measured at HEAD 96d3f35: 2.4e9 (1,000 MLPs 64→64→10,
150 steps of 64 examples each, 4.6e10 example-parameters in 19 CPU-s); the value is
taken faster than that so that the estimate errs towards fewer processes."""


# ------------------------------------------------------------------------------ sizing
def check_processes(processes: Any) -> int | None:
    """Return ``processes`` if it is ``None`` (auto) or an integer >= 1, else raise.

    Raises:
        DpauditError: ``processes`` is not ``None`` and not a positive integer.
    """
    if processes is None:
        return None
    return check_integer("processes", processes, low=1)


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # platforms without sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def in_worker_process() -> bool:
    """Whether this process is a worker of a process pool: a ``multiprocessing`` child
    (the audit's local pool, Dask's worker processes, this module's own workers) or a
    process with ``DPAUDIT_TRAINING_WORKER`` set."""
    return multiprocessing.parent_process() is not None or bool(os.environ.get(WORKER_ENV))


def _processes_from_env(value: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        parsed = 0
    if parsed < 1:
        raise DpauditError(
            f"The environment variable {PROCESSES_ENV} must be a positive integer. "
            f"Got {value!r} instead."
        )
    return parsed


def choose_processes(
    requested: int | None,
    *,
    chunks: int,
    seconds: float,
    cores: int,
    in_worker: bool,
    env: str | None = None,
) -> int:
    """How many processes to train a run of ``chunks`` chunks in.

    Args:
        requested: ``processes`` as the caller gave it (validated), ``None`` for auto.
        chunks: the chunks of the single-process run (a worker gets whole chunks, so no
            more processes than chunks are ever useful).
        seconds: the run's estimated single-thread training time
            (:func:`estimated_seconds`).
        cores: the cores available (:func:`available_cores`).
        in_worker: whether this process is already a pool worker
            (:func:`in_worker_process`).
        env: the value of ``DPAUDIT_TRAINING_PROCESSES``, if set.

    Returns:
        An explicit request capped at ``chunks``; for auto, 1 inside a worker, else the
        environment's value capped at ``chunks``, else
        ``min(cores, chunks, ⌊seconds / MIN_SECONDS_PER_PROCESS⌋)``, at least 1.
    """
    chunks = max(1, chunks)
    if requested is not None:
        return max(1, min(requested, chunks))
    if in_worker:
        return 1
    if env is not None and env.strip():
        return max(1, min(_processes_from_env(env.strip()), chunks))
    paid_for = math.floor(seconds / MIN_SECONDS_PER_PROCESS)
    return max(1, min(cores, chunks, paid_for))


def estimated_seconds(sizes: np.ndarray, *, training: TrainingSpec, num_parameters: int) -> float:
    """Single-thread training time of a run, estimated from the work its steps hold.

    Each step of model k touches every parameter once per example of its batch, whose
    expected size is q_k·n_k; the work is Σ_k T_k·q_k·n_k·P (examples × parameters),
    at :data:`EXAMPLE_PARAMETERS_PER_SECOND`. Only the choice of the number of
    processes reads this estimate; it never changes what is trained.
    """
    rates, steps = sampling_plan(
        sizes,
        batch_size=training.batch_size,
        epochs=training.epochs,
        full_batch=training.full_batch,
    )
    examples = float(np.sum(steps * np.minimum(rates, 1.0) * sizes))
    return examples * num_parameters / EXAMPLE_PARAMETERS_PER_SECOND


def chunk_bounds(num_models: int, chunk: int) -> list[tuple[int, int]]:
    """The ``(start, stop)`` of each chunk of a single-process run, in order."""
    return [(s, min(num_models, s + chunk)) for s in range(0, num_models, max(1, chunk))]


def split_chunks(chunks: Sequence[tuple[int, int]], processes: int) -> list[list[tuple[int, int]]]:
    """Deal the chunks, in order, to ``min(processes, len(chunks))`` contiguous groups
    whose numbers of chunks differ by at most one (the chunks are of equal size but the
    last, so the groups' numbers of models are nearly equal too)."""
    processes = max(1, min(processes, len(chunks)))
    per, extra = divmod(len(chunks), processes)
    groups, start = [], 0
    for g in range(processes):
        stop = start + per + (1 if g < extra else 0)
        groups.append(list(chunks[start:stop]))
        start = stop
    return groups


def plan_processes(
    requested: Any,
    *,
    membership: np.ndarray,
    training: TrainingSpec,
    num_parameters: int,
    chunk: Callable[[], int],
    extensions: Sequence[Any] = (),
    device: torch.device | str = "cpu",
) -> tuple[int, list[tuple[int, int]]]:
    """The processes to train a run in and the single-process run's chunks.

    Args:
        requested: ``train_many``'s ``processes`` (validated here).
        membership: the run's ``(K, n)`` membership.
        training: the run's training spec (for the work estimate).
        num_parameters: P.
        chunk: returns the single-process run's chunk size (called only when more than
            one process is possible).
        extensions: ``step_observer``, ``gradient_canary``, ``coordinate_canaries``:
            callbacks and per-run state that live in this process, so any of them not
            ``None`` means one process.
        device: where the run trains; only CPU runs use processes.

    Returns:
        ``(processes, chunks)``; ``chunks`` is empty when ``processes`` is 1.

    Raises:
        DpauditError: ``processes`` is not ``None`` or a positive integer.
        ConfigError: ``processes > 1`` asked for with an extension or off the CPU.
    """
    processes = check_processes(requested)
    if processes == 1 or multiprocessing.current_process().daemon:
        # A daemonic process (a multiprocessing.Pool worker) may not start children.
        return 1, []
    local = [
        name for name, value in zip(_EXTENSIONS, extensions, strict=False) if value is not None
    ]
    on_cpu = torch.device(device).type == "cpu"
    if local or not on_cpu:
        if processes is None:
            return 1, []
        why = f"the {local[0]!r} parameter is set" if local else f"the device is {device!s}"
        raise ConfigError(
            f"The 'processes' parameter must be 1 or None when {why} (it runs in this "
            f"process only). Got {processes!r} instead."
        )
    if processes is None and (in_worker_process() or available_cores() == 1):
        return 1, []
    num_models = int(membership.shape[0])
    chunks = chunk_bounds(num_models, chunk())
    if len(chunks) == 1:
        return 1, []
    seconds = estimated_seconds(
        membership.sum(axis=1).astype(np.int64), training=training, num_parameters=num_parameters
    )
    workers = choose_processes(
        processes,
        chunks=len(chunks),
        seconds=seconds,
        cores=available_cores(),
        in_worker=in_worker_process(),
        env=os.environ.get(PROCESSES_ENV),
    )
    return workers, chunks if workers > 1 else []


_EXTENSIONS = ("step_observer", "gradient_canary", "coordinate_canaries")


# --------------------------------------------------------------------------- the run
@dataclass(frozen=True)
class WorkerUsage:
    """One worker process's own ``getrusage(RUSAGE_SELF)`` after its last task.

    Attributes:
        pid: the worker's process id.
        user_seconds: user CPU time of the worker since it started.
        system_seconds: system CPU time of the worker since it started.
        max_rss_mib: the worker's peak resident set size, MiB (``ru_maxrss``; a forked
            worker's counts the pages it shares with the fork server only once touched).
    """

    pid: int
    user_seconds: float
    system_seconds: float
    max_rss_mib: float


@dataclass(frozen=True)
class ParallelRun:
    """What the last :func:`train_in_processes` of this process did (diagnostics).

    Attributes:
        processes: worker processes used.
        chunks: the run's chunks, as ``(start, stop)`` model ranges.
        groups: the chunks each worker trained.
        start_method: ``"forkserver"`` or ``"spawn"``.
        startup_seconds: wall time from creating the pool until the first worker began
            its task (process start; ``time.perf_counter`` is the system's monotonic
            clock on Linux, so the parent's and the workers' readings compare).
        workers: each worker process's own resource usage (one entry per process).
    """

    processes: int
    chunks: tuple[tuple[int, int], ...]
    groups: tuple[tuple[tuple[int, int], ...], ...]
    start_method: str
    startup_seconds: float
    workers: tuple[WorkerUsage, ...]


_LAST_RUN: list[ParallelRun] = []


def last_parallel_run() -> ParallelRun | None:
    """The :class:`ParallelRun` of this process's last multi-process training, if any
    (benchmarks read the workers' CPU time and peak memory from it)."""
    return _LAST_RUN[-1] if _LAST_RUN else None


_PROGRESS: Any = None  # the worker's progress queue, set by _init_worker


def _init_worker(progress_queue: Any) -> None:
    """Each worker: one intra-op thread, marked as a worker, its progress queue."""
    global _PROGRESS
    torch.set_num_threads(1)
    os.environ[WORKER_ENV] = "1"
    _PROGRESS = progress_queue


def _train_chunks(
    train_fn: Callable[..., TrainResult],
    task: int,
    x: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    chunks: Sequence[tuple[int, int]],
    kwargs: dict[str, Any],
) -> tuple[int, np.ndarray, tuple[DPSGDRecord | None, ...], WorkerUsage, float]:
    """Worker: train each chunk as ONE ``train_fn`` call (one process, one engine chunk).

    ``membership`` holds the rows of this task's models; ``chunks`` are their ranges in
    the run (the first starts at the task's first model).
    """
    started = time.perf_counter()
    base = chunks[0][0]
    offset = int(kwargs.pop("model_offset"))
    parameters: list[np.ndarray] = []
    records: list[DPSGDRecord | None] = []
    for start, stop in chunks:
        result = train_fn(
            x,
            y,
            membership[start - base : stop - base],
            model_offset=offset + start,
            processes=1,
            **kwargs,
        )
        models = result.models
        if not isinstance(models, ModelStack):  # pragma: no cover - train_many's type
            raise DpauditError("Worker training must return a ModelStack.")
        parameters.append(models.flat_parameters().cpu().numpy())
        records.extend(result.records)
        if _PROGRESS is not None:
            _PROGRESS.put((task, stop - base))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    own = WorkerUsage(
        pid=os.getpid(),
        user_seconds=usage.ru_utime,
        system_seconds=usage.ru_stime,
        max_rss_mib=usage.ru_maxrss / 1024,
    )
    return task, np.concatenate(parameters), tuple(records), own, started


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Start processes without them re-running the caller's ``__main__``.

    Spawned and forkserver children re-import the parent's main module (its top-level
    code runs again, and without an ``if __name__ == "__main__"`` guard it would train
    again and start processes of its own). The workers need only dpaudit, so while they
    start, ``__main__`` shows neither a ``__spec__`` nor a ``__file__`` and
    ``multiprocessing.spawn.get_preparation_data`` asks them to import nothing.
    """
    main = sys.modules.get("__main__")
    saved: dict[str, Any] = {}
    if main is not None:
        saved = {k: main.__dict__[k] for k in ("__spec__", "__file__") if k in main.__dict__}
    try:
        if main is not None:
            main.__dict__.pop("__file__", None)
            if "__spec__" in main.__dict__:
                main.__dict__["__spec__"] = None
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


def _context() -> Any:
    """Forkserver with the engine preloaded, or spawn where there is no forkserver."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        # Only read when the server starts (the first pool of this process).
        ctx.set_forkserver_preload(["torch", "dpaudit.training.engine"])
        return ctx
    return multiprocessing.get_context("spawn")


def train_in_processes(
    train_fn: Callable[..., TrainResult],
    x: torch.Tensor,
    y: torch.Tensor,
    membership: np.ndarray,
    *,
    chunks: Sequence[tuple[int, int]],
    processes: int,
    model: ModelSpec,
    num_classes: int,
    progress: Callable[[int, int], None] | None,
    started: float,
    **kwargs: Any,
) -> TrainResult:
    """Train the run's ``chunks`` in ``processes`` worker processes and reassemble.

    Args:
        train_fn: the engine's ``train_many`` (a top-level function, so workers can
            import it); workers call it once per chunk with ``processes=1``.
        x: the validated ``(n, d)`` features, already in the run's dtype.
        y: the ``(n,)`` int64 labels.
        membership: the ``(K, n)`` boolean membership.
        chunks: the single-process run's chunks (:func:`chunk_bounds`).
        processes: worker processes (``>= 2``; capped at the number of chunks).
        model: the architecture (to rebuild the :class:`~dpaudit.models.ModelStack`).
        num_classes: C, passed to the workers so that every chunk has the run's C.
        progress: called as ``progress(models_done, K)`` as chunks finish.
        started: ``time.perf_counter()`` at the call's start (the result's ``seconds``).
        **kwargs: the rest of ``train_many``'s arguments (``training``, ``seed``,
            ``dtype``, ``memory_budget_bytes``, ``model_offset``), passed through.

    Returns:
        The same :class:`~dpaudit.training.TrainResult`, bit for bit, as the run in one
        process (parameters in model order, one record per model), but ``seconds``.
    """
    num_models = membership.shape[0]
    groups = split_chunks(chunks, processes)
    x_np = x.detach().cpu().numpy()
    y_np = y.detach().cpu().numpy()
    ctx = _context()
    progress_queue = ctx.Queue()
    done = [0] * len(groups)
    totals = [g[-1][1] - g[0][0] for g in groups]
    reported = 0

    def report(task: int, models_done: int) -> None:
        nonlocal reported
        done[task] = max(done[task], models_done)
        if progress is not None and sum(done) > reported:
            reported = sum(done)
            progress(reported, num_models)

    # Each worker's parameters are copied into place as they arrive (and dropped), so
    # the parent holds the (K, P) result plus at most the slices in flight.
    theta: np.ndarray | None = None
    records: dict[int, tuple[DPSGDRecord | None, ...]] = {}
    usages: dict[int, WorkerUsage] = {}
    pool_started = time.perf_counter()
    first_start = math.inf
    with ProcessPoolExecutor(
        max_workers=len(groups),
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(progress_queue,),
    ) as pool:
        with _main_module_hidden():  # the workers start inside submit()
            pending: set[Future[Any]] = {
                pool.submit(
                    _train_chunks,
                    train_fn,
                    task,
                    x_np,
                    y_np,
                    membership[group[0][0] : group[-1][1]],
                    group,
                    {**kwargs, "model": model, "num_classes": num_classes},
                )
                for task, group in enumerate(groups)
            }
        try:
            while pending:
                finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                _drain(progress_queue, report)
                for future in finished:
                    task, parameters, task_records, usage, task_started = future.result()
                    if theta is None:
                        theta = np.empty((num_models, parameters.shape[1]), parameters.dtype)
                    start, stop = groups[task][0][0], groups[task][-1][1]
                    theta[start:stop] = parameters
                    del parameters
                    records[task], usages[task] = task_records, usage
                    first_start = min(first_start, task_started)
                    report(task, totals[task])
        except BaseException:
            for future in pending:
                future.cancel()
            raise
        finally:
            progress_queue.close()
            progress_queue.join_thread()
    tasks = range(len(groups))
    if theta is None:  # pragma: no cover - every task returned or raised above
        raise DpauditError("Parallel training returned no parameters.")
    _LAST_RUN[:] = [
        ParallelRun(
            processes=len(groups),
            chunks=tuple(chunks),
            groups=tuple(tuple(g) for g in groups),
            start_method=ctx.get_start_method(),
            startup_seconds=first_start - pool_started,
            # A worker may take two tasks when one finishes before the other starts;
            # its usage is cumulative, so keep its last report only.
            workers=tuple(
                {u.pid: u for u in sorted(usages.values(), key=lambda u: u.user_seconds)}.values()
            ),
        )
    ]
    stack = ModelStack.from_flat(
        model, torch.from_numpy(theta), num_features=x.shape[1], num_classes=num_classes
    )
    return TrainResult(
        models=stack,
        records=tuple(r for t in tasks for r in records[t]),
        seconds=time.perf_counter() - started,
    )


def _drain(progress_queue: Any, report: Callable[[int, int], None]) -> None:
    """Pass every progress message waiting in the queue to ``report``."""
    while True:
        try:
            task, models_done = progress_queue.get_nowait()
        except queue_module.Empty:
            return
        report(task, models_done)
