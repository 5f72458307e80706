"""Bring-your-own targets: every format audited from its file matches the in-memory model.

A model is trained by dpaudit on the members of a small table, saved in each format, and
audited from the file; its loss-attack scores must equal the in-memory model's to 1e-6.
Every format stores the float32 weights exactly, so the only difference is the order of
float32 operations in another runtime (ONNX Runtime, torch.export): a few float32 ulps
(~6e-8 relative) on logits of order 10, i.e. a few 1e-7 on the float64 loss computed
from them.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from dpaudit.audit import run_audit, run_context
from dpaudit.config import load_config
from dpaudit.errors import ConfigError, DataError, DpauditError
from dpaudit.membership.brought import LoadedTarget, load_byo_data, load_target
from dpaudit.membership.brought_units import byo_unit
from dpaudit.membership.kind import byo_spec, byo_units
from dpaudit.membership.verdict import RECIPE_NOTE
from dpaudit.models import ModelSpec
from dpaudit.sections import ByoSpec
from dpaudit.training import TrainingSpec, train_many

N_AUDITED, N_POPULATION, D, C = 300, 200, 6, 3


def _spec(config) -> ByoSpec:
    """What a brought target's units receive (the membership kind builds it)."""
    return byo_spec(config.section("membership"), run_context(config))


AUDIT = """
[audit]
name = "byo"
kinds = ["membership"]
seed = 3
[data]
dataset = "csv:data.csv"
label = "y"
[model]
kind = "mlp"
hidden = [16]
[training]
epochs = 20
batch_size = 32
learning_rate = 0.1
[target]
{target}
[membership]
attacks = {attacks}
reference_models = 4
shadow_models = 2
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A table with a membership column, a dpaudit-trained MLP, and its in-memory scores."""
    root = tmp_path_factory.mktemp("byo")
    rng = np.random.default_rng(0)
    n = N_AUDITED + N_POPULATION
    centers = rng.normal(0, 1.5, (C, D))
    y = rng.integers(0, C, n)
    X = (centers[y] + rng.normal(0, 1.0, (n, D))).astype(np.float32)
    member = rng.random(N_AUDITED) < 0.5  # fair coins
    import pandas as pd

    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(D)])
    frame["y"] = y
    frame["member"] = pd.array([*member.astype(int), *[None] * N_POPULATION], dtype="Int64")
    frame.to_csv(root / "data.csv", index=False)
    # Train on the members with the dpaudit engine (overfits: few rows, 200 epochs).
    spec = ModelSpec(kind="mlp", hidden=(16,))
    result = train_many(
        X[:N_AUDITED],
        y[:N_AUDITED],
        member[None, :],
        model=spec,
        training=TrainingSpec(epochs=200, batch_size=32, learning_rate=0.2),
        seed=1,
        num_classes=C,
    )
    stack = result.models
    module = stack.to_module(0).eval()
    with torch.no_grad():
        logits = stack.logits(X[:N_AUDITED])[0].double().numpy()
    loss = -(logits[np.arange(N_AUDITED), y[:N_AUDITED]]) + np.log(np.exp(logits).sum(1))

    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, root / "m.safetensors")
    example = torch.from_numpy(X[:5])
    batch = torch.export.Dim("batch")
    torch.export.save(
        torch.export.export(module, (example,), dynamic_shapes=({0: batch},)), root / "m.pt2"
    )
    torch.jit.save(torch.jit.script(module), str(root / "m.torchscript"))
    torch.onnx.export(
        module, (example,), str(root / "m.onnx"), dynamic_shapes=({0: batch},), verbose=False
    )
    with (root / "m.pkl").open("wb") as f:
        pickle.dump(module, f)
    (root / "factory_plugin.py").write_text(
        "import torch\n"
        "def build():\n"
        f"    return torch.nn.Sequential(torch.nn.Linear({D}, 16), torch.nn.ReLU(), "
        f"torch.nn.Linear(16, {C}))\n"
        "def trained():\n"
        "    m = build()\n"
        "    from safetensors.torch import load_file\n"
        "    from pathlib import Path\n"
        "    m.load_state_dict(load_file(Path(__file__).parent / 'm.safetensors'))\n"
        "    return m\n"
    )
    return {
        "root": root,
        "X": X,
        "y": y,
        "member": member,
        "stack": stack,
        "logits": logits,
        "loss": loss,
    }


def _config(root: Path, target: str, *, attacks: str = '["loss"]', name: str = "audit.toml"):
    f = root / name
    f.write_text(AUDIT.format(target=target, attacks=attacks))
    return load_config(f)


