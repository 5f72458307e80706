"""The list experiment as a mechanism (audits/list-experiment.toml): its release, exact
laws, input errors, and the audit's answer to "does this satisfy DP?"."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpaudit.audit import run_audit

AUDITS = Path(__file__).resolve().parents[1] / "audits"


@pytest.fixture(autouse=True)
def _plugins_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(AUDITS))


def _plugin():  # type: ignore[no-untyped-def]
    from plugins import list_experiment

    return list_experiment


def test_difference_of_means_is_unbiased_over_every_split() -> None:
    # Exact: the average over all C(6, 3) splits of the released difference of means is
    # the share of "yes" answers (the item count technique's unbiasedness).
    le = _plugin()
    counts = np.array([0.0, 3.0, 1.0, 2.0, 2.0, 1.0])
    sensitive = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    masks = []
    for chosen in itertools.combinations(range(6), 3):
        m = np.zeros(6, dtype=bool)
        m[list(chosen)] = True
        masks.append(m)
    released = le.difference_of_means(counts, sensitive, np.array(masks))
    assert released.mean() == pytest.approx(sensitive.mean(), abs=1e-12)
    # one split by hand: treated {0, 1, 2} report 1, 3, 2; control {3, 4, 5} report 2, 2, 1
    assert released[0] == pytest.approx(2.0 - 5.0 / 3.0, abs=1e-12)


def test_release_laws_on_the_audited_pair() -> None:
    # D: everyone answers alike, so every split releases 0. D': respondent 1 says yes;
    # treated with probability 5/10, the release is then 1/5.
    le = _plugin()
    d = [1, 0] * 10
    d_prime = [1, 1] + [1, 0] * 9
    out = le.list_experiment(np.array(d), rng=np.random.default_rng(1), size=20_000)
    assert np.all(out == 0.0)
    out = le.list_experiment(np.array(d_prime), rng=np.random.default_rng(2), size=20_000)
    assert set(np.round(out, 12)) == {0.0, 0.2}
    hits = int(np.sum(out > 0.1))
    # two-sided 1e-6 binomial acceptance region for p = 1/2 (fails wrongly 1e-6 of the time)
    low, high = stats.binom.ppf([5e-7, 1 - 5e-7], 20_000, 0.5)
    assert low <= hits <= high


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ([1, 0, 1], "two numbers per respondent"),
        ([1, 0, 1, 2], r"must be 0 or 1\. Got \[0\.0, 2\.0\]"),
        ([1, 0, 0.5, 1], r"whole number >= 0\. Got \[1\.0, 0\.5\]"),
    ],
)
def test_bad_data_says_what_is_expected(data: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _plugin().list_experiment(np.array(data), rng=np.random.default_rng(0), size=3)


def test_answer_wording() -> None:
    le = _plugin()
    text = le.answer(7.94, confidence_level=0.975, delta=0.0)
    assert "not (ε, δ = 0)-DP for any ε < 7.94" in text
    assert text.startswith("Does this satisfy DP? No")
    assert "does not prove" in le.answer(0.0, confidence_level=0.95, delta=1e-5)
    with pytest.raises(ValueError, match="finite and >= 0"):
        le.answer(math.nan, confidence_level=0.95, delta=0.0)


def test_audit_answers_the_slide(tmp_path: Path) -> None:
    result = run_audit(AUDITS / "list-experiment.toml", output_dir=tmp_path, write=False)
    data = result.to_dict()
    assert data["verdict"] == "pass"
    eps = next(b for b in data["bounds"] if b["parameter"] == "epsilon")
    lower = eps["lower"]
    counts, c = lower["counts"], lower["confidence_level"]
    # Independent reference: one-sided Clopper–Pearson upper ends at (1 − c)/2 each
    # (scipy's beta quantiles), then ε_LB = ln((1 − δ − FNR_hi)/FPR_hi) at δ = 0.
    a = (1 - c) / 2
    assert counts["fp"] == 0  # D never releases anything but 0
    fpr_hi = 1 - a ** (1 / counts["negatives"])
    fnr_hi = stats.beta.ppf(1 - a, counts["fn"] + 1, counts["positives"] - counts["fn"])
    assert lower["value"] == pytest.approx(math.log((1 - fnr_hi) / fpr_hi), rel=1e-9)
    assert lower["value"] > 7.0
    text = _plugin().answer(lower["value"], confidence_level=c, delta=lower["delta"])
    assert f"for any ε < {lower['value']:.3g}" in text
    assert "not DP" in data["config"]["audit"]["description"]
