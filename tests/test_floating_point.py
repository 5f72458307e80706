"""The floating-point attack on textbook Laplace samplers: ``score = "floating"``.

Tested here: the reachability test against a brute-force scan of the sampler's grid (an
independent reference), its recall on every output the sampler really produced (numpy's
own ``rng.laplace`` included), the attack's exit codes on the naive sampler and on a
floating-point-safe one (our snapping mechanism; OpenDP's Laplace when installed),
validity over repeated audits with a derived binomial ceiling and a power control, and the
table's error messages.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpaudit.audit import run_audit
from dpaudit.bounds import epsilon_lower_bound
from dpaudit.config import parse_config
from dpaudit.errors import DpauditError
from dpaudit.mechanisms.floating import floating_score, reachable

ROOT = Path(__file__).resolve().parents[1]
AUDITS = ROOT / "audits"
sys.path.insert(0, str(AUDITS))
from plugins.naive_float_laplace import (  # noqa: E402
    naive_laplace,
    numpy_laplace,
    snapping_laplace,
)

STEP = 2.0**-53


def _exp_sign(x: float, k: int, sign: int, scale: float = 1.0) -> float:
    """The exp-sign sampler's output at grid point k, with the C library's log."""
    return x + sign * (scale * -math.log(k * STEP))


def _brute_reachable(y: float, x: float, scale: float, width: int = 4000) -> bool:
    """Scan every grid point within ``width`` of where the real-number inverse lands."""
    if y == x:
        return True
    sign = 1 if y > x else -1
    e = abs(y - x) / scale
    centre = round(math.exp(-e) / STEP)
    low, high = max(1, centre - width), min(1 << 53, centre + width)
    return any(_exp_sign(x, k, sign, scale) == y for k in range(low, high + 1))


def test_reachable_agrees_with_a_brute_force_scan() -> None:
    rng = np.random.default_rng(3)
    # outputs of small U (large noise), where the grid is sparse, and their neighbours
    ks = rng.integers(1, 1 << 20, 40)
    outs = [_exp_sign(0.25, int(k), 1 if i % 2 else -1, 1.5) for i, k in enumerate(ks)]
    candidates = np.array([z for y in outs for z in (y, np.nextafter(y, np.inf))])
    got = reachable(candidates, 0.25, scale=1.5, sampler="exp-sign")
    want = np.array([_brute_reachable(float(y), 0.25, 1.5) for y in candidates])
    assert np.array_equal(got, want)
    assert want[::2].all()
    assert not want[1::2].all()


@pytest.mark.parametrize(
    ("fn", "sampler"), [(naive_laplace, "exp-sign"), (numpy_laplace, "numpy-laplace")]
)
def test_every_true_output_is_reachable_from_its_input(fn, sampler) -> None:
    rng = np.random.default_rng(0)
    for x in (0.0, 1.0, -3.7):
        y = fn(np.array([x]), rng=rng, size=2000)
        assert reachable(y, x, scale=1.0, sampler=sampler).all()


def test_naive_outputs_only_ever_point_to_their_own_input() -> None:
    rng = np.random.default_rng(1)
    y0 = naive_laplace(np.array([0.0]), rng=rng, size=20_000)
    y1 = naive_laplace(np.array([1.0]), rng=rng, size=20_000)
    s0 = floating_score(y0, (0.0, 1.0), scale=1.0, sampler="exp-sign")
    s1 = floating_score(y1, (0.0, 1.0), scale=1.0, sampler="exp-sign")
    # an output of D is reachable from D, so it never scores +1 (and symmetrically)
    assert (s0 <= 0).all()
    assert (s1 >= 0).all()
    # ... and most are reachable from their own input only (measured 0.67 and 0.60)
    assert np.mean(s0 == -1) > 0.5
    assert np.mean(s1 == 1) > 0.5


def test_naive_exits_1_far_above_its_claim_and_snapping_passes(tmp_path: Path) -> None:
    naive = run_audit(AUDITS / "floating-naive-violation.toml", output_dir=tmp_path / "a")
    eps = next(c for c in naive.comparisons if c.parameter == "epsilon")
    assert naive.verdict == "fail"
    assert eps.violation
    # 20,000 trials, no D-output ever scores +1: ε ≥ ln(0.6·n / 4) ≈ 8 before the
    # union bound over thresholds; well above 5
    assert eps.lower.value > 5
    safe = run_audit(AUDITS / "floating-snapping.toml", output_dir=tmp_path / "b")
    assert safe.verdict == "pass"


def test_validity_on_snapping_and_power_on_naive() -> None:
    """Repeated audits at small trial counts: the snapping mechanism (ε = 1 claimed, true
    ε ≤ 1 + 2.8e-14) may exceed its claim in at most a 1 − c share; the ceiling is the
    binomial 0.999-quantile. The naive sampler must violate in nearly every repeat."""
    c, repeats, n = 0.8, 100, 400
    claim = 1.0 + 16 * 2.0**-49
    rng = np.random.default_rng(11)
    false, found = 0, 0
    for r in range(repeats):
        for fn, bad in ((snapping_laplace, False), (naive_laplace, True)):
            y0 = fn(np.array([0.0]), rng=rng, size=n)
            y1 = fn(np.array([1.0]), rng=rng, size=n)
            s0 = floating_score(y0, (0.0, 1.0), scale=1.0, sampler="exp-sign")
            s1 = floating_score(y1, (0.0, 1.0), scale=1.0, sampler="exp-sign")
            b = epsilon_lower_bound(
                s0, s1, delta=0.0, confidence_level=c, threshold="bonferroni", seed=r
            )
            if bad:
                found += b.value > claim
            else:
                false += b.value > claim
    assert false <= stats.binom.ppf(0.999, repeats, 1 - c)
    assert found >= 95


def test_opendp_laplace_passes() -> None:
    pytest.importorskip("opendp")
    from plugins.opendp_mechanisms import laplace, measurement

    rng = np.random.default_rng(0)
    y0 = laplace(np.array([0.0]), rng=rng, size=2000)
    y1 = laplace(np.array([1.0]), rng=rng, size=2000)
    s0 = floating_score(y0, (0.0, 1.0), scale=1.0, sampler="exp-sign")
    s1 = floating_score(y1, (0.0, 1.0), scale=1.0, sampler="exp-sign")
    b = epsilon_lower_bound(s0, s1, delta=0.0, threshold="bonferroni")
    # valid at 0.95 whatever OpenDP's (unseeded) draws: a false alarm here has chance ≤ 5 %
    assert b.value <= measurement("laplace", vector=False).map(1.0)


def _mechanism(extra: str) -> str:
    return (
        '[audit]\nname = "x"\nkinds = ["mechanism"]\n[mechanism]\n'
        'name = "plugins.naive_float_laplace:naive_laplace"\n'
        f"{extra}\n[mechanism.claim]\nepsilon = 1.0\n"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('score = "floating"', "score = 'floating' and the \\[mechanism.floating\\] table"),
        (
            '[mechanism.floating]\nsampler = "exp-sign"\nscale = 1.0\nvalues = [0.0, 1.0]',
            "score = 'floating' and the \\[mechanism.floating\\] table",
        ),
        (
            'score = "floating"\nlearner = "counts"\n[mechanism.floating]\n'
            'sampler = "exp-sign"\nscale = 1.0\nvalues = [0.0, 1.0]',
            "'learner' does not apply to score = 'floating'",
        ),
        (
            'score = "floating"\n[mechanism.floating]\nsampler = "scipy"\nscale = 1.0\n'
            "values = [0.0, 1.0]",
            "exp-sign",
        ),
    ],
)
def test_table_errors_teach(extra: str, message: str) -> None:
    import tomllib

    with pytest.raises(DpauditError, match=message):
        parse_config(tomllib.loads(_mechanism(extra)))


def test_reachable_rejects_bad_arguments() -> None:
    with pytest.raises(DpauditError, match="'sampler' parameter"):
        reachable(np.zeros(2), 0.0, scale=1.0, sampler="scipy")
    with pytest.raises(DpauditError, match="positive finite"):
        reachable(np.zeros(2), 0.0, scale=0.0, sampler="exp-sign")
    with pytest.raises(DpauditError, match="finite"):
        reachable(np.array([np.nan]), 0.0, scale=1.0, sampler="exp-sign")