@pytest.mark.parametrize(
    "target",
    [
        'path = "m.safetensors"',
        'path = "m.pt2"',
        'path = "m.torchscript"',
        'path = "m.onnx"',
        'path = "m.pkl"\nallow_pickle = true',
        'factory = "factory_plugin:trained"',
        'path = "m.safetensors"\nfactory = "factory_plugin:build"',
    ],
)
def test_each_format_scores_like_the_in_memory_model(world, target: str) -> None:
    config = _config(world["root"], f'{target}\nmembership = "member"')
    (unit,) = byo_units(_spec(config))
    out = byo_unit(_spec(config), unit)
    np.testing.assert_array_equal(out["membership"], world["member"])
    # The loss attack's score is −loss; file and memory compute the same float32 logits
    # up to the order of operations (ONNX Runtime's kernels): a few float32 ulps.
    np.testing.assert_allclose(out["scores"], -world["loss"], rtol=0, atol=1e-6)


def test_an_attack_named_with_hyphens_is_scored_by_its_own_unit(world) -> None:
    """Unit names are ``byo-<digest>-<attack>``: "lira-online" is read back whole, and its
    unit seeds it by its position in the list (as an own target's attack is seeded), so a
    different attack before it changes none of its scores."""
    target = 'path = "m.safetensors"\nmembership = "member"'
    scores = {}
    for first in ("loss", "shadow"):
        attacks = f'["{first}", "lira-online"]'
        config = _config(world["root"], target, attacks=attacks, name="hyphen.toml")
        units = byo_units(_spec(config))
        assert [u.split("-", 2)[2] for u in units] == [first, "lira-online"]
        out = byo_unit(_spec(config), units[1])
        assert json.loads(str(out["info"]))["attack"] == "lira-online"
        scores[first] = out["scores"]
    np.testing.assert_array_equal(scores["loss"], scores["shadow"])


def test_safetensors_file_into_the_model_section_architecture(world) -> None:
    config = _config(world["root"], 'path = "m.safetensors"\nmembership = "member"')
    data = load_byo_data(_spec(config))
    target, warnings = load_target(_spec(config), num_features=D, num_classes=C)
    assert warnings == []
    assert data.audited.size == N_AUDITED
    assert data.population.size == N_POPULATION
    assert data.dataset.num_features == D  # the membership column is not a feature
    got = target.logits(world["X"][:N_AUDITED])[0].numpy()
    np.testing.assert_allclose(got, world["logits"], rtol=0, atol=1e-6)


def test_skops_model_matches_in_memory_estimator(world) -> None:
    from sklearn.linear_model import LogisticRegression
    from skops.io import dump

    X, y, member = world["X"], world["y"], world["member"]
    est = LogisticRegression(max_iter=500).fit(X[:N_AUDITED][member], y[:N_AUDITED][member])
    dump(est, world["root"] / "lr.skops")
    config = _config(world["root"], 'path = "lr.skops"\nmembership = "member"')
    out = byo_unit(_spec(config), byo_units(_spec(config))[0])
    p = est.predict_proba(X[:N_AUDITED].astype(np.float64))
    expected = np.log(p[np.arange(N_AUDITED), y[:N_AUDITED]])  # −loss = log p_y
    np.testing.assert_allclose(out["scores"], expected, rtol=0, atol=1e-12)


def test_skops_untrusted_type_is_refused_with_its_name(world) -> None:
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer
    from skops.io import dump

    root = world["root"]
    (root / "skops_plugin.py").write_text("def shift(X):\n    return X + 1.0\n")
    import sys

    sys.path.insert(0, str(root))
    try:
        import skops_plugin
        from sklearn.linear_model import LogisticRegression

        pipe = make_pipeline(FunctionTransformer(skops_plugin.shift), LogisticRegression())
        pipe.fit(world["X"], world["y"])
        dump(pipe, root / "pipe.skops")
        config = _config(root, 'path = "pipe.skops"\nmembership = "member"')
        with pytest.raises(DpauditError, match=r"skops_plugin\.shift.*trusted_types"):
            load_target(_spec(config), num_features=D, num_classes=C)
        trusted = _config(
            root,
            'path = "pipe.skops"\nmembership = "member"\ntrusted_types = ["skops_plugin.shift"]',
        )
        target, _ = load_target(_spec(trusted), num_features=D, num_classes=C)
        np.testing.assert_allclose(
            target.probabilities(world["X"][:7])[0].numpy(),
            pipe.predict_proba(world["X"][:7].astype(np.float64)),
            rtol=0,
            atol=1e-12,
        )
    finally:
        sys.path.remove(str(root))


def test_pickle_is_refused_by_default_saying_how_to_allow_it(world) -> None:
    with pytest.raises(ConfigError, match=r"pickle file.*allow_pickle = true"):
        _config(world["root"], 'path = "m.pkl"\nmembership = "member"')


