"""Records of what a randomised procedure actually ran, for the accountant to read.

The training engine emits one :class:`DPSGDRecord` per trained model; mechanism
audits emit the mechanism's own parameters. Accounting reads these records, never the
configuration that asked for them: describe the mechanism, then account for it. A record
carries its own codec to and from the arrays a work unit stores (:meth:`DPSGDRecord.to_arrays`,
:meth:`DPSGDRecord.from_arrays`), so the store holds raw arrays and bounds come after it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal

import numpy as np

Sampling = Literal["poisson", "full-batch"]


@dataclass(frozen=True)
class DPSGDRecord:
    """One DP-SGD (or DP-GD) training run as it was executed.

    Attributes:
        noise_multiplier: σ; the noise added to the clipped sum has standard deviation σ·C.
        sampling_rate: q, the Poisson inclusion probability per example per step
            (1.0 for full-batch gradient descent).
        steps: T, the number of noisy updates that were made.
        clipping_norm: C, the per-example ℓ2 clipping bound.
        sampling: ``"poisson"`` or ``"full-batch"``.
        dataset_size: rows the model could sample from (its members), when known.
    """

    noise_multiplier: float
    sampling_rate: float
    steps: int
    clipping_norm: float
    sampling: Sampling = "poisson"
    dataset_size: int | None = None

    #: The arrays records are stored as (one entry per model). ``dataset_size`` is
    #: provenance, not accounting, and is not stored.
    ARRAY_KEYS: ClassVar[tuple[str, ...]] = (
        "noise_multiplier",
        "sampling_rate",
        "steps",
        "clipping_norm",
        "full_batch",
    )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def to_arrays(records: Sequence[DPSGDRecord]) -> dict[str, np.ndarray]:
        """Records as the arrays a unit stores, one entry per record (model)."""
        return {
            "noise_multiplier": np.array([r.noise_multiplier for r in records], dtype=np.float64),
            "sampling_rate": np.array([r.sampling_rate for r in records], dtype=np.float64),
            "steps": np.array([r.steps for r in records], dtype=np.int64),
            "clipping_norm": np.array([r.clipping_norm for r in records], dtype=np.float64),
            "full_batch": np.array([r.sampling == "full-batch" for r in records], dtype=bool),
        }

    @staticmethod
    def from_arrays(parts: Iterable[Mapping[str, np.ndarray]]) -> list[DPSGDRecord]:
        """The records :meth:`to_arrays` stored, over one or several units, in order."""
        records: list[DPSGDRecord] = []
        # Records are frozen, so models that ran the same mechanism share one record
        # object: an audit's 10⁴ models hold a handful of distinct ones.
        made: dict[tuple[float, float, int, float, bool], DPSGDRecord] = {}
        for p in parts:
            # one conversion per array (tolist gives the same Python floats, ints and
            # bools as indexing element by element, at a fraction of the cost per model)
            columns = zip(
                np.asarray(p["noise_multiplier"], dtype=np.float64).tolist(),
                np.asarray(p["sampling_rate"], dtype=np.float64).tolist(),
                np.asarray(p["steps"]).astype(np.int64).tolist(),
                np.asarray(p["clipping_norm"], dtype=np.float64).tolist(),
                np.asarray(p["full_batch"]).astype(bool).tolist(),
                strict=True,
            )
            for key in columns:
                record = made.get(key)
                if record is None:
                    sigma, q, steps, clip, full = key
                    record = made[key] = DPSGDRecord(
                        noise_multiplier=sigma,
                        sampling_rate=q,
                        steps=steps,
                        clipping_norm=clip,
                        sampling="full-batch" if full else "poisson",
                    )
                records.append(record)
        return records
