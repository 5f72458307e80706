"""Gradient descent with Laplace noise on the clipped-gradient sum ('gradient-laplace').

Checked: the ℓ1 sensitivity bound Δ1 = m·√d·C (closed form, Cauchy–Schwarz tightness,
and the realised change of a noiseless step under add/remove); the calibration and its
basic-composition accounting round trip; without noise the trainer is clipped full-batch
GD (an independent per-example loop); the noise that runs is Laplace(b) (KS test); 400
audits at the exact law of a tight Laplace step violate no more often than the binomial
ceiling allows, while a planted "no composition" bug violates in most (power control);
a planted noise bug exits 1 through ``dpaudit run``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from dpaudit.accounting.upper_bounds import Claim, from_claim
from dpaudit.cli import app
from dpaudit.dpsgd.canaries import dirac_direction
from dpaudit.dpsgd.schema import BUILTIN_TRAINERS, DpsgdSection
from dpaudit.dpsgd.summary import _many_run_bounds
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.kinds.base import VerdictBudget
from dpaudit.models import ModelSpec
from dpaudit.trainers import TRAINERS, CanarySetup, TrainerSettings, gradient_laplace_trainer
from dpaudit.training import TrainingSpec
from dpaudit.training.gradient_laplace import (
    basic_composition_epsilon,
    gradient_l1_sensitivity,
    laplace_gradient_scale,
    laplace_log_likelihood_ratio,
    train_gradient_laplace,
)


def _data(n: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    X = rng.standard_normal((n, 4)) * 0.5
    X[:, 0] += np.where(y == 1, 1.0, -1.0)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    X = np.concatenate([X, np.zeros((n, 1))], axis=1)
    return X.astype(np.float32), y.astype(np.int64)


def _trainer_run(total: int, *, epochs: int, epsilon: float, clip: float = 1.0, seed: int = 0):
    X, y = _data()
    d = X.shape[1]
    included = (np.arange(total) % 2) == 1
    canary = CanarySetup(
        kind="dirac",
        threat_model="white-box",
        included=included,
        direction=dirac_direction(2 * d + 2, d - 1),
    )
    settings = TrainerSettings(
        model=ModelSpec(kind="logistic"),
        training=TrainingSpec(epochs=epochs, learning_rate=0.5, full_batch=True),
        num_classes=2,
        options={"epsilon": epsilon, "clip": clip},
    )
    out = gradient_laplace_trainer(
        X, y, np.ones((total, X.shape[0]), bool), seed=seed, canary=canary, settings=settings
    )
    return included, out


def test_registered_and_listed_in_the_schema() -> None:
    assert TRAINERS["gradient-laplace"] is gradient_laplace_trainer
    assert "gradient-laplace" in BUILTIN_TRAINERS


def test_sensitivity_closed_form_and_cauchy_schwarz() -> None:
    assert gradient_l1_sensitivity(examples=3, dimension=16, clipping_norm=0.5) == 6.0
    assert gradient_l1_sensitivity(examples=1, dimension=2, clipping_norm=1.0) == math.sqrt(2)
    # ‖g‖1 ≤ √d‖g‖2 for every g, with equality when all |g_j| are equal
    rng = np.random.default_rng(0)
    g = rng.standard_normal((10_000, 7))
    assert np.all(np.abs(g).sum(1) <= math.sqrt(7) * np.linalg.norm(g, axis=1) * (1 + 1e-12))
    flat = np.full(7, -0.3)
    assert np.abs(flat).sum() == pytest.approx(math.sqrt(7) * np.linalg.norm(flat), rel=1e-12)
    with pytest.raises(
        DpauditError, match=r"'examples' parameter must be an integer in \[1, inf\)"
    ):
        gradient_l1_sensitivity(examples=0, dimension=2, clipping_norm=1.0)
    with pytest.raises(DpauditError, match=r"'clipping_norm' parameter must be in \(0, inf\]"):
        gradient_l1_sensitivity(examples=1, dimension=2, clipping_norm=0.0)


def test_calibration_and_basic_composition_round_trip() -> None:
    delta1 = gradient_l1_sensitivity(examples=2, dimension=9, clipping_norm=0.7)  # 4.2
    b = laplace_gradient_scale(epsilon=1.5, steps=6, sensitivity=delta1)
    assert b == pytest.approx(4.2 * 6 / 1.5, rel=1e-14)
    assert basic_composition_epsilon(sensitivity=delta1, scale=b, steps=6) == pytest.approx(1.5)


def test_noiseless_step_moves_the_sum_by_at_most_delta1() -> None:
    # ε = 1e15 makes b ≈ 1e-15·T·Δ1: one step of D and of D minus a row differ by
    # η/n·(that row's clipped gradient), whose ℓ1 norm is ≤ √d·C = Δ1 (m = 1).
    X, y = _data(30)
    x = X.astype(np.float64) * 3.0  # rows up to norm 3: clipping at C = 0.4 is active
    signs = np.where(y == 1, 1.0, -1.0)
    membership = np.ones((30, 30), bool)
    membership[np.arange(1, 30), np.arange(29)] = False  # model k ≥ 1 lacks row k − 1
    rngs = [np.random.default_rng(k) for k in range(30)]
    run = train_gradient_laplace(
        x, signs, membership, epsilon=1e15, clipping_norm=0.4, steps=1, learning_rate=1.0, rngs=rngs
    )
    moved = np.abs(run.weights[1:] - run.weights[0]).sum(axis=1) * 30  # ‖Σ − Σ'‖1
    assert run.sensitivity == pytest.approx(math.sqrt(5) * 0.4)
    assert np.all(moved <= run.sensitivity + 1e-9)
    # at w = 0 each gradient is ±x/2 (norm ≥ 0.4 here), clipped to ℓ2 norm C: its ℓ1 norm
    # is then C·‖x‖1/‖x‖2
    np.testing.assert_allclose(
        moved / np.linalg.norm(x[:29, :4], ord=1, axis=1) * np.linalg.norm(x[:29, :4], axis=1),
        0.4,
        rtol=1e-9,
    )


def test_without_noise_it_is_clipped_full_batch_gd() -> None:
    # Independent reference: a per-example loop of clipped logistic gradients.
    X, y = _data(20)
    x, signs = X.astype(np.float64), np.where(y == 1, 1.0, -1.0)
    membership = np.random.default_rng(3).random((2, 20)) < 0.7
    run = train_gradient_laplace(
        x,
        signs,
        membership,
        epsilon=1e15,
        clipping_norm=0.3,
        steps=5,
        learning_rate=0.8,
        rngs=[np.random.default_rng(k) for k in range(2)],
    )
    for k in range(2):
        w = np.zeros(5)
        for _ in range(5):
            total = np.zeros(5)
            for i in np.flatnonzero(membership[k]):
                g = -signs[i] * x[i] / (1 + math.exp(signs[i] * (w @ x[i])))
                total += g * min(1.0, 0.3 / np.linalg.norm(g))
            w = w - 0.8 * total / 20
        np.testing.assert_allclose(run.weights[k], w, rtol=0, atol=1e-9)


def test_the_noise_that_runs_is_laplace_of_the_calibrated_scale() -> None:
    included, out = _trainer_run(2000, epochs=3, epsilon=2.0, clip=0.5)
    assert out.claim == Claim(epsilon=pytest.approx(2.0), delta=0.0)
    # Score "likelihood-ratio" is a sum of per-step (|x| − |x − C|)/b; recover the
    # observations instead from a run of the pure function with the same streams.
    X, y = _data()
    run = train_gradient_laplace(
        X.astype(np.float64),
        np.where(y == 1, 1.0, -1.0),
        np.ones((2000, 40), bool),
        epsilon=2.0,
        clipping_norm=0.5,
        steps=3,
        learning_rate=0.5,
        canary_gradient=np.array([0, 0, 0, 0, 0.5]),
        canary_included=included,
        column=4,
        rngs=[np.random.default_rng([0, k, 17]) for k in range(2000)],
    )
    b = 0.5 * math.sqrt(5) * 3 / 2.0
    assert run.scale == pytest.approx(b)
    noise = run.observed - np.where(included, 0.5, 0.0)[:, None]
    assert stats.kstest(noise.ravel() / b, "laplace").pvalue > 1e-3
    lr = laplace_log_likelihood_ratio(run.observed, shift=0.5, scale=b).sum(axis=1)
    np.testing.assert_allclose(out.scores, lr, rtol=1e-12, atol=1e-12)


def test_validity_at_the_exact_law_and_a_composition_bug() -> None:
    # A tight Laplace step: the canary moves the coordinate by exactly Δ1 (d = 1, m = 1),
    # b = Δ1·T/ε, T = 4 steps, ε = 1: the white-box LR is the exact privacy loss, and the
    # claim (ε = 1, δ = 0; μ = −2Φ⁻¹(1/(1 + e)) = 1.23 through from_claim) is the
    # trainer's. 400 audits, 200 per arm, 1 − c = 0.05 split over ε and μ as the kind
    # does: a correct audit violates with probability ≤ 0.05, so V > binom.ppf(0.999,
    # 400, 0.05) = 35 has probability ≤ 1e-3. Power control: calibrating b = Δ1/ε, i.e.
    # forgetting to compose over the T steps (true ε = 4), must be caught in more than
    # half of the audits (333 of 400 with this seed).
    repeats, per_arm, c, steps, eps = 400, 200, 0.95, 4, 1.0
    ceiling = int(stats.binom.ppf(0.999, repeats, 1 - c))
    assert ceiling == 35
    delta1 = gradient_l1_sensitivity(examples=1, dimension=1, clipping_norm=1.0)
    upper = from_claim(Claim(epsilon=eps, delta=0.0), 1e-5)
    assert upper.mu is not None
    level = VerdictBudget(c, 2).level
    section = DpsgdSection.model_validate(
        {"trainer": "gradient-laplace", "trials": per_arm, "options": {"epsilon": eps}}
    )
    rng = np.random.default_rng(11)
    counts = {}
    for name, b in (
        ("correct", laplace_gradient_scale(epsilon=eps, steps=steps, sensitivity=delta1)),
        ("no-composition", laplace_gradient_scale(epsilon=eps, steps=1, sensitivity=delta1)),
    ):
        violations = 0
        for r in range(repeats):
            out = rng.laplace(0.0, b, (per_arm, steps))
            inn = delta1 + rng.laplace(0.0, b, (per_arm, steps))
            neg = laplace_log_likelihood_ratio(out, shift=delta1, scale=b).sum(axis=1)
            pos = laplace_log_likelihood_ratio(inn, shift=delta1, scale=b).sum(axis=1)
            e, m = _many_run_bounds(section, upper, neg, pos, level=level, seed=r)
            violations += int(e.value > upper.epsilon or m.value > upper.mu)
        counts[name] = violations
    assert counts["correct"] <= ceiling, counts
    assert counts["no-composition"] > repeats // 2, counts


def test_bad_options_are_config_errors() -> None:
    X, y = _data()
    canary = CanarySetup(
        kind="dirac",
        threat_model="white-box",
        included=np.zeros(2, bool),
        direction=dirac_direction(12, 4),
    )
    settings = TrainerSettings(
        model=ModelSpec(kind="logistic"),
        training=TrainingSpec(epochs=1),
        num_classes=2,
        options={"epsilon": 1.0, "examples": 0.5},
    )
    with pytest.raises(
        ConfigError, match=r"'examples' parameter must be an integer >= 1\. Got 0\.5"
    ):
        gradient_laplace_trainer(
            X, y, np.ones((2, 40), bool), seed=0, canary=canary, settings=settings
        )
    bad_clip = TrainerSettings(
        model=ModelSpec(kind="logistic"),
        training=TrainingSpec(epochs=1),
        num_classes=2,
        options={"epsilon": 1.0, "clip": 0.0},
    )
    with pytest.raises(ConfigError, match=r"'clipping_norm' parameter must be in \(0, inf\]"):
        gradient_laplace_trainer(
            X, y, np.ones((2, 40), bool), seed=0, canary=canary, settings=bad_clip
        )
    with pytest.raises(ConfigError, match=r"needs 'epsilon' in \[dpsgd\]"):
        gradient_laplace_trainer(
            X,
            y,
            np.ones((2, 40), bool),
            seed=0,
            canary=canary,
            settings=TrainerSettings(
                model=ModelSpec(kind="logistic"), training=TrainingSpec(epochs=1), num_classes=2
            ),
        )


PLUGIN = '''
from dpaudit.trainers import gradient_laplace_trainer


def noise_over_twenty(X, y, membership, *, seed, canary, settings):
    """b/20 runs; the claim still states the calibrated ε."""
    return gradient_laplace_trainer(
        X, y, membership, seed=seed, canary=canary, settings=settings, noise_factor=0.05
    )
'''


def test_planted_noise_bug_exits_1(tmp_path: Path) -> None:
    (tmp_path / "gl_bugs.py").write_text(PLUGIN)
    audit = tmp_path / "bug.toml"
    shipped = Path(__file__).resolve().parents[1] / "audits" / "dpsgd-gradient-laplace.toml"
    text = shipped.read_text().replace('"gradient-laplace"', '"gl_bugs:noise_over_twenty"')
    audit.write_text(text.replace("trials = 2000", "trials = 300"))
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(audit), "-q", "-o", str(run)])
    assert result.exit_code == 1, result.output
    data = json.loads((run / "results.json").read_text())
    eps = next(b for b in data["bounds"] if b["parameter"] == "epsilon" and b["in_verdict"])
    assert eps["upper"] == pytest.approx(2.0)
    assert eps["violation"]
