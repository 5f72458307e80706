"""Check `dpaudit plan --run-sampling shuffled` against independently drawn shuffled runs.

The plan (:func:`dpaudit.sequential.shuffle.plan_shuffled_run`) simulates the shuffled run's
white-box scores by drawing the canary's step uniformly within each epoch. Here each run is
drawn the way a shuffling trainer forms its batches: every epoch a permutation of the n
records (``rng.permutation``) cut into n/b batches of b = n·q, the canary (record 0) in the
batch its rank falls in; per step the canary's coordinate is N(0, σ²) plus 1 when the
canary is in the batch, scored by the Poisson log-likelihood ratio at the claimed q and σ
(what dpaudit computes). On those draws:

* the real sequential claim-curve test (the audit's rule, ``dpsgd_curve_rule``, rounds of
  ``--round-trials``) runs to the plan's cap; the share of audits stopped with a violation
  by the planned median and by the planned 95th percentile should be near 50 % and 95 %;
* the fixed-design claim-curve test (``claim_curve_test``, split, at the same level) at the
  planned 95th percentile, for comparison;
* the grey-box batch-size check (``batch_size_test``) on the permutations' batch sizes of
  one model: p below 1 − level at the planned count of batches, not one batch before.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/plan_shuffle.py --plan-repeats 30 --repeats 40

CPU seconds by time.process_time (numpy single-threaded), and the load average.
"""

from __future__ import annotations

import argparse
import os
import time

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from dpaudit.bounds.claim_curve import claim_curve_test, dpsgd_claim  # noqa: E402
from dpaudit.bounds.greybox import GreyBoxObservations, batch_size_test  # noqa: E402
from dpaudit.sequential.curve import SequentialCurveTest, dpsgd_curve_rule  # noqa: E402
from dpaudit.sequential.shuffle import plan_shuffled_run  # noqa: E402
from dpaudit.theory.whitebox import mixture_log_likelihood_ratio  # noqa: E402


