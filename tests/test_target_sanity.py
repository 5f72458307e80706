"""A target queried otherwise than it was trained is named, and its checks fail closed.

The world: a binary problem whose four features have very different scales (means up
to 10,000, scales from 10 to 1,000). A scikit-learn logistic regression and a torch
linear model are trained on the STANDARDISED features of the members. Brought with the
raw columns, each answers every row with one class (its logits are dominated by the
raw means), so its accuracy on its own members is at most their majority-class rate:
the audit names the accuracy in a warning and in results.json, withholds the target's
tests, and a ``max_auc`` gate is not evaluated and fails closed (exit 1). The same model
with ``[target] preprocess`` (the fitted scaler saved with skops, or a function) is
queried as it was trained: its accuracy is recorded in the tests' details, equal to the
accuracy computed here from the in-memory model, and the gate passes (exit 0).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from dpaudit.audit import run_context
from dpaudit.cli import app
from dpaudit.config import load_config
from dpaudit.kinds.base import VerdictBudget
from dpaudit.membership.brought import load_byo_data, load_target
from dpaudit.membership.brought_units import reference_trainer
from dpaudit.membership.kind import KIND, byo_spec
from dpaudit.membership.sanity import accuracy_line, accuracy_problem
from dpaudit.membership.stored import store_record
from dpaudit.membership.verdict import membership_summary
from dpaudit.records import DPSGDRecord
from dpaudit.report import fmt_number
from dpaudit.results import WITHHELD
from dpaudit.results.gate import evaluate_gate
from dpaudit.schemas import validate_results
from dpaudit.sections import ACCURACY_SHORTFALL, GateSection

N, D = 400, 4
COLUMNS = [f"x{i}" for i in range(D)]
MEANS = np.array([500.0, -3000.0, 80.0, 10000.0])
SCALES = np.array([50.0, 200.0, 10.0, 1000.0])

AUDIT = """
[audit]
name = "sanity"
kinds = ["membership"]
seed = 4
[data]
dataset = "csv:data.csv"
label = "y"
[target]
{target}
membership = "member"
[membership]
attacks = ["loss"]
[gate]
fail_on_violation = false
max_auc = 0.99
{gate}
"""

PREP_PLUGIN = """
import numpy as np

MEAN = np.array({mean})
SCALE = np.array({scale})


def standardise(X):
    return (X - MEAN) / SCALE
