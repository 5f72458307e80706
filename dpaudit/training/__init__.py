"""The training engine: K models at once, plain SGD or DP-SGD (docs/architecture.md,
"The training engine").

``train_many`` trains logistic-regression / MLP stacks with the closed-form fast path;
``train_many_module`` trains copies of any per-example ``torch.nn.Module`` through
``torch.func``. Both share the step loop, Poisson sampling, noise and random streams.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports

#: Public name → the module that defines it, imported on first use (PEP 562), so that the
#: torch-free modules of this package (``sampling``) load without torch.
_EXPORTS: dict[str, str] = {
    "CoordinateCanaries": "dpaudit.training.specs",
    "DPConfig": "dpaudit.training.specs",
    "FunctionalBackend": "dpaudit.training.generic",
    "GradientCanary": "dpaudit.training.specs",
    "LinearStackBackend": "dpaudit.training.engine",
    "StepInfo": "dpaudit.training.specs",
    "TrainResult": "dpaudit.training.specs",
    "TrainingSpec": "dpaudit.training.specs",
    "init_module_stack": "dpaudit.training.generic",
    "train_many": "dpaudit.training.engine",
    "train_many_module": "dpaudit.training.generic",
}

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

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the names as static type checkers should see them
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
