"""Executors: run the missing work units of an audit, locally, in worker processes or on Dask.

A work unit is a pure function of (configuration, unit name); its result is a dict of
arrays that the store writes atomically as soon as the unit finishes. Units already in
the store are never recomputed.

Whatever the executor, only the driver (the process that called :func:`run_units`) writes
into the run directory: workers compute and return a unit's arrays, the driver saves them
as each one arrives. With Dask, a worker lost mid-run costs only the units it held: the
scheduler reruns them elsewhere, and since the driver saves a unit when its one future
completes, a unit is written once however many times it was computed.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.errors import DpauditError, check_choice
from dpaudit.store import RunStore

UnitFn = Callable[[Any, str], dict[str, np.ndarray]]
Progress = Callable[[int], None]

EXECUTORS = ("local", "dask")


@dataclass(frozen=True)
class UnitStats:
    """How many units a run needed, found finished, and computed."""

    total: int
    reused: int
    computed: int

    def to_dict(self) -> dict[str, int]:
        return {"total": self.total, "reused": self.reused, "computed": self.computed}


def local_cluster(workers: int) -> Any:
    """A Dask LocalCluster of ``workers`` single-threaded processes on 127.0.0.1.

    Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which makes glibc hand
    freed memory back to the OS at once; the training engine's many small tensors then
    page-fault on every step (measured: 2.5× slower per unit). These workers keep glibc's
    default (a dynamic threshold); on a cluster of your own, start the workers without
    that variable.
    """
    import dask
    import distributed

    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        return distributed.LocalCluster(
            n_workers=max(1, workers),
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        )


def run_units(
    fn: UnitFn,
    config: Any,
    units: Sequence[str],
    store: RunStore,
    *,
    workers: int = 1,
    progress: Progress | None = None,
    executor: str = "local",
    address: str | None = None,
    timeout: float | None = None,
) -> UnitStats:
    """Compute every unit of ``units`` missing from ``store``.

    Args:
        fn: A top-level (picklable) function ``fn(config, unit) -> dict of arrays``.
        config: The audit configuration passed to ``fn``.
        units: Unit names, in the order to run them.
        store: Where finished units are written and looked up.
        workers: 1 runs in this process; more uses a process pool of that size. With
            ``executor="dask"`` and no ``address``, the number of local Dask workers.
        progress: Called with the number of units just finished (reused ones included).
        executor: ``"local"`` (this process or a process pool) or ``"dask"``.
        address: The Dask scheduler (``"tcp://host:port"``); ``None`` with
            ``executor="dask"`` starts a LocalCluster on 127.0.0.1 for this call.
        timeout: Seconds one unit may run (``[execution] unit_timeout``). Units then run
            in worker processes (even with ``workers=1``), so that one that overruns can
            be stopped; the finished ones are stored as usual.

    Raises:
        DpauditError: ``executor`` is unknown, Dask is asked for but not installed, or a
            unit ran longer than ``timeout`` (it is named; the finished units are kept).
    """
    check_choice("executor", executor, EXECUTORS)
    done = store.finished()
    todo = [u for u in units if u not in done]
    reused = len(units) - len(todo)
    if progress and reused:
        progress(reused)
    if timeout is not None and executor == "dask":
        raise DpauditError(
            "[execution] unit_timeout applies to the local executor; a Dask cluster has its "
            "own limits (distributed.scheduler settings)"
        )
    if timeout is not None and todo:
        _run_with_timeout(
            fn, config, todo, store, workers=workers, timeout=timeout, progress=progress
        )
    elif executor == "dask":
        if todo:
            _run_on_dask(
                fn, config, todo, store, workers=workers, address=address, progress=progress
            )
    elif workers <= 1 or len(todo) <= 1:
        for unit in todo:
            store.save(unit, fn(config, unit))
            if progress:
                progress(1)
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            pending = {pool.submit(fn, config, unit): unit for unit in todo}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    unit = pending.pop(future)
                    store.save(unit, future.result())
                    if progress:
                        progress(1)
    return UnitStats(total=len(units), reused=reused, computed=len(todo))


def _run_with_timeout(
    fn: UnitFn,
    config: Any,
    todo: Sequence[str],
    store: RunStore,
    *,
    workers: int,
    timeout: float,
    progress: Progress | None,
) -> None:
    """Run ``todo`` in ``workers`` processes, at most one unit each at a time, so that each
    unit's clock starts when it starts; a unit past ``timeout`` stops the pool."""
    pending = list(reversed(todo))
    running: dict[str, tuple[Any, float]] = {}
    with multiprocessing.get_context().Pool(processes=max(1, workers)) as pool:

        def start() -> None:
            if pending:
                unit = pending.pop()
                running[unit] = (pool.apply_async(fn, (config, unit)), time.monotonic())

        for _ in range(max(1, workers)):
            start()
        while running:
            for unit, (result, started) in list(running.items()):
                if result.ready():
                    store.save(unit, result.get())
                    del running[unit]
                    if progress:
                        progress(1)
                    start()
                elif time.monotonic() - started > timeout:
                    pool.terminate()
                    raise DpauditError(
                        f"unit {unit} did not finish within {timeout:g} s ([execution] "
                        "unit_timeout) and was stopped; every finished unit is kept: raise "
                        "the limit, or find what hangs (a plug-in?), then run again"
                    )
            time.sleep(0.01)


def _import_dask() -> Any:
    try:
        import distributed
    except ImportError:
        raise DpauditError(
            "[execution] executor = 'dask' needs Dask distributed, which is not installed; "
            'install it with: pip install "dpaudit[dask]"'
        ) from None
    return distributed


def _run_on_dask(
    fn: UnitFn,
    config: Any,
    todo: Sequence[str],
    store: RunStore,
    *,
    workers: int,
    address: str | None,
    progress: Progress | None,
) -> None:
    """Submit ``todo`` to a Dask cluster and save each unit on the driver as it completes.

    Every unit is one task whose key names the run (config hash) and the unit, so the
    scheduler holds at most one live task per unit. A worker that dies loses only the
    tasks it was running or holding results of: the scheduler reruns them on the
    remaining workers (up to ``distributed.scheduler.allowed-failures`` deaths per task,
    after which the task fails with ``KilledWorker`` and this call raises). Each future
    is yielded once by ``as_completed``, so the driver saves each unit exactly once.
    """
    distributed = _import_dask()
    cluster = None
    if address is None:
        # Loopback only, one thread per worker process (units are CPU-bound, torch
        # already uses threads), no dashboard (it would need another port).
        cluster = local_cluster(workers)
    try:
        with distributed.Client(cluster if cluster is not None else address) as client:
            token = getattr(store, "config_hash", "run")
            futures = {}
            for unit in todo:
                # The key names the run and the unit; a unit is a pure function of them,
                # so a result a shared cluster still holds under that key is reused.
                future = client.submit(fn, config, unit, key=f"dpaudit-{token}-{unit}")
                futures[future] = unit
            for future in distributed.as_completed(list(futures)):
                unit = futures[future]
                store.save(unit, future.result())
                future.release()
                if progress:
                    progress(1)
    finally:
        if cluster is not None:
            cluster.close()
