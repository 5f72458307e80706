"""Floating-point Laplace mechanisms for `audits/floating-*.toml`.

``naive_laplace`` is the textbook sampler: the query value plus λ times an exponential
``−ln U`` with a random sign, computed in doubles. It is ε = Δ/λ-DP on the real numbers
and not DP at all in floating point: the doubles it can output from f(D) and from f(D')
differ (Mironov, CCS 2012, §4). ``numpy_laplace`` adds ``rng.laplace(0, λ)`` (numpy's
inverse-CDF sampler), which has the same flaw.

``snapping_laplace`` is Mironov's snapping mechanism (CCS 2012, §5.2), implemented here for
the audits (not a vetted library; OpenDP's Laplace is one): the input is clamped to
[−B, B], the noise ``λ·S·ln U*`` is drawn with ``U*`` uniform over ALL doubles in (0, 1]
(exponent from a geometric law, 52 random mantissa bits), the sum is rounded to the
nearest multiple of Λ (the smallest power of two ≥ λ) and clamped again. Mironov's
Theorem 1 gives (1/λ + 2⁻⁴⁹·B/λ)-DP for sensitivity 1 and λ < B < 2⁴⁶·λ, assuming a
correctly rounded logarithm.

Protocol: ``fn(data, *, rng, size)`` returns ``size`` outputs on ``data``; the query is
the sum of the records.
"""

from __future__ import annotations

import numpy as np

SCALE = 1.0  # λ: Δ = 1, so ε = 1 on the reals
BOUND = 16.0  # B of the snapping mechanism


def naive_laplace(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """Textbook floating-point Laplace: sum(data) + sign · λ · (−ln U), U = 1 − random()."""
    x = float(np.sum(data))
    u = 1.0 - rng.random(size)  # (0, 1]: never log(0)
    sign = np.where(rng.random(size) < 0.5, -1.0, 1.0)
    return x + sign * (SCALE * -np.log(u))


def numpy_laplace(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """sum(data) + numpy's Laplace sample of scale λ."""
    return float(np.sum(data)) + rng.laplace(0.0, SCALE, size)


def _uniform_doubles(rng: np.random.Generator, size: int) -> np.ndarray:
    """U* uniform over the doubles of (0, 1], each with the probability of the reals it
    stands for: exponent −1 − e with e geometric(½), then 52 uniform mantissa bits."""
    e = rng.geometric(0.5, size) - 1  # P(e = j) = 2^-(j+1)
    mantissa = rng.integers(0, 1 << 52, size, dtype=np.int64).astype(float) * 2.0**-52
    return np.ldexp(1.0 + mantissa, -1 - e)  # in [2^(-1-e), 2^(-e))


def snapping_laplace(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """Mironov's snapping mechanism with λ = SCALE and B = BOUND (see the module)."""
    x = float(np.clip(np.sum(data), -BOUND, BOUND))
    lam = 2.0 ** np.ceil(np.log2(SCALE))  # Λ: the smallest power of two ≥ λ
    sign = np.where(rng.random(size) < 0.5, -1.0, 1.0)
    noisy = x + sign * SCALE * np.log(_uniform_doubles(rng, size))
    return np.clip(np.round(noisy / lam) * lam, -BOUND, BOUND)  # exact: Λ a power of two
