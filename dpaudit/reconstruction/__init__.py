"""Reconstruction of training inputs from one batch gradient: gradient inversion, the tensor
method for two-layer networks, defences, the k-candidate identification game, and the
``reconstruction`` audit kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "DEFENCES": "dpaudit.reconstruction.methods",
    "Complexity": "dpaudit.reconstruction.methods",
    "Defence": "dpaudit.reconstruction.methods",
    "ErrorSummary": "dpaudit.reconstruction.methods",
    "Network": "dpaudit.reconstruction.methods",
    "ScalingFit": "dpaudit.reconstruction.methods",
    "analytic_inversion": "dpaudit.reconstruction.methods",
    "defended_gradient": "dpaudit.reconstruction.methods",
    "direction_nrmse": "dpaudit.reconstruction.methods",
    "fit_scaling": "dpaudit.reconstruction.methods",
    "identification_epsilon_lower_bound": "dpaudit.bounds",
    "identification_success_bound": "dpaudit.theory",
    "infer_labels": "dpaudit.reconstruction.methods",
    "invert_gradient": "dpaudit.reconstruction.methods",
    "lecture_complexity": "dpaudit.reconstruction.methods",
    "load_digits_images": "dpaudit.reconstruction.methods",
    "matched_errors": "dpaudit.reconstruction.methods",
    "psnr": "dpaudit.reconstruction.methods",
    "summarise_errors": "dpaudit.reconstruction.methods",
    "tensor_inversion": "dpaudit.reconstruction.methods",
}

__all__ = sorted(_EXPORTS)
# Submodules the kind adapter (dpaudit.reconstruction.kind) reaches on first use:
# validating an audit file loads none of them.
_SUBMODULES = ("sequential", "summary", "units")

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, submodules=_SUBMODULES)

if TYPE_CHECKING:
    from dpaudit.bounds import identification_epsilon_lower_bound
    from dpaudit.reconstruction.methods import (
        DEFENCES,
        Complexity,
        Defence,
        ErrorSummary,
        Network,
        ScalingFit,
        analytic_inversion,
        defended_gradient,
        direction_nrmse,
        fit_scaling,
        infer_labels,
        invert_gradient,
        lecture_complexity,
        load_digits_images,
        matched_errors,
        psnr,
        summarise_errors,
        tensor_inversion,
    )
    from dpaudit.theory import identification_success_bound
