"""The bug zoo (benchmarks/zoo/): a few bug classes caught, their fixes passing.

The full sweep (every class, a doubling ladder of trials, 100 seeds of each fix) is
``benchmarks/bug_zoo.py``; these tests run a few classes at small counts.

The repeated-seeds tests hold a fixed implementation to a derived ceiling: an audit of a
true claim exits 1 with probability at most 1 − c = 0.05 (its one verdict budget), so
over R independent seeds the number of failures is stochastically at most
X ~ Binomial(R, 0.05), and ``binom.ppf(0.999, R, 0.05)`` is exceeded with probability
below 0.001. The power control runs the same harness on the buggy version.
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from scipy.stats import binom

from dpaudit.audit import run_audit
from dpaudit.config import load_config_text

ZOO = Path(__file__).resolve().parent.parent / "benchmarks" / "zoo"
LEVEL = 0.95


def _zoo_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("zoo_mechanisms", ZOO / "zoo_mechanisms.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


z = _zoo_module()


def _run(name: str, tmp_path: Path, *, trials: int, seed: int = 0) -> tuple[str, dict]:
    text = (ZOO / f"{name}.toml").read_text()
    text = re.sub(r"^trials = [0-9_]+$", f"trials = {trials}", text, count=1, flags=re.M)
    text = re.sub(r"^seed = [0-9]+$", f"seed = {seed}", text, count=1, flags=re.M)
    config = load_config_text(text, base_dir=ZOO, source=name)
    result = run_audit(config, output_dir=tmp_path / f"{name}-{seed}", write=False)
    bounds = {c.parameter: (c.lower.value, c.upper) for c in result.comparisons if c.in_verdict}
    return result.verdict, bounds


# ------------------------------------------------------------- the zoo's mechanisms


def test_every_class_has_a_buggy_and_a_fixed_audit() -> None:
    buggy = {p.name.removesuffix("-buggy.toml") for p in ZOO.glob("*-buggy.toml")}
    fixed = {p.name.removesuffix("-fixed.toml") for p in ZOO.glob("*-fixed.toml")}
    assert len(buggy) >= 10
    # the two DP-SGD bugs share one fixed trainer
    assert buggy - fixed == {"dpsgd-half-noise", "dpsgd-wrong-rate"}
    assert fixed - buggy == {"dpsgd-correct"}


def test_log10_sigma_is_sqrt_ln10_too_small() -> None:
    # Dwork, Roth 2014, Thm. A.1 at ε = 0.9, δ = 1e-5, by hand: √(2 ln 125000)/0.9
    assert z.classic_sigma(log="ln") == pytest.approx(math.sqrt(2 * 11.736069016284437) / 0.9)
    ratio = z.classic_sigma(log="ln") / z.classic_sigma(log="log10")
    assert ratio == pytest.approx(math.sqrt(math.log(10.0)), rel=1e-12)


def test_shifted_k_rr_reports_the_truth_too_often() -> None:
    # fixed: P[true] = e/(e + 3); buggy: p + (1 − p)/4. 200,000 draws: 5 binomial sd
    # (at most 0.0056) separate neither from its own value and each from the other.
    n, p = 200_000, math.e / (math.e + 3)
    rng = np.random.default_rng(0)
    for fn, want in ((z.k_rr, p), (z.k_rr_shifted, p + (1 - p) / 4)):
        freq = float(np.mean(fn(np.array([2.0]), rng=rng, size=n) == 2.0))
        assert abs(freq - want) < 5 * math.sqrt(want * (1 - want) / n)
    buggy_eps = math.log((p + (1 - p) / 4) / ((1 - p) / 4))
    # p/(1 − p) = e/3, so ε′ = ln(1 + 4·p/(1 − p)) = ln(1 + 4e/3)
    assert buggy_eps == pytest.approx(math.log(1 + 4 * math.e / 3), rel=1e-12)
    assert buggy_eps > 1.5


def test_sparse_vector_stops_after_the_cutoff() -> None:
    rng = np.random.default_rng(1)
    out = z.svt_alg1(np.array([0.0, 100.0, 0.0, 100.0]), rng=rng, size=2_000)
    for row in out:
        tops = np.flatnonzero(row == z.TOP)
        assert tops.size <= z.SVT_CUTOFF
        if tops.size:  # every query after the c-th ⊤ is unanswered
            assert np.all(row[tops[-1] + 1 :] == z.UNANSWERED)
    # without a cut-off (Alg. 5) both far-above queries answer ⊤ in the same run
    out5 = z.svt_alg5(np.array([0.0, 100.0, 0.0, 100.0]), rng=rng, size=2_000)
    assert np.any((out5[:, 1] == z.TOP) & (out5[:, 3] == z.TOP))


# ------------------------------------------------------------- caught and passing


@pytest.mark.parametrize(
    ("name", "trials"),
    [
        ("svt-alg5-buggy", 1_000),
        ("histogram-replace-one-buggy", 2_000),
        ("clipping-missing-buggy", 2_000),
        ("dpsgd-wrong-rate-buggy", 1_000),
    ],
)
def test_buggy_implementation_is_caught(name: str, trials: int, tmp_path: Path) -> None:
    verdict, bounds = _run(name, tmp_path, trials=trials)
    assert verdict == "fail"
    assert any(lower > upper for lower, upper in bounds.values()), bounds


def _failures(name: str, tmp_path: Path, *, trials: int, seeds: int) -> int:
    return sum(_run(name, tmp_path, trials=trials, seed=s)[0] == "fail" for s in range(seeds))


SEEDS = 20
CEILING = int(binom.ppf(0.999, SEEDS, 1 - LEVEL))  # 5 at R = 20


@pytest.mark.parametrize("name", ["k-rr-shifted-fixed", "histogram-replace-one-fixed"])
def test_fixed_implementation_passes_over_seeds(name: str, tmp_path: Path) -> None:
    # the ceiling is the smallest k with P[X > k] ≤ 0.001, X ~ Binomial(R, 0.05)
    assert binom.sf(CEILING, SEEDS, 1 - LEVEL) <= 0.001 < binom.sf(CEILING - 1, SEEDS, 1 - LEVEL)
    assert _failures(name, tmp_path, trials=2_000, seeds=SEEDS) <= CEILING


def test_repeated_seeds_check_can_fail(tmp_path: Path) -> None:
    # power control: the buggy k-RR (1.53-DP, claim 1) under the same harness and count
    assert _failures("k-rr-shifted-buggy", tmp_path, trials=2_000, seeds=SEEDS) > CEILING
