"""Sequential (anytime-valid) mechanism audits: trials to a decision, validity under
monitoring, and the fixed designs beside them.

Every sequential figure runs the audit's own decision (:func:`dpaudit.mechanisms.sequential
.outcome`, the function ``dpaudit run`` asks after each stored round) on rounds drawn by the
kind's own unit function (:func:`dpaudit.mechanisms.units.mechanism_unit`), drawn lazily, so a
repeat costs only the rounds it reads. Repeat i uses audit seed i.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py detect --seeds 50
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py monitor --repeats 1000
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py monitor --mechanism laplace
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py certify --seeds 20
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
from scipy import stats

from dpaudit.bounds import epsilon_and_mu_lower_bounds, epsilon_from_counts, mu_from_counts
from dpaudit.kinds.base import RunContext, SequentialSettings
from dpaudit.mechanisms.schema import MechanismSection
from dpaudit.mechanisms.sequential import outcome, plan_rounds
from dpaudit.mechanisms.units import mechanism_unit
from dpaudit.planning import plan_trials
from dpaudit.sequential import select_threshold


class LazyRounds(Mapping[str, Mapping[str, np.ndarray]]):
    """The plan's rounds, each sampled by the unit function when first read."""

    def __init__(self, plan) -> None:
        self.plan, self.cache = plan, {}

    def __getitem__(self, unit: str) -> Mapping[str, np.ndarray]:
        if unit not in self.cache:
            self.cache[unit] = self.plan.fn(self.plan.spec, unit)
        return self.cache[unit]

    def __iter__(self) -> Iterator[str]:
        return iter(self.plan.units)

    def __len__(self) -> int:
        return len(self.plan.units)


def section(**kw) -> MechanismSection:
    return MechanismSection(**kw)


def context(seed: int, round_trials: int, **kw) -> RunContext:
    return RunContext(
        seed=seed,
        confidence_level=0.95,
        delta=1e-5,
        base_dir=Path("."),
        sequential=SequentialSettings(round_trials=round_trials, **kw),
    )


def run_sequential(sec: MechanismSection, seed: int, round_trials: int, level: float, **kw):
    ctx = context(seed, round_trials, **kw)
    plan = plan_rounds(sec, ctx)
    assert plan.fn is mechanism_unit
    return outcome(sec, ctx, LazyRounds(plan), level=level)


def fixed_detects(sec: MechanismSection, n: int, seed: int, level: float) -> bool:
    """The fixed split design with n trials per arm (the shipped default): does any of its
    in-verdict bounds exceed the claim?"""
    rng = np.random.default_rng([seed, 99])
    from dpaudit.mechanisms.units import build_mechanism, upper_bound

    mech = build_mechanism(sec, ".")
    up = upper_bound(sec, mech, 1e-5)
    neg, pos = mech.run(0, rng=rng, size=n), mech.run(1, rng=rng, size=n)
    eps, mu = epsilon_and_mu_lower_bounds(
        neg, pos, delta=up.epsilon_delta, confidence_level=level, threshold="split", seed=seed
    )
    return eps.value > up.epsilon or (up.mu is not None and mu.value > up.mu)


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f}"


def detect(seeds: int) -> None:
    cases = [
        (
            "gaussian mu=2, claim mu=1",
            section(name="gaussian", mu=2.0, trials=20_000, claim={"mu": 1.0}),
        ),
        (
            "gaussian sigma/10 (mu=10), claim mu=1",
            section(name="gaussian", mu=10.0, trials=20_000, claim={"mu": 1.0}),
        ),
        (
            "laplace eps=2, claim eps=1",
            section(name="laplace", epsilon=2.0, trials=20_000, claim={"epsilon": 1.0}),
        ),
    ]
    level = 1 - 0.05 / 2  # two comparisons (ε and μ) in the verdict
    for label, sec in cases:
        c0, w0 = time.process_time(), time.perf_counter()
        used, why = [], []
        for s in range(seeds):
            r = run_sequential(sec, s, 50, level)
            used.append(r.trials)
            why.append(r.decision)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        detected = why.count("violation") / seeds
        # The fixed split design at n: its detection probability over the same seeds.
        fixed = None
        for n in (50, 100, 150, 200, 250, 300, 400, 500, 600, 800, 1000, 1500, 2000):
            power = np.mean([fixed_detects(sec, n, s, level) for s in range(seeds)])
            if power >= min(detected, 0.95):
                fixed = (n, power)
                break
        print(
            f"{label}: sequential (rounds of 50) median {np.median(used):.0f}, mean "
            f"{np.mean(used):.0f}, p95 {np.quantile(used, 0.95):.0f} trials per arm; "
            f"detected {detected:.2f} of {seeds} seeds; fixed split design reaching detection "
            f"probability {min(detected, 0.95):.2f}: {fixed[0] if fixed else '>2000'} trials per "
            f"arm (power {fixed[1] if fixed else float('nan'):.2f}); {cpu:.1f} s CPU, "
            f"{wall:.1f} s wall (sequential), {load()}",
            flush=True,
        )


