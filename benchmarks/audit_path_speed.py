"""The many-run white-box DP-SGD audit path against the engine alone, side by side.

The setting is benchmarks/audits/whitebox-poisson-speed.toml (setting (a) of
benchmarks/canary_lr.py: logistic regression on 100 synthetic rows plus one all-zero
feature, Dirac gradient canary, q = 0.02, T = 500, σ = 0.6, C = 1, likelihood-ratio
score). In ONE process, per round:

* engine: the models of the audit trained by the engine with the canary observer, as
  benchmarks/canary_lr.py times them (``_train``: one ``train_many`` call over all 2·trials
  models, both white-box scores kept), nothing stored;
* audit: :func:`dpaudit.run_audit` of the same audit file (``trials`` set on the loaded
  config) into a fresh run directory: units, store, bounds, grey-box checks, gate,
  results.json and report.html. Its CPU is also split at the moment the last unit is
  stored (``progress`` callback): training units, then everything after;
* with ``--cli``, also ``dpaudit run`` of the same file as a subprocess (its CPU read from
  ``getrusage(RUSAGE_CHILDREN)``), as a user runs it: without the thread variables, so
  torch starts with its default thread count (the engine trains on one thread itself).

With ``--subprocess``, like for like as a user and the engine's benchmark run them: per
round, ``dpaudit run`` of the audit file and ``benchmarks/canary_lr.py --setting a --seeds
1 --trials N --no-oracle`` (the engine's own benchmark: the same models trained in one
``train_many`` call, the accountant's ε and μ of their records, the sum's and the
likelihood ratio's ε and μ bounds; ``--oracle`` keeps its simulated oracle too), each a
subprocess in the user's default environment (no thread variables; canary_lr.py sets one
thread itself, dpaudit trains on one), each timed by ``getrusage(RUSAGE_CHILDREN)``
alone (this process's CPU is not counted), alternating which goes first. canary_lr.py
saves its scores (``--scores-out``) and the script checks them against the scores
``dpaudit run`` stored. With two or more ``--trials``, the per-model marginal CPU between
the smallest and the largest size is printed for both.

The engine and the audit train the same models (same seed, data, canary and streams); the
script checks this by comparing the audit's stored scores with the engine's
likelihood-ratio scores (the audit trains units of 2 000 models, the engine one batch, so
float32 sums may differ in the last bits: the largest difference is printed).

CPU seconds are ``time.process_time`` (this process) plus ``RUSAGE_CHILDREN`` (children),
torch, OMP and BLAS at one thread; wall seconds and the 1-minute load average are printed
too. Medians over ``--rounds`` rounds; engine and audit alternate which goes first.

Run: .venv/bin/python benchmarks/audit_path_speed.py [--trials 10000] [--rounds 3] [--cli]
     .venv/bin/python benchmarks/audit_path_speed.py --trials 1000 5000 --rounds 3
     .venv/bin/python benchmarks/audit_path_speed.py --trials 10000 --rounds 3 --subprocess
     .venv/bin/python benchmarks/audit_path_speed.py --trials 1000 10000 --subprocess \
         --no-in-process
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from canary_lr import _train

from dpaudit import load_config, run_audit
from dpaudit.store import RunStore

AUDIT = Path(__file__).resolve().parent / "audits" / "whitebox-poisson-speed.toml"
ROOT = Path(__file__).resolve().parents[1]
CANARY_LR = Path(__file__).resolve().parent / "canary_lr.py"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _cpu() -> float:
    """CPU seconds of this process and of its finished children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def _measure(fn: Callable[[], Any]) -> tuple[float, float, float, Any]:
    """(CPU, wall, load average at the end, the function's value)."""
    cpu0, wall0 = _cpu(), time.perf_counter()
    value = fn()
    return _cpu() - cpu0, time.perf_counter() - wall0, os.getloadavg()[0], value


def _engine(config: Any) -> np.ndarray:
    """The engine benchmark's training of the audit's models; their LR scores."""
    section = config.section("dpsgd")
    included, _, llrs, _ = _train(section, config.audit.seed)
    assert np.array_equal(included, np.arange(included.size) % 2 == 1)
    return np.asarray(llrs)


def _audit(config: Any, run_dir: Path, marks: list[float]) -> np.ndarray:
    """``run_audit`` into ``run_dir``; ``marks`` gets the CPU reading as each unit lands."""

    def progress(description: str, total: int, done: int) -> None:
        marks.append(_cpu())

    result = run_audit(config, output_dir=run_dir, progress=progress)
    assert result.verdict in ("pass", "fail")
    return _stored_scores(run_dir)


def _stored_scores(run_dir: Path) -> np.ndarray:
    """The many-run scores the audit stored, in model order."""
    units = sorted(p.stem for p in run_dir.rglob("dpsgd-*.npz"))
    folder = next(run_dir.rglob("dpsgd-00000.npz")).parent
    store = RunStore(run_dir, folder.name)
    return np.concatenate([store.load(u)["scores"] for u in units])


