"""Tests for dpaudit.attacks: the shared contract of every registered attack, and the math."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
import torch
from scipy import special, stats

from dpaudit.attacks import (
    ATTACK_VARIANTS,
    ATTACKS,
    MEMBERSHIP_ATTACKS,
    AttributeAttack,
    LiraAttack,
    MembershipAttack,
    balanced_halves,
    get_attack,
    lira_scores,
    logit_confidence,
    score_with_shared_references,
    sensitive_prior,
)
from dpaudit.attacks.base import log_softmax, true_class_loss
from dpaudit.attacks.reference import ReferenceLogits
from dpaudit.attacks.shadow import attack_features
from dpaudit.data import SensitiveColumn, load_dataset
from dpaudit.errors import ConfigError, DataError, DpauditError
from dpaudit.membership.pipeline import AuditedTarget, prepare_target
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.training import TrainingSpec, train_many

# Small but real: 160 audited rows of statsmodels:fair, 320 population rows, an MLP.
SMALL_OPTIONS = {
    "loss": {},
    "shadow": {"num_shadow_models": 3},
    "lira": {"num_reference_models": 4},
    "rmia": {"num_reference_models": 4, "population_samples": 50},
    "auto": {"num_reference_models": 4, "population_samples": 50},
    "whitebox": {"num_shadow_models": 3},
    "attribute": {},
}
TRAINING = TrainingSpec(epochs=5, batch_size=32, learning_rate=0.1)
MODEL = ModelSpec(kind="mlp", hidden=(16,))


@pytest.fixture(scope="module")
def target() -> AuditedTarget:
    ds = load_dataset("statsmodels:fair", sensitive="religious")
    return prepare_target(
        ds, model=MODEL, training=TRAINING, audited_size=160, population_size=320, seed=11
    )


@pytest.fixture(scope="module")
def two_targets(target: AuditedTarget) -> AuditedTarget:
    """The same audited pool with a stack of T = 2 target models (shape checks)."""
    membership = np.stack([target.membership, ~target.membership])
    models = train_many(
        target.audited_X,
        target.audited_y,
        membership,
        model=MODEL,
        training=TRAINING,
        seed=5,
        num_classes=2,
    ).models
    return dataclasses.replace(target, models=models)


def run_attack(name: str, target: AuditedTarget, *, seed: int) -> np.ndarray:
    """Scores of any registered attack through its public API (adapter per kind)."""
    attack = get_attack(name, **SMALL_OPTIONS[name])
    if isinstance(attack, MembershipAttack):
        return attack.score(target.context(), target.audited_X, target.audited_y, seed=seed)
    sensitive = target.dataset.sensitive
    prior = sensitive_prior(sensitive.codes[target.population], sensitive.num_values)
    return attack.score(
        target.models, target.audited_X, target.audited_y, sensitive=sensitive, prior=prior
    )


def test_every_attack_has_small_options() -> None:
    assert set(SMALL_OPTIONS) == set(ATTACKS)


@pytest.mark.parametrize("name", sorted(ATTACKS))
class TestAttackContract:
    """The contract every registered attack honours (one shared contract class for all)."""

    def test_shape_and_finite(self, name: str, two_targets: AuditedTarget) -> None:
        scores = run_attack(name, two_targets, seed=0)
        m = two_targets.audited.size
        if name == "attribute":
            assert scores.shape == (2, m, two_targets.dataset.sensitive.num_values)
        else:
            assert scores.shape == (2, m)
        assert scores.dtype == np.float64
        assert np.isfinite(scores).all()

    def test_deterministic_under_seed(self, name: str, target: AuditedTarget) -> None:
        np.testing.assert_array_equal(
            run_attack(name, target, seed=3), run_attack(name, target, seed=3)
        )

    def test_api_never_receives_membership(self, name: str) -> None:
        cls = ATTACKS[name]
        params = set(inspect.signature(cls.score).parameters)
        fields = {f.name for f in dataclasses.fields(__import__("dpaudit").attacks.AttackContext)}
        for forbidden in ("membership", "members", "labels", "coins", "is_member"):
            assert forbidden not in params
            assert forbidden not in fields

    def test_shuffled_hidden_labels_leave_scores_unchanged(
        self, name: str, target: AuditedTarget
    ) -> None:
        rng = np.random.default_rng(0)
        shuffled = dataclasses.replace(target, membership=rng.permutation(target.membership))
        assert not np.array_equal(shuffled.membership, target.membership)
        # A redraw with a different number of members: not even the count may leak.
        redrawn = dataclasses.replace(target, membership=rng.random(target.audited.size) < 0.3)
        assert redrawn.membership.sum() != target.membership.sum()
        np.testing.assert_array_equal(
            run_attack(name, target, seed=1), run_attack(name, redrawn, seed=1)
        )
        np.testing.assert_array_equal(
            run_attack(name, target, seed=1), run_attack(name, shuffled, seed=1)
        )

    def test_rejects_malformed_rows(self, name: str, target: AuditedTarget) -> None:
        bad = dataclasses.replace(target, audited=target.audited[:0])
        with pytest.raises(DataError, match=r"no audited rows|shape"):
            run_attack(name, bad, seed=0)


# ------------------------------------------------------------------- output arithmetic


def test_logit_confidence_matches_definition_and_stays_finite() -> None:
    rng = np.random.default_rng(0)
    z = rng.normal(size=(3, 50, 4)) * 4
    y = rng.integers(0, 4, size=50)
    p = special.softmax(z, axis=-1)[:, np.arange(50), y]
    np.testing.assert_allclose(logit_confidence(z, y), special.logit(p), rtol=1e-10, atol=1e-10)
    # Where p_y rounds to 1 in float64, the naive formula is +inf; the stable one is exact:
    # φ = z_y − log Σ_{j≠y} e^{z_j} = 1000 − 0 for logits (1000, 0).
    assert logit_confidence(np.array([[[1000.0, 0.0]]]), np.array([0]))[0, 0] == 1000.0
    assert logit_confidence(np.array([[[0.0, 1000.0]]]), np.array([0]))[0, 0] == -1000.0


def test_true_class_loss_matches_torch_cross_entropy() -> None:
    rng = np.random.default_rng(1)
    z = rng.normal(size=(2, 30, 5)) * 3
    y = rng.integers(0, 5, size=30)
    ref = torch.nn.functional.cross_entropy(
        torch.tensor(z).reshape(-1, 5), torch.tensor(np.tile(y, 2)), reduction="none"
    ).reshape(2, 30)
    np.testing.assert_allclose(true_class_loss(z, y), ref.numpy(), rtol=1e-12)
    np.testing.assert_allclose(np.exp(log_softmax(z)).sum(-1), 1.0, rtol=1e-12)


def test_loss_attack_is_minus_model_loss(target: AuditedTarget) -> None:
    scores = get_attack("loss").score(target.context(), target.audited_X, target.audited_y, seed=0)
    ref = target.models.losses(target.audited_X, target.audited_y).double().numpy()
    # The attack recomputes the loss in float64 from float32 logits: equal to float32 rounding.
    np.testing.assert_allclose(-scores, ref, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------- LiRA math


def test_balanced_halves_put_each_row_in_half_the_models() -> None:
    keep = balanced_halves(8, 1000, np.random.default_rng(0))
    np.testing.assert_array_equal(keep.sum(axis=0), 4)
    # Each model holds each row with probability 1/2: its size is 500 ± a few SDs (√250 ≈ 16).
    assert np.all(np.abs(keep.sum(axis=1) - 500) < 5 * np.sqrt(250))


def test_lira_online_equals_gaussian_likelihood_ratio() -> None:
    rng = np.random.default_rng(2)
    K, m = 10, 7
    phi = rng.normal(size=(K, m))
    keep = balanced_halves(K, m, rng)
    target = rng.normal(size=(1, m))
    got = lira_scores(target, phi, keep, variant="online", variance="per-example")
    for i in range(m):
        a, b = phi[keep[:, i], i], phi[~keep[:, i], i]
        want = stats.norm(a.mean(), a.std(ddof=1)).logpdf(target[0, i]) - stats.norm(
            b.mean(), b.std(ddof=1)
        ).logpdf(target[0, i])
        assert got[0, i] == pytest.approx(want, rel=1e-10)
    off = lira_scores(target, phi, keep, variant="offline", variance="per-example")
    b0 = phi[~keep[:, 0], 0]
    assert off[0, 0] == pytest.approx(stats.norm(b0.mean(), b0.std(ddof=1)).logcdf(target[0, 0]))


def test_lira_global_variance_is_pooled_within_row_variance() -> None:
    rng = np.random.default_rng(3)
    K, m = 12, 20
    phi = rng.normal(size=(K, m)) * rng.uniform(0.5, 2.0, size=m)
    keep = balanced_halves(K, m, rng)
    got = lira_scores(np.zeros((1, m)), phi, keep, variant="offline", variance="global")
    out = [phi[~keep[:, i], i] for i in range(m)]
    pooled = np.sqrt(sum(((o - o.mean()) ** 2).sum() for o in out) / sum(o.size - 1 for o in out))
    want = [stats.norm(o.mean(), pooled).logcdf(0.0) for o in out]
    np.testing.assert_allclose(got[0], want, rtol=1e-10)


def test_lira_separates_gaussian_members_at_the_predicted_auc() -> None:
    """φ_in ~ N(1, 1), φ_out ~ N(0, 1) for every row: the likelihood ratio is monotone in φ,
    so LiRA's AUC is the Gaussian AUC Φ(1/√2) = 0.760. With 4,000 + 4,000 target rows the
    AUC's standard error is about √(AUC(1−AUC)/2000) < 0.01; 4 SE = 0.04 is the tolerance."""
    rng = np.random.default_rng(4)
    K, m = 64, 8000
    keep = balanced_halves(K, m, rng)
    phi = rng.normal(size=(K, m)) + keep
    member = np.arange(m) < m // 2
    target = rng.normal(size=(1, m)) + member
    scores = lira_scores(target, phi, keep, variant="online", variance="global")[0]
    auc = stats.mannwhitneyu(scores[member], scores[~member]).statistic / (m // 2) ** 2
    assert auc == pytest.approx(stats.norm.cdf(1 / np.sqrt(2)), abs=0.04)


def test_lira_auto_variance_switch() -> None:
    assert LiraAttack(num_reference_models=16).resolved_variance() == "global"
    assert LiraAttack(num_reference_models=64).resolved_variance() == "per-example"


# ------------------------------------------------------------------------------ shadow


def test_attack_features() -> None:
    rng = np.random.default_rng(5)
    z = rng.normal(size=(2, 6, 3))
    y = rng.integers(0, 3, size=6)
    f = attack_features(z, y, "sorted-probabilities")
    assert f.shape == (2, 6, 3)
    assert np.all(np.diff(f, axis=-1) <= 0)
    g = attack_features(z, y, "probabilities+label")
    assert g.shape == (2, 6, 4)
    np.testing.assert_allclose(g[..., -1], logit_confidence(z, y))


# ---------------------------------------------------------------------------- attribute


def _one_feature_model(weight: float) -> ModelStack:
    """Logistic regression with logits (0, weight·x0): class 1 iff x0 > 0 when weight > 0."""
    state = {
        "0.weight": torch.tensor([[[0.0, 0.0], [weight, 0.0]]]),
        "0.bias": torch.zeros(1, 2),
    }
    return ModelStack.from_state_dict(ModelSpec(kind="logistic"), state)


def _sensitive(codes: np.ndarray) -> SensitiveColumn:
    return SensitiveColumn(
        name="s",
        kind="categorical",
        columns=(0,),
        values=(-1.0, 1.0),
        encodings=np.array([[-1.0], [1.0]], dtype=np.float32),
        codes=codes,
    )


def test_attribute_scores_are_log_prior_minus_loss() -> None:
    rng = np.random.default_rng(6)
    codes = rng.integers(0, 2, size=40)
    X = np.stack([np.where(codes == 1, 1.0, -1.0), rng.normal(size=40)], axis=1).astype(np.float32)
    y = codes.copy()  # the label reveals the sensitive value through a confident model
    model = _one_feature_model(5.0)
    prior = np.array([0.3, 0.7])
    scores = AttributeAttack().score(model, X, y, sensitive=_sensitive(codes), prior=prior)
    # Closed form: logits (0, 5v); loss of label y at value v is log(1 + e^{5v}) − 5v·y.
    for v_idx, v in enumerate((-1.0, 1.0)):
        loss = np.log1p(np.exp(5 * v)) - 5 * v * y
        np.testing.assert_allclose(scores[0, :, v_idx], np.log(prior[v_idx]) - loss, rtol=1e-6)
    np.testing.assert_array_equal(AttributeAttack().guess(scores)[0], codes)


def test_attribute_strong_prior_overrides_weak_model() -> None:
    codes = np.array([0, 1, 0, 1])
    X = np.array([[-1, 0], [1, 0], [-1, 0], [1, 0]], dtype=np.float32)
    scores = AttributeAttack().score(
        _one_feature_model(0.1), X, codes, sensitive=_sensitive(codes), prior=np.array([0.99, 0.01])
    )
    # Loss differences are at most 2·0.1 = 0.2 nats, the log-prior gap is log 99 ≈ 4.6.
    np.testing.assert_array_equal(AttributeAttack().guess(scores)[0], 0)


def test_attribute_never_reads_the_true_value() -> None:
    rng = np.random.default_rng(7)
    codes = rng.integers(0, 2, size=30)
    X = np.stack([np.where(codes == 1, 1.0, -1.0), rng.normal(size=30)], axis=1).astype(np.float32)
    X_hidden = X.copy()
    X_hidden[:, 0] = rng.normal(size=30)  # overwrite the true values with noise
    model = _one_feature_model(2.0)
    prior = np.array([0.5, 0.5])
    a = AttributeAttack().score(model, X, codes, sensitive=_sensitive(codes), prior=prior)
    b = AttributeAttack().score(model, X_hidden, codes, sensitive=_sensitive(codes), prior=prior)
    np.testing.assert_array_equal(a, b)


def test_sensitive_prior_smoothing() -> None:
    np.testing.assert_allclose(sensitive_prior(np.array([0, 0, 1]), 3), [3 / 6, 2 / 6, 1 / 6])
    with pytest.raises(DataError, match="positive probabilities"):
        AttributeAttack().score(
            _one_feature_model(1.0),
            np.zeros((2, 2), np.float32),
            np.zeros(2, np.int64),
            sensitive=_sensitive(np.zeros(2, np.int64)),
            prior=np.array([1.0, 0.0]),
        )


# ----------------------------------------------------------------------------- registry


def test_registry_errors_list_valid_names() -> None:
    with pytest.raises(
        ConfigError,
        match=(
            r"one of \{'loss', 'shadow', 'lira', 'rmia', 'auto', 'whitebox', 'attribute', "
            r"'lira-online'"
        ),
    ):
        get_attack("mia")
    with pytest.raises(ConfigError, match=r"Unknown option\(s\) \['k'\] for attack 'lira'"):
        get_attack("lira", k=2)
    with pytest.raises(
        DpauditError,
        match=(
            r"The 'num_reference_models' parameter must be an integer in "
            r"\[2, inf\)\. Got 1 instead\."
        ),
    ):
        get_attack("lira", num_reference_models=1)
    with pytest.raises(DpauditError, match=r"'variant' parameter must be one of"):
        get_attack("lira", variant="both")
    with pytest.raises(
        ConfigError, match=r"Unknown option\(s\) \['variant'\] for attack 'lira-offline'"
    ):
        get_attack("lira-offline", variant="online")
    assert set(MEMBERSHIP_ATTACKS) == {"loss", "shadow", "lira", "rmia", "auto", "whitebox"}
    assert set(ATTACK_VARIANTS) == {
        "lira-online",
        "lira-offline",
        "lira-online-global",
        "lira-offline-global",
        "lira-online-shrunk",
        "lira-offline-shrunk",
        "lira-online-shrunk-t",
        "lira-offline-shrunk-t",
        "rmia-offline",
    }


# ------------------------------------------------------------ one reference set, all variants


def _fixed_reference_logits(K: int = 8, m: int = 12, n_z: int = 5) -> ReferenceLogits:
    rng = np.random.default_rng(17)
    keep = balanced_halves(K, m, rng)
    return ReferenceLogits(
        target_x=rng.normal(size=(2, m, 3)),
        reference_x=rng.normal(size=(K, m, 3)),
        reference_in=keep,
        y=rng.integers(0, 3, m),
        target_z=rng.normal(size=(2, n_z, 3)),
        reference_z=rng.normal(size=(K, n_z, 3)),
        z_in=np.zeros((K, n_z), dtype=bool),
        y_z=rng.integers(0, 3, n_z),
    )


@pytest.mark.parametrize(
    ("name", "variant", "variance"),
    [
        ("lira-online", "online", "per-example"),
        ("lira-offline", "offline", "per-example"),
        ("lira-online-global", "online", "global"),
        ("lira-offline-global", "offline", "global"),
        ("lira-online-shrunk", "online", "shrunk"),
        ("lira-offline-shrunk", "offline", "shrunk"),
        ("lira-online-shrunk-t", "online", "shrunk-t"),
        ("lira-offline-shrunk-t", "offline", "shrunk-t"),
    ],
)
def test_lira_variants_match_lira_scores_on_fixed_logits(name, variant, variance) -> None:
    refs = _fixed_reference_logits()
    expected = lira_scores(
        logit_confidence(refs.target_x, refs.y),
        logit_confidence(refs.reference_x, refs.y),
        refs.reference_in,
        variant=variant,
        variance=variance,
    )
    attack = get_attack(name, num_reference_models=8)
    np.testing.assert_array_equal(attack.score_from(refs), expected)
    # ... and the configurable LiraAttack with the same options gives the same numbers.
    direct = LiraAttack(num_reference_models=8, variant=variant, variance=variance)
    np.testing.assert_array_equal(direct.score_from(refs), expected)


def test_default_lira_is_a_named_variant() -> None:
    refs = _fixed_reference_logits()
    # "auto": global variance below 64 reference models, per-example from 64 on.
    np.testing.assert_array_equal(
        LiraAttack(num_reference_models=8).score_from(refs),
        get_attack("lira-online-global", num_reference_models=8).score_from(refs),
    )
    np.testing.assert_array_equal(
        LiraAttack(num_reference_models=64).score_from(refs),
        get_attack("lira-online", num_reference_models=64).score_from(refs),
    )


def test_shared_reference_set_gives_each_attack_its_own_scores(target: AuditedTarget) -> None:
    names = [
        "lira",
        "lira-online",
        "lira-offline",
        "lira-online-global",
        "lira-offline-global",
        "rmia",
        "rmia-offline",
    ]
    attacks = [get_attack(n, num_reference_models=4) for n in names]
    context = target.context()
    shared = score_with_shared_references(
        context, target.audited_X, target.audited_y, attacks, seed=9
    )
    for attack, scores in zip(attacks, shared, strict=True):
        alone = attack.score(context, target.audited_X, target.audited_y, seed=9)
        np.testing.assert_array_equal(scores, alone)
    with pytest.raises(DpauditError, match="must agree on num_reference_models"):
        score_with_shared_references(
            context,
            target.audited_X,
            target.audited_y,
            [get_attack("lira", num_reference_models=4), get_attack("rmia")],
            seed=9,
        )


# ------------------------------------------------------------- the membership kind's attacks

KIND_AUDIT = """
[audit]
name = "variants"
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
[training.dp]
target_epsilon = 2.0
[target]
variants = ["plain", "dp"]
[membership]
attacks = {attacks}
reference_models = 4
rmia_population_samples = 100
{extra}
"""
ALL_VARIANTS = [
    "loss",
    "lira",
    "rmia",
    "rmia-offline",
    "lira-online",
    "lira-offline",
    "lira-online-global",
    "lira-offline-global",
    "lira-online-shrunk",
]


def _kind_audit(tmp_path, name: str, attacks: list[str], extra: str = ""):
    from dpaudit.audit import run_audit

    path = tmp_path / f"{name}.toml"
    path.write_text(KIND_AUDIT.format(attacks=json_list(attacks), extra=extra))
    return run_audit(path, output_dir=tmp_path / name)


def json_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def test_membership_kind_scores_every_variant_and_headline_picks_the_verdict(tmp_path) -> None:
    base = _kind_audit(tmp_path, "base", ["loss", "lira"])
    every = _kind_audit(tmp_path, "every", ALL_VARIANTS, 'headline = "rmia"')
    tests = {t.id: t for t in every.tests}
    assert set(tests) == {f"{v}-{a}" for v in ("plain", "dp") for a in ALL_VARIANTS}
    # Adding attacks after "lira" leaves the earlier attacks' scores (and bounds) alone.
    for t in base.tests:
        assert tests[t.id].to_dict()["metrics"] == t.to_dict()["metrics"]
    # Only the headline's bounds are comparisons; the others keep theirs in their test.
    assert {c.test for c in every.comparisons} == {
        "rmia on the plain target",
        "rmia on the dp target",
    }
    in_verdict = [c for c in every.comparisons if c.in_verdict]
    assert [c.test for c in in_verdict] == ["rmia on the dp target"]
    other = tests["dp-lira-offline"].to_dict()
    assert other["attack"]["headline"] is False
    assert other["bounds"]
    assert not any(b["in_verdict"] for b in other["bounds"])
    assert tests["dp-rmia"].to_dict()["attack"]["headline"] is True
    info = every.provenance["units"]["membership"]
    assert info["computed"] == 2


def test_membership_headline_must_be_listed(tmp_path) -> None:
    from dpaudit.config import load_config

    path = tmp_path / "bad.toml"
    path.write_text(
        KIND_AUDIT.format(attacks=json_list(["loss", "lira"]), extra='headline = "rmia"')
    )
    with pytest.raises(DpauditError, match="headline = 'rmia' is not one of the attacks"):
        load_config(path)


def test_rmia_options_enter_the_unit_key_only_when_rmia_runs() -> None:
    from dpaudit.membership.schema import OwnSpec
    from dpaudit.sections import DataSection, ModelSection, TrainingSection

    common = {
        "data": DataSection(dataset="statsmodels:fair", audited_size=200),
        "model": ModelSection(kind="logistic"),
        "training": TrainingSection(epochs=2, batch_size=32),
        "seed": 0,
        "base_dir": ".",
        "reference_models": 4,
        "shadow_models": 2,
    }
    plain = OwnSpec(attacks=("loss", "shadow", "lira"), **common).key_data()
    assert not any(k.startswith("rmia_") for k in plain)
    with_rmia = OwnSpec(attacks=("loss", "rmia"), rmia_gamma=2.0, **common).key_data()
    assert with_rmia["rmia_gamma"] == 2.0


# ------------------------------------------------------------------ the white-box attack


def test_whitebox_gradient_norms_match_torch_per_example_gradients() -> None:
    """Independent reference: each row's gradient by torch.autograd on an nn.Sequential
    copy of one stacked model, one row at a time."""
    from dpaudit.attacks.whitebox import gradient_norms

    spec = ModelSpec(kind="mlp", hidden=(5, 4), activation="tanh")
    stack = ModelStack.init(spec, num_models=2, num_features=3, num_classes=3, seed=7)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(6, 3)).astype(np.float32)
    y = rng.integers(0, 3, size=6)
    got = gradient_norms(stack, X, y)
    for k in range(2):
        net = torch.nn.Sequential(
            torch.nn.Linear(3, 5),
            torch.nn.Tanh(),
            torch.nn.Linear(5, 4),
            torch.nn.Tanh(),
            torch.nn.Linear(4, 3),
        ).double()
        linears = [m for m in net if isinstance(m, torch.nn.Linear)]
        with torch.no_grad():
            for lin, w, b in zip(linears, stack.weights, stack.biases, strict=True):
                lin.weight.copy_(w[k])
                lin.bias.copy_(b[k])
        for i in range(6):
            net.zero_grad()
            out = net(torch.as_tensor(X[i : i + 1], dtype=torch.float64))
            loss = torch.nn.functional.cross_entropy(out, torch.as_tensor(y[i : i + 1]))
            loss.backward()
            assert got["loss"][k, i] == pytest.approx(loss.item(), rel=1e-5)
            for layer, lin in enumerate(linears):
                assert got["weight"][layer, k, i] == pytest.approx(
                    lin.weight.grad.norm().item(), rel=1e-4
                )
                assert got["bias"][layer, k, i] == pytest.approx(
                    lin.bias.grad.norm().item(), rel=1e-4
                )
            total = torch.cat([p.grad.reshape(-1) for p in net.parameters()]).norm().item()
            assert got["total"][k, i] == pytest.approx(total, rel=1e-4)


