"""Learned distinguishers: ``[mechanism] score = "learned"``.

A classifier fitted on some trials scores the others (:mod:`dpaudit.mechanisms.learned`);
the three-way split that keeps the bound rigorous is :func:`dpaudit.bounds.learned_lower_bounds`
(in memory) and :func:`dpaudit.mechanisms.summary.learned_streamed` (by whole units).
Tested here: what each learner computes (closed forms), that the learner never sees a
counted trial, validity over repeated audits of correct mechanisms with a derived binomial
ceiling and a power control, the shipped examples and their exit codes through the CLI,
and the streamed path.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats
from typer.testing import CliRunner

from dpaudit import bounds as bounds_module
from dpaudit.bounds import (
    epsilon_and_mu_lower_bounds,
    fit_part,
    learned_lower_bounds,
)
from dpaudit.cli import app
from dpaudit.config import parse_config
from dpaudit.errors import DpauditError, InsufficientTrialsError
from dpaudit.kinds.base import RunContext
from dpaudit.mechanisms import summary as summary_module
from dpaudit.mechanisms.kind import KIND
from dpaudit.mechanisms.learned import PSEUDO_COUNT, fit_score
from dpaudit.mechanisms.noise import (
    k_randomized_response,
    laplace_llr,
    unary_encoding,
    user_mechanism,
    vector_gaussian,
    vector_laplace,
)
from dpaudit.mechanisms.schema import MechanismSection
from dpaudit.mechanisms.summary import (
    ScoredUnits,
    mechanism_summary,
    stream_counts,
    streamed_bounds,
    unit_design,
)
from dpaudit.mechanisms.units import MechanismSpec, mechanism_unit
from dpaudit.schemas import validate_results

ROOT = Path(__file__).resolve().parents[1]
AUDITS = ROOT / "audits"
runner = CliRunner()
C = 0.95
KEEP_BUGGY = 0.83  # audits/plugins/bit_response.py


@pytest.fixture(autouse=True)
def _plugins_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(AUDITS))


def _run(audit: Path, out: Path) -> tuple[int, dict, str]:
    result = runner.invoke(app, ["run", str(audit), "-q", "-o", str(out)])
    data = json.loads((out / "results.json").read_text()) if result.exit_code in (0, 1) else {}
    return result.exit_code, data, result.stderr


def _lower(data: dict, parameter: str) -> dict:
    # the score's own ε or μ bound (not the claim-curve comparison beside it)
    (row,) = [
        b
        for b in data["bounds"]
        if b["parameter"] == parameter and b["in_verdict"] and b["lower"]["method"] != "claim-curve"
    ]
    return row["lower"]


# ------------------------------------------------------------------- what a learner is


def test_counts_learner_is_the_smoothed_log_likelihood_ratio_of_each_value() -> None:
    # Fitting outputs: on D, value 0 ×6, 1 ×3, 2 ×1; on D', 0 ×1, 1 ×3, 2 ×6.
    neg = np.array([0.0] * 6 + [1.0] * 3 + [2.0])
    pos = np.array([0.0] + [1.0] * 3 + [2.0] * 6)
    score = fit_score(neg, pos, learner="counts")
    a, cells = PSEUDO_COUNT, 4  # three values seen, one cell for every unseen one
    want = {
        v: math.log((c1 + a) / (10 + a * cells)) - math.log((c0 + a) / (10 + a * cells))
        for v, c0, c1 in ((0.0, 6, 1), (1.0, 3, 3), (2.0, 1, 6))
    }
    got = score(np.array([0.0, 1.0, 2.0, 7.0, -0.0]))
    np.testing.assert_allclose(got[:3], [want[0.0], want[1.0], want[2.0]], rtol=1e-14)
    assert got[3] == 0.0  # unseen, equal arms: log(n0 + aV) − log(n1 + aV) = 0
    assert got[4] == got[0]  # −0.0 is the value 0
    assert score.learner == "counts"
    assert score.model["distinct_outputs"] == 3


def test_auto_counts_few_values_and_fits_logistic_to_continuous_outputs() -> None:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, (400, 3)).astype(float)
    assert fit_score(bits[:200], bits[200:]).learner == "counts"
    assert fit_score(rng.normal(size=200), rng.normal(size=200)).learner == "logistic"
    # 2**3 = 8 possible rows need 8 × 8 = 64 fitting outputs to be counted
    assert fit_score(bits[:20], bits[20:40]).learner == "logistic"


@pytest.mark.parametrize("learner", ["logistic", "boosting", "knn", "counts"])
def test_the_direction_is_learned_whichever_input_gives_larger_outputs(learner: str) -> None:
    rng = np.random.default_rng(3)
    n = 4000
    if learner == "counts":
        low, high = rng.binomial(4, 0.3, n).astype(float), rng.binomial(4, 0.7, n).astype(float)
        probe = np.array([0.0, 4.0])
    else:
        low, high = rng.normal(0.0, 1.0, n), rng.normal(2.0, 1.0, n)
        probe = np.array([-1.0, 3.0])
    for neg, pos, sign in ((low, high, 1.0), (high, low, -1.0)):
        s = fit_score(neg, pos, learner=learner, seed=0)(probe)
        assert sign * (s[1] - s[0]) > 0, (learner, s)


def test_logistic_recovers_the_gaussian_likelihood_ratio_in_two_dimensions() -> None:
    # f(D) = (0, 0), f(D') = (1, -0.5), σ = 1: the exact score is (b − a)·(y − mid), linear.
    # The learned score must order outputs almost exactly as it does.
    rng = np.random.default_rng(5)
    a, b = np.array([0.0, 0.0]), np.array([1.0, -0.5])
    neg = a + rng.normal(size=(20_000, 2))
    pos = b + rng.normal(size=(20_000, 2))
    y = rng.normal(0.5, 1.5, size=(5000, 2))
    exact = (y - (a + b) / 2) @ (b - a)
    learned = fit_score(neg, pos, learner="logistic")(y)
    assert stats.spearmanr(exact, learned).statistic > 0.995


def test_the_folded_spline_score_is_the_basis_matrix_score_inside_and_beyond_the_knots() -> None:
    # The logistic score evaluates each coordinate's fitted sum of B-spline basis columns
    # as one spline (the coefficients folded in), clipped to the outermost knots for
    # scikit-learn's extrapolation="constant". It must equal the basis-matrix product it
    # was fitted as, up to the order of the sum: within 1e-12 of the sum's own scale
    # (intercept plus the absolute products), on outputs far beyond the fitted knots too.
    from dpaudit.mechanisms.learned import _AdditiveScore

    rng = np.random.default_rng(21)
    n = 20_000
    neg = np.c_[rng.normal(0.0, 1.0, n), rng.laplace(0.0, 1.0, n), rng.integers(0, 2, n)]
    pos = np.c_[rng.normal(1.0, 1.0, n), rng.laplace(0.5, 2.0, n), rng.integers(0, 2, n)]
    fitted = fit_score(neg, pos, learner="logistic")
    scorer = fitted.scorer
    assert isinstance(scorer, _AdditiveScore)
    # the bit enters linearly; the two continuous coordinates through splines
    assert [spline is None for _, spline, _, _ in scorer.terms] == [False, False, True]
    m = 50_000
    far = np.c_[rng.normal(0.0, 8.0, m), rng.laplace(0.0, 10.0, m), rng.integers(-1, 3, m)]
    (_, _, lo0, hi0), (_, _, lo1, hi1) = scorer.terms[:2]
    edges = np.array([[lo0, lo1, 0.0], [hi0, hi1, 1.0], [lo0, hi1, 0.0], [hi0, lo1, 1.0]])
    y = np.concatenate([far, scorer.features.std.mean + edges * scorer.features.std.sd])
    z = scorer.features.std(y)
    for j in (0, 1):  # outputs below the first and above the last knot are many
        _, _, lo, hi = scorer.terms[j]
        assert (z[:, j] < lo).sum() > 1000
        assert (z[:, j] > hi).sum() > 1000
    basis = scorer.features(y)
    reference = basis @ scorer.coef + scorer.intercept
    scale = np.abs(basis) @ np.abs(scorer.coef) + abs(scorer.intercept)
    got = fitted(y)
    assert np.all(np.abs(got - reference) <= 1e-12 * scale)
    np.testing.assert_allclose(got, reference, rtol=0, atol=1e-12 * scale.max())
    # constant beyond the knots: any output below the first knot scores as the knot
    below = np.c_[np.full(3, -50.0), np.zeros(3), np.zeros(3)]
    at_knot = below.copy()
    at_knot[:, 0] = scorer.features.std.mean[0] + lo0 * scorer.features.std.sd[0]
    assert np.ptp(fitted(below)) == 0.0
    np.testing.assert_allclose(fitted(below), fitted(at_knot), rtol=0, atol=1e-12 * scale.max())


def test_logistic_is_flat_where_the_laplace_likelihood_ratio_is() -> None:
    # Laplace(0, 1) against Laplace(1, 1): the log-likelihood ratio is −1 below 0, 2y − 1
    # on [0, 1] and +1 above 1. The additive spline score must rise on [0, 1] and stay
    # level in the tails (a spread of the tail scores well below the rise between them).
    rng = np.random.default_rng(6)
    score = fit_score(rng.laplace(0, 1, 60_000), rng.laplace(1, 1, 60_000), learner="logistic")
    s = score(np.array([-4.0, -2.0, 0.0, 0.5, 1.0, 3.0, 5.0]))
    rise = s[4] - s[2]
    assert rise > 1.5  # the exact rise is 2
    assert abs(s[6] - s[5]) < 0.15 * rise
    assert abs(s[1] - s[0]) < 0.15 * rise


def test_learners_are_deterministic_functions_of_the_fitting_trials() -> None:
    rng = np.random.default_rng(8)
    neg, pos = rng.normal(size=(3000, 2)), rng.normal(0.5, 1.0, size=(3000, 2))
    probe = rng.normal(size=(500, 2))
    for learner in ("logistic", "boosting", "knn", "counts"):
        s1 = fit_score(neg, pos, learner=learner, seed=4)(probe)
        s2 = fit_score(neg.copy(), pos.copy(), learner=learner, seed=4)(probe)
        np.testing.assert_array_equal(s1, s2)
        assert np.all(np.isfinite(s1))


def test_learner_errors_are_one_line() -> None:
    with pytest.raises(DpauditError, match="The 'learner' parameter must be one of"):
        fit_score(np.zeros(3), np.ones(3), learner="svm")
    with pytest.raises(DpauditError, match=r"shapes \(3, 1\) and \(3, 2\)"):
        fit_score(np.zeros(3), np.ones((3, 2)))


# --------------------------------------------------------------- the three-way split


def test_the_learner_sees_the_fitting_trials_only_and_they_are_never_counted() -> None:
    # Tag every output with its position: what the learner receives is then readable.
    n0, n1 = 3000, 2400
    neg = np.column_stack([np.arange(n0), np.random.default_rng(0).normal(size=n0)])
    pos = np.column_stack([np.arange(n1), np.random.default_rng(1).normal(1.0, 1.0, n1)])
    seen: dict[str, np.ndarray] = {}
    scored: list[np.ndarray] = []

    def fit(a: np.ndarray, b: np.ndarray):
        seen["neg"], seen["pos"] = a[:, 0].astype(int), b[:, 0].astype(int)

        def score(out: np.ndarray) -> np.ndarray:
            scored.append(out[:, 0].astype(int))
            return out[:, 1]

        return score

    result = learned_lower_bounds(neg, pos, fit=fit, delta=1e-5, seed=11, fit_fraction=0.25)
    part = fit_part(n0, n1, fit_fraction=0.25, seed=11)
    np.testing.assert_array_equal(seen["neg"], part.negatives)
    np.testing.assert_array_equal(seen["pos"], part.positives)
    assert (seen["neg"].size, seen["pos"].size) == (750, 600)
    assert not set(seen["neg"]) & set(scored[0])
    assert not set(seen["pos"]) & set(scored[1])
    assert set(seen["neg"]) | set(scored[0]) == set(range(n0))
    # The bound is the ordinary split bound of the scored trials, nothing more.
    eps, mu = epsilon_and_mu_lower_bounds(
        neg[part.rest_negatives, 1], pos[part.rest_positives, 1], delta=1e-5, seed=11
    )
    assert (result.epsilon.value, result.mu.value) == (eps.value, mu.value)
    assert result.epsilon.counts["negatives"] + 1125 == 2250  # half of the 2250 scored
    fit_details = result.mu.details["fit"]
    assert fit_details["fit_negatives"] == 750
    assert "drawn before any output was read" in fit_details["fit_trials"]


@pytest.mark.parametrize(
    ("n0", "n1", "fraction", "limit", "seed"),
    [
        (1000, 1000, 1 / 3, None, 2),
        (7, 3000, 0.5, None, 0),
        (10**5, 2 * 10**5, 1 / 3, 20_000, 9),
        (12_345, 12_344, 0.01, None, None),
    ],
)
def test_fit_part_is_the_sorted_first_positions_of_a_seeded_permutation(
    n0: int, n1: int, fraction: float, limit: int | None, seed: int | None
) -> None:
    # the construction fit_part had before it read the parts off a mask: each arm's first
    # m positions of a permutation drawn from the fitting stream, and the rest, sorted
    rng = np.random.default_rng(None if seed is None else [seed, bounds_module._FIT_STREAM])
    part = fit_part(n0, n1, fit_fraction=fraction, fit_limit=limit, seed=seed)
    if seed is None:  # unseeded: the parts are a partition of each arm, in order
        for fit, rest, n in (
            (part.negatives, part.rest_negatives, n0),
            (part.positives, part.rest_positives, n1),
        ):
            assert np.all(np.diff(fit) > 0)
            assert np.all(np.diff(rest) > 0)
            np.testing.assert_array_equal(np.sort(np.concatenate([fit, rest])), np.arange(n))
        return
    for fit, rest, n in (
        (part.negatives, part.rest_negatives, n0),
        (part.positives, part.rest_positives, n1),
    ):
        m = max(1, round(fraction * n))
        m = m if limit is None else min(m, limit)
        perm = rng.permutation(n)
        np.testing.assert_array_equal(fit, np.sort(perm[:m]))
        np.testing.assert_array_equal(rest, np.sort(perm[m:]))


def test_fit_part_is_fixed_by_sizes_and_seed_and_caps_the_fitting_trials() -> None:
    a = fit_part(1000, 1000, fit_fraction=1 / 3, seed=2)
    b = fit_part(1000, 1000, fit_fraction=1 / 3, seed=2)
    np.testing.assert_array_equal(a.negatives, b.negatives)
    assert a.negatives.size == 333
    assert not np.array_equal(
        a.negatives, fit_part(1000, 1000, fit_fraction=1 / 3, seed=3).negatives
    )
    assert fit_part(10**5, 10**5, fit_fraction=0.5, fit_limit=100, seed=0).positives.size == 100
    with pytest.raises(InsufficientTrialsError, match="one trial per hypothesis to fit on and two"):
        fit_part(2, 10, fit_fraction=0.5, seed=0)


def test_a_learner_that_reverses_or_ignores_the_data_weakens_the_bound_only() -> None:
    rng = np.random.default_rng(4)
    neg, pos = rng.laplace(0, 1, 20_000), rng.laplace(1, 1, 20_000)

    def reversed_fit(a: np.ndarray, b: np.ndarray):
        return lambda out: -out[:, 0]

    def constant_fit(a: np.ndarray, b: np.ndarray):
        return lambda out: np.zeros(out.shape[0])

    good = learned_lower_bounds(neg, pos, fit=lambda a, b: fit_score(a, b), delta=0.0, seed=1)
    for fit in (reversed_fit, constant_fit):
        bad = learned_lower_bounds(neg, pos, fit=fit, delta=0.0, seed=1)
        assert bad.epsilon.value <= 1.0  # never above the truth, ε = 1
        assert bad.epsilon.value < good.epsilon.value
    assert good.epsilon.value > 0.8


def test_a_score_that_is_not_one_finite_number_per_output_is_an_error() -> None:
    x = np.random.default_rng(0).normal(size=300)
    with pytest.raises(DpauditError, match="gave 1 negative scores for 200 outputs"):
        learned_lower_bounds(x, x, fit=lambda a, b: lambda out: np.zeros(1), delta=0.0, seed=0)
    with pytest.raises(DpauditError, match="must hold finite numbers"):
        learned_lower_bounds(
            x, x, fit=lambda a, b: lambda out: np.full(out.shape[0], np.nan), delta=0.0, seed=0
        )


# --------------------------------------------------------------------------- validity


def _repeat(draw, *, learner: str, repeats: int, n: int, seed: int) -> np.ndarray:
    """``repeats`` independent learned audits of ``n`` trials per arm: (ε_LB, μ_LB) rows."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(repeats):
        neg, pos = draw(rng, 0, n), draw(rng, 1, n)
        b = learned_lower_bounds(
            neg,
            pos,
            fit=lambda a, b: fit_score(a, b, learner=learner, seed=0),
            delta=0.0,
            confidence_level=C,
            seed=r,
        )
        out.append((b.epsilon.value, b.mu.value))
    return np.array(out)


