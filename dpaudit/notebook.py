"""dpaudit in a notebook: audit a model you trained with one call, see the verdict inline.

:func:`audit_model` audits the membership privacy of a trained scikit-learn estimator or
torch module given its training and test data, and returns the same
:class:`~dpaudit.results.AuditResult` as :func:`dpaudit.run_audit`. It is a membership audit
of a brought target, run through the one path every audit takes: the data, the
membership (train rows 1, test rows 0) and the model are written into the run directory,
with an audit file that names them, and :func:`dpaudit.run_audit` runs that file. The run
directory is therefore a complete run: ``dpaudit report``, ``dpaudit verify`` and
``dpaudit card`` work on it as on any other.

The result displays itself in Jupyter (:meth:`NotebookResult._repr_html_`): the verdict,
its one-line headline and the key plot of the report (the ROC curve of the strongest
attack on log axes, or the trade-off curve of a DP test), drawn by the report's own
plotting functions. :func:`show` gives any :class:`~dpaudit.results.AuditResult` the same.
"""

from __future__ import annotations

import html
import json
import math
import pickle
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.errors import DataError
from dpaudit.results import AuditResult

__all__ = [
    "ModelAuditSettings",
    "NotebookResult",
    "as_features",
    "audit_model",
    "is_estimator",
    "show",
    "write_model_audit",
]


@dataclass(frozen=True)
class NotebookResult(AuditResult):
    """An :class:`~dpaudit.results.AuditResult` that shows itself in a notebook."""

    def _repr_html_(self) -> str:
        return result_html(self)


def show(result: AuditResult) -> NotebookResult:
    """``result`` (of :func:`dpaudit.run_audit`, say) as a :class:`NotebookResult`."""
    if isinstance(result, NotebookResult):
        return result
    return NotebookResult(**{f.name: getattr(result, f.name) for f in fields(AuditResult)})


def _key_plot(tests: list[dict[str, Any]], *, id_prefix: str) -> tuple[str, str | None]:
    """(caption, SVG) of the report's key plot for these tests (SVG None if none drawn)."""
    from dpaudit.report import plots

    attacks = [t for t in tests if "attack" in t and t.get("curve")]
    if attacks:
        best = max(attacks, key=lambda t: (t.get("metrics") or {}).get("auc") or 0.0)
        caption = f"ROC of {best.get('label', 'the attack')} (log axes)"
        return caption, plots.roc_plot(best, id_prefix=id_prefix)
    for t in tests:
        if t.get("curve"):
            caption = f"Trade-off curve of {t.get('label', 'the test')}"
            return caption, plots.tradeoff_plot(t, id_prefix=id_prefix)
    return "", None


def result_html(result: AuditResult) -> str:
    """The verdict, headline, strongest bounds and key plot as an HTML fragment."""
    from dpaudit.safe_text import for_html

    def text(value: Any) -> str:
        return html.escape(str(for_html(str(value))))

    data = result.to_dict()
    colour = "#1a7f37" if result.verdict == "pass" else "#cf222e"
    parts = [
        '<div class="dpaudit-result">',
        f"<h3>dpaudit: {text(result.name)} — "
        f'<span style="color:{colour}">{text(result.verdict)}</span></h3>',
        f"<p><b>{text(result.headline)}</b></p>",
    ]
    rows = [b for b in data["bounds"] if b["in_verdict"] or b["upper"] is None]
    if rows:
        parts.append("<table><tr><th>test</th><th>bound</th><th>lower</th><th>upper</th>")
        parts.append("<th>validity</th></tr>")
        for b in rows[:8]:
            name = "ε" if b["parameter"] == "epsilon" else "μ"
            upper = "—" if b["upper"] is None else f"{b['upper']:.4g}"
            parts.append(
                f"<tr><td>{text(b['test'])}</td><td>{name}</td>"
                f"<td>{b['lower']['value']:.4g}</td><td>{upper}</td>"
                f"<td>{text(b['lower']['validity'])}</td></tr>"
            )
        parts.append("</table>")
    for test in data["tests"][:4]:
        metrics = test.get("metrics") or {}
        auc = metrics.get("auc")
        if isinstance(auc, int | float) and math.isfinite(auc):
            parts.append(f"<p>{text(test.get('label', ''))}: AUC {auc:.3f}</p>")
    caption, svg = _key_plot(data["tests"], id_prefix=f"dpaudit-{id(result):x}-")
    if svg is not None:
        parts.append(f"<figure>{svg}<figcaption>{text(caption)}</figcaption></figure>")
    run_dir = result.provenance.get("run_dir")
    if run_dir and (Path(str(run_dir)) / "report.html").is_file():
        parts.append(f"<p>Full report: <code>{text(Path(str(run_dir)) / 'report.html')}</code></p>")
    parts.append("</div>")
    return "\n".join(parts)


