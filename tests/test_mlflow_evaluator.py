"""The MLflow evaluator against a real local tracking store (a ``file:`` URI in tmp_path).

A scikit-learn forest that memorises its training rows is logged with ``mlflow.sklearn``
and evaluated with ``evaluators="dpaudit"``. The metrics read back from the tracking
store must equal the numbers of the ``results.json`` logged next to them; the AUC must
equal scikit-learn's ROC AUC of the loss attack computed here from ``predict_proba``
(an independent reference of what the evaluator audits); a threshold the audit misses
must fail ``mlflow.validate_evaluation_results`` and one it meets must pass.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

mlflow = pytest.importorskip("mlflow")

import pandas as pd  # noqa: E402
from mlflow.models import MetricThreshold  # noqa: E402
from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from dpaudit.cli import app  # noqa: E402
from dpaudit.errors import ConfigError, DataError, DpauditError  # noqa: E402
from dpaudit.membership.schema import DEFAULT_ATTACKS  # noqa: E402
from dpaudit.mlflow_evaluator import (  # noqa: E402
    DpauditEvaluator,
    EvaluatorConfig,
    _split_features,
    metrics_from_results,
)

ROOT = Path(__file__).resolve().parents[1]
N, D = 400, 5


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory):
    """A tracking store, a logged forest trained on the rows whose fair coin said 'member'."""
    root = tmp_path_factory.mktemp("mlflow")
    # MLflow 3 keeps the file store only on request (sqlite needs SQLAlchemy, which
    # mlflow-skinny does not install); it is a real store all the same.
    patch = pytest.MonkeyPatch()
    patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri((root / "mlruns").as_uri())
    mlflow.set_experiment("dpaudit-test")
    if not _model_evaluation_registry.is_registered("dpaudit"):
        # dpaudit installed before the entry point was declared: register it by hand
        # (test_the_entry_point_is_declared checks the declaration itself).
        _model_evaluation_registry.register("dpaudit", DpauditEvaluator)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D))
    y = (X[:, 0] + 0.8 * rng.normal(size=N) > 0).astype(int)  # noisy labels: forests memorise
    member = rng.random(N) < 0.5  # fair coins
    data = pd.DataFrame(X, columns=[f"x{i}" for i in range(D)])
    model = RandomForestClassifier(n_estimators=20, random_state=0)
    model.fit(data[member], y[member])
    data["label"] = y
    data["is_member"] = member.astype(int)
    with mlflow.start_run() as run:
        # Saved with skops: the forest's tree storage is a type we made ourselves.
        info = mlflow.sklearn.log_model(
            model,
            name="forest",
            skops_trusted_types=["sklearn.tree._tree.Tree"],
            pip_requirements=["scikit-learn"],  # no inference: it runs a subprocess
        )
    p = model.predict_proba(data.drop(columns=["label", "is_member"]))
    loss = -np.log(np.clip(p[np.arange(N), y], np.finfo(float).tiny, None))
    yield {
        "root": root,
        "run": run.info.run_id,
        "uri": info.model_uri,
        "data": data,
        "member": member,
        "loss": loss,
        "model": model,
    }
    mlflow.set_tracking_uri(previous)
    patch.undo()


def _evaluate(world, config: dict, data: pd.DataFrame | None = None, run_id: str | None = None):
    """One evaluation, in the run given (the model's own run) or in a new run."""
    with mlflow.start_run(run_id=run_id):
        return mlflow.models.evaluate(
            world["uri"],
            world["data"] if data is None else data,
            targets="label",
            model_type="classifier",
            evaluators="dpaudit",
            evaluator_config=config,
        )


@pytest.fixture(scope="module")
def evaluated(world):
    keep = world["root"] / "kept-run"
    config = {
        "members": "is_member",
        "membership_by_coin": True,
        "output_dir": str(keep),
        "attacks": ["loss"],  # one test: its metrics unprefixed (the defaults: below)
    }
    result = _evaluate(world, config, run_id=world["run"])
    client = MlflowClient()
    folder = client.download_artifacts(world["run"], "dpaudit", str(world["root"] / "dl"))
    results = json.loads((Path(folder) / "results.json").read_text())
    return result, results, Path(folder), client.get_run(world["run"]).data.metrics


def test_logged_metrics_are_the_numbers_of_results_json(evaluated) -> None:
    result, results, _, logged = evaluated
    (test,) = results["tests"]
    m = test["metrics"]
    expected = {
        "dpaudit_auc": m["auc"],
        "dpaudit_auc_low": m["auc_interval"][0],
        "dpaudit_auc_high": m["auc_interval"][1],
        "dpaudit_advantage": m["advantage"],
        "dpaudit_gate_passed": 1.0,  # the default gate: nothing to hold a brought model to
        "dpaudit_privacy_violation": 0.0,
    }
    for row in m["tpr_at_fpr"]:
        expected[f"dpaudit_tpr_at_fpr_{row['target_fpr']:g}"] = row["tpr"]
    assert {r["target_fpr"] for r in m["tpr_at_fpr"]} == {0.1, 0.01, 0.001}
    for bound in results["bounds"]:
        lower = bound["lower"]
        name = f"dpaudit_{lower['parameter']}_lower_bound_{lower['validity'].replace('-', '_')}"
        expected[name] = lower["value"]
        expected[f"{name}_limit_of_detection"] = bound["limit_of_detection"]
    # The one rigorous ε bound (fair coins: the one-run theorem) is the headline ε.
    (one_run,) = [
        b
        for b in results["bounds"]
        if b["lower"]["validity"] == "rigorous-one-run" and b["lower"]["parameter"] == "epsilon"
    ]
    expected["dpaudit_epsilon_lower_bound"] = one_run["lower"]["value"]
    assert "dpaudit_epsilon_lower_bound_heuristic" in expected
    rigorous_mu = [
        b
        for b in results["bounds"]
        if b["lower"]["validity"].startswith("rigorous") and b["lower"]["parameter"] == "mu"
    ]
    if len(rigorous_mu) == 1:  # the one-run f-DP μ bound, when the audit gives one
        expected["dpaudit_mu_lower_bound"] = rigorous_mu[0]["lower"]["value"]
    # Exact equality: the store keeps float64, results.json the shortest repr.
    assert result.metrics == expected
    assert {k: logged[k] for k in expected} == expected
    assert metrics_from_results(results) == expected


def test_the_audit_attacks_the_models_own_outputs(world, evaluated) -> None:
    _, results, _, _ = evaluated
    # Independent reference: scikit-learn's ROC AUC of the loss attack (score −loss,
    # members positive) on predict_proba. Ties are counted 1/2 by both.
    want = roc_auc_score(world["member"], -world["loss"])
    assert results["tests"][0]["metrics"]["auc"] == pytest.approx(want, abs=1e-12)
    assert want > 0.7  # power control: the forest memorised its members
    target = results["tests"][0]["target"]
    assert target["members"] == int(world["member"].sum())
    assert target["audited"] == len(world["member"])
    assert target["membership_by_coin"] is True


def test_artifacts_are_logged_and_rerunnable(world, evaluated) -> None:
    result, results, folder, _ = evaluated
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["results.json", "report.html", "audit.toml", "model-card.md", "privacy-registry.json"]
    )
    registry = json.loads((folder / "privacy-registry.json").read_text())
    assert json.dumps(registry).count(str(result.metrics["dpaudit_epsilon_lower_bound"])) >= 1
    assert "<html" in (folder / "report.html").read_text().lower()
    audit = tomllib.loads((folder / "audit.toml").read_text())
    assert audit["target"]["membership_by_coin"] is True
    assert audit["membership"]["attacks"] == ["loss"]
    assert set(result.artifacts) == {
        "dpaudit_results",
        "dpaudit_report",
        "dpaudit_audit",
        "dpaudit_model_card",
        "dpaudit_privacy_registry",
    }
    assert result.artifacts["dpaudit_privacy_registry"].content == registry
    assert result.artifacts["dpaudit_results"].content == results
    # output_dir keeps the run directory, which `dpaudit verify` accepts as it is.
    from dpaudit.audit import verify_run

    assert verify_run(world["root"] / "kept-run" / "run") == []


