"""The one scoring path: a target and its attacks → every attack's scores of the audited rows.

The Python API (:func:`dpaudit.membership.audit_membership`), the ``membership`` kind's
own-target units and its brought-target units all score through :func:`score_rows`:

- attacks are built from their names by :func:`resolve_attacks`, each option the attack
  has set from the audit's value (reference models, shadow models, RMIA's options);
- the attack at position i of the audit's list is seeded with ``attack_seed(seed, i)``;
- reference attacks (LiRA's variants, RMIA, "auto") that agree on the number of
  reference models share ONE reference set, trained with the seed of the first of them
  in the list, so appending an attack changes no earlier attack's scores (with
  ``["loss", "shadow", "lira"]`` LiRA's reference models are exactly those it trains
  alone);
- attacks see the audited rows' features and labels, never their membership.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dpaudit.attacks import (
    AttackContext,
    MembershipAttack,
    ReferenceAttack,
    get_attack,
    score_with_shared_references,
)
from dpaudit.attacks.base import stack_logits
from dpaudit.errors import DpauditError
from dpaudit.membership.summary import AttackScores, attack_seed

__all__ = ["Progress", "resolve_attacks", "score_rows", "stage", "target_accuracy"]

#: ``(stage, done, total)``: the stage is ``"target"`` or an attack's name.
Progress = Callable[[str, int, int], None]


def stage(progress: Progress | None, name: str) -> Callable[[int, int], None] | None:
    """``progress`` as the ``(done, total)`` callback of one stage."""
    if progress is None:
        return None
    return lambda done, total: progress(name, done, total)


def resolve_attacks(
    attacks: Sequence[str | MembershipAttack],
    *,
    num_reference_models: int,
    num_shadow_models: int,
    rmia_offline_a: float = 0.3,
    rmia_gamma: float = 1.0,
    rmia_population_samples: int = 1000,
) -> list[MembershipAttack]:
    """The attack objects of registry names (attack objects pass through as they are).

    Each option a named attack has is set from the arguments: ``num_reference_models``
    for every reference attack, ``num_shadow_models`` for the shadow attack, and RMIA's
    ``offline_a``, ``gamma`` and ``population_samples`` for RMIA and "auto".

    Raises:
        ConfigError: an unknown attack name.
        DpauditError: a name of an attack that is not a membership attack, or no attack.
    """
    given = {
        "num_reference_models": num_reference_models,
        "num_shadow_models": num_shadow_models,
        "offline_a": rmia_offline_a,
        "gamma": rmia_gamma,
        "population_samples": rmia_population_samples,
    }
    out: list[MembershipAttack] = []
    for a in attacks:
        if isinstance(a, MembershipAttack):
            out.append(a)
            continue
        attack = get_attack(a)
        if not isinstance(attack, MembershipAttack):
            raise DpauditError(f"The attack {a!r} is not a membership attack.")
        options = {k: v for k, v in given.items() if k in attack.options()}
        out.append(get_attack(a, **options))
    if not out:
        raise DpauditError("The 'attacks' parameter must name at least one attack.")
    return out


def score_rows(
    context: AttackContext,
    X: np.ndarray,
    y: np.ndarray,
    attacks: Sequence[MembershipAttack],
    *,
    seed: int,
    names: Sequence[str] | None = None,
    positions: Sequence[int] | None = None,
    progress: Progress | None = None,
) -> tuple[AttackScores, ...]:
    """Every attack's scores of the audited rows ``(X, y)``, in the order given.

    Args:
        context: the attacker's knowledge of the target (no membership in it).
        X, y: the audited rows' features and labels, as the attacks take them.
        attacks: the attacks.
        seed: the audit seed; the attack at position i gets ``attack_seed(seed, i)``.
        names: the attacks' names in the audit (default: each attack's ``name``).
        positions: each attack's position in the audit's list (default 0, 1, ...; a
            brought target's unit scores one attack of the list).
        progress: ``(stage, done, total)`` callback, the stage being the attack's name
            (the first attack's of a shared reference set).

    Raises:
        DpauditError: an attack returned non-finite scores.
    """
    names = [a.name for a in attacks] if names is None else list(names)
    positions = list(range(len(attacks))) if positions is None else list(positions)
    found: dict[int, AttackScores] = {}
    for group in _reference_groups(attacks):
        first = group[0]
        t0 = time.perf_counter()
        ctx = context
        if progress is not None:
            ctx = dataclasses.replace(context, progress=stage(progress, names[first]))
        group_seed = attack_seed(seed, positions[first])
        # every attack of a group of reference attacks is one (the filter keeps them all)
        references = [a for a in (attacks[i] for i in group) if isinstance(a, ReferenceAttack)]
        shared = bool(references)
        if shared:
            raw = score_with_shared_references(ctx, X, y, references, seed=group_seed)
        else:
            raw = [attacks[first].score(ctx, X, y, seed=group_seed)]
        seconds = time.perf_counter() - t0
        for i, scores in zip(group, raw, strict=True):
            found[i] = AttackScores(
                names[i],
                attacks[i].described_options(),
                _finite_row(scores, names[i]),
                seconds,
                names[first] if shared else None,
            )
    return tuple(found[i] for i in range(len(attacks)))


def _reference_groups(attacks: Sequence[MembershipAttack]) -> list[list[int]]:
    """The attacks' positions grouped by what they train: each attack that reads no
    reference set alone, the reference attacks that agree on the number of reference
    models (and on whether the population joins the pool) together; in the order of each
    group's first attack."""
    groups: list[list[int]] = []
    shared: dict[tuple[int, bool], list[int]] = {}
    for i, a in enumerate(attacks):
        if not isinstance(a, ReferenceAttack):
            groups.append([i])
            continue
        key = (a.num_reference_models, a.include_population)
        if key not in shared:
            shared[key] = []
            groups.append(shared[key])
        shared[key].append(i)
    return groups


def _finite_row(scores: Any, name: str) -> np.ndarray:
    """The target's ``(m,)`` float64 scores, or an error naming the attack."""
    row = np.asarray(scores, dtype=np.float64)[0]
    if not np.all(np.isfinite(row)):
        raise DpauditError(
            f"The {name!r} attack returned {int((~np.isfinite(row)).sum())} non-finite scores."
        )
    return row


def target_accuracy(
    target: Any,
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    held_out: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, float]:
    """The target's accuracy on its members, on the non-members among ``(X, y)`` and on
    ``held_out`` rows (known never to have trained it), and the majority-class rate of its
    members: the accuracy a constant guess of their most common label reaches on them.

    Returns:
        ``{"members", "non_members", "majority_class"}``, and ``"held_out"`` when
        ``held_out`` holds rows.
    """
    correct = stack_logits(target, X)[0].argmax(axis=-1) == y
    members = np.asarray(y)[membership]
    out = {
        "members": float(correct[membership].mean()),
        "non_members": float(correct[~membership].mean()),
        "majority_class": float(np.bincount(members).max() / members.size),
    }
    if held_out is not None and held_out[1].size:
        X_h, y_h = held_out
        out["held_out"] = float((stack_logits(target, X_h)[0].argmax(axis=-1) == y_h).mean())
    return out
