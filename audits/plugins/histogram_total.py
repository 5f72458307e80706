"""A noisy two-bin histogram that also releases the total, for
`audits/learned-histogram*.toml`.

Records fall in bin 0 (value < 0.5) or bin 1 (value ≥ 0.5); each count gets Gaussian noise
of standard deviation 1. Adding or removing one record changes one count by 1, so the two
noisy counts are exactly 1-GDP. The outputs are 3-vectors (count 0, count 1, total).

- ``histogram``: the total is the sum of the two NOISY counts: post-processing, still
  1-GDP.
- ``histogram_buggy``: the total is the TRUE total plus fresh noise of standard deviation
  1, a second release of the data nobody accounted for: the mechanism is √2-GDP
  (Dong, Roth, Su 2022, Cor. 3.3: μ-GDP releases compose to √(μ₁² + μ₂²)), not 1-GDP.

Protocol: ``fn(data, *, rng, size)`` returns ``(size, 3)`` outputs. No log density and
no score is given: `score = "learned"` fits one.
"""

from __future__ import annotations

import numpy as np

SIGMA = 1.0


def _counts(data: np.ndarray) -> np.ndarray:
    values = np.asarray(data, dtype=float)
    high = int(np.sum(values >= 0.5))
    return np.array([values.size - high, high], dtype=float)


def histogram(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """Noisy counts and their sum: 1-GDP."""
    noisy = _counts(data) + rng.normal(0.0, SIGMA, (size, 2))
    return np.column_stack([noisy, noisy.sum(axis=1)])


def histogram_buggy(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """Noisy counts and a freshly noised true total: √2-GDP."""
    counts = _counts(data)
    noisy = counts + rng.normal(0.0, SIGMA, (size, 2))
    total = counts.sum() + rng.normal(0.0, SIGMA, size)
    return np.column_stack([noisy, total])
