"""Tests for the "auto" membership attack (dpaudit.attacks.auto): leave-one-out choice on
the reference models, its independence of the target, and the validity of bounds on it."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dpaudit.attacks import AUTO_CANDIDATES, AutoAttack, ReferenceLogits, get_attack
from dpaudit.attacks.auto import leave_one_out_tpr, selection_fpr, tpr_at_fpr
from dpaudit.errors import DpauditError


def _refs(rng: np.random.Generator, *, k: int = 8, m: int = 300, n_z: int = 200) -> ReferenceLogits:
    """A reference set whose models separate members a little (a real signal)."""
    reference_in = np.argsort(rng.random((k, m)), axis=0) < k // 2
    y = rng.integers(0, 3, m)
    reference_x = rng.normal(size=(k, m, 3))
    reference_x[np.arange(k)[:, None], np.arange(m)[None, :], y[None, :]] += 0.8 * reference_in
    target_x = rng.normal(size=(1, m, 3))
    return ReferenceLogits(
        target_x=target_x,
        reference_x=reference_x,
        reference_in=reference_in,
        y=y,
        target_z=rng.normal(size=(1, n_z, 3)),
        reference_z=rng.normal(size=(k, n_z, 3)),
        z_in=np.zeros((k, n_z), dtype=bool),
        y_z=rng.integers(0, 3, n_z),
    )


def test_tpr_at_fpr_counts_false_positives_by_hand():
    scores = np.array([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    members = np.array([1, 0, 1, 1, 0, 0, 1, 0, 0, 0], dtype=bool)
    # 6 non-members (8, 5, 4, 2, 1, 0). FPR 0 allows no false positive: t = 8, members
    # above it: {9} -> 1/4. FPR 1/6 allows one: t = 5 -> {9, 7, 6} -> 3/4.
    assert tpr_at_fpr(scores, members, 0.0) == 0.25
    assert tpr_at_fpr(scores, members, 1 / 6) == 0.75
    assert tpr_at_fpr(scores, members, 0.2) == 0.75  # floor(0.2 * 6) = 1
    assert tpr_at_fpr(scores, members, 1.0) == 1.0
    # a member tied with the threshold is not above it
    assert tpr_at_fpr(np.array([1.0, 1.0, 0.0]), np.array([True, False, False]), 0.0) == 0.0


def test_tpr_at_fpr_matches_sklearn_roc_curve():
    from sklearn.metrics import roc_curve

    rng = np.random.default_rng(3)
    members = rng.random(2000) < 0.5
    scores = rng.normal(size=2000) + members
    fpr, tpr, _ = roc_curve(members, scores)
    for target in (0.001, 0.01, 0.1):
        # the ROC's best TPR among points with FPR <= target (continuous scores: no ties)
        assert tpr_at_fpr(scores, members, target) == pytest.approx(tpr[fpr <= target].max())


def test_selection_fpr_is_a_tenth_of_a_percent_or_ten_false_positives():
    assert selection_fpr(100_000) == 1e-3
    assert selection_fpr(10_000) == 1e-3
    assert selection_fpr(4_000) == 10 / 4_000
    with pytest.raises(DpauditError, match="no non-member"):
        selection_fpr(0)


def test_leave_one_out_scores_each_reference_model_from_the_others():
    rng = np.random.default_rng(0)
    refs = _refs(rng, k=6, m=120, n_z=50)
    attack = AutoAttack(num_reference_models=6, population_samples=50)
    candidates = attack.candidates()
    tprs, fpr = leave_one_out_tpr(candidates, refs)
    assert fpr == selection_fpr(int((~refs.reference_in).sum()))
    # independent recomputation: build each held-out set by hand
    for name, candidate in candidates.items():
        pooled = []
        for j in range(6):
            others = [i for i in range(6) if i != j]
            held = ReferenceLogits(
                target_x=refs.reference_x[[j]],
                reference_x=refs.reference_x[others],
                reference_in=refs.reference_in[others],
                y=refs.y,
                target_z=refs.reference_z[[j]],
                reference_z=refs.reference_z[others],
                z_in=refs.z_in[others],
                y_z=refs.y_z,
            )
            pooled.append(candidate.score_from(held)[0])
        assert tprs[name] == tpr_at_fpr(np.array(pooled), refs.reference_in, fpr)


def test_auto_scores_with_the_winner_and_says_so():
    rng = np.random.default_rng(1)
    refs = _refs(rng)
    attack = get_attack("auto", num_reference_models=8, population_samples=200)
    assert attack.outcome() == {}
    scores = attack.score_from(refs)
    outcome = attack.outcome()
    tprs = outcome["leave_one_out_tpr"]
    assert set(tprs) == set(AUTO_CANDIDATES) == set(outcome["candidates"])
    assert tprs[outcome["selected"]] == max(tprs.values())
    winner = attack.candidates()[outcome["selected"]]
    np.testing.assert_array_equal(scores, winner.score_from(refs))
    assert attack.described_options()["selection"] == outcome


def test_the_choice_never_reads_the_target():
    """Validity rests on this: the choice is a function of the reference models alone."""
    rng = np.random.default_rng(2)
    refs = _refs(rng)
    first = AutoAttack(num_reference_models=8, population_samples=200)
    first.score_from(refs)
    for seed in range(5):
        other = np.random.default_rng(100 + seed)
        moved = ReferenceLogits(
            target_x=other.normal(scale=5.0, size=refs.target_x.shape),
            reference_x=refs.reference_x,
            reference_in=refs.reference_in,
            y=refs.y,
            target_z=other.normal(scale=5.0, size=refs.target_z.shape),
            reference_z=refs.reference_z,
            z_in=refs.z_in,
            y_z=refs.y_z,
        )
        again = AutoAttack(num_reference_models=8, population_samples=200)
        again.score_from(moved)
        assert again.outcome() == first.outcome()


def test_auto_needs_four_reference_models():
    with pytest.raises(
        DpauditError,
        match=(
            r"The 'num_reference_models' parameter must be an integer in "
            r"\[4, inf\)\. Got 3 instead\."
        ),
    ):
        AutoAttack(num_reference_models=3)


def _randomised_response_logits(coins: np.ndarray, epsilon: float, rng: np.random.Generator):
    """Two-class logits of a per-row ε-DP randomiser of the coin (each row's output reads
    only its own coin, through randomised response, plus independent noise)."""
    keep = rng.random(coins.shape) < np.exp(epsilon) / (1 + np.exp(epsilon))
    bit = np.where(keep, coins, ~coins)
    logits = np.zeros((*coins.shape, 2))
    logits[..., 1] = 2.0 * bit + rng.normal(scale=0.3, size=coins.shape)
    return logits


def test_one_run_bounds_on_auto_scores_are_valid():
    """Coverage: a target that is ε-DP per row (randomised response, ε = 1), reference
    models of the same mechanism; the one-run bound on "auto"'s scores exceeds ε in at
    most the binomial 99.9 % quantile of 200 audits at 1 − confidence = 5 %."""
    from dpaudit.membership.pipeline import one_run_bound

    epsilon, k, m, n_z, repeats = 1.0, 6, 400, 100, 200
    violations, values = 0, []
    for r in range(repeats):
        rng = np.random.default_rng([7, r])
        coins = rng.random(m) < 0.5
        reference_in = np.argsort(rng.random((k, m)), axis=0) < k // 2
        refs = ReferenceLogits(
            target_x=_randomised_response_logits(coins[None, :], epsilon, rng),
            reference_x=_randomised_response_logits(reference_in, epsilon, rng),
            reference_in=reference_in,
            y=np.ones(m, dtype=np.int64),
            target_z=_randomised_response_logits(np.zeros((1, n_z), dtype=bool), epsilon, rng),
            reference_z=_randomised_response_logits(np.zeros((k, n_z), dtype=bool), epsilon, rng),
            z_in=np.zeros((k, n_z), dtype=bool),
            y_z=np.ones(n_z, dtype=np.int64),
        )
        scores = AutoAttack(num_reference_models=k, population_samples=n_z).score_from(refs)[0]
        bound = one_run_bound(
            scores, coins, guesses_per_side=40, delta=0.0, confidence_level=0.95
        ).value
        values.append(bound)
        violations += bound > epsilon
    ceiling = stats.binom.ppf(0.999, repeats, 0.05)
    assert violations <= ceiling
    # and the attack has power here: the median bound is well above 0
    assert np.median(values) > 0.3


AUDIT = """
[audit]
name = "auto"
kinds = ["membership"]
seed = 4
[data]
dataset = "statsmodels:fair"
audited_size = 200
[model]
kind = "logistic"
[training]
epochs = 2
batch_size = 32
[target]
variants = ["plain"]
[membership]
attacks = ["loss", "auto", "lira-online", "lira-online-global", "lira-online-shrunk",
           "lira-online-shrunk-t", "rmia"]
