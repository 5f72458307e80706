"""Canaries: the records whose presence a canary audit tries to detect.

Input-space canaries are one extra row (x, y) added to the training set of the models
with the canary "in":

* ``mislabeled``: an in-distribution row with its label changed to another class, the
  textbook memorisation target;
* ``ood``: an out-of-distribution row, far from the data (a random direction at several
  times the largest row norm);
* ``clipbkd``: ClipBKD's row along the direction of LEAST variance of the data, so that no
  real example's gradient points the same way and the canary's gradient survives clipping
  almost unperturbed (Jagielski, Ullman, Oprea 2020, Alg. 2);
* ``crafted``: a row that is nonzero only on a feature every real row leaves at 0, so that
  only the canary moves that feature's weights; with the worst-case initial parameters of
  :func:`worst_case_initial_parameters` its clipped gradient is the same known vector in
  every step, and the final model's logits on it are canary + Gaussian noise (the
  black-box levers of Annamalai and De Cristofaro 2024, arXiv 2405.14106v4).

The white-box ``dirac`` canary is not a row but a gradient: a one-hot vector in parameter
space, added (at the clipping norm) to the clipped gradient sum of the models with the
canary in (Nasr et al. 2023, §3). Its coordinate is best one that no real example's
gradient touches: then the update's projection on it is exactly canary + noise and the
score is the likelihood-ratio statistic of the Gaussian test (see :func:`dirac_direction`).

A Dirac canary lies inside ONE parameter tensor, so it cannot see a trainer that clips
each tensor (layer) to C on its own and calibrates the noise for one tensor, not for the
whole per-example norm C·√G of G tensors. The ``every-group`` direction
(:func:`every_group_direction`) has a unit component in every tensor (unit norm overall):
a trainer that clips it as one more example's gradient clips every tensor's part to its
bound, and the projection of the privatised sum on it is the clipped canary's whole norm
plus noise, so the group-wise bug shows up as a shift √G times the one the noise is made
for.

The black-box ``gradient`` canary is the same Dirac gradient, added at every step in which
the canary's Poisson coin comes up, but only the final model is seen (the hidden-state
threat model): its score is the final model's parameter on the canary's coordinate
(:func:`gradient_canary_scores`), the sum of all steps (Cebere, Bellet, Papernot 2025).

Pure functions of arrays and a seed; no state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from dpaudit.errors import DataError, DpauditError, check_choice, check_integer

__all__ = [
    "CANARY_DIRECTIONS",
    "CANARY_KINDS",
    "CRAFTED_VALUE",
    "GRADIENT_CANARY_KINDS",
    "INPUT_CANARY_KINDS",
    "CraftedCanary",
    "CraftedRun",
    "InputCanary",
    "clipbkd_canary",
    "crafted_canary",
    "crafted_clipped_weight",
    "crafted_score_moments",
    "dirac_direction",
    "every_group_direction",
    "gradient_canary_scores",
    "input_canary",
    "mislabeled_canary",
    "ood_canary",
    "with_zero_feature",
    "worst_case_initial_parameters",
    "worst_case_margin",
]

CanaryKind = Literal["mislabeled", "ood", "clipbkd", "crafted", "dirac", "gradient"]
CANARY_KINDS: tuple[str, ...] = ("mislabeled", "ood", "clipbkd", "crafted", "dirac", "gradient")
#: Gradient canaries: a vector in parameter space, not a row (white-box and black-box).
GRADIENT_CANARY_KINDS: tuple[str, ...] = ("dirac", "gradient")
INPUT_CANARY_KINDS: tuple[str, ...] = ("mislabeled", "ood", "clipbkd", "crafted")
#: ``[dpsgd] canary_direction``: ``auto`` resolves to one of the other two
#: (:func:`dpaudit.dpsgd.setup.resolve_canary_direction`).
CANARY_DIRECTIONS: tuple[str, ...] = ("auto", "every-group", "one-coordinate")
#: The crafted canary's value on its feature: its gradient (e_decoy − e_label) ⊗ (x, 1)
#: has norm √2·√(v² + 1), so any C up to 1414 clips it, and its bias entries are a
#: fraction 1/√(v² + 1) < 1e-3 of it.
CRAFTED_VALUE = 1000.0


@dataclass(frozen=True)
class InputCanary:
    """One canary row.

    Attributes:
        kind: ``"mislabeled"``, ``"ood"`` or ``"clipbkd"``.
        x: ``(d,)`` float features.
        y: its label.
        source_row: the data row it was made from (``mislabeled`` only).
    """

    kind: str
    x: np.ndarray = field(repr=False)
    y: int
    source_row: int | None = None

    def __repr__(self) -> str:
        return (
            f"InputCanary(kind={self.kind!r}, norm={float(np.linalg.norm(self.x)):.4g}, "
            f"y={self.y}, source_row={self.source_row})"
        )


def _check_data(X: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(X, dtype=np.float64)
    labels = np.asarray(y)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 1:
        raise DataError(f"A canary needs an (n, d) array with n >= 2. Got shape {x.shape}.")
    if labels.shape != (x.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"The 'y' parameter must be ({x.shape[0]},) integer labels.")
    return x, labels.astype(np.int64)


def _num_classes(labels: np.ndarray, num_classes: int | None) -> int:
    return max(2, int(labels.max()) + 1 if num_classes is None else int(num_classes))


def mislabeled_canary(X: Any, y: Any, *, seed: int, num_classes: int | None = None) -> InputCanary:
    """An in-distribution row whose label is moved to another class (chosen at random).

    References:
        Jagielski, Ullman, Oprea 2020, §4 (poisoning-style canaries); Carlini et al. 2019,
        "The Secret Sharer" (memorisation of unusual records).
    """
    x, labels = _check_data(X, y)
    rng = np.random.default_rng([seed, 11])
    row = int(rng.integers(x.shape[0]))
    k = _num_classes(labels, num_classes)
    shift = int(rng.integers(1, k))  # a label different from the true one, uniform
    return InputCanary("mislabeled", x[row].copy(), int((labels[row] + shift) % k), row)


def ood_canary(
    X: Any, y: Any, *, seed: int, scale: float = 3.0, num_classes: int | None = None
) -> InputCanary:
    """A row far outside the data: a random direction at ``scale`` × the largest row norm."""
    x, labels = _check_data(X, y)
    rng = np.random.default_rng([seed, 12])
    u = rng.standard_normal(int(x.shape[1]))
    u /= np.linalg.norm(u)
    radius = scale * float(np.max(np.linalg.norm(x, axis=1)) or 1.0)
    return InputCanary(
        "ood", x.mean(axis=0) + radius * u, int(rng.integers(_num_classes(labels, num_classes)))
    )


def clipbkd_canary(
    X: Any, y: Any, *, seed: int, norm: float | None = None, num_classes: int | None = None
) -> InputCanary:
    """ClipBKD: a row along the data's direction of least variance, with a rare label.

    The last right-singular vector of the centred data is the direction in which real
    examples (and so their gradients for a linear model) vary least; a canary there is
    easiest to tell apart after clipping and noise.

    Args:
        X, y: the data.
        seed: picks the sign of the direction.
        norm: the canary's norm (default: the largest row norm of ``X``).
        num_classes: number of classes (default ``max(y) + 1``).

    References:
        Jagielski, Ullman, Oprea 2020, "Auditing Differentially Private Machine
        Learning: How Private is Private SGD?", Algorithm 2 (ClipBKD).
    """
    x, labels = _check_data(X, y)
    rng = np.random.default_rng([seed, 13])
    _, _, vt = np.linalg.svd(x - x.mean(axis=0), full_matrices=True)
    direction = vt[-1] * (1.0 if rng.random() < 0.5 else -1.0)
    radius = float(np.max(np.linalg.norm(x, axis=1))) if norm is None else float(norm)
    counts = np.bincount(labels, minlength=_num_classes(labels, num_classes))
    return InputCanary("clipbkd", radius * direction, int(np.argmin(counts)))


def input_canary(
    kind: str, X: Any, y: Any, *, seed: int, num_classes: int | None = None
) -> InputCanary | CraftedCanary:
    """The input-space canary of ``kind`` (one of :data:`INPUT_CANARY_KINDS`).

    ``crafted`` sits on the last feature (which must be all-zero) at :data:`CRAFTED_VALUE`.
    """
    check_choice("canary", kind, INPUT_CANARY_KINDS)
    if kind == "crafted":
        x = np.asarray(X)
        return crafted_canary(
            X, y, feature=int(x.shape[1]) - 1, value=CRAFTED_VALUE, num_classes=num_classes
        )
    make = {"mislabeled": mislabeled_canary, "ood": ood_canary, "clipbkd": clipbkd_canary}[kind]
    return make(X, y, seed=seed, num_classes=num_classes)


def with_zero_feature(X: Any, count: int = 1) -> np.ndarray:
    """``X`` with ``count`` all-zero feature columns appended (float32).

    A linear model's weights on an all-zero feature get a zero gradient from every real
    example, so Dirac canaries on them are observed as exactly canary + noise.
    """
    x = np.asarray(X, dtype=np.float32)
    return np.concatenate([x, np.zeros((x.shape[0], int(count)), dtype=np.float32)], axis=1)


def dirac_direction(num_parameters: int, index: int) -> np.ndarray:
    """The one-hot gradient canary e_index in R^P (a Dirac canary).

    For a logistic-regression stack laid out as ``(weight (C, d), bias (C,))`` the weight
    of class ``c`` on feature ``j`` is flat index ``c * d + j``.

    References:
        Nasr et al. 2023, "Tight Auditing of Differentially Private Machine Learning",
        §3.2 (Dirac canary gradients).
    """
    size = check_integer("num_parameters", num_parameters, low=1)
    e = np.zeros(size)
    e[check_integer("index", index, low=0, high=size - 1)] = 1.0
    return e


def every_group_direction(shapes: list[tuple[int, int]]) -> np.ndarray:
    """A unit gradient canary with an equal part (norm 1/√G) in each of the G tensors.

    The layout is :meth:`dpaudit.models.ModelStack.flat_parameters` for the linear layers
    ``shapes`` (``(out, in)``, input to output): weight ``(out, in)`` row-major, then bias
    ``(out,)``, layer after layer, so G = 2·len(shapes). Each tensor's part sits where no
    real example's gradient reaches, when the model allows it:

    * the first layer's weight: unit 0 on the last feature (the Dirac canary's
      coordinate, :func:`dirac_direction`), all-zero in dpaudit's rows, so ∂/∂W = δ·aᵀ = 0;
    * the output layer's weight (column 0, or the last feature for a one-layer model) and
      bias: the all-ones vector over the classes, divided by √classes. A softmax
      cross-entropy's output gradient p − e_y sums to 0 over the classes, so every real
      example's gradient is orthogonal to it;
    * a hidden layer's bias and a middle layer's weight: unit 0 (real gradients reach it;
      they enter both arms alike, which costs power, never validity).

    A trainer that clips per tensor clips each part of a large canary gradient along it,
    so the clipped canary is C_g on every part: the projection on this direction shows the
    whole clipped norm (Σ_g C_g/√G, = C·√G for a common C).

    Args:
        shapes: the ``(out, in)`` of every linear layer, input to output
            (:func:`dpaudit.models.layer_shapes`).

    Returns:
        ``(P,)`` float64, unit norm.

    References:
        Nasr et al. 2023, "Tight Auditing of Differentially Private Machine Learning",
        §3.2 (Dirac canary gradients), extended to one part per parameter tensor.
    """
    if not shapes:
        raise DpauditError("A gradient canary needs at least one layer. Got no shapes.")
    parts: list[np.ndarray] = []
    last = len(shapes) - 1
    for i, (out, inp) in enumerate(shapes):
        weight = np.zeros((out, inp))
        bias = np.zeros(out)
        if i == last:
            # shift invariance of the softmax: Σ_c (p_c − y_c) = 0 for every example
            weight[:, inp - 1 if i == 0 else 0] = 1.0 / np.sqrt(out)
            bias[:] = 1.0 / np.sqrt(out)
        else:
            weight[0, inp - 1 if i == 0 else 0] = 1.0
            bias[0] = 1.0
        parts += [weight.reshape(-1), bias]
    direction = np.concatenate(parts) / np.sqrt(len(parts))
    return direction


# ------------------------------------------------------------- black-box levers (crafted)


@dataclass(frozen=True)
class CraftedCanary:
    """An input canary crafted so that only it moves its own parameters.

    The row is ``value`` on one feature that every real row leaves at 0, and 0 elsewhere.
    For a linear layer the gradient on the weights of feature j is δ·x_j, so no real row
    ever touches the weights of that feature; only the canary does (Annamalai and De
    Cristofaro 2024, arXiv 2405.14106v4, §3: the black-box levers).

    Attributes:
        x: ``(d,)`` the row.
        y: its label.
        decoy: the class the worst-case initial parameters make the model predict for it.
        feature: the index of its feature.
        value: its value on that feature.
    """

    x: np.ndarray = field(repr=False)
    y: int
    decoy: int
    feature: int
    value: float

    @property
    def kind(self) -> str:
        return "crafted"


def crafted_canary(
    X: Any, y: Any, *, feature: int, value: float, num_classes: int | None = None
) -> CraftedCanary:
    """The crafted canary on ``feature``, which must be all-zero in ``X``.

    Its label is the rarest class and its decoy the next class (mod the number of
    classes): any pair of distinct classes works, since the worst-case initial parameters
    (:func:`worst_case_initial_parameters`) put the decoy far ahead on that feature.

    Raises:
        DataError: ``feature`` is out of range or some row is nonzero on it.
        DpauditError: ``value`` is not a positive finite number.
    """
    x, labels = _check_data(X, y)
    d = int(x.shape[1])
    try:
        j = check_integer("feature", feature, low=0, high=d - 1)
    except DpauditError as exc:  # a column this data does not have
        raise DataError(str(exc)) from None
    if np.any(x[:, j] != 0.0):
        raise DataError(
            f"The crafted canary needs an all-zero feature; column {j} has "
            f"{int(np.count_nonzero(x[:, j]))} nonzero rows."
        )
    if not (isinstance(value, int | float) and np.isfinite(value) and value > 0):
        raise DpauditError(f"The 'value' parameter must be a positive number. Got {value!r}.")
    k = _num_classes(labels, num_classes)
    label = int(np.argmin(np.bincount(labels, minlength=k)))
    row = np.zeros(d)
    row[j] = float(value)
    return CraftedCanary(row, label, (label + 1) % k, j, float(value))


@dataclass(frozen=True)
class CraftedRun:
    """What the worst-case initial parameters must survive: the audited DP-(S)GD run.

    Attributes:
        steps: the most steps any model makes.
        learning_rate: the SGD step size (no momentum, no weight decay).
        clipping_norm: C.
        noise_multiplier: σ (noise σ·C on the clipped sum).
        divisor: the smallest divisor of the noisy sum (q·n, or n for full batch).
        batch_rows: the most rows one batch can hold, the canary included (n + 1).
    """

    steps: int
    learning_rate: float
    clipping_norm: float
    noise_multiplier: float
    divisor: float
    batch_rows: int


#: Standard deviations of head-room in the worst-case margin: a Gaussian random walk's
#: running maximum exceeds 12 of its final standard deviations with probability at most
#: 2·Φ(−12) < 1e-32 (reflection principle), so no feasible audit ever sees the canary's
#: gradient leave the clipping bound.
_HEADROOM_SIGMAS = 12.0
#: Logit margin kept on top: at a margin of 30 every class but the decoy has probability
#: below e^-30 < 1e-13, far below float32's half-ulp at 1, so δ = e_decoy − e_label in
#: float32 up to entries of 1e-13.
_LOGIT_FLOOR = 30.0


def worst_case_margin(canary: CraftedCanary, run: CraftedRun) -> float:
    """The decoy's head start A on the canary's feature weight (weight units).

    With initial weights W[decoy, j] = A and 0 elsewhere, the canary is misclassified by a
    logit margin of at least ``_LOGIT_FLOOR`` in every step (except with probability below
    1e-32), so its per-example gradient is exactly (e_decoy − e_label) ⊗ (x, 1), of norm
    √2·√(v² + 1) ≥ C, and clipping scales it to norm C along a known direction. The margin
    covers: the canary's own drift (at most T·lr·√2·C/divisor in the weight difference),
    12 standard deviations of the noise on it (lr·σC·√(2T)/divisor), and, divided by the
    canary's value v, the most the biases can move (a batch of at most ``batch_rows``
    clipped gradients moves a bias difference by at most lr·√2·rows·C/divisor per step)
    plus the same noise.
    """
    r = run
    drift = r.steps * r.learning_rate * np.sqrt(2.0) * r.clipping_norm / r.divisor
    noise = (
        r.learning_rate * r.noise_multiplier * r.clipping_norm * np.sqrt(2.0 * r.steps) / r.divisor
    )
    bias = r.steps * r.learning_rate * np.sqrt(2.0) * r.batch_rows * r.clipping_norm / r.divisor
    head = drift + _HEADROOM_SIGMAS * noise
    return float(head + (bias + _HEADROOM_SIGMAS * noise + _LOGIT_FLOOR) / canary.value)


def worst_case_initial_parameters(
    canary: CraftedCanary, run: CraftedRun, *, num_features: int, num_classes: int
) -> np.ndarray:
    """The worst-case θ₀ of a logistic regression for the crafted canary, flat ``(P,)``.

    Every parameter is 0 except the decoy class's weight on the canary's feature, which
    is :func:`worst_case_margin`. Layout: weight ``(C, d)`` row-major, then bias ``(C,)``
    (:meth:`dpaudit.models.ModelStack.flat_parameters`). The same θ₀ serves every model of
    both arms, as the multi-run audit needs; DP-SGD's guarantee holds for any fixed θ₀,
    which is why the auditor may choose it (Annamalai and De Cristofaro 2024, arXiv
    2405.14106v4, §3).
    """
    theta = np.zeros(num_classes * num_features + num_classes)
    theta[canary.decoy * num_features + canary.feature] = worst_case_margin(canary, run)
    return theta


def crafted_clipped_weight(canary: CraftedCanary, clipping_norm: float) -> float:
    """|Clipped gradient| on each of the canary's two moving weights, per step it is in.

    The gradient is (e_decoy − e_label) ⊗ (x, 1), of norm g = √2·√(v² + 1); Opacus'
    factor min(1, C/(g + 1e-6)) scales its weight entries (±v) to ±v·C/(g + 1e-6).
    """
    v = canary.value
    g = np.sqrt(2.0) * np.sqrt(v * v + 1.0)
    return float(v * min(1.0, clipping_norm / (g + 1e-6)))


def crafted_score_moments(
    canary: CraftedCanary,
    run: CraftedRun,
    *,
    divisor: float,
    included: bool,
    margin: float,
) -> tuple[float, float]:
    """Mean and standard deviation of the logit-shift score under full-batch DP-GD.

    The score is (W[label, j] − W[decoy, j]) at the end. It starts at −``margin``; each of
    the T steps adds lr·(2·c + noise difference)/``divisor`` where c is
    :func:`crafted_clipped_weight` (when the canary is in) and the noise difference is
    N(0, 2σ²C²). So the score is exactly N(−A + [in]·2Tlr·c/divisor, 2Tlr²σ²C²/divisor²).
    """
    r = run
    mean = -margin + (
        2.0 * r.steps * r.learning_rate * crafted_clipped_weight(canary, r.clipping_norm) / divisor
        if included
        else 0.0
    )
    std = r.learning_rate * r.noise_multiplier * r.clipping_norm * np.sqrt(2.0 * r.steps) / divisor
    return float(mean), float(std)


# ----------------------------------------------------- black-box gradient canary (final model)


def gradient_canary_scores(
    final_parameters: Any,
    *,
    index: int,
    initial: float,
    learning_rate: float,
    clipping_norm: float,
    divisor: float,
) -> np.ndarray:
    """The black-box gradient canary's score: the final parameter on its coordinate, in C.

    The canary is a Dirac gradient C·e_index added to the clipped gradient sum at every
    step in which its Poisson coin comes up; no real example's gradient touches that
    coordinate (a first-layer weight of an all-zero feature), and every model starts
    from the same θ₀. Plain SGD (no momentum, no weight decay) then leaves

        θ_T[index] = θ₀[index] − (lr/divisor)·(C·B + Σ_t σC·z_t),  B ~ Binomial(T, q),

    so the score −(θ_T[index] − θ₀[index])·divisor/(lr·C) is B + N(0, Tσ²) with the canary
    and N(0, Tσ²) without it: exactly the last-iterate pair of
    :mod:`dpaudit.planning.last_iterate`, whose log-likelihood ratio is increasing in the score, so
    a threshold on it is the Neyman–Pearson test of the final model on that coordinate.

    This is the gradient-crafting adversary of Cebere, Bellet, Papernot ("Tighter Privacy
    Auditing of DP-SGD in the Hidden State Threat Model", ICLR 2025, arXiv 2405.14457v3)
    in its every-step form (the crafted gradient inserted at every step, period k = 1),
    with the variant used here stated: the crafted gradient is one fixed Dirac direction
    for all steps, and the score reads the released final model's parameter along it
    (not the per-step gradient sequences optimised for a loss landscape, nor an output
    query of the model).

    Args:
        final_parameters: ``(K, P)`` flat final parameters of K models.
        index: the canary's coordinate.
        initial: θ₀[index], shared by every model.
        learning_rate: lr.
        clipping_norm: C.
        divisor: what the noisy sum is divided by (q·n, or n for full batch).

    Returns:
        ``(K,)`` float64 scores (larger = "canary in").
    """
    theta = np.asarray(final_parameters, dtype=np.float64)
    if theta.ndim != 2:
        raise DataError(f"'final_parameters' must be (K, P). Got shape {theta.shape}.")
    j = check_integer("index", index, low=0, high=int(theta.shape[1]) - 1)
    scale = float(learning_rate) * float(clipping_norm) / float(divisor)
    if not (np.isfinite(scale) and scale > 0):
        raise DpauditError(
            "The gradient canary's score needs learning_rate, clipping_norm and divisor > 0. "
            f"Got lr={learning_rate!r}, C={clipping_norm!r}, divisor={divisor!r}."
        )
    scores: np.ndarray = -(theta[:, j] - float(initial)) / scale
    if not np.all(np.isfinite(scores)):
        raise DataError("A model's parameter on the gradient canary is infinite or NaN.")
    return scores
