"""The identification game played sequentially: games to a decision against the fixed design.

Every figure runs the kind's own decision (:func:`dpaudit.reconstruction.sequential.outcome`,
what ``dpaudit run`` asks after each stored round) on rounds played by the kind's own unit
function (:func:`dpaudit.reconstruction.units.sequential_reconstruction_unit`); every round up
to the cap is played (games are cheap) because the fixed design beside it reads them all.
Seed i is audit seed i. The fixed design beside it is
the Clopper–Pearson bound (:func:`dpaudit.bounds.identification_epsilon_lower_bound`) on the
first n games of the SAME seeds: the smallest n on the grid of whole rounds at which at least
95 % of the seeds reach the goal, and the 10,000 games of ``audits/reconstruction-game.toml``.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential_game.py --seeds 40
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from dpaudit.bounds import identification_epsilon_lower_bound
from dpaudit.kinds.base import RunContext, SequentialSettings
from dpaudit.reconstruction.schema import ReconstructionSection
from dpaudit.reconstruction.sequential import ROUND_PREFIX, outcome, plan_rounds


class LazyRounds(Mapping[str, Mapping[str, np.ndarray]]):
    """The plan's game rounds, each played by the unit function when first read (once)."""

    def __init__(self, plan) -> None:
        self.plan, self.cache = plan, {}
        self.names = [u for u in plan.units if u.startswith(ROUND_PREFIX)]

    def __getitem__(self, unit: str) -> Mapping[str, np.ndarray]:
        if unit not in self.cache:
            self.cache[unit] = self.plan.fn(self.plan.spec, unit)
        return self.cache[unit]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


CASES = {
    # name: (game table, [audit] certify_epsilon)
    "planted σ 0.3, claimed 3 (k = 1797)": (
        {"noise_multiplier": 0.3, "claimed_noise_multiplier": 3.0},
        None,
    ),
    "planted σ 0.2, claimed 3 (k = 1797)": (
        {"noise_multiplier": 0.2, "claimed_noise_multiplier": 3.0},
        None,
    ),
    "correct σ 3 (k = 1797), no target": ({"noise_multiplier": 3.0}, None),
    "correct σ 1 (k = 10), certify ε ≥ 0.25": (
        {"noise_multiplier": 1.0, "candidates": 10},
        0.25,
    ),
}


def run_case(game: dict, certify: float | None, seeds: int, round_trials: int, cap: int):
    used, reasons, fixed_hits = [], [], []
    cpu = time.process_time()
    for seed in range(seeds):
        section = ReconstructionSection(
            hidden=[4],
            batches=2,
            attack="analytic",
            game={**game, "trials": cap},
        )
        context = RunContext(
            seed=seed,
            confidence_level=0.95,
            delta=1e-5,
            base_dir=Path("."),
            sequential=SequentialSettings(round_trials=round_trials, certify_epsilon=certify),
        )
        plan = plan_rounds(section, context)
        rounds = LazyRounds(plan)
        # one pass over every round stops where the audit, asking after each stored round,
        # stops: the decision is the first that is not "continue" (dpaudit.sequential.game)
        result = outcome(section, context, rounds, level=0.95)
        used.append(result.trials)
        reasons.append(result.decision)
        # the fixed design on the same seed's games: does the first n reach the goal?
        rule = result.rule
        goal = rule.upper if certify is None else certify
        won = np.concatenate([rounds[u]["correct"] for u in rounds.names]).astype(int)
        hits = []
        for n in range(round_trials, cap + 1, round_trials):
            value = identification_epsilon_lower_bound(
                int(won[:n].sum()),
                n,
                candidates=section.game.candidates,
                delta=rule.delta,
                confidence_level=rule.level,
            ).value
            hits.append(goal is not None and (value > goal if certify is None else value >= goal))
        fixed_hits.append(hits)
    share = np.mean(np.array(fixed_hits), axis=0)
    reach = np.nonzero(share >= 0.95)[0]
    fixed95 = None if reach.size == 0 else int((reach[0] + 1) * round_trials)
    return np.array(used), reasons, fixed95, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--round-trials", type=int, default=100)
    parser.add_argument("--cap", type=int, default=10_000)
    args = parser.parse_args()
    t0 = time.perf_counter()
    print(
        "| game | sequential median / mean / p95 games | stopped because | "
        "fixed, ≥ 95 % of seeds reach the goal | CPU |"
    )
    print("|---|---|---|---|---|")
    for name, (game, certify) in CASES.items():
        used, reasons, fixed95, cpu = run_case(
            game, certify, args.seeds, args.round_trials, args.cap
        )
        stops = ", ".join(f"{r} {reasons.count(r)}" for r in sorted(set(reasons)))
        fixed = "not within the cap" if fixed95 is None else f"{fixed95:,}"
        if certify is None and "violation" not in reasons:
            fixed = "— (the claim holds: nothing to reach)"
        print(
            f"| {name} | {np.median(used):,.0f} / {used.mean():,.0f} / "
            f"{np.quantile(used, 0.95):,.0f} | {stops} | {fixed} | {cpu:.1f} s |",
            flush=True,
        )
    print(f"wall {time.perf_counter() - t0:.1f} s, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
