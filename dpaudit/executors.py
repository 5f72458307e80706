"""Executors: run the missing work units of an audit, locally or in worker processes.

A work unit is a pure function of (configuration, unit name); its result is a dict of
arrays that the store writes atomically as soon as the unit finishes. Units already in
the store are never recomputed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.store import RunStore

UnitFn = Callable[[Any, str], dict[str, np.ndarray]]
Progress = Callable[[int], None]


@dataclass(frozen=True)
class UnitStats:
    """How many units a run needed, found finished, and computed."""

    total: int
    reused: int
    computed: int

    def to_dict(self) -> dict[str, int]:
        return {"total": self.total, "reused": self.reused, "computed": self.computed}


def run_units(
    fn: UnitFn,
    config: Any,
    units: Sequence[str],
    store: RunStore,
    *,
    workers: int = 1,
    progress: Progress | None = None,
) -> UnitStats:
    """Compute every unit of ``units`` missing from ``store``.

    Args:
        fn: A top-level (picklable) function ``fn(config, unit) -> dict of arrays``.
        config: The audit configuration passed to ``fn``.
        units: Unit names, in the order to run them.
        store: Where finished units are written and looked up.
        workers: 1 runs in this process; more uses a process pool of that size.
        progress: Called with the number of units just finished (reused ones included).
    """
    done = store.finished()
    todo = [u for u in units if u not in done]
    reused = len(units) - len(todo)
    if progress and reused:
        progress(reused)
    if workers <= 1 or len(todo) <= 1:
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
