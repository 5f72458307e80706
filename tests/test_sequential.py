"""The anytime-valid limits of dpaudit.sequential: closed form against an integral, the
shape that makes bisection exact, validity under continuous monitoring (with a power
control: the fixed-n limit checked every round fails the same test), and the stopping
rule."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from scipy import integrate, stats

from dpaudit.errors import DpauditError
from dpaudit.planning import plan_trials
from dpaudit.sequential import (
    SequentialRule,
    TargetTest,
    log_mixture_martingale,
    null_line,
    plan_sequential,
    rate_upper_limit,
    sequential_path,
    simulate_stopping,
)
from dpaudit.stats import clopper_pearson_upper
from dpaudit.theory import tradeoff_gdp


@pytest.mark.parametrize(("k", "n", "p"), [(3, 40, 0.2), (0, 10, 0.3), (25, 50, 0.7)])
def test_martingale_is_the_truncated_beta_mixture(k: int, n: int, p: float) -> None:
    # Independent reference: integrate the likelihood ratio against the truncated prior.
    a, b = 0.3 * 8, 0.7 * 8
    prior = stats.beta(a, b)

    def ratio(q: float) -> float:
        return (q / p) ** k * ((1 - q) / (1 - p)) ** (n - k) * prior.pdf(q)

    expected = integrate.quad(ratio, 0.0, p, epsabs=0, epsrel=1e-10)[0] / prior.cdf(p)
    got = log_mixture_martingale(k, n, p, prior_mean=0.3, prior_concentration=8)
    assert math.isclose(float(got), math.log(expected), rel_tol=1e-7, abs_tol=1e-9)


def test_martingale_is_one_before_any_trial_and_at_most_one_below_the_estimate() -> None:
    assert float(log_mixture_martingale(0, 0, 0.4, prior_mean=0.2, prior_concentration=5)) == (
        pytest.approx(0.0, abs=1e-12)
    )
    for k, n in [(5, 50), (40, 50), (300, 1000)]:
        # (far below k/n the numerator's underflow guard errs upward: conservative)
        p = np.linspace(k / (2 * n), k / n, 50)
        values = log_mixture_martingale(k, n, p, prior_mean=k / n, prior_concentration=30)
        assert np.all(values <= 1e-9)
        above = np.linspace(k / n, 0.999, 400)
        rising = log_mixture_martingale(k, n, above, prior_mean=k / n, prior_concentration=30)
        assert np.all(np.diff(rising) >= -1e-9)  # what makes the bisection exact


def test_limit_edges_and_messages() -> None:
    assert rate_upper_limit(0, 0, level=0.95, prior_mean=0.1, prior_concentration=10) == 1.0
    assert rate_upper_limit(7, 7, level=0.95, prior_mean=0.1, prior_concentration=10) == 1.0
    with pytest.raises(DpauditError, match=r"The 'k' parameter must be an integer in \[0, 5\]"):
        rate_upper_limit(6, 5, level=0.95, prior_mean=0.1, prior_concentration=10)
    with pytest.raises(DpauditError, match=r"The 'level' parameter must be in \(0, 1\)"):
        rate_upper_limit(1, 5, level=1.0, prior_mean=0.1, prior_concentration=10)
    with pytest.raises(DpauditError, match="needs a 'target' to certify or an 'upper'"):
        plan_sequential(law="laplace", true_value=1.0, parameter="epsilon", target=None, upper=None)


@pytest.mark.parametrize(("k", "n"), [(0, 30), (5, 100), (180, 1000), (999, 1000)])
def test_the_sequence_is_wider_than_the_fixed_interval(k: int, n: int) -> None:
    # Valid over every n at once costs width at each n: never below Clopper–Pearson.
    u = rate_upper_limit(k, n, level=0.95, prior_mean=k / n + 0.01, prior_concentration=40)
    assert u >= float(clopper_pearson_upper(np.array([k]), n, level=0.95)[0])


def test_coverage_under_continuous_monitoring_with_power_control() -> None:
    """Checked at 25 looks up to 400 trials: the sequence misses the true rate in no more
    streams of 200 than Binomial(200, 1 − level) exceeds with probability 0.001; the
    Clopper–Pearson limit checked at the same looks misses in more (it is not valid under
    monitoring: the power control)."""
    level, p, n_max, repeats = 0.9, 0.3, 400, 200
    rng = np.random.default_rng(12)
    looks = np.unique(np.geomspace(1, n_max, 25).astype(int))
    miss_cs = miss_cp = 0
    for _ in range(repeats):
        ks = np.cumsum(rng.random(n_max) < p)[looks - 1]
        cp = [
            clopper_pearson_upper(np.array([k]), int(n), level=level)[0]
            for k, n in zip(ks, looks, strict=True)
        ]
        miss_cp += bool(min(cp) < p)
        cs = [
            rate_upper_limit(int(k), int(n), level=level, prior_mean=0.3, prior_concentration=20)
            for k, n in zip(ks, looks, strict=True)
        ]
        miss_cs += bool(min(cs) < p)
    ceiling = stats.binom.ppf(0.999, repeats, 1 - level)
    assert miss_cs <= ceiling, (miss_cs, ceiling)
    assert miss_cp > ceiling, (miss_cp, ceiling)


def _laplace_rounds(
    eps: float, rounds: int, size: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        (rng.laplace(0, 1 / eps, size), 1 + rng.laplace(0, 1 / eps, size)) for _ in range(rounds)
    ]


def test_path_stops_on_violation_target_and_cap() -> None:
    rounds = _laplace_rounds(3.0, 30, 100, seed=1)
    rule = SequentialRule(parameter="epsilon", delta=0.0, level=0.95, upper=1.0)
    _, path = sequential_path(rounds, rule, last_round=29)
    assert path[-1].decision == "violation"
    assert path[-1].value > 1.0
    assert all(p.decision == "continue" for p in path[:-1])
    assert all(a.value <= b.value for a, b in itertools.pairwise(path))  # never loosens
    assert path[-1].trials == 100 * (len(path) + 1)  # round 0 counts as used
    certify = SequentialRule(parameter="epsilon", delta=0.0, level=0.95, upper=5.0, target=1.5)
    assert sequential_path(rounds, certify)[1][-1].decision == "target"
    capped = SequentialRule(parameter="mu", delta=0.0, level=0.95, upper=50.0)
    _, path = sequential_path(rounds[:4], capped, last_round=3)
    assert [p.decision for p in path] == ["continue", "continue", "cap"]
    # deterministic: the same rounds give the same path
    assert (
        sequential_path(rounds, rule, last_round=29)[1]
        == sequential_path(rounds, rule, last_round=29)[1]
    )


# ----------------------------------------------------------------- the target's e-process


def test_null_line_is_a_tangent_of_the_claimed_curve() -> None:
    # ε: the DP inequality itself. μ: the tangent of G_μ where it touches, below it elsewhere
    # (against dpaudit.theory's closed-form curve).
    a, b = null_line("epsilon", 0.7, delta=1e-5, fpr=np.array([0.1, 0.4]))
    assert np.allclose(a, 1e-5)
    assert np.allclose(b, math.exp(0.7))
    grid = np.linspace(1e-4, 1 - 1e-4, 2001)
    for mu, touch in [(0.5, 0.3), (1.0, 0.18), (2.0, 0.02), (3.0, 1e-3)]:
        a, b = null_line("mu", mu, delta=0.0, fpr=np.array([touch]))
        power = 1.0 - tradeoff_gdp(np.array([touch]), mu=mu)
        assert float(a[0] + b[0] * touch) == pytest.approx(float(power[0]), rel=1e-9)
        assert np.all(1.0 - tradeoff_gdp(grid, mu=mu) <= a[0] + b[0] * grid + 1e-12)


def _null_stream(case: str, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores of a mechanism exactly as private as the target (ε = 1, or μ = 1): every
    threshold of randomized response and Laplace (t ≥ 1) sits ON e^ε·FPR, and the Gaussian
    trade-off IS G_1: the hardest nulls for a target test."""
    if case == "rr":
        p = math.e / (1 + math.e)
        return (rng.random(size) > p).astype(float), (rng.random(size) < p).astype(float)
    if case == "laplace":
        return rng.laplace(0, 1, size), 1 + rng.laplace(0, 1, size)
    return rng.normal(0, 1, size), 1 + rng.normal(0, 1, size)


