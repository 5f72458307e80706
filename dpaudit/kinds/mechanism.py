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
import sys
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, model_validator

from dpaudit.bounds import epsilon_lower_bound, mu_lower_bound
from dpaudit.kinds.base import (
    AuditKind,
    KindSummary,
    Outputs,
    RunContext,
    UnitPlan,
    unit_index,
)
from dpaudit.mechanisms import (
    Claim,
    Mechanism,
    gaussian,
    laplace,
    randomized_response,
    theoretical_claim,
    user_mechanism,
)
from dpaudit.results import Comparison, gdp_implied_comparison, score_summary, theory_curves
from dpaudit.sections import ClaimSection, Positive, Table
from dpaudit.upper_bounds import UpperBound, from_claim

BUILTIN_MECHANISMS = ("laplace", "gaussian", "randomized-response")

#: Distinguishes the random streams of different kinds under the same audit seed.
_STREAM_MECHANISM = 1


class MechanismSection(Table):
    """``[mechanism]``: a DP mechanism audited on two neighbouring inputs.

    ``name`` is a built-in (``laplace``, ``gaussian``, ``randomized-response``) or a user
    callable ``"pkg.module:function"``. The noise the mechanism RUNS with is given by
    ``epsilon`` or ``scale`` (Laplace), ``sigma`` or ``mu`` (Gaussian), ``p`` (randomized
    response); ``[mechanism.claim]`` is what it CLAIMS (defaults to what it runs with).
    """

    name: str
    sensitivity: Positive = 1.0
    epsilon: Positive | None = None
    scale: Positive | None = None
    sigma: Positive | None = None
    mu: Positive | None = None
    p: Annotated[float, Field(ge=0.5, le=1.0)] | None = None
    data: tuple[list[float], list[float]] | None = None
    trials: Annotated[int, Field(ge=2, le=100_000_000)] = 100_000
    threshold: Literal["split", "bonferroni"] = "split"
    claim: ClaimSection | None = None

    @model_validator(mode="after")
    def _parameters_fit_the_mechanism(self) -> MechanismSection:
        name = self.name
        if name not in BUILTIN_MECHANISMS and ":" not in name:
            raise ValueError(
                f"unknown mechanism {name!r}; allowed: {', '.join(BUILTIN_MECHANISMS)} or "
                "'pkg.module:function'"
            )
        if name == "laplace" and (self.epsilon is None) == (self.scale is None):
            raise ValueError("the laplace mechanism needs exactly one of 'epsilon' or 'scale'")
        if name == "gaussian" and (self.sigma is None) == (self.mu is None):
            raise ValueError("the gaussian mechanism needs exactly one of 'sigma' or 'mu'")
        if name == "randomized-response" and self.p is None:
            raise ValueError("randomized-response needs 'p', the probability of a truthful answer")
        if ":" in name and self.claim is None:
            raise ValueError(f"a user mechanism ({name!r}) needs a [mechanism.claim] table")
        return self


class MechanismSpec(Table):
    """What a mechanism unit depends on (picklable; its JSON names the stored units)."""

    section: MechanismSection
    seed: int
    unit_size: int
    base_dir: str


def build_mechanism(m: MechanismSection, base_dir: str) -> Mechanism:
    """The mechanism of ``[mechanism]`` with the noise it runs with."""
    if m.name == "laplace":
        scale = m.scale if m.scale is not None else m.sensitivity / m.epsilon  # type: ignore[operator]
        return laplace(sensitivity=m.sensitivity, scale=scale)
    if m.name == "gaussian":
        sigma = m.sigma if m.sigma is not None else m.sensitivity / m.mu  # type: ignore[operator]
        return gaussian(sensitivity=m.sensitivity, sigma=sigma)
    if m.name == "randomized-response":
        assert m.p is not None  # the schema requires p for randomized response
        return randomized_response(p=m.p)
    # User plug-ins next to the audit file import without installing them.
    if base_dir not in sys.path:
        sys.path.insert(0, base_dir)
    data = m.data if m.data is not None else ([0.0], [m.sensitivity])
    return user_mechanism(m.name, data=data)


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
    if m.claim is not None:
        c = m.claim
        return from_claim(Claim(epsilon=c.epsilon, delta=c.delta, mu=c.mu), delta, source="claimed")
    claim = theoretical_claim(mech.name, mech.parameters)
    return from_claim(claim, delta, source="theoretical")


class MechanismKind(AuditKind[MechanismSection]):
    name = "mechanism"
    section = MechanismSection
    description = "a DP mechanism run on two neighbouring inputs (Laplace, Gaussian, RR, yours)"

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
            key_data=spec.model_dump(mode="json", exclude={"base_dir"}),
            description="sampling mechanism",
        )

    def comparisons(self, section: MechanismSection, context: RunContext, outputs: Outputs) -> int:
        upper = _upper(section, build_mechanism(section, str(context.base_dir)), context.delta)
        return int(upper.epsilon_finite) + int(upper.mu_finite)

    def summarise(
        self, section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        parts = [outputs[u] for u in sorted(outputs)]
        neg = np.concatenate([p["negative"] for p in parts])
        pos = np.concatenate([p["positive"] for p in parts])
        mech = build_mechanism(section, str(context.base_dir))
        upper = _upper(section, mech, context.delta)
        c, seed, threshold = context.confidence_level, context.seed, section.threshold
        # Both comparisons enter the verdict's one budget: each bound at `level`.
        eps_lb = epsilon_lower_bound(
            neg,
            pos,
            delta=upper.epsilon_delta,
            confidence_level=level,
            threshold=threshold,
            seed=seed,
        )
        mu_lb = mu_lower_bound(neg, pos, confidence_level=level, threshold=threshold, seed=seed)
        label = f"{mech.name} mechanism"
        source = upper.source
        comparisons = [
            Comparison(
                label, "epsilon", eps_lb, upper.epsilon, f"{source} ε", upper.epsilon_finite
            ),
            Comparison(
                label,
                "mu",
                mu_lb,
                upper.mu,
                f"{source} μ" if upper.mu is not None else "none",
                upper.mu_finite,
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
            },
        )
        warnings = []
        if eps_lb.value == 0.0 and mu_lb.value == 0.0:
            warnings.append(
                f"{label}: no lower bound exceeds 0 with {neg.size} trials per hypothesis; "
                "the audit cannot tell this mechanism from a perfectly private one."
            )
        data = section.data if section.data is not None else ([0.0], [section.sensitivity])
        data_hash = hashlib.sha256(json.dumps(data).encode()).hexdigest()
        return KindSummary((summary,), tuple(comparisons), (), tuple(warnings), data_hash)


KIND = MechanismKind()
