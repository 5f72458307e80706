"""The ``mechanism`` kind: a DP mechanism run many times on two neighbouring inputs.

Each trial runs the mechanism once on D (H0) and once on D' (H1); the outputs are the
scores. Trials are independent, so the ε and μ lower bounds of :mod:`dpaudit.bounds` are
rigorous. They are held against the mechanism's claim (``[mechanism.claim]``) or, for a
built-in without one, the guarantee its parameters give.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from dpaudit.errors import ConfigError, DpauditError
from dpaudit.kinds.base import (
    AuditKind,
    KindSummary,
    Outputs,
    RunContext,
    UnitPlan,
    null_result_warning,
    unit_index,
)
from dpaudit.plugins import plugin_digest
from dpaudit.sections import ClaimSection, Positive, Table

if TYPE_CHECKING:  # loaded where used: validating a file stays fast
    from dpaudit.mechanisms.noise import Mechanism
    from dpaudit.upper_bounds import UpperBound

BUILTIN_MECHANISMS = (
    "laplace",
    "gaussian",
    "randomized-response",
    "k-rr",
    "unary-encoding",
    "local-laplace",
    "local-gaussian",
)
_GAUSSIAN = ("gaussian", "local-gaussian")
_CATEGORICAL = ("k-rr", "unary-encoding")
_LOCAL = ("local-laplace", "local-gaussian")

#: Distinguishes the random streams of different kinds under the same audit seed.
_STREAM_MECHANISM = 1

Vectors = tuple[list[float], list[float]]


class MechanismClaim(ClaimSection):
    """``[mechanism.claim]``: ε (with δ), μ, or ρ (zCDP) claimed by the mechanism.

    A ρ-zCDP claim is held as (ρ + 2√(ρ ln(1/δ)), δ)-DP at the audit's δ (Bun, Steinke
    2016, Prop. 1.3; :func:`dpaudit.theory.zcdp_to_dp`); it implies no μ-GDP bound.
    """

    rho: Positive | None = None

    @model_validator(mode="after")
    def _something_claimed(self) -> MechanismClaim:
        if self.epsilon is None and self.mu is None and self.rho is None:
            raise ValueError("a claim needs 'epsilon' (with 'delta'), 'mu' or 'rho'")
        if self.rho is not None and (self.epsilon is not None or self.mu is not None):
            raise ValueError("a claim gives 'rho' (zCDP) alone, or 'epsilon'/'mu' without it")
        return self


def _pair_length(pair: Vectors | None) -> int | None:
    if pair is None:
        return None
    if len(pair[0]) == 0 or len(pair[0]) != len(pair[1]):
        raise ValueError("two vectors of the same non-zero length are needed")
    return len(pair[0])


class MechanismSection(Table):
    """``[mechanism]``: a DP mechanism audited on two neighbouring inputs.

    ``name`` is a built-in (``laplace``, ``gaussian``, ``randomized-response``, ``k-rr``,
    ``unary-encoding``, ``local-laplace``, ``local-gaussian``) or a user callable
    ``"pkg.module:function"``. The noise the mechanism RUNS with is given by ``epsilon``
    or ``scale`` (Laplace), ``sigma``, ``mu`` or ``epsilon`` with ``delta`` and
    ``calibration`` (Gaussian), ``p`` (randomized response), ``k`` and ``epsilon`` (k-RR,
    unary encoding with ``variant``); ``[mechanism.claim]`` is what it CLAIMS (defaults to
    what it runs with).

    ``query`` = [f(D), f(D')] runs Laplace/Gaussian in d dimensions (``sensitivity`` is
    then the ℓ1 resp. ℓ2 sensitivity). The local randomisers perturb one record: ``k-rr``
    and ``unary-encoding`` a category (``values`` = [D's, D''s], default [0, 1]),
    ``local-laplace``/``local-gaussian`` a vector in ``domain`` = [low, high] per
    coordinate (``records`` = [x, x'], default [[low], [high]]), whose sensitivity is the
    domain's ℓ1 resp. ℓ2 diameter. These are scored by the exact log-likelihood ratio.
    """

    name: str
    sensitivity: Positive = 1.0
    epsilon: Positive | None = None
    delta: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    calibration: Literal["classic", "exact"] | None = None
    scale: Positive | None = None
    sigma: Positive | None = None
    mu: Positive | None = None
    p: Annotated[float, Field(ge=0.5, le=1.0)] | None = None
    k: Annotated[int, Field(ge=2, le=100_000)] | None = None
    values: tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]] | None = None
    variant: Literal["optimised", "symmetric"] | None = None
    query: Vectors | None = None
    domain: tuple[float, float] | None = None
    records: Vectors | None = None
    data: tuple[list[float], list[float]] | None = None
    log_density: str | None = None
    score: str | None = None
    trials: Annotated[int, Field(ge=2, le=100_000_000)] = 100_000
    threshold: Literal["split", "bonferroni"] = "split"
    claim: MechanismClaim | None = None

    @model_validator(mode="after")
    def _parameters_fit_the_mechanism(self) -> MechanismSection:
        name = self.name
        if name not in BUILTIN_MECHANISMS and ":" not in name:
            raise ValueError(
                f"unknown mechanism {name!r}; allowed: {', '.join(BUILTIN_MECHANISMS)} or "
                "'pkg.module:function'"
            )
        self._only_where_used()
        if name in ("laplace", "local-laplace") and (self.epsilon is None) == (self.scale is None):
            raise ValueError(f"the {name} mechanism needs exactly one of 'epsilon' or 'scale'")
        if name in _GAUSSIAN:
            self._gaussian_noise()
        if name == "randomized-response" and self.p is None:
            raise ValueError("randomized-response needs 'p', the probability of a truthful answer")
        if name in _CATEGORICAL:
            if self.k is None or self.epsilon is None:
                raise ValueError(f"{name} needs 'k' (the number of categories) and 'epsilon'")
            v = self.values if self.values is not None else (0, 1)
            if v[0] == v[1] or max(v) >= self.k:
                raise ValueError(
                    f"'values' must be two different categories in 0..{self.k - 1}; got {list(v)}"
                )
        if name in _LOCAL:
            self._local_records()
        try:
            _pair_length(self.query)
        except ValueError as exc:
            raise ValueError(f"'query' (f(D), f(D')): {exc}") from None
        if ":" in name and self.claim is None:
            raise ValueError(f"a user mechanism ({name!r}) needs a [mechanism.claim] table")
        for key in ("log_density", "score"):
            if getattr(self, key) is not None and ":" not in name:
                raise ValueError(
                    f"'{key}' scores a user mechanism's outputs; {name!r} is built in and "
                    "scores its own"
                )
        if self.log_density is not None and self.score is not None:
            raise ValueError("give 'log_density' or 'score' for a user mechanism, not both")
        return self

    def _only_where_used(self) -> None:
        """Keys of one family of mechanisms are errors elsewhere (never silently ignored)."""
        used = {
            "k": _CATEGORICAL,
            "values": _CATEGORICAL,
            "variant": ("unary-encoding",),
            "query": ("laplace", "gaussian"),
            "domain": _LOCAL,
            "records": _LOCAL,
            "delta": _GAUSSIAN,
            "calibration": _GAUSSIAN,
        }
        if "sensitivity" in self.model_fields_set and self.name in (*_CATEGORICAL, *_LOCAL):
            raise ValueError(
                f"'sensitivity' is not a parameter of {self.name!r}: a local randomiser's "
                "neighbours are any two records ('domain' sets the sensitivity)"
            )
        for key, names in used.items():
            if getattr(self, key) is not None and self.name not in names:
                raise ValueError(
                    f"'{key}' is not a parameter of {self.name!r}; it is used by {', '.join(names)}"
                )

    def _gaussian_noise(self) -> None:
        given = [k for k in ("sigma", "mu", "epsilon") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"the {self.name} mechanism needs exactly one of 'sigma', 'mu' or 'epsilon' "
                f"(with 'delta'); got {', '.join(given) or 'none'}"
            )
        if self.epsilon is not None and self.delta is None:
            raise ValueError(f"the {self.name} mechanism calibrated to 'epsilon' needs 'delta'")
        if self.epsilon is None and (self.delta is not None or self.calibration is not None):
            raise ValueError("'delta' and 'calibration' calibrate σ to 'epsilon'; give 'epsilon'")
        if self.calibration == "classic" and self.epsilon is not None and self.epsilon >= 1.0:
            raise ValueError(
                "calibration = 'classic' (σ = Δ√(2 ln(1.25/δ))/ε) is only valid for epsilon < 1 "
                f"(Dwork, Roth 2014, Thm. A.1); got epsilon = {self.epsilon}; use "
                "calibration = 'exact' (the analytic Gaussian mechanism of Balle, Wang 2018)"
            )

    def _local_records(self) -> None:
        if self.domain is None:
            raise ValueError(f"{self.name} needs 'domain' = [low, high], the range of a record")
        low, high = self.domain
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"'domain' must be finite with low < high; got {list(self.domain)}")
        if self.records is not None:
            try:
                _pair_length(self.records)
            except ValueError as exc:
                raise ValueError(f"'records' (x, x'): {exc}") from None
            flat = [*self.records[0], *self.records[1]]
            if any(not (low <= x <= high) for x in flat):
                raise ValueError(
                    f"every coordinate of 'records' must lie in the domain {[low, high]}"
                )


class MechanismSpec(Table):
    """What a mechanism unit depends on (picklable; its JSON names the stored units)."""

    section: MechanismSection
    seed: int
    unit_size: int
    base_dir: str


def _local_pair(m: MechanismSection) -> tuple[Vectors, int]:
    """The two records of a local randomiser and their dimension."""
    assert m.domain is not None  # the schema requires a domain for local mechanisms
    low, high = m.domain
    records = m.records if m.records is not None else ([low], [high])
    return records, len(records[0])


def _gaussian_sigma(m: MechanismSection, sensitivity: float) -> tuple[float, dict | None]:
    """σ of a Gaussian mechanism: given, from μ, or calibrated to (ε, δ)."""
    from dpaudit.mechanisms.noise import gaussian_calibrated

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
    from dpaudit.mechanisms.noise import (
        gaussian,
        k_randomized_response,
        laplace,
        randomized_response,
        unary_encoding,
        user_mechanism,
        vector_gaussian,
        vector_laplace,
    )

    if m.name in ("laplace", "local-laplace"):
        if m.name == "local-laplace":
            records, d = _local_pair(m)
            assert m.domain is not None
            # ℓ1 diameter of [low, high]^d: any two records are neighbours in local DP
            sensitivity = d * (m.domain[1] - m.domain[0])
        else:
            records, sensitivity = m.query, m.sensitivity  # type: ignore[assignment]
        scale = m.scale if m.scale is not None else sensitivity / m.epsilon  # type: ignore[operator]
        if records is None:
            return laplace(sensitivity=sensitivity, scale=scale)
        return vector_laplace(query=records, sensitivity=sensitivity, scale=scale, name=m.name)
    if m.name in _GAUSSIAN:
        if m.name == "local-gaussian":
            records, d = _local_pair(m)
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
    return user_mechanism(
        m.name, data=data, log_density=m.log_density, score=m.score, base_dir=base_dir
    )


def mechanism_unit(spec: MechanismSpec, unit: str) -> dict[str, np.ndarray]:
    """Sample one chunk of trials on D and on D' (a pure function of spec and unit)."""
    index = unit_index(unit)
    size = min(spec.unit_size, spec.section.trials - index * spec.unit_size)
    rng = np.random.default_rng([spec.seed, _STREAM_MECHANISM, index])
    mech = build_mechanism(spec.section, spec.base_dir)
    return {
        "negative": mech.run(0, rng=rng, size=size),
        "positive": mech.run(1, rng=rng, size=size),
    }


def _upper(m: MechanismSection, mech: Mechanism, delta: float) -> UpperBound:
    from dpaudit.mechanisms.noise import Claim, theoretical_claim
    from dpaudit.theory import zcdp_to_dp
    from dpaudit.upper_bounds import from_claim

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


def _audited_inputs(m: MechanismSection) -> object:
    """The two inputs the audit ran on (hashed into the provenance)."""
    if m.data is not None:
        return m.data
    if m.query is not None:
        return m.query
    if m.name in _LOCAL:
        return _local_pair(m)[0]
    if m.name in _CATEGORICAL:
        return list(m.values or (0, 1))
    return ([0.0], [m.sensitivity])


class MechanismKind(AuditKind[MechanismSection]):
    name = "mechanism"
    section = MechanismSection
    description = (
        "a DP mechanism run on two neighbouring inputs (Laplace, Gaussian, RR, local "
        "randomisers, yours)"
    )

    def check_runnable(self, section: MechanismSection, context: RunContext) -> None:
        build_mechanism(section, str(context.base_dir))

    def plan(self, section: MechanismSection, context: RunContext) -> UnitPlan:
        spec = MechanismSpec(
            section=section,
            seed=context.seed,
            unit_size=context.unit_size,
            base_dir=str(context.base_dir),
        )
        n = math.ceil(section.trials / context.unit_size)
        return UnitPlan(
            fn=mechanism_unit,
            spec=spec,
            units=tuple(f"mechanism-{i:05d}" for i in range(n)),
            key_data={
                **spec.model_dump(mode="json", exclude={"base_dir"}),
                # a user mechanism's code is part of what its units are
                "mechanism_file": plugin_digest(section.name, base_dir=context.base_dir)
                if ":" in section.name
                else None,
                # ... and so is the code that scores its outputs
                **{
                    f"{key}_file": plugin_digest(getattr(section, key), base_dir=context.base_dir)
                    for key in ("log_density", "score")
                    if getattr(section, key) is not None
                },
            },
            description="sampling mechanism",
        )

    def comparisons(self, section: MechanismSection, context: RunContext, outputs: Outputs) -> int:
        upper = _upper(section, build_mechanism(section, str(context.base_dir)), context.delta)
        return int(upper.epsilon_finite) + int(upper.mu_finite)

    def summarise(
        self, section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        from dpaudit.bounds import epsilon_and_mu_lower_bounds
        from dpaudit.mechanisms.noise import Claim
        from dpaudit.results import Comparison, gdp_implied_comparison, score_summary, theory_curves

        parts = [outputs[u] for u in sorted(outputs)]
        neg = np.concatenate([p["negative"] for p in parts])
        pos = np.concatenate([p["positive"] for p in parts])
        mech = build_mechanism(section, str(context.base_dir))
        upper = _upper(section, mech, context.delta)
        c, seed, threshold = context.confidence_level, context.seed, section.threshold
        # Both comparisons enter the verdict's one budget: each bound at `level`. Computed
        # together (one split, one selection curve), each is what its own call would give.
        eps_lb, mu_lb = epsilon_and_mu_lower_bounds(
            neg,
            pos,
            delta=upper.epsilon_delta,
            confidence_level=level,
            threshold=threshold,
            seed=seed,
        )
        label = f"{mech.name} mechanism"
        source = upper.source
        comparisons = [
            Comparison(
                test=label,
                parameter="epsilon",
                lower=eps_lb,
                upper=upper.epsilon,
                upper_source=f"{source} ε",
                in_verdict=upper.epsilon_finite,
            ),
            Comparison(
                test=label,
                parameter="mu",
                lower=mu_lb,
                upper=upper.mu,
                upper_source=f"{source} μ" if upper.mu is not None else "none",
                in_verdict=upper.mu_finite,
            ),
        ]
        claim = Claim(**upper.detail["claim"])
        if mu_lb.value > 0 and claim.mu is not None:
            # Informational, outside the verdict: the ε that μ_LB implies IF the trade-off
            # curve is Gaussian-shaped ("assumes-gdp"), shown only against a GDP claim.
            comparisons.append(
                gdp_implied_comparison(label, mu_lb, claim.mu, delta=context.delta, source=source)
            )
        curves = theory_curves(
            epsilon=claim.epsilon, delta=claim.delta, mu=claim.mu, label=f"{source}: "
        ) + theory_curves(mu=mu_lb.value if mu_lb.value > 0 else None, label="lower bound: ")
        summary = score_summary(
            "mechanism", label, neg, pos, confidence_level=c, hypotheses=("D", "D'")
        ).with_details(
            theory_curves=curves,
            mechanism={
                "name": mech.name,
                "parameters": mech.parameters,
                "claim": claim.to_dict(),
                "claim_source": source,
                "claim_rho": section.claim.rho if section.claim is not None else None,
                "identification": _identification(mech),
            },
        )
        warnings = []
        if eps_lb.value == 0.0 and mu_lb.value == 0.0:
            warnings.append(null_result_warning(label, f"{neg.size} trials per hypothesis", eps_lb))
        distance = mech.parameters.get("distance")
        if distance is not None and distance > mech.parameters["sensitivity"] * (1 + 1e-12):
            warnings.append(
                f"{label}: the two inputs differ by {distance:g} "
                f"({mech.parameters['norm']}), more than the sensitivity "
                f"{mech.parameters['sensitivity']:g} the noise is calibrated to; the "
                "guarantee does not cover this pair."
            )
        data = _audited_inputs(section)
        data_hash = hashlib.sha256(json.dumps(data).encode()).hexdigest()
        return KindSummary((summary,), tuple(comparisons), (), tuple(warnings), data_hash)


def _identification(mech: Mechanism) -> dict[str, Any] | None:
    """Whether the mechanism that ran is μ-GDP, and for which μ (Liu, Sun, Jiang, Kong 2022),
    from its exact privacy profile; None for a mechanism without a known profile (a user
    callable, or parameters the profile does not cover)."""
    from dpaudit.identification import IDENTIFIABLE_MECHANISMS, identify_mechanism

    if mech.name not in IDENTIFIABLE_MECHANISMS:
        return None
    try:
        found = identify_mechanism(mech.name, mech.parameters)
    except DpauditError:
        return None
    return {
        "exact": found.exact,
        "mu": found.mu,
        "bracket": [found.bracket.low, found.bracket.high],
        "summary": found.summary,
    }


KIND = MechanismKind()
