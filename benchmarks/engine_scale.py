"""Scale: 1,000 DP-SGD MLPs of the throughput benchmark's size, on 2 threads.

Same setup as benchmarks/train_throughput.py (digits, 1,000 of 1,400 rows per model,
MLP 64→64→10, 10 epochs, expected batch 64, lr 1.0, σ = 1, C = 1), with K = 1,000
models in one ``train_many`` call under the default 1 GiB memory budget. Prints the
wall-clock training time, the whole process's peak RSS (``resource.getrusage``
``ru_maxrss``: interpreter, torch and data included), the chunk count and the mean
held-out accuracy. Goal (issue #4): under 60 s and under 4 GiB.

Run: ``.venv/bin/python benchmarks/engine_scale.py``
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import torch

from dpaudit.models import ModelSpec
from dpaudit.training import DPConfig, TrainingSpec, train_many


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--memory-budget-mib", type=int, default=1024)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(y))
    X, y = X[perm], y[perm]
    rng = np.random.default_rng(1)
    membership = np.zeros((args.models, 1400), dtype=bool)
    for k in range(args.models):
        membership[k, rng.choice(1400, size=1000, replace=False)] = True
    rss_setup = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    chunks = []
    start = time.perf_counter()
    result = train_many(
        X[:1400],
        y[:1400],
        membership,
        model=ModelSpec(hidden=(64,)),
        training=TrainingSpec(epochs=10, batch_size=64, learning_rate=1.0, dp=DPConfig(1.0, 1.0)),
        seed=0,
        memory_budget_bytes=args.memory_budget_mib * 2**20,
        progress=lambda done, total: chunks.append(done),
    )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    accuracy = result.models.accuracy(X[1400:], y[1400:])
    print(
        f"{args.models} DP-SGD MLPs, {args.threads} threads: {seconds:.1f} s "
        f"({args.models / seconds:.1f} models/s), {len(chunks)} chunk(s), "
        f"peak RSS {peak:.0f} MiB (setup {rss_setup:.0f} MiB), "
        f"mean held-out accuracy {float(accuracy.mean()):.4f}, records {result.records[0]}"
    )


if __name__ == "__main__":
    main()
