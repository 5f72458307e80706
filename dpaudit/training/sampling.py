"""The one formula for the sampling rate q and the number of steps T of a training recipe.

The engine runs it (:mod:`dpaudit.training.engine`, :mod:`dpaudit.training.parallel`), and
noise calibration and ``dpaudit account`` read it through :mod:`dpaudit.recipes`, so what
is accounted is what the engine runs. Torch-free: loading an audit file may import it.
"""

from __future__ import annotations

import math
from typing import overload

import numpy as np

__all__ = ["sampling_plan", "steps_from_rate"]


@overload
def sampling_plan(
    members: int, *, batch_size: int, epochs: int, full_batch: bool
) -> tuple[float, int]: ...
@overload
def sampling_plan(
    members: np.ndarray, *, batch_size: int, epochs: int, full_batch: bool
) -> tuple[np.ndarray, np.ndarray]: ...
def sampling_plan(
    members: int | np.ndarray, *, batch_size: int, epochs: int, full_batch: bool
) -> tuple[float, int] | tuple[np.ndarray, np.ndarray]:
    """The sampling rate q and number of steps T of a model with ``members`` rows.

    Full batch (DP-GD): q = 1 and T = epochs. Poisson sampling: q = b / n and an epoch is
    ⌊n / b⌋ steps — Opacus' ``DPDataLoader`` makes ``int(1 / q)`` steps per epoch, and
    n // b is that number computed without floating-point rounding.

    Args:
        members: n, the rows the model samples from (an int, or an array of one per model).
        batch_size: b, the expected batch size.
        epochs: passes over the data.
        full_batch: every member in every step.

    Returns:
        ``(q, T)``: floats and ints for an int ``members``, arrays for an array.
    """
    n = np.asarray(members, dtype=np.int64)
    if full_batch:
        q = np.ones(n.shape)
        steps = np.full(n.shape, epochs, dtype=np.int64)
    else:
        q = batch_size / n
        steps = (epochs * (n // batch_size)).astype(np.int64)
    if n.ndim == 0:
        return float(q), int(steps)
    return q, steps


def steps_from_rate(sampling_rate: float, *, epochs: int) -> int:
    """T for ``epochs`` at Poisson rate q when only q is known: epochs · ⌊1/q⌋.

    The same rule as :func:`sampling_plan` (⌊1/q⌋ = ⌊n/b⌋ when q = b/n); 1e-9 absorbs the
    rounding of 1/q for rates such as 0.01.
    """
    return int(epochs * max(1, math.floor(1.0 / sampling_rate + 1e-9)))