@pytest.mark.slow  # the default attacks train 64 reference and 16 shadow forests
def test_no_options_run_the_audit_dpaudit_run_runs(world, tmp_path: Path) -> None:
    """With no attack named, the evaluator runs the ``[membership]`` defaults, and
    ``dpaudit run`` on the logged audit file gives the same tests, metrics and verdict."""
    result = _evaluate(world, {"members": "is_member", "output_dir": str(tmp_path / "ml")})
    results = result.artifacts["dpaudit_results"].content
    audit = tomllib.loads(result.artifacts["dpaudit_audit"].content)
    assert "attacks" not in audit.get("membership", {})  # the file's defaults
    assert [t["attack"]["name"] for t in results["tests"]] == list(DEFAULT_ATTACKS)
    (audit_file,) = (tmp_path / "ml").glob("inputs-*/audit.toml")
    cli = CliRunner().invoke(app, ["run", str(audit_file), "-q", "-o", str(tmp_path / "cli")])
    from_cli = json.loads((tmp_path / "cli" / "results.json").read_text())
    assert cli.exit_code == (0 if results["verdict"] == "pass" else 1)
    assert from_cli["verdict"] == results["verdict"]
    assert [t["metrics"] for t in from_cli["tests"]] == [t["metrics"] for t in results["tests"]]
    # with several tests the unprefixed figures are the worst test's, as the gate reads them
    aucs = [t["metrics"]["auc"] for t in results["tests"]]
    assert result.metrics["dpaudit_auc"] == max(aucs)
    worst = results["tests"][aucs.index(max(aucs))]
    assert result.metrics["dpaudit_auc_low"] == worst["metrics"]["auc_interval"][0]
    assert result.metrics["dpaudit_advantage"] == max(
        t["metrics"]["advantage"] for t in results["tests"]
    )
    assert result.metrics["dpaudit_byo_shadow_auc"] == results["tests"][1]["metrics"]["auc"]