# ------------------------------------------------------------------------ audit_model


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise DataError(f"Audit settings must be finite numbers. Got {value!r}.")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string (no \/ is written)
    if isinstance(value, Sequence):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise DataError(f"Audit settings must be numbers, strings or lists. Got {value!r}.")


def _toml(tables: Mapping[str, Mapping[str, Any]], *, header: str) -> str:
    """The audit file's tables as TOML (one level of tables, as an audit file has)."""
    out = [header]
    for table, keys in tables.items():
        out.append(f"\n[{table}]")
        for key, value in keys.items():
            if value is not None:
                out.append(f"{key} = {_toml_value(value)}")
    return "\n".join(out) + "\n"


def as_features(X: Any, what: str) -> np.ndarray:
    """``X`` as the float matrix a brought model's audit reads (numeric, 2-D, finite)."""
    try:
        array = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise DataError(f"{what} must be numeric features (an (n, d) array).") from None
    if array.ndim != 2 or array.shape[0] == 0:
        raise DataError(f"{what} must be an (n, d) array with n ≥ 1. Got shape {array.shape}.")
    if not np.isfinite(array).all():
        raise DataError(f"{what} holds NaN or infinite values.")
    return array


def _as_labels(y: Any, n: int, what: str) -> np.ndarray:
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise DataError(f"{what} must hold one label per row ({n}). Got shape {labels.shape}.")
    return labels


def is_estimator(model: Any) -> bool:
    """A scikit-learn estimator (``predict_proba`` and ``get_params``): clones fit like it."""
    return hasattr(model, "predict_proba") and hasattr(model, "get_params")


@dataclass(frozen=True)
class ModelAuditSettings:
    """The settings of a brought model's membership audit that a surface passes on; a
    setting left ``None`` takes the audit file's default (what ``dpaudit run`` does on a
    file that does not set it)."""

    name: str = "notebook-audit"
    seed: int = 0
    confidence_level: float = 0.95
    delta: float = 1e-5
    attacks: Sequence[str] | None = None
    references: str | None = None
    reference_models: int | None = None
    shadow_models: int | None = None
    output: str = "logits"
    membership_by_coin: bool = False
    gate: Mapping[str, Any] | None = None
    report: bool = True
    header: str = "# Written by dpaudit.audit_model: the audit of a model brought from Python."


def write_model_audit(
    model: Any,
    features: np.ndarray,
    labels: np.ndarray,
    member: np.ndarray,
    folder: Path,
    *,
    settings: ModelAuditSettings,
) -> Path:
    """Write a brought model's membership audit into a fresh folder ``inputs-…`` of
    ``folder``: the model (a pickle, loaded back with ``allow_pickle = true``), the rows
    (``data.csv``: features, label, member) and the audit file that names them.

    Every surface that audits a model object (:func:`audit_model`, the MLflow evaluator)
    writes its audit here, so they run the same attacks with the same defaults as
    ``dpaudit run`` on the same model and data; the model is then queried only by the
    run session's watched child. Nothing already in ``folder`` is overwritten.

    Returns:
        The audit file written.

    Raises:
        DataError: the model cannot be pickled.
    """
    import pandas as pd  # pandas takes seconds to import: only when a model is audited

    folder.mkdir(parents=True, exist_ok=True)
    inputs = Path(tempfile.mkdtemp(prefix="inputs-", dir=folder))
    frame = pd.DataFrame(features, columns=[f"x{i}" for i in range(features.shape[1])])
    frame["label"] = labels
    frame["member"] = np.asarray(member, dtype=bool).astype(int)
    frame.to_csv(inputs / "data.csv", index=False)
    try:
        with (inputs / "model.pkl").open("wb") as f:
            pickle.dump(model, f)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise DataError(f"The model cannot be stored for the audit (pickle): {exc}") from None
    s = settings
    tables: dict[str, dict[str, Any]] = {
        "audit": {
            "name": s.name,
            "kinds": ["membership"],
            "seed": s.seed,
            "confidence_level": s.confidence_level,
            "delta": s.delta,
        },
        "data": {"dataset": "csv:data.csv", "label": "label"},
        "target": {
            "path": "model.pkl",
            "allow_pickle": True,  # the file dpaudit just wrote from the model passed in
            "membership": "member",
            "membership_by_coin": s.membership_by_coin,
            "output": s.output,
            "references": s.references or ("clone" if is_estimator(model) else "recipe"),
        },
        # What is not given (None, which _toml leaves out) takes the tables' defaults: the
        # same attacks, reference models and gate as `dpaudit run` on the same model and data.
        "membership": {
            "attacks": None if s.attacks is None else list(s.attacks),
            "reference_models": s.reference_models,
            "shadow_models": s.shadow_models,
        },
        "gate": dict(s.gate or {}),
        "report": {"html": s.report},
    }
    audit_file = inputs / "audit.toml"
    audit_file.write_text(_toml(tables, header=s.header), encoding="utf-8")
    return audit_file


