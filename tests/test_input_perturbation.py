"""The ``input-perturbation`` target variant (dpaudit/input_perturbation.py).

Laws of the randomisers (k-RR flip rate, Laplace/Gaussian noise after clipping) checked
against exact binomial, gamma and chi-square intervals; determinism in the seed; the
section's errors; the claim the bounds are held against; validity of the one-run bound
against the claim over 400 repeated audits (the likelihood-ratio oracle that sees the
randomised training slots, the strongest any attack on the trained model can be, and the
loss attack on trained targets) with a power control (a randomiser calibrated for 10 ε
while ε is claimed).
"""

from __future__ import annotations

import copy
import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dpaudit.config import parse_config
from dpaudit.errors import ConfigError
from dpaudit.mechanisms.noise import Claim, gaussian_calibrated, k_rr_probabilities, laplace_llr
from dpaudit.membership import input_perturbation as ip
from dpaudit.membership.input_perturbation import InputPerturbation, feature_noise, randomise
from dpaudit.membership.pipeline import one_run_bound

AUDIT = Path(__file__).resolve().parents[1] / "audits" / "membership-input-perturbation.toml"
# Statistical checks use fixed seeds; each interval is exact for the law under test at
# two-sided level 1 − 1e-6, so a correct randomiser fails one with probability 1e-6.
LEVEL = 1e-6


def _interval(dist: stats.rv_frozen) -> tuple[float, float]:
    return float(dist.ppf(LEVEL / 2)), float(dist.ppf(1 - LEVEL / 2))


# ----------------------------------------------------------------------------- laws


@pytest.mark.parametrize(("k", "epsilon"), [(2, 1.0), (4, 0.5)])
def test_labels_follow_k_rr(k: int, epsilon: float) -> None:
    n = 200_000
    y = np.arange(n) % k
    X = np.zeros((n, 1))
    spec = InputPerturbation(features="none", labels="k-rr", epsilon=epsilon)
    out = randomise(X, y, num_classes=k, spec=spec, seed=3)
    p, q = k_rr_probabilities(k=k, epsilon=epsilon)
    assert p == pytest.approx(math.exp(epsilon) / (math.exp(epsilon) + k - 1), rel=1e-12)
    flips = int((out.y != y).sum())
    low, high = _interval(stats.binom(n, 1 - p))
    assert low <= flips <= high
    # each of the k − 1 other labels equally likely: the flips from label 0 that land on
    # label 1 are Bin(flips from 0, 1/(k − 1))
    from0 = (y == 0) & (out.y != 0)
    to1 = int((out.y[from0] == 1).sum())
    low, high = _interval(stats.binom(int(from0.sum()), 1 / (k - 1)))
    assert low <= to1 <= high
    assert out.parameters["truthful"] == p
    assert out.parameters["each_other"] == q
    assert np.array_equal(out.X, X)  # features = "none" leaves them as they are


def test_laplace_features_are_clipped_then_noised_at_the_l1_diameter() -> None:
    n, d, bound, eps = 50_000, 3, 1.5, 2.0
    rng = np.random.default_rng(0)
    # a third of the coordinates far outside the domain: unclipped they would miss by ~100
    X = np.where(
        rng.random((n, d)) < 1 / 3, 100.0 * rng.choice([-1, 1], (n, d)), rng.normal(size=(n, d))
    )
    spec = InputPerturbation(features="laplace", labels="none", epsilon=eps, bound=bound)
    out = randomise(X, np.zeros(n, dtype=np.int64), num_classes=2, spec=spec, seed=1)
    scale = 2 * bound * d / eps  # ℓ1 diameter of [−B, B]^d over ε
    assert out.parameters["scale"] == pytest.approx(scale, rel=1e-15)
    residual = out.X - np.clip(X, -bound, bound)
    N = residual.size
    # |Lap(b)| ~ Exp(b): the sum of N of them is Gamma(N, scale b), exactly
    low, high = _interval(stats.gamma(N, scale=scale))
    assert low <= np.abs(residual).sum() <= high
    # symmetric: the number of positive residuals is Bin(N, 1/2)
    low, high = _interval(stats.binom(N, 0.5))
    assert low <= int((residual > 0).sum()) <= high


