"""The black-box gradient canary: its score's law in the engine against the last-iterate
pair (KS tests, fixed seeds, with a power control), its formula, its table's rules, and the
validity of the μ bound its scores give against the exact GDP curve of full-batch DP-GD."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from dpaudit.bounds import mu_lower_bound
from dpaudit.dpsgd.canaries import gradient_canary_scores
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.units import dpsgd_unit
from dpaudit.errors import DataError, DpauditError
from dpaudit.planning.last_iterate import last_iterate_sample

_TRAINING = {
    "epochs": 2,
    "batch_size": 25,
    "learning_rate": 0.5,
    "dp": {"noise_multiplier": 1.0, "clipping_norm": 1.0},
}


def _section(**extra: object) -> dict[str, object]:
    return {
        "trainer": "dpsgd",
        "canary": "gradient",
        "threat_model": "black-box",
        "rows": 100,
        "trials": 300,
        "training": _TRAINING,
        **extra,
    }


def _pair_cdf(q: float, t: int, sigma: float) -> Callable[[np.ndarray], np.ndarray]:
    k = np.arange(t + 1)
    b = stats.binom.pmf(k, t, q)
    s = math.sqrt(t) * sigma
    return lambda x: (b * stats.norm.cdf((np.asarray(x)[..., None] - k) / s)).sum(axis=-1)


@pytest.mark.parametrize("model", [{}, {"model": "mlp", "hidden": [8]}])
def test_engine_scores_follow_the_last_iterate_pair(model: dict[str, object]) -> None:
    # 100 rows, batch 25, 2 epochs: q = 0.25, T = 8, σ = 1. The score (units of C) must be
    # N(0, 8) without the canary and Binomial(8, 0.25) + N(0, 8) with it, exactly: for an
    # MLP too (its canary is a first-layer weight on the all-zero feature, which no real
    # gradient touches and which moves nothing else).
    section = DpsgdSection.model_validate(_section(**model))
    spec = DpsgdSpec(section=section, seed=7, unit_size=600, base_dir=".")
    out = dpsgd_unit(spec, "dpsgd-00000")
    inc = out["included"].astype(bool)
    neg, pos = out["scores"][~inc], out["scores"][inc]
    assert neg.size == pos.size == 300
    assert np.all(out["sampling_rate"] == 0.25)
    assert np.all(out["steps"] == 8)
    # a correct engine fails each check with probability 1e-3 (fixed seed: deterministic)
    assert stats.kstest(neg, stats.norm(0.0, math.sqrt(8)).cdf).pvalue > 1e-3
    assert stats.kstest(pos, _pair_cdf(0.25, 8, 1.0)).pvalue > 1e-3
    # power: the canary's arm is not the null law (its mean is qT = 2 of C higher)
    assert stats.kstest(pos, stats.norm(0.0, math.sqrt(8)).cdf).pvalue < 1e-3
    # The grey-box noise check reads the canary's all-zero feature only in the models
    # without the canary: in the others that coordinate carries the canary (NaN there).
    noise = out["greybox_untouched_noise"]
    assert np.all(np.isnan(noise[inc]))
    assert np.all(np.isfinite(noise[~inc]))


def test_an_mlp_starts_from_one_shared_default_init_with_the_canary_coordinate_at_zero() -> None:
    # θ₀ = 0 would leave an MLP's hidden units identical forever; the shared start is one
    # draw of torch's default init U(−1/√in, 1/√in), 0 on the canary's coordinate only.
    from dpaudit.dpsgd.setup import _setup

    section = DpsgdSection.model_validate(_section(model="mlp", hidden=[8]))
    spec = DpsgdSpec(section=section, seed=7, unit_size=600, base_dir=".")
    setup = _setup(spec)
    theta0 = np.asarray(setup.training.initial_parameters)
    d = setup.X.shape[1]
    index = int(np.argmax(setup.direction))
    assert index == d - 1
    assert theta0[index] == 0.0
    first = theta0[: 8 * d].reshape(8, d)
    assert np.all(np.abs(first) <= 1 / math.sqrt(d))
    assert np.count_nonzero(first) == 8 * d - 1
    second = theta0[8 * d + 8 : 8 * d + 8 + 2 * 8]
    assert np.all(np.abs(second) <= 1 / math.sqrt(8))
    assert np.unique(second).size == 16
    # A logistic model still starts at 0 (its scores are unchanged).
    logistic = _setup(DpsgdSpec(section=DpsgdSection.model_validate(_section()), seed=7,
                                unit_size=600, base_dir="."))  # fmt: skip
    assert not np.any(logistic.training.initial_parameters)


def test_score_formula() -> None:
    theta = np.array([[0.5, -0.2, 3.0], [0.5, 0.1, 3.0]])
    got = gradient_canary_scores(
        theta, index=1, initial=0.1, learning_rate=0.5, clipping_norm=2.0, divisor=25.0
    )
    # −(θ − θ₀)·divisor/(lr·C) = −(θ − 0.1)·25
    np.testing.assert_allclose(got, [7.5, 0.0])
    with pytest.raises(DataError, match=r"must be \(K, P\)"):
        gradient_canary_scores(
            theta[0], index=0, initial=0.0, learning_rate=1.0, clipping_norm=1.0, divisor=1.0
        )
    with pytest.raises(DpauditError, match="needs learning_rate, clipping_norm and divisor > 0"):
        gradient_canary_scores(
            theta, index=0, initial=0.0, learning_rate=0.0, clipping_norm=1.0, divisor=1.0
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"trainer": "plain"}, "canary = 'gradient' needs the 'dpsgd' or 'dpgd' trainer"),
        ({"training": {**_TRAINING, "momentum": 0.9}}, "set momentum = 0 and weight_decay = 0"),
        ({"zero_features": 0}, "needs an all-zero feature"),
        ({"threat_model": "white-box"}, "'dirac' gradient canary is observed white-box"),
    ],
)
def test_table_rules(extra: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        DpsgdSection.model_validate(_section(**extra))


def test_validity_against_exact_gdp_with_power_control() -> None:
    # Full-batch DP-GD (q = 1), T = 4, σ = 2: the gradient canary's scores are exactly
    # N(4, 16) against N(0, 16) (the law the engine test checks at q < 1), so the audit's
    # μ_LB is a rigorous lower bound on μ = √T/σ = 1: over 400 repeated audits it may exceed
    # 1 in at most a (1 − c) = 0.1 fraction; the binomial(400, 0.1) upper 0.999 quantile
    # is 59. Power control: a run with half the noise (μ = 2) exceeds 1 in most audits.
    c, repeats, trials = 0.9, 400, 300
    ceiling = int(stats.binom.ppf(0.999, repeats, 1 - c))
    rng = np.random.default_rng(2026)
    kw = {"sampling_rate": 1.0, "steps": 4}

    def exceed(sigma: float) -> int:
        count = 0
        for i in range(repeats):
            neg = last_iterate_sample(
                **kw, noise_multiplier=sigma, included=False, size=trials, rng=rng
            )
            pos = last_iterate_sample(
                **kw, noise_multiplier=sigma, included=True, size=trials, rng=rng
            )
            count += mu_lower_bound(neg, pos, confidence_level=c, seed=i).value > 1.0
        return count

    assert exceed(2.0) <= ceiling
    assert exceed(1.0) > repeats // 2
