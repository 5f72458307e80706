"""Canary exposure (Carlini et al., "The Secret Sharer", USENIX Security 2019,
arXiv:1802.08232, §4, Def. 3 and §4.2): how far up a model ranks an inserted secret
among every candidate it could have been.

Pure functions of scores (log-perplexities: lower means the model prefers the text): no
torch, no I/O. For a secret s in a candidate space R,

    rank(s) = 1 + #{r ∈ R, r ≠ s : score(r) < score(s)} + ½ #{r ≠ s : score(r) = score(s)}
    exposure(s) = log2 |R| − log2 rank(s)

(ties counted one half, as the AUC counts them). When R can be enumerated the rank is
exact (:func:`exposure`). Otherwise n candidates drawn uniformly from R estimate the
fraction p = #{r : score(r) < score(s)}/|R| of the space the model prefers to the secret;
``exposure = −log2 p`` up to the rank's own +1, and the Clopper–Pearson interval of p at
level c gives an interval for it (:func:`estimated_exposure`, Carlini et al. §4.2 estimate
the same fraction by sampling; their skew-normal fit is not used here, so the error stated
is the exact binomial one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from dpaudit.errors import DataError
from dpaudit.stats import ConfidenceInterval, clopper_pearson

__all__ = ["Exposure", "estimated_exposure", "exposure", "rank"]


@dataclass(frozen=True)
class Exposure:
    """A secret's exposure in bits.

    Attributes:
        value: the exposure (exact, or the point estimate −log2((k + ½)/n) from a sample).
        space_size: |R| (for an estimate, the size it was sampled from).
        rank: the exact rank, or ``None`` for an estimate.
        interval: the exposure's interval at ``confidence_level`` (exact: a point).
        confidence_level: c of the interval (1.0 for an exact rank).
        method: ``"exact"`` or ``"sampled, clopper-pearson"``.
    """

    value: float
    space_size: int
    rank: float | None
    interval: ConfidenceInterval
    confidence_level: float
    method: str


def _scores(values: ArrayLike, what: str) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64).ravel()
    if out.size == 0:
        raise DataError(f"{what} is empty")
    if not np.all(np.isfinite(out)):
        raise DataError(f"{what} holds a NaN or infinite score")
    return out


def rank(secret: float, others: ArrayLike) -> float:
    """The secret's rank among itself and ``others`` (the rest of the space), ties ½."""
    o = _scores(others, "the other candidates' scores") if np.size(others) else np.empty(0)
    return 1.0 + float(np.sum(o < secret)) + 0.5 * float(np.sum(o == secret))


def exposure(secret: float, others: ArrayLike) -> Exposure:
    """Exact exposure of a secret whose whole candidate space was scored.

    Args:
        secret: the secret's score (log-perplexity).
        others: the scores of every other candidate of the space.
    """
    if not math.isfinite(secret):
        raise DataError("the secret's score is NaN or infinite")
    size = int(np.size(others)) + 1
    r = rank(secret, others)
    value = math.log2(size) - math.log2(r)
    return Exposure(value, size, r, ConfidenceInterval(value, value), 1.0, "exact")


def estimated_exposure(
    secret: float,
    sample: ArrayLike,
    *,
    space_size: int,
    confidence_level: float = 0.95,
) -> Exposure:
    """Exposure estimated from n candidates drawn uniformly (with replacement) from a space
    too large to enumerate.

    k = #{sampled candidates the model prefers: score < secret's} (ties ½) is Binomial(n, p)
    with p the preferred fraction of the space; exposure ≈ −log2 p. The point estimate is
    −log2((k + ½)/n) (a finite value when k = 0), and the two-sided Clopper–Pearson
    interval (p_low, p_high) of p at ``confidence_level`` gives the interval
    (−log2 p_high, min(log2 |R|, −log2 p_low)) of the exposure.

    Raises:
        DataError: an empty sample, non-finite scores, or ``space_size`` below 1.
    """
    if space_size < 1:
        raise DataError(f"space_size must be at least 1; got {space_size}")
    if not math.isfinite(secret):
        raise DataError("the secret's score is NaN or infinite")
    s = _scores(sample, "the sampled candidates' scores")
    n = s.size
    k = float(np.sum(s < secret)) + 0.5 * float(np.sum(s == secret))
    ci = clopper_pearson(math.floor(k), n, confidence_level=confidence_level)
    high = clopper_pearson(math.ceil(k), n, confidence_level=confidence_level).high
    top = math.log2(space_size)
    value = min(top, -math.log2((k + 0.5) / n))
    low_bits = -math.log2(high) if high > 0 else top
    high_bits = top if ci.low <= 0 else min(top, -math.log2(ci.low))
    return Exposure(
        value,
        space_size,
        None,
        ConfidenceInterval(max(0.0, low_bits), high_bits),
        confidence_level,
        "sampled, clopper-pearson",
    )
