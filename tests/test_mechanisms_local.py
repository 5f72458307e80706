"""Local randomisers (k-RR, unary encoding, local Laplace/Gaussian) and vector mechanisms.

Closed forms of their output laws and log-likelihood-ratio scores, the audit file's rules,
power goals at 10⁵ trials (the share of the true ε a bound must reach), and validity over
repeated audits of correct code with a power control (tests/test_bounds.py's standard).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpaudit.audit import run_audit
from dpaudit.bounds import epsilon_lower_bound, mu_lower_bound
from dpaudit.config import parse_config
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.mechanisms.noise import (
    k_randomized_response,
    k_rr_probabilities,
    laplace_llr,
    theoretical_claim,
    unary_encoding,
    unary_encoding_probabilities,
    vector_gaussian,
    vector_laplace,
)


def _config(mechanism: str, **audit: object) -> dict:
    import tomllib

    head = {"name": "t", "kinds": ["mechanism"], **audit}
    return {"audit": head, "mechanism": tomllib.loads(mechanism)}


# ----------------------------------------------------------------- closed forms
@pytest.mark.parametrize(("k", "epsilon"), [(2, 1.0), (4, 1.0), (10, 0.3), (3, 40.0)])
def test_k_rr_probabilities_have_ratio_e_eps_and_sum_to_one(k: int, epsilon: float) -> None:
    p, q = k_rr_probabilities(k=k, epsilon=epsilon)
    assert p + (k - 1) * q == pytest.approx(1.0, rel=1e-12)
    assert math.log(p) - math.log(q) == pytest.approx(epsilon, rel=1e-12)


def test_k_rr_k2_is_binary_randomized_response() -> None:
    # k = 2: p = e^ε/(e^ε + 1); ε = ln 3 gives the fair-coin protocol's p = 3/4
    p, _ = k_rr_probabilities(k=2, epsilon=math.log(3))
    assert p == pytest.approx(0.75, rel=1e-12)


def test_k_rr_samples_follow_the_law_and_score_by_llr() -> None:
    mech = k_randomized_response(k=4, epsilon=1.0, values=(2, 0))
    rng = np.random.default_rng(0)
    n = 400_000
    neg, pos = mech.run(0, rng=rng, size=n), mech.run(1, rng=rng, size=n)
    assert set(np.unique(neg)) <= {-1.0, 0.0, 1.0}
    p, q = k_rr_probabilities(k=4, epsilon=1.0)
    # score ε ⇔ the report names D''s value: q under D, p under D'; 5 standard errors
    for got, want in ((np.mean(neg == 1.0), q), (np.mean(pos == 1.0), p)):
        assert abs(got - want) < 5 * math.sqrt(want * (1 - want) / n)
    assert abs(np.mean(neg == -1.0) - p) < 5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("variant", ["optimised", "symmetric"])
def test_unary_encoding_is_eps_ldp_and_its_llr_tops_at_eps(variant: str) -> None:
    p, q = unary_encoding_probabilities(epsilon=1.3, variant=variant)
    assert math.log(p * (1 - q) / (q * (1 - p))) == pytest.approx(1.3, rel=1e-12)
    if variant == "optimised":  # Wang et al. 2017, Sec. 4.3: p = 1/2, q = 1/(e^ε + 1)
        assert (p, q) == (0.5, pytest.approx(1 / (math.exp(1.3) + 1)))
    mech = unary_encoding(k=6, epsilon=1.3, variant=variant, values=(1, 4))
    rng = np.random.default_rng(1)
    neg, pos = mech.run(0, rng=rng, size=200_000), mech.run(1, rng=rng, size=200_000)
    assert neg.max() == pytest.approx(1.3)
    assert neg.min() == pytest.approx(-1.3)
    # P[score = ε] = q(1 − p) under D, p(1 − q) under D' (the two differing bits)
    top_d, top_d1 = np.mean(neg >= 1.3 - 1e-9), np.mean(pos >= 1.3 - 1e-9)
    assert top_d == pytest.approx(q * (1 - p), abs=5e-3)
    assert top_d1 == pytest.approx(p * (1 - q), abs=5e-3)


def test_unary_encoding_large_k_samples_in_blocks() -> None:
    mech = unary_encoding(k=5000, epsilon=1.0)
    out = mech.run(0, rng=np.random.default_rng(2), size=7000)
    assert out.shape == (7000,)
    assert np.all(np.isfinite(out))


def test_bad_values_are_errors() -> None:
    with pytest.raises(DpauditError, match=r"two different categories in 0\.\.3"):
        k_randomized_response(k=4, epsilon=1.0, values=(1, 1))
    with pytest.raises(DpauditError, match="'variant' parameter must be one of"):
        unary_encoding(k=4, epsilon=1.0, variant="rappor")
    with pytest.raises(DpauditError, match="same non-zero length"):
        vector_laplace(query=([0.0, 0.0], [1.0]), sensitivity=1.0, scale=1.0)


def test_laplace_llr_is_exact_and_constant_on_its_atoms() -> None:
    # Outside [a_i, b_i] each coordinate contributes exactly ±(b_i − a_i)/scale, the
    # SAME float whether y came from a + L or b + L: floating-point rounding of b + L
    # must not leak into the score (Mironov 2012).
    a, b = np.zeros(5), np.full(5, 0.2)
    mech = vector_laplace(query=(a, b), sensitivity=1.0, scale=1.0)
    rng = np.random.default_rng(3)
    y0 = rng.laplace(0.0, 1.0, (100_000, 5))
    y1 = b + rng.laplace(0.0, 1.0, (100_000, 5))
    s0, s1 = laplace_llr(y0, a, b, 1.0), laplace_llr(y1, a, b, 1.0)
    top0, top1 = s0[np.all(y0 >= 0.2, axis=1)], s1[np.all(y1 >= 0.2, axis=1)]
    assert np.unique(np.concatenate([top0, top1])).size == 1
    assert top0[0] == pytest.approx(1.0, abs=1e-15)
    # against the plain formula elsewhere
    plain = np.abs(y0 - a).sum(1) - np.abs(y0 - b).sum(1)
    np.testing.assert_allclose(s0, plain, atol=1e-12)
    assert mech.parameters["distance"] == pytest.approx(1.0)


def test_vector_gaussian_llr_is_gaussian_with_mean_mu_squared_over_two() -> None:
    a, b = np.zeros(3), np.array([0.6, 0.0, 0.8])  # ‖b − a‖₂ = 1
    mech = vector_gaussian(query=(a, b), sensitivity=1.0, sigma=0.5)
    rng = np.random.default_rng(4)
    pos = mech.run(1, rng=rng, size=200_000)
    m = 1.0 / 0.5  # LLR ~ N(m²/2, m²) under D'
    assert pos.mean() == pytest.approx(m**2 / 2, abs=0.02)
    assert pos.std() == pytest.approx(m, rel=0.01)


def test_theoretical_claims_of_the_new_built_ins() -> None:
    assert theoretical_claim("k-rr", {"epsilon": 0.7}).epsilon == 0.7
    assert theoretical_claim("unary-encoding", {"epsilon": 0.7}).epsilon == 0.7
    assert theoretical_claim("local-laplace", {"sensitivity": 2.0, "scale": 4.0}).epsilon == 0.5
    assert theoretical_claim("local-gaussian", {"sensitivity": 2.0, "sigma": 4.0}).mu == 0.5


# ----------------------------------------------------------------- the audit file
@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('name = "k-rr"\nepsilon = 1.0', r"k-rr needs 'k'"),
        (
            'name = "k-rr"\nk = 3\nepsilon = 1.0\nvalues = [0, 3]',
            r"two different categories in 0..2",
        ),
        ('name = "laplace"\nepsilon = 1.0\nk = 3', r"'k' is not a parameter of 'laplace'"),
        ('name = "unary-encoding"\nk = 3\nepsilon = 1.0\nvariant = "x"', r"variant"),
        ('name = "local-laplace"\nepsilon = 1.0', r"needs 'domain'"),
        (
            'name = "local-laplace"\nepsilon = 1.0\ndomain = [0.0, 1.0]\nrecords = [[0.0], [2.0]]',
            r"must lie in the domain",
        ),
        ('name = "laplace"\nepsilon = 1.0\nquery = [[0.0, 1.0], [1.0]]', r"same non-zero length"),
        ('name = "k-rr"\nk = 4\nepsilon = 1.0\nquery = [[0.0], [1.0]]', r"'query' is not"),
        (
            'name = "local-laplace"\nepsilon = 1.0\ndomain = [0.0, 1.0]\nsensitivity = 2.0',
            r"'sensitivity' is not a parameter of 'local-laplace'",
        ),
    ],
)
def test_bad_mechanism_tables_say_what_is_wrong(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config(_config(text))


def _bounds(result) -> dict[str, float]:
    return {b["parameter"]: b["lower"]["value"] for b in result.to_dict()["bounds"]}


def test_goal_k_rr_k4_eps1_reaches_95_percent_of_eps(tmp_path: Path) -> None:
    # Power goal: k = 4, ε = 1, 10⁵ trials per input, ε_LB ≥ 0.95 ε.
    cfg = parse_config(_config('name = "k-rr"\nk = 4\nepsilon = 1.0\ntrials = 100_000'))
    result = run_audit(cfg, output_dir=tmp_path, write=False)
    assert result.verdict == "pass"
    assert 0.95 <= _bounds(result)["epsilon"] <= 1.0


def test_goal_laplace_5d_e1_reaches_90_percent_of_eps(tmp_path: Path) -> None:
    # Power goal: 5-dimensional Laplace, ℓ1 sensitivity 1, ε = 1, inputs differing by
    # e₁, 10⁵ trials per input: ε_LB ≥ 0.9 ε.
    text = (
        'name = "laplace"\nepsilon = 1.0\ntrials = 100_000\n'
        "query = [[0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0, 0.0]]"
    )
    result = run_audit(parse_config(_config(text)), output_dir=tmp_path, write=False)
    assert result.verdict == "pass"
    assert 0.9 <= _bounds(result)["epsilon"] <= 1.0


def test_local_randomisers_run_end_to_end(tmp_path: Path) -> None:
    for text in (
        'name = "unary-encoding"\nk = 8\nepsilon = 1.0\ntrials = 20_000',
        'name = "local-laplace"\nepsilon = 1.0\ndomain = [-1.0, 1.0]\ntrials = 20_000',
        'name = "local-gaussian"\nmu = 1.0\ndomain = [0.0, 1.0]\n'
        "records = [[0.0, 0.0], [1.0, 1.0]]\ntrials = 20_000",
    ):
        result = run_audit(parse_config(_config(text)), output_dir=tmp_path, write=False)
        assert result.verdict == "pass", text
        assert _bounds(result)["epsilon"] > 0.2, text


def test_query_pair_beyond_the_sensitivity_is_flagged_and_caught(tmp_path: Path) -> None:
    # Inputs 2 apart under a declared ℓ1 sensitivity of 1: the noise covers half the gap.
    text = 'name = "laplace"\nepsilon = 1.0\ntrials = 50_000\nquery = [[0.0, 0.0], [1.0, 1.0]]'
    result = run_audit(parse_config(_config(text)), output_dir=tmp_path, write=False)
    assert any("more than the sensitivity" in w for w in result.warnings)
    assert result.verdict == "fail"


# ------------------------------------------------------- validity over repeats
# As tests/test_bounds.py: R = 1000 audits of correct code, each bound may exceed the
# true value in at most 1 − c = 5 % of them; P[Bin(1000, 0.05) > 65] ≈ 0.011, so the
# 6.5 % ceiling flags a correct bound only about once in a hundred seeds.
REPEATS, TRIALS, CEILING = 1000, 1000, 0.065


def _violation_rate(
    mech, target: float, *, parameter: str = "epsilon", threshold: str = "split"
) -> float:
    rng = np.random.default_rng(0)
    hits = 0
    for i in range(REPEATS):
        neg, pos = mech.run(0, rng=rng, size=TRIALS), mech.run(1, rng=rng, size=TRIALS)
        if parameter == "epsilon":
            b = epsilon_lower_bound(neg, pos, delta=0.0, seed=i, threshold=threshold)
        else:
            b = mu_lower_bound(neg, pos, seed=i, threshold=threshold)
        hits += b.value > target
    return hits / REPEATS


@pytest.mark.parametrize(
    ("mech", "target"),
    [
        (k_randomized_response(k=4, epsilon=2.0), 2.0),
        (unary_encoding(k=5, epsilon=2.0), 2.0),
        (vector_laplace(query=([0.0] * 3, [1.0, 0, 0]), sensitivity=1.0, scale=0.5), 2.0),
        (vector_laplace(query=([0.0] * 3, [0.5, 0.5, 0]), sensitivity=1.0, scale=0.5), 2.0),
    ],
    ids=["k-rr", "oue", "laplace-e1", "laplace-spread"],
)
def test_validity_epsilon_at_the_true_epsilon(mech, target: float) -> None:
    assert _violation_rate(mech, target) <= CEILING


def test_validity_k_rr_with_bonferroni_thresholds() -> None:
    # three score values: the simultaneous limits cover them, ties and all
    mech = k_randomized_response(k=4, epsilon=2.0)
    assert _violation_rate(mech, 2.0, threshold="bonferroni") <= CEILING


def test_validity_mu_of_vector_gaussian() -> None:
    mech = vector_gaussian(query=([0.0, 0.0], [0.6, 0.8]), sensitivity=1.0, sigma=0.5)
    assert _violation_rate(mech, 2.0, parameter="mu") <= CEILING


def test_validity_check_has_power_against_a_planted_bug() -> None:
    # Control: k-RR that runs ε = 3 while claiming ε = 2 must fail the same check, or the
    # check above proves nothing at this number of trials.
    assert _violation_rate(k_randomized_response(k=4, epsilon=3.0), 2.0) > CEILING
