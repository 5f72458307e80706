"""Tightness of canary audits of Poisson-subsampled DP-SGD (q < 1), black- and white-box.

Poisson DP-SGD on 100 synthetic rows, batch 25 (q = 0.25), C = 1, logistic regression,
δ = 1e-5, 95 %; `--trials` models per arm, seeds 0..S-1; epochs and σ per setting below.
White-box: a Dirac gradient canary, scored by the sum of the updates' projections.
Black-box: a mislabeled input canary, scored by the final model's loss. For each run:
the rigorous ε and μ lower bounds, the accountant's ε (PLD) and μ bracket high end, the
tightness ratios, and the verdict (it must never be "violation" on the correct engine).

Run: .venv/bin/python benchmarks/canary_poisson.py [--trials 2000] [--seeds 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from dpaudit.dpsgd.api import run_dpsgd_from_section

SETTINGS = {
    # The plain sum of the per-step projections, as when these figures were measured;
    # benchmarks/canary_lr.py measures the likelihood-ratio score (the default).
    "white-box dirac, σ 0.8, T 8": {
        "canary": "dirac",
        "threat_model": "white-box",
        "score": "sum",
        "epochs": 2,
        "learning_rate": 0.5,
        "dp": {"noise_multiplier": 0.8},
    },
    "black-box mislabeled, σ 0.5, T 40": {
        "canary": "mislabeled",
        "threat_model": "black-box",
        "epochs": 10,
        "learning_rate": 1.0,
        "dp": {"noise_multiplier": 0.5},
    },
    "black-box clipbkd, σ 0.5, T 40": {
        "canary": "clipbkd",
        "threat_model": "black-box",
        "epochs": 10,
        "learning_rate": 1.0,
        "dp": {"noise_multiplier": 0.5},
    },
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--seeds", type=int, default=5)
    a = p.parse_args()
    print(f"{a.trials} models per arm; eps_LB/eps_UB, mu_LB/mu_UB, verdict, seconds")
    for name, s in SETTINGS.items():
        section = {
            "trainer": "dpsgd",
            "canary": s["canary"],
            "threat_model": s["threat_model"],
            **({"score": s["score"]} if "score" in s else {}),
            "rows": 100,
            "trials": a.trials,
            "training": {
                "epochs": s["epochs"],
                "batch_size": 25,
                "learning_rate": s["learning_rate"],
                "dp": s["dp"],
            },
        }
        for seed in range(a.seeds):
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory() as d:
                out = run_dpsgd_from_section(section, seed=seed, run_dir=d)
            eps, mu = out.comparisons[0], out.comparisons[1]
            verdict = "violation" if any(c.violation for c in out.comparisons) else "consistent"
            print(
                f"  {name:30s} seed {seed}: ε_LB {eps.lower.value:.3f} / ε_UB {eps.upper:.3f} "
                f"= {eps.tightness:.3f};  μ_LB {mu.lower.value:.3f} / μ_UB {mu.upper:.3f} "
                f"= {mu.tightness:.3f};  {verdict};  {time.perf_counter() - t0:.1f} s"
            )


if __name__ == "__main__":
    main()
