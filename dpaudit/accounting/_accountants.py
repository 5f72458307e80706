"""Accountant upper bounds: describe what ran as dp-accounting events, then account.

Nothing here re-implements RDP or PLD: a :class:`~dpaudit.records.DPSGDRecord` (or a
mechanism's parameters) becomes a ``dp_accounting.DpEvent`` tree, and dp-accounting's
PLD accountant (default, tight, pessimistic) or RDP accountant (for comparison) turns
it into ε(δ), δ(ε) and a privacy profile. The μ upper bound is the GDP measurement of
:func:`dpaudit.theory.gdp_bracket` applied to the PLD profile.

Neighbouring relation: add-or-remove one record, as in Abadi et al. 2016 and Opacus.

References:
    Abadi et al. 2016, "Deep Learning with Differential Privacy" (DP-SGD);
    Mironov, Talwar, Zhang 2019 (RDP of the subsampled Gaussian);
    Koskela, Jälkö, Honkela 2020 and Doroshenko et al. 2022 (PLD accounting, the
    latter's "Connect the dots" pessimistic discretisation used by dp-accounting).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal, TypeAlias

import dp_accounting
import numpy as np
from dp_accounting import pld, rdp
from numpy.typing import ArrayLike, NDArray

from dpaudit.errors import DpauditError, check_choice, check_in_interval, check_integer
from dpaudit.records import DPSGDRecord
from dpaudit.theory import (
    MuBracket,
    exact_gdp_bracket,
    gdp_bracket,
    gdp_delta,
    gdp_epsilon,
    laplace_scale,
)

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_VALUE_DISCRETIZATION_INTERVAL",
    "FLAT_PLD_POINTS",
    "MAX_PLD_POINTS",
    "MAX_PLD_SPAN",
    "WIDE_PLD_POINTS",
    "calibrate_noise",
    "delta",
    "dpsgd_epsilon",
    "dpsgd_event",
    "dpsgd_mu_bracket",
    "epsilon",
    "epsilon_floor",
    "event_from_record",
    "laplace_event",
    "mu_bracket",
    "mu_floor",
    "pld_discretization",
    "privacy_profile",
]

Accountant = Literal["pld", "rdp"]
ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")

# PLD grid step of the privacy loss. dp-accounting rounds each loss up to this grid
# (pessimistic_estimate=True), so the reported ε is an upper bound whose excess grows
# with the step and with T. Measured at the MNIST setting (q = 256/60000, σ = 1.1,
# T = 14063, δ = 1e-5): 1e-3 → 2.3908, 3e-4 → 2.3827, 1e-4 → 2.3820 (0.3 s); the
# step 1e-4 keeps ε within 0.01 of its limit there and in the other DP-SGD settings it
# was checked on.
DEFAULT_VALUE_DISCRETIZATION_INTERVAL = 1e-4

# Most loss points one composed PLD may hold per direction (8 MB each). A weakly noised
# run (σ → 0) has losses up to ~1/(2σ²) per step, T times over: at the default step its
# support would take terabytes (σ = 1e-3) or tens of seconds (σ = 0.11, q = 0.043,
# T = 69: 10⁷ points, 10 s). Beyond this size the step is widened so the support keeps
# this many points (:func:`pld_discretization`); a pessimistic PLD is an upper bound at
# every step, and the excess the wider step adds is negligible next to such ε (σ = 0.11
# above: 489.9048 at 1e-4, 489.9056 at 1e-2). Supports up to FLAT_PLD_POINTS default
# steps (20 nats) keep the default step.
MAX_PLD_POINTS = 1_000_000
# Loss points a composed PLD keeps when its support is wider than the default step allows
# (more than MAX_PLD_POINTS · step = 100 nats; see pld_discretization). Memory follows the
# points (each composition's FFT holds several copies): at MAX_PLD_POINTS, 8 steps of σ =
# 0.1, q = 1/4 (576 nats) peaked 140 MB above the process against 36 MB at σ = 1 (16 nats,
# 163,000 points at the default step), so an audit's memory grew as σ fell. At this many
# points it stays flat; the pessimistic PLD is an upper bound at every step, and at such
# supports ε is hundreds: ε of the σ = 0.1 run is 398.4 (to 0.01) at either size.
WIDE_PLD_POINTS = 100_000
# Loss points a composed PLD may hold at the requested step; a wider support keeps
# WIDE_PLD_POINTS (pld_discretization). Memory follows the points: with the threshold at
# MAX_PLD_POINTS, supports of 20 to 100 nats (σ ≈ 0.3 to 0.7 at q = 1/4, T = 8) kept up to
# 10⁶ points, and the Opacus tutorial's audit peaked at 720 MB at σ = 0.3 against 583 MB
# at σ = 1. At 2·10⁵ every support holds at most this many points, so memory is flat in
# σ. The wider step stays pessimistic (an upper bound at every step); what it adds to ε,
# measured against the 1e-4 step with dp-accounting: 9.2e-9 relative at σ = 0.8, q = 1/4,
# T = 8; 1.3e-6 at σ = 0.6, q = 0.02, T = 500; 1.2e-5 at σ = 1, q = 0.01, T = 1000.
FLAT_PLD_POINTS = 200_000
# Widest PLD loss step used (nats): dp-accounting's connect-the-dots divides by
# e^step − 1, which overflows past 709. A run that needs a wider one is bounded without a
# PLD (see _TooWideForPLD).
_MAX_STEP = 100.0
#: Widest privacy-loss span (nats) a PLD is built for: beyond, a run is bounded without
#: one (:func:`pld_discretization` is ``None``).
MAX_PLD_SPAN = MAX_PLD_POINTS * _MAX_STEP
# Points of the coarse composition that measures the support before the real one.
_PROBE_POINTS = 100_000
# dp-accounting drops the Gaussian's tails beyond log mass −50 (its
# log_mass_truncation_bound), i.e. beyond 9.67σ: one Gaussian step's losses span at most
# (1 + 2·10·σ)/σ² (the loss is linear in the noise, slope 1/σ²).
_TAIL_SIGMAS = 10.0
# Beyond this ε (and loss), e^ε and e^−ℓ leave the normal doubles (e^±709 overflow or
# underflow): the fast profile then works with logarithms (see _fast_pld_delta).
_EXP_SAFE = 500.0

# Full batch: below this distance of δ_μ(0) from 1, μ is taken from its closed form
# rather than measured on the grid (see mu_bracket).
_EXACT_MEASURED = 1e-9

# RDP orders: dp-accounting's default set, extended with large orders so that small-δ
# conversions find their optimum (Mironov 2017, Prop. 3 holds for every order > 1).
_RDP_ORDERS = (
    [1.0 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [64, 80, 96, 128, 256, 512]
)

Recordish: TypeAlias = DPSGDRecord | dp_accounting.DpEvent


# --------------------------------------------------------------------------------------
# events
# --------------------------------------------------------------------------------------


def _check_dpsgd(noise_multiplier: float, sampling_rate: float, steps: int) -> tuple:
    sigma = check_in_interval(
        "noise_multiplier", noise_multiplier, 0.0, math.inf, low_open=True, high_open=True
    )
    q = check_in_interval("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
    return sigma, q, check_integer("steps", steps, low=1)


def dpsgd_event(
    *, noise_multiplier: float, sampling_rate: float, steps: int
) -> dp_accounting.DpEvent:
    """The DpEvent of T steps of DP-SGD (or DP-GD when q = 1).

    SelfComposed(PoissonSampled(q, Gaussian(σ)), T), or SelfComposed(Gaussian(σ), T)
    for q = 1 (full batch: every record is in every step, no amplification).

    References:
        Abadi et al. 2016, Algorithm 1; dp-accounting's ``dp_event`` module.
    """
    sigma, q, t = _check_dpsgd(noise_multiplier, sampling_rate, steps)
    gaussian = dp_accounting.GaussianDpEvent(sigma)
    step = gaussian if q == 1.0 else dp_accounting.PoissonSampledDpEvent(q, gaussian)
    return dp_accounting.SelfComposedDpEvent(step, t)


def event_from_record(record: DPSGDRecord) -> dp_accounting.DpEvent:
    """The DpEvent of what a :class:`~dpaudit.records.DPSGDRecord` says actually ran.

    The clipping norm C does not enter: the noise σ·C on a sum of C-clipped gradients
    is a Gaussian mechanism with noise multiplier σ whatever C is.
    """
    if not isinstance(record, DPSGDRecord):
        raise DpauditError(f"Expected a DPSGDRecord. Got {type(record).__name__} instead.")
    q = record.sampling_rate
    sampling = check_choice("sampling", record.sampling, ["poisson", "full-batch"])
    if sampling == "full-batch" and q != 1.0:
        raise DpauditError(f"A full-batch record must have sampling_rate 1.0. Got {q!r} instead.")
    return dpsgd_event(
        noise_multiplier=record.noise_multiplier, sampling_rate=q, steps=record.steps
    )


def laplace_event(*, epsilon: float, sensitivity: float = 1.0, count: int = 1):
    """The DpEvent of ``count`` Laplace mechanisms with privacy ε each (scale Δ/ε).

    References:
        Dwork, McSherry, Nissim, Smith 2006; dp-accounting's ``LaplaceDpEvent`` takes the
        noise scale relative to the sensitivity, i.e. 1/ε.
    """
    b = laplace_scale(sensitivity, epsilon)
    count = check_integer("count", count, low=1)
    event = dp_accounting.LaplaceDpEvent(b / sensitivity)
    return event if count == 1 else dp_accounting.SelfComposedDpEvent(event, count)


def _as_event(record_or_event: Recordish) -> dp_accounting.DpEvent:
    if isinstance(record_or_event, DPSGDRecord):
        return event_from_record(record_or_event)
    if isinstance(record_or_event, dp_accounting.DpEvent):
        return record_or_event
    raise DpauditError(
        "Expected a DPSGDRecord or a dp_accounting.DpEvent. "
        f"Got {type(record_or_event).__name__} instead."
    )


def _accountant(
    event: dp_accounting.DpEvent,
    accountant: str,
    value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
) -> dp_accounting.PrivacyAccountant:
    """The accountant with ``event`` composed (read it; never compose more into it: the
    last few are cached, so that ε and the μ bracket of one run compose once)."""
    accountant = check_choice("accountant", accountant, ACCOUNTANTS)
    if accountant == "pld":
        step = pld_discretization(event, value_discretization_interval)
        if step is None:
            sigma, q, t = _gaussian_steps(event) or (math.nan, math.nan, 0)
            raise _TooWideForPLD(sigma, q, t)
        value_discretization_interval = step
    return _composed(event, accountant, value_discretization_interval)


class _TooWideForPLD(DpauditError):
    """T Gaussian steps whose privacy losses span too many nats for any PLD grid
    (:func:`pld_discretization` is ``None``); the callers bound them without one."""

    def __init__(self, sigma: float, q: float, steps: int) -> None:
        self.sigma, self.q, self.steps = sigma, q, steps
        self.mu = math.sqrt(steps) / sigma
        super().__init__(
            f"The privacy losses of {steps} steps at σ = {sigma:g}, q = {q:g} span more than "
            f"{MAX_PLD_SPAN:.0e} nats: too wide for a PLD."
        )


@functools.lru_cache(maxsize=4)
def _composed(
    event: dp_accounting.DpEvent, accountant: str, value_discretization_interval: float
) -> dp_accounting.PrivacyAccountant:
    if accountant == "pld":
        # pessimistic_estimate is dp-accounting's default: ε and δ are upper bounds
        acc = pld.PLDAccountant(value_discretization_interval=value_discretization_interval)
    else:
        acc = rdp.RdpAccountant(orders=_RDP_ORDERS)
    if not acc.supports(event):
        raise DpauditError(f"The {accountant!r} accountant cannot account for {event!r}.")
    with _quiet_rdp():
        acc.compose(event)
    return acc


@contextlib.contextmanager
def _quiet_rdp() -> Iterator[None]:
    """dp-accounting logs (through absl) each RDP order whose series does not converge
    under large σ and q, and drops that order: ε is the minimum over the remaining orders,
    so it stays an upper bound. Not a user's concern, so not printed on their console."""
    absl_log = logging.getLogger("absl")
    level = absl_log.level
    absl_log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        absl_log.setLevel(level)