def _gaussian(rng: np.random.Generator, neighbour: int, n: int) -> np.ndarray:
    return neighbour + rng.normal(0.0, 1.0, n)  # exactly 1-GDP


def _bit(keep: float):
    def draw(rng: np.random.Generator, neighbour: int, n: int) -> np.ndarray:
        # D holds the bit 1, D' the bit 0, as in audits/learned-rr*.toml
        bit = 1 - neighbour
        return np.where(rng.random(n) < keep, bit, 1 - bit).astype(float)

    return draw


def _ceiling(repeats: int) -> int:
    # Each audit's bound exceeds the truth with probability ≤ 1 − C; the count of such
    # false violations in independent repeats is then stochastically below
    # Bin(repeats, 1 − C), whose 0.999 quantile is the ceiling.
    return int(stats.binom.ppf(0.999, repeats, 1.0 - C))


@pytest.mark.slow
def test_validity_of_learned_audits_over_400_repeats_and_power() -> None:
    repeats = 400
    assert _ceiling(repeats) == 35
    # The Gaussian mechanism at μ = 1 (logistic, continuous outputs): μ_LB > 1 is false.
    gauss = _repeat(_gaussian, learner="logistic", repeats=repeats, n=1500, seed=2026)
    assert int(np.sum(gauss[:, 1] > 1.0)) <= _ceiling(repeats)
    # Power: at the best fixed threshold (t = ½, FPR = FNR = Φ(−½)) with the 500 counted
    # trials, the Clopper–Pearson limits give about 0.78: the median must see most of it.
    rate = special.ndtr(-0.5)
    limit = stats.beta.ppf(1 - (1 - C) / 2, round(rate * 500) + 1, 500 - round(rate * 500))
    assert np.median(gauss[:, 1]) > 0.7 * (-2 * special.ndtri(limit))
    # Randomised response at exactly ε = 1 ("auto" counts the two outputs): ε_LB > 1 is false.
    rr = _repeat(_bit(math.e / (1 + math.e)), learner="auto", repeats=repeats, n=1500, seed=7)
    assert int(np.sum(rr[:, 0] > 1.0)) <= _ceiling(repeats)
    # Power on a bug: keep = 0.83 is ε = 1.59; with 500 counted trials per arm the bound
    # is about ln((1 − 0.21)/0.21) = 1.33 > 1, so most audits must find the violation.
    bug = _repeat(_bit(KEEP_BUGGY), learner="auto", repeats=100, n=1500, seed=8)
    assert np.mean(bug[:, 0] > 1.0) > 0.9


