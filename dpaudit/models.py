"""Model architectures whose K copies live in one stacked set of parameters.

A :class:`ModelStack` holds the parameters of ``K`` models of one architecture with the
model index on dimension 0, so that evaluating or training all of them is one batched
matrix product per layer instead of ``K`` Python loops (docs/architecture.md, "The
training engine").

The architectures are the multinomial logistic regression and the multilayer perceptron
(MLP). Parameters are laid out exactly as ``torch.nn.Sequential(Linear, activation,
Linear, ...)`` lays them out (weights of shape ``(out, in)``, keys ``"0.weight"``,
``"0.bias"``, ``"2.weight"`` ...), so one model of a stack loads into a plain torch module
with :meth:`ModelStack.to_module`, and the flat parameter vector of a model is the same
whichever of the two representations it comes from.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from dpaudit.errors import DataError, DpauditError, check_choice, check_integer

__all__ = ["ModelSpec", "ModelStack", "derive_generator", "layer_shapes"]

_KINDS = ("logistic", "mlp")
_ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu")

# Purposes of the per-model random streams (see derive_generator). Each purpose has its own
# stream so that, e.g., switching the noise off (σ = 0) leaves the Poisson samples unchanged.
PURPOSE_INIT = 0
PURPOSE_SAMPLING = 1
PURPOSE_NOISE = 2
PURPOSE_CANARY = 3


@dataclass(frozen=True)
class ModelSpec:
    """An architecture: logistic regression or an MLP.

    Attributes:
        kind: ``"logistic"`` (one linear layer followed by a softmax) or ``"mlp"``.
        hidden: widths of the hidden layers of the MLP; ignored for ``"logistic"``.
        activation: the MLP's non-linearity, one of ``"relu"``, ``"tanh"``,
            ``"sigmoid"``, ``"gelu"`` (the exact, erf-based GELU as in ``torch.nn.GELU``).
    """

    kind: Literal["logistic", "mlp"] = "mlp"
    hidden: tuple[int, ...] = (64,)
    activation: Literal["relu", "tanh", "sigmoid", "gelu"] = "relu"

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, _KINDS)
        check_choice("activation", self.activation, _ACTIVATIONS)
        hidden = tuple(
            check_integer(f"hidden[{i}]", width, low=1) for i, width in enumerate(self.hidden)
        )
        object.__setattr__(self, "hidden", hidden)

    @property
    def hidden_widths(self) -> tuple[int, ...]:
        """The hidden widths that are actually used (none for logistic regression)."""
        return () if self.kind == "logistic" else self.hidden


def layer_shapes(spec: ModelSpec, num_features: int, num_classes: int) -> list[tuple[int, int]]:
    """Return the ``(out, in)`` shape of every linear layer of ``spec``, input to output."""
    widths = [num_features, *spec.hidden_widths, num_classes]
    return [(widths[i + 1], widths[i]) for i in range(len(widths) - 1)]


def derive_generator(
    seed: int, model_index: int, purpose: int, *, device: str | torch.device = "cpu"
) -> torch.Generator:
    """Return the torch generator of one model's random stream for one purpose.

    The stream depends only on ``(seed, model_index, purpose)`` through numpy's
    ``SeedSequence`` (whose spawn keys give statistically independent streams), so a
    model's initialisation, Poisson samples and noise do not depend on which other models
    are trained with it, in which chunk, or in which work unit.
    """
    sequence = np.random.SeedSequence(entropy=int(seed), spawn_key=(int(model_index), purpose))
    low, high = (int(v) for v in sequence.generate_state(2, dtype=np.uint32))
    generator = torch.Generator(device=device)
    generator.manual_seed(((high & 0x7FFFFFFF) << 32) | low)
    return generator


def _activation(name: str, z: torch.Tensor) -> torch.Tensor:
    if name == "relu":
        return torch.relu(z)
    if name == "tanh":
        return torch.tanh(z)
    if name == "sigmoid":
        return torch.sigmoid(z)
    return torch.nn.functional.gelu(z)


def _activation_module(name: str) -> nn.Module:
    return {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid, "gelu": nn.GELU}[name]()


class ModelStack:
    """The parameters of ``K`` models of one architecture, stacked on dimension 0.

    Layer ``l`` has a weight of shape ``(K, out_l, in_l)`` and a bias of shape
    ``(K, out_l)``. Inputs may be shared by all models (``X`` of shape ``(m, d)``) or
    given per model (``(K, m, d)``); numpy arrays are converted to the stack's dtype and
    device.

    Args:
        spec: the architecture.
        weights: one tensor of shape ``(K, out, in)`` per linear layer.
        biases: one tensor of shape ``(K, out)`` per linear layer.
    """

    def __init__(
        self, spec: ModelSpec, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor]
    ) -> None:
        weights = tuple(weights)
        biases = tuple(biases)
        if len(weights) != len(spec.hidden_widths) + 1 or len(biases) != len(weights):
            raise DpauditError(
                f"A {spec.kind!r} model with hidden={spec.hidden_widths} needs "
                f"{len(spec.hidden_widths) + 1} weights and biases. "
                f"Got {len(weights)} weights and {len(biases)} biases instead."
            )
        num_models = weights[0].shape[0]
        for w, b in zip(weights, biases, strict=True):
            if w.dim() != 3 or b.dim() != 2 or w.shape[0] != num_models or b.shape[0] != num_models:
                raise DpauditError("Stacked weights must be (K, out, in) and biases (K, out).")
            if b.shape[1] != w.shape[1]:
                raise DpauditError("A bias must have as many entries as its weight has rows.")
        for w_prev, w_next in itertools.pairwise(weights):
            if w_prev.shape[1] != w_next.shape[2]:
                raise DpauditError("Consecutive layers must have matching widths.")
        self.spec = spec
        self.weights = weights
        self.biases = biases

    # ----------------------------------------------------------------- construction
    @classmethod
    def init(
        cls,
        spec: ModelSpec,
        *,
        num_models: int,
        num_features: int,
        num_classes: int,
        seed: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        model_offset: int = 0,
    ) -> ModelStack:
        """Initialise ``num_models`` models as ``torch.nn.Linear`` does by default.

        Every weight and bias entry of a layer with ``in`` inputs is drawn from
        U(−1/√in, 1/√in) (PyTorch's default, Kaiming-uniform with a = √5), from the
        stream of ``(seed, model_offset + k, init)`` for model ``k``, so that a model's
        initial parameters do not depend on how many models are initialised with it.

        Args:
            spec: the architecture.
            num_models: K.
            num_features: d, the input width.
            num_classes: C, the number of classes (at least 2).
            seed: the base seed.
            dtype: the parameters' dtype.
            device: the parameters' device.
            model_offset: global index of the first model (for work units that train a
                slice of a larger set of models).

        Returns:
            The stack.
        """
        num_models = check_integer("num_models", num_models, low=1)
        num_features = check_integer("num_features", num_features, low=1)
        num_classes = check_integer("num_classes", num_classes, low=2)
        shapes = layer_shapes(spec, num_features, num_classes)
        weights = [torch.empty((num_models, o, i), dtype=dtype, device=device) for o, i in shapes]
        biases = [torch.empty((num_models, o), dtype=dtype, device=device) for o, _ in shapes]
        for k in range(num_models):
            gen = derive_generator(seed, model_offset + k, PURPOSE_INIT, device=device)
            for (out, inp), w, b in zip(shapes, weights, biases, strict=True):
                bound = 1.0 / math.sqrt(inp)
                w[k] = (
                    torch.rand((out, inp), generator=gen, dtype=dtype, device=device) * 2 - 1
                ) * (bound)
                b[k] = (
                    torch.rand((out,), generator=gen, dtype=dtype, device=device) * 2 - 1
                ) * bound
        return cls(spec, weights, biases)

    # ------------------------------------------------------------------- properties
    @property
    def num_models(self) -> int:
        """K, the number of stacked models."""
        return int(self.weights[0].shape[0])

    @property
    def num_features(self) -> int:
        """d, the input width."""
        return int(self.weights[0].shape[2])

    @property
    def num_classes(self) -> int:
        """C, the number of classes."""
        return int(self.weights[-1].shape[1])

    @property
    def dtype(self) -> torch.dtype:
        return self.weights[0].dtype

    @property
    def device(self) -> torch.device:
        return self.weights[0].device

    @property
    def num_parameters(self) -> int:
        """P, the number of parameters of one model."""
        return sum(
            w[0].numel() + b[0].numel() for w, b in zip(self.weights, self.biases, strict=True)
        )

    def parameters(self) -> list[torch.Tensor]:
        """The stacked tensors in ``torch.nn.Sequential`` order: weight, bias, weight, …"""
        out: list[torch.Tensor] = []
        for w, b in zip(self.weights, self.biases, strict=True):
            out += [w, b]
        return out

    def flat_parameters(self) -> torch.Tensor:
        """The parameters as one ``(K, P)`` tensor, in :meth:`parameters` order."""
        return torch.cat([p.reshape(self.num_models, -1) for p in self.parameters()], dim=1)

    @classmethod
    def from_flat(
        cls, spec: ModelSpec, flat: torch.Tensor, *, num_features: int, num_classes: int
    ) -> ModelStack:
        """Rebuild a stack from a ``(K, P)`` tensor laid out as :meth:`flat_parameters`."""
        shapes = layer_shapes(spec, num_features, num_classes)
        expected = sum(o * i + o for o, i in shapes)
        if flat.dim() != 2 or flat.shape[1] != expected:
            raise DpauditError(
                f"The 'flat' parameter must have shape (K, {expected}). "
                f"Got {tuple(flat.shape)} instead."
            )
        weights, biases, offset = [], [], 0
        num_models = flat.shape[0]
        for out, inp in shapes:
            weights.append(flat[:, offset : offset + out * inp].reshape(num_models, out, inp))
            offset += out * inp
            biases.append(flat[:, offset : offset + out].reshape(num_models, out))
            offset += out
        return cls(spec, weights, biases)

    # ------------------------------------------------------------------- evaluation
    def _as_input(self, X: Any) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(X) if not isinstance(X, torch.Tensor) else X)
        x = x.to(dtype=self.dtype, device=self.device)
        if x.dim() not in (2, 3) or x.shape[-1] != self.num_features:
            raise DataError(
                f"The 'X' parameter must have shape (m, {self.num_features}) or "
                f"({self.num_models}, m, {self.num_features}). Got {tuple(x.shape)} instead."
            )
        if x.dim() == 3 and x.shape[0] != self.num_models:
            raise DataError(
                f"A per-model 'X' must have {self.num_models} rows on dimension 0. "
                f"Got {x.shape[0]} instead."
            )
        return x

    def logits(self, X: Any) -> torch.Tensor:
        """Return the ``(K, m, C)`` logits of every model on ``X``."""
        a = self._as_input(X)
        last = len(self.weights) - 1
        for layer, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            a = torch.matmul(a, w.transpose(1, 2)) + b.unsqueeze(1)
            if layer < last:
                a = _activation(self.spec.activation, a)
        return a

    def probabilities(self, X: Any) -> torch.Tensor:
        """Return the ``(K, m, C)`` softmax probabilities of every model on ``X``."""
        return torch.softmax(self.logits(X), dim=-1)

    def _as_labels(self, y: Any, m: int) -> torch.Tensor:
        t = torch.as_tensor(np.asarray(y) if not isinstance(y, torch.Tensor) else y)
        if t.is_floating_point() or t.dtype == torch.bool:
            raise DataError(f"The 'y' parameter must hold integer labels. Got dtype {t.dtype}.")
        t = t.to(dtype=torch.int64, device=self.device)
        if t.dim() == 1:
            t = t.unsqueeze(0).expand(self.num_models, -1)
        if t.shape != (self.num_models, m):
            raise DataError(
                f"The 'y' parameter must have shape ({m},) or ({self.num_models}, {m}). "
                f"Got {tuple(t.shape)} instead."
            )
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.num_classes):
            raise DataError(
                f"The 'y' parameter must hold labels in [0, {self.num_classes - 1}]. "
                f"Got labels in [{int(t.min())}, {int(t.max())}] instead."
            )
        return t

    def losses(self, X: Any, y: Any) -> torch.Tensor:
        """Return the ``(K, m)`` per-example cross-entropy losses of every model."""
        logits = self.logits(X)
        labels = self._as_labels(y, logits.shape[1])
        log_norm = torch.logsumexp(logits, dim=-1)
        return log_norm - logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1)

    def predict(self, X: Any) -> torch.Tensor:
        """Return the ``(K, m)`` predicted classes."""
        return self.logits(X).argmax(dim=-1)

    def accuracy(self, X: Any, y: Any) -> torch.Tensor:
        """Return the ``(K,)`` accuracy of every model on ``(X, y)``."""
        predictions = self.predict(X)
        labels = self._as_labels(y, predictions.shape[1])
        return (predictions == labels).to(torch.float64).mean(dim=1)

    # ------------------------------------------------------------------- selection
    def select(self, idx: int | slice | Sequence[int] | torch.Tensor | np.ndarray) -> ModelStack:
        """Return the sub-stack of the models at ``idx`` (an int keeps a stack of one)."""
        if isinstance(idx, int | np.integer):
            idx = [int(idx)]
        if not isinstance(idx, slice):
            idx = torch.as_tensor(np.asarray(idx), dtype=torch.int64, device=self.device)
        return ModelStack(self.spec, [w[idx] for w in self.weights], [b[idx] for b in self.biases])

    @staticmethod
    def concatenate(stacks: Sequence[ModelStack]) -> ModelStack:
        """Stack several stacks of the same architecture into one."""
        if not stacks:
            raise DpauditError("The 'stacks' parameter must not be empty.")
        spec = stacks[0].spec
        layers = len(stacks[0].weights)
        return ModelStack(
            spec,
            [torch.cat([s.weights[i] for s in stacks]) for i in range(layers)],
            [torch.cat([s.biases[i] for s in stacks]) for i in range(layers)],
        )

    def _layer_keys(self) -> list[int]:
        # Linear layers sit at the even positions of Sequential(Linear, act, Linear, ...).
        return [2 * i for i in range(len(self.weights))]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Return the stacked parameters under ``torch.nn.Sequential``'s key names."""
        state: dict[str, torch.Tensor] = {}
        for key, w, b in zip(self._layer_keys(), self.weights, self.biases, strict=True):
            state[f"{key}.weight"] = w
            state[f"{key}.bias"] = b
        return state

    @classmethod
    def from_state_dict(cls, spec: ModelSpec, state: dict[str, torch.Tensor]) -> ModelStack:
        """Rebuild a stack from :meth:`state_dict` output."""
        layers = len(spec.hidden_widths) + 1
        try:
            weights = [torch.as_tensor(state[f"{2 * i}.weight"]) for i in range(layers)]
            biases = [torch.as_tensor(state[f"{2 * i}.bias"]) for i in range(layers)]
        except KeyError as exc:
            raise DpauditError(
                f"The 'state' parameter lacks the key {exc.args[0]!r} for a {spec.kind!r} model "
                f"with hidden={spec.hidden_widths}. Got keys {sorted(state)} instead."
            ) from None
        return cls(spec, weights, biases)

    def to_module(self, index: int) -> nn.Sequential:
        """Return model ``index`` as a ``torch.nn.Sequential`` with a copy of its weights."""
        layers: list[nn.Module] = []
        for i, w in enumerate(self.weights):
            layers.append(nn.Linear(w.shape[2], w.shape[1], dtype=self.dtype, device=self.device))
            if i < len(self.weights) - 1:
                layers.append(_activation_module(self.spec.activation))
        module = nn.Sequential(*layers)
        with torch.no_grad():
            module.load_state_dict({k: v[index].clone() for k, v in self.state_dict().items()})
        return module

    def __repr__(self) -> str:
        arch = "logistic" if self.spec.kind == "logistic" else f"mlp{self.spec.hidden_widths}"
        act = "" if self.spec.kind == "logistic" else f", activation={self.spec.activation!r}"
        return (
            f"ModelStack(num_models={self.num_models}, kind={arch!r}{act}, "
            f"num_features={self.num_features}, num_classes={self.num_classes}, "
            f"dtype={self.dtype}, device={self.device})"
        )
