"""What a unit stores about how dpaudit trained its target, and what is read back from it.

An own target's unit (``membership`` or ``attribute``) stores, next to its scores or
guesses, how the target was trained: the DP-SGD record's arrays (``dp`` variant), or the
input-perturbation claim and the randomisers' parameters as they ran
(``input-perturbation`` variant, :mod:`dpaudit.membership.input_perturbation`); a plain
target stores neither. :func:`store_target` writes those arrays; :func:`stored_upper`,
:func:`stored_details` and :func:`has_upper` read them back, after the store, at the
audit's δ (which is not part of a unit).

Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dpaudit.accounting.upper_bounds import UpperBound, from_claim, from_records
from dpaudit.mechanisms.noise import Claim
from dpaudit.membership.input_perturbation import InputPerturbation
from dpaudit.records import DPSGDRecord

if TYPE_CHECKING:
    from dpaudit.membership.schema import TargetSpec

__all__ = [
    "has_upper",
    "store_record",
    "store_target",
    "stored_details",
    "stored_record",
    "stored_upper",
    "upper_source",
]

StoredArrays = Mapping[str, np.ndarray]


class TrainedTarget(Protocol):
    """What is stored of a trained target (a :class:`~dpaudit.membership.AuditedTarget`)."""

    @property
    def record(self) -> DPSGDRecord | None: ...

    @property
    def perturbation(self) -> dict[str, Any] | None: ...


def store_target(target: TrainedTarget, spec: TargetSpec) -> dict[str, np.ndarray]:
    """What a unit stores about how its target was trained: the DP-SGD record's arrays,
    or the input-perturbation claim (``claim_epsilon``, ``claim_delta``, stated) and the
    randomisers' parameters as they ran (``perturbation``, JSON)."""
    out = store_record(target.record)
    if target.perturbation is not None:
        out["perturbation"] = np.array(json.dumps(target.perturbation))
        claim = InputPerturbation.from_section(spec.input_perturbation).claim()
        if claim is not None and claim.epsilon is not None:  # an input-perturbation claim
            out["claim_epsilon"] = np.array([claim.epsilon])
            out["claim_delta"] = np.array([claim.delta])
    return out


def store_record(record: DPSGDRecord | None) -> dict[str, np.ndarray]:
    """The target's record as arrays (none for plain training)."""
    if record is None:
        return {}
    arrays = DPSGDRecord.to_arrays([record])
    arrays["dataset_size"] = np.array([-1 if record.dataset_size is None else record.dataset_size])
    return arrays


def stored_record(part: StoredArrays) -> DPSGDRecord | None:
    """The record :func:`store_record` stored, or ``None``."""
    if "noise_multiplier" not in part:
        return None
    (record,) = DPSGDRecord.from_arrays([part])
    size = int(part["dataset_size"][0])
    return dataclasses.replace(record, dataset_size=None if size < 0 else size)


def has_upper(part: StoredArrays, delta: float) -> bool:
    """Whether a stored target is held against an upper bound at the audit's ``delta``
    (a record, or a claim whose δ is at most ``delta``: see :func:`stored_upper`)."""
    return "noise_multiplier" in part or _claim_holds_at(part, delta)


def _claim_holds_at(part: StoredArrays, delta: float) -> bool:
    # (ε, δ_c)-DP implies (ε, δ)-DP for δ ≥ δ_c only; the lower bounds are measured at the
    # audit's δ, so a claim with a larger δ (a Gaussian randomiser's) is not held against
    # them: it would say nothing about ε at the smaller δ.
    return "claim_epsilon" in part and float(part["claim_delta"][0]) <= delta


def stored_upper(part: StoredArrays, delta: float) -> UpperBound | None:
    """The upper bound a stored target's lower bounds are held against: the accountant's
    ε of its DP-SGD record, or the input-perturbation claim when its δ is at most
    ``delta``; ``None`` otherwise (exactly when :func:`has_upper` is false)."""
    record = stored_record(part)
    if record is not None:
        return from_records([record], delta, with_mu=False)
    if _claim_holds_at(part, delta):
        claim = Claim(epsilon=float(part["claim_epsilon"][0]), delta=float(part["claim_delta"][0]))
        return from_claim(claim, delta, source="input perturbation claim")
    return None


def stored_details(part: StoredArrays, delta: float) -> dict[str, Any]:
    """The test details naming how the target was trained: ``record`` (DP-SGD) or
    ``input_perturbation`` (the randomisers as they ran, and why a claim is not held
    against the bounds measured at the audit's ``delta`` when it is not)."""
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
