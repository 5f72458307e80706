"""Gradient descent with Laplace noise on the clipped-gradient sum (pure ε-DP).

At every step each member's logistic-loss gradient is clipped to ℓ2 norm C, the clipped
gradients are summed, and i.i.d. Laplace noise of scale b is added to every coordinate
of the sum: the Laplace mechanism (Dwork, McSherry, Nissim, Smith 2006) applied to a
gradient whose ℓ1 sensitivity is bounded through its ℓ2 norm.

The sensitivity bound. Neighbouring datasets change at most m of the per-example terms
of the step's sum (m = 1 for adding or removing one record). Each clipped term g has
‖g‖1 ≤ √d·‖g‖2 ≤ √d·C (Cauchy–Schwarz: ‖g‖1 = ⟨|g|, 1⟩ ≤ ‖g‖2·‖1‖2 = √d·‖g‖2, with
equality when every coordinate has the same magnitude), so the sum moves by at most
Δ1 = m·√d·C in ℓ1: the O(m√d) bound on the ℓ1 sensitivity of a gradient sum (the lecture
notes' equations 4.9–4.10, whose text was not available here; this is the derivation).
One step with b = Δ1/ε_step is ε_step-DP; T steps are (T·ε_step)-DP by basic sequential
composition (Dwork, Roth 2014, Thm. 3.16), which is what this module accounts, δ = 0.

Pure functions of arrays and numbers (numpy only); the trainer registered as
``gradient-laplace`` in :mod:`dpaudit.trainers` wraps :func:`train_gradient_laplace`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpaudit.errors import DpauditError, check_in_interval, check_integer

__all__ = [
    "GradientLaplaceRun",
    "basic_composition_epsilon",
    "gradient_l1_sensitivity",
    "laplace_gradient_scale",
    "laplace_log_likelihood_ratio",
    "train_gradient_laplace",
]


def gradient_l1_sensitivity(*, examples: int, dimension: int, clipping_norm: float) -> float:
    """Δ1 = m·√d·C: the ℓ1 sensitivity bound of a sum of ℓ2-clipped gradients.

    Args:
        examples: m, how many terms of the sum neighbouring datasets may change (1 for
            adding or removing one record).
        dimension: d, the number of noised coordinates (the model's parameters).
        clipping_norm: C, the ℓ2 norm every term is clipped to.

    Returns:
        m·√d·C, from ‖g‖1 ≤ √d·‖g‖2 ≤ √d·C for each changed term (Cauchy–Schwarz) and
        the triangle inequality over the m of them.

    References:
        Dwork, Roth 2014, "The Algorithmic Foundations of Differential Privacy",
        Def. 3.1 (ℓ1 sensitivity) and Thm. 3.6 (the Laplace mechanism).
    """
    m = check_integer("examples", examples, low=1)
    d = check_integer("dimension", dimension, low=1)
    c = check_in_interval("clipping_norm", clipping_norm, 0.0, math.inf, low_open=True)
    return m * math.sqrt(d) * c


def laplace_gradient_scale(*, epsilon: float, steps: int, sensitivity: float) -> float:
    """The per-coordinate Laplace scale b = Δ1·T/ε that makes T steps ε-DP.

    Each step is then (ε/T)-DP (the Laplace mechanism with b = Δ1/ε_step) and T of them
    ε-DP by basic composition (:func:`basic_composition_epsilon`).
    """
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, low_open=True)
    t = check_integer("steps", steps, low=1)
    s = check_in_interval("sensitivity", sensitivity, 0.0, math.inf, low_open=True)
    return s * t / epsilon


def basic_composition_epsilon(*, sensitivity: float, scale: float, steps: int) -> float:
    """ε of T Laplace steps of scale b on a query of ℓ1 sensitivity Δ1: T·Δ1/b, δ = 0.

    References:
        Dwork, Roth 2014, Thm. 3.6 (each step is Δ1/b-DP) and Thm. 3.16 (basic
        composition: the ε's add).
    """
    s = check_in_interval("sensitivity", sensitivity, 0.0, math.inf, low_open=True)
    b = check_in_interval("scale", scale, 0.0, math.inf, low_open=True)
    t = check_integer("steps", steps, low=1)
    return t * s / b


def laplace_log_likelihood_ratio(x: np.ndarray, *, shift: float, scale: float) -> np.ndarray:
    """log Lap(x; shift, b)/Lap(x; 0, b) = (|x| − |x − shift|)/b, elementwise.

    The Neyman–Pearson statistic of one observation of a coordinate that holds
    ``shift`` + noise with the canary and noise alone without it.
    """
    x = np.asarray(x, dtype=np.float64)
    result: np.ndarray = (np.abs(x) - np.abs(x - shift)) / scale
    return result


@dataclass(frozen=True)
class GradientLaplaceRun:
    """What :func:`train_gradient_laplace` ran and produced.

    Attributes:
        weights: ``(K, d)`` the final linear models.
        observed: ``(K, T)`` the noisy sum's coordinate ``column`` at each step (zeros
            when no column is watched).
        scale: b, the Laplace scale that ran (``noise_factor`` included).
        sensitivity: Δ1 = m·√d·C, the bound the noise was calibrated to.
        epsilon: T·Δ1/b_accounted: the ε accounted by basic composition (δ = 0) for the
            scale the calibration asked for (``noise_factor`` is not in it).
    """

    weights: np.ndarray
    observed: np.ndarray
    scale: float
    sensitivity: float
    epsilon: float


def train_gradient_laplace(
    x: np.ndarray,
    signs: np.ndarray,
    membership: np.ndarray,
    *,
    epsilon: float,
    clipping_norm: float,
    steps: int,
    learning_rate: float,
    examples: int = 1,
    canary_gradient: np.ndarray | None = None,
    canary_included: np.ndarray | None = None,
    column: int | None = None,
    rngs: list[np.random.Generator],
    noise_factor: float = 1.0,
) -> GradientLaplaceRun:
    """Full-batch gradient descent of K binary logistic models with Laplace gradient noise.

    Step t of model k: g = Σ_{i member} clip_C(∇ℓ(w; x_i, y_i)) (+ the canary's gradient
    when included) + Lap(b)^d, then w ← w − η·g/n with n = the number of rows of ``x``
    (public, as DP-GD divides by the expected batch size). ℓ(w; x, y) = log(1 + e^{−y⟨w, x⟩}).

    Args:
        x: ``(n, d)`` rows; ``signs``: ``(n,)`` labels in {−1, +1}.
        membership: ``(K, n)`` bool, model k trains on rows with ``membership[k]``.
        epsilon: the ε the T steps are calibrated to (basic composition, δ = 0).
        clipping_norm: C; ``examples``: m of :func:`gradient_l1_sensitivity`.
        canary_gradient: ``(d,)`` a gradient canary of ℓ2 norm ≤ C added to the sum of
            the models in ``canary_included`` (white-box audits), or ``None``.
        column: the coordinate of the noisy sum recorded at every step, or ``None``.
        rngs: one generator per model (model k draws its noise from ``rngs[k]`` only).
        noise_factor: multiplies the noise that runs, NOT the accounting (a planted bug
            for tests; 1 otherwise).

    Raises:
        DpauditError: a canary gradient longer than C (its term would not be clipped).
    """
    x = np.asarray(x, dtype=np.float64)
    k_models, (n, d) = membership.shape[0], x.shape
    if len(rngs) != k_models:
        raise DpauditError(f"One generator per model is needed: {k_models}, got {len(rngs)}.")
    sensitivity = gradient_l1_sensitivity(
        examples=examples, dimension=d, clipping_norm=clipping_norm
    )
    scale = laplace_gradient_scale(epsilon=epsilon, steps=steps, sensitivity=sensitivity)
    accounted = basic_composition_epsilon(sensitivity=sensitivity, scale=scale, steps=steps)
    extra = np.zeros((k_models, d))
    if canary_gradient is not None:
        g = np.asarray(canary_gradient, dtype=np.float64)
        if np.linalg.norm(g) > clipping_norm * (1 + 1e-12):
            raise DpauditError(
                f"The canary gradient has ℓ2 norm {np.linalg.norm(g):.6g} > C = "
                f"{clipping_norm:g}: a gradient canary must already be clipped."
            )
        included = np.ones(k_models, bool) if canary_included is None else canary_included
        extra = np.where(np.asarray(included, bool)[:, None], g[None, :], 0.0)
    noise = np.stack([r.laplace(0.0, 1.0, (steps, d)) for r in rngs]) * (noise_factor * scale)
    norms = np.linalg.norm(x, axis=1)  # (n,)
    member = membership.astype(np.float64)
    w = np.zeros((k_models, d))
    observed = np.zeros((k_models, steps))
    for t in range(steps):
        p = 1.0 / (1.0 + np.exp(signs[None, :] * (w @ x.T)))  # σ(−y⟨w, x⟩), (K, n)
        # ∇ℓ_i = −y_i·σ(−y_i⟨w, x_i⟩)·x_i has norm σ(·)·‖x_i‖; clip it to C
        grad_norm = p * norms[None, :]
        factor = np.minimum(1.0, clipping_norm / np.maximum(grad_norm, 1e-300))
        coef = -member * p * factor * signs[None, :]  # (K, n)
        total = coef @ x + extra + noise[:, t]
        if column is not None:
            observed[:, t] = total[:, column]
        w = w - learning_rate * total / n
    return GradientLaplaceRun(w, observed, noise_factor * scale, sensitivity, accounted)
