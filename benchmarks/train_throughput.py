"""Training throughput: dpaudit's batched engine against Opacus and a plain PyTorch loop.

Setup: sklearn's digits (64 features, 10 classes, scaled to [0, 1]), shuffled
with seed 0, the last 397 rows held out; each of K = 64 models trains on its own random
1,000 of the first 1,400 rows; MLP 64→64→10 (ReLU), 10 epochs, expected batch 64,
learning rate 1.0, DP-SGD with σ = 1, C = 1. Phases:

  dpaudit-dp       dpaudit.training.train_many, DP-SGD, all K models at once
  opacus-dp        Opacus 1.6 PrivacyEngine.make_private (Poisson sampling, default
                   "hooks" grad-sample mode), one model at a time
  dpaudit-plain    train_many without DP (Poisson batches, no clipping / noise)
  torch-plain      a plain PyTorch loop (shuffled mini-batches of 64), one model at a time
  dpaudit-generic  (extra) the generic torch.func path of dpaudit, DP-SGD

Every phase runs in its own subprocess (``--phase``), so its peak memory is that
process's ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (psutil is not installed);
``rss_setup`` is the peak before training starts (interpreter, torch, data), so
``rss_peak - rss_setup`` is what training added. Time is wall-clock training time only
(model construction, Opacus' make_private and the optimiser loop included; imports and
data loading excluded). Phases are interleaved over ``--repeats`` rounds and medians
reported, because the machine is shared.

Work and roofline: "GFLOP/CPUs" is the useful work of the phase's steps at the batch sizes
that were actually drawn (dpaudit: counted by a step observer; Opacus: the loader's
batches; see ``_flop_per_example``), divided by the phase's CPU seconds. Every round also
times ``torch.bmm`` alone, in the main process with the same thread count, on the five
products of one DP-SGD step at the expected batch (forward of both layers, the backward
product, both weight gradients, with the engine's transpositions): that is the
"roofline" of the step's own shapes on this machine, and "of roofline" is the achieved
GFLOP per CPU-second over it.

Floors: every round also times ``torch.randn`` alone on the run's Gaussian noise (K
models × P parameters × 150 steps, drawn 16 steps per call as the engine does). DP-SGD
cannot cost less than plain training plus that noise, nor less than its useful products
at the roofline plus that noise; the benchmark prints both bounds, as "floor of DP /
plain" and "ceiling of the ratio to Opacus".

Note on parity: Opacus' make_private derives q = 1 / len(data_loader) = 1/16 and
expected batch int(1000/16) = 62 with 16 steps per epoch (160 steps), while dpaudit
uses q = 64/1000 and 1000 // 64 = 15 steps per epoch (150 steps): Opacus does 6.7 %
more steps, reported in the "steps" column and corrected for in "ratio per step".

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/train_throughput.py --phases
dpaudit-dp,dpaudit-plain,opacus-dp --threads 1 --repeats 3 [--warm]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

NUM_MODELS = 64
TRAIN_ROWS = 1000
POOL_ROWS = 1400
EPOCHS = 10
BATCH = 64
LR = 1.0
SIGMA = 1.0
CLIP = 1.0
HIDDEN = 64
PHASES = ("dpaudit-dp", "opacus-dp", "dpaudit-plain", "torch-plain", "dpaudit-generic")


def _data(num_models: int):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32)
    perm = np.random.default_rng(0).permutation(len(y))
    X, y = X[perm], y[perm]
    rng = np.random.default_rng(1)
    membership = np.zeros((num_models, POOL_ROWS), dtype=bool)
    for k in range(num_models):
        membership[k, rng.choice(POOL_ROWS, size=TRAIN_ROWS, replace=False)] = True
    return X[:POOL_ROWS], y[:POOL_ROWS], X[POOL_ROWS:], y[POOL_ROWS:], membership


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _torch_module(seed: int):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10)
    )


def _accuracy(module, X, y) -> float:
    import torch

    with torch.no_grad():
        return float((module(torch.as_tensor(X)).argmax(1) == torch.as_tensor(y)).double().mean())


def run_phase(phase: str, threads: int, num_models: int, warm: bool = False) -> dict:
    """Time one phase in this process; with ``warm``, run it once untimed first.

    The warm-up run is the phase's whole timed body, the same for every phase, so the
    second run sees warm allocator pools and kernels (a long audit's steady state).
    """
    import torch

    torch.set_num_threads(threads)
    if warm:
        _run_phase_once(phase, num_models)
    return _run_phase_once(phase, num_models)


def _flop_per_example() -> int:
    """Floating-point work of one example in one DP-SGD step: per linear layer (in → out)
    2·in·out for the forward pass, as much for the weight gradient, and 2·in·out for the
    backward pass of every layer but the first. Counts what any implementation must do;
    norms, softmax, biases and noise excluded."""
    layers = [(64, HIDDEN), (HIDDEN, 10)]
    return sum(4 * i * o for i, o in layers) + sum(2 * i * o for i, o in layers[1:])


def bmm_roofline(num_models: int, threads: int, repeats: int = 20) -> float:
    """GFLOP/s of ``torch.bmm`` alone on the five products of one step of ``num_models``
    models at the expected batch, with the engine's operand layouts (median of
    ``repeats`` timings of the five, CPU seconds)."""
    import torch

    torch.set_num_threads(threads)
    k, b, d, h, c = num_models, BATCH, 64, HIDDEN, 10
    g = torch.Generator().manual_seed(0)
    x, a = torch.randn(k, b, d, generator=g), torch.randn(k, b, h, generator=g)
    w1, w2 = torch.randn(k, h, d, generator=g), torch.randn(k, c, h, generator=g)
    d1, d2 = torch.randn(k, b, h, generator=g), torch.randn(k, b, c, generator=g)
    products = [
        (x, w1.transpose(1, 2)),  # first layer forward
        (a, w2.transpose(1, 2)),  # second layer forward
        (d2, w2),  # backward through the second layer
        (d1.transpose(1, 2), x),  # first layer weight gradient
        (d2.transpose(1, 2), a),  # second layer weight gradient
    ]
    flop = 2 * k * b * (d * h + h * c + c * h + h * d + c * h)
    for left, right in products:  # warm-up
        torch.bmm(left, right)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(5):
            for left, right in products:
                torch.bmm(left, right)
        times.append((time.process_time() - start) / 5)
    return flop / statistics.median(times) / 1e9


def noise_seconds(num_models: int, threads: int, repeats: int = 3) -> float:
    """CPU seconds of ``torch.randn`` alone for the Gaussian noise of one DP run: every
    model's P normals per step for the run's steps, drawn as the engine draws them (16
    steps of one model per call into a reused buffer). Median of ``repeats``.

    DP-SGD must draw these whatever else it does, so they bound from below what DP can
    cost over plain training on this machine with torch's CPU generator (see ``main``).
    """
    import torch

    torch.set_num_threads(threads)
    num_parameters = HIDDEN * 64 + HIDDEN + 10 * HIDDEN + 10
    steps = EPOCHS * (TRAIN_ROWS // BATCH)
    buffer = torch.empty(16, num_parameters)
    generator = torch.Generator().manual_seed(0)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(num_models):
            for first in range(0, steps, 16):
                torch.randn(
                    (min(16, steps - first), num_parameters),
                    generator=generator,
                    out=buffer[: min(16, steps - first)],
                )
        times.append(time.process_time() - start)
    return statistics.median(times)


def _run_phase_once(phase: str, num_models: int) -> dict:
    import warnings

    import torch

    Xtr, ytr, Xte, yte, membership = _data(num_models)
    rss_setup = _rss_mib()
    steps = None
    examples = [0]  # realised batch rows over all models and steps
    cpu_start = time.process_time()
    if phase.startswith("dpaudit"):
        from dpaudit.models import ModelSpec
        from dpaudit.training import DPConfig, TrainingSpec, train_many, train_many_module

        dp = None if phase == "dpaudit-plain" else DPConfig(SIGMA, CLIP)
        training = TrainingSpec(epochs=EPOCHS, batch_size=BATCH, learning_rate=LR, dp=dp)
        spec = ModelSpec(hidden=(HIDDEN,))
        rss_setup = _rss_mib()

        def count(info) -> None:  # one reduction per step: the realised batch rows
            examples[0] += int(info.batch_valid.sum())

        start = time.perf_counter()
        if phase == "dpaudit-generic":
            result = train_many_module(
                _torch_module(0),
                Xtr,
                ytr,
                membership,
                training=training,
                seed=0,
                step_observer=count,
            )
            seconds = time.perf_counter() - start
            accuracies = []
            for k in range(num_models):
                module = _torch_module(0)
                module.load_state_dict({n: v[k] for n, v in result.models.items()})
                accuracies.append(_accuracy(module, Xte, yte))
            accuracy = float(np.mean(accuracies))
        else:
            result = train_many(
                Xtr, ytr, membership, model=spec, training=training, seed=0, step_observer=count
            )
            seconds = time.perf_counter() - start
            accuracy = float(result.models.accuracy(Xte, yte).mean())
        steps = EPOCHS * (TRAIN_ROWS // BATCH)
    elif phase == "opacus-dp":
        from opacus import PrivacyEngine

        warnings.simplefilter("ignore")
        accuracies = []
        start = time.perf_counter()
        for k in range(num_models):
            rows = np.flatnonzero(membership[k])
            dataset = torch.utils.data.TensorDataset(
                torch.as_tensor(Xtr[rows]), torch.as_tensor(ytr[rows])
            )
            loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH)
            module = _torch_module(1000 + k)
            optimizer = torch.optim.SGD(module.parameters(), lr=LR)
            engine = PrivacyEngine()
            module, optimizer, loader = engine.make_private(
                module=module,
                optimizer=optimizer,
                data_loader=loader,
                noise_multiplier=SIGMA,
                max_grad_norm=CLIP,
            )
            steps = 0
            for _ in range(EPOCHS):
                for xb, yb in loader:
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(module(xb), yb).backward()
                    optimizer.step()
                    steps += 1
                    examples[0] += len(xb)
            accuracies.append(_accuracy(module._module, Xte, yte))
        seconds = time.perf_counter() - start
        accuracy = float(np.mean(accuracies))
    elif phase == "torch-plain":
        accuracies = []
        start = time.perf_counter()
        for k in range(num_models):
            rows = np.flatnonzero(membership[k])
            dataset = torch.utils.data.TensorDataset(
                torch.as_tensor(Xtr[rows]), torch.as_tensor(ytr[rows])
            )
            generator = torch.Generator().manual_seed(k)
            loader = torch.utils.data.DataLoader(
                dataset, batch_size=BATCH, shuffle=True, generator=generator
            )
            module = _torch_module(1000 + k)
            optimizer = torch.optim.SGD(module.parameters(), lr=LR)
            steps = 0
            for _ in range(EPOCHS):
                for xb, yb in loader:
                    optimizer.zero_grad()
                    torch.nn.functional.cross_entropy(module(xb), yb).backward()
                    optimizer.step()
                    steps += 1
                    examples[0] += len(xb)
            accuracies.append(_accuracy(module, Xte, yte))
        seconds = time.perf_counter() - start
        accuracy = float(np.mean(accuracies))
    else:
        raise SystemExit(f"unknown phase {phase!r}")
    # CPU seconds of this process from the first timed line to here (accuracy
    # evaluation included: a few milliseconds).
    cpu_seconds = time.process_time() - cpu_start
    return {
        "phase": phase,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "gflop": examples[0] * _flop_per_example() / 1e9,
        "gflop_per_cpu_second": examples[0] * _flop_per_example() / 1e9 / cpu_seconds,
        "models_per_second": num_models / seconds,
        "steps": steps,
        "accuracy": accuracy,
        "rss_setup_mib": rss_setup,
        "rss_peak_mib": _rss_mib(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase", choices=PHASES, help="run one phase (internal)")
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", type=int, default=NUM_MODELS)
    parser.add_argument(
        "--warm", action="store_true", help="time each phase's second run in its process"
    )
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(run_phase(args.phase, args.threads, args.models, args.warm)))
        return
    phases = args.phases.split(",")
    runs: dict[str, list[dict]] = {p: [] for p in phases}
    rooflines: list[float] = []
    noises: list[float] = []
    for repeat in range(args.repeats):
        rooflines.append(bmm_roofline(args.models, args.threads))
        noises.append(noise_seconds(args.models, args.threads))
        print(
            f"[round {repeat + 1}] bmm roofline of the step's shapes {rooflines[-1]:.1f} GFLOP/s  "
            f"Gaussian noise alone {noises[-1]:.3f} s CPU  load average {os.getloadavg()}",
            flush=True,
        )
        for phase in phases:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--phase",
                    phase,
                    "--threads",
                    str(args.threads),
                    "--models",
                    str(args.models),
                    *(["--warm"] if args.warm else []),
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            runs[phase].append(result)
            print(
                f"[round {repeat + 1}] {phase:16s} {result['seconds']:8.2f} s "
                f"{result['cpu_seconds']:8.2f} s CPU "
                f"{result['gflop_per_cpu_second']:6.2f} GFLOP/CPUs "
                f"{result['models_per_second']:8.2f} models/s  acc {result['accuracy']:.4f}  "
                f"peak {result['rss_peak_mib']:.0f} MiB  load {os.getloadavg()[0]:.2f}",
                flush=True,
            )

    def med(phase: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[phase])

    print()
    roofline = statistics.median(rooflines)
    print(
        f"K = {args.models} models, {args.threads} threads, {args.repeats} rounds, "
        f"{'warm' if args.warm else 'cold'}; medians (peak RSS = ru_maxrss of the phase's "
        f"subprocess); bmm roofline of the step's shapes {roofline:.1f} GFLOP/s (median; "
        f"range {min(rooflines):.1f}-{max(rooflines):.1f}); load average {os.getloadavg()}"
    )
    header = (
        f"{'phase':16s} {'seconds':>8s} {'CPU s':>8s} {'GFLOP/CPUs':>10s} {'of roofline':>11s} "
        f"{'models/s':>9s} {'steps':>6s} {'accuracy':>9s} "
        f"{'setup MiB':>10s} {'peak MiB':>9s}"
    )
    print(header)
    for phase in phases:
        print(
            f"{phase:16s} {med(phase, 'seconds'):8.2f} {med(phase, 'cpu_seconds'):8.2f} "
            f"{med(phase, 'gflop_per_cpu_second'):10.2f} "
            f"{100 * med(phase, 'gflop_per_cpu_second') / roofline:10.1f}% "
            f"{med(phase, 'models_per_second'):9.2f} "
            f"{runs[phase][0]['steps']:6d} {med(phase, 'accuracy'):9.4f} "
            f"{med(phase, 'rss_setup_mib'):10.0f} {med(phase, 'rss_peak_mib'):9.0f}"
        )
    print()

    def ratio_lines(a: str, b: str, label: str) -> None:
        if a in runs and b in runs:
            per_round = [
                ra["models_per_second"] / rb["models_per_second"]
                for ra, rb in zip(runs[a], runs[b], strict=True)
            ]
            steps = runs[b][0]["steps"] / runs[a][0]["steps"]
            print(
                f"{label}: median of per-round ratios {statistics.median(per_round):.1f}x "
                f"(range {min(per_round):.1f}-{max(per_round):.1f}); per step "
                f"{statistics.median(per_round) / steps:.1f}x"
            )

    for phase in phases:  # the roofline moves from round to round with the machine
        share = [
            100 * r["gflop_per_cpu_second"] / roof
            for r, roof in zip(runs[phase], rooflines, strict=True)
        ]
        print(
            f"{phase} share of the same round's bmm roofline: median "
            f"{statistics.median(share):.1f}% (range {min(share):.1f}-{max(share):.1f})"
        )
    ratio_lines("dpaudit-dp", "opacus-dp", "dpaudit DP-SGD vs Opacus (models/s)")
    if "dpaudit-dp" in runs and "opacus-dp" in runs:
        cpu_ratio = [
            o["cpu_seconds"] / d["cpu_seconds"]
            for d, o in zip(runs["dpaudit-dp"], runs["opacus-dp"], strict=True)
        ]
        print(
            f"dpaudit DP-SGD vs Opacus (CPU seconds per model): median "
            f"{statistics.median(cpu_ratio):.1f}x (range {min(cpu_ratio):.1f}-{max(cpu_ratio):.1f})"
        )
    ratio_lines("dpaudit-plain", "torch-plain", "dpaudit plain vs torch loop (models/s)")
    ratio_lines("dpaudit-generic", "opacus-dp", "dpaudit generic vs Opacus (models/s)")
    if "dpaudit-dp" in runs and "dpaudit-plain" in runs:
        cost = [
            d["cpu_seconds"] / p["cpu_seconds"]
            for d, p in zip(runs["dpaudit-dp"], runs["dpaudit-plain"], strict=True)
        ]
        print(
            f"dpaudit DP-SGD cost / dpaudit plain cost (CPU seconds): median "
            f"{statistics.median(cost):.2f} (range {min(cost):.2f}-{max(cost):.2f})"
        )
    # Floors, per round: what no implementation on this machine can go below with torch's
    # CPU Gaussian generator. DP must draw the noise (noise_seconds) on top of plain
    # training's work; and it must do the step's useful products, at best at the bmm
    # roofline of their shapes, besides the noise.
    if "dpaudit-dp" in runs and "dpaudit-plain" in runs:
        floor = [
            (p["cpu_seconds"] + n) / p["cpu_seconds"]
            for p, n in zip(runs["dpaudit-plain"], noises, strict=True)
        ]
        print(
            f"floor of DP / plain from the noise alone, (plain + noise) / plain: median "
            f"{statistics.median(floor):.2f} (range {min(floor):.2f}-{max(floor):.2f})"
        )
    if "dpaudit-dp" in runs and "opacus-dp" in runs:
        ceiling = [
            o["cpu_seconds"] / (d["gflop_per_cpu_second"] * d["cpu_seconds"] / r + n)
            for d, o, r, n in zip(
                runs["dpaudit-dp"], runs["opacus-dp"], rooflines, noises, strict=True
            )
        ]
        print(
            f"ceiling of the ratio to Opacus, Opacus CPU / (useful products at the bmm "
            f"roofline + noise): median {statistics.median(ceiling):.1f}x "
            f"(range {min(ceiling):.1f}-{max(ceiling):.1f})"
        )
    if "dpaudit-dp" in runs and "opacus-dp" in runs:
        gap = [
            100 * (d["accuracy"] - o["accuracy"])
            for d, o in zip(runs["dpaudit-dp"], runs["opacus-dp"], strict=True)
        ]
        print(
            "mean held-out accuracy, dpaudit DP-SGD minus Opacus: median "
            f"{statistics.median(gap):+.2f} points (range {min(gap):+.2f} to {max(gap):+.2f})"
        )


if __name__ == "__main__":
    main()
