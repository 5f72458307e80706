"""Audits of real DP libraries: diffprivlib's and OpenDP's Laplace and Gaussian mechanisms
(audits/diffprivlib-*.toml, audits/opendp-*.toml, their plug-ins in audits/plugins/).

Each library is an optional extra; its tests are skipped when it is not importable. The
tests check that each audit file claims what the library itself states (its ε, its σ,
its privacy map), that the audit passes, and, as a power control, that the same outputs
held against half the claim fail: the audit can tell a true claim from a false one.
"""

from __future__ import annotations

import importlib
import math
import re
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from dpaudit.audit import run_audit
from dpaudit.config import load_config_text

AUDITS = Path(__file__).resolve().parent.parent / "audits"
#: Trials per arm in these tests (the shipped files run more).
TRIALS = 10_000


def _plugin(name: str) -> ModuleType:
    if str(AUDITS) not in sys.path:
        sys.path.append(str(AUDITS))  # as dpaudit.plugins does: after installed packages
    return importlib.import_module(f"plugins.{name}")


def _diffprivlib() -> ModuleType:
    module = _plugin("diffprivlib_mechanisms")
    try:
        module.mechanisms()
    except ImportError as exc:
        pytest.skip(f"diffprivlib is not importable: {exc}")
    return module


def _opendp() -> ModuleType:
    pytest.importorskip("opendp")
    return _plugin("opendp_mechanisms")


def _claim(audit: str) -> dict:
    return tomllib.loads((AUDITS / f"{audit}.toml").read_text())["mechanism"]["claim"]


def _verdict(audit: str, tmp_path: Path, *, claim: dict | None = None) -> tuple[str, dict]:
    text = (AUDITS / f"{audit}.toml").read_text()
    text = re.sub(r"^trials = [0-9_]+$", f"trials = {TRIALS}", text, count=1, flags=re.M)
    if claim is not None:
        head = text[: text.index("[mechanism.claim]")]
        text = head + "[mechanism.claim]\n" + "".join(f"{k} = {v!r}\n" for k, v in claim.items())
    config = load_config_text(text, base_dir=AUDITS, source=audit)
    result = run_audit(config, output_dir=tmp_path / audit, write=False)
    bounds = {c.parameter: (c.lower.value, c.upper) for c in result.comparisons if c.in_verdict}
    return result.verdict, bounds


# ------------------------------------------------------------------------- diffprivlib


def test_diffprivlib_claims_are_the_librarys() -> None:
    d = _diffprivlib()
    lap = d.laplace_mechanism()
    assert (lap.epsilon, lap.delta, lap.sensitivity) == (1.0, 0.0, 1.0)
    assert _claim("diffprivlib-laplace") == {"epsilon": lap.epsilon, "delta": 0.0}
    gauss = d.gaussian_mechanism()
    claim = _claim("diffprivlib-gaussian")
    assert (claim["epsilon"], claim["delta"]) == (gauss.epsilon, gauss.delta)
    # μ = Δ/σ of the σ diffprivlib chose, rounded up in the file's sixth decimal
    mu = gauss.sensitivity / gauss._scale
    assert mu <= claim["mu"] < mu + 1e-6


def test_diffprivlib_outputs_follow_the_seed() -> None:
    d = _diffprivlib()
    data = np.array([0.0])
    a = d.laplace(data, rng=np.random.default_rng(3), size=50)
    b = d.laplace(data, rng=np.random.default_rng(3), size=50)
    np.testing.assert_array_equal(a, b)
    # Laplace(1): the sample standard deviation of 20,000 draws is within 5 % of √2
    # (its standard error is about 1.2 % of √2: the fourth moment is 24)
    wide = d.laplace(data, rng=np.random.default_rng(4), size=20_000)
    assert np.std(wide) == pytest.approx(math.sqrt(2.0), rel=0.05)


@pytest.mark.parametrize(
    ("audit", "false_claim"),
    [
        ("diffprivlib-laplace", {"epsilon": 0.5, "delta": 0.0}),
        ("diffprivlib-gaussian", {"mu": 0.13}),
    ],
)
def test_diffprivlib_audit_passes_and_a_false_claim_fails(
    audit: str, false_claim: dict, tmp_path: Path
) -> None:
    _diffprivlib()
    verdict, bounds = _verdict(audit, tmp_path)
    assert verdict == "pass", bounds
    verdict, bounds = _verdict(audit, tmp_path, claim=false_claim)
    assert verdict == "fail", bounds


# ------------------------------------------------------------------------------ OpenDP


def test_opendp_claims_are_its_privacy_maps() -> None:
    o = _opendp()
    for vector in (False, True):
        assert (
            o.measurement("laplace", vector=vector).map(1.0) == _claim("opendp-laplace")["epsilon"]
        )
        # ρ-zCDP of the Gaussian with σ: ρ = Δ²/(2σ²) = μ²/2 for the claimed μ = Δ/σ
        rho = o.measurement("gaussian", vector=vector).map(1.0)
        assert rho == pytest.approx(_claim("opendp-gaussian")["mu"] ** 2 / 2, rel=1e-12)
    with pytest.raises(ValueError, match="noise must be 'laplace' or 'gaussian'; got 'cauchy'"):
        o.measurement("cauchy")


@pytest.mark.parametrize(
    ("audit", "false_claim"),
    [
        ("opendp-laplace", {"epsilon": 0.5, "delta": 0.0}),
        ("opendp-gaussian", {"mu": 0.5}),
    ],
)
def test_opendp_audit_passes_and_a_false_claim_fails(
    audit: str, false_claim: dict, tmp_path: Path
) -> None:
    _opendp()
    verdict, bounds = _verdict(audit, tmp_path)
    assert verdict == "pass", bounds
    verdict, bounds = _verdict(audit, tmp_path, claim=false_claim)
    assert verdict == "fail", bounds
