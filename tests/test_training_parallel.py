"""Training over worker processes (dpaudit/training/parallel.py): the same models bit for
bit as one process, the sizing rules, the inside-a-worker rule and the error messages."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dpaudit.errors import ConfigError, DpauditError
from dpaudit.models import ModelSpec
from dpaudit.training import DPConfig, StepInfo, TrainingSpec, parallel, train_many
from dpaudit.training.parallel import (
    MIN_SECONDS_PER_PROCESS,
    PROCESSES_ENV,
    WORKER_ENV,
    check_processes,
    choose_processes,
    chunk_bounds,
    estimated_seconds,
    in_worker_process,
    plan_processes,
    split_chunks,
)

MLP = ModelSpec(hidden=(8,))
# A budget this small gives chunks of 1 to 2 models for the data below, so that a run
# has several chunks to deal to the workers.
SMALL_BUDGET = 20_000


def _data(n: int = 120, d: int = 6, k: int = 7, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = rng.integers(0, 3, size=n)
    membership = np.zeros((k, n), dtype=bool)
    for i in range(k):
        membership[i, rng.choice(n, size=int(rng.integers(40, n)), replace=False)] = True
    return X, y, membership


def _train(processes, progress=None, **overrides):
    X, y, membership = _data()
    kwargs = {
        "model": MLP,
        "training": TrainingSpec(
            epochs=2,
            batch_size=8,
            learning_rate=0.3,
            momentum=0.5,
            weight_decay=1e-3,
            dp=DPConfig(1.1, 0.8),
        ),
        "seed": 5,
        "num_classes": 3,
        "memory_budget_bytes": SMALL_BUDGET,
        "model_offset": 3,
    }
    kwargs.update(overrides)
    return train_many(X, y, membership, processes=processes, progress=progress, **kwargs)


# ------------------------------------------------------------------- bit for bit
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"training": TrainingSpec(epochs=3, batch_size=8, learning_rate=0.5)},
        {
            "model": ModelSpec(kind="logistic"),
            "training": TrainingSpec(epochs=4, learning_rate=0.5, full_batch=True),
        },
        {"dtype": torch.float64},
    ],
    ids=["dp-sgd-momentum", "plain-sgd", "full-batch-logistic", "float64"],
)
def test_two_processes_train_the_same_models_bit_for_bit(overrides) -> None:
    one_progress: list[tuple[int, int]] = []
    two_progress: list[tuple[int, int]] = []
    one = _train(1, lambda d, t: one_progress.append((d, t)), **overrides)
    two = _train(2, lambda d, t: two_progress.append((d, t)), **overrides)
    run = parallel.last_parallel_run()
    assert run is not None
    assert run.processes == 2
    assert len(run.chunks) >= 3, "the small budget must give several chunks"
    # Whole chunks of the one-process run, dealt in order to the two workers.
    assert [c for group in run.groups for c in group] == list(run.chunks)
    assert torch.equal(one.models.flat_parameters(), two.models.flat_parameters())
    assert one.records == two.records
    assert one.models.dtype == two.models.dtype
    # Progress: the same end, never backwards (workers finish chunks in any order, so
    # the counts between are sums of whole chunks, not the run's chunk boundaries).
    assert one_progress[-1] == two_progress[-1] == (7, 7)
    done = [d for d, _ in two_progress]
    assert done == sorted(set(done))
    # Two tasks; a worker idle again before the second task starts may take it too.
    assert 1 <= len(run.workers) <= 2
    assert all(w.user_seconds > 0 and w.max_rss_mib > 0 for w in run.workers)
    assert os.getpid() not in {w.pid for w in run.workers}


def test_auto_uses_the_environment_count_and_stays_bit_identical(monkeypatch) -> None:
    one = _train(1)
    monkeypatch.setenv(PROCESSES_ENV, "2")
    auto = _train(None)
    run = parallel.last_parallel_run()
    assert run is not None
    assert run.processes == 2
    assert torch.equal(one.models.flat_parameters(), auto.models.flat_parameters())


def test_more_processes_than_chunks_uses_one_per_chunk() -> None:
    # The default budget holds all 7 models in one chunk: one process, nothing to deal.
    one = _train(1, memory_budget_bytes=2**30)
    many = _train(4, memory_budget_bytes=2**30)
    assert torch.equal(one.models.flat_parameters(), many.models.flat_parameters())


def test_a_script_without_a_main_guard_trains_once(tmp_path: Path) -> None:
    # Workers must not re-run the caller's __main__ (spawn and forkserver would).
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import numpy as np
            from dpaudit.models import ModelSpec
            from dpaudit.training import TrainingSpec, train_many
            from dpaudit.training.parallel import last_parallel_run

            rng = np.random.default_rng(0)
            X = rng.normal(size=(60, 4)).astype(np.float32)
            y = rng.integers(0, 2, size=60)
            membership = rng.random((4, 60)) < 0.7
            train_many(X, y, membership, model=ModelSpec(kind="logistic"),
                       training=TrainingSpec(epochs=1, batch_size=4),
                       seed=0, memory_budget_bytes={SMALL_BUDGET // 4}, processes=2)
            print("trained in", last_parallel_run().processes, "processes")
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.count("trained in") == 1, out.stdout + out.stderr
    assert "trained in 2 processes" in out.stdout


# ------------------------------------------------------------------------- sizing
@pytest.mark.parametrize(
    ("requested", "chunks", "seconds", "cores", "in_worker", "env", "expected"),
    [
        (None, 10, 100.0, 2, False, None, 2),  # cores bound
        (None, 10, 100.0, 8, False, None, 8),
        (None, 3, 100.0, 8, False, None, 3),  # chunks bound
        (None, 10, 5.0, 8, False, None, 2),  # work bound: ⌊5 / 2⌋
        (None, 10, 3.9, 8, False, None, 1),  # less than two processes' worth
        (None, 10, 100.0, 1, False, None, 1),  # one core
        (None, 1, 100.0, 8, False, None, 1),  # one chunk
        (None, 10, 100.0, 8, True, None, 1),  # inside a worker: never nest
        (None, 10, 100.0, 8, True, "4", 1),  # ... whatever the environment says
        (None, 10, 0.1, 8, False, "3", 3),  # the environment overrides the estimate
        (None, 2, 100.0, 8, False, "3", 2),  # ... but not the chunks
        (None, 10, 100.0, 8, False, "1", 1),
        (None, 10, 100.0, 8, False, "  ", 8),  # blank means unset
        (4, 2, 0.0, 1, True, "1", 2),  # an explicit count wins, capped by chunks
        (3, 10, 0.0, 1, False, None, 3),
        (1, 10, 100.0, 8, False, None, 1),
    ],
)
def test_choose_processes(requested, chunks, seconds, cores, in_worker, env, expected) -> None:
    got = choose_processes(
        requested, chunks=chunks, seconds=seconds, cores=cores, in_worker=in_worker, env=env
    )
    assert got == expected
    assert MIN_SECONDS_PER_PROCESS == 2.0  # the work-bound rows above assume it


def test_bad_environment_count_is_a_clear_error() -> None:
    with pytest.raises(DpauditError, match=f"{PROCESSES_ENV} must be a positive integer"):
        choose_processes(None, chunks=4, seconds=10.0, cores=2, in_worker=False, env="two")
    with pytest.raises(DpauditError, match="Got '0' instead"):
        choose_processes(None, chunks=4, seconds=10.0, cores=2, in_worker=False, env="0")


def test_available_cores_reads_the_affinity_mask(monkeypatch) -> None:
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert parallel.available_cores() == 3
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda pid: set(), raising=False)
    assert parallel.available_cores() == 1


def test_estimated_seconds_is_the_work_of_the_steps() -> None:
    spec = TrainingSpec(epochs=2, batch_size=10)
    # n = 100: q = 0.1, T = 20, 10 expected examples a step; n = 200: T = 40.
    got = estimated_seconds(np.array([100, 200]), training=spec, num_parameters=50)
    assert got == pytest.approx((20 * 10 + 40 * 10) * 50 / parallel.EXAMPLE_PARAMETERS_PER_SECOND)
    full = estimated_seconds(
        np.array([100]), training=TrainingSpec(epochs=3, full_batch=True), num_parameters=7
    )
    assert full == pytest.approx(3 * 100 * 7 / parallel.EXAMPLE_PARAMETERS_PER_SECOND)


def test_the_speed_constant_gives_the_benchmark_its_measured_order_of_magnitude() -> None:
    # benchmarks/engine_scale.py: 1,000 MLPs 64→64→10 (P = 4,810), 1,000 members each,
    # 10 epochs at batch 64 took 19 to 23 CPU-s on one thread at HEAD 96d3f35.
    spec = TrainingSpec(epochs=10, batch_size=64)
    got = estimated_seconds(np.full(1000, 1000), training=spec, num_parameters=4810)
    assert 5.0 < got < 23.0


def test_chunks_are_dealt_whole_in_order_and_balanced() -> None:
    chunks = chunk_bounds(10, 3)
    assert chunks == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert chunk_bounds(4, 10) == [(0, 4)]
    for processes in range(1, 7):
        groups = split_chunks(chunks, processes)
        assert len(groups) == min(processes, len(chunks))
        assert [c for g in groups for c in g] == chunks
        sizes = [len(g) for g in groups]
        assert max(sizes) - min(sizes) <= 1


# --------------------------------------------------------------- the worker rule
def test_a_pool_worker_knows_it_is_one(monkeypatch) -> None:
    monkeypatch.delenv(WORKER_ENV, raising=False)
    assert not in_worker_process()
    with ProcessPoolExecutor(max_workers=1) as pool:  # the audit's local executor
        assert pool.submit(in_worker_process).result()
    monkeypatch.setenv(WORKER_ENV, "1")
    assert in_worker_process()


def test_auto_is_one_process_inside_a_worker(monkeypatch) -> None:
    _, _, membership = _data()
    plan = {
        "membership": membership,
        "training": TrainingSpec(epochs=500, batch_size=8),
        "num_parameters": 10**6,  # about 70 s of estimated work
        "chunk": lambda: 1,
    }
    monkeypatch.delenv(PROCESSES_ENV, raising=False)
    monkeypatch.setattr(parallel, "available_cores", lambda: 4)
    workers, chunks = plan_processes(None, **plan)
    assert workers == 4
    assert len(chunks) == 7
    monkeypatch.setattr(parallel.multiprocessing, "parent_process", lambda: object())
    assert plan_processes(None, **plan) == (1, [])
    # An explicit count is obeyed even there (the caller asked for it) ...
    assert plan_processes(3, **plan)[0] == 3
    # ... but not in a daemonic process, which may not have children at all.
    monkeypatch.setattr(
        parallel.multiprocessing, "current_process", lambda: SimpleNamespace(daemon=True)
    )
    assert plan_processes(3, **plan) == (1, [])


# ------------------------------------------------------------------------- errors
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", 2.0])
def test_bad_processes_values_are_clear_errors(bad) -> None:
    with pytest.raises(
        DpauditError, match=r"The 'processes' parameter must be an integer in \[1, inf\)\. Got "
    ):
        _train(bad)
    with pytest.raises(DpauditError, match=f"Got {bad!r} instead"):
        check_processes(bad)


def test_processes_with_in_process_extensions_are_refused() -> None:
    def observer(info: StepInfo) -> None:
        pass

    with pytest.raises(
        ConfigError, match="must be 1 or None when the 'step_observer' parameter is set"
    ):
        _train(2, step_observer=observer)
    # Auto quietly trains in this process, where the observer sees every step.
    steps: list[int] = []
    _train(None, step_observer=lambda info: steps.append(info.step))
    assert steps
