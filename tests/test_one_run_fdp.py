"""Tests of dpaudit.bounds.fdp_one_run: the f-DP analysis of a one-run audit.

References:
    Mahloujifar, Melis, Chaudhuri (2025), "Auditing f-Differential Privacy in One Run",
    ICML, arXiv:2410.22235v1 (the recursion with abstentions, Alg. 3).
"""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import special
from scipy import stats as sps

from dpaudit import DpauditError
from dpaudit.bounds import one_run_epsilon_lower_bound, one_run_guesses
from dpaudit.bounds.fdp_one_run import (
    gdp_power_inverse,
    one_run_fdp_test,
    one_run_mu_lower_bound,
    power_inverse,
)
from dpaudit.theory import gdp_mu, tradeoff_dp, tradeoff_gdp

TOL = 1e-6  # the default bisection tolerance of one_run_mu_lower_bound


def _mu(m: int, r: int, v: int, c: float) -> float:
    return one_run_mu_lower_bound(canaries=m, guesses=r, correct=v, confidence_level=c).value


# ------------------------------------------------------------- reference: jax_privacy
# jax_privacy 2.0's f-DP one-run auditor on the same counts. Produced once by
#     python3 -m venv /tmp/jaxp && /tmp/jaxp/bin/pip install jax-privacy==2.0.0
#     /tmp/jaxp/bin/python scripts/fdp_one_run_references.py
# with jax-privacy 2.0.0, jax 0.10.2, dp-accounting 0.6.0, numpy 2.4.6, scipy 1.17.1,
# Python 3.11.7 (CPU). Each row: (m, r, v, confidence, δ, jax_privacy's ε at δ, and
# 1/σ(ε, δ) from dp-accounting's get_sigma_gaussian, the μ jax_privacy tested at ε).
JAX_PRIVACY_2_0_0 = [
    (1000, 100, 94, 0.99, 1e-05, 2.533001385450237, 0.619161771301568),
    (1000, 100, 100, 0.95, 1e-05, 5.549027999942942, 1.2255334716449882),
    (1000, 100, 80, 0.95, 1e-05, 1.4022146738385823, 0.36432558544521315),
    (1000, 200, 150, 0.95, 1e-05, 1.2969160950579615, 0.33946632848064817),
    (1000, 500, 400, 0.95, 1e-05, 2.076806928840693, 0.5187533538804908),
    (1000, 1000, 700, 0.95, 1e-05, 1.3719800500431791, 0.35721094180993085),
    (1000, 100, 94, 0.99, 1e-06, 2.853590145427307, 0.6191617454374975),
    (10000, 1000, 900, 0.95, 1e-05, 2.802598207968061, 0.6771926141783055),
    (10000, 500, 480, 0.99, 1e-05, 3.2957369939281165, 0.7810856056191136),
    (100, 50, 45, 0.9, 1e-05, 3.285797667632013, 0.7790187265660903),
    (100, 100, 75, 0.95, 1e-05, 1.5735760776144092, 0.40431200013333224),
    (5000, 2000, 1500, 0.999, 1e-05, 1.0707938128823846, 0.2852680964768528),
    (1000, 50, 50, 0.999, 1e-05, 2.3588731638511256, 0.5811785266085178),
]
# Both sides find a root to within 1e-6: ours in μ, jax_privacy's brentq in ε (and
# dμ/dε < 1 on this grid), so they can differ by about 2e-6; 1e-5 leaves room for that
# and is still a hundred times tighter than the 1e-3 asked of the implementation.
REFERENCE_TOL = 1e-5


@pytest.mark.parametrize(("m", "r", "v", "c", "delta", "eps", "mu_jax"), JAX_PRIVACY_2_0_0)
def test_matches_jax_privacy(m, r, v, c, delta, eps, mu_jax) -> None:
    mu_ref = gdp_mu(eps, delta)
    # the ε → μ map is the one jax_privacy used internally (1/σ of the Gaussian mechanism)
    assert mu_ref == pytest.approx(mu_jax, rel=1e-9)
    assert _mu(m, r, v, c) == pytest.approx(mu_ref, abs=REFERENCE_TOL)


