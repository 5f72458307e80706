"""Worst-case likelihood-ratio audits of output perturbation and multi-party aggregation.

The ``dpsgd`` kind's ``canary = "worst-case"``: the replace-one pair of unit records that
moves the exact minimiser most, scored by the exact log-likelihood ratio of the released
model under the mechanism's own noise density (:mod:`dpaudit.theory.erm`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats

from dpaudit import theory
from dpaudit.accounting.upper_bounds import from_claim
from dpaudit.dpsgd.api import run_dpsgd_from_section
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.setup import _setup
from dpaudit.dpsgd.summary import _many_run_bounds
from dpaudit.mechanisms.noise import Claim
from dpaudit.theory import erm
from dpaudit.trainers import (
    TrainerOutput,
    output_perturbation_models,
    regularised_logistic_optimum,
)
from dpaudit.trainers.perturbation import _gamma_ball_noise, _linear_stack

HERE = Path(__file__).parent

OP = {
    "trainer": "output-perturbation",
    "mechanism": "output-perturbation",
    "canary": "worst-case",
    "threat_model": "black-box",
    "rows": 60,
    "zero_features": 1,
    "normalize": True,
    "options": {"epsilon": 1.0, "lam": 0.1},
}
MP = {**OP, "trainer": "multiparty", "mechanism": "multiparty", "rows": 90}
MP["options"] = {"epsilon": 1.0, "lam": 0.1, "parties": 3}
# ten parties: the "total rows" bug below then has 10× too little noise
MP10 = {**MP, "rows": 200, "options": {"epsilon": 1.0, "lam": 0.1, "parties": 10}}


def _run(section: dict, tmp_path: Path, *, trials: int, seed: int = 0):
    return run_dpsgd_from_section(
        {**section, "trials": trials},
        seed=seed,
        run_dir=tmp_path / f"run{seed}",
        base_dir=HERE,
    )


def _violation(outcome) -> bool:
    return any(c.violation for c in outcome.comparisons)


def _worst(section: dict, seed: int = 0):
    spec = DpsgdSpec(
        section=DpsgdSection.model_validate({**section, "trials": 2}),
        seed=seed,
        unit_size=4,
        base_dir=str(HERE),
    )
    return _setup(spec)


# --------------------------------------------------------------------- planted bugs


def output_perturbation_without_1_over_n(X, y, membership, *, seed, canary, settings):
    """Bug: the loss is summed (no 1/n): sensitivity 2/λ, noise for 2/(nλ)."""
    eps, lam = float(settings.options["epsilon"]), float(settings.options["lam"])
    w = output_perturbation_models(
        X, y, membership, epsilon=eps, lam=lam, seed=seed,
        model_offset=settings.model_offset, average=False,
    )  # fmt: skip
    return TrainerOutput(models=_linear_stack(w, X.shape[1]), claim=Claim(epsilon=eps))


def output_perturbation_noise_for_eps_10(X, y, membership, *, seed, canary, settings):
    """Bug: the noise is calibrated for ε = 10 while ε (= 1) is claimed."""
    eps, lam = float(settings.options["epsilon"]), float(settings.options["lam"])
    w = output_perturbation_models(
        X, y, membership, epsilon=10 * eps, lam=lam, seed=seed,
        model_offset=settings.model_offset,
    )  # fmt: skip
    return TrainerOutput(models=_linear_stack(w, X.shape[1]), claim=Claim(epsilon=eps))


def multiparty_total_rows(X, y, membership, *, seed, canary, settings):
    """Bug: the aggregate's scale uses the total row count n = Σ parties instead of the
    smallest party's n₍₁₎: m times too little noise (the model average is right)."""
    eps, lam = float(settings.options["epsilon"]), float(settings.options["lam"])
    parties = int(settings.options["parties"])
    signs = np.where(np.asarray(y) == 1, 1.0, -1.0)
    fixed = tuple(r for r in (canary.row, canary.replaced) if r is not None)
    owner = erm.multiparty_owners(X.shape[0], parties, fixed)
    average, _ = erm.multiparty_average(X, signs, membership, lam=lam, owner=owner, parties=parties)
    total = int(membership.sum(axis=1).min())
    scale = theory.multiparty_laplace_scale(
        lipschitz=1.0, parties=parties, smallest_party_size=total, lam=lam, epsilon=eps
    )
    w = average + _gamma_ball_noise(
        len(average), X.shape[1], scale, seed=seed, model_offset=settings.model_offset
    )
    return TrainerOutput(models=_linear_stack(w, X.shape[1]), claim=Claim(epsilon=eps))


