"""User mechanisms with vector outputs: scored by the exact likelihood ratio of a given
log density, or by the user's own score; exact errors; validity and a planted bug."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpaudit.audit import run_audit
from dpaudit.bounds import mu_lower_bound
from dpaudit.config import parse_config
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.mechanisms.noise import user_mechanism

AUDITS = Path(__file__).resolve().parents[1] / "audits"
PLUGIN = "plugins.noisy_histogram"
DATA = ([0.2, 0.7], [0.2, 0.7, 0.9])  # counts (1, 1) and (1, 2)


@pytest.fixture(autouse=True)
def _plugins_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(AUDITS))


def test_log_density_scores_are_the_exact_log_likelihood_ratio() -> None:
    m = user_mechanism(f"{PLUGIN}:noisy_histogram", data=DATA, log_density=f"{PLUGIN}:log_density")
    scores = m.run(0, rng=np.random.default_rng(5), size=1000)
    # The same draws, by hand: y = (1, 1) + N(0, I); LR = log N(y; (1, 2), I) − log N(y; (1, 1), I).
    y = np.array([1.0, 1.0]) + np.random.default_rng(5).normal(0.0, 1.0, (1000, 2))
    mvn = stats.multivariate_normal
    expected = mvn.logpdf(y, mean=[1.0, 2.0]) - mvn.logpdf(y, mean=[1.0, 1.0])
    np.testing.assert_allclose(scores, expected, rtol=1e-12, atol=1e-12)
    assert m.parameters == {
        "callable": f"{PLUGIN}:noisy_histogram",
        "log_density": f"{PLUGIN}:log_density",
    }


def test_a_user_score_function_scores_vector_outputs(tmp_path: Path) -> None:
    (tmp_path / "second_bin.py").write_text(
        "def score(outputs):\n    return outputs[:, 1]\n", encoding="utf-8"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        m = user_mechanism(f"{PLUGIN}:noisy_histogram", data=DATA, score="second_bin:score")
        out = m.run(1, rng=np.random.default_rng(0), size=4)
    finally:
        sys.path.remove(str(tmp_path))
    y = np.array([1.0, 2.0]) + np.random.default_rng(0).normal(0.0, 1.0, (4, 2))
    np.testing.assert_array_equal(out, y[:, 1])


def test_vector_outputs_without_a_scorer_is_a_clear_error() -> None:
    m = user_mechanism(f"{PLUGIN}:noisy_histogram", data=DATA)
    with pytest.raises(DpauditError) as err:
        m.run(0, rng=np.random.default_rng(0), size=3)
    assert str(err.value) == (
        f"Mechanism '{PLUGIN}:noisy_histogram' returned outputs of shape (3, 2): vector "
        "outputs need [mechanism] log_density = 'pkg.module:function' (scored by the "
        "likelihood ratio) or score = 'pkg.module:function'."
    )


def test_both_scorers_or_a_scorer_on_a_builtin_are_refused() -> None:
    with pytest.raises(ConfigError, match="Give 'log_density' or 'score' for a user mechanism"):
        user_mechanism(f"{PLUGIN}:noisy_histogram", data=DATA, log_density="a:b", score="c:d")
    base = {"audit": {"name": "x", "kinds": ["mechanism"]}}
    with pytest.raises(ValueError, match="'score' scores a user mechanism's outputs; 'laplace'"):
        parse_config({**base, "mechanism": {"name": "laplace", "epsilon": 1.0, "score": "a:b"}})


def test_an_impossible_output_keeps_its_order_with_a_finite_score() -> None:
    from dpaudit.mechanisms.noise import _user_scores

    out = _user_scores(np.array([np.inf, 0.5, -np.inf, -2.0]), np.zeros((4, 3)), "f")
    np.testing.assert_array_equal(out, [3.0, 0.5, -3.0, -2.0])
    with pytest.raises(DpauditError, match="returned 2 values for 4 outputs"):
        _user_scores(np.zeros(2), np.zeros((4, 3)), "f")


def test_validity_of_the_likelihood_ratio_audit_over_400_repeats() -> None:
    # The mechanism is exactly 1-GDP: μ_LB > 1 is a false violation, probability ≤ 0.05 per
    # audit; 400 independent audits of 2,000 trials per arm may show at most
    # binom.ppf(0.999, 400, 0.05) = 35 of them on correct code.
    m = user_mechanism(f"{PLUGIN}:noisy_histogram", data=DATA, log_density=f"{PLUGIN}:log_density")
    rng = np.random.default_rng(2026)
    values = []
    for seed in range(400):
        neg = m.run(0, rng=rng, size=2000)
        pos = m.run(1, rng=rng, size=2000)
        values.append(mu_lower_bound(neg, pos, confidence_level=0.95, seed=seed).value)
    ceiling = int(stats.binom.ppf(0.999, 400, 0.05))
    assert ceiling == 35
    assert sum(v > 1.0 for v in values) <= ceiling
    assert np.median(values) > 0.5  # power: the audit sees most of μ = 1


def test_the_shipped_audit_and_a_planted_bug(tmp_path: Path) -> None:
    result = run_audit(
        AUDITS / "user-mechanism-vector.toml", output_dir=tmp_path / "ok", write=False
    )
    assert result.verdict == "pass"
    mu = [c for c in result.comparisons if c.parameter == "mu"]
    assert mu[0].lower.value > 0.9  # μ = 1 exactly, 50,000 trials per arm
    # σ = 1/2 while claiming μ = 1: the mechanism is 2-GDP, the μ bound exceeds the claim.
    # (A module name of its own, so no other test's "plugins" package is shadowed.)
    (tmp_path / "halfsigma_histogram.py").write_text(
        (AUDITS / "plugins" / "noisy_histogram.py")
        .read_text(encoding="utf-8")
        .replace("SIGMA = 1.0", "SIGMA = 0.5"),
        encoding="utf-8",
    )
    audit = tmp_path / "bug.toml"
    audit.write_text(
        (AUDITS / "user-mechanism-vector.toml")
        .read_text(encoding="utf-8")
        .replace("plugins.noisy_histogram", "halfsigma_histogram")
        .replace("trials = 50_000", "trials = 5_000"),
        encoding="utf-8",
    )
    bug = run_audit(audit, output_dir=tmp_path / "bug", write=False)
    assert bug.privacy_verdict == "violation"
    assert bug.verdict == "fail"
