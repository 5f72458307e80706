"""A user trainer that claims Poisson-subsampled DP-SGD and reports what it ran.

Protocol (see :mod:`dpaudit.trainers`)::

    fn(X, y, membership, *, seed, canary, settings) -> TrainerOutput | dict

It trains no weights: a white-box Dirac canary sits on a coordinate that no real
example's gradient touches, so each step's privatised gradient SUM on that coordinate is
the Gaussian noise plus C when the canary is sampled, and the white-box score of a model
is the sum of those values over its steps (Nasr et al. 2023, §3). What the run draws
(batches, noise, canary coins) is simulated exactly as DP-SGD draws it, and every model
returns a DPSGDRecord of the σ, q, T and C it CLAIMS, and GreyBoxObservations of what it
actually did (the untouched coordinate: the canary's, in the models without the canary).

Options (``[dpsgd] options``):
    bug: ``"none"`` (correct Poisson DP-SGD), ``"fixed-batches"`` (a shuffled loader with
        batches of exactly the expected size, claimed as Poisson), ``"sigma/10"`` (a
        tenth of the claimed noise), ``"missing-step"`` (one step fewer than accounted).
"""

from __future__ import annotations

import numpy as np

from dpaudit.bounds.greybox import GreyBoxObservations
from dpaudit.records import DPSGDRecord


def dirac_dpsgd(X, y, membership, *, seed, canary, settings):
    """Simulated DP-SGD on a Dirac canary's coordinate, with an optional planted bug."""
    bug = str(settings.options.get("bug", "none"))
    dp = settings.training.dp
    sigma, clip = dp.noise_multiplier, dp.clipping_norm
    k, n = membership.shape[0], int(membership.sum(axis=1).min())
    q = settings.training.batch_size / n
    steps = settings.training.epochs * (n // settings.training.batch_size)
    run = steps - 1 if bug == "missing-step" else steps
    noise_std = sigma * clip / (10.0 if bug == "sigma/10" else 1.0)
    included = np.asarray(canary.included, dtype=bool)
    batch_sizes = np.zeros((k, steps), dtype=np.int64)
    noise = np.full((k, steps), np.nan)
    scores = np.zeros(k)
    for i in range(k):
        rng = np.random.default_rng([seed, settings.model_offset + i])
        for t in range(run):
            if bug == "fixed-batches":
                batch_sizes[i, t] = settings.training.batch_size
                # the canary is one of n + 1 records shuffled into batches of equal size
                sampled = included[i] and rng.random() < q
            else:
                batch_sizes[i, t] = rng.binomial(n, q)
                sampled = included[i] and rng.random() < q
            x = rng.normal(0.0, noise_std) + (clip if sampled else 0.0)
            scores[i] += x
            if not included[i]:
                noise[i, t] = x
    records = [
        DPSGDRecord(
            noise_multiplier=sigma,
            sampling_rate=q,
            steps=steps,
            clipping_norm=clip,
            sampling="poisson",
            dataset_size=n,
        )
        for _ in range(k)
    ]
    observations = GreyBoxObservations(
        batch_sizes=batch_sizes,
        dataset_size=n,
        sampling_rate=q,
        clipped_norms_max=np.full((k, steps), np.nan),
        clipping_norm=clip,
        untouched_noise=noise,
        noise_multiplier=sigma,
        steps_run=np.full(k, run),
        steps_accounted=steps,
    )
    return {"scores": scores, "records": records, "observations": observations}
