"""Intermediate models θ_t of the 'multiparty-gradient' trainer (``checkpoint`` = t).

The noise stays calibrated for T steps; θ_t has run t of them. Checked: the corollary
(√(t/T)·ε, δ) of the multi-party slides as a closed form and against the exact GDP
profile of what ran; the records and score law of θ_t (exact μ_t-GDP); 400 audits of θ_t
held against the tighter of the corollary and the accountant violate no more often than
the binomial ceiling allows, while the same audits of θ_T held against θ_t's bounds (a
planted mix-up) violate far more often (power control).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpaudit import theory
from dpaudit.accounting.upper_bounds import from_claim, from_records
from dpaudit.audit import run_audit
from dpaudit.dpsgd.canaries import dirac_direction
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.dpsgd.summary import _many_run_bounds, _tighter
from dpaudit.errors import ConfigError
from dpaudit.kinds.base import VerdictBudget
from dpaudit.models import ModelSpec
from dpaudit.trainers import (
    CanarySetup,
    TrainerSettings,
    intermediate_claim,
    multiparty_gradient_trainer,
)
from dpaudit.training import TrainingSpec

AUDITS = Path(__file__).resolve().parents[1] / "audits"


def _data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, n)
    X = rng.standard_normal((n, 4)) * 0.5
    X[:, 0] += np.where(y == 1, 1.0, -1.0)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    X = np.concatenate([X, np.zeros((n, 1))], axis=1)  # the Dirac canary's feature
    return X.astype(np.float32), y.astype(np.int64)


def _run(
    total: int, *, epochs: int, checkpoint: int | None, epsilon: float, seed: int, n: int = 20
):
    X, y = _data(n)
    included = (np.arange(total) % 2) == 1
    d = X.shape[1]
    canary = CanarySetup(
        kind="dirac",
        threat_model="white-box",
        included=included,
        direction=dirac_direction(2 * d + 2, d - 1),
    )
    options: dict[str, float] = {"parties": 3, "epsilon": epsilon, "delta": 1e-5, "lam": 0.01}
    if checkpoint is not None:
        options["checkpoint"] = checkpoint
    settings = TrainerSettings(
        model=ModelSpec(kind="logistic"),
        training=TrainingSpec(epochs=epochs, learning_rate=0.5, full_batch=True),
        num_classes=2,
        options=options,
    )
    out = multiparty_gradient_trainer(
        X, y, np.ones((total, n), dtype=bool), seed=seed, canary=canary, settings=settings
    )
    return included, out


def test_corollary_closed_form_and_errors() -> None:
    claim = intermediate_claim(epsilon=5.0, delta=1e-5, checkpoint=3, total_steps=12)
    assert claim.epsilon == pytest.approx(2.5, rel=1e-15)
    assert claim.delta == 1e-5
    with pytest.raises(ConfigError, match=r"1 <= t <= T = 12\. Got 13\."):
        intermediate_claim(epsilon=5.0, delta=1e-5, checkpoint=13, total_steps=12)


@pytest.mark.parametrize("epsilon", [0.5, 2.0, 5.0, 7.9])
def test_corollary_holds_for_the_exact_gdp_of_what_ran(epsilon: float) -> None:
    # With the paper's σ, θ_t is μ_t-GDP, μ_t = √(t/T)·ε/√(2 ln(1/δ)); its exact ε at δ
    # (theory.gdp_epsilon, an independent route) is at most √(t/T)·ε for every t ≤ T
    # wherever the final model meets (ε, δ) (ε ≤ 7.97 at δ = 1e-5).
    delta, total = 1e-5, 16
    for t in range(1, total + 1):
        mu_t = math.sqrt(t / total) * epsilon / math.sqrt(2 * math.log(1 / delta))
        assert theory.gdp_epsilon(mu_t, delta) <= math.sqrt(t / total) * epsilon + 1e-12


def test_corollary_fails_where_the_papers_sigma_fails() -> None:
    # ε = 10: the final model is only 10.52-DP at δ = 1e-5, so the corollary at t = T fails
    mu = 10.0 / math.sqrt(2 * math.log(1e5))
    assert theory.gdp_epsilon(mu, 1e-5) > 10.0


def test_checkpoint_records_claim_and_score_law() -> None:
    # σ is calibrated for T = 12 and does not change with t; the records say t steps, so
    # μ_t = √t·Δ/σ = √(t/T)·μ_T; the likelihood-ratio scores are N(∓μ_t²/2, μ_t²).
    included, out = _run(4000, epochs=12, checkpoint=3, epsilon=5.0, seed=1)
    _, full = _run(2, epochs=12, checkpoint=None, epsilon=5.0, seed=1)
    r, rf = out.records[0], full.records[0]
    assert (r.steps, rf.steps) == (3, 12)
    assert r.noise_multiplier == pytest.approx(rf.noise_multiplier, rel=1e-15)
    mu_t = math.sqrt(r.steps) / r.noise_multiplier
    assert mu_t == pytest.approx(0.5 * 5.0 / math.sqrt(2 * math.log(1e5)), rel=1e-12)
    assert out.claim.epsilon == pytest.approx(2.5, rel=1e-15)
    assert full.claim is None
    for arm, centre in ((~included, -(mu_t**2) / 2), (included, mu_t**2 / 2)):
        z = (out.scores[arm] - centre) / mu_t
        assert stats.kstest(z, "norm").pvalue > 1e-3


def test_bad_checkpoint_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"'checkpoint' must be a whole step t with 1 <= t <= T"):
        _run(2, epochs=4, checkpoint=5, epsilon=5.0, seed=0)
    with pytest.raises(ConfigError, match=r"'checkpoint' option must be a number\. Got 'x'\."):
        _run(2, epochs=4, checkpoint="x", epsilon=5.0, seed=0)  # type: ignore[arg-type]


def test_audits_of_intermediate_models_rarely_violate_and_a_mixup_is_caught() -> None:
    # 400 audits of θ_1 (T = 4, ε = 15: μ_1 = 1.56, corollary ε = 7.5), 100 models per arm
    # each, spending 1 − c = 0.05 on ε and μ as the kind does (0.975 each), against the
    # bounds the kind uses (the tighter of corollary and accountant, from the trainer's
    # own output). Scores are drawn at their exact law N(∓μ²/2, μ²) with μ from the
    # records (test_checkpoint_records_claim_and_score_law ties the trainer to that law;
    # training 80 000 models here would take the whole test budget). A correct audit
    # violates with probability ≤ 0.05, so V > binom.ppf(0.999, 400, 0.05) = 35 has
    # probability ≤ 1e-3. Power control: the final models θ_4 (μ_4 = 3.13) audited
    # against θ_1's bounds (a planted mix-up) must violate in more than half the audits
    # (trained models: 340 of 400, benchmarks/intermediate_and_laplace_validity.py).
    repeats, per_arm, c = 400, 100, 0.95
    ceiling = int(stats.binom.ppf(0.999, repeats, 1 - c))
    assert ceiling == 35
    level = VerdictBudget(c, 2).level
    section = DpsgdSection.model_validate(
        {
            "trainer": "multiparty-gradient",
            "rows": 20,
            "trials": per_arm,
            "options": {"parties": 3, "epsilon": 15.0, "delta": 1e-5, "lam": 0.01},
        }
    )
    _, theta_t = _run(2, epochs=4, checkpoint=1, epsilon=15.0, seed=23)
    _, theta_final = _run(2, epochs=4, checkpoint=None, epsilon=15.0, seed=23)
    assert theta_t.claim is not None
    upper = _tighter(from_records(list(theta_t.records), 1e-5), from_claim(theta_t.claim, 1e-5))
    assert upper.mu is not None
    counts = {}
    rng = np.random.default_rng(29)
    for name, out in (("theta_t", theta_t), ("theta_T", theta_final)):
        r0 = out.records[0]
        mu = math.sqrt(r0.steps) / r0.noise_multiplier
        violations = 0
        for r in range(repeats):
            neg = rng.normal(-(mu**2) / 2, mu, per_arm)
            pos = rng.normal(mu**2 / 2, mu, per_arm)
            eps, mu_lb = _many_run_bounds(section, upper, neg, pos, level=level, seed=r)
            violations += int(eps.value > upper.epsilon or mu_lb.value > upper.mu)
        counts[name] = violations
    assert counts["theta_t"] <= ceiling, counts
    assert counts["theta_T"] > repeats // 2, counts


def test_shipped_intermediate_audit_checks_the_corollary(tmp_path: Path) -> None:
    data = run_audit(
        AUDITS / "dpsgd-multiparty-intermediate.toml", output_dir=tmp_path, write=False
    ).to_dict()
    assert data["verdict"] == "pass"
    check = next(c for c in data["checks"] if c["name"] == "claim_vs_records")
    assert check["limit"] == pytest.approx(2.5, rel=1e-12)  # √(3/12)·5
    assert check["value"] == pytest.approx(
        theory.gdp_epsilon(0.5 * 5.0 / math.sqrt(2 * math.log(1e5)), 1e-5), rel=1e-6
    )
    assert check["passed"]
