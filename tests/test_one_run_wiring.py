"""The f-DP one-run μ bound next to Steinke et al.'s ε: the guess ladder, the shared budget
share, its validity over repeated one-run audits, and its wiring into the dpsgd kind.

Validity: repeated one-run audits of a mechanism that IS μ₀-GDP (m canaries, fair coins, one
N(μ₀·coin, 1) score per canary: changing one coin moves one coordinate by μ₀, exactly
μ₀-GDP, with no interference between canaries). A bound above the truth is a false
violation, which a valid rule commits with probability ≤ 1 − c per audit; over R audits
the count is stochastically below Bin(R, 1 − c), and the ceiling is that law's one-sided
99.9 % quantile (a valid rule fails the check in at most 1 seed of 1,000). The controls
are rules that must fail the same check.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import special
from scipy import stats as sps

from dpaudit.bounds import (
    one_run_epsilon_lower_bound,
    one_run_guesses,
    one_run_p_value,
)
from dpaudit.bounds.fdp_one_run import (
    _rejects,
    gdp_power_inverse,
    gdp_tail_power_inverse,
    guess_ladder,
    ladder_rejects,
    one_run_bounds,
    one_run_mu_ladder_bound,
    one_run_mu_lower_bound,
    power_inverse,
    stronger,
)
from dpaudit.dpsgd.kind import KIND
from dpaudit.dpsgd.one_run import ONE_RUN_UNIT
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.errors import DpauditError
from dpaudit.kinds.base import RunContext, check_spending
from dpaudit.planning import limit_for_bound
from dpaudit.records import DPSGDRecord
from dpaudit.theory import gdp_epsilon, tradeoff_gdp

M, MU0, R = 1000, 1.0, 400


def _ceiling(repeats: int, c: float) -> int:
    return int(sps.binom.ppf(0.999, repeats, 1 - c))


def _gaussian_audits(seed: int, mu: float, repeats: int = R, m: int = M):
    """``repeats`` one-run audits of μ-GDP at once: (coins, scores), each (repeats, m)."""
    rng = np.random.default_rng(seed)
    coins = rng.random((repeats, m)) < 0.5
    return coins, rng.normal(mu * coins, 1.0)


def _correct_by_k(coins: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Correct guesses with k = 1..m/2 a side, per audit (the rule of one_run_guesses)."""
    order = np.argsort(-scores, axis=1, kind="stable")
    ranked = np.take_along_axis(coins, order, 1)
    top = np.cumsum(ranked, 1)
    bottom = np.cumsum(~ranked[:, ::-1], 1)
    return (top + bottom)[:, : coins.shape[1] // 2]


# ------------------------------------------------------------------------- the ladder


def test_ladder_closed_form() -> None:
    # r = 2·round(f·m/2) for f = 1/100, 1/30, 1/10, 1/3
    assert guess_ladder(1000) == (10, 34, 100, 334)
    assert guess_ladder(10_000) == (100, 334, 1000, 3334)
    assert guess_ladder(1000, include=(100, 40)) == (10, 34, 40, 100, 334)
    assert guess_ladder(1000, include=(41,)) == (10, 34, 40, 100, 334)  # ⌊41/2⌋ a side
    assert guess_ladder(4) == (2,)  # every rung at least one guess a side, at most m


def test_ladder_bad_arguments() -> None:
    with pytest.raises(DpauditError, match="'canaries' parameter"):
        guess_ladder(1)
    s, coins = np.zeros(10), np.zeros(10, dtype=bool)
    with pytest.raises(DpauditError, match=r"each at most the 10 canaries\. Got \[20\]"):
        one_run_mu_ladder_bound(s, coins, ladder=(20,))
    with pytest.raises(DpauditError, match="1 or more guess counts"):
        one_run_mu_ladder_bound(s, coins, ladder=())


def test_ladder_bound_is_the_best_rung_at_the_corrected_level() -> None:
    # An independent reference: the best of one_run_mu_lower_bound over the rungs, each at
    # level 1 − (1 − c)/L, with one_run_guesses' counts.
    coins, scores = _gaussian_audits(3, 1.5, repeats=1)
    c, ladder = 0.95, (10, 34, 100, 334)
    b = one_run_mu_ladder_bound(scores[0], coins[0], ladder=ladder, confidence_level=c)
    level = 1 - (1 - c) / len(ladder)
    each = []
    for r in ladder:
        rr, v = one_run_guesses(scores[0], coins[0], guesses_per_side=r // 2)
        each.append(
            one_run_mu_lower_bound(canaries=M, guesses=rr, correct=v, confidence_level=level).value
        )
    assert b.value == pytest.approx(max(each), abs=1e-12)
    assert [x["mu"] for x in b.details["rungs"]] == pytest.approx(each, abs=1e-12)
    assert b.details["rung_confidence_level"] == pytest.approx(level)
    assert b.validity == "rigorous-one-run"
    assert b.threshold == "top-bottom-ladder"
    assert b.value > 0.5
    assert 0 < b.value <= b.details["limit_of_detection"]
    # the comparison's limit of detection is the μ bound's own, not an ε
    assert limit_for_bound(b).value == b.details["limit_of_detection"]
    # the rejection rule and the bound agree (rejection is monotone in μ)
    for mu in (0.5 * b.value, b.value + 1e-3):
        assert ladder_rejects(
            scores[0], coins[0], inverse=gdp_power_inverse(mu), ladder=ladder, confidence_level=c
        ) is (mu < b.value)


# ------------------------------------------------------------- a bracket with a tail


@pytest.mark.parametrize(("mu", "tail"), [(0.5, 1e-3), (1.4, 1e-10), (2.0, 0.05)])
def test_tail_inverse_matches_the_numerical_inverse(mu, tail) -> None:
    # f(α) = max(0, G_μ(α + t) − t): the closed-form g against power_inverse's bisection
    def f(a: float) -> float:
        return max(0.0, float(tradeoff_gdp(min(1.0, a + tail), mu=mu)) - tail)

    closed, numeric = gdp_tail_power_inverse(mu, tail), power_inverse(f)
    for y in (tail / 2, tail + 1e-6, 0.01, 0.1, 0.5, 0.9, 0.999):
        assert numeric(y) <= closed(y) + 1e-12
        assert closed(y) == pytest.approx(numeric(y), rel=1e-8, abs=1e-12)
    assert gdp_tail_power_inverse(mu, 0.0)(0.3) == gdp_power_inverse(mu)(0.3)


def test_a_tail_only_weakens_the_claim() -> None:
    coins, scores = _gaussian_audits(4, 2.0, repeats=1)
    plain = one_run_mu_ladder_bound(scores[0], coins[0])
    tailed = one_run_mu_ladder_bound(scores[0], coins[0], tail=1e-3)
    assert 0 < tailed.value <= plain.value
    assert tailed.details["family"] == "gdp-with-tail"


# ------------------------------------------------------------------ validity and power


@pytest.mark.parametrize("c", [0.5, 0.9])
def test_ladder_validity_gaussian_mechanism(c) -> None:
    coins, scores = _gaussian_audits(2025, MU0)
    g = gdp_power_inverse(MU0)
    hits = sum(
        ladder_rejects(s, k, inverse=g, confidence_level=c)
        for s, k in zip(scores, coins, strict=True)
    )
    assert hits <= _ceiling(R, c)


def test_choosing_r_by_peeking_fails_the_validity_check() -> None:
    # Control: the same test at level 1 − c, r chosen AFTER seeing which r rejects (every
    # k = 1..250 a side tried, no correction). It must fail the check the ladder passes.
    c = 0.5
    coins, scores = _gaussian_audits(2025, MU0)
    right = _correct_by_k(coins, scores)
    g = gdp_power_inverse(MU0)
    hits = sum(
        any(_rejects_fast(g, 2 * k, int(row[k - 1]), 1 - c) for k in range(1, 251)) for row in right
    )
    assert hits > _ceiling(R, c)


def _rejects_fast(g, r: int, v: int, tau: float) -> bool:
    # the decision of one_run_fdp_test (without its p-value search, for speed)
    return _rejects(g, M, r, v, tau)


def test_power_against_a_false_claim() -> None:
    # 2-GDP audited against the claim 1-GDP at c = 0.95: the ladder rejects it in most
    # audits (seeds 11 and 12: 175 and 181 of 200). Requiring 150: were the true rate
    # 0.875, P[Bin(200, 0.875) < 150] ≈ 4e-7.
    coins, scores = _gaussian_audits(11, 2.0, repeats=200)
    g = gdp_power_inverse(1.0)
    rejected = sum(
        ladder_rejects(s, k, inverse=g, confidence_level=0.95)
        for s, k in zip(scores, coins, strict=True)
    )
    assert rejected >= 150


@pytest.mark.parametrize("c", [0.5, 0.9])
def test_either_bound_under_one_share_is_valid(c) -> None:
    # The verdict's rule: a violation when EITHER Steinke's ε (at r = 100, δ = 1e-5,
    # against the mechanism's true ε(δ)) OR the ladder's μ (against μ₀) is above the
    # truth, each at half the share. Its false-violation rate is held to 1 − c.
    delta, tau = 1e-5, 1 - c
    eps_true = gdp_epsilon(MU0, delta)
    coins, scores = _gaussian_audits(7, MU0)
    g = gdp_power_inverse(MU0)
    hits = 0
    for s, k in zip(scores, coins, strict=True):
        r, v = one_run_guesses(s, k, guesses_per_side=50)
        p = one_run_p_value(canaries=M, guesses=r, correct=v, epsilon=eps_true, delta=delta)
        ladder = guess_ladder(M, include=(r,))
        hits += p < tau / 2 or ladder_rejects(
            s, k, inverse=g, ladder=ladder, confidence_level=1 - tau / 2
        )
    assert hits <= _ceiling(R, c)


# ---------------------------------------------------------------- one share, two bounds


def test_one_run_bounds_split_the_share() -> None:
    coins, scores = _gaussian_audits(5, 1.5, repeats=1)
    s, k = scores[0], coins[0]
    c = 0.99
    both = one_run_bounds(s, k, guesses=100, delta=1e-5, confidence_level=c)
    each = 1 - (1 - c) / 2
    assert both.level_each == pytest.approx(each)
    r, v = one_run_guesses(s, k, guesses_per_side=50)
    eps = one_run_epsilon_lower_bound(
        canaries=M, guesses=r, correct=v, delta=1e-5, confidence_level=each
    )
    assert both.epsilon.value == eps.value
    assert both.epsilon.confidence_level == c  # both hold jointly at c
    assert both.epsilon.details["computed_at"] == pytest.approx(each)
    mu = one_run_mu_ladder_bound(
        s, k, ladder=guess_ladder(M, include=(100,)), confidence_level=each
    )
    assert both.mu is not None
    assert both.mu.value == mu.value
    assert both.mu.confidence_level == c
    alone = one_run_bounds(s, k, guesses=100, delta=1e-5, confidence_level=c, with_mu=False)
    assert alone.mu is None
    assert alone.level_each == c
    assert (
        alone.epsilon.value
        == (
            one_run_epsilon_lower_bound(
                canaries=M, guesses=r, correct=v, delta=1e-5, confidence_level=c
            )
        ).value
    )
    assert alone.epsilon.value >= both.epsilon.value


def test_the_stronger_decides() -> None:
    assert stronger((1.0, 4.0), (0.5, 1.0)) == "mu"
    assert stronger((3.0, 4.0), (0.5, 1.0)) == "epsilon"
    assert stronger((1.0, 4.0), (0.5, 2.0)) == "epsilon"  # equal fractions: ε
    assert stronger((1.0, 4.0), None) == "epsilon"
    assert stronger((1.0, math.inf), (0.1, 1.0)) == "mu"
    assert stronger((1.0, 4.0), (0.9, None)) == "epsilon"


# ----------------------------------------------------------------- the dpsgd kind


def _stored_one_run(mu_shift: float, seed: int = 0) -> dict[str, np.ndarray]:
    # What the one-run unit stores for full-batch DP-GD with σ = 2, T = 4: exactly 1-GDP
    # (√T/σ), its Dirac canaries' white-box scores N(coin·shift, 1).
    coins, scores = _gaussian_audits(seed, mu_shift, repeats=1)
    record = DPSGDRecord(
        noise_multiplier=2.0, sampling_rate=1.0, steps=4, clipping_norm=1.0, sampling="full-batch"
    )
    return {
        "one_run_scores": scores[0],
        "one_run_included": coins[0],
        **DPSGDRecord.to_arrays([record]),
    }


SECTION = DpsgdSection.model_validate(
    {
        "trainer": "dpsgd",
        "canary": "dirac",
        "threat_model": "white-box",
        "rows": 100,
        "trials": 0,
        "training": {
            "epochs": 2,
            "batch_size": 25,
            "learning_rate": 0.5,
            "dp": {"noise_multiplier": 1.0},
        },
        "one_run": {"canaries": M, "guesses": 100},
    }
)
CONTEXT = RunContext(seed=0, confidence_level=0.95, delta=1e-5, base_dir=Path("."))


@pytest.mark.parametrize(("shift", "violation"), [(1.0, False), (2.5, True)])
def test_dpsgd_one_run_reports_both_and_spends_one_share(shift, violation) -> None:
    outputs = {ONE_RUN_UNIT: _stored_one_run(shift)}
    announced = KIND.comparisons(SECTION, CONTEXT, outputs)
    assert announced == 1
    level = 1 - (1 - CONTEXT.confidence_level) / announced
    summary = KIND.summarise(SECTION, CONTEXT, outputs, level=level)
    check_spending("dpsgd", announced, summary, level)  # raises if the share is overspent
    eps, mu, gauss = summary.comparisons  # the Gaussian-pair μ: reported, never decides
    assert (eps.parameter, mu.parameter) == ("epsilon", "mu")
    assert (gauss.lower.validity, gauss.in_verdict) == ("asymptotic-one-run", False)
    assert mu.upper == pytest.approx(1.0)  # √T/σ of the record
    assert eps.upper == pytest.approx(gdp_epsilon(1.0, 1e-5))
    assert [eps.in_verdict, mu.in_verdict].count(True) == 1
    decides = eps if eps.in_verdict else mu
    assert decides.lower.value / decides.upper >= max(
        eps.lower.value / eps.upper, mu.lower.value / mu.upper
    )
    assert mu.lower.details["computed_at"] == pytest.approx(1 - (1 - level) / 2)
    assert any(c.violation for c in summary.comparisons) is violation
    if violation:
        # a 2.5-GDP run against an accountant's 1-GDP: μ decides
        assert mu.in_verdict
        assert mu.violation
        assert mu.lower.value > 1.0
        assert special.ndtr(mu.lower.value / 2) > 0.69  # its Bayes accuracy is far above 1-GDP's
