"""Weak noise is a finding, never an error: every accountant path survives any σ, q, T.

A run with a tenth of its noise once made `dpaudit run` exit 2 ("The privacy profile must
return values in [0, 1], never NaN."): the PLD profile multiplied e^ε (overflowing past
ε = 709) by a sum that underflowed to 0. These tests hold the accountants (PLD ε, RDP ε,
the μ bracket) to finite-or-infinite values with reasons, ordered brackets and no
exception over σ ∈ [1e-3, 50], q ∈ (0, 1], T ∈ [1, 10⁴].
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from dpaudit import accounting
from dpaudit.accounting.upper_bounds import from_records
from dpaudit.cli import app
from dpaudit.records import DPSGDRecord
from dpaudit.theory import exact_gdp_bracket, gdp_bracket, gdp_delta, gdp_epsilon
from dpaudit.theory.identification import identify_bracket

ISSUE = ["--noise-multiplier", "0.11", "--sampling-rate", "0.04348", "--steps", "69"]

sigmas = st.floats(min_value=-3.0, max_value=math.log10(50.0)).map(lambda x: 10.0**x)
rates = st.one_of(
    st.just(1.0), st.floats(min_value=-6.0, max_value=0.0).map(lambda x: min(1.0, 10.0**x))
)
steps = st.floats(min_value=0.0, max_value=4.0).map(lambda x: round(10.0**x))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(sigma=sigmas, q=rates, t=steps)
@example(sigma=0.11, q=0.04348, t=69)  # the issue's run: σ/10 of an Opacus tutorial
@example(sigma=1e-3, q=1.0, t=10_000)  # exactly 10⁵-GDP: no PLD of it fits in memory
@example(sigma=1e-3, q=0.1, t=10_000)  # losses over 10⁸ nats: too wide for any PLD
@example(sigma=0.01, q=0.9, t=10_000)  # μ beyond the measurement's search
@example(sigma=0.3, q=0.5, t=1000)  # δ(0) = 1 − 2⁻¹⁰⁰⁰: 1 to double precision
@example(sigma=50.0, q=1e-6, t=1)  # almost no privacy loss at all
def test_every_accountant_path_survives_any_run(sigma: float, q: float, t: int) -> None:
    event = accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=t)
    for kind in ("pld", "rdp"):
        eps = accounting.epsilon(event, delta=1e-5, accountant=kind)
        assert not math.isnan(eps)
        assert eps >= 0.0
    pld = accounting.epsilon(event, delta=1e-5)
    if math.isfinite(pld):
        # δ(ε) at the accountant's own ε is the δ asked for (beyond ε = 500 through the
        # logarithmic sums): ε(δ) and δ(ε) are one profile.
        assert accounting.delta(event, epsilon=pld) <= 1e-5 * (1.0 + 1e-6)
    bracket = accounting.mu_bracket(event)
    assert not math.isnan(bracket.low)
    assert not math.isnan(bracket.high)
    assert 0.0 <= bracket.low <= bracket.high
    # The run without subsampling, exactly √T/σ-GDP, bounds every DP-SGD run: μ is
    # never infinite here (full batch is measured on that exact profile, to rtol 1e-3).
    unsampled = math.sqrt(t) / sigma
    assert bracket.bounded
    assert bracket.high <= unsampled * (1.0 + (1e-3 if q == 1.0 else 0.0) + 1e-9)
    if q == 1.0:
        assert bracket.low <= unsampled * (1.0 + 1e-9) <= bracket.high * (1.0 + 2e-9)
    identified = identify_bracket(bracket, source="run")
    assert identified.mu == bracket.high or identified.exact


def test_the_issue_account_command_prints_a_finite_epsilon_and_a_mu_statement() -> None:
    res = CliRunner().invoke(app, ["account", *ISSUE, "--delta", "1e-5", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    # dp-accounting's own PLD of the run, built directly at a 100 times coarser step
    # (1e-2): both its estimates bracket dpaudit's ε, which is an upper bound at a finer
    # step (published in the issue: about 489.9).
    single = {
        pessimistic: privacy_loss_distribution.from_gaussian_mechanism(
            standard_deviation=0.11,
            sampling_prob=0.04348,
            value_discretization_interval=1e-2,
            pessimistic_estimate=pessimistic,
            use_connect_dots=pessimistic,
        ).self_compose(69)
        for pessimistic in (True, False)
    }
    high = single[True].get_epsilon_for_delta(1e-5)
    low = single[False].get_epsilon_for_delta(1e-5)
    assert low <= out["epsilon"]["pld"] <= high
    assert out["epsilon"]["pld"] == pytest.approx(489.9, abs=0.05)
    mb = out["mu_bracket"]
    assert 0.0 < mb["low"] <= mb["high"] < math.sqrt(69) / 0.11
    assert (mb["high"] - mb["low"]) / mb["low"] <= 1e-3
    table = CliRunner().invoke(app, ["account", *ISSUE, "--delta", "1e-5"])
    assert table.exit_code == 0, table.output
    assert "489.90" in table.output
    assert "μ bracket (GDP measurement)" in table.output


def test_an_epsilon_no_accountant_bounds_is_infinite_with_its_reason() -> None:
    # The PLD puts 1e-15 of mass at an infinite loss (its truncated tails): at δ = 1e-20
    # no finite ε holds by it; RDP still gives one.
    res = CliRunner().invoke(app, ["account", *ISSUE, "--delta", "1e-20"])
    assert res.exit_code == 0, res.output
    assert "ε (PLD) = ∞: no finite ε at this δ: δ is below the probability the accountant" in (
        res.output.replace("\n", " ")
    )
    data = json.loads(
        CliRunner().invoke(app, ["account", *ISSUE, "--delta", "1e-20", "--json"]).output
    )
    assert data["epsilon"]["pld"] is None
    assert math.isfinite(data["epsilon"]["rdp"])
    assert "pld" in data["epsilon_reason"]


def test_full_batch_without_a_fitting_pld_is_exact() -> None:
    # σ = 1e-3, T = 10⁴ full batch is exactly √T/σ = 10⁵-GDP (Dong, Roth, Su 2019,
    # Cor. 3.3): its PLD would need 10¹⁴ points; ε, δ and μ come from the closed form.
    event = accounting.dpsgd_event(noise_multiplier=1e-3, sampling_rate=1.0, steps=10_000)
    assert accounting.pld_discretization(event) is None
    assert accounting.epsilon(event, delta=1e-5) == gdp_epsilon(1e5, 1e-5)
    assert accounting.delta(event, epsilon=1e9) == pytest.approx(float(gdp_delta(1e9, 1e5)))
    bracket = accounting.mu_bracket(event)
    assert (bracket.low, bracket.high) == (1e5, 1e5)
    assert bracket == exact_gdp_bracket(1e5)


def test_a_subsampled_run_too_wide_for_a_pld_is_bounded_without_one() -> None:
    event = accounting.dpsgd_event(noise_multiplier=1e-3, sampling_rate=0.1, steps=10_000)
    assert accounting.pld_discretization(event) is None
    rdp = accounting.epsilon(event, delta=1e-5, accountant="rdp")
    unsampled = gdp_epsilon(1e5, 1e-5)
    assert accounting.epsilon(event, delta=1e-5) == min(rdp, unsampled)
    bracket = accounting.mu_bracket(event)
    assert (bracket.low, bracket.high) == (0.0, 1e5)
    assert "too wide for a PLD" in bracket.reason
    assert "√T/σ = 100000" in bracket.reason
    floor = accounting.epsilon_floor(event, delta=1e-5)  # one step bounds it from below
    assert 0.0 < floor <= accounting.epsilon(event, delta=1e-5)


def test_the_profile_beyond_epsilon_500_is_the_direct_sum() -> None:
    event = accounting.dpsgd_event(noise_multiplier=0.11, sampling_rate=0.04348, steps=69)
    acc = accounting._accountant(event, "pld")
    fast = accounting._fast_pld_delta(acc)
    assert fast is not None
    eps = np.array([499.0, 501.0, 600.0, 650.0, 700.0, 740.0, 800.0, 1000.0])
    got = fast(eps)
    # dp-accounting's own loop agrees while e^ε · Σ p e^{−ℓ} keeps its digits (it loses
    # them as e^{−ℓ} turns subnormal: 2e-8 relative at ε = 700, NaN past 709) ...
    below = np.asarray(acc.get_delta(eps[:4]), dtype=float)
    np.testing.assert_allclose(got[:4], below, rtol=1e-12, atol=1e-300)
    # ... and everywhere, δ(ε) = m_∞ + Σ_{ℓ > ε} p (1 − e^{ε − ℓ}) summed directly.
    dist = acc._pld
    for e, value in zip(eps, got, strict=True):
        sums = []
        for pmf in (dist._pmf_remove, dist._pmf_add):
            probs = np.asarray(pmf._probs, dtype=float)
            losses = (np.arange(probs.size) + pmf._lower_loss) * pmf._discretization
            tail = losses > e
            sums.append(
                pmf._infinity_mass + float(np.sum(probs[tail] * -np.expm1(e - losses[tail])))
            )
        assert value == pytest.approx(max(sums), rel=1e-12, abs=1e-300)
    assert np.all(np.diff(got) <= 0)
    assert not np.any(np.isnan(accounting.privacy_profile(event, np.linspace(0, 2000, 101))))


def test_a_profile_that_rounds_to_one_certifies_no_finite_mu_and_says_why() -> None:
    # δ_30(0) = erf(30/(2√2)) is 1 to double precision: the grid cannot bound the cell at 0.
    def profile(e: np.ndarray) -> np.ndarray:
        return np.asarray(gdp_delta(e, 30.0), dtype=float)

    bracket = gdp_bracket(profile, epsilon_max=gdp_epsilon(30.0, 1e-10))
    assert math.isinf(bracket.high)
    # The lower end stays finite; where δ is within ~1e-13 of 1 μ_A keeps only a few
    # digits (30.0002 here), the reason the accountant takes full batch in closed form.
    # 30 up to the PLD's discretisation, whose last digits move with the CPU's FFT kernels
    # (30.00148 on one machine, under 30.001 on another): the bracket's edge, not a bound
    assert 29.99 < bracket.low < 30.01
    assert bracket.reason.startswith("the privacy profile is 1 to double precision at ε = 0 (")
    assert bracket.reason.endswith("so the measurement certifies no finite μ")
    assert len(bracket.grid) == 256  # an unbounded cell is not refined (it stays so)
    assert bracket.to_dict()["reason"] == bracket.reason
    summary = identify_bracket(bracket, source="G_30").summary
    assert summary.startswith("G_30: no finite μ-GDP guarantee is certified (the privacy")
    # The accountant knows the closed form of full batch and answers exactly instead.
    event = accounting.dpsgd_event(noise_multiplier=1.0, sampling_rate=1.0, steps=900)
    assert (accounting.mu_bracket(event).low, accounting.mu_bracket(event).high) == (30.0, 30.0)
    # A finite bracket keeps its JSON as it was: no reason key.
    assert (
        "reason"
        not in accounting.mu_bracket(
            accounting.dpsgd_event(noise_multiplier=1.0, sampling_rate=0.25, steps=8)
        ).to_dict()
    )


def test_records_of_a_weak_run_give_finite_upper_bounds() -> None:
    record = DPSGDRecord(noise_multiplier=0.11, sampling_rate=0.04348, steps=69, clipping_norm=1.0)
    upper = from_records([record], 1e-5)
    assert upper.epsilon == pytest.approx(489.9, abs=0.05)
    assert upper.mu is not None
    assert upper.mu_finite
    assert upper.mu < math.sqrt(69) / 0.11


def test_a_weakly_noised_run_is_audited_not_refused(tmp_path: Path) -> None:
    # The simulated DP-SGD trainer run (and accounted) at σ = 0.1: correct DP-SGD with
    # little noise, so every bound stays below its accountant's: exit 0, never 2.
    shutil.copytree(
        Path(__file__).parent / "plugins_greybox", tmp_path / "plugins_greybox", dirs_exist_ok=True
    )
    path = tmp_path / "weak.toml"
    path.write_text(
        """
