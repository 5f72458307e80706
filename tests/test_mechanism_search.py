"""Neighbour search: ``[mechanism.search]`` (:mod:`dpaudit.mechanisms.search`).

Tested here: the candidate pairs (the StatDP patterns in closed form, records replaced,
removed and added), that the search finds planted bugs it is not given the pair of (the
randomised response that keeps its bit with probability 0.83 while claiming ε = 1, and
the sparse vector technique without query noise), that screening trials never enter a
bound (fresh streams, Bonferroni over the audited pairs only, what the kind announces is
what it spends), validity over repeated searches of a mechanism exactly at its claim with
a derived binomial ceiling and a power control, the counterexample in results.json, and
the table's error messages.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpaudit.audit import run_audit
from dpaudit.config import parse_config
from dpaudit.errors import DpauditError
from dpaudit.mechanisms.search import (
    PATTERNS,
    query_candidates,
    record_candidates,
    search_audit,
)

ROOT = Path(__file__).resolve().parents[1]
AUDITS = ROOT / "audits"
sys.path.insert(0, str(AUDITS))
from plugins.bit_response import respond, respond_buggy  # noqa: E402
from plugins.sparse_vector import svt, svt_no_query_noise  # noqa: E402


def test_statdp_patterns_in_closed_form() -> None:
    got = {
        c.label: c.d_prime for c in query_candidates([1, 1, 1, 1], sensitivity=1.0, random_pairs=0)
    }
    # Ding et al. 2018, §5, from q = [1, 1, 1, 1] with sensitivity 1
    assert got == {
        "one-above": (2, 1, 1, 1),
        "one-below": (0, 1, 1, 1),
        "one-above-rest-below": (2, 0, 0, 0),
        "one-below-rest-above": (0, 2, 2, 2),
        "half-half": (0, 0, 2, 2),
        "all-above": (2, 2, 2, 2),
        "all-below": (0, 0, 0, 0),
    }
    assert tuple(got) == PATTERNS


@pytest.mark.parametrize(("norm", "size"), [("l1", 0.5), ("l2", 0.5 * np.sqrt(4.0) / 2.0)])
def test_patterns_scaled_to_the_norm(norm: str, size: float) -> None:
    cands = query_candidates([0, 0, 0, 0], sensitivity=0.5, norm=norm, random_pairs=5, seed=1)
    for c in cands:
        move = np.subtract(c.d_prime, c.d)
        measured = np.sum(np.abs(move)) if norm == "l1" else np.sqrt(np.sum(move**2))
        assert measured == pytest.approx(0.5, rel=1e-12)
    assert len(cands) == len(PATTERNS) + 5


def test_random_moves_stay_within_linf_sensitivity() -> None:
    cands = query_candidates([3.0, -1.0, 2.0], sensitivity=2.0, random_pairs=20, seed=4)
    randoms = [c for c in cands if c.label.startswith("random")]
    assert len(randoms) == 20
    for c in randoms:
        assert np.max(np.abs(np.subtract(c.d_prime, c.d))) == pytest.approx(2.0, rel=1e-12)


def test_record_candidates() -> None:
    got = {c.label: c.d_prime for c in record_candidates([1, 0], values=[0, 1])}
    assert got == {
        "replace-0=0": (0, 0),
        "replace-1=1": (1, 1),
        "remove-0": (0,),
        "remove-1": (1,),
        "add=0": (1, 0, 0),
        "add=1": (1, 0, 1),
    }
    few = record_candidates(list(range(30)), values=[0, 100], max_candidates=7, seed=2)
    assert len(few) == 7
    assert few == record_candidates(list(range(30)), values=[0, 100], max_candidates=7, seed=2)


def test_search_finds_the_shifted_randomised_response() -> None:
    # only D is given; the bug is in the first record's bit
    result = search_audit(
        respond_buggy,
        data=[1, 0, 1],
        neighbours="records",
        values=[0, 1],
        claim_epsilon=1.0,
        screen_trials=500,
        trials=6000,
        audit_pairs=2,
    )
    assert result.violation
    worst = result.worst
    assert worst.candidate.d[0] != worst.candidate.d_prime[0]
    assert "pair D=[1, 0, 1], D'=" in result.counterexample()
    # the true ε is ln(0.83/0.17) ≈ 1.586: a valid bound stays below it
    assert worst.epsilon.value < np.log(0.83 / 0.17)


def test_search_finds_the_sparse_vector_bug() -> None:
    result = search_audit(
        svt_no_query_noise,
        data=[1, 1, 1, 1, 1],
        neighbours="queries",
        claim_epsilon=1.0,
        random_pairs=4,
        screen_trials=500,
        trials=4000,
        audit_pairs=2,
    )
    assert result.violation
    move = np.subtract(result.worst.candidate.d_prime, result.worst.candidate.d)
    # no noise on the queries shows only when some answers go up and others down
    assert move.max() > 0
    assert move.min() < 0
    assert result.worst.epsilon.value > 3


def test_search_spends_only_the_audited_pairs(tmp_path: Path) -> None:
    result = run_audit(AUDITS / "search-rr-violation.toml", output_dir=tmp_path)
    assert result.verdict == "fail"
    entered = [c for c in result.comparisons if c.in_verdict]
    # 3 audited pairs × (ε, μ): six Bonferroni shares, whatever the number screened (8)
    assert len(entered) == 6
    for c in entered:
        assert c.lower.confidence_level == pytest.approx(1 - 0.05 / 6, rel=1e-12)
    data = json.loads((tmp_path / "results.json").read_text())
    tests = [t for t in data["tests"] if "search" in t]
    screening = tests[0]["search"]["screening"]
    assert screening["candidates"] == 8
    assert len(screening["audited"]) == 3
    assert any(w.startswith("counterexample: pair D=[1, 0, 1], D'=") for w in data["warnings"])
    worst = max(
        data["bounds"], key=lambda b: b["lower"]["value"] if b["parameter"] == "epsilon" else 0
    )
    assert worst["lower"]["details"]["search"]["pair"]["d"] == [1.0, 0.0, 1.0]


def test_audited_trials_are_fresh() -> None:
    """No trial the screening drew is drawn again for the audit: every draw of the
    mechanism is logged, screening calls first (two per candidate), then the audit's."""
    calls: list[np.ndarray] = []

    def logged(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
        u = rng.random(size)
        calls.append(u)
        return (u < 0.6 + 0.1 * float(np.asarray(data).reshape(-1)[0])).astype(float)

    result = search_audit(
        logged,
        data=[1, 0],
        neighbours="records",
        values=[0, 1],
        claim_epsilon=1.0,
        screen_trials=200,
        trials=500,
        audit_pairs=2,
    )
    screened = 2 * len(result.screening.screened)
    seen = set(np.concatenate(calls[:screened]).tolist())
    fresh = np.concatenate(calls[screened:])
    assert len(calls) == screened + 2 * 2
    assert not seen.intersection(fresh.tolist())


def test_validity_at_the_claim_and_power() -> None:
    """Randomised response at exactly ε = 1 under search, 100 repeats at small trial
    counts: its claim may be exceeded in at most a 1 − c share (ceiling: the binomial
    0.999-quantile). The 0.83 variant must be caught in most repeats."""
    c, repeats = 0.8, 100
    false = found = 0
    for seed in range(repeats):
        for fn, bad in ((respond, False), (respond_buggy, True)):
            r = search_audit(
                fn,
                data=[1, 0],
                neighbours="records",
                values=[0, 1],
                claim_epsilon=1.0,
                screen_trials=100,
                trials=1500,
                audit_pairs=2,
                confidence_level=c,
                seed=seed,
            )
            if bad:
                found += r.violation
            else:
                false += r.violation
    assert false <= stats.binom.ppf(0.999, repeats, 1 - c)
    assert found >= 90  # measured 100 of 100


def test_correct_sparse_vector_passes() -> None:
    r = search_audit(
        svt,
        data=[1, 1, 1, 1, 1],
        neighbours="queries",
        claim_epsilon=1.0,
        random_pairs=2,
        screen_trials=300,
        trials=3000,
        audit_pairs=2,
    )
    assert not r.violation


def _config(search: str, extra: str = "") -> dict:
    text = (
        '[audit]\nname = "x"\nkinds = ["mechanism"]\n[mechanism]\n'
        f'name = "plugins.bit_response:respond"\n{extra}\n'
        f"[mechanism.search]\n{search}\n[mechanism.claim]\nepsilon = 1.0\n"
    )
    return tomllib.loads(text)


@pytest.mark.parametrize(
    ("search", "extra", "message"),
    [
        ('data = [1]\nneighbours = "records"', "", "needs 'values'"),
        ('data = [1]\nneighbours = "queries"\nvalues = [0, 1]', "", "'values' is used with"),
        ('data = [1]\nneighbours = "records"\nnorm = "l1"\nvalues = [0]', "", "'norm' is used"),
        (
            'data = [1]\nneighbours = "queries"',
            "data = [[0], [1]]",
            "remove \\[mechanism\\] 'data'",
        ),
    ],
)
def test_table_errors_teach(search: str, extra: str, message: str) -> None:
    with pytest.raises(DpauditError, match=message):
        parse_config(_config(search, extra))


def test_search_needs_a_user_mechanism() -> None:
    text = (
        '[audit]\nname = "x"\nkinds = ["mechanism"]\n[mechanism]\nname = "laplace"\n'
        'epsilon = 1.0\n[mechanism.search]\ndata = [0]\nneighbours = "queries"\n'
    )
    with pytest.raises(DpauditError, match="searches the inputs of a user mechanism"):
        parse_config(tomllib.loads(text))


def test_outputs_whose_length_reveals_the_pair_are_refused() -> None:
    def per_record(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
        keep = rng.random((size, np.size(data))) < 0.75
        return np.where(keep, data, 1 - np.asarray(data))

    with pytest.raises(DpauditError, match="length alone tells the inputs apart"):
        search_audit(
            per_record,
            data=[1, 0],
            neighbours="records",
            values=[0, 1],
            claim_epsilon=1.0,
            relation="add-remove",
            screen_trials=100,
        )
    ok = search_audit(
        per_record,
        data=[1, 0],
        neighbours="records",
        values=[0, 1],
        claim_epsilon=2.0,
        relation="replace-one",
        screen_trials=200,
        trials=3000,
    )
    assert not ok.violation  # ln 3 ≈ 1.10 < 2


def test_search_refuses_a_sequential_audit(tmp_path: Path) -> None:
    import shutil

    shutil.copytree(AUDITS / "plugins", tmp_path / "plugins")  # the file's folder is searched
    text = (AUDITS / "search-rr.toml").read_text()
    path = tmp_path / "search-sequential.toml"
    path.write_text(text.replace("seed = 0", 'seed = 0\nstopping = "sequential"', 1))
    with pytest.raises(DpauditError, match="cannot run with \\[audit\\] stopping"):
        run_audit(path, output_dir=tmp_path / "run")
