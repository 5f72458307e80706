"""GDP identification: is a privacy profile μ-GDP, exactly or only within a bracket?

From a privacy profile δ_A(ε) — a callable, values on a grid, or a built-in mechanism
whose profile dpaudit knows exactly — compute the GDP transform

    μ_A(ε) = the μ with δ_μ(ε) = δ_A(ε)

(Liu, Sun, Jiang, Kong 2022). μ-GDP dominates the profile exactly when μ ≥ μ_A(ε) for
every ε (δ_μ(ε) increases in μ), so the mechanism is GDP iff μ_A is bounded and the
optimal μ is μ* = sup_ε μ_A(ε) (their §3, numbering unverified; the tail condition:
μ_A's behaviour as ε → ∞ decides). :func:`dpaudit.theory.gdp_bracket` brackets μ*
rigorously on [0, ε_max] by the monotonicity of both profiles; beyond ε_max the profile
is at most ``tail_delta``.

Two answers are given:

- ``gdp``: the profile is μ-GDP for every μ ≥ ``bracket.high`` (rigorous on the grid's
  range; for every ε when the profile reaches 0 on the grid, ``complete``), and for no
  μ < ``bracket.low``.
- ``exact``: μ_A is constant on the grid (relative spread ≤ ``exact_rtol``). The profile
  of a symmetric trade-off function determines it (Dong, Roth, Su 2019, Prop. 2.12, the
  profile is the convex conjugate), so a constant μ_A means the trade-off curve IS G_μ:
  the mechanism is exactly μ-GDP, not merely dominated. This is a numerical decision on
  the grid, with the tolerance stated.

Gaussian noise is exactly (Δ/σ)-GDP. The Laplace mechanism and randomized response are
GDP (every ε-DP mechanism is, Liu et al. §5, numbering unverified) but not exactly:
μ_A falls to 0 at ε, so they are μ*-GDP with μ* = μ_A's maximum, and no smaller μ.

Pure functions of numbers; no torch, no dp-accounting (an accountant's bracket,
:func:`dpaudit.accounting.mu_bracket`, is passed in as a :class:`MuBracket`).

References:
    Liu, Sun, Jiang, Kong 2022, "Identification, Amplification and Measurement: A bridge
    to Gaussian Differential Privacy" (NeurIPS; arXiv:2210.09269), §3 (identification by
    the tail of μ_A) and §4 (measurement); Dong, Roth, Su 2019, Cor. 2.13 (δ_μ(ε)).
    Authors (Yi Liu, Ke Sun, Bei Jiang, Linglong Kong), title and venue checked against
    the NeurIPS 2022 programme and arXiv; the section and theorem numbers cited for this
    paper across dpaudit are NOT verified (only its abstract could be read).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpaudit.errors import DpauditError, check_in_interval
from dpaudit.theory import (
    MuBracket,
    Profile,
    discrete_profile,
    gdp_bracket,
    gdp_bracket_from_grid,
    gdp_delta,
    k_rr_profile,
    laplace_profile,
    pure_dp_profile,
)

__all__ = [
    "IDENTIFIABLE_MECHANISMS",
    "GDPIdentification",
    "identify_bracket",
    "identify_grid",
    "identify_mechanism",
    "identify_profile",
    "mechanism_profile",
]

IDENTIFIABLE_MECHANISMS = (
    "gaussian",
    "laplace",
    "randomized-response",
    "k-rr",
    "unary-encoding",
    "local-gaussian",
    "local-laplace",
)

#: Relative spread of μ_A on the grid below which the profile is called exactly GDP.
DEFAULT_EXACT_RTOL = 1e-6


@dataclass(frozen=True)
class GDPIdentification:
    """Whether a privacy profile is μ-GDP, and for which μ.

    Attributes:
        exact: μ_A is constant on the grid (to ``exact_rtol``): the trade-off curve is G_μ.
        mu: the μ of the guarantee: ``bracket.high`` (μ-GDP holds for this μ), or, when
            ``exact``, the constant value of μ_A (``bracket.low``; the trade-off is G_μ).
        bracket: the measurement; the optimal μ* lies in [low, high].
        mu_min: the smallest μ_A on the grid (equals ``bracket.low`` when exact).
        spread: (max − min)/max of μ_A on the grid.
        complete: the profile reaches 0 on the grid, so the bracket covers every ε (the
            tail condition holds: μ_A = 0 beyond); otherwise it covers [0, ε_max] and
            δ ≤ ``bracket.tail_delta`` beyond.
        tail_rising: μ_A increases over the last tenth of the grid: the tail may push μ*
            above the bracket (a Poisson-subsampled Gaussian does), so widen the grid.
        exact_rtol: the tolerance of ``exact``.
        source: what was identified.
    """

    exact: bool
    mu: float
    bracket: MuBracket
    mu_min: float
    spread: float
    complete: bool
    tail_rising: bool
    exact_rtol: float
    source: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """One line in words."""
        b = self.bracket
        if not b.bounded:
            return (
                f"{self.source}: no finite μ-GDP guarantee is certified ({b.reason}); not "
                f"μ-GDP for μ < {b.low:.6g}"
            )
        if self.exact:
            head = (
                f"{self.source}: exactly {self.mu:.6g}-GDP (μ_A(ε) constant to {self.exact_rtol:g})"
            )
        elif not b.mu_values:
            head = f"{self.source}: μ-GDP for μ ≥ {b.high:.6g} ({b.reason})"
        else:
            head = (
                f"{self.source}: μ-GDP for μ ≥ {b.high:.6g} and not for μ < {b.low:.6g}; not "
                f"exactly GDP (μ_A(ε) ranges over [{self.mu_min:.4g}, {b.low:.4g}])"
            )
        if b.reason and b.mu_values:
            head += f" ({b.reason})"
        if self.complete:
            return head + "; the bracket holds for every ε"
        return head + f"; for ε ≤ {b.epsilon_max:.4g} (beyond, δ ≤ {b.tail_delta:.2g})"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "exact": self.exact,
            "mu": self.mu,
            "bracket": self.bracket.to_dict(),
            "mu_min": self.mu_min,
            "spread": self.spread,
            "complete": self.complete,
            "tail_rising": self.tail_rising,
            "exact_rtol": self.exact_rtol,
            "source": self.source,
            "detail": dict(self.detail),
            "summary": self.summary,
        }


def identify_bracket(
    bracket: MuBracket,
    *,
    exact_rtol: float = DEFAULT_EXACT_RTOL,
    source: str = "profile",
    detail: Mapping[str, Any] | None = None,
) -> GDPIdentification:
    """Identify from a finished measurement (:func:`dpaudit.theory.gdp_bracket`,
    :func:`dpaudit.theory.gdp_bracket_from_grid` or :func:`dpaudit.accounting.mu_bracket`).

    Args:
        bracket: the measurement, with its grid and μ_A values.
        exact_rtol: largest relative spread of μ_A on the grid still called exact (and the
            least relative rise over the grid's last tenth called ``tail_rising``). A PLD
            profile's discretisation moves μ_A by about 1e-8 relative (full-batch DP-GD
            through :func:`dpaudit.accounting.mu_bracket`), well inside the default.
        source: what was measured (for the summary).
        detail: extra JSON-able facts to carry.
    """
    exact_rtol = check_in_interval("exact_rtol", exact_rtol, 0.0, 1.0)
    mus = np.asarray(bracket.mu_values, dtype=float)
    if mus.size == 0:
        # Nothing was measured (the bound came from elsewhere, ``bracket.reason``): no
        # spread is known, so the profile is not called exact.
        mus = np.array([bracket.low, bracket.high if bracket.bounded else bracket.low])
    top, bottom = float(mus.max()), float(mus.min())
    spread = (top - bottom) / top if top > 0 else 0.0
    tail = mus[-max(2, mus.size // 10) :]
    # rising beyond the tolerance of `exact`: a PLD profile's discretisation wobbles μ_A
    # by ~1e-8 relative, which is no trend
    rising = bool(tail.size >= 2 and tail[-1] > tail[0] * (1.0 + max(exact_rtol, 1e-9)))
    # An unbounded bracket certifies no μ, and an unmeasured one shows no constant μ_A.
    exact = spread <= exact_rtol and bracket.bounded and bool(bracket.mu_values)
    return GDPIdentification(
        exact=exact,
        mu=bracket.low if exact else bracket.high,
        bracket=bracket,
        mu_min=bottom,
        spread=spread,
        complete=bracket.tail_delta == 0.0,
        tail_rising=rising,
        exact_rtol=exact_rtol,
        source=source,
        detail=dict(detail or {}),
    )


def identify_profile(
    profile: Profile,
    *,
    epsilon_max: float | None = None,
    delta_floor: float = 1e-10,
    rtol: float = 1e-3,
    exact_rtol: float = DEFAULT_EXACT_RTOL,
    source: str = "profile",
) -> GDPIdentification:
    """Identify a profile given as a vectorised callable δ_A(ε).

    Args:
        profile: δ_A, non-increasing, values in [0, 1].
        epsilon_max, delta_floor, rtol: as in :func:`dpaudit.theory.gdp_bracket`.
        exact_rtol: as in :func:`identify_bracket`.
        source: what was identified.
    """
    bracket = gdp_bracket(profile, epsilon_max=epsilon_max, delta_floor=delta_floor, rtol=rtol)
    return identify_bracket(bracket, exact_rtol=exact_rtol, source=source)


def identify_grid(
    epsilons: ArrayLike,
    deltas: ArrayLike,
    *,
    exact_rtol: float = DEFAULT_EXACT_RTOL,
    source: str = "profile on a grid",
) -> GDPIdentification:
    """Identify a profile known only on a grid (from 0, increasing; see
    :func:`dpaudit.theory.gdp_bracket_from_grid`). The bracket's width is the grid's."""
    bracket = gdp_bracket_from_grid(epsilons, deltas)
    return identify_bracket(bracket, exact_rtol=exact_rtol, source=source)


def mechanism_profile(name: str, parameters: Mapping[str, Any]) -> Profile:
    """The exact privacy profile of a built-in mechanism, from the parameters it runs with.

    Args:
        name: one of :data:`IDENTIFIABLE_MECHANISMS`.
        parameters: as in :attr:`dpaudit.mechanisms.Mechanism.parameters`, so that
            ``mechanism_profile(mech.name, mech.parameters)`` works for every built-in
            (a user callable has no known profile): ``gaussian`` (and
            ``local-gaussian``) needs ``sensitivity`` and ``sigma``; ``laplace`` (and
            ``local-laplace``) ``sensitivity`` and ``scale``
            (or ``epsilon``); ``randomized-response`` ``p``; ``k-rr`` ``k`` and
            ``epsilon``; ``unary-encoding`` ``p`` and ``q`` (its per-bit probabilities).

    Returns:
        A vectorised δ(ε).
    """
    if name in ("gaussian", "local-gaussian"):
        mu = _positive(parameters, "sensitivity") / _positive(parameters, "sigma")
        return lambda e: gdp_delta(e, mu)  # exactly μ-GDP (Dong, Roth, Su 2019, Thm. 2.7)
    if name in ("laplace", "local-laplace"):
        # in d dimensions, the profile of the pair differing in one coordinate by Δ: the
        # 1-D profile. Spreading the ℓ1 distance over coordinates lowers δ(ε') (checked
        # by simulation in tests/test_identification.py, not proved here).
        if "epsilon" in parameters:
            eps = _positive(parameters, "epsilon")
        else:
            eps = _positive(parameters, "sensitivity") / _positive(parameters, "scale")
        return lambda e: laplace_profile(e, epsilon=eps)
    if name == "randomized-response":
        p = check_in_interval("p", parameters.get("p"), 0.5, 1.0, high_open=True)
        eps = math.log(p) - math.log1p(-p)
        return lambda e: pure_dp_profile(e, epsilon=eps)
    if name == "k-rr":
        k, eps = int(parameters["k"]), _positive(parameters, "epsilon")
        return lambda e: k_rr_profile(e, k=k, epsilon=eps)
    if name == "unary-encoding":
        p = check_in_interval("p", parameters.get("p"), 0.0, 1.0, low_open=True, high_open=True)
        q = check_in_interval("q", parameters.get("q"), 0.0, 1.0, low_open=True, high_open=True)
        # The two bits that differ, (b_D, b_D'), are all the report says about the pair.
        on_d = _two_bits(p, q)
        on_d_prime = _two_bits(q, p)
        return lambda e: discrete_profile(e, p=on_d, q=on_d_prime)
    raise DpauditError(
        f"The 'name' parameter must be one of {{{', '.join(map(repr, IDENTIFIABLE_MECHANISMS))}}}"
        f". Got {name!r} instead."
    )


def identify_mechanism(
    name: str,
    parameters: Mapping[str, Any],
    *,
    rtol: float = 1e-3,
    exact_rtol: float = DEFAULT_EXACT_RTOL,
) -> GDPIdentification:
    """Identify a built-in mechanism from its exact profile (:func:`mechanism_profile`)."""
    profile = mechanism_profile(name, parameters)
    shown = ", ".join(f"{k}={v!r}" for k, v in parameters.items() if k in _SHOWN)
    bracket = gdp_bracket(profile, rtol=rtol)
    return identify_bracket(
        bracket, exact_rtol=exact_rtol, source=f"{name}({shown})", detail={"name": name}
    )


_SHOWN = ("sensitivity", "sigma", "scale", "epsilon", "p", "k", "variant")


def _positive(parameters: Mapping[str, Any], key: str) -> float:
    if key not in parameters:
        raise DpauditError(f"The {key!r} parameter is required.")
    return check_in_interval(key, parameters[key], 0.0, math.inf, low_open=True, high_open=True)


def _two_bits(p_own: float, q_other: float) -> NDArray[np.float64]:
    """Law of (b_D, b_D') when D's bit is reported 1 w.p. ``p_own`` and D''s w.p.
    ``q_other``, independently: outcomes 00, 01, 10, 11."""
    a, b = p_own, q_other
    return np.array([(1 - a) * (1 - b), (1 - a) * b, a * (1 - b), a * b])