def test_gaussian_features_use_the_exact_calibration_for_the_l2_diameter() -> None:
    n, d, bound, eps, delta = 40_000, 4, 1.0, 1.0, 1e-5
    X = np.full((n, d), 7.0)  # every coordinate clipped to B
    spec = InputPerturbation(
        features="gaussian",
        labels="k-rr",
        epsilon=2 * eps,
        label_share=0.5,
        bound=bound,
        delta=delta,
    )
    out = randomise(X, np.zeros(n, dtype=np.int64), num_classes=3, spec=spec, seed=2)
    sigma, _ = gaussian_calibrated(
        sensitivity=2 * bound * math.sqrt(d), epsilon=eps, delta=delta, calibration="exact"
    )
    assert out.parameters["sigma"] == sigma
    residual = out.X - bound
    # Σ (residual/σ)² ~ χ²(N), exactly
    low, high = _interval(stats.chi2(residual.size))
    assert low <= float(((residual / sigma) ** 2).sum()) <= high


def test_the_same_seed_gives_the_same_randomised_data() -> None:
    rng = np.random.default_rng(5)
    X, y = rng.normal(size=(300, 4)), rng.integers(0, 3, 300)
    spec = InputPerturbation(features="laplace", labels="k-rr", epsilon=1.0)
    a = randomise(X, y, num_classes=3, spec=spec, seed=11)
    b = randomise(X, y, num_classes=3, spec=spec, seed=11)
    c = randomise(X, y, num_classes=3, spec=spec, seed=12)
    assert np.array_equal(a.X, b.X)
    assert np.array_equal(a.y, b.y)
    assert not np.array_equal(a.X, c.X)
    # changing one row changes no other row's randomised version
    X2, y2 = X.copy(), y.copy()
    X2[5], y2[5] = -X[5], (y[5] + 1) % 3
    d = randomise(X2, y2, num_classes=3, spec=spec, seed=11)
    others = np.arange(300) != 5
    assert np.array_equal(d.X[others], a.X[others])
    assert np.array_equal(d.y[others], a.y[others])


# ---------------------------------------------------------------------- section, claim


def _config(**table: object) -> dict:
    d = tomllib.loads(AUDIT.read_text())
    d = copy.deepcopy(d)
    d["target"]["input_perturbation"] = table
    return d


