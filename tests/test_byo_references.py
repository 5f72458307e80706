"""Reference models of a brought target trained like it (``[target] references``).

With ``references = "clone"`` a scikit-learn target's shadow / reference models are
``sklearn.base.clone`` of the user's estimator, each fitted on its reference split; with
``"pkg.module:function"`` they are what the user's training function returns. These tests
check, on a tiny problem (300 rows, 5 features, 3 classes, logistic regression):

- a reference model is a FRESH clone: the same ``get_params``, not the fitted target (a
  ``warm_start`` estimator would start from the target's weights if it were refitted, so
  equality with a fit from scratch shows it was not);
- LiRA's scores with cloned references equal a hand computation from the reference splits
  (a fresh ``LogisticRegression(**params)`` per split, the logit-scaled confidence and the
  online LiRA log-likelihood ratio with one pooled variance per hypothesis, Carlini et al.
  2022, arXiv 2112.03570v2, §IV);
- the option is validated with exact messages, changes the units' key, and results.json /
  the report say which references were used.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from dpaudit.audit import run_audit, run_context
from dpaudit.config import load_config
from dpaudit.errors import ConfigError
from dpaudit.membership.brought import load_byo_data, load_target, preflight
from dpaudit.membership.brought_units import CLONE_REFERENCES, byo_unit, reference_trainer
from dpaudit.membership.kind import byo_key_data, byo_spec, byo_units
from dpaudit.membership.verdict import CLONE_NOTE, RECIPE_NOTE

N_AUDITED, N_POPULATION, D, C = 200, 100, 5, 3

AUDIT = """
[audit]
name = "byo-ref"
kinds = ["membership"]
seed = 5
[data]
dataset = "csv:data.csv"
label = "y"
[target]
{target}
membership = "member"
membership_by_coin = true
[membership]
attacks = {attacks}
reference_models = 4
shadow_models = 2
"""

SK_PLUGIN = """
import numpy as np
import pandas as pd
from pathlib import Path
from sklearn.linear_model import LogisticRegression, SGDClassifier

def _members():
    frame = pd.read_csv(Path(__file__).parent / "data.csv")
    frame = frame[frame["member"] == 1]
    return frame[[f"x{i}" for i in range(5)]].to_numpy(np.float64), frame["y"].to_numpy()

def trained():
    # warm_start: a refit of this object would start from its fitted weights.
    return LogisticRegression(C=10.0, warm_start=True, max_iter=500).fit(*_members())

def unseeded():
    # random_state=None: scikit-learn draws from numpy's global generator.
    return SGDClassifier(loss="log_loss", max_iter=20, tol=None).fit(*_members())
"""

TORCH_PLUGIN = """
import torch

def fit(X, y, *, seed):
    # Plain gradient descent by hand (torch.optim's first import costs seconds).
    torch.manual_seed(seed)
    model = torch.nn.Linear(X.shape[1], 3)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for _ in range(5):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(Xt), yt).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
    return model
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("byo_ref")
    rng = np.random.default_rng(7)
    n = N_AUDITED + N_POPULATION
    centers = rng.normal(0, 1.0, (C, D))
    y = rng.integers(0, C, n)
    X = (centers[y] + rng.normal(0, 1.0, (n, D))).astype(np.float32)
    member = rng.random(N_AUDITED) < 0.5  # fair coins
    import pandas as pd

    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(D)])
    frame["y"] = y
    frame["member"] = pd.array([*member.astype(int), *[None] * N_POPULATION], dtype="Int64")
    frame.to_csv(root / "data.csv", index=False)
    (root / "byo_ref_sk.py").write_text(SK_PLUGIN)
    (root / "byo_ref_torch.py").write_text(TORCH_PLUGIN)
    yield root
    for name in ("byo_ref_sk", "byo_ref_torch"):
        sys.modules.pop(name, None)


def _spec(root: Path, target: str, attacks: str = '["lira"]', name: str = "a.toml"):
    f = root / name
    f.write_text(AUDIT.format(target=target, attacks=attacks))
    config = load_config(f)
    context = run_context(config)
    return byo_spec(config.section("membership"), context), context


def _loaded(spec):
    data = load_byo_data(spec)
    ds = data.dataset
    target, _ = load_target(spec, num_features=ds.num_features, num_classes=ds.num_classes)
    return data, target


