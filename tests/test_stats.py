from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import binomtest
from statsmodels.stats.proportion import proportion_confint

from dpaudit import DpauditError
from dpaudit.stats import clopper_pearson, clopper_pearson_upper

GRID = [(k, n) for n in (1, 2, 7, 50, 1000, 100_000) for k in sorted({0, 1, n // 3, n - 1, n})]


@pytest.mark.parametrize(("k", "n"), GRID)
@pytest.mark.parametrize("level", [0.5, 0.95, 0.999])
def test_two_sided_matches_scipy_and_statsmodels(k: int, n: int, level: float) -> None:
    ours = clopper_pearson(k, n, confidence_level=level)
    ref = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    sm_low, sm_high = proportion_confint(k, n, alpha=1 - level, method="beta")
    assert ours.low == pytest.approx(ref.low, abs=1e-10)
    assert ours.high == pytest.approx(ref.high, abs=1e-10)
    assert ours.low == pytest.approx(sm_low, abs=1e-10)
    assert ours.high == pytest.approx(sm_high, abs=1e-10)


@pytest.mark.parametrize(("k", "n"), GRID)
@pytest.mark.parametrize("alternative", ["less", "greater"])
def test_one_sided_matches_scipy(k: int, n: int, alternative: str) -> None:
    ours = clopper_pearson(k, n, confidence_level=0.975, alternative=alternative)
    ref = binomtest(k, n, alternative=alternative).proportion_ci(
        confidence_level=0.975, method="exact"
    )
    assert ours.low == pytest.approx(ref.low, abs=1e-10)
    assert ours.high == pytest.approx(ref.high, abs=1e-10)


def test_edges_are_exact_not_nan() -> None:
    assert clopper_pearson(0, 10).low == 0.0
    assert clopper_pearson(10, 10).high == 1.0
    # k = 0 upper limit has the closed form 1 − (a)^(1/n) with a the tail mass
    assert clopper_pearson(0, 10, alternative="less", confidence_level=0.95).high == pytest.approx(
        1 - 0.05 ** (1 / 10), abs=1e-12
    )
    single = clopper_pearson(1, 1)
    assert single == (pytest.approx(0.025), 1.0)


def test_vectorised_upper_matches_scalar() -> None:
    ks = np.array([0, 3, 17, 99, 100])
    got = clopper_pearson_upper(ks, 100, level=0.99)
    want = [
        clopper_pearson(int(k), 100, confidence_level=0.99, alternative="less").high for k in ks
    ]
    np.testing.assert_allclose(got, want, atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"k": -1, "n": 10},
            r"The 'k' parameter must be an integer in \[0, inf\)\. Got -1 instead\.",
        ),
        ({"k": 11, "n": 10}, r"'k' parameter must be in \[0, n\] = \[0, 10\]. Got 11"),
        ({"k": 0, "n": 0}, r"The 'n' parameter must be an integer in \[1, inf\)\. Got 0 instead\."),
        ({"k": 1, "n": 10, "confidence_level": 1.0}, r"'confidence_level' .* \(0, 1\). Got 1.0"),
        ({"k": 1, "n": 10, "confidence_level": 0.0}, r"'confidence_level'"),
        ({"k": 1, "n": 10, "alternative": "both"}, r"'alternative' parameter must be one of"),
        (
            {"k": 1.5, "n": 10},
            r"The 'k' parameter must be an integer in \[0, inf\)\. Got 1\.5 instead\.",
        ),
    ],
)
def test_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(DpauditError, match=match):
        clopper_pearson(**kwargs)


@given(
    n=st.integers(1, 500),
    data=st.data(),
    c1=st.floats(0.5, 0.99),
    c2=st.floats(0.5, 0.99),
)
def test_interval_contains_estimate_and_widens_with_confidence(n, data, c1, c2) -> None:
    k = data.draw(st.integers(0, n))
    lo, hi = sorted((c1, c2))
    narrow = clopper_pearson(k, n, confidence_level=lo)
    wide = clopper_pearson(k, n, confidence_level=hi)
    assert narrow.low <= k / n <= narrow.high
    assert wide.low <= narrow.low + 1e-12
    assert wide.high >= narrow.high - 1e-12