def _gaussian_steps(event: dp_accounting.DpEvent) -> tuple[float, float, int] | None:
    """(σ, q, T) when ``event`` is T steps of a Gaussian of noise multiplier σ,
    Poisson-subsampled at q (q = 1: not subsampled); else ``None``."""
    count, q = 1, 1.0
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        count, event = int(event.count), event.event
    if isinstance(event, dp_accounting.PoissonSampledDpEvent):
        q, event = float(event.sampling_probability), event.event
    if isinstance(event, dp_accounting.GaussianDpEvent) and event.noise_multiplier > 0 and q > 0:
        return float(event.noise_multiplier), q, count
    return None


def _gaussian_loss_span(sigma: float) -> float:
    """Width of the loss support of one Gaussian step of noise multiplier σ as
    dp-accounting discretises it (tails beyond ~10σ dropped, see ``_TAIL_SIGMAS``)."""
    return (1.0 + 2.0 * _TAIL_SIGMAS * sigma) / sigma**2


def pld_discretization(
    event: dp_accounting.DpEvent,
    requested: float = DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
) -> float | None:
    """The PLD loss step for ``event``: ``requested``, unless the composed loss support
    would then hold more than :data:`FLAT_PLD_POINTS` points; then the step that keeps it
    at about :data:`WIDE_PLD_POINTS` (at most ``_MAX_STEP`` nats, so between those two
    sizes); ``None`` when even a step of ``_MAX_STEP`` nats would not keep it within
    :data:`MAX_PLD_POINTS` (the run's losses span more than 10⁸ nats: σ ≲ 0.004 with
    hundreds of sampled steps).

    Only runs of Gaussian steps are sized (DP-SGD and DP-GD); other events keep
    ``requested``. T Gaussian steps without subsampling are one Gaussian of σ/√T to
    dp-accounting, whose span is known (``_gaussian_loss_span``). T subsampled steps are
    composed once on a coarse grid (about ``_PROBE_POINTS`` points) to measure the span
    the composition keeps after its tail truncation; the composed span is never wider
    than T single-step spans, so nothing is measured when those fit. Any step gives an
    upper bound: dp-accounting's pessimistic discretisation rounds every loss up.

    References:
        Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022, "Connect the Dots: Tighter
        Discrete Approximations of Privacy Loss Distributions" (PETS; arXiv:2207.04380v1):
        the pessimistic estimate overestimates δ(ε) for every ε, whatever the step (as
        stated in its abstract; the theorem number is not verified here).
    """
    requested = check_in_interval(
        "value_discretization_interval", requested, 0.0, math.inf, low_open=True, high_open=True
    )
    steps = _gaussian_steps(event)
    if steps is None:
        return requested
    sigma, q, t = steps
    if q == 1.0:
        span = _gaussian_loss_span(sigma / math.sqrt(t))
    else:
        single = _gaussian_loss_span(sigma) - math.log1p(-q)
        if t * single <= FLAT_PLD_POINTS * requested:
            return requested
        span = _probe_span(sigma, q, t, single)
    if span <= FLAT_PLD_POINTS * requested:
        return requested
    if span > MAX_PLD_SPAN:
        return None
    return min(span / WIDE_PLD_POINTS, _MAX_STEP)


