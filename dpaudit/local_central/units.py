"""The ``local-central`` kind's work units: at one ε, the errors of ``repeats`` releases
under local and under central DP, and ``trials`` runs of each mechanism on two
neighbouring inputs.
"""

from __future__ import annotations

import numpy as np

from dpaudit.kinds.base import unit_index
from dpaudit.local_central.schema import LocalCentralSection
from dpaudit.local_central.simulate import (
    central_mechanism,
    local_randomiser,
    simulate_errors,
    true_counts,
)
from dpaudit.sections import Table

#: Distinguishes this kind's random streams under the same audit seed.
STREAM = 7


class LocalCentralSpec(Table):
    """What a local-central unit depends on (picklable; its JSON names the stored units)."""

    section: LocalCentralSection
    seed: int


def audited_counts(section: LocalCentralSection) -> np.ndarray:
    """The counts of the audited dataset (:func:`~dpaudit.local_central.simulate.true_counts`)."""
    return true_counts(
        query=section.query,
        n=section.n,
        k=section.k or 2,
        share=0.3 if section.share is None else section.share,
        frequencies=section.frequencies,
    )


def local_central_unit(spec: LocalCentralSpec, unit: str) -> dict[str, np.ndarray]:
    """One ε: the errors of ``repeats`` releases and ``trials`` runs of each randomiser."""
    s = spec.section
    i = unit_index(unit)
    eps = s.epsilons[i]
    counts = audited_counts(s)
    rng = np.random.default_rng([spec.seed, STREAM, i])
    randomiser = s.randomiser or "k-rr"
    local_err, central_err = simulate_errors(
        counts, query=s.query, epsilon=eps, repeats=s.repeats, rng=rng, randomiser=randomiser
    )
    local = local_randomiser(query=s.query, k=counts.size, epsilon=eps, randomiser=randomiser)
    central = central_mechanism(counts, query=s.query, epsilon=eps)
    return {
        "local_errors": local_err,
        "central_errors": central_err,
        "local_negative": local.run(0, rng=rng, size=s.trials),
        "local_positive": local.run(1, rng=rng, size=s.trials),
        "central_negative": central.run(0, rng=rng, size=s.trials),
        "central_positive": central.run(1, rng=rng, size=s.trials),
    }
