"""Upper bounds: what ran (records) or what is claimed → the (ε, δ, μ) a lower bound meets.

The ONE place that turns a training run's :class:`~dpaudit.records.DPSGDRecord` (read
from the engine or a user trainer, never from the configuration that asked for it) or a
stated :class:`Claim` into the upper bounds that audits hold their
lower bounds against. Accounting itself is dp-accounting's (:mod:`dpaudit.accounting`).

Records travel through the run store as arrays (:meth:`DPSGDRecord.to_arrays`,
:meth:`DPSGDRecord.from_arrays`): units store raw outputs, bounds come after the store.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# dp-accounting's accountants load on first use (dpaudit.accounting is lazy): an audit
# file that states a claim is validated without them.
from dpaudit import accounting
from dpaudit.records import DPSGDRecord
from dpaudit.theory import full_batch_zcdp, gdp_epsilon, mu_from_pure_dp, zcdp_to_dp

__all__ = [
    "RECORD_KEYS",
    "Claim",
    "ClaimCheck",
    "UpperBound",
    "check_claim",
    "from_claim",
    "from_records",
]

#: The arrays one record is stored as (one entry per model).
RECORD_KEYS = DPSGDRecord.ARRAY_KEYS


@dataclass(frozen=True)
class Claim:
    """The privacy a mechanism or trainer claims: (ε, δ)-DP and/or μ-GDP, or ρ-zCDP.

    A ρ-zCDP claim (``rho``, alone) is held as (ρ + 2√(ρ ln(1/δ)), δ)-DP at the audit's δ
    (Bun, Steinke 2016, Prop. 1.3) and implies no μ-GDP bound
    (:func:`dpaudit.accounting.upper_bounds.from_claim`).
    """

    epsilon: float | None = None
    delta: float = 0.0
    mu: float | None = None
    rho: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"epsilon": self.epsilon, "delta": self.delta, "mu": self.mu}
        if self.rho is not None:
            out["rho"] = self.rho
        return out


@dataclass(frozen=True)
class UpperBound:
    """The upper bounds an audit's lower bounds are held against.

    Attributes:
        epsilon: ε at ``epsilon_delta`` (``inf`` for a claim of no privacy).
        epsilon_delta: the δ of that ε.
        mu: μ of a μ-GDP guarantee, or ``None`` when the guarantee implies none.
        source: ``"accountant"``, ``"trainer claim"``, ``"claimed"``, ``"theoretical"``.
        detail: what it was derived from (records or the claim), for the report.
        mu_tail: the μ bracket of a Poisson-subsampled Gaussian covers ε up to where
            δ = 1e-10; beyond, δ ≤ ``mu_tail``, so the trade-off curve is only
            ≥ G_μ(α + t) − t (see :class:`dpaudit.accounting.MuBracket`).
    """

    epsilon: float
    epsilon_delta: float
    mu: float | None
    source: str
    detail: Mapping[str, Any] = field(default_factory=dict)
    mu_tail: float = 0.0

    @property
    def epsilon_finite(self) -> bool:
        """Whether the ε bound can be violated (an infinite one never can)."""
        return math.isfinite(self.epsilon)

    @property
    def mu_finite(self) -> bool:
        return self.mu is not None and math.isfinite(self.mu)


@functools.lru_cache(maxsize=64)
def _poisson_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    # Cached: PLD composition dominates small audits; a record's ε depends on it alone.
    return accounting.dpsgd_epsilon(
        noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=delta
    )


@functools.lru_cache(maxsize=64)
def _poisson_mu_high(sigma: float, q: float, steps: int) -> tuple[float, float]:
    """(μ_high, tail δ) of the GDP measurement of the record's PLD profile."""
    bracket = accounting.mu_bracket(
        accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=steps)
    )
    return bracket.high, bracket.tail_delta


