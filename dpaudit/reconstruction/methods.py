"""Reconstruction from a shared gradient: attacks, defences, error metrics, and the
k-candidate identification game with its rigorous ε lower bound.

Threat model: an honest-but-curious server knows the model and sees the (possibly
defended) gradient of one batch of B examples; it reconstructs the inputs.

Networks are small MLPs ``f(x) = W_L σ(… σ(W_1 x + b_1) …) + b_L`` on 8×8 digit images
(pixels in [0, 1]); a scalar output is trained with the squared loss ½(f − y)², more
outputs with cross-entropy. The two-layer network of the tensor method (Wang, Lee, Lei
2023) is ``f(x) = Σ_j a_j σ(w_jᵀx + b_j)`` (``sizes = (64, m, 1)``).

**Why B = 1 gives the input away.** For the first layer, ∂ℓ/∂w_j = c_j x with
c_j = ℓ'(f) a_j σ'(w_jᵀx + b_j): every row of the first layer's gradient is a multiple of
x, so G_W = c xᵀ has rank one. With a bias, ∂ℓ/∂b_j = c_j, so x = (∂ℓ/∂w_j)/(∂ℓ/∂b_j)
exactly for any row with c_j ≠ 0 (Phong et al. 2017; Geiping et al. 2020, Prop. 3.1);
equivalently the top right singular vector of [G_W | g_b] is (x; 1)/‖(x; 1)‖ up to sign.
Without a bias, G_W fixes x only up to a scalar t (its direction, ±). The scale must come
from the other layers and the loss: for a ReLU network without biases f(tx) = t f(x)
(positive homogeneity), so with the squared loss every gradient entry is
s = (t f(u) − y)·t times a known function of the unit direction u, and t solves the
quadratic f(u)t² − yt − s = 0. Its roots multiply to −s/f(u): when both are positive
(x and x' = c·x with c = (y − f(x))/f(x) > 0) the two inputs give the SAME gradient,
every entry of it, and no attack can choose (planted in the tests); otherwise the positive
root is x's scale. So without bias B = 1 determines x up to at most two candidates, not
always one. For a smooth non-homogeneous σ (tanh) the scale is generically unique but has
no closed form. The optimisation attack reaches a median normalised RMSE below 1e-3 with
and without bias, ReLU and tanh (tested; single ReLU examples can stay trapped in a wrong
activation pattern).

Pure numpy for the metrics and the game's bound; torch is imported inside the functions
that differentiate (loading an audit file stays light).

References:
    Zhu, Liu, Han (2019), "Deep leakage from gradients", NeurIPS (DLG).
    Zhao, Mopuri, Bilen (2020), "iDLG: improved deep leakage from gradients" (labels
    from the sign of the last layer's gradient).
    Geiping, Bauermeister, Dröge, Moeller (2020), "Inverting gradients — how easy is it
    to break privacy in federated learning?", NeurIPS (cosine distance, TV prior,
    restarts; Prop. 3.1 for the fully connected layer with bias).
    Phong, Aono, Hayashi, Wang, Moriai (2017), "Privacy-preserving deep learning via
    additively homomorphic encryption" (x = ∇_W / ∇_b).
    Kuhn (1955), the Hungarian method (scipy.optimize.linear_sum_assignment).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from scipy import optimize
from scipy import stats as sps
from sklearn.datasets import load_digits

from dpaudit.errors import DpauditError, check_choice, check_in_interval, check_integer
from dpaudit.stats import ConfidenceInterval, check_confidence_level, clopper_pearson

__all__ = [
    "DEFENCES",
    "Complexity",
    "Defence",
    "ErrorSummary",
    "Network",
    "ScalingFit",
    "analytic_inversion",
    "defended_gradient",
    "direction_nrmse",
    "fit_scaling",
    "infer_labels",
    "invert_gradient",
    "lecture_complexity",
    "load_digits_images",
    "matched_errors",
    "psnr",
    "summarise_errors",
    "tensor_inversion",
]

Activation = Literal["relu", "tanh", "sigmoid"]
ACTIVATIONS: tuple[str, ...] = ("relu", "tanh", "sigmoid")
Distance = Literal["l2", "cosine"]
DISTANCES: tuple[str, ...] = ("l2", "cosine")
DEFENCES: tuple[str, ...] = (
    "none",
    "aggregation",
    "noise",
    "clipping",
    "dpsgd",
    "dropout",
    "pruning",
)


# ------------------------------------------------------------------------------- data


@functools.lru_cache(maxsize=1)
def load_digits_images() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's 1,797 digits as (images in [0, 1] of shape (n, 64), labels 0–9)."""
    x, y = load_digits(return_X_y=True)
    return np.asarray(x, dtype=np.float64) / 16.0, np.asarray(y, dtype=np.int64)


# ---------------------------------------------------------------------------- network


