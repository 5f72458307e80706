"""The composition comparison (dpaudit.accounting.composition) for the DP-SGD settings of the
shipped audits: one markdown table, ε at the audit's δ by every composition method.

(σ, q, T) of an audit whose ``[dpsgd.training.dp]`` table sets the noise comes from the
recipe (``dpaudit.recipes``: the same q/T formula and noise calibration the engine
uses). An audit whose trainer is a plug-in that sets its own noise (``audits/opacus.toml``:
Opacus reads σ, q and T from its own objects) is run once with ``dpaudit run`` and its
accountant record (what actually ran) is read from results.json. Audits whose trainer is
not DP-SGD (plain, output perturbation, multi-party aggregation) are listed as skipped.

Run: .venv/bin/python benchmarks/composition_table.py [--delta 1e-5] [--no-run]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpaudit.accounting.composition import compare, format_markdown
from dpaudit.config import load_config
from dpaudit.errors import DpauditError
from dpaudit.recipes import noise_multiplier, sampling_plan

ROOT = Path(__file__).resolve().parents[1]
METHODS = (
    "naive",
    "advanced",
    "optimal-dp",
    "rdp",
    "pld",
    "gdp-exact",
    "gdp-clt",
    "liu-composition",
    "liu-measured",
)


def _members(section, base_dir: Path) -> int:
    """n, the real rows each model samples from (the canary row, if any, is extra)."""
    from dpaudit.data import load_dataset

    if section.dataset == "synthetic":  # the kind makes ``rows`` rows (200 by default)
        return int(section.rows or 200)
    available = load_dataset(section.dataset, label=section.label, base_dir=base_dir).X.shape[0]
    return available if section.rows is None else min(section.rows, available)


def _records(node):
    """Every accountant record under an ``upper_bound`` table of results.json."""
    if isinstance(node, dict):
        bound = node.get("upper_bound")
        if isinstance(bound, dict):
            yield from bound.get("records") or []
        for value in node.values():
            if value is not bound:
                yield from _records(value)
    elif isinstance(node, list):
        for value in node:
            yield from _records(value)


def _recorded_setting(path: Path) -> tuple[float, float, int] | None:
    """(σ, q, T) of the accountant record of one ``dpaudit run`` of ``path``."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [str(ROOT / ".venv/bin/dpaudit"), "run", str(path), "-o", out],
            check=False,
            capture_output=True,
        )
        results = json.loads((Path(out) / "results.json").read_text())
    records = list(_records(results))
    if len(records) != 1:
        return None
    r = records[0]
    return float(r["noise_multiplier"]), float(r["sampling_rate"]), int(r["steps"])


def setting(path: Path, *, run_plugins: bool) -> tuple[str, tuple[float, float, int] | None]:
    """(source, (σ, q, T)) of one audit file, or (reason, None) when it is not DP-SGD."""
    config = load_config(path)
    section = config.section("dpsgd")
    if section.training.dp is not None:
        members = _members(section, config.base_dir)
        q, steps = sampling_plan(
            members,
            batch_size=section.training.batch_size,
            epochs=section.training.epochs,
            full_batch=section.full_batch,
        )
        sigma = noise_multiplier(section.training, members=members, full_batch=section.full_batch)
        return "recipe", (sigma, q, steps)
    if section.trainer in ("plain", "output-perturbation", "multiparty"):
        return f"skipped: trainer {section.trainer!r} is not DP-SGD", None
    if not run_plugins:
        return "skipped: plug-in trainer (run without --no-run to read its record)", None
    found = _recorded_setting(path)
    if found is None:
        return "skipped: no single accountant record in results.json", None
    return "record of one `dpaudit run`", found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delta", type=float, default=None, help="δ (default: the audit's)")
    parser.add_argument("--no-run", action="store_true", help="do not run plug-in audits")
    args = parser.parse_args()

    files = [*sorted((ROOT / "audits").glob("dpsgd-*.toml")), ROOT / "audits/opacus.toml"]
    header = "| audit | σ | q | T | δ | " + " | ".join(METHODS) + " |"
    print(header)
    print("|---" * 5 + "|" + "---:|" * len(METHODS))
    skipped, details = [], []
    wall, cpu = time.perf_counter(), time.process_time()
    for path in files:
        source, found = setting(path, run_plugins=not args.no_run)
        if found is None:
            skipped.append(f"- `{path.name}`: {source}")
            continue
        sigma, q, steps = found
        delta = args.delta if args.delta is not None else load_config(path).audit.delta
        table = compare(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=delta)
        cells = []
        for method in METHODS:
            try:
                cells.append(f"{table.row(method).epsilon:.3f}")
            except DpauditError:  # the method does not apply (gdp-exact for q < 1, ...)
                cells.append("—")
        print(
            f"| {path.stem} | {sigma:.4g} | {q:.4g} | {steps} | {delta:g} | "
            + " | ".join(cells)
            + " |"
        )
        details.append(f"### {path.stem} ({source})\n\n{format_markdown(table)}\n")
    print()
    print("\n".join(skipped))
    print()
    print("\n".join(details))
    print(
        f"wall {time.perf_counter() - wall:.1f} s, CPU {time.process_time() - cpu:.1f} s "
        "(this process; a plug-in audit's subprocess is not in the CPU figure)",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
