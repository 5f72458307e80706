"""Planning the audit of a DP-SGD run that shuffles fixed batches while it claims Poisson
sampling: the shuffled run's white-box scores against their closed-form moments, the
grey-box batch-size check's count against scipy's binomial and the normal local-limit
reference, the exact case q = 1 (shuffling full batches is the claim), and the CLI.

benchmarks/plan_shuffle.py checks the claim-curve plan against independently drawn runs.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import integrate, stats
from typer.testing import CliRunner

from dpaudit.bounds.greybox import GreyBoxObservations, batch_size_test
from dpaudit.cli import app
from dpaudit.errors import DpauditError
from dpaudit.planning.batch_sizes import batch_size_pvalue, plan_batch_size_check
from dpaudit.sequential.curve import (
    plan_sequential_curve,
    shuffled_dpsgd_scores,
    steps_per_epoch,
    whitebox_dpsgd_scores,
)
from dpaudit.sequential.shuffle import plan_shuffled_run
from dpaudit.theory.whitebox import mixture_log_likelihood_ratio

runner = CliRunner()


def _llr_moments(sigma: float, q: float, shift: float) -> tuple[float, float]:
    """Mean and variance of one step's log-ratio at x ~ N(shift, σ²), by quadrature."""

    def llr(x: float) -> float:
        return float(
            mixture_log_likelihood_ratio(
                x, sampling_rate=q, noise_multiplier=sigma, clipping_norm=1.0
            )
        )

    pdf = stats.norm(shift, sigma).pdf
    lo, hi = shift - 12 * sigma, shift + 12 * sigma
    mean = integrate.quad(lambda x: llr(x) * pdf(x), lo, hi)[0]
    second = integrate.quad(lambda x: llr(x) ** 2 * pdf(x), lo, hi)[0]
    return mean, second - mean**2


@pytest.mark.parametrize(("q", "t", "epochs"), [(0.25, 6, (4, 2)), (0.3, 7, (3, 3, 1))])
def test_shuffled_scores_have_the_poisson_mean_and_the_variance_of_one_canary_per_epoch(
    q: float, t: int, epochs: tuple[int, ...]
) -> None:
    """σ = 1. Per step the log-ratio L has mean μ0, variance v0 without the canary and
    μ1, v1 with it (quadrature), Δ = μ1 − μ0. An epoch (or the last, partial one) of L
    steps holds the canary in exactly one of them with probability p = L·q (each step q;
    q = 0.3: epochs of ⌊1/q⌋ = 3 steps, the canary dropped with probability 0.1), never
    in two: its score has mean L(qμ1 + (1 − q)μ0) (each step's marginal is the Poisson
    run's) and variance L·v0 + p(v1 − v0) + p(1 − p)Δ² (conditioning on the canary's
    step), summed over the independent epochs; Poisson sampling has
    T(qv1 + (1 − q)v0 + q(1 − q)Δ²). 40,000 draws per arm: means within 4 standard errors,
    variances within 4 standard errors of a sample variance computed from the sample's
    own fourth moment, √((m4 − s⁴)/n)."""
    sigma, n = 1.0, 40_000
    assert steps_per_epoch(q) == epochs[0]
    mu0, v0 = _llr_moments(sigma, q, 0.0)
    mu1, v1 = _llr_moments(sigma, q, 1.0)
    d = mu1 - mu0
    neg, pos = shuffled_dpsgd_scores(
        np.random.default_rng(3), n, noise_multiplier=sigma, sampling_rate=q, steps=t
    )
    _, poisson = whitebox_dpsgd_scores(
        np.random.default_rng(4), n, noise_multiplier=sigma, sampling_rate=q, steps=t
    )
    mean_in = t * (q * mu1 + (1 - q) * mu0)
    var_in = sum(ln * v0 + ln * q * (v1 - v0) + ln * q * (1 - ln * q) * d * d for ln in epochs)
    expected = (
        (neg, t * mu0, t * v0),
        (pos, mean_in, var_in),
        (poisson, mean_in, t * (q * v1 + (1 - q) * v0 + q * (1 - q) * d * d)),
    )
    for scores, mean, var in expected:
        assert abs(scores.mean() - mean) < 4 * math.sqrt(var / n)
        m4 = float(np.mean((scores - scores.mean()) ** 4))
        se = math.sqrt((m4 - scores.var() ** 2) / n)
        assert abs(scores.var(ddof=1) - var) < 4 * se
    # what the claim-curve test sees: less spread with the canary in than under Poisson
    assert var_in < t * (q * v1 + (1 - q) * v0 + q * (1 - q) * d * d)


@pytest.mark.parametrize(
    ("n", "q", "level"),
    [(60_000, 0.004, 0.99), (200, 0.1, 0.95), (1_000, 0.25, 1 - 0.05 / 5), (100, 0.5, 0.999)],
)
def test_batch_size_count_is_the_binomial_closed_form(n: int, q: float, level: float) -> None:
    """Fixed batches of nq: the total is on its mean (p_sum = 1), the dispersion is 0, and
    its Chernoff bound at 0 is P(b = nq)^N, so p = 2·pmf^N and the check fails (p < 1 − c)
    first at N = ⌊log((1 − c)/2)/log pmf⌋ + 1 (scipy.stats.binom.pmf)."""
    pmf = stats.binom.pmf(round(n * q), n, q)
    expected = math.floor(math.log((1 - level) / 2) / math.log(pmf)) + 1
    plan = plan_batch_size_check(dataset_size=n, sampling_rate=q, steps=3, level=level)
    assert plan.batches == expected
    assert plan.models == math.ceil(expected / 3)
    assert plan.batch_size == round(n * q)
    assert plan.p_value == pytest.approx(2 * pmf**expected, rel=1e-6)
    assert batch_size_pvalue(expected - 1, dataset_size=n, sampling_rate=q) >= 1 - level


