"""``[audit] stopping = "sequential"`` for the dpsgd kind's many-run audits (models arrive
one round at a time), and the power control of the monitored validity test: a correct
mechanism looked at after every round, where the anytime-valid rule holds 1 − c and the
uncorrected rule (stop when the fixed-design bound crosses the claim) does not."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

from dpaudit.audit import run_audit, verify_run
from dpaudit.bounds import epsilon_from_rates, mu_from_rates
from dpaudit.config import load_config_text
from dpaudit.dpsgd.kind import DpsgdKind
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.dpsgd.sequential import plan_rounds
from dpaudit.errors import ConfigError
from dpaudit.kinds.base import RunContext, SequentialSettings
from dpaudit.mechanisms.units import build_mechanism, upper_bound
from dpaudit.sequential import SequentialRule, run_rounds

AUDITS = Path(__file__).resolve().parent.parent / "audits"

# σ = 1 stated, σ/2 run (audits/plugins/halved_noise_dpsgd.py); Poisson q = 8/32, T = 8. At
# σ/3 the claim-curve test decides on the first counted round, leaving no rounds to resume.
VIOLATION = """
[audit]
name = "seq-dpsgd"
kinds = ["dpsgd"]
seed = 0
delta = 1e-5
stopping = "sequential"
round_trials = 50

[dpsgd]
trainer = "plugins.halved_noise_dpsgd:halved_noise"
canary = "dirac"
threat_model = "white-box"
rows = 32
trials = {cap}
options = {{ noise_divisor = 2 }}

[dpsgd.training]
epochs = 2
batch_size = 8
learning_rate = 0.5

[dpsgd.training.dp]
noise_multiplier = 1.0
clipping_norm = 1.0
"""


def _config(cap: int):
    return load_config_text(VIOLATION.format(cap=cap), base_dir=AUDITS, source="test.toml")


def _sequential(result) -> dict:
    return result.tests[0].details["sequential"]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory):
    run = tmp_path_factory.mktemp("fresh") / "run"
    return run, run_audit(_config(2000), output_dir=run)


def test_violation_stops_early_records_its_path_and_verifies(fresh) -> None:
    run, result = fresh
    assert result.privacy_verdict == "violation"
    seq = _sequential(result)
    assert seq["stopped_because"] == "violation"
    # rounds of 50 models per arm; round 0 chose the thresholds
    assert seq["trials_used"]["negative"] == 50 * seq["rounds"] < 2000
    path = seq["path"][seq["decided_by"]]
    assert [p["decision"] for p in path] == ["continue"] * (len(path) - 1) + ["violation"]
    curve = seq["decided_by"] == "claim-curve"  # the claim-curve comparison is an ε row
    decided = next(
        c
        for c in result.comparisons
        if (c.test.endswith("(claim curve)") if curve else c.parameter == seq["decided_by"])
    )
    assert decided.in_verdict
    assert decided.lower.value > decided.upper
    assert decided.lower.method == ("claim-curve-cs" if curve else "beta-binomial-mixture-cs")
    # ε, μ and the claim curve share 0.05
    assert decided.lower.confidence_level == pytest.approx(1 - 0.05 / 3)
    # only the rounds used were trained; verify recomputes the same result from them
    assert result.provenance["units"]["dpsgd"]["computed"] == seq["rounds"]
    assert verify_run(run) == []


def test_resume_after_kill_and_larger_cap_continue_the_same_sequence(fresh, tmp_path: Path) -> None:
    _, first = fresh
    want = _sequential(first)
    run = tmp_path / "run"
    small = run_audit(_config(100), output_dir=run)  # 2 rounds: the cap decides
    assert _sequential(small)["stopped_because"] == "cap"
    # a kill -9 leaves the rounds stored so far and no results.json
    (run / "results.json").unlink()
    again = run_audit(_config(2000), output_dir=run)
    units = again.provenance["units"]["dpsgd"]
    assert units["reused"] == 2  # the capped run's rounds, not trained again
    assert units["computed"] == want["rounds"] - 2
    assert _sequential(again) == want
    # delete the last stored round (killed while it trained): only it is trained again
    last = sorted((p for p in run.rglob("dpsgd-*") if p.is_file()), key=lambda p: p.name)[-1]
    last.unlink() if last.is_file() else shutil.rmtree(last)
    resumed = run_audit(_config(2000), output_dir=run)
    assert resumed.provenance["units"]["dpsgd"]["computed"] == 1
    assert _sequential(resumed) == want


def test_the_verdict_shares_are_fixed_before_any_model_and_one_run_is_refused(
    tmp_path: Path,
) -> None:
    section = _config(500).section("dpsgd")
    ctx = RunContext(
        seed=0,
        confidence_level=0.95,
        delta=1e-5,
        base_dir=AUDITS,
        sequential=SequentialSettings(round_trials=50),
    )
    assert DpsgdKind().comparisons(section, ctx, {}) == 3  # many-run ε, μ, claim curve
    # the cap is not part of the rounds' key: a larger cap finds the same rounds
    small, large = (
        plan_rounds(section, ctx),
        plan_rounds(section.model_copy(update={"trials": 5000}), ctx),
    )
    assert small.key("dpsgd") == large.key("dpsgd")
    assert large.units[: len(small.units)] == small.units
    assert small.spec.unit_size == 100  # 50 models per arm per round
    one_run = DpsgdSection.model_validate(
        {
            **section.model_dump(),
            "trainer": "dpsgd",
            "options": {},
            "one_run": {"canaries": 100, "guesses": 20},
        }
    )
    with pytest.raises(ConfigError, match=r"\[dpsgd.one_run\] is a single training run"):
        DpsgdKind().check_runnable(one_run, ctx)


# ------------------------------------------------------------------- power control


def _rr_rounds(rng: np.random.Generator, p_flip: float, rounds: int, size: int):
    """Randomized response outputs on D (1 w.p. p_flip) and D' (1 w.p. 1 − p_flip)."""
    return [
        (
            (rng.random(size) < p_flip).astype(float),
            (rng.random(size) >= p_flip).astype(float),
        )
        for _ in range(rounds)
    ]


