"""Sequential claim-curve test of DP-SGD: models per arm to a decision, and its validity
under monitoring with a power control.

Setting (as ``benchmarks/sequential.py dpsgd``, whose simulation is reused, not copied):
white-box Dirac canary, Poisson DP-SGD q = 0.25, T = 8, C = 1, δ = 1e-5, whose records
state σ while it RUNS σ/k. Each round's scores are drawn from the exact law of the
white-box transcript (:func:`sequential.whitebox_round`: per step N(0, σ_run²C²) out,
(1 − q)N(0, σ_run²C²) + qN(C, σ_run²C²) in, scored by the Neyman–Pearson sum of per-step
log-ratios at σ_run) with the records of the claimed σ.

``detect``: the audit's own decision (:func:`dpaudit.dpsgd.sequential.outcome`: ε, μ and
the claim curve, three shares of c = 0.95, each at 0.9833) on lazily drawn rounds of 50
models per arm, cap 5,000; repeat i = audit seed i. Beside it, the fixed claim-curve design
(:func:`dpaudit.bounds.claim_curve.claim_curve_test`, split, at the same per-bound level) on the
same law: the smallest n of a grid whose detection probability over the seeds reaches the
sequential one (capped at 0.95).

``monitor``: a CORRECT run (σ_run = σ = 1, records σ), rounds of 50 models per arm looked at
after every round up to ``--cap`` per arm (2,000: 39 looks; 10,000: 199 looks), the
sequential claim-curve test alone at level c: false violations against
binom.ppf(0.999, repeats, 1 − c). Power control on the same rounds: the uncorrected rule
that checks the fixed design's Clopper–Pearson limits (each rate at 1 − (1 − c)/2, no
correction for the looks or the thresholds) at the same round-0 thresholds after every
round, and stops when a point is below the claim's curve. It exceeds the ceiling at 199
looks (at 39 it stays under: one look spends little of 1 − c when both limits must miss).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential_curve.py detect --seeds 20 --divisor 2
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential_curve.py detect --divisor 1.4285714
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential_curve.py monitor --repeats 400
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential_curve.py monitor --cap 10000

CPU seconds by time.process_time (numpy single-threaded), wall, load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from scipy import special, stats  # noqa: E402
from sequential import CLIP, STEPS, Q, SimulatedRounds, context, load, whitebox_round  # noqa: E402

from dpaudit.bounds.claim_curve import claim_curve_test, dpsgd_claim  # noqa: E402
from dpaudit.errors import InsufficientTrialsError  # noqa: E402
from dpaudit.sequential.curve import CurveRule, SequentialCurveTest  # noqa: E402

C = 0.95
#: The verdict's per-bound level with ε, μ and the claim curve in it (three shares).
LEVEL = 1 - (1 - C) / 3


def _section(sigma: float, cap: int):
    from dpaudit.dpsgd.schema import DpsgdSection

    return DpsgdSection(
        trainer="dpsgd",
        canary="dirac",
        threat_model="white-box",
        rows=32,
        trials=cap,
        training={
            "epochs": 2,
            "batch_size": 8,
            "learning_rate": 0.5,
            "dp": {"noise_multiplier": sigma, "clipping_norm": CLIP},
        },
    )


def _arms(part) -> tuple[np.ndarray, np.ndarray]:
    inc = np.asarray(part["included"], dtype=bool)
    return part["scores"][~inc], part["scores"][inc]


def fixed_curve_needed(
    seeds: int, sigma: float, divisor: float, power: float
) -> tuple[int | None, float]:
    """The fixed split claim-curve design: the least n per arm of the grid whose
    detection probability over ``seeds`` reaches ``power``."""
    claim = dpsgd_claim(noise_multiplier=sigma, sampling_rate=Q, steps=STEPS)
    grid = (100, 150, 200, 250, 300, 400, 500, 600, 800, 1000, 1500, 2000, 3000, 5000)
    for n in grid:
        hits = []
        for s in range(seeds):
            neg, pos = _arms(whitebox_round(s, 20_000 + n, n, sigma / divisor, sigma))
            try:
                test = claim_curve_test(neg, pos, claim=claim, confidence_level=LEVEL, seed=s)
                hits.append(test.violated)
            except InsufficientTrialsError:
                hits.append(False)
        if np.mean(hits) >= power:
            return n, float(np.mean(hits))
    return None, float("nan")


def detect(seeds: int, sigma: float, divisor: float, round_trials: int, cap: int) -> None:
    from dpaudit.dpsgd.sequential import outcome, plan_rounds

    sec = _section(sigma, cap)
    c0, w0 = time.process_time(), time.perf_counter()
    used, why, by = [], [], []
    for s in range(seeds):
        ctx = context(s, round_trials)
        units = plan_rounds(sec, ctx).units
        rounds = SimulatedRounds(units, s, round_trials, sigma / divisor, sigma)
        r, _ = outcome(sec, ctx, rounds, level=LEVEL)
        used.append(r.trials)
        why.append(r.decision)
        by.append(r.decided_by)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    detected = why.count("violation") / seeds
    deciders = {p: by.count(p) for p in sorted(set(map(str, by)))}
    n_fixed, p_fixed = fixed_curve_needed(seeds, sigma, divisor, min(detected, 0.95))
    print(
        f"white-box DP-SGD q={Q} T={STEPS}, records sigma {sigma:g}, runs sigma "
        f"{sigma / divisor:.4g}: sequential (eps, mu, claim curve; rounds of {round_trials}, "
        f"cap {cap}) median {np.median(used):.0f}, mean {np.mean(used):.0f}, p95 "
        f"{np.quantile(used, 0.95):.0f}, max {max(used)} models per arm over {seeds} seeds; "
        f"detected {detected:.2f}; decided by {deciders}; "
        f"per seed {used}; fixed claim-curve design (split, level {LEVEL:.4f}) reaching "
        f"detection probability {min(detected, 0.95):.2f}: "
        f"{n_fixed if n_fixed else '>5000'} models per arm (power {p_fixed:.2f}); "
        f"{cpu:.1f} s CPU, {wall:.1f} s wall (sequential audits), {load()}",
        flush=True,
    )


def monitor(repeats: int, round_trials: int, cap: int) -> None:
    claim = dpsgd_claim(noise_multiplier=1.0, sampling_rate=Q, steps=STEPS)
    rule = CurveRule(curve=claim, level=C, tuned_trials=20 * round_trials)
    looks = cap // round_trials - 1
    rate = 1 - (1 - C) / 2
    c0, w0 = time.process_time(), time.perf_counter()
    false_seq = false_unc = 0
    for s in range(repeats):
        neg0, pos0 = _arms(whitebox_round(s, 0, round_trials, 1.0, 1.0))
        test = SequentialCurveTest(neg0, pos0, rule)
        t = test.thresholds
        fp, fn, n = np.zeros(t.size), np.zeros(t.size), 0
        seq_done = unc_done = False
        for i in range(1, looks + 1):
            neg, pos = _arms(whitebox_round(s, i, round_trials, 1.0, 1.0))
            if not seq_done:
                point = test.add(neg, pos, last=i == looks)
                seq_done = point.decision != "continue"
                false_seq += point.decision == "violation"
            if not unc_done:
                fp += (neg[:, None] >= t).sum(axis=0)
                fn += (pos[:, None] < t).sum(axis=0)
                n += neg.size
                # Clopper–Pearson one-sided upper limits (1 where every trial erred)
                u0 = np.where(fp < n, special.betaincinv(fp + 1, np.maximum(n - fp, 1), rate), 1.0)
                u1 = np.where(fn < n, special.betaincinv(fn + 1, np.maximum(n - fn, 1), rate), 1.0)
                if np.any(u1 < claim(u0)):
                    false_unc += 1
                    unc_done = True
            if seq_done and unc_done:
                break
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    ceiling = int(stats.binom.ppf(0.999, repeats, 1 - C))
    hi = stats.beta.ppf(0.95, false_seq + 1, repeats - false_seq)
    lo = stats.beta.ppf(0.05, false_unc, repeats - false_unc + 1) if false_unc else 0.0
    print(
        f"monitored correct DP-SGD (sigma 1 run and recorded, q={Q}, T={STEPS}), {repeats} "
        f"audits, rounds of {round_trials} to {cap} per arm ({looks} looks), c = {C}: "
        f"sequential claim-curve false violations {false_seq}/{repeats} (95% upper limit "
        f"{hi:.4f}; ceiling binom.ppf(0.999, {repeats}, {1 - C:.2f}) = {ceiling}); uncorrected "
        f"rule {false_unc}/{repeats} (95% lower limit {lo:.4f}); {cpu:.1f} s CPU, {wall:.1f} s "
        f"wall, {load()}",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("what", choices=["detect", "monitor"])
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--sigma", type=float, default=1.0, help="detect: the recorded σ")
    p.add_argument("--divisor", type=float, default=2.0, help="detect: runs σ/divisor")
    p.add_argument("--round-trials", type=int, default=50)
    p.add_argument("--cap", type=int, default=None, help="models per arm (5,000 / 2,000)")
    p.add_argument("--repeats", type=int, default=400)
    a = p.parse_args()
    if a.what == "detect":
        detect(a.seeds, a.sigma, a.divisor, a.round_trials, a.cap or 5000)
    else:
        monitor(a.repeats, a.round_trials, a.cap or 2000)


if __name__ == "__main__":
    main()
