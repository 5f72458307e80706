"""The floating-point attack on textbook Laplace samplers (``score = "floating"``).

A Laplace mechanism implemented in floating point does not output a real number
``f(D) + Lap(λ)``: it outputs a double computed from a double ``U`` drawn on a finite
grid, through a rounded logarithm, a rounded product and a rounded sum. The doubles it can
output from ``f(D) = x`` form a set with holes, and the sets from ``x`` and from
``x' = x + Δ`` differ: an output reachable from ``x'`` but not from ``x`` proves that it
came from ``x'`` (Mironov, "On significance of the least significant bits for
differential privacy", CCS 2012, §4, whose Fig. 2 shows such holes; §5 is the snapping
mechanism that closes them).

This module decides, for each output ``y`` and each input value ``x``, whether ``y`` is
reachable from ``x`` by one of the sampler forms below, by an exact search over the grid
of ``U``. The audit's score of an output is then

    +1  reachable from f(D') only  (proof of D'),
    −1  reachable from f(D) only   (proof of D),
     0  otherwise,

and the ε lower bound counts, with Clopper–Pearson limits, how often each arm's outputs
fall in each event (:mod:`dpaudit.bounds`). The score is a fixed function of one output,
so the bound is rigorous whether or not the reachability test is exact: a test that
wrongly called some outputs unreachable would only weaken the bound (those outputs are
then counted against it), never void it.

Sampler forms covered (``sampler``), with ``x`` the exact double the noise is added to and
``λ`` the scale; every arithmetic step is one IEEE-754 double operation rounded to
nearest:

- ``"exp-sign"``: ``x + s·(λ·(−ln U))`` with a sign ``s = ±1`` from a separate coin and
  ``U = k·2⁻⁵³``, ``k ∈ [1, 2⁵³]`` (``1 − rng.random()``; ``rng.random()`` itself, whose
  ``U = 0`` gives an infinite output, is covered too). The textbook "exponential with a
  random sign" sampler.
- ``"numpy-laplace"``: ``x + rng.laplace(0, λ)`` (or ``rng.laplace(x, λ)``), numpy's
  inverse-CDF sampler: ``U = k·2⁻⁵³``; ``U ≥ ½`` gives ``−λ·ln((2 − U) − U)``, ``0 < U <
  ½`` gives ``λ·ln(U + U)`` (numpy's ``random_laplace``).

The logarithm is the platform's: the test accepts a grid point whose output matches under
numpy's vectorised ``np.log`` or under the C library's ``log`` (``math.log``, which
numpy's own sampler calls), as these differ in the last bit for a fraction of inputs.
Samplers not listed (``scipy.stats.laplace``, a difference of two exponentials,
``-λ·sign(U − ½)·ln(1 − 2|U − ½|)``) are not covered: their outputs will mostly score 0,
and the bound stays valid but weak.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.errors import DpauditError, check_choice
from dpaudit.mechanisms.noise import Mechanism, user_mechanism
from dpaudit.mechanisms.schema import FLOATING_SAMPLERS

#: The sampler forms whose reachable outputs this module computes exactly (declared once,
#: with the table that names them).
SAMPLERS = FLOATING_SAMPLERS

#: 2⁻⁵³: the spacing of ``rng.random()``'s grid (numpy draws ``(bits >> 11)·2⁻⁵³``).
_STEP = 2.0**-53
_TOP = 1 << 53
#: Grid points either side of the binary search's landing point that are checked for an
#: exact match: a rounded logarithm may be non-monotone by one unit in the last place.
_WINDOW = 2

_libm_log = np.frompyfunc(math.log, 1, 1)


def _libm(w: np.ndarray) -> np.ndarray:
    """The C library's log, elementwise (what numpy's own C sampler calls)."""
    return np.asarray(_libm_log(w), dtype=float) if w.size else w.astype(float)


@dataclass(frozen=True)
class _Branch:
    """One monotone piece of a sampler: output ``x + sign·M(k)`` over ``k ∈ [low, high]``,
    with ``M(k) = λ·(−ln w(k))`` rounded, ``w`` increasing (``rising``) or decreasing in k."""

    sign: int
    low: int
    high: int
    w: Callable[[np.ndarray], np.ndarray]
    rising: bool


def _exp_sign_w(k: np.ndarray) -> np.ndarray:
    return k.astype(float) * _STEP


def _numpy_upper_w(k: np.ndarray) -> np.ndarray:
    u = k.astype(float) * _STEP
    return (2.0 - u) - u  # numpy's `2.0 - U - U`, left to right


def _numpy_lower_w(k: np.ndarray) -> np.ndarray:
    u = k.astype(float) * _STEP
    return u + u


def _branches(sampler: str) -> tuple[_Branch, ...]:
    if sampler == "exp-sign":
        return (
            _Branch(+1, 1, _TOP, _exp_sign_w, True),
            _Branch(-1, 1, _TOP, _exp_sign_w, True),
        )
    half = _TOP >> 1
    return (
        _Branch(+1, half, _TOP - 1, _numpy_upper_w, False),
        _Branch(-1, 1, half - 1, _numpy_lower_w, True),
    )


def _outputs_at(
    branch: _Branch, k: np.ndarray, x: float, scale: float, log: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """The sampler's output at grid point k, every step rounded as the sampler rounds it."""
    magnitude = scale * (-log(branch.w(k)))  # w > 0 on every grid point: no log(0)
    return x + branch.sign * magnitude


