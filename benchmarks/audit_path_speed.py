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

The engine and the audit train the same models (same seed, data, canary and streams); the
script checks this by comparing the audit's stored scores with the engine's
likelihood-ratio scores (the audit trains units of 2 000 models, the engine one batch, so
float32 sums may differ in the last bits: the largest difference is printed).

CPU seconds are ``time.process_time`` (this process) plus ``RUSAGE_CHILDREN`` (children),
torch, OMP and BLAS at one thread; wall seconds and the 1-minute load average are printed
too. Medians over ``--rounds`` rounds; engine and audit alternate which goes first.

Run: .venv/bin/python benchmarks/audit_path_speed.py [--trials 10000] [--rounds 3] [--cli]
     .venv/bin/python benchmarks/audit_path_speed.py --trials 1000 5000 --rounds 3
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
    a = p.parse_args()
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
