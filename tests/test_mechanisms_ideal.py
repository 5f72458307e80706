"""The ideal bound: what a perfect distinguisher certifies at a given number of trials."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpaudit.bounds import epsilon_lower_bound
from dpaudit.errors import DpauditError
from dpaudit.mechanisms.noise import k_randomized_response, k_rr_probabilities, vector_laplace
from dpaudit.planning.ideal import ideal_for_mechanism, ideal_lower_bound


def _exact_k_rr_sample(k: int, epsilon: float, n: int = 1_000_000):
    """LLR samples holding EXACTLY the k-RR proportions (no sampling error)."""
    p, q = k_rr_probabilities(k=k, epsilon=epsilon)
    n_top, n_bottom = round(q * n), round(p * n)
    neg = np.concatenate([np.full(n_top, epsilon), np.full(n_bottom, -epsilon)])
    neg = np.concatenate([neg, np.zeros(n - neg.size)])
    return neg, -neg  # D' is D with the roles of the two values swapped


def test_ideal_k_rr_matches_clopper_pearson_at_the_expected_counts() -> None:
    neg, pos = _exact_k_rr_sample(4, 1.0)
    b = ideal_lower_bound(neg, pos, trials=50_000, confidence_level=0.975)
    p, q = k_rr_probabilities(k=4, epsilon=1.0)
    # by hand, one-sided limits at (1 − c)/2 each from scipy's beta quantiles, for the two
    # best tests: "s ≥ ε" (FPR = q, FNR = 1 − p, first inequality) and its mirror "s ≥ 0"
    # (FPR = 1 − p, FNR = q, second inequality); both certify ln((1 − hi(1 − p))/hi(q)).
    level, n = 1 - 0.025 / 2, 50_000

    def hi(rate: float) -> float:
        k = round(rate * n)
        return float(stats.beta.ppf(level, k + 1, n - k))

    assert b.threshold in (1.0, 0.0)
    assert b.value == pytest.approx(math.log((1 - hi(1 - p)) / hi(q)), rel=1e-6)
    assert 0.95 < b.value < 1.0  # below ε: the limits only ever widen the rates


def test_ideal_bound_grows_with_trials_and_stays_below_epsilon() -> None:
    neg, pos = _exact_k_rr_sample(4, 1.0)
    values = [ideal_lower_bound(neg, pos, trials=n).value for n in (1_000, 10_000, 100_000)]
    assert values == sorted(values)
    assert values[-1] < 1.0


def test_an_audit_does_not_beat_the_ideal_on_average() -> None:
    # The oracle knows the best threshold; the split audit must choose it from data.
    mech = k_randomized_response(k=4, epsilon=1.0)
    neg, pos = _exact_k_rr_sample(4, 1.0)
    ideal = ideal_lower_bound(neg, pos, trials=5_000, confidence_level=0.95).value
    rng = np.random.default_rng(5)
    got = [
        epsilon_lower_bound(
            mech.run(0, rng=rng, size=10_000), mech.run(1, rng=rng, size=10_000), delta=0.0, seed=i
        ).value
        for i in range(40)
    ]
    assert np.median(got) <= ideal + 0.01


def test_ideal_5d_laplace_spread_pair() -> None:
    # The second 5-d Laplace pair: inputs differing by (1/5, …, 1/5), ε = 1. With
    # 10⁶ LLR draws per input the rates' sampling error (~1e-3 relative) is far below
    # the Clopper–Pearson width at 5·10⁴ trials.
    mech = vector_laplace(query=([0.0] * 5, [0.2] * 5), sensitivity=1.0, scale=1.0)
    half = ideal_for_mechanism(mech, trials=50_000, draws=1_000_000, seed=6, confidence_level=0.975)
    full = ideal_for_mechanism(
        mech, trials=100_000, draws=1_000_000, seed=6, confidence_level=0.975
    )
    assert half.value == pytest.approx(0.86, abs=0.015)
    assert full.value == pytest.approx(0.90, abs=0.015)
    assert half.value < full.value < 1.0


def test_ideal_mu_and_errors() -> None:
    rng = np.random.default_rng(7)
    neg, pos = rng.normal(0, 1, 200_000), rng.normal(1, 1, 200_000)
    b = ideal_lower_bound(neg, pos, trials=100_000, parameter="mu")
    assert 0.9 < b.value < 1.0
    assert b.to_dict()["parameter"] == "mu"
    with pytest.raises(DpauditError, match="'parameter' parameter must be one of"):
        ideal_lower_bound(neg, pos, trials=10, parameter="rho")
    with pytest.raises(
        DpauditError,
        match=r"The 'trials' parameter must be an integer in \[1, inf\)\. Got 0 instead\.",
    ):
        ideal_lower_bound(neg, pos, trials=0)
    with pytest.raises(
        DpauditError,
        match=r"The 'draws' parameter must be an integer in \[2, inf\)\. Got 1 instead\.",
    ):
        ideal_for_mechanism(k_randomized_response(k=3, epsilon=1.0), trials=10, draws=1)
