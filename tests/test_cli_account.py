"""Tests for `dpaudit account` through Typer's CliRunner (exit codes included)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dpaudit.cli import app

runner = CliRunner()
MNIST = ["--noise-multiplier", "1.1", "--sampling-rate", "0.004267", "--steps", "14063"]


def test_account_table_mnist():
    res = runner.invoke(app, ["account", *MNIST, "--delta", "1e-5"])
    assert res.exit_code == 0, res.output
    # Abadi et al. 2016 MNIST setting: PLD ε ≈ 2.38, RDP ε ≈ 2.597 (see test_accounting.py)
    assert "2.382" in res.output
    assert "2.59" in res.output
    assert "μ bracket" in res.output


def test_account_json_with_batch_and_epochs():
    # B = 256, N = 60000, 60 epochs ⇒ q = 256/60000 and T = 60·⌊60000/256⌋ = 14040: the
    # engine's (and Opacus' DPDataLoader's) int(1/q) steps per epoch.
    res = runner.invoke(
        app,
        [
            "account",
            "--noise-multiplier", "1.1",
            "--batch-size", "256",
            "--dataset-size", "60000",
            "--epochs", "60",
            "--json",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["steps"] == 14040
    assert out["sampling_rate"] == pytest.approx(256 / 60000)
    assert out["epsilon"]["pld"] == pytest.approx(2.38, abs=0.01)
    assert out["epsilon"]["rdp"] == pytest.approx(2.597, abs=0.005)
    mb = out["mu_bracket"]
    assert mb["low"] <= mb["high"] <= mb["low"] * 1.01


def test_account_full_batch_json():
    res = runner.invoke(
        app,
        ["account", "--noise-multiplier", "5", "--sampling-rate", "1", "--steps", "100", "--json"],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    # exact μ = √T/σ = 2 and ε(2, 1e-5) = 9.9973 (Dong, Roth, Su 2019, Cor. 2.13 and 3.3)
    assert out["epsilon"]["pld"] == pytest.approx(9.9973, abs=0.01)
    assert out["mu_bracket"]["low"] <= 2.0 + 1e-6 <= out["mu_bracket"]["high"] + 1e-6


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--sampling-rate", "1.5", "--steps", "10"], "The 'sampling_rate' parameter must be in"),
        (
            ["--batch-size", "600", "--dataset-size", "500", "--steps", "10"],
            "The 'sampling_rate' parameter must be in",
        ),
        (["--sampling-rate", "0.01", "--steps", "10", "--delta", "0"], "The 'delta' parameter"),
        (["--sampling-rate", "0.01", "--steps", "10", "--delta", "1"], "The 'delta' parameter"),
        (["--sampling-rate", "0.01", "--epochs", "2", "--steps", "3"], "exactly one of --steps"),
        (["--steps", "10"], "Give either --sampling-rate"),
    ],
)
def test_account_bad_input_exit_2(args, match):
    res = runner.invoke(app, ["account", "--noise-multiplier", "1.0", *args])
    assert res.exit_code == 2
    assert match in res.output
    assert "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.parametrize("sigma", ["0", "-1"])
def test_account_nonpositive_sigma_exit_2(sigma):
    res = runner.invoke(
        app, ["account", "--noise-multiplier", sigma, "--sampling-rate", "0.01", "--steps", "5"]
    )
    assert res.exit_code == 2
    assert "The 'noise_multiplier' parameter must be in (0, inf)" in res.output


def test_account_and_engine_agree_on_the_number_of_steps():
    # The recipe on which they once disagreed: B = 64, N = 1000, 10 epochs. The
    # engine runs 10·⌊1000/64⌋ = 150 steps; `dpaudit account` must account the same.
    import numpy as np

    from dpaudit.models import ModelSpec
    from dpaudit.training import DPConfig, TrainingSpec, train_many

    res = runner.invoke(
        app,
        [
            "account", "--noise-multiplier", "1", "--batch-size", "64",
            "--dataset-size", "1000", "--epochs", "10", "--json",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    accounted = json.loads(res.output)["steps"]
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1000, 3)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    spec = TrainingSpec(epochs=10, batch_size=64, learning_rate=0.1, dp=DPConfig(1.0, 1.0))
    result = train_many(
        X, y, np.ones((1, 1000), dtype=bool), model=ModelSpec(kind="logistic"),
        training=spec, seed=0, num_classes=2,
    )  # fmt: skip
    assert result.records[0].steps == accounted == 150


def test_plan_with_a_perfect_attack_gives_the_design_whose_limit_reaches_the_target():
    # A perfect attack at n trials per arm (split, δ = 1e-5) certifies its limit of
    # detection; the plan is the fewest n whose limit reaches 5 (1,100 per arm, with a
    # limit of 5.001 just above the target), and one trial fewer does not reach it.
    from dpaudit.planning import multi_run_limit

    res = runner.invoke(app, ["plan", "--target", "5", "--perfect", "--delta", "1e-5", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    n = plan["trials_per_arm"]
    assert multi_run_limit(n, delta=1e-5, confidence_level=0.95).value >= 5.0
    assert multi_run_limit(n - 1, delta=1e-5, confidence_level=0.95).value < 5.0


def test_plan_needs_a_mechanism_or_perfect():
    res = runner.invoke(app, ["plan", "--target", "1"])
    assert res.exit_code == 2
    assert (
        "Give exactly one of --mechanism-epsilon (Laplace), --mechanism-mu (Gaussian), "
        "--perfect." in " ".join(res.output.split())
    )


def test_plan_one_run_with_a_perfect_attack_is_the_fewest_guesses_whose_limit_reaches():
    # Every guess right: the plan's bound is the one-run limit of detection (Steinke et al.
    # 2023, Thm. 3.1), and two guesses fewer (r stays even) do not reach the target.
    from dpaudit.planning import one_run_limit

    res = runner.invoke(
        app, ["plan", "--design", "one-run", "--target", "5", "--perfect", "--delta", "1e-5",
              "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    plan = json.loads(res.output)
    r = plan["guesses"]
    assert r % 2 == 0
    assert plan["canaries"] == r
    assert plan["expected_value"] == pytest.approx(one_run_limit(r, r, delta=1e-5).value)
    assert one_run_limit(r, r, delta=1e-5).value >= 5.0
    assert one_run_limit(r - 2, r - 2, delta=1e-5).value < 5.0


def test_plan_one_run_refuses_a_file_and_an_accuracy_that_cannot_reach():
    res = runner.invoke(
        app, ["plan", "audits/laplace.toml", "--design", "one-run", "--target", "1",
              "--perfect"],
    )  # fmt: skip
    assert res.exit_code == 2
    assert "planning FILE is for --design multi-run" in res.output
    res = runner.invoke(
        app, ["plan", "--design", "one-run", "--target", "1", "--guess-accuracy", "0.5"]
    )
    assert res.exit_code == 2
    assert "accuracy must be in (0.5, 1]. Got 0.5." in res.output


def test_account_identifies_full_batch_as_exact_gdp_with_its_rho():
    # q = 1, σ = 5, T = 100: exactly μ = √T/σ = 2 GDP, and ρ = T/(2σ²) = 2 zCDP.
    res = runner.invoke(
        app,
        ["account", "--noise-multiplier", "5", "--sampling-rate", "1", "--steps", "100",
         "--identify", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["rho"] == pytest.approx(2.0)
    assert out["identification"]["exact"] is True
    assert out["identification"]["mu"] == pytest.approx(2.0, rel=1e-6)


def test_account_finds_poisson_dpsgd_not_exactly_gdp():
    res = runner.invoke(
        app,
        ["account", "--noise-multiplier", "1", "--sampling-rate", "0.01", "--steps", "1000",
         "--identify", "--json"],
    )  # fmt: skip
    out = json.loads(res.output)
    assert out["rho"] is None  # a subsampled Gaussian has no ρ of this form
    assert out["identification"]["exact"] is False
    assert out["identification"]["mu"] == pytest.approx(out["mu_bracket"]["high"])


def test_plan_sequential_claim_curve_is_the_core_planner() -> None:
    # `dpaudit plan --sequential --dpsgd-sigma` prints what the core planner computes for
    # the same design (seeded, so the two calls agree exactly).
    from dpaudit.sequential.curve import plan_sequential_curve

    design = ["plan", "--sequential", "--target", "0", "--dpsgd-sigma", "1",
              "--sampling-rate", "0.25", "--steps", "8", "--round-trials", "50",
              "--max-trials", "1000", "--repeats", "4", "--confidence-level", "0.9"]  # fmt: skip
    res = runner.invoke(app, [*design, "--run-sigma", "0.5", "--json"])
    assert res.exit_code == 0, res.output
    direct = plan_sequential_curve(
        noise_multiplier=1.0,
        run_noise_multiplier=0.5,
        sampling_rate=0.25,
        steps=8,
        level=0.9,
        round_trials=50,
        max_trials=1000,
        repeats=4,
        seed=0,
    )
    assert json.loads(res.output) == direct.to_dict()
    missing = runner.invoke(app, design)
    assert missing.exit_code == 2
    assert "give --run-sigma (the σ the run really has" in missing.output


def test_account_prints_the_accounting_librarys_statement() -> None:
    # The CLI prints what dpaudit.accounting.statement.account_dpsgd assembles, nothing more:
    # q = 1, σ = 5, T = 100 is DP-GD, ρ = T/(2σ²) = 2 (Bun, Steinke 2016, Prop. 1.6).
    from dpaudit.accounting.statement import account_dpsgd, json_finite

    args = ["--noise-multiplier", "5", "--sampling-rate", "1", "--steps", "100"]
    res = runner.invoke(app, ["account", *args, "--delta", "1e-6", "--json"])
    assert res.exit_code == 0, res.output
    account = account_dpsgd(noise_multiplier=5, sampling_rate=1.0, steps=100, delta=1e-6)
    assert account.rho == pytest.approx(2.0)
    assert json.loads(res.output) == json_finite(account.to_dict())
