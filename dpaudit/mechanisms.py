"""DP mechanisms to audit: Laplace, Gaussian, randomized response, and user callables.

A mechanism here is run on one of two neighbouring inputs, D (H0) or D' (H1), many times;
its outputs are the audit's scores, oriented so that larger means "D'". The built-ins
answer a scalar query with f(D) = 0 and f(D') = Δ (the sensitivity), the worst case for
a sensitivity-Δ query.

User mechanisms are given as ``"pkg.module:function"`` with the protocol

    def mechanism(data: numpy.ndarray, *, rng: numpy.random.Generator, size: int) -> array

returning ``size`` independent real outputs of the mechanism on ``data`` (one of the two
neighbouring inputs from the audit file). Larger outputs should point to the neighbour.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpaudit.errors import ConfigError, DpauditError

MechanismFn = Callable[..., Any]


@dataclass(frozen=True)
class Claim:
    """The privacy a mechanism or trainer claims: (ε, δ)-DP and/or μ-GDP."""

    epsilon: float | None = None
    delta: float = 0.0
    mu: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "mu": self.mu}


@dataclass(frozen=True)
class Mechanism:
    """A mechanism ready to sample: a name, its sampler and the parameters it RUNS with."""

    name: str
    sample: Callable[[int, np.random.Generator, int], np.ndarray] = field(repr=False)
    parameters: dict[str, Any] = field(default_factory=dict)

    def run(self, neighbour: int, *, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` outputs on D (``neighbour=0``) or D' (``neighbour=1``) as float64."""
        out = np.asarray(self.sample(neighbour, rng, size), dtype=float).reshape(-1)
        if out.size != size:
            raise DpauditError(
                f"Mechanism {self.name!r} returned {out.size} outputs; {size} were asked for."
            )
        if not np.all(np.isfinite(out)):
            raise DpauditError(f"Mechanism {self.name!r} returned NaN or infinite outputs.")
        return out


def laplace(*, sensitivity: float, scale: float) -> Mechanism:
    """Laplace mechanism: f(D) + Lap(scale), f(D) = 0, f(D') = sensitivity.

    It is (sensitivity/scale)-DP (Dwork, McSherry, Nissim, Smith 2006, Prop. 1).
    """

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return neighbour * sensitivity + rng.laplace(0.0, scale, size)

    return Mechanism("laplace", sample, {"sensitivity": sensitivity, "scale": scale})


def gaussian(*, sensitivity: float, sigma: float) -> Mechanism:
    """Gaussian mechanism: f(D) + N(0, σ²).

    It is (sensitivity/σ)-GDP (Dong, Roth, Su 2019, Thm. 2.7).
    """

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return neighbour * sensitivity + rng.normal(0.0, sigma, size)

    return Mechanism("gaussian", sample, {"sensitivity": sensitivity, "sigma": sigma})


def randomized_response(*, p: float) -> Mechanism:
    """Binary randomized response: report the true bit with probability p, else its flip.

    The bit is 0 on D and 1 on D'. With p = 3/4 (a fair coin decides between the truth and
    a second fair coin) it is ln 3-DP; in general ln(p/(1 − p))-DP for p ≥ ½.
    """

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        truthful = rng.random(size) < p
        return np.where(truthful, neighbour, 1 - neighbour).astype(float)

    return Mechanism("randomized-response", sample, {"p": p})


def load_callable(spec: str, *, what: str = "mechanism") -> MechanismFn:
    """Import ``"pkg.module:function"``; a bad spec is a one-line :class:`ConfigError`."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise ConfigError(
            f"A user {what} must be given as 'pkg.module:function'. Got {spec!r} instead."
        )
    module_name, attr = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(
            f"Cannot import module {module_name!r} for {what} {spec!r}: {exc}. Is it installed "
            "or on PYTHONPATH (the audit file's folder is added automatically)?"
        ) from None
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise ConfigError(f"Module {module_name!r} has no callable {attr!r} (from {spec!r}).")
    return fn


def user_mechanism(spec: str, *, data: tuple[Any, Any]) -> Mechanism:
    """Wrap a user callable following the module docstring's protocol."""
    fn = load_callable(spec)
    inputs = (np.asarray(data[0]), np.asarray(data[1]))

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return fn(inputs[neighbour], rng=rng, size=size)

    return Mechanism(spec, sample, {"callable": spec})


def theoretical_claim(name: str, parameters: dict[str, Any]) -> Claim:
    """What a built-in mechanism provably guarantees with the parameters it runs with."""
    if name == "laplace":
        return Claim(epsilon=parameters["sensitivity"] / parameters["scale"])
    if name == "gaussian":
        return Claim(mu=parameters["sensitivity"] / parameters["sigma"])
    if name == "randomized-response":
        p = parameters["p"]
        return Claim(epsilon=math.log(max(p, 1 - p) / min(p, 1 - p)) if 0 < p < 1 else math.inf)
    raise DpauditError(f"No theoretical guarantee is known for mechanism {name!r}.")
