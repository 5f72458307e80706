"""The 'multiparty-gradient' trainer (Jayaraman et al. 2018, gradient perturbation).

Each test checks a value from the mechanism's definition: the noise that runs has the
variance of :func:`dpaudit.theory.multiparty_gradient_perturbation_variance`; without
noise the trainer is plain full-batch gradient descent of the parties' averaged
objective (checked against torch autograd and a closed form on the canary's weight);
the white-box scores are the two Gaussians of exact μ-GDP with μ = √T·Δ/σ; 400 audits of
the correct trainer violate no more often than the binomial ceiling allows; planted
noise bugs exit 1 through ``dpaudit run``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats

from dpaudit import theory
from dpaudit.accounting.upper_bounds import from_records
from dpaudit.dpsgd.canaries import dirac_direction
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.dpsgd.summary import _many_run_bounds
from dpaudit.kinds.base import VerdictBudget
from dpaudit.models import ModelSpec
from dpaudit.trainers import (
    TRAINERS,
    CanarySetup,
    TrainerSettings,
    mixture_log_likelihood_ratio,
    multiparty_gradient_trainer,
)
from dpaudit.training import TrainingSpec

LOGISTIC = ModelSpec(kind="logistic")


def _data(n: int = 50, features: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Rows of norm ≤ 1 with an all-zero last feature (the Dirac canary's weight)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.standard_normal((n, features)) * 0.5
    X[:, 0] += np.where(y == 1, 1.0, -1.0)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    X = np.concatenate([X, np.zeros((n, 1))], axis=1)
    return X.astype(np.float32), y.astype(np.int64)


def _settings(
    *, epochs: int, lr: float = 0.5, offset: int = 0, **options: float
) -> TrainerSettings:
    return TrainerSettings(
        model=LOGISTIC,
        training=TrainingSpec(epochs=epochs, learning_rate=lr, full_batch=True),
        num_classes=2,
        model_offset=offset,
        options=dict(options),
    )


def _white(X: np.ndarray, included: np.ndarray, score: str = "likelihood-ratio") -> CanarySetup:
    d = X.shape[1]
    return CanarySetup(
        kind="dirac",
        threat_model="white-box",
        included=included,
        direction=dirac_direction(2 * d + 2, d - 1),
        score=score,
    )


def _run(
    total: int,
    *,
    epochs: int = 10,
    parties: int = 3,
    epsilon: float = 5.0,
    delta: float = 1e-5,
    score: str = "likelihood-ratio",
    seed: int = 3,
    n: int = 50,
) -> tuple[np.ndarray, Any]:
    X, y = _data(n)
    included = (np.arange(total) % 2) == 1
    out = multiparty_gradient_trainer(
        X,
        y,
        np.ones((total, n), dtype=bool),
        seed=seed,
        canary=_white(X, included, score),
        settings=_settings(epochs=epochs, parties=parties, epsilon=epsilon, delta=delta, lam=0.01),
    )
    return included, out


def test_registered_under_its_name():
    assert TRAINERS["multiparty-gradient"] is multiparty_gradient_trainer


def test_records_state_the_papers_variance_and_the_aggregate_sensitivity():
    # n = 50 rows in 3 parties round-robin: 17, 17, 16 real rows; the canary record joins
    # the smallest, so every party holds n₍₁₎ = 17. Δ = 2G/(m·n₍₁₎) = 2/51.
    _, out = _run(4, epochs=7, epsilon=2.0, delta=1e-6)
    variance = theory.multiparty_gradient_perturbation_variance(
        lipschitz=1.0, parties=3, smallest_party_size=17, steps=7, epsilon=2.0, delta=1e-6
    )
    for r in out.records:
        assert r.clipping_norm == pytest.approx(2.0 / 51, rel=1e-12)
        assert r.noise_multiplier * r.clipping_norm == pytest.approx(math.sqrt(variance), rel=1e-12)
        assert (r.sampling_rate, r.steps, r.sampling) == (1.0, 7, "full-batch")
        # μ = √T·Δ/σ = ε/√(2 ln(1/δ)), whatever m and n₍₁₎
        mu = math.sqrt(r.steps) / r.noise_multiplier
        assert mu == pytest.approx(2.0 / math.sqrt(2 * math.log(1e6)), rel=1e-12)


def test_the_noise_that_runs_has_the_papers_variance():
    # Score "sum" = Σ_t x_t with x_t = ±a + N(0, σ²) on the untouched coordinate, so in
    # each arm the sums are N(±T·a, T·σ²). The sample variance of k = 2,000 sums is
    # σ̂² ~ T·σ²·χ²_{k−1}/(k − 1); its two-sided 0.999 chi-square interval must hold σ².
    total, steps = 4000, 4
    included, out = _run(total, epochs=steps, score="sum")
    sigma2 = theory.multiparty_gradient_perturbation_variance(
        lipschitz=1.0, parties=3, smallest_party_size=17, steps=steps, epsilon=5.0, delta=1e-5
    )
    a = 1.0 / (3 * 17)
    for arm, sign in ((~included, -1.0), (included, 1.0)):
        s = out.scores[arm]
        k = s.size
        assert s.mean() == pytest.approx(sign * steps * a, abs=4 * math.sqrt(steps * sigma2 / k))
        ratio = s.var(ddof=1) / (steps * sigma2)
        low, high = stats.chi2.ppf([0.0005, 0.9995], k - 1) / (k - 1)
        assert low <= ratio <= high


def _autograd_gd(
    X: np.ndarray,
    y: np.ndarray,
    member: np.ndarray,
    owner: np.ndarray,
    m: int,
    lam: float,
    lr: float,
    steps: int,
) -> np.ndarray:
    """Independent reference: GD on (1/m)Σ_j mean_{i∈j} log(1 + e^{−y⟨w,x⟩}) + λ/2‖w‖²."""
    x = torch.as_tensor(X, dtype=torch.float64)
    s = torch.as_tensor(np.where(y == 1, 1.0, -1.0))
    w = torch.zeros(x.shape[1], dtype=torch.float64, requires_grad=True)
    for _ in range(steps):
        loss = sum(
            torch.nn.functional.softplus(-s[idx] * (x[idx] @ w)).mean() / m
            for idx in (np.flatnonzero(member & (owner == j)) for j in range(m))
        )
        objective = loss + lam / 2 * (w @ w)
        (grad,) = torch.autograd.grad(objective, w)
        w = (w - lr * grad).detach().requires_grad_(True)
    return w.detach().numpy()


def test_without_noise_it_is_full_batch_gd_of_the_averaged_objective():
    # ε = 1e14 makes σ ≈ 1e-14: the models must be plain GD of the objective in which each
    # party's mean loss has weight 1/m (autograd reference, per model's own members).
    X, y = _data(30)
    X = X[:, :-1]  # black-box: no Dirac canary, no zero feature needed
    rng = np.random.default_rng(5)
    membership = rng.random((3, 30)) < 0.8
    canary = CanarySetup(kind="mislabeled", threat_model="black-box", included=np.zeros(3, bool))
    settings = _settings(epochs=6, lr=0.7, parties=3, epsilon=1e14, delta=1e-5, lam=0.1)
    out = multiparty_gradient_trainer(X, y, membership, seed=0, canary=canary, settings=settings)
    assert out.scores is None
    assert out.models is not None
    owner = np.arange(30) % 3
    for k in range(3):
        w = out.models.weights[0][k, 1].numpy()
        expected = _autograd_gd(X, y, membership[k], owner, 3, 0.1, 0.7, 6)
        np.testing.assert_allclose(w, expected, rtol=0, atol=1e-10)


def test_without_noise_the_canary_weight_follows_its_closed_form():
    # On the all-zero feature only the canary acts: w_c ← w_c − η(±a + λw_c) from 0, so
    # w_c(T) = ∓a·(1 − (1 − ηλ)^T)/λ with a = G/(m·n_{p*}) = 1/51.
    included, out = _run(2, epochs=9, epsilon=1e14)
    a, eta, lam = 1.0 / 51, 0.5, 0.01
    w_c = out.models.weights[0][:, 1, -1].numpy()
    closed = a * (1 - (1 - eta * lam) ** 9) / lam
    np.testing.assert_allclose(w_c, np.where(included, -closed, closed), rtol=1e-9)


def test_whitebox_scores_are_the_gaussians_of_exact_gdp():
    # The likelihood-ratio score of T Gaussian observations with shift Δ and noise σ is
    # N(−μ²/2, μ²) without the canary and N(+μ²/2, μ²) with it, μ = √T·Δ/σ, the μ the
    # records give the accountant (n_{p*} = n₍₁₎ = 17, so the canary's shift 2a is Δ).
    included, out = _run(4000, epochs=10)
    r = out.records[0]
    mu = math.sqrt(r.steps) / r.noise_multiplier
    assert mu == pytest.approx(5.0 / math.sqrt(2 * math.log(1e5)), rel=1e-12)
    for arm, centre in ((~included, -(mu**2) / 2), (included, mu**2 / 2)):
        z = (out.scores[arm] - centre) / mu
        assert stats.kstest(z, "norm").pvalue > 1e-3


def test_likelihood_ratio_is_the_whitebox_module_at_q_1():
    # Per step the score is whitebox.mixture_log_likelihood_ratio(x_t + a, q = 1, σ/(2a),
    # 2a); its sum over steps is affine in the plain sum (the "sum" score, same seed).
    _, lr = _run(6, epochs=5)
    _, plain = _run(6, epochs=5, score="sum")
    r = lr.records[0]
    sigma = r.noise_multiplier * r.clipping_norm
    a = 1.0 / 51
    # Σ_t x_t = plain; feed its per-step mean T times: the LR is linear in x at q = 1.
    per_step = plain.scores[:, None] / 5 * np.ones((1, 5))
    ref = mixture_log_likelihood_ratio(
        per_step + a, sampling_rate=1.0, noise_multiplier=sigma / (2 * a), clipping_norm=2 * a
    ).sum(axis=1)
    np.testing.assert_allclose(lr.scores, ref, rtol=1e-9, atol=1e-9)


def test_audits_of_the_correct_trainer_rarely_violate():
    # 400 audits, 25 models per arm each (disjoint global model indices, so independent
    # noise streams), each spending 1 − c = 0.05 on its ε and μ comparisons as the kind
    # does (0.975 each). A correct audit says "violation" with probability ≤ 0.05, so the
    # count V is stochastically ≤ Binomial(400, 0.05), and V > binom.ppf(0.999, 400, 0.05)
    # = 35 has probability ≤ 1e-3 on correct code. ε = 15 (μ = 3.13) puts the bounds
    # near the upper bound, where a wrong σ or accountant would show.
    repeats, per_arm, c = 400, 25, 0.95
    ceiling = int(stats.binom.ppf(0.999, repeats, 1 - c))
    assert ceiling == 35
    included, out = _run(2 * per_arm * repeats, epochs=4, n=20, seed=17, epsilon=15.0)
    upper = from_records(list(out.records), 1e-5)
    assert upper.mu is not None
    section = DpsgdSection.model_validate(
        {
            "trainer": "multiparty-gradient",
            "rows": 20,
            "trials": per_arm,
            "options": {"parties": 3, "epsilon": 15.0, "delta": 1e-5, "lam": 0.01},
        }
    )
    level = VerdictBudget(c, 2).level
    violations, positive = 0, 0
    for r in range(repeats):
        part = slice(2 * per_arm * r, 2 * per_arm * (r + 1))
        s, i = out.scores[part], included[part]
        eps, mu = _many_run_bounds(section, upper, s[~i], s[i], level=level, seed=r)
        violations += int(eps.value > upper.epsilon or mu.value > upper.mu)
        positive += int(mu.value > 0)
    assert violations <= ceiling
    # power control: the audits measure something, so zero violations is not vacuous
    assert positive > repeats // 2


PLUGIN = '''
import math
from dpaudit.trainers import multiparty_gradient_trainer


def noise_over_ten(X, y, membership, *, seed, canary, settings):
    """σ/10 runs; the records still state the paper's σ."""
    return multiparty_gradient_trainer(
        X, y, membership, seed=seed, canary=canary, settings=settings, noise_factor=0.1
    )