def test_the_worked_example() -> None:
    # An independent computation reported about 0.62 for these counts.
    b = one_run_mu_lower_bound(canaries=1000, guesses=100, correct=94, confidence_level=0.99)
    assert b.value >= 0.61
    assert b.method == "one-run-fdp"
    assert b.validity == "rigorous-one-run"
    assert b.counts == {"canaries": 1000, "guesses": 100, "correct": 94}
    assert b.details["family"] == "gdp"
    assert b.value <= b.details["limit_of_detection"]
    assert b.details["p_value_at_bound"] <= 0.01
    # the claim at the bound is rejected; a claim 2·tol above it is not
    for mu, rejected in ((b.value, True), (b.value + 2 * TOL, False)):
        t = one_run_fdp_test(
            inverse=gdp_power_inverse(mu),
            canaries=1000,
            guesses=100,
            correct=94,
            confidence_level=0.99,
        )
        assert t.rejected is rejected
    # on the same counts the binomial (ε, δ) analysis certifies less than the GDP route
    eps = one_run_epsilon_lower_bound(
        canaries=1000, guesses=100, correct=94, delta=1e-5, confidence_level=0.99
    ).value
    assert b.epsilon(1e-5).value > eps


# ------------------------------------------------------------------------ closed forms
@pytest.mark.parametrize("mu", [0.3, 1.0, 2.5])
def test_one_canary_gdp_p_value_is_the_bayes_accuracy(mu) -> None:
    # m = r = v = 1: the recursion has one level, and "rejected at τ" reads
    # g(τ) > 1 − τ ⇔ Φ⁻¹(τ) − μ > −Φ⁻¹(τ) ⇔ τ > Φ(μ/2), the best accuracy of a guess
    # between N(0, 1) and N(μ, 1) under a fair coin. So the p-value is Φ(μ/2).
    t = one_run_fdp_test(
        inverse=gdp_power_inverse(mu), canaries=1, guesses=1, correct=1, confidence_level=0.2
    )
    assert t.p_value == pytest.approx(special.ndtr(mu / 2), rel=1e-8)
    assert t.p_value >= special.ndtr(mu / 2)  # rounded up, never down
    assert t.rejected == bool(special.ndtr(mu / 2) < 0.8)


@pytest.mark.parametrize("eps", [0.2, 0.5, 1.5])
def test_one_canary_pure_dp_p_value_through_the_general_path(eps) -> None:
    # Same game for ε-DP, through the numerical inverse of f_{ε,0}: g(τ) > 1 − τ ⇔
    # τ > e^ε/(1 + e^ε), randomized response's accuracy.
    f = functools.partial(tradeoff_dp, epsilon=eps)
    t = one_run_fdp_test(f, canaries=1, guesses=1, correct=1, confidence_level=0.05)
    assert t.p_value == pytest.approx(special.expit(eps), rel=1e-8)
    assert t.rejected == bool(special.expit(eps) < 0.95)


@pytest.mark.parametrize(("m", "c"), [(1, 0.3), (10, 0.2), (1000, 0.05), (1000, 0.6)])
def test_single_guess_closed_form(m, c) -> None:
    # r = v = 1 of m canaries: rejected iff g(τ/m) > (1 − τ)/m, i.e.
    # μ < Φ⁻¹(τ/m) − Φ⁻¹((1 − τ)/m); zero when τ ≤ ½.
    tau = 1 - c
    expected = max(0.0, special.ndtri(tau / m) - special.ndtri((1 - tau) / m))
    assert _mu(m, 1, 1, c) == pytest.approx(expected, abs=TOL)


def test_general_path_matches_the_closed_form_inverse() -> None:
    g_closed = gdp_power_inverse(0.7)
    g_numeric = power_inverse(functools.partial(tradeoff_gdp, mu=0.7))
    for y in (0.0, 1e-250, 1e-17, 1e-12, 0.003, 0.3, 0.9, 1.0 - 1e-9):
        exact = g_closed(y)
        approx = g_numeric(y)
        assert approx <= exact * (1 + 1e-13)  # never above: rejections stay valid
        if y > 1e-15:  # below that 1 − y rounds to 1, and the numerical inverse gives 0
            assert approx == pytest.approx(exact, rel=1e-9)
        else:
            assert approx == 0.0
    kw = {"canaries": 200, "guesses": 40, "correct": 35, "confidence_level": 0.95}
    general = one_run_fdp_test(functools.partial(tradeoff_gdp, mu=0.7), **kw)
    closed = one_run_fdp_test(inverse=g_closed, **kw)
    assert general.rejected == closed.rejected
    assert general.p_value == pytest.approx(closed.p_value, rel=1e-6)


# ------------------------------------------------------------------------- properties
counts = st.integers(1, 2000).flatmap(
    lambda m: st.integers(0, min(m, 400)).flatmap(
        lambda r: st.tuples(st.just(m), st.just(r), st.integers(0, r))
    )
)
levels = st.floats(0.5, 0.999)


@settings(max_examples=60, deadline=None)
@given(counts, levels)
def test_never_above_the_limit_of_detection(mrv, c) -> None:
    m, r, v = mrv
    b = one_run_mu_lower_bound(canaries=m, guesses=r, correct=v, confidence_level=c)
    assert 0.0 <= b.value <= b.details["limit_of_detection"] + TOL
    assert b.details["limit_of_detection"] == pytest.approx(_mu(m, r, r, c), abs=TOL)


