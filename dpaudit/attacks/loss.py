"""Loss-threshold membership inference (Yeom et al. 2018)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import (
    AttackContext,
    MembershipAttack,
    audited_arrays,
    stack_logits,
    true_class_loss,
)

__all__ = ["LossAttack"]


class LossAttack(MembershipAttack):
    """Score = −loss: members tend to have smaller training loss than non-members.

    Thresholding this score at −τ is Yeom et al.'s adversary that predicts "member" when
    the loss is below τ; the audit sweeps τ, so no threshold is an option here. Uses no
    shadow models and no population data; ``seed`` is ignored.

    References:
        Yeom, Giacomelli, Fredrikson, Jha (2018), "Privacy Risk in Machine Learning:
        Analyzing the Connection to Overfitting", IEEE CSF (the membership adversary that thresholds
        the loss; its advantage is tied to the generalisation gap).
    """

    name: ClassVar[str] = "loss"

    def score(self, context: AttackContext, X: Any, y: Any, *, seed: int) -> np.ndarray:
        X, y = audited_arrays(X, y, context.target.num_features)
        return -true_class_loss(stack_logits(context.target, X), y)
