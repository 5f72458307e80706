"""One reference set for every reference-model attack (LiRA's variants and RMIA).

Reference models are the expensive part of LiRA and RMIA: K models trained with the
target's recipe. :func:`train_reference_logits` trains them ONCE and keeps only their logits
(and the target's) on the audited rows and on a sample of the attacker's population;
every :class:`ReferenceAttack` then scores from those logits
(:meth:`ReferenceAttack.score_from`), so the four LiRA variants and both RMIA variants
cost one training run (:func:`score_with_shared_references`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.attacks.base import AttackContext, MembershipAttack, audited_arrays, stack_logits
from dpaudit.errors import DataError, DpauditError

__all__ = [
    "ReferenceAttack",
    "ReferenceLogits",
    "balanced_halves",
    "score_with_shared_references",
    "train_models",
    "train_reference_logits",
]

# Salts of the seed sequences: the reference models' split and training (LiRA's, kept so
# that LiRA's scores are those of earlier releases) and the population sample z.
_REFERENCE_SALT = 0x11A
_POPULATION_SALT = 0x2B1A


def balanced_halves(num_models: int, num_rows: int, rng: np.random.Generator) -> np.ndarray:
    """A ``(K, N)`` bool mask: each row in exactly ⌊K/2⌋ models, chosen at random.

    Every reference model then trains on about half of the pool, and every audited row has
    the same number of "in" and "out" models to fit its two Gaussians on (the scheme of
    Carlini et al. 2022: each example is in half of the shadow models).
    """
    ranks = np.argsort(rng.random((num_models, num_rows)), axis=0)
    return ranks < num_models // 2


def train_models(
    context: AttackContext,
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
) -> Any:
    """Train shadow / reference models with the target's recipe (one ``train_many`` call),
    or with ``context.train_references`` when the context has one."""
    if context.train_references is not None:
        return context.train_references(X, y, membership, seed)
    from dpaudit.training import train_many

    result = train_many(
        X,
        y,
        membership,
        model=context.model,
        training=context.training,
        seed=seed,
        num_classes=context.num_classes,
        device=context.device,
        progress=context.progress,
    )
    return result.models


@dataclass(frozen=True, repr=False)
class ReferenceLogits:
    """Logits of the target and of K reference models: all a reference attack reads.

    Attributes:
        target_x: ``(T, m, C)`` the target model(s) on the audited rows.
        reference_x: ``(K, m, C)`` the reference models on the audited rows.
        reference_in: ``(K, m)`` bool, whether reference model k trained on audited row i.
        y: ``(m,)`` labels of the audited rows.
        target_z: ``(T, n_z, C)`` the target on the population sample z (``n_z`` may be 0).
        reference_z: ``(K, n_z, C)`` the reference models on z.
        z_in: ``(K, n_z)`` bool, whether reference model k trained on z (only when the
            population joined the reference pool).
        y_z: ``(n_z,)`` labels of z.
    """

    target_x: np.ndarray
    reference_x: np.ndarray
    reference_in: np.ndarray
    y: np.ndarray
    target_z: np.ndarray
    reference_z: np.ndarray
    z_in: np.ndarray
    y_z: np.ndarray

    @property
    def num_reference_models(self) -> int:
        return int(self.reference_x.shape[0])

    def __repr__(self) -> str:
        return (
            f"ReferenceLogits(targets={self.target_x.shape[0]}, "
            f"reference_models={self.num_reference_models}, audited={self.y.size}, "
            f"population_samples={self.y_z.size})"
        )


def train_reference_logits(
    context: AttackContext,
    X: Any,
    y: Any,
    *,
    num_reference_models: int,
    seed: int,
    include_population: bool = False,
    population_samples: int = 0,
) -> ReferenceLogits:
    """Train K reference models once and return their logits (and the target's).

    The reference pool is the audited rows (and, with ``include_population``, the
    attacker's population rows); each pool row is in exactly half of the models
    (:func:`balanced_halves`). ``population_samples`` rows z are drawn from the population
    (RMIA's reference population; 0 when no attack needs them) with their own random
    stream, so asking for z leaves the reference models unchanged.
    """
    X, y = audited_arrays(X, y, context.target.num_features)
    m = X.shape[0]
    P = context.population_X.shape[0]
    pool_X, pool_y = X, y
    if include_population:
        pool_X = np.concatenate([X, context.population_X])
        pool_y = np.concatenate([y, context.population_y])
    rng = np.random.default_rng(np.random.SeedSequence([seed, _REFERENCE_SALT]))
    keep = balanced_halves(num_reference_models, pool_X.shape[0], rng)
    references = train_models(context, pool_X, pool_y, keep, seed=int(rng.integers(2**63)))
    n_z = min(int(population_samples), P)
    if population_samples > 0 and n_z == 0:
        raise DataError("RMIA needs population rows (its reference samples z); there are none.")
    z_rng = np.random.default_rng(np.random.SeedSequence([seed, _POPULATION_SALT]))
    z = np.sort(z_rng.permutation(P)[:n_z])
    X_z, y_z = context.population_X[z], context.population_y[z]
    z_in = keep[:, m + z] if include_population else np.zeros((keep.shape[0], n_z), dtype=bool)
    target_x = stack_logits(context.target, X)
    reference_x = stack_logits(references, X)
    if n_z:
        target_z, reference_z = stack_logits(context.target, X_z), stack_logits(references, X_z)
    else:
        target_z = np.zeros((target_x.shape[0], 0, target_x.shape[-1]))
        reference_z = np.zeros((reference_x.shape[0], 0, reference_x.shape[-1]))
    return ReferenceLogits(
        target_x=target_x,
        reference_x=reference_x,
        reference_in=keep[:, :m],
        y=y,
        target_z=target_z,
        reference_z=reference_z,
        z_in=z_in,
        y_z=y_z,
    )


class ReferenceAttack(MembershipAttack):
    """A membership attack that scores from reference models' logits.

    Subclasses implement :meth:`score_from`; :meth:`score` trains the reference set and
    calls it. Several reference attacks with the same ``num_reference_models`` and
    ``include_population`` share one set (:func:`score_with_shared_references`).
    """

    num_reference_models: int
    include_population: bool

    def needed_population_samples(self) -> int:
        """Population rows z this attack reads (RMIA); 0 for attacks that need none."""
        return 0

    def score_from(self, refs: ReferenceLogits) -> np.ndarray:
        """``(T, m)`` scores from a trained reference set."""
        raise NotImplementedError

    def score(self, context: AttackContext, X: Any, y: Any, *, seed: int) -> np.ndarray:
        (scores,) = score_with_shared_references(context, X, y, [self], seed=seed)
        return scores


def score_with_shared_references(
    context: AttackContext,
    X: Any,
    y: Any,
    attacks: Sequence[ReferenceAttack],
    *,
    seed: int,
) -> list[np.ndarray]:
    """Score every attack in ``attacks`` from ONE reference set trained with ``seed``.

    Returns:
        One ``(T, m)`` float64 array per attack, in order.

    Raises:
        DpauditError: the attacks disagree on ``num_reference_models`` or
            ``include_population`` (they could not share one set).
    """
    if not attacks:
        return []
    shapes = {(a.num_reference_models, a.include_population) for a in attacks}
    if len(shapes) != 1:
        raise DpauditError(
            "Attacks that share one reference set must agree on num_reference_models and "
            f"include_population; got {sorted(shapes)}."
        )
    ((k, include_population),) = shapes
    refs = train_reference_logits(
        context,
        X,
        y,
        num_reference_models=k,
        seed=seed,
        include_population=include_population,
        population_samples=max(a.needed_population_samples() for a in attacks),
    )
    return [np.asarray(a.score_from(refs), dtype=np.float64) for a in attacks]