def test_power_control_the_counter_catches_an_in_sample_learner() -> None:
    # The same count, on a broken design: a 1-nearest-neighbour classifier scored on the
    # very trials it was fitted on (each output is its own neighbour) certifies far more
    # than the mechanism has. The ceiling check must fail on it, or it proves nothing.
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(9)
    false = 0
    repeats = 60
    for r in range(repeats):
        neg, pos = _gaussian(rng, 0, 600), _gaussian(rng, 1, 600)
        x = np.r_[neg, pos].reshape(-1, 1)
        model = KNeighborsClassifier(n_neighbors=1).fit(x, np.r_[np.zeros(600), np.ones(600)])
        s = model.predict_proba(x)[:, 1]
        _, mu = epsilon_and_mu_lower_bounds(s[:600], s[600:], delta=0.0, seed=r)
        false += mu.value > 1.0
    assert false > _ceiling(repeats)


@pytest.mark.slow
def test_validity_of_learned_audits_over_2000_repeats() -> None:
    repeats = 2000
    for draw, learner, column in (
        (_gaussian, "logistic", 1),
        (_gaussian, "knn", 1),
        (_bit(math.e / (1 + math.e)), "auto", 0),
    ):
        values = _repeat(draw, learner=learner, repeats=repeats, n=3000, seed=31)
        assert int(np.sum(values[:, column] > 1.0)) <= _ceiling(repeats), learner


