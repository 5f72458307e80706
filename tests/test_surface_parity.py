"""One membership pipeline behind every surface: the same attacks, defaults, verdict and
metrics from ``dpaudit run``, ``dpaudit.audit_model`` and the pytest plugin.

``audit_model`` leaves every setting it is not given to the audit file's defaults, so a
notebook audit with no options runs the attacks and gate ``dpaudit run`` runs on a file
that sets nothing. Three models are then audited through every surface on the same rows:
a scikit-learn model whose members were fair coins (brought, rigorous one-run bound), the
same kind of model on a plain train/test split, and a torch module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from typer.testing import CliRunner

import dpaudit.session
from dpaudit.cli import app
from dpaudit.config import load_config
from dpaudit.membership.schema import DEFAULT_ATTACKS, MembershipSection
from dpaudit.notebook import audit_model
from dpaudit.sections import GateSection
from dpaudit.testing import AuditFailed, assert_audit_passes

N = 60  # members; as many non-members


@pytest.fixture(scope="module")
def rows() -> tuple[np.ndarray, np.ndarray]:
    X, y = make_classification(n_samples=2 * N, n_features=12, n_informative=4, random_state=1)
    return X, y


def test_a_notebook_audit_with_no_options_runs_the_files_defaults(
    rows: tuple[np.ndarray, np.ndarray], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    X, y = rows
    seen: dict[str, Any] = {}

    def capture(audit_file: Path, **_: Any) -> Any:
        seen["config"] = load_config(audit_file)  # the file audit_model wrote, as run sees it
        raise RuntimeError("captured")

    monkeypatch.setattr(dpaudit.session, "run_session", capture)
    model = LogisticRegression().fit(X[:N], y[:N])
    with pytest.raises(RuntimeError, match="captured"):
        audit_model(model, X[:N], y[:N], X[N:], y[N:], output_dir=tmp_path)
    config = seen["config"]
    membership = config.section("membership")
    assert membership == MembershipSection()  # what a file with an empty table gets
    assert tuple(membership.attacks) == DEFAULT_ATTACKS
    assert config.gate == GateSection()


def _torch_model(X: np.ndarray, y: np.ndarray) -> torch.nn.Module:
    torch.manual_seed(0)
    model = torch.nn.Linear(X.shape[1], 2)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.5)
    xs, ys = torch.as_tensor(X, dtype=torch.float32), torch.as_tensor(y)
    for _ in range(100):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(model(xs), ys).backward()
        optimiser.step()
    return model


def _metrics(tests: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(t["label"], t["metrics"]) for t in tests]


@pytest.mark.parametrize("case", ["brought-by-coin", "plain-split", "torch-module"])
def test_every_surface_gives_the_same_verdict_and_metrics(
    rows: tuple[np.ndarray, np.ndarray], tmp_path: Path, case: str
) -> None:
    X, y = rows
    train, test = slice(0, N), slice(N, 2 * N)
    if case == "torch-module":
        # reference models of a torch module follow the [training] recipe, whose batches
        # (64) are larger than these 60 rows' shadow splits: the loss attack alone
        model: Any = _torch_model(X[train], y[train])
        attacks = ["loss"]
    else:
        model = LogisticRegression(C=1e4, max_iter=5000).fit(X[train], y[train])
        attacks = ["loss", "shadow"]
    notebook = audit_model(
        model,
        X[train],
        y[train],
        X[test],
        y[test],
        attacks=attacks,
        shadow_models=2,
        membership_by_coin=case == "brought-by-coin",
        gate={"max_auc": 0.7},
        output_dir=tmp_path / "notebook",
        report=False,
    )
    (audit_file,) = (tmp_path / "notebook").glob("inputs-*/audit.toml")  # audit_model's own folder
    # The CLI on the file the notebook wrote, in its own run directory.
    cli = CliRunner().invoke(app, ["run", str(audit_file), "-q", "-o", str(tmp_path / "cli")])
    assert cli.exit_code == (0 if notebook.verdict == "pass" else 1), cli.output
    from_cli = json.loads((tmp_path / "cli" / "results.json").read_text(encoding="utf-8"))
    # The pytest plugin's assertion, in a third run directory.
    try:
        plugin = assert_audit_passes(audit_file, output_dir=tmp_path / "plugin")
    except AuditFailed as failed:
        plugin = failed.result
    from_notebook = notebook.to_dict()
    from_plugin = plugin.to_dict()
    for other in (from_cli, from_plugin):
        assert other["verdict"] == from_notebook["verdict"]
        assert other["headline"] == from_notebook["headline"]
        assert _metrics(other["tests"]) == _metrics(from_notebook["tests"])
        assert [c["name"] for c in other["checks"]] == [c["name"] for c in from_notebook["checks"]]
    labels = [label for label, _ in _metrics(from_notebook["tests"])]
    assert len(labels) == len(attacks)  # every attack ran on every surface
    # the default fail_on_violation has nothing to compare for a brought model: not applicable
    checks = {c["name"]: c for c in from_notebook["checks"]}
    assert checks["fail_on_violation"]["status"] == "not-applicable"
    assert checks["max_auc"]["status"] in ("passed", "failed")


@pytest.mark.slow  # two audits of each model
@pytest.mark.parametrize("case", ["brought-by-coin", "plain-split", "torch-module"])
def test_mlflow_gives_the_notebooks_verdict_and_metrics(
    rows: tuple[np.ndarray, np.ndarray],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
) -> None:
    """The MLflow evaluator on a logged model runs the audit ``audit_model`` (and so
    ``dpaudit run``) runs on the same model and rows, with no option: the same attacks,
    defaults, verdict and metrics."""
    mlflow = pytest.importorskip("mlflow")
    import pandas as pd
    from mlflow.models.evaluation.evaluator_registry import _model_evaluation_registry

    from dpaudit.mlflow_evaluator import DpauditEvaluator

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    if not _model_evaluation_registry.is_registered("dpaudit"):
        _model_evaluation_registry.register("dpaudit", DpauditEvaluator)
    X, y = rows
    train, test = slice(0, N), slice(N, 2 * N)
    settings: dict[str, Any] = {
        "attacks": ["loss"] if case == "torch-module" else ["loss", "shadow"],
        "shadow_models": 2,
        "membership_by_coin": case == "brought-by-coin",
        "gate": {"max_auc": 0.7},
    }
    experiment = mlflow.MlflowClient().create_experiment("parity")  # the active one is left
    try:
        with mlflow.start_run(experiment_id=experiment):
            if case == "torch-module":
                model: Any = _torch_model(X[train], y[train])
                info = mlflow.pytorch.log_model(
                    model, name="m", pip_requirements=["torch"], serialization_format="pickle"
                )
                settings["output"] = "logits"
            else:
                model = LogisticRegression(C=1e4, max_iter=5000).fit(X[train], y[train])
                info = mlflow.sklearn.log_model(
                    model,
                    name="m",
                    pip_requirements=["scikit-learn"],
                    serialization_format="pickle",
                )
            columns = [f"x{i}" for i in range(X.shape[1])]
            data = pd.DataFrame(X[test], columns=columns).assign(label=y[test])
            result = mlflow.models.evaluate(
                info.model_uri,
                data,
                targets="label",
                model_type="classifier",
                evaluators="dpaudit",
                evaluator_config={
                    **settings,
                    "train_data": (X[train], y[train]),
                    "html": False,
                    "output_dir": str(tmp_path / "mlflow"),
                },
            )
    finally:
        mlflow.set_tracking_uri(previous)
    notebook = audit_model(
        model,
        X[train],
        y[train],
        X[test],
        y[test],
        **settings,
        output_dir=tmp_path / "notebook",
        report=False,
    )
    from_mlflow = json.loads((tmp_path / "mlflow" / "run" / "results.json").read_text())
    from_notebook = notebook.to_dict()
    assert from_mlflow["verdict"] == from_notebook["verdict"]
    assert from_mlflow["headline"] == from_notebook["headline"]
    assert _metrics(from_mlflow["tests"]) == _metrics(from_notebook["tests"])
    assert [c["name"] for c in from_mlflow["checks"]] == [
        c["name"] for c in from_notebook["checks"]
    ]
    assert len(from_mlflow["tests"]) == len(settings["attacks"])
    # the largest AUC of the attacks, what the gate's max_auc reads
    assert result.metrics["dpaudit_auc"] == max(t["metrics"]["auc"] for t in from_notebook["tests"])
    assert result.metrics["dpaudit_gate_passed"] == float(notebook.verdict == "pass")