def _cli(config_text: str, trials: int, work: Path) -> None:
    """``dpaudit run`` of the audit file with ``trials`` as a subprocess, in the user's
    default environment (no thread variables: torch picks its own thread count)."""
    path = work / "audit.toml"
    path.write_text(re.sub(r"(?m)^trials = \d+$", f"trials = {trials}", config_text))
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    cmd = [str(ROOT / ".venv" / "bin" / "dpaudit"), "run", str(path), "--quiet"]
    subprocess.run([*cmd, "--output-dir", str(work / "cli")], check=False, env=env)


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (user + system)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def _child(cmd: list[str]) -> tuple[float, float, float]:
    """Run ``cmd`` in the user's default environment: (its CPU, wall, load at the end)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    cpu0, wall0 = _children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
    cpu, wall = _children_cpu() - cpu0, time.perf_counter() - wall0
    if done.returncode not in (0, 1):  # 1: a gate check failed, still a finished audit
        raise RuntimeError(f"{cmd[:3]} ended with {done.returncode}: {done.stderr[-2000:]}")
    return cpu, wall, os.getloadavg()[0]


def _side_by_side(trials: int, first: str, oracle: bool) -> dict[str, float]:
    """``dpaudit run`` and canary_lr.py as subprocesses, for the same models."""
    work = Path(tempfile.mkdtemp(prefix="audit-path-speed-"))
    try:
        path = work / "audit.toml"
        path.write_text(re.sub(r"(?m)^trials = \d+$", f"trials = {trials}", AUDIT.read_text()))
        dpaudit = str(ROOT / ".venv" / "bin" / "dpaudit")
        bench = [sys.executable, str(CANARY_LR), "--setting", "a", "--seeds", "1"]
        cmds = {
            "run": [dpaudit, "run", str(path), "--quiet", "--output-dir", str(work / "cli")],
            "bench": [
                *bench,
                *("--trials", str(trials), "--scores-out", str(work / "bench.npz")),
                *([] if oracle else ["--no-oracle"]),
            ],
        }
        row: dict[str, float] = {}
        for name in ("run", "bench") if first == "run" else ("bench", "run"):
            row[f"{name}_cpu"], row[f"{name}_wall"], row[f"{name}_load"] = _child(cmds[name])
        llrs = np.load(work / "bench.npz")["llrs"]
        stored = _stored_scores(work / "cli")
        row["identical"] = float(np.array_equal(llrs, stored))
        row["max_score_diff"] = float(np.max(np.abs(llrs - stored)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return row


def _subprocess_sizes(sizes: list[int], rounds: int, oracle: bool) -> None:
    """The side-by-side rounds at each size; medians; marginal cost per model."""
    medians: dict[int, dict[str, float]] = {}
    for trials in sizes:
        models, rows = 2 * trials, []
        for r in range(rounds):
            row = _side_by_side(trials, "run" if r % 2 == 0 else "bench", oracle)
            rows.append(row)
            print(
                f"  {models} models, round {r} ({'run' if r % 2 == 0 else 'bench'} first): "
                f"dpaudit run {row['run_cpu']:.1f} CPU-s (wall {row['run_wall']:.1f}, load "
                f"{row['run_load']:.2f}); canary_lr.py {row['bench_cpu']:.1f} CPU-s (wall "
                f"{row['bench_wall']:.1f}, load {row['bench_load']:.2f}); ratio "
                f"{row['run_cpu'] / row['bench_cpu']:.3f}; scores identical "
                f"{bool(row['identical'])} (max diff {row['max_score_diff']:.2g})",
                flush=True,
            )
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        medians[trials] = med
        ratios = [r["run_cpu"] / r["bench_cpu"] for r in rows]
        print(
            f"{models} models ({trials} per arm), subprocesses, medians of {rounds} rounds: "
            f"dpaudit run {med['run_cpu']:.1f} CPU-s, canary_lr.py{' (oracle)' if oracle else ''}"
            f" {med['bench_cpu']:.1f} CPU-s; ratio {statistics.median(ratios):.3f} "
            f"({', '.join(f'{x:.3f}' for x in ratios)}; goal ≤ 1.2); wall run "
            f"{med['run_wall']:.1f} s, bench {med['bench_wall']:.1f} s; load "
            f"{min(r['run_load'] for r in rows):.2f}–{max(r['bench_load'] for r in rows):.2f}; "
            f"scores identical in {sum(int(r['identical']) for r in rows)}/{rounds} rounds",
            flush=True,
        )
    if len(medians) >= 2:
        lo, hi = min(medians), max(medians)
        extra = 2 * (hi - lo)
        run = (medians[hi]["run_cpu"] - medians[lo]["run_cpu"]) / extra
        bench = (medians[hi]["bench_cpu"] - medians[lo]["bench_cpu"]) / extra
        print(
            f"marginal CPU per model ({2 * lo} → {2 * hi} models): dpaudit run "
            f"{1e3 * run:.2f} ms, canary_lr.py {1e3 * bench:.2f} ms ({run / bench:.3f}×); "
            f"fixed (intercept) dpaudit run {medians[lo]['run_cpu'] - 2 * lo * run:.1f} CPU-s, "
            f"canary_lr.py {medians[lo]['bench_cpu'] - 2 * lo * bench:.1f} CPU-s",
            flush=True,
        )


def _round(trials: int, first: str, cli: bool) -> dict[str, float]:
    config = load_config(AUDIT).with_section("dpsgd", trials=trials)
    work = Path(tempfile.mkdtemp(prefix="audit-path-speed-"))
    row: dict[str, float] = {}
    try:
        marks: list[float] = []
        runs: dict[str, Callable[[], Any]] = {
            "engine": lambda: _engine(config),
            "audit": lambda: _audit(config, work / "run", marks),
        }
        scores = {}
        order = ["engine", "audit"] if first == "engine" else ["audit", "engine"]
        for name in order:
            start = _cpu()
            cpu, wall, load, value = _measure(runs[name])
            row[f"{name}_cpu"], row[f"{name}_wall"], row[f"{name}_load"] = cpu, wall, load
            scores[name] = value
            if name == "audit":
                row["audit_units_cpu"] = marks[-1] - start
                row["audit_after_cpu"] = cpu - row["audit_units_cpu"]
        row["max_score_diff"] = float(np.max(np.abs(scores["engine"] - scores["audit"])))
        row["identical"] = float(np.array_equal(scores["engine"], scores["audit"]))
        if cli:
            cpu, wall, load, _ = _measure(lambda: _cli(AUDIT.read_text(), trials, work))
            row["cli_cpu"], row["cli_wall"], row["cli_load"] = cpu, wall, load
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--trials", type=int, nargs="+", default=[10_000], help="models per arm")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cli", action="store_true", help="also time `dpaudit run` (subprocess)")
    p.add_argument(
        "--subprocess",
        action="store_true",
        help="also `dpaudit run` and canary_lr.py side by side, both subprocesses",
    )
    p.add_argument("--no-in-process", action="store_true", help="skip the in-process rounds")
    p.add_argument("--oracle", action="store_true", help="canary_lr.py keeps its oracle")
    a = p.parse_args()
    if a.subprocess:
        _subprocess_sizes(a.trials, a.rounds, a.oracle)
    if a.no_in_process:
        return
    torch.set_num_threads(1)
    _engine(load_config(AUDIT).with_section("dpsgd", trials=5))  # imports, warm caches
    for trials in a.trials:
        models = 2 * trials
        rows = []
        for r in range(a.rounds):
            row = _round(trials, "engine" if r % 2 == 0 else "audit", a.cli)
            rows.append(row)
            cli = (
                f"; dpaudit run {row['cli_cpu']:.1f} s ({row['cli_cpu'] / row['engine_cpu']:.2f}×)"
                if a.cli
                else ""
            )
            print(
                f"  {models} models, round {r}: engine {row['engine_cpu']:.1f} CPU-s "
                f"(wall {row['engine_wall']:.1f}, load {row['engine_load']:.2f}); audit "
                f"{row['audit_cpu']:.1f} CPU-s (units {row['audit_units_cpu']:.1f}, after "
                f"{row['audit_after_cpu']:.1f}; wall {row['audit_wall']:.1f}, load "
                f"{row['audit_load']:.2f}); ratio {row['audit_cpu'] / row['engine_cpu']:.3f}"
                f"{cli}; scores identical {bool(row['identical'])} (max diff "
                f"{row['max_score_diff']:.2g})",
                flush=True,
            )
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        ratios = [r["audit_cpu"] / r["engine_cpu"] for r in rows]
        cli = (
            f", dpaudit run {med['cli_cpu']:.1f} CPU-s "
            f"({statistics.median(r['cli_cpu'] / r['engine_cpu'] for r in rows):.3f}×)"
            if a.cli
            else ""
        )
        print(
            f"{models} models ({trials} per arm), medians of {a.rounds} rounds: engine "
            f"{med['engine_cpu']:.1f} CPU-s ({1e3 * med['engine_cpu'] / models:.2f} ms/model), "
            f"audit {med['audit_cpu']:.1f} CPU-s ({1e3 * med['audit_cpu'] / models:.2f} "
            f"ms/model; units {med['audit_units_cpu']:.1f}, after {med['audit_after_cpu']:.1f})"
            f"{cli}; ratio audit/engine {statistics.median(ratios):.3f} (goal ≤ 1.2); wall "
            f"engine {med['engine_wall']:.1f} s, audit {med['audit_wall']:.1f} s; load "
            f"{med['audit_load']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
