"""The anytime-valid limits of dpaudit.sequential: closed form against an integral, the
shape that makes bisection exact, validity under continuous monitoring (with a power
control: the fixed-n limit checked every round fails the same test), and the stopping
rule."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate, stats

from dpaudit.errors import DpauditError
from dpaudit.sequential import (
    SequentialRule,
    log_mixture_martingale,
    plan_sequential,
    rate_upper_limit,
    sequential_path,
)
from dpaudit.stats import clopper_pearson_upper


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