def per_party_noise(X, y, membership, *, seed, canary, settings):
    """Each party adds N(0, σ²) calibrated for the aggregate to its own gradient and the
    aggregate averages them: the noise that runs is σ/√m, the records say σ."""
    m = int(settings.options["parties"])
    return multiparty_gradient_trainer(
        X, y, membership, seed=seed, canary=canary, settings=settings,
        noise_factor=1 / math.sqrt(m),
    )
'''


@pytest.mark.parametrize(
    ("trainer", "parties", "trials"),
    [("mpg_bugs:noise_over_ten", 3, 200), ("mpg_bugs:per_party_noise", 5, 600)],
)
def test_planted_noise_bugs_exit_1_with_the_budget_reported(
    tmp_path: Path, trainer: str, parties: int, trials: int
):
    from typer.testing import CliRunner

    from dpaudit.cli import app

    (tmp_path / "mpg_bugs.py").write_text(PLUGIN)
    audit = tmp_path / "bug.toml"
    audit.write_text(
        f"""
[audit]
name = "bug"
kinds = ["dpsgd"]
seed = 0

[dpsgd]
trainer = "{trainer}"
canary = "dirac"
threat_model = "white-box"
rows = 50
normalize = true
trials = {trials}
options = {{ parties = {parties}, epsilon = 5.0, delta = 1e-5, lam = 0.01 }}

[dpsgd.training]
epochs = 10
learning_rate = 0.5
"""
    )
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(audit), "-q", "-o", str(run)])
    assert result.exit_code == 1, result.output
    data = json.loads((run / "results.json").read_text())
    assert data["verdict"] == "fail"
    budget = data["provenance"]["verdict_budget"]
    # ε, μ and the claim curve, each at a third of 1 − c
    assert (budget["confidence_level"], budget["comparisons"]) == (0.95, 3)
    assert budget["level_each"] == pytest.approx(1 - 0.05 / 3)
    mu = next(b for b in data["bounds"] if b["parameter"] == "mu" and b["in_verdict"])
    # the records' μ is the paper's, ε/√(2 ln(1/δ)); the bound proves more ran
    assert mu["upper"] == pytest.approx(5.0 / math.sqrt(2 * math.log(1e5)), rel=1e-9)
    assert mu["violation"]
    assert mu["lower"]["value"] > mu["upper"]
    assert mu["lower"]["confidence_level"] == pytest.approx(1 - 0.05 / 3)


@pytest.mark.parametrize(
    ("epsilon", "holds"), [(1.0, True), (5.0, True), (7.9, True), (8.1, False), (10.0, False)]
)
def test_the_papers_sigma_meets_its_epsilon_only_up_to_about_8_at_delta_1e_5(epsilon, holds):
    # σ² = 8G²T·ln(1/δ)/(m²n₍₁₎²ε²) on sensitivity Δ = 2G/(m·n₍₁₎) is exactly μ-GDP with
    # μ = ε/√(2 ln(1/δ)). Through zCDP (ρ = μ²/2, Bun-Steinke Prop. 1.3) it is
    # (ρ + 2√(ρ ln(1/δ)), δ) = (ε + ε²/(4 ln(1/δ)), δ)-DP: the formula drops ρ. The exact
    # GDP profile (Dong, Roth, Su 2019, Cor. 2.13) still meets the stated ε up to
    # ε ≈ 7.97 at δ = 1e-5 and exceeds it above: the trainer therefore returns records
    # (the exact μ), not the paper's (ε, δ) as a claim.
    delta = 1e-5
    mu = epsilon / math.sqrt(2 * math.log(1 / delta))
    rho = mu**2 / 2
    zcdp = theory.zcdp_to_dp(rho, delta)
    assert zcdp == pytest.approx(epsilon + epsilon**2 / (4 * math.log(1 / delta)), rel=1e-12)
    assert (theory.gdp_epsilon(mu, delta) <= epsilon) is holds


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"parties": 3, "epsilon": 1.0, "lam": 0.1}, "needs 'delta' in \\[dpsgd\\]"),
        (
            {"parties": 2.5, "epsilon": 1.0, "delta": 1e-5, "lam": 0.1},
            "'parties' parameter must be an integer >= 1. Got 2.5",
        ),
        ({"parties": 60, "epsilon": 1.0, "delta": 1e-5, "lam": 0.1}, "has no rows"),
    ],
)
def test_bad_options_are_config_errors(options, message):
    from dpaudit.errors import ConfigError

    X, y = _data(50)
    with pytest.raises(ConfigError, match=message):
        multiparty_gradient_trainer(
            X,
            y,
            np.ones((2, 50), dtype=bool),
            seed=0,
            canary=_white(X, np.array([False, True])),
            settings=_settings(epochs=2, **options),
        )


def test_the_dirac_canary_needs_an_all_zero_feature():
    from dpaudit.errors import ConfigError

    X, y = _data(20)
    X[:, -1] = 0.1
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))  # keep ‖x‖ ≤ 1
    with pytest.raises(ConfigError, match="needs an all-zero feature"):
        multiparty_gradient_trainer(
            X,
            y,
            np.ones((2, 20), dtype=bool),
            seed=0,
            canary=_white(X, np.array([False, True])),
            settings=_settings(epochs=2, parties=2, epsilon=1.0, delta=1e-5, lam=0.1),
        )
