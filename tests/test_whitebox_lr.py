"""The likelihood-ratio white-box score (dpaudit/theory/whitebox.py and its use in the dpsgd kind).

The formula is checked against scipy's normal densities and against its q = 1 closed
form; the engine's rescaling of the privatised gradient to the noisy sum's units is
checked against the canary flags the engine reports; the audit with this score is
repeated 400 times on the correct engine (false-violation rate within the binomial
bound of 1 − confidence), and its power is compared with the plain sum on the same runs.
Statistical tests fix their seeds; their tolerances come from binomial intervals.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from dpaudit.accounting.upper_bounds import from_records
from dpaudit.dpsgd.api import run_dpsgd_from_section
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.setup import _setup
from dpaudit.dpsgd.summary import _many_run_bounds
from dpaudit.dpsgd.units import dpsgd_unit
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.kinds.base import VerdictBudget
from dpaudit.models import ModelSpec
from dpaudit.stats import clopper_pearson
from dpaudit.theory.whitebox import WHITE_BOX_SCORES, mixture_log_likelihood_ratio
from dpaudit.trainers import canary_observer
from dpaudit.training import (
    CoordinateCanaries,
    DPConfig,
    GradientCanary,
    TrainingSpec,
    train_many,
)

ROOT = Path(__file__).resolve().parent.parent


def _section(**changes: typing.Any) -> DpsgdSection:
    base: dict[str, typing.Any] = {
        "trainer": "dpsgd",
        "canary": "dirac",
        "threat_model": "white-box",
        "rows": 20,
        "trials": 50,
        "training": {
            "epochs": 2,
            "batch_size": 5,
            "learning_rate": 0.5,
            "dp": {"noise_multiplier": 1.0, "clipping_norm": 1.0},
        },
    }
    return DpsgdSection.model_validate({**base, **changes})


# ----------------------------------------------------------------------------- formula


@pytest.mark.parametrize("q", [0.001, 0.02, 0.25, 0.9, 1.0])
@pytest.mark.parametrize(("sigma", "clip"), [(0.6, 1.0), (1.3, 0.2), (0.8, 4.0)])
def test_formula_matches_the_normal_densities(q, sigma, clip):
    # Independent reference: log of the mixture's density over the null's, from scipy's
    # pdfs, on points within ±6σC of both means (where the pdfs do not underflow).
    x = np.linspace(-6 * sigma * clip, clip + 6 * sigma * clip, 101)
    s = sigma * clip
    mix = (1 - q) * stats.norm.pdf(x, 0.0, s) + q * stats.norm.pdf(x, clip, s)
    reference = np.log(mix) - np.log(stats.norm.pdf(x, 0.0, s))
    got = mixture_log_likelihood_ratio(
        x, sampling_rate=q, noise_multiplier=sigma, clipping_norm=clip
    )
    np.testing.assert_allclose(got, reference, rtol=1e-10, atol=1e-12)


def test_formula_is_stable_far_in_the_tails():
    # At x = ±200σC the pdfs underflow; the closed forms are log q + (x/C − 1/2)/σ² (its
    # other term e^{−a}(1 − q)/q is below 1e-300 there) and log(1 − q) + log1p(q e^{a}).
    q, sigma, clip = 0.02, 0.6, 1.0
    far = np.array([200 * sigma * clip])
    a = (far / clip - 0.5) / sigma**2
    kw = {"sampling_rate": q, "noise_multiplier": sigma, "clipping_norm": clip}
    np.testing.assert_allclose(mixture_log_likelihood_ratio(far, **kw), math.log(q) + a, rtol=1e-15)
    low = mixture_log_likelihood_ratio(-far, **kw)
    expected = math.log1p(-q) + math.log1p(q * math.exp((-far[0] / clip - 0.5) / sigma**2))
    np.testing.assert_allclose(low, expected, rtol=1e-15)
    # A tiny q keeps its precision: log(1 − q + q·e^a) = q·(e^a − 1) + O(q²) for q → 0.
    a0 = (0.3 / clip - 0.5) / sigma**2
    tiny = mixture_log_likelihood_ratio(
        np.array([0.3]), sampling_rate=1e-12, noise_multiplier=sigma, clipping_norm=clip
    )
    assert tiny[0] == pytest.approx(1e-12 * math.expm1(a0), rel=1e-9)


def test_full_batch_is_an_affine_map_of_the_sum():
    # q = 1: log-ratio (C·x − C²/2)/(σ²C²), so a run's score is Σx/(σ²C) − T/(2σ²).
    rng = np.random.default_rng(4)
    sigma, clip = 0.7, 1.5
    x = rng.normal(size=(30, 12))
    per_step = mixture_log_likelihood_ratio(
        x, sampling_rate=1.0, noise_multiplier=sigma, clipping_norm=clip
    )
    np.testing.assert_array_equal(per_step, (x / clip - 0.5) / sigma**2)
    runs = per_step.sum(axis=1)
    affine = x.sum(axis=1) / (sigma**2 * clip) - x.shape[1] / (2 * sigma**2)
    np.testing.assert_allclose(runs, affine, rtol=1e-12, atol=1e-12)
    assert np.array_equal(np.argsort(runs), np.argsort(x.sum(axis=1)))


def test_rates_broadcast_per_model():
    x = np.array([[0.5, 1.5], [0.5, 1.5]])
    q = np.array([[0.1], [0.3]])
    got = mixture_log_likelihood_ratio(x, sampling_rate=q, noise_multiplier=1.0, clipping_norm=1.0)
    for i, qi in enumerate((0.1, 0.3)):
        np.testing.assert_array_equal(
            got[i],
            mixture_log_likelihood_ratio(
                x[i], sampling_rate=qi, noise_multiplier=1.0, clipping_norm=1.0
            ),
        )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sampling_rate": 0.0}, "The 'sampling_rate' parameter must be in (0, 1]. Got 0.0"),
        ({"sampling_rate": 1.5}, "The 'sampling_rate' parameter must be in (0, 1]. Got 1.5"),
        (
            {"sampling_rate": np.array([0.5, 1.5])},
            "The 'sampling_rate' parameter must be in (0, 1]. Got 1.5 instead.",
        ),
        ({"noise_multiplier": 0.0}, "The 'noise_multiplier' parameter must be in (0, inf)"),
        ({"clipping_norm": -1.0}, "The 'clipping_norm' parameter must be in (0, inf)"),
        ({"observations": [0.0, np.nan]}, "The 'observations' parameter must hold finite"),
    ],
)
def test_formula_rejects_bad_inputs(kwargs, message):
    args = {
        "observations": [0.0, 1.0],
        "sampling_rate": 0.5,
        "noise_multiplier": 1.0,
        "clipping_norm": 1.0,
    } | kwargs
    observations = args.pop("observations")
    with pytest.raises(DpauditError, match=re.escape(message)):
        mixture_log_likelihood_ratio(observations, **args)


def test_whitebox_module_loads_no_torch():
    code = "import sys, dpaudit.theory.whitebox; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- config


def test_score_option_defaults_to_the_likelihood_ratio_and_lists_its_values():
    assert _section().score == "likelihood-ratio"
    assert typing.get_args(DpsgdSection.model_fields["score"].annotation) == WHITE_BOX_SCORES


def test_a_bad_score_is_a_config_error_naming_the_values(tmp_path):
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "run_dpsgd_from_section: 'dpsgd.score': Input should be 'likelihood-ratio' or "
            "'sum' (got 'lr')"
        ),
    ):
        run_dpsgd_from_section({**_section().model_dump(), "score": "lr"}, seed=0, run_dir=tmp_path)


def test_likelihood_ratio_without_noise_is_a_config_error():
    membership = np.ones((2, 10), dtype=bool)
    training = TrainingSpec(epochs=1, batch_size=2, dp=DPConfig(0.0, 1.0))
    with pytest.raises(ConfigError, match=re.escape('Set score = "sum" in [dpsgd]')):
        canary_observer(membership, training, score="likelihood-ratio", direction=np.ones(3))
    sums = canary_observer(membership, training, score="sum", direction=np.ones(3))
    with pytest.raises(DpauditError, match="without a mixture"):
        _ = sums.log_likelihood_ratios


# ---------------------------------------------------------------------- engine rescaling


def test_observer_rescales_to_the_noisy_sum_exactly():
    # Poisson DP-SGD, n = 40, b = 4 (q = 0.1), σ = 0.9, C = 0.5. The canary coordinate's
    # privatised gradient times q·n must be noise + C·[canary sampled] with noise
    # ~ N(0, σ²C²): checked by Kolmogorov–Smirnov at level 1e-3 on all model-steps, and the
    # observer's LR must equal the formula applied to those rescaled values.
    rng = np.random.default_rng(0)
    n, d = 40, 3
    X = np.concatenate([rng.normal(size=(n, d)), np.zeros((n, 1))], axis=1).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    spec = ModelSpec(kind="logistic")
    column = d  # class 0's weight on the zero feature
    direction = np.zeros(2 * (d + 1) + 2)
    direction[column] = 1.0
    training = TrainingSpec(
        epochs=3, batch_size=4, learning_rate=0.5, dp=DPConfig(0.9, 0.5), full_batch=False
    )
    k = 200
    included = np.arange(k) % 2 == 1
    membership = np.ones((k, n), dtype=bool)
    observer = canary_observer(membership, training, score="likelihood-ratio", direction=direction)
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def both(info):
        observer(info)
        assert info.canary_sampled is not None
        seen.append(
            (info.gradients[:, column].double().numpy().copy(), info.canary_sampled.numpy())
        )

    train_many(
        X,
        y,
        membership,
        model=spec,
        training=training,
        seed=5,
        step_observer=both,
        gradient_canary=GradientCanary(direction, included),
    )
    g = np.stack([s[0] for s in seen], axis=1)  # (K, T)
    sampled = np.stack([s[1] for s in seen], axis=1)
    x = g * 4.0  # q·n = b = 4
    assert sampled[~included].sum() == 0
    z = (x - 0.5 * sampled) / (0.9 * 0.5)
    assert stats.kstest(z.reshape(-1), "norm").pvalue > 1e-3
    expected = mixture_log_likelihood_ratio(
        x, sampling_rate=0.1, noise_multiplier=0.9, clipping_norm=0.5
    ).sum(axis=1)
    np.testing.assert_allclose(observer.log_likelihood_ratios, expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(observer.sums, g.sum(axis=1))


def test_dpgd_likelihood_ratio_is_the_gdp_log_ratio(tmp_path):
    # Full batch, T = 10, σ = √10 (μ = 1), n = 50: the LR score is Σx/(σ²C) − T/(2σ²),
    # which is N(−μ²/2, μ²) without the canary and N(μ²/2, μ²) with it (the log-ratio of
    # N(μ, 1) to N(0, 1) at a standard normal draw): Kolmogorov–Smirnov at level 1e-3,
    # and the same runs scored by "sum" map onto it affinely.
    dpgd = {
        "trainer": "dpgd",
        "rows": 50,
        "trials": 300,
        "training": {"epochs": 10, "learning_rate": 0.5, "dp": {"target_mu": 1.0}},
    }
    units = {}
    for score in WHITE_BOX_SCORES:
        section = DpsgdSection.model_validate({**dpgd, "score": score})
        spec = DpsgdSpec(section=section, seed=3, unit_size=1000, base_dir=str(tmp_path))
        units[score] = dpsgd_unit(spec, "dpsgd-00000")
    lr, inc = units["likelihood-ratio"]["scores"], units["likelihood-ratio"]["included"]
    assert stats.kstest(lr[~inc] + 0.5, "norm").pvalue > 1e-3
    assert stats.kstest(lr[inc] - 0.5, "norm").pvalue > 1e-3
    sigma2 = 10.0
    affine = units["sum"]["scores"] * 50 / sigma2 - 10 / (2 * sigma2)
    np.testing.assert_allclose(lr, affine, rtol=1e-9, atol=1e-9)


def test_one_run_observer_scores_each_canary_coordinate():
    # The one-run audit's canaries: the observer's per-coordinate sums are the engine's
    # canary_sums bit for bit, and its LR is the formula on the sums' per-step terms.
    rng = np.random.default_rng(1)
    n, d, m = 60, 3, 12
    X = np.concatenate([rng.normal(size=(n, d)), np.zeros((n, m))], axis=1).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    indices = np.arange(d, d + m)
    included = np.arange(m) % 2 == 0
    training = TrainingSpec(epochs=2, batch_size=6, dp=DPConfig(0.7, 1.0))
    membership = np.ones((1, n), dtype=bool)
    observer = canary_observer(membership, training, score="likelihood-ratio", columns=indices)
    steps: list[np.ndarray] = []

    def both(info):
        observer(info)
        steps.append(info.gradients[0, torch.as_tensor(indices)].double().numpy().copy())

    result = train_many(
        X,
        y,
        membership,
        model=ModelSpec(kind="logistic"),
        training=training,
        seed=2,
        step_observer=both,
        coordinate_canaries=CoordinateCanaries(indices, included, seed=3),
    )
    np.testing.assert_array_equal(observer.sums[0], result.canary_sums)
    x = np.stack(steps) * 6.0  # q·n = b = 6
    expected = mixture_log_likelihood_ratio(
        x, sampling_rate=0.1, noise_multiplier=0.7, clipping_norm=1.0
    ).sum(axis=0)
    np.testing.assert_allclose(observer.scores("likelihood-ratio")[0], expected, rtol=1e-9)


# ---------------------------------------------------------------- validity and power


def _engine_scores(section: DpsgdSection, *, seed: int, total: int, offset: int = 0):
    """Both white-box scores of ``total`` models of ``section`` (odd index = canary in),
    trained as the dpsgd kind trains them; model g's streams depend on (seed, g) only."""
    spec = DpsgdSpec(section=section, seed=seed, unit_size=total, base_dir=".")
    setup = _setup(spec)
    g = np.arange(offset, offset + total)
    included = g % 2 == 1
    membership = np.ones((total, setup.X.shape[0]), dtype=bool)
    observer = canary_observer(
        membership,
        setup.training,
        score="likelihood-ratio",
        direction=setup.direction,
        model_offset=offset,
    )
    result = train_many(
        setup.X,
        setup.y,
        membership,
        model=setup.model,
        training=setup.training,
        seed=seed,
        num_classes=setup.num_classes,
        model_offset=offset,
        step_observer=observer,
        gradient_canary=GradientCanary(setup.direction, included),
    )
    return included, observer.sums, observer.log_likelihood_ratios, result.records


