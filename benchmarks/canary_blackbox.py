"""Black-box (final model only) canary audits with the levers of Annamalai & De Cristofaro.

The levers (arXiv 2405.14106v4, §3): a fixed worst-case initial model shared by every run,
an input canary crafted so that only it moves its own parameters, and full-batch
training. In dpaudit: ``canary = "crafted"`` (a row that is 1000 on an appended all-zero
feature), ``[dpsgd.black_box] initial = "worst-case"`` (θ₀ = 0 except the decoy class's
weight on that feature, far enough ahead that the canary's clipped gradient is the same
vector in every step) and ``score = "logit-shift"`` (two queries of the final model: the
canary's label-over-decoy logit margin minus the same margin on the all-zero input).

Settings, on 1,000 rows of ``sklearn:digits`` (10 classes, 64 features), logistic
regression, C = 1, learning rate 1, δ = 1e-5, 95 %, ``--trials`` models per arm, seeds
0..S-1; σ calibrated by dpaudit's PLD accountant to ε = 10 for the q and T that run:

* full-batch DP-GD, T = 10 (σ = 1.581, exactly μ = 2.000-GDP): the goal setting;
* Poisson DP-SGD, q = 0.25 (batch 250), T = 8, same levers;
* full-batch DP-GD, T = 10, without the levers (ClipBKD canary, random initialisation,
  minus the canary's loss), for comparison;
* ablations: the crafted canary with each model's own random θ₀ (logit-shift score), and
  with the worst-case θ₀ but minus the canary's loss as the score.

For each run: the rigorous ε and μ lower bounds, the ε implied by μ_LB (GDP conversion;
valid for full-batch DP-GD, which is exactly GDP; "assumes-gdp" otherwise), their ratios
to the accountant's ε = 10 and μ, CPU seconds (``time.process_time``, one torch thread),
wall seconds and the load average.

Run: .venv/bin/python benchmarks/canary_blackbox.py [--trials 1000] [--seeds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import torch

from dpaudit.dpsgd.api import run_dpsgd_from_section

LEVERS = {"initial": "worst-case", "score": "logit-shift"}

SETTINGS: dict[str, dict[str, Any]] = {
    "full-batch DP-GD, levers": {
        "trainer": "dpgd",
        "canary": "crafted",
        "black_box": LEVERS,
        "training": {"epochs": 10, "learning_rate": 1.0},
    },
    "Poisson q=0.25 T=8, levers": {
        "trainer": "dpsgd",
        "canary": "crafted",
        "black_box": LEVERS,
        "training": {"epochs": 2, "batch_size": 250, "learning_rate": 1.0},
    },
    "full-batch DP-GD, no levers (clipbkd, loss)": {
        "trainer": "dpgd",
        "canary": "clipbkd",
        "zero_features": 1,
        "training": {"epochs": 10, "learning_rate": 1.0},
    },
    # Ablations: one lever off at a time.
    "full-batch, crafted, random θ₀, logit-shift": {
        "trainer": "dpgd",
        "canary": "crafted",
        "black_box": {"initial": "random", "score": "logit-shift"},
        "training": {"epochs": 10, "learning_rate": 1.0},
    },
    "full-batch, crafted, worst-case θ₀, loss": {
        "trainer": "dpgd",
        "canary": "crafted",
        "black_box": {"initial": "worst-case", "score": "loss"},
        "training": {"epochs": 10, "learning_rate": 1.0},
    },
}


def section(setting: dict[str, Any], trials: int) -> dict[str, Any]:
    training = dict(setting["training"])
    training["dp"] = {"target_epsilon": 10.0, "target_delta": 1e-5, "clipping_norm": 1.0}
    out = {k: v for k, v in setting.items() if k != "training"}
    return {
        "dataset": "sklearn:digits",
        "rows": 1000,
        "threat_model": "black-box",
        "trials": trials,
        "training": training,
        **out,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--only", default=None, help="run the settings whose name contains this")
    a = p.parse_args()
    torch.set_num_threads(1)
    print(f"{a.trials} models per arm, 1,000 rows of sklearn:digits, ε = 10 at δ = 1e-5")
    for name, setting in SETTINGS.items():
        if a.only and a.only not in name:
            continue
        rows = []
        for seed in range(a.seeds):
            load = os.getloadavg()[0]
            c0, w0 = time.process_time(), time.perf_counter()
            with tempfile.TemporaryDirectory() as d:
                out = run_dpsgd_from_section(section(setting, a.trials), seed=seed, run_dir=d)
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
            eps, mu = out.comparisons[0], out.comparisons[1]
            gdp = out.comparisons[2] if len(out.comparisons) > 2 else None
            eps_mu = gdp.lower.value if gdp is not None else 0.0
            verdict = "violation" if any(c.violation for c in out.comparisons) else "consistent"
            rows.append((eps.lower.value, mu.lower.value, eps_mu, mu.upper, cpu, wall))
            print(
                f"  {name:44s} seed {seed}: μ_LB {mu.lower.value:.3f} / μ {mu.upper:.3f}; "
                f"ε(μ_LB) {eps_mu:.2f} / {eps.upper:.2f} = {eps_mu / eps.upper:.3f}; "
                f"ε_LB {eps.lower.value:.3f}; {verdict}; CPU {cpu:.1f} s, wall {wall:.1f} s, "
                f"load {load:.2f}",
                flush=True,
            )
        med = [statistics.median(r[i] for r in rows) for i in range(6)]
        print(
            f"  {name:44s} MEDIAN: μ_LB {med[1]:.3f} / {med[3]:.3f} = {med[1] / med[3]:.3f}; "
            f"ε(μ_LB) {med[2]:.2f} = {med[2] / 10:.3f} of 10; ε_LB {med[0]:.3f} = "
            f"{med[0] / 10:.3f}; CPU {med[4]:.1f} s, wall {med[5]:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
