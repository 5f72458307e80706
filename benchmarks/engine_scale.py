"""Scale: thousands of DP-SGD MLPs, one process against processes over chunks.

Setup (as benchmarks/train_throughput.py): sklearn digits (64 features, 10 classes,
/16), shuffled with seed 0; each of K models trains on its own random 1,000 of the first
1,400 rows; MLP 64→64→10 ReLU, 10 epochs, expected batch 64 (150 steps), lr 1.0,
DP-SGD σ = 1, C = 1, float32, one ``train_many`` call under the default 1 GiB memory
budget (``--memory-budget-mib``). ``--processes 1,auto`` compares ``processes=1`` with
the default (``processes=None``: :mod:`dpaudit.training.parallel` deals the run's chunks
to forkserver workers, one intra-op thread each, bit for bit the same models).

Every (K, processes, round) runs in a fresh subprocess with OMP_NUM_THREADS=1 and
``torch.set_num_threads(1)``, so that peak memory is per configuration. Reported, for
the ``train_many`` call only (imports and data excluded):

- CPU seconds, user and system apart, of
  * the parent: ``getrusage(RUSAGE_SELF)`` difference around the call;
  * the workers: each worker's own ``getrusage(RUSAGE_SELF)`` at the end of its task
    (``dpaudit.training.parallel.last_parallel_run()``; a worker lives for one call);
  * the fork server: its own CPU time from ``/proc/<pid>/stat`` (utime, stime), which is
    the one-off start-up (it imports torch and the engine) that the first multi-process
    call of a process pays. Its cutime/cstime fields (the workers it reaped) are printed
    as a cross-check of the workers' own figures.
  ``getrusage(RUSAGE_CHILDREN)`` of the parent is printed too, and is ~0: it counts only
  children the parent has waited for, and forkserver workers are the fork server's
  children, not the parent's (the server outlives the call), so it cannot see them.
- wall seconds of the call; system time as a fraction of all CPU time;
- peak memory: ``ru_maxrss`` of the parent (its whole life: interpreter, torch, data,
  the result), of each worker (self-reported), and the sum parent + workers (an upper
  bound of the peak of the whole, since the peaks need not coincide);
- the load average (1, 5, 15 min) after the call, and the chunks and processes used;
- work: GFLOP per CPU-second, the useful products of the run (``train_throughput``'s
  ``_flop_per_example`` × the expected rows K · T · n·q; the realised rows differ from
  that by a relative standard deviation of √((1 − q) / (K·T·n·q)), 3.3·10⁻⁴ at K = 1,000)
  over all CPU seconds, and its fraction of the bmm roofline of the step's own shapes at
  the run's chunk size (``train_throughput.bmm_roofline``, timed in the same subprocess
  after the run, one thread). With several processes the roofline is one process's, so
  the fraction is per CPU-second, as for one process.

Medians over ``--rounds`` rounds, interleaved. Goals: 1,000 DP MLPs in
≤ 10 CPU-seconds; 10,000 in ≤ 100 CPU-seconds with peak memory ≤ 2 GiB and system time
≤ 10 % of the total.

``--epoch-rows``: the CPU cost per row of one epoch, at n = 1,000 and n = 10,000 rows
(Gaussian features of the digits' shape, d = 64, 10 classes: digits has 1,797 rows),
K = 64 models that each hold every row, expected batch 64 (q = 64/n, n // 64 steps),
one process, one thread, with GFLOP per CPU-second and the fraction of the roofline at
K = 64 as above. Goal: the per-row cost at 10,000 rows ≤ 1.2 × that at 1,000.

``--working-set-mib W`` (with ``--processes 1``) caps chunks at a step working set of W MiB
instead of the engine's ``STEP_WORKING_SET_BYTES`` (24 MiB: 79 of these MLPs; about
0.3 MiB per MLP), to compare chunk sizes.

Run: ``.venv/bin/python benchmarks/engine_scale.py --models 1000,10000 --rounds 3``
and ``.venv/bin/python benchmarks/engine_scale.py --epoch-rows --rounds 3``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

POOL_ROWS = 1400
TRAIN_ROWS = 1000
EPOCH_ROWS = (1000, 10000)
EPOCH_MODELS = 64


def _digits(num_models: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(y))
    X, y = X[perm], y[perm]
    rng = np.random.default_rng(1)
    membership = np.zeros((num_models, POOL_ROWS), dtype=bool)
    for k in range(num_models):
        membership[k, rng.choice(POOL_ROWS, size=TRAIN_ROWS, replace=False)] = True
    return X[:POOL_ROWS], y[:POOL_ROWS], membership


def _proc_cpu(pid: int) -> tuple[float, float, float, float] | None:
    """utime, stime, cutime, cstime of a live process from /proc (Linux), seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    # After the ")" closing the command: state is field 3, utime..cstime are 14..17.
    return tuple(int(fields[i]) / tick for i in (11, 12, 13, 14))  # type: ignore[return-value]