@settings(max_examples=60, deadline=None)
@given(counts, levels, levels)
def test_falls_as_the_confidence_level_rises(mrv, c1, c2) -> None:
    m, r, v = mrv
    lo, hi = sorted((c1, c2))
    assert _mu(m, r, v, hi) <= _mu(m, r, v, lo) + TOL


@settings(max_examples=60, deadline=None)
@given(counts, levels)
def test_zero_at_or_below_chance(mrv, c) -> None:
    m, r, _ = mrv
    for v in {0, r // 2}:
        assert _mu(m, r, v, c) == 0.0


@settings(max_examples=60, deadline=None)
@given(counts, levels, st.integers(0, 400))
def test_increases_in_correct_guesses(mrv, c, more) -> None:
    m, r, v = mrv
    v2 = min(r, v + more)
    assert _mu(m, r, v, c) <= _mu(m, r, v2, c) + TOL


@settings(max_examples=40, deadline=None)
@given(counts, levels, st.floats(0.0, 3.0))
def test_decision_and_p_value_agree(mrv, c, mu) -> None:
    m, r, v = mrv
    t = one_run_fdp_test(
        inverse=gdp_power_inverse(mu), canaries=m, guesses=r, correct=v, confidence_level=c
    )
    assert 0.0 < t.p_value <= 1.0
    assert t.rejected is (t.p_value <= 1 - c)
    # a stronger claim (smaller μ) is rejected whenever this one is
    if t.rejected:
        stronger = one_run_fdp_test(
            inverse=gdp_power_inverse(mu / 2), canaries=m, guesses=r, correct=v, confidence_level=c
        )
        assert stronger.rejected
        assert stronger.p_value <= t.p_value * (1 + 1e-6)


# ------------------------------------------------------------ validity over repeats
# Repeated one-run audits of a mechanism that IS μ₀-GDP: m canaries, fair coins, one
# N(μ₀·coin, 1) score per canary (changing one coin shifts one coordinate by μ₀: exactly
# μ₀-GDP), k guesses on each side with one_run_guesses. μ_LB > μ₀ is a false rejection
# of the true claim, which has probability ≤ 1 − c per audit; over R audits the count is
# stochastically below Bin(R, 1 − c), and its one-sided 99.9 % upper limit is the
# ceiling (a correct bound fails this check in at most 1 seed of 1,000).
M, K, MU0 = 1000, 50, 1.0


def _audits(rng: np.random.Generator, repeats: int, mu_true: float, k: int = K):
    for _ in range(repeats):
        coins = rng.random(M) < 0.5
        scores = rng.normal(mu_true * coins, 1.0)
        yield one_run_guesses(scores, coins, guesses_per_side=k)


def _ceiling(repeats: int, c: float) -> int:
    return int(sps.binom.ppf(0.999, repeats, 1 - c))


def _false_rejections(repeats: int, c: float, seed: int) -> tuple[int, list[float]]:
    rng = np.random.default_rng(seed)
    values = [_mu(M, r, v, c) for r, v in _audits(rng, repeats, MU0)]
    return sum(x > MU0 for x in values), values


@pytest.mark.parametrize("c", [0.5, 0.95])
def test_validity_gaussian_mechanism(c) -> None:
    repeats = 400
    hits, values = _false_rejections(repeats, c, seed=2025)
    assert hits <= _ceiling(repeats, c)
    assert np.median(values) > 0.4  # the audits do detect something (not vacuous)


def test_the_validity_check_can_fail() -> None:
    # Control: an estimate that ignores the selection of the extreme canaries (the μ
    # whose Bayes accuracy Φ(μ/2) equals the observed accuracy v/r) must fail the same
    # check, or the check proves nothing.
    repeats, c = 400, 0.5
    rng = np.random.default_rng(2025)
    naive = [2 * special.ndtri(v / r) for r, v in _audits(rng, repeats, MU0)]
    assert sum(x > MU0 for x in naive) > _ceiling(repeats, c)


def test_power_against_a_false_claim() -> None:
    # The mechanism is 2-GDP; the claim "1-GDP" is false and should be rejected at 95 %
    # in most audits. With k = 100 guesses a side of m = 1000, 200 of 200 audits rejected
    # it (seeds 7 and 8). Requiring 90 %: were the true rate only 98 %, a seed would
    # fail this with probability P[Bin(200, 0.98) < 180] ≈ 1e-9.
    repeats, c = 200, 0.95
    rng = np.random.default_rng(7)
    g = gdp_power_inverse(1.0)
    rejected = sum(
        one_run_fdp_test(inverse=g, canaries=M, guesses=r, correct=v, confidence_level=c).rejected
        for r, v in _audits(rng, repeats, 2.0, k=100)
    )
    assert rejected >= 0.9 * repeats


@pytest.mark.slow
@pytest.mark.parametrize(("k", "c"), [(5, 0.5), (50, 0.5), (250, 0.5), (50, 0.9), (50, 0.99)])
def test_validity_gaussian_mechanism_sweep(k, c) -> None:
    repeats = 2000
    rng = np.random.default_rng(k * 1000 + round(c * 100))
    hits = sum(_mu(M, r, v, c) > MU0 for r, v in _audits(rng, repeats, MU0, k=k))
    assert hits <= _ceiling(repeats, c)


# ------------------------------------------------------------------ edges and errors
def test_no_guesses_or_no_correct_guess_rejects_nothing() -> None:
    for r, v in ((0, 0), (10, 0)):
        t = one_run_fdp_test(inverse=gdp_power_inverse(0.0), canaries=10, guesses=r, correct=v)
        assert not t.rejected
        assert t.p_value == 1.0
        assert _mu(10, r, v, 0.95) == 0.0


def test_all_canaries_guessed_right() -> None:
    b = one_run_mu_lower_bound(canaries=100, guesses=100, correct=100)
    assert b.value == pytest.approx(b.details["limit_of_detection"], abs=0)
    assert 0 < b.value < 64


def test_identical_outputs_claim_is_rejected_only_above_chance() -> None:
    # μ = 0 (g(y) = y): under it W ~ Bin(r, ½) exactly. The test must not reject at
    # chance, and must reject a clearly better guesser.
    g = gdp_power_inverse(0.0)
    assert not one_run_fdp_test(inverse=g, canaries=100, guesses=100, correct=55).rejected
    assert one_run_fdp_test(inverse=g, canaries=100, guesses=100, correct=80).rejected


def test_result_objects_are_frozen_and_serialise() -> None:
    b = one_run_mu_lower_bound(canaries=1000, guesses=100, correct=94, confidence_level=0.99)
    json.dumps(b.to_dict())
    e = b.epsilon(1e-5)
    assert e.validity == "assumes-gdp"
    assert e.method == "one-run-fdp+gdp"
    t = one_run_fdp_test(inverse=gdp_power_inverse(0.5), canaries=10, guesses=2, correct=2)
    assert "rejected=" in repr(t)
    with pytest.raises(AttributeError):
        t.rejected = True  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"canaries": 10, "guesses": 20, "correct": 5}, "correct ≤ guesses ≤ canaries"),
        ({"canaries": 10, "guesses": 4, "correct": 5}, "correct ≤ guesses ≤ canaries"),
        ({"canaries": 0, "guesses": 0, "correct": 0}, "'canaries' parameter"),
        ({"canaries": 10, "guesses": 4.0, "correct": 2}, "'guesses' parameter"),
        ({"canaries": 10, "guesses": True, "correct": 1}, "'guesses' parameter"),
        ({"canaries": 10, "guesses": 4, "correct": 2, "confidence_level": 1.0}, "confidence"),
        ({"canaries": 10, "guesses": 4, "correct": 2, "tolerance": 0.0}, "'tolerance'"),
    ],
)
def test_bad_arguments(kwargs, match) -> None:
    with pytest.raises(DpauditError, match=match):
        one_run_mu_lower_bound(**kwargs)