# ------------------------------------------------------------------- raw outputs


def test_raw_outputs_are_what_the_scores_are_computed_from() -> None:
    def same(mech, score) -> None:
        for neighbour in (0, 1):
            scores = mech.run(neighbour, rng=np.random.default_rng(4), size=300)
            raw = mech.outputs(neighbour, rng=np.random.default_rng(4), size=300)
            np.testing.assert_array_equal(scores, score(raw))

    a, b = np.array([0.0, 1.0]), np.array([1.0, 1.5])
    same(
        vector_laplace(query=(a, b), sensitivity=1.5, scale=1.0),
        lambda y: laplace_llr(y, a, b, 1.0),
    )
    same(
        vector_gaussian(query=(a, b), sensitivity=1.2, sigma=1.0),
        lambda y: (y - (a + b) / 2) @ (b - a),
    )
    krr = k_randomized_response(k=5, epsilon=1.0, values=(2, 4))
    llr = np.zeros(5)
    llr[4], llr[2] = 1.0, -1.0
    same(krr, lambda y: llr[y[:, 0].astype(int)])
    ue = unary_encoding(k=6, epsilon=1.0, values=(0, 3))
    one, zero = (
        math.log(ue.parameters["p"] / ue.parameters["q"]),
        math.log((1 - ue.parameters["p"]) / (1 - ue.parameters["q"])),
    )
    same(ue, lambda y: np.where(y[:, 3] > 0, one, zero) - np.where(y[:, 0] > 0, one, zero))
    user = user_mechanism(
        "plugins.histogram_total:histogram", data=([0.2, 0.7], [0.2, 0.7, 0.9]), base_dir=AUDITS
    )
    assert user.outputs(1, rng=np.random.default_rng(0), size=7).shape == (7, 3)


