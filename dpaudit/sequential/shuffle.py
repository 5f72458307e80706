"""Planning the audit of a DP-SGD run that shuffles fixed batches but claims Poisson sampling.

Such a run puts the canary in exactly one batch per epoch, at a uniformly random step,
where the accountant assumes it joins each step independently with probability q. Each
step's observation has the same marginal law under both; the shuffled run is less private
only through the joint law (no epoch without the canary, none with two), and the canary
scores see it only weakly: the claim-curve test catches it after thousands of models per
arm when σ is near 1. The grey-box batch-size check sees every batch size equal to n·q
where Poisson sampling draws Binomial(n, q), and catches it from a few batches.

:func:`plan_shuffled_run` plans both: the sequential claim-curve test of the white-box
Dirac canary simulated from the shuffled run's exact law
(:func:`dpaudit.sequential.curve.plan_sequential_curve` with ``run_sampling="shuffled"``),
and the batches the batch-size check needs
(:func:`dpaudit.planning.batch_sizes.plan_batch_size_check`). Pure numpy/scipy, no torch.

References:
    Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang (2024), "How Private are DP-SGD
    Implementations?", ICML 2024 (shuffled batches against the Poisson accountant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpaudit.planning.batch_sizes import BatchSizePlan, plan_batch_size_check
from dpaudit.sequential.curve import CurvePlan, plan_sequential_curve, steps_per_epoch

__all__ = ["ShufflePlan", "plan_shuffled_run"]


@dataclass(frozen=True)
class ShufflePlan:
    """What an audit needs to catch shuffled fixed batches claimed as Poisson sampling.

    Attributes:
        curve: the sequential claim-curve test's models per arm (simulated).
        batch_sizes: the grey-box batch-size check's batches and models.
        steps_per_epoch: ⌊1/q⌋, the steps of one shuffled epoch.
    """

    curve: CurvePlan
    batch_sizes: BatchSizePlan
    steps_per_epoch: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "curve": self.curve.to_dict(),
            "batch_sizes": self.batch_sizes.to_dict(),
            "steps_per_epoch": self.steps_per_epoch,
        }


def plan_shuffled_run(
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    dataset_size: int,
    level: float = 0.95,
    round_trials: int = 50,
    max_trials: int = 5000,
    repeats: int = 20,
    seed: int = 0,
) -> ShufflePlan:
    """Plan the refutation of DP-SGD(σ, q, T) that shuffles n records into fixed batches.

    Args:
        noise_multiplier: σ, claimed and run.
        sampling_rate: q, the Poisson rate the claim accounts (batches of round(n·q)).
        steps: T.
        dataset_size: n, the records shuffled (for the batch-size check).
        level: the level of each test (the verdict's per-comparison level).
        round_trials, max_trials, repeats, seed: the sequential design and the simulation.

    Returns:
        :class:`ShufflePlan`.

    Raises:
        DpauditError: a bad value.
    """
    greybox = plan_batch_size_check(
        dataset_size=dataset_size, sampling_rate=sampling_rate, steps=steps, level=level
    )
    curve = plan_sequential_curve(
        noise_multiplier=noise_multiplier,
        sampling_rate=sampling_rate,
        steps=steps,
        level=level,
        round_trials=round_trials,
        max_trials=max_trials,
        repeats=repeats,
        seed=seed,
        run_sampling="shuffled",
    )
    return ShufflePlan(curve, greybox, steps_per_epoch(sampling_rate))