def monitor(repeats: int, mechanism: str) -> None:
    """A correct mechanism, decided after every round of 50 up to 2,000 per arm; the
    false-violation share against 1 − c, and the power control: the same rounds checked
    every round with the fixed-design (Clopper–Pearson) bounds at the round-0 threshold.

    ``rr``: randomized response with p = e/(1 + e), exactly ε = 1 and claimed so: its one
    threshold sits ON the claim's boundary, the hardest null for a monitored bound.
    ``laplace``: Laplace ε = 1, claim ε = 1."""
    if mechanism == "rr":
        p = float(np.e / (1 + np.e))
        sec = section(name="randomized-response", p=p, trials=2_000, claim={"epsilon": 1.0})
    else:
        sec = section(name="laplace", epsilon=1.0, trials=2_000, claim={"epsilon": 1.0})
    level = 1 - 0.05 / 2
    c0, w0 = time.process_time(), time.perf_counter()
    false_seq = false_fixed = 0
    for s in range(repeats):
        ctx = context(s, 50)
        plan = plan_rounds(sec, ctx)
        rounds = LazyRounds(plan)
        r = outcome(sec, ctx, rounds, level=level)
        false_seq += r.decision == "violation"
        # Uncorrected: Clopper–Pearson at each round, stop when it crosses the claim.
        first = rounds[plan.units[0]]
        te, *_ = select_threshold(
            first["negative"], first["positive"], parameter="epsilon", delta=0.0, level=level
        )
        tm, *_ = select_threshold(
            first["negative"], first["positive"], parameter="mu", delta=0.0, level=level
        )
        fpe = fne = fpm = fnm = n = 0
        crossed = False
        for unit in plan.units[1:]:
            part = rounds[unit]
            neg, pos = part["negative"], part["positive"]
            n += neg.size
            fpe += int(np.sum(neg >= te))
            fne += int(np.sum(pos < te))
            fpm += int(np.sum(neg >= tm))
            fnm += int(np.sum(pos < tm))
            e = epsilon_from_counts(fpe, n, fne, n, delta=0.0, confidence_level=level).value
            m = mu_from_counts(fpm, n, fnm, n, confidence_level=level).value
            if e > r.uppers["epsilon"] or m > r.uppers["mu"]:
                crossed = True
                break
        false_fixed += crossed
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    alpha = 1 - 0.95
    hi = stats.beta.ppf(0.95, false_seq + 1, repeats - false_seq)
    lo = stats.beta.ppf(0.05, false_fixed, repeats - false_fixed + 1) if false_fixed else 0.0
    print(
        f"monitored correct {mechanism} (eps=1, claim 1), {repeats} audits, rounds of 50 to 2,000 "
        f"per arm (40 looks): sequential false violations {false_seq}/{repeats} "
        f"(95% upper limit {hi:.4f} vs 1 - c = {alpha:.2f}); uncorrected fixed-design bound "
        f"checked every round: {false_fixed}/{repeats} (95% lower limit {lo:.4f}); "
        f"{cpu:.1f} s CPU, {wall:.1f} s wall, {load()}",
        flush=True,
    )


def certify(seeds: int) -> None:
    for tight, rt in ((0.5, 100), (0.9, 1000)):
        sec = section(name="laplace", epsilon=1.0, trials=200_000, claim={"epsilon": 1.0})
        level = 1 - 0.05 / 2
        c0, w0 = time.process_time(), time.perf_counter()
        runs = [run_sequential(sec, s, rt, level, certify_tightness=tight) for s in range(seeds)]
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        used = [r.trials for r in runs]
        why = [r.decision for r in runs]
        plan = plan_trials(tight, 0.0, level, tradeoff="laplace", mechanism_epsilon=1.0)
        print(
            f"certify eps_LB >= {tight} eps (Laplace eps=1, rounds of {rt}): median "
            f"{np.median(used):.0f}, mean {np.mean(used):.0f}, p95 {np.quantile(used, 0.95):.0f} "
            f"trials per arm over {seeds} seeds ({why.count('target')} certified); fixed plan "
            f"(dpaudit plan, split, level {level}): {plan.trials_per_arm}; audits/laplace.toml: "
            f"100000; {cpu:.1f} s CPU, {wall:.1f} s wall, {load()}",
            flush=True,
        )


def main() -> None:
    import threadpoolctl  # noqa: F401  (OMP_NUM_THREADS=1 is set by the command line)

    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["detect", "monitor", "certify"])
    p.add_argument("--seeds", type=int, default=50)
    p.add_argument("--repeats", type=int, default=1000)
    p.add_argument("--mechanism", choices=["rr", "laplace"], default="rr")
    a = p.parse_args()
    {
        "detect": lambda: detect(a.seeds),
        "monitor": lambda: monitor(a.repeats, a.mechanism),
        "certify": lambda: certify(a.seeds),
    }[a.what]()


if __name__ == "__main__":
    main()
