"""An example user trainer for `audits/dpsgd-user-trainer.toml`.

Protocol (see :mod:`dpaudit.trainers`)::

    fn(X, y, membership, *, seed, canary, settings) -> TrainerOutput | dict

It must return the canary's score per model ("scores", larger = canary in) or the
trained models ("models"), and what it actually ran ("records": one DPSGDRecord per
model, or "claim": {"epsilon": .., "delta": .., "mu": ..} or {"rho": ..}).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from dpaudit.training import GradientCanary, train_many


def noisy_gradient_descent(X, y, membership, *, seed, canary, settings):
    """Full-batch DP-GD on the engine; white-box score = Σ_t ⟨privatised gradient, u⟩.

    u = ``canary.direction`` (unit norm): by default it has a part in every parameter
    tensor, so the score sees the whole clipped canary, whatever the clipping.
    """
    sums = [0.0] * membership.shape[0]
    u = torch.as_tensor(canary.direction, dtype=torch.float64)

    def observe(info):
        values = (info.gradients.double() @ u).tolist()
        for i, k in enumerate(info.model_indices.tolist()):
            if bool(info.active[i]):
                sums[k - settings.model_offset] += values[i]

    result = train_many(
        X,
        y,
        membership,
        model=settings.model,
        training=replace(settings.training, full_batch=True),
        seed=seed,
        num_classes=settings.num_classes,
        model_offset=settings.model_offset,
        step_observer=observe,
        gradient_canary=GradientCanary(canary.direction, canary.included),
    )
    return {"scores": sums, "records": result.records}