def test_likelihood_ratio_audits_of_the_correct_engine_rarely_violate():
    # 400 audits of Poisson DP-SGD (n = 20, b = 5: q = 0.25, T = 8, σ = 0.4, C = 1), each
    # with 25 models per arm and its own split seed; the audits' models are disjoint
    # global indices, whose streams the engine derives from (seed, index) alone, so the
    # audits are independent. Each audit spends 1 − c = 0.05 on its ε and μ comparisons
    # as the kind does (0.975 each); a correct audit says "violation" with probability
    # at most 0.05, so the count V over 400 audits is stochastically at most
    # Binomial(400, 0.05), and V > binom.ppf(0.999, 400, 0.05) = 35 happens with
    # probability at most 1e-3 on correct code.
    repeats, per_arm, c = 400, 25, 0.95
    ceiling = int(stats.binom.ppf(0.999, repeats, 1 - c))
    assert ceiling == 35
    section = _section(
        trials=per_arm,
        training={
            "epochs": 2,
            "batch_size": 5,
            "learning_rate": 0.5,
            "dp": {"noise_multiplier": 0.4, "clipping_norm": 1.0},
        },
    )
    inc, _, lr, records = _engine_scores(section, seed=11, total=2 * per_arm * repeats)
    upper = from_records(list(records), 1e-5)
    level = VerdictBudget(c, 2).level
    violations, positive = 0, 0
    for r in range(repeats):
        part = slice(2 * per_arm * r, 2 * per_arm * (r + 1))
        s, i = lr[part], inc[part]
        eps, mu = _many_run_bounds(section, upper, s[~i], s[i], level=level, seed=r)
        assert upper.mu is not None
        violations += int(eps.value > upper.epsilon or mu.value > upper.mu)
        positive += int(mu.value > 0)
    assert violations <= ceiling
    # Power control: the audits measure something (μ_LB > 0 in some of them), so the
    # test is not passed by bounds that are always 0.
    assert positive > 0


