"""Composition theorems side by side: ε(δ) of T steps of DP-SGD by each of them.

For one DP-SGD setting (σ, q, T, δ) — T steps of the Poisson-subsampled Gaussian
mechanism with noise multiplier σ and rate q, add-or-remove neighbours — every row of
:func:`compare` is ε at the same total δ, so the rows can be read against each other:

========================  ===========================================  ===============
row                       how                                           validity
========================  ===========================================  ===============
``naive``                 T·ε₀ at per-step δ₀ = δ/T                    upper bound
``advanced``              Dwork, Rothblum, Vadhan at δ₀ = δ/(2T),      upper bound
                          δ' = δ/2
``optimal-dp``            Kairouz, Oh, Viswanath's optimal composition  upper bound
                          of (ε₀, δ₀)-DP steps, same split
``rdp``                   dp-accounting's RDP accountant                upper bound
``pld``                   dpaudit's PLD accountant (dp-accounting)      upper bound
``gdp-clt``               μ = q·√(T(e^{1/σ²} − 1)) (Poisson only)      approximation
``gdp-exact``             μ = √T/σ (full batch only)                    exact
``liu-composition``       √(Σ μᵢ²) of identified per-step μᵢ           exact if q = 1,
                                                                        else bound
``liu-measured``          √T · per-step μ measured on δ ≥ 1e-10        approximation
                          (Poisson only)
========================  ===========================================  ===============

The per-step (ε₀, δ₀) of the three (ε, δ)-composition rows is the tight one: the PLD
accountant's ε of ONE subsampled Gaussian step at δ₀ (an upper bound on that step's
true ε(δ₀)), so these rows lose only what the composition theorem loses.

Every GDP row converts μ to ε at δ with the exact GDP profile
(:func:`dpaudit.theory.gdp_epsilon`, Dong, Roth, Su 2019, Cor. 2.13).

The per-step μ of ``liu-composition``: a full-batch step is the Gaussian mechanism, which
:func:`dpaudit.theory.identification.identify_mechanism` identifies as exactly (1/σ)-GDP from
its profile, so the row equals ``gdp-exact``. A Poisson step's trade-off curve is at
least G_{1/σ}: the step is a post-processing of the full-batch step (keep its output
with probability q, else replace it by a fresh draw of the no-record output), so its
optimal μ* ≤ 1/σ and the composition √T/σ is a valid bound, but it forgets the
amplification by subsampling, since the per-step μ_A(ε) keeps rising with ε (the tail
that decides GDP in Liu et al.'s identification; see :func:`dpaudit.accounting.mu_bracket`).
``liu-measured`` composes instead the per-step μ measured on ε ≤ ε_max (where the
per-step δ falls to 1e-10; :func:`dpaudit.accounting.mu_bracket`, identified by
:func:`dpaudit.theory.identification.identify_bracket`): closer to the truth, but not a bound,
since the measurement ignores the tail beyond ε_max.

Pure: numbers and dp-accounting (through :mod:`dpaudit.accounting`); no torch.

References:
    Dwork, Roth 2014, "The Algorithmic Foundations of Differential Privacy", Thm. 3.16
    (basic composition) and Thm. 3.20 (advanced composition, first proved by Dwork,
    Rothblum, Vadhan 2010, FOCS);
    Kairouz, Oh, Viswanath 2015, "The Composition Theorem for Differential Privacy"
    (ICML; arXiv:1311.0776), Thm. 3.3 (optimal composition of k (ε, δ)-DP mechanisms);
    Dong, Roth, Su 2019/2022, "Gaussian Differential Privacy" (JRSS-B), Cor. 2.13
    (μ → (ε, δ)), Cor. 3.3 (G_μ₁ ⊗ G_μ₂ = G_√(μ₁²+μ₂²)) and §5 (the central limit
    theorem for the subsampled Gaussian: μ = q√(T(e^{1/σ²} − 1)); theorem number
    unverified); Bu, Dong, Long, Su 2020, "Deep Learning with Gaussian Differential
    Privacy" (Harvard Data Science Review) for the same μ applied to DP-SGD;
    Liu, Sun, Jiang, Kong 2022, "Identification, Amplification and Measurement: A bridge
    to Gaussian Differential Privacy" (NeurIPS; arXiv:2210.09269): GDP identification
    and measurement of a profile, then GDP composition, compared in their applications
    with the standard and advanced composition theorems (section numbers unverified:
    only the abstract could be read).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
from scipy import special

from dpaudit import accounting
from dpaudit.errors import DpauditError, check_in_interval, check_integer
from dpaudit.theory import gdp_epsilon
from dpaudit.theory.identification import identify_bracket, identify_mechanism

__all__ = [
    "CompositionRow",
    "CompositionTable",
    "advanced_composition",
    "clt_mu",
    "compare",
    "format_markdown",
    "gdp_compose",
    "naive_composition",
    "optimal_composition_delta",
    "optimal_composition_epsilon",
    "per_step_epsilon",
]

Validity = Literal["upper bound", "approximation", "exact"]

# Per-step δ floor of the measured per-step μ (liu-measured): accounting.mu_bracket's.
MEASURED_DELTA_FLOOR = 1e-10


@dataclass(frozen=True)
class CompositionRow:
    """One composition method's answer for a DP-SGD setting.

    Attributes:
        method: the row's key (``naive``, ``advanced``, ...).
        epsilon: ε at the table's δ (``math.inf`` when the method gives none).
        mu: the GDP μ for the GDP rows, else None.
        validity: ``"upper bound"`` (a theorem: the true ε(δ) is at most this),
            ``"exact"`` (equal to the true ε(δ)) or ``"approximation"`` (neither).
        how: what was composed, in words (the per-step guarantee and the δ split).
    """

    method: str
    epsilon: float
    mu: float | None
    validity: Validity
    how: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class CompositionTable:
    """ε(δ) of T steps of DP-SGD by every composition method of :func:`compare`."""

    noise_multiplier: float
    sampling_rate: float
    steps: int
    delta: float
    rows: tuple[CompositionRow, ...]

    def row(self, method: str) -> CompositionRow:
        """The row of ``method``; raises DpauditError listing the methods present."""
        for r in self.rows:
            if r.method == method:
                return r
        raise DpauditError(
            f"The 'method' parameter must be one of {{{', '.join(r.method for r in self.rows)}}}"
            f". Got {method!r} instead."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "noise_multiplier": self.noise_multiplier,
            "sampling_rate": self.sampling_rate,
            "steps": self.steps,
            "delta": self.delta,
            "rows": [r.to_dict() for r in self.rows],
        }


# --------------------------------------------------------------------------------------
# (ε, δ) composition theorems
# --------------------------------------------------------------------------------------


def naive_composition(epsilon0: float, delta0: float, steps: int) -> tuple[float, float]:
    """(T·ε₀, T·δ₀): T (ε₀, δ₀)-DP mechanisms compose to this (basic composition).

    References:
        Dwork, Roth 2014, Thm. 3.16.
    """
    epsilon0 = check_in_interval("epsilon0", epsilon0, 0.0, math.inf, high_open=True)
    delta0 = check_in_interval("delta0", delta0, 0.0, 1.0)
    t = check_integer("steps", steps, low=1)
    return t * epsilon0, min(1.0, t * delta0)


def advanced_composition(
    epsilon0: float, delta0: float, steps: int, *, delta_prime: float
) -> tuple[float, float]:
    """(ε', T·δ₀ + δ') of T-fold adaptive composition of (ε₀, δ₀)-DP mechanisms.

    ε' = √(2T ln(1/δ')) ε₀ + T ε₀ (e^{ε₀} − 1).

    References:
        Dwork, Rothblum, Vadhan 2010 (FOCS), Thm. III.3, as stated in Dwork, Roth 2014,
        Thm. 3.20.
    """
    epsilon0 = check_in_interval("epsilon0", epsilon0, 0.0, math.inf, high_open=True)
    delta0 = check_in_interval("delta0", delta0, 0.0, 1.0)
    delta_prime = check_in_interval("delta_prime", delta_prime, 0.0, 1.0, low_open=True)
    t = check_integer("steps", steps, low=1)
    eps = math.sqrt(2.0 * t * math.log(1.0 / delta_prime)) * epsilon0 + t * epsilon0 * math.expm1(
        epsilon0
    )
    return eps, min(1.0, t * delta0 + delta_prime)


def optimal_composition_delta(epsilon0: float, steps: int, epsilon: float) -> float:
    """δ(ε) of the optimal T-fold composition of ε₀-DP (pure) mechanisms.

    Kairouz, Oh, Viswanath's dominating pair: T independent randomised responses with
    P[1] = e^{ε₀}/(1 + e^{ε₀}); the privacy loss is (T − 2l)ε₀ with l ~ Binomial(T,
    1/(1 + e^{ε₀})), and δ(ε) = E[(1 − e^{ε − L})₊] is its hockey-stick divergence
    (evaluated in log space). At ε = (T − 2i)ε₀ this is their δ_i.

    References:
        Kairouz, Oh, Viswanath 2015 (ICML), Thm. 3.3.
    """
    epsilon0 = check_in_interval("epsilon0", epsilon0, 0.0, math.inf, high_open=True)
    epsilon = check_in_interval("epsilon", epsilon, 0.0, math.inf, high_open=True)
    t = check_integer("steps", steps, low=1)
    if epsilon0 == 0.0:
        return 0.0
    ell = np.arange(t + 1, dtype=float)
    loss = (t - 2.0 * ell) * epsilon0
    keep = loss > epsilon
    if not np.any(keep):
        return 0.0
    ell, loss = ell[keep], loss[keep]
    log_binom = (
        special.gammaln(t + 1.0) - special.gammaln(ell + 1.0) - special.gammaln(t - ell + 1.0)
    )
    # P-probability of l: C(T, l) e^{(T−l)ε₀} / (1 + e^{ε₀})^T
    log_p = log_binom + (t - ell) * epsilon0 - t * np.logaddexp(0.0, epsilon0)
    terms = log_p + np.log(-np.expm1(epsilon - loss))
    return float(min(1.0, math.exp(special.logsumexp(terms))))


def optimal_composition_epsilon(epsilon0: float, delta0: float, steps: int, delta: float) -> float:
    """The smallest ε with (ε, δ) guaranteed by T-fold optimal composition of (ε₀, δ₀)-DP.

    The composition is (ε, 1 − (1 − δ₀)^T (1 − δ̃(ε)))-DP, δ̃ from
    :func:`optimal_composition_delta` (Kairouz, Oh, Viswanath 2015, Thm. 3.3); solved for
    ε by bisection on the decreasing δ̃. ``math.inf`` when T·δ₀ alone exceeds δ.
    """
    delta0 = check_in_interval("delta0", delta0, 0.0, 1.0)
    delta = check_in_interval("delta", delta, 0.0, 1.0, low_open=True)
    t = check_integer("steps", steps, low=1)
    # 1 − (1 − δ₀)^T (1 − δ̃) ≤ δ  ⇔  δ̃ ≤ 1 − (1 − δ)/(1 − δ₀)^T
    budget = -math.expm1(math.log1p(-delta) - t * math.log1p(-delta0))
    if budget <= 0.0:
        return math.inf
    high = t * epsilon0
    if optimal_composition_delta(epsilon0, t, 0.0) <= budget:
        return 0.0

    def gap(e: float) -> float:
        return optimal_composition_delta(epsilon0, t, e) - budget

    # δ̃ is continuous and decreasing, 0 at T·ε₀: a root in (0, T·ε₀]; the upper end of
    # the final bracket is returned so that δ̃(ε) ≤ budget holds at the answer.
    low = 0.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if gap(mid) > 0.0:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * max(1.0, high):
            break
    return high


# --------------------------------------------------------------------------------------
# GDP
# --------------------------------------------------------------------------------------


def gdp_compose(mus: Sequence[float]) -> float:
    """√(Σ μᵢ²): the composition of μᵢ-GDP mechanisms is exactly √(Σ μᵢ²)-GDP.

    References:
        Dong, Roth, Su 2019, Cor. 3.3; used by Liu, Sun, Jiang, Kong 2022 to compose
        identified μ's.
    """
    values = [check_in_interval("mu", m, 0.0, math.inf, high_open=True) for m in mus]
    if not values:
        raise DpauditError("The 'mus' parameter must hold at least one μ. Got none.")
    return math.sqrt(math.fsum(m * m for m in values))


def clt_mu(noise_multiplier: float, sampling_rate: float, steps: int) -> float:
    """μ = q √(T (e^{1/σ²} − 1)): the central-limit GDP of Poisson-subsampled DP-SGD.

    An asymptotic approximation (q√T → constant as T → ∞), not a bound: at finite T it
    can be below the true μ.

    References:
        Dong, Roth, Su 2019/2022, §5 (theorem number unverified); Bu, Dong, Long, Su 2020.
    """
    sigma, q, t = accounting._check_dpsgd(noise_multiplier, sampling_rate, steps)
    return q * math.sqrt(t * math.expm1(1.0 / sigma**2))


# --------------------------------------------------------------------------------------
# the table
# --------------------------------------------------------------------------------------


def per_step_epsilon(noise_multiplier: float, sampling_rate: float, delta0: float) -> float:
    """ε₀ at δ₀ of ONE subsampled Gaussian step, by the PLD accountant (an upper bound)."""
    delta0 = check_in_interval("delta0", delta0, 0.0, 1.0, low_open=True, high_open=True)
    return float(_one_step_pld(noise_multiplier, sampling_rate).get_epsilon(delta0))


@functools.lru_cache(maxsize=8)
def _one_step_pld(noise_multiplier: float, sampling_rate: float) -> Any:
    """The PLD accountant of one step, built once (two per-step δ₀ are read from it)."""
    event = accounting.dpsgd_event(
        noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=1
    )
    return accounting._accountant(event, "pld")


@functools.lru_cache(maxsize=16)
def compare(
    *, noise_multiplier: float, sampling_rate: float, steps: int, delta: float
) -> CompositionTable:
    """ε at δ of T steps of DP-SGD (σ, q) by every composition method (module docstring).

    Args:
        noise_multiplier: σ.
        sampling_rate: q in (0, 1]; 1 is full-batch DP-GD.
        steps: T.
        delta: the total δ of every row.
    """
    sigma, q, t = accounting._check_dpsgd(noise_multiplier, sampling_rate, steps)
    delta = check_in_interval("delta", delta, 0.0, 1.0, low_open=True, high_open=True)
    rows: list[CompositionRow] = []

    d_naive = delta / t
    e0_naive = per_step_epsilon(sigma, q, d_naive)
    eps_naive, _ = naive_composition(e0_naive, d_naive, t)
    rows.append(
        CompositionRow(
            "naive",
            eps_naive,
            None,
            "upper bound",
            f"T·ε₀, per-step (ε₀, δ₀) = ({e0_naive:.4g}, δ/T) by PLD",
        )
    )

    d_adv = delta / (2.0 * t)
    e0_adv = per_step_epsilon(sigma, q, d_adv)
    eps_adv, _ = advanced_composition(e0_adv, d_adv, t, delta_prime=delta / 2.0)
    rows.append(
        CompositionRow(
            "advanced",
            eps_adv,
            None,
            "upper bound",
            f"Dwork-Rothblum-Vadhan, per-step ({e0_adv:.4g}, δ/(2T)), δ' = δ/2",
        )
    )
    eps_opt = optimal_composition_epsilon(e0_adv, d_adv, t, delta)
    rows.append(
        CompositionRow(
            "optimal-dp",
            eps_opt,
            None,
            "upper bound",
            f"Kairouz-Oh-Viswanath optimal, per-step ({e0_adv:.4g}, δ/(2T))",
        )
    )

    event = accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=t)
    rows.append(
        CompositionRow(
            "rdp",
            accounting.epsilon(event, delta=delta, accountant="rdp"),
            None,
            "upper bound",
            "dp-accounting RdpAccountant",
        )
    )
    rows.append(
        CompositionRow(
            "pld",
            accounting.epsilon(event, delta=delta, accountant="pld"),
            None,
            "upper bound",
            "dp-accounting PLDAccountant (pessimistic)",
        )
    )

    full = math.sqrt(t) / sigma
    if q == 1.0:
        rows.append(
            CompositionRow(
                "gdp-exact", gdp_epsilon(full, delta), full, "exact", "μ = √T/σ (full batch)"
            )
        )
        # each step is the Gaussian mechanism with sensitivity 1 and noise σ: identified
        # from its exact profile (exactly GDP: its trade-off curve is G_μ₀, so the
        # composition is exactly √T·μ₀-GDP; otherwise μ₀ is the bracket's upper end)
        step_id = identify_mechanism("gaussian", {"sensitivity": 1.0, "sigma": sigma})
        mu_liu = gdp_compose([step_id.mu] * t)
        rows.append(
            CompositionRow(
                "liu-composition",
                gdp_epsilon(mu_liu, delta),
                mu_liu,
                "exact" if step_id.exact else "upper bound",
                f"√(Σ μᵢ²), each step identified {'exactly ' if step_id.exact else ''}"
                f"{step_id.mu:.6g}-GDP",
            )
        )
        return CompositionTable(sigma, q, t, delta, tuple(rows))

    mu_clt = clt_mu(sigma, q, t)
    rows.append(
        CompositionRow(
            "gdp-clt",
            gdp_epsilon(mu_clt, delta),
            mu_clt,
            "approximation",
            "CLT μ = q√(T(e^{1/σ²} − 1))",
        )
    )
    rows.append(
        CompositionRow(
            "liu-composition",
            gdp_epsilon(full, delta),
            full,
            "upper bound",
            "√(Σ μᵢ²), per-step μ* ≤ 1/σ (the tail of μ_A)",
        )
    )
    step = accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=1)
    step_id = identify_bracket(
        accounting.mu_bracket(step, delta_floor=MEASURED_DELTA_FLOOR), source="one step"
    )
    measured = step_id.bracket
    mu_measured = gdp_compose([measured.high] * t)
    rows.append(
        CompositionRow(
            "liu-measured",
            gdp_epsilon(mu_measured, delta),
            mu_measured,
            "approximation",
            f"√T · per-step μ ≤ {measured.high:.4g} for ε ≤ {measured.epsilon_max:.3g}"
            + (" (μ_A still rising there)" if step_id.tail_rising else ""),
        )
    )
    return CompositionTable(sigma, q, t, delta, tuple(rows))


def format_markdown(table: CompositionTable, *, title: bool = True) -> str:
    """The table as markdown (what ``dpaudit account --compare`` prints)."""
    lines = []
    if title:
        lines.append(
            f"DP-SGD σ = {table.noise_multiplier:g}, q = {table.sampling_rate:.6g}, "
            f"T = {table.steps}: ε at δ = {table.delta:g}"
        )
        lines.append("")
    lines.append("| method | ε | μ | validity | how |")
    lines.append("|---|---:|---:|---|---|")
    for r in table.rows:
        mu = "" if r.mu is None else f"{r.mu:.4f}"
        lines.append(f"| {r.method} | {r.epsilon:.4f} | {mu} | {r.validity} | {r.how} |")
    return "\n".join(lines)
