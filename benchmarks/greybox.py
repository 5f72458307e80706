"""Grey-box checks of DP-SGD runs: validity, power and the engine observer's cost.

Run:  .venv/bin/python benchmarks/greybox.py validity|power|overhead

- validity: false-rejection rates of the batch-size and noise tests on 2,000 simulated
  correct runs at α = 0.05 and 0.01, with a 95 % Clopper–Pearson upper limit;
- power: σ/10, σ/2, fixed-size batches and q' = 0.8 q, at α = 0.01 (the share of each check
  in audits/dpsgd-dpsgd.toml), against the exact χ² power where it has one;
- overhead: the engine trainer with and without the grey-box observer (CPU seconds, 1
  thread, median of 3).
"""
# ruff: noqa: E501  (long result lines are printed as they are read)

import os
import sys
import time

import numpy as np
from scipy import stats

from dpaudit.bounds.greybox import GreyBoxObservations, batch_size_test, noise_test


def obs(b, n, q, noise=None, sigma=1.0, clip=1.0):
    k, t = b.shape
    return GreyBoxObservations(
        batch_sizes=b,
        dataset_size=n,
        sampling_rate=q,
        clipped_norms_max=np.full((k, t), np.nan),
        clipping_norm=clip,
        untouched_noise=np.full((k, t), np.nan) if noise is None else noise,
        noise_multiplier=sigma,
        steps_run=np.full(k, t),
        steps_accounted=t,
    )


def cp_high(x, n, c=0.95):
    return 1.0 if x == n else float(stats.beta.ppf(c, x + 1, n - x))


part = sys.argv[1]
rng = np.random.default_rng(2026)
R = 2000
if part == "validity":
    for alpha in (0.05, 0.01):
        for n, q, k, t in [
            (100, 0.25, 1, 8),
            (100, 0.25, 500, 8),
            (100, 0.02, 10, 500),
            (5, 0.1, 2, 8),
        ]:
            rej = sum(
                batch_size_test(obs(rng.binomial(n, q, (k, t)), n, q)).p_value < alpha
                for _ in range(R)
            )
            print(
                f"batch n={n} q={q} K={k} T={t} alpha={alpha}: {rej}/{R} = {rej / R:.4f} (95% CP upper {cp_high(rej, R):.4f})"
            )
        for k, t in [(1, 8), (500, 8)]:
            rej = sum(
                noise_test(
                    obs(np.full((k, t), 1), 100, 0.25, noise=rng.normal(0, 1, (k, t)))
                ).p_value
                < alpha
                for _ in range(R)
            )
            print(
                f"noise K={k} T={t} alpha={alpha}: {rej}/{R} = {rej / R:.4f} (95% CP upper {cp_high(rej, R):.4f})"
            )
elif part == "power":
    alpha = 0.01  # the share of each check in audits/dpsgd-dpsgd.toml (c = 0.95, k = 5)
    n, q, t = 100, 0.25, 8
    p = [
        noise_test(obs(np.full((1, t), 25), n, q, noise=rng.normal(0, 0.1, (1, t)))).p_value
        for _ in range(R)
    ]
    print(
        f"sigma/10, one run T={t}: detected {np.mean(np.array(p) < alpha):.4f}, median p {np.median(p):.3g}; exact power {stats.chi2.cdf(100 * stats.chi2.ppf(alpha, t), t):.6f}"
    )
    p = [
        noise_test(obs(np.full((1, t), 25), n, q, noise=rng.normal(0, 0.5, (1, t)))).p_value
        for _ in range(R)
    ]
    print(
        f"sigma/2, one run T={t}: detected {np.mean(np.array(p) < alpha):.4f}; exact power {stats.chi2.cdf(4 * stats.chi2.ppf(alpha, t), t):.4f}"
    )
    for k in (1, 2, 4):
        p = [
            noise_test(obs(np.full((k, t), 25), n, q, noise=rng.normal(0, 0.5, (k, t)))).p_value
            for _ in range(R)
        ]
        print(f"  sigma/2, K={k}: detected {np.mean(np.array(p) < alpha):.4f}")
    p = [batch_size_test(obs(np.full((1, t), 25), n, q)).p_value for _ in range(1)]
    print(f"fixed-size batches b = nq = 25, one run T={t}: p = {p[0]:.3g}")
    p = [batch_size_test(obs(np.full((1, 2), 25), n, q)).p_value]
    print(f"fixed-size batches b = nq = 25, one run T=2: p = {p[0]:.3g}")
    for n2, q2 in [(100, 0.25), (569, 0.25), (10000, 0.01)]:
        for k in (1, 2, 4, 8, 16):
            p = np.array(
                [
                    batch_size_test(obs(rng.binomial(n2, 0.8 * q2, (k, t)), n2, q2)).p_value
                    for _ in range(400)
                ]
            )
            print(f"q' = 0.8q, n={n2}, q={q2}, T={t}, K={k}: detected {np.mean(p < alpha):.3f}")
            if np.mean(p < alpha) > 0.99:
                break
elif part == "overhead":
    import torch

    torch.set_num_threads(1)
    from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
    from dpaudit.dpsgd.setup import _setup
    from dpaudit.trainers import CanarySetup, TrainerSettings
    from dpaudit.trainers.engine import _engine_train
    from dpaudit.trainers.observers import _GreyBoxObserver

    for rows, bs, ep in [(100, 25, 2), (100, 2, 10)]:
        s = DpsgdSection.model_validate(
            {
                "trainer": "dpsgd",
                "trials": 500,
                "rows": rows,
                "training": {
                    "batch_size": bs,
                    "epochs": ep,
                    "learning_rate": 0.5,
                    "dp": {"noise_multiplier": 0.8, "clipping_norm": 1.0},
                },
            }
        )
        setup = _setup(DpsgdSpec(section=s, seed=0, unit_size=1000, base_dir="."))
        K = 1000 if ep == 2 else 200
        inc = np.arange(K) % 2 == 1
        mem = np.ones((K, setup.X.shape[0]), bool)
        canary = CanarySetup(
            kind="dirac", threat_model="white-box", included=inc, direction=setup.direction
        )
        settings = TrainerSettings(model=setup.model, training=setup.training, num_classes=2)
        res = {True: [], False: []}
        for r in range(3):
            for with_gb in (False, True):
                c0, w0 = time.process_time(), time.perf_counter()
                gb = _GreyBoxObserver.for_run(setup.X, mem, canary, 0) if with_gb else None
                _, _, recs = _engine_train(
                    setup.X,
                    setup.y,
                    mem,
                    seed=r,
                    canary=canary,
                    settings=settings,
                    training=setup.training,
                    greybox=gb,
                )
                if gb is not None:
                    o = gb.observations(recs)
                    from dpaudit.bounds.greybox import greybox_tests

                    greybox_tests(o)
                res[with_gb].append((time.process_time() - c0, time.perf_counter() - w0))
        T = setup.training.epochs * (rows // bs)
        for k_, v in res.items():
            cpu = np.median([a for a, _ in v])
            wall = np.median([b for _, b in v])
            print(
                f"rows={rows} q={bs / rows} T={T} K={K} greybox={k_}: CPU {cpu:.2f} s, wall {wall:.2f} s (median of 3)"
            )
print("load average", os.getloadavg())
