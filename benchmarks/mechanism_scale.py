"""Bounds at scale: a Laplace mechanism audit at 10⁶ trials per arm (issue: priority 1).

Two measurements, each the median of ``--rounds`` rounds, CPU seconds
(``time.process_time`` in-process, children's user + sys for the CLI) next to wall time,
one thread (OMP/MKL/OpenBLAS threads = 1), the 1-minute load average printed:

1. The two bounds alone (``epsilon_lower_bound`` and ``mu_lower_bound``, ``split``) on
   10⁶ Laplace(0, 1) and 10⁶ Laplace(1, 1) scores: today's full scan (one Beta inversion
   per distinct threshold, ``_curve_bounds`` + ``np.argmax``, patched back in) against
   the pruned search of ``bounds._best_threshold``; the bounds must be identical.
2. ``dpaudit run`` end to end on ``audits/laplace.toml`` with ``trials = 1_000_000``,
   fresh run directory each round; with ``--baseline-src DIR`` (a checkout of the tree
   before the change, e.g. ``git worktree add /tmp/base <commit>``) the same command is
   also run with ``PYTHONPATH=DIR``.

Run: ``.venv/bin/python benchmarks/mechanism_scale.py [--rounds 3] [--baseline-src DIR]``
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from dpaudit import bounds  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _full_scan(curve: Any, *, level_fpr: float, level_fnr: float, parameter: str, delta: float):
    """Today's selection: every threshold's bound, then the first maximiser."""
    values, fpr_hi, fnr_hi = bounds._curve_bounds(
        curve, level_fpr=level_fpr, level_fnr=level_fnr, parameter=parameter, delta=delta
    )
    i = int(np.argmax(values))
    return bounds._Best(i, float(values[i]), float(fpr_hi[i]), float(fnr_hi[i]))


def _timed(fn: Callable[[], Any], rounds: int) -> tuple[Any, float, float]:
    cpu, wall, out = [], [], None
    for _ in range(rounds):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return out, statistics.median(cpu), statistics.median(wall)


def bounds_only(trials: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    neg, pos = rng.laplace(0.0, 1.0, trials), rng.laplace(1.0, 1.0, trials)

    def both() -> tuple[bounds.EpsilonBound, bounds.MuBound]:
        e = bounds.epsilon_lower_bound(neg, pos, delta=0.0, confidence_level=0.975, seed=0)
        m = bounds.mu_lower_bound(neg, pos, confidence_level=0.975, seed=0)
        return e, m

    pruned = bounds._best_threshold
    bounds._best_threshold = _full_scan  # type: ignore[assignment]
    try:
        before, cpu0, wall0 = _timed(both, rounds)
    finally:
        bounds._best_threshold = pruned
    after, cpu1, wall1 = _timed(both, rounds)
    same = all(a.to_dict() == b.to_dict() for a, b in zip(before, after, strict=True))
    print(f"bounds only, {trials:,} per arm (ε and μ, split), median of {rounds}:")
    print(f"  full scan : {cpu0:6.2f} s CPU  {wall0:6.2f} s wall")
    print(f"  pruned    : {cpu1:6.2f} s CPU  {wall1:6.2f} s wall  ({cpu0 / cpu1:.0f}× less CPU)")
    print(f"  ε_LB = {after[0].value:.6f}, μ_LB = {after[1].value:.6f}; identical: {same}")


def end_to_end(trials: int, rounds: int, src: str | None, label: str) -> None:
    audit = (ROOT / "audits" / "laplace.toml").read_text()
    audit = audit.replace("trials = 100_000 ", f"trials = {trials:_} ")
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    exe = str(Path(sys.executable).with_name("dpaudit"))
    cpu, wall = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "laplace-1m.toml"
        path.write_text(audit)
        for r in range(rounds):
            cmd = [exe, "run", str(path), "-o", f"{tmp}/run{r}", "-q"]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            w0 = time.perf_counter()
            subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL)
            wall.append(time.perf_counter() - w0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    print(
        f"dpaudit run, laplace at {trials:,} per arm ({label}), median of {rounds}: "
        f"{statistics.median(cpu):.2f} s CPU  {statistics.median(wall):.2f} s wall  "
        f"(rounds CPU: {', '.join(f'{c:.2f}' for c in cpu)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", default=None)
    parser.add_argument("--skip-cli", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    bounds_only(args.trials, args.rounds)
    if not args.skip_cli:
        if args.baseline_src:
            end_to_end(args.trials, args.rounds, args.baseline_src, "before")
        end_to_end(args.trials, args.rounds, None, "after")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
