"""Tests for RMIA (dpaudit.attacks.rmia): the paper's formula against a hand computation."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.attacks import RmiaAttack, get_attack, rmia_scores
from dpaudit.attacks.reference import ReferenceLogits
from dpaudit.attacks.rmia import true_class_log_probability
from dpaudit.errors import DataError, DpauditError


def hand_rmia(p_target_x, p_ref_x, ref_in, p_target_z, p_ref_z, *, online, a, gamma):
    """Zarifzadeh et al. (2024) written out with loops over x and z, in probability space.

    Pr(x) online = ½(mean over IN models + mean over OUT models); offline =
    ½((1 + a)·mean over OUT models + (1 − a)); z (in no reference model here) uses the OUT
    mean online and the same approximation offline. Score(x) = #{z : LR(x, z) ≥ γ} / n_z
    with LR(x, z) = (Pr(x|θ)/Pr(x)) / (Pr(z|θ)/Pr(z)).
    """
    T, m = p_target_x.shape
    K, n_z = p_ref_z.shape
    out = np.zeros((T, m))
    for t in range(T):
        for i in range(m):
            ins = [p_ref_x[k, i] for k in range(K) if ref_in[k, i]]
            outs = [p_ref_x[k, i] for k in range(K) if not ref_in[k, i]]
            if online:
                px = 0.5 * (sum(ins) / len(ins) + sum(outs) / len(outs))
            else:
                px = 0.5 * ((1 + a) * sum(outs) / len(outs) + (1 - a))
            hits = 0
            for j in range(n_z):
                pz_out = sum(p_ref_z[k, j] for k in range(K)) / K
                pz = pz_out if online else 0.5 * ((1 + a) * pz_out + (1 - a))
                lr = (p_target_x[t, i] / px) / (p_target_z[t, j] / pz)
                hits += lr >= gamma
            out[t, i] = hits / n_z
    return out


@pytest.fixture
def fixed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2024)
    K, m, n_z = 6, 9, 11
    ref_in = np.zeros((K, m), dtype=bool)
    for i in range(m):
        ref_in[rng.permutation(K)[: K // 2], i] = True
    return {
        "p_target_x": rng.uniform(0.05, 0.99, (2, m)),
        "p_ref_x": rng.uniform(0.05, 0.99, (K, m)),
        "ref_in": ref_in,
        "p_target_z": rng.uniform(0.05, 0.99, (2, n_z)),
        "p_ref_z": rng.uniform(0.05, 0.99, (K, n_z)),
    }


def _ours(f, **kw):
    return rmia_scores(
        np.log(f["p_target_x"]),
        np.log(f["p_ref_x"]),
        f["ref_in"],
        np.log(f["p_target_z"]),
        np.log(f["p_ref_z"]),
        **kw,
    )


@pytest.mark.parametrize("gamma", [1.0, 2.0, 0.5])
def test_online_matches_hand_computation(fixed, gamma) -> None:
    expected = hand_rmia(**fixed, online=True, a=None, gamma=gamma)
    np.testing.assert_allclose(_ours(fixed, variant="online", gamma=gamma), expected)
    assert len(np.unique(expected)) > 3  # the example is not degenerate


@pytest.mark.parametrize("a", [0.0, 0.3, 1.0])
def test_offline_matches_hand_computation(fixed, a) -> None:
    expected = hand_rmia(**fixed, online=False, a=a, gamma=1.0)
    np.testing.assert_allclose(_ours(fixed, variant="offline", offline_a=a), expected)


def test_tiny_example_by_hand() -> None:
    # Two audited rows, two reference models (model 0 trained on x0, model 1 on x1), three z.
    # Online: Pr(x0) = ½(0.8 + 0.5) = 0.65, ratio 0.9/0.65 = 1.385;
    #         Pr(x1) = ½(0.35 + 0.3) = 0.325, ratio 0.4/0.325 = 1.231.
    # z (out of both models): Pr(z) = [0.6, 0.7, 0.2], target [0.9, 0.56, 0.25] → ratios
    # [1.5, 0.8, 1.25]. γ = 1: x0 beats 0.8 and 1.25 → 2/3; x1 beats only 0.8 → 1/3.
    scores = rmia_scores(
        np.log([[0.9, 0.4]]),
        np.log([[0.8, 0.3], [0.5, 0.35]]),
        np.array([[True, False], [False, True]]),
        np.log([[0.9, 0.56, 0.25]]),
        np.log([[0.5, 0.7, 0.3], [0.7, 0.7, 0.1]]),
    )
    np.testing.assert_allclose(scores, [[2 / 3, 1 / 3]])
    # Offline, a = 0.5: Pr(x0) = ½(1.5·0.5 + 0.5) = 0.625 → ratio 1.44; Pr(x1) =
    # ½(1.5·0.3 + 0.5) = 0.475 → 0.842. Pr(z) = ½(1.5·[0.6, 0.7, 0.2] + 0.5) =
    # [0.7, 0.775, 0.4] → ratios [1.286, 0.723, 0.625]: x0 beats all 3, x1 beats 2.
    offline = rmia_scores(
        np.log([[0.9, 0.4]]),
        np.log([[0.8, 0.3], [0.5, 0.35]]),
        np.array([[True, False], [False, True]]),
        np.log([[0.9, 0.56, 0.25]]),
        np.log([[0.5, 0.7, 0.3], [0.7, 0.7, 0.1]]),
        variant="offline",
        offline_a=0.5,
    )
    np.testing.assert_allclose(offline, [[1.0, 2 / 3]])


def test_score_is_monotone_in_the_row_ratio_and_in_unit_interval(fixed) -> None:
    s = _ours(fixed)
    assert ((s >= 0) & (s <= 1)).all()
    # With one z set per target, the score is the empirical CDF of the z ratios at the
    # row's ratio / γ: a row with a larger Pr(x|θ)/Pr(x) never scores lower.
    px = 0.5 * (
        np.where(fixed["ref_in"], fixed["p_ref_x"], 0).sum(0) / fixed["ref_in"].sum(0)
        + np.where(~fixed["ref_in"], fixed["p_ref_x"], 0).sum(0) / (~fixed["ref_in"]).sum(0)
    )
    ratio = fixed["p_target_x"][0] / px
    order = np.argsort(ratio)
    assert np.all(np.diff(s[0][order]) >= 0)


def test_extreme_probabilities_stay_finite() -> None:
    # Log-probabilities far below float64's smallest probability: computed in log space.
    tiny = np.array([[-2000.0, -1.0]])
    scores = rmia_scores(
        tiny,
        np.array([[-1500.0, -1.0], [-1800.0, -2.0]]),
        np.array([[True, False], [False, True]]),
        np.array([[-1.0, -3000.0]]),
        np.array([[-1.0, -2500.0], [-2.0, -2600.0]]),
        variant="offline",
        offline_a=1.0,
    )
    assert np.isfinite(scores).all()


def test_invalid_parameters() -> None:
    args = (np.zeros((1, 2)), np.zeros((2, 2)), np.eye(2, dtype=bool))
    with pytest.raises(DpauditError, match="'gamma' parameter must be > 0"):
        rmia_scores(*args, np.zeros((1, 3)), np.zeros((2, 3)), gamma=0.0)
    with pytest.raises(DpauditError, match=r"'offline_a' parameter must be in \[0, 1\]"):
        rmia_scores(*args, np.zeros((1, 3)), np.zeros((2, 3)), offline_a=1.5)
    with pytest.raises(DpauditError, match="'variant' parameter must be one of"):
        rmia_scores(*args, np.zeros((1, 3)), np.zeros((2, 3)), variant="both")  # type: ignore[arg-type]
    with pytest.raises(DataError, match="at least one population sample"):
        rmia_scores(*args, np.zeros((1, 0)), np.zeros((2, 0)))
    with pytest.raises(
        DpauditError,
        match=(
            r"The 'population_samples' parameter must be an integer in "
            r"\[1, inf\)\. Got 0 instead\."
        ),
    ):
        RmiaAttack(population_samples=0)
    with pytest.raises(DpauditError, match="'gamma' parameter must be a number > 0"):
        RmiaAttack(gamma=-1)


def test_attack_scores_from_softmax_of_the_logits() -> None:
    rng = np.random.default_rng(5)
    K, m, n_z, C = 4, 6, 8, 3
    y, y_z = rng.integers(0, C, m), rng.integers(0, C, n_z)
    refs = ReferenceLogits(
        target_x=rng.normal(size=(1, m, C)),
        reference_x=rng.normal(size=(K, m, C)),
        reference_in=np.array([[True] * m, [True] * m, [False] * m, [False] * m]),
        y=y,
        target_z=rng.normal(size=(1, n_z, C)),
        reference_z=rng.normal(size=(K, n_z, C)),
        z_in=np.zeros((K, n_z), dtype=bool),
        y_z=y_z,
    )

    def softmax_true(logits, labels):
        e = np.exp(logits)
        p = e / e.sum(-1, keepdims=True)
        return p[:, np.arange(labels.size), labels]

    for name, online, a in [("rmia", True, None), ("rmia-offline", False, 0.3)]:
        attack = get_attack(name, num_reference_models=K)
        expected = hand_rmia(
            softmax_true(refs.target_x, y),
            softmax_true(refs.reference_x, y),
            refs.reference_in,
            softmax_true(refs.target_z, y_z),
            softmax_true(refs.reference_z, y_z),
            online=online,
            a=a,
            gamma=1.0,
        )
        np.testing.assert_allclose(attack.score_from(refs), expected)
    np.testing.assert_allclose(
        true_class_log_probability(refs.target_x, y), np.log(softmax_true(refs.target_x, y))
    )