@pytest.mark.parametrize(
    ("f", "match"),
    [
        (lambda a: a, "increases somewhere|outside"),
        (lambda a: 1.0, "outside"),
        (lambda a: math.nan, "NaN"),
        (lambda a: max(0.0, 1.0 - a) if a < 0.5 else 0.5 * (1.0 - a), "not convex"),
        (lambda a: "x", "must map a float"),
    ],
)
def test_not_a_tradeoff_function(f, match) -> None:
    with pytest.raises(DpauditError, match=match):
        one_run_fdp_test(f, canaries=10, guesses=4, correct=3)


def test_needs_a_function_or_its_inverse() -> None:
    with pytest.raises(DpauditError, match="'tradeoff' or its 'inverse'"):
        one_run_fdp_test(canaries=10, guesses=4, correct=3)


@settings(max_examples=30, deadline=None)
@given(st.floats(0.0, 5.0), st.floats(0.0, 1.0))
def test_gdp_inverse_inverts_the_power(mu, y) -> None:
    # f̄(g(y)) = y for G_μ: 1 − G_μ(g(y)) = y.
    alpha = gdp_power_inverse(mu)(y)
    assume(0.0 < alpha < 1.0)
    assert 1.0 - tradeoff_gdp(alpha, mu=mu) == pytest.approx(y, rel=1e-9, abs=1e-12)
