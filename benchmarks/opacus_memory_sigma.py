"""Peak memory of the Opacus tutorial's audit across noise multipliers σ.

Copies ``audits/opacus-tutorial.toml`` and its plug-ins into a scratch folder once per σ,
sets the plug-in's ``NOISE_MULTIPLIER`` to σ, ``trials`` to ``--trials`` models per arm and
turns the HTML report off, then runs ``dpaudit run -q`` in its own process under
``/usr/bin/time -v`` and prints its peak resident set size and user CPU seconds. Memory
flat in σ means these peaks stay close to σ = 1's whatever σ is.

Run (from the repository's root):
    PYTHONPATH=$PWD .venv/bin/python benchmarks/opacus_memory_sigma.py --sigmas 1 0.5 0.3 0.2 0.1
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(sigma: float, trials: int, scratch: Path) -> tuple[int, float, int]:
    """(peak RSS in kB, user CPU seconds, exit code) of one audit at noise multiplier σ."""
    folder = scratch / f"sigma-{sigma:g}"
    shutil.copytree(ROOT / "audits" / "plugins", folder / "plugins")
    plugin = folder / "plugins" / "opacus_tutorial.py"
    text = plugin.read_text()
    plugin.write_text(
        re.sub(r"^NOISE_MULTIPLIER = .*$", f"NOISE_MULTIPLIER = {sigma!r}", text, flags=re.M)
    )
    audit = (ROOT / "audits" / "opacus-tutorial.toml").read_text()
    audit = re.sub(r"^trials = \d+", f"trials = {trials}", audit, flags=re.M)
    (folder / "audit.toml").write_text(audit + "\n[report]\nhtml = false\n")
    dpaudit = Path(sys.executable).with_name("dpaudit")
    done = subprocess.run(
        [
            "/usr/bin/time",
            "-v",
            str(dpaudit),
            "run",
            "-q",
            str(folder / "audit.toml"),
            "-o",
            str(folder / "run"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))  # type: ignore[union-attr]
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", done.stderr).group(1))  # type: ignore[union-attr]
    return rss, user, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sigmas", type=float, nargs="+", default=[1.0, 0.5, 0.3, 0.2, 0.1])
    parser.add_argument("--trials", type=int, default=16)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()}")
    print("| σ | peak RSS (kB) | user CPU s | exit |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="opacus-memory-") as tmp:
        for sigma in args.sigmas:
            rss, user, code = measure(sigma, args.trials, Path(tmp))
            print(f"| {sigma:g} | {rss:,} | {user:.1f} | {code} |", flush=True)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
