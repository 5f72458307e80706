"""Final-model audits of Poisson DP-SGD against the last-iterate reference.

Setting: q = 0.25, T = 8, σ = 1, C = 1 (100 synthetic rows, batch 25, 2 epochs, learning
rate 0.5, logistic regression), δ = 1e-5, confidence 0.95, ``--trials`` models per arm,
seeds 0..S-1, ``threshold = "split"``. Canaries:

* ``gradient``: the gradient-crafting canary (Cebere, Bellet, Papernot 2025): a Dirac
  gradient at C added at every step its Poisson coin comes up, read on the final model's
  parameter; every model starts from θ₀ = 0;
* ``crafted`` with the black-box levers (worst-case θ₀, logit-shift score), for comparison.

For each run: μ_LB (rigorous), the accountant's μ (PLD, every update seen), the
last-iterate reference (Steinke et al. 2025: ε at δ of Binomial(T, q) + N(0, Tσ²) against
N(0, Tσ²), and the GDP μ of that ε), the μ a perfect final-model distinguisher of that pair
certifies with the audit's counted trials (half per arm with ``split``) at the audit's
per-bound level (10⁶ simulated draws per arm,
:func:`dpaudit.planning.last_iterate.last_iterate_ideal`),
the ratios, CPU seconds (``time.process_time``, one torch thread), wall seconds and load.

Run: .venv/bin/python benchmarks/last_iterate.py [--trials 1000] [--seeds 5]
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

TRAINING = {
    "epochs": 2,
    "batch_size": 25,
    "learning_rate": 0.5,
    "dp": {"noise_multiplier": 1.0, "clipping_norm": 1.0},
}
SETTINGS: dict[str, dict[str, Any]] = {
    "gradient canary": {"canary": "gradient"},
    "crafted canary, levers": {
        "canary": "crafted",
        "black_box": {"initial": "worst-case", "score": "logit-shift"},
    },
}


def section(setting: dict[str, Any], trials: int) -> dict[str, Any]:
    return {
        "trainer": "dpsgd",
        "threat_model": "black-box",
        "rows": 100,
        "trials": trials,
        "training": TRAINING,
        **setting,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--only", default=None, help="run the settings whose name contains this")
    a = p.parse_args()
    torch.set_num_threads(1)
    print(f"{a.trials} models per arm; Poisson q = 0.25, T = 8, σ = 1; δ = 1e-5")
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
            mu = next(c for c in out.comparisons if c.parameter == "mu" and c.in_verdict)
            li = out.tests[0].details["last_iterate"]
            rows.append((li["mu_lower"], mu.upper, li["mu"], li["ideal_mu"], cpu, wall))
            print(
                f"  {name:24s} seed {seed}: μ_LB {li['mu_lower']:.3f}; accountant μ "
                f"{mu.upper:.3f}; last-iterate ε {li['epsilon']:.3f}, μ {li['mu']:.3f} "
                f"(ratio {li['mu_ratio']:.3f}); ideal at {li['ideal_trials']} counted "
                f"{li['ideal_mu']:.3f} (ratio {li['ideal_mu_ratio']:.3f}); CPU {cpu:.1f} s, "
                f"wall {wall:.1f} s, load {load:.2f}",
                flush=True,
            )
        med = [statistics.median(r[i] for r in rows) for i in range(6)]
        print(
            f"  {name:24s} MEDIAN: μ_LB {med[0]:.3f}; accountant μ {med[1]:.3f} "
            f"({med[0] / med[1]:.3f}); last-iterate μ {med[2]:.3f} ({med[0] / med[2]:.3f}); "
            f"ideal {med[3]:.3f} ({med[0] / med[3]:.3f}); CPU {med[4]:.1f} s, "
            f"wall {med[5]:.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    main()