def test_likelihood_ratio_is_more_powerful_than_the_sum_under_poisson_sampling():
    # Poisson DP-SGD with n = 50, b = 2 (q = 0.04), T = 50, σ = 0.4, C = 1; the SAME
    # runs scored both ways. Each score's threshold is the 90 % quantile of its scores
    # on 400 calibration runs without the canary (empirical FPR 0.10 for both); the
    # true positive rates are counted on 400 other runs with the canary. Simulating the
    # mixture gives TPR ≈ 0.30 for the sum and ≈ 0.59 for the LR. The claim "LR more
    # powerful" is asserted with a margin from the binomial intervals: the LR's one-sided
    # Clopper–Pearson lower limit at 0.999 must exceed the sum's upper limit at 0.999.
    section = _section(
        rows=50,
        training={
            "epochs": 2,
            "batch_size": 2,
            "learning_rate": 0.5,
            "dp": {"noise_multiplier": 0.4, "clipping_norm": 1.0},
        },
    )
    inc, sums, lr, records = _engine_scores(section, seed=7, total=800)
    assert records[0].sampling_rate == pytest.approx(0.04)
    assert records[0].steps == 50
    tprs = {}
    for name, s in (("sum", sums), ("likelihood-ratio", lr)):
        threshold = np.quantile(s[~inc], 0.9)
        tprs[name] = int(np.sum(s[inc] > threshold))
    n_pos = int(inc.sum())
    lr_low = clopper_pearson(
        tprs["likelihood-ratio"], n_pos, confidence_level=0.999, alternative="greater"
    ).low
    sum_high = clopper_pearson(tprs["sum"], n_pos, confidence_level=0.999, alternative="less").high
    assert lr_low > sum_high, tprs
