"""dpaudit and DP-Sniper side by side: samples per CPU-second and the ε lower bounds.

DP-Sniper (Bichsel, Steffen, Bogunovic, Vechev, "DP-Sniper: Black-Box Discovery of
Differential Privacy Violations using Classifiers", IEEE S&P 2021; github eth-sri/dp-sniper)
runs as a separate program, in its own virtual environment (``--dpsniper-python``), never
imported by dpaudit. Both tools audit the same three mechanisms of DP-Sniper's own set on
the same pair, at the same number of mechanism draws per input:

- ``gaussian``: N(a, 1), a = 0 against a = 1 (DP-Sniper has no Gaussian; the same
  ``Mechanism`` subclass as its others, written here);
- ``noisy-max``: report noisy max returning the noisy maximum (Ding et al. 2018, Alg. 7;
  DP-Sniper's ``ReportNoisyMax3``), Lap(2/ε) with ε = 1, five answers 0 against 1: its
  privacy loss reaches 5·½ = 2.5 in the lower tail;
- ``svt``: the sparse vector without query noise (Lyu, Su, Li 2017, Alg. 5; DP-Sniper's
  ``SparseVectorTechnique5``, ε = 0.1, c = 1, T = 1), ten answers [1]·5 + [0]·5 against
  [0]·5 + [1]·5: ∞-DP.

Samples: with ``--samples N`` per input, dpaudit runs ``trials = N`` per arm (it fits its
learned score on min(N/3, 10⁵) of them and counts the rest); DP-Sniper runs
``n_train = n = n_final = 2N/5`` (training on both inputs, the threshold on the second,
the final estimate on both: 2N draws in all, as dpaudit's). Each tool's CPU time is
``time.process_time`` around the audit in its own process (imports excluded), at one
thread (``OMP_NUM_THREADS`` etc. = 1, torch's intra-op threads = 1); DP-Sniper's
probability estimate runs in-process (``PrEstimator(..., use_parallel_executor=False)``),
so that no worker process escapes the clock. Before its clock starts, each child runs
the same audit at :data:`WARM_UP` draws per input (``--cold``: not), so that neither
tool's first-use imports are timed. Medians of ``--rounds`` rounds (seeds 0, 1,
...); wall time and the load average are printed too.

Both bounds are pure-ε lower bounds (δ = 0) at confidence 0.9, DP-Sniper's default:
DP-Sniper's ``EpsEstimator`` lower confidence bound (Clopper–Pearson on each probability,
a union bound over the two), dpaudit's ε bound of a mechanism audit claimed 1-DP, whose ε
and μ comparisons share ``[audit] confidence_level = 0.8`` (each at 0.9, Bonferroni).

Run:
    python benchmarks/dpsniper_compare.py --dpsniper-python /tmp/dpsniper-venv/bin/python \\
        --samples 1000000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}
HERE = Path(__file__).resolve().parent
CONFIDENCE = 0.9
#: Draws per input of the warm-up run each child makes before its clock starts.
WARM_UP = 20_000

# ------------------------------------------------------------- the mechanisms (numpy)
#: name → (D, D', output dimension, DP-Sniper class name or None for the one written here)
PAIRS: dict[str, tuple[list[float], list[float], int, str | None]] = {
    "gaussian": ([0.0], [1.0], 1, None),
    "noisy-max": ([0.0] * 5, [1.0] * 5, 1, "ReportNoisyMax3"),
    "svt": ([1.0] * 5 + [0.0] * 5, [0.0] * 5 + [1.0] * 5, 10, "SparseVectorTechnique5"),
}
NOISY_MAX_EPSILON = 1.0
SVT_EPSILON, SVT_THRESHOLD = 0.1, 1.0


def gaussian(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """N(a, 1) (a user mechanism of dpaudit)."""
    return float(np.asarray(data).reshape(-1)[0]) + rng.normal(0.0, 1.0, size)


def noisy_max(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """The noisy maximum of the answers, Lap(2/ε) each (Ding et al. 2018, Alg. 7)."""
    q = np.asarray(data, dtype=float).reshape(1, -1)
    return np.amax(q + rng.laplace(0.0, 2.0 / NOISY_MAX_EPSILON, (size, q.shape[1])), axis=1)


def svt(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """Sparse vector without query noise (Lyu, Su, Li 2017, Alg. 5): ⊤ iff q_i ≥ T + ρ,
    ρ ~ Lap(1/ε₁), ε₁ = ε/2, no cut-off."""
    q = np.asarray(data, dtype=float).reshape(1, -1)
    rho = rng.laplace(0.0, 2.0 / SVT_EPSILON, (size, 1))
    return (q >= rho + SVT_THRESHOLD).astype(float)


FUNCTIONS = {"gaussian": "gaussian", "noisy-max": "noisy_max", "svt": "svt"}


# ------------------------------------------------------------------------ the children


def child_dpaudit(name: str, samples: int, seed: int, *, warm_up: bool) -> dict:
    sys.path.insert(0, str(HERE))  # this file is the audit's plug-in module
    from dpaudit.audit import run_audit

    d, d_prime, _, _ = PAIRS[name]
    with tempfile.TemporaryDirectory(prefix="dpsniper-compare-") as tmp:
        audit = Path(tmp) / "audit.toml"
        audit.write_text(
            f'[audit]\nname = "compare-{name}"\nkinds = ["mechanism"]\nseed = {seed}\n'
            f"confidence_level = {1 - 2 * (1 - CONFIDENCE):.6f}\ndelta = 0.0\n\n"
            f'[mechanism]\nname = "dpsniper_compare:{FUNCTIONS[name]}"\n'
            f"data = [{d}, {d_prime}]\ntrials = {samples}\n\n"
            # a claim is required; its ε and μ comparisons share the verdict's budget, so
            # the verdict's level 1 − 2·(1 − 0.9) puts the ε bound itself at 0.9
            f"[mechanism.claim]\nepsilon = 1.0\n\n[report]\nhtml = false\n"
        )
        if warm_up:
            # the same audit at WARM_UP trials first: dpaudit imports scikit-learn, the
            # bounds and the store on first use, inside run_audit; DP-Sniper's imports
            # are outside its clock too
            text = audit.read_text()
            audit.write_text(text.replace(f"trials = {samples}", f"trials = {WARM_UP}"))
            run_audit(audit, output_dir=Path(tmp) / "warm-up")
            audit.write_text(text)
        cpu, wall = time.process_time(), time.perf_counter()
        run_audit(audit, output_dir=Path(tmp) / "run")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        results = json.loads((Path(tmp) / "run" / "results.json").read_text())
    (eps,) = [b["lower"] for b in results["bounds"] if b["parameter"] == "epsilon"]
    return {
        "cpu": cpu,
        "wall": wall,
        "epsilon": eps["value"],
        "confidence_level": eps["confidence_level"],
        "draws": 2 * samples,
    }


def child_dpsniper(name: str, samples: int, seed: int, *, warm_up: bool) -> dict:
    import random

    import torch
    from dpsniper.attack.dpsniper import DPSniper
    from dpsniper.classifiers.classifier_factory import LogisticRegressionFactory
    from dpsniper.classifiers.torch_optimizer_factory import SGDOptimizerFactory
    from dpsniper.mechanisms import report_noisy_max, sparse_vector_technique
    from dpsniper.mechanisms.abstract import Mechanism
    from dpsniper.probability.estimators import EpsEstimator, PrEstimator
    from dpsniper.search.ddconfig import DDConfig
    from dpsniper.utils.my_logging import log
    from dpsniper.utils.paths import set_output_directory
    from dpsniper.utils.torch import torch_initialize

    class Gaussian(Mechanism):
        def m(self, a, n_samples: int = 1):
            # DP-Sniper's mechanisms draw from numpy's global generator
            return np.asarray(a, dtype=float)[0] + np.random.normal(0.0, 1.0, n_samples)  # noqa: NPY002

    d, d_prime, dimension, cls = PAIRS[name]
    if cls is None:
        mechanism = Gaussian()
    elif name == "noisy-max":
        mechanism = report_noisy_max.ReportNoisyMax3(eps=NOISY_MAX_EPSILON)
    else:
        mechanism = sparse_vector_technique.SparseVectorTechnique5(
            eps=SVT_EPSILON, c=1, t=SVT_THRESHOLD
        )
    np.random.seed(seed)  # noqa: NPY002 - the generator DP-Sniper's mechanisms draw from
    random.seed(seed)
    torch.manual_seed(seed)
    part = (2 * samples // 5) // 1000 * 1000  # multiples of 1000 (DDConfig requires it)
    with tempfile.TemporaryDirectory(prefix="dpsniper-out-") as tmp:
        set_output_directory(tmp)
        torch_initialize(torch_threads=1)
        log.configure("ERROR")
        config = DDConfig(
            n_train=part, n=part, n_check=part, n_final=part, n_processes=1, confidence=CONFIDENCE
        )
        # the logistic regression of DP-Sniper's own experiments (exp_default.py)
        factory = LogisticRegressionFactory(
            in_dimensions=dimension,
            optimizer_factory=SGDOptimizerFactory(learning_rate=0.3, momentum=0.3, step_size=500),
            regularization_weight=0.001,
            epochs=10,
            label=name,
        )
        a1, a2 = np.array(d), np.array(d_prime)
        if warm_up:  # the same steps at WARM_UP draws first (torch's first calls)
            small = DDConfig(
                n_train=WARM_UP, n=WARM_UP, n_check=WARM_UP, n_final=WARM_UP, n_processes=1
            )
            warm = DPSniper(mechanism, factory, small).best_attack(a1, a2)
            EpsEstimator(PrEstimator(mechanism, WARM_UP, small, False)).compute_eps_estimate(
                a1, a2, warm
            )
        cpu, wall = time.process_time(), time.perf_counter()
        attack = DPSniper(mechanism, factory, config).best_attack(a1, a2)
        estimator = EpsEstimator(PrEstimator(mechanism, part, config, False))
        eps, lcb = estimator.compute_eps_estimate(a1, a2, attack)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {
        "cpu": cpu,
        "wall": wall,
        "epsilon": float(lcb),
        "estimate": float(eps),
        "confidence_level": CONFIDENCE,
        "draws": 5 * part,
    }


# ------------------------------------------------------------------------ the driver


def _run(python: str, tool: str, name: str, samples: int, seed: int, warm_up: bool) -> dict:
    env = {**os.environ, **ONE_THREAD}
    if tool == "dpsniper":
        env.pop("PYTHONPATH", None)
    cmd = [python, str(Path(__file__).resolve()), "--child", tool, name, str(samples), str(seed)]
    cmd += [] if warm_up else ["--cold"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{tool} {name} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child", nargs=4, metavar=("TOOL", "NAME", "SAMPLES", "SEED"))
    parser.add_argument("--dpsniper-python", default="/tmp/dpsniper-venv/bin/python")
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mechanisms", nargs="*", default=list(PAIRS))
    parser.add_argument("--tools", nargs="*", default=["dpaudit", "dpsniper"])
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--cold", action="store_true", help="no warm-up run: first-use imports are timed"
    )
    args = parser.parse_args()
    if args.child:
        tool, name, samples, seed = args.child
        run = child_dpaudit if tool == "dpaudit" else child_dpsniper
        print(json.dumps(run(name, int(samples), int(seed), warm_up=not args.cold)))
        return
    pythons = {"dpaudit": sys.executable, "dpsniper": args.dpsniper_python}
    rows = []
    print(f"samples per input {args.samples:,}; rounds {args.rounds}; load {os.getloadavg()}")
    for name in args.mechanisms:
        row: dict = {"mechanism": name}
        for tool in args.tools:
            runs = [
                _run(pythons[tool], tool, name, args.samples, s, not args.cold)
                for s in range(args.rounds)
            ]
            cpu = statistics.median(r["cpu"] for r in runs)
            row[tool] = {
                "cpu": cpu,
                "wall": statistics.median(r["wall"] for r in runs),
                "epsilon": statistics.median(r["epsilon"] for r in runs),
                "epsilons": [r["epsilon"] for r in runs],
                "samples_per_cpu_second": runs[0]["draws"] / 2 / cpu,
                "confidence_level": runs[0]["confidence_level"],
            }
            print(name, tool, json.dumps(row[tool]), f"load {os.getloadavg()}", flush=True)
        rows.append(row)
    print()
    print("| mechanism | tool | samples/input | CPU s | wall s | samples/CPU-s | ε LB (median) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        for tool in args.tools:
            r = row[tool]
            print(
                f"| {row['mechanism']} | {tool} | {args.samples:,} | {r['cpu']:.2f} | "
                f"{r['wall']:.2f} | {r['samples_per_cpu_second']:,.0f} | {r['epsilon']:.3f} |"
            )
    if set(args.tools) == {"dpaudit", "dpsniper"}:
        print()
        for row in rows:
            speed = (
                row["dpaudit"]["samples_per_cpu_second"] / row["dpsniper"]["samples_per_cpu_second"]
            )
            print(
                f"{row['mechanism']}: dpaudit/DP-Sniper samples per CPU-second {speed:.2f}; "
                f"ε {row['dpaudit']['epsilon']:.3f} vs {row['dpsniper']['epsilon']:.3f}"
            )
    print(f"load average at the end {os.getloadavg()}")
    if args.json is not None:
        args.json.write_text(json.dumps({"samples": args.samples, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