def test_pickle_allowed_is_reported(world) -> None:
    config = _config(world["root"], 'path = "m.pkl"\nmembership = "member"\nallow_pickle = true')
    _, warnings = load_target(_spec(config), num_features=D, num_classes=C)
    assert len(warnings) == 1
    assert "allow_pickle = true" in warnings[0]
    result = run_audit(config, output_dir=world["root"] / "run-pickle", write=False)
    assert any("unpickled" in w for w in result.warnings)


def _scores_file(world, name: str, columns: str) -> Path:
    import pandas as pd

    y, member, logits = world["y"][:N_AUDITED], world["member"], world["logits"]
    frame = pd.DataFrame({"id": np.arange(N_AUDITED), "label": y, "member": member})
    if columns == "logits":
        for k in range(C):
            frame[f"logit_{k}"] = logits[:, k]
    elif columns == "probabilities":
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        for k in range(C):
            frame[f"prob_{k}"] = p[:, k]
    else:
        frame["loss"] = world["loss"]
    path = world["root"] / name
    if name.endswith(".parquet"):
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return path


def _model_audit(world):
    if "model_audit" not in world:
        world["model_audit"] = run_audit(
            _config(world["root"], 'path = "m.safetensors"\nmembership = "member"'),
            output_dir=world["root"] / "run-model",
            write=False,
        )
    return world["model_audit"]


@pytest.mark.parametrize(
    ("name", "columns"),
    [("s.csv", "logits"), ("s.parquet", "probabilities"), ("l.csv", "loss")],
)
def test_scores_file_gives_the_models_metrics(world, name: str, columns: str) -> None:
    _scores_file(world, name, columns)
    from_model = _model_audit(world)
    from_scores = run_audit(
        _config(world["root"], f'scores = "{name}"', name=f"{name}.toml"),
        output_dir=world["root"] / f"run-{name}",
        write=False,
    )
    got, want = from_scores.tests[0].metrics, from_model.tests[0].metrics
    # The ROC depends only on the order of the scores; float64 losses recomputed from
    # logits / probabilities keep that order unless two rows tie within ~1e-15.
    assert got["auc"] == pytest.approx(want["auc"], abs=1e-12)
    # Every rate and interval is a function of counts: identical. Thresholds are score
    # values: equal to float64 rounding of the loss (computed two ways).
    assert _without_thresholds(got) == _without_thresholds(want)
    assert _thresholds(got) == pytest.approx(_thresholds(want), abs=1e-9)
    assert [c.lower.value for c in from_scores.comparisons] == pytest.approx(
        [c.lower.value for c in from_model.comparisons], abs=1e-9
    )


def _without_thresholds(metrics: dict) -> str:
    rows = [{k: v for k, v in r.items() if k != "threshold"} for r in metrics["tpr_at_fpr"]]
    return json.dumps({**metrics, "tpr_at_fpr": rows}, sort_keys=True)


def _thresholds(metrics: dict) -> list[float]:
    return [r["threshold"] for r in metrics["tpr_at_fpr"]]


def test_report_states_coins_and_recipe(world) -> None:
    result = run_audit(
        _config(
            world["root"],
            'path = "m.safetensors"\nmembership = "member"\nmembership_by_coin = true',
            attacks='["loss", "lira"]',
        ),
        output_dir=world["root"] / "run-lira",
    )
    assert [t.details["attack"]["name"] for t in result.tests] == ["loss", "lira"]
    lira = result.tests[1].details
    assert RECIPE_NOTE in lira["attack"]["notes"]
    assert RECIPE_NOTE in result.warnings
    assert lira["target"]["membership_by_coin"] is True
    assert lira["target"]["members"] == int(world["member"].sum())
    one_run = [c for c in result.comparisons if c.lower.method == "one-run-binomial"]
    assert {c.lower.validity for c in one_run} == {"rigorous-one-run"}
    assert (world["root"] / "run-lira" / "results.json").is_file()
    # Without the coins statement the same bound is only heuristic.
    plain = run_audit(
        _config(world["root"], 'path = "m.safetensors"\nmembership = "member"'),
        output_dir=world["root"] / "run-nocoin",
        write=False,
    )
    one_run = [c for c in plain.comparisons if c.lower.method == "one-run-binomial"]
    assert {c.lower.validity for c in one_run} == {"heuristic"}
    assert any("not stated to be decided by independent fair coins" in w for w in plain.warnings)


def test_results_json_validates(world) -> None:
    from dpaudit.schemas import validate_results

    path = world["root"] / "run-lira" / "results.json"
    if not path.is_file():
        run_audit(
            _config(world["root"], 'path = "m.safetensors"\nmembership = "member"'),
            output_dir=world["root"] / "run-lira",
        )
    validate_results(json.loads(path.read_text()))