@dataclass(frozen=True)
class Network:
    """An MLP the server knows: layer sizes, activation, biases and its parameters.

    Attributes:
        sizes: (input, hidden…, output); output 1 is a regression (squared loss),
            more outputs a classifier (cross-entropy).
        activation: ``relu``, ``tanh`` or ``sigmoid`` between layers.
        bias: whether every layer has a bias.
        params: per layer (W, b) with W of shape (out, in); b is None without bias.
    """

    sizes: tuple[int, ...]
    activation: Activation
    bias: bool
    params: tuple[tuple[np.ndarray, np.ndarray | None], ...] = field(repr=False)

    @classmethod
    def random(
        cls,
        sizes: Sequence[int],
        *,
        activation: Activation = "relu",
        bias: bool = True,
        seed: int = 0,
    ) -> Network:
        """He-initialised weights (N(0, 2/fan_in)); biases N(0.1, 0.1²) keep ReLUs alive."""
        check_choice("activation", activation, ACTIVATIONS)
        if len(sizes) < 2:
            raise DpauditError(f"The 'sizes' parameter needs ≥ 2 sizes. Got {sizes}.")
        sizes = [check_integer("sizes", s, low=1) for s in sizes]
        rng = np.random.default_rng(seed)
        params = []
        for fan_in, fan_out in itertools.pairwise(sizes):
            w = rng.normal(0.0, math.sqrt(2.0 / fan_in), (fan_out, fan_in))
            b = rng.normal(0.1, 0.1, fan_out) if bias else None
            params.append((w, b))
        return cls(tuple(int(s) for s in sizes), activation, bias, tuple(params))

    @property
    def input_size(self) -> int:
        return self.sizes[0]

    @property
    def classifier(self) -> bool:
        return self.sizes[-1] > 1

    @property
    def parameter_count(self) -> int:
        return sum(w.size + (0 if b is None else b.size) for w, b in self.params)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """Run torch on one thread: these networks are tiny, and intra-op threads only contend
    (measured: 13× slower for B = 2 on a loaded two-core machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _torch_params(net: Network) -> list[torch.Tensor]:
    out = []
    for w, b in net.params:
        out.append(torch.as_tensor(w, dtype=torch.float64))
        if b is not None:
            out.append(torch.as_tensor(b, dtype=torch.float64))
    return out


def _forward(net: Network, params: Sequence[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    act = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid}[net.activation]
    h, i = x, 0
    layers = len(net.params)
    for k in range(layers):
        h = h @ params[i].T
        i += 1
        if net.bias:
            h = h + params[i]
            i += 1
        if k < layers - 1:
            h = act(h)
    return h


def _losses(
    net: Network, params: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> torch.Tensor:
    """Per-example losses: ½(f − y)² for a scalar output, cross-entropy otherwise."""
    out = _forward(net, params, x)
    if not net.classifier:
        return 0.5 * (out[:, 0] - y) ** 2
    if y.dtype.is_floating_point:  # soft labels (one-hot rows) from label optimisation
        return -(torch.log_softmax(out, dim=1) * y).sum(dim=1)
    return torch.nn.functional.cross_entropy(out, y, reduction="none")


def _label_tensor(net: Network, y: np.ndarray) -> torch.Tensor:
    if net.classifier:
        return torch.as_tensor(np.asarray(y), dtype=torch.int64)
    return torch.as_tensor(np.asarray(y, dtype=np.float64), dtype=torch.float64)


def per_example_gradients(net: Network, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The flattened gradient of each example's loss, shape (B, parameters)."""
    params = [p.requires_grad_(True) for p in _torch_params(net)]
    xt = torch.as_tensor(np.atleast_2d(x), dtype=torch.float64)
    yt = _label_tensor(net, y)
    rows = []
    with _one_thread():
        for i in range(xt.shape[0]):
            loss = _losses(net, params, xt[i : i + 1], yt[i : i + 1]).sum()
            grads = torch.autograd.grad(loss, params)
            rows.append(torch.cat([g.reshape(-1) for g in grads]).numpy())
    return np.stack(rows)


# ---------------------------------------------------------------------------- defences


