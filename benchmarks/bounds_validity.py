"""Validity and tightness of the ε / μ lower bounds.

Validity: over R repeated audits of N trials per hypothesis, the fraction in which a bound
exceeds its true value (0 on identical distributions; ε = 1 for Laplace; μ = 1 for the
Gaussian). It must stay ≤ 1 − c = 5 % (the tests allow 6.5 % over 1,000 repeats).
Tightness: the bound at 10⁵ trials per hypothesis, over several seeds (median).

Run: .venv/bin/python benchmarks/bounds_validity.py [--repeats 1000] [--trials 1000]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from dpaudit.bounds import epsilon_lower_bound, mu_lower_bound


def rate(sample, bound, target, threshold, repeats):
    rng = np.random.default_rng(12345)
    hits = sum(
        bound(*sample(rng), threshold=threshold, seed=i).value > target for i in range(repeats)
    )
    return hits / repeats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=1000)
    p.add_argument("--trials", type=int, default=1000)
    a = p.parse_args()
    n = a.trials

    def eps(neg, pos, **kw):
        return epsilon_lower_bound(neg, pos, delta=1e-5, **kw)

    def eps0(neg, pos, **kw):
        return epsilon_lower_bound(neg, pos, delta=0.0, **kw)

    cases = [
        ("null, ε_LB > 0", lambda r: (r.normal(0, 1, n), r.normal(0, 1, n)), eps, 0.0),
        ("null, μ_LB > 0", lambda r: (r.normal(0, 1, n), r.normal(0, 1, n)), mu_lower_bound, 0.0),
        ("Laplace ε=1, ε_LB > 1", lambda r: (r.laplace(0, 1, n), r.laplace(1, 1, n)), eps0, 1.0),
        (
            "Gaussian μ=1, μ_LB > 1",
            lambda r: (r.normal(0, 1, n), r.normal(1, 1, n)),
            mu_lower_bound,
            1.0,
        ),
    ]
    print(f"validity: {a.repeats} audits of {n} trials per hypothesis, confidence 0.95")
    for name, sample, bound, target in cases:
        for threshold in ("split", "bonferroni"):
            t0 = time.perf_counter()
            r = rate(sample, bound, target, threshold, a.repeats)
            print(
                f"  {name:26s} {threshold:10s} {100 * r:5.2f} %  ({time.perf_counter() - t0:.1f} s)"
            )

    big = 100_000
    print(f"tightness: {big} trials per hypothesis, median over 5 seeds (min..max)")
    for name, sample, bound, truth in [
        ("Laplace ε=1 (ε_LB/ε)", lambda r: (r.laplace(0, 1, big), r.laplace(1, 1, big)), eps0, 1.0),
        (
            "RR fair coin (ε_LB/ln 3)",
            lambda r: ((r.random(big) < 0.25) * 1.0, (r.random(big) < 0.75) * 1.0),
            eps0,
            math.log(3),
        ),
        (
            "Gaussian μ=1 (μ_LB/μ)",
            lambda r: (r.normal(0, 1, big), r.normal(1, 1, big)),
            mu_lower_bound,
            1.0,
        ),
    ]:
        for threshold in ("split", "bonferroni"):
            vals = []
            for seed in range(5):
                rng = np.random.default_rng(seed)
                vals.append(bound(*sample(rng), threshold=threshold, seed=seed).value / truth)
            print(
                f"  {name:26s} {threshold:10s} {statistics.median(vals):.3f} "
                f"({min(vals):.3f}..{max(vals):.3f})"
            )


if __name__ == "__main__":
    main()
