"""Tests for dpaudit.planning: limits of detection and trial planning."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.bounds import (
    epsilon_from_counts,
    epsilon_lower_bound,
    mu_lower_bound,
    one_run_epsilon_lower_bound,
)
from dpaudit.errors import DpauditError
from dpaudit.planning import (
    expected_bound,
    limit_for_bound,
    multi_run_limit,
    one_run_limit,
    plan_trials,
)
from dpaudit.theory import tradeoff_laplace


def _perfect(n0: int, n1: int) -> tuple[np.ndarray, np.ndarray]:
    # A perfect attack: every H0 trial scores 0, every H1 trial 1. (With continuous
    # separated scores a split's threshold, chosen at the selection part's edge, can
    # misclassify an evaluation trial: the bound then falls below the limit.)
    return np.zeros(n0), np.ones(n1)


@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
@pytest.mark.parametrize(("n0", "n1"), [(1000, 1000), (501, 777), (20, 20)])
def test_perfect_attack_bound_equals_the_limit(threshold, n0, n1) -> None:
    neg, pos = _perfect(n0, n1)
    kw = {"confidence_level": 0.95, "threshold": threshold, "seed": 1}
    eps = epsilon_lower_bound(neg, pos, delta=1e-5, **kw)
    limit = multi_run_limit(n0, n1, delta=1e-5, confidence_level=0.95, threshold=threshold)
    assert limit.value == pytest.approx(eps.value, rel=1e-12, abs=1e-12)
    assert limit_for_bound(eps).value == pytest.approx(eps.value, rel=1e-12, abs=1e-12)
    mu = mu_lower_bound(neg, pos, **kw)
    mu_limit = multi_run_limit(n0, n1, confidence_level=0.95, threshold=threshold, parameter="mu")
    assert mu_limit.value == pytest.approx(mu.value, rel=1e-12, abs=1e-12)
    assert limit_for_bound(mu).value == pytest.approx(mu.value, rel=1e-12, abs=1e-12)
    # Any attack's bound on the same trials stays at or below the limit.
    rng = np.random.default_rng(3)
    noisy = epsilon_lower_bound(rng.normal(0, 1, n0), rng.normal(3, 1, n1), delta=1e-5, **kw)
    assert noisy.value <= limit.value
    assert limit_for_bound(noisy).value == pytest.approx(limit.value, rel=1e-12, abs=1e-12)


def test_split_limit_closed_form() -> None:
    # 1000 per arm, split in halves: 500 counted per arm with 0 errors. Each rate's upper
    # limit at 97.5 % is u = 1 − 0.025^(1/500), and ε = ln((1 − δ − u)/u).
    u = 1 - 0.025 ** (1 / 500)
    limit = multi_run_limit(1000, delta=1e-5)
    assert limit.value == pytest.approx(math.log((1 - 1e-5 - u) / u), rel=1e-9)
    assert limit.counts == {
        "negatives": 1000,
        "positives": 1000,
        "counted_negatives": 500,
        "counted_positives": 500,
    }
    # A fixed threshold counts every trial; an any-count bound never exceeds the limit.
    fixed = multi_run_limit(1000, delta=1e-5, threshold="fixed")
    assert fixed.value > limit.value
    assert epsilon_from_counts(3, 1000, 10, 1000, delta=1e-5).value < fixed.value


def test_limit_grows_with_trials_and_is_zero_when_too_few() -> None:
    values = [multi_run_limit(n, delta=1e-5).value for n in (4, 10, 100, 1000, 10000)]
    assert values[0] == 0.0
    assert np.all(np.diff(values[1:]) > 0)


def test_one_run_limits_match_steinke_et_al() -> None:
    # Steinke, Nasr, Jagielski (2023): 1,000 canaries all guessed right at δ = 1e-5 and
    # 95 % give ε ≥ 5.78; 100 guesses all right with δ = 0 give ε ≥ 3.49.
    assert one_run_limit(1000, delta=1e-5).value == pytest.approx(5.78, abs=0.005)
    assert one_run_limit(1000, 100, delta=0.0).value == pytest.approx(3.49, abs=0.005)
    assert one_run_limit(100, delta=0.0).value == pytest.approx(3.49, abs=0.005)
    bound = one_run_epsilon_lower_bound(
        canaries=1000, guesses=100, correct=93, delta=1e-5, confidence_level=0.95
    )
    limit = limit_for_bound(bound)
    assert limit.design == "one-run"
    assert limit.counts == {"canaries": 1000, "guesses": 100}
    assert bound.value < limit.value


def test_expected_bound_at_integer_counts_is_the_counts_bound() -> None:
    # With n·fpr and n·fnr integers, the expectation is an ordinary fixed-threshold bound.
    value, _ = expected_bound(
        1000, fpr=np.array([0.005]), fnr=np.array([0.05]), delta=1e-5, threshold="fixed"
    )
    assert value == pytest.approx(epsilon_from_counts(5, 1000, 50, 1000, delta=1e-5).value)


def test_plan_trials_reaches_the_target_and_one_fewer_does_not() -> None:
    plan = plan_trials(1.0, 1e-5, 0.95, mechanism_epsilon=2.0)
    assert plan.expected_value >= 1.0
    alpha = np.concatenate([np.logspace(-12, -1, 400), np.linspace(0.1, 0.5, 81)[1:]])
    beta = tradeoff_laplace(alpha, epsilon=2.0)
    before, _ = expected_bound(
        plan.trials_per_arm - 1, fpr=alpha, fnr=beta, delta=1e-5, confidence_level=0.95
    )
    assert before < 1.0
    # The ideal attack never beats a perfect one, nor the mechanism's own ε.
    assert plan.expected_value <= plan.limit
    assert plan.expected_value < 2.0
    # More trials for a target closer to the mechanism's ε.
    assert plan_trials(1.5, 1e-5, mechanism_epsilon=2.0).trials_per_arm > plan.trials_per_arm


def test_plan_trials_gaussian_mu() -> None:
    plan = plan_trials(0.5, tradeoff="gaussian", mechanism_mu=1.0, parameter="mu")
    assert plan.expected_value >= 0.5
    assert plan.mechanism_mu == 1.0


def test_plan_trials_perfect_attack_inverts_the_limit() -> None:
    plan = plan_trials(5.0, 1e-5, 0.95, tradeoff="perfect")
    n = plan.trials_per_arm
    assert multi_run_limit(n, delta=1e-5).value >= 5.0 > multi_run_limit(n - 1, delta=1e-5).value
    assert plan.expected_value == pytest.approx(plan.limit)


def test_plan_trials_unreachable_target() -> None:
    with pytest.raises(DpauditError, match=r"never reaches epsilon = 2\.0"):
        plan_trials(2.0, 1e-5, mechanism_epsilon=2.0)
    with pytest.raises(DpauditError, match="does not reach"):
        plan_trials(1.99, 1e-5, mechanism_epsilon=2.0, max_trials=10**4)
    with pytest.raises(DpauditError, match="needs 'mechanism_mu'"):
        plan_trials(0.5, tradeoff="gaussian")
    with pytest.raises(DpauditError, match="needs 'mechanism_epsilon'"):
        plan_trials(0.5)
    with pytest.raises(
        DpauditError,
        match=r"The 'negatives' parameter must be an integer in \[1, inf\)\. Got 0 instead\.",
    ):
        multi_run_limit(0)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        # ε-DP: the best guess of a fair coin errs with 1/(1 + e^ε) (randomised response).
        ({"mechanism_epsilon": math.log(3)}, 0.75),
        ({"mechanism_epsilon": 0.0}, 0.5),
        # μ-GDP: error Φ(−μ/2), the equal-error point of G_μ.
        ({"mechanism_mu": 2.0}, 0.8413447460685429),
    ],
)
def test_ideal_guess_accuracy_closed_forms(kwargs, expected) -> None:
    from dpaudit.planning import ideal_guess_accuracy

    assert ideal_guess_accuracy(**kwargs) == pytest.approx(expected, rel=1e-12)


def test_plan_one_run_reaches_the_target_and_two_fewer_guesses_do_not() -> None:
    from dpaudit.planning import ideal_guess_accuracy, plan_one_run

    accuracy = ideal_guess_accuracy(mechanism_epsilon=3.0)
    plan = plan_one_run(1.5, 1e-5, 0.95, accuracy=accuracy, canaries_per_guess=10)
    r = plan.guesses
    assert plan.canaries == 10 * r

    def bound(r: int) -> float:
        return one_run_epsilon_lower_bound(
            canaries=10 * r, guesses=r, correct=round(accuracy * r), delta=1e-5,
            confidence_level=0.95,
        ).value  # fmt: skip

    assert bound(r) == pytest.approx(plan.expected_value)
    assert bound(r) >= 1.5
    assert bound(r - 2) < 1.5
    assert plan.limit >= plan.expected_value


def test_plan_one_run_from_a_mechanism_is_the_plan_at_its_ideal_guess_accuracy() -> None:
    from dpaudit.planning import plan_one_run

    # ε-DP: the best guess of a fair coin errs w.p. 1/(1 + e^ε) (Dong, Roth, Su 2022)
    accuracy = 1.0 / (1.0 + math.exp(-3.0))
    by_mechanism = plan_one_run(1.5, 1e-5, 0.95, mechanism_epsilon=3.0, canaries_per_guess=10)
    by_accuracy = plan_one_run(1.5, 1e-5, 0.95, accuracy=accuracy, canaries_per_guess=10)
    assert by_mechanism == by_accuracy
    assert plan_one_run(5.0, 1e-5).accuracy == 1.0  # neither given: a perfect attack
    with pytest.raises(DpauditError, match="not both"):
        plan_one_run(1.5, accuracy=0.9, mechanism_epsilon=3.0)


def test_trial_cost_line_through_two_timings() -> None:
    from dpaudit.audit import TrialCost

    cost = TrialCost("mechanism", (100, 300), (2.0, 6.0), (1.0, 2.0))
    # slope 4 s / 200 trials = 0.02 s, fixed 2 − 0.02 × 100 = 0
    assert cost.wall_seconds(1000) == pytest.approx(20.0)
    # slope 0.005, fixed 0.5
    assert cost.cpu_seconds(1000) == pytest.approx(5.5)
    # A noisy second run faster than the first: no negative slope, all of it fixed cost.
    assert TrialCost("m", (100, 300), (3.0, 2.5), (1, 1)).wall_seconds(10**6) == 3.0
