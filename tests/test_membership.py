"""Tests for dpaudit.membership.pipeline: the fair-coin pipeline, its bounds and result objects."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from dpaudit import accounting
from dpaudit.bounds import one_run_epsilon_lower_bound
from dpaudit.data import load_dataset
from dpaudit.errors import ConfigError, DataError, DpauditError
from dpaudit.membership.pipeline import (
    audit_attribute,
    audit_membership,
    fair_coins,
    one_run_bound,
    prepare_target,
)
from dpaudit.models import ModelSpec
from dpaudit.stats import clopper_pearson
from dpaudit.theory import dp_attribute_advantage_bound
from dpaudit.training import DPConfig, TrainingSpec

# An MLP that overfits 400 audited rows of statsmodels:fair (about 200 members) within a
# few seconds; 16 reference models keep LiRA fast (global variance, Carlini et al. §VI-A).
MODEL = ModelSpec(kind="mlp", hidden=(32,))
PLAIN = TrainingSpec(epochs=60, batch_size=32, learning_rate=0.1, momentum=0.9)


@pytest.fixture(scope="module")
def fair():
    return load_dataset("statsmodels:fair", sensitive="rate_marriage")


@pytest.fixture(scope="module")
def plain_audit(fair):
    return audit_membership(
        fair,
        model=MODEL,
        training=PLAIN,
        attacks=("loss", "lira"),
        audited_size=400,
        population_size=800,
        num_reference_models=16,
        seed=0,
    )


def test_lira_beats_loss_at_low_fpr(plain_audit) -> None:
    """LiRA's TPR at 10 % FPR exceeds the loss attack's beyond sampling error.

    Margin: the two 95 % Clopper–Pearson intervals on TPR (about 200 members each) must be
    disjoint — LiRA's lower limit above the loss attack's upper limit — so the ordering is
    not a sampling fluke at this seed. (At 1 % FPR only ~2 non-members fall above the
    threshold, too few for a test; the 2x claim at 1 % is measured in
    benchmarks/membership_attacks.py with 1,000 audited rows and 64 reference models.)
    """
    lira = plain_audit.outcome("lira").metrics.tpr_at_fpr[0]
    loss = plain_audit.outcome("loss").metrics.tpr_at_fpr[0]
    assert lira.target_fpr == loss.target_fpr == 0.1
    assert lira.tpr_interval.low > loss.tpr_interval.high
    # AUC ordering beyond DeLong's interval, for the same reason.
    assert (
        plain_audit.outcome("lira").metrics.auc_interval.low
        > plain_audit.outcome("loss").metrics.auc
    )


def test_result_shapes_labels_and_counts(plain_audit) -> None:
    r = plain_audit
    coins = fair_coins(400, seed=0)
    np.testing.assert_array_equal(r.membership, coins)
    assert r.members == int(coins.sum())
    assert r.accountant_epsilon is None
    assert r.record is None
    for o in r.outcomes:
        assert o.scores.shape == (400,)
        assert o.metrics.positives == r.members
        assert o.metrics.negatives == 400 - r.members
        assert o.one_run.validity == "rigorous-one-run"
        assert o.epsilon_heuristic is None or o.epsilon_heuristic.validity == "heuristic"
        assert o.mu_heuristic is None or o.mu_heuristic.validity == "heuristic"
        # Guess fraction 5 % at each end: 20 top + 20 bottom guesses among 400 canaries.
        assert o.one_run.counts["canaries"] == 400
        assert o.one_run.counts["guesses"] == 40
    # The overfit target: members are fitted far better than non-members.
    assert r.target_accuracy["members"] > r.target_accuracy["non_members"] + 0.1


def test_result_is_frozen_and_json_serialisable(plain_audit) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        plain_audit.delta = 0.5
    text = json.dumps(plain_audit.to_dict())
    back = json.loads(text)
    assert back["kind"] == "membership"
    assert [o["attack"] for o in back["outcomes"]] == ["loss", "lira"]
    assert back["outcomes"][1]["one_run"]["validity"] == "rigorous-one-run"
    assert len(back["outcomes"][0]["scores"]) == 400
    assert "MembershipAuditResult(" in repr(plain_audit)
    assert "auc=" in repr(plain_audit.outcomes[0])


def test_one_run_bound_counts_top_and_bottom_guesses() -> None:
    membership = np.array([True, False] * 50)
    scores = np.where(membership, 1.0, 0.0) + np.linspace(0, 0.1, 100)
    b = one_run_bound(scores, membership, guesses_per_side=10, delta=1e-5, confidence_level=0.95)
    ref = one_run_epsilon_lower_bound(
        canaries=100, guesses=20, correct=20, delta=1e-5, confidence_level=0.95
    )
    assert b.value == ref.value
    # Reversed scores: every guess is wrong, the bound is 0.
    bad = one_run_bound(-scores, membership, guesses_per_side=10, delta=1e-5, confidence_level=0.95)
    assert bad.counts["correct"] == 0
    assert bad.value == 0.0


def test_fair_coins_are_fair_and_seeded() -> None:
    coins = fair_coins(20000, seed=1)
    np.testing.assert_array_equal(coins, fair_coins(20000, seed=1))
    # 99.9 % two-sided Clopper–Pearson interval of the inclusion rate must contain 1/2.
    low, high = clopper_pearson(int(coins.sum()), coins.size, confidence_level=0.999)
    assert low < 0.5 < high


def test_dp_attribute_bound_closed_form_and_brute_force() -> None:
    for eps, delta in ((0.5, 0.0), (1.0, 1e-5), (2.0, 1e-3)):
        b = dp_attribute_advantage_bound(eps, delta)
        assert b["yeom"] == pytest.approx(math.expm1(eps) + delta)
        if delta == 0:
            # (e^ε − 1)/(e^ε + 1) = tanh(ε/2)
            assert b["region"] == pytest.approx(math.tanh(eps / 2))
        # Brute force over a_out of min of the two DP constraints on a_in − a_out.
        a = np.linspace(0, 1, 200001)
        e = math.exp(eps)
        adv = np.minimum((e - 1) * a + delta, (1 - 1 / e) * (1 - a) + delta / e)
        assert b["region"] == pytest.approx(adv.max(), abs=1e-5)


def test_dp_target_respects_accountant(fair) -> None:
    """DP-SGD at ε = 1: the one-run bound stays below the accountant's ε, and every
    TPR lower limit stays inside the (ε, δ) region. Both hold with probability ≥ 95 % if
    the engine and accountant are right; at a fixed seed this is a regression check."""
    members = int(fair_coins(400, seed=3).sum())
    training = TrainingSpec(epochs=10, batch_size=32, learning_rate=0.1)
    q = training.batch_size / members
    steps = training.epochs * (members // training.batch_size)
    sigma = accounting.calibrate_noise(target_epsilon=1.0, delta=1e-5, sampling_rate=q, steps=steps)
    dp = dataclasses.replace(training, dp=DPConfig(noise_multiplier=sigma, clipping_norm=1.0))
    r = audit_membership(
        fair,
        model=MODEL,
        training=dp,
        attacks=("loss", "lira"),
        audited_size=400,
        population_size=400,
        num_reference_models=8,
        seed=3,
        delta=1e-5,
    )
    assert r.record is not None
    assert r.record.noise_multiplier == pytest.approx(sigma)
    assert r.accountant_epsilon == pytest.approx(1.0, abs=0.02)
    for o in r.outcomes:
        assert o.one_run.value <= r.accountant_epsilon
        assert all(row["inside"] for row in o.dp_region(r.accountant_epsilon, 1e-5))
    attr = audit_attribute(
        fair,
        model=MODEL,
        training=dp,
        audited_size=400,
        population_size=400,
        seed=3,
        delta=1e-5,
    )
    assert attr.dp_bound is not None
    assert attr.advantage_interval.low <= attr.dp_bound["region"]


def test_attribute_audit_counts(fair) -> None:
    target = prepare_target(
        fair, model=MODEL, training=PLAIN, audited_size=300, population_size=600, seed=2
    )
    r = audit_attribute(fair, model=MODEL, training=PLAIN, audited_size=300, seed=2, target=target)
    coins = target.membership
    correct = r.guesses == r.truth
    assert r.accuracy_members == pytest.approx(correct[coins].mean())
    assert r.accuracy_non_members == pytest.approx(correct[~coins].mean())
    assert r.advantage == pytest.approx(r.accuracy_members - r.accuracy_non_members)
    # Baseline: the population's most frequent value, scored on the audited rows.
    codes = target.dataset.sensitive.codes
    mode = np.bincount(codes[target.population]).argmax()
    assert r.accuracy_baseline == pytest.approx(np.mean(codes[target.audited] == mode))
    for point, ci in (
        (r.accuracy_members, r.accuracy_members_interval),
        (r.accuracy_non_members, r.accuracy_non_members_interval),
        (r.advantage, r.advantage_interval),
    ):
        assert ci.low <= point <= ci.high
    # The truth is the dataset's sensitive value: rate_marriage of each audited row.
    raw = np.array(fair.sensitive.values)[fair.sensitive.codes[target.audited]]
    np.testing.assert_array_equal(np.array(r.values)[r.truth], raw)
    assert r.dp_bound is None
    json.dumps(r.to_dict())


def test_the_kind_and_the_api_score_and_bound_a_target_alike(tmp_path) -> None:
    """One scoring path and one summariser: the membership kind's unit and
    audit_membership on the same target give the same scores, and the kind's one-run and
    heuristic bounds and metrics are the API's, to the last bit."""
    from dpaudit.kinds.base import RunContext, SharedTables
    from dpaudit.membership import trained
    from dpaudit.membership.kind import KIND, own_spec
    from dpaudit.membership.schema import MembershipSection
    from dpaudit.sections import DataSection, ModelSection, TrainingSection

    shared = SharedTables(
        data=DataSection(dataset="statsmodels:fair", audited_size=200, population_size=300),
        model=ModelSection(kind="logistic"),
        training=TrainingSection(epochs=3, batch_size=32),
    )
    context = RunContext(
        seed=4, confidence_level=0.95, delta=1e-5, base_dir=tmp_path, shared=shared
    )
    section = MembershipSection(attacks=["loss", "lira"], reference_models=4)
    spec = own_spec(section, context)
    outputs = {"target-0-plain": trained.own_unit(spec, "target-0-plain")}
    target = trained.train(spec, "plain", trained.load(spec))
    api = audit_membership(
        target.dataset,
        model=target.model,
        training=target.training,
        attacks=("loss", "lira"),
        audited_size=200,
        num_reference_models=4,
        seed=4,
        target=target,
    )
    assert KIND.comparisons(section, context, outputs) == 0  # a plain target: no upper bound
    summary = KIND.summarise(section, context, outputs, level=0.95)
    for i, outcome in enumerate(api.outcomes):
        np.testing.assert_array_equal(outputs["target-0-plain"]["scores"][i], outcome.scores)
        test = summary.tests[i]
        assert test.metrics["auc"] == outcome.metrics.auc
        bounds = [c.lower for c in summary.comparisons if c.test == test.label]
        want = [outcome.one_run, outcome.one_run_mu, outcome.epsilon_heuristic]
        assert [b.to_dict() for b in bounds] == [b.to_dict() for b in want if b is not None]


def test_errors(fair) -> None:
    plain = load_dataset("sklearn:wine")
    with pytest.raises(DataError, match="sensitive column"):
        audit_attribute(plain, model=MODEL, training=PLAIN, audited_size=50, seed=0)
    with pytest.raises(ConfigError, match="must be one of"):
        audit_membership(
            plain, model=MODEL, training=PLAIN, attacks=("mia",), audited_size=50, seed=0
        )
    with pytest.raises(DataError, match="has 178 rows, fewer than audited_size=500"):
        audit_membership(plain, model=MODEL, training=PLAIN, audited_size=500, seed=0)
    with pytest.raises(DpauditError, match=r"'delta' parameter must be in \[0, 1\)"):
        audit_membership(plain, model=MODEL, training=PLAIN, audited_size=50, seed=0, delta=1.0)
    with pytest.raises(DpauditError, match="not a membership attack"):
        audit_membership(
            plain, model=MODEL, training=PLAIN, attacks=("attribute",), audited_size=50, seed=0
        )