def test_validation_thresholds_pass_and_fail_on_the_logged_metrics(evaluated) -> None:
    result, results, _, _ = evaluated
    auc = results["tests"][0]["metrics"]["auc"]
    eps = result.metrics["dpaudit_epsilon_lower_bound"]
    assert eps > 0  # power control: the one-run bound sees the memorisation
    meets = {
        "dpaudit_auc": MetricThreshold(threshold=auc + 0.01, greater_is_better=False),
        "dpaudit_epsilon_lower_bound": MetricThreshold(threshold=eps, greater_is_better=False),
    }
    misses = {"dpaudit_auc": MetricThreshold(threshold=auc - 0.01, greater_is_better=False)}
    if hasattr(mlflow, "validate_evaluation_results"):  # MLflow >= 2.18
        from mlflow.models.evaluation.validation import ModelValidationFailedException

        mlflow.validate_evaluation_results(meets, result)
        with pytest.raises(ModelValidationFailedException, match="dpaudit_auc"):
            mlflow.validate_evaluation_results(misses, result)
    else:  # pragma: no cover - older MLflow: thresholds go to evaluate itself
        pytest.skip("this MLflow validates inside evaluate(validation_thresholds=...)")


def test_train_data_gives_the_same_audit_as_a_members_column(world, evaluated) -> None:
    _, results, _, _ = evaluated
    rows, member = world["data"].drop(columns=["is_member"]), world["member"]
    # data holds the non-members, train_data the members: the same audited rows in
    # another order, the same scores.
    result = _evaluate(
        world,
        {
            "train_data": rows[member].reset_index(drop=True),
            "metric_prefix": "tt_",
            "html": False,
            "attacks": ["loss"],
        },
        data=rows[~member].reset_index(drop=True),
    )
    # No fair-coin statement: the one-run bound is heuristic, no headline ε is logged.
    assert "tt_epsilon_lower_bound" not in result.metrics
    assert result.metrics["tt_auc"] == pytest.approx(
        results["tests"][0]["metrics"]["auc"], abs=1e-12
    )


