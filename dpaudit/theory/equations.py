"""Guarantees given as privacy–utility equations: profiles, GDP identification, amplification.

Many mechanisms come with a guarantee of the form "the mechanism run with utility
parameter σ (a noise scale, a number of messages) is (ε, δ)-DP whenever σ ≥ g(ε, δ)",
a privacy–utility equation σ = g(ε, δ). Liu, Sun, Jiang, Kong (NeurIPS 2022,
arXiv:2210.09269v1) read such a guarantee as a privacy profile and ask whether it is
Gaussian DP. Numbered results below are theirs, read from the paper's text (§§1–3):

1. **naive profile** (§2): δ_naive(ε) = min{δ : σ = g(ε, δ)} (1 where no δ < 1 works),
   the inversion of the equation.
2. **partial order** (Thm. 2.1): for ε₀ ≥ 0 and 0 ≤ δ₀ < 1, (ε₀, δ₀)-DP implies
   (ε, δ)-DP iff δ ≥ δ₀ + (1 − δ₀)(e^{ε₀} − e^ε)₊/(1 + e^{ε₀}) (:func:`implied_delta`).
3. **refined profile** (§2, after Thm. 2.1): the smallest δ implied by any one guarantee
   (ε₀, δ_naive(ε₀)) of the equation, δ_ref(ε) = min_{ε₀} δ₀ + (1 − δ₀)(e^{ε₀} − e^ε)₊
   /(1 + e^{ε₀}) (:func:`theorem21_profile`; the minimum over a dense finite family of ε₀,
   each term a true guarantee, so never below the paper's profile). Below 1 at ε = 0 even
   where the naive profile is 1.
4. **identification** (Thm. 3.3): with μ_t = √(lim_{ε→∞} ε²/(−2 ln δ_A(ε))), the
   mechanism is GDP iff μ_t < ∞, and no μ below μ_t is valid. Each built-in family states
   μ_t in closed form; a plug-in's is read numerically (μ_A at ε = 2^(k/2), stated so).
5. **measurement**: the μ bracket of the refined profile by
   :func:`dpaudit.theory.gdp_bracket` (δ_μ of Thm. 3.1, i.e. Dong, Roth, Su 2019,
   Cor. 2.13), rigorous on [0, ε_max] where the naive family reaches 1e-12; from there
   to ε = 4096 a cell bound in log space (``tail_high``); beyond, the closed-form μ_t.
6. **amplification**: a non-GDP guarantee made GDP by post-processing. The paper's own
   procedure lies beyond the pages read (§§1–3), so dpaudit implements one whose proof is
   written out in :func:`amplify_by_mixing`: on a finite output space of size q, release
   the output with probability 1 − p and a uniform draw otherwise.

Built-in families, the paper's three examples (§2) with its parameters:

- ``laplace``: the Laplace mechanism of scale b and sensitivity Δ, whose exact profile the
  paper quotes as Theorem 3 of Balle et al. 2018: δ(ε) = max(1 − exp{ε/2 − Δ/(2b)}, 0).
  As an equation: b = g(ε, δ) = Δ/(ε + 2 ln(1/(1 − δ))) (b = Δ/ε at δ = 0). The profile
  depends on θ = Δ/b alone; dpaudit's example is θ = 1 (b = 2, Δ = 2: the paper's
  "b = 2/ε" at ε = 1, the symbol after "/" lost in extraction). Tail μ_t = 0 (GDP).
- ``sgd``: σ = A·ε⁻¹·√(ln(B/δ)) (noisy SGD and its variants); the paper's example
  A = 2, B = 1, σ = 2. Naive profile δ(ε) = min(1, B·exp(−(σε/A)²)); μ_t = A/(σ√2).
- ``icea``: the invisibility cloak encoder algorithm (Ishai, Kushilevitz, Ostrovsky,
  Sahai, FOCS 2006), (ε, δ)-DP if m > 10·log(n/(ε·δ)) for n users sending m messages
  (the paper's reference [20]; the "ε" of the denominator was lost in extraction); the
  example m = 20, n = 4. With log = ln, δ_naive(ε) = min(1, (n/ε)·e^{−m/10}), which
  falls like 1/ε: μ_t = ∞, not GDP. The base of the log is a parameter (``log_base``).
- ``pkg.module:function``: a user's g(ε, δ) → σ (non-increasing in δ), inverted by bisection.

Pure functions of numbers: no torch, no I/O (a plug-in is imported by
:func:`dpaudit.plugins.load_plugin`).

References:
    Liu, Sun, Jiang, Kong 2022, "Identification, Amplification and Measurement: A bridge to
    Gaussian Differential Privacy" (NeurIPS 2022; arXiv:2210.09269v1), §2 (examples,
    Thm. 2.1 and the refined profile), §3 (Thm. 3.1, Thm. 3.3, Figure 1); Dong, Roth, Su
    2019 (arXiv:1905.02383), Prop. 2.12 and Cor. 2.13; the Laplace profile as Liu et al.
    quote it from their reference [3], Thm. 3 (Balle et al. 2018; dpaudit.theory derives
    the same closed form as the conjugate of the Laplace trade-off curve).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from dpaudit.errors import DpauditError, check_in_interval
from dpaudit.theory import Profile, gdp_bracket, gdp_delta, refined_profile
from dpaudit.theory.identification import GDPIdentification, identify_bracket

__all__ = [
    "BUILTIN_EQUATIONS",
    "AmplifiedGuarantee",
    "EquationIdentification",
    "GDPComparison",
    "PrivacyEquation",
    "amplify_by_mixing",
    "equation_from_name",
    "gdp_comparison",
    "gdp_comparisons",
    "icea_equation",
    "identify_equation",
    "implied_delta",
    "laplace_equation",
    "mu_transform",
    "naive_profile",
    "plugin_equation",
    "refined_equation_profile",
    "sgd_equation",
    "theorem21_profile",
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
    """σ = A·ε⁻¹·√(ln(B/δ)) (the paper's "SGD" example: A = 2, B = 1, σ = 2).

    Inverse: δ(ε) = B·exp(−(σε/A)²). Thm. 3.3's tail value is
    μ_t = √(lim ε²/(−2 ln δ(ε))) = √(A²/(2σ²)) = A/(σ√2): finite, so the guarantee is GDP
    (1/√2 for the example).

    References:
        Liu et al. 2022, §2 (the family σ = A·ε⁻¹·√(log(B/δ)): noisy SGD and its variants,
        goodness of fit, one-shot spectral and Laplace algorithms; the example's constants)
        and Thm. 3.3; Abadi et al. 2016 (arXiv:1607.00133), Thm. 1, one member.
    """
    sigma = _positive("sigma", sigma)
    a, b = _positive("a", a), _positive("b", b)

    def g(eps: float, delta: float) -> float:
        return a * math.sqrt(max(math.log(b / delta), 0.0)) / eps

    def log_naive(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        # at ε = 0 the equation asks for σ = ∞ (the paper: "(0, δ) cannot be achieved")
        return np.where(eps > 0, np.minimum(math.log(b) - (sigma * eps / a) ** 2, 0.0), 0.0)

    return PrivacyEquation(
        name="sgd",
        sigma=sigma,
        g=g,
        log_naive=log_naive,
        tail_mu=a / (sigma * math.sqrt(2.0)),
        parameters={"a": a, "b": b},
        reference="sigma = A*sqrt(ln(B/delta))/epsilon (Liu et al. 2022, Sec. 2)",
    )


def laplace_equation(*, scale: float = 2.0, sensitivity: float = 2.0) -> PrivacyEquation:
    """The Laplace mechanism of scale b, sensitivity Δ, by its exact privacy profile.

    δ(ε) = max(1 − exp{ε/2 − Δ/(2b)}, 0), the profile Liu et al. (§3) quote from Balle et
    al. 2018, Thm. 3; as an equation, b = Δ/(ε + 2 ln(1/(1 − δ))), which is b = Δ/ε at
    δ = 0. The profile is exact, so Thm. 2.1 cannot refine it (the refined profile is the
    profile). It reaches 0 at θ = Δ/b: μ_t = 0 and the mechanism is GDP. The paper's
    example reads "b = 2/ε" with a symbol lost in extraction; the default θ = 1 (b = 2,
    Δ = 2) is one reading; the paper's Figure 1 statement about it (below 2-GDP, crossing
    1-GDP) holds for every θ in (0.9655, 2.2957), where its optimal μ runs from 1 to 2.

    References:
        Liu et al. 2022, §2 (example) and §3 (the profile, quoted from their reference [3],
        Thm. 3); :func:`dpaudit.theory.laplace_profile` (the same closed form).
    """
    scale = _positive("scale", scale)
    sensitivity = _positive("sensitivity", sensitivity)
    theta = sensitivity / scale

    def g(eps: float, delta: float) -> float:
        return sensitivity / (eps - 2.0 * math.log1p(-delta)) if delta < 1.0 else 0.0

    def log_naive(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        # ln(1 − e^{(ε − θ)/2}) below θ, −inf (δ = 0) from θ on
        with np.errstate(divide="ignore"):
            return np.log(-np.expm1(np.minimum(eps - theta, 0.0) / 2.0))

    return PrivacyEquation(
        name="laplace",
        sigma=scale,
        g=g,
        log_naive=log_naive,
        tail_mu=0.0,
        parameters={"sensitivity": sensitivity, "theta": theta},
        reference="delta(eps) = max(1 - exp(eps/2 - Delta/(2b)), 0) (Balle et al. 2018, Thm. 3)",
    )


def icea_equation(
    *,
    messages: float = 20.0,
    parties: float = 4.0,
    a: float = 10.0,
    log_base: float = math.e,
    field_size: int | None = None,
) -> PrivacyEquation:
    """m > A·log(n/(ε·δ)): the invisibility cloak encoder algorithm (ICEA).

    The paper's condition is m > 10·log(n/(εδ)) with the example m = 20, n = 4. Inverse:
    δ(ε) = (n/ε)·base^{−m/A}, which falls like 1/ε while every δ_μ(ε) falls like
    e^{−ε²/(2μ²)}: Thm. 3.3's μ_t = √(lim ε²/(−2 ln δ(ε))) is ∞, not GDP, whatever A,
    m, n and the base of the log.

    Args:
        messages: m, the number of messages each user sends.
        parties: n, the number of users.
        a: the constant of the condition (10 in the paper).
        log_base: the base of the log (the paper writes "log"; natural by default).
        field_size: q, the size of the group Z_q the sum lives in (for amplification).

    References:
        Liu et al. 2022, §2 (the condition, from their reference [20], and the example);
        Ishai, Kushilevitz, Ostrovsky, Sahai 2006 (FOCS), the protocol.
    """
    m, n, a = _positive("messages", messages), _positive("parties", parties), _positive("a", a)
    base = check_in_interval("log_base", log_base, 1.0, math.inf, low_open=True, high_open=True)
    params: dict[str, float] = {"messages": m, "parties": n, "a": a, "log_base": base}
    if field_size is not None:
        if int(field_size) < 2:
            raise DpauditError(f"The 'field_size' parameter must be ≥ 2. Got {field_size!r}.")
        params["field_size"] = float(int(field_size))
    log_b = math.log(base)

    def g(eps: float, delta: float) -> float:
        return a * math.log(n / (eps * delta)) / log_b

    def log_naive(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        with np.errstate(divide="ignore"):
            return np.minimum(math.log(n) - np.log(eps) - (m / a) * log_b, 0.0)

    return PrivacyEquation(
        name="icea",
        sigma=m,
        g=g,
        log_naive=log_naive,
        tail_mu=math.inf,
        parameters=params,
        reference="m > A*log(n/(epsilon*delta)), A = 10 (Liu et al. 2022, Sec. 2)",
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
    ``messages``, ``parties``, ``a``, ``log_base``, ``field_size``; ``pkg.module:function``
    ``sigma``. Omitted parameters take the paper's example values.
    """
    params = dict(parameters)
    allowed = {
        "sgd": {"sigma", "a", "b"},
        "laplace": {"scale", "sensitivity"},
        "icea": {"messages", "parties", "a", "log_base", "field_size"},
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
    """δ_naive(ε) of an equation, in [0, 1]: 1 at ε = 0 for an equation (which asks for
    σ = ∞ there), the exact value for the Laplace mechanism's profile."""
    e = np.asarray(eps, dtype=float)
    if np.any(np.isnan(e)) or np.any(e < 0):
        raise DpauditError("The 'eps' parameter must be ≥ 0, never NaN.")
    return np.asarray(np.exp(np.minimum(eq.log_naive(e), 0.0)), dtype=float)


def implied_delta(eps: ArrayLike, *, epsilon0: ArrayLike, delta0: ArrayLike) -> NDArray[np.float64]:
    """The smallest δ such that (ε₀, δ₀)-DP implies (ε, δ)-DP (Liu et al. 2022, Thm. 2.1).

    δ = δ₀ + (1 − δ₀)(e^{ε₀} − e^ε)₊/(1 + e^{ε₀}), vectorised by broadcasting. At
    ε ≥ ε₀ it is δ₀; at ε = 0 with δ₀ = 0 it is tanh(ε₀/2), the total variation of
    ε₀-randomized response. Computed as (1 − e^{ε − ε₀})₊/(1 + e^{−ε₀}), finite for any ε₀.

    Args:
        eps: ε ≥ 0.
        epsilon0: ε₀ ≥ 0 of the guarantee that holds.
        delta0: δ₀ in [0, 1) of the guarantee that holds.

    Raises:
        DpauditError: for a negative or NaN ε or ε₀, or δ₀ outside [0, 1).
    """
    e = np.asarray(eps, dtype=float)
    e0 = np.asarray(epsilon0, dtype=float)
    d0 = np.asarray(delta0, dtype=float)
    for name, arr in (("eps", e), ("epsilon0", e0)):
        if np.any(np.isnan(arr)) or np.any(arr < 0):
            raise DpauditError(f"The {name!r} parameter must be ≥ 0, never NaN.")
    if np.any(np.isnan(d0)) or np.any((d0 < 0) | (d0 >= 1)):
        raise DpauditError(f"The 'delta0' parameter must be in [0, 1). Got {delta0!r} instead.")
    share = -np.expm1(np.minimum(e - e0, 0.0)) / (1.0 + np.exp(-e0))
    return np.asarray(d0 + (1.0 - d0) * share, dtype=float)


def theorem21_profile(
    eps: ArrayLike, *, epsilons: ArrayLike, deltas: ArrayLike
) -> NDArray[np.float64]:
    """The refined profile of a family of guarantees {(ε_i, δ_i)}: at each ε, the smallest
    δ that one of them implies by Thm. 2.1 (Liu et al. 2022, §2, the refined profile).

    Guarantees with δ_i ≥ 1 say nothing and are skipped (1 if none is left). Evaluated
    in blocks of ε so that memory stays near 16 MB whatever the family's size.
    """
    e = np.asarray(eps, dtype=float)
    ei = np.asarray(epsilons, dtype=float).ravel()
    di = np.asarray(deltas, dtype=float).ravel()
    if ei.shape != di.shape:
        raise DpauditError(
            "The 'epsilons' and 'deltas' parameters must be of equal length. "
            f"Got {ei.size} and {di.size} instead."
        )
    keep = di < 1.0
    ei, di = ei[keep], di[keep]
    flat = e.ravel()
    out = np.ones(flat.shape)
    if ei.size:
        step = max(1, 2_000_000 // ei.size)
        for start in range(0, flat.size, step):
            block = flat[start : start + step, None]
            out[start : start + step] = implied_delta(block, epsilon0=ei, delta0=di).min(axis=1)
    return out.reshape(e.shape)


def default_family_grid(eq: PrivacyEquation, *, points: int = 2001) -> NDArray[np.float64]:
    """The (ε_i) at which the naive guarantees are taken for the refinement: uniform up to
    where the naive profile is ≤ 1e-12 (or ε = 64), then geometric to 16× further (at
    most ε = 512). The Laplace mechanism's θ = Δ/b, where its profile reaches 0, is added."""
    coarse = 2.0 ** np.arange(-6, 7)
    d = naive_profile(eq, coarse)
    below = np.nonzero(d <= 1e-12)[0]
    top = float(coarse[below[0]]) if below.size else 64.0
    uniform = np.linspace(0.0, top, points)
    # e^ε of the family's lines must stay finite in double precision (ε < 709)
    tail = np.geomspace(top, min(16.0 * top, 512.0), 17)[1:]
    grid = np.concatenate([uniform, tail])
    if "theta" in eq.parameters:  # the guarantee (θ, 0) must be in the family
        grid = np.unique(np.concatenate([grid, [eq.parameters["theta"]]]))
    return grid


def refined_equation_profile(
    eq: PrivacyEquation, *, family: ArrayLike | None = None
) -> tuple[Profile, NDArray[np.float64], NDArray[np.float64]]:
    """The refined profile of Liu et al. 2022 (§2, by Thm. 2.1) of the family
    {(ε_i, δ_naive(ε_i))}, taken at least as low as the naive profile at every ε.

    The paper's refined profile minimises over every ε₀ ≥ 0; a finite family gives a
    profile never below it (each term is a true guarantee), and the default family
    (:func:`default_family_grid`, 2,001 points) comes within about 1e-5 of it on the
    examples (tests/test_equations.py compares it with scipy's minimiser).

    Returns:
        (profile callable, family ε_i, family δ_i).
    """
    eps_i = default_family_grid(eq) if family is None else np.asarray(family, dtype=float)
    delta_i = naive_profile(eq, eps_i)
    if not np.any(delta_i < 1.0):  # a (ε, 1) guarantee says nothing
        raise DpauditError(
            f"The equation {eq.name!r} with sigma={eq.sigma:g} gives no (epsilon, delta) "
            "guarantee with delta < 1 on the grid; the profile is 1 everywhere."
        )

    def profile(e: NDArray[np.float64]) -> NDArray[np.float64]:
        # at ε itself the naive guarantee holds; the family's implications may go lower
        out = theorem21_profile(e, epsilons=eps_i, deltas=delta_i)
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
    """An equation's guarantee read as GDP (Liu et al. 2022, §2 and Thm. 3.3).

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
        tail_high: a μ that dominates the naive (hence the refined) profile on
            [ε_max, 4096], from cells of a geometric grid in log space (inf when none
            below 1e6 does; 0 when ε_max ≥ 4096). Beyond 4096 only μ_t speaks.
        family_epsilons, family_deltas: the naive family refined.
    """

    equation: PrivacyEquation
    gdp: bool
    tail_mu: float
    tail_source: str
    tail_epsilons: tuple[float, ...]
    tail_mus: tuple[float, ...]
    refined: GDPIdentification
    tail_high: float = 0.0
    family_epsilons: tuple[float, ...] = field(repr=False, default=())
    family_deltas: tuple[float, ...] = field(repr=False, default=())

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
                "profile rises above every GDP curve; on eps <= "
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
            "tail_high": self.tail_high if math.isfinite(self.tail_high) else None,
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


#: How far :func:`_tail_cell_bound` checks the tail, in log space.
_TAIL_EPS_MAX = 4096.0


def _tail_cell_bound(eq: PrivacyEquation, eps_max: float) -> float:
    """A μ dominating the naive profile on [ε_max, 4096]: on a cell [ε_k, ε_{k+1}],
    δ_A(ε) ≤ δ_A(ε_k) and δ_μ(ε) ≥ δ_μ(ε_{k+1}) (both non-increasing), so the μ solving
    δ_μ(ε_{k+1}) = δ_A(ε_k) dominates the cell; the largest over cells of ratio 2^(1/16),
    computed in log space (:func:`mu_transform`) where δ is far below 1e-308."""
    if eps_max >= _TAIL_EPS_MAX:
        return 0.0
    k = max(2, math.ceil(16 * math.log2(_TAIL_EPS_MAX / max(eps_max, 1e-3))) + 1)
    grid = np.geomspace(max(eps_max, 1e-3), _TAIL_EPS_MAX, k)
    cells = mu_transform(grid[1:], eq.log_naive(grid[:-1]))
    return float(cells.max())


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
    # the bracket stops where the naive family reaches 1e-12; from there on the tail's
    # cells are bounded in log space (_tail_cell_bound), where δ far below 1e-308 (and
    # a plug-in's bisection floor, e^-690) is still told apart from 0
    small = np.nonzero(di <= 1e-12)[0]
    eps_max = float(ei[small[0]] if small.size else ei[-1])
    bracket = gdp_bracket(profile, epsilon_max=eps_max, rtol=rtol)
    refined = identify_bracket(bracket, source=f"{eq.name} refined profile")
    return EquationIdentification(
        tail_high=_tail_cell_bound(eq, eps_max),
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
    # the joint f-DP refinement compares every pair of lines: a coarser family than
    # the single-guarantee refinement's keeps that to ~50,000 vertices
    eps_i = (
        default_family_grid(eq, points=97) if family is None else np.asarray(family, dtype=float)
    )
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


@dataclass(frozen=True)
class GDPComparison:
    """Where an equation's refined profile stands against the μ-GDP profile δ_μ.

    Attributes:
        equation: the family's name.
        mu: the μ of the GDP curve.
        above_at: the smallest ε of the grid where δ_ref(ε) > δ_μ(ε) (a witness that the
            guarantee is not μ-GDP), or None.
        below_at: the smallest ε of the grid where δ_ref(ε) < δ_μ(ε), or None.
        dominated: δ_ref ≤ δ_μ at every ε: the measured bracket's top and the tail's cell
            bound are ≤ μ (rigorous up to ε = 4096) and the closed-form μ_t is < μ.
    """

    equation: str
    mu: float
    above_at: float | None
    below_at: float | None
    dominated: bool

    @property
    def relation(self) -> str:
        """ "below" (μ-GDP), "crosses" (above at some ε, below at another), "above" (above
        at every ε of the grid where either differs), or "touches"."""
        if self.dominated:
            return "below"
        if self.above_at is not None:
            return "crosses" if self.below_at is not None else "above"
        return "touches"


def gdp_comparison(
    ident: EquationIdentification, mu: float, *, epsilons: ArrayLike | None = None
) -> GDPComparison:
    """Compare an identified equation's refined profile with δ_μ (Liu et al. 2022, Fig. 1).

    Args:
        ident: the identification (:func:`identify_equation`).
        mu: μ > 0.
        epsilons: where to look for the witnesses (default 4,001 points on [0, 40]);
            a witness is exact at its ε, beyond 1e-12 of rounding.
    """
    return gdp_comparisons(ident, [mu], epsilons=epsilons)[0]


def gdp_comparisons(
    ident: EquationIdentification, mus: Sequence[float], *, epsilons: ArrayLike | None = None
) -> tuple[GDPComparison, ...]:
    """:func:`gdp_comparison` for several μ, the refined profile evaluated once."""
    checked = [_positive("mu", mu) for mu in mus]
    eps = np.asarray(np.linspace(0.0, 40.0, 4001) if epsilons is None else epsilons, dtype=float)
    family = np.asarray(ident.family_epsilons) if ident.family_epsilons else None
    profile, _, _ = refined_equation_profile(ident.equation, family=family)
    d = np.asarray(profile(eps), dtype=float)
    out = []
    for mu in checked:
        g = np.asarray(gdp_delta(eps, mu), dtype=float)
        above = np.nonzero(d > g + 1e-12)[0]
        below = np.nonzero(d < g - 1e-12)[0]
        dominated = bool(
            ident.gdp
            and ident.tail_mu < mu
            and ident.refined.bracket.high <= mu
            and ident.tail_high <= mu
            and above.size == 0
        )
        out.append(
            GDPComparison(
                equation=ident.equation.name,
                mu=mu,
                above_at=float(eps[above[0]]) if above.size else None,
                below_at=float(eps[below[0]]) if below.size else None,
                dominated=dominated,
            )
        )
    return tuple(out)
