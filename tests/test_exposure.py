"""Canary exposure: exact ranks by hand, and the sampled estimate's interval covering the
exact exposure at its level (a binomial ceiling over seeded repeats)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from dpaudit.bounds.exposure import estimated_exposure, exposure, rank
from dpaudit.errors import DataError


def test_exact_exposure_by_hand() -> None:
    others = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]  # 8 candidates with the secret
    assert exposure(0.5, others).value == pytest.approx(3.0)  # rank 1: log2 8
    assert exposure(7.5, others).value == pytest.approx(0.0)  # rank 8
    e = exposure(2.0, others)  # one ahead, one tie: rank 1 + 1 + 1/2
    assert e.rank == 2.5
    assert e.value == pytest.approx(3 - math.log2(2.5))
    assert rank(1.0, []) == 1.0


def test_the_sampled_interval_covers_the_exact_exposure() -> None:
    """A space of 2**16 candidates whose secret sits ahead of all but 1/256 of it (exposure
    8 bits); 300 seeded samples of 4,000: the 95 % interval misses at most the 99.9 %
    binomial ceiling of Bin(300, 0.05) times."""
    size, level, repeats = 2**16, 0.95, 300
    space = np.arange(size, dtype=np.float64)
    secret = size / 256 - 0.5  # exactly 256 candidates score below it
    misses = 0
    for seed in range(repeats):
        sample = np.random.default_rng(seed).choice(space, size=4000)
        lo, hi = estimated_exposure(
            secret, sample, space_size=size, confidence_level=level
        ).interval
        misses += not lo <= 8.0 <= hi  # −log2 p, p = 256 / 2**16 the preferred fraction
    assert misses <= binom.ppf(0.999, repeats, 1 - level)
    # power: the interval is narrow enough to tell 8 bits from 6 and 10
    lo, hi = estimated_exposure(secret, space[::4], space_size=size).interval
    assert 6 < lo < 8 < hi < 10


def test_bad_scores_are_refused() -> None:
    with pytest.raises(DataError, match="the sampled candidates' scores is empty"):
        estimated_exposure(0.0, [], space_size=10)
    with pytest.raises(DataError, match="NaN or infinite"):
        exposure(float("nan"), [1.0])
    with pytest.raises(DataError, match="space_size must be at least 1; got 0"):
        estimated_exposure(0.0, [1.0], space_size=0)
