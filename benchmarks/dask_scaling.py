"""Dask scaling: 1,000 models trained through ``train_many`` in units of 50 via ``run_units``.

Each unit trains 50 MLPs (64 hidden units, plain SGD, 5 epochs, batch 64) on a fixed
random half of 2,000 rows of a synthetic 20-feature, 4-class problem, and returns the
models' training accuracies; the driver writes each unit into a run directory exactly as
an audit does. The same 20 units are run

- locally in this process (``executor="local"``, ``workers=1``), the baseline;
- on a Dask LocalCluster on 127.0.0.1 with 1 and with 2 worker processes (one thread
  each), submitted through ``run_units(..., executor="dask", address=...)``.

The cluster's start-up is timed apart from the run. Torch is limited to one thread per
process (here and in the workers) so that 2 workers means 2 cores' worth of work, not 2×N
threads fighting for the same cores. Usage::

    python benchmarks/dask_scaling.py [--models 1000] [--unit-size 50] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def _problem(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n, d, c = 2000, 20, 4
    centers = rng.normal(0, 1.0, (c, d))
    y = rng.integers(0, c, n)
    X = (centers[y] + rng.normal(0, 1.0, (n, d))).astype(np.float32)
    return X, y, rng


def train_unit(config: dict, unit: str) -> dict[str, np.ndarray]:
    """Train the models of one unit (a pure function of config and unit name)."""
    import torch

    from dpaudit.models import ModelSpec
    from dpaudit.training import TrainingSpec, train_many

    torch.set_num_threads(1)
    index = int(unit.rsplit("-", 1)[1])
    size = config["unit_size"]
    X, y, _ = _problem()
    rng = np.random.default_rng([config["seed"], index])
    membership = rng.random((size, X.shape[0])) < 0.5
    result = train_many(
        X,
        y,
        membership,
        model=ModelSpec(kind="mlp", hidden=(64,)),
        training=TrainingSpec(epochs=5, batch_size=64, learning_rate=0.1),
        seed=config["seed"],
        num_classes=4,
        model_offset=index * size,
    )
    return {"accuracy": result.models.accuracy(X, y).numpy()}


def main() -> None:
    import torch
    from distributed import Client

    from dpaudit.store import RunStore
    from dpaudit.store.executors import local_cluster, run_units

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--unit-size", type=int, default=50)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-local", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    config = {"seed": 0, "unit_size": args.unit_size}
    units = [f"models-{i:04d}" for i in range(args.models // args.unit_size)]
    print(f"{args.models} models in {len(units)} units of {args.unit_size}")
    print(f"cores: {os.cpu_count()}, load average before: {os.getloadavg()[0]:.1f}")
    timings: dict[str, float] = {}
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_local:
            store = RunStore(Path(tmp) / "local", "bench")
            t0 = time.perf_counter()
            run_units(train_unit, config, units, store)
            timings["local"] = time.perf_counter() - t0
            reference = np.concatenate([store.load(u)["accuracy"] for u in units])
            print(f"local, 1 process: {timings['local']:.1f} s")
        for w in args.workers:
            t0 = time.perf_counter()
            with (
                local_cluster(w) as cluster,
                Client(cluster) as client,
            ):
                client.run(lambda: __import__("dpaudit.training"))  # warm the imports
                startup = time.perf_counter() - t0
                store = RunStore(Path(tmp) / f"dask{w}", "bench")
                t1 = time.perf_counter()
                run_units(
                    train_unit,
                    config,
                    units,
                    store,
                    executor="dask",
                    address=cluster.scheduler_address,
                )
                timings[f"dask{w}"] = time.perf_counter() - t1
            got = np.concatenate([store.load(u)["accuracy"] for u in units])
            same = (
                "identical to local"
                if reference is not None and np.array_equal(got, reference)
                else "not compared"
            )
            print(
                f"dask, {w} worker(s): {timings[f'dask{w}']:.1f} s "
                f"(+ {startup:.1f} s cluster start); results {same}; "
                f"{args.models / timings[f'dask{w}']:.1f} models/s"
            )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if "dask1" in timings and "dask2" in timings:
        print(f"scaling 1 -> 2 workers: {timings['dask1'] / timings['dask2']:.2f}x")


if __name__ == "__main__":
    main()
