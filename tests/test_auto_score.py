"""``score = "auto"``, the mechanism default: which score is counted, and the exponential
mechanism bug it catches with no score key (audits/exponential-mechanism*.toml)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, stats
from typer.testing import CliRunner

from dpaudit.audit import run_audit
from dpaudit.bounds import epsilon_and_mu_lower_bounds
from dpaudit.cli import app
from dpaudit.config import load_config_text
from dpaudit.mechanisms.auto_score import choose_score, resolved
from dpaudit.mechanisms.schema import MechanismSection

ROOT = Path(__file__).resolve().parent.parent
AUDITS = ROOT / "audits"
sys.path.insert(0, str(AUDITS))

from plugins.popular_choice import (  # noqa: E402
    CATEGORIES,
    popular_choice,
    popular_choice_unhalved,
    release_probabilities,
)

D, D_PRIME = [1, 1, 1, 1], [1, 1, 1, 0]


def _section(**keys: object) -> MechanismSection:
    return MechanismSection.model_validate(keys)


# ------------------------------------------------------------------ the choice itself


@pytest.mark.parametrize(
    ("keys", "sequential", "method", "score"),
    [
        ({"name": "laplace", "epsilon": 1.0}, False, "exact-likelihood-ratio", None),
        ({"name": "k-rr", "k": 4, "epsilon": 1.0}, False, "exact-likelihood-ratio", None),
        ({"name": "gaussian", "mu": 1.0}, True, "exact-likelihood-ratio", None),
        (
            {"name": "a:b", "log_density": "a:d", "claim": {"epsilon": 1.0}},
            False,
            "exact-likelihood-ratio",
            None,
        ),
        ({"name": "a:b", "claim": {"epsilon": 1.0}}, False, "learned", "learned"),
        ({"name": "a:b", "score": "auto", "claim": {"epsilon": 1.0}}, False, "learned", "learned"),
        ({"name": "a:b", "claim": {"epsilon": 1.0}}, True, "output", None),
        ({"name": "a:b", "score": "a:s", "claim": {"epsilon": 1.0}}, False, "user-score", "a:s"),
        ({"name": "laplace", "epsilon": 1.0, "score": "learned"}, True, "learned", "learned"),
    ],
)
def test_the_choice_is_made_from_the_file_alone(
    keys: dict, sequential: bool, method: str, score: str | None
) -> None:
    section = _section(**keys)
    choice = choose_score(section, sequential=sequential)
    assert (choice.method, choice.score) == (method, score)
    assert resolved(section, sequential=sequential).score == score
    told = choice.to_dict(learner="counts")
    assert told["requested"] == keys.get("score", "auto")
    assert told["summary"].startswith(f"score = {told['requested']!r} → {method} (counts): ")


def test_learner_keys_go_with_a_score_that_learns() -> None:
    # "auto" learns for a user mechanism without a log density: its learner may be set
    assert _section(name="a:b", learner="knn", claim={"epsilon": 1.0}).learner == "knn"
    for keys in (
        {"name": "laplace", "epsilon": 1.0, "learner": "knn"},
        {"name": "a:b", "log_density": "a:d", "fit_fraction": 0.5, "claim": {"epsilon": 1.0}},
    ):
        with pytest.raises(ValueError, match="configures a learned score; set score = 'learned'"):
            _section(**keys)


# --------------------------------------------------------- the exponential mechanism


def _exact_epsilon(p: np.ndarray, q: np.ndarray, delta: float) -> float:
    """The smallest ε with Σ max(0, P − e^ε Q) ≤ δ both ways (Dwork, Roth 2014, Def. 2.4
    read on the finitely many outputs), by root finding, independent of dpaudit."""

    def excess(eps: float, a: np.ndarray, b: np.ndarray) -> float:
        return float(np.maximum(0.0, a - math.exp(eps) * b).sum()) - delta

    return max(
        optimize.brentq(excess, 0.0, 50.0, args=(a, b), xtol=1e-12) for a, b in ((p, q), (q, p))
    )


def test_the_pair_in_the_files_and_its_exact_epsilon() -> None:
    # by hand: counts (0, 4, 0, 0, 0) and (1, 3, 0, 0, 0); P ∝ exp(s·u) with s = ε/2 or ε
    for scale, want in ((0.5, 0.7210), (1.0, 1.8201)):
        p = release_probabilities(np.array(D), scale=scale)
        q = release_probabilities(np.array(D_PRIME), scale=scale)
        z = math.exp(4 * scale) + 4
        assert p == pytest.approx([1 / z, math.exp(4 * scale) / z, 1 / z, 1 / z, 1 / z])
        assert _exact_epsilon(p, q, 1e-5) == pytest.approx(want, abs=5e-5)
    # the files audit this pair and claim ε = 1, with no score key
    for name in ("exponential-mechanism", "exponential-mechanism-violation"):
        text = (AUDITS / f"{name}.toml").read_text()
        assert "data = [[1, 1, 1, 1], [1, 1, 1, 0]]" in text
        assert "\nscore" not in text


@pytest.mark.parametrize("fn", [popular_choice, popular_choice_unhalved])
def test_releases_follow_their_law(fn) -> None:  # type: ignore[no-untyped-def]
    # a chi-square goodness-of-fit test at 0.001 on 20,000 seeded draws
    n, scale = 20_000, 0.5 if fn is popular_choice else 1.0
    draws = fn(np.array(D_PRIME), rng=np.random.default_rng(0), size=n)
    seen = np.bincount(draws.astype(int), minlength=CATEGORIES)
    want = n * release_probabilities(np.array(D_PRIME), scale=scale)
    assert stats.chisquare(seen, want).pvalue > 0.001


def test_bad_answers_are_refused() -> None:
    with pytest.raises(ValueError, match=r"whole categories in 0\.\.4"):
        release_probabilities(np.array([1, 5]), scale=1.0)


@pytest.mark.parametrize(
    ("audit", "code", "learner"),
    [("exponential-mechanism-violation", 1, "counts"), ("exponential-mechanism", 0, "counts")],
)
def test_default_score_catches_the_bug_and_passes_the_twin(
    audit: str, code: int, learner: str, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(AUDITS / f"{audit}.toml"), "-q", "-o", str(run)])
    assert result.exit_code == code, result.output
    data = json.loads((run / "results.json").read_text())
    (test,) = data["tests"]
    assert test["score"]["requested"] == "auto"
    assert test["score"]["chosen"] == f"learned ({learner})"
    assert test["learned"]["learner"] == learner
    eps = next(b for b in data["bounds"] if b["parameter"] == "epsilon")
    # never above the exact ε of the pair (validity), and above the claim only for the bug
    truth = 1.8201 if code else 0.7210
    assert eps["lower"]["value"] <= truth
    assert (eps["lower"]["value"] > 1.0) == bool(code)
    assert "Score: score = &#39;auto&#39; → learned (counts)" in (run / "report.html").read_text()


def test_the_output_as_its_own_score_misses_the_bug() -> None:
    # What a scalar output's default was before "auto": the output itself, larger = D'.
    # The bug shows on category 0 (more likely under D'), so no event "output ≥ t" sees
    # it: the best, t = 2, has exact ε = ln(P'[≥ 2]/P[≥ 2]) ≈ 0.82 < 1, and the seeded
    # bound stays below the claim.
    p = release_probabilities(np.array(D), scale=1.0)
    q = release_probabilities(np.array(D_PRIME), scale=1.0)
    best = max(math.log(q[t:].sum() / p[t:].sum()) for t in range(1, CATEGORIES))
    assert best == pytest.approx(math.log((math.e**4 + 4) / (math.e**3 + math.e + 3)))
    assert best < 1.0
    rng = np.random.default_rng(0)
    neg = popular_choice_unhalved(np.array(D), rng=rng, size=50_000)
    pos = popular_choice_unhalved(np.array(D_PRIME), rng=rng, size=50_000)
    eps, _ = epsilon_and_mu_lower_bounds(
        neg, pos, delta=1e-5, confidence_level=0.975, threshold="split", seed=0
    )
    assert eps.value < 1.0


# ----------------------------------------------------------------- errors that teach


def test_a_null_result_on_a_discrete_output_names_the_learned_score_and_the_search(
    tmp_path: Path,
) -> None:
    # one bit answered truthfully with probability e/(1 + e) on the SAME input twice: no
    # learned score can find an event, and the null result says what else to try
    text = """