def test_gate_policies_reach_the_audit(world) -> None:
    result = _evaluate(
        world,
        {"members": "is_member", "gate": {"max_auc": 0.55}, "html": False, "attacks": ["loss"]},
    )
    assert result.metrics["dpaudit_gate_passed"] == 0.0
    (check,) = [
        c for c in result.artifacts["dpaudit_results"].content["checks"] if c["name"] == "max_auc"
    ]
    assert check["status"] == "failed"
    assert check["value"] == result.metrics["dpaudit_auc"] > 0.55
    assert "dpaudit_report" not in result.artifacts  # html = False: no report.html


def test_can_evaluate_only_classifiers_with_membership() -> None:
    assert DpauditEvaluator.can_evaluate(model_type="classifier", evaluator_config={"members": "m"})
    assert not DpauditEvaluator.can_evaluate(model_type="classifier", evaluator_config={})
    assert not DpauditEvaluator.can_evaluate(
        model_type="regressor", evaluator_config={"members": "m"}
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, r"must say which rows trained the model.*Got neither"),
        ({"members": "m", "train_data": [1]}, r"Got \['members', 'train_data'\]"),
        ({"members": "m", "colour": 1}, r"unknown keys \['colour'\]"),
        ({"members": "m", "output": "labels"}, r"'output' must be one of"),
        ({"members": "m", "gate": 3}, r"'gate' must be a dict"),
    ],
)
def test_bad_configs_are_refused_with_a_message(config: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EvaluatorConfig.from_mapping(config)


def test_a_missing_members_column_is_named(world) -> None:
    with pytest.raises(DataError, match=r"'members' names the column 'nope'"):
        _evaluate(world, {"members": "nope"})


def test_the_entry_point_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    points = project["entry-points"]["mlflow.model_evaluator"]
    assert points == {"dpaudit": "dpaudit.mlflow_evaluator:DpauditEvaluator"}
    assert any(r.startswith("mlflow") for r in project["optional-dependencies"]["mlflow"])


def _dataset(frame: pd.DataFrame, target: str = "label") -> SimpleNamespace:
    """The parts of MLflow's evaluation dataset the evaluator reads."""
    return SimpleNamespace(
        features_data=frame.drop(columns=[target]),
        labels_data=frame[target].to_numpy(),
        has_targets=True,
        targets_name=target,
    )


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ([1, 0], r"has 2 flags for 3 rows"),
        ([1, 0, 2], r"must hold 1/0 or true/false for every row\. Got 2"),
        (pd.array([1, None, 0], dtype="Int64"), r"is empty at row 1"),
    ],
)
def test_bad_member_flags_are_named(members, message: str) -> None:
    frame = pd.DataFrame({"x": [0.1, 0.2, 0.3], "label": [0, 1, 0]})
    config = EvaluatorConfig.from_mapping({"members": members})
    with pytest.raises(DataError, match=message):
        _split_features(config, _dataset(frame))


def test_member_flags_as_a_sequence_keep_every_feature() -> None:
    frame = pd.DataFrame({"x": [0.1, 0.2, 0.3], "label": [0, 1, 0]})
    config = EvaluatorConfig.from_mapping({"members": [True, "0", 1]})
    X, y, member = _split_features(config, _dataset(frame))
    assert list(X.columns) == ["x"]
    np.testing.assert_array_equal(y, [0, 1, 0])
    np.testing.assert_array_equal(member, [True, False, True])


# ------------------------------------------- the one run session (every surface's contract)
# A scikit-learn or torch model is written into the audit's folder and queried only by the
# session's watched child; a model of another flavour is queried in a watched fork.


