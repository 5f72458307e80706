"""A benchmark of known DP bugs: does dpaudit catch each one, with how many trials, at
what CPU cost, and does each fixed implementation pass?

Each bug class is a pair of audit files in ``benchmarks/zoo/`` (``<class>-buggy.toml``,
``<class>-fixed.toml``) over the plug-ins ``benchmarks/zoo/zoo_mechanisms.py`` (no
``score`` key: the default ``score = "auto"`` learns a score for these user mechanisms, on
the known worst-case pair; the float Laplace by ``score = "floating"``) and
``benchmarks/zoo/zoo_trainers.py`` (DP-SGD, white-box Dirac canary).
For each class:

1. **Buggy, a doubling ladder.** The buggy audit runs at ``--start`` trials per arm,
   then twice as many, and so on, until it exits 1 (``verdict == "fail"``); reported:
   the smallest rung that exits 1, its CPU seconds (``time.process_time``, one torch
   thread, the audit run in this process) and its lower bound against the claim. A
   rung above ``--cpu-limit`` seconds ends the ladder (not caught). Where a search
   applies, the same ladder runs again with the pair removed and a
   ``[mechanism.search]`` table given D alone (``--no-search`` skips it).
2. **Fixed, repeated.** The fixed audit runs at max(``--fixed-min-trials``, the rung
   that caught the buggy one) trials per arm (DP-SGD: at least 2,000 models per arm), at
   ``--seeds`` seeds. Each run of an
   audit whose claim is true exits 1 with probability at most 1 − c (c = 0.95: the one
   verdict budget), so over R independent seeds the number of failures is dominated by
   Binomial(R, 0.05); the ceiling is its 0.999 quantile, ``binom.ppf(0.999, R, 0.05)``
   (13 at R = 100), which a correct implementation exceeds with probability < 0.001.
3. ``--scalar``: the learned score's cost on scalar mechanisms, re-measured:
   ``audits/learned-laplace.toml`` (ε_LB, ε = 1) and ``audits/learned-gaussian.toml``
   (μ_LB, μ = 1) at 10⁵ trials per arm over seeds 0..``--scalar-seeds``−1.

Run (from the repository root)::

    .venv/bin/python benchmarks/bug_zoo.py --scalar        # every class, 100 seeds
    .venv/bin/python benchmarks/bug_zoo.py --only svt-alg5 --seeds 20
    .venv/bin/python benchmarks/bug_zoo.py --scalar --skip-zoo

Results and the exact command are in benchmarks/RESULTS.md ("Bug zoo").
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from scipy.stats import binom

ROOT = Path(__file__).resolve().parents[1]
ZOO = ROOT / "benchmarks" / "zoo"
sys.path.insert(0, str(ROOT))

from dpaudit.audit import run_audit  # noqa: E402
from dpaudit.config import load_config_text  # noqa: E402


@dataclass(frozen=True)
class BugClass:
    """One bug class: its audit files and where the bug was published."""

    name: str
    buggy: str
    fixed: str
    source: str
    #: The ``[mechanism.search]`` table that replaces the known pair (its ``data`` is D
    #: alone), or ``None`` where a search does not apply (DP-SGD; the floating score).
    search: str | None = None
    #: Trials per arm of the fixed audits at least (``None``: ``--fixed-min-trials``);
    #: DP-SGD trains a model per trial, so its fixed runs stay at a few thousand.
    fixed_min: int | None = None


_X = 'data = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]\nneighbours = "queries"\n'


BUGS: tuple[BugClass, ...] = (
    BugClass("svt-alg3", "svt-alg3-buggy", "svt-alg3-fixed", "Lyu, Su, Li 2017, Alg. 3", _X),
    BugClass("svt-alg4", "svt-alg4-buggy", "svt-alg4-fixed", "Lyu, Su, Li 2017, Alg. 4", _X),
    BugClass("svt-alg5", "svt-alg5-buggy", "svt-alg5-fixed", "Lyu, Su, Li 2017, Alg. 5", _X),
    BugClass("svt-alg6", "svt-alg6-buggy", "svt-alg6-fixed", "Lyu, Su, Li 2017, Alg. 6", _X),
    BugClass(
        "noisy-max-value",
        "noisy-max-value-buggy",
        "noisy-max-value-fixed",
        "Ding et al. 2018, noisy max returning its value",
        'data = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]\nneighbours = "queries"\n',
    ),
    BugClass(
        "histogram-replace-one",
        "histogram-replace-one-buggy",
        "histogram-replace-one-fixed",
        "add/remove calibration under replace-one",
        'data = [0.2, 0.7]\nneighbours = "records"\nvalues = [0.2, 0.7]\n'
        'relation = "replace-one"\n',
    ),
    BugClass(
        "laplace-l2-sensitivity",
        "laplace-l2-sensitivity-buggy",
        "laplace-l2-sensitivity-fixed",
        "Laplace scaled by ℓ2 sensitivity",
        'data = [0, 0, 0, 0]\nneighbours = "queries"\n',
    ),
    BugClass(
        "gaussian-log10",
        "gaussian-log10-buggy",
        "gaussian-log10-fixed",
        "classic Gaussian σ with log10",
        'data = [0]\nneighbours = "queries"\n',
    ),
    BugClass(
        "k-rr-shifted",
        "k-rr-shifted-buggy",
        "k-rr-shifted-fixed",
        "k-RR keep probability of one variant, sampler of the other",
        'data = [0]\nneighbours = "records"\nvalues = [0, 1, 2, 3]\nrelation = "replace-one"\n',
    ),
    BugClass(
        "exponential-sensitivity",
        "exponential-sensitivity-buggy",
        "exponential-sensitivity-fixed",
        "exponential mechanism without the 1/2",
        "data = [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
        'neighbours = "queries"\n',
    ),
    BugClass(
        "clipping-missing",
        "clipping-missing-buggy",
        "clipping-missing-fixed",
        "sum never clipped to its domain",
        'data = [0.5]\nneighbours = "records"\nvalues = [0, 1, 3]\nrelation = "add-remove"\n',
    ),
    BugClass(
        "dpsgd-half-noise",
        "dpsgd-half-noise-buggy",
        "dpsgd-correct-fixed",
        "DP-SGD runs σ/2, accountant told σ",
        fixed_min=2_000,
    ),
    BugClass(
        "dpsgd-wrong-rate",
        "dpsgd-wrong-rate-buggy",
        "dpsgd-correct-fixed",
        "DP-SGD samples at 5q, accountant told q",
        fixed_min=2_000,
    ),
    BugClass(
        "dpsgd-per-layer",
        "dpsgd-per-layer-buggy",
        "dpsgd-per-layer-fixed",
        "per-tensor clipping, noise made for one tensor",
        fixed_min=2_000,
    ),
    BugClass(
        "float-laplace",
        "float-laplace-buggy",
        "float-laplace-fixed",
        "Mironov 2012, textbook floating-point Laplace",
    ),
)

_TRIALS = re.compile(r"^trials = [0-9_]+$", re.MULTILINE)
_SEED = re.compile(r"^seed = [0-9]+$", re.MULTILINE)


@dataclass(frozen=True)
class Run:
    """One audit run: exit code, CPU seconds, and its in-verdict bounds."""

    exit_code: int
    cpu: float
    bounds: dict[str, tuple[float, float]]  # parameter → (lower, upper)

    def describe(self) -> str:
        return ", ".join(f"{p}_LB {lo:.3f} vs {up:.4g}" for p, (lo, up) in self.bounds.items())


def audit_text(
    path: Path, *, trials: int | None = None, seed: int | None = None, search: str | None = None
) -> str:
    """The audit file's text with its trials and seed replaced; with ``search``, the known
    pair (``data``) is removed and the search table appended."""
    text = path.read_text()
    if search is not None:
        text = re.sub(r"^data = .*$\n", "", text, count=1, flags=re.MULTILINE)
        text += f"\n[mechanism.search]\n{search}"
    if trials is not None:
        if not _TRIALS.search(text):
            raise SystemExit(f"{path}: no 'trials = N' line to replace")
        text = _TRIALS.sub(f"trials = {trials}", text, count=1)
    if seed is not None:
        text = _SEED.sub(f"seed = {seed}", text, count=1)
    return text


def run_text(text: str, *, base_dir: Path, source: str) -> Run:
    """Run one audit in this process, in a fresh run directory; time its CPU."""
    config = load_config_text(text, base_dir=base_dir, source=source)
    with tempfile.TemporaryDirectory(prefix="bug-zoo-") as out:
        start = time.process_time()
        result = run_audit(config, output_dir=out, write=False)
        cpu = time.process_time() - start
    # one entry per parameter: the comparison nearest to (or furthest above) its upper
    # bound; a search audits several pairs, each its own comparison
    bounds: dict[str, tuple[float, float]] = {}
    for c in result.comparisons:
        if not c.in_verdict or c.upper is None:
            continue
        lower, upper = float(c.lower.value), float(c.upper)
        kept = bounds.get(c.parameter)
        if kept is None or lower / upper > kept[0] / kept[1]:
            bounds[c.parameter] = (lower, upper)
    return Run(0 if result.verdict == "pass" else 1, cpu, bounds)


def ladder(
    name: str, *, start: int, cpu_limit: float, max_trials: int, search: str | None = None
) -> tuple[int | None, Run]:
    """The smallest rung of ``start``·2^k trials per arm at which the audit exits 1."""
    path = ZOO / f"{name}.toml"
    trials = start
    label = f"{name} (search)" if search is not None else name
    while True:
        text = audit_text(path, trials=trials, search=search)
        run = run_text(text, base_dir=ZOO, source=str(path))
        print(
            f"  {label} at {trials}: exit {run.exit_code}, {run.cpu:.1f} s CPU, {run.describe()}",
            flush=True,
        )
        if run.exit_code == 1:
            return trials, run
        if run.cpu > cpu_limit or trials * 2 > max_trials:
            return None, run
        trials *= 2


def fixed_passes(name: str, *, trials: int | None, seeds: int) -> tuple[int, float, list[float]]:
    """Failures of the fixed audit over seeds 0..seeds−1, median CPU, and the bounds."""
    path = ZOO / f"{name}.toml"
    failures, cpus, lowers = 0, [], []
    for seed in range(seeds):
        run = run_text(audit_text(path, trials=trials, seed=seed), base_dir=ZOO, source=str(path))
        failures += run.exit_code
        cpus.append(run.cpu)
        lowers.append(max(lo / up if up > 0 else 0.0 for lo, up in run.bounds.values()))
    return failures, float(np.median(cpus)), lowers


def scalar_figures(seeds: int) -> None:
    """ε_LB of learned-laplace and μ_LB of learned-gaussian at 10⁵ trials per arm."""
    for audit, parameter in (("learned-laplace", "epsilon"), ("learned-gaussian", "mu")):
        path = ROOT / "audits" / f"{audit}.toml"
        values, cpus = [], []
        for seed in range(seeds):
            run = run_text(audit_text(path, seed=seed), base_dir=path.parent, source=str(path))
            values.append(run.bounds[parameter][0])
            cpus.append(run.cpu)
        print(
            f"| `{audit}` | {parameter}_LB | {np.median(values):.3f} | {min(values):.3f} | "
            f"{max(values):.3f} | {np.median(cpus):.1f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="bug classes to run (default: all)")
    parser.add_argument("--seeds", type=int, default=100, help="seeds of each fixed audit")
    parser.add_argument(
        "--fixed-min-trials",
        type=int,
        default=20_000,
        help="the fixed audits run at max(this, the buggy's catching rung) trials per arm",
    )
    parser.add_argument("--no-search", action="store_true", help="skip the search ladders")
    parser.add_argument("--start", type=int, default=250, help="first rung, trials per arm")
    parser.add_argument("--cpu-limit", type=float, default=60.0, help="CPU s per rung")
    parser.add_argument("--max-trials", type=int, default=1_024_000, help="last rung")
    parser.add_argument("--scalar", action="store_true", help="re-measure the scalar figures")
    parser.add_argument("--scalar-seeds", type=int, default=10)
    parser.add_argument("--skip-zoo", action="store_true")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    load = os.getloadavg()[0]
    wall = time.perf_counter()
    rows = []
    for bug in BUGS if not args.skip_zoo else ():
        if args.only and bug.name not in args.only:
            continue
        print(f"{bug.name} ({bug.source})", flush=True)
        trials, caught = ladder(
            bug.buggy, start=args.start, cpu_limit=args.cpu_limit, max_trials=args.max_trials
        )
        searched: tuple[int | None, Run] | None = None
        if bug.search is not None and not args.no_search:
            searched = ladder(
                bug.buggy,
                start=args.start,
                cpu_limit=args.cpu_limit,
                max_trials=args.max_trials,
                search=bug.search,
            )
        minimum = bug.fixed_min if bug.fixed_min is not None else args.fixed_min_trials
        fixed_trials = max(minimum, trials or 0)
        failures, cpu, lowers = fixed_passes(bug.fixed, trials=fixed_trials, seeds=args.seeds)
        ceiling = int(binom.ppf(0.999, args.seeds, 0.05))
        rows.append((bug, trials, caught, searched, fixed_trials, failures, ceiling, cpu, lowers))
        print(
            f"  fixed {bug.fixed} at {fixed_trials}: {failures} of {args.seeds} exit 1 "
            f"(ceiling {ceiling}), median {cpu:.1f} s CPU",
            flush=True,
        )
    if rows:
        print(
            "\n| bug class | source | pair known: caught at (trials/arm) | CPU s | "
            "bound vs claim | search: caught at | CPU s | fixed: trials/arm | "
            f"fixed: exit 1 of {args.seeds} (ceiling) | fixed: median max(bound/claim) | "
            "fixed: median CPU s |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for bug, trials, caught, searched, f_trials, failures, ceiling, cpu, lowers in rows:
            at = f"{trials:,}" if trials is not None else "not caught"
            s_at, s_cpu = "n/a", ""
            if searched is not None:
                s_at = f"{searched[0]:,}" if searched[0] is not None else "not caught"
                s_cpu = f"{searched[1].cpu:.1f}"
            print(
                f"| {bug.name} | {bug.source} | {at} | {caught.cpu:.1f} | {caught.describe()} | "
                f"{s_at} | {s_cpu} | {f_trials:,} | {failures} ({ceiling}) | "
                f"{np.median(lowers):.3f} | {cpu:.2f} |"
            )
    if args.scalar:
        print(
            "\n| audit | bound | median | min | max | CPU s (median) |\n|---|---|---|---|---|---|"
        )
        scalar_figures(args.scalar_seeds)
    print(
        f"\nwall {time.perf_counter() - wall:.0f} s, load average at start {load:.2f}, "
        f"end {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