def audit_model(
    model: Any,
    X_train: Any,
    y_train: Any,
    X_test: Any,
    y_test: Any,
    *,
    attacks: Sequence[str] | None = None,
    name: str = "notebook-audit",
    seed: int = 0,
    confidence_level: float = 0.95,
    delta: float = 1e-5,
    references: str | None = None,
    reference_models: int | None = None,
    shadow_models: int | None = None,
    output: str = "logits",
    membership_by_coin: bool = False,
    gate: Mapping[str, Any] | None = None,
    output_dir: str | Path | None = None,
    report: bool = True,
) -> NotebookResult:
    """Audit the membership privacy of a trained model: which rows trained it?

    The attacks score every training row (members) and test row (non-members); the result
    holds each attack's ROC metrics (AUC, TPR at low FPR, advantage) with intervals, and
    its ε lower bounds: "heuristic" unless ``membership_by_coin`` says each row was put in
    the training set by an independent fair coin, in which case the one-run bound is
    rigorous (Steinke, Nasr, Jagielski 2023, Theorem 3.1).

    Args:
        model: a fitted scikit-learn estimator with ``predict_proba``, a torch module
            (returning ``output``), or a :class:`~dpaudit.models.ModelStack`.
        X_train, y_train: the rows that trained it (numeric features, one label each).
        X_test, y_test: rows it never saw, from the same population.
        attacks: membership attacks by name (``"loss"``, ``"shadow"``, ``"lira"``, ...;
            those that train reference models train them as ``references`` says);
            default: the ``[membership]`` table's, the attacks ``dpaudit run`` runs.
        name: the audit's name.
        seed: seed of everything random.
        confidence_level: c of every interval and bound.
        delta: δ of the ε bounds.
        references: how reference models are trained: ``"clone"`` (default for a
            scikit-learn estimator: clones of it), ``"recipe"`` (default otherwise), or a
            ``"pkg.module:function"`` training function (see ``[target] references``).
        reference_models, shadow_models: the reference and shadow models of the attacks
            (default: the ``[membership]`` table's, as ``dpaudit run``).
        output: whether a torch module returns ``"logits"`` or ``"probabilities"``.
        membership_by_coin: each row's membership was decided by a fair coin.
        gate: the ``[gate]`` table (e.g. ``{"max_auc": 0.6}``), as in an audit file: a
            brought model states no DP claim, so the default ``fail_on_violation`` is
            shown as not applicable and the policies given decide.
        output_dir: the run directory (default: a new temporary folder, kept, so that its
            report stays readable). The model, data and audit file are written into a new
            folder ``inputs-…`` inside it (no file already there is overwritten); the
            model is stored as a pickle and loaded back with ``allow_pickle = true``,
            which the result's warnings say. The audit runs through the one run session
            (:func:`dpaudit.session.run_session`), in a watched child process.
        report: write ``report.html`` into the run directory (``[report] html``).

    Returns:
        A :class:`NotebookResult`: the :class:`~dpaudit.results.AuditResult` of the run,
        which shows its verdict, headline and ROC inline in Jupyter.

    Raises:
        DpauditError: unusable input (features that are not numeric, a label count that
            does not match, a model dpaudit cannot query, an unknown attack).
    """
    from dpaudit.session import clear_previous, run_session

    if output_dir is not None:  # before any check that can fail: no earlier pass survives
        clear_previous(Path(output_dir).resolve())
    train = as_features(X_train, "X_train")
    test = as_features(X_test, "X_test")
    if train.shape[1] != test.shape[1]:
        raise DataError(
            f"X_train and X_test must have the same columns. Got {train.shape[1]} and "
            f"{test.shape[1]}."
        )
    labels = np.concatenate(
        [_as_labels(y_train, len(train), "y_train"), _as_labels(y_test, len(test), "y_test")]
    )
    run_dir = (
        Path(output_dir)
        if output_dir is not None
        else Path(tempfile.mkdtemp(prefix="dpaudit-notebook-"))
    )
    audit_file = write_model_audit(
        model,
        np.vstack([train, test]),
        labels,
        np.r_[np.ones(len(train), dtype=bool), np.zeros(len(test), dtype=bool)],
        run_dir,
        settings=ModelAuditSettings(
            name=name,
            seed=seed,
            confidence_level=confidence_level,
            delta=delta,
            attacks=attacks,
            references=references,
            reference_models=reference_models,
            shadow_models=shadow_models,
            output=output,
            membership_by_coin=membership_by_coin,
            gate=gate,
            report=report,
        ),
    )
    return show(run_session(audit_file, output_dir=run_dir))
