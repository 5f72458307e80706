from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.stats import mannwhitneyu, norm
from sklearn.metrics import roc_auc_score, roc_curve

from dpaudit import DpauditError
from dpaudit.tradeoff import TradeoffCurve, delong_auc_variance, membership_metrics

scores = arrays(np.float64, st.integers(1, 40), elements=st.integers(-5, 5).map(float))


def test_counts_on_a_small_example() -> None:
    curve = TradeoffCurve.from_scores([0, 1, 2], [1, 2, 3, 3])
    np.testing.assert_array_equal(curve.thresholds, [np.inf, 3, 2, 1, 0])
    np.testing.assert_array_equal(curve.fp, [0, 0, 1, 2, 3])
    np.testing.assert_array_equal(curve.tp, [0, 2, 3, 4, 4])
    np.testing.assert_array_equal(curve.fn, [4, 2, 1, 0, 0])
    assert curve.tpr_at(0.0) == 0.5
    assert curve.tpr_at(1 / 3) == 0.75
    assert curve.advantage() == 0.5  # at t = 3: TPR ½, FPR 0


@given(neg=scores, pos=scores)
def test_auc_equals_mann_whitney_and_sklearn(neg, pos) -> None:
    curve = TradeoffCurve.from_scores(neg, pos)
    u = mannwhitneyu(pos, neg, alternative="two-sided").statistic
    assert curve.auc() == pytest.approx(u / (neg.size * pos.size), abs=1e-12)
    y = np.r_[np.zeros(neg.size), np.ones(pos.size)]
    if 0 < y.sum() < y.size:
        assert curve.auc() == pytest.approx(roc_auc_score(y, np.r_[neg, pos]), abs=1e-12)


@given(neg=scores, pos=scores)
def test_roc_points_match_sklearn(neg, pos) -> None:
    curve = TradeoffCurve.from_scores(neg, pos)
    y = np.r_[np.zeros(neg.size), np.ones(pos.size)]
    fpr, tpr, _ = roc_curve(y, np.r_[neg, pos], drop_intermediate=False)
    ours = set(zip(np.round(curve.fpr, 12), np.round(curve.tpr, 12), strict=True))
    assert set(zip(np.round(fpr, 12), np.round(tpr, 12), strict=True)) <= ours
    # monotone: both rates rise as the threshold falls
    assert np.all(np.diff(curve.fp) >= 0)
    assert np.all(np.diff(curve.tp) >= 0)


def test_delong_variance_matches_hanley_mcneil_for_separated_normals() -> None:
    # For large samples DeLong's variance agrees with Hanley & McNeil (1982), eq. 2,
    # which uses only the AUC and the sample sizes; exact agreement is not expected.
    rng = np.random.default_rng(0)
    neg, pos = rng.normal(0, 1, 4000), rng.normal(1, 1, 4000)
    a = TradeoffCurve.from_scores(neg, pos).auc()
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    hm = (a * (1 - a) + (4000 - 1) * (q1 - a * a) + (4000 - 1) * (q2 - a * a)) / (4000 * 4000)
    assert delong_auc_variance(neg, pos) == pytest.approx(hm, rel=0.1)


def test_membership_metrics_cover_truth() -> None:
    # N(0,1) vs N(1,1): AUC = Φ(1/√2) = 0.7602; TPR at FPR 0.1 = Φ(1 − Φ⁻¹(0.9)) = 0.3891.
    rng = np.random.default_rng(1)
    m = membership_metrics(rng.normal(0, 1, 20_000), rng.normal(1, 1, 20_000))
    assert m.auc_interval.low <= 0.7602 <= m.auc_interval.high
    at10 = m.tpr_at_fpr[0]
    assert at10.target_fpr == 0.1
    assert at10.fpr <= 0.1
    # The threshold is picked on the negatives only, so the positives' Clopper–Pearson
    # interval covers the true TPR at it (the FPR interval is biased by that very choice,
    # which is why these metrics are descriptive and bounds.py splits or corrects).
    true_tpr = norm.sf(at10.threshold - 1.0)
    assert at10.tpr_interval.low <= true_tpr <= at10.tpr_interval.high
    # max advantage of two unit-variance normals one apart: 2Φ(½) − 1 = 0.3829
    assert m.advantage_interval.low <= 0.3829 <= m.advantage_interval.high
    d = m.to_dict()
    assert [r["target_fpr"] for r in d["tpr_at_fpr"]] == [0.1, 0.01, 0.001]


@pytest.mark.parametrize(
    ("neg", "pos", "match"),
    [
        ([], [1.0], r"'negative_scores' parameter must hold at least one score"),
        ([0.0, np.nan], [1.0], r"NaN or infinite value\(s\) \(first at index 1"),
        ([0.0], [np.inf], r"'positive_scores'"),
        ([[0.0, 1.0], [1.0, 2.0]], [1.0], r"must be a 1-D array"),
    ],
)
def test_bad_scores(neg, pos, match) -> None:
    with pytest.raises(DpauditError, match=match):
        TradeoffCurve.from_scores(neg, pos)
