"""LiRA with per-example variances shrunk toward the global one (``variance="shrunk"``)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, special, stats

from dpaudit.attacks import get_attack, lira_scores
from dpaudit.attacks.lira import prior_degrees_of_freedom, shrunk_variances

# 6 reference models × 4 rows, every row in exactly 3 of them: rows with very different
# spreads (rows 0 and 2 nearly constant, rows 1 and 3 wide), so the fitted ν is finite.
PHI = np.array(
    [
        [0.1, 2.0, -1.0, 3.0],
        [0.3, 5.0, -1.1, 1.0],
        [0.2, -1.0, -0.9, 2.0],
        [0.4, 4.0, -1.2, 6.0],
        [0.0, 0.5, -1.0, 4.5],
        [0.5, 3.5, -0.8, 0.0],
    ]
)
IN = np.array(
    [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 0, 1], [0, 1, 1, 0]],
    dtype=bool,
)
TARGET = np.array([[0.25, 4.2, -1.05, 2.5], [0.05, -0.5, -0.7, 5.0]])


def _hand_fit(
    column_values: list[list[float]],
) -> tuple[list[float], list[float], float, list[int]]:
    """Means, shrunk variances, ν and d_i of rows given as plain lists, step by step."""
    means = [sum(v) / len(v) for v in column_values]
    ss = [sum((x - mu) ** 2 for x in v) for v, mu in zip(column_values, means, strict=True)]
    d = [len(v) - 1 for v in column_values]
    s2 = [a / b for a, b in zip(ss, d, strict=True)]
    pooled = sum(ss) / sum(d)
    # Moments of e_i = log s_i² − ψ(d_i/2) + log(d_i/2): Var e = ψ'(d/2) + ψ'(ν/2).
    e = [math.log(v) - special.digamma(k / 2) + math.log(k / 2) for v, k in zip(s2, d, strict=True)]
    m = len(e)
    e_bar = sum(e) / m
    var_e = sum((x - e_bar) ** 2 for x in e) / (m - 1)
    target = var_e - sum(special.polygamma(1, k / 2) for k in d) / m
    assert target > 0  # these rows spread more than sampling explains
    # ψ'(x) = target solved by Newton on log x (an independent root finder).
    log_x = optimize.newton(
        lambda t: special.polygamma(1, math.exp(t)) - target,
        x0=0.0,
        fprime=lambda t: special.polygamma(2, math.exp(t)) * math.exp(t),
        tol=1e-13,
    )
    nu = 2 * math.exp(log_x)
    shrunk = [(nu * pooled + k * v) / (nu + k) for v, k in zip(s2, d, strict=True)]
    return means, shrunk, nu, d


def _log_normal_pdf(x: float, mu: float, var: float) -> float:
    return -0.5 * math.log(2 * math.pi * var) - (x - mu) ** 2 / (2 * var)


def test_shrunk_lira_matches_a_hand_computation_on_fixed_arrays() -> None:
    rows = range(PHI.shape[1])
    mu_in, var_in, _, _ = _hand_fit([[PHI[k, i] for k in range(6) if IN[k, i]] for i in rows])
    mu_out, var_out, _, _ = _hand_fit([[PHI[k, i] for k in range(6) if not IN[k, i]] for i in rows])
    online = [
        [
            _log_normal_pdf(TARGET[t, i], mu_in[i], var_in[i])
            - _log_normal_pdf(TARGET[t, i], mu_out[i], var_out[i])
            for i in rows
        ]
        for t in range(2)
    ]
    offline = [
        [
            math.log(0.5 * math.erfc(-(TARGET[t, i] - mu_out[i]) / math.sqrt(2 * var_out[i])))
            for i in rows
        ]
        for t in range(2)
    ]
    np.testing.assert_allclose(
        lira_scores(TARGET, PHI, IN, variant="online", variance="shrunk"), online, rtol=1e-9
    )
    np.testing.assert_allclose(
        lira_scores(TARGET, PHI, IN, variant="offline", variance="shrunk"), offline, rtol=1e-9
    )


def _log_t_pdf(x: float, df: float, loc: float, scale2: float) -> float:
    z2 = (x - loc) ** 2 / scale2
    return (
        math.lgamma((df + 1) / 2)
        - math.lgamma(df / 2)
        - 0.5 * math.log(df * math.pi * scale2)
        - (df + 1) / 2 * math.log1p(z2 / df)
    )


def _log_t_cdf(x: float, df: float, loc: float, scale2: float) -> float:
    # P[T ≤ t] = ½ I_{df/(df+t²)}(df/2, ½) for t ≤ 0, by symmetry 1 − that for t > 0.
    t = (x - loc) / math.sqrt(scale2)
    tail = 0.5 * special.betainc(df / 2, 0.5, df / (df + t * t))
    return math.log(tail if t <= 0 else 1 - tail)


def test_shrunk_t_lira_matches_a_hand_computation_on_fixed_arrays() -> None:
    # Student-t predictive: ν + d_i degrees of freedom, scale² σ̃_i² (1 + 1/n_i).
    rows = range(PHI.shape[1])
    fits = [
        _hand_fit([[PHI[k, i] for k in range(6) if IN[k, i] == arm] for i in rows])
        for arm in (True, False)
    ]
    (mu_in, var_in, nu_in, d_in), (mu_out, var_out, nu_out, d_out) = fits
    t_in = [(nu_in + d_in[i], var_in[i] * (1 + 1 / (d_in[i] + 1))) for i in rows]
    t_out = [(nu_out + d_out[i], var_out[i] * (1 + 1 / (d_out[i] + 1))) for i in rows]
    online = [
        [
            _log_t_pdf(TARGET[t, i], t_in[i][0], mu_in[i], t_in[i][1])
            - _log_t_pdf(TARGET[t, i], t_out[i][0], mu_out[i], t_out[i][1])
            for i in rows
        ]
        for t in range(2)
    ]
    offline = [
        [_log_t_cdf(TARGET[t, i], t_out[i][0], mu_out[i], t_out[i][1]) for i in rows]
        for t in range(2)
    ]
    np.testing.assert_allclose(
        lira_scores(TARGET, PHI, IN, variant="online", variance="shrunk-t"), online, rtol=1e-9
    )
    np.testing.assert_allclose(
        lira_scores(TARGET, PHI, IN, variant="offline", variance="shrunk-t"), offline, rtol=1e-9
    )


def test_shrunk_lies_between_per_example_and_global() -> None:
    s2 = np.array([0.01, 9.75, 0.04, 6.5])
    d = np.array([2, 2, 2, 2])
    # ν = 0: the per-example variances; ν = ∞: the prior (global) one; d = 0: the prior.
    np.testing.assert_array_equal(shrunk_variances(s2, d, prior_variance=3.0, prior_dof=0), s2)
    np.testing.assert_array_equal(
        shrunk_variances(s2, d, prior_variance=3.0, prior_dof=math.inf), np.full(4, 3.0)
    )
    np.testing.assert_array_equal(
        shrunk_variances(s2, np.zeros(4), prior_variance=3.0, prior_dof=5.0), np.full(4, 3.0)
    )
    # ν = 2 = d: the midpoint.
    np.testing.assert_allclose(
        shrunk_variances(s2, d, prior_variance=3.0, prior_dof=2.0), (s2 + 3.0) / 2, rtol=1e-15
    )


def test_equal_row_variances_give_the_global_variance_exactly() -> None:
    # Every row's in and out values are a shifted copy of (−1, 0, 1): all s_i² equal, so
    # the spread of log s_i² is zero, below sampling's ψ'(d/2): ν = ∞, the global fit.
    keep = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [0, 1], [0, 1]], dtype=bool)
    base = np.array([-1.0, 0.0, 1.0])
    phi = np.empty((6, 2))
    phi[keep[:, 0], 0], phi[~keep[:, 0], 0] = base + 2, base - 3
    phi[keep[:, 1], 1], phi[~keep[:, 1], 1] = base + 5, base
    assert prior_degrees_of_freedom(np.ones(2), np.full(2, 2)) == math.inf
    target = np.array([[1.5, 0.7]])
    np.testing.assert_array_equal(
        lira_scores(target, phi, keep, variance="shrunk"),
        lira_scores(target, phi, keep, variance="global"),
    )
    # ... and "shrunk-t" with ν = ∞ is the Gaussian predictive: N(mean, s² (1 + 1/3)) with
    # s² = 1 (the deviations −1, 0, 1 of every row and hypothesis).
    var = 1.0 * (1 + 1 / 3)
    mu_in, mu_out = np.array([2.0, 5.0]), np.array([-3.0, 0.0])
    expected = ((target - mu_out) ** 2 - (target - mu_in) ** 2) / (2 * var)
    np.testing.assert_allclose(
        lira_scores(target, phi, keep, variance="shrunk-t"), expected, rtol=1e-12
    )
    # Fewer than two usable rows: nothing to fit ν from.
    assert prior_degrees_of_freedom(np.array([2.0, 0.0]), np.array([3, 3])) == math.inf
    assert prior_degrees_of_freedom(np.array([2.0, 5.0]), np.array([3, 0])) == math.inf


def test_named_shrunk_variants_are_lira_scores() -> None:
    from dpaudit.attacks.base import logit_confidence
    from dpaudit.attacks.reference import ReferenceLogits

    rng = np.random.default_rng(5)
    k, m = 8, 30
    keep = np.zeros((k, m), dtype=bool)
    for i in range(m):
        keep[rng.permutation(k)[: k // 2], i] = True
    refs = ReferenceLogits(
        target_x=rng.normal(size=(1, m, 3)),
        reference_x=rng.normal(size=(k, m, 3)) * rng.uniform(0.2, 3.0, size=(1, m, 1)),
        reference_in=keep,
        y=rng.integers(0, 3, m),
        target_z=rng.normal(size=(1, 2, 3)),
        reference_z=rng.normal(size=(k, 2, 3)),
        z_in=np.zeros((k, 2), dtype=bool),
        y_z=rng.integers(0, 3, 2),
    )
    for name, variant, variance in (
        ("lira-online-shrunk", "online", "shrunk"),
        ("lira-offline-shrunk", "offline", "shrunk"),
        ("lira-online-shrunk-t", "online", "shrunk-t"),
        ("lira-offline-shrunk-t", "offline", "shrunk-t"),
    ):
        expected = lira_scores(
            logit_confidence(refs.target_x, refs.y),
            logit_confidence(refs.reference_x, refs.y),
            refs.reference_in,
            variant=variant,  # type: ignore[arg-type]
            variance=variance,  # type: ignore[arg-type]
        )
        np.testing.assert_array_equal(
            get_attack(name, num_reference_models=k).score_from(refs), expected
        )


# Coverage of the moment estimate of ψ'(ν/2): draw σ_i² ~ ν s₀²/χ²_ν and s_i² ~ σ_i² χ²_d/d
# (K = 16 reference models: d = 7 per hypothesis), form the normal interval
# ψ'(ν̂/2) ± z SE (SE from the spread of the per-row terms), count how often it misses the
# true ψ'(ν/2). The estimator is unbiased for equal d (the mean of m i.i.d. terms), so by the
# CLT misses ~ Bin(R, 0.05); a correct estimator exceeds the binomial 99.9 % quantile with
# probability ≤ 0.001.
COVERAGE_REPEATS = 300
COVERAGE_ROWS = 1000


@pytest.mark.parametrize("nu", [4.0, 20.0])
def test_prior_dof_moment_estimate_covers_the_truth(nu: float) -> None:
    rng = np.random.default_rng(2026)
    d = 7
    z = stats.norm.ppf(0.975)
    truth = float(special.polygamma(1, nu / 2))
    misses = 0
    finite = 0
    for _ in range(COVERAGE_REPEATS):
        sigma2 = nu * 1.7 / rng.chisquare(nu, COVERAGE_ROWS)
        s2 = sigma2 * rng.chisquare(d, COVERAGE_ROWS) / d
        nu_hat = prior_degrees_of_freedom(s2, np.full(COVERAGE_ROWS, d))
        estimate = 0.0 if math.isinf(nu_hat) else float(special.polygamma(1, nu_hat / 2))
        finite += not math.isinf(nu_hat)
        e = np.log(s2)
        terms = (e - e.mean()) ** 2 * COVERAGE_ROWS / (COVERAGE_ROWS - 1)
        se = terms.std(ddof=1) / math.sqrt(COVERAGE_ROWS)
        misses += abs(estimate - truth) > z * se
    assert misses <= stats.binom.ppf(0.999, COVERAGE_REPEATS, 0.05)
    # Power: ψ'(ν/2) is ≥ 5 standard errors above 0 here (ψ'(10) = 0.105, SE ≈ 0.02), so the
    # estimate falls to ≤ 0 (ν̂ = ∞, "no spread") with probability < 1e-6 per run.
    assert finite == COVERAGE_REPEATS