@pytest.mark.parametrize(
    ("section", "trainer", "trials"),
    [
        (OP, "test_output_perturbation:output_perturbation_without_1_over_n", 300),
        (OP, "test_output_perturbation:output_perturbation_noise_for_eps_10", 300),
        (MP10, "test_output_perturbation:multiparty_total_rows", 300),
    ],
)
def test_planted_bugs_are_violations(section, trainer, trials, tmp_path):
    out = _run({**section, "trainer": trainer}, tmp_path, trials=trials)
    assert _violation(out)


def test_correct_multiparty_is_consistent(tmp_path):
    assert not _violation(_run(MP10, tmp_path, trials=300))


# ------------------------------------------------------------------ the exact pieces


def test_newton_minimiser_has_zero_gradient_and_matches_scipy():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 3))
    X /= np.maximum(1, np.linalg.norm(X, axis=1, keepdims=True))
    s = np.where(rng.random(40) < 0.5, -1.0, 1.0)
    member = rng.random((3, 40)) < 0.8
    w = erm.regularised_logistic_optimum(X, s, member, lam=0.05)
    for k in range(3):
        Xk, sk = X[member[k]], s[member[k]]

        def f(v, Xk=Xk, sk=sk):
            return np.mean(np.logaddexp(0, -sk * (Xk @ v))) + 0.025 * v @ v

        ref = optimize.minimize(f, np.zeros(3), method="BFGS", options={"gtol": 1e-12}).x
        grad = -(sk / (1 + np.exp(sk * (Xk @ w[k])))) @ Xk / len(sk) + 0.05 * w[k]
        assert np.linalg.norm(grad) < 1e-12
        np.testing.assert_allclose(w[k], ref, atol=1e-6)
    # the trainers' name delegates to the same computation
    np.testing.assert_array_equal(regularised_logistic_optimum(X, s, member, lam=0.05), w)


def test_gamma_ball_log_ratio_is_the_density_ratio():
    # density ∝ exp(−‖b‖/s): the ratio at θ is exp((‖θ − c0‖ − ‖θ − c1‖)/s)
    c0, c1 = np.array([0.0, 0.0]), np.array([0.3, 0.4])
    theta = np.array([[1.0, 1.0], [0.3, 0.4], [-2.0, 0.5]])
    got = erm.gamma_ball_log_ratio(theta, c0, c1, 0.5)
    want = [(math.hypot(1, 1) - math.hypot(0.7, 0.6)) / 0.5, 0.5 / 0.5,
            (math.hypot(2, 0.5) - math.hypot(2.3, 0.1)) / 0.5]  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-12)
    # its extremes are ±‖c1 − c0‖/s (on the line through the centres, beyond them)
    assert erm.gamma_ball_log_ratio(np.array([[0.6, 0.8]]), c0, c1, 0.5)[0] == pytest.approx(1.0)


@pytest.mark.parametrize("dim", [1, 2, 5])
def test_closed_form_llr_draws_match_the_vector_simulation(dim):
    # L from (R, cos) against L from explicit dim-vectors of the gamma-ball noise:
    # two-sample KS at level 1e-3 on 20,000 draws per arm.
    rng = np.random.default_rng(dim)
    c0, c1, scale = np.zeros(dim), np.full(dim, 0.3 / math.sqrt(dim)), 0.25
    for arm, centre in ((0, c0), (1, c1)):
        z = rng.standard_normal((20_000, dim))
        b = z * (rng.gamma(dim, scale, len(z)) / np.linalg.norm(z, axis=1))[:, None]
        vec = erm.gamma_ball_log_ratio(centre + b, c0, c1, scale)
        closed = erm.gamma_ball_pair_llr(0.3, scale, dim, rng=rng, size=20_000, arm=arm)
        # rounded: in 1-D, L has atoms at ±D/s that the two computations hit to ~1e-16
        assert stats.ks_2samp(np.round(vec, 9), np.round(closed, 9)).pvalue > 1e-3
        assert np.abs(closed).max() <= 0.3 / scale * (1 + 1e-12)


