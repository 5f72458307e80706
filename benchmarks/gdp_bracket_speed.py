"""Speed and width of the GDP μ bracket (Liu, Sun, Jiang, Kong 2022) on DP-SGD profiles.

Run: .venv/bin/python benchmarks/gdp_bracket_speed.py
Prints, per setting, the PLD ε at δ = 1e-5, the μ bracket, its relative width and the
wall time of the bracket (PLD composition included).
"""

from __future__ import annotations

import time

from dpaudit import accounting

SETTINGS = [
    ("Poisson q=0.01, σ=1, T=1000", 1.0, 0.01, 1000),
    ("MNIST q=256/60000, σ=1.1, T=14063", 1.1, 256 / 60000, 14063),
    ("full batch q=1, σ=5, T=100", 5.0, 1.0, 100),
]


def main() -> None:
    for name, sigma, q, steps in SETTINGS:
        event = accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=steps)
        t0 = time.perf_counter()
        b = accounting.mu_bracket(event)
        elapsed = time.perf_counter() - t0
        eps = accounting.epsilon(event, delta=1e-5)
        print(
            f"{name:36s} ε_PLD(1e-5)={eps:.4f}  μ∈[{b.low:.5f}, {b.high:.5f}]  "
            f"width={b.relative_margin:.3%}  ε_max={b.epsilon_max:.3f}  "
            f"grid={len(b.grid)}  time={elapsed:.2f}s"
        )


if __name__ == "__main__":
    main()
