"""Black-box levers of Annamalai & De Cristofaro (arXiv 2405.14106v4): crafted canary,
worst-case initial parameters, logit-shift score.

What is checked against what:

* the crafted canary moves its own weights only: every real row's per-example gradient is
  exactly 0 there, and at the worst-case θ₀ the canary's gradient is the known vector
  (e_decoy − e_label) ⊗ (x, 1), clipped to norm C (engine's backend, float64);
* under full-batch DP-GD the black-box logit-shift score of each arm is the closed-form
  Gaussian of :func:`dpaudit.dpsgd.canaries.crafted_score_moments` (KS test, fixed seed);
* validity: 400 audits of correct DP-GD with the levers (their models trained by the engine
  in one batch, the real scoring and bound code on each audit's slice) report a violation
  no more often than Binomial(400, 1 − c) allows, and the power is not vacuous.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dpaudit.dpsgd.api import run_dpsgd_from_section
from dpaudit.dpsgd.canaries import (
    CraftedRun,
    crafted_canary,
    crafted_clipped_weight,
    crafted_score_moments,
    worst_case_margin,
)
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.setup import _setup
from dpaudit.dpsgd.summary import _many_run_bounds, _many_run_upper
from dpaudit.dpsgd.units import dpsgd_unit
from dpaudit.errors import ConfigError, DataError
from dpaudit.training.engine import CLIP_EPSILON, LinearStackBackend

ROWS, STEPS, MU = 30, 3, 1.5


def _section(trials: int, mu: float = MU, **changes: object) -> dict:
    sec: dict = {
        "trainer": "dpgd",
        "canary": "crafted",
        "threat_model": "black-box",
        "rows": ROWS,
        "trials": trials,
        "black_box": {"initial": "worst-case", "score": "logit-shift"},
        "training": {"epochs": STEPS, "learning_rate": 1.0, "dp": {"target_mu": mu}},
    }
    sec.update(changes)
    return sec


def _spec(trials: int, seed: int = 0, mu: float = MU, **changes: object) -> DpsgdSpec:
    s = DpsgdSection.model_validate(_section(trials, mu, **changes))
    return DpsgdSpec(section=s, seed=seed, unit_size=1_000_000, base_dir=".")


# ------------------------------------------------------------------- the crafted canary


def test_crafted_canary_needs_an_all_zero_feature() -> None:
    X = np.array([[1.0, 0.0], [2.0, 0.5]])
    with pytest.raises(DataError, match=r"column 1 has 1 nonzero rows"):
        crafted_canary(X, np.array([0, 1]), feature=1, value=10.0)
    labels = np.array([1, 1, 0, 2, 2])  # class 0 is the rarest
    c = crafted_canary(np.zeros((5, 2)), labels, feature=1, value=10.0, num_classes=3)
    assert c.x.tolist() == [0.0, 10.0]
    assert (c.y, c.decoy, c.feature, c.value) == (0, 1, 1, 10.0)
    with pytest.raises(
        DataError, match=r"The 'feature' parameter must be an integer in \[0, 1\]\. Got 2 instead\."
    ):
        crafted_canary(np.zeros((5, 2)), labels, feature=2, value=10.0)


def test_other_records_never_touch_the_canary_weights_and_theta0_saturates_clipping() -> None:
    spec = _spec(1)
    st = _setup(spec)
    assert st.crafted is not None
    assert st.canary_row is not None
    d, k = st.X.shape[1], st.num_classes
    theta0 = torch.tensor(st.training.initial_parameters, dtype=torch.float64).unsqueeze(0)
    backend = LinearStackBackend(st.model, d, k)
    x = torch.as_tensor(st.X, dtype=torch.float64).unsqueeze(0)
    y = torch.as_tensor(st.y).unsqueeze(0)
    valid = torch.ones((1, x.shape[1]), dtype=torch.bool)
    grads = backend.per_example_gradients(theta0, x, y, valid)[0]  # (n + 1, P)
    j = st.crafted.feature
    canary_weights = [c * d + j for c in range(k)]
    real = np.delete(np.arange(st.X.shape[0]), st.canary_row)
    assert torch.count_nonzero(grads[real][:, canary_weights]) == 0
    # The canary's gradient at θ₀: (e_decoy − e_label) ⊗ (x, 1), up to e^-30 in the softmax.
    g = grads[st.canary_row]
    expected = torch.zeros_like(g)
    for cls, sign in ((st.crafted.decoy, 1.0), (st.crafted.y, -1.0)):
        expected[cls * d + j] = sign * st.crafted.value
        expected[k * d + cls] = sign
    torch.testing.assert_close(g, expected, rtol=0, atol=1e-9)
    # Clipped, its weight entries are ±crafted_clipped_weight and its norm is C (C = 1).
    clipped = backend.clipped_sum(
        theta0, x[:, [st.canary_row]], y[:, [st.canary_row]], valid[:, :1], 1.0
    )[0]
    c = crafted_clipped_weight(st.crafted, 1.0)
    assert float(clipped[st.crafted.decoy * d + j]) == pytest.approx(c, rel=1e-12)
    assert float(clipped[st.crafted.y * d + j]) == pytest.approx(-c, rel=1e-12)
    norm = float(torch.linalg.vector_norm(clipped))
    g_norm = math.sqrt(2.0) * math.hypot(st.crafted.value, 1.0)
    assert norm == pytest.approx(g_norm / (g_norm + CLIP_EPSILON), rel=1e-12)


# --------------------------------------------------------------- exact score distribution


def test_black_box_scores_are_the_closed_form_gaussians() -> None:
    trials = 400
    spec = _spec(trials, seed=3)
    st = _setup(spec)
    assert st.crafted is not None
    assert st.training.dp is not None
    out = dpsgd_unit(spec, "dpsgd-00000")
    scores, included = out["scores"], out["included"].astype(bool)
    dp = st.training.dp
    theta0 = st.training.initial_parameters
    assert theta0 is not None
    margin = theta0[st.crafted.decoy * st.X.shape[1] + st.crafted.feature]
    run = CraftedRun(
        steps=STEPS,
        learning_rate=1.0,
        clipping_norm=dp.clipping_norm,
        noise_multiplier=dp.noise_multiplier,
        divisor=ROWS,
        batch_rows=ROWS + 1,
    )
    assert margin == pytest.approx(worst_case_margin(st.crafted, run), rel=1e-15)
    # Full batch divides by each model's member count: n without the canary, n + 1 with.
    for arm, divisor in ((False, ROWS), (True, ROWS + 1)):
        mean, std = crafted_score_moments(
            st.crafted, run, divisor=divisor, included=arm, margin=margin
        )
        x = scores[included == arm]
        # One KS test per arm at level 1e-3: a correct engine fails one with prob. 2e-3.
        assert stats.kstest(x, stats.norm(mean, std).cdf).pvalue > 1e-3
    # The arms' mean gap over the in-arm std is √T/σ·(v/√(v²+1))·g/(g+1e-6) ≈ μ.
    m_in, s_in = crafted_score_moments(st.crafted, run, divisor=ROWS + 1, included=True, margin=0)
    assert m_in / s_in == pytest.approx(MU, rel=1e-6)


def test_poisson_black_box_scores_are_the_closed_form_mixture() -> None:
    # Poisson DP-SGD, 40 rows, batch 10: the arm without the canary has q = 1/4, the arm
    # with it q = 10/41 (41 members), both T = 4 and divisor b = 10. The canary joins a
    # step with probability q, so its arm's score is Σ_k Binom(T, q)(k)·N(−A + k·push, s²).
    rows, batch, trials = 40, 10, 400
    spec = _spec(
        trials,
        seed=5,
        trainer="dpsgd",
        rows=rows,
        training={
            "epochs": 1,
            "batch_size": batch,
            "learning_rate": 1.0,
            "dp": {"noise_multiplier": 0.8},
        },
    )
    st = _setup(spec)
    assert st.crafted is not None
    theta0 = st.training.initial_parameters
    assert theta0 is not None
    margin = theta0[st.crafted.decoy * st.X.shape[1] + st.crafted.feature]
    out = dpsgd_unit(spec, "dpsgd-00000")
    scores, included = out["scores"], out["included"].astype(bool)
    steps = rows // batch
    push = 2.0 * crafted_clipped_weight(st.crafted, 1.0) / batch
    s = 0.8 * math.sqrt(2.0 * steps) / batch
    k = np.arange(steps + 1)
    weights = stats.binom.pmf(k, steps, batch / (rows + 1))

    def mixture_cdf(x: np.ndarray) -> np.ndarray:
        z = (np.asarray(x)[..., None] + margin - k * push) / s
        return (weights * stats.norm.cdf(z)).sum(-1)

    # One KS test per arm at level 1e-3, as above.
    assert stats.kstest(scores[~included], stats.norm(-margin, s).cdf).pvalue > 1e-3
    assert stats.kstest(scores[included], mixture_cdf).pvalue > 1e-3


# ------------------------------------------------------------------------------ validity


@pytest.mark.slow
def test_repeated_black_box_audits_of_correct_dpgd_rarely_violate() -> None:
    # μ = 4: 40 models per arm then bound μ well above 0, so the count of violations is
    # measured where the bound is close to working, not on vacuous zeros.
    repeats, per_arm, c, mu = 400, 40, 0.95, 4.0
    spec = _spec(repeats * per_arm, seed=11, mu=mu, rows=10)
    out = dpsgd_unit(spec, "dpsgd-00000")  # one batched engine call for all 32 000 models
    upper = _many_run_upper([out], 1e-5, claim=None)  # the records of what ran
    assert upper is not None
    assert upper.mu is not None
    assert upper.mu == pytest.approx(mu)
    mu_upper = float(upper.mu)
    scores, included = out["scores"], out["included"].astype(bool)
    block = 2 * per_arm
    violations, mus = 0, []
    for r in range(repeats):
        sl = slice(r * block, (r + 1) * block)
        s, inc = scores[sl], included[sl]
        # Two in-verdict comparisons (ε and μ) share 1 − c, as the audit's budget does.
        eps_lb, mu_lb = _many_run_bounds(
            spec.section, upper, s[~inc], s[inc], level=1 - (1 - c) / 2, seed=r
        )
        violations += eps_lb.value > upper.epsilon or mu_lb.value > mu_upper
        mus.append(mu_lb.value)
    # P[violation] ≤ 1 − c per audit; the count exceeds the 1 − 1e-4 quantile of
    # Binomial(400, 0.05) with probability below 1e-4 on correct code.
    assert violations <= stats.binom.ppf(1 - 1e-4, repeats, 1 - c)
    # Power control: with 20 counted trials per arm, no error at the midpoint threshold
    # gives Clopper-Pearson limits of 1 − 0.0125^(1/20) = 0.197 each, μ_LB = 1.70; the
    # bound must reach well above 0 in most audits or the count above proves nothing.
    assert np.median(mus) > 1.0


# -------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"canary": "clipbkd"},
            "initial = 'worst-case' and score = 'logit-shift' need canary = 'crafted'; "
            "got canary='clipbkd'",
        ),
        (
            {"trainer": "plain", "training": {"full_batch": True, "dp": {"target_mu": 1.0}}},
            "initial = 'worst-case' needs the 'dpsgd' or 'dpgd' trainer",
        ),
        ({"model": "mlp"}, "initial = 'worst-case' is made for model = 'logistic'; got 'mlp'"),
        ({"normalize": True}, "the 'crafted' canary is not normalised: set normalize = false"),
        ({"zero_features": 0}, "the 'crafted' canary needs an all-zero feature"),
        (
            {"training": {"epochs": 2, "momentum": 0.5, "dp": {"target_mu": 1.0}}},
            "initial = 'worst-case' needs momentum = 0 and weight_decay = 0",
        ),
    ],
)
def test_levers_reject_what_they_cannot_audit(changes: dict, message: str, tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"^run_dpsgd_from_section: " + _escape(message)):
        run_dpsgd_from_section(_section(10, **changes), seed=0, run_dir=tmp_path)


def test_black_box_table_needs_the_black_box_threat_model(tmp_path) -> None:
    sec = _section(10, threat_model="white-box", canary="dirac")
    with pytest.raises(ConfigError, match=r"needs threat_model = 'black-box'"):
        run_dpsgd_from_section(sec, seed=0, run_dir=tmp_path)


def _escape(text: str) -> str:
    import re

    return re.escape(text)
