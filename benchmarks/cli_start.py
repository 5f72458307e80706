"""CPU time of the commands a user runs first: `dpaudit --help`, `validate`, `init`.

Each command runs in a fresh process; its CPU time (user + system, from
`resource.getrusage(RUSAGE_CHILDREN)`) is what this machine spent, whatever else loads it.
Medians of several rounds. Goal (issue "A release gate you can trust"): under 0.5 s each.

    .venv/bin/python benchmarks/cli_start.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DPAUDIT = str(Path(sys.executable).parent / "dpaudit")


def cpu_and_wall(args: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([DPAUDIT, *args], check=True, capture_output=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    out = Path(tempfile.mkdtemp()) / "init.toml"
    commands = {
        "dpaudit --help": ["--help"],
        "dpaudit --version": ["--version"],
        "dpaudit validate audits/laplace.toml": ["validate", "audits/laplace.toml"],
        "dpaudit validate audits/quickstart.toml": ["validate", "audits/quickstart.toml"],
        "dpaudit init --kind dpsgd": ["init", "--kind", "dpsgd", "-o", str(out), "--force"],
    }
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min); rounds: {rounds}")
    print(f"{'command':45s} {'CPU s (median, min)':>22s} {'wall s (median)':>16s}")
    for name, args in commands.items():
        cpu_and_wall(args)  # warm the file cache
        runs = [cpu_and_wall(args) for _ in range(rounds)]
        cpu = [c for c, _ in runs]
        wall = [w for _, w in runs]
        print(
            f"{name:45s} {statistics.median(cpu):>12.3f} ({min(cpu):.3f}) "
            f"{statistics.median(wall):>16.3f}"
        )


if __name__ == "__main__":
    main()
