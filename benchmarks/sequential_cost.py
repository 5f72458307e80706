"""What a sequential mechanism audit costs against the fixed audit of its cap.

1. **Correct Gaussian, run to the cap.** The Gaussian mechanism (Δ = 1, σ = 1, so
   μ = 1 as it claims) audited with ``[audit] stopping = "sequential"``, ``round_trials =
   100`` and a cap of ``--cap`` trials per arm (10⁶), and the fixed audit of the same
   number of trials: each a whole ``run_audit`` (run directory, units, report) in this
   process, CPU seconds by ``time.process_time`` next to wall seconds, the median of
   ``--rounds`` runs each. The sequential audit must exit 0 within 3× the fixed one's CPU.
2. **Planted μ = 2 against a claim of 1.** The same mechanism at σ = ½ claiming μ = 1,
   sequential with ``round_trials = 100`` and a cap of 10⁵: the trials per arm at which it
   stops, over ``--seeds`` seeds (it must stop within 1,000 per arm).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential_cost.py --cap 1000000
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential_cost.py --skip-cap --seeds 100

Results and the exact commands are in benchmarks/RESULTS.md ("Sequential audit cost").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpaudit.audit import run_audit  # noqa: E402
from dpaudit.config import load_config_text  # noqa: E402

AUDIT = """
[audit]
name = "{name}"
kinds = ["mechanism"]
seed = {seed}
{stopping}

[mechanism]
name = "gaussian"
sigma = {sigma}
trials = {trials}

[mechanism.claim]
mu = 1.0
"""
SEQUENTIAL = 'stopping = "sequential"\nround_trials = 100'


def one_run(text: str) -> tuple[float, float, str, int]:
    """(CPU s, wall s, verdict, trials per arm used) of one whole audit."""
    config = load_config_text(text, base_dir=ROOT, source="sequential_cost")
    with tempfile.TemporaryDirectory() as tmp:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        result = run_audit(config, output_dir=Path(tmp) / "run")
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    test = result.tests[0]
    used = test.details.get("sequential", {}).get("trials_used", {}).get("negative")
    return cpu, wall, result.verdict, int(used if used is not None else test.negatives)


def cap_cost(cap: int, rounds: int) -> None:
    rows = {}
    for name, stopping in (("fixed", ""), ("sequential", SEQUENTIAL)):
        runs = [
            one_run(AUDIT.format(name=name, seed=r, stopping=stopping, sigma=1.0, trials=cap))
            for r in range(rounds)
        ]
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        rows[name] = cpu
        print(
            f"correct Gaussian μ = 1, {name}, cap {cap:,}: CPU {cpu:.2f} s, wall {wall:.2f} s "
            f"(median of {rounds}), verdicts {[r[2] for r in runs]}, trials used "
            f"{[r[3] for r in runs]}, load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    print(f"sequential / fixed CPU: {rows['sequential'] / rows['fixed']:.2f}", flush=True)


def planted(seeds: int) -> None:
    used, verdicts, cpus = [], [], []
    for seed in range(seeds):
        text = AUDIT.format(
            name="planted", seed=seed, stopping=SEQUENTIAL, sigma=0.5, trials=100_000
        )
        cpu, _, verdict, n = one_run(text)
        used.append(n)
        verdicts.append(verdict)
        cpus.append(cpu)
    print(
        f"planted μ = 2 vs claim 1, {seeds} seeds: trials per arm at stopping median "
        f"{statistics.median(used):.0f}, max {max(used)}; verdict fail in "
        f"{verdicts.count('fail')}/{seeds}; CPU median {statistics.median(cpus):.2f} s; load "
        f"{os.getloadavg()[0]:.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--skip-cap", action="store_true")
    args = parser.parse_args()
    if not args.skip_cap:
        cap_cost(args.cap, args.rounds)
    planted(args.seeds)


if __name__ == "__main__":
    main()
