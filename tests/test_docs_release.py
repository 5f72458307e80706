"""The release-artefact examples of docs/release.md run as written (from the repository's root).

Each Python block of the page is run: the pytest
example's test function is called, the notebook example audits a real model, and the
MLflow example (when the ``mlflow`` extra is installed) logs to a local file store in a
temporary folder. Their printed verdicts and logged metrics are checked, so an example
that drifts from the API fails here.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "release.md"


def _blocks() -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_page_has_the_pytest_notebook_and_mlflow_examples() -> None:
    blocks = _blocks()
    assert len(blocks) == 3
    assert "assert_audit_passes" in blocks[0]
    assert "dpaudit.audit_model" in blocks[1]
    assert 'evaluators="dpaudit"' in blocks[2]


def test_the_pytest_example_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(_blocks()[0], "docs/release.md", "exec"), namespace)
    namespace["test_laplace_is_private"](tmp_path)
    assert (tmp_path / "run" / "results.json").is_file()


def test_the_notebook_example_runs_and_prints_its_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_blocks()[1], "docs/release.md", "exec"), {})
    verdict, _, headline = out.getvalue().strip().partition(" ")
    assert verdict in ("pass", "fail")
    assert headline


def test_the_mlflow_example_logs_and_validates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_ID", raising=False)
    # an experiment another test made active lives in another store: start from none, as
    # a fresh Python session running the example would
    monkeypatch.setattr(mlflow.tracking.fluent, "_active_experiment_id", None)
    previous = mlflow.get_tracking_uri()
    namespace: dict = {}
    try:
        exec(compile(_blocks()[2], "docs/release.md", "exec"), namespace)
    finally:
        mlflow.set_tracking_uri(previous)
    metrics = namespace["result"].metrics
    assert 0.5 <= metrics["dpaudit_auc"] <= 0.8  # the threshold the example validates
    assert (tmp_path / "mlruns").is_dir()
