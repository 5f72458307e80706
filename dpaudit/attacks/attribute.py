"""Attribute inference through the model's loss (Yeom et al. 2018)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from dpaudit.attacks.base import audited_arrays, stack_logits, true_class_loss
from dpaudit.errors import DataError

if TYPE_CHECKING:
    from dpaudit.data import SensitiveColumn
    from dpaudit.models import ModelStack

__all__ = ["AttributeAttack", "sensitive_prior"]


def sensitive_prior(codes: np.ndarray, num_values: int, *, pseudocount: float = 1.0) -> np.ndarray:
    """The attacker's prior over a sensitive column's values, from its own population.

    Add-``pseudocount`` smoothing (Laplace's rule) keeps every candidate's log-prior finite
    when a value is absent from the population.
    """
    codes = np.asarray(codes, dtype=np.int64)
    counts = np.bincount(codes, minlength=num_values).astype(np.float64) + pseudocount
    return counts / counts.sum()


class AttributeAttack:
    """Guess a record's hidden sensitive value from the model's loss and the value's prior.

    For each candidate value v, the attacker fills v into the record's sensitive columns and
    reads the target's loss ℓ_v on the record's (known) label. The score of v is
    log π(v) − ℓ_v, the log of π(v) · p_model(y | x with v) — the posterior of v when the
    model's predictive probability is taken as the likelihood; the guess is the
    highest-scoring v. The record's true sensitive value is overwritten before the model
    is queried, so the attack never reads it.

    References:
        Yeom, Giacomelli, Fredrikson, Jha (2018), "Privacy Risk in Machine Learning:
        Analyzing the Connection to Overfitting", IEEE CSF, attribute-inference section (the
        adversary weighs each candidate by its prior and by how well the model fits the
        record with it filled in; attribute advantage = accuracy on members − accuracy on
        non-members).
    """

    name: ClassVar[str] = "attribute"

    def options(self) -> dict[str, Any]:
        return {}

    def score(
        self,
        target: ModelStack,
        X: Any,
        y: Any,
        *,
        sensitive: SensitiveColumn,
        prior: np.ndarray,
    ) -> np.ndarray:
        """Candidate scores ``(T, m, V)`` for T target models, m records, V candidates.

        Args:
            target: the attacked model(s).
            X: ``(m, d)`` records; their sensitive columns are ignored (overwritten).
            y: ``(m,)`` labels.
            sensitive: the column, with its candidate encodings in the model's input space.
            prior: ``(V,)`` the attacker's prior over candidates (positive, sums to 1).
        """
        X, y = audited_arrays(X, y, target.num_features)
        prior = np.asarray(prior, dtype=np.float64)
        V = sensitive.num_values
        if prior.shape != (V,) or not np.all(prior > 0) or not np.isclose(prior.sum(), 1.0):
            raise DataError(
                f"The 'prior' must be {V} positive probabilities summing to 1. Got {prior!r}."
            )
        cols = list(sensitive.columns)
        m = X.shape[0]
        filled = np.repeat(X[None], V, axis=0)  # (V, m, d)
        filled[:, :, cols] = sensitive.encodings[:, None, :]
        logits = stack_logits(target, filled.reshape(V * m, -1))  # (T, V·m, C)
        losses = true_class_loss(logits, np.tile(y, V)).reshape(-1, V, m)
        return np.log(prior)[None, None, :] - losses.transpose(0, 2, 1)

    def guess(self, scores: np.ndarray) -> np.ndarray:
        """The highest-scoring candidate per record (ties to the lower index)."""
        return np.argmax(scores, axis=-1)

    def __repr__(self) -> str:
        return "AttributeAttack()"
