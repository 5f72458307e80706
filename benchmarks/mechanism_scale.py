"""Bounds at scale: a Laplace mechanism audit at 10⁶ trials per arm.

Two measurements, each the median of ``--rounds`` rounds (≥ 3), CPU seconds
(``time.process_time`` in-process, children's user + sys for the CLI) next to wall time,
one thread (OMP/MKL/OpenBLAS threads = 1), the 1-minute load average printed with each:

1. The two bounds alone (``split``) on 10⁶ Laplace(0, 1) and 10⁶ Laplace(1, 1) scores:
   ``epsilon_lower_bound`` then ``mu_lower_bound`` (two calls), and
   ``epsilon_and_mu_lower_bounds`` (one call sharing the split, the selection curve and
   the Beta inversions); with ``--full-scan`` also the two calls with the full scan (one
   Beta inversion per distinct threshold, ``threshold_search.full_scan`` + ``np.argmax``,
   patched in for the ``best_threshold`` that ``bounds`` calls; one round, it takes
   ~20 s). All must give identical bounds.
2. ``dpaudit run`` end to end on ``audits/laplace.toml`` with ``trials = 1_000_000``,
   fresh run directory each round; with ``--baseline-src DIR`` (a checkout of the tree
   before the change, e.g. ``git worktree add /tmp/base <commit>``) the same command is
   also run with ``PYTHONPATH=DIR``, alternating with the current tree round by round so
   that both see the same load.

Run: ``.venv/bin/python benchmarks/mechanism_scale.py [--rounds 3] [--baseline-src DIR]
[--full-scan]``
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
from dpaudit.bounds import threshold_search  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _full_scan(
    curve: Any,
    *,
    level_fpr: float,
    level_fnr: float,
    bound: threshold_search.Bound,
    cache: Any = None,
) -> threshold_search.Best:
    """The reference selection: every threshold's bound, then the first maximiser."""
    values, fpr_hi, fnr_hi = threshold_search.full_scan(
        curve, level_fpr=level_fpr, level_fnr=level_fnr, bound=bound
    )
    i = int(np.argmax(values))
    return threshold_search.Best(i, float(values[i]), float(fpr_hi[i]), float(fnr_hi[i]))


def _load() -> float:
    return os.getloadavg()[0]


def _timed(fn: Callable[[], Any], rounds: int) -> tuple[Any, float, float, list[float]]:
    cpu, wall, loads, out = [], [], [], None
    for _ in range(rounds):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
        loads.append(_load())
    return out, statistics.median(cpu), statistics.median(wall), loads


def _loads(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def bounds_only(trials: int, rounds: int, full_scan: bool) -> None:
    rng = np.random.default_rng(0)
    neg, pos = rng.laplace(0.0, 1.0, trials), rng.laplace(1.0, 1.0, trials)
    kw: dict[str, Any] = {"confidence_level": 0.975, "seed": 0}

    def separately() -> tuple[bounds.EpsilonBound, bounds.MuBound]:
        e = bounds.epsilon_lower_bound(neg, pos, delta=0.0, **kw)
        m = bounds.mu_lower_bound(neg, pos, **kw)
        return e, m

    def together() -> tuple[bounds.EpsilonBound, bounds.MuBound]:
        return bounds.epsilon_and_mu_lower_bounds(neg, pos, delta=0.0, **kw)

    print(f"bounds only, {trials:,} per arm (ε and μ, split), median of {rounds}:")
    results = {}
    if full_scan:
        # bounds.py calls best_threshold by the name it imported: swap that name.
        pruned = bounds.best_threshold
        bounds.best_threshold = _full_scan
        try:
            results["full"], cpu, wall, loads = _timed(separately, 1)
        finally:
            bounds.best_threshold = pruned
        print(
            f"  full scan, two calls (1 round) : {cpu:6.2f} s CPU  {wall:6.2f} s wall  "
            f"(load {_loads(loads)})"
        )
    results["two"], cpu, wall, loads = _timed(separately, rounds)
    print(
        f"  pruned, two calls              : {cpu:6.2f} s CPU  {wall:6.2f} s wall  "
        f"(load {_loads(loads)})"
    )
    results["one"], cpu, wall, loads = _timed(together, rounds)
    print(
        f"  pruned, one call for both      : {cpu:6.2f} s CPU  {wall:6.2f} s wall  "
        f"(load {_loads(loads)})"
    )
    dicts = {k: [b.to_dict() for b in v] for k, v in results.items()}
    same = all(d == dicts["one"] for d in dicts.values())
    e, m = results["one"]
    print(f"  ε_LB = {e.value:.6f}, μ_LB = {m.value:.6f}; identical across {sorted(dicts)}: {same}")


def _run_once(exe: str, path: Path, out: str, env: dict[str, str]) -> tuple[float, float]:
    cmd = [exe, "run", str(path), "-o", out, "-q"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - w0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return cpu, wall


def end_to_end(trials: int, rounds: int, baseline: str | None) -> None:
    audit = (ROOT / "audits" / "laplace.toml").read_text()
    audit = audit.replace("trials = 100_000 ", f"trials = {trials:_} ")
    exe = str(Path(sys.executable).with_name("dpaudit"))
    trees: dict[str, dict[str, str]] = {}
    if baseline is not None:
        trees["before"] = {**os.environ, "PYTHONPATH": baseline}
    trees["after"] = dict(os.environ)
    cpu: dict[str, list[float]] = {k: [] for k in trees}
    wall: dict[str, list[float]] = {k: [] for k in trees}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "laplace-1m.toml"
        path.write_text(audit)
        for r in range(rounds):
            for label, env in trees.items():
                c, w = _run_once(exe, path, f"{tmp}/{label}{r}", env)
                cpu[label].append(c)
                wall[label].append(w)
            loads.append(_load())
    for label in trees:
        print(
            f"dpaudit run, laplace at {trials:,} per arm ({label}), median of {rounds}: "
            f"{statistics.median(cpu[label]):.2f} s CPU  {statistics.median(wall[label]):.2f} s "
            f"wall  (rounds CPU: {', '.join(f'{c:.2f}' for c in cpu[label])}; load after each "
            f"round: {_loads(loads)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-src", default=None)
    parser.add_argument("--skip-cli", action="store_true")
    parser.add_argument("--skip-bounds", action="store_true")
    parser.add_argument("--full-scan", action="store_true")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (medians of 3 or more)")
    print(f"load average at start: {os.getloadavg()}")
    if not args.skip_bounds:
        bounds_only(args.trials, args.rounds, args.full_scan)
    if not args.skip_cli:
        end_to_end(args.trials, args.rounds, args.baseline_src)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