@functools.lru_cache(maxsize=32)
def _probe_span(sigma: float, q: float, t: int, single: float) -> float:
    """The loss span of T subsampled Gaussian steps, measured on a coarse grid (``inf``
    when even its estimate is too wide for any PLD, see :func:`pld_discretization`).

    The coarse step is sized for the widest support the composition can keep: with small
    σ a step's loss is about 0 unless the record is sampled and about ``single`` when it
    is, so the span is about (sampled steps) · ``single`` plus T·|ln(1 − q)|; the number of
    sampled steps exceeds Tq + 10√(Tq) + 10 only with a probability far under the mass the
    composition truncates from its tails (1e-15).
    """
    hits = min(float(t), t * q + 10.0 * math.sqrt(t * q) + 10.0)
    estimate = hits * single - t * math.log1p(-q)
    if estimate > MAX_PLD_POINTS * _MAX_STEP:
        return math.inf
    # dp-accounting's connect-the-dots needs e^step finite: the step stays ≤ _MAX_STEP
    coarse = min(estimate / _PROBE_POINTS, _MAX_STEP)
    probe = pld.PLDAccountant(value_discretization_interval=coarse)
    probe.compose(dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=t))
    dist = getattr(probe, "_pld", None)
    pmfs = [getattr(dist, "_pmf_remove", None), getattr(dist, "_pmf_add", None)]
    probs = [getattr(p, "_probs", None) for p in pmfs if p is not None]
    sizes = [len(x) for x in probs if x is not None]
    if not sizes or len(sizes) < len(probs):
        return t * single  # not a PMF this reads: the widest the support can be
    # two steps of slack: the span moves by a step when the grid moves
    return (max(sizes) + 2) * coarse


