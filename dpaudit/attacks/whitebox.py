"""White-box membership inference from per-example gradients (Nasr, Shokri, Houmansadr 2019).

The attacker holds the target's parameters. For each audited row it computes the gradient
of the row's loss with respect to every layer's parameters, exactly and per example, and
summarises it by norms: the loss, and per layer the ℓ2 norms of the weight and bias
gradients, and the norm of the whole gradient. A model's training drives its members'
loss gradients toward zero, so members tend to have smaller gradient norms than rows it
never saw, layer by layer (the signal of Nasr et al.'s white-box attack).

Variant: the paper's supervised attack, with shadow models standing in for the known
members (its attack model learns "member" from labelled rows' features). Nasr et al. feed
the raw gradients of each layer, the activations, the loss and the label through
convolutional encoders; here the gradient of each layer enters as its norms and the
attack model is a logistic regression on their logarithms (standardised), fitted on K
shadow models trained with the target's recipe on the attacker's population rows (each
sees half of a pool as members). A norm feature is one number per layer whatever the
layer's width, so a few shadow models suffice; the paper's encoders need thousands of
labelled rows.

References:
    Nasr, Shokri, Houmansadr (2019), "Comprehensive Privacy Analysis of Deep Learning:
    Passive and Active White-box Inference Attacks against Centralized and Federated
    Learning", IEEE S&P (arXiv 1812.00910v2): Sect. IV (the white-box attack model and
    its inputs: per-layer gradients, activations, loss, label), supervised setting.
    Section numbers as recalled, not checked against the published text.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from dpaudit.attacks.base import AttackContext, MembershipAttack, audited_arrays, check_int
from dpaudit.attacks.reference import train_models
from dpaudit.errors import DataError
from dpaudit.models import _activation  # the very non-linearity the target's forward uses

__all__ = ["WhiteboxAttack", "gradient_features", "gradient_norms"]

# Logarithms of norms: a norm that is exactly 0 (a saturated unit) stays finite.
_TINY = 1e-30


def gradient_norms(models: Any, X: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """Per-example loss and per-layer gradient norms of every model of a stack.

    For a linear layer z = W a + b, the gradient of one row's loss is
    ∂ℓ/∂W = δ aᵀ and ∂ℓ/∂b = δ with δ = ∂ℓ/∂z, so ‖∂ℓ/∂W‖_F = ‖δ‖·‖a‖ and
    ‖∂ℓ/∂b‖ = ‖δ‖ exactly: one backward pass of the summed loss gives every row's δ
    (row i's loss depends on row i's z only).

    Args:
        models: a :class:`~dpaudit.models.ModelStack` (its weights are read).
        X: ``(m, d)`` rows; y: ``(m,)`` labels.

    Returns:
        ``loss`` ``(K, m)``, ``weight`` and ``bias`` ``(L, K, m)`` (one row per layer),
        ``total`` ``(K, m)``: the norm of the whole per-example gradient; float64.

    Raises:
        DataError: the target is not a stack of dpaudit MLPs (no parameters to read).
    """
    weights = getattr(models, "weights", None)
    biases = getattr(models, "biases", None)
    spec = getattr(models, "spec", None)
    if weights is None or biases is None or spec is None:
        raise DataError(
            "The whitebox attack reads the target's parameters: it needs a target dpaudit "
            "trains or a safetensors model of the [model] architecture; got "
            f"{type(models).__name__}."
        )
    dtype, device = weights[0].dtype, weights[0].device
    a = torch.as_tensor(np.asarray(X), dtype=dtype, device=device).expand(len(weights[0]), -1, -1)
    labels = torch.as_tensor(np.asarray(y), dtype=torch.int64, device=device)
    inputs, pre = [], []
    last = len(weights) - 1
    with torch.enable_grad():
        for layer, (w, b) in enumerate(zip(weights, biases, strict=True)):
            inputs.append(a.detach())
            # copies that require grad put every z in the graph; the target is not touched
            w_, b_ = w.detach().requires_grad_(True), b.detach().requires_grad_(True)
            z = torch.matmul(a, w_.transpose(1, 2)) + b_.unsqueeze(1)
            pre.append(z)
            a = _activation(spec.activation, z) if layer < last else z
        logp = torch.log_softmax(a.to(torch.float64), dim=-1)
        losses = -logp.gather(-1, labels.expand(a.shape[0], -1).unsqueeze(-1))[..., 0]
        deltas = torch.autograd.grad(losses.sum(), pre)
    delta_norm = np.stack([d.to(torch.float64).norm(dim=-1).cpu().numpy() for d in deltas])
    input_norm = np.stack([x.to(torch.float64).norm(dim=-1).cpu().numpy() for x in inputs])
    weight = delta_norm * input_norm
    return {
        "loss": losses.detach().cpu().numpy(),
        "weight": weight,
        "bias": delta_norm,
        "total": np.sqrt((weight**2 + delta_norm**2).sum(axis=0)),
    }


def gradient_features(models: Any, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The attack model's inputs ``(K, m, 2L + 2)``: log loss, log total gradient norm,
    and per layer the log norms of the weight and bias gradients."""
    g = gradient_norms(models, X, y)
    columns = [g["loss"], g["total"], *g["weight"], *g["bias"]]
    return np.log(np.stack(columns, axis=-1) + _TINY)


class WhiteboxAttack(MembershipAttack):
    """Per-example gradient norms of the target, scored by an attack model fitted on
    shadow models (see the module for the variant of Nasr et al. 2019).

    Args:
        num_shadow_models: K ≥ 1 shadow models, trained with the target's recipe on the
            attacker's population rows exactly as the shadow attack's are.

    The score of an audited row is the attack model's log-odds of "member" on the
    target's features of the row: larger means member.
    """

    name: ClassVar[str] = "whitebox"

    def __init__(self, *, num_shadow_models: int = 16) -> None:
        self.num_shadow_models = check_int("num_shadow_models", num_shadow_models, minimum=1)

    def options(self) -> dict[str, Any]:
        return {"num_shadow_models": self.num_shadow_models, "features": "gradient-norms"}

    def score(self, context: AttackContext, X: Any, y: Any, *, seed: int) -> np.ndarray:
        X, y = audited_arrays(X, y, context.target.num_features)
        P = context.population_X.shape[0]
        if P < 2:
            raise DataError(
                f"The whitebox attack needs population rows to train shadow models; got {P}."
            )
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x3B0]))
        size = min(context.target_train_size, P // 2)
        K = self.num_shadow_models
        # As the shadow attack: a pool of at most 4s population rows, each shadow model
        # drawing 2s of them and training on the first s (the rest are its non-members).
        pool = np.sort(rng.permutation(P)[: min(P, 4 * size)])
        pool_X, pool_y = context.population_X[pool], context.population_y[pool]
        chosen = np.argsort(rng.random((K, pool.size)), axis=1)[:, : 2 * size]
        member = np.zeros((K, pool.size), dtype=bool)
        np.put_along_axis(member, chosen[:, :size], True, axis=1)
        shadows = train_models(context, pool_X, pool_y, member, seed=int(rng.integers(2**63)))
        feats = gradient_features(shadows, pool_X, pool_y)
        rows = chosen.ravel()
        models = np.repeat(np.arange(K), 2 * size)
        clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
        clf.fit(feats[models, rows], member[models, rows].astype(np.int64))
        target = gradient_features(context.target, X, y)
        flat = target.reshape(-1, target.shape[-1])
        return np.asarray(clf.decision_function(flat), dtype=np.float64).reshape(target.shape[:2])
