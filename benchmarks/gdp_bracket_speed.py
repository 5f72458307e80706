"""Speed and width of the GDP μ bracket (Liu, Sun, Jiang, Kong 2022) on DP-SGD profiles.

Run: .venv/bin/python benchmarks/gdp_bracket_speed.py [--rounds 3]
Prints, per setting, the PLD ε at δ = 1e-5, the μ bracket, its relative width, and the
median over ``--rounds`` of the bracket's CPU seconds (``time.process_time``, PLD
composition included, one thread) and wall seconds; next to it the same for Opacus' PRV
accountant's ε at δ = 1e-5 (``eps_error=0.01``), the reference the issue asks to be
within a small factor of. The load average is printed at the start and the end.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

from dpaudit import accounting  # noqa: E402

SETTINGS = [
    ("Poisson q=0.01, σ=1, T=1000", 1.0, 0.01, 1000),
    ("MNIST q=256/60000, σ=1.1, T=14063", 1.1, 256 / 60000, 14063),
    ("full batch q=1, σ=5, T=100", 5.0, 1.0, 100),
]


def _timed(fn: Callable[[], Any], rounds: int) -> tuple[Any, float, float]:
    cpu, wall, out = [], [], None
    for _ in range(rounds):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return out, statistics.median(cpu), statistics.median(wall)


def _opacus_prv(sigma: float, q: float, steps: int) -> Callable[[], float] | None:
    try:
        from opacus.accountants import PRVAccountant
    except ImportError:
        return None

    def run() -> float:
        acc = PRVAccountant()
        acc.history = [(sigma, q, steps)]
        return float(acc.get_epsilon(delta=1e-5, eps_error=0.01))

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass
    print(f"load average at start: {os.getloadavg()}")
    for name, sigma, q, steps in SETTINGS:
        event = accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=steps)
        b, cpu, wall = _timed(lambda event=event: accounting.mu_bracket(event), args.rounds)
        eps = accounting.epsilon(event, delta=1e-5)
        line = (
            f"{name:36s} ε_PLD(1e-5)={eps:.4f}  μ∈[{b.low:.5f}, {b.high:.5f}]  "
            f"width={b.relative_margin:.3%}  grid={len(b.grid)}  "
            f"bracket {cpu:.2f} s CPU {wall:.2f} s wall"
        )
        prv = _opacus_prv(sigma, q, steps)
        if prv is not None:
            ref, cpu_ref, wall_ref = _timed(prv, args.rounds)
            line += (
                f"  | Opacus PRV ε={ref:.4f} {cpu_ref:.2f} s CPU {wall_ref:.2f} s wall "
                f"(bracket/PRV CPU {cpu / cpu_ref:.2f}×)"
            )
        print(line)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