def _forkserver_pid() -> int | None:
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)


def _work(models: int, record: Any, chunk_models: int, cpu: float) -> dict[str, float]:
    """GFLOP per CPU-second of the useful products at the expected batch n·q over the
    steps of the run's ``DPSGDRecord``, and that over the bmm roofline of one step of
    ``chunk_models`` models (timed here, one thread)."""
    from train_throughput import _flop_per_example, bmm_roofline

    expected_batch = record.sampling_rate * record.dataset_size
    gflop = models * record.steps * expected_batch * _flop_per_example() / 1e9
    roofline = bmm_roofline(chunk_models, threads=1)
    return {
        "gflop": gflop,
        "gflop_per_cpu_s": gflop / cpu,
        "roofline_gflop_s": roofline,
        "roofline_fraction": gflop / cpu / roofline,
    }


def _one_scale_run(
    models: int, processes: str, budget_mib: int, working_set_mib: float | None = None
) -> dict[str, Any]:
    import torch

    from dpaudit.models import ModelSpec
    from dpaudit.training import DPConfig, TrainingSpec, engine, train_many
    from dpaudit.training.parallel import last_parallel_run

    torch.set_num_threads(1)
    if working_set_mib is not None:  # the chunk cap (see _scale); one process only
        engine.STEP_WORKING_SET_BYTES = int(working_set_mib * 2**20)
    X, y, membership = _digits(models)
    chunks: list[int] = []
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    child0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall0 = time.perf_counter()
    result = train_many(
        X,
        y,
        membership,
        model=ModelSpec(hidden=(64,)),
        training=TrainingSpec(epochs=10, batch_size=64, learning_rate=1.0, dp=DPConfig(1.0, 1.0)),
        seed=0,
        memory_budget_bytes=budget_mib * 2**20,
        progress=lambda done, total: chunks.append(done),
        processes=None if processes == "auto" else int(processes),
    )
    wall = time.perf_counter() - wall0
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    child1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = last_parallel_run()
    workers = list(run.workers) if run is not None else []
    server = _forkserver_pid() if run is not None else None
    server_cpu = _proc_cpu(server) if server else None
    out = {
        "models": models,
        "processes_arg": processes,
        "processes": run.processes if run is not None else 1,
        "chunks": len(run.chunks) if run is not None else len(chunks),
        "wall": wall,
        "parent_user": self1.ru_utime - self0.ru_utime,
        "parent_sys": self1.ru_stime - self0.ru_stime,
        "parent_maxrss_mib": self1.ru_maxrss / 1024,
        "children_user": child1.ru_utime - child0.ru_utime,
        "children_sys": child1.ru_stime - child0.ru_stime,
        "children_maxrss_mib": child1.ru_maxrss / 1024,
        "workers_user": sum(w.user_seconds for w in workers),
        "workers_sys": sum(w.system_seconds for w in workers),
        "workers_maxrss_mib": [w.max_rss_mib for w in workers],
        "server_user": server_cpu[0] if server_cpu else 0.0,
        "server_sys": server_cpu[1] if server_cpu else 0.0,
        "server_reaped_cpu": (server_cpu[2] + server_cpu[3]) if server_cpu else 0.0,
        "startup_wall": run.startup_seconds if run is not None else 0.0,
        "load": os.getloadavg(),
        "records": repr(result.records[0]),
    }
    user = out["parent_user"] + out["workers_user"] + out["server_user"]
    system = out["parent_sys"] + out["workers_sys"] + out["server_sys"]
    out["cpu_user"], out["cpu_sys"], out["cpu"] = user, system, user + system
    out["sys_fraction"] = system / max(user + system, 1e-12)
    out["peak_sum_mib"] = out["parent_maxrss_mib"] + sum(out["workers_maxrss_mib"])
    if run is not None:
        sizes = [stop - start for start, stop in run.chunks]
    else:
        done = sorted(chunks)
        sizes = [b - a for a, b in zip([0, *done[:-1]], done, strict=True)]
    out["chunk_models"] = max(sizes)
    out.update(_work(models, result.records[0], max(sizes), out["cpu"]))
    return out