def from_records(
    records: Iterable[DPSGDRecord], delta: float, *, with_mu: bool = True
) -> UpperBound:
    """The accountant's bounds for what ran: the largest over the records.

    Models of the two arms of a canary audit may have run slightly different q (b / n_k
    with the canary a member or not): the guarantee must hold for every one of them, so
    the weakest (largest) bound is kept.

    Args:
        records: one per model (duplicates are accounted once).
        delta: δ of the ε bound.
        with_mu: also measure μ (the GDP bracket of Liu et al. 2022; costs a PLD profile).
    """
    distinct = sorted(
        {
            (r.noise_multiplier, r.sampling_rate, r.steps, r.clipping_norm, r.sampling)
            for r in records
        }
    )
    eps: list[float] = []
    mus: list[float] = []
    tails = [0.0]
    shown = []
    for sigma, q, steps, clip, sampling in distinct:
        shown.append(
            DPSGDRecord(
                noise_multiplier=sigma,
                sampling_rate=q,
                steps=int(steps),
                clipping_norm=clip,
                sampling=sampling,
            ).to_dict()
        )
        if sampling == "full-batch" or q == 1.0:
            # Full batch: exactly (√T/σ)-GDP, whose ε(δ) is exact (Dong, Roth, Su 2019,
            # Cor. 2.13 and 3.3); PLD would only add its discretisation excess.
            mu = math.sqrt(steps) / sigma
            mus.append(mu)
            eps.append(gdp_epsilon(mu, delta))
        else:
            eps.append(_poisson_epsilon(sigma, q, int(steps), delta))
            if with_mu:
                high, tail = _poisson_mu_high(sigma, q, int(steps))
                mus.append(high)
                tails.append(tail)
    if not eps:
        raise ValueError("from_records needs at least one record")
    mu_upper = max(mus) if mus else None
    return UpperBound(max(eps), delta, mu_upper, "accountant", {"records": shown}, max(tails))


def from_claim(claim: Claim, delta: float, *, source: str = "trainer claim") -> UpperBound:
    """The bounds a stated guarantee gives.

    A ρ-zCDP claim gives (ρ + 2√(ρ ln(1/δ)), δ)-DP at ``delta`` and no μ (Bun, Steinke
    2016, Prop. 1.3). An ε claim is held at its own δ; a μ-only claim gives ε(δ) of μ-GDP
    at ``delta`` (Dong, Roth, Su 2019, Cor. 2.13). A pure ε-DP claim (δ = 0) implies μ-GDP with
    μ = −2Φ⁻¹(1/(1 + e^ε)): G_μ is convex and meets f_{ε,0} at its kink, so it lies below
    both of f_{ε,0}'s lines (Dong, Roth, Su 2019, §2). (ε, δ > 0) implies no finite μ.
    """
    if claim.rho is not None:
        if claim.epsilon is not None or claim.mu is not None:
            raise ValueError("a claim gives 'rho' (zCDP) alone, or 'epsilon'/'mu' without it")
        if not delta > 0.0:
            raise ValueError(
                "a 'rho' (zCDP) claim is held as (epsilon, delta)-DP at [audit] delta, which "
                f"must then be > 0; got delta = {delta}"
            )
        # ρ-zCDP ⇒ (ρ + 2√(ρ ln(1/δ)), δ)-DP for every δ > 0 (Bun, Steinke 2016,
        # Prop. 1.3); zCDP implies no μ-GDP bound.
        eps = zcdp_to_dp(claim.rho, delta)
        return UpperBound(eps, delta, None, source, {"claim": claim.to_dict()})
    if claim.epsilon is not None:
        eps_upper, eps_delta = claim.epsilon, claim.delta
    elif claim.mu is not None:
        eps_upper, eps_delta = gdp_epsilon(claim.mu, delta), delta
    else:
        raise ValueError("a claim needs epsilon, mu or rho")
    mu_upper: float | None
    if claim.mu is not None:
        mu_upper = claim.mu
    elif claim.delta == 0.0 and claim.epsilon is not None and math.isfinite(claim.epsilon):
        mu_upper = mu_from_pure_dp(claim.epsilon)
    else:
        mu_upper = None
    return UpperBound(eps_upper, eps_delta, mu_upper, source, {"claim": claim.to_dict()})


# ---------------------------------------------------------------------- claim vs records