@dataclass(frozen=True)
class Defence:
    """A defence applied to the gradient a client shares (each one parameterised).

    Attributes:
        name: ``none``; ``aggregation`` (the shared gradient is the mean over ``k``
            batches of B, the other k − 1 unknown to the server); ``noise`` (the mean
            gradient plus N(0, σ²) per coordinate, ``sigma`` absolute); ``clipping``
            (the mean gradient scaled to ℓ2 norm ≤ ``clipping_norm``); ``dpsgd``
            (each example's gradient clipped to C, summed, plus N(0, σ²C²) per
            coordinate with σ = ``sigma`` the noise multiplier, divided by B, as Opacus
            does); ``dropout`` (each coordinate zeroed with probability ``p``);
            ``pruning`` (all but the ``keep`` fraction of largest-magnitude coordinates
            zeroed; Zhu et al. 2019, §5).
        k, sigma, clipping_norm, p, keep: the parameters of the named defence.
    """

    name: str = "none"
    k: int = 1
    sigma: float = 0.0
    clipping_norm: float = 1.0
    p: float = 0.0
    keep: float = 1.0

    def __post_init__(self) -> None:
        check_choice("name", self.name, DEFENCES)
        check_integer("k", self.k, low=1)
        check_in_interval("sigma", self.sigma, 0.0, math.inf)
        check_in_interval("clipping_norm", self.clipping_norm, 0.0, math.inf, low_open=True)
        check_in_interval("p", self.p, 0.0, 1.0, high_open=True)
        check_in_interval("keep", self.keep, 0.0, 1.0, low_open=True)

    @property
    def label(self) -> str:
        """A short name with the parameter that matters, e.g. ``dpsgd(σ=1, C=1)``."""
        return {
            "none": "none",
            "aggregation": f"aggregation(k={self.k})",
            "noise": f"noise(σ={self.sigma:g})",
            "clipping": f"clipping(C={self.clipping_norm:g})",
            "dpsgd": f"dpsgd(σ={self.sigma:g}, C={self.clipping_norm:g})",
            "dropout": f"dropout(p={self.p:g})",
            "pruning": f"pruning(keep={self.keep:g})",
        }[self.name]

    @property
    def zeros(self) -> Literal["match", "ignore", "pruned"]:
        """What the shared gradient's exact zeros mean to the attack (see invert_gradient)."""
        return {"dropout": "ignore", "pruning": "pruned"}.get(self.name, "match")  # type: ignore[return-value]

    @property
    def batch_multiplier(self) -> int:
        """How many batches of B the shared gradient averages (k for aggregation)."""
        return self.k if self.name == "aggregation" else 1

    def apply(self, per_example: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The shared gradient from the per-example gradients (B·multiplier, P)."""
        g = per_example.mean(axis=0)
        if self.name in ("none", "aggregation"):
            return g
        if self.name == "noise":
            return g + rng.normal(0.0, self.sigma, g.shape)
        if self.name == "clipping":
            norm = float(np.linalg.norm(g))
            return g * min(1.0, self.clipping_norm / norm) if norm > 0 else g
        if self.name == "dpsgd":
            c = self.clipping_norm
            norms = np.linalg.norm(per_example, axis=1, keepdims=True)
            clipped = per_example * np.minimum(1.0, c / np.maximum(norms, 1e-300))
            noisy = clipped.sum(axis=0) + rng.normal(0.0, self.sigma * c, g.shape)
            return noisy / per_example.shape[0]
        if self.name == "dropout":
            return g * (rng.random(g.shape) >= self.p)
        # pruning: keep the ⌈keep·P⌉ largest magnitudes
        kept = max(1, math.ceil(self.keep * g.size))
        out = np.zeros_like(g)
        top = np.argpartition(-np.abs(g), kept - 1)[:kept]
        out[top] = g[top]
        return out


def defended_gradient(
    net: Network, x: np.ndarray, y: np.ndarray, defence: Defence, rng: np.random.Generator
) -> np.ndarray:
    """The gradient the server sees for inputs ``x`` (all k·B of them for aggregation)."""
    return defence.apply(per_example_gradients(net, x, y), rng)


# ----------------------------------------------------------------------------- attacks


def _split(net: Network, flat: np.ndarray) -> list[tuple[np.ndarray, np.ndarray | None]]:
    out, i = [], 0
    for w, b in net.params:
        gw = flat[i : i + w.size].reshape(w.shape)
        i += w.size
        gb = None
        if b is not None:
            gb = flat[i : i + b.size]
            i += b.size
        out.append((gw, gb))
    return out


def infer_labels(net: Network, observed: np.ndarray, batch_size: int) -> np.ndarray:
    """Labels of a classifier's batch from the last layer's gradient (iDLG and its count).

    With softmax cross-entropy, the last bias's gradient is mean_i (p_i − e_{y_i}): for
    B = 1 its only negative entry is the label, whatever the network (Zhao et al. 2020,
    §3). Without a last bias the weight rows serve: row c is mean_i (p_ic − [y_i = c]) h_i,
    and h_i ≥ 0 after a ReLU, so the row sums have the same signs. For B > 1 each class
    with a negative entry gets one example, and the remaining ones go, one at a time, to
    the class whose entry is still most negative after the counts so far (each example
    of class c lowers B·g_c by about 1 − p̄_c ≈ 1 − 1/classes) — a heuristic, exact when
    the batch's labels are distinct.
    """
    gw, gb = _split(net, observed)[-1]
    score = gb if gb is not None else gw.sum(axis=1)
    if batch_size == 1:
        return np.array([int(np.argmin(score))])
    classes = score.size
    labels = [int(c) for c in np.flatnonzero(score < 0)][:batch_size]
    counts = np.zeros(classes)
    for c in labels:
        counts[c] += 1
    scale = -batch_size * score / max(float(np.abs(score).sum()), 1e-300) * classes
    while len(labels) < batch_size:
        c = int(np.argmax(scale - counts * (1.0 - 1.0 / classes)))
        labels.append(c)
        counts[c] += 1
    return np.array(sorted(labels))


@dataclass(frozen=True)
class Inversion:
    """An attack's reconstruction of a batch.

    Attributes:
        x: reconstructed inputs, shape (B, d).
        labels: the labels used or found (None for a regression attack's joint fit).
        distance: the final gradient distance of the best restart.
        restarts: how many restarts ran.
    """

    x: np.ndarray
    labels: np.ndarray | None
    distance: float
    restarts: int


def _gradient_distance(
    g: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None, distance: Distance
) -> torch.Tensor:
    if mask is not None:
        g, target = g[mask], target[mask]
    if distance == "cosine":
        # 1 − cos (Geiping et al. 2020, eq. 4): invariant to the gradient's scale, so
        # clipping a batch's gradient hides nothing from it.
        return 1.0 - (g @ target) / (g.norm() * target.norm() + 1e-300)
    return ((g - target) ** 2).sum() / (target @ target + 1e-300)


def _total_variation(x: torch.Tensor, side: int) -> torch.Tensor:
    """Anisotropic TV of square images (Geiping et al. 2020, eq. 4's prior), mean per image."""
    img = x.reshape(-1, side, side)
    return (
        (img[:, 1:, :] - img[:, :-1, :]).abs().sum() + (img[:, :, 1:] - img[:, :, :-1]).abs().sum()
    ) / x.shape[0]


def invert_gradient(
    net: Network,
    observed: np.ndarray,
    *,
    batch_size: int,
    labels: np.ndarray | None,
    distance: Distance = "l2",
    restarts: int = 2,
    steps: int = 300,
    tv: float = 0.0,
    zeros: Literal["match", "ignore", "pruned"] = "match",
    box: tuple[float, float] | None = (0.0, 1.0),
    seed: int = 0,
) -> Inversion:
    """Gradient inversion by optimisation (DLG / inverting gradients).

    Minimises D(∇ℓ(x̂, ŷ), g) + tv·TV(x̂) over x̂ with L-BFGS (strong-Wolfe line search,
    float64) from ``restarts`` uniform random starts in [0, 1]^d, and keeps the start
    with the smallest gradient distance D (the attacker sees only that, never the truth).

    Args:
        net: the model the server knows.
        observed: the (defended) shared gradient, flattened.
        batch_size: how many inputs to reconstruct.
        labels: known or inferred labels; None for a regression network makes the targets
            ŷ free variables fitted jointly (DLG); a classifier needs labels (use
            :func:`infer_labels`).
        distance: ``l2`` (squared ℓ2, normalised by ‖g‖²; Zhu et al. 2019) or ``cosine``
            (Geiping et al. 2020).
        restarts: random starts.
        steps: L-BFGS iterations per start.
        tv: weight of the total-variation prior on 8×8 images (0 = none).
        zeros: what the observed gradient's exact zeros mean. ``match``: nothing special;
            ``ignore``: compare only the non-zero coordinates (dropout: a zero may hide
            any value); ``pruned``: compare the non-zero ones, and keep the others below
            the smallest kept magnitude τ (pruning: a zeroed coordinate had |g| ≤ τ), by
            the penalty Σ relu(|g_i| − τ)² on them.
        box: the known input range; the final reconstruction is clipped to it.
        seed: the starts' seed.
    """
    check_choice("distance", distance, DISTANCES)
    if net.classifier and labels is None:
        raise DpauditError("a classifier's inversion needs labels (known, or infer_labels)")
    params = [p.requires_grad_(True) for p in _torch_params(net)]
    target = torch.as_tensor(observed, dtype=torch.float64)
    check_choice("zeros", zeros, ("match", "ignore", "pruned"))
    mask = target != 0 if zeros != "match" else None
    tau = float(target[mask].abs().min()) if mask is not None and bool(mask.any()) else 0.0
    scale = float(target @ target) + 1e-300
    side = math.isqrt(net.input_size)
    gen = torch.Generator().manual_seed(seed)
    best: tuple[float, np.ndarray, np.ndarray | None] | None = None
    for _ in range(restarts):
        x = torch.rand(batch_size, net.input_size, generator=gen, dtype=torch.float64)
        x.requires_grad_(True)
        variables = [x]
        if labels is not None:
            y = _label_tensor(net, labels)
        else:
            y = torch.zeros(batch_size, dtype=torch.float64, requires_grad=True)
            variables.append(y)
        opt = torch.optim.LBFGS(
            variables,
            lr=1.0,
            max_iter=steps,
            history_size=50,
            line_search_fn="strong_wolfe",
            tolerance_grad=1e-14,
            tolerance_change=1e-16,
        )

        def objective(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            loss = _losses(net, params, x, y).mean()
            grads = torch.autograd.grad(loss, params, create_graph=True)
            g = torch.cat([gr.reshape(-1) for gr in grads])
            value = _gradient_distance(g, target, mask, distance)
            if zeros == "pruned" and mask is not None:
                value = value + (torch.relu(g[~mask].abs() - tau) ** 2).sum() / scale
            if tv > 0 and side * side == net.input_size:
                value = value + tv * _total_variation(x, side)
            return value

        def closure(opt: torch.optim.LBFGS = opt, objective: Any = objective) -> torch.Tensor:
            opt.zero_grad()
            value = objective()
            value.backward()
            return value

        with _one_thread():
            opt.step(closure)
        final = float(objective().detach())  # the attacker's own criterion, never the truth
        if not math.isfinite(final):
            continue
        if best is None or final < best[0]:
            found = None if labels is not None else y.detach().numpy().copy()
            best = (final, x.detach().numpy().copy(), found)
    if best is None:
        raise DpauditError("every restart of the gradient inversion diverged")
    final, xr, yr = best
    if box is not None:
        # The attacker knows the pixel range: project the reconstruction onto it.
        xr = np.clip(xr, box[0], box[1])
    return Inversion(xr, labels if labels is not None else yr, final, restarts)


def analytic_inversion(net: Network, observed: np.ndarray) -> np.ndarray:
    """The B = 1 closed form: the first layer's gradient [G_W | g_b] = c (x; 1)ᵀ.

    The top right singular vector v of [G_W | g_b] is ±(x; 1)/‖(x; 1)‖, so
    x̂ = v[:d]/v[d]: exact without noise, and the least-squares rank-one fit (the best
    rank-one approximation in Frobenius norm, Eckart–Young) under noise. Needs a bias.

    Returns:
        x̂ of shape (1, d).
    """
    if not net.bias:
        raise DpauditError("the analytic inversion needs a first-layer bias (x = ∇_W / ∇_b)")
    gw, gb = _split(net, observed)[0]
    assert gb is not None  # net.bias
    v = np.linalg.svd(np.column_stack([gw, gb]), full_matrices=False)[2][0]
    if v[-1] == 0:
        return np.full((1, gw.shape[1]), np.nan)
    return (v[:-1] / v[-1])[None, :]


def tensor_inversion(
    net: Network,
    observed: np.ndarray,
    *,
    batch_size: int,
    weight_std: float | None = None,
    n_repeat: int = 10,
    n_iteration: int = 50,
    als_iterations: int = 200,
    seed: int = 0,
) -> np.ndarray:
    """The tensor method for two-layer networks (Wang, Lee, Lei 2023): input directions.

    For f(x) = Σ_j a_j σ(w_jᵀx + b_j) with w_j ~ N(0, s²I) independent of b_j, the first
    layer's gradient is g_j = (1/B) Σ_i r_i a_j σ'(w_jᵀx_i + b_j) x_i. Stein's lemma
    twice, E[h(w)(wwᵀ − s²I)] = s⁴ E[∇²h(w)], gives
        E_j[(g_j/a_j) ⊗ (w_j w_jᵀ − s²I)] = (s⁴/B) Σ_i r_i E[σ⁽³⁾(w_jᵀx_i + b_j)] x_i^⊗3,
    a symmetric tensor of rank ≤ B whose components are the inputs. Its empirical mean
    over the m hidden units, symmetrised, is decomposed by symmetric CP (tensorly's
    power iteration with deflation): the factors are ±x_i/‖x_i‖. The error falls as the
    empirical mean concentrates (their Thm. 1 needs m polynomial in d and B and the
    conditioning of the x_i). The third-order moment needs σ' with a non-zero second
    Hermite coefficient (tanh, sigmoid); ReLU's step σ' has none
    (E[1(z > 0)(z² − 1)] = 0) and would need the fourth-order tensor.

    Args:
        net: a two-layer network with a scalar output.
        observed: its shared gradient (flattened).
        batch_size: B, the CP rank (B ≤ d).
        weight_std: s, the standard deviation the first layer was drawn with
            (default: estimated from the weights).
        n_repeat: tensorly's power-iteration restarts per component.
        n_iteration: power iterations per restart.
        als_iterations: at most this many ALS sweeps refine the power iteration's
            factors (they stop earlier when the fit changes by less than 1e-9).
        seed: the power iteration's random starts.

    Returns:
        Unit directions of shape (B, d), each up to sign (compare with |cos|).

    References:
        Wang, Lee, Lei (2023), "Reconstructing training data from model gradient,
        provably", AISTATS (the moment tensor of the first layer's gradient and its
        decomposition); Anandkumar, Ge, Hsu, Kakade, Telgarsky (2014), JMLR (tensor power
        iteration).
    """
    # tensorly takes ~0.4 s to import and only this attack uses it
    from tensorly import cp_tensor, decomposition, set_backend, tensor

    if len(net.params) != 2 or net.classifier:
        raise DpauditError("the tensor method needs a two-layer network with a scalar output")
    check_integer("batch_size", batch_size, low=1, high=net.input_size)
    (w, _), (a, _) = net.params
    gw = _split(net, observed)[0][0]
    s2 = float(np.mean(w**2)) if weight_std is None else float(weight_std) ** 2
    u = gw / np.where(a[0] == 0, np.inf, a[0])[:, None]  # g_j / a_j
    m, d = w.shape
    # Σ_j u_j ⊗ w_j ⊗ w_j as (d × m)(m × d²) products (BLAS, where a three-operand einsum
    # loops), over chunks of hidden units so that memory stays at 512·d² numbers.
    t = np.zeros((d, d * d))
    for lo in range(0, m, 512):
        wc = w[lo : lo + 512]
        t += u[lo : lo + 512].T @ (wc[:, :, None] * wc[:, None, :]).reshape(-1, d * d)
    t = t.reshape(d, d, d) / m
    t -= s2 * np.einsum("a,bc->abc", u.mean(axis=0), np.eye(d))
    t = sum(t.transpose(p) for p in itertools.permutations(range(3))) / 6.0
    set_backend("numpy")
    # tensorly's power iteration draws its starts from numpy's global state: seed it for
    # this call only, and give the caller's state back.
    state = np.random.get_state()  # noqa: NPY002
    np.random.seed(seed % 2**32)  # noqa: NPY002
    try:
        _, factor = decomposition.symmetric_parafac_power_iteration(
            tensor(t), rank=batch_size, n_repeat=n_repeat, n_iteration=n_iteration
        )
    finally:
        np.random.set_state(state)  # noqa: NPY002
    # Deflated power iteration is exact for orthogonal components only; the inputs are not
    # orthogonal, so its factors start an ALS fit of the (non-orthogonal) CP model.
    cp = decomposition.parafac(
        tensor(t),
        rank=batch_size,
        init=cp_tensor.CPTensor((np.ones(batch_size), [np.asarray(factor)] * 3)),
        n_iter_max=als_iterations,
        tol=1e-9,
    )
    factors = cp.factors
    v = np.asarray(factors[0]).T
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-300)


def direction_errors(x_true: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """1 − |cos| between each input and its Hungarian-matched direction (scale and sign free)."""
    x = np.atleast_2d(x_true) / np.linalg.norm(np.atleast_2d(x_true), axis=1, keepdims=True)
    cos = np.abs(x @ np.atleast_2d(directions).T)
    rows, cols = optimize.linear_sum_assignment(-cos)
    out = np.empty(x.shape[0])
    out[rows] = 1.0 - cos[rows, cols]
    return out


def direction_nrmse(x_true: np.ndarray, directions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-example error of a scale- and sign-free reconstruction, after Hungarian matching.

    The tensor method returns unit directions ±x_i/‖x_i‖, so the error of direction u for
    input x is the normalised RMSE of the best multiple of u:
    min_t ‖t·u − x‖/‖x‖ = sin∠(u, x) = √(1 − cos²). It is the nRMSE an attack would reach
    if the scale were known, ≤ the nRMSE of any rescaling, and ≈ the angle for small errors
    (so its rate in m is that of the estimate, where 1 − |cos| ≈ θ²/2 would double it).

    Returns:
        (errors of shape (B,), the matched direction index of each true example).
    """
    x = np.atleast_2d(x_true)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-300)
    u = np.atleast_2d(directions)
    if not np.all(np.isfinite(u)):
        u = np.where(np.isfinite(u), u, 0.0)
    u = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-300)
    cost = np.sqrt(np.clip(1.0 - (x @ u.T) ** 2, 0.0, 1.0))
    rows, cols = optimize.linear_sum_assignment(cost)
    errors = np.empty(x.shape[0])
    errors[rows] = cost[rows, cols]
    match = np.empty(x.shape[0], dtype=np.int64)
    match[rows] = cols
    return errors, match


def best_multiple(x_true: np.ndarray, directions: np.ndarray) -> np.ndarray:
    """Each direction times the scale t = ⟨u, x⟩/‖u‖² nearest its input (rows paired)."""
    u = np.atleast_2d(directions)
    x = np.atleast_2d(x_true)
    t = np.sum(u * x, axis=1) / np.maximum(np.sum(u * u, axis=1), 1e-300)
    return u * t[:, None]


# ------------------------------------------------------------ the lecture's complexity


@dataclass(frozen=True)
class Complexity:
    """The reconstruction error rate the lecture's table states for one defence.

    Attributes:
        formula: the table's entry, e.g. ``"(B + σ)√(d/m)"``.
        value: that entry evaluated at the run's parameters (None: not covered).
        parameters: the values it was evaluated at (B, d, m and the defence's own).
    """

    formula: str
    value: float | None
    parameters: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        return {"formula": self.formula, "value": self.value, "parameters": self.parameters}


def lecture_complexity(
    defence: Defence,
    *,
    batch_size: int,
    input_size: int,
    width: int,
    gradient_norm: float | None = None,
) -> Complexity:
    """The lecture's upper rate on the tensor attack's error under ``defence`` (up to constants).

    The table (two-layer network of width m, inputs in d dimensions, batch of B; Wang,
    Lee, Lei 2023 for no defence, the defences as Liu, Wang, Chen, Lei 2024 reproduce it):
    none B√(d/m); k-local aggregation kB√(d/m); ℓ2 noise (B + σ)√(d/m); clipping B√(d/m);
    DP-SGD (B + σ·max{1, ‖g‖/s})√(d/m) with s the clipping norm; p-dropout B√(d/(mp));
    pruning: not covered by the theory. These are O(·) rates: the constants are unknown,
    so a measured error is compared with the rate's shape (its slopes), never its value.

    Two readings are ours and stated: the p of "p-dropout" keeps a unit with probability p
    (m·p units survive, and p → 1 gives back B√(d/m)), while dpaudit's ``dropout`` p is
    the DROP probability, so the column uses 1 − p; and ‖g‖ of DP-SGD is the median
    per-example gradient norm of the run's batches (``gradient_norm``).

    Args:
        defence: the defence of the row.
        batch_size: B.
        input_size: d.
        width: m, the hidden layer's width.
        gradient_norm: ‖g‖ (needed for DP-SGD only; None leaves its value out).

    References:
        Wang, Lee, Lei (2023), "Reconstructing training data from model gradient,
        provably", AISTATS, PMLR 206:6595–6612 (arXiv 2212.03714v3): the O(B√d/√m) error
        of the tensor method (the numbered theorem not checked here).
        Liu, Wang, Chen, Lei (2024), "Data reconstruction attacks and defenses: a
        systematic evaluation", arXiv 2402.09478 (the defences' rates; table number not
        checked here).
    """
    b = check_integer("batch_size", batch_size, low=1)
    d = check_integer("input_size", input_size, low=1)
    m = check_integer("width", width, low=1)
    root = math.sqrt(d / m)
    params: dict[str, float] = {"B": b, "d": d, "m": m}
    name = defence.name
    value: float | None = None
    if name in ("none", "clipping"):
        formula, value = "B√(d/m)", b * root
    elif name == "aggregation":
        formula, value = "kB√(d/m)", defence.k * b * root
        params["k"] = defence.k
    elif name == "noise":
        formula, value = "(B + σ)√(d/m)", (b + defence.sigma) * root
        params["σ"] = defence.sigma
    elif name == "dpsgd":
        formula = "(B + σ·max{1, ‖g‖/s})√(d/m)"
        s = defence.clipping_norm
        params.update({"σ": defence.sigma, "s": s})
        if gradient_norm is None:
            value = None
        else:
            params["‖g‖"] = float(gradient_norm)
            value = (b + defence.sigma * max(1.0, float(gradient_norm) / s)) * root
    elif name == "dropout":
        keep = 1.0 - defence.p
        formula, value = "B√(d/(mp))", b * math.sqrt(d / (m * keep))
        params["p (keep)"] = keep
    else:  # pruning
        formula, value = "not covered by the theory", None
        params["keep"] = defence.keep
    return Complexity(formula, value, params)


# --------------------------------------------------------------- the error's slopes


@dataclass(frozen=True)
class ScalingFit:
    """Least-squares slopes of log(median error) against log B and log m, with intervals.

    Attributes:
        slope_batch, slope_width: the fitted exponents of B and of m (None when the cells
            have one value of that variable).
        slope_batch_interval, slope_width_interval: percentile bootstrap intervals
            (batches resampled within each cell) at ``confidence_level``.
        cells: (B, m, median error, batches) of each cell used.
        theory: the exponents of the B√(d/m) rate, (1, −1/2).
    """

    slope_batch: float | None
    slope_width: float | None
    slope_batch_interval: ConfidenceInterval | None
    slope_width_interval: ConfidenceInterval | None
    cells: tuple[tuple[int, int, float, int], ...]
    confidence_level: float
    resamples: int
    theory: tuple[float, float] = (1.0, -0.5)

    def to_dict(self) -> dict[str, Any]:
        def interval(ci: ConfidenceInterval | None) -> list[float] | None:
            return None if ci is None else [ci.low, ci.high]

        return {
            "slope_batch": self.slope_batch,
            "slope_batch_interval": interval(self.slope_batch_interval),
            "slope_width": self.slope_width,
            "slope_width_interval": interval(self.slope_width_interval),
            "theory": {"batch": self.theory[0], "width": self.theory[1]},
            "cells": [
                {"batch_size": b, "width": m, "median_error": e, "batches": n}
                for b, m, e, n in self.cells
            ],
            "confidence_level": self.confidence_level,
            "resamples": self.resamples,
            "method": "least squares on log medians; percentile bootstrap over batches",
        }


def _log_slopes(
    b: np.ndarray, m: np.ndarray, log_medians: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """OLS of log(medians) on [1, log B, log m] (a variable with one value is left out).

    ``log_medians`` is (cells,) or (resamples, cells): the design is the same for every
    row, so its pseudo-inverse fits them all in one product.
    """
    columns = [np.ones(b.size)]
    use_b, use_m = np.unique(b).size > 1, np.unique(m).size > 1
    if use_b:
        columns.append(np.log(b))
    if use_m:
        columns.append(np.log(m))
    coef = np.linalg.pinv(np.column_stack(columns)) @ np.atleast_2d(log_medians).T
    return (coef[1] if use_b else None), (coef[-1] if use_m else None)


def fit_scaling(
    cells: Sequence[tuple[int, int, np.ndarray]],
    *,
    confidence_level: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> ScalingFit:
    """Slopes of log error against log B and log m from repeated batches per (B, m) cell.

    Each cell's statistic is the median over its batches of the batch's median
    per-example error (batches are independent; the examples of one batch are not). The
    slopes are the least-squares fit log med = a + α log B + β log m over the cells;
    the interval resamples each cell's batches with replacement ``resamples`` times and
    takes the percentiles of the refitted slopes. A cell whose median is 0 (exact
    recovery) has no logarithm and is left out.

    Args:
        cells: (B, m, per-batch median errors) for each cell.
        confidence_level: of the bootstrap intervals.
        resamples: bootstrap resamples.
        seed: the bootstrap's seed.
    """
    c = check_confidence_level(confidence_level)
    kept = [(int(b), int(m), np.asarray(e, float)) for b, m, e in cells]
    kept = [(b, m, e) for b, m, e in kept if e.size and np.median(e) > 0]
    if len(kept) < 2:
        raise DpauditError("fit_scaling needs at least two cells with a positive median error")
    bs = np.array([b for b, _, _ in kept], float)
    ms = np.array([m for _, m, _ in kept], float)
    medians = np.array([np.median(e) for _, _, e in kept])
    slope_b, slope_m = _log_slopes(bs, ms, np.log(medians))
    rng = np.random.default_rng(seed)
    # Each cell's batches resampled with replacement, all resamples at once.
    boot = np.column_stack(
        [np.median(e[rng.integers(0, e.size, (resamples, e.size))], axis=1) for _, _, e in kept]
    )
    boot = boot[np.all(boot > 0, axis=1)]
    boot_b, boot_m = _log_slopes(bs, ms, np.log(boot)) if boot.size else (None, None)
    q = [(1 - c) / 2 * 100, (1 + c) / 2 * 100]

    def ci(values: np.ndarray | None) -> ConfidenceInterval | None:
        if values is None or values.size == 0:
            return None
        lo, hi = np.percentile(values, q)
        return ConfidenceInterval(float(lo), float(hi))

    return ScalingFit(
        slope_batch=None if slope_b is None else float(slope_b[0]),
        slope_width=None if slope_m is None else float(slope_m[0]),
        slope_batch_interval=ci(boot_b),
        slope_width_interval=ci(boot_m),
        cells=tuple((b, m, float(np.median(e)), int(e.size)) for b, m, e in kept),
        confidence_level=c,
        resamples=resamples,
    )


# ----------------------------------------------------------------------------- metrics


def matched_errors(x_true: np.ndarray, x_hat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-example normalised RMSE ‖x̂ − x‖/‖x‖ after the best one-to-one matching.

    The order of a batch's reconstructions is arbitrary, so true example i is paired with
    reconstruction π(i) minimising Σ_i nRMSE(x_i, x̂_π(i)) (Hungarian method,
    ``scipy.optimize.linear_sum_assignment``); with more reconstructions than examples
    (aggregation) the extra ones stay unmatched.

    Returns:
        (errors of shape (B,), the matched reconstruction index of each true example).
    """
    x_true = np.atleast_2d(x_true)
    x_hat = np.atleast_2d(x_hat)
    if not np.all(np.isfinite(x_hat)):
        x_hat = np.where(np.isfinite(x_hat), x_hat, 0.0)
    norms = np.maximum(np.linalg.norm(x_true, axis=1), 1e-300)
    cost = np.linalg.norm(x_true[:, None, :] - x_hat[None, :, :], axis=2) / norms[:, None]
    rows, cols = optimize.linear_sum_assignment(cost)
    errors = np.empty(x_true.shape[0])
    errors[rows] = cost[rows, cols]
    match = np.empty(x_true.shape[0], dtype=np.int64)
    match[rows] = cols
    return errors, match


def psnr(x_true: np.ndarray, x_hat: np.ndarray, *, data_range: float = 1.0) -> np.ndarray:
    """Peak signal-to-noise ratio per example, 10·log10(range²/MSE) in dB (capped at 300)."""
    mse = np.mean((np.atleast_2d(x_true) - np.atleast_2d(x_hat)) ** 2, axis=1)
    with np.errstate(divide="ignore"):
        out = 10.0 * np.log10(data_range**2 / mse)
    return np.minimum(out, 300.0)


@dataclass(frozen=True)
class ErrorSummary:
    """Reconstruction errors over repeated batches, with intervals.

    The median of the per-example normalised RMSE and of the PSNR over ``batches``
    independent batches; the fraction of examples recovered within ``tolerance``.
    Intervals at ``confidence_level``: for B = 1 the examples are independent, so the
    median gets the distribution-free order-statistic interval (binomial, Hahn & Meeker
    1991, §5.2) and the fraction a Clopper–Pearson interval; for B > 1 the examples of a
    batch are not independent and both intervals come from a percentile bootstrap that
    resamples whole batches.
    """

    median_error: float
    median_error_interval: ConfidenceInterval
    median_psnr: float
    median_psnr_interval: ConfidenceInterval
    fraction_recovered: float
    fraction_recovered_interval: ConfidenceInterval
    tolerance: float
    batches: int
    examples: int
    confidence_level: float
    interval_method: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "median_nrmse": self.median_error,
            "median_nrmse_interval": list(self.median_error_interval),
            "median_psnr_db": self.median_psnr,
            "median_psnr_interval": list(self.median_psnr_interval),
            "fraction_recovered": self.fraction_recovered,
            "fraction_recovered_interval": list(self.fraction_recovered_interval),
            "tolerance": self.tolerance,
            "batches": self.batches,
            "examples": self.examples,
            "confidence_level": self.confidence_level,
            "interval_method": self.interval_method,
        }


def median_interval(values: np.ndarray, *, confidence_level: float) -> ConfidenceInterval:
    """Distribution-free interval for the median of i.i.d. values (order statistics).

    With X = #{values below the median} ~ Bin(n, ½), [x_(l), x_(n+1−l)] covers the
    median with probability ≥ 1 − 2·P[X < l]; l is the largest with P[X < l] ≤ (1 − c)/2.
    Too few values for that (n < log2(2/(1 − c))) give the full range (min, max), which
    then covers with probability 1 − 2^(1−n) only.
    """
    v = np.sort(np.asarray(values, dtype=float))
    n = v.size
    a = (1.0 - confidence_level) / 2.0
    # order = the largest l with P[X ≤ l − 1] ≤ a (cdf increases, so count the j ≤ n − 1
    # with cdf(j) ≤ a); at least 1, the full range.
    order = max(1, int(np.sum(sps.binom.cdf(np.arange(n), n, 0.5) <= a)))
    return ConfidenceInterval(float(v[order - 1]), float(v[n - order]))


def summarise_errors(
    errors: Sequence[np.ndarray],
    psnrs: Sequence[np.ndarray],
    *,
    tolerance: float,
    confidence_level: float = 0.95,
    seed: int = 0,
    resamples: int = 2000,
) -> ErrorSummary:
    """:class:`ErrorSummary` of per-batch arrays of per-example errors and PSNRs."""
    c = check_confidence_level(confidence_level)
    if not errors:
        raise DpauditError("summarise_errors needs at least one batch")
    flat = np.concatenate(errors)
    flat_psnr = np.concatenate(psnrs)
    recovered = int(np.sum(flat <= tolerance))
    batch_size = max(e.size for e in errors)
    if batch_size == 1:
        err_ci = median_interval(flat, confidence_level=c)
        psnr_ci = median_interval(flat_psnr, confidence_level=c)
        frac_ci = clopper_pearson(recovered, flat.size, confidence_level=c)
        method = "order-statistic / clopper-pearson (independent examples)"
    else:
        rng = np.random.default_rng(seed)
        picks = rng.integers(0, len(errors), (resamples, len(errors)))
        meds: list[float] = []
        pmeds: list[float] = []
        fracs: list[float] = []
        for row in picks:
            e = np.concatenate([errors[i] for i in row])
            p = np.concatenate([psnrs[i] for i in row])
            meds.append(float(np.median(e)))
            pmeds.append(float(np.median(p)))
            fracs.append(float(np.mean(e <= tolerance)))
        q = [(1 - c) / 2 * 100, (1 + c) / 2 * 100]

        def ci(x: list[float]) -> ConfidenceInterval:
            lo, hi = np.percentile(x, q)
            return ConfidenceInterval(float(lo), float(hi))

        err_ci, psnr_ci, frac_ci = ci(meds), ci(pmeds), ci(fracs)
        method = f"percentile bootstrap over batches ({resamples} resamples)"
    return ErrorSummary(
        median_error=float(np.median(flat)),
        median_error_interval=err_ci,
        median_psnr=float(np.median(flat_psnr)),
        median_psnr_interval=psnr_ci,
        fraction_recovered=recovered / flat.size,
        fraction_recovered_interval=frac_ci,
        tolerance=tolerance,
        batches=len(errors),
        examples=int(flat.size),
        confidence_level=c,
        interval_method=method,
    )


# ------------------------------------------------------------ the identification game


@dataclass(frozen=True)
class GameNetwork:
    """The game's two-layer ReLU network f(x) = Σ_j a_j relu(w_jᵀx + b_j) (numpy, closed form).

    Its per-example gradient is closed-form, so thousands of games run as one array
    computation: with r = f − y, ∂ℓ/∂a = r·h, ∂ℓ/∂b = r·a ⊙ 1[z > 0] and
    ∂ℓ/∂W = (∂ℓ/∂b) xᵀ (tested against autograd).
    """

    w: np.ndarray
    b: np.ndarray
    a: np.ndarray

    @classmethod
    def random(cls, *, inputs: int, hidden: int, seed: int) -> GameNetwork:
        rng = np.random.default_rng(seed)
        # Biases around +0.5 keep the units active on [0, 1] inputs (a dead unit's rows
        # carry no signal).
        return cls(
            w=rng.normal(0.0, 1.0 / math.sqrt(inputs), (hidden, inputs)),
            b=rng.normal(0.5, 0.1, hidden),
            a=rng.normal(0.0, 1.0, hidden),
        )

    def gradients(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Per-example flattened gradients [W (row-major), b, a], shape (n, m·d + 2m)."""
        z = x @ self.w.T + self.b
        h = np.maximum(z, 0.0)
        r = h @ self.a - y
        gb = r[:, None] * self.a * (z > 0)
        gw = gb[:, :, None] * x[:, None, :]
        return np.concatenate([gw.reshape(x.shape[0], -1), gb, r[:, None] * h], axis=1)

    def as_network(self) -> Network:
        """The same model as a :class:`Network` (for the torch attacks and tests)."""
        m, d = self.w.shape
        return Network(
            (d, m, 1),
            "relu",
            True,
            ((self.w, self.b), (self.a[None, :], np.zeros(1))),
        )


def play_identification(
    *,
    games: int,
    candidates: np.ndarray | None,
    k: int,
    hidden: int,
    noise_multiplier: float,
    clipping_norm: float,
    target_value: float,
    seed: int,
) -> dict[str, np.ndarray]:
    """Play ``games`` independent identification games against DP-SGD on one example.

    Each game: k candidates (all of ``candidates``, by default sklearn's digits, when
    ``k`` equals their number, else k distinct ones drawn afresh), the target drawn
    uniformly among them, its gradient on a two-layer ReLU network (one network, drawn
    from ``seed``, for these games: the server knows it) clipped to C, plus N(0, σ²C²)
    per coordinate: DP-SGD with a batch of one (further known batch members change
    nothing, the server would subtract their clipped gradients). The attacker
    reconstructs the input's ray from the first layer (:func:`analytic_inversion`'s
    rank-one fit: ±(x; 1) up to scale) and names the candidate whose (x_i; 1) is nearest
    that ray in angle.

    Returns:
        ``correct`` (1 = the target was named), and per game the attack's similarity
        |cos| to the target (``target_score``) and to one other candidate drawn uniformly
        (``other_score``): the scores of "is this candidate the target?".
    """
    pool = load_digits_images()[0] if candidates is None else np.asarray(candidates, float)
    n_pool, d = pool.shape
    k = check_integer("k", k, low=2, high=n_pool)
    rng = np.random.default_rng(seed)
    net = GameNetwork.random(inputs=d, hidden=hidden, seed=int(rng.integers(2**63 - 1)))
    aug = np.column_stack([pool, np.ones(n_pool)])
    aug /= np.linalg.norm(aug, axis=1, keepdims=True)
    if k == n_pool:
        chosen = np.broadcast_to(np.arange(n_pool), (games, k))
    else:
        chosen = np.argsort(rng.random((games, n_pool)), axis=1)[:, :k]
    target = rng.integers(0, k, games)
    other = (target + 1 + rng.integers(0, k - 1, games)) % k
    x = pool[chosen[np.arange(games), target]]
    g = net.gradients(x, np.full(games, float(target_value)))
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    g = g * np.minimum(1.0, clipping_norm / np.maximum(norms, 1e-300))
    g = g + rng.normal(0.0, noise_multiplier * clipping_norm, g.shape)
    m = hidden
    first = np.concatenate([g[:, : m * d].reshape(games, m, d), g[:, m * d : m * d + m, None]], 2)
    v = np.linalg.svd(first, full_matrices=False)[2][:, 0, :]  # (games, d + 1)
    if k == n_pool:
        similarity = np.abs(v @ aug.T)
    else:
        similarity = np.abs(np.einsum("gkd,gd->gk", aug[chosen], v))
    rows = np.arange(games)
    return {
        "correct": (np.argmax(similarity, axis=1) == target).astype(np.int8),
        "target_score": similarity[rows, target],
        "other_score": similarity[rows, other],
    }
