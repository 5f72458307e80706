"""IBM diffprivlib's Laplace and Gaussian mechanisms as user mechanisms, for
`audits/diffprivlib-*.toml`.

diffprivlib (the ``diffprivlib`` extra: ``pip install 'dpaudit[diffprivlib]'``) releases a
number through a mechanism object: ``Laplace(epsilon, sensitivity)``,
``GaussianAnalytic(epsilon, delta, sensitivity)`` (the analytic Gaussian mechanism of
Balle, Wang 2018, Thm. 9), ``.randomise(value)``. Each plug-in below builds the object
with the parameters of the module constants, seeds it from dpaudit's random stream (so an
audit is reproducible from its seed), and calls ``randomise`` once per trial on the sum of
the audit's input: the library's own code draws every output.

Protocol: ``fn(data, *, rng, size)`` returns ``size`` outputs; the audit files score them
with ``score = "learned"``.

diffprivlib 0.6.6's package ``__init__`` imports its machine-learning models, which need
scikit-learn names that scikit-learn 1.8 removed; the mechanisms need none of them. When
that import fails, :func:`mechanisms` loads the ``diffprivlib.mechanisms`` sub-package
alone (its own imports are ``diffprivlib.utils`` and numpy).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

import numpy as np

#: The Laplace mechanism's ε and the sensitivity of the audited sum.
LAPLACE_EPSILON = 1.0
SENSITIVITY = 1.0
#: The analytic Gaussian mechanism's (ε, δ).
GAUSSIAN_EPSILON = 1.0
GAUSSIAN_DELTA = 1e-5


def mechanisms() -> types.ModuleType:
    """``diffprivlib.mechanisms``, imported without the package's models if need be.

    Raises:
        ImportError: diffprivlib is not installed (with how to install it).
    """
    try:
        return importlib.import_module("diffprivlib.mechanisms")
    except ImportError as exc:
        spec = importlib.util.find_spec("diffprivlib") if "diffprivlib" not in sys.modules else None
        if spec is None or spec.submodule_search_locations is None:
            raise ImportError(
                "diffprivlib is not installed; install the extra: pip install "
                "'dpaudit[diffprivlib]'"
            ) from exc
        # The package __init__ failed on its models (see the module docstring): register
        # a bare package object so that the mechanisms sub-package imports on its own.
        package = types.ModuleType("diffprivlib")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["diffprivlib"] = package
        return importlib.import_module("diffprivlib.mechanisms")


def _seeded(rng: np.random.Generator) -> np.random.RandomState:
    # diffprivlib takes a legacy RandomState; seed it from dpaudit's stream
    return np.random.RandomState(int(rng.integers(0, 2**32)))


def _release(mechanism: Any, data: np.ndarray, size: int) -> np.ndarray:
    value = float(np.sum(np.asarray(data, dtype=float)))
    return np.fromiter((mechanism.randomise(value) for _ in range(size)), float, count=size)


def laplace_mechanism(rng: np.random.Generator | None = None) -> Any:
    """diffprivlib's ``Laplace(epsilon=LAPLACE_EPSILON, sensitivity=SENSITIVITY)``."""
    return mechanisms().Laplace(
        epsilon=LAPLACE_EPSILON,
        sensitivity=SENSITIVITY,
        random_state=None if rng is None else _seeded(rng),
    )


def gaussian_mechanism(rng: np.random.Generator | None = None) -> Any:
    """diffprivlib's ``GaussianAnalytic(epsilon, delta, sensitivity)``."""
    return mechanisms().GaussianAnalytic(
        epsilon=GAUSSIAN_EPSILON,
        delta=GAUSSIAN_DELTA,
        sensitivity=SENSITIVITY,
        random_state=None if rng is None else _seeded(rng),
    )


def laplace(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` releases of sum(data) by diffprivlib's Laplace mechanism (ε = 1)."""
    return _release(laplace_mechanism(rng), data, size)


def gaussian(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` releases of sum(data) by diffprivlib's analytic Gaussian (ε = 1, δ = 1e-5)."""
    return _release(gaussian_mechanism(rng), data, size)
