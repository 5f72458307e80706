"""What the ``membership`` and ``attribute`` kinds share: the fair-coin target dpaudit trains.

Both kinds train the same target from the shared tables (``[data]``, ``[model]``,
``[training]``, ``[target] variants``) and the audit seed, deterministically, so each
kind's units can train it on their own and still attack the very same model.

The variants: ``plain``; ``dp`` (DP-SGD, held against the accountant's ε of its record);
``input-perturbation`` (each record randomised once by local randomisers, then plain
training; held against the claim of :mod:`dpaudit.membership.input_perturbation`, which states the
guarantee and why the membership game is then played as replace-one).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit.kinds.base import dataset_digest
from dpaudit.records import DPSGDRecord
from dpaudit.sections import (
    DataSection,
    InputPerturbationSection,
    ModelSection,
    Table,
    TargetSection,
    TrainingSection,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dpaudit.data import Dataset
    from dpaudit.membership.input_perturbation import InputPerturbation
    from dpaudit.membership.pipeline import AuditedTarget
    from dpaudit.upper_bounds import UpperBound

INPUT_PERTURBATION = "input-perturbation"


class TargetSpec(Table):
    """The recipe of dpaudit's own target (picklable; its JSON names the stored units)."""

    data: DataSection
    model: ModelSection
    training: TrainingSection
    seed: int
    base_dir: str
    device: str = "cpu"
    input_perturbation: InputPerturbationSection | None = None


def variants(target: TargetSection, training: TrainingSection) -> list[str]:
    """The targets to train: ``[target] variants``, else ``dp`` when DP is configured."""
    if target.variants is not None:
        return list(dict.fromkeys(target.variants))
    return ["dp"] if training.dp is not None else ["plain"]


def check_variants(target: TargetSection, training: TrainingSection) -> None:
    """``ValueError`` when a listed variant cannot be trained."""
    if "dp" in variants(target, training) and training.dp is None:
        raise ValueError("[target] variants lists 'dp' but [training.dp] is missing")
    problem = training.target_mu_problem(full_batch=training.full_batch)
    if problem is not None:
        raise ValueError(f"[training] {problem}")


def load(spec: TargetSpec) -> Dataset:
    from dpaudit.data import load_dataset

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
    from dpaudit.membership.pipeline import fair_coins, prepare_target
    from dpaudit.recipes import model_spec, training_spec

    members = int(fair_coins(spec.data.audited_size, seed=spec.seed).sum())
    randomisers = None
    if variant == INPUT_PERTURBATION:
        randomisers = input_perturbation(spec)
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


def input_perturbation(spec: TargetSpec) -> InputPerturbation:
    """The randomisers of ``[target.input_perturbation]`` (``ValueError`` without it)."""
    from dpaudit.membership.input_perturbation import InputPerturbation

    s = spec.input_perturbation
    if s is None:
        raise ValueError("the input-perturbation variant needs [target.input_perturbation]")
    return InputPerturbation(
        features=s.features,
        labels=s.labels,
        epsilon=s.epsilon,
        label_share=s.label_share,
        bound=s.bound,
        delta=0.0 if s.delta is None else s.delta,
    )


def store_target(target: AuditedTarget, spec: TargetSpec) -> dict[str, np.ndarray]:
    """What a unit stores about how its target was trained: the DP-SGD record's arrays,
    or the input-perturbation claim (``claim_epsilon``, ``claim_delta``, stated) and the
    randomisers' parameters as they ran (``perturbation``, JSON)."""
    import json

    out = store_record(target.record)
    if target.perturbation is not None:
        out["perturbation"] = np.array(json.dumps(target.perturbation))
        claim = input_perturbation(spec).claim()
        if claim is not None:
            assert claim.epsilon is not None  # an input-perturbation claim is an ε claim
            out["claim_epsilon"] = np.array([claim.epsilon])
            out["claim_delta"] = np.array([claim.delta])
    return out


