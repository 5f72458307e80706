"""The documented path of the Opacus adapter, which lives in :mod:`dpaudit.trainers.opacus`.

``from dpaudit.opacus_adapter import opacus_trainer`` keeps working: user trainers and the
audit files that name them need no change.
"""

from dpaudit.trainers.opacus import (
    CANARY_NORM_FACTOR,
    MODEL_PROGRESS,
    OpacusTrainer,
    opacus_trainer,
    opacus_version,
)

__all__ = [
    "CANARY_NORM_FACTOR",
    "MODEL_PROGRESS",
    "OpacusTrainer",
    "opacus_trainer",
    "opacus_version",
]