[audit]
name = "weak"
kinds = ["dpsgd"]
seed = 0

[dpsgd]
trainer = "plugins_greybox.simulated:dirac_dpsgd"
rows = 100
trials = 50

[dpsgd.training]
epochs = 2
batch_size = 20
learning_rate = 0.5

[dpsgd.training.dp]
noise_multiplier = 0.1
clipping_norm = 1.0

[report]
html = false
""",
        encoding="utf-8",
    )
    res = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "run"), "-q"])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    uppers = {b["parameter"]: b["upper"] for b in data["bounds"] if b["in_verdict"]}
    record = DPSGDRecord(noise_multiplier=0.1, sampling_rate=0.2, steps=10, clipping_norm=1.0)
    assert uppers["epsilon"] == pytest.approx(accounting.epsilon(record, delta=1e-5))
    assert uppers["mu"] == pytest.approx(accounting.mu_bracket(record).high)
    assert math.isfinite(uppers["mu"])


def _composed_points(sigma: float) -> tuple[float, int]:
    """The loss step dpaudit sizes for 8 steps of σ at q = ¼, and how many loss points
    dp-accounting's composed PLD holds at that step."""
    event = accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=0.25, steps=8)
    step = accounting.pld_discretization(event)
    assert step is not None
    composed = privacy_loss_distribution.from_gaussian_mechanism(
        sigma, sampling_prob=0.25, value_discretization_interval=step
    ).self_compose(8)
    return step, len(composed._pmf_remove._probs)


@pytest.mark.parametrize("sigma", [0.5, 0.3, 0.2, 0.1])
def test_a_composed_pld_holds_no_more_points_below_sigma_one(sigma: float) -> None:
    """Memory flat in σ: at q = ¼, T = 8, σ = 1's losses span about 16 nats and keep the
    default step; every smaller σ spans more, gets a wider step, and its composed PLD
    holds no more loss points than σ = 1's (memory follows the points)."""
    step_one, points_one = _composed_points(1.0)
    assert step_one == accounting.DEFAULT_VALUE_DISCRETIZATION_INTERVAL
    step, points = _composed_points(sigma)
    assert step > accounting.DEFAULT_VALUE_DISCRETIZATION_INTERVAL
    assert points <= points_one