def test_a_cloned_reference_is_a_fresh_clone(world) -> None:
    from sklearn.linear_model import LogisticRegression

    spec, _ = _spec(world, 'factory = "byo_ref_sk:trained"\nreferences = "clone"')
    data, target = _loaded(spec)
    est = target.estimator
    coef = est.coef_.copy()
    X = data.dataset.X[data.audited]
    y = data.dataset.y[data.audited]
    mask = np.zeros((2, X.shape[0]), dtype=bool)
    mask[0, ::2] = True
    mask[1, 1::2] = True
    train = reference_trainer(spec, target)
    assert train is not None
    refs = train(X, y, mask, 123)
    assert refs.num_models == 2
    for k, model in enumerate(refs.models):
        clone = model.estimator
        assert clone is not est
        assert clone.get_params() == est.get_params()
        # From scratch on its split (not warm-started from the target's weights).
        fresh = LogisticRegression(**est.get_params()).fit(
            X[mask[k]].astype(np.float64), y[mask[k]]
        )
        np.testing.assert_array_equal(clone.coef_, fresh.coef_)
        assert not np.allclose(clone.coef_, coef)
    np.testing.assert_array_equal(est.coef_, coef)  # the target itself was not touched


def test_unseeded_estimator_clones_are_a_pure_function_of_the_seed(world) -> None:
    spec, _ = _spec(world, 'factory = "byo_ref_sk:unseeded"\nreferences = "clone"', name="u.toml")
    data, target = _loaded(spec)
    X, y = data.dataset.X[data.audited], data.dataset.y[data.audited]
    mask = np.ones((1, X.shape[0]), dtype=bool)
    train = reference_trainer(spec, target)
    assert train is not None
    np.random.seed(99)  # noqa: NPY002 -- the caller's global state must survive the fits
    a = train(X, y, mask, 1).logits(X).numpy()
    # The next global draw is the one a fresh seed-99 generator makes first.
    assert np.random.random() == np.random.RandomState(99).random()  # noqa: NPY002
    b = train(X, y, mask, 1).logits(X).numpy()
    c = train(X, y, mask, 2).logits(X).numpy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def _hand_lira(phi_target, phi_refs, inside):
    """Online LiRA, one pooled (unbiased) variance per hypothesis: log N(in) − log N(out)."""

    def fit(mask):
        n = mask.sum(axis=0)
        mean = np.array([phi_refs[mask[:, i], i].mean() for i in range(mask.shape[1])])
        ss = sum(((phi_refs[mask[:, i], i] - mean[i]) ** 2).sum() for i in range(mask.shape[1]))
        return mean, np.sqrt(ss / (n - 1).sum())

    def logpdf(x, mu, sd):
        return -0.5 * ((x - mu) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)

    mu_in, sd_in = fit(inside)
    mu_out, sd_out = fit(~inside)
    return logpdf(phi_target, mu_in, sd_in) - logpdf(phi_target, mu_out, sd_out)


def test_lira_scores_with_clones_equal_a_hand_computation(world, monkeypatch) -> None:
    from sklearn.linear_model import LogisticRegression

    import dpaudit.membership.brought_units as units

    spec, _ = _spec(world, 'factory = "byo_ref_sk:trained"\nreferences = "clone"')
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    real = units.reference_trainer

    def recording(config, target):
        train = real(config, target)

        def wrapped(X, y, membership, seed):
            seen.append((np.array(X), np.array(y), np.array(membership)))
            return train(X, y, membership, seed)

        return wrapped

    monkeypatch.setattr(units, "reference_trainer", recording)
    (unit,) = byo_units(spec)
    out = byo_unit(spec, unit)
    info = json.loads(str(out["info"]))
    assert info["references"] == CLONE_REFERENCES
    ((X_pool, y_pool, inside),) = seen
    data, target = _loaded(spec)
    ds = data.dataset
    X, y = ds.X[data.audited], ds.y[data.audited]
    np.testing.assert_array_equal(X_pool, X)  # raw features, as the target saw them
    np.testing.assert_array_equal(y_pool, y)
    assert inside.shape == (4, N_AUDITED)
    np.testing.assert_array_equal(inside.sum(axis=0), 2)  # each row in half the models

    def phi(model):
        p = model.predict_proba(X.astype(np.float64))
        p_y = p[np.arange(y.size), y]
        return np.log(p_y) - np.log1p(-p_y)

    params = target.estimator.get_params()
    ref_phi = np.stack(
        [phi(LogisticRegression(**params).fit(X[k].astype(np.float64), y[k])) for k in inside]
    )
    want = _hand_lira(phi(target.estimator), ref_phi, inside)
    # φ from log-probabilities (dpaudit) vs from probabilities (here): float64 rounding of
    # p near its largest values, a few 1e-14 relative; 1e-9 leaves room and nothing else.
    np.testing.assert_allclose(out["scores"], want, rtol=1e-9, atol=1e-9)


