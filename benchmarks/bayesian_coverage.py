"""Coverage of the Bayesian credible intervals on exact-law simulations, and their lower
credible bound beside the rigorous Clopper–Pearson bound at the same counts.

The attack: a threshold t on one Gaussian observation, H0 ~ N(0, 1), H1 ~ N(μ, 1), so the
exact rates are FPR = 1 − Φ(t), FNR = Φ(t − μ) and the μ at that threshold is μ itself.
Each cell draws the counts from their exact binomial law ``repeats`` times.

    .venv/bin/python benchmarks/bayesian_coverage.py [--repeats 400] [--draws 4000]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from scipy.stats import norm

from dpaudit.bounds import epsilon_from_counts, mu_from_counts
from dpaudit.bounds.bayesian import bayesian_estimate, measure_coverage

DELTA = 1e-5


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=400)
    ap.add_argument("--draws", type=int, default=4000)
    args = ap.parse_args()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    print(
        "| quantity | μ | t | trials | truth | coverage (95 % CI) | lower held | "
        "mean width | mean Bayes lower | mean CP lower |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mu in (1.0, 2.0):
        for t in (0.5, 1.0, 1.5):
            fpr, fnr = float(norm.sf(t)), float(norm.cdf(t - mu))
            for trials in (500, 2000):
                for quantity in ("mu", "epsilon"):
                    r = measure_coverage(
                        fpr=fpr,
                        fnr=fnr,
                        trials=trials,
                        repeats=args.repeats,
                        quantity=quantity,
                        delta=DELTA,
                        draws=args.draws,
                        seed=11,
                    )
                    # the lower credible bound beside the rigorous bound, same counts
                    rng = np.random.default_rng(12)
                    fp = rng.binomial(trials, fpr, size=50)
                    fn = rng.binomial(trials, fnr, size=50)
                    bayes, cp = [], []
                    for a, b in zip(fp, fn, strict=True):
                        est = bayesian_estimate(
                            int(a),
                            trials,
                            int(b),
                            trials,
                            quantity=quantity,
                            delta=DELTA,
                            draws=2000,
                        )
                        bayes.append(est.lower)
                        if quantity == "mu":
                            cp.append(mu_from_counts(int(a), trials, int(b), trials).value)
                        else:
                            cp.append(
                                epsilon_from_counts(
                                    int(a), trials, int(b), trials, delta=DELTA
                                ).value
                            )
                    lo, hi = r.coverage_interval
                    print(
                        f"| {quantity} | {mu:g} | {t:g} | {trials} | {r.truth:.3f} | "
                        f"{r.coverage:.3f} ({lo:.3f}–{hi:.3f}) | {r.lower_coverage:.3f} | "
                        f"{r.mean_width:.3f} | {np.mean(bayes):.3f} | {np.mean(cp):.3f} |"
                    )
    print(
        f"\nCPU {time.process_time() - cpu0:.1f} s, wall {time.perf_counter() - wall0:.1f} s, "
        f"load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
