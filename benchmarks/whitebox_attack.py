"""The white-box attack (per-example gradient norms, Nasr et al. 2019) beside "auto".

Run:  .venv/bin/python benchmarks/whitebox_attack.py [--seeds 3] [--k 16]

The benchmark cells of benchmarks/membership_attacks.py --grid ({statsmodels:fair,
sklearn:digits} × K reference models, their non-private recipes, 1,000 audited rows with
fair coins): per seed the same target is scored by "auto" (the online LiRA variant or RMIA
chosen on K reference models) and by "whitebox" (K shadow models, gradient-norm features,
logistic attack model), and the loss attack as a baseline. Prints, per cell, the median and
[min, max] over seeds of TPR at 1 % FPR and AUC, and CPU seconds (``time.process_time``,
one torch thread, training in this process: ``DPAUDIT_TRAINING_PROCESSES=1`` unless set, so
that no worker process's CPU goes uncounted), wall seconds and the load average per attack.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from dpaudit.attacks import get_attack
from dpaudit.data import load_dataset
from dpaudit.membership.pipeline import attack_seed, prepare_target

_spec = importlib.util.spec_from_file_location(
    "membership_attacks", Path(__file__).with_name("membership_attacks.py")
)
assert _spec is not None
assert _spec.loader is not None
grid = importlib.util.module_from_spec(_spec)
sys.modules["membership_attacks"] = grid
_spec.loader.exec_module(grid)

ATTACKS = ("loss", "auto", "whitebox")


def score(name: str, target, *, k: int, seed: int) -> tuple[np.ndarray, float, float]:
    """One attack's scores of the audited rows, its CPU and wall seconds."""
    options = {
        "loss": {},
        "auto": {"num_reference_models": k},
        "whitebox": {"num_shadow_models": k},
    }
    attack = get_attack(name, **options[name])
    c0, t0 = time.process_time(), time.perf_counter()
    s = attack.score(
        target.context(), target.audited_X, target.audited_y, seed=attack_seed(seed, 2)
    )
    return np.asarray(s, dtype=np.float64)[0], time.process_time() - c0, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--k", type=int, default=16)
    args = parser.parse_args()
    os.environ.setdefault("DPAUDIT_TRAINING_PROCESSES", "1")
    torch.set_num_threads(1)
    print(f"torch threads 1; seeds 0..{args.seeds - 1}; K = {args.k}; audited {grid.AUDITED}")
    rows = []
    for dataset_name, (options, model, training) in grid.GRID_RECIPES.items():
        ds = load_dataset(dataset_name, **options)
        values: dict[str, dict[str, list[float]]] = {a: {} for a in ATTACKS}
        cost: dict[str, list[tuple[float, float]]] = {a: [] for a in ATTACKS}
        load0 = os.getloadavg()[0]
        for seed in range(args.seeds):
            target = prepare_target(
                ds, model=model, training=training, audited_size=grid.AUDITED, seed=seed
            )
            for name in ATTACKS:
                s, cpu, wall = score(name, target, k=args.k, seed=seed)
                cost[name].append((cpu, wall))
                for label, value in grid.grid_metrics(s, target.membership).items():
                    values[name].setdefault(label, []).append(value)
                print(
                    f"  {dataset_name} seed {seed} {name}: TPR@1% "
                    f"{values[name]['TPR@1%'][-1]:.3f} AUC {values[name]['AUC'][-1]:.3f} "
                    f"({cpu:.1f} s CPU, {wall:.1f} s wall)",
                    flush=True,
                )
        for name in ATTACKS:
            tpr, auc = values[name]["TPR@1%"], values[name]["AUC"]
            rows.append(
                f"| {dataset_name} | K={args.k} | {name} | {statistics.median(tpr):.3f} "
                f"[{min(tpr):.3f}, {max(tpr):.3f}] | {statistics.median(auc):.3f} "
                f"[{min(auc):.3f}, {max(auc):.3f}] | "
                f"{statistics.median(c for c, _ in cost[name]):.1f} | "
                f"{statistics.median(w for _, w in cost[name]):.1f} | "
                f"{load0:.1f}→{os.getloadavg()[0]:.1f} |"
            )
    print()
    print(
        "| dataset | cell | attack | TPR@1% FPR median [min, max] | AUC median [min, max] "
        "| CPU s (median) | wall s (median) | load |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
