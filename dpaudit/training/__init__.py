"""The training engine: K models at once, plain SGD or DP-SGD (docs/architecture.md,
"The training engine").

``train_many`` trains logistic-regression / MLP stacks with the closed-form fast path;
``train_many_module`` trains copies of any per-example ``torch.nn.Module`` through
``torch.func``. Both share the step loop, Poisson sampling, noise and random streams.
"""

from __future__ import annotations

from dpaudit.training.engine import LinearStackBackend, train_many
from dpaudit.training.generic import FunctionalBackend, init_module_stack, train_many_module
from dpaudit.training.specs import (
    CoordinateCanaries,
    DPConfig,
    GradientCanary,
    StepInfo,
    TrainingSpec,
    TrainResult,
)

__all__ = [
    "CoordinateCanaries",
    "DPConfig",
    "FunctionalBackend",
    "GradientCanary",
    "LinearStackBackend",
    "StepInfo",
    "TrainResult",
    "TrainingSpec",
    "init_module_stack",
    "train_many",
    "train_many_module",
]
