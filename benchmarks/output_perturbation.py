"""Power of the worst-case likelihood-ratio audits of the ERM trainers.

Settings (the shipped audits): logistic regression, λ = 0.1, ε = 1 claimed, synthetic
rows (4 features + one all-zero feature, normalised), ``canary = "worst-case"`` (the
replace-one pair of unit records that moves the exact minimiser most), ``--trials``
models per arm, δ = 1e-5, confidence 0.95 spent as the dpsgd kind spends it (ε and μ
bounds at 0.975 each, threshold "split"):

  output-perturbation: 100 rows (Chaudhuri, Monteleoni, Sarwate 2011, Alg. 1);
  multiparty: 120 rows dealt to 3 parties (Jayaraman et al. 2018, model aggregation).

Per seed, the audit runs through the kind (``run_dpsgd_from_section``: the trainer, the
exact LR score, the bound code). Reported per mechanism, medians over seeds:

  ε_LB   the audit's ε lower bound;
  (a)    the ε the pair's realised sensitivity allows: ε·‖θ*(D′) − θ*(D)‖/bound, the
         largest value of its privacy loss (the norm noise attains it only when the
         noise points along θ*(D′) − θ*(D));
  (b)    the ideal bound: the exact LR of the pair simulated (10⁶ draws per arm) and
         counted at the audit's trials and per-bound level (dpaudit.planning.ideal);
  ε_LB/(b) (goal ≥ 0.8).

CPU seconds by time.process_time (torch and BLAS at 1 thread), wall seconds, load average.

Run: .venv/bin/python benchmarks/output_perturbation.py [--trials 10000] [--seeds 5]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import statistics
import tempfile
import time

import torch

from dpaudit.dpsgd.api import run_dpsgd_from_section

BASE = {
    "canary": "worst-case",
    "threat_model": "black-box",
    "zero_features": 1,
    "normalize": True,
}
SETTINGS = {
    "output-perturbation": {
        **BASE,
        "trainer": "output-perturbation",
        "rows": 100,
        "options": {"epsilon": 1.0, "lam": 0.1},
    },
    "multiparty": {
        **BASE,
        "trainer": "multiparty",
        "rows": 120,
        "options": {"epsilon": 1.0, "lam": 0.1, "parties": 3},
    },
}


def one(name: str, seed: int, trials: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = run_dpsgd_from_section(
            {**SETTINGS[name], "trials": trials}, seed=seed, run_dir=tmp, delta=1e-5
        )
    eps = next(c for c in out.comparisons if c.parameter == "epsilon" and c.in_verdict)
    w = out.tests[0].details["worst_case"]
    return {
        "eps_lb": eps.lower.value,
        "violation": float(any(c.violation for c in out.comparisons)),
        "realised": w["realised_sensitivity"],
        "bound": w["calibrated_sensitivity"],
        "a": w["realised_epsilon"],
        "b": w["ideal_epsilon"],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--setting", nargs="*", default=list(SETTINGS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"trials per arm {args.trials}, seeds 0..{args.seeds - 1}, load {os.getloadavg()}")
    for name in args.setting:
        rows = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for seed in range(args.seeds):
            r = one(name, seed, args.trials)
            rows.append(r)
            print(
                f"  {name} seed {seed}: eps_LB {r['eps_lb']:.4f}  (a) {r['a']:.4f}  "
                f"(b) {r['b']:.4f}  ratio {r['eps_lb'] / r['b']:.3f}  "
                f"realised {r['realised']:.5f} / bound {r['bound']:.5f}  "
                f"violation {int(r['violation'])}",
                flush=True,
            )
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0

        def med(key: str, rows: list[dict[str, float]] = rows) -> float:
            return statistics.median(r[key] for r in rows)

        ratio = statistics.median(r["eps_lb"] / r["b"] for r in rows)
        print(
            f"{name}: median eps_LB {med('eps_lb'):.4f}, (a) {med('a'):.4f}, "
            f"(b) {med('b'):.4f}, eps_LB/(b) {ratio:.3f} (range "
            f"{min(r['eps_lb'] / r['b'] for r in rows):.3f}-"
            f"{max(r['eps_lb'] / r['b'] for r in rows):.3f}), realised/bound "
            f"{med('realised') / med('bound'):.4f}, violations "
            f"{int(sum(r['violation'] for r in rows))}/{len(rows)}; "
            f"CPU {cpu:.1f} s, wall {wall:.1f} s, load {os.getloadavg()}"
        )


if __name__ == "__main__":
    main()
