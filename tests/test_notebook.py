"""``dpaudit.audit_model`` and the notebook display of results.

The loss attack's AUC is checked against an independent computation: each row's
cross-entropy loss from the model's own ``predict_proba`` (or torch's
``cross_entropy``), members scored higher when their loss is lower, and scikit-learn's
``roc_auc_score`` (ties count one half, as in the Mann–Whitney statistic).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

import dpaudit
from dpaudit.audit import run_audit
from dpaudit.cli import app
from dpaudit.errors import DataError
from dpaudit.notebook import NotebookResult, audit_model, show
from dpaudit.results import AuditResult

N = 60  # rows per side: members and non-members


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    X, y = make_classification(n_samples=2 * N, n_features=20, n_informative=4, random_state=0)
    return X, y


def _auc_of_losses(losses: np.ndarray) -> float:
    members = np.r_[np.ones(N), np.zeros(N)]
    return float(roc_auc_score(members, -losses))


def test_sklearn_model_is_audited_like_run_audit(
    data: tuple[np.ndarray, np.ndarray], tmp_path: Path
) -> None:
    X, y = data
    model = LogisticRegression(C=1e4, max_iter=5000).fit(X[:N], y[:N])  # overfits 60 rows
    result = dpaudit.audit_model(
        model,
        X[:N],
        y[:N],
        X[N:],
        y[N:],
        attacks=["loss"],
        output_dir=tmp_path / "run",
        gate={"max_auc": 0.99},
    )
    assert isinstance(result, AuditResult)
    assert isinstance(result, NotebookResult)
    (test,) = result.tests
    d = test.to_dict()
    assert (d["negatives"], d["positives"]) == (N, N)
    proba = model.predict_proba(X)[np.arange(2 * N), y]
    want = _auc_of_losses(-np.log(proba))
    assert d["metrics"]["auc"] == pytest.approx(want, rel=1e-12)
    assert want > 0.55  # the control: an overfit model leaks, and the audit sees it
    assert result.verdict == "pass"
    # a brought model states no claim: the default fail_on_violation does not apply
    assert [(c.name, c.status) for c in result.checks] == [
        ("fail_on_violation", "not-applicable"),
        ("max_auc", "passed"),
    ]
    assert "Full report:" in result._repr_html_()
    # A complete run: dpaudit verify and dpaudit card work on its folder.
    run_dir = tmp_path / "run"
    assert CliRunner().invoke(app, ["verify", str(run_dir)]).exit_code == 0
    assert CliRunner().invoke(app, ["card", str(run_dir)]).exit_code == 0
    card = json.loads((run_dir / "privacy-registry.json").read_text(encoding="utf-8"))
    assert card["deployment"]["dp_flavor"]["name"] is None  # a brought model claims nothing
    assert card["audit"]["lower_bounds"][0]["validity"] == "heuristic"


def test_gate_fails_on_leakage(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    X, y = data
    model = LogisticRegression(C=1e4, max_iter=5000).fit(X[:N], y[:N])
    result = audit_model(
        model,
        X[:N],
        y[:N],
        X[N:],
        y[N:],
        attacks=["loss"],
        output_dir=tmp_path,
        gate={"max_auc": 0.5},
        report=False,
    )
    assert not (tmp_path / "report.html").exists()
    assert result.verdict == "fail"
    assert "Gate limit exceeded" in result.headline
    assert result._repr_html_().count("Gate limit exceeded") == 1


def test_torch_module(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    X, y = data
    torch.manual_seed(0)
    model = torch.nn.Linear(X.shape[1], 2)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.5)
    xs, ys = torch.as_tensor(X[:N], dtype=torch.float32), torch.as_tensor(y[:N])
    for _ in range(50):
        optimiser.zero_grad()
        torch.nn.functional.cross_entropy(model(xs), ys).backward()
        optimiser.step()
    result = audit_model(
        model, X[:N], y[:N], X[N:], y[N:], attacks=["loss"], output_dir=tmp_path, report=False
    )
    with torch.no_grad():
        losses = torch.nn.functional.cross_entropy(
            model(torch.as_tensor(X, dtype=torch.float32)), torch.as_tensor(y), reduction="none"
        ).double()
    auc = result.tests[0].to_dict()["metrics"]["auc"]
    # float32 losses: rows whose losses tie in float32 may not tie in float64.
    assert auc == pytest.approx(_auc_of_losses(losses.numpy()), abs=1.0 / N**2)


def test_bad_input_is_a_clear_error(data: tuple[np.ndarray, np.ndarray], tmp_path: Path) -> None:
    X, y = data
    model = LogisticRegression().fit(X, y)
    with pytest.raises(DataError, match=r"must have the same columns\. Got 20 and 19"):
        audit_model(model, X, y, X[:, :19], y, output_dir=tmp_path)
    with pytest.raises(DataError, match=r"y_test must hold one label per row \(120\)"):
        audit_model(model, X, y, X, y[:5], output_dir=tmp_path)
    with pytest.raises(DataError, match="X_train holds NaN"):
        audit_model(model, np.full((3, 20), np.nan), y[:3], X, y, output_dir=tmp_path)


TINY = """
[audit]
name = "<script>alert(1)</script>"
kinds = ["mechanism"]

[mechanism]
name = "laplace"
epsilon = 1.0
trials = 2000

[mechanism.claim]
epsilon = 1.0

[report]
html = false
"""


def test_any_result_shows_inline_and_escaped(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(TINY, encoding="utf-8")
    result = run_audit(tmp_path / "a.toml", output_dir=tmp_path / "run")
    shown = show(result)
    assert shown == NotebookResult(**{k: getattr(result, k) for k in result.__dataclass_fields__})
    assert show(shown) is shown
    page = shown._repr_html_()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<svg" in page
    assert "Trade-off curve of laplace mechanism" in page
    assert f"{result.headline}" in page
