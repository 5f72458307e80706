"""The ``mechanism`` kind's work: the mechanism a ``[mechanism]`` table describes, one
chunk of its trials, and the upper bound its lower bounds are held against.

Both the kind's ``comparisons`` and its summary decide what enters the verdict through
:func:`in_verdict`, so that what the audit announces is what the summary spends.
"""

from __future__ import annotations

import math

import numpy as np

from dpaudit.accounting.upper_bounds import Claim, UpperBound, from_claim
from dpaudit.errors import ConfigError
from dpaudit.kinds.base import unit_index
from dpaudit.mechanisms.noise import (
    Mechanism,
    gaussian,
    gaussian_calibrated,
    k_randomized_response,
    laplace,
    randomized_response,
    theoretical_claim,
    unary_encoding,
    user_mechanism,
    vector_gaussian,
    vector_laplace,
)
from dpaudit.mechanisms.schema import FLOATING, GAUSSIAN, LEARNED, MechanismSection, Vectors
from dpaudit.sections import Table
from dpaudit.theory import zcdp_to_dp

#: Distinguishes the random streams of different kinds under the same audit seed.
_STREAM_MECHANISM = 1


class MechanismSpec(Table):
    """What a mechanism unit depends on (picklable; its JSON names the stored units)."""

    section: MechanismSection
    seed: int
    unit_size: int
    base_dir: str


def local_pair(m: MechanismSection) -> tuple[Vectors, int]:
    """The two records of a local randomiser and their dimension."""
    assert m.domain is not None  # the schema requires a domain for local mechanisms
    low, high = m.domain
    records = m.records if m.records is not None else ([low], [high])
    return records, len(records[0])


def _gaussian_sigma(m: MechanismSection, sensitivity: float) -> tuple[float, dict | None]:
    """σ of a Gaussian mechanism: given, from μ, or calibrated to (ε, δ)."""
    if m.sigma is not None:
        return m.sigma, None
    if m.mu is not None:
        return sensitivity / m.mu, None
    # the schema's exactly-one rule leaves (epsilon, delta) here
    assert m.epsilon is not None
    assert m.delta is not None
    return gaussian_calibrated(
        sensitivity=sensitivity,
        epsilon=m.epsilon,
        delta=m.delta,
        calibration=m.calibration or "exact",
    )


def build_mechanism(m: MechanismSection, base_dir: str) -> Mechanism:
    """The mechanism of ``[mechanism]`` with the noise it runs with."""
    if m.name in ("laplace", "local-laplace"):
        if m.name == "local-laplace":
            records, d = local_pair(m)
            assert m.domain is not None
            # ℓ1 diameter of [low, high]^d: any two records are neighbours in local DP
            sensitivity = d * (m.domain[1] - m.domain[0])
        else:
            records, sensitivity = m.query, m.sensitivity  # type: ignore[assignment]
        scale = m.scale if m.scale is not None else sensitivity / m.epsilon  # type: ignore[operator]
        if records is None:
            return laplace(sensitivity=sensitivity, scale=scale)
        return vector_laplace(query=records, sensitivity=sensitivity, scale=scale, name=m.name)
    if m.name in GAUSSIAN:
        if m.name == "local-gaussian":
            records, d = local_pair(m)
            assert m.domain is not None
            # ℓ2 diameter of [low, high]^d
            sensitivity = math.sqrt(d) * (m.domain[1] - m.domain[0])
        else:
            records, sensitivity = m.query, m.sensitivity  # type: ignore[assignment]
        sigma, calibration = _gaussian_sigma(m, sensitivity)
        if records is None and calibration is None:
            return gaussian(sensitivity=sensitivity, sigma=sigma)
        query = records if records is not None else ([0.0], [sensitivity])
        return vector_gaussian(
            query=query, sensitivity=sensitivity, sigma=sigma, name=m.name, calibration=calibration
        )
    if m.name == "randomized-response":
        assert m.p is not None  # the schema requires p for randomized response
        return randomized_response(p=m.p)
    if m.name == "k-rr":
        assert m.k is not None  # required by the schema
        assert m.epsilon is not None
        return k_randomized_response(k=m.k, epsilon=m.epsilon, values=m.values or (0, 1))
    if m.name == "unary-encoding":
        assert m.k is not None  # required by the schema
        assert m.epsilon is not None
        return unary_encoding(
            k=m.k, epsilon=m.epsilon, variant=m.variant or "optimised", values=m.values or (0, 1)
        )
    data = m.data if m.data is not None else ([0.0], [m.sensitivity])
    if m.score == FLOATING:
        from dpaudit.mechanisms.floating import floating_mechanism

        assert m.floating is not None  # the schema requires the table with the score
        return floating_mechanism(
            m.name,
            data=data,
            sampler=m.floating.sampler,
            scale=m.floating.scale,
            values=m.floating.values,
            base_dir=base_dir,
        )
    # A learned score is fitted in the summary, on stored raw outputs (mechanism_unit).
    score = None if m.score == LEARNED else m.score
    return user_mechanism(
        m.name, data=data, log_density=m.log_density, score=score, base_dir=base_dir
    )


