"""An example user mechanism for `audits/user-mechanism.toml`.

Protocol: ``fn(data, *, rng, size)`` returns ``size`` independent outputs of the
mechanism run on ``data`` (one of the two neighbouring inputs of the audit file).
"""

from __future__ import annotations

import numpy as np


def noisy_sum(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """Sum of values clipped to [0, 1], plus Laplace noise of scale 1/ε with ε = 1."""
    total = float(np.clip(data, 0.0, 1.0).sum())
    return total + rng.laplace(0.0, 1.0, size)
