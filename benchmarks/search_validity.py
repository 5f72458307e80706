"""Validity and power of the neighbour search (dpaudit.mechanisms.search), longer than the tests.

Repeats a search audit of mechanisms exactly at their claim (randomised response kept with
probability e/(1 + e), ε = 1; the sparse vector technique, Lyu, Su, Li 2017, Alg. 1, ε = 1)
and of their planted bugs (keep probability 0.83; no query noise), and counts how often the
claim is rejected. For the correct ones the count must stay below the binomial
0.999-quantile of (repeats, 1 − c); for the bugs it is the power.

Usage: .venv/bin/python benchmarks/search_validity.py [REPEATS]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "audits"))

from plugins.bit_response import respond, respond_buggy
from plugins.sparse_vector import svt, svt_no_query_noise

from dpaudit.mechanisms.search import search_audit

C = 0.9


def rejections(fn, repeats: int, **kw) -> int:
    return sum(
        search_audit(fn, claim_epsilon=1.0, confidence_level=C, seed=seed, **kw).violation
        for seed in range(repeats)
    )


def main(repeats: int) -> None:
    rr = dict(
        data=[1, 0, 1],
        neighbours="records",
        values=[0, 1],
        screen_trials=200,
        trials=3000,
        audit_pairs=3,
    )
    sv = dict(
        data=[1, 1, 1, 1, 1],
        neighbours="queries",
        random_pairs=4,
        screen_trials=300,
        trials=3000,
        audit_pairs=2,
    )
    ceiling = int(stats.binom.ppf(0.999, repeats, 1 - C))
    print(f"repeats {repeats}, c = {C}, ceiling {ceiling}, load {os.getloadavg()[0]:.1f}")
    for name, fn, kw in (
        ("rr at claim", respond, rr),
        ("rr 0.83", respond_buggy, rr),
        ("svt alg 1", svt, sv),
        ("svt no query noise", svt_no_query_noise, sv),
    ):
        cpu, wall = time.process_time(), time.perf_counter()
        k = rejections(fn, repeats, **kw)
        print(
            f"{name:>20}: rejected {k}/{repeats}  "
            f"({time.process_time() - cpu:.1f} CPU-s, {time.perf_counter() - wall:.1f} s wall)"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
