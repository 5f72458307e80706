"""The work units of targets dpaudit trains: the fair-coin target, attacked or guessed on.

Both kinds train the same target from the shared tables (``[data]``, ``[model]``,
``[training]``, ``[target] variants``) and the audit seed, deterministically, so each
kind's units can train it on their own and still attack the very same model.

The variants: ``plain``; ``dp`` (DP-SGD, held against the accountant's ε of its record);
``input-perturbation`` (each record randomised once by local randomisers, then plain
training; held against the claim of :mod:`dpaudit.membership.input_perturbation`, which
states the guarantee and why the membership game is then played as replace-one).

A ``membership`` unit stores the coins, every attack's scores (through the one scoring
path, :func:`dpaudit.membership.scoring.score_rows`) and how the target was trained
(:mod:`dpaudit.membership.stored`): nothing that depends on the confidence level or δ,
so changing those re-measures the same trained models. An ``attribute`` unit stores the
attack's raw guesses the same way.
"""

from __future__ import annotations

import json

import numpy as np

from dpaudit.data import Dataset, load_dataset
from dpaudit.membership.input_perturbation import InputPerturbation
from dpaudit.membership.pipeline import (
    AuditedTarget,
    fair_coins,
    guess_attributes,
    prepare_target,
)
from dpaudit.membership.schema import INPUT_PERTURBATION, OwnSpec, TargetSpec
from dpaudit.membership.scoring import resolve_attacks, score_rows, target_accuracy
from dpaudit.membership.stored import store_target
from dpaudit.recipes import model_spec, training_spec

__all__ = ["attribute_unit", "load", "own_unit", "train"]


def load(spec: TargetSpec) -> Dataset:
    """The ``[data]`` table's dataset (encoded, not yet standardised)."""
    d = spec.data
    return load_dataset(
        d.dataset,
        label=d.label,
        sensitive=d.sensitive,
        features=d.features,
        base_dir=spec.base_dir,
    )


def train(spec: TargetSpec, variant: str, dataset: Dataset) -> AuditedTarget:
    """Train the ``variant`` target (DP noise sized for the fair-coin winners)."""
    members = int(fair_coins(spec.data.audited_size, seed=spec.seed).sum())
    randomisers = None
    if variant == INPUT_PERTURBATION:
        randomisers = InputPerturbation.from_section(spec.input_perturbation)
        # every slot trains (members and substitutes): q = batch_size / audited_size
        members = spec.data.audited_size
    return prepare_target(
        dataset,
        model=model_spec(spec.model),
        training=training_spec(spec.training, members=members, dp=variant == "dp"),
        audited_size=spec.data.audited_size,
        population_size=spec.data.population_size,
        seed=spec.seed,
        device=spec.device,
        input_perturbation=randomisers,
    )


def _variant(unit: str) -> str:
    # unit names are "<kind>-<position>-<variant>" (target-0-plain, attribute-1-dp, ...)
    return unit.split("-", 2)[2]


def _held_out(target: AuditedTarget) -> tuple[np.ndarray, np.ndarray] | None:
    """The population rows, which never trained the target; ``None`` for the
    input-perturbation target, which trains on population rows standing in for non-members."""
    if target.perturbation is not None:
        return None
    rows = target.population
    return target.dataset.X[rows], target.dataset.y[rows]


def own_unit(spec: OwnSpec, unit: str) -> dict[str, np.ndarray]:
    """Train one target variant and score its audited rows with every attack."""
    dataset = load(spec)
    target = train(spec, _variant(unit), dataset)
    attacks = resolve_attacks(
        spec.attacks,
        num_reference_models=spec.reference_models,
        num_shadow_models=spec.shadow_models,
        rmia_offline_a=spec.rmia_offline_a,
        rmia_gamma=spec.rmia_gamma,
        rmia_population_samples=spec.rmia_population_samples,
    )
    X, y, coins = target.audited_X, target.audited_y, target.membership
    held_out = _held_out(target)
    scored = score_rows(
        target.context(device=spec.device), X, y, attacks, seed=spec.seed, names=spec.attacks
    )
    info = {
        "attacks": [
            {"attack": s.attack, "options": s.options, "seconds": s.seconds}
            | ({"reference_set": s.reference_set} if s.reference_set else {})
            for s in scored
        ],
        "accuracy": target_accuracy(target.models, X, y, coins, held_out=held_out),
        "data_hash": dataset.data_hash,
    }
    return {
        "membership": coins,
        "scores": np.stack([s.scores for s in scored]),
        "info": np.array(json.dumps(info)),
        **store_target(target, spec),
    }


def attribute_unit(spec: TargetSpec, unit: str) -> dict[str, np.ndarray]:
    """Train one target variant and guess the sensitive attribute of its audited rows."""
    dataset = load(spec)
    target = train(spec, _variant(unit), dataset)
    g = guess_attributes(target)
    info = {"dataset": g.dataset, "sensitive": g.sensitive, "values": list(g.values)}
    return {
        "guesses": g.guesses,
        "truth": g.truth,
        "membership": g.membership,
        "prior": g.prior,
        "info": np.array(json.dumps(info, default=str)),
        "data_hash": np.array(dataset.data_hash),
        **store_target(target, spec),
    }
