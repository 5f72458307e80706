"""Gaussian mechanisms calibrated to (ε, δ) ("classic" or "exact") and ρ-zCDP claims."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpaudit.audit import run_audit
from dpaudit.bounds import epsilon_lower_bound
from dpaudit.config import parse_config
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.mechanisms.noise import gaussian_calibrated
from dpaudit.mechanisms.schema import MechanismSection
from dpaudit.mechanisms.units import build_mechanism, upper_bound
from dpaudit.theory import gaussian_zcdp, zcdp_to_dp


def _config(mechanism: str, **audit: object) -> dict:
    head = {"name": "t", "kinds": ["mechanism"], **audit}
    return {"audit": head, "mechanism": tomllib.loads(mechanism)}


def _balle_wang_delta(epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """δ(ε) of N(0, σ²) with sensitivity Δ written as in Balle, Wang 2018, Thm. 8:
    Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ) (an independent form of δ_μ(ε))."""
    a = sensitivity / (2 * sigma)
    b = epsilon * sigma / sensitivity
    return float(stats.norm.cdf(a - b) - math.exp(epsilon) * stats.norm.cdf(-a - b))


@pytest.mark.parametrize(("epsilon", "delta"), [(0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-6), (0.1, 0.01)])
def test_exact_calibration_is_the_smallest_sigma_meeting_delta(epsilon, delta) -> None:
    sigma, info = gaussian_calibrated(
        sensitivity=2.0, epsilon=epsilon, delta=delta, calibration="exact"
    )
    assert info == {"method": "exact", "epsilon": epsilon, "delta": delta}
    assert _balle_wang_delta(epsilon, sigma, 2.0) <= delta
    assert _balle_wang_delta(epsilon, sigma * (1 - 1e-8), 2.0) > delta  # the smallest


def test_classic_calibration_and_its_range() -> None:
    sigma, info = gaussian_calibrated(
        sensitivity=1.0, epsilon=0.5, delta=1e-5, calibration="classic"
    )
    assert sigma == pytest.approx(math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5, rel=1e-12)
    assert info["method"] == "classic"
    # the classic σ is larger than the exact one (Balle, Wang 2018, Sec. 3)
    exact, _ = gaussian_calibrated(sensitivity=1.0, epsilon=0.5, delta=1e-5, calibration="exact")
    assert exact < sigma
    with pytest.raises(DpauditError, match=r"only valid for epsilon < 1.*'exact'"):
        gaussian_calibrated(sensitivity=1.0, epsilon=1.0, delta=1e-5, calibration="classic")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            'name = "gaussian"\nepsilon = 2.0\ndelta = 1e-5\ncalibration = "classic"',
            r"only valid for epsilon < 1.*calibration = 'exact'",
        ),
        ('name = "gaussian"\nepsilon = 0.5', r"needs 'delta'"),
        ('name = "gaussian"\nsigma = 1.0\nmu = 1.0', r"exactly one of 'sigma', 'mu' or 'epsilon'"),
        ('name = "gaussian"\nsigma = 1.0\ncalibration = "exact"', r"give 'epsilon'"),
        ('name = "laplace"\nepsilon = 1.0\ndelta = 1e-5', r"'delta' is not a parameter"),
        ('name = "gaussian"\nepsilon = 0.5\ndelta = 1e-5\ncalibration = "tight"', "calibration"),
    ],
)
def test_bad_gaussian_tables(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config(_config(text))


def test_calibration_is_reported_and_the_guarantee_is_the_exact_mu(tmp_path: Path) -> None:
    text = 'name = "gaussian"\nepsilon = 0.5\ndelta = 1e-5\ncalibration = "classic"\ntrials = 20000'
    result = run_audit(parse_config(_config(text)), output_dir=tmp_path, write=False)
    mech = result.to_dict()["tests"][0]["mechanism"]
    assert mech["parameters"]["calibration"]["method"] == "classic"
    sigma = mech["parameters"]["sigma"]
    assert mech["claim"]["mu"] == pytest.approx(1.0 / sigma)
    assert result.verdict == "pass"


def test_default_calibration_is_exact() -> None:
    section = MechanismSection(name="gaussian", epsilon=2.0, delta=1e-5)
    mech = build_mechanism(section, ".")
    assert mech.parameters["calibration"]["method"] == "exact"


# ------------------------------------------------------------------- ρ-zCDP claims
def test_rho_claim_is_held_as_zcdp_to_dp_at_the_audit_delta() -> None:
    section = MechanismSection(name="gaussian", sigma=2.0, claim={"rho": 0.125})
    upper = upper_bound(section, build_mechanism(section, "."), 1e-5)
    assert upper.epsilon == pytest.approx(zcdp_to_dp(0.125, 1e-5))
    assert upper.epsilon_delta == 1e-5
    assert upper.mu is None  # zCDP implies no GDP bound
    assert gaussian_zcdp(1.0, 2.0) == 0.125  # the claim above is the Gaussian's own ρ


@pytest.mark.parametrize(
    ("claim", "match"),
    [
        ("[claim]\ndelta = 0.1", r"a claim needs 'epsilon' \(with 'delta'\), 'mu' or 'rho'"),
        ("[claim]\nrho = 0.1\nepsilon = 1.0", r"'rho' \(zCDP\) alone"),
        ("[claim]\nrho = -1.0", r"rho"),
    ],
)
def test_bad_rho_claims(claim: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config(_config('name = "gaussian"\nsigma = 1.0\n' + claim))


def test_rho_claim_needs_a_positive_audit_delta(tmp_path: Path) -> None:
    cfg = parse_config(
        _config('name = "gaussian"\nsigma = 1.0\ntrials = 1000\n[claim]\nrho = 0.5', delta=0.0)
    )
    with pytest.raises(DpauditError, match="delta, which must then be > 0"):
        run_audit(cfg, output_dir=tmp_path, write=False)


def test_false_rho_claim_is_caught(tmp_path: Path) -> None:
    # Laplace noise at ε = 3 claimed as ρ = 0.01-zCDP: (0.01 + 2√(0.01 ln 10⁵), 10⁻⁵) ≈
    # (0.69, 10⁻⁵)-DP, far below what the noise gives.
    text = 'name = "laplace"\nepsilon = 3.0\ntrials = 20000\n[claim]\nrho = 0.01'
    result = run_audit(parse_config(_config(text)), output_dir=tmp_path, write=False)
    assert result.verdict == "fail"


# Validity: the ρ claim of a correct Gaussian, over repeated audits (tests/test_bounds.py's
# standard: R = 1000, ceiling 6.5 % for a 5 % failure budget, P[Bin(1000, .05) > 65] ≈ 1 %).
REPEATS, TRIALS, CEILING = 1000, 1000, 0.065


def _violation_rate(scale: float, target: float) -> float:
    rng = np.random.default_rng(11)
    hits = 0
    for i in range(REPEATS):
        neg, pos = rng.normal(0.0, scale, TRIALS), rng.normal(1.0, scale, TRIALS)
        hits += epsilon_lower_bound(neg, pos, delta=1e-5, seed=i).value > target
    return hits / REPEATS


def test_validity_of_a_true_rho_claim() -> None:
    # ρ = 1/2 (σ = 1): held as ε = ρ + 2√(ρ ln 10⁵) ≈ 5.3 at δ = 10⁻⁵. The conversion is
    # loose, so this guards the plumbing (the right δ, the right ρ), not tightness.
    target = zcdp_to_dp(gaussian_zcdp(1.0, 1.0), 1e-5)
    assert _violation_rate(1.0, target) <= CEILING


def test_rho_validity_check_has_power() -> None:
    # Control: the same noise claimed as ρ = 2·10⁻⁴ (ε ≈ 0.1 at δ = 10⁻⁵) fails the check.
    target = zcdp_to_dp(2e-4, 1e-5)
    assert target < 0.11
    assert _violation_rate(1.0, target) > CEILING