def test_batch_size_count_at_large_n_is_the_normal_local_limit() -> None:
    """n = 60,000, q = 0.004: pmf(nq) ≈ 1/√(2π nq(1 − q)) (de Moivre–Laplace), which gives
    the same count, 2 batches of one model at c = 0.99."""
    n, q = 60_000, 0.004
    local = 1 / math.sqrt(2 * math.pi * n * q * (1 - q))
    assert math.floor(math.log(0.01 / 2) / math.log(local)) + 1 == 2
    assert (
        plan_batch_size_check(dataset_size=n, sampling_rate=q, steps=2500, level=0.99).batches == 2
    )


def test_the_planned_count_is_where_the_real_check_fails() -> None:
    """The grey-box check itself (batch_size_test) on one model's fixed batches of 20 of
    n = 200 accounted at q = 0.1: p < 0.05 at the planned count, not one step before."""
    n, q, level = 200, 0.1, 0.95
    plan = plan_batch_size_check(dataset_size=n, sampling_rate=q, steps=50, level=level)
    assert plan.batches is not None
    for steps, fails in ((plan.batches, True), (plan.batches - 1, False)):
        nan = np.full((1, steps), np.nan)
        obs = GreyBoxObservations(
            batch_sizes=np.full((1, steps), 20),
            dataset_size=n,
            sampling_rate=q,
            clipped_norms_max=nan,
            clipping_norm=1.0,
            untouched_noise=nan,
            noise_multiplier=1.0,
            steps_run=np.array([steps]),
            steps_accounted=steps,
        )
        test = batch_size_test(obs)
        assert test.p_value is not None
        assert (test.p_value < 1 - level) is fails
        assert test.p_value == pytest.approx(
            batch_size_pvalue(steps, dataset_size=n, sampling_rate=q)
        )


def test_q_one_is_the_claim_and_is_never_refuted() -> None:
    """q = 1: every epoch is one full batch, so the shuffled run IS full-batch DP-GD, the
    claim (exact GDP curve): no audit refutes it, every simulated audit runs to its cap,
    and the batch sizes (all n) cannot fail the check."""
    plan = plan_shuffled_run(
        noise_multiplier=0.5,
        sampling_rate=1.0,
        steps=4,
        dataset_size=100,
        level=0.95,
        round_trials=50,
        max_trials=200,
        repeats=3,
    )
    assert plan.steps_per_epoch == 1
    assert plan.curve.detected == 0.0
    assert plan.curve.median_trials == plan.curve.p95_trials == 200.0
    assert plan.curve.run_sampling == "shuffled"
    assert (plan.batch_sizes.batches, plan.batch_sizes.models) == (None, None)
    assert plan.batch_sizes.p_value == 1.0


def test_bad_run_sampling_is_named() -> None:
    with pytest.raises(
        DpauditError, match=r"'run_sampling' parameter must be one of \{'poisson', 'shuffled'\}"
    ):
        plan_sequential_curve(
            noise_multiplier=1.0,
            sampling_rate=1.0,
            steps=1,
            run_sampling="fixed",  # type: ignore[arg-type]
        )


def test_cli_prints_the_library_plan_and_teaches_missing_flags() -> None:
    design = ["plan", "--sequential", "--target", "0", "--dpsgd-sigma", "0.5",
              "--run-sampling", "shuffled", "--sampling-rate", "1", "--steps", "4",
              "--round-trials", "50", "--max-trials", "200", "--repeats", "2",
              "--confidence-level", "0.9"]  # fmt: skip
    res = runner.invoke(app, [*design, "--dataset-size", "100", "--json"])
    assert res.exit_code == 0, res.output
    direct = plan_shuffled_run(
        noise_multiplier=0.5,
        sampling_rate=1.0,
        steps=4,
        dataset_size=100,
        level=0.9,
        round_trials=50,
        max_trials=200,
        repeats=2,
        seed=0,
    )
    assert json.loads(res.output) == direct.to_dict()
    line = runner.invoke(app, [*design, "--dataset-size", "100"])
    assert line.exit_code == 0, line.output
    assert "refuted in 0%; the grey-box batch-size check never fails (q = 1" in line.output
    cases = [
        (
            design,
            "--run-sampling shuffled also plans the grey-box batch-size check: give "
            "--dataset-size (n, the records the run shuffles into batches of n·q).",
        ),
        (
            [*design, "--dataset-size", "100", "--run-sigma", "0.4"],
            "--run-sampling shuffled plans a run at the claimed σ (--dpsgd-sigma) that "
            "shuffles its batches: drop --run-sigma",
        ),
        (
            ["plan", "--target", "0", "--run-sampling", "shuffled"],
            "--run-sampling shuffled plans the claim-curve test of white-box DP-SGD by "
            "simulation: give --sequential and --dpsgd-sigma (the σ claimed and run).",
        ),
        (
            ["plan", "--target", "0", "--run-sampling", "fixed"],
            "--run-sampling must be 'poisson' or 'shuffled'. Got 'fixed'.",
        ),
    ]
    for args, message in cases:
        bad = runner.invoke(app, args)
        assert bad.exit_code == 2
        assert message in " ".join(bad.output.split())