# --------------------------------------------------------------------------------------
# ε(δ), δ(ε), profile
# --------------------------------------------------------------------------------------


def epsilon(
    record_or_event: Recordish,
    *,
    delta: float,
    accountant: Accountant = "pld",
    value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
) -> float:
    """The accountant's ε at δ: an upper bound on the mechanism's true ε(δ).

    Args:
        record_or_event: what ran.
        delta: δ in (0, 1).
        accountant: ``"pld"`` (tight, default) or ``"rdp"`` (looser, for comparison).
        value_discretization_interval: PLD loss grid (ignored by RDP).
    """
    delta = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    event = _as_event(record_or_event)
    try:
        acc = _accountant(event, accountant, value_discretization_interval)
    except _TooWideForPLD as wide:
        # Without subsampling the run is exactly √T/σ-GDP: its ε(δ) is exact. With it,
        # both the RDP accountant and the run without subsampling bound it (_unsampled).
        exact = gdp_epsilon(wide.mu, delta)
        if wide.q == 1.0:
            return exact
        return min(exact, epsilon(event, delta=delta, accountant="rdp"))
    return float(acc.get_epsilon(delta))


def delta(
    record_or_event: Recordish,
    *,
    epsilon: float,
    accountant: Accountant = "pld",
    value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
) -> float:
    """The accountant's δ at ε: an upper bound on the mechanism's true δ(ε)."""
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    event = _as_event(record_or_event)
    try:
        profile = _profile_function(event, accountant, value_discretization_interval)
    except _TooWideForPLD as wide:
        exact = float(gdp_delta(epsilon, wide.mu))
        if wide.q == 1.0:
            return exact
        return min(exact, delta(event, epsilon=epsilon, accountant="rdp"))
    return float(profile(np.array([epsilon]))[0])