reference_models = {k}
rmia_population_samples = 100
"""


def test_the_kind_scores_auto_as_its_choice_and_records_it(tmp_path):
    from dpaudit.audit import run_audit

    path = tmp_path / "auto.toml"
    path.write_text(AUDIT.format(k=4))
    result = run_audit(path, output_dir=tmp_path / "out")
    tests = {t.id: t.to_dict() for t in result.tests}
    options = tests["plain-auto"]["attack"]["options"]
    selection = options["selection"]
    assert selection["candidates"] == list(AUTO_CANDIDATES)
    tprs = selection["leave_one_out_tpr"]
    assert tprs[selection["selected"]] == max(tprs.values())
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert f'Attack "auto" chose <strong>{selection["selected"]}</strong>' in html
    # one reference set scores every reference attack, and every candidate is listed:
    # "auto"'s test is the chosen candidate's, metric for metric
    assert tests["plain-auto"]["metrics"] == tests[f"plain-{selection['selected']}"]["metrics"]


def test_the_default_attacks_end_with_auto():
    from dpaudit.membership.schema import MembershipSection

    assert MembershipSection().attacks == ["loss", "shadow", "auto"]


def test_auto_with_three_reference_models_is_a_config_error_exit_2(tmp_path):
    from typer.testing import CliRunner

    from dpaudit.cli import app

    path = tmp_path / "auto.toml"
    path.write_text(AUDIT.format(k=3))
    result = CliRunner().invoke(app, ["run", str(path), "--output-dir", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "the 'auto' attack needs reference_models >= 4" in result.output
