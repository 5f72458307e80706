"""How many batch sizes the grey-box batch-size check needs to catch fixed-size batches.

A run that shuffles its n records into batches of fixed size b = round(n·q) (each record
once per epoch) while its accountant assumes Poisson sampling at rate q shows it in every
step's batch size: under Poisson sampling each is Binomial(n, q), under shuffling each is
b. The grey-box check (:func:`dpaudit.bounds.greybox.batch_size_test`) combines an exact
binomial test of the total with a lower-tail test of the dispersion
D = Σ (b − nq)²/(nq(1 − q)) by Bonferroni, p = min(1, 2·min(p_sum, p_dispersion)), and
fails when p < 1 − level. Fixed batches of size nq give D = 0 and a total exactly on its
mean (p_sum = 1), so p = 2·p_dispersion; the Chernoff bound at D = 0 is
P(b = nq)^N (its infimum over λ is approached as λ → ∞), so N ≥ log((1 − level)/2) /
log P(b = nq) batches suffice: a handful, from one model.

Pure functions of numbers (scipy), no torch.

References:
    Chernoff 1952 (Ann. Math. Statist. 23(4), Thm. 1); Abadi et al. 2016, Alg. 1 (each
    example joins a lot independently with probability q).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from scipy.stats import binomtest

from dpaudit.bounds.greybox import dispersion_lower_tail_pvalue
from dpaudit.errors import check_in_interval, check_integer

__all__ = ["MAX_BATCHES", "BatchSizePlan", "batch_size_pvalue", "plan_batch_size_check"]

#: The most batches the plan searches; a check that needs more is reported as never.
MAX_BATCHES = 10_000_000


@dataclass(frozen=True)
class BatchSizePlan:
    """The batches (and models) whose batch sizes the grey-box check needs.

    Attributes:
        batches: the fewest observed steps at which the check's p-value falls below
            1 − ``level`` (None when q = 1, where fixed batches are the claim, or when
            more than :data:`MAX_BATCHES` would be needed).
        models: the fewest models of ``steps`` steps each that give ``batches``.
        p_value: the check's p-value at ``batches`` (1.0 when ``batches`` is None).
        batch_size: the fixed batch size of the shuffled run, round(n·q).
        dataset_size, sampling_rate, steps, level: the inputs.
    """

    batches: int | None
    models: int | None
    p_value: float
    batch_size: int
    dataset_size: int
    sampling_rate: float
    steps: int
    level: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def batch_size_pvalue(batches: int, *, dataset_size: int, sampling_rate: float) -> float:
    """The batch-size check's p-value on ``batches`` fixed batches of size round(n·q):
    min(1, 2·min(p_sum, p_dispersion)), as :func:`dpaudit.bounds.greybox.batch_size_test`
    computes it on one (n, q) group."""
    n, q = dataset_size, sampling_rate
    b = round(n * q)
    p_sum = float(binomtest(batches * b, batches * n, q, alternative="two-sided").pvalue)
    dispersion = batches * (b - n * q) ** 2 / (n * q * (1.0 - q))
    p_disp = dispersion_lower_tail_pvalue(dispersion, [(n, q, batches)])
    return min(1.0, 2.0 * min(p_sum, p_disp))


def plan_batch_size_check(
    *, dataset_size: int, sampling_rate: float, steps: int, level: float = 0.95
) -> BatchSizePlan:
    """The fewest batch sizes of a shuffled run at which the grey-box batch-size check fails.

    Args:
        dataset_size: n, the records the run shuffles.
        sampling_rate: q, the Poisson rate the accountant assumes (batches of round(n·q)).
        steps: T, steps per model (to turn batches into models).
        level: the check fails when its p-value is below 1 − level (the verdict's share).

    Returns:
        :class:`BatchSizePlan`.

    Raises:
        DpauditError: a bad value.
    """
    n = check_integer("dataset_size", dataset_size, low=1)
    q = check_in_interval("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    t = check_integer("steps", steps, low=1)
    c = check_in_interval("level", level, 0.0, 1.0, low_open=True, high_open=True)
    alpha = 1.0 - c

    def plan(batches: int | None, p: float) -> BatchSizePlan:
        models = None if batches is None else math.ceil(batches / t)
        return BatchSizePlan(batches, models, p, round(n * q), n, q, t, c)

    if q == 1.0:  # full batches: shuffling changes nothing, the check cannot fail
        return plan(None, 1.0)

    def p_at(k: int) -> float:
        return batch_size_pvalue(k, dataset_size=n, sampling_rate=q)

    # p falls with the batches (both parts do): double to a failing count, then bisect.
    high = 1
    while p_at(high) >= alpha:
        if high >= MAX_BATCHES:
            return plan(None, 1.0)
        high = min(2 * high, MAX_BATCHES)
    low = high // 2  # p_at(low) ≥ alpha, or low = 0
    while high - low > 1:
        mid = (low + high) // 2
        if p_at(mid) < alpha:
            high = mid
        else:
            low = mid
    return plan(high, p_at(high))