def _one_epoch_run(rows: int) -> dict[str, Any]:
    import torch

    from dpaudit.models import ModelSpec
    from dpaudit.training import DPConfig, TrainingSpec, train_many

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, 64)).astype(np.float32)
    y = rng.integers(0, 10, size=rows)
    membership = np.ones((EPOCH_MODELS, rows), dtype=bool)
    spec = TrainingSpec(epochs=1, batch_size=64, learning_rate=1.0, dp=DPConfig(1.0, 1.0))
    kwargs = {"model": ModelSpec(hidden=(64,)), "training": spec, "seed": 0, "processes": 1}
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    result = train_many(X, y, membership, **kwargs)
    cpu = time.process_time() - cpu0
    wall = time.perf_counter() - wall0
    return {
        "rows": rows,
        "steps": rows // 64,
        "cpu": cpu,
        "wall": wall,
        "cpu_per_row_us": cpu / rows * 1e6,
        "load": os.getloadavg(),
        **_work(EPOCH_MODELS, result.records[0], EPOCH_MODELS, cpu),
    }


def _subprocess(args: list[str]) -> dict[str, Any]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    env.pop("DPAUDIT_TRAINING_PROCESSES", None)
    out = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"subprocess {args} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(float(r[key]) for r in rows)


def _scale(args: argparse.Namespace) -> None:
    if args.working_set_mib is not None and args.processes != "1":
        raise SystemExit("--working-set-mib needs --processes 1 (workers keep the default)")
    configs = [(int(m), p) for m in args.models.split(",") for p in args.processes.split(",")]
    extra = [] if args.working_set_mib is None else ["--working-set-mib", str(args.working_set_mib)]
    results: dict[tuple[int, str], list[dict[str, Any]]] = {c: [] for c in configs}
    for r in range(args.rounds):
        for models, processes in configs:
            budget = str(args.memory_budget_mib)
            one = ["--one", str(models), "--processes", processes]
            out = _subprocess([*one, "--memory-budget-mib", budget, *extra])
            results[(models, processes)].append(out)
            workers = ", ".join(f"{m:.0f}" for m in out["workers_maxrss_mib"]) or "-"
            print(
                f"round {r} K={models} processes={processes}: used {out['processes']} "
                f"over {out['chunks']} chunk(s); wall {out['wall']:.1f} s; CPU "
                f"{out['cpu']:.1f} s = parent {out['parent_user']:.1f}u+"
                f"{out['parent_sys']:.1f}s, workers {out['workers_user']:.1f}u+"
                f"{out['workers_sys']:.1f}s, fork server {out['server_user']:.2f}u+"
                f"{out['server_sys']:.2f}s (reaped {out['server_reaped_cpu']:.1f}); "
                f"RUSAGE_CHILDREN {out['children_user']:.2f}u+{out['children_sys']:.2f}s "
                f"maxrss {out['children_maxrss_mib']:.0f} MiB; sys {out['sys_fraction']:.1%}; "
                f"peak parent {out['parent_maxrss_mib']:.0f} MiB, workers [{workers}] MiB; "
                f"start-up {out['startup_wall']:.2f} s; {out['gflop_per_cpu_s']:.1f} "
                f"GFLOP/CPU-s, {out['roofline_fraction']:.1%} of the bmm roofline "
                f"({out['roofline_gflop_s']:.1f} GFLOP/s at {out['chunk_models']} models); load "
                + " ".join(f"{v:.2f}" for v in out["load"]),
                flush=True,
            )
    print(f"\nmedians of {args.rounds} round(s); CPU = parent + workers + fork server")
    print(
        f"{'K':>6} {'proc':>5} {'used':>4} {'chunks':>6} {'wall s':>7} {'CPU s':>7} "
        f"{'user':>7} {'sys':>6} {'sys %':>6} {'models/CPU-s':>12} {'peak parent':>11} "
        f"{'peak sum':>9} {'GFLOP/CPU-s':>11} {'roofline':>8} {'load1':>5}"
    )
    for (models, processes), rows in results.items():
        print(
            f"{models:>6} {processes:>5} {int(_median(rows, 'processes')):>4} "
            f"{int(_median(rows, 'chunks')):>6} {_median(rows, 'wall'):>7.1f} "
            f"{_median(rows, 'cpu'):>7.1f} {_median(rows, 'cpu_user'):>7.1f} "
            f"{_median(rows, 'cpu_sys'):>6.2f} {100 * _median(rows, 'sys_fraction'):>5.1f}% "
            f"{models / _median(rows, 'cpu'):>12.1f} "
            f"{_median(rows, 'parent_maxrss_mib'):>8.0f} MiB "
            f"{_median(rows, 'peak_sum_mib'):>5.0f} MiB "
            f"{_median(rows, 'gflop_per_cpu_s'):>11.1f} "
            f"{100 * _median(rows, 'roofline_fraction'):>7.1f}% "
            f"{statistics.median(r['load'][0] for r in rows):>5.2f}"
        )
    print(f"records: {next(iter(results.values()))[0]['records']}")


