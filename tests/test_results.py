"""dpaudit.results: the one helper that holds a test's ε and μ lower bounds against theirs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit.bounds import EpsilonBound, MuBound
from dpaudit.results import (
    Comparison,
    histogram_counts,
    paired_comparisons,
    sorted_histogram_counts,
)


def _bounds() -> tuple[EpsilonBound, MuBound]:
    eps = EpsilonBound(
        value=1.5,
        confidence_level=0.95,
        delta=1e-5,
        method="clopper-pearson",
        threshold="split",
        validity="rigorous-multi-run",
    )
    mu = MuBound(
        value=0.8,
        confidence_level=0.95,
        method="clopper-pearson",
        threshold="split",
        validity="rigorous-multi-run",
    )
    return eps, mu


def test_a_pair_names_its_sources_and_enters_the_verdict_as_asked() -> None:
    eps, mu = _bounds()
    got = paired_comparisons(
        "t", eps, mu, upper_epsilon=1.0, upper_mu=None, source="accountant", in_verdict=["epsilon"]
    )
    assert got == [
        Comparison(
            test="t",
            parameter="epsilon",
            lower=eps,
            upper=1.0,
            upper_source="accountant ε",
            in_verdict=True,
        ),
        # a missing upper bound is named "none"
        Comparison(
            test="t", parameter="mu", lower=mu, upper=None, upper_source="none", in_verdict=False
        ),
    ]
    assert got[0].violation
    assert not got[1].violation


def test_a_pair_takes_two_names_as_they_are_and_no_mu_gives_one_comparison() -> None:
    eps, mu = _bounds()
    named = paired_comparisons(
        "t",
        eps,
        mu,
        upper_epsilon=2.0,
        upper_mu=1.0,
        source=("accountant ε (PLD)", "accountant μ"),
    )
    assert [(c.parameter, c.upper_source, c.in_verdict) for c in named] == [
        ("epsilon", "accountant ε (PLD)", False),
        ("mu", "accountant μ", False),
    ]
    (alone,) = paired_comparisons(
        "t", eps, None, upper_epsilon=2.0, upper_mu=1.0, source="claim", in_verdict=("epsilon",)
    )
    assert alone.upper_source == "claim ε"
    assert alone.tightness == pytest.approx(0.75)


@settings(max_examples=200, deadline=None)
@given(
    scores=st.lists(st.floats(-1e6, 1e6, allow_nan=False).map(lambda v: round(v, 1)), min_size=1),
    low=st.floats(-10.0, 10.0),
    width=st.floats(0.1, 100.0),
    bins=st.integers(1, 40),
    at_edges=st.integers(0, 5),
)
def test_sorted_histogram_counts_are_numpys_histogram_of_the_clipped_scores(
    scores: list[float], low: float, width: float, bins: int, at_edges: int
) -> None:
    """The summary's counts from sorted scores by binary search equal
    ``histogram_counts`` (numpy's histogram of the scores clipped to the edges), scores
    lying exactly on edges included."""
    edges = np.linspace(low, low + width, bins + 1)
    values = np.array(scores + edges[: at_edges * bins // 5 + 1].tolist())
    expected = histogram_counts(values, edges)
    got = sorted_histogram_counts(np.sort(values), edges)
    assert got.tolist() == expected.tolist()
    assert int(got.sum()) == values.size


@settings(max_examples=200, deadline=None)
@given(
    scores=st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=500),
    low=st.floats(-10.0, 10.0),
    width=st.floats(1e-3, 100.0),
    bins=st.integers(1, 80),
    at_edges=st.integers(0, 20),
)
def test_histogram_counts_on_equal_width_edges_are_numpys_counts_on_those_edges(
    scores: list[float], low: float, width: float, bins: int, at_edges: int
) -> None:
    """numpy's arithmetic binning of equal-width edges gives the counts of the edges
    themselves (scores on edges and beyond both ends included), as the array form does."""
    edges = np.linspace(low, low + width, bins + 1)
    values = np.array(scores + edges[np.arange(at_edges) % edges.size].tolist())
    expected = np.histogram(np.clip(values, edges[0], edges[-1]), edges)[0]
    assert histogram_counts(values, edges).tolist() == expected.tolist()
