"""Guarantees given as privacy–utility equations: profiles, GDP identification, amplification.

Many mechanisms come with a guarantee of the form "the mechanism run with utility
parameter σ (a noise scale, a number of messages) is (ε, δ)-DP whenever σ ≥ g(ε, δ)",
a privacy–utility equation σ = g(ε, δ). Liu, Sun, Jiang, Kong (NeurIPS 2022) read such
a guarantee as a privacy profile and ask whether it is Gaussian DP:

1. **naive profile**: δ_naive(ε) = inf{δ : g(ε, δ) ≤ σ} (1 where no δ works). The
   mechanism is (ε, δ_naive(ε))-DP for every ε.
2. **refined profile** (their Thm. 2.1): a mechanism that is (ε_i, δ_i)-DP for every i is
   f-DP with f = max_i f_{ε_i, δ_i} (Dong, Roth, Su 2019, Prop. 2.12); the profile of that
   f is never above the naive one, and is below 1 at ε = 0 even when the naive one is not.
   Computed by :func:`dpaudit.theory.refined_profile` on a finite family (any finite
   subfamily of true guarantees gives a valid profile).
3. **identification** (their §3): a profile is μ-GDP for some finite μ iff the GDP
   transform μ_A(ε) (the μ with δ_μ(ε) = δ_A(ε)) stays bounded, the tail value
   μ_t = lim sup_{ε→∞} μ_A(ε) deciding. Each built-in family states its tail in closed
   form; a plug-in's tail is read numerically (μ_A at ε = 2^k, stated as numerical).
4. **measurement**: the μ bracket of the refined profile by
   :func:`dpaudit.theory.gdp_bracket` (rigorous on [0, ε_max], tail beyond stated).
5. **amplification**: a non-GDP guarantee made GDP by post-processing. Liu et al. give a
   post-processing step for this; its exact construction could NOT be read here (only the
   paper's abstract was available), so dpaudit implements one whose proof is written out
   in :func:`amplify_by_mixing`: on a finite output space of size q, release the
   mechanism's output with probability 1 − p and a uniform draw otherwise. This is
   ε*-DP with ε* = ln(1 + q(1 − p)/p), and keeps every (ε, (1 − p)δ) of the original,
   hence a profile that reaches 0 at ε* — GDP.

Built-in families (the paper's running examples):

- ``sgd``: σ = A·√(ln(B/δ))/ε, the shape of Abadi et al. 2016 Thm. 1 (σ ≥ c₂q√(T ln(1/δ))/ε,
  constants folded into A); the paper's example uses A = 2, B = 1, σ = 2. Naive profile
  δ(ε) = min(1, B·exp(−(σε/A)²)); tail μ_t = A/(σ√2) (finite: GDP).
- ``laplace``: the Laplace mechanism of scale b is ε-DP for ε ≥ Δ/b (b = Δ/ε; the paper's
  example b = 2/ε, Δ = 2). Naive profile: 1 below Δ/b, 0 from Δ/b on; refined, the
  randomized-response profile of ε₀ = Δ/b; tail 0 (GDP, as every ε-DP mechanism).
- ``icea``: the invisibility cloak encoder algorithm (Ishai, Kushilevitz, Ostrovsky, Sahai,
  FOCS 2006, summation by splitting each input into m shares shuffled among n parties),
  (ε, δ)-DP when the number of messages m exceeds a logarithmic function of n, ε and δ
  (Balle, Bell, Gascón, Nissim 2019, arXiv:1906.09116: O(log(n/δ)) messages). The exact
  constant and form of the paper's condition could NOT be read here; dpaudit implements
  m ≥ A·ln(n/(ε·δ)) (A a stated constant, default 1), whose naive profile
  δ(ε) = min(1, (n/ε)·e^{−m/A}) falls only like 1/ε: μ_A(ε) → ∞, not GDP, and the
  profile crosses every GDP curve. Its output lives in Z_q (q the field size), so
  :func:`amplify_by_mixing` applies.
- ``pkg.module:function``: a user's g(ε, δ) → σ (non-increasing in δ), inverted by bisection.

Pure functions of numbers: no torch, no I/O (a plug-in is imported by
:func:`dpaudit.plugins.load_plugin`).

References:
    Liu, Sun, Jiang, Kong 2022, "Identification, Amplification and Measurement: A bridge to
    Gaussian Differential Privacy" (NeurIPS 2022; arXiv:2210.09269v1 abstract read; the
    theorem and section numbers cited here follow the request that asked for this module
    and are NOT verified against the paper's text); Dong, Roth, Su 2019 (arXiv:1905.02383),
    Prop. 2.12 and Cor. 2.13; Abadi et al. 2016 (arXiv:1607.00133), Thm. 1; Balle, Bell,
    Gascón, Nissim 2019 (arXiv:1906.09116), abstract.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from dpaudit.errors import DpauditError, check_in_interval
from dpaudit.theory import Profile, gdp_bracket, refined_profile
from dpaudit.theory.identification import GDPIdentification, identify_bracket

__all__ = [
    "BUILTIN_EQUATIONS",
    "AmplifiedGuarantee",
    "EquationIdentification",
    "PrivacyEquation",
    "amplify_by_mixing",
    "equation_from_name",
    "icea_equation",
    "identify_equation",
    "laplace_equation",
    "mu_transform",
    "naive_profile",
    "plugin_equation",
    "refined_equation_profile",
    "sgd_equation",
]

BUILTIN_EQUATIONS = ("sgd", "laplace", "icea")

LogProfile = Callable[[NDArray[np.float64]], NDArray[np.float64]]

#: Smallest δ the bisection of a plug-in's equation searches (ln δ ≥ −690).
_LOG_DELTA_MIN = -690.0


@dataclass(frozen=True)
class PrivacyEquation:
    """A guarantee "(ε, δ)-DP whenever σ ≥ g(ε, δ)" and the σ the mechanism runs with.

    Attributes:
        name: the family ("sgd", "laplace", "icea", or the plug-in's spec).
        sigma: the utility parameter the mechanism uses (noise scale, number of messages).
        g: the equation, σ_required = g(ε, δ) for scalars ε > 0, δ in (0, 1].
        log_naive: ln δ_naive(ε), vectorised (−inf where the profile is 0); the exact
            inverse for built-ins, a bisection for plug-ins.
        tail_mu: the tail value μ_t = lim μ_A(ε) in closed form (inf: not GDP), or None
            when unknown (plug-ins: read numerically by :func:`identify_equation`).
        parameters: the constants, for the record.
        reference: where the equation comes from.
    """

    name: str
    sigma: float
    g: Callable[[float, float], float] = field(repr=False)
    log_naive: LogProfile = field(repr=False)
    tail_mu: float | None = None
    parameters: Mapping[str, float] = field(default_factory=dict)
    reference: str = ""

    def naive(self, eps: ArrayLike) -> NDArray[np.float64]:
        """δ_naive(ε) = min(1, inf{δ : g(ε, δ) ≤ σ}), vectorised."""
        return naive_profile(self, eps)


def sgd_equation(*, sigma: float = 2.0, a: float = 2.0, b: float = 1.0) -> PrivacyEquation:
    """σ = A·√(ln(B/δ))/ε (the paper's "SGD" example: A = 2, B = 1, σ = 2).

    Inverse: δ(ε) = B·exp(−(σε/A)²). As ε → ∞, ln δ_μ(ε) = −ε²/(2μ²) + O(ln ε), so
    μ_A(ε) → A/(σ√2): the tail value is finite and the guarantee is GDP.

    References:
        Abadi et al. 2016 (arXiv:1607.00133), Thm. 1, for the shape; Liu et al. 2022, §2
        (example; constants A = 2, B = 1, σ = 2 as requested, not verified against the paper).
    """
    sigma = _positive("sigma", sigma)
    a, b = _positive("a", a), _positive("b", b)

    def g(eps: float, delta: float) -> float:
        return a * math.sqrt(max(math.log(b / delta), 0.0)) / eps

    def log_naive(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.minimum(math.log(b) - (sigma * eps / a) ** 2, 0.0)

    return PrivacyEquation(
        name="sgd",
        sigma=sigma,
        g=g,
        log_naive=log_naive,
        tail_mu=a / (sigma * math.sqrt(2.0)),
        parameters={"a": a, "b": b},
        reference="sigma = A*sqrt(ln(B/delta))/epsilon (Abadi et al. 2016, Thm. 1 shape)",
    )


def laplace_equation(*, scale: float = 2.0, sensitivity: float = 2.0) -> PrivacyEquation:
    """b = Δ/ε: the Laplace mechanism of scale b is ε-DP for every ε ≥ Δ/b.

    The paper's example is b = 2/ε (Δ = 2). The naive profile is 1 below ε₀ = Δ/b and 0
    from ε₀ on; the refined one is the profile of ε₀-DP (randomized response with
    e^{ε₀}/(1 + e^{ε₀})), whose μ is −2Φ⁻¹(1/(1 + e^{ε₀})) (Liu et al. 2022: every ε-DP
    mechanism is GDP; :func:`dpaudit.theory.mu_from_pure_dp`).
    """
    scale = _positive("scale", scale)
    sensitivity = _positive("sensitivity", sensitivity)
    eps0 = sensitivity / scale

    def g(eps: float, delta: float) -> float:
        return sensitivity / eps

    def log_naive(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        # the guarantee holds from ε₀ = Δ/b on; a relative 1e-12 absorbs the rounding of Δ/b
        return np.where(eps >= eps0 * (1.0 - 1e-12), -np.inf, 0.0)

    return PrivacyEquation(
        name="laplace",
        sigma=scale,
        g=g,
        log_naive=log_naive,
        tail_mu=0.0,
        parameters={"sensitivity": sensitivity, "epsilon0": eps0},
        reference="b = Delta/epsilon (Dwork, McSherry, Nissim, Smith 2006)",
    )


def icea_equation(
    *, messages: float, parties: float, a: float = 1.0, field_size: int | None = None
) -> PrivacyEquation:
    """m ≥ A·ln(n/(ε·δ)): the invisibility cloak encoder algorithm (shuffled summation).

    The implemented form is the one described in the module docstring (the paper's exact
    constant could not be read). Inverse: δ(ε) = (n/ε)·e^{−m/A}, which falls like 1/ε
    while every δ_μ(ε) falls like e^{−ε²/(2μ²)}: μ_A(ε) → ∞, the guarantee is not GDP.

    Args:
        messages: m, the number of messages each party sends.
        parties: n, the number of parties.
        a: the constant A of the condition.
        field_size: q, the size of the group Z_q the sum lives in (for amplification).

    References:
        Ishai, Kushilevitz, Ostrovsky, Sahai 2006 (FOCS), the protocol; Balle, Bell, Gascón,
        Nissim 2019 (arXiv:1906.09116), abstract: (ε, δ)-DP summation with O(log(n/δ))
        messages per party; Liu et al. 2022, Figure 1 (unverified).
    """
    m, n, a = _positive("messages", messages), _positive("parties", parties), _positive("a", a)
    params: dict[str, float] = {"messages": m, "parties": n, "a": a}
    if field_size is not None:
        if int(field_size) < 2:
            raise DpauditError(f"The 'field_size' parameter must be ≥ 2. Got {field_size!r}.")
        params["field_size"] = float(int(field_size))

    def g(eps: float, delta: float) -> float:
        return a * math.log(n / (eps * delta))

    def log_naive(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        with np.errstate(divide="ignore"):
            return np.minimum(math.log(n) - np.log(eps) - m / a, 0.0)

    return PrivacyEquation(
        name="icea",
        sigma=m,
        g=g,
        log_naive=log_naive,
        tail_mu=math.inf,
        parameters=params,
        reference="m >= A*ln(n/(epsilon*delta)) (form implemented; constant unverified)",
    )


def plugin_equation(
    spec: str | Callable[[float, float], float],
    *,
    sigma: float,
    base_dir: str | Path | None = None,
) -> PrivacyEquation:
    """A user's equation ``"pkg.module:function"`` g(ε, δ) → σ, non-increasing in δ.

    The naive profile is found by bisection in ln δ on [−690, 0] (60 halvings), returning
    the end where g(ε, δ) ≤ σ was checked: the profile reported is never below the one the
    equation gives (up to the 2^-60 relative width of the last step, on the safe side).
    """
    sigma = _positive("sigma", sigma)
    if callable(spec):
        fn, name = spec, getattr(spec, "__name__", "equation")
    else:
        from dpaudit.plugins import load_plugin

        fn, name = load_plugin(spec, base_dir=base_dir, what="equation"), spec

    def g(eps: float, delta: float) -> float:
        value = float(fn(float(eps), float(delta)))
        if math.isnan(value):
            raise DpauditError(
                f"The equation {name!r} returned NaN at epsilon={eps:g}, delta={delta:g}; "
                "it must return the sigma the guarantee needs, a number."
            )
        return value

    def log_naive(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        flat = np.asarray(eps, dtype=float).ravel()
        out = np.empty(flat.shape)
        for i, e in enumerate(flat):
            out[i] = _bisect_log_delta(g, float(e), sigma)
        return out.reshape(np.shape(eps))

    return PrivacyEquation(name=name, sigma=sigma, g=g, log_naive=log_naive, tail_mu=None)


def _bisect_log_delta(g: Callable[[float, float], float], eps: float, sigma: float) -> float:
    if eps <= 0.0:
        return 0.0
    if g(eps, 1.0) > sigma:
        return 0.0  # no δ < 1 works: the naive profile is 1
    if g(eps, math.exp(_LOG_DELTA_MIN)) <= sigma:
        return _LOG_DELTA_MIN  # below what is searched; reported at the floor (safe side)
    lo, hi = _LOG_DELTA_MIN, 0.0  # g(lo) > σ ≥ g(hi)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if g(eps, math.exp(mid)) <= sigma:
            hi = mid
        else:
            lo = mid
    return hi


def equation_from_name(
    name: str, parameters: Mapping[str, Any], *, base_dir: str | Path | None = None
) -> PrivacyEquation:
    """Build an equation from a CLI / config name and its parameters.

    ``sgd`` takes ``sigma``, ``a``, ``b``; ``laplace`` ``scale``, ``sensitivity``; ``icea``
    ``messages``, ``parties``, ``a``, ``field_size``; ``pkg.module:function`` ``sigma``.
    """
    params = dict(parameters)
    allowed = {
        "sgd": {"sigma", "a", "b"},
        "laplace": {"scale", "sensitivity"},
        "icea": {"messages", "parties", "a", "field_size"},
    }
    if name in allowed:
        unknown = set(params) - allowed[name]
        if unknown:
            raise DpauditError(
                f"The {name!r} equation takes parameters {sorted(allowed[name])}. Got "
                f"unknown {sorted(unknown)} instead."
            )
        if name == "sgd":
            return sgd_equation(**{k: float(v) for k, v in params.items()})
        if name == "laplace":
            return laplace_equation(**{k: float(v) for k, v in params.items()})
        if "messages" not in params or "parties" not in params:
            raise DpauditError("The 'icea' equation needs 'messages' (m) and 'parties' (n).")
        fs = params.pop("field_size", None)
        return icea_equation(
            **{k: float(v) for k, v in params.items()},
            field_size=None if fs is None else int(fs),
        )
    if ":" in name:
        if set(params) != {"sigma"}:
            raise DpauditError(
                f"A plug-in equation {name!r} takes exactly the parameter 'sigma'. Got "
                f"{sorted(params)} instead."
            )
        return plugin_equation(name, sigma=float(params["sigma"]), base_dir=base_dir)
    raise DpauditError(
        f"The 'equation' parameter must be one of {{{', '.join(map(repr, BUILTIN_EQUATIONS))}}}"
        f" or 'pkg.module:function'. Got {name!r} instead."
    )


def naive_profile(eq: PrivacyEquation, eps: ArrayLike) -> NDArray[np.float64]:
    """δ_naive(ε) of an equation, in [0, 1] (1 at ε = 0: the equations say nothing there)."""
    e = np.asarray(eps, dtype=float)
    if np.any(np.isnan(e)) or np.any(e < 0):
        raise DpauditError("The 'eps' parameter must be ≥ 0, never NaN.")
    out = np.ones(e.shape)
    pos = e > 0
    if np.any(pos):
        out[pos] = np.exp(np.minimum(eq.log_naive(e[pos]), 0.0))
    return out


def default_family_grid(eq: PrivacyEquation, *, points: int = 97) -> NDArray[np.float64]:
    """The (ε_i) at which the naive guarantees are taken for the refinement: uniform up to
    where the naive profile is ≤ 1e-12 (or ε = 64), then geometric to 16× further (at
    most ε = 512)."""
    coarse = np.concatenate([2.0 ** np.arange(-6, 7)])
    d = naive_profile(eq, coarse)
    below = np.nonzero(d <= 1e-12)[0]
    top = float(coarse[below[0]]) if below.size else 64.0
    uniform = np.linspace(0.0, top, points)
    # e^ε of the family's lines must stay finite in double precision (ε < 709)
    tail = np.geomspace(top, min(16.0 * top, 512.0), 17)[1:]
    grid = np.concatenate([uniform, tail])
    if eq.name == "laplace":  # the single guarantee (ε₀, 0) must be in the family
        grid = np.unique(np.concatenate([grid, [eq.parameters["epsilon0"]]]))
    return grid


def refined_equation_profile(
    eq: PrivacyEquation, *, family: ArrayLike | None = None
) -> tuple[Profile, NDArray[np.float64], NDArray[np.float64]]:
    """The refined profile (Liu et al. Thm. 2.1 as cited; Dong, Roth, Su Prop. 2.12) of the
    finite family {(ε_i, δ_naive(ε_i))}.

    Returns:
        (profile callable, family ε_i, family δ_i).
    """
    eps_i = default_family_grid(eq) if family is None else np.asarray(family, dtype=float)
    delta_i = naive_profile(eq, eps_i)
    keep = delta_i < 1.0  # a (ε, 1) guarantee says nothing
    ei, di = eps_i[keep], delta_i[keep]
    if ei.size == 0:
        raise DpauditError(
            f"The equation {eq.name!r} with sigma={eq.sigma:g} gives no (epsilon, delta) "
            "guarantee with delta < 1 on the grid; the profile is 1 everywhere."
        )

    def profile(e: NDArray[np.float64]) -> NDArray[np.float64]:
        # both are valid profiles of the mechanism (the refinement of a finite subfamily,
        # and the naive guarantee at every ε), so their minimum is one too
        out = np.asarray(refined_profile(e, epsilons=ei, deltas=di), dtype=float)
        return np.minimum(out, naive_profile(eq, e))

    return profile, eps_i, delta_i


def _log_gdp_delta(eps: NDArray[np.float64], mu: NDArray[np.float64]) -> NDArray[np.float64]:
    """ln δ_μ(ε) (Dong, Roth, Su 2019, Cor. 2.13), for ε > 0, μ > 0, in log space."""
    a = -eps / mu + mu / 2.0
    b = -eps / mu - mu / 2.0
    la = special.log_ndtr(a)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        diff = np.minimum(eps + special.log_ndtr(b) - la, -1e-300)
        return np.asarray(la + np.log(-np.expm1(diff)), dtype=float)


def mu_transform(eps: ArrayLike, log_delta: ArrayLike) -> NDArray[np.float64]:
    """μ_A(ε): the μ with ln δ_μ(ε) = ln δ_A(ε), by bisection in ln μ (log space, so the
    tail far beyond double-precision δ is reachable). 0 where δ_A = 0; inf where
    δ_A(ε) ≥ 1 or beyond μ = 1e6.
    """
    e = np.asarray(eps, dtype=float).ravel()
    ld = np.asarray(log_delta, dtype=float).ravel()
    e, ld = np.broadcast_arrays(e, ld)
    out = np.zeros(e.shape)
    out[ld >= 0.0] = math.inf
    todo = (e > 0) & np.isfinite(ld) & (ld < 0.0)
    if np.any(todo):
        ee, target = e[todo], ld[todo]
        lo = np.full(ee.shape, math.log(1e-8))
        hi = np.full(ee.shape, math.log(1e6))
        beyond = _log_gdp_delta(ee, np.exp(hi)) < target
        for _ in range(80):
            mid = 0.5 * (lo + hi)
            above = _log_gdp_delta(ee, np.exp(mid)) >= target
            hi = np.where(above, mid, hi)
            lo = np.where(above, lo, mid)
        out[todo] = np.where(beyond, math.inf, np.exp(hi))
    return out


@dataclass(frozen=True)
class EquationIdentification:
    """An equation's guarantee read as GDP (Liu et al. 2022, §§2–4 as cited).

    Attributes:
        equation: what was identified.
        gdp: the tail criterion: μ_t finite (closed form for built-ins; numerical for
            plug-ins, stated in ``tail_source``).
        tail_mu: μ_t (inf when not GDP).
        tail_source: "closed form" or "numerical (μ_A at ε = 2^k, ...)".
        tail_epsilons, tail_mus: μ_A of the naive profile at growing ε (log space).
        refined: the measurement of the refined profile on [0, ε_max] (a
            :class:`~dpaudit.theory.identification.GDPIdentification`); when ``gdp`` is False
            its bracket holds only up to ``refined.bracket.epsilon_max``.
        family_epsilons, family_deltas: the naive family refined.
    """

    equation: PrivacyEquation
    gdp: bool
    tail_mu: float
    tail_source: str
    tail_epsilons: tuple[float, ...]
    tail_mus: tuple[float, ...]
    refined: GDPIdentification
    family_epsilons: tuple[float, ...] = field(repr=False)
    family_deltas: tuple[float, ...] = field(repr=False)

    @property
    def mu_bracket(self) -> tuple[float, float]:
        """(low, high) of the optimal μ of the refined profile (high = inf if not GDP)."""
        b = self.refined.bracket
        return (b.low, b.high if self.gdp else math.inf)

    @property
    def summary(self) -> str:
        """One line in words."""
        eq, b = self.equation, self.refined.bracket
        head = f"{eq.name} (sigma={eq.sigma:g}): "
        if not self.gdp:
            return head + (
                f"not GDP: mu_A(eps) grows without bound ({self.tail_source}), so the "
                "profile crosses every GDP curve; on eps <= "
                f"{b.epsilon_max:.3g} it needs mu >= {b.low:.4g}"
            )
        low, high = self.mu_bracket
        return head + (
            f"GDP (tail value mu_t = {self.tail_mu:.4g}, {self.tail_source}); refined "
            f"profile mu-GDP for mu >= {high:.4g}, not for mu < {low:.4g}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        low, high = self.mu_bracket
        return {
            "equation": self.equation.name,
            "sigma": self.equation.sigma,
            "parameters": dict(self.equation.parameters),
            "gdp": self.gdp,
            "tail_mu": self.tail_mu if math.isfinite(self.tail_mu) else None,
            "tail_source": self.tail_source,
            "mu_low": low,
            "mu_high": high if math.isfinite(high) else None,
            "epsilon_max": self.refined.bracket.epsilon_max,
            "tail_delta": self.refined.bracket.tail_delta,
            "summary": self.summary,
        }


def _numerical_tail(eq: PrivacyEquation) -> tuple[NDArray, NDArray, float, bool]:
    """μ_A of the naive profile at ε = 2^(k/2) up to 4096, read where ln δ is resolved
    (above the bisection's floor, where δ is only known to be below e^-690); GDP iff μ_A
    stops rising over the last three resolved points (numerical, stated as such)."""
    eps = 2.0 ** np.arange(0.0, 12.5, 0.5)
    log_d = eq.log_naive(eps)
    resolved = log_d > _LOG_DELTA_MIN + 1.0
    mus = mu_transform(eps, log_d)
    eps, mus = eps[resolved], mus[resolved]
    if mus.size < 3 or not np.all(np.isfinite(mus[-3:])):
        return eps, mus, math.inf, False
    last = mus[-3:]
    # rising by more than 1 % at each of the last two steps: unbounded (numerical)
    rising = bool(last[2] > last[1] * 1.01 and last[1] > last[0] * 1.01)
    return eps, mus, (math.inf if rising else float(last[-1])), not rising


def identify_equation(
    eq: PrivacyEquation, *, family: ArrayLike | None = None, rtol: float = 1e-3
) -> EquationIdentification:
    """Identify an equation's guarantee: tail criterion, refined profile, μ bracket.

    Args:
        eq: the equation.
        family: the ε_i whose naive guarantees are refined (default
            :func:`default_family_grid`).
        rtol: the bracket's target relative margin (:func:`dpaudit.theory.gdp_bracket`).
    """
    eps_t = 2.0 ** np.arange(0, 13, dtype=float)
    if eq.tail_mu is None:
        eps_t, mus_t, tail, gdp = _numerical_tail(eq)
        source = "numerical: mu_A of the naive profile at eps = 2^(k/2) <= 4096, where resolved"
    else:
        mus_t = mu_transform(eps_t, eq.log_naive(eps_t))
        tail, gdp, source = eq.tail_mu, math.isfinite(eq.tail_mu), "closed form"
    profile, ei, di = refined_equation_profile(eq, family=family)
    eps_max = float(ei[-1])
    bracket = gdp_bracket(profile, epsilon_max=eps_max, rtol=rtol)
    refined = identify_bracket(bracket, source=f"{eq.name} refined profile")
    return EquationIdentification(
        equation=eq,
        gdp=gdp,
        tail_mu=tail,
        tail_source=source,
        tail_epsilons=tuple(float(x) for x in eps_t),
        tail_mus=tuple(float(x) for x in mus_t),
        refined=refined,
        family_epsilons=tuple(float(x) for x in ei),
        family_deltas=tuple(float(x) for x in di),
    )


@dataclass(frozen=True)
class AmplifiedGuarantee:
    """The guarantee of "release the output w.p. 1 − p, a uniform draw on q outcomes else".

    Attributes:
        epsilon_star: ln(1 + q(1 − p)/p): the post-processed mechanism is ε*-DP.
        mix: p.
        field_size: q.
        identification: the refined profile of {(ε_i, (1 − p)δ_i)} ∪ {(ε*, 0)},
            identified; its bracket holds for every ε (the profile is 0 from ε* on).
        mu_pure: −2Φ⁻¹(1/(1 + e^{ε*})), the μ of ε*-DP alone (never below the bracket).
    """

    epsilon_star: float
    mix: float
    field_size: int
    identification: GDPIdentification
    mu_pure: float
    profile: Profile = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        b = self.identification.bracket
        return {
            "epsilon_star": self.epsilon_star,
            "mix": self.mix,
            "field_size": self.field_size,
            "mu_low": b.low,
            "mu_high": b.high,
            "mu_pure": self.mu_pure,
            "complete": self.identification.complete,
        }


def amplify_by_mixing(
    eq: PrivacyEquation,
    *,
    mix: float,
    field_size: int | None = None,
    family: ArrayLike | None = None,
    rtol: float = 1e-3,
) -> AmplifiedGuarantee:
    """Post-process a mechanism with q possible outputs into a GDP one.

    M'(D) = A(D) with probability 1 − p, else a uniform draw on the q outputs (independent
    of D: a post-processing of A's output). Proof of the guarantee, for any neighbours
    D, D' and output y: M'(D)(y) = (1 − p)A(D)(y) + p/q ≤ (1 − p) + p/q and
    M'(D')(y) ≥ p/q, so M'(D)(y)/M'(D')(y) ≤ 1 + q(1 − p)/p: ε*-DP. And for any set S, if
    A(D)(S) ≤ e^ε A(D')(S) + δ then M'(D)(S) ≤ e^ε M'(D')(S) + (1 − p)δ (the uniform part
    is common and e^ε ≥ 1). So M' satisfies (ε_i, (1 − p)δ_i) for each of A's guarantees
    and (ε*, 0); its refined profile is 0 beyond ε*, hence μ-GDP with a finite μ, measured
    for every ε. The ε* is attained (A(D), A(D') point masses on different outputs), so
    the step cannot be sharpened without knowing A.

    Args:
        eq: A's guarantee (its output space must be finite, of size q).
        mix: p in (0, 1), the probability of the uniform draw (utility cost: the output is
            replaced with that probability).
        field_size: q; default the equation's ``field_size`` parameter (ICEA's Z_q).
        family, rtol: as in :func:`identify_equation`.
    """
    p = check_in_interval("mix", mix, 0.0, 1.0, low_open=True, high_open=True)
    q_raw = field_size if field_size is not None else eq.parameters.get("field_size")
    if q_raw is None:
        raise DpauditError(
            "Amplification by mixing needs the size q of the finite output space: pass "
            "'field_size' (for ICEA, the size of the group Z_q the sum lives in)."
        )
    q = int(q_raw)
    if q < 2:
        raise DpauditError(f"The 'field_size' parameter must be ≥ 2. Got {q_raw!r} instead.")
    eps_star = math.log1p(q * (1.0 - p) / p)
    eps_i = default_family_grid(eq) if family is None else np.asarray(family, dtype=float)
    delta_i = (1.0 - p) * naive_profile(eq, eps_i)
    keep = eps_i < eps_star
    ei = np.concatenate([eps_i[keep], [eps_star]])
    di = np.concatenate([delta_i[keep], [0.0]])

    def profile(e: NDArray[np.float64]) -> NDArray[np.float64]:
        # (ε*, 0) is one of the guarantees: δ = 0 from ε* on exactly (the vertex search of
        # refined_profile leaves ~1e-17 of rounding there)
        out = np.asarray(refined_profile(e, epsilons=ei, deltas=di), dtype=float)
        out = np.minimum(out, (1.0 - p) * naive_profile(eq, e))
        return np.where(np.asarray(e) >= eps_star, 0.0, out)

    bracket = gdp_bracket(profile, epsilon_max=eps_star, rtol=rtol)
    ident = identify_bracket(bracket, source=f"{eq.name} amplified (p={p:g}, q={q})")
    mu_pure = float(-2.0 * special.ndtri(1.0 / (1.0 + math.exp(eps_star))))
    return AmplifiedGuarantee(
        epsilon_star=eps_star,
        mix=p,
        field_size=q,
        identification=ident,
        mu_pure=mu_pure,
        profile=profile,
    )


def _positive(name: str, value: Any) -> float:
    return check_in_interval(name, value, 0.0, math.inf, low_open=True, high_open=True)