@dataclass(frozen=True)
class ClaimCheck:
    """A stated claim held against the tight accountant of what ran.

    Deterministic: a function of the claim and the records alone, so it cannot fail by
    chance and takes no share of a verdict's confidence budget.

    Attributes:
        holds: False when what ran provably allows more than the claim states: its
            lower estimate (``floor``) is above the stated value.
        parameter: what decided: ``"epsilon"``, ``"mu"`` or ``"rho"``.
        stated: the value the claim states (for a ρ claim, the ε it gives at ``delta``).
        floor: what ran has at least (the optimistic PLD; exact for full batch).
        ran: what ran has by the PLD accountant (an upper bound; exact for full batch).
        delta: the δ of ``stated``, ``floor`` and ``ran`` (ε only).
        record: the record that decided (the one with the largest ``floor``).
        message: one line in words.
    """

    holds: bool
    parameter: str
    stated: float
    floor: float
    ran: float
    delta: float | None
    record: DPSGDRecord
    message: str


def check_claim(claim: Claim, records: Iterable[DPSGDRecord], *, delta: float) -> ClaimCheck | None:
    """Hold a claim against what ran: is it at least what the records' accountant gives?

    Every model must meet the claim, so the record whose lower estimate is largest
    decides. A claim fails only when what ran is provably above it: above the optimistic
    PLD's value (:func:`dpaudit.accounting.epsilon_floor`,
    :func:`dpaudit.accounting.mu_floor`), which rounds every privacy loss down; a claim
    between that and the (pessimistic) accountant's value is not refuted. Each part of the
    claim is held on its own terms:

    - ε at δ' > 0: against ε(δ') of what ran. At δ' = 0 (pure DP) Gaussian noise is
      ε-DP for no finite ε, so a finite pure claim fails.
    - μ: against the smallest μ for which what ran is μ-GDP, measured down to δ = 1e-10
      (√T/σ exactly for full batch).
    - ρ (zCDP): full batch is exactly T/(2σ²)-zCDP (its Rényi divergence of order α is
      αT/(2σ²)), so a smaller ρ fails; a subsampled run is held at ``delta`` through the
      (ε, δ) the claim implies, ρ + 2√(ρ ln(1/δ)) (Bun, Steinke 2016, Prop. 1.3).

    Args:
        claim: what is stated (the weakest claim over the models).
        records: what ran, one per model.
        delta: the audit's δ (for a ρ claim).

    Returns:
        The check of the first part that fails, else of the first part checked; ``None``
        when the claim states nothing finite to check (ε = ∞, no μ, no ρ).
    """
    runs = sorted(
        {
            DPSGDRecord(
                noise_multiplier=r.noise_multiplier,
                sampling_rate=r.sampling_rate,
                steps=int(r.steps),
                clipping_norm=r.clipping_norm,
                sampling=r.sampling,
            )
            for r in records
        },
        key=lambda r: (r.noise_multiplier, r.sampling_rate, r.steps, r.clipping_norm),
    )
    if not runs:
        raise ValueError("check_claim needs at least one record")
    checks: list[ClaimCheck] = []
    if claim.epsilon is not None and math.isfinite(claim.epsilon):
        checks.append(_check_epsilon(claim.epsilon, claim.delta, runs))
    if claim.mu is not None and math.isfinite(claim.mu):
        checks.append(_check_mu(claim.mu, runs))
    if claim.rho is not None and math.isfinite(claim.rho):
        checks.append(_check_rho(claim.rho, runs, delta))
    failed = [c for c in checks if not c.holds]
    return (failed or checks)[0] if checks else None


def _ran(record: DPSGDRecord) -> str:
    """What ran, in a few words: "σ 0.22, q 0.0435, 69 steps"."""
    batch = "full batch" if _full_batch(record) else f"q {record.sampling_rate:.3g}"
    return f"σ {record.noise_multiplier:.3g}, {batch}, {record.steps} steps"


def _full_batch(record: DPSGDRecord) -> bool:
    return record.sampling == "full-batch" or record.sampling_rate == 1.0