def test_whitebox_refuses_a_target_without_parameters(target: AuditedTarget) -> None:
    class Opaque:
        num_models, num_features = 1, target.dataset.X.shape[1]

    context = dataclasses.replace(target.context(), target=Opaque())
    with pytest.raises(DataError, match="The whitebox attack reads the target's parameters"):
        get_attack("whitebox", num_shadow_models=1).score(
            context, target.audited_X, target.audited_y, seed=0
        )


def test_whitebox_separates_members_of_an_overfit_target() -> None:
    """Power control: a plain MLP trained long on few rows leaks; the attack's AUC on its
    160 audited rows must exceed 0.5 by more than the AUC's sampling error (its standard
    deviation under the null is sqrt((n0 + n1 + 1)/(12 n0 n1)) ≈ 0.046 here: 4 sigma)."""
    ds = load_dataset("sklearn:digits")
    overfit = prepare_target(
        ds,
        model=ModelSpec(kind="mlp", hidden=(64,)),
        training=TrainingSpec(epochs=60, batch_size=16, learning_rate=0.1),
        audited_size=160,
        population_size=640,
        seed=2,
    )
    scores = get_attack("whitebox", num_shadow_models=2).score(
        overfit.context(), overfit.audited_X, overfit.audited_y, seed=0
    )[0]
    members = overfit.membership
    n1, n0 = int(members.sum()), int((~members).sum())
    auc = stats.mannwhitneyu(scores[members], scores[~members]).statistic / (n0 * n1)
    assert auc > 0.5 + 4 * np.sqrt((n0 + n1 + 1) / (12 * n0 * n1))
