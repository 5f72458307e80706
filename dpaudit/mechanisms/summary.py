"""The ``mechanism`` kind's summary: stored outputs on D and D' → ε and μ lower bounds held
against the mechanism's upper bound, the score test, and the identification of its
privacy profile.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from dpaudit.bounds import epsilon_and_mu_lower_bounds
from dpaudit.errors import DpauditError
from dpaudit.identification import IDENTIFIABLE_MECHANISMS, identify_mechanism
from dpaudit.kinds.base import KindSummary, Outputs, RunContext, null_result_warning
from dpaudit.mechanisms.noise import Mechanism
from dpaudit.mechanisms.schema import CATEGORICAL, LOCAL, MechanismSection
from dpaudit.mechanisms.units import build_mechanism, in_verdict, local_pair, upper_bound
from dpaudit.results import Comparison, gdp_implied_comparison, score_summary, theory_curves
from dpaudit.upper_bounds import Claim


def mechanism_summary(
    section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
) -> KindSummary:
    """The ``mechanism`` kind's summary; every in-verdict bound at ``level``."""
    parts = [outputs[u] for u in sorted(outputs)]
    neg = np.concatenate([p["negative"] for p in parts])
    pos = np.concatenate([p["positive"] for p in parts])
    mech = build_mechanism(section, str(context.base_dir))
    upper = upper_bound(section, mech, context.delta)
    entered = in_verdict(upper)
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
            in_verdict=entered["epsilon"],
        ),
        Comparison(
            test=label,
            parameter="mu",
            lower=mu_lb,
            upper=upper.mu,
            upper_source=f"{source} μ" if upper.mu is not None else "none",
            in_verdict=entered["mu"],
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


def _audited_inputs(m: MechanismSection) -> object:
    """The two inputs the audit ran on (hashed into the provenance)."""
    if m.data is not None:
        return m.data
    if m.query is not None:
        return m.query
    if m.name in LOCAL:
        return local_pair(m)[0]
    if m.name in CATEGORICAL:
        return list(m.values or (0, 1))
    return ([0.0], [m.sensitivity])


def _identification(mech: Mechanism) -> dict[str, Any] | None:
    """Whether the mechanism that ran is μ-GDP, and for which μ (Liu, Sun, Jiang, Kong 2022),
    from its exact privacy profile; None for a mechanism without a known profile (a user
    callable, or parameters the profile does not cover)."""
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