def _verdict(
    parameter: str,
    symbol: str,
    stated: float,
    at: str,
    worst: tuple[float, float, DPSGDRecord],
    delta: float | None,
    claimed: str,
) -> ClaimCheck:
    """The check of one part of a claim from the deciding record's (floor, ran, record)."""
    floor, ran, record = worst
    what = f"what ran ({_ran(record)}) has {symbol} = {ran:.4g}{at} by the PLD accountant"
    if _full_batch(record):
        what = f"what ran ({_ran(record)}) has {symbol} = {ran:.4g}{at} exactly"
    # A relative 1e-9 absorbs the rounding of a claim computed by other arithmetic
    # (√T/σ as T**0.5/σ): exact values (full batch) must not fail on their last bit.
    holds = not floor > stated * (1.0 + 1e-9)
    if holds and ran <= stated:
        message = f"the claim ({claimed}) covers what ran ({_ran(record)}: {symbol} = {ran:.4g})"
    elif holds:
        message = (
            f"the claim ({claimed}) is below what ran has by the PLD accountant ({symbol} = "
            f"{ran:.4g}) but not below its lower estimate ({floor:.4g}), so it is not refuted"
        )
    else:
        at_least = "" if f"{floor:.4g}" == f"{ran:.4g}" else f" (at least {floor:.4g})"
        message = f"the claim states {claimed}; {what}{at_least}, so the claim does not hold"
    return ClaimCheck(holds, parameter, stated, floor, ran, delta, record, message)


def _check_epsilon(stated: float, claim_delta: float, runs: list[DPSGDRecord]) -> ClaimCheck:
    if claim_delta == 0.0:
        # Gaussian noise has an unbounded privacy loss: δ(ε) > 0 for every finite ε.
        record = runs[0]
        return ClaimCheck(
            False,
            "epsilon",
            stated,
            math.inf,
            math.inf,
            0.0,
            record,
            f"the claim states ε = {stated:.4g} at δ = 0 (pure DP); what ran ({_ran(record)}) "
            "adds Gaussian noise, which is ε-DP at δ = 0 for no finite ε, so the claim does "
            "not hold",
        )
    worst = max((_epsilon_values(r, claim_delta, stated) for r in runs), key=lambda x: x[0])
    claimed = f"ε = {stated:.4g} at δ = {claim_delta:g}"
    return _verdict("epsilon", "ε", stated, " at that δ", worst, claim_delta, claimed)


def _epsilon_values(
    record: DPSGDRecord, delta: float, stated: float
) -> tuple[float, float, DPSGDRecord]:
    """(floor, accountant value, record) of ε(δ) for one record."""

    if _full_batch(record):
        exact = _full_batch_epsilon(record, delta)
        return exact, exact, record
    return (
        accounting.epsilon_floor(record, delta=delta, above=stated),
        accounting.epsilon(record, delta=delta),
        record,
    )


def _full_batch_epsilon(record: DPSGDRecord, delta: float) -> float:
    # Exactly √T/σ-GDP (Dong, Roth, Su 2019, Cor. 3.3): its ε(δ) is exact.
    return gdp_epsilon(math.sqrt(record.steps) / record.noise_multiplier, delta)


def _check_mu(stated: float, runs: list[DPSGDRecord]) -> ClaimCheck:

    def values(r: DPSGDRecord) -> tuple[float, float, DPSGDRecord]:
        if _full_batch(r):
            mu = math.sqrt(r.steps) / r.noise_multiplier
            return mu, mu, r
        return accounting.mu_floor(r), accounting.mu_bracket(r).high, r

    worst = max((values(r) for r in runs), key=lambda x: x[0])
    return _verdict("mu", "μ", stated, "", worst, None, f"μ = {stated:.4g}")


def _check_rho(stated: float, runs: list[DPSGDRecord], delta: float) -> ClaimCheck:
    if all(_full_batch(r) for r in runs):
        rhos = [
            (full_batch_zcdp(noise_multiplier=r.noise_multiplier, steps=r.steps), r) for r in runs
        ]
        rho, record = max(rhos, key=lambda x: x[0])
        worst = (rho, rho, record)
        return _verdict("rho", "ρ", stated, "", worst, None, f"ρ = {stated:.4g} (zCDP)")
    # A subsampled run has no closed-form ρ: hold the (ε, δ) the claim implies.
    implied = zcdp_to_dp(stated, delta)
    worst = max((_epsilon_values(r, delta, implied) for r in runs), key=lambda x: x[0])
    claimed = f"ρ = {stated:.4g} (zCDP), i.e. ε = {implied:.4g} at δ = {delta:g}"
    return _verdict("rho", "ε", implied, " at that δ", worst, delta, claimed)