def test_a_learned_unit_holds_raw_outputs_and_the_learner_is_not_part_of_its_key() -> None:
    section = MechanismSection(
        name="plugins.histogram_total:histogram",
        data=([0.2], [0.2, 0.9]),
        score="learned",
        trials=1000,
        claim={"mu": 1.0},
    )
    spec = MechanismSpec(section=section, seed=0, unit_size=400, base_dir=str(AUDITS))
    unit = mechanism_unit(spec, "mechanism-00002")
    assert unit["negative"].shape == unit["positive"].shape == (200, 3)
    context = RunContext(seed=0, confidence_level=C, delta=1e-5, base_dir=AUDITS, unit_size=400)
    key = KIND.plan(section, context).key("mechanism")
    other = section.model_copy(update={"learner": "knn", "fit_fraction": 0.5})
    assert KIND.plan(other, context).key("mechanism") == key
    # no score key: "auto" learns a score for a user mechanism, from the very same units
    plain = section.model_copy(update={"score": None})
    assert KIND.plan(plain, context).key("mechanism") == key
    # ... while units that hold a fixed score's values are other units
    scored = section.model_copy(update={"score": None, "log_density": "plugins.x:density"})
    assert KIND.plan(scored, context).key("mechanism") != key


# ------------------------------------------------------------ the audit file and CLI