LOCATION = "audit file: 'target.input_perturbation': "


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {"features": "none", "labels": "none", "epsilon": 1.0},
            LOCATION + "randomises nothing (features = 'none' and labels = 'none'); use the "
            "'plain' variant",
        ),
        (
            {"features": "gaussian", "labels": "k-rr", "epsilon": 1.0},
            LOCATION + "features = 'gaussian' needs 'delta' (the Gaussian randomiser is "
            "calibrated to (epsilon, delta))",
        ),
        (
            {"features": "laplace", "labels": "k-rr", "epsilon": 1.0, "delta": 1e-5},
            LOCATION + "'delta' is used only by features = 'gaussian'; got features = 'laplace'",
        ),
        (
            {"features": "none", "labels": "k-rr", "epsilon": 1.0, "label_share": 0.3},
            LOCATION + "'label_share' splits epsilon between features and labels; it needs "
            "both randomised",
        ),
        (
            {"features": "uniform", "labels": "k-rr", "epsilon": 1.0},
            "audit file: 'target.input_perturbation.features': Input should be 'laplace', "
            "'gaussian' or 'none' (got 'uniform')",
        ),
        (
            {"features": "laplace", "labels": "k-rr", "epsilon": 1.0, "scale": 3},
            "audit file: unknown key 'target.input_perturbation.scale'; allowed keys: "
            "features, labels, epsilon, label_share, bound, delta",
        ),
    ],
)
def test_section_errors(table: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        parse_config(_config(**table))


def test_variant_and_table_go_together() -> None:
    d = tomllib.loads(AUDIT.read_text())
    missing = copy.deepcopy(d)
    missing["target"].pop("input_perturbation")
    with pytest.raises(
        ConfigError,
        match=r"\[target\] variants lists 'input-perturbation' but \[target.input_perturbation\] "
        r"is missing \(features, labels, epsilon\)",
    ):
        parse_config(missing)
    unlisted = copy.deepcopy(d)
    unlisted["target"]["variants"] = ["plain"]
    with pytest.raises(
        ConfigError,
        match=r"\[target.input_perturbation\] is given but \[target\] variants does not list "
        "'input-perturbation'",
    ):
        parse_config(unlisted)


def test_claim_is_the_per_record_ldp_epsilon_and_enters_through_from_claim() -> None:
    from dpaudit.membership import stored

    both = InputPerturbation(features="laplace", labels="k-rr", epsilon=1.5, label_share=0.2)
    assert both.claim() == Claim(epsilon=1.5, delta=0.0)
    assert both.label_epsilon == pytest.approx(0.3)
    assert both.feature_epsilon == pytest.approx(1.2)
    gauss = InputPerturbation(features="gaussian", labels="k-rr", epsilon=1.0, delta=1e-6)
    assert gauss.claim() == Claim(epsilon=1.0, delta=1e-6)
    # one part left as it is: the record is not protected, nothing is claimed
    assert InputPerturbation(features="none", labels="k-rr", epsilon=1.0).claim() is None
    assert InputPerturbation(features="laplace", labels="none", epsilon=1.0).claim() is None
    part = {"claim_epsilon": np.array([1.5]), "claim_delta": np.array([0.0])}
    upper = stored.stored_upper(part, 1e-5)
    assert upper is not None
    assert (upper.epsilon, upper.epsilon_delta) == (1.5, 0.0)
    assert upper.source == "input perturbation claim"
    # pure ε-DP implies μ-GDP with μ = −2Φ⁻¹(1/(1 + e^ε)) (Dong, Roth, Su 2019, §2)
    assert upper.mu == pytest.approx(-2 * stats.norm.ppf(1 / (1 + math.exp(1.5))), rel=1e-12)
    assert stored.has_upper(part, 1e-5)
    assert not stored.has_upper({}, 1e-5)
    # a Gaussian randomiser's claim with δ above the audit's is not held against bounds
    # measured at the audit's δ: (ε, δ_c)-DP says nothing of ε at a smaller δ
    gaussian = {"claim_epsilon": np.array([1.0]), "claim_delta": np.array([1e-4])}
    assert stored.stored_upper(gaussian, 1e-5) is None
    assert not stored.has_upper(gaussian, 1e-5)
    assert stored.stored_upper(gaussian, 1e-4) is not None
    noted = stored.stored_details({**gaussian, "perturbation": np.array("{}")}, 1e-5)
    assert noted["input_perturbation"]["claim_note"] == (
        "the claim's delta 0.0001 exceeds the audit's delta 1e-05: the bounds measured at "
        "the audit's delta are not held against it"
    )


# ------------------------------------------------------------------------- validity

# One-run audits at confidence 0.95: on correct code each repeat's bound exceeds the claim
# with probability ≤ 0.05 (Steinke, Nasr, Jagielski 2023, Thm. 3.1), so the number of
# false violations in N independent repeats is stochastically below Bin(N, 0.05); the
# ceiling binom.ppf(0.999, N, 0.05) fails a correct implementation with probability
# ≤ 0.001.
REPEATS = 400
CEILING = int(stats.binom.ppf(0.999, REPEATS, 0.05))
EPSILON = 1.0
M, GUESSES, BOUND, DIM = 1_000, 100, 1.0, 2


def _oracle_bounds(seeds: range) -> list[float]:
    """One-run bounds of the likelihood-ratio oracle that sees the randomised slots.

    Every audited row is the corner (+B, …, +B) with label 1 and every substitute the
    opposite corner with label 0: the pair at the domain's ℓ1 diameter, where the
    randomiser's likelihood ratio reaches e^{±ε}. The oracle scores slot i by the exact
    log-likelihood ratio of its randomised version (member vs substitute); training on
    the slots is post-processing, so no attack on the model can beat it.
    """
    spec = InputPerturbation(features="laplace", labels="k-rr", epsilon=EPSILON, bound=BOUND)
    member, substitute = np.full(DIM, BOUND), np.full(DIM, -BOUND)
    scale = feature_noise(spec, DIM)["scale"]
    eps_l = spec.label_epsilon
    out = []
    for seed in seeds:
        coins = np.random.default_rng([seed, 7]).random(M) < 0.5
        X = np.where(coins[:, None], member, substitute)
        y = coins.astype(np.int64)
        r = randomise(X, y, num_classes=2, spec=spec, seed=seed)
        # the oracle knows the claimed randomiser (scale for ε_f, k-RR at ε_l)
        scores = laplace_llr(r.X, substitute, member, scale) + np.where(r.y == 1, eps_l, -eps_l)
        bound = one_run_bound(
            scores, coins, guesses_per_side=GUESSES // 2, delta=0.0, confidence_level=0.95
        )
        out.append(bound.value)
    return out


def test_oracle_never_shows_more_than_the_claim_beyond_the_binomial_allowance() -> None:
    values = _oracle_bounds(range(REPEATS))
    violations = sum(v > EPSILON for v in values)
    assert violations <= CEILING, (violations, CEILING)
    # the oracle is not trivially weak: it certifies a good part of the claim on median
    assert float(np.median(values)) > 0.4 * EPSILON


def test_oracle_catches_a_randomiser_calibrated_for_ten_times_the_claim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = ip._running_epsilons
    monkeypatch.setattr(ip, "_running_epsilons", lambda s: tuple(10 * e for e in real(s)))
    # Power control: 20 repeats; a correct implementation would exceed the claim in at most
    # binom.ppf(0.999, 20, 0.05) = 4 of them, the bug in every one.
    values = _oracle_bounds(range(20))
    assert all(v > EPSILON for v in values), values


MODEL_REPEATS = 100  # 400 trained targets take ~25 s CPU here, over the tests' budget


def test_model_audits_never_exceed_the_claim_beyond_the_binomial_allowance() -> None:
    """100 input-perturbation targets (logistic, 200 audited rows, 3 epochs) attacked by the
    loss attack through prepare_target's replace-one game. 100, not 400: each target
    trains (~60 ms CPU), and the 400-repeat oracle test above already bounds every attack
    on the model from above (training is post-processing of the slots it sees)."""
    from dpaudit.attacks import LossAttack
    from dpaudit.data import load_dataset
    from dpaudit.membership.pipeline import prepare_target
    from dpaudit.models import ModelSpec
    from dpaudit.training import TrainingSpec

    ds = load_dataset("statsmodels:fair", features=["age", "yrs_married", "religious"])
    spec = InputPerturbation(features="laplace", labels="k-rr", epsilon=EPSILON)
    training = TrainingSpec(epochs=3, batch_size=64, learning_rate=0.1)
    violations = 0
    for seed in range(MODEL_REPEATS):
        target = prepare_target(
            ds,
            model=ModelSpec(kind="logistic"),
            training=training,
            audited_size=200,
            population_size=400,
            seed=seed,
            input_perturbation=spec,
        )
        assert target.perturbation is not None
        scores = LossAttack().score(target.context(), target.audited_X, target.audited_y, seed=0)
        bound = one_run_bound(
            scores[0], target.membership, guesses_per_side=10, delta=0.0, confidence_level=0.95
        )
        violations += bound.value > EPSILON
    assert violations <= int(stats.binom.ppf(0.999, MODEL_REPEATS, 0.05))


def test_a_unit_stores_the_claim_and_the_randomisers_as_they_ran() -> None:
    """What the membership and attribute units store, and what their tests then name."""
    from dpaudit.membership import stored, trained
    from dpaudit.membership.schema import TargetSpec
    from dpaudit.sections import (
        DataSection,
        InputPerturbationSection,
        ModelSection,
        TrainingSection,
    )

    spec = TargetSpec(
        data=DataSection(
            dataset="statsmodels:fair", features=["age", "religious"], audited_size=40
        ),
        model=ModelSection(kind="logistic"),
        training=TrainingSection(epochs=1, batch_size=8),
        seed=3,
        base_dir=".",
        input_perturbation=InputPerturbationSection(
            features="laplace", labels="k-rr", epsilon=1.0, label_share=0.25, bound=1.0
        ),
    )
    target = trained.train(spec, "input-perturbation", trained.load(spec))
    part = stored.store_target(target, spec)
    assert stored.stored_upper(part, 1e-5).epsilon == 1.0  # type: ignore[union-attr]
    details = stored.stored_details(part, 1e-5)["input_perturbation"]
    assert details["features"] == "laplace"
    assert details["labels"] == "k-rr"
    assert details["feature_epsilon"] == pytest.approx(0.75)
    assert details["scale"] == pytest.approx(2 * 1.0 * 2 / 0.75)  # ℓ1 diameter 2·B·d over ε_f
    assert details["truthful"] == k_rr_probabilities(k=2, epsilon=0.25)[0]
    assert details["game"] == "replace-one"
    assert details["substitutes"] == int((~target.membership).sum())
    # the plain variant of the same spec stores neither
    plain = stored.store_target(trained.train(spec, "plain", trained.load(spec)), spec)
    assert stored.stored_upper(plain, 1e-5) is None
    assert stored.stored_details(plain, 1e-5) == {}
