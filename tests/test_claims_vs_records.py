"""A stated claim held against the accountant of what ran
(dpaudit.accounting.upper_bounds.check_claim).

The check reads the records alone, so it decides from one model per arm and cannot fail
by chance: a claim below what ran allows fails, through `dpaudit run` (exit 1, its own
line), and takes no share of the verdict's budget.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpaudit import accounting
from dpaudit.accounting.upper_bounds import Claim, check_claim
from dpaudit.records import DPSGDRecord
from dpaudit.theory import full_batch_zcdp, gdp_epsilon, zcdp_to_dp

# A user trainer that runs σ/5 of the noise it was asked for, says so in its records, and
# claims the ε of the σ it was asked for (``honest = true``: the ε of what it ran).
TRAINER = """
import numpy as np

from dpaudit import accounting
from dpaudit.records import DPSGDRecord


def weak(X, y, membership, *, seed, canary, settings):
    dp = settings.training.dp
    asked, clip = dp.noise_multiplier, dp.clipping_norm
    ran = asked / 5.0
    k, n = membership.shape[0], int(membership.sum(axis=1).min())
    q = settings.training.batch_size / n
    steps = settings.training.epochs * (n // settings.training.batch_size)
    included = np.asarray(canary.included, dtype=bool)
    scores = np.zeros(k)
    for i in range(k):
        rng = np.random.default_rng([seed, settings.model_offset + i])
        sampled = included[i] & (rng.random(steps) < q)
        scores[i] = float((rng.normal(0.0, ran * clip, steps) + clip * sampled).sum())
    records = [
        DPSGDRecord(noise_multiplier=ran, sampling_rate=q, steps=steps, clipping_norm=clip)
        for _ in range(k)
    ]
    sigma = ran if settings.options.get("honest", False) else asked
    claimed = accounting.dpsgd_epsilon(
        noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=1e-5
    )
    return {"scores": scores, "records": records, "claim": {"epsilon": claimed, "delta": 1e-5}}
"""


def _audit(tmp_path: Path, *, honest: bool, trials: int = 1) -> Path:
    package = tmp_path / "claimed_trainer"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "weak.py").write_text(TRAINER, encoding="utf-8")
    path = tmp_path / "audit.toml"
    # 460 rows, batches of 20: q = 20/460 = 0.0435, 3 epochs of 23 steps = 69 steps;
    # asked σ = 1.1 (ε = 2.15 at δ = 1e-5), run σ = 0.22.
    path.write_text(
        f"""
[audit]
name = "claims"
kinds = ["dpsgd"]
seed = 0

[dpsgd]
trainer = "claimed_trainer.weak:weak"
rows = 460
trials = {trials}
options = {{ honest = {str(honest).lower()} }}

[dpsgd.training]
epochs = 3
batch_size = 20
learning_rate = 0.5

[dpsgd.training.dp]
noise_multiplier = 1.1
clipping_norm = 1.0

[report]
html = false
""",
        encoding="utf-8",
    )
    return path


def _run(tmp_path: Path, path: Path):
    from dpaudit.cli import app

    return CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "run"), "--quiet"])


def test_a_claim_for_the_noise_asked_fails_from_one_model_per_arm(tmp_path: Path) -> None:
    out = _run(tmp_path, _audit(tmp_path, honest=False))
    assert out.exit_code == 1, out.output
    fails = [line for line in out.stderr.splitlines() if line.startswith("FAIL ")]
    assert len(fails) == 1, out.output
    claimed = accounting.dpsgd_epsilon(
        noise_multiplier=1.1, sampling_rate=20 / 460, steps=69, delta=1e-5
    )
    ran = accounting.dpsgd_epsilon(
        noise_multiplier=0.22, sampling_rate=20 / 460, steps=69, delta=1e-5
    )
    assert 2.1 < claimed < 2.2
    assert 100 < ran < 110
    # The run's losses span more than 100 nats, so its PLDs are built on a wider step
    # (accounting.WIDE_PLD_POINTS): the optimistic floor, a lower estimate below ε, is
    # 107.16 here (ε 107.22), and the line adds "(at least …)" only where the two differ
    # in their 4th digit, which the last bits of numpy's exp and log (CPU-dependent SIMD
    # paths) decide at 107.15: the floor is read from the accountant, not assumed.
    floor = accounting.epsilon_floor(
        accounting.dpsgd_event(noise_multiplier=0.22, sampling_rate=20 / 460, steps=69),
        delta=1e-5,
    )
    assert 107.0 < floor < ran
    at_least = "" if f"{floor:.4g}" == f"{ran:.4g}" else f" (at least {floor:.4g})"
    said = (
        f"the claim states ε = {claimed:.4g} at δ = 1e-05; what ran (σ 0.22, q 0.0435, 69 "
        f"steps) has ε = {ran:.4g} at that δ by the PLD accountant{at_least}, so the claim "
        "does not hold"
    )
    assert fails[0] == f"FAIL claim_vs_records: {said} (deterministic)"
    # The verdict's words name this check, not a bound above its upper bound.
    import json

    data = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    assert data["privacy_verdict"] == "violation"
    assert [f["kind"] for f in data["findings"]] == ["claim"]
    assert data["headline"].startswith(f"The claim does not cover what ran: {said} (read from")


def test_the_honest_claim_passes_from_one_model_per_arm(tmp_path: Path) -> None:
    import json

    out = _run(tmp_path, _audit(tmp_path, honest=True))
    assert out.exit_code == 0, out.output
    data = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["claim_vs_records"]["status"] == "passed"
    assert "covers what ran" in checks["claim_vs_records"]["message"]
    # No canary bound from one model per arm: the warning says so, the gate still decides.
    assert data["bounds"] == []
    assert any("too few for any canary bound" in w for w in data["warnings"])
    assert checks["fail_on_violation"]["passed"]
    assert data["findings"] == []


def test_the_check_takes_no_share_of_the_budget(tmp_path: Path) -> None:
    from dpaudit.audit import run_audit

    result = run_audit(_audit(tmp_path, honest=False, trials=20), output_dir=tmp_path / "run")
    checks = {c.name: c for c in result.checks}
    assert checks["claim_vs_records"].status == "failed"
    assert not checks["claim_vs_records"].spends_budget
    # ε, μ and the claim curve of the canary and no more: grey-box checks are not
    # evaluated (no observations) and the claim check is deterministic.
    assert result.provenance["verdict_budget"]["comparisons"] == 3
    assert result.privacy_verdict == "violation"
    assert result.verdict == "fail"


# ------------------------------------------------------------------------- check_claim


def _poisson(sigma: float, q: float = 0.25, steps: int = 8) -> DPSGDRecord:
    return DPSGDRecord(noise_multiplier=sigma, sampling_rate=q, steps=steps, clipping_norm=1.0)


def _full(sigma: float, steps: int) -> DPSGDRecord:
    return DPSGDRecord(
        noise_multiplier=sigma,
        sampling_rate=1.0,
        steps=steps,
        clipping_norm=1.0,
        sampling="full-batch",
    )


def test_an_epsilon_claim_is_held_at_its_own_delta() -> None:
    record = _poisson(1.0)
    pld = accounting.epsilon(record, delta=1e-6)
    floor = accounting.epsilon_floor(record, delta=1e-6)
    # the optimistic PLD rounds every loss down: at most the pessimistic one, and close
    assert floor <= pld <= floor + 0.01
    above = check_claim(Claim(epsilon=pld * 1.001, delta=1e-6), [record], delta=1e-5)
    below = check_claim(Claim(epsilon=pld * 0.5, delta=1e-6), [record], delta=1e-5)
    between = check_claim(Claim(epsilon=(floor + pld) / 2, delta=1e-6), [record], delta=1e-5)
    assert above is not None
    assert below is not None
    assert between is not None
    assert above.holds
    assert below.holds is False
    assert between.holds
    assert "not refuted" in between.message
    assert below.floor == pytest.approx(floor)
    assert below.ran == pytest.approx(pld)
    assert below.delta == 1e-6


def test_every_model_must_meet_the_claim() -> None:
    # Two arms that ran different q: the weaker (larger q) decides.
    strong, weak = _poisson(1.0, q=0.1), _poisson(1.0, q=0.3)
    stated = accounting.epsilon(strong, delta=1e-5) * 1.01
    found = check_claim(Claim(epsilon=stated, delta=1e-5), [strong, weak, strong], delta=1e-5)
    assert found is not None
    assert not found.holds
    assert found.record.sampling_rate == 0.3


def test_full_batch_claims_are_held_against_closed_forms() -> None:
    record = _full(2.0, 16)  # exactly √16/2 = 2-GDP and 16/(2·4) = 2-zCDP
    assert full_batch_zcdp(noise_multiplier=2.0, steps=16) == 2.0
    mu = check_claim(Claim(mu=16**0.5 / 2.0), [record], delta=1e-5)
    assert mu is not None
    assert mu.holds
    assert mu.ran == 2.0
    low = check_claim(Claim(mu=1.99), [record], delta=1e-5)
    assert low is not None
    assert not low.holds
    assert low.message == (
        "the claim states μ = 1.99; what ran (σ 2, full batch, 16 steps) has μ = 2 exactly, "
        "so the claim does not hold"
    )
    rho = check_claim(Claim(rho=1.9), [record], delta=1e-5)
    assert rho is not None
    assert not rho.holds
    assert rho.floor == 2.0
    eps = gdp_epsilon(2.0, 1e-5)
    assert check_claim(Claim(epsilon=eps, delta=1e-5), [record], delta=1e-5).holds  # type: ignore[union-attr]
    short = check_claim(Claim(epsilon=eps * 0.99, delta=1e-5), [record], delta=1e-5)
    assert short is not None
    assert not short.holds
    assert short.ran == pytest.approx(eps)


def test_a_rho_claim_on_a_subsampled_run_is_held_through_its_epsilon() -> None:
    record = _poisson(1.0)
    pld = accounting.epsilon(record, delta=1e-5)

    # ρ whose (ε, δ) conversion is half the PLD ε: false; twice: covered
    def rho_for(eps: float) -> float:
        return (math.sqrt(math.log(1e5) + eps) - math.sqrt(math.log(1e5))) ** 2

    assert zcdp_to_dp(rho_for(3.0), 1e-5) == pytest.approx(3.0)
    false = check_claim(Claim(rho=rho_for(pld / 2)), [record], delta=1e-5)
    true = check_claim(Claim(rho=rho_for(pld * 2)), [record], delta=1e-5)
    assert false is not None
    assert not false.holds
    assert false.parameter == "rho"
    assert true is not None
    assert true.holds


def test_a_pure_claim_never_covers_gaussian_noise() -> None:
    found = check_claim(Claim(epsilon=50.0, delta=0.0), [_poisson(5.0)], delta=1e-5)
    assert found is not None
    assert not found.holds
    assert "ε-DP at δ = 0 for no finite ε" in found.message


def test_a_claim_of_nothing_is_not_checked() -> None:
    assert check_claim(Claim(epsilon=math.inf), [_poisson(1.0)], delta=1e-5) is None


def test_a_mu_claim_on_a_subsampled_run() -> None:
    record = _poisson(1.0)
    bracket = accounting.mu_bracket(record)
    floor = accounting.mu_floor(record)
    assert floor <= bracket.low * (1 + 1e-9)
    assert bracket.low - floor < 0.01  # T = 8: the optimistic rounding costs little
    assert check_claim(Claim(mu=bracket.high), [record], delta=1e-5).holds  # type: ignore[union-attr]
    assert not check_claim(Claim(mu=floor * 0.9), [record], delta=1e-5).holds  # type: ignore[union-attr]


def test_the_opacus_loop_run_at_a_tenth_of_its_noise_exits_1(tmp_path: Path) -> None:
    # The shipped Opacus loop with σ/10 while the audit file keeps its model card's claim
    # (ε = 5.47 at δ = 1e-5): what ran has ε of several hundred, so the claim fails from
    # the records alone, as a finding ("what ran ... has ε = ..."), never as bad input.
    import re
    import shutil

    from typer.testing import CliRunner

    from dpaudit.cli import app

    root = Path(__file__).resolve().parent.parent / "audits"
    # A package name of its own: the shipped `plugins` may already be imported in this
    # process (one process runs many tests; the CLI runs one audit per process).
    shutil.copytree(root / "plugins", tmp_path / "plugins_sigma_tenth")
    loop = tmp_path / "plugins_sigma_tenth" / "opacus_loop.py"
    text = loop.read_text()
    assert "noise_multiplier=1.0," in text
    loop.write_text(text.replace("noise_multiplier=1.0,", "noise_multiplier=0.1,"))
    audit = tmp_path / "opacus.toml"
    text = (root / "opacus.toml").read_text().replace("trials = 100", "trials = 2")
    audit.write_text(
        text.replace('"plugins.opacus_loop:train"', '"plugins_sigma_tenth.opacus_loop:train"')
    )
    result = CliRunner().invoke(app, ["run", str(audit), "-q", "-o", str(tmp_path / "run")])
    assert result.exit_code == 1, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("FAIL claim_vs_records")]
    assert re.search(r"the claim states ε = 5\.47 at δ = 1e-05; what ran \(σ 0\.1, ", line), line
    assert "so the claim does not hold" in line
