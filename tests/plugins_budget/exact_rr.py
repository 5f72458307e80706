"""A user trainer that trains nothing: randomized response on the canary bit.

Protocol (see :mod:`dpaudit.trainers`)::

    fn(X, y, membership, *, seed, canary, settings) -> TrainerOutput | dict

Model k reports a score s_k ∈ {0, 1} with P[s_k = 1] = p when its dataset holds the
canary (``canary.included[k]``) and 1 − p otherwise. That is randomized response on one
bit: exactly ε-DP with ε = ln(p / (1 − p)) and no better (each output's likelihood ratio
is p / (1 − p) or its inverse), so the claim returned is tight. Its trade-off curve is
f_{ε,0} itself, so both ε and the μ that pure ε-DP implies, −2Φ⁻¹(1/(1 + e^ε)), are
attained by the test "s = 1" (FPR = FNR = 1 − p).

Options (``[dpsgd] options``):
    p: probability of the truthful answer, in (0.5, 1).
    claim_scale: multiplies the claimed ε (default 1: the exact claim). A value < 1
        plants an over-claim (more privacy promised than given), for power controls.
"""

from __future__ import annotations

import math

import numpy as np


def randomized_response(X, y, membership, *, seed, canary, settings):
    """One Bernoulli score per model, model g's drawn from (seed, g) only."""
    p = float(settings.options["p"])
    scale = float(settings.options.get("claim_scale", 1.0))
    offset, k = settings.model_offset, membership.shape[0]
    # Model g (global index) uses the g-th uniform of the stream seeded by `seed`: PCG64's
    # random() consumes exactly one 64-bit word per double, so the value does not depend on
    # how the models are cut into units. One generator per model would give the same
    # guarantee at ~30 µs per model, which a 400-audit sweep cannot afford.
    u = np.random.default_rng([seed]).random(offset + k)[offset:]
    truthful = np.where(np.asarray(canary.included, dtype=bool), p, 1.0 - p)
    scores = (u < truthful).astype(np.float64)
    return {"scores": scores, "claim": {"epsilon": scale * math.log(p / (1.0 - p)), "delta": 0.0}}