def test_monitored_validity_holds_and_the_uncorrected_rule_fails_it() -> None:
    """Randomized response at ε = 3, claimed ε = 3 (correct, on the claim's boundary),
    c = 0.95 (ε and μ each at 0.975), rounds of 50 per arm looked at up to 1,000 per arm.

    At ε = 3 the ε bound is driven by the FPR limit alone, so one look of the fixed design
    spends nearly its share and 19 looks inflate it past 1 − c: its false-violation rate's
    95% binomial lower limit is above 0.05 (2,000 exact-binomial repeats). The anytime-valid
    rule, the audit's own (dpaudit.sequential.run_rounds), run on 50 repeats (its cost is
    the bisections of every round), has its rate's lower limit at or below 0.05 and at most
    the Binomial(50, 0.05) 0.999 quantile of false violations; benchmarks/sequential.py
    ``control`` runs 1,000."""
    eps, c, size, looks = 3.0, 0.95, 50, 19
    level = 1 - (1 - c) / 2
    p_flip = 1.0 / (1.0 + np.exp(eps))
    from dpaudit.mechanisms.schema import MechanismSection

    sec = MechanismSection(
        name="randomized-response", p=1 - p_flip, trials=1000, claim={"epsilon": eps}
    )
    up = upper_bound(sec, build_mechanism(sec, "."), 0.0)
    assert up.epsilon == pytest.approx(eps)
    assert up.mu is not None
    # the uncorrected rule: Clopper–Pearson limits at 1 − (1 − level)/2 after every round
    repeats_u = 2000
    rng = np.random.default_rng(11)
    fp = rng.binomial(size, p_flip, (repeats_u, looks)).cumsum(axis=1)
    fn = rng.binomial(size, p_flip, (repeats_u, looks)).cumsum(axis=1)
    n = np.broadcast_to(size * np.arange(1, looks + 1), fp.shape)
    rate = 1 - (1 - level) / 2
    fh = special.betaincinv(fp + 1.0, n - fp, rate)
    nh = special.betaincinv(fn + 1.0, n - fn, rate)
    crossed = (epsilon_from_rates(fh, nh, delta=0.0) > up.epsilon) | (mu_from_rates(fh, nh) > up.mu)
    unc = int(crossed.any(axis=1).sum())
    assert stats.beta.ppf(0.05, unc, repeats_u - unc + 1) > 1 - c, unc
    # the anytime-valid rule on the same law
    rules = {
        "epsilon": SequentialRule("epsilon", 0.0, level, upper=up.epsilon, tuned_trials=1000),
        "mu": SequentialRule("mu", 0.0, level, upper=up.mu, tuned_trials=1000),
    }
    repeats_s = 50
    rng = np.random.default_rng(12)
    false = 0
    for _ in range(repeats_s):
        result = run_rounds(
            _rr_rounds(rng, p_flip, looks + 1, size),
            rules,
            entered={"epsilon": True, "mu": True},
            last_round=looks,
        )
        false += result.decision == "violation"
    assert false <= stats.binom.ppf(0.999, repeats_s, 1 - c)
    assert false == 0 or stats.beta.ppf(0.05, false, repeats_s - false + 1) <= 1 - c
