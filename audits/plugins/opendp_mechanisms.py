"""OpenDP's Laplace and Gaussian mechanisms as user mechanisms, for `audits/opendp-*.toml`.

OpenDP (the ``opendp`` extra: ``pip install 'dpaudit[opendp]'``) builds a measurement
from a domain, a metric and a noise scale, and states its guarantee through the
measurement's privacy map: ``make_laplace`` on floats with absolute distance maps
Δ = 1 to ε = 1/scale (pure DP), ``make_gaussian`` with ℓ2 distance maps Δ = 1 to
ρ = 1/(2·scale²) (zero-concentrated DP). Its float mechanisms sample the noise exactly
and round it to a grid, so they are floating-point safe. The library's features are off
until ``dp.enable_features("contrib")``, which :func:`measurement` calls.

Each plug-in releases sum(data) ``size`` times through ONE call of the same mechanism on
a vector domain (each coordinate gets independent noise from the same sampler as the
scalar measurement; one call instead of ``size`` keeps an audit of 10⁵ trials at a few
seconds). OpenDP draws from the operating system's randomness and cannot be seeded, so
these outputs are not reproducible under the audit seed (``dpaudit verify`` still
recomputes every bound from the stored outputs).

Protocol: ``fn(data, *, rng, size)`` returns ``size`` outputs; the audit files score them
with ``score = "learned"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: The noise scales: Laplace b = 1 (ε = 1 at Δ = 1), Gaussian σ = 1 (ρ = ½ at Δ = 1).
LAPLACE_SCALE = 1.0
GAUSSIAN_SCALE = 1.0


def measurement(noise: str, *, vector: bool = True) -> Any:
    """OpenDP's float ``make_laplace`` or ``make_gaussian`` at the module's scale.

    Args:
        noise: ``"laplace"`` or ``"gaussian"``.
        vector: On a vector domain (what the plug-ins run), or on one float (whose privacy
            map is the one a user of the scalar mechanism reads).

    Raises:
        ImportError: OpenDP is not installed (with how to install it).
    """
    try:
        import opendp.prelude as dp
    except ImportError as exc:
        raise ImportError(
            "OpenDP is not installed; install the extra: pip install 'dpaudit[opendp]'"
        ) from exc
    dp.enable_features("contrib")
    atom = dp.atom_domain(T=float, nan=False)
    domain = dp.vector_domain(atom) if vector else atom
    if noise == "laplace":
        metric = dp.l1_distance(T=float) if vector else dp.absolute_distance(T=float)
        return dp.m.make_laplace(domain, metric, scale=LAPLACE_SCALE)
    if noise == "gaussian":
        metric = dp.l2_distance(T=float) if vector else dp.absolute_distance(T=float)
        return dp.m.make_gaussian(domain, metric, scale=GAUSSIAN_SCALE)
    raise ValueError(f"noise must be 'laplace' or 'gaussian'; got {noise!r}")


def _release(noise: str, data: np.ndarray, size: int) -> np.ndarray:
    value = float(np.sum(np.asarray(data, dtype=float)))
    return np.asarray(measurement(noise)([value] * size), dtype=float)


def laplace(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` releases of sum(data) by OpenDP's Laplace mechanism (scale 1, ε = 1)."""
    return _release("laplace", data, size)


def gaussian(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` releases of sum(data) by OpenDP's Gaussian mechanism (σ = 1, ρ = ½)."""
    return _release("gaussian", data, size)