def _profile_function(
    record_or_event: Recordish,
    accountant: Accountant = "pld",
    value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
    """δ(·) of one composed accountant (composition done once, evaluations vectorised).

    Raises:
        _TooWideForPLD: a PLD of the run cannot be built (the caller bounds it otherwise).
    """
    acc = _accountant(_as_event(record_or_event), accountant, value_discretization_interval)
    return _profile_of(acc, accountant)


def _profile_of(
    acc: dp_accounting.PrivacyAccountant, accountant: str
) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
    if accountant == "pld":
        # PLDAccountant.get_delta forwards arrays to the PLD's hockey-stick divergence
        # (sorted ascending ε): a Python loop over the whole loss support per call. The
        # same sums are read off cumulative sums of the composed PMF once (below), so
        # each call is a binary search; the loop is the fallback.
        delta_of = _fast_pld_delta(acc) or acc.get_delta

        def pld_profile(eps: NDArray[np.float64]) -> NDArray[np.float64]:
            eps = np.asarray(eps, dtype=float)
            order = np.argsort(eps)
            out = np.empty_like(eps)
            with np.errstate(over="ignore", invalid="ignore"):
                out[order] = _fill_nan(np.asarray(delta_of(eps[order]), dtype=float))
            return np.clip(out, 0.0, 1.0)

        return pld_profile

    def rdp_profile(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        flat = np.asarray(eps, dtype=float).ravel()
        vals = [min(1.0, float(acc.get_delta(float(e)))) for e in flat]
        return np.asarray(vals).reshape(np.shape(eps))

    return rdp_profile


def _fill_nan(deltas: NDArray[np.float64]) -> NDArray[np.float64]:
    """A profile on ascending ε with each NaN replaced by the value before it (1 first).

    dp-accounting's ``get_delta`` computes e^ε · (a sum that underflows to 0) = ∞ · 0 =
    NaN beyond ε ≈ 709. A profile is non-increasing, so the value at a smaller ε bounds
    it from above: the fill keeps an upper bound and the monotonicity.
    """
    bad = np.isnan(deltas)
    if not np.any(bad):
        return deltas
    index = np.maximum.accumulate(np.where(bad, -1, np.arange(deltas.size)))
    return np.where(index < 0, 1.0, deltas[np.maximum(index, 0)])


def _fast_pld_delta(
    acc: dp_accounting.PrivacyAccountant,
) -> Callable[[NDArray[np.float64]], NDArray[np.float64]] | None:
    """δ(ε) of a composed PLD accountant for sorted ε, equal bit for bit to its
    ``get_delta`` up to ε = 500, or None when the accountant is not one this reads.

    dp-accounting's dense PMF computes, for each ε from the largest down, the hockey-stick
    divergence δ(ε) = m_∞ + Σ_{ℓ_i > ε} p_i − e^ε · Σ_{ℓ_i > ε} p_i e^{−ℓ_i}, adding
    the losses one by one from the largest (``pld_pmf._get_delta_for_epsilon_vectorized``).
    ``np.cumsum`` adds in the same order, so the two running sums at every cut are the
    same floating-point numbers, computed once per accountant instead of once per call.
    This reads the composed PMF (dp-accounting internals, checked against ``get_delta``
    in tests/test_accounting.py); anything unexpected falls back to ``get_delta``.

    Beyond ε = 500 (``_EXP_SAFE``) the same sum is taken as Σ p_i e^{ε − ℓ_i} in
    logarithms: there ``get_delta`` multiplies an overflowing e^ε by a sum whose terms
    underflow, and returns NaN (ε > 709) or loses its digits.

    References:
        Meiser, Mohammadi 2018, "Tight on budget?", Obs. 1 (δ(ε) from the PLD);
        dp-accounting 0.6, ``pld/pld_pmf.py`` (the loop reproduced here).
    """
    dist = getattr(acc, "_pld", None)
    if getattr(acc, "_contains_non_dp_event", True) or dist is None:
        return None
    return _fast_distribution_delta(dist)


def _fast_distribution_delta(
    dist: Any,
) -> Callable[[NDArray[np.float64]], NDArray[np.float64]] | None:
    """:func:`_fast_pld_delta` of a ``PrivacyLossDistribution`` itself."""
    pmfs: list[Any] = [getattr(dist, "_pmf_remove", None)]
    if not getattr(dist, "_symmetric", False):
        pmfs.append(getattr(dist, "_pmf_add", None))
    if not all(type(p) is pld.pld_pmf.DensePLDPmf for p in pmfs):
        return None
    sums = []
    for pmf in pmfs:
        probs = np.asarray(pmf._probs, dtype=float)
        losses = (np.arange(probs.size) + pmf._lower_loss) * pmf._discretization
        # Position m holds the sums over the m largest losses (m = 0: none).
        upper = np.cumsum(np.concatenate([[pmf._infinity_mass], probs[::-1]]))
        # (e^{−ℓ} overflows below ℓ = −709, where δ(ε ≥ 0) never reads the sums)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            lower = np.cumsum(np.concatenate([[0.0], (probs * np.exp(-losses))[::-1]]))
        sums.append([losses, upper, lower, float(pmf._infinity_mass), probs, None])

    def scaled_lower(entry: list[Any], eps: NDArray[np.float64], m: NDArray[np.intp]) -> Any:
        # e^ε · Σ_{m largest} p·e^{−ℓ}, the sums accumulated in logarithms: finite where
        # e^{−ℓ} underflows (ℓ > 745) and read against ε where e^ε overflows (ε > 709).
        # The composed PMF holds a few tiny negative entries (FFT rounding), which the
        # sum above counts too: they are accumulated apart, with their sign.
        if entry[5] is None:
            losses, probs = entry[0], entry[4]
            logs = []
            for part in (np.maximum(probs, 0.0), np.maximum(-probs, 0.0)):
                with np.errstate(divide="ignore"):
                    terms = np.log(part[::-1]) - losses[::-1]
                logs.append(np.concatenate([[-np.inf], np.logaddexp.accumulate(terms)]))
            entry[5] = logs
        positive, negative = entry[5]
        return np.exp(eps + positive[m]) - np.exp(eps + negative[m])

    def delta_of(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        eps = np.asarray(eps, dtype=float)
        out: NDArray[np.float64] | None = None
        large = np.isfinite(eps) & (eps > _EXP_SAFE)
        for entry in sums:
            losses, upper, lower, infinity_mass = entry[:4]
            m = losses.size - np.searchsorted(losses, eps, side="right")  # losses > ε
            with np.errstate(over="ignore", invalid="ignore"):  # ε = ∞ is set just below
                d = np.where(np.isposinf(eps), infinity_mass, upper[m] - np.exp(eps) * lower[m])
            if np.any(large):
                # e^ε · Σ p e^{−ℓ} = Σ p e^{ε−ℓ} ≤ Σ p: no overflow in logarithms. Below
                # _EXP_SAFE the sums above are dp-accounting's own, bit for bit.
                d[large] = upper[m[large]] - scaled_lower(entry, eps[large], m[large])
            out = d if out is None else np.maximum(out, d)
        assert out is not None  # at least the remove PMF
        return out

    return delta_of


def privacy_profile(
    record_or_event: Recordish,
    epsilons: ArrayLike,
    *,
    accountant: Accountant = "pld",
    value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
) -> NDArray[np.float64]:
    """The accountant's δ(ε) on a grid of ε (an upper bound on the true profile)."""
    eps = np.asarray(epsilons, dtype=float)
    if eps.ndim != 1 or np.any(np.isnan(eps)) or np.any(eps < 0):
        raise DpauditError(
            "The 'epsilons' parameter must be a 1-D array of values >= 0. "
            f"Got {epsilons!r} instead."
        )
    try:
        profile = _profile_function(record_or_event, accountant, value_discretization_interval)
    except _TooWideForPLD as wide:
        # The run without subsampling (exactly √T/σ-GDP) bounds it (_unsampled).
        return np.asarray(gdp_delta(eps, wide.mu), dtype=float).reshape(eps.shape)
    return profile(eps)


# --------------------------------------------------------------------------------------
# μ bracket
# --------------------------------------------------------------------------------------


def _gaussian_composition_mu(event: dp_accounting.DpEvent) -> float | None:
    """√T/σ when ``event`` is T self-composed Gaussian steps (or one), else ``None``."""
    count = 1
    if isinstance(event, dp_accounting.SelfComposedDpEvent):
        count, event = int(event.count), event.event
    if isinstance(event, dp_accounting.GaussianDpEvent) and event.noise_multiplier > 0:
        return math.sqrt(count) / float(event.noise_multiplier)
    return None


def mu_bracket(
    record_or_event: Recordish,
    *,
    delta_floor: float = 1e-10,
    rtol: float = 1e-3,
    value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
) -> MuBracket:
    """GDP measurement of the PLD profile: a bracket around the optimal μ.

    The PLD profile is an upper bound on the true profile (pessimistic rounding), so
    ``high`` is a guaranteed μ upper bound for the mechanism on [0, ε_max], ε_max the ε
    where the profile drops to ``delta_floor``; beyond, δ ≤ ``tail_delta``. (A Poisson-
    subsampled Gaussian is not μ-GDP for any μ below the full-batch √T/σ as ε → ∞ —
    its μ_A(ε) creeps up to that tail value only where δ is astronomically small —
    which is why the measurement stops at a δ floor and states the tail separately.)

    References:
        Liu, Sun, Jiang, Kong 2022 (NeurIPS), Sec. 4 (unverified); Dong, Roth, Su 2019, Sec. 5
        (the subsampled Gaussian's GDP limit).
    """
    event = _as_event(record_or_event)
    delta_floor = check_in_interval("delta_floor", delta_floor, 0.0, 1.0, low_open=True)
    exact_mu = _gaussian_composition_mu(event)
    if exact_mu is not None:
        if gdp_delta(0.0, exact_mu) > 1.0 - _EXACT_MEASURED:
            # δ_μ(0) within 1e-9 of 1: the grid's μ_A near ε = 0 has lost its digits to
            # rounding (and none are left from μ ≈ 17 on); the exact value is known.
            return exact_gdp_bracket(exact_mu)
        # Full batch (no subsampling): T Gaussian steps of noise multiplier σ are exactly
        # √T/σ-GDP (Dong, Roth, Su 2019, Cor. 3.3), whose profile δ_μ(ε) is known in
        # closed form (:func:`dpaudit.theory.gdp_delta`): the same measurement on the
        # exact profile, without building a PLD of the whole loss support.
        return gdp_bracket(
            lambda eps: np.asarray(gdp_delta(eps, exact_mu), dtype=float),
            epsilon_max=gdp_epsilon(exact_mu, delta_floor),
            delta_floor=delta_floor,
            rtol=rtol,
        )
    try:
        acc = _accountant(event, "pld", value_discretization_interval)
    except _TooWideForPLD as wide:
        return _capped(
            _UNMEASURED,
            wide.mu,
            f"its privacy losses span more than {MAX_PLD_SPAN:.0e} nats, too wide for a PLD",
        )
    epsilon_max = float(acc.get_epsilon(delta_floor))  # fast: one reverse scan
    if math.isfinite(epsilon_max):
        bracket = gdp_bracket(_profile_of(acc, "pld"), epsilon_max=epsilon_max, rtol=rtol)
    else:
        # The PLD's mass at ε = ∞ (losses no finite ε covers) exceeds the floor.
        bracket = replace(
            _UNMEASURED,
            tail_delta=delta_floor,
            reason=(
                f"the accountant's privacy profile stays above δ = {delta_floor:g} for every "
                "finite ε, so no finite μ can be certified"
            ),
        )
    steps = _gaussian_steps(event)
    if steps is not None:
        sigma, _, t = steps
        unsampled = math.sqrt(t) / sigma
        if not bracket.high <= unsampled:
            return _capped(
                bracket, unsampled, bracket.reason or "the measurement's bound is above it"
            )
    return bracket


#: A bracket that measured nothing: every μ ≥ 0 is possible, none is certified.
_UNMEASURED = MuBracket(
    low=0.0,
    high=math.inf,
    tail_mu=0.0,
    margin=math.inf,
    epsilon_max=math.inf,
    tail_delta=0.0,
    grid=(),
    mu_values=(),
)


def _capped(bracket: MuBracket, unsampled: float, why: str) -> MuBracket:
    """``bracket`` with its upper end replaced by the μ of the same run without
    subsampling, √T/σ, which bounds every subsampled run; ``why`` the measurement did not.

    With the record, a step's output law is the mixture (1 − q)·P + q·Q of the laws
    without (P) and with (Q) it in the batch, and the hockey-stick divergence is jointly
    convex: H_{e^ε}((1 − q)P + qQ ‖ P) ≤ q·H_{e^ε}(Q ‖ P) ≤ H_{e^ε}(Q ‖ P), the latter at
    most the Gaussian mechanism's (the batch is a mixture too); the remove direction is
    the same with the roles swapped. So every step's trade-off curve lies above G_{1/σ},
    and the composition of T of them above G_{√T/σ}.

    References:
        Balle, Barthe, Gaboardi 2018, "Privacy Amplification by Subsampling: Tight
        Analyses via Couplings and Divergences" (NeurIPS; arXiv:1807.01647v2): the
        mixture and joint-convexity argument (section not verified here); Dong, Roth, Su
        2019, Cor. 3.3 (T Gaussian steps are exactly √T/σ-GDP) and Thm. 3.2 (composition
        keeps the order of trade-off curves).
    """
    low = min(bracket.low, unsampled)
    return replace(
        bracket,
        low=low,
        high=unsampled,
        margin=unsampled - low,
        # a plain μ-GDP guarantee, for every ε: no tail beyond the grid
        tail_delta=0.0,
        reason=f"{why}; the same run without subsampling bounds μ by √T/σ = {unsampled:.6g}",
    )


# --------------------------------------------------------------------------------------
# lower estimates: what a claim about a run must reach
# --------------------------------------------------------------------------------------


def epsilon_floor(record_or_event: Recordish, *, delta: float, above: float | None = None) -> float:
    """A lower bound on the true ε(δ) of T Gaussian steps (DP-SGD, DP-GD).

    :func:`epsilon` is an upper bound (every loss rounded up); this rounds every loss
    down: dp-accounting's optimistic PLD (``pessimistic_estimate=False``, its privacy
    buckets, truncated tails dropped) underestimates δ(ε) for every ε, so its ε(δ) is
    below the true one. A claim of a smaller ε at δ is therefore false for what ran.
    Full batch is exactly √T/σ-GDP and its ε(δ) exact. A run too wide for any PLD
    (:func:`pld_discretization` is ``None``) is bounded by ONE of its steps: dropping the
    other outputs is post-processing, so T steps leak at least what one step does.

    The optimistic PLD's error grows with T·step (it loses up to a step per composed
    step: ε = 1.68 against 2.38 at Abadi et al.'s MNIST setting with the step 1e-4). With
    ``above``, while the floor is not above it, the step is made 10 times finer (twice
    at most, while the support keeps within :data:`MAX_PLD_POINTS`), so a claim between
    the two estimates is decided where it can be.

    Raises:
        DpauditError: the event is not a run of Gaussian steps.

    References:
        Meiser, Mohammadi 2018, "Tight on budget?" (CCS), privacy buckets and their
        optimistic/pessimistic rounding; Dong, Roth, Su 2019, Cor. 3.3 (full batch).
    """
    delta = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    sigma, q, t = _gaussian_run(_as_event(record_or_event))
    if q == 1.0:
        return gdp_epsilon(math.sqrt(t) / sigma, delta)
    step = pld_discretization(dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=t))
    if step is None:
        t, step = 1, _one_step_floor_step(sigma, q)  # too wide: one step bounds it below
    for _ in range(3):
        dist = _optimistic(sigma, q, t, step)
        floor = float(dist.get_epsilon_for_delta(delta))
        points = max(len(dist._pmf_remove._probs), len(dist._pmf_add._probs))
        if above is None or floor > above or 10 * points > MAX_PLD_POINTS:
            break
        step /= 10.0
    return floor


def mu_floor(record_or_event: Recordish, *, delta_floor: float = 1e-10) -> float:
    """A lower bound on the smallest μ for which T Gaussian steps are μ-GDP.

    The largest μ_A(ε) (Liu, Sun, Jiang, Kong 2022) over a grid of the optimistic PLD's
    profile (see :func:`epsilon_floor`), which lies below the true profile, so each
    μ_A is below the true one, down to δ = ``delta_floor``; exactly √T/σ for full batch.

    References:
        Liu, Sun, Jiang, Kong 2022 (NeurIPS), Sec. 4 (unverified); Dong, Roth, Su 2019,
        Cor. 3.3.
    """
    sigma, q, t = _gaussian_run(_as_event(record_or_event))
    if q == 1.0:
        return math.sqrt(t) / sigma
    event = dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=t)
    step = pld_discretization(event)
    if step is None:
        t, step = 1, _one_step_floor_step(sigma, q)
    dist = _optimistic(sigma, q, t, step)
    delta_of = _fast_distribution_delta(dist) or dist.get_delta_for_epsilon

    def profile(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.clip(_fill_nan(np.asarray(delta_of(eps), dtype=float)), 0.0, 1.0)

    epsilon_max = float(dist.get_epsilon_for_delta(delta_floor))
    if not math.isfinite(epsilon_max):
        return 0.0
    return gdp_bracket(profile, epsilon_max=epsilon_max).low


def _one_step_floor_step(sigma: float, q: float) -> float:
    """The step of the one-step floor of a run too wide for a PLD: coarse (its span in
    ``_PROBE_POINTS`` points), since rounding down at any step keeps a lower bound, and
    such a run's ε (at least ~1/(2σ²) per sampled step) dwarfs the rounding."""
    return min(_gaussian_loss_span(sigma) / _PROBE_POINTS, _MAX_STEP)


def _gaussian_run(event: dp_accounting.DpEvent) -> tuple[float, float, int]:
    steps = _gaussian_steps(event)
    if steps is None:
        raise DpauditError(
            "A lower estimate is computed for runs of Gaussian steps (DP-SGD, DP-GD) only. "
            f"Got {event!r} instead."
        )
    return steps


@functools.lru_cache(maxsize=4)
def _optimistic(sigma: float, q: float, steps: int, step: float) -> Any:
    """dp-accounting's optimistic PLD of T subsampled Gaussian steps (cached)."""
    single = pld.privacy_loss_distribution.from_gaussian_mechanism(
        standard_deviation=sigma,
        sampling_prob=q,
        value_discretization_interval=step,
        pessimistic_estimate=False,
        # connect-the-dots is pessimistic only: privacy buckets, said explicitly
        use_connect_dots=False,
    )
    return single.self_compose(steps)


# --------------------------------------------------------------------------------------
# public contract (docs/design.md, "Python API") and calibration
# --------------------------------------------------------------------------------------


def dpsgd_epsilon(
    *,
    noise_multiplier: float,
    sampling_rate: float,
    steps: int,
    delta: float,
    accountant: Accountant = "pld",
) -> float:
    """ε at δ of T steps of Poisson-subsampled DP-SGD (DP-GD when q = 1).

    Example (Abadi et al. 2016's MNIST setting; PLD ≈ 2.38, RDP ≈ 2.60)::

        dpsgd_epsilon(noise_multiplier=1.1, sampling_rate=256 / 60000,
                      steps=14063, delta=1e-5)
    """
    event = dpsgd_event(noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps)
    return epsilon(event, delta=delta, accountant=accountant)


def dpsgd_mu_bracket(
    *, noise_multiplier: float, sampling_rate: float, steps: int
) -> tuple[float, float]:
    """(μ_low, μ_high) of DP-SGD from the GDP measurement of its PLD profile.

    See :func:`mu_bracket` for what the bracket covers (ε up to where δ = 1e-10).
    For q = 1 the mechanism is exactly √T/σ-GDP and the bracket contains that value.
    """
    event = dpsgd_event(noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps)
    b = mu_bracket(event)
    return (b.low, b.high)


def calibrate_noise(
    *,
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    steps: int,
    accountant: Accountant = "pld",
) -> float:
    """The smallest noise multiplier σ whose accountant ε at δ is ≤ ``target_epsilon``.

    Uses dp-accounting's ``calibrate_dp_mechanism`` (Brent's method on ε(σ), which
    decreases in σ). RDP first: it is fast and its ε is above PLD's, so its σ brackets
    the PLD σ from above; PLD then searches just below it (small σ make huge PLDs).
    The returned σ always meets the target (nudged up if the root lands above it).
    """
    target_epsilon = check_in_interval(
        "target_epsilon", target_epsilon, 0.0, math.inf, low_open=True, high_open=True
    )
    delta = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    _check_dpsgd(1.0, sampling_rate, steps)
    check_choice("accountant", accountant, ACCOUNTANTS)

    def make_event(sigma: float) -> dp_accounting.DpEvent:
        return dpsgd_event(noise_multiplier=sigma, sampling_rate=sampling_rate, steps=steps)

    def eps_at(sigma: float, kind: Accountant) -> float:
        return epsilon(make_event(sigma), delta=delta, accountant=kind)

    with _quiet_rdp():
        rdp_sigma = dp_accounting.calibrate_dp_mechanism(
            lambda: rdp.RdpAccountant(orders=_RDP_ORDERS),
            make_event,
            target_epsilon,
            delta,
            dp_accounting.LowerEndpointAndGuess(1e-3, 1.0),
            tol=1e-6,
        )
    sigma = float(rdp_sigma)
    if accountant == "pld":
        upper, lower = sigma, 0.8 * sigma
        while eps_at(lower, "pld") <= target_epsilon:  # PLD σ is below RDP's; find a bracket
            upper, lower = lower, 0.8 * lower
        sigma = float(
            dp_accounting.calibrate_dp_mechanism(
                lambda: pld.PLDAccountant(
                    value_discretization_interval=DEFAULT_VALUE_DISCRETIZATION_INTERVAL
                ),
                make_event,
                target_epsilon,
                delta,
                dp_accounting.ExplicitBracketInterval(lower, upper),
                tol=1e-5 * upper,
            )
        )
    while eps_at(sigma, accountant) > target_epsilon:  # keep the target met
        sigma *= 1.0 + 1e-6
    return sigma