def _epoch_rows(args: argparse.Namespace) -> None:
    results: dict[int, list[dict[str, Any]]] = {n: [] for n in EPOCH_ROWS}
    for r in range(args.rounds):
        for rows in EPOCH_ROWS:
            out = _subprocess(["--one-epoch", str(rows)])
            results[rows].append(out)
            print(
                f"round {r} n={rows}: {out['steps']} steps, CPU {out['cpu']:.2f} s, wall "
                f"{out['wall']:.2f} s, {out['cpu_per_row_us']:.1f} µs/row, "
                f"{out['gflop_per_cpu_s']:.1f} GFLOP/CPU-s, {out['roofline_fraction']:.1%} of "
                f"the bmm roofline ({out['roofline_gflop_s']:.1f} GFLOP/s); load "
                + " ".join(f"{v:.2f}" for v in out["load"]),
                flush=True,
            )
    print(f"\nmedians of {args.rounds} round(s), K = {EPOCH_MODELS} models, one epoch")
    per_row = {n: _median(results[n], "cpu_per_row_us") for n in EPOCH_ROWS}
    for n in EPOCH_ROWS:
        print(
            f"n = {n:>6}: CPU {_median(results[n], 'cpu'):.2f} s, wall "
            f"{_median(results[n], 'wall'):.2f} s, {per_row[n]:.1f} µs/row, "
            f"{_median(results[n], 'gflop_per_cpu_s'):.1f} GFLOP/CPU-s, "
            f"{_median(results[n], 'roofline_fraction'):.1%} of the bmm roofline"
        )
    ratios = [
        b["cpu_per_row_us"] / a["cpu_per_row_us"]
        for a, b in zip(results[EPOCH_ROWS[0]], results[EPOCH_ROWS[1]], strict=True)
    ]
    print(
        f"per-row cost at {EPOCH_ROWS[1]} / at {EPOCH_ROWS[0]}: "
        f"{per_row[EPOCH_ROWS[1]] / per_row[EPOCH_ROWS[0]]:.2f} (per-round ratios "
        + ", ".join(f"{x:.2f}" for x in ratios)
        + "); goal ≤ 1.2"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--models", default="1000,10000", help="comma-separated K values")
    parser.add_argument("--processes", default="1,auto", help="comma-separated: N or auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-budget-mib", type=int, default=1024)
    parser.add_argument(
        "--working-set-mib",
        type=float,
        help="cap chunks at this step working set instead of the engine's (processes 1)",
    )
    parser.add_argument("--epoch-rows", action="store_true", help="the per-row epoch cost")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--one-epoch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(
            json.dumps(
                _one_scale_run(
                    args.one, args.processes, args.memory_budget_mib, args.working_set_mib
                )
            )
        )
    elif args.one_epoch is not None:
        print(json.dumps(_one_epoch_run(args.one_epoch)))
    elif args.epoch_rows:
        _epoch_rows(args)
    else:
        _scale(args)


if __name__ == "__main__":
    main()
