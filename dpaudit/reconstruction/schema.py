"""The ``[reconstruction]`` table and its sub-tables: the network, the attack, the
defences, the identification game and the scaling grid.

Only pydantic is needed to check them; the attacks they describe are in
:mod:`dpaudit.reconstruction.methods`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dpaudit.sections import Positive, Table

#: How many examples sklearn's digits hold (the game's largest k).
DIGITS = 1797
#: Pixels of an 8×8 digit: the input dimension d.
INPUTS = 64
#: The widest hidden layer: the tensor method's error falls like √(d/m), so it needs m ≫ d.
WIDEST = 8192


class DefenceTable(Table):
    """One ``[[reconstruction.defences]]`` entry; only the named defence's keys matter."""

    name: Literal["none", "aggregation", "noise", "clipping", "dpsgd", "dropout", "pruning"]
    k: Annotated[int, Field(ge=1, le=64)] = 2
    sigma: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.0
    clipping_norm: Positive = 1.0
    p: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.5
    keep: Annotated[float, Field(gt=0.0, le=1.0)] = 0.1

    @property
    def batch_multiplier(self) -> int:
        return self.k if self.name == "aggregation" else 1


class GameTable(Table):
    """``[reconstruction.game]``: the k-candidate identification game against DP-SGD.

    ``candidates`` = k (default: all 1,797 digits); ``noise_multiplier`` is the σ that
    RUNS, ``claimed_noise_multiplier`` the σ reported to the accountant (default: the
    same; a smaller σ that runs than the one claimed is the planted bug of the tests).
    ``target_value`` is the regression target y of every game: far from the network's
    outputs, so that every gradient is clipped to exactly C.
    """

    candidates: Annotated[int, Field(ge=2, le=DIGITS)] = DIGITS
    trials: Annotated[int, Field(ge=1, le=10_000_000)] = 2000
    hidden: Annotated[int, Field(ge=1, le=256)] = 1
    noise_multiplier: Positive
    clipping_norm: Positive = 1.0
    claimed_noise_multiplier: Positive | None = None
    target_value: Annotated[float, Field(allow_inf_nan=False)] = 10.0

    @property
    def claimed(self) -> float:
        return (
            self.noise_multiplier
            if self.claimed_noise_multiplier is None
            else self.claimed_noise_multiplier
        )


class ScalingTable(Table):
    """``[reconstruction.scaling]``: the undefended attack on a grid of B and m.

    Every (B, m) of ``batch_sizes`` × ``widths`` gets ``batches`` independent batches, each
    on a freshly drawn network of width m; the summary fits the slopes of log(median
    error) against log B and log m (:func:`dpaudit.reconstruction.fit_scaling`), next to
    the B√(d/m) rate's 1 and −1/2.
    """

    batch_sizes: list[Annotated[int, Field(ge=1, le=64)]] = Field(min_length=1)
    widths: list[Annotated[int, Field(ge=1, le=WIDEST)]] = Field(min_length=1)
    batches: Annotated[int, Field(ge=2, le=10_000)] = 5

    @property
    def cells(self) -> list[tuple[int, int]]:
        return [(b, m) for b in self.batch_sizes for m in self.widths]


class ReconstructionSection(Table):
    """``[reconstruction]``: gradient inversion on sklearn's digits under defences.

    The network is ``(64, *hidden, outputs)``: ``outputs = 1`` regresses the digit's value
    with the squared loss, ``outputs = 10`` classifies with cross-entropy; ``hidden = [m]``
    is the two-layer network Σ_j a_j σ(w_jᵀx + b_j). ``attack``: ``optimisation`` (L-BFGS
    on the gradient distance), ``analytic`` (the B = 1 closed form), or ``tensor`` (the
    tensor method of Wang, Lee, Lei 2023 for that two-layer network: input directions from
    the first layer's moment tensor, scored scale- and sign-free).
    """

    hidden: list[Annotated[int, Field(ge=1, le=WIDEST)]] = Field(default_factory=lambda: [32])
    outputs: Literal[1, 10] = 1
    activation: Literal["relu", "tanh", "sigmoid"] = "relu"
    bias: bool = True
    batch_size: Annotated[int, Field(ge=1, le=64)] = 1
    batches: Annotated[int, Field(ge=2, le=10_000)] = 10
    attack: Literal["optimisation", "analytic", "tensor"] = "optimisation"
    distance: Literal["l2", "cosine"] = "l2"
    restarts: Annotated[int, Field(ge=1, le=100)] = 2
    steps: Annotated[int, Field(ge=1, le=100_000)] = 200
    tv: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.0
    labels: Literal["known", "inferred"] = "inferred"
    tolerance: Positive = 0.01
    defences: list[DefenceTable] = Field(
        default_factory=lambda: [DefenceTable(name="none")], min_length=1
    )
    game: GameTable | None = None
    scaling: ScalingTable | None = None

    @model_validator(mode="after")
    def _attack_fits(self) -> ReconstructionSection:
        if self.scaling is not None and len(self.hidden) != 1:
            raise ValueError(
                "[reconstruction.scaling] varies m of a two-layer network: hidden = [m]"
            )
        if self.attack == "tensor":
            if len(self.hidden) != 1 or self.outputs != 1:
                raise ValueError(
                    "attack 'tensor' needs a two-layer network with a scalar output: "
                    "hidden = [m], outputs = 1"
                )
            if self.activation == "relu":
                raise ValueError(
                    "attack 'tensor' needs activation 'tanh' or 'sigmoid': ReLU's third-order "
                    "moment tensor is 0"
                )
            sizes = [self.batch_size * d.batch_multiplier for d in self.defences]
            sizes += self.scaling.batch_sizes if self.scaling is not None else []
            if max(sizes) > INPUTS:
                raise ValueError(
                    f"attack 'tensor' finds at most d = {INPUTS} inputs: batch_size (times k "
                    f"for aggregation) must be ≤ {INPUTS}, got {max(sizes)}"
                )
        if self.attack == "analytic":
            if not self.bias:
                raise ValueError("attack 'analytic' needs bias = true (x = ∇_W / ∇_b)")
            if self.batch_size != 1 or any(d.name == "aggregation" for d in self.defences):
                raise ValueError(
                    "attack 'analytic' reconstructs one example: batch_size = 1, no aggregation"
                )
        return self
