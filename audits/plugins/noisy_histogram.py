"""An example user mechanism with VECTOR outputs for `audits/user-mechanism-vector.toml`.

A two-bin histogram of records (bin 0: value < 0.5, bin 1: value ≥ 0.5) with Gaussian noise
of standard deviation ``SIGMA`` on each count. Adding or removing one record changes one
count by 1 (ℓ2 sensitivity 1), so the mechanism is exactly (1/SIGMA)-GDP.

Protocol: ``noisy_histogram(data, *, rng, size)`` returns ``(size, 2)`` outputs, and
``log_density(outputs, data)`` the log density of each output under the mechanism run on
``data``, so dpaudit scores each output by the exact likelihood ratio.
"""

from __future__ import annotations

import numpy as np

SIGMA = 1.0


def _counts(data: np.ndarray) -> np.ndarray:
    values = np.asarray(data, dtype=float)
    high = int(np.sum(values >= 0.5))
    return np.array([values.size - high, high], dtype=float)


def noisy_histogram(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` noisy two-bin histograms of ``data``."""
    return _counts(data) + rng.normal(0.0, SIGMA, (size, 2))


def log_density(outputs: np.ndarray, data: np.ndarray) -> np.ndarray:
    """log N(outputs; counts(data), SIGMA² I), one value per output row."""
    z = (np.asarray(outputs, dtype=float) - _counts(data)) / SIGMA
    return -0.5 * np.sum(z * z, axis=1) - z.shape[1] * np.log(SIGMA * np.sqrt(2.0 * np.pi))
