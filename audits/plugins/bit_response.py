"""Binary randomised response of one bit, for `audits/learned-rr*.toml`.

The record is one bit; the mechanism reports it with probability ``keep`` and its flip
otherwise. It is ε-DP with ε = ln(keep/(1 − keep)): ``keep = e/(1 + e) ≈ 0.731`` gives
exactly ε = 1. ``respond_buggy`` keeps the bit with probability 0.83 (a constant typed
in by hand), so it is only ln(0.83/0.17) ≈ 1.586-DP while claiming ε = 1.

Protocol: ``fn(data, *, rng, size)`` returns ``size`` independent reports on ``data``.
Nothing here says which report points to which input: `score = "learned"` finds out.
"""

from __future__ import annotations

import math

import numpy as np

KEEP = math.e / (1.0 + math.e)
KEEP_BUGGY = 0.83


def _respond(data: np.ndarray, rng: np.random.Generator, size: int, keep: float) -> np.ndarray:
    bit = int(np.asarray(data).reshape(-1)[0])
    kept = rng.random(size) < keep
    return np.where(kept, bit, 1 - bit).astype(float)


def respond(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """Randomised response calibrated to ε = 1."""
    return _respond(data, rng, size, KEEP)


def respond_buggy(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """Randomised response that keeps the bit too often (ε ≈ 1.586, not 1)."""
    return _respond(data, rng, size, KEEP_BUGGY)
