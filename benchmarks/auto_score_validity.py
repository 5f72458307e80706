"""Validity and power of ``score = "auto"`` (the mechanism default) on the exponential
mechanism of ``audits/exponential-mechanism*.toml``: 400 seeded repeats of each.

Each repeat runs the audit file's ``[mechanism]`` table with no ``score`` key through the
kind itself (:meth:`MechanismKind.plan`, its units, :meth:`MechanismKind.summarise` at the
verdict's per-bound level): what ``dpaudit run`` computes, without the run directory and
the report. For each mechanism the exact ε at the audit's δ is computed from the two
output laws (:func:`exact_epsilon`), and counted:

- **coverage**: the repeats whose ε lower bound is at most the exact ε. Each ε bound holds
  at the per-bound level c' = 0.975 (the verdict's 0.95 shared by ε and μ), so the misses
  are dominated by Binomial(R, 1 − c'); the ceiling is its 0.999 quantile.
- **false violations** (the correct twin, ε-DP as claimed): the repeats that exit 1. The
  verdict errs with probability at most 1 − c = 0.05, so these are dominated by
  Binomial(R, 0.05); the ceiling is its 0.999 quantile.
- **power** (the bug, exact ε 1.82 against the claimed 1): the repeats that exit 1.

Usage: .venv/bin/python benchmarks/auto_score_validity.py [REPEATS] [TRIALS] [AUDIT]
(AUDIT: one of the two file names, to run it alone).
Results are in benchmarks/RESULTS.md ("score = auto").
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
from scipy import optimize, stats

ROOT = Path(__file__).resolve().parents[1]
AUDITS = ROOT / "audits"
sys.path.insert(0, str(AUDITS))

from plugins.popular_choice import EPSILON, release_probabilities  # noqa: E402

from dpaudit.config import load_config_text, run_context  # noqa: E402
from dpaudit.kinds.base import VerdictBudget  # noqa: E402
from dpaudit.mechanisms.kind import KIND  # noqa: E402


def exact_epsilon(p: np.ndarray, q: np.ndarray, delta: float) -> float:
    """The smallest ε with Σ max(0, P − e^ε Q) ≤ δ both ways (the pair's exact ε at δ)."""

    def excess(eps: float, a: np.ndarray, b: np.ndarray) -> float:
        return float(np.maximum(0.0, a - math.exp(eps) * b).sum()) - delta

    out = 0.0
    for a, b in ((p, q), (q, p)):
        if excess(0.0, a, b) > 0:
            out = max(out, optimize.brentq(excess, 0.0, 50.0, args=(a, b), xtol=1e-12))
    return out


def repeat(path: Path, seed: int, trials: int) -> tuple[bool, float]:
    """One audit of ``path`` at ``seed``: (exit 1?, its ε lower bound)."""
    text = re.sub(r"^seed = [0-9]+$", f"seed = {seed}", path.read_text(), count=1, flags=re.M)
    text = re.sub(r"^trials = [0-9_]+$", f"trials = {trials}", text, count=1, flags=re.M)
    config = load_config_text(text, base_dir=AUDITS, source=str(path))
    context = run_context(config)
    section = config.section("mechanism")
    plan = KIND.plan(section, context)
    outputs = {u: plan.fn(plan.spec, u) for u in plan.units}
    level = VerdictBudget(0.95, KIND.comparisons(section, context, outputs)).level
    summary = KIND.summarise(section, context, outputs, level=level)
    violation = any(c.in_verdict and c.lower.value > c.upper for c in summary.comparisons)
    eps = next(c.lower.value for c in summary.comparisons if c.parameter == "epsilon")
    return violation, eps


def main(repeats: int, trials: int, only: str | None = None) -> None:
    d, d_prime = tomllib.loads((AUDITS / "exponential-mechanism.toml").read_text())["mechanism"][
        "data"
    ]
    print(f"repeats {repeats}, trials {trials:,} per arm, load {os.getloadavg()[0]:.1f}")
    for name, factor in (("exponential-mechanism", 0.5), ("exponential-mechanism-violation", 1.0)):
        if only is not None and name != only:
            continue
        p = release_probabilities(np.array(d), scale=factor * EPSILON)
        q = release_probabilities(np.array(d_prime), scale=factor * EPSILON)
        truth = exact_epsilon(p, q, 1e-5)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        runs = [repeat(AUDITS / f"{name}.toml", s, trials) for s in range(repeats)]
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        fails = sum(v for v, _ in runs)
        misses = sum(e > truth for _, e in runs)
        eps = np.array([e for _, e in runs])
        print(
            f"{name}: exact ε {truth:.4f}; exit 1 in {fails}/{repeats} (ceiling for a true "
            f"claim {int(stats.binom.ppf(0.999, repeats, 0.05))}); ε_LB > exact ε in "
            f"{misses}/{repeats} (ceiling {int(stats.binom.ppf(0.999, repeats, 0.025))}); "
            f"ε_LB median {np.median(eps):.3f}, [min, max] [{eps.min():.3f}, {eps.max():.3f}]; "
            f"{cpu / repeats:.3f} CPU-s ({wall / repeats:.3f} s wall) per repeat, load "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 400,
        int(sys.argv[2]) if len(sys.argv) > 2 else 50_000,
        sys.argv[3] if len(sys.argv) > 3 else None,
    )