def test_user_training_function_trains_the_references(world) -> None:
    spec, _ = _spec(
        world,
        'factory = "byo_ref_sk:trained"\nreferences = "byo_ref_torch:fit"',
        attacks='["lira"]',
        name="t.toml",
    )
    (unit,) = byo_units(spec)
    out = byo_unit(spec, unit)
    info = json.loads(str(out["info"]))
    assert info["references"] == "training function byo_ref_torch:fit"
    assert out["scores"].shape == (N_AUDITED,)
    assert np.all(np.isfinite(out["scores"]))


def test_the_option_changes_the_units_key(world) -> None:
    recipe, ctx = _spec(world, 'factory = "byo_ref_sk:trained"', name="r.toml")
    clone, ctx2 = _spec(
        world, 'factory = "byo_ref_sk:trained"\nreferences = "clone"', name="c.toml"
    )
    fn, ctx3 = _spec(world, 'factory = "byo_ref_sk:trained"\nreferences = "byo_ref_torch:fit"')
    keys = [byo_key_data(recipe, ctx), byo_key_data(clone, ctx2), byo_key_data(fn, ctx3)]
    assert "references" not in keys[0]["target"]  # the default keeps earlier units' key
    assert keys[1]["target"]["references"] == "clone"
    assert len(keys[2]["references_file"]) > 0  # the function's code is part of the key
    assert keys[0] != keys[1] != keys[2] != keys[0]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            'factory = "byo_ref_sk:trained"\nreferences = "copy"',
            "[target] references must be 'recipe', 'clone' or a training function "
            "'pkg.module:function'; got 'copy'",
        ),
        (
            'scores = "s.csv"\nreferences = "clone"',
            "[target] references = 'clone' trains models like yours, but 'scores' holds only "
            "its outputs: give the model ('path' / 'factory') or remove 'references'",
        ),
    ],
)
def test_bad_references_values(world, target: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        _spec(world, target, name="bad.toml")
    assert message in str(err.value)


def test_references_on_an_own_target_is_refused(tmp_path: Path) -> None:
    (tmp_path / "own.toml").write_text(
        AUDIT.format(target='variants = ["plain"]\nreferences = "clone"', attacks='["loss"]')
        .replace('membership = "member"\n', "")
        .replace("membership_by_coin = true\n", "")
    )
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "own.toml")
    assert (
        "[target] references = 'clone' is for a model of your own ('path' / 'factory'); "
        "dpaudit trains its own targets and their reference models with [model]/[training]"
    ) in str(err.value)


def test_clone_of_a_torch_target_names_the_alternative(world) -> None:
    (world / "byo_ref_net.py").write_text(
        "import torch\ndef net():\n    return torch.nn.Linear(5, 3)\n"
    )
    spec, _ = _spec(world, 'factory = "byo_ref_net:net"\nreferences = "clone"', name="n.toml")
    with pytest.raises(ConfigError) as err:
        preflight(spec)  # before any work starts (dpaudit validate runs it too)
    assert str(err.value) == (
        "[target] references = 'clone' clones a scikit-learn estimator (sklearn.base.clone); "
        "the target is Linear. For a torch model give references = 'pkg.module:function', a "
        "function (X, y, *, seed) that builds and trains a model as yours was."
    )
    sys.modules.pop("byo_ref_net", None)


def test_results_and_report_say_which_references(world) -> None:
    f = world / "run.toml"
    f.write_text(
        AUDIT.format(
            target='factory = "byo_ref_sk:trained"\nreferences = "clone"',
            attacks='["loss", "lira"]',
        )
    )
    result = run_audit(load_config(f), output_dir=world / "run")
    loss, lira = result.tests
    assert "references" not in loss.details  # the loss attack trains no reference model
    assert lira.details["references"] == CLONE_REFERENCES
    assert CLONE_NOTE in lira.details["attack"]["notes"]
    assert RECIPE_NOTE not in result.warnings
    html = (world / "run" / "report.html").read_text()
    assert "Reference models: clone of the target&#39;s estimator." in html