def _search(branch: _Branch, y: np.ndarray, x: float, scale: float) -> np.ndarray:
    """For each y, the grid point where the (monotone) output first reaches y.

    The output is monotone in k: ``w`` is monotone, so are the rounded log, product and
    sum. Orient it as non-decreasing and bisect for the smallest k with output ≥ y.
    """
    # M(k) falls as w rises; the output x + sign·M(k) then rises iff sign·(-1)·(rising) > 0
    increasing = (branch.sign > 0) != branch.rising
    lo = np.full(y.shape, branch.low, dtype=np.int64)
    hi = np.full(y.shape, branch.high, dtype=np.int64)
    # ⌈log2(2⁵³)⌉ + 1 halvings close every interval (fewer calls than testing lo < hi)
    for _ in range(_TOP.bit_length() + 1):
        mid = lo + (hi - lo) // 2
        out = _outputs_at(branch, mid, x, scale, np.log)
        at_or_above = out >= y if increasing else out <= y
        hi = np.where(at_or_above, mid, hi)
        lo = np.where(at_or_above, lo, np.minimum(mid + 1, hi))  # closed intervals stay put
    return lo


def _matches(branch: _Branch, k0: np.ndarray, y: np.ndarray, x: float, scale: float) -> np.ndarray:
    """Whether some grid point within :data:`_WINDOW` of k0 gives y exactly, under either
    logarithm."""
    found = np.zeros(y.shape, dtype=bool)
    for log in (np.log, _libm):
        todo = ~found
        if not np.any(todo):
            break
        for step in range(-_WINDOW, _WINDOW + 1):
            k = np.clip(k0[todo] + step, branch.low, branch.high)
            hit = _outputs_at(branch, k, x, scale, log) == y[todo]
            found[np.flatnonzero(todo)[hit]] = True
    return found


def reachable(outputs: np.ndarray, x: float, *, scale: float, sampler: str) -> np.ndarray:
    """Whether each output could have been produced by ``sampler`` from the value ``x``.

    Args:
        outputs: Doubles the mechanism output, any shape (flattened).
        x: The exact double the noise was added to (f(D) or f(D')).
        scale: The Laplace scale λ the sampler was called with.
        sampler: One of :data:`SAMPLERS`.

    Returns:
        A boolean array, one entry per output: True if some grid value of ``U`` gives
        exactly this double.

    Raises:
        DpauditError: an unknown sampler, a scale that is not positive and finite, or
            outputs that are not finite.
    """
    check_choice("sampler", sampler, SAMPLERS)
    if not (math.isfinite(scale) and scale > 0):
        raise DpauditError(f"The 'scale' parameter must be a positive finite number. Got {scale}.")
    if not math.isfinite(x):
        raise DpauditError(f"The input value x must be finite. Got {x}.")
    y = np.asarray(outputs, dtype=float).reshape(-1)
    if not np.all(np.isfinite(y)):
        raise DpauditError("Outputs must be finite to test their reachability.")
    found = np.zeros(y.shape, dtype=bool)
    for branch in _branches(sampler):
        # x + s·M with M ≥ 0 lies on the side of x its sign says (rounding is monotone)
        rows = np.flatnonzero((y >= x) if branch.sign > 0 else (y <= x))
        rows = rows[~found[rows]]
        if rows.size == 0:
            continue
        k0 = _search(branch, y[rows], x, scale)
        found[rows[_matches(branch, k0, y[rows], x, scale)]] = True
    return found


def floating_score(
    outputs: np.ndarray, values: tuple[float, float], *, scale: float, sampler: str
) -> np.ndarray:
    """The floating-point attack's score of each output: +1 if reachable from f(D') only,
    −1 if from f(D) only, 0 otherwise (larger = "D'", as every score in dpaudit).

    Args:
        outputs: The mechanism's outputs (one double per trial).
        values: (f(D), f(D')), the exact doubles the noise is added to.
        scale: The Laplace scale λ.
        sampler: One of :data:`SAMPLERS`.

    Returns:
        float64 array in {−1, 0, 1}.

    References:
        Mironov, "On significance of the least significant bits for differential
        privacy", CCS 2012, §4 (the attack: outputs reachable from one input only).
    """
    y = np.asarray(outputs, dtype=float).reshape(-1)
    from_d = reachable(y, float(values[0]), scale=scale, sampler=sampler)
    from_d_prime = reachable(y, float(values[1]), scale=scale, sampler=sampler)
    return from_d_prime.astype(float) - from_d.astype(float)


def floating_mechanism(
    spec: str,
    *,
    data: tuple[Any, Any],
    sampler: str,
    scale: float,
    values: tuple[float, float],
    base_dir: str | None = None,
) -> Mechanism:
    """A user mechanism ``spec`` whose scalar outputs are scored by :func:`floating_score`
    (``score = "floating"``); its raw outputs stay available (``draw``)."""
    check_choice("sampler", sampler, SAMPLERS)
    user = user_mechanism(spec, data=data, base_dir=base_dir)
    draw = user.draw
    assert draw is not None  # a user mechanism always has raw outputs

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        out = np.asarray(draw(neighbour, rng, size), dtype=float)
        if out.ndim > 1 and out.shape[1:] != (1,) * (out.ndim - 1):
            raise DpauditError(
                f"score = 'floating' tests one real output per trial; {spec!r} returned "
                f"outputs of shape {out.shape}."
            )
        return floating_score(out, values, scale=scale, sampler=sampler)

    parameters = {
        **user.parameters,
        "score": "floating",
        "sampler": sampler,
        "scale": scale,
        "values": list(values),
    }
    return Mechanism(spec, sample, parameters, draw)