def test_worst_case_pair_is_the_best_candidate_and_within_the_bound():
    setup = _worst(OP)
    w = setup.worst_case
    n = 60 + 1
    assert w.bound == pytest.approx(2 / (n * 0.1), rel=1e-12)  # Chaudhuri et al. Cor. 8
    assert w.scale == pytest.approx(w.bound / 1.0)
    assert 0 < w.realised <= w.bound
    assert w.realised_epsilon == pytest.approx(1.0 * w.realised / w.bound, rel=1e-12)
    # the records are unit vectors and no candidate pair moves the minimiser further
    X0 = setup.X[:-2].astype(np.float64)
    s0 = np.where(setup.y[:-2] == 1, 1.0, -1.0)
    recs = erm.unit_candidates(X0)
    thetas = [
        erm.regularised_logistic_optimum(
            np.vstack([X0, x]), np.append(s0, sign), np.ones((1, n), dtype=bool), lam=0.1
        )[0]
        for x in recs
        for sign in (1.0, -1.0)
    ]
    best = max(float(np.linalg.norm(a - b)) for a in thetas for b in thetas)
    assert w.realised == pytest.approx(best, rel=1e-6)
    assert np.linalg.norm(setup.X[-1]) == pytest.approx(1.0, abs=1e-6)


def test_multiparty_bound_is_the_aggregate_sensitivity():
    w = _worst(MP).worst_case
    # 92 rows (90 + r + c) dealt round-robin to 3 parties, r and c to party 0:
    # parties 1 and 2 hold 30 rows each, so n₍₁₎ = 30 and the bound is 2/(3·30·λ).
    assert w.bound == pytest.approx(2 / (3 * 30 * 0.1), rel=1e-12)
    assert 0 < w.realised <= w.bound


def test_released_scores_follow_the_simulated_likelihood_ratio(tmp_path):
    # The audit's scores of 1000 models per arm against the simulated exact LR of the
    # pair: two-sample Kolmogorov–Smirnov at level 1e-3 per arm.
    from dpaudit.dpsgd.units import dpsgd_unit

    section = DpsgdSection.model_validate({**OP, "trials": 1000})
    spec = DpsgdSpec(section=section, seed=0, unit_size=2000, base_dir=str(HERE))
    unit = dpsgd_unit(spec, "dpsgd-00000")
    w = _setup(spec).worst_case
    rng = np.random.default_rng(5)
    inc = unit["included"].astype(bool)
    for centre, scores in (
        (w.centre_out, unit["scores"][~inc]),
        (w.centre_in, unit["scores"][inc]),
    ):
        z = rng.standard_normal((20_000, w.centre_out.size))
        b = z * (rng.gamma(z.shape[1], w.scale, len(z)) / np.linalg.norm(z, axis=1))[:, None]
        sim = erm.gamma_ball_log_ratio(centre + b, w.centre_out, w.centre_in, w.scale)
        assert stats.ks_2samp(scores, sim).pvalue > 1e-3


def test_details_report_realised_and_ideal(tmp_path):
    out = _run(OP, tmp_path, trials=1000)
    details = out.tests[0].details["worst_case"]
    assert details["relation"].startswith("replace one record")
    assert details["realised_sensitivity"] <= details["calibrated_sensitivity"]
    # the ideal bound can never exceed the largest privacy loss of the pair
    assert 0 <= details["ideal_epsilon"] <= details["realised_epsilon"] <= 1.0
    assert not _violation(out)
    # the report's test section states both, next to the calibrated sensitivity
    from dpaudit.report import fmt_number, render_report

    html = render_report({"tests": [out.tests[0].to_dict()]})
    realised = fmt_number(details["realised_sensitivity"])
    calibrated = fmt_number(details["calibrated_sensitivity"])
    assert f"Realised sensitivity ‖θ*(D) − θ*(D′)‖ = {realised} against the calibrated " in html
    assert f"against the calibrated {calibrated}: this pair" in html


# ------------------------------------------------------------------------- validity


