"""The f-DP analysis of a one-run audit: test a whole trade-off curve on one run's counts.

A one-run audit (m canaries, each included by an independent fair coin; r guesses, v of
them correct) is usually read through (ε, δ)-DP (:func:`dpaudit.bounds.one_run_p_value`).
Mahloujifar, Melis and Chaudhuri test a claimed trade-off function f instead: if the
procedure is f-DP, a recursion on f bounds how likely v or more correct guesses are. Here:

- :func:`one_run_fdp_test`: is the claim "f-DP" rejected at level 1 − c by (m, r, v)?
  Also the p-value of the claim. Any f (a callable α ↦ β) can be tested.
- :func:`one_run_mu_lower_bound`: the largest μ for which μ-GDP is rejected, a
  :class:`~dpaudit.bounds.MuBound` labelled ``"rigorous-one-run"``.
- :func:`one_run_mu_ladder_bound`: the same from scores and coins, the number of guesses
  chosen by a union bound over a ladder fixed in advance (:func:`guess_ladder`), and
  optionally against a μ bracket's tail (:func:`gdp_tail_power_inverse`).
- :func:`one_run_bounds`: Steinke et al.'s ε and this μ under ONE share 1 − c of a
  verdict's budget, each at (1 − c)/2 (Bonferroni), so that a violation of either is a
  violation at level 1 − c; :func:`stronger` names the one that decides.

The test, for a claim f, at level τ = 1 − c
-------------------------------------------
Write f̄(α) = 1 − f(α) (the most power a test of level α can have) and g = f̄⁻¹,
g(y) = inf{α : f(α) ≤ 1 − y}. W is the number of correct guesses; for an event E write
R(E) = E[W·1_E]/m and H(E) = E[(r − W)·1_E]/m (correct and wrong guesses inside E, per
canary).

1. One canary. The coin of canary j is independent of the others, so for any event E of
   the output and the other coins, the tests "guess in ∧ E" and "guess out ∧ E" of the
   neighbouring pair (j in, j out) give P[j correct ∧ E] ≤ f̄(P[j wrong ∧ E]): both
   directions of f-DP given the other coins, then the concavity of f̄ (f is convex) to
   average over j's coin and over the other coins.
2. All canaries. With E = {W_{−j} ≥ i − 1} (W without canary j), "j correct ∧ E" is
   "j correct ∧ W ≥ i" and "j wrong ∧ E" is "j wrong ∧ W ≥ i − 1". The rule makes
   exactly r guesses in every run, so the wrong ones number r − W. Summing over j and
   Jensen (g is convex) give, for every i ≥ 1,
       H({W ≥ i − 1}) ≥ g(R({W ≥ i})).
3. The recursion. Suppose P[W ≥ v] ≥ τ. Start from (R, H) = (τv/m, τ(r − v)/m) and go
   down i = v − 1, ..., 0, adding at each level the least mass of W = i that satisfies
   step 2's inequality:
       H ← max(H, g(R)),   R ← R + (i / (r − i))·(increase of H),
   (mass p at W = i adds i·p/m to R and (r − i)·p/m to H). The final R + H is the
   least possible E[r·1_{W ≥ 0}]/m = r/m. If it exceeds r/m, P[W ≥ v] ≥ τ is impossible:
   the claim is rejected at level τ.

The greedy least mass is a true minimum: for any sequence of masses that satisfies the
inequalities (including one that starts with more than τ at level v, or whose mass at
levels above v is moved down to v, which lowers R and raises H), the running increase of
H is at least the greedy one at every level, by induction, because R is a sum of the
increases of H with non-decreasing weights i/(r − i). Three monotonicities follow, and
the functions below rely on them:

- in f: a smaller f (a weaker claim) has a smaller g, so every greedy sequence of the
  stronger claim is feasible for the weaker one; rejecting f rejects every f' ≥ f. For
  μ-GDP (G_μ falls as μ grows) the rejected μ form an interval [0, μ*).
- in τ: rejection at τ implies rejection at every τ' > τ, so the p-value
  inf{τ : rejected at τ} is valid (P[p ≤ t] ≤ t).
- in v: a sequence feasible for v' > v, with its mass at levels v..v' moved to v, is
  feasible for v, so rejecting at v rejects at every v' > v; the bound never exceeds
  the one of a perfect guesser (v = r), the limit of detection.

Rejection at level τ has probability at most τ under f-DP whatever guessing rule was
fixed before the coins were seen (step 3 holds for every such rule).

References:
    Mahloujifar, Melis, Chaudhuri (2025), "Auditing f-Differential Privacy in One Run",
    ICML, arXiv:2410.22235v1: the recursion with abstentions is the paper's Alg. 3 (the
    number as two independent implementations cite it; not checked against the PDF
    here, nor the number of the theorem it implements, so the argument above is given
    in full).
    Dong, Roth, Su (2022), "Gaussian Differential Privacy", JRSS-B 84(1),
    arXiv:1905.02383v3, Def. 2.6 (μ-GDP is G_μ-DP), Prop. 2.2 (trade-off functions are
    convex, continuous, non-increasing, f(α) ≤ 1 − α).
    Steinke, Nasr, Jagielski (2023), "Privacy Auditing with One (1) Training Run",
    NeurIPS, arXiv:2305.08846, Alg. 1 (the guessing game this analysis reads).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import special

from dpaudit.bounds import (
    EpsilonBound,
    MuBound,
    one_run_epsilon_lower_bound,
    one_run_guesses,
)
from dpaudit.errors import DpauditError, check_in_interval, check_integer
from dpaudit.stats import check_confidence_level

#: A trade-off function f: α ↦ β (convex, non-increasing, f(α) ≤ 1 − α).
Tradeoff = Callable[[float], float]
#: Its power inverse g = f̄⁻¹: y ↦ inf{α : f(α) ≤ 1 − y}.
PowerInverse = Callable[[float], float]

METHOD = "one-run-fdp"
REFERENCE = (
    "Mahloujifar, Melis, Chaudhuri, ICML 2025 (arXiv:2410.22235v1), the one-run f-DP "
    "recursion with abstentions (Alg. 3)"
)

# The smallest level the p-value search looks at: a claim rejected even there gets this
# p-value (an upper bound on the true one, so still valid).
_P_FLOOR = 1e-300
# Width of the final p-value bracket in log τ (a relative 1e-9 in the p-value).
_P_LOG_TOLERANCE = 1e-9
# A claim is rejected only when the least mass exceeds r/m by this relative margin:
# floating-point sums of a few thousand terms are exact to ~1e-13, and the margin keeps
# rounding from turning "equal" into "rejected".
_MARGIN = 1e-12
# μ above which no count is searched: Φ(−64) underflows double precision, so g is 0
# wherever the recursion evaluates it and nothing can be rejected there.
_MU_CAP = 64.0


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class OneRunFdpTest:
    """The outcome of testing one claimed trade-off function on one run's counts.

    Attributes:
        rejected: Whether the claim "the procedure is f-DP" is rejected at level
            1 − ``confidence_level``.
        p_value: The smallest level at which the claim is rejected (to within a relative
            1e-9, rounded up; floored at 1e-300; 1 if it is never rejected).
        confidence_level: c; the test's level is 1 − c.
        claim: A name for the tested function (e.g. ``"gdp(mu=0.5)"``).
        counts: m, r, v as ``canaries``, ``guesses``, ``correct``.
        details: The least guess mass per canary at level 1 − c (the recursion stops
            as soon as it exceeds r/m, so a rejected claim shows the first value above)
            next to r/m, the number of recursion steps taken, and the reference.
    """

    rejected: bool
    p_value: float
    confidence_level: float
    claim: str
    counts: dict[str, int] = field(default_factory=dict, repr=False)
    details: dict[str, Any] = field(default_factory=dict, repr=False)


# ------------------------------------------------------------------ the power inverse


def gdp_power_inverse(mu: float) -> PowerInverse:
    """g for μ-GDP in closed form: f̄⁻¹(y) = Φ(Φ⁻¹(y) − μ).

    1 − G_μ(α) = Φ(Φ⁻¹(α) + μ) (Dong, Roth, Su 2022, Def. 2.6, with Φ⁻¹(1 − α) = −Φ⁻¹(α));
    solving it for α gives the inverse. μ = 0 gives g(y) = y (identical outputs).
    """
    m = check_in_interval("mu", mu, 0.0, math.inf, high_open=True)

    def inverse(y: float) -> float:
        return float(special.ndtr(special.ndtri(y) - m))

    return inverse


def power_inverse(tradeoff: Tradeoff) -> PowerInverse:
    """g = f̄⁻¹ of any trade-off function, by bisection, never above the true value.

    g(y) = inf{α : f(α) ≤ 1 − y}. The bisection runs on the probit scale t = Φ⁻¹(α), so
    that tiny α keep their relative precision, and returns the lower end of its bracket
    (a point where f(α) > 1 − y still holds), nudged down by a relative 1e-12 against
    the rounding of Φ. A smaller g only makes the test harder to reject (the recursion
    is monotone in g), so the approximation never makes a rejection invalid. f speaks in
    β = 1 − power, so a y below about 1e-16 (where 1 − y rounds to 1) gets g = 0: still
    valid, but p-values below about 1e-15 then come out larger than they are; a closed
    form (``inverse=``) keeps them.
    """

    def inverse(y: float) -> float:
        target = 1.0 - y
        if float(tradeoff(0.0)) <= target:
            return 0.0
        lo, hi = -40.0, 40.0  # Φ(−40) < 1e-300; f(Φ(40)) = f(1) = 0 ≤ target
        if float(tradeoff(float(special.ndtr(lo)))) <= target:
            return 0.0
        for _ in range(64):  # bracket 80·2⁻⁶⁴ wide in t: α to ~1e-16 relative
            mid = 0.5 * (lo + hi)
            if float(tradeoff(float(special.ndtr(mid)))) > target:
                lo = mid
            else:
                hi = mid
        return float(special.ndtr(lo)) * (1.0 - 1e-12)

    return inverse


def _check_tradeoff(tradeoff: Tradeoff) -> None:
    """Reject a callable that is not a trade-off function on a grid of 201 points."""
    alpha = np.linspace(0.0, 1.0, 201)
    try:
        beta = np.array([float(tradeoff(float(a))) for a in alpha])
    except (TypeError, ValueError) as exc:
        raise DpauditError(
            f"The 'tradeoff' parameter must map a float α in [0, 1] to a float β. Calling it "
            f"failed: {exc}"
        ) from None
    tol = 1e-9
    problems = []
    if not np.all(np.isfinite(beta)):
        problems.append("it returned NaN or an infinite value")
    elif np.any(beta < -tol) or np.any(beta > 1.0 - alpha + tol):
        problems.append("some value lies outside [0, 1 − α]")
    elif np.any(np.diff(beta) > tol):
        problems.append("it increases somewhere")
    elif np.any(np.diff(beta, 2) < -tol):
        problems.append("it is not convex")
    if problems:
        raise DpauditError(
            "The 'tradeoff' parameter must be a trade-off function: convex, non-increasing, "
            f"with 0 ≤ f(α) ≤ 1 − α (Dong, Roth, Su 2022, Prop. 2.2); {problems[0]} on a "
            "grid of 201 points."
        )


# ----------------------------------------------------------------------- the recursion


def _least_mass(
    g: PowerInverse, m: int, r: int, v: int, tau: float, *, stop_above: float
) -> tuple[float, int]:
    """The least guess mass per canary, R + H, if P[W ≥ v] ≥ τ (step 3 of the module
    docstring), and the number of levels visited.

    Stops early once the mass exceeds ``stop_above`` (it only grows from there) or once
    a level adds nothing (nothing changes after that, so no later level adds anything
    either). g is asked about min(R, 1): never more than g(R), so never less
    conservative, and never about a probability above 1.
    """
    correct_mass = tau * v / m  # R
    wrong_mass = tau * (r - v) / m  # H
    steps = 0
    for i in range(v - 1, -1, -1):
        if correct_mass + wrong_mass > stop_above:
            break
        steps += 1
        added = g(min(correct_mass, 1.0)) - wrong_mass
        if not added > 0.0:  # also stops on a NaN from g rather than carrying it on
            break
        wrong_mass += added
        # mass p at W = i adds (r − i)p/m to H and i·p/m to R; i < v ≤ r, so r − i ≥ 1
        correct_mass += i / (r - i) * added
    return correct_mass + wrong_mass, steps


def _rejection_line(m: int, r: int) -> float:
    """The mass above which a claim is rejected: r/m, raised by a relative 1e-12."""
    return (r / m) * (1.0 + _MARGIN)


def _rejects(g: PowerInverse, m: int, r: int, v: int, tau: float) -> bool:
    """Whether "f-DP" is rejected at level τ by v correct of r guesses on m canaries."""
    if r == 0 or v == 0:
        return False  # the least mass is τ·r/m ≤ r/m: nothing to reject
    line = _rejection_line(m, r)
    mass, _ = _least_mass(g, m, r, v, tau, stop_above=line)
    return mass > line


def _p_value(g: PowerInverse, m: int, r: int, v: int) -> float:
    """inf{τ : rejected at τ}, rounded up to the top of a bisection bracket in log τ.

    Rejection is monotone in τ (module docstring), so the bracket [lo, hi] with
    "not rejected at lo, rejected at hi" contains the infimum, and hi is ≥ it.
    """
    if not _rejects(g, m, r, v, 1.0):
        return 1.0
    if _rejects(g, m, r, v, _P_FLOOR):
        return _P_FLOOR
    lo, hi = math.log(_P_FLOOR), 0.0
    while hi - lo > _P_LOG_TOLERANCE:
        mid = 0.5 * (lo + hi)
        if _rejects(g, m, r, v, math.exp(mid)):
            hi = mid
        else:
            lo = mid
    return min(1.0, math.exp(hi))


def _validated_counts(canaries: Any, guesses: Any, correct: Any) -> tuple[int, int, int]:
    m = check_integer("canaries", canaries, low=1)
    r = check_integer("guesses", guesses, low=0)
    v = check_integer("correct", correct, low=0)
    if not v <= r <= m:
        raise DpauditError(
            "One-run counts must satisfy 0 ≤ correct ≤ guesses ≤ canaries and canaries ≥ 1. "
            f"Got canaries={m}, guesses={r}, correct={v}."
        )
    return m, r, v


# --------------------------------------------------------------------------- the test


def one_run_fdp_test(
    tradeoff: Tradeoff | None = None,
    *,
    canaries: int,
    guesses: int,
    correct: int,
    confidence_level: float = 0.95,
    inverse: PowerInverse | None = None,
    claim: str = "f",
) -> OneRunFdpTest:
    """Test the claim "the procedure is f-DP" on one run's guessing counts.

    Args:
        tradeoff: f, a callable α ↦ β: convex, non-increasing, 0 ≤ f(α) ≤ 1 − α (checked
            on a grid). The mechanism must be f-DP for every ordered pair of neighbours,
            as in Dong, Roth, Su's definition (both "canary in vs out" and "out vs in").
            May be omitted when ``inverse`` is given.
        canaries: m, each included by an independent fair coin.
        guesses: r ≤ m, the canaries the guessing rule (fixed before the coins were seen,
            and making this many guesses whatever the scores, like
            :func:`dpaudit.bounds.one_run_guesses`) did not abstain on.
        correct: v ≤ r, the correct guesses.
        confidence_level: c; the claim is rejected at level 1 − c.
        inverse: g = f̄⁻¹ in closed form (e.g. :func:`gdp_power_inverse`), used instead
            of the numerical :func:`power_inverse` of ``tradeoff``. It must not exceed
            the true f̄⁻¹ anywhere, or a rejection may be invalid.
        claim: A name for f in the result.

    Returns:
        :class:`OneRunFdpTest`: the decision at 1 − c and the p-value of the claim.

    Raises:
        DpauditError: bad counts, level, or a ``tradeoff`` that is not a trade-off
            function; neither ``tradeoff`` nor ``inverse`` given.

    Example:
        m = 1000, r = 100, v = 94, c = 0.99: 0.5-GDP is rejected (p = 0.00106), 1-GDP
        is not (p = 0.397).
    """
    m, r, v = _validated_counts(canaries, guesses, correct)
    c = check_confidence_level(confidence_level)
    if inverse is None:
        if tradeoff is None:
            raise DpauditError("Give the trade-off function 'tradeoff' or its 'inverse'.")
        _check_tradeoff(tradeoff)
        inverse = power_inverse(tradeoff)
    tau = 1.0 - c
    rejected = _rejects(inverse, m, r, v, tau)
    p = _p_value(inverse, m, r, v)
    # consistent with the decision: a claim rejected at τ has its infimum ≤ τ
    p = min(p, tau) if rejected else max(p, tau)
    mass, steps = _least_mass(inverse, m, r, v, tau, stop_above=_rejection_line(m, r))
    return OneRunFdpTest(
        rejected=rejected,
        p_value=float(p),
        confidence_level=c,
        claim=claim,
        counts={"canaries": m, "guesses": r, "correct": v},
        details={
            "least_mass": mass,
            "guess_mass": r / m,
            "recursion_steps": steps,
            "reference": REFERENCE,
        },
    )


# ---------------------------------------------------------------------- the μ bound


def _largest_rejected_mu(m: int, r: int, v: int, tau: float, tol: float) -> float:
    """The largest μ (to within ``tol``, the bracket's rejected lower end) for which μ-GDP
    is rejected at level τ; 0 if even μ = 0 is not.

    Rejection is monotone in μ (module docstring: G_μ falls as μ grows), so doubling
    then bisection keeps the invariant "rejected at ``low``".
    """
    if not _rejects(gdp_power_inverse(0.0), m, r, v, tau):
        return 0.0
    low, high = 0.0, 1.0
    while _rejects(gdp_power_inverse(high), m, r, v, tau):
        low, high = high, 2.0 * high
        if high > _MU_CAP:
            return low
    while high - low > tol:
        mid = 0.5 * (low + high)
        if _rejects(gdp_power_inverse(mid), m, r, v, tau):
            low = mid
        else:
            high = mid
    return low


def one_run_mu_lower_bound(
    *,
    canaries: int,
    guesses: int,
    correct: int,
    confidence_level: float = 0.95,
    tolerance: float = 1e-6,
) -> MuBound:
    """μ lower bound from ONE run: the largest μ whose μ-GDP claim the f-DP test rejects.

    A larger μ is a weaker claim (G_μ falls as μ grows), and rejection is monotone in μ,
    so μ-GDP is rejected at level 1 − c for every μ ≤ ``value``: with probability ≥ c
    the procedure is not μ-GDP for any μ ≤ ``value``.

    Args:
        canaries: m, each included by an independent fair coin.
        guesses: r ≤ m, the guesses made (e.g. :func:`dpaudit.bounds.one_run_guesses`).
        correct: v ≤ r, the correct guesses.
        confidence_level: c in (0, 1).
        tolerance: Width of the final bisection bracket (the value is its lower end).

    Returns:
        :class:`~dpaudit.bounds.MuBound` with method ``"one-run-fdp"``, threshold
        ``"top-bottom"`` and validity ``"rigorous-one-run"``. ``details``: the family
        (``"gdp"``), the limit of detection (the bound of a perfect guesser, v = r, at
        these m, r, c), the p-value of the rejected claim at the bound, the tolerance,
        the direction of the rejection and the reference.

    Example:
        m = 1000, r = 100, v = 94, c = 0.99: μ ≥ 0.6192 (limit of detection 1.0171); as ε
        at δ = 1e-5 through GDP, 2.533 (``assumes-gdp``), where Steinke et al.'s ε bound
        on the same counts is 1.800.
    """
    m, r, v = _validated_counts(canaries, guesses, correct)
    c = check_confidence_level(confidence_level)
    tol = check_in_interval("tolerance", tolerance, 0.0, 1.0, low_open=True)
    tau = 1.0 - c
    value = _largest_rejected_mu(m, r, v, tau, tol)
    limit = value if v == r else _largest_rejected_mu(m, r, r, tau, tol)
    p_at_bound = _p_value(gdp_power_inverse(value), m, r, v) if value > 0 else None
    return MuBound(
        value=float(value),
        confidence_level=c,
        method=METHOD,
        threshold="top-bottom",
        validity="rigorous-one-run",
        counts={"canaries": m, "guesses": r, "correct": v},
        details={
            "family": "gdp",
            "limit_of_detection": float(limit),
            "p_value_at_bound": p_at_bound,
            "tolerance": tol,
            "rejected": f"mu-GDP for every mu <= value, at level {tau:.6g}",
            "reference": REFERENCE,
        },
    )


# ------------------------------------------------------- against a bracket with a tail


def gdp_tail_power_inverse(mu: float, tail: float) -> PowerInverse:
    """g for the curve f(α) = max(0, G_μ(α + t) − t) that a μ bracket with tail t allows.

    An accountant's μ bracket measured with tail δ t guarantees only f_A(α) ≥ G_μ(α + t) − t
    (:func:`dpaudit.bounds.mu_bound_against_bracket`); the maximum with 0 keeps it a
    trade-off function (convex, non-increasing, ≤ 1 − α). Its power is f̄(α) =
    min(1, Φ(Φ⁻¹(α + t) + μ) + t), so g(y) = max(0, Φ(Φ⁻¹(y − t) − μ) − t) for y > t, and
    0 for y ≤ t (f̄(0) ≥ t already). t = 0 is :func:`gdp_power_inverse`.
    """
    m = check_in_interval("mu", mu, 0.0, math.inf, high_open=True)
    t = check_in_interval("tail", tail, 0.0, 1.0, high_open=True)
    if t == 0.0:
        return gdp_power_inverse(m)

    def inverse(y: float) -> float:
        if y <= t:
            return 0.0
        return max(0.0, float(special.ndtr(special.ndtri(y - t) - m)) - t)

    return inverse


# ---------------------------------------------------------------- the ladder of guesses

#: The ladder's guess counts as fractions of m: r ≈ m/100, m/30, m/10, m/3 (half on each
#: tail of the score order). Fixed before any score is seen; a union bound pays for it.
LADDER_FRACTIONS: tuple[float, ...] = (1 / 100, 1 / 30, 1 / 10, 1 / 3)


def guess_ladder(canaries: int, *, include: tuple[int, ...] = ()) -> tuple[int, ...]:
    """The guess counts r a one-run audit tries, each even (r/2 on each tail), at most m.

    r = 2·max(1, round(f·m/2)) for f in :data:`LADDER_FRACTIONS`, plus the counts in
    ``include`` (e.g. the audit file's ``guesses``; 0 adds nothing), capped at 2⌊m/2⌋,
    without repeats.
    A function of m (and of the configuration) alone, never of the scores or coins, so a
    union bound over its rungs makes the best rung's bound valid.
    """
    m = check_integer("canaries", canaries, low=2)
    top = 2 * (m // 2)
    rungs = {min(top, 2 * max(1, round(f * m / 2))) for f in LADDER_FRACTIONS}
    extra = [check_integer("guesses", r, low=0) for r in include]
    rungs |= {min(top, 2 * max(1, r // 2)) for r in extra if r > 0}  # r = 0: nothing to add
    return tuple(sorted(rungs))


@dataclass(frozen=True)
class _Rung:
    guesses: int
    correct: int
    value: float


def _largest_rejected(
    family: Callable[[float], PowerInverse], m: int, r: int, v: int, tau: float, tol: float
) -> float:
    """:func:`_largest_rejected_mu` for any family of claims that weakens as μ grows."""
    if not _rejects(family(0.0), m, r, v, tau):
        return 0.0
    low, high = 0.0, 1.0
    while _rejects(family(high), m, r, v, tau):
        low, high = high, 2.0 * high
        if high > _MU_CAP:
            return low
    while high - low > tol:
        mid = 0.5 * (low + high)
        if _rejects(family(mid), m, r, v, tau):
            low = mid
        else:
            high = mid
    return low


def _ladder_counts(scores: Any, included: Any, ladder: tuple[int, ...]) -> list[tuple[int, int]]:
    return [one_run_guesses(scores, included, guesses_per_side=r // 2) for r in ladder]


def _check_ladder(ladder: Any, m: int) -> tuple[int, ...]:
    rungs = tuple(check_integer("ladder", r, low=1) for r in ladder)
    if not rungs or any(r > m for r in rungs):
        raise DpauditError(
            f"The 'ladder' parameter must list 1 or more guess counts, each at most the {m} "
            f"canaries. Got {list(ladder)!r}."
        )
    return rungs


def ladder_rejects(
    scores: Any,
    included: Any,
    *,
    inverse: PowerInverse,
    ladder: tuple[int, ...] | None = None,
    confidence_level: float = 0.95,
) -> bool:
    """Whether a claim (its power inverse g) is rejected by ANY rung of the guess ladder.

    Each rung r guesses on the r/2 highest and r/2 lowest scores
    (:func:`dpaudit.bounds.one_run_guesses`) and tests the claim at level (1 − c)/L, L the
    number of rungs: by the union bound the claim, if true, is rejected by some rung with
    probability at most 1 − c. :func:`one_run_mu_ladder_bound` > μ exactly when this
    rejects μ-GDP (rejection is monotone in μ).
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    rungs = guess_ladder(s.size) if ladder is None else _check_ladder(ladder, s.size)
    tau = (1.0 - check_confidence_level(confidence_level)) / len(rungs)
    return any(_rejects(inverse, s.size, r, v, tau) for r, v in _ladder_counts(s, included, rungs))


def one_run_mu_ladder_bound(
    scores: Any,
    included: Any,
    *,
    ladder: tuple[int, ...] | None = None,
    confidence_level: float = 0.95,
    tail: float = 0.0,
    tolerance: float = 1e-6,
) -> MuBound:
    """μ lower bound from one run's scores and coins, the number of guesses chosen by a
    union bound over a ladder of guess counts (abstaining on the rest).

    Guessing on fewer, more extreme canaries makes each guess more often right but leaves
    fewer guesses to count; which r is best depends on the unknown trade-off curve.
    Choosing r after seeing how many guesses were right would void the level, so every
    rung of a ladder fixed in advance is tested at level (1 − c)/L and the largest of the L
    bounds is kept: with probability ≥ c none of them is above the truth (union bound).
    Keinan, Shenfeld, Ligett explain why abstaining on the middle of the score order helps
    a one-run audit.

    Args:
        scores: one score per canary, larger = "included".
        included: the fair coins, one bool per canary.
        ladder: the guess counts r (default :func:`guess_ladder` of m); odd r guess ⌊r/2⌋
            a side.
        confidence_level: c, for the whole ladder.
        tail: the tail δ t of the μ bracket the bound is held against: the claims tested
            are max(0, G_μ(α + t) − t) (:func:`gdp_tail_power_inverse`), so a value above
            the bracket's high end refutes the accountant; 0 tests plain μ-GDP.
        tolerance: width of each rung's final bisection bracket.

    Returns:
        :class:`~dpaudit.bounds.MuBound`, method ``"one-run-fdp"``, threshold
        ``"top-bottom-ladder"``, validity ``"rigorous-one-run"``; ``counts`` of the best
        rung; ``details``: every rung (guesses, correct, value), the rungs' level, the
        limit of detection (the best perfect-guesser bound over the rungs), the tail.

    References:
        Mahloujifar, Melis, Chaudhuri (2025), ICML, arXiv:2410.22235v1, Alg. 3 (each
        rung's test; see the module docstring). Keinan, Shenfeld, Ligett (2025), NeurIPS
        (abstention in one-run audits). Steinke, Nasr, Jagielski (2023), NeurIPS, Alg. 1
        (the top and bottom guesses).
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    m = check_integer("canaries", s.size, low=2)
    rungs = guess_ladder(m) if ladder is None else _check_ladder(ladder, m)
    c = check_confidence_level(confidence_level)
    t = check_in_interval("tail", tail, 0.0, 1.0, high_open=True)
    tol = check_in_interval("tolerance", tolerance, 0.0, 1.0, low_open=True)
    tau = (1.0 - c) / len(rungs)

    def family(mu: float) -> PowerInverse:
        return gdp_tail_power_inverse(mu, t)

    found = [
        _Rung(r, v, _largest_rejected(family, m, r, v, tau, tol))
        for r, v in _ladder_counts(s, included, rungs)
    ]
    best = max(found, key=lambda x: x.value)  # first of equal values: the fewest guesses
    limit = max(_largest_rejected(family, m, x.guesses, x.guesses, tau, tol) for x in found)
    return MuBound(
        value=float(best.value),
        confidence_level=c,
        method=METHOD,
        threshold="top-bottom-ladder",
        validity="rigorous-one-run",
        counts={"canaries": m, "guesses": best.guesses, "correct": best.correct},
        details={
            "family": "gdp" if t == 0.0 else "gdp-with-tail",
            "bracket_tail_delta": t,
            "rungs": [{"guesses": x.guesses, "correct": x.correct, "mu": x.value} for x in found],
            "rung_confidence_level": 1.0 - tau,
            "limit_of_detection": float(limit),
            "tolerance": tol,
            "reference": REFERENCE,
        },
    )


# ------------------------------------------------- Steinke's ε and the f-DP μ, one share


@dataclass(frozen=True)
class OneRunBounds:
    """Steinke et al.'s ε and the f-DP μ of one run, sharing ONE confidence budget.

    Attributes:
        epsilon: the ε lower bound on the configured guesses (``guesses``).
        mu: the f-DP μ lower bound over the guess ladder, or ``None`` when not asked for
            (then ε alone spends the share).
        confidence_level: c of the share: both bounds hold JOINTLY with probability ≥ c,
            and each carries c as its ``confidence_level``.
        level_each: the level each bound was computed at: 1 − (1 − c)/2 with μ (the share
            split in two halves, Bonferroni), c without.
    """

    epsilon: EpsilonBound
    mu: MuBound | None
    confidence_level: float
    level_each: float


def one_run_bounds(
    scores: Any,
    included: Any,
    *,
    guesses: int,
    delta: float,
    confidence_level: float = 0.95,
    with_mu: bool = True,
    mu_tail: float = 0.0,
    ladder: tuple[int, ...] | None = None,
) -> OneRunBounds:
    """Both one-run lower bounds of one run's scores, under one share 1 − c of a budget.

    The share is split in two halves (Bonferroni): Steinke et al.'s ε bound on the
    ``guesses`` top and bottom guesses at level 1 − (1 − c)/2, and the f-DP μ bound over
    the guess ladder (:func:`one_run_mu_ladder_bound`, itself a union bound over its
    rungs) at the same level. With probability ≥ c both hold at once, so a verdict that
    counts a violation when EITHER exceeds its upper bound (ε against the accountant's ε,
    μ against the high end of its μ bracket, tail included) errs with probability at most
    1 − c: the stronger of the two decides, for the price of one share. Each bound is
    reported at c (what they hold at jointly), the level it was computed at in
    ``details["computed_at"]``.

    Args:
        scores, included: one score and one fair coin per canary.
        guesses: r of the ε bound (r/2 on each tail), as configured.
        delta: δ of the ε bound.
        confidence_level: c of the share (the verdict's per-comparison level).
        with_mu: compute the μ bound; False leaves ε the whole share (no upper μ to hold
            it against, for example).
        mu_tail: the tail δ of the μ bracket the μ bound is held against.
        ladder: the μ bound's guess counts (default: :func:`guess_ladder` of m with
            ``guesses`` added).

    References:
        Steinke, Nasr, Jagielski (2023), NeurIPS, Thm. 3.1; Mahloujifar, Melis, Chaudhuri
        (2025), ICML, arXiv:2410.22235v1, Alg. 3.
    """
    c = check_confidence_level(confidence_level)
    s = np.asarray(scores, dtype=float).reshape(-1)
    coins = np.asarray(included, dtype=bool).reshape(-1)
    each = 1.0 - (1.0 - c) / 2.0 if with_mu else c
    r, v = one_run_guesses(s, coins, guesses_per_side=guesses // 2)
    eps = one_run_epsilon_lower_bound(
        canaries=s.size, guesses=r, correct=v, delta=delta, confidence_level=each
    )
    split = {
        "computed_at": each,
        "share": "split in halves between the one-run epsilon and mu bounds (Bonferroni)"
        if with_mu
        else "the whole one-run share",
    }
    eps = replace(eps, confidence_level=c, details={**eps.details, **split})
    mu = None
    if with_mu:
        rungs = guess_ladder(s.size, include=(r,)) if ladder is None else ladder
        mu = one_run_mu_ladder_bound(s, coins, ladder=rungs, confidence_level=each, tail=mu_tail)
        mu = replace(mu, confidence_level=c, details={**mu.details, **split})
    return OneRunBounds(epsilon=eps, mu=mu, confidence_level=c, level_each=each)


def stronger(epsilon: tuple[float, float | None], mu: tuple[float, float | None] | None) -> str:
    """Which of the one-run bounds decides: ``"epsilon"`` or ``"mu"``.

    Each argument is (lower bound, upper bound it is held against). The one whose lower
    bound is the larger fraction of its upper bound decides: if either exceeds its upper
    bound, that one does. Under :func:`one_run_bounds` both hold jointly at the share's
    level, so choosing after seeing them costs nothing more. An absent or non-positive
    upper bound cannot be exceeded by a fraction: its bound never decides.
    """

    def ratio(pair: tuple[float, float | None] | None) -> float:
        if pair is None or pair[1] is None or not pair[1] > 0 or not math.isfinite(pair[1]):
            return -math.inf
        return pair[0] / pair[1]

    return "mu" if ratio(mu) > ratio(epsilon) else "epsilon"
