"""Does `dpaudit plan`'s trial count reach its target when run? The Laplace mechanism, many seeds.

Run:  .venv/bin/python benchmarks/plan_check.py [--seeds 400] [--first-seed 1000]

`dpaudit plan --target 0.95 --mechanism-epsilon 1` (confidence 0.95, δ = 0, split
threshold) gives n trials per arm. For each seed this runs the Laplace audit (ε = 1,
sensitivity 1) the way `dpaudit run` does (the mechanism kind's units and summary) with
n/2, n and 2n trials per arm, and reports the fraction of seeds whose ε_LB reaches the
target, with its 95 % Clopper–Pearson interval, the median bound, and how many bounds
exceed the true ε = 1 (false violations: at most a 1 − level share of seeds, in
expectation):

- at the plan's confidence 0.95 (what the plan promises: a bound at 0.95);
- at 0.975, the level `dpaudit run` gives the ε bound of a Laplace audit file with
  ``confidence_level = 0.95``: its pure ε claim implies a μ claim, so the verdict holds
  two comparisons and spends (1 − 0.95)/2 on each; and with the count `dpaudit plan
  --confidence-level 0.975` gives, which is the plan for that file.

The plan targets the median (the bound at the expected error counts), so the fraction at
n should be about 1/2; the issue's criterion "at least half of 20 seeds" is then met by
P(Bin(20, p) ≥ 10). CPU seconds are ``time.process_time`` (numpy, one process).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from scipy import stats

from dpaudit import clopper_pearson
from dpaudit.config import parse_config, run_context
from dpaudit.kinds import get_kind
from dpaudit.planning import plan_trials

TARGET = 0.95
MECHANISM_EPSILON = 1.0
CONFIDENCE = 0.95
DELTA = 0.0


def plan(confidence_level: float) -> int:
    return plan_trials(
        TARGET,
        DELTA,
        confidence_level,
        tradeoff="laplace",
        mechanism_epsilon=MECHANISM_EPSILON,
        threshold="split",
    ).trials_per_arm


def epsilon_bounds(seed: int, trials: int, levels: tuple[float, ...]) -> list[float]:
    """ε_LB at each level from ONE run of the Laplace audit (the kind's own path)."""
    config = parse_config(
        {
            "audit": {
                "name": "plan-check",
                "kinds": ["mechanism"],
                "seed": seed,
                "confidence_level": CONFIDENCE,
                "delta": DELTA,
            },
            "mechanism": {
                "name": "laplace",
                "sensitivity": 1.0,
                "epsilon": MECHANISM_EPSILON,
                "trials": trials,
                "threshold": "split",
            },
        }
    )
    kind = get_kind("mechanism")
    section = config.section("mechanism")
    context = run_context(config)
    work = kind.plan(section, context)
    outputs = {unit: work.fn(work.spec, unit) for unit in work.units}
    out = []
    for level in levels:
        summary = kind.summarise(section, context, outputs, level=level)
        (eps,) = [c for c in summary.comparisons if c.parameter == "epsilon" and c.in_verdict]
        out.append(eps.lower.value)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=400)
    parser.add_argument("--first-seed", type=int, default=1000)
    args = parser.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    n95, n975 = plan(0.95), plan(0.975)
    # The level the verdict gives each of a Laplace file's two comparisons (ε and μ).
    budget = 1.0 - (1.0 - CONFIDENCE) / 2
    print(
        f"plan: {n95} trials per arm at confidence 0.95; {n975} at 0.975; seeds "
        f"{seeds.start}..{seeds.stop - 1}; load average {os.getloadavg()[0]:.1f}"
    )
    designs = [
        (f"n/2 = {round(n95 / 2)}", round(n95 / 2), (CONFIDENCE, budget)),
        (f"n = {n95}", n95, (CONFIDENCE, budget)),
        (f"2n = {2 * n95}", 2 * n95, (CONFIDENCE, budget)),
        (f"plan at 0.975 = {n975}", n975, (budget,)),
    ]
    print(
        "\n| trials per arm | ε_LB at | seeds reaching 0.95 | fraction [95 % CP] | "
        "median ε_LB [min, max] | P(≥ 10 of 20) | ε_LB > 1 (false violations) | "
        "CPU s per seed |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for label, trials, levels in designs:
        c0 = time.process_time()
        values = [epsilon_bounds(s, trials, levels) for s in seeds]
        cpu = (time.process_time() - c0) / len(seeds)
        for j, level in enumerate(levels):
            v = [row[j] for row in values]
            k = sum(x >= TARGET for x in v)
            ci = clopper_pearson(k, len(v), confidence_level=0.95)
            p = k / len(v)
            print(
                f"| {label} | {level:g} | {k} / {len(v)} | {p:.3f} [{ci.low:.3f}, "
                f"{ci.high:.3f}] | {statistics.median(v):.4f} [{min(v):.4f}, {max(v):.4f}] | "
                f"{stats.binom.sf(9, 20, p):.3f} | {sum(x > MECHANISM_EPSILON for x in v)} | "
                f"{cpu:.3f} |",
                flush=True,
            )
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