def has_upper(part: Mapping[str, np.ndarray], delta: float) -> bool:
    """Whether a stored target is held against an upper bound at the audit's ``delta``
    (a record, or a claim whose δ is at most ``delta``: see :func:`stored_upper`)."""
    return "noise_multiplier" in part or _claim_holds_at(part, delta)


def _claim_holds_at(part: Mapping[str, np.ndarray], delta: float) -> bool:
    # (ε, δ_c)-DP implies (ε, δ)-DP for δ ≥ δ_c only; the lower bounds are measured at the
    # audit's δ, so a claim with a larger δ (a Gaussian randomiser's) is not held against
    # them: it would say nothing about ε at the smaller δ.
    return "claim_epsilon" in part and float(part["claim_delta"][0]) <= delta


def stored_upper(part: Mapping[str, np.ndarray], delta: float) -> UpperBound | None:
    """The upper bound a stored target's lower bounds are held against: the accountant's
    ε of its DP-SGD record, or the input-perturbation claim when its δ is at most
    ``delta``; ``None`` otherwise."""
    from dpaudit.mechanisms.noise import Claim
    from dpaudit.upper_bounds import from_claim, from_records

    record = stored_record(part)
    if record is not None:
        return from_records([record], delta, with_mu=False)
    if _claim_holds_at(part, delta):
        claim = Claim(epsilon=float(part["claim_epsilon"][0]), delta=float(part["claim_delta"][0]))
        return from_claim(claim, delta, source="input perturbation claim")
    return None


def stored_details(part: Mapping[str, np.ndarray], delta: float) -> dict[str, Any]:
    """The test details naming how the target was trained: ``record`` (DP-SGD) or
    ``input_perturbation`` (the randomisers as they ran, and why a claim is not held
    against the bounds measured at the audit's ``delta`` when it is not)."""
    import json

    record = stored_record(part)
    if record is not None:
        return {"record": record.to_dict()}
    if "perturbation" in part:
        ran = json.loads(str(part["perturbation"]))
        if "claim_epsilon" in part and not _claim_holds_at(part, delta):
            ran["claim_note"] = (
                f"the claim's delta {float(part['claim_delta'][0]):g} exceeds the audit's "
                f"delta {delta:g}: the bounds measured at the audit's delta are not held "
                "against it"
            )
        return {"input_perturbation": ran}
    return {}


def upper_source(upper: UpperBound) -> str:
    """How a comparison names its upper bound."""
    return (
        "accountant ε (PLD)" if upper.source == "accountant" else "claimed ε (input perturbation)"
    )


def store_record(record: DPSGDRecord | None) -> dict[str, np.ndarray]:
    """The target's record as arrays (none for plain training)."""

    if record is None:
        return {}
    arrays = DPSGDRecord.to_arrays([record])
    arrays["dataset_size"] = np.array([-1 if record.dataset_size is None else record.dataset_size])
    return arrays


def stored_record(part: Mapping[str, np.ndarray]) -> DPSGDRecord | None:
    """The record :func:`store_record` stored, or ``None``."""
    from dataclasses import replace

    if "noise_multiplier" not in part:
        return None
    (record,) = DPSGDRecord.from_arrays([part])
    size = int(part["dataset_size"][0])
    return replace(record, dataset_size=None if size < 0 else size)


def key_data(spec: TargetSpec, **extra: Any) -> dict[str, Any]:
    """What names the units: the recipe and the data file's bytes, not the device or folder
    (``input_perturbation`` only when given, so earlier audits keep their unit keys)."""
    exclude = {"base_dir", "device"} | (
        {"input_perturbation"} if spec.input_perturbation is None else set()
    )
    return {
        **spec.model_dump(mode="json", exclude=exclude),
        "data_file": dataset_digest(spec.data.dataset, Path(spec.base_dir)),
        **extra,
    }