@pytest.mark.parametrize(
    ("mechanism", "message"),
    [
        (
            {"name": "laplace", "epsilon": 1.0, "score": "learnt"},
            "'score' is 'auto' (the default), 'learned' (a classifier fitted on some of the "
            "trials), 'floating' or 'pkg.module:function'; got 'learnt'",
        ),
        (
            {"name": "laplace", "epsilon": 1.0, "learner": "knn"},
            "'learner' configures a learned score; set score = 'learned' or remove 'learner'",
        ),
        (
            {"name": "laplace", "epsilon": 1.0, "fit_fraction": 0.5},
            "'fit_fraction' configures a learned score",
        ),
        (
            {"name": "unary-encoding", "k": 65, "epsilon": 1.0, "score": "learned"},
            "at most k = 64; got k = 65",
        ),
        (
            {"name": "laplace", "epsilon": 1.0, "score": "a:b"},
            "'score' scores a user mechanism's outputs; 'laplace' is built in",
        ),
        (
            {"name": "laplace", "epsilon": 1.0, "log_density": "learned"},
            "'log_density' scores a user mechanism's outputs; 'laplace' is built in",
        ),
    ],
)
def test_learned_keys_are_checked_when_the_file_loads(mechanism: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config({"audit": {"name": "x", "kinds": ["mechanism"]}, "mechanism": mechanism})


def test_a_bad_learner_exits_2_with_one_line(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(
        "[audit]\nname='x'\nkinds=['mechanism']\n[mechanism]\nname='laplace'\nepsilon=1.0\n"
        "score='learned'\nlearner='svm'\n"
    )
    result = runner.invoke(app, ["run", str(f), "-o", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {f}: 'mechanism.learner': Input should be 'auto', 'logistic', 'boosting', "
        "'knn' or 'counts' (got 'svm')"
    )


def _bit_audit(tmp_path: Path, *, data: str, learned: bool, fixed: bool = False) -> Path:
    """The RR example with the pair in a given order, its plug-in under a name of its own;
    ``learned=False`` scores each output by itself (a score plug-in, larger = D')."""
    copy = tmp_path / "bit_response_copy.py"
    shutil.copy(AUDITS / "plugins" / "bit_response.py", copy)
    copy.write_text(copy.read_text() + "\n\ndef output(outputs):\n    return outputs\n")
    f = tmp_path / f"rr-{data.replace(' ', '')}-{learned}-{fixed}.toml"
    f.write_text(
        "[audit]\nname = 'rr'\nkinds = ['mechanism']\nseed = 0\n[mechanism]\n"
        f"name = 'bit_response_copy:{'respond' if fixed else 'respond_buggy'}'\n"
        f"data = {data}\ntrials = 50_000\n"
        + ("score = 'learned'\n" if learned else "score = 'bit_response_copy:output'\n")
        + "[mechanism.claim]\nepsilon = 1.0\n"
    )
    return f


@pytest.mark.parametrize("data", ["[[1], [0]]", "[[0], [1]]"])
def test_the_biased_randomised_response_fails_with_the_pair_in_either_order(
    data: str, tmp_path: Path
) -> None:
    code, result, stderr = _run(_bit_audit(tmp_path, data=data, learned=True), tmp_path / "run")
    assert code == 1
    eps = _lower(result, "epsilon")
    # ln(0.83/0.17) = 1.586; the bound must exceed the claim ε = 1
    assert 1.0 < eps["value"] < math.log(KEEP_BUGGY / (1 - KEEP_BUGGY))
    assert eps["details"]["learned"]["learner"] == "counts"
    assert eps["counts"]["negatives"] == 16_667  # half of the two thirds not fitted on
    assert "exceeds the claimed" in stderr
    assert "the DP claim is false" in stderr


def test_the_scalar_score_is_blind_to_it_when_d_prime_gives_smaller_outputs(
    tmp_path: Path,
) -> None:
    # Control: the output itself as the score (larger = D') sees nothing with D = [1],
    # D' = [0], the blind spot the learned score removes (and the default, "auto", which
    # learns a score for a user mechanism: tests/test_auto_score.py).
    code, result, _ = _run(_bit_audit(tmp_path, data="[[1], [0]]", learned=False), tmp_path / "r")
    assert code == 0
    assert _lower(result, "epsilon")["value"] == 0.0


def test_shipped_learned_audits_exit_as_documented(tmp_path: Path) -> None:
    expected = {
        "learned-rr-violation": 1,
        "learned-rr": 0,
        "learned-histogram-violation": 1,
        "learned-histogram": 0,
    }
    for name, want in expected.items():
        code, result, _ = _run(AUDITS / f"{name}.toml", tmp_path / name)
        assert code == want, name
        validate_results(result)
        assert result["privacy_verdict"] == ("violation" if want else "consistent")
    # The vector bug is √2-GDP while claiming μ = 1: the μ bound catches it.
    mu = _lower(
        json.loads((tmp_path / "learned-histogram-violation" / "results.json").read_text()), "mu"
    )
    assert 1.0 < mu["value"] < math.sqrt(2)
    verify = runner.invoke(app, ["verify", str(tmp_path / "learned-histogram-violation")])
    assert verify.exit_code == 0, verify.output


def test_learned_scores_lose_little_against_the_exact_score_on_scalar_mechanisms(
    tmp_path: Path,
) -> None:
    # 10⁵ trials per arm: Laplace ε = 1 and Gaussian μ = 1 (audits/learned-laplace.toml,
    # audits/learned-gaussian.toml): the goal is ε_LB ≥ 0.9 and μ_LB ≥ 0.9.
    _, lap, _ = _run(AUDITS / "learned-laplace.toml", tmp_path / "lap")
    _, gau, _ = _run(AUDITS / "learned-gaussian.toml", tmp_path / "gau")
    assert 0.9 <= _lower(lap, "epsilon")["value"] <= 1.0
    assert 0.9 <= _lower(gau, "mu")["value"] <= 1.0
    assert lap["verdict"] == gau["verdict"] == "pass"


# --------------------------------------------------------------------- streamed path


class SpyUnits(Mapping[str, Mapping[str, np.ndarray]]):
    """Stored units computed on access, recording the order in which they are read."""

    def __init__(self, spec: MechanismSpec, count: int) -> None:
        self.spec, self.names, self.reads = spec, [f"mechanism-{i:05d}" for i in range(count)], []

    def __getitem__(self, unit: str) -> Mapping[str, np.ndarray]:
        self.reads.append(unit)
        return mechanism_unit(self.spec, unit)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


@pytest.mark.parametrize("threshold", ["split", "bonferroni"])
def test_the_streamed_path_fits_on_the_first_units_and_never_counts_them(
    threshold: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(summary_module, "LEARNED_EXACT_LIMIT", 10_000)
    monkeypatch.setattr(summary_module, "GRID_TRIALS", 5_000)
    section = MechanismSection(
        name="plugins.bit_response:respond_buggy",
        data=([1], [0]),
        score="learned",
        trials=60_000,
        threshold=threshold,
        claim={"epsilon": 1.0},
    )
    spec = MechanismSpec(section=section, seed=0, unit_size=5_000, base_dir=str(AUDITS))
    units = SpyUnits(spec, 12)
    context = RunContext(seed=0, confidence_level=C, delta=1e-5, base_dir=AUDITS, unit_size=5_000)
    result = mechanism_summary(section, context, units, level=0.975)
    fitting = [f"mechanism-{i:05d}" for i in range(4)]  # ⅓ of 60,000 = 4 units of 5,000
    assert units.reads[:4] == fitting
    assert not set(fitting) & set(units.reads[4:])
    eps = next(c.lower for c in result.comparisons if c.parameter == "epsilon")
    assert eps.details["streamed"] is True
    assert eps.details["fit"]["fit_units"] == 4
    assert eps.details["learned"]["learner"] == "counts"
    assert eps.value > 1.0
    # The same bound by hand: fit on the first four units, stream the other eight.
    stored = {u: mechanism_unit(spec, u) for u in units.names}
    score = fit_score(
        np.concatenate([stored[u]["negative"] for u in fitting]),
        np.concatenate([stored[u]["positive"] for u in fitting]),
        learner="auto",
        seed=0,
    )
    rest = units.names[4:]
    design = unit_design(rest, threshold=threshold, unit_size=5_000)
    counts = stream_counts(ScoredUnits(stored, rest, score), design)
    assert eps.counts["negatives"] == counts.counted.negatives
    want, _ = streamed_bounds(counts, delta=eps.delta, confidence_level=0.975)
    assert eps.value == want.value


def test_too_few_units_to_stream_a_learned_score_use_the_in_memory_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(summary_module, "LEARNED_EXACT_LIMIT", 1_000)
    section = MechanismSection(name="randomized-response", p=0.75, score="learned", trials=4_000)
    spec = MechanismSpec(section=section, seed=0, unit_size=2_000, base_dir=".")
    units = {u: mechanism_unit(spec, u) for u in ("mechanism-00000", "mechanism-00001")}
    context = RunContext(seed=0, confidence_level=C, delta=1e-5, base_dir=Path("."), unit_size=2000)
    result = mechanism_summary(section, context, units, level=0.975)
    eps = next(c.lower for c in result.comparisons if c.parameter == "epsilon")
    assert "streamed" not in eps.details
    assert eps.details["fit"]["fit_negatives"] == 1333


# --------------------------------------------------- the same bits under any thread count


def test_a_fitted_score_has_the_same_bits_under_any_blas_thread_count() -> None:
    """Fitting sums products in an order set by the thread count; with more than one BLAS
    thread the fitted log-odds moved by ~1e-14 (seen with 8 against 1 at n = 10,000), which
    flips a count at a threshold and made `dpaudit verify` on another machine refuse a
    correct run. Fitting and scoring run one thread whatever the caller set."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    neg, pos = rng.laplace(0.0, 1.0, 10_000), rng.laplace(1.0, 1.0, 10_000)
    x = rng.laplace(0.5, 1.0, 5_000)
    seen = []
    for threads in (1, 8):
        with threadpool_limits(limits=threads):
            seen.append(fit_score(neg, pos, learner="logistic")(x))
    assert seen[0].tobytes() == seen[1].tobytes()


@pytest.mark.parametrize("sizes", [(2,), (50, 1, 70), (1000, 3, 250, 1)])
def test_learned_bounds_from_blocks_are_those_of_the_concatenated_outputs(
    sizes: tuple[int, ...],
) -> None:
    """Outputs given as consecutive blocks (the stored units) give the learned bounds,
    the fitting rows and the scores of the one array they make up, to the bit."""
    from dpaudit.bounds import OutputBlocks

    rng = np.random.default_rng(len(sizes))
    neg_blocks = [rng.normal(0.0, 1.0, (n, 2)) for n in sizes]
    pos_blocks = [rng.normal(0.7, 1.0, (n, 2)) for n in sizes]
    seen: list[tuple[np.ndarray, np.ndarray]] = []

    def fit(fn: np.ndarray, fp: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        seen.append((fn, fp))
        return lambda out: out @ np.array([1.0, 0.5])

    args = {"fit": fit, "delta": 0.0, "seed": 3, "fit_fraction": 0.3}
    if sum(sizes) < 3:  # nothing left to count after the fitting part
        with pytest.raises(InsufficientTrialsError):
            learned_lower_bounds(
                OutputBlocks("n", neg_blocks), OutputBlocks("p", pos_blocks), **args
            )
        return
    blocks = learned_lower_bounds(
        OutputBlocks("n", neg_blocks), OutputBlocks("p", pos_blocks), **args
    )
    whole = learned_lower_bounds(np.concatenate(neg_blocks), np.concatenate(pos_blocks), **args)
    assert seen[0][0].tobytes() == seen[1][0].tobytes()
    assert seen[0][1].tobytes() == seen[1][1].tobytes()
    assert blocks.negative_scores.tobytes() == whole.negative_scores.tobytes()
    assert blocks.positive_scores.tobytes() == whole.positive_scores.tobytes()
    assert blocks.epsilon == whole.epsilon
    assert blocks.mu == whole.mu


def test_output_blocks_refuse_blocks_of_different_dimensions() -> None:
    from dpaudit.bounds import OutputBlocks

    with pytest.raises(DpauditError, match=r"must have one dimension; got \[1, 2\]"):
        OutputBlocks("negative outputs", [np.zeros((3, 1)), np.zeros((3, 2))])
    with pytest.raises(DpauditError, match="at least one block"):
        OutputBlocks("negative outputs", [])


def test_scored_units_score_a_kept_unit_once_and_within_their_budget() -> None:
    """The grid units a streamed learned score reads twice are scored once (their scores
    kept, the same arrays), within the budget; other units are scored at every read."""
    rng = np.random.default_rng(0)
    units = {
        f"mechanism-{i:05d}": {
            "negative": rng.normal(size=(100, 1)),
            "positive": rng.normal(size=(100, 1)),
        }
        for i in range(4)
    }
    calls: list[int] = []

    def score(out: np.ndarray) -> np.ndarray:
        calls.append(out.shape[0])
        return out[:, 0] * 2.0

    names = list(units)
    scored = summary_module.ScoredUnits(units, names, score, keep=names[:2], keep_bytes=1600)
    first = scored[names[0]]
    assert scored[names[0]] is first  # kept: not scored again
    assert len(calls) == 2
    np.testing.assert_array_equal(first["negative"], units[names[0]]["negative"][:, 0] * 2.0)
    scored[names[1]]
    scored[names[1]]
    assert len(calls) == 6  # 1600 bytes keep one unit's 2 × 800: the second is scored twice
    scored[names[2]]
    scored[names[2]]
    assert len(calls) == 10  # not a grid unit: never kept
    with pytest.raises(KeyError):
        scored["mechanism-00009"]
