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

import math
from collections.abc import Callable
from typing import Any, Literal, TypeAlias

import dp_accounting
import numpy as np
from dp_accounting import pld, rdp
from numpy.typing import ArrayLike, NDArray

from dpaudit.errors import DpauditError, check_choice, check_in_interval, check_integer
from dpaudit.records import DPSGDRecord
from dpaudit.theory import MuBracket, gdp_bracket, gdp_delta, gdp_epsilon, laplace_scale

__all__ = [
    "ACCOUNTANTS",
    "DEFAULT_VALUE_DISCRETIZATION_INTERVAL",
    "calibrate_noise",
    "delta",
    "dpsgd_epsilon",
    "dpsgd_event",
    "dpsgd_mu_bracket",
    "epsilon",
    "event_from_record",
    "laplace_event",
    "mu_bracket",
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
    accountant = check_choice("accountant", accountant, ACCOUNTANTS)
    if accountant == "pld":
        # pessimistic_estimate is dp-accounting's default: ε and δ are upper bounds
        acc = pld.PLDAccountant(value_discretization_interval=value_discretization_interval)
    else:
        acc = rdp.RdpAccountant(orders=_RDP_ORDERS)
    if not acc.supports(event):
        raise DpauditError(f"The {accountant!r} accountant cannot account for {event!r}.")
    acc.compose(event)
    return acc


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
    acc = _accountant(_as_event(record_or_event), accountant, value_discretization_interval)
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
    acc = _accountant(_as_event(record_or_event), accountant, value_discretization_interval)
    return float(acc.get_delta(epsilon))


def _profile_function(
    record_or_event: Recordish,
    accountant: Accountant = "pld",
    value_discretization_interval: float = DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
) -> Callable[[NDArray[np.float64]], NDArray[np.float64]]:
    """δ(·) of one composed accountant (composition done once, evaluations vectorised)."""
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
            out[order] = np.asarray(delta_of(eps[order]), dtype=float)
            return np.clip(out, 0.0, 1.0)

        return pld_profile

    def rdp_profile(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        flat = np.asarray(eps, dtype=float).ravel()
        vals = [min(1.0, float(acc.get_delta(float(e)))) for e in flat]
        return np.asarray(vals).reshape(np.shape(eps))

    return rdp_profile


def _fast_pld_delta(
    acc: dp_accounting.PrivacyAccountant,
) -> Callable[[NDArray[np.float64]], NDArray[np.float64]] | None:
    """δ(ε) of a composed PLD accountant for sorted ε, equal bit for bit to its
    ``get_delta``, or None when the accountant is not one this reads.

    dp-accounting's dense PMF computes, for each ε from the largest down, the hockey-stick
    divergence δ(ε) = m_∞ + Σ_{ℓ_i > ε} p_i − e^ε · Σ_{ℓ_i > ε} p_i e^{−ℓ_i}, adding
    the losses one by one from the largest (``pld_pmf._get_delta_for_epsilon_vectorized``).
    ``np.cumsum`` adds in the same order, so the two running sums at every cut are the
    same floating-point numbers, computed once per accountant instead of once per call.
    This reads the composed PMF (dp-accounting internals, checked against ``get_delta``
    in tests/test_accounting.py); anything unexpected falls back to ``get_delta``.

    References:
        Meiser, Mohammadi 2018, "Tight on budget?", Obs. 1 (δ(ε) from the PLD);
        dp-accounting 0.6, ``pld/pld_pmf.py`` (the loop reproduced here).
    """
    dist = getattr(acc, "_pld", None)
    if getattr(acc, "_contains_non_dp_event", True) or dist is None:
        return None
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
        lower = np.cumsum(np.concatenate([[0.0], (probs * np.exp(-losses))[::-1]]))
        sums.append((losses, upper, lower, float(pmf._infinity_mass)))

    def delta_of(eps: NDArray[np.float64]) -> NDArray[np.float64]:
        eps = np.asarray(eps, dtype=float)
        out: NDArray[np.float64] | None = None
        for losses, upper, lower, infinity_mass in sums:
            m = losses.size - np.searchsorted(losses, eps, side="right")  # losses > ε
            with np.errstate(over="ignore", invalid="ignore"):  # ε = ∞ is set just below
                d = np.where(np.isposinf(eps), infinity_mass, upper[m] - np.exp(eps) * lower[m])
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
    return _profile_function(record_or_event, accountant, value_discretization_interval)(eps)


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
    acc = _accountant(event, "pld", value_discretization_interval)
    epsilon_max = float(acc.get_epsilon(delta_floor))  # fast: one reverse scan
    profile = _profile_of(acc, "pld")
    return gdp_bracket(profile, epsilon_max=epsilon_max, rtol=rtol)


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

    sigma = float(
        dp_accounting.calibrate_dp_mechanism(
            lambda: rdp.RdpAccountant(orders=_RDP_ORDERS),
            make_event,
            target_epsilon,
            delta,
            dp_accounting.LowerEndpointAndGuess(1e-3, 1.0),
            tol=1e-6,
        )
    )
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