def _simulated_bounds(section: dict, *, scale_factor: float, repeats: int, trials: int):
    """ε lower bounds of ``repeats`` audits whose scores are drawn from the closed form
    (the pair's exact LR under gamma-ball noise of scale ``scale_factor`` × the claimed
    one), through the kind's own bound code at c = 0.95 against the claim ε = 1."""
    w = _worst(section).worst_case
    s = DpsgdSection.model_validate({**section, "trials": trials})
    upper = from_claim(Claim(epsilon=1.0), delta=1e-5)
    rng = np.random.default_rng(11)
    d = w.centre_out.size
    out = []
    for r in range(repeats):
        scores = []
        for centre in (w.centre_out, w.centre_in):
            z = rng.standard_normal((trials, d))
            radius = rng.gamma(d, w.scale * scale_factor, trials)
            b = z * (radius / np.linalg.norm(z, axis=1))[:, None]
            scores.append(erm.gamma_ball_log_ratio(centre + b, w.centre_out, w.centre_in, w.scale))
        eps_lb, _ = _many_run_bounds(s, upper, scores[0], scores[1], level=0.95, seed=r)
        out.append(eps_lb.value)
    return np.array(out), w


@pytest.mark.parametrize("section", [OP, MP], ids=["output-perturbation", "multiparty"])
def test_no_false_violations_on_correct_noise_and_power_on_weak_noise(section):
    # 400 audits of the correct mechanism (closed-form draws; the engine's draws follow
    # the same law, see the KS test above): false violations (ε_LB > 1) at most the
    # binomial 0.999-quantile for rate 0.05; and ε_LB stays below the pair's own largest
    # privacy loss (its true ε) equally often.
    bounds, w = _simulated_bounds(section, scale_factor=1.0, repeats=400, trials=300)
    ceiling = stats.binom.ppf(0.999, 400, 0.05)
    assert (bounds > 1.0).sum() <= ceiling
    assert (bounds > w.realised_epsilon).sum() <= ceiling
    # power control: noise 10× too small (ε = 10 noise, ε = 1 claimed) → violations
    weak, _ = _simulated_bounds(section, scale_factor=0.1, repeats=20, trials=300)
    assert (weak > 1.0).sum() >= 18


def test_no_false_violations_when_the_pair_realises_the_whole_claim():
    # The sharp case: d = 1 and ‖c1 − c0‖ = s·ε, so the pair's privacy loss reaches ε = 1
    # (Laplace noise): ε_LB gets close to 1 and a wrong bound would show. 400 audits of
    # 1,000 closed-form draws per arm through the kind's bound code at c = 0.95: false
    # violations at most the binomial 0.999-quantile for rate 0.05.
    s = DpsgdSection.model_validate({**OP, "trials": 1000})
    upper = from_claim(Claim(epsilon=1.0), delta=1e-5)
    rng = np.random.default_rng(7)
    bounds = []
    for r in range(400):
        neg, pos = (
            erm.gamma_ball_pair_llr(0.5, 0.5, 1, rng=rng, size=1000, arm=arm) for arm in (0, 1)
        )
        bounds.append(_many_run_bounds(s, upper, neg, pos, level=0.95, seed=r)[0].value)
    bounds = np.array(bounds)
    assert np.median(bounds) > 0.5  # the design has power here
    assert (bounds > 1.0).sum() <= stats.binom.ppf(0.999, 400, 0.05)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"trainer": "dpsgd", "mechanism": None, "training": {"dp": {"noise_multiplier": 1}}},
            "canary = 'worst-case' needs an ERM trainer ('output-perturbation', 'multiparty') "
            "or 'mechanism' naming the density; got trainer='dpsgd'",
        ),
        (
            {"trainer": "pkg.mod:fn", "mechanism": "multiparty"},
            "canary = 'worst-case' with mechanism 'multiparty' needs options ['parties']",
        ),
        ({"canary": "clipbkd"}, "'mechanism' is used by canary = 'worst-case' only"),
        (
            {"threat_model": "white-box"},
            "input canaries (mislabeled, ood, clipbkd, crafted, worst-case) black-box; "
            "got canary='worst-case' with threat_model='white-box'",
        ),
    ],
)
def test_worst_case_section_errors(changes, message):
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as err:
        DpsgdSection.model_validate({**OP, **changes})
    assert message in str(err.value)
