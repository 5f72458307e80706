"""The tensor method (Wang, Lee, Lei 2023) against the width m of a two-layer network.

Run:  .venv/bin/python benchmarks/reconstruction_tensor.py [--trials 6]

B = 3 Gaussian inputs in d = 10, one tanh layer of m hidden units (He-initialised, known
to the server), no defence. The first layer's moment tensor is decomposed by
:func:`dpaudit.reconstruction.tensor_inversion`; the error of each input is 1 − |cos| to
its Hungarian-matched direction. Prints the median and the 75th percentile over
trials × B inputs, the fraction within 1e-2, and the time per decomposition. The moment
estimate's entries concentrate like 1/√m, so the error of a well-separated component
should fall like 1/m (1 − cos θ ≈ θ²/2).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpaudit.reconstruction import (
    Network,
    direction_errors,
    per_example_gradients,
    tensor_inversion,
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=6)
    args = parser.parse_args()
    print("| m | median 1 − cos | 75th pct | within 1e-2 | s / decomposition |")
    print("|---|---|---|---|---|")
    for m in (500, 2000, 8000, 32000):
        errors, seconds = [], 0.0
        for seed in range(args.trials):
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
            f"{np.mean(e <= 1e-2):.2f} | {seconds / args.trials:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
