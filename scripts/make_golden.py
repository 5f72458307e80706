"""Record the bound values of every shipped audit (tests/golden/<audit>.json).

Run on a known-good tree before a refactor; tests/test_golden.py then checks that the
refactored tree gives the same values. Usage: .venv/bin/python scripts/make_golden.py [NAME ...]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from dpaudit.audit import run_audit

ROOT = Path(__file__).resolve().parent.parent
AUDITS = ROOT / "audits"
GOLDEN = ROOT / "tests" / "golden"


def golden_of(results: dict) -> list[dict]:
    """The values a refactor must keep: every bound's value, level and upper bound."""
    return [
        {
            "test": b["test"],
            "parameter": b["parameter"],
            "validity": b["lower"]["validity"],
            "value": b["lower"]["value"],
            "confidence_level": b["lower"]["confidence_level"],
            "upper": b["upper"],
            "in_verdict": b["in_verdict"],
        }
        for b in results["bounds"]
    ]


def main(names: list[str]) -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in names or sorted(p.stem for p in AUDITS.glob("*.toml")):
        with tempfile.TemporaryDirectory() as tmp:
            result = run_audit(AUDITS / f"{name}.toml", output_dir=tmp, write=False)
        out = {
            "audit": name,
            "kinds": result.config["audit"]["kinds"],
            "verdict": result.verdict,
            "bounds": golden_of(result.to_dict()),
        }
        (GOLDEN / f"{name}.json").write_text(json.dumps(out, indent=1) + "\n")
        print(name, result.verdict, len(out["bounds"]), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
