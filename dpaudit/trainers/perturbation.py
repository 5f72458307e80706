"""The perturbation trainers of convex ERM: output perturbation (Chaudhuri et al. 2011),
multi-party model aggregation and gradient perturbation (Jayaraman et al. 2018), and
full-batch gradient descent with Laplace noise; binary logistic regression, each
returning the claim or the records of what ran."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from dpaudit import theory
from dpaudit.accounting.upper_bounds import Claim
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.records import DPSGDRecord
from dpaudit.theory import erm
from dpaudit.trainers.protocol import CanarySetup, TrainerOutput, TrainerSettings
from dpaudit.training.gradient_laplace import (
    laplace_log_likelihood_ratio,
    train_gradient_laplace,
)


def _binary_labels(y: np.ndarray, settings: TrainerSettings, name: str) -> np.ndarray:
    if settings.num_classes != 2:
        raise ConfigError(
            f"The {name!r} trainer is binary logistic regression: the dataset must have 2 "
            f"classes (use a label such as 'column>value'). Got {settings.num_classes} classes."
        )
    return np.where(np.asarray(y) == 1, 1.0, -1.0)


#: The exact minimisers of regularised logistic regression (Newton, float64, once per
#: distinct membership row; ``average = False`` is the planted "no 1/n" bug of the tests),
#: re-exported from :mod:`dpaudit.theory.erm`, where the worst-case pair search uses them too.
regularised_logistic_optimum = erm.regularised_logistic_optimum


def _gamma_ball_noise(
    num_models: int, dim: int, scale: float, *, seed: int, model_offset: int
) -> np.ndarray:
    """Noise with density ∝ exp(−‖b‖/scale): uniform direction, norm ~ Gamma(d, scale).

    Each model's draw comes from its own stream (seed, model index), so a model's noise
    does not depend on the unit it is computed in.

    References:
        Chaudhuri, Monteleoni, Sarwate 2011, Alg. 1 (the density and its sampling).
    """
    out = np.empty((num_models, dim))
    for k in range(num_models):
        rng = np.random.default_rng([seed, model_offset + k, 7])
        u = rng.standard_normal(dim)
        out[k] = rng.gamma(dim, scale) * u / np.linalg.norm(u)
    return out


def _row_norm_check(X: np.ndarray, name: str) -> None:
    top = float(np.max(np.linalg.norm(X, axis=1)))
    if top > 1.0 + 1e-6:
        raise ConfigError(
            f"The {name!r} trainer needs rows with ‖x‖ ≤ 1 (the loss must be 1-Lipschitz). "
            f"Got a row of norm {top:.4g}; set normalize = true in [dpsgd]."
        )


def _linear_stack(w: np.ndarray, num_features: int) -> ModelStack:
    """A binary linear model w as a 2-class logistic stack: logits (0, ⟨w, x⟩)."""
    k = w.shape[0]
    weight = torch.zeros((k, 2, num_features), dtype=torch.float64)
    weight[:, 1, :] = torch.as_tensor(w)
    bias = torch.zeros((k, 2), dtype=torch.float64)
    return ModelStack(ModelSpec(kind="logistic"), [weight], [bias])


def output_perturbation_models(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    epsilon: float,
    lam: float,
    seed: int,
    model_offset: int = 0,
    average: bool = True,
) -> np.ndarray:
    """K output-perturbed λ-regularised logistic regressions (Chaudhuri et al. 2011, Alg. 1).

    The noise scale is 2/(n·λ·ε) with n the smallest member count (sensitivity 2/(nλ),
    Cor. 8); the norm of b is Gamma(d, 2/(nλε)).
    """
    signs = np.where(np.asarray(y) == 1, 1.0, -1.0)
    w = regularised_logistic_optimum(X, signs, membership, lam=lam, average=average)
    # The neighbour relation is add/remove one row: the smaller of the two datasets has
    # the larger sensitivity, so the noise uses the smallest member count of the models.
    n = int(membership.sum(axis=1).min())
    scale = theory.output_perturbation_sensitivity(n, lam) / epsilon
    return w + _gamma_ball_noise(
        w.shape[0], w.shape[1], scale, seed=seed, model_offset=model_offset
    )


def _options(settings: TrainerSettings, name: str, *keys: str) -> list[float]:
    missing = [k for k in keys if settings.options.get(k) is None]
    if missing:
        raise ConfigError(
            f"The {name!r} trainer needs {', '.join(repr(k) for k in missing)} in [dpsgd]."
        )
    return [float(settings.options[k]) for k in keys]


def output_perturbation_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
) -> TrainerOutput:
    """Chaudhuri et al. 2011 output perturbation; claims ε-DP (δ = 0).

    Options: ``epsilon``, ``lam``.
    """
    if canary.threat_model != "black-box":
        raise ConfigError("The 'output-perturbation' trainer releases one model: black-box only.")
    epsilon, lam = _options(settings, "output-perturbation", "epsilon", "lam")
    _binary_labels(y, settings, "output-perturbation")
    _row_norm_check(X, "output-perturbation")
    w = output_perturbation_models(
        X, y, membership, epsilon=epsilon, lam=lam, seed=seed, model_offset=settings.model_offset
    )
    return TrainerOutput(
        models=_linear_stack(w, X.shape[1]), claim=Claim(epsilon=epsilon, delta=0.0)
    )


def multiparty_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
) -> TrainerOutput:
    """Jayaraman et al. 2018 model aggregation; claims ε-DP (δ = 0).

    The rows of ``X`` are dealt to ``parties`` parties round-robin (the canary row goes to
    party 0); each party fits its λ-regularised model on its members, the m models are
    averaged, and noise of density ∝ exp(−‖b‖/s), s = 2G/(m·n₍₁₎·λ·ε), is added once.
    Options: ``epsilon``, ``lam``, ``parties``.

    The ℓ2 form of the "Laplace" noise is the one whose density ratio is bounded by the
    ℓ2 sensitivity 2G/(m·n₍₁₎·λ) of the average (Chaudhuri et al. 2011, Thm. 6 argument);
    per-coordinate Laplace at this scale would need the ℓ1 sensitivity.

    References:
        Jayaraman, Wang, Evans, Gu 2018 (NeurIPS), §3 "model aggregation".
    """
    if canary.threat_model != "black-box":
        raise ConfigError("The 'multiparty' trainer releases one model: black-box only.")
    epsilon, lam, parties_f = _options(settings, "multiparty", "epsilon", "lam", "parties")
    parties = int(parties_f)
    if parties < 1:
        raise ConfigError(f"The 'parties' parameter must be an integer >= 1. Got {parties}.")
    _binary_labels(y, settings, "multiparty")
    _row_norm_check(X, "multiparty")
    signs = np.where(np.asarray(y) == 1, 1.0, -1.0)
    # The canary (and the record it replaces, in a replace-one audit) belong to party 0.
    fixed = tuple(r for r in (canary.row, canary.replaced) if r is not None)
    owner = erm.multiparty_owners(X.shape[0], parties, fixed)
    try:
        average, smallest = erm.multiparty_average(
            X, signs, membership, lam=lam, owner=owner, parties=parties
        )
    except DpauditError as exc:
        raise ConfigError(str(exc)) from None
    scale = theory.multiparty_laplace_scale(
        lipschitz=1.0, parties=parties, smallest_party_size=smallest, lam=lam, epsilon=epsilon
    )
    w = average + _gamma_ball_noise(
        average.shape[0], X.shape[1], scale, seed=seed, model_offset=settings.model_offset
    )
    return TrainerOutput(
        models=_linear_stack(w, X.shape[1]), claim=Claim(epsilon=epsilon, delta=0.0)
    )


# ------------------------------------------- multi-party gradient perturbation (ERM)


def multiparty_gradient_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
    noise_factor: float = 1.0,
) -> TrainerOutput:
    """Jayaraman et al. 2018 multi-party gradient perturbation; returns q = 1 records.

    The rows of ``X`` are dealt to m = ``parties`` parties round-robin. Full-batch gradient
    descent from w = 0 on the λ-regularised logistic objective
    (1/m)·Σ_j (1/n_j)·Σ_{i∈j} log(1 + e^{−y_i⟨w, x_i⟩}) + (λ/2)‖w‖²: at every step the
    parties' averaged loss gradient ḡ_t is aggregated (securely, in the paper) and ONE
    Gaussian draw N(0, σ²I) is added to the aggregate, with σ² = 8G²T·ln(1/δ)/(m²·n₍₁₎²·ε²)
    (:func:`dpaudit.theory.multiparty_gradient_perturbation_variance`; G = 1: ‖x‖ ≤ 1
    makes the logistic loss 1-Lipschitz; n₍₁₎ the smallest party; T = ``epochs``);
    then w ← w − η·(ḡ_t + noise + λw). Options: ``parties``, ``epsilon``, ``delta``,
    ``lam``, and ``checkpoint`` = t (1 ≤ t ≤ T, optional): release the intermediate model
    θ_t instead of θ_T, with σ still calibrated for T steps.

    Intermediate models (``checkpoint`` = t): θ_t has seen t of the T Gaussian steps, so
    it is exactly (√t·Δ/σ)-GDP (the records say steps = t), and the multi-party slides'
    corollary states (√(t/T)·ε, δ)-DP for it; the trainer returns that corollary as its
    claim beside the records, so the audit holds the lower bounds against both and
    checks the corollary against what ran (its deterministic claim check). With the
    paper's σ, μ_t = √(t/T)·ε/√(2 ln(1/δ)), and the corollary holds wherever the final
    model's (ε, δ) does (see :func:`intermediate_claim`).

    What ran, as a :class:`DPSGDRecord` per model: one record of a party's data moves ḡ_t
    by at most Δ = 2G/(m·n₍₁₎) in ℓ2 (replacing it: 2G/n_j inside its party's mean, 1/m
    of that in the aggregate; adding or removing it: at most 2G/(n_j + 1) through the
    renormalised mean, also ≤ Δ), so each step is a Gaussian mechanism with noise σ/Δ
    times its sensitivity and T of them compose to exactly (√T·Δ/σ)-GDP (Dong, Roth, Su
    2019, Cor. 3.3): the record has clipping norm Δ, noise multiplier σ/Δ
    (= √(2T·ln(1/δ))/ε whatever n₍₁₎), q = 1 and T steps, so μ = ε/√(2·ln(1/δ)).

    White-box (Dirac canary on an all-zero feature c): both neighbouring datasets hold
    one extra record in the smallest party p*, counted in n_{p*}; its loss gradient is
    +G·e_c with the canary and −G·e_c without (the replace-one pair the sensitivity 2G/n
    is tight for; a gradient canary of norm G, Nasr et al. 2023 §3.2). No real gradient
    touches c, so the aggregate's coordinate c is x_t = ±a + N(0, σ²), a = G/(m·n_{p*}),
    and the score is the Gaussian likelihood ratio of x_t + a under N(2a, σ²) against
    N(0, σ²) (``mixture_log_likelihood_ratio`` at q = 1; ``"sum"``: Σ_t x_t). With
    n_{p*} = n₍₁₎ the shift 2a is Δ and the score reaches the record's μ. Black-box
    (an input canary row): the row joins the smallest party and the final models are
    returned.

    Args:
        noise_factor: multiplies the noise that runs, NOT the records (a planted bug for
            tests; 1 in the registered trainer).

    References:
        Jayaraman, Wang, Evans, Gu 2018, "Distributed Learning without Distress:
        Privacy-Preserving Empirical Risk Minimization" (NeurIPS), gradient perturbation
        in secure computation (the numbered algorithm and theorem unverified: the text
        was not reachable); Bun, Steinke 2016 (zCDP composition, the paper's route to σ).
    """
    name = "multiparty-gradient"
    epsilon, delta, lam, parties_f = _options(settings, name, "epsilon", "delta", "lam", "parties")
    parties = int(parties_f)
    if parties < 1 or parties != parties_f:
        raise ConfigError(f"The 'parties' parameter must be an integer >= 1. Got {parties_f}.")
    signs = _binary_labels(y, settings, name)
    _row_norm_check(X, name)
    x = np.asarray(X, dtype=np.float64)
    n, d = x.shape
    k_models = membership.shape[0]
    white = canary.threat_model == "white-box"
    owner = np.arange(n) % parties
    real = np.ones(n, dtype=bool)
    if canary.row is not None:
        real[canary.row] = False
    # The canary (row or gradient) goes to the party with the fewest real rows: its
    # n_{p*} is then n₍₁₎ (or n₍₁₎ + 1), where the sensitivity bound is reached.
    p_star = int(np.argmin(np.bincount(owner[real], minlength=parties)))
    if canary.row is not None:
        owner[canary.row] = p_star
    onehot = owner[None, :] == np.arange(parties)[:, None]  # (m, n)
    sizes = membership.astype(np.int64) @ onehot.T.astype(np.int64)  # (K, m)
    column = -1
    if white:
        if canary.direction is None:
            raise ConfigError("A white-box canary audit needs a gradient canary ('dirac').")
        column = int(np.flatnonzero(canary.direction)[0]) % d
        if np.any(x[:, column] != 0.0):
            raise ConfigError(
                f"The {name!r} trainer's Dirac canary needs an all-zero feature: set "
                "zero_features >= 1 in [dpsgd]."
            )
        sizes[:, p_star] += 1  # the canary record, held by both worlds
    if np.any(sizes == 0):
        raise ConfigError(f"A party of the {name!r} trainer has no rows: use fewer parties.")
    n1 = sizes.min(axis=1)  # (K,)
    total_steps = int(settings.training.epochs)
    steps = _checkpoint(settings, name, total_steps)
    eta = float(settings.training.learning_rate)
    lipschitz = 1.0
    sigma = np.array(
        [
            math.sqrt(
                theory.multiparty_gradient_perturbation_variance(
                    lipschitz=lipschitz,
                    parties=parties,
                    smallest_party_size=int(s),
                    steps=total_steps,
                    epsilon=epsilon,
                    delta=delta,
                )
            )
            for s in n1
        ]
    )
    sensitivity = 2.0 * lipschitz / (parties * n1)
    # Each record's weight in the aggregate: 1/(m·n_j) for its party j, 0 if not a member.
    weight = membership / (parties * sizes[:, owner])
    shift = lipschitz / (parties * sizes[:, p_star])  # a: the canary's ±a on coordinate c
    sign = np.where(canary.included, 1.0, -1.0)
    noise = np.empty((k_models, steps, d))
    for k in range(k_models):
        rng = np.random.default_rng([seed, settings.model_offset + k, 16])
        noise[k] = rng.standard_normal((steps, d))
    noise *= (noise_factor * sigma)[:, None, None]
    w = np.zeros((k_models, d))
    observed = np.zeros((k_models, steps))
    for t in range(steps):
        p = 1.0 / (1.0 + np.exp(signs[None, :] * (w @ x.T)))  # σ(−y⟨w, x⟩), (K, n)
        g = -(weight * p * signs[None, :]) @ x + noise[:, t]
        if white:
            g[:, column] += sign * shift
            observed[:, t] = g[:, column]
        w = w - eta * (g + lam * w)
    scores = None
    if white:
        # Σ_t log[N(x_t + a; 2a, σ²)/N(x_t + a; 0, σ²)] = Σ_t 2a·x_t/σ²: the Neyman–Pearson
        # score, mixture_log_likelihood_ratio(x_t + a, q = 1, σ/(2a), C = 2a) summed
        # (inlined because σ and a may differ between models).
        total = observed.sum(axis=1)
        scores = total if canary.score == "sum" else 2.0 * shift * total / sigma**2
    records = tuple(
        DPSGDRecord(
            noise_multiplier=float(s / c),
            sampling_rate=1.0,
            steps=steps,
            clipping_norm=float(c),
            sampling="full-batch",
            dataset_size=int(m),
        )
        for s, c, m in zip(sigma, sensitivity, membership.sum(axis=1), strict=True)
    )
    claim = None
    if "checkpoint" in settings.options:
        claim = intermediate_claim(
            epsilon=epsilon, delta=delta, checkpoint=steps, total_steps=total_steps
        )
    return TrainerOutput(scores=scores, models=_linear_stack(w, d), records=records, claim=claim)


def _checkpoint(settings: TrainerSettings, name: str, total_steps: int) -> int:
    """The step t whose model θ_t is released (T = ``epochs`` when no checkpoint is set)."""
    raw = settings.options.get("checkpoint")
    if raw is None:
        return total_steps
    t = _number_option(raw, "checkpoint", name)
    if t != int(t) or not 1 <= t <= total_steps:
        raise ConfigError(
            f"The {name!r} trainer's 'checkpoint' must be a whole step t with 1 <= t <= "
            f"T = epochs = {total_steps}. Got {raw!r}."
        )
    return int(t)


def _number_option(raw: Any, key: str, name: str) -> float:
    """An option that must be a number, or a ConfigError naming it."""
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ConfigError(
            f"The {name!r} trainer's {key!r} option must be a number. Got {raw!r}."
        ) from None


def intermediate_claim(*, epsilon: float, delta: float, checkpoint: int, total_steps: int) -> Claim:
    """The multi-party slides' corollary: θ_t of T-step gradient perturbation calibrated
    to (ε, δ) is (√(t/T)·ε, δ)-DP.

    Why it holds for the Gaussian steps: T steps at noise σ are μ_T-GDP with μ_T = √T·Δ/σ
    and t of them μ_t = √(t/T)·μ_T (Dong, Roth, Su 2019, Cor. 3.3). For a fixed ratio
    a = ε/μ ≥ 0, δ_μ(aμ) = Φ(−a + μ/2) − e^{aμ}Φ(−a − μ/2) has derivative
    e^{aμ}·[φ(a + μ/2) − a·Φ(−a − μ/2)] > 0 in μ (Mills: Φ(−x) < φ(x)/x, x = a + μ/2 ≥ a),
    so ε(μ, δ)/μ is nondecreasing and ε(√(t/T)·μ_T, δ) ≤ √(t/T)·ε(μ_T, δ) ≤ √(t/T)·ε
    whenever the final model meets its (ε, δ). The audit checks it against the records.

    References:
        Jayaraman, Wang, Evans, Gu 2018 (NeurIPS), gradient perturbation: the privacy of
        intermediate models, as stated in the multi-party lecture slides.
    """
    if not 1 <= checkpoint <= total_steps:
        raise ConfigError(
            f"The checkpoint t must satisfy 1 <= t <= T = {total_steps}. Got {checkpoint}."
        )
    return Claim(epsilon=math.sqrt(checkpoint / total_steps) * epsilon, delta=delta)


# ----------------------------------------------------- gradient descent, Laplace noise


def gradient_laplace_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
    noise_factor: float = 1.0,
) -> TrainerOutput:
    """Full-batch gradient descent with Laplace noise on the clipped-gradient sum.

    Binary logistic regression; every step adds i.i.d. Laplace noise of scale
    b = Δ1·T/ε per coordinate to the sum of per-example gradients clipped to ℓ2 norm C,
    with the ℓ1 sensitivity bound Δ1 = m·√d·C
    (:func:`dpaudit.training.gradient_laplace.gradient_l1_sensitivity`); T = ``epochs``
    steps are ε-DP by basic composition (δ = 0), the claim returned (computed from the
    scale that was calibrated, see :mod:`dpaudit.training.gradient_laplace`). Options:
    ``epsilon``, ``clip`` (C, default 1), ``examples`` (m, default 1: add/remove one).

    White-box (Dirac canary on an all-zero feature c): with the canary the sum holds the
    extra gradient C·e_c (already clipped), without it nothing (add/remove), so the
    coordinate c of the noisy sum is x_t = C·[in] + Lap(b) at every step, and the score
    is Σ_t (|x_t| − |x_t − C|)/b, the exact log-likelihood ratio (``"sum"``: Σ_t x_t).
    A Dirac canary moves the sum by C in ℓ1, a factor m·√d below Δ1: Δ1 is reached by a
    gradient whose d coordinates all have magnitude C/√d. Black-box: the final models.

    Args:
        noise_factor: multiplies the noise that runs, NOT the claim (a planted bug for
            tests; 1 in the registered trainer).
    """
    name = "gradient-laplace"
    (epsilon,) = _options(settings, name, "epsilon")
    clip = _number_option(settings.options.get("clip", 1.0), "clip", name)
    examples_f = _number_option(settings.options.get("examples", 1), "examples", name)
    if examples_f < 1 or examples_f != int(examples_f):
        raise ConfigError(f"The 'examples' parameter must be an integer >= 1. Got {examples_f}.")
    signs = _binary_labels(y, settings, name)
    x = np.asarray(X, dtype=np.float64)
    d = x.shape[1]
    column, gradient = None, None
    if canary.threat_model == "white-box":
        if canary.direction is None:
            raise ConfigError("A white-box canary audit needs a gradient canary ('dirac').")
        column = int(np.flatnonzero(canary.direction)[0]) % d
        if np.any(x[:, column] != 0.0):
            raise ConfigError(
                f"The {name!r} trainer's Dirac canary needs an all-zero feature: set "
                "zero_features >= 1 in [dpsgd]."
            )
        gradient = np.zeros(d)
        gradient[column] = clip
    k_models = membership.shape[0]
    try:
        run = train_gradient_laplace(
            x,
            signs,
            membership,
            epsilon=epsilon,
            clipping_norm=clip,
            steps=int(settings.training.epochs),
            learning_rate=float(settings.training.learning_rate),
            examples=int(examples_f),
            canary_gradient=gradient,
            canary_included=canary.included,
            column=column,
            rngs=[
                np.random.default_rng([seed, settings.model_offset + k, 17])
                for k in range(k_models)
            ],
            noise_factor=noise_factor,
        )
    except DpauditError as exc:
        raise ConfigError(str(exc)) from None
    scores = None
    if column is not None:
        if canary.score == "sum":
            scores = run.observed.sum(axis=1)
        else:
            b = run.scale / noise_factor  # the scale the claim was calibrated for
            scores = laplace_log_likelihood_ratio(run.observed, shift=clip, scale=b).sum(axis=1)
    return TrainerOutput(
        scores=scores,
        models=_linear_stack(run.weights, d),
        claim=Claim(epsilon=run.epsilon, delta=0.0),
    )