"""

runner = CliRunner()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """data.csv (raw features, label, 0/1 membership), the two models trained on the
    standardised members, the scaler (skops) and a preprocess function next to them."""
    root = tmp_path_factory.mktemp("sanity")
    rng = np.random.default_rng(11)
    standard = rng.normal(size=(N, D))
    y = (standard @ np.array([1.5, -1.0, 0.8, 0.5]) + rng.normal(0, 0.8, N) > 0.4).astype(int)
    raw = np.round(standard * SCALES + MEANS, 3)
    member = rng.random(N) < 0.5
    frame = pd.DataFrame(raw, columns=COLUMNS)
    frame["y"] = y
    frame["member"] = member.astype(int)
    frame.to_csv(root / "data.csv", index=False)
    # The features exactly as dpaudit reads them (float64 text -> float32).
    X = pd.read_csv(root / "data.csv")[COLUMNS].to_numpy(np.float64).astype(np.float32)

    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    from skops.io import dump

    scaler = StandardScaler().fit(X[member].astype(np.float64))
    model = LogisticRegression().fit(scaler.transform(X[member].astype(np.float64)), y[member])
    dump(model, root / "model.skops")
    dump(scaler, root / "scaler.skops")
    (root / "sanity_prep.py").write_text(
        PREP_PLUGIN.format(mean=scaler.mean_.tolist(), scale=scaler.scale_.tolist())
    )

    torch.manual_seed(0)
    module = torch.nn.Linear(D, 2)
    Xt = torch.from_numpy(scaler.transform(X[member].astype(np.float64)).astype(np.float32))
    yt = torch.from_numpy(y[member])
    for _ in range(300):
        module.zero_grad()
        torch.nn.functional.cross_entropy(module(Xt), yt).backward()
        with torch.no_grad():
            for p in module.parameters():
                p -= 0.5 * p.grad
    torch.jit.save(torch.jit.script(module), str(root / "model.torchscript"))

    def sk_accuracy(rows: np.ndarray, *, scaled: bool) -> float:
        x = X[rows].astype(np.float64)
        return float((model.predict(scaler.transform(x) if scaled else x) == y[rows]).mean())

    def torch_accuracy(rows: np.ndarray, *, scaled: bool) -> float:
        x = X[rows].astype(np.float64)
        x = scaler.transform(x) if scaled else x
        with torch.no_grad():
            guess = module(torch.from_numpy(x.astype(np.float32))).argmax(-1).numpy()
        return float((guess == y[rows]).mean())

    majority = float(np.bincount(y[member]).max() / member.sum())
    yield {
        "root": root,
        "X": X,
        "y": y,
        "scaler": scaler,
        "member": member,
        "majority": majority,
        "accuracy": {"sklearn": sk_accuracy, "torch": torch_accuracy},
    }
    sys.modules.pop("sanity_prep", None)


def _run(world, name: str, target: str, *, gate: str = "", quiet: bool = False):
    root = world["root"]
    (root / f"{name}.toml").write_text(AUDIT.format(target=target, gate=gate))
    run_dir = root / f"run-{name}"
    args = ["run", str(root / f"{name}.toml"), "-o", str(run_dir)] + (["-q"] if quiet else [])
    result = runner.invoke(app, args)
    data = json.loads((run_dir / "results.json").read_text())
    validate_results(data)
    return result, data, " ".join(result.output.split())


MODELS = {"sklearn": 'path = "model.skops"', "torch": 'path = "model.torchscript"'}
PREPROCESS = {
    "sklearn": 'preprocess = "scaler.skops"',
    "torch": 'preprocess = "sanity_prep:standardise"',
}


@pytest.mark.parametrize("kind", ["sklearn", "torch"])
def test_raw_features_name_the_accuracy_and_fail_closed(world, kind: str) -> None:
    member = world["member"]
    accuracy = world["accuracy"][kind](member, scaled=False)
    majority = world["majority"]
    assert accuracy <= majority  # the premise: raw features make it a constant guess
    result, data, output = _run(world, f"raw-{kind}", MODELS[kind])
    assert result.exit_code == 1, result.output
    where = MODELS[kind].split('"')[1]
    line = (
        f"Your target ({where}) is not queried as it was trained: its accuracy on its own "
        f"members is {accuracy:.3f}, at or below their majority-class rate {majority:.3f} "
        "(always guessing the most common label does as well). Its membership tests are "
        "not evaluated: a [gate] policy that needs them (max_auc, max_tpr_at_fpr, "
        "max_advantage, max_epsilon_lower_bound) fails unless [gate] on_unmeasured = "
        "'warn'. Check that it receives the features it was trained on ([data] features, "
        "and [target] preprocess for a transformation such as standardisation)."
    )
    assert line in data["warnings"]
    assert f"warning: {line}" in output  # on the console, one line (wrapped by the terminal)
    assert data["tests"] == []
    assert data["bounds"] == []
    (check,) = data["checks"]
    assert (check["name"], check["status"], check["passed"]) == ("max_auc", "not-evaluated", False)
    assert "FAIL max_auc: not evaluated" in output


@pytest.mark.parametrize("kind", ["sklearn", "torch"])
def test_preprocess_queries_the_model_as_it_was_trained(world, kind: str) -> None:
    member = world["member"]
    result, data, _ = _run(world, f"prep-{kind}", f"{MODELS[kind]}\n{PREPROCESS[kind]}")
    assert result.exit_code == 0, result.output
    (test,) = data["tests"]
    accuracy = test["target"]["accuracy"]
    assert accuracy["members"] == pytest.approx(world["accuracy"][kind](member, scaled=True))
    assert accuracy["non_members"] == pytest.approx(world["accuracy"][kind](~member, scaled=True))
    assert accuracy["majority_class"] == pytest.approx(world["majority"])
    assert "held_out" not in accuracy  # every row is audited: nothing known held out
    assert accuracy["members"] > world["majority"] + 0.1
    assert test["target"]["preprocess"] == PREPROCESS[kind].split('"')[1]
    assert not any("not queried as it was trained" in w for w in data["warnings"])
    (check,) = data["checks"]
    assert (check["name"], check["status"], check["passed"]) == ("max_auc", "passed", True)
    assert check["value"] == test["metrics"]["auc"]


def test_on_unmeasured_warn_passes_with_the_warning(world) -> None:
    result, data, _ = _run(
        world, "raw-warn", MODELS["sklearn"], gate='on_unmeasured = "warn"', quiet=True
    )
    assert result.exit_code == 0, result.output
    assert any(w.startswith("Your target (model.skops) is not queried") for w in data["warnings"])
    assert data["checks"][0]["status"] == "not-evaluated"


def test_accuracy_far_below_the_reported_one_fails_closed(world) -> None:
    accuracy = world["accuracy"]["sklearn"](world["member"], scaled=True)
    target = f"{MODELS['sklearn']}\n{PREPROCESS['sklearn']}"
    # Stated within the tolerance: accepted.
    near = round(accuracy + ACCURACY_SHORTFALL / 2, 3)
    result, data, _ = _run(world, "near", f"{target}\ntraining_accuracy = {near}", quiet=True)
    assert result.exit_code == 0, result.output
    assert len(data["tests"]) == 1
    # Stated far above what the model does on its members: withheld, exit 1.
    far = min(1.0, round(accuracy + ACCURACY_SHORTFALL + 0.02, 3))
    assert far - accuracy > ACCURACY_SHORTFALL
    result, data, output = _run(world, "far", f"{target}\ntraining_accuracy = {far}")
    assert result.exit_code == 1, result.output
    clause = (
        f"its accuracy on its own members is {accuracy:.3f}, more than 0.1 below the "
        f"{far:.3f} its training reported ([target] training_accuracy)"
    )
    assert clause in output
    assert data["tests"] == []


def test_training_accuracy_changes_no_unit(world) -> None:
    """It is read when the units are summarised: the same units, re-evaluated."""
    root = world["root"]
    keys = []
    for stated in ("", "\ntraining_accuracy = 0.9"):
        (root / "key.toml").write_text(AUDIT.format(target=MODELS["sklearn"] + stated, gate=""))
        config = load_config(root / "key.toml")
        plan = KIND.plan(config.section("membership"), run_context(config))
        keys.append((plan.units, plan.key_data))
    assert keys[0] == keys[1]


def test_clones_are_fitted_and_queried_on_the_preprocessed_features(world) -> None:
    """references = "clone" trains each reference model as the target was: a clone of
    the estimator fitted on the transformed rows, and queried through the transform."""
    from sklearn.linear_model import LogisticRegression

    root = world["root"]
    target = f'{MODELS["sklearn"]}\n{PREPROCESS["sklearn"]}\nreferences = "clone"'
    (root / "clone.toml").write_text(AUDIT.format(target=target, gate=""))
    config = load_config(root / "clone.toml")
    spec = byo_spec(config.section("membership"), run_context(config))
    data = load_byo_data(spec)
    ds = data.dataset
    loaded, _ = load_target(spec, num_features=ds.num_features, num_classes=ds.num_classes)
    train = reference_trainer(spec, loaded)
    assert train is not None
    X, y, scaler = world["X"], world["y"], world["scaler"]
    split = np.random.default_rng(0).random((2, N)) < 0.5
    references = train(X, y, split, 7)
    for k in range(2):
        by_hand = LogisticRegression().fit(
            scaler.transform(X[split[k]].astype(np.float64)), y[split[k]]
        )
        np.testing.assert_allclose(references.models[k].estimator.coef_, by_hand.coef_, rtol=1e-6)
        want = by_hand.predict_log_proba(scaler.transform(X.astype(np.float64)))
        got = references.logits(X)[k].numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)


# ------------------------------------------------------------- the rule, exactly


def test_the_rule_at_its_edges() -> None:
    at = {"members": 0.625, "non_members": 0.5, "majority_class": 0.625}
    assert accuracy_problem(at, reported=None) == (
        "its accuracy on its own members is 0.625, at or below their majority-class rate "
        "0.625 (always guessing the most common label does as well)"
    )
    above = {**at, "members": 0.6251}
    assert accuracy_problem(above, reported=None) is None
    # 0.1 below the reported accuracy is tolerated; more is not.
    assert accuracy_problem({**above, "members": 0.75}, reported=0.85) is None
    assert accuracy_problem({**above, "members": 0.7499}, reported=0.85) == (
        "its accuracy on its own members is 0.750, more than 0.1 below the 0.850 its "
        "training reported ([target] training_accuracy)"
    )
    # Units stored before the majority-class rate was recorded: the reported one only.
    assert accuracy_problem({"members": 0.3, "non_members": 0.3}, reported=None) is None
    assert accuracy_line({**above, "held_out": 0.5}) == (
        "members 0.625, non-members 0.500, held-out 0.500 (majority class 0.625)"
    )


OWN = """
[audit]
name = "own"
kinds = ["membership"]
[data]
dataset = "sklearn:breast_cancer"
audited_size = 100
[target]
variants = ["plain", "dp"]
[training.dp]
noise_multiplier = 1.0
[membership]
attacks = ["loss"]
"""


def _own_unit(variant_index: int, variant: str, members_accuracy: float) -> dict:
    rng = np.random.default_rng(variant_index)
    membership = rng.random(100) < 0.5
    info = {
        "attacks": [{"attack": "loss", "options": {}, "seconds": 0.0}],
        "accuracy": {"members": members_accuracy, "non_members": 0.6, "majority_class": 0.62},
        "data_hash": "h",
    }
    part = {
        "membership": membership,
        "scores": rng.normal(size=(1, 100)),
        "info": np.array(json.dumps(info)),
    }
    if variant == "dp":
        part |= store_record(DPSGDRecord(1.0, 0.1, 100, 1.0, dataset_size=50))
    return part


TAIL = (
    "Its bounds stand (they measure the recipe as configured); its AUC, TPR and advantage "
    "feed no gate policy, so max_auc, max_tpr_at_fpr and max_advantage are not evaluated "
    "(they fail unless [gate] on_unmeasured = 'warn')."
)


@pytest.mark.parametrize("plain_accuracy", [0.62, 0.9])
def test_own_targets_are_named_and_withheld_from_metric_policies(tmp_path, plain_accuracy) -> None:
    """dpaudit trains its own targets on the features it queries them with, so their
    bounds measure the model as trained and stand (what comparisons() announced is what
    is spent); one at the majority-class rate is named (a DP one: its noise can explain
    it; a plain one: it learned nothing) and its tests are withheld from the gate's
    metric policies."""
    (tmp_path / "own.toml").write_text(OWN)
    config = load_config(tmp_path / "own.toml")
    context = run_context(config)
    section = config.section("membership")
    outputs = {
        "target-0-plain": _own_unit(0, "plain", plain_accuracy),
        "target-1-dp": _own_unit(1, "dp", 0.55),
    }
    announced = KIND.comparisons(section, context, outputs)
    level = VerdictBudget(context.confidence_level, announced).level
    summary = membership_summary(section, context, outputs, level=level)
    assert summary.spent == announced
    assert [t.id for t in summary.tests] == ["plain-loss", "dp-loss"]
    dp_reason = (
        "the dp target predicts no better than a constant: its accuracy on its own members "
        "is 0.550, at or below their majority-class rate 0.620 (always guessing the most "
        "common label does as well)"
    )
    plain_reason = (
        "the plain target predicts no better than a constant: its accuracy on its own "
        "members is 0.620, at or below their majority-class rate 0.620 (always guessing "
        "the most common label does as well)"
    )
    dp = "T" + dp_reason[1:] + "; its privacy noise can explain it. " + TAIL
    plain = (
        "T" + plain_reason[1:] + "; its recipe did not train it: train it longer or at "
        "another learning rate ([training]). " + TAIL
    )
    weak_plain = plain_accuracy <= 0.62
    assert list(summary.warnings) == ([plain, dp] if weak_plain else [dp])
    assert summary.tests[-1].details["target"] == {
        "variant": "dp",
        "accuracy": {"members": 0.55, "non_members": 0.6, "majority_class": 0.62},
    }
    assert summary.tests[-1].details[WITHHELD] == dp_reason
    assert summary.tests[0].details.get(WITHHELD) == (plain_reason if weak_plain else None)
    # The gate: every policy that reads tests is not evaluated and fails closed, even
    # when the other target's metrics are below the limit; the bounds' policy stands.
    gate = GateSection(max_auc=0.99, max_tpr_at_fpr=[(0.01, 0.99)], max_advantage=0.99)
    checks = evaluate_gate(gate, comparisons=summary.comparisons, tests=summary.tests)
    by_name = {c.name: c for c in checks}
    assert set(by_name) == {
        "fail_on_violation", "max_auc", "max_tpr_at_fpr[0.01]", "max_advantage"
    }  # fmt: skip
    assert by_name["fail_on_violation"].passed
    for name in ("max_auc", "max_tpr_at_fpr[0.01]", "max_advantage"):
        c = by_name[name]
        assert (c.status, c.passed, c.value) == ("not-evaluated", False, None)
        first = plain_reason if weak_plain else dp_reason
        more = " (and 1 more)" if weak_plain else ""
        assert c.message == f"not evaluated: {first}{more} (fails closed)"
    warned = evaluate_gate(
        GateSection(max_auc=0.99, on_unmeasured="warn"),
        comparisons=summary.comparisons,
        tests=summary.tests,
    )
    auc = next(c for c in warned if c.name == "max_auc")
    assert (auc.status, auc.passed) == ("not-evaluated", True)
    assert auc.message.endswith("(warning only (on_unmeasured = 'warn'))")


def test_the_report_shows_each_targets_accuracy(tmp_path: Path) -> None:
    # The quickstart trains a plain and a DP target; the report's utility table states
    # both accuracies, with the majority-class rate they must beat, one row per target.
    audits = Path(__file__).resolve().parent.parent / "audits"
    run_dir = tmp_path / "run"
    result = CliRunner().invoke(
        app, ["run", str(audits / "quickstart.toml"), "-q", "-o", str(run_dir)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads((run_dir / "results.json").read_text())
    html = (run_dir / "report.html").read_text()
    flat = re.sub(r"\s+", " ", html)
    for test in data["tests"]:
        a, variant = test["target"]["accuracy"], test["target"]["variant"]
        cells = [a["members"], a["non_members"], a["held_out"], a["majority_class"]]
        shown = [f'<td class="num">{fmt_number(x, 3)}</td>' for x in cells]
        shown[0] = f'<td class="num"><strong>{fmt_number(cells[0], 3)}</strong></td>'
        row = f'<td class="nowrap">The {variant} target</td> ' + " ".join(shown)
        assert row in flat, row
