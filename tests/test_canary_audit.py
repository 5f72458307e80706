"""The dpsgd canary audit: tightness on exact GDP, planted bugs, validity, one run, errors.

Planted-bug trainers live here and are loaded through the user-trainer protocol
("test_canary_audit:<function>", this folder as base_dir), so the tests also exercise
that protocol end to end.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpaudit import theory
from dpaudit.bounds import one_run_guesses
from dpaudit.dpsgd.api import run_dpsgd_from_section
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.errors import ConfigError
from dpaudit.mechanisms.noise import Claim
from dpaudit.records import DPSGDRecord
from dpaudit.trainers import TrainerOutput, dpgd_trainer, output_perturbation_models
from dpaudit.trainers.engine import _engine_train
from dpaudit.trainers.perturbation import _linear_stack
from dpaudit.training import DPConfig

HERE = Path(__file__).parent

# Full-batch DP-GD, T = 10 steps, σ = √T/μ with μ = 1: exactly 1-GDP, ε(1e-5) = 4.377.
DPGD = {
    "trainer": "dpgd",
    "canary": "dirac",
    "threat_model": "white-box",
    "rows": 50,
    "training": {"epochs": 10, "learning_rate": 0.5, "dp": {"target_mu": 1.0}},
}


def _run(section: dict, tmp_path: Path, *, seed: int = 0, trials: int = 400, **kw):
    return run_dpsgd_from_section(
        {**section, "trials": trials},
        seed=seed,
        run_dir=tmp_path / f"run{seed}",
        base_dir=HERE,
        **kw,
    )


def _verdict(outcome) -> str:
    return "violation" if any(c.violation for c in outcome.comparisons) else "consistent"


# ------------------------------------------------------------------- planted-bug trainers


def _with_records(out: TrainerOutput, **changes) -> TrainerOutput:
    records = tuple(replace(r, **changes) for r in out.records)
    return replace(out, records=records)


def skip_clipping_trainer(X, y, membership, *, seed, canary, settings):
    """Bug: per-example gradients are not clipped (clip 1000·C), noise σ·C as claimed."""
    dp = settings.training.dp
    big = 1000.0 * dp.clipping_norm
    training = replace(
        settings.training,
        full_batch=True,
        dp=DPConfig(
            noise_multiplier=dp.noise_multiplier * dp.clipping_norm / big, clipping_norm=big
        ),
    )
    scores, models, records = _engine_train(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=training
    )
    out = TrainerOutput(scores=scores, models=models, records=records)
    return _with_records(out, noise_multiplier=dp.noise_multiplier, clipping_norm=dp.clipping_norm)


def weak_noise_trainer(X, y, membership, *, seed, canary, settings):
    """Bug: noise σ/10 while the record claims σ."""
    dp = settings.training.dp
    training = replace(
        settings.training,
        full_batch=True,
        dp=DPConfig(noise_multiplier=dp.noise_multiplier / 10, clipping_norm=dp.clipping_norm),
    )
    scores, models, records = _engine_train(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=training
    )
    out = TrainerOutput(scores=scores, models=models, records=records)
    return _with_records(out, noise_multiplier=dp.noise_multiplier)


def one_step_accountant_trainer(X, y, membership, *, seed, canary, settings):
    """Bug: the training is right, the accounting claims the ε of ONE step."""
    out = dpgd_trainer(X, y, membership, seed=seed, canary=canary, settings=settings)
    return _with_records(out, steps=1)


def correct_dpgd_as_user_trainer(X, y, membership, *, seed, canary, settings):
    """The built-in DP-GD through the user protocol, returned as a dict."""
    out = dpgd_trainer(X, y, membership, seed=seed, canary=canary, settings=settings)
    return {"scores": out.scores, "records": out.records}


def output_perturbation_without_1_over_n(X, y, membership, *, seed, canary, settings):
    """Bug: the objective sums the losses (1/n left out), so the sensitivity is 2/λ while
    the noise is calibrated for 2/(nλ) (Chaudhuri et al. 2011, Cor. 8)."""
    eps, lam = float(settings.options["epsilon"]), float(settings.options["lam"])
    w = output_perturbation_models(
        X,
        y,
        membership,
        epsilon=eps,
        lam=lam,
        seed=seed,
        model_offset=settings.model_offset,
        average=False,
    )
    return TrainerOutput(models=_linear_stack(w, X.shape[1]), claim=Claim(epsilon=eps))


# ---------------------------------------------------------------------- exact GDP, DP-GD


def test_dpgd_white_box_dirac_mu_bound_near_exact_gdp(tmp_path):
    # The score is exactly N(T·C/n, T·σ²C²/n²) vs N(0, ·): a Gaussian test with μ = 1.
    # With 1000 trials per arm (500 counted after the split) and c_each = 0.975, the
    # one-sided Clopper–Pearson limits on FPR, FNR ≈ 0.3 each sit ≈ 0.05 above the rates,
    # costing ≈ 0.3 in μ; the point estimate's standard error is ≈ 0.1, so
    # 0.4 < μ_LB ≤ 1 holds except with probability far below 1e-3.
    out = _run(DPGD, tmp_path, trials=1000)
    eps, mu, implied, curve = out.comparisons  # curve: the claim-curve test
    assert curve.in_verdict
    assert curve.lower.method == "claim-curve"
    assert mu.upper == pytest.approx(1.0, rel=1e-9)
    assert eps.upper == pytest.approx(theory.gdp_epsilon(1.0, 1e-5), rel=1e-9)
    assert 0.4 < mu.lower.value <= 1.0
    assert implied.lower.validity == "assumes-gdp"
    assert not implied.in_verdict
    assert _verdict(out) == "consistent"


def test_dpgd_white_box_scores_are_the_gaussian_of_exact_gdp(tmp_path):
    # Scores/Σ: standardised by the known noise std √T·σC/n, the two arms are N(0, 1) and
    # N(μ, 1) with μ = √T/σ = 1. Kolmogorov–Smirnov at level 1e-3 on 1000 per arm.
    from dpaudit.dpsgd.schema import DpsgdSpec
    from dpaudit.dpsgd.units import dpsgd_unit

    # The plain sum (score = "sum"); tests/test_whitebox_lr.py checks the likelihood ratio.
    section = DpsgdSection.model_validate({**DPGD, "trials": 1000, "score": "sum"})
    cfg = DpsgdSpec(section=section, seed=3, unit_size=2000, base_dir=str(HERE))
    unit = dpsgd_unit(cfg, "dpsgd-00000")
    n, steps, sigma = 50, 10, math.sqrt(10)
    z = unit["scores"] / (math.sqrt(steps) * sigma / n)
    inc = unit["included"]
    assert stats.kstest(z[~inc], "norm").pvalue > 1e-3
    assert stats.kstest(z[inc] - 1.0, "norm").pvalue > 1e-3


# --------------------------------------------------------------------------- planted bugs


AUDITS = Path(__file__).resolve().parent.parent / "audits"


def _run_shipped_example(name: str, trainer: str | None, tmp_path: Path) -> int:
    """`dpaudit run` on a shipped example (its own trials), optionally with another trainer."""
    from typer.testing import CliRunner

    from dpaudit.cli import app

    text = (AUDITS / f"{name}.toml").read_text()
    if trainer is not None:
        lines = [
            f'trainer = "{trainer}"' if line.startswith("trainer = ") else line
            for line in text.splitlines()
        ]
        text = "\n".join(lines) + "\n"
    (tmp_path / "plugins").symlink_to(AUDITS / "plugins")
    audit = tmp_path / f"{name}.toml"
    audit.write_text(text)
    result = CliRunner().invoke(app, ["run", str(audit), "-q", "-o", str(tmp_path / "run")])
    return result.exit_code


@pytest.mark.parametrize(
    ("example", "trainer", "exit_code"),
    [
        # the shipped examples with their correct trainers are consistent ...
        ("dpsgd-user-trainer", None, 0),
        ("dpsgd-output-perturbation", None, 0),
        # ... and the same audits catch each planted bug (exit 1: violation)
        ("dpsgd-user-trainer", "test_canary_audit:skip_clipping_trainer", 1),
        ("dpsgd-user-trainer", "test_canary_audit:weak_noise_trainer", 1),
        ("dpsgd-user-trainer", "test_canary_audit:one_step_accountant_trainer", 1),
        ("dpsgd-output-perturbation", "test_canary_audit:output_perturbation_without_1_over_n", 1),
    ],
)
def test_shipped_examples_catch_planted_bugs(example, trainer, exit_code, tmp_path):
    assert _run_shipped_example(example, trainer, tmp_path) == exit_code


def test_correct_dpgd_through_user_protocol_is_consistent(tmp_path):
    section = {**DPGD, "trainer": "test_canary_audit:correct_dpgd_as_user_trainer"}
    section["training"] = {**DPGD["training"], "full_batch": True}
    out = _run(section, tmp_path, trials=300)
    assert _verdict(out) == "consistent"
    assert out.comparisons[1].lower.value > 0.2  # the signal is there, below μ = 1


OUTPUT_PERTURBATION = {
    "trainer": "output-perturbation",
    "canary": "clipbkd",
    "threat_model": "black-box",
    "rows": 100,
    "normalize": True,
    "zero_features": 1,
    "options": {"epsilon": 1.0, "lam": 0.1},
}


def test_output_perturbation_correct_is_consistent(tmp_path):
    out = _run(OUTPUT_PERTURBATION, tmp_path, trials=300)
    assert out.comparisons[0].upper == 1.0
    assert out.comparisons[1].upper == pytest.approx(theory.mu_from_pure_dp(1.0))
    assert _verdict(out) == "consistent"


# ---------------------------------------------------------------- Poisson DP-SGD validity


DPSGD_WHITE = {
    "trainer": "dpsgd",
    "canary": "dirac",
    "threat_model": "white-box",
    "rows": 100,
    "training": {
        "epochs": 2,
        "batch_size": 25,
        "learning_rate": 0.5,
        "dp": {"noise_multiplier": 0.8},
    },
}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_poisson_dpsgd_white_box_never_violates(tmp_path, seed):
    out = _run(DPSGD_WHITE, tmp_path, seed=seed, trials=300)
    assert _verdict(out) == "consistent"
    assert out.comparisons[0].upper > 0  # accountant ε from the engine's records


def test_poisson_dpsgd_black_box_mislabeled_is_consistent(tmp_path):
    section = {
        **DPSGD_WHITE,
        "canary": "mislabeled",
        "threat_model": "black-box",
        "training": {
            "epochs": 2,
            "batch_size": 25,
            "learning_rate": 0.5,
            "dp": {"noise_multiplier": 0.5},
        },
    }
    out = _run(section, tmp_path, trials=100)
    assert _verdict(out) == "consistent"
    # The arms ran q = 25/100 (out) and 25/101 (in): the larger ε of the two is held.
    records = out.tests[0].details["dpsgd"]["upper_bound"]["records"]
    assert {r["sampling_rate"] for r in records} == {25 / 100, 25 / 101}


# ------------------------------------------------------------------------------ one run


def test_one_run_guesses_count_top_and_bottom():
    scores = np.array([5.0, -1.0, 3.0, 0.0, -2.0, 4.0])
    included = np.array([True, False, False, True, False, True])
    # Bottom 2: indices 4, 1 (both out: correct); top 2: indices 5, 0 (both in: correct).
    assert one_run_guesses(scores, included, guesses_per_side=2) == (4, 4)
    assert one_run_guesses(scores, ~included, guesses_per_side=2) == (4, 0)


def test_one_run_weak_noise_is_detected_and_correct_engine_is_consistent(tmp_path):
    section = {**DPSGD_WHITE, "trials": 0, "one_run": {"canaries": 400, "guesses": 40}}
    out = run_dpsgd_from_section(section, seed=0, run_dir=tmp_path / "a")
    # ε first; the one run's f-DP μ bound follows it (dpaudit.dpsgd.one_run)
    one = out.comparisons[0]
    assert one.parameter == "epsilon"
    assert one.lower.validity == "rigorous-one-run"
    assert not one.violation
    # Same run with σ = 0.2: a canary (C per sampled step, ≈ 2 of 8 steps) stands far above
    # the noise (σ·C·√8 ≈ 0.57), so nearly every guess is right and the bound is higher.
    weak = {**section, "training": {**DPSGD_WHITE["training"], "dp": {"noise_multiplier": 0.2}}}
    strong = run_dpsgd_from_section(weak, seed=0, run_dir=tmp_path / "b").comparisons[0]
    assert strong.lower.counts["correct"] >= 36
    assert strong.lower.value > one.lower.value


# ------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("section", "match"),
    [
        ({"trainer": "sgd"}, "unknown trainer 'sgd'; allowed: dpsgd, dpgd"),
        ({"canary": "dirac", "threat_model": "black-box"}, "observed white-box"),
        ({"trainer": "dpgd"}, "needs \\[dpsgd.training.dp\\]"),
        (
            {"trainer": "output-perturbation", "canary": "ood", "threat_model": "black-box"},
            "needs options",
        ),
        ({**DPGD, "trials": 0}, "'trials' > 0"),
        ({"bogus": 1}, "unknown key 'dpsgd.bogus'; allowed keys: dataset, "),
    ],
)
def test_bad_sections_are_config_errors(tmp_path, section, match):
    with pytest.raises(ConfigError, match=match):
        run_dpsgd_from_section(section, seed=0, run_dir=tmp_path)


def test_section_is_frozen_and_forbids_extra():
    s = DpsgdSection.model_validate(DPGD)
    with pytest.raises(ValueError, match="frozen"):
        s.trials = 3  # type: ignore[misc]
    assert isinstance(DPGD, dict)
    assert DpsgdSection.model_validate(DPGD).trainer == "dpgd"


def test_records_of_the_engine_are_what_ran(tmp_path):
    from dpaudit.dpsgd.schema import DpsgdSpec
    from dpaudit.dpsgd.units import dpsgd_unit

    section = DpsgdSection.model_validate({**DPSGD_WHITE, "trials": 2})
    cfg = DpsgdSpec(section=section, seed=0, unit_size=10, base_dir=str(HERE))
    unit = dpsgd_unit(cfg, "dpsgd-00000")
    assert unit["steps"].tolist() == [2 * (100 // 25)] * 4
    assert unit["noise_multiplier"].tolist() == [0.8] * 4
    assert DPSGDRecord  # record type used by the trainers


def test_mu_bound_against_a_bracket_with_a_tail_uses_inflated_rates(tmp_path, monkeypatch):
    # The μ bracket of Poisson DP-SGD holds for ε up to where δ = 1e-10 and leaves a tail
    # δ ≤ t beyond; the trade-off curve is then only ≥ G_high(α + t) − t. Force a large t
    # to see the correction: the μ lower bound must come from FPR_hi + t and FNR_hi + t.
    from dpaudit.accounting import upper_bounds
    from dpaudit.bounds import mu_from_rates

    upper_bounds._poisson_mu_high.cache_clear()
    monkeypatch.setattr(upper_bounds, "_poisson_mu_high", lambda sigma, q, steps: (1.5, 0.05))
    out = _run(DPSGD_WHITE, tmp_path, trials=400)
    mu = next(c for c in out.comparisons if c.parameter == "mu")
    assert mu.upper == 1.5
    assert mu.lower.details["bracket_tail_delta"] == 0.05
    assert mu.lower.value == pytest.approx(
        float(mu_from_rates(mu.lower.fpr.high + 0.05, mu.lower.fnr.high + 0.05))
    )
    assert mu.lower.value < float(mu_from_rates(mu.lower.fpr.high, mu.lower.fnr.high))


def test_a_trainer_can_claim_rho_zcdp(tmp_path: Path) -> None:
    # A user trainer stating ρ-zCDP instead of records: full-batch DP-GD with σ = √T/μ
    # is exactly μ-GDP and ρ = μ²/2 zCDP (Bun, Steinke 2016, Prop. 1.6); the kind holds the
    # claim as (ρ + 2√(ρ ln(1/δ)), δ)-DP at the audit's δ (Prop. 1.3), with no μ bound.
    import json
    import math

    from dpaudit.audit import run_audit
    from dpaudit.theory import zcdp_to_dp

    (tmp_path / "rho_trainer.py").write_text(
        "from plugins.my_trainer import noisy_gradient_descent\n\n"
        "def train(X, y, membership, *, seed, canary, settings):\n"
        "    out = noisy_gradient_descent(X, y, membership, seed=seed, canary=canary,"
        " settings=settings)\n"
        "    return {'scores': out['scores'], 'claim': {'rho': 0.5}}\n",
        encoding="utf-8",
    )
    source = (Path(__file__).resolve().parents[1] / "audits" / "dpsgd-user-trainer.toml").read_text(
        encoding="utf-8"
    )
    (tmp_path / "plugins").symlink_to(Path(__file__).resolve().parents[1] / "audits" / "plugins")
    audit = tmp_path / "rho.toml"
    audit.write_text(
        source.replace('"plugins.my_trainer:noisy_gradient_descent"', '"rho_trainer:train"'),
        encoding="utf-8",
    )
    run_audit(audit, output_dir=tmp_path / "run")
    data = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    eps = [b for b in data["bounds"] if b["parameter"] == "epsilon" and b["in_verdict"]]
    assert eps[0]["upper"] == pytest.approx(zcdp_to_dp(0.5, 1e-5))
    assert eps[0]["upper"] == pytest.approx(0.5 + 2 * math.sqrt(0.5 * math.log(1e5)))
    # zCDP implies no μ-GDP bound: no μ comparison in the verdict.
    assert not [b for b in data["bounds"] if b["parameter"] == "mu" and b["in_verdict"]]
    assert data["verdict"] == "pass"


def test_a_rho_claim_is_alone_and_needs_a_positive_delta() -> None:
    from dpaudit.accounting.upper_bounds import from_claim
    from dpaudit.mechanisms.noise import Claim

    with pytest.raises(ValueError, match=r"a claim gives 'rho' \(zCDP\) alone"):
        from_claim(Claim(epsilon=1.0, rho=0.5), 1e-5)
    with pytest.raises(ValueError, match=r"must then be > 0; got delta = 0\.0"):
        from_claim(Claim(rho=0.5), 0.0)
    upper = from_claim(Claim(rho=0.5), 1e-6)
    assert (upper.epsilon_delta, upper.mu) == (1e-6, None)
    assert upper.detail == {"claim": {"epsilon": None, "delta": 0.0, "mu": None, "rho": 0.5}}