def test_index_file_membership(world) -> None:
    import pandas as pd

    root = world["root"]
    rows = np.arange(N_AUDITED)
    pd.DataFrame({"row": rows, "member": world["member"].astype(int)}).to_csv(
        root / "index.csv", index=False
    )
    # The data table without its membership column, and the index file beside it.
    frame = pd.read_csv(root / "data.csv").drop(columns="member")
    frame.to_csv(root / "data_plain.csv", index=False)
    text = AUDIT.format(
        target='path = "m.safetensors"\nmembership = "index.csv"', attacks='["loss"]'
    )
    (root / "idx.toml").write_text(text.replace("csv:data.csv", "csv:data_plain.csv"))
    config = load_config(root / "idx.toml")
    data = load_byo_data(_spec(config))
    np.testing.assert_array_equal(data.audited, rows)
    np.testing.assert_array_equal(data.membership, world["member"])
    out = byo_unit(_spec(config), byo_units(_spec(config))[0])
    np.testing.assert_allclose(out["scores"], -world["loss"], rtol=0, atol=1e-6)


def test_changed_model_file_changes_the_units(world) -> None:
    config = _config(world["root"], 'path = "m.safetensors"\nmembership = "member"')
    before = byo_units(_spec(config))
    assert byo_units(_spec(config)) == before  # deterministic
    other = _config(world["root"], 'path = "m.onnx"\nmembership = "member"')
    assert byo_units(_spec(other)) != before


def test_single_output_and_probability_targets() -> None:
    z = np.array([-2.0, 0.0, 3.0])
    t = LoadedTarget(lambda x: z[: x.shape[0]], 1, 2, "logits")
    logits = t.logits(np.zeros((3, 1)))[0].numpy()
    # A single logit z is the two-class logit vector [0, z]: P(class 1) = sigmoid(z).
    np.testing.assert_allclose(
        t.probabilities(np.zeros((3, 1)))[0, :, 1].numpy(), 1 / (1 + np.exp(-z)), rtol=1e-12
    )
    np.testing.assert_array_equal(logits[:, 0], 0.0)
    p = np.array([[0.2, 0.8], [1.0, 0.0]])
    tp = LoadedTarget(lambda x: p, 1, 2, "probabilities")
    # −log p_y, with p = 0 clipped at the smallest positive float64 (finite loss).
    losses = tp.losses(np.zeros((2, 1)), np.array([1, 1]))[0].numpy()
    np.testing.assert_allclose(losses[0], -np.log(0.8), rtol=1e-12)
    assert np.isfinite(losses[1])
    assert losses[1] == pytest.approx(-np.log(np.finfo(float).tiny))


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ('path = "m.bin"\nmembership = "member"', r"cannot tell the format of 'm\.bin'"),
        ('path = "m.onnx"', r"needs 'membership'"),
        ('path = "m.onnx"\nmembership = "member"\nvariants = ["plain"]', r"cannot be combined"),
        ('scores = "s.csv"\npath = "m.onnx"', r"either 'scores' or a model"),
        ('path = "m.onnx"\nmembership = "member"\nfactory = "a.b:c"', r"safetensors weights"),
        ('factory = "not a spec"\nmembership = "member"', r"factory"),
    ],
)
def test_bad_target_tables(tmp_path: Path, target: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _config(tmp_path, target)


def test_missing_membership_column_names_the_columns(world) -> None:
    config = _config(world["root"], 'path = "m.onnx"\nmembership = "trained"')
    with pytest.raises(DataError, match=r"'trained' is not a column.*x0, x1"):
        load_byo_data(_spec(config))


def test_model_that_does_not_fit_the_data(world) -> None:
    root = world["root"]
    text = AUDIT.format(target='path = "m.safetensors"\nmembership = "member"', attacks='["loss"]')
    (root / "wide.toml").write_text(text.replace("hidden = [16]", "hidden = [8]"))
    config = load_config(root / "wide.toml")
    with pytest.raises(DataError, match=r"hidden widths \(16,\).*hidden=\[8\]"):
        load_target(_spec(config), num_features=D, num_classes=C)


def test_example_byo_sklearn_audit_loads_and_scores() -> None:
    root = Path(__file__).resolve().parents[1]
    config = load_config(root / "audits" / "byo-sklearn.toml")
    data = load_byo_data(_spec(config))
    assert data.audited.size == 1000
    assert data.population.size == data.dataset.num_rows - 1000
    units = byo_units(_spec(config))
    assert [u.rsplit("-", 1)[1] for u in units] == ["loss", "shadow", "lira"]
    out = byo_unit(_spec(config), units[0])  # the loss attack: no reference models to train
    info = json.loads(str(out["info"]))
    assert info["target"]["format"] == "skops"
    assert info["accuracy"]["members"] == 1.0  # the script's model fits its members
    assert np.all(out["scores"] <= 0.0)  # −loss
