"""Records of what a randomised procedure actually ran, for the accountant to read.

The training engine emits one :class:`DPSGDRecord` per trained model; mechanism
audits emit the mechanism's own parameters. Accounting reads these records, never the
configuration that asked for them (STYLE.md: describe the mechanism, then account
for it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
