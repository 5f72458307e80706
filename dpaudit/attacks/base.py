"""What every membership attack receives, and the shared arithmetic on model outputs.

An attack is given what a realistic attacker has — the target model(s), the training
recipe, its own population data and the audited rows' features and labels — and returns
one score per audited row and target model, larger meaning "member" (H1). It never
receives the audited rows' membership: the :class:`AttackContext` has no field for it,
and the contract tests in ``tests/test_attacks.py`` check that shuffling the hidden
labels leaves every score unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from dpaudit.errors import DataError, check_integer

if TYPE_CHECKING:
    from dpaudit.models import ModelSpec, ModelStack
    from dpaudit.training import TrainingSpec

__all__ = [
    "AttackContext",
    "MembershipAttack",
    "check_int",
    "log_softmax",
    "logit_confidence",
    "true_class_loss",
]

Progress = Callable[[int, int], None]


@dataclass(frozen=True, repr=False)
class AttackContext:
    """The attacker's knowledge (threat model of Shokri et al. 2017 and Carlini et al. 2022).

    Attributes:
        target: the attacked model(s), a stack of T models (black-box: only their logits
            are read).
        model: the target's architecture (the attacker knows the recipe).
        training: the target's training recipe, reused for shadow / reference models.
        target_train_size: the (expected) number of rows the target trained on; shadow
            and reference models train on as many rows.
        population_X: ``(P, d)`` float32 rows from the target's distribution that are
            disjoint from the audited rows (the attacker's own data).
        population_y: ``(P,)`` int64 labels of those rows.
        num_classes: number of classes of the task.
        device: torch device for shadow / reference training.
        progress: optional callback ``(done, total)`` for long attacks.
        train_references: optional ``(X, y, membership, seed) -> models`` that trains the
            shadow / reference models instead of ``model`` and ``training`` (a brought
            target's references trained like it, :mod:`dpaudit.membership.brought`): ``membership``
            is ``(K, N)`` bool, and ``models`` has ``num_models`` and ``logits(X)``
            ``(K, m, C)`` as a :class:`~dpaudit.models.ModelStack` does.
    """

    target: ModelStack
    model: ModelSpec
    training: TrainingSpec
    target_train_size: int
    population_X: np.ndarray
    population_y: np.ndarray
    num_classes: int
    device: str = "cpu"
    progress: Progress | None = None
    train_references: Callable[[np.ndarray, np.ndarray, np.ndarray, int], Any] | None = None

    def __post_init__(self) -> None:
        check_int("target_train_size", self.target_train_size, minimum=1)
        X = np.asarray(self.population_X, dtype=np.float32)
        y = np.asarray(self.population_y, dtype=np.int64)
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise DataError(
                f"population_X must be (P, d) and population_y (P,). Got {X.shape} and {y.shape}."
            )
        object.__setattr__(self, "population_X", X)
        object.__setattr__(self, "population_y", y)

    def __repr__(self) -> str:
        return (
            f"AttackContext(targets={self.target.num_models}, model={self.model!r}, "
            f"target_train_size={self.target_train_size}, "
            f"population={self.population_X.shape[0]}, num_classes={self.num_classes})"
        )


class MembershipAttack(ABC):
    """A membership-inference attack: scores, never a verdict.

    Subclasses set ``name`` and implement :meth:`score`. Constructor arguments are the
    attack's options (keyword-only); :meth:`options` echoes them for provenance.
    """

    name: ClassVar[str]

    @abstractmethod
    def score(self, context: AttackContext, X: Any, y: Any, *, seed: int) -> np.ndarray:
        """Membership scores of the audited rows.

        Args:
            context: the attacker's knowledge (never the rows' membership).
            X: ``(m, d)`` features of the audited rows.
            y: ``(m,)`` labels of the audited rows.
            seed: seed of any randomness the attack uses (shadow / reference training).

        Returns:
            ``(T, m)`` float64 scores, one row per target model; larger means "member".
        """

    def options(self) -> dict[str, Any]:
        return {}

    def outcome(self) -> dict[str, Any]:
        """What the last :meth:`score` decided from data (e.g. ``"auto"``'s choice of
        attack); empty for attacks that decide nothing."""
        return {}

    def described_options(self) -> dict[str, Any]:
        """:meth:`options`, plus :meth:`outcome` under ``"selection"`` when there is one:
        what results.json stores of an attack that has scored."""
        outcome = self.outcome()
        return {**self.options(), **({"selection": outcome} if outcome else {})}

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts})"


# ------------------------------------------------------------------------ model outputs


def check_int(name: str, value: Any, *, minimum: int) -> int:
    """:func:`~dpaudit.errors.check_integer` with a lower end (the attacks' spelling)."""
    return check_integer(name, value, low=minimum)


def audited_arrays(X: Any, y: Any, num_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate the audited rows (features and labels) and return them as numpy arrays."""
    X = np.asarray(X, dtype=np.float32)
    y = np.asarray(y, dtype=np.int64)
    if X.ndim != 2 or X.shape[1] != num_features or y.shape != (X.shape[0],):
        raise DataError(
            f"The audited rows must be X of shape (m, {num_features}) and y of shape (m,). "
            f"Got {X.shape} and {y.shape}."
        )
    if X.shape[0] == 0:
        raise DataError("There are no audited rows to score.")
    return X, y


def stack_logits(models: ModelStack, X: np.ndarray) -> np.ndarray:
    """``(K, m, C)`` logits as float64 numpy (all later arithmetic is in float64)."""
    with torch.no_grad():
        return models.logits(X).detach().cpu().to(torch.float64).numpy()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities, stably (subtract the row maximum before exponentiating)."""
    top = logits.max(axis=-1, keepdims=True)
    shifted = logits - top
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def true_class_loss(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Cross-entropy −log p_y per example: ``(K, m, C)`` logits, ``(m,)`` labels → ``(K, m)``.

    Computed in float64 from the logits so that confident predictions keep distinct
    losses (float32 cross-entropy rounds every loss below ~6e-8 to the same few values).
    """
    logp = log_softmax(logits)
    idx = np.broadcast_to(y[None, :, None], (*logp.shape[:2], 1))
    return -np.take_along_axis(logp, idx, -1)[..., 0]


def logit_confidence(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """LiRA's logit-scaled confidence φ = log(p_y / (1 − p_y)), stably.

    With logits z, p_y = e^{z_y} / Σ_j e^{z_j} and 1 − p_y = Σ_{j≠y} e^{z_j} / Σ_j e^{z_j}, so
    φ = z_y − log Σ_{j≠y} e^{z_j}: no division, no log of a difference, finite whenever the
    logits are (the naive formula overflows to +inf once p_y rounds to 1).

    References:
        Carlini, Chien, Nasr, Song, Terzis, Tramèr (2022), "Membership Inference Attacks
        From First Principles", IEEE S&P (the logit scaling of the confidence that makes
        its in / out distributions approximately Gaussian).
    """
    idx = np.broadcast_to(y[None, :, None], (*logits.shape[:2], 1))
    z_y = np.take_along_axis(logits, idx, -1)[..., 0]
    others = logits.copy()
    np.put_along_axis(others, idx, -np.inf, -1)
    top = others.max(axis=-1)
    rest = top + np.log(np.exp(others - top[..., None]).sum(axis=-1))
    return z_y - rest
