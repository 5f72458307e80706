"""Peak memory of a mechanism audit against its number of trials: flat above 10⁶.

For each size, a fresh ``dpaudit run`` of a Laplace audit (ε = 1, sensitivity 1,
``threshold = "split"``, claim ε = 1, ``[execution] unit_size`` 25,000 and one worker,
the defaults) in its own subprocess, into a fresh temporary run directory. Reported per
size:

- the subprocess's peak resident set (``ru_maxrss`` of that one child, from
  ``os.wait4``: the RSS high-water mark of the whole run, sampling, storing and
  summarising included);
- its CPU seconds (user + system) and the wall seconds, with the 1-minute load average
  before and after (the machine may be shared);
- the disk its units take (10⁸ trials × 2 arms × 8 bytes ≈ 1.6 GB), removed afterwards;
- the bounds and which path made them (``exact`` up to
  ``dpaudit.mechanisms.summary.EXACT_TRIALS_LIMIT`` = 10⁶ trials per arm, else
  ``streamed``).

Run: ``.venv/bin/python benchmarks/mechanism_memory.py [--sizes 1e5 1e6 1e7 1e8]
[--tmp DIR] [--cache-bytes N] [--exact-trials-limit N]``. Threads of BLAS/OpenMP are
pinned to 1. With ``--cache-bytes`` the CLI runs with ``dpaudit.store.StoredOutputs``'
cache limited to N bytes (0: every unit is read from disk each time), which separates the
summary's own memory from the cache's; with ``--exact-trials-limit`` the exact path runs
up to N trials per arm (e.g. 1e8: the exact path at every size, for comparison).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AUDIT = """[audit]
name = "laplace-memory"
kinds = ["mechanism"]
seed = 0
confidence_level = 0.95

[mechanism]
name = "laplace"
sensitivity = 1.0
epsilon = 1.0
trials = {trials}
threshold = "split"

[mechanism.claim]
epsilon = 1.0
delta = 0.0

[execution]
workers = 1
unit_size = 25_000

[report]
html = true
"""


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# The CLI, with the stored-unit cache's size limit and the exact path's trial limit set
# first (a negative number leaves dpaudit's own: 256 MB and 10⁶ trials per arm).
_CLI = (
    "import sys, dpaudit.store as s, dpaudit.mechanisms.summary as m; "
    "cache, limit = int(sys.argv.pop(1)), int(sys.argv.pop(1)); "
    "cache < 0 or s.StoredOutputs.__init__.__kwdefaults__.__setitem__('cache_bytes', cache); "
    "limit < 0 or setattr(m, 'EXACT_TRIALS_LIMIT', limit); "
    "from dpaudit.cli import app; sys.argv[0] = 'dpaudit'; app()"
)


def measure(
    trials: int, tmp_root: str | None, cache_bytes: int | None, exact_limit: int | None
) -> dict[str, object]:
    """One fresh ``dpaudit run`` at ``trials`` per arm: peak RSS, CPU, wall, disk, bounds."""
    work = Path(tempfile.mkdtemp(prefix="dpaudit-memory-", dir=tmp_root))
    try:
        audit = work / "audit.toml"
        audit.write_text(AUDIT.format(trials=f"{trials:_}"))
        run_dir = work / "run"
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            env[var] = "1"
        exe = str(Path(sys.executable).with_name("dpaudit"))
        cmd = [exe, "run", str(audit), "-o", str(run_dir), "-q"]
        if cache_bytes is not None or exact_limit is not None:
            settings = [str(-1 if x is None else x) for x in (cache_bytes, exact_limit)]
            cmd = [sys.executable, "-c", _CLI, *settings, *cmd[1:]]
        load_before = os.getloadavg()[0]
        w0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - w0
        proc.returncode = os.waitstatus_to_exitcode(status)
        load_after = os.getloadavg()[0]
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}")
        data = json.loads((run_dir / "results.json").read_text())
        bounds = {b["parameter"]: b["lower"] for b in data["bounds"] if b["in_verdict"]}
        streamed = "streamed" in data["tests"][0]
        return {
            "trials": trials,
            "peak_rss_mb": usage.ru_maxrss / 1024,  # kilobytes on Linux
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "wall_s": wall,
            "load": (load_before, load_after),
            "units_disk_mb": _du(run_dir / "units") / 1e6,
            "path": "streamed" if streamed else "exact",
            "epsilon_lb": bounds["epsilon"]["value"],
            "mu_lb": bounds["mu"]["value"],
            "auc": data["tests"][0]["metrics"]["auc"],
            "verdict": data["verdict"],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e5, 1e6, 1e7, 1e8])
    parser.add_argument("--tmp", default=None, help="where the temporary run directories go")
    parser.add_argument(
        "--cache-bytes",
        type=int,
        default=None,
        help="size limit of the stored-unit cache (default: dpaudit's own, 256 MB)",
    )
    parser.add_argument(
        "--exact-trials-limit",
        type=float,
        default=None,
        help="trials per arm up to which the exact path runs (default: dpaudit's, 10⁶)",
    )
    args = parser.parse_args()
    print(
        "| trials per arm | path | peak RSS (MB) | CPU (s) | wall (s) | load before/after "
        "| units on disk (MB) | ε_LB | μ_LB | AUC | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        limit = None if args.exact_trials_limit is None else int(args.exact_trials_limit)
        r = measure(int(size), args.tmp, args.cache_bytes, limit)
        load = "/".join(f"{x:.2f}" for x in r["load"])  # type: ignore[attr-defined]
        print(
            f"| {r['trials']:,} | {r['path']} | {r['peak_rss_mb']:.0f} | {r['cpu_s']:.1f} "
            f"| {r['wall_s']:.1f} | {load} | {r['units_disk_mb']:.0f} | {r['epsilon_lb']:.4f} "
            f"| {r['mu_lb']:.4f} | {r['auc']:.5f} | {r['verdict']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
