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

from dpaudit.records import DPSGDRecord
from dpaudit.theory import gdp_epsilon, mu_from_pure_dp, zcdp_to_dp

__all__ = [
    "RECORD_KEYS",
    "Claim",
    "UpperBound",
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
    (:func:`dpaudit.upper_bounds.from_claim`).
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
    # (dp-accounting is imported on first use: loading an audit file stays light.)
    from dpaudit.accounting import dpsgd_epsilon

    return dpsgd_epsilon(noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=delta)


@functools.lru_cache(maxsize=64)
def _poisson_mu_high(sigma: float, q: float, steps: int) -> tuple[float, float]:
    """(μ_high, tail δ) of the GDP measurement of the record's PLD profile."""
    from dpaudit.accounting import dpsgd_event, mu_bracket

    bracket = mu_bracket(dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=steps))
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