[audit]
name = "null"
kinds = ["mechanism"]
seed = 0

[mechanism]
name = "plugins.bit_response:respond"
data = [[1], [1]]
trials = 3_000

[mechanism.claim]
epsilon = 1.0
"""
    result = run_audit(
        load_config_text(text, base_dir=AUDITS, source="null.toml"),
        output_dir=tmp_path / "r",
        write=False,
    )
    (warning,) = [w for w in result.warnings if "no lower bound exceeds 0" in w]
    assert "Its learned score took only 2 distinct values (a discrete output)" in warning
    assert "a [mechanism.search] table (data, neighbours) tries other pairs" in warning


@pytest.mark.parametrize("audit", ["search-rr-violation", "search-svt-violation"])
def test_the_search_table_fits_an_80_column_log(tmp_path: Path, audit: str) -> None:
    result = CliRunner().invoke(
        app,
        ["run", str(AUDITS / f"{audit}.toml"), "-o", str(tmp_path / "r")],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 1, result.output
    table = [line for line in result.output.splitlines() if line[:1] in "┏┃┡│└"]
    assert table
    assert max(len(line) for line in table) <= 80
    # the rows hold each label's head only (folded over 14 lines each before): the six
    # bounds (three pairs, ε and μ) take at most 4 lines each, the labels follow in full
    assert not any("D=[" in line for line in table)
    assert len(table) <= 4 + 6 * 4
    # the table says "search #k" on one line, the pattern and pair below it (the SVT
    # pairs' "(one-below-rest-above)" folded over 11 lines before)
    rows = [line for line in table if line.startswith("│search #")]
    assert len(rows) == len([line for line in table if line.startswith("│search")]) >= 4
    assert all(line.startswith(("│search #1 ", "│search #2 ", "│search #3 ")) for line in rows)
    first = {
        "search-rr-violation": "search #1 (remove-0): D=[1, 0, 1], D'=[0, 1], event output",
        "search-svt-violation": "search #1 (half-half): D=[1, 1, 1, 1, 1], D'=[0, 0, 2, 2, 2]",
    }[audit]
    assert f"\n{first}" in result.output
    # the labels spelled out below the table fit the same 80 columns, wrapped
    start = result.output.index("\nsearch #1 (") + 1
    below = result.output[start:].split("\nPASS")[0].split("\nFAIL")[0].splitlines()
    assert below
    assert max(len(line) for line in below) <= 80
    assert any(line.startswith("    ") for line in below)  # a long label continues
