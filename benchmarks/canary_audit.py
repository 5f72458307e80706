"""Benchmark: white-box Dirac-canary audit of full-batch DP-GD.

Prints, for μ ∈ {0.5, 1, 2} and 1,000 / 10,000 models per arm, the μ lower bound, the ε
it implies (assumes GDP), the rigorous ε lower bound, the exact upper bounds (μ and
ε(δ = 1e-5) of √T/σ-GDP), tightness and wall time. Run:

    .venv/bin/python benchmarks/canary_audit.py [--trials 1000 10000] [--mu 0.5 1 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time

from dpaudit.dpsgd.api import run_dpsgd_from_section


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--mu", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("mu  trials/arm  mu_LB  mu_LB/mu  eps(mu_LB)  eps_UB  eps(mu_LB)/eps_UB  eps_LB  seconds")
    for mu in args.mu:
        for trials in args.trials:
            section = {
                "trainer": "dpgd",
                "canary": "dirac",
                "threat_model": "white-box",
                "rows": 50,
                "trials": trials,
                "models_per_unit": 5000,
                "training": {"epochs": 10, "learning_rate": 0.5, "dp": {"target_mu": mu}},
            }
            t0 = time.perf_counter()
            out = run_dpsgd_from_section(
                section, seed=args.seed, run_dir=tempfile.mkdtemp(), delta=1e-5
            )
            seconds = time.perf_counter() - t0
            eps, mub, implied = out.comparisons
            print(
                f"{mu:<4g}{trials:>10d}  {mub.lower.value:6.3f}  {mub.tightness:7.3f}  "
                f"{implied.lower.value:9.3f}  {eps.upper:6.3f}  {implied.tightness:12.3f}  "
                f"{eps.lower.value:7.3f}  {seconds:6.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
