"""Canaries: the records whose presence a canary audit tries to detect.

Input-space canaries are one extra row (x, y) added to the training set of the models
with the canary "in":

* ``mislabeled``: an in-distribution row with its label changed to another class, the
  textbook memorisation target;
* ``ood``: an out-of-distribution row, far from the data (a random direction at several
  times the largest row norm);
* ``clipbkd``: ClipBKD's row along the direction of LEAST variance of the data, so that no
  real example's gradient points the same way and the canary's gradient survives clipping
  almost unperturbed (Jagielski, Ullman, Oprea 2020, Alg. 2).

The white-box ``dirac`` canary is not a row but a gradient: a one-hot vector in parameter
space, added (at the clipping norm) to the clipped gradient sum of the models with the
canary in (Nasr et al. 2023, §3). Its coordinate is best one that no real example's
gradient touches: then the update's projection on it is exactly canary + noise and the
score is the likelihood-ratio statistic of the Gaussian test (see :func:`dirac_direction`).

Pure functions of arrays and a seed; no state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from dpaudit.errors import DataError, DpauditError, check_choice

__all__ = [
    "CANARY_KINDS",
    "INPUT_CANARY_KINDS",
    "InputCanary",
    "clipbkd_canary",
    "dirac_direction",
    "input_canary",
    "mislabeled_canary",
    "ood_canary",
    "with_zero_feature",
]

CanaryKind = Literal["mislabeled", "ood", "clipbkd", "dirac"]
CANARY_KINDS: tuple[str, ...] = ("mislabeled", "ood", "clipbkd", "dirac")
INPUT_CANARY_KINDS: tuple[str, ...] = ("mislabeled", "ood", "clipbkd")


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
) -> InputCanary:
    """The input-space canary of ``kind`` (one of :data:`INPUT_CANARY_KINDS`)."""
    check_choice("canary", kind, INPUT_CANARY_KINDS)
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
    if isinstance(num_parameters, bool) or not isinstance(num_parameters, int | np.integer):
        raise DpauditError(
            f"The 'num_parameters' parameter must be an integer. Got {num_parameters!r}."
        )
    if (
        isinstance(index, bool)
        or not isinstance(index, int | np.integer)
        or not 0 <= index < num_parameters
    ):
        raise DpauditError(
            f"The 'index' parameter must be in [0, {num_parameters - 1}]. Got {index!r} instead."
        )
    e = np.zeros(int(num_parameters))
    e[int(index)] = 1.0
    return e


def logistic_weight_index(*, num_features: int, cls: int, feature: int) -> int:
    """Flat index of a logistic regression's weight of class ``cls`` on ``feature``."""
    return int(cls) * int(num_features) + int(feature)
