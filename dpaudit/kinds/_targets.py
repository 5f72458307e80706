"""What the ``membership`` and ``attribute`` kinds share: the fair-coin target dpaudit trains.

Both kinds train the same target from the shared tables (``[data]``, ``[model]``,
``[training]``, ``[target] variants``) and the audit seed, deterministically, so each
kind's units can train it on their own and still attack the very same model.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit.kinds.base import dataset_digest
from dpaudit.sections import DataSection, ModelSection, Table, TargetSection, TrainingSection

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dpaudit.data import Dataset
    from dpaudit.membership import AuditedTarget
    from dpaudit.records import DPSGDRecord


class TargetSpec(Table):
    """The recipe of dpaudit's own target (picklable; its JSON names the stored units)."""

    data: DataSection
    model: ModelSection
    training: TrainingSection
    seed: int
    base_dir: str
    device: str = "cpu"


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
    from dpaudit.membership import fair_coins, prepare_target
    from dpaudit.recipes import model_spec, training_spec

    members = int(fair_coins(spec.data.audited_size, seed=spec.seed).sum())
    return prepare_target(
        dataset,
        model=model_spec(spec.model),
        training=training_spec(spec.training, members=members, dp=variant == "dp"),
        audited_size=spec.data.audited_size,
        population_size=spec.data.population_size,
        seed=spec.seed,
        device=spec.device,
    )


def store_record(record: DPSGDRecord | None) -> dict[str, np.ndarray]:
    """The target's record as arrays (none for plain training)."""
    from dpaudit.upper_bounds import record_arrays

    if record is None:
        return {}
    arrays = record_arrays([record])
    arrays["dataset_size"] = np.array([-1 if record.dataset_size is None else record.dataset_size])
    return arrays


def stored_record(part: Mapping[str, np.ndarray]) -> DPSGDRecord | None:
    """The record :func:`store_record` stored, or ``None``."""
    from dataclasses import replace

    from dpaudit.upper_bounds import records_from_arrays

    if "noise_multiplier" not in part:
        return None
    (record,) = records_from_arrays([part])
    size = int(part["dataset_size"][0])
    return replace(record, dataset_size=None if size < 0 else size)


def key_data(spec: TargetSpec, **extra: Any) -> dict[str, Any]:
    """What names the units: the recipe and the data file's bytes, not the device or folder."""
    return {
        **spec.model_dump(mode="json", exclude={"base_dir", "device"}),
        "data_file": dataset_digest(spec.data.dataset, Path(spec.base_dir)),
        **extra,
    }