def mechanism_unit(spec: MechanismSpec, unit: str) -> dict[str, np.ndarray]:
    """Sample one chunk of trials on D and on D' (a pure function of spec and unit).

    A unit samples only its own trials, at most ``unit_size`` per arm (the last unit the
    rest), from its own random stream: its memory does not grow with ``trials``, and the
    units' trials are i.i.d., which is what lets the summary cut the units into parts
    fixed in advance (:func:`dpaudit.mechanisms.summary.unit_design`).

    With ``score = "learned"`` a unit holds the RAW outputs, ``(size, d)`` per arm, for
    the summary to fit a score on some trials and count the others; otherwise the scores.
    """
    index = unit_index(unit)
    size = min(spec.unit_size, spec.section.trials - index * spec.unit_size)
    if size < 1:
        raise ConfigError(
            f"unit {unit!r} is beyond the {spec.section.trials} trials of [mechanism] "
            f"({spec.unit_size} per unit)"
        )
    return sample_trials(spec, index, size)


def sample_trials(spec: MechanismSpec, index: int, size: int) -> dict[str, np.ndarray]:
    """``size`` trials per arm from the random stream of unit ``index`` alone: raw outputs
    with ``score = "learned"``, else scores (what :func:`mechanism_unit` and a sequential
    round store)."""
    rng = np.random.default_rng([spec.seed, _STREAM_MECHANISM, index])
    mech = build_mechanism(spec.section, spec.base_dir)
    if spec.section.score == LEARNED:
        return {
            "negative": mech.outputs(0, rng=rng, size=size),
            "positive": mech.outputs(1, rng=rng, size=size),
        }
    return {
        "negative": mech.run(0, rng=rng, size=size),
        "positive": mech.run(1, rng=rng, size=size),
    }


def upper_bound(m: MechanismSection, mech: Mechanism, delta: float) -> UpperBound:
    """What the lower bounds are held against: ``[mechanism.claim]``, else the guarantee
    of the parameters the built-in runs with."""
    if m.claim is not None:
        c = m.claim
        if c.rho is not None:
            # ρ-zCDP ⇒ (ρ + 2√(ρ ln(1/δ)), δ)-DP for every δ > 0 (Bun, Steinke 2016,
            # Prop. 1.3), held at the audit's δ; zCDP implies no μ-GDP bound.
            if delta <= 0.0:
                raise ConfigError(
                    "a 'rho' (zCDP) claim is held as (epsilon, delta)-DP at [audit] delta, "
                    "which must then be > 0; got delta = 0"
                )
            eps = zcdp_to_dp(c.rho, delta)
            return from_claim(Claim(epsilon=eps, delta=delta), delta, source="claimed")
        return from_claim(Claim(epsilon=c.epsilon, delta=c.delta, mu=c.mu), delta, source="claimed")
    claim = theoretical_claim(mech.name, mech.parameters)
    return from_claim(claim, delta, source="theoretical")


def in_verdict(upper: UpperBound) -> dict[str, bool]:
    """Which of the two comparisons (ε, μ) enter the verdict: each where its upper bound
    is finite. The kind's ``comparisons`` counts these and its summary spends them."""
    return {"epsilon": upper.epsilon_finite, "mu": upper.mu_finite}