class _Peeking(TargetTest):
    """The power control: the same capital, but each bet chosen on the round it bets on
    (not predictable), which is what the validity argument forbids."""

    def add(self, negatives: Any, positives: Any) -> None:
        neg, pos = np.asarray(negatives, dtype=float), np.asarray(positives, dtype=float)
        saved = (self.ge_neg.copy(), self.ge_pos.copy(), self.n_neg, self.n_pos)
        self.ge_neg[:], self.ge_pos[:], self.n_neg, self.n_pos = 0.0, 0.0, 0, 0
        self._count(neg, pos)
        bet = self.bet()
        self.ge_neg, self.ge_pos, self.n_neg, self.n_pos = saved
        if bet is not None:
            x, y = (
                (neg >= bet.threshold, pos >= bet.threshold)
                if bet.direction == "up"
                else (pos < bet.threshold, neg < bet.threshold)
            )
            z = y - bet.slope * x - bet.intercept
            self.log_evalue += float(np.sum(np.log1p(bet.stake * z)))
            self.max_log_evalue = max(self.max_log_evalue, self.log_evalue)
        self._count(neg, pos)


@pytest.mark.parametrize(
    ("case", "parameter"), [("rr", "epsilon"), ("laplace", "epsilon"), ("gaussian", "mu")]
)
def test_target_test_holds_its_level_under_monitoring_with_power_control(
    case: str, parameter: str
) -> None:
    """A mechanism exactly at the target, 40 rounds of 50 looked at after each: the test
    certifies in no more of 200 streams than Binomial(200, α) exceeds with probability
    0.001; the same capital with bets chosen on the round they bet on certifies in more
    (the power control)."""
    alpha, repeats, rounds = 0.1, 200, 40
    ceiling = stats.binom.ppf(0.999, repeats, alpha)
    found = {TargetTest: 0, _Peeking: 0}
    for cls, n in ((TargetTest, repeats), (_Peeking, repeats // 4)):
        for i in range(n):
            rng = np.random.default_rng([5, i])
            test = cls(
                *_null_stream(case, rng, 50),
                parameter=parameter,  # type: ignore[arg-type]
                target=1.0,
                delta=0.0,
                level=1 - alpha,
            )
            for _ in range(rounds):
                test.add(*_null_stream(case, rng, 50))
            found[cls] += test.certified
    assert found[TargetTest] <= ceiling, (found, ceiling)
    # scaled to 200 streams: peeking certifies most of them
    assert found[_Peeking] * 4 > ceiling, (found, ceiling)


def test_target_test_power_and_the_sequential_bound_it_lifts() -> None:
    # Laplace ε = 1 certified at 0.8: the e-process reaches 1/α within 40 rounds of 200 in
    # every one of 10 seeds, and lifts the sequential bound to the target when it does.
    for seed in range(10):
        rounds = _laplace_rounds(1.0, 41, 200, seed=seed)
        rule = SequentialRule(parameter="epsilon", delta=0.0, level=0.95, upper=1.0, target=0.8)
        _, path = sequential_path(rounds, rule)
        assert path[-1].decision == "target", seed
        assert path[-1].value >= 0.8
        assert path[-1].log_evalue is not None
        assert path[-1].log_evalue >= math.log(1 / (0.05 * rule.target_share))
        assert "log_evalue" in path[-1].to_dict()
    # no target, no test: the record is the rate limits' alone
    plain = SequentialRule(parameter="epsilon", delta=0.0, level=0.95, upper=1.0)
    _, path = sequential_path(_laplace_rounds(1.0, 3, 100, seed=0), plain)
    assert path[-1].log_evalue is None
    assert "log_evalue" not in path[-1].to_dict()
    plan = plan_sequential(
        law="laplace",
        true_value=1.0,
        parameter="epsilon",
        target=0.5,
        upper=1.0,
        round_trials=100,
        repeats=3,
        seed=0,
    )
    assert plan.target_share == 0.75
    assert plan.stop_share["target"] == 1.0
    with pytest.raises(DpauditError, match=r"The 'target_share' parameter must be in \[0, 1\)"):
        SequentialRule(parameter="mu", delta=0.0, level=0.95, target=1.0, target_share=1.0)


def test_certifying_nine_tenths_takes_no_more_than_the_fixed_plan() -> None:
    """Laplace ε = 1 (claim 1) asked to certify ε_LB ≥ 0.9 at 0.975 in rounds of 1,000: the
    median stop over 11 seeds is at most the fixed plan's trials per arm (`dpaudit plan`,
    split): the design's reason to exist, checked (benchmarks/sequential.py certify runs
    the full figure)."""
    rule = SequentialRule(
        parameter="epsilon", delta=0.0, level=0.975, upper=1.0, target=0.9, tuned_trials=20_000
    )
    used, reasons = simulate_stopping(
        rule,
        law="laplace",
        true_value=1.0,
        round_trials=1000,
        max_trials=100_000,
        repeats=11,
        seed=3,
    )
    plan = plan_trials(0.9, 0.0, 0.975, tradeoff="laplace", mechanism_epsilon=1.0)
    assert reasons == ["target"] * 11
    assert float(np.median(used)) <= plan.trials_per_arm, (sorted(used), plan.trials_per_arm)


def test_target_test_edges() -> None:
    with pytest.raises(DpauditError, match=r"The 'level' parameter must be in \(0, 1\)"):
        TargetTest([0.0], [1.0], parameter="epsilon", target=1.0, delta=0.0, level=1.0)
    # no finite score: no candidate, no bet, the capital stays 1
    empty = TargetTest([np.nan], [np.nan], parameter="mu", target=1.0, delta=0.0, level=0.9)
    assert empty.bet() is None
    empty.add([0.0, 1.0], [2.0, 3.0])
    assert empty.log_evalue == 0.0
    assert not empty.certified
    # a bet never risks more than half the capital on one pair
    rng = np.random.default_rng(0)
    test = TargetTest(
        rng.laplace(0, 1, 500),
        1 + rng.laplace(0, 1, 500),
        parameter="epsilon",
        target=0.5,
        delta=1e-3,
        level=0.95,
    )
    bet = test.bet()
    assert bet is not None
    assert 0 < bet.stake * (bet.intercept + bet.slope) <= 0.5 + 1e-12
