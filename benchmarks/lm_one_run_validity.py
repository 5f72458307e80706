"""Validity and power of the one-run audit of DP fine-tuning (``[dpsgd.language]``), by
400 repeated audits of an exact simulation of the score law.

The argument. The audit's verdict counts a violation when the one-run ε bound (Steinke,
Nasr, Jagielski 2023, Thm. 3.1) exceeds the accountant's ε or the f-DP one-run μ bound
(Mahloujifar, Melis, Chaudhuri 2025) exceeds the high end of the accountant's μ bracket,
both computed under one share (dpaudit.bounds.fdp_one_run.one_run_bounds). Both theorems need
only (i) independent fair coins for the canaries and (ii) a mechanism that is (ε, δ)-DP,
resp. μ-GDP, in each canary; the model and the score may be anything. A mechanism that
meets both upper bounds exactly where it matters is the Gaussian release
y_i = μ*·b_i + N(0, 1) for each canary i (b_i its coin), with μ* the largest μ whose
GDP profile stays under both: μ* = min(μ_high, gdp_mu(ε_acc, δ)). It is μ*-GDP in every
coin (Dong, Roth, Su 2022, Def. 2.1: the canaries' releases are independent, so adding
one canary changes one coordinate's mean by μ*), hence (ε_acc, δ)-DP and μ_high-GDP: every
violation the audit reports on it is a false alarm, whose rate must stay within the
binomial ceiling for 1 − c. The score y_i is the likelihood ratio's sufficient statistic,
the strongest any attack on this mechanism can use, so the simulation is no weaker than
the real LM's canary loss. The power control plants the bug of audits/lm-canary-violation
.toml in the law: μ ten times μ* (noise divided by 10 multiplies a Gaussian's μ by 10).

Run: .venv/bin/python benchmarks/lm_one_run_validity.py
"""

from __future__ import annotations

import os
import time

import numpy as np
from scipy.stats import binom

from dpaudit.accounting.upper_bounds import from_records
from dpaudit.bounds.fdp_one_run import one_run_bounds
from dpaudit.records import DPSGDRecord
from dpaudit.theory import gdp_mu

# The shipped example's run (audits/lm-canary.toml).
RECORD = DPSGDRecord(noise_multiplier=2.0, sampling_rate=0.05, steps=300, clipping_norm=1.0)
M, R, DELTA, C, RUNS = 1000, 100, 1e-5, 0.95, 400


def violations(mu: float, upper_eps: float, upper_mu: float, tail: float, seed: int) -> int:
    rng = np.random.default_rng(seed)
    found = 0
    for _ in range(RUNS):
        b = rng.random(M) < 0.5
        y = mu * b + rng.standard_normal(M)
        bounds = one_run_bounds(
            y, b, guesses=R, delta=DELTA, confidence_level=C, with_mu=True, mu_tail=tail
        )
        assert bounds.mu is not None
        found += bounds.epsilon.value > upper_eps or bounds.mu.value > upper_mu
    return found


def main() -> None:
    upper = from_records([RECORD], DELTA)
    mu_star = min(upper.mu, gdp_mu(upper.epsilon, DELTA))
    ceiling = int(binom.ppf(0.999, RUNS, 1 - C))  # the 99.9 % binomial ceiling of 1 − c
    t0, w0 = time.process_time(), time.perf_counter()
    false = violations(mu_star, upper.epsilon, upper.mu, upper.mu_tail, seed=1)
    power = violations(10 * mu_star, upper.epsilon, upper.mu, upper.mu_tail, seed=2)
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    print(f"accountant: eps = {upper.epsilon:.4f} at delta = {DELTA}, mu_high = {upper.mu:.4f}")
    print(f"mu* = {mu_star:.4f}; m = {M}, r = {R}, c = {C}, {RUNS} runs")
    print(
        f"correct noise: {false}/{RUNS} violations "
        f"(ceiling {ceiling} = 99.9% of Bin({RUNS}, {1 - C:.2f}))"
    )
    print(f"noise / 10 (power control): {power}/{RUNS} violations")
    print(f"{cpu:.1f} CPU-s, {wall:.1f} s wall, load average {os.getloadavg()[0]:.2f}")
    if false > ceiling or power < RUNS // 2:
        raise SystemExit("validity or power failed")


if __name__ == "__main__":
    main()