def test_a_bad_rerun_leaves_no_earlier_pass(world, evaluated, tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    shutil.copytree(world["root"] / "kept-run", kept)
    artefacts = ("results.json", "report.html", "model-card.md", "privacy-registry.json")
    assert [a for a in artefacts if not (kept / "run" / a).is_file()] == []
    with pytest.raises(DataError, match=r"'members' names the column 'nope'"):
        _evaluate(world, {"members": "nope", "output_dir": str(kept)})
    assert [a for a in artefacts if (kept / "run" / a).exists()] == []


def test_a_linked_lock_is_refused(world, tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "out" / "run").mkdir(parents=True)
    (tmp_path / "out" / "run" / ".dpaudit.lock").symlink_to(victim)
    with pytest.raises(DpauditError, match="is a symbolic link"):
        _evaluate(world, {"members": "is_member", "output_dir": str(tmp_path / "out")})
    assert victim.read_text() == "keep me"


def test_safe_mode_is_honoured(world, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPAUDIT_NO_PLUGINS", "yes")
    with pytest.raises(ConfigError, match="DPAUDIT_NO_PLUGINS must be 0, 1 or unset"):
        _evaluate(world, {"members": "is_member"})


class _Exits(mlflow.pyfunc.PythonModel):
    """A custom pyfunc model whose predict ends the process that calls it."""

    def predict(self, context, model_input, params=None):
        import os

        os._exit(0)


class _Halves(mlflow.pyfunc.PythonModel):
    """A custom pyfunc model answering 1/2 for both classes of every row."""

    def predict(self, context, model_input, params=None):
        return np.full((len(model_input), 2), 0.5)


def _custom(world, python_model: mlflow.pyfunc.PythonModel) -> str:
    with mlflow.start_run():
        info = mlflow.pyfunc.log_model(
            name="custom", python_model=python_model, pip_requirements=["numpy"]
        )
    return info.model_uri


def test_a_custom_models_exit_is_a_failure(world, tmp_path: Path) -> None:
    uri = _custom(world, _Exits())
    with mlflow.start_run(), pytest.raises(DpauditError, match=r"os\._exit\(\)"):
        mlflow.models.evaluate(
            uri,
            world["data"],
            targets="label",
            model_type="classifier",
            evaluators="dpaudit",
            evaluator_config={"members": "is_member", "output_dir": str(tmp_path)},
        )
    assert not (tmp_path / "run" / "results.json").exists()


def test_a_custom_model_is_audited_by_its_outputs(world, tmp_path: Path) -> None:
    uri = _custom(world, _Halves())
    config = {"members": "is_member", "output_dir": str(tmp_path), "html": False}
    with mlflow.start_run():
        result = mlflow.models.evaluate(
            uri, world["data"], targets="label", model_type="classifier",
            evaluators="dpaudit", evaluator_config=config,
        )  # fmt: skip
    results = result.artifacts["dpaudit_results"].content
    # the same loss for every row: every score tied, the AUC exactly 1/2
    assert [t["attack"]["name"] for t in results["tests"]] == ["loss"]
    assert result.metrics["dpaudit_auc"] == 0.5
    with mlflow.start_run(), pytest.raises(ConfigError, match=r"attacks=\['loss'\]"):
        mlflow.models.evaluate(
            uri, world["data"], targets="label", model_type="classifier",
            evaluators="dpaudit", evaluator_config={**config, "attacks": ["shadow"]},
        )  # fmt: skip


def test_safe_mode_runs_no_model_code(world, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPAUDIT_NO_PLUGINS", "1")
    # a scikit-learn model is audited from a pickle: refused before it is loaded
    with pytest.raises(ConfigError, match=r"'target\.allow_pickle' = true unpickles a model"):
        _evaluate(world, {"members": "is_member", "attacks": ["loss"]})
    # a custom model answers only through its own predict: never called
    uri = _custom(world, _Exits())
    with (
        mlflow.start_run(),
        pytest.raises(ConfigError, match=r"safe mode \(DPAUDIT_NO_PLUGINS=1\)"),
    ):
        mlflow.models.evaluate(
            uri, world["data"], targets="label", model_type="classifier",
            evaluators="dpaudit", evaluator_config={"members": "is_member"},
        )  # fmt: skip
