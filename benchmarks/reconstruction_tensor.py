"""The tensor method (Wang, Lee, Lei 2023): its error against the batch size B and width m.

Run:  .venv/bin/python benchmarks/reconstruction_tensor.py [--repeats 5] [--data digits]
          [--dim 16] [--batch-sizes 1 2 4 8 16] [--widths 64 256 1024]
      .venv/bin/python benchmarks/reconstruction_tensor.py --part width [--trials 6]

``--part slopes`` (default): for B ∈ {1, 2, 4, 8, 16} and m ∈ {64, 256, 1024}, ``repeats``
independent batches per cell, each on a freshly drawn two-layer tanh network (He
initialisation, bias, squared loss on the digit's value; no defence). The inputs are B
distinct 8×8 digits (d = 64, ``--data digits``) or B standard Gaussian vectors in
``--dim`` dimensions (``--data gaussian``). The first layer's moment tensor is decomposed
by :func:`dpaudit.reconstruction.tensor_inversion`; each input's error is
sin∠(x̂, x) = min_t ‖t·x̂ − x‖/‖x‖ after Hungarian matching (the method gives directions
only), a batch's statistic its median, a cell's the median over batches (order-statistic
95 % interval). The slopes of log error against log B and log m are fitted by
:func:`dpaudit.reconstruction.fit_scaling` (least squares on the cells' medians,
percentile bootstrap over batches), on all cells and on the cells where the rate
B√(d/m) ≤ 1 (elsewhere the bound says nothing: sin∠ ≤ 1 always). CPU seconds per
decomposition: ``time.process_time`` with one torch thread.

``--part width``: the earlier table (B = 3 Gaussian inputs in d = 10, m up to 32,000).
"""

from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np
import torch

from dpaudit.reconstruction.methods import (
    Network,
    direction_errors,
    direction_nrmse,
    fit_scaling,
    load_digits_images,
    median_interval,
    per_example_gradients,
    tensor_inversion,
)

BATCH_SIZES = (1, 2, 4, 8, 16)
WIDTHS = (64, 256, 1024)


def _batch(data: str, dim: int, batch_size: int, rng: np.random.Generator) -> tuple:
    if data == "digits":
        images, digits = load_digits_images()
        rows = rng.choice(images.shape[0], batch_size, replace=False)
        return images[rows], digits[rows].astype(float)
    return rng.normal(size=(batch_size, dim)), 3.0 * rng.normal(size=batch_size)


def slopes(
    repeats: int,
    data: str,
    dim: int,
    seed: int,
    batch_sizes: tuple[int, ...] = BATCH_SIZES,
    widths: tuple[int, ...] = WIDTHS,
) -> None:
    d = 64 if data == "digits" else dim
    print(f"data = {data}, d = {d}, {repeats} batches per cell, load {os.getloadavg()}")
    print("| B | m | B√(d/m) | median sin∠ [95 % CI] | CPU s / decomposition |")
    print("|---|---|---|---|---|")
    cells = []
    for m in widths:
        for b in batch_sizes:
            medians, cpu = [], 0.0
            for r in range(repeats):
                rng = np.random.default_rng([seed, b, r])  # the same batches for every m
                x, y = _batch(data, d, b, rng)
                net = Network.random((d, m, 1), activation="tanh", seed=seed * 7919 + 31 * m + r)
                g = per_example_gradients(net, x, y).mean(axis=0)
                t0 = time.process_time()
                v = tensor_inversion(net, g, batch_size=b, seed=r)
                cpu += time.process_time() - t0
                medians.append(float(np.median(direction_nrmse(x, v)[0])))
            med = np.array(medians)
            ci = median_interval(med, confidence_level=0.95)
            cells.append((b, m, med))
            print(
                f"| {b} | {m} | {b * math.sqrt(d / m):.3g} | {np.median(med):.3f} "
                f"[{ci.low:.3f}, {ci.high:.3f}] | {cpu / repeats:.2f} |",
                flush=True,
            )
    below = [c for c in cells if c[0] * math.sqrt(d / c[1]) <= 1.0]
    groups = ((f"all {len(cells)} cells", cells), (f"B√(d/m) ≤ 1 ({len(below)} cells)", below))
    for name, chosen in groups:
        if len({c[0] for c in chosen}) < 2 and len({c[1] for c in chosen}) < 2:
            continue
        fit = fit_scaling(chosen, confidence_level=0.95, resamples=2000, seed=seed)
        sb, sbi = fit.slope_batch, fit.slope_batch_interval
        sm, smi = fit.slope_width, fit.slope_width_interval
        text_b = "—" if sb is None or sbi is None else f"{sb:.3f} [{sbi.low:.3f}, {sbi.high:.3f}]"
        text_m = "—" if sm is None or smi is None else f"{sm:.3f} [{smi.low:.3f}, {smi.high:.3f}]"
        print(f"slopes, {name}: log B {text_b} (theory 1); log m {text_m} (theory −0.5)")
    print(f"load average after: {os.getloadavg()}")


def width(trials: int) -> None:
    print("| m | median 1 − cos | 75th pct | within 1e-2 | s / decomposition |")
    print("|---|---|---|---|---|")
    for m in (500, 2000, 8000, 32000):
        errors, seconds = [], 0.0
        for seed in range(trials):
            net = Network.random((10, m, 1), activation="tanh", seed=seed)
            rng = np.random.default_rng(seed)
            x, y = rng.normal(size=(3, 10)), 3.0 * rng.normal(size=3)
            g = per_example_gradients(net, x, y).mean(axis=0)
            t0 = time.perf_counter()
            v = tensor_inversion(net, g, batch_size=3, seed=seed)
            seconds += time.perf_counter() - t0
            errors.append(direction_errors(x, v))
        e = np.concatenate(errors)
        print(
            f"| {m} | {np.median(e):.2e} | {np.percentile(e, 75):.2e} | "
            f"{np.mean(e <= 1e-2):.2f} | {seconds / trials:.2f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=("slopes", "width"), default="slopes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data", choices=("digits", "gaussian"), default="digits")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    parser.add_argument("--widths", type=int, nargs="+", default=list(WIDTHS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.part == "width":
        width(args.trials)
    else:
        slopes(
            args.repeats,
            args.data,
            args.dim,
            args.seed,
            tuple(args.batch_sizes),
            tuple(args.widths),
        )


if __name__ == "__main__":
    main()