def shuffled_run(
    rng: np.random.Generator, models: int, *, n: int, b: int, sigma: float, steps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores (out, in) and batch sizes of ``models`` runs per arm that shuffle n records."""
    per_epoch = n // b
    step_in = np.zeros((models, steps), dtype=bool)
    sizes = np.zeros((models, steps), dtype=np.int64)
    for k in range(models):
        for start in range(0, steps, per_epoch):
            order = rng.permutation(n)
            rank = int(np.flatnonzero(order == 0)[0])
            batches = [order[i * b : (i + 1) * b] for i in range(per_epoch)]
            for i, batch in enumerate(batches[: steps - start]):
                sizes[k, start + i] = batch.size
            if rank // b < min(per_epoch, steps - start):
                step_in[k, start + rank // b] = True
    out = rng.normal(0.0, sigma, (models, steps))
    inc = rng.normal(0.0, sigma, (models, steps)) + step_in
    q = b / n

    def score(x: np.ndarray) -> np.ndarray:
        llr = mixture_log_likelihood_ratio(
            x, sampling_rate=q, noise_multiplier=sigma, clipping_norm=1.0
        )
        return np.asarray(llr.sum(axis=1))

    return score(out), score(inc), sizes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sigma", type=float, default=0.8)
    parser.add_argument("--records", type=int, default=100)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--level", type=float, default=1 - 0.05 / 3)
    parser.add_argument("--round-trials", type=int, default=100)
    parser.add_argument("--max-trials", type=int, default=40_000)
    parser.add_argument("--plan-repeats", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--fixed-repeats", type=int, default=20)
    args = parser.parse_args()
    sigma, n, b, t, level = args.sigma, args.records, args.batch, args.steps, args.level
    q = b / n
    start = time.process_time()
    plan = plan_shuffled_run(
        noise_multiplier=sigma,
        sampling_rate=q,
        steps=t,
        dataset_size=n,
        level=level,
        round_trials=args.round_trials,
        max_trials=args.max_trials,
        repeats=args.plan_repeats,
        seed=0,
    )
    c = plan.curve
    print(
        f"plan: σ {sigma:g}, q {q:g}, T {t}, n {n}, level {level:.5g}: median "
        f"{c.median_trials:.0f}, mean {c.mean_trials:.0f}, p95 {c.p95_trials:.0f} models per "
        f"arm, refuted in {c.detected:.0%} of {c.repeats}; batch-size check: "
        f"{plan.batch_sizes.batches} batches ({plan.batch_sizes.models} model(s)), p = "
        f"{plan.batch_sizes.p_value:.3g}  [{time.process_time() - start:.0f} CPU-s]"
    )

    start = time.process_time()
    rule = dpsgd_curve_rule(
        noise_multiplier=sigma,
        sampling_rate=q,
        steps=t,
        level=level,
        tuned_trials=20 * args.round_trials,
    )
    cap_rounds = c.max_trials // args.round_trials
    stopped = np.full(args.repeats, np.inf)
    for i in range(args.repeats):
        rng = np.random.default_rng([1, i])  # seeds apart from the plan's [0, i]
        neg, pos, _ = shuffled_run(rng, args.round_trials, n=n, b=b, sigma=sigma, steps=t)
        test = SequentialCurveTest(neg, pos, rule)
        while True:
            neg, pos, _ = shuffled_run(rng, args.round_trials, n=n, b=b, sigma=sigma, steps=t)
            point = test.add(neg, pos, last=test.round + 1 >= cap_rounds - 1)
            if point.decision != "continue":
                break
        if point.decision == "violation":
            stopped[i] = point.trials
    for name, at in (("median", c.median_trials), ("p95", c.p95_trials)):
        k = int(np.sum(stopped <= at))
        ci = stats.binomtest(k, args.repeats).proportion_ci(0.95)
        print(
            f"independent shuffled runs, real sequential test: refuted by the planned {name} "
            f"({at:.0f}) in {k}/{args.repeats} = {k / args.repeats:.0%} "
            f"(95 % CI {ci.low:.2f}–{ci.high:.2f})"
        )
    print(
        f"  median stop of these {args.repeats}: {np.median(stopped):.0f}  "
        f"[{time.process_time() - start:.0f} CPU-s]"
    )

    start = time.process_time()
    claim = dpsgd_claim(noise_multiplier=sigma, sampling_rate=q, steps=t)
    at = int(c.p95_trials)
    hits = 0
    for i in range(args.fixed_repeats):
        rng = np.random.default_rng([2, i])
        neg, pos, _ = shuffled_run(rng, at, n=n, b=b, sigma=sigma, steps=t)
        test_f = claim_curve_test(neg, pos, claim=claim, confidence_level=level, seed=i)
        hits += test_f.violated
    print(
        f"fixed split claim-curve test at the planned p95 ({at} per arm): refuted in "
        f"{hits}/{args.fixed_repeats}  [{time.process_time() - start:.0f} CPU-s]"
    )

    batches = plan.batch_sizes.batches
    if batches is not None:
        _, _, sizes = shuffled_run(
            np.random.default_rng(3), 1, n=n, b=b, sigma=sigma, steps=batches
        )
        for k in (batches, batches - 1):
            nan = np.full((1, k), np.nan)
            obs = GreyBoxObservations(
                batch_sizes=sizes[:, :k],
                dataset_size=n,
                sampling_rate=q,
                clipped_norms_max=nan,
                clipping_norm=1.0,
                untouched_noise=nan,
                noise_multiplier=sigma,
                steps_run=np.array([k]),
                steps_accounted=k,
            )
            p = batch_size_test(obs).p_value
            print(
                f"batch-size check on {k} shuffled batches: p = {p:.3g} "
                f"({'fails' if p is not None and p < 1 - level else 'passes'} at "
                f"{1 - level:.3g})"
            )
    print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
