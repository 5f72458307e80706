"""Gaussian noise: how fast can this machine draw the normals DP-SGD must add?

DP-SGD adds N(0, σ²C²) to every parameter of every model at every step: K·P·T normals
per run (46 M for train_throughput's 64 MLPs 64→64→10 over 150 steps). Their cost is a
floor under "DP / plain" and a ceiling over "× Opacus" (train_throughput.py prints both),
so this benchmark asks whether any well-kept library draws float32 normals faster than
the engine's ``torch.randn`` on this machine, and where torch's time goes.

Sources, each filling (or returning) a block of 16 steps × 308,000 normals (4.9 M, the
engine's block for 64 of these MLPs), CPU seconds per normal, one thread, median of
``--rounds``:

- ``torch.randn`` (float32, into a reused buffer): the engine's generator (MT19937 and
  a vectorised Box–Muller);
- ``torch.rand`` (float32): the uniforms alone, i.e. what the Box–Muller transform starts
  from; randn − rand is the transform's cost;
- NumPy ``Generator.standard_normal`` (float32 and float64 ziggurats) on PCG64, SFC64,
  Philox and MT19937;
- NumPy ``SFC64.random_raw``: raw bits alone (per 32 bits), the fastest bit source here;
- those bits through a Box–Muller transform written with torch's vectorised operations
  (24-bit uniforms in (0, 1), √(−2 ln u₁)·(cos, sin)(2π u₂)), in one block and in
  cache-sized blocks of 77,000: what replacing torch's MT19937 by a faster bit source
  would cost without native code;
- Intel MKL VSL through ``mkl_random`` (float64; Box–Muller, Box–Muller 2 and inverse
  CDF on SFMT19937 and Philox4x32-10; and the fastest, SFMT19937 inverse CDF, drawn in
  77,000-normal blocks and cast into a float32 buffer as the engine would need), if
  installed;
- JAX ``jax.random.normal`` (threefry2x32, float32, jitted, XLA CPU with one thread), if
  installed.

mkl_random and JAX are not dpaudit dependencies; install them in a scratch environment to
measure them (``python -m venv /tmp/noise && /tmp/noise/bin/pip install torch==2.13.0 numpy
mkl_random jax``) and run this file with that interpreter.

Run: ``OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 .venv/bin/python benchmarks/gaussian_noise.py
--rounds 7``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

import numpy as np

BLOCK = 16 * 308_000  # 16 steps of 64 MLPs 64→64→10 (4,810 parameters each)
MODEL_BLOCK = 77_000  # about one model's 16 steps (76,960): what one engine call draws


def _per_element(draw: Callable[[], object], count: int, rounds: int) -> float:
    """Median CPU nanoseconds per element of ``draw`` (one warm-up call first)."""
    draw()
    times = []
    for _ in range(rounds):
        start = time.process_time()
        draw()
        times.append(time.process_time() - start)
    return statistics.median(times) / count * 1e9


def _torch_sources(rounds: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    buffer = torch.empty(BLOCK)
    return {
        "torch.randn float32 (MT19937 + Box-Muller)": _per_element(
            lambda: torch.randn(BLOCK, generator=generator, out=buffer), BLOCK, rounds
        ),
        "torch.rand float32 (the uniforms alone)": _per_element(
            lambda: torch.rand(BLOCK, generator=generator, out=buffer), BLOCK, rounds
        ),
    }


def _numpy_sources(rounds: int) -> dict[str, float]:
    out32 = np.empty(BLOCK, dtype=np.float32)
    out64 = np.empty(BLOCK, dtype=np.float64)
    results = {}
    for name in ("PCG64", "SFC64", "Philox", "MT19937"):
        gen = np.random.Generator(getattr(np.random, name)(0))
        results[f"numpy {name} ziggurat float32"] = _per_element(
            lambda gen=gen: gen.standard_normal(out=out32, dtype=np.float32), BLOCK, rounds
        )
        results[f"numpy {name} ziggurat float64"] = _per_element(
            lambda gen=gen: gen.standard_normal(out=out64), BLOCK, rounds
        )
    bits = np.random.SFC64(0)
    results["numpy SFC64 raw bits, per 32 bits"] = _per_element(
        lambda: bits.random_raw(BLOCK // 2), BLOCK, rounds
    )
    return results


def _box_muller_from_numpy_bits(rounds: int) -> dict[str, float]:
    import math

    import torch

    torch.set_num_threads(1)
    bits = np.random.SFC64(0)

    def transform(out: torch.Tensor) -> None:
        n, half = out.numel(), out.numel() // 2
        raw = torch.from_numpy(bits.random_raw(half).view(np.int32))
        uniform = torch.bitwise_and(raw, 0xFFFFFF).to(torch.float32).add_(0.5).mul_(2.0**-24)
        radius = uniform[:half].log_().mul_(-2.0).sqrt_()
        angle = uniform[half:n].mul_(2 * math.pi)
        torch.cos(angle, out=out[:half]).mul_(radius)
        torch.sin(angle, out=out[half:]).mul_(radius)

    whole = torch.empty(BLOCK)
    small = torch.empty(MODEL_BLOCK)

    def in_small_blocks() -> None:
        for _ in range(BLOCK // small.numel()):
            transform(small)

    count = BLOCK // small.numel() * small.numel()
    return {
        "numpy SFC64 bits + torch Box-Muller ops": _per_element(
            lambda: transform(whole), BLOCK, rounds
        ),
        "numpy SFC64 bits + torch Box-Muller, 77k blocks": _per_element(
            in_small_blocks, count, rounds
        ),
    }


def _mkl_sources(rounds: int) -> dict[str, float]:
    try:
        import mkl_random
    except ImportError:
        return {}
    import warnings

    warnings.simplefilter("ignore", DeprecationWarning)  # RandomState, still the float64 API
    results = {}
    for brng in ("SFMT19937", "PHILOX4X32X10"):
        state = mkl_random.RandomState(0, brng=brng)
        for method in ("BoxMuller", "BoxMuller2", "ICDF"):
            results[f"MKL VSL {brng} {method} float64"] = _per_element(
                lambda state=state, method=method: state.standard_normal(BLOCK, method=method),
                BLOCK,
                rounds,
            )
    # The fastest of these as the engine would need it: float32, in cache-sized blocks.
    state = mkl_random.RandomState(0, brng="SFMT19937")
    out = np.empty(MODEL_BLOCK, dtype=np.float32)

    def icdf_into_float32() -> None:
        for _ in range(BLOCK // out.size):
            np.copyto(out, state.standard_normal(out.size, method="ICDF"), casting="same_kind")

    results["MKL VSL SFMT19937 ICDF, 77k blocks into float32"] = _per_element(
        icdf_into_float32, BLOCK // out.size * out.size, rounds
    )
    return results


def _jax_sources(rounds: int) -> dict[str, float]:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}
    draw = jax.jit(lambda key: jax.random.normal(key, (BLOCK,), dtype=jnp.float32))
    key = jax.random.key(0)
    return {
        "JAX threefry2x32 float32 (jit, XLA CPU)": _per_element(
            lambda: draw(key).block_until_ready(), BLOCK, rounds
        )
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    results: dict[str, float] = {}
    for sources in (
        _torch_sources,
        _numpy_sources,
        _box_muller_from_numpy_bits,
        _mkl_sources,
        _jax_sources,
    ):
        results.update(sources(args.rounds))
    for missing, module in (("MKL VSL", "mkl_random"), ("JAX", "jax")):
        if not any(name.startswith(missing) for name in results):
            print(f"{missing}: {module} not installed, skipped")
    reference = results["torch.randn float32 (MT19937 + Box-Muller)"]
    print(f"\nCPU ns per normal, one thread, block of {BLOCK:,}, median of {args.rounds}")
    print(f"load average {os.getloadavg()}")
    for name, ns in sorted(results.items(), key=lambda item: item[1]):
        print(f"{name:48s} {ns:7.2f} ns   {ns / reference:5.2f}x torch.randn")
    transform = reference - results["torch.rand float32 (the uniforms alone)"]
    print(f"\ntorch.randn minus torch.rand (the Box-Muller transform): {transform:.2f} ns")


if __name__ == "__main__":
    main()
