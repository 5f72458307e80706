"""`dpaudit --help` and `validate audits/laplace.toml` before and after a layout change.

Both trees run in the same session, rounds interleaved (before, after, before, ...), each
command in a fresh process with PYTHONPATH pointing at one tree's source. CPU = user +
system of the child (``getrusage(RUSAGE_CHILDREN)``); medians of the rounds after one
warm-up each.

    git archive <before-commit> | tar -x -C /tmp/before
    .venv/bin/python benchmarks/layout_start.py --before /tmp/before [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DPAUDIT = str(Path(sys.executable).parent / "dpaudit")
COMMANDS = {
    "dpaudit --help": ["--help"],
    "dpaudit validate audits/laplace.toml": ["validate", "audits/laplace.toml"],
}


def cpu_and_wall(args: list[str], tree: Path) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([DPAUDIT, *args], check=True, capture_output=True, cwd=tree, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the earlier tree's root")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": ROOT}
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min); rounds: {args.rounds}")
    print(f"{'command':40s} {'tree':7s} {'CPU s median (min)':>20s} {'wall s median':>14s}")
    for name, command in COMMANDS.items():
        runs: dict[str, list[tuple[float, float]]] = {t: [] for t in trees}
        for tree in trees.values():
            cpu_and_wall(command, tree)  # warm the file cache
        for _ in range(args.rounds):
            for label, tree in trees.items():
                runs[label].append(cpu_and_wall(command, tree))
        for label, measured in runs.items():
            cpu = [c for c, _ in measured]
            wall = [w for _, w in measured]
            print(
                f"{name:40s} {label:7s} {statistics.median(cpu):>12.3f} ({min(cpu):.3f}) "
                f"{statistics.median(wall):>14.3f}"
            )
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
