"""An MLflow model evaluator: ``mlflow.models.evaluate(..., evaluators="dpaudit")``.

It audits the membership privacy of the classifier being evaluated, as ``dpaudit run``
audits a brought target (the ``membership`` kind with a ``[target] scores`` file), and
logs what the audit found to the MLflow run::

    result = mlflow.models.evaluate(
        model_uri,
        data,                       # audited rows, with the labels column
        targets="label",
        model_type="classifier",
        evaluators="dpaudit",
        evaluator_config={"members": "is_member", "membership_by_coin": True},
    )
    mlflow.validate_evaluation_results(
        {"dpaudit_auc": MetricThreshold(threshold=0.6, greater_is_better=False)}, result
    )

What is audited: the audit ``dpaudit run`` and :func:`dpaudit.audit_model` run on the same
model and rows, with the same attacks and defaults. A scikit-learn estimator or torch
module under the pyfunc wrapper is written with the audited rows and an audit file into
a fresh folder (:func:`dpaudit.notebook.write_model_audit`) and audited through the one
run session, the model queried only in its watched child; a model of another flavour is
queried (``predict``) in a watched fork (:func:`dpaudit.session.call_watched`) and its
per-class outputs audited as a scores file with the loss threshold attack (Yeom et al.
2018), the attack a scores file supports.

Which rows trained the model is given by the config:

- ``members``: a column of ``data`` holding 1/0 (or true/false) — dropped from the
  features before the model is queried — or a sequence of flags, one per row of ``data``;
- or ``train_data``: the model's training rows (a DataFrame with the targets column, or
  a pair ``(X, y)``); then every row of ``data`` is a non-member.

The other keys (all optional): ``membership_by_coin`` (each audited row's membership was
decided by an independent fair coin: only then is the one-run ε lower bound rigorous;
default False), ``confidence_level`` (0.95), ``delta`` (1e-5), ``seed`` (0), ``name``
(the audit's name, ``"mlflow-model"``), ``gate`` (a ``[gate]`` table as a dict; default the
table's defaults), ``attacks``, ``references``, ``reference_models``, ``shadow_models``
(default the ``[membership]`` and ``[target]`` defaults),
``output`` (``"probabilities"`` or ``"logits"``: what ``predict`` returns when the model
has no ``predict_proba``), ``output_dir`` (keep the run directory there; default a
temporary folder, removed once its files are logged), ``metric_prefix`` (``"dpaudit_"``),
``html`` (write and log ``report.html``; default True).

What is logged (:func:`metrics_from_results` names them): the AUC with its interval, the
advantage, the TPR at each low FPR, every ε / μ lower bound by its validity with its
limit of detection, ``epsilon_lower_bound`` when the audit has exactly one rigorous ε
bound (the number to hold a threshold against; absent otherwise, so a threshold on it
fails closed), ``gate_passed`` and ``privacy_violation`` (1 or 0). Artifacts under
``dpaudit/``: ``results.json``, ``report.html``, the model card ``model-card.md`` and
registry record ``privacy-registry.json`` (:mod:`dpaudit.card`, made after the run is
verified against its stored units) and the generated ``audit.toml`` (the scores file
holds per-row outputs and membership and is not logged). Every metric is
read from the audit's ``results.json``, so the MLflow run and the report never disagree.

MLflow finds this evaluator through the ``mlflow.model_evaluator`` entry point named
``dpaudit`` (install the ``mlflow`` extra). ``can_evaluate`` is true only for
``model_type="classifier"`` with ``members`` or ``train_data`` in the config, so an
``evaluate`` call that names no evaluator is not turned into a privacy audit.

References:
    Yeom, Giacomelli, Fredrikson, Jha (2018), "Privacy Risk in Machine Learning",
    IEEE CSF (the loss attack); Steinke, Nasr, Jagielski (2023), "Privacy Auditing with
    One (1) Training Run", arXiv 2305.08846v1, Theorem 3.1 (the one-run bound).
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

try:
    from mlflow.models.evaluation.artifacts import (
        JsonEvaluationArtifact,
        TextEvaluationArtifact,
    )
    from mlflow.models.evaluation.base import EvaluationResult, ModelEvaluator
except ImportError as exc:  # pragma: no cover - exercised only without MLflow
    raise ImportError(
        "dpaudit's MLflow evaluator needs MLflow: pip install 'dpaudit[mlflow]'"
    ) from exc

from dpaudit.errors import ConfigError, DataError
from dpaudit.notebook import ModelAuditSettings, as_features, is_estimator, write_model_audit
from dpaudit.plugins import NO_PLUGINS_ENV, safe_mode_active

__all__ = ["DpauditEvaluator", "EvaluatorConfig", "metrics_from_results"]

#: The config keys that say which rows trained the model (one of them is required).
MEMBERSHIP_KEYS = ("members", "train_data")
_OPTIONS = frozenset(
    {
        *MEMBERSHIP_KEYS,
        "membership_by_coin",
        "confidence_level",
        "delta",
        "seed",
        "name",
        "gate",
        "output",
        "output_dir",
        "metric_prefix",
        "html",
        "attacks",
        "references",
        "reference_models",
        "shadow_models",
    }
)
_ARTIFACT_DIR = "dpaudit"


@dataclass(frozen=True)
class EvaluatorConfig:
    """The ``evaluator_config`` of ``evaluators="dpaudit"``, validated (see the module)."""

    members: str | Sequence[Any] | None = None
    train_data: Any = None
    membership_by_coin: bool = False
    confidence_level: float = 0.95
    delta: float = 1e-5
    seed: int = 0
    name: str = "mlflow-model"
    gate: Mapping[str, Any] = field(default_factory=dict)
    output: str = "probabilities"
    output_dir: str | Path | None = None
    metric_prefix: str = "dpaudit_"
    html: bool = True
    attacks: Sequence[str] | None = None
    references: str | None = None
    reference_models: int | None = None
    shadow_models: int | None = None

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None) -> EvaluatorConfig:
        """Check the keys and the membership source, with messages that name them.

        Raises:
            ConfigError: an unknown key, neither or both of ``members`` / ``train_data``,
                ``output`` not one of its values, a ``gate`` that is not a table.
        """
        config = dict(config or {})
        unknown = sorted(set(config) - _OPTIONS)
        if unknown:
            raise ConfigError(
                f"The dpaudit evaluator_config has unknown keys {unknown}; allowed keys: "
                f"{', '.join(sorted(_OPTIONS))}."
            )
        given = [k for k in MEMBERSHIP_KEYS if config.get(k) is not None]
        if len(given) != 1:
            raise ConfigError(
                "The dpaudit evaluator_config must say which rows trained the model: "
                "'members' (a column of data holding 1/0, or one flag per row) or "
                f"'train_data' (the training rows; data then holds non-members only). "
                f"Got {given or 'neither'}."
            )
        output = config.get("output", "probabilities")
        if output not in ("probabilities", "logits"):
            raise ConfigError(
                f"The dpaudit evaluator_config 'output' must be one of "
                f"{{'probabilities', 'logits'}}. Got {output!r} instead."
            )
        gate = config.get("gate", {})
        if not isinstance(gate, Mapping):
            raise ConfigError(
                f"The dpaudit evaluator_config 'gate' must be a dict of [gate] policies "
                f"(e.g. {{'max_auc': 0.6}}). Got {type(gate).__name__} instead."
            )
        return cls(**{**config, "gate": dict(gate)})


# ------------------------------------------------------------------------- metrics


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def metrics_from_results(
    results: Mapping[str, Any], *, prefix: str = "dpaudit_"
) -> dict[str, float]:
    """The MLflow metrics of an audit, read from its ``results.json`` (parsed).

    Names (``prefix`` first; ``<test>_`` is the test's id, left out when the audit has one
    test):

    - ``gate_passed``, ``privacy_violation``: 1.0 or 0.0;
    - ``<test>_auc``, ``_auc_low``, ``_auc_high`` (its interval), ``_advantage``
      (TPR − FPR, Yeom et al.), ``_tpr_at_fpr_<fpr>`` for each low FPR of the test;
    - with several tests, also ``auc`` (with ``auc_low`` and ``auc_high`` of that test),
      ``advantage`` and ``tpr_at_fpr_<fpr>`` unprefixed: the largest over the tests, the
      value the gate's ``max_auc``, ``max_advantage`` and ``max_tpr_at_fpr`` read;
    - ``<test>_<epsilon|mu>_lower_bound_<validity>`` and ``..._limit_of_detection`` for
      every bound (``_2``, ``_3`` ... when a test has two bounds of one validity);
    - ``epsilon_lower_bound`` / ``mu_lower_bound``: the audit's only rigorous bound of that
      parameter, when there is exactly one.

    Values that ``results.json`` holds as ``null`` (not measured) are left out.
    """
    metrics: dict[str, float] = {
        f"{prefix}gate_passed": float(results["verdict"] == "pass"),
        f"{prefix}privacy_violation": float(results["privacy_verdict"] == "violation"),
    }
    tests = list(results.get("tests", []))
    single = len(tests) == 1
    part = {t["label"]: "" if single else f"{_slug(t['id'])}_" for t in tests}

    def put(name: str, value: Any) -> None:
        number = _number(value)
        if number is not None:
            metrics[f"{prefix}{name}"] = number

    for test in tests:
        p, m = part[test["label"]], test.get("metrics", {})
        put(f"{p}auc", m.get("auc"))
        interval = m.get("auc_interval") or (None, None)
        put(f"{p}auc_low", interval[0])
        put(f"{p}auc_high", interval[1])
        put(f"{p}advantage", m.get("advantage"))
        for row in m.get("tpr_at_fpr", []):
            put(f"{p}tpr_at_fpr_{row['target_fpr']:g}", row.get("tpr"))
    if not single:  # the worst test's figures, as the gate reads them
        worst = max(
            (t for t in tests if _number(t.get("metrics", {}).get("auc")) is not None),
            key=lambda t: t["metrics"]["auc"],
            default=None,
        )
        if worst is not None:
            put("auc", worst["metrics"]["auc"])
            interval = worst["metrics"].get("auc_interval") or (None, None)
            put("auc_low", interval[0])
            put("auc_high", interval[1])
        advantages = [_number(t.get("metrics", {}).get("advantage")) for t in tests]
        if any(a is not None for a in advantages):
            put("advantage", max(a for a in advantages if a is not None))
        best: dict[str, float] = {}
        for test in tests:
            for row in test.get("metrics", {}).get("tpr_at_fpr", []):
                tpr, key = _number(row.get("tpr")), f"tpr_at_fpr_{row['target_fpr']:g}"
                if tpr is not None and tpr > best.get(key, -1.0):
                    best[key] = tpr
        for key, tpr in best.items():
            put(key, tpr)
    rigorous: dict[str, list[float]] = {}
    for bound in results.get("bounds", []):
        lower = bound["lower"]
        p = part.get(bound["test"], f"{_slug(bound['test'])}_")
        base = f"{p}{lower['parameter']}_lower_bound_{_slug(lower['validity'])}"
        name, n = base, 1
        while f"{prefix}{name}" in metrics:
            n += 1
            name = f"{base}_{n}"
        put(name, lower["value"])
        put(f"{name}_limit_of_detection", bound.get("limit_of_detection"))
        if str(lower["validity"]).startswith("rigorous"):
            rigorous.setdefault(lower["parameter"], []).append(lower["value"])
    for parameter, values in rigorous.items():
        if len(values) == 1:
            put(f"{parameter}_lower_bound", values[0])
    return metrics


# --------------------------------------------------------------------- the audit


def _flags(values: Any, where: str) -> np.ndarray:
    """1/0/true/false values as a bool array, else a message naming ``where``."""
    import pandas as pd

    out = []
    for i, v in enumerate(list(values)):
        if v is None or (not isinstance(v, str) and bool(pd.isna(v))):
            raise DataError(f"{where} is empty at row {i}; every audited row needs 1 or 0.")
        if isinstance(v, str) and v.strip().lower() in ("1", "0", "true", "false"):
            out.append(v.strip().lower() in ("1", "true"))
        elif isinstance(v, bool | np.bool_) or (
            isinstance(v, int | float | np.integer | np.floating) and v in (0, 1)
        ):
            out.append(bool(v))
        else:
            raise DataError(f"{where} must hold 1/0 or true/false for every row. Got {v!r}.")
    return np.asarray(out, dtype=bool)


def _split_features(config: EvaluatorConfig, dataset: Any) -> tuple[Any, np.ndarray, np.ndarray]:
    """The audited rows' features (as the model takes them), labels and membership."""
    import pandas as pd

    X, y = dataset.features_data, dataset.labels_data
    if y is None or not dataset.has_targets:
        raise DataError(
            "The dpaudit evaluator needs the labels of the audited rows: pass targets= to "
            "mlflow.models.evaluate."
        )
    y = np.asarray(y)
    if config.train_data is not None:
        train = config.train_data
        if isinstance(train, pd.DataFrame):
            target = dataset.targets_name
            if not isinstance(target, str) or target not in train.columns:
                raise DataError(
                    f"The dpaudit evaluator_config 'train_data' must hold the targets column "
                    f"{target!r} (or be a pair (X, y)). Columns: {list(map(str, train.columns))}."
                )
            X_train, y_train = train.drop(columns=[target]), np.asarray(train[target])
            if isinstance(X, pd.DataFrame):
                missing = [c for c in X.columns if c not in X_train.columns]
                if missing:
                    raise DataError(
                        f"The dpaudit evaluator_config 'train_data' lacks the feature "
                        f"columns {missing} of data."
                    )
                X_train = X_train[list(X.columns)]
        elif isinstance(train, tuple | list) and len(train) == 2:
            X_train, y_train = train[0], np.asarray(train[1])
            if isinstance(X, pd.DataFrame) and not isinstance(X_train, pd.DataFrame):
                X_train = pd.DataFrame(np.asarray(X_train), columns=X.columns)
        else:
            raise DataError(
                "The dpaudit evaluator_config 'train_data' must be a DataFrame with the "
                f"targets column, or a pair (X, y). Got {type(train).__name__}."
            )
        if isinstance(X, pd.DataFrame):
            features = pd.concat([X_train, X], ignore_index=True)
        else:
            features = np.concatenate([np.asarray(X_train), np.asarray(X)])
        labels = np.concatenate([y_train, y])
        member = np.r_[np.ones(len(y_train), bool), np.zeros(len(y), bool)]
        return features, labels, member
    members = config.members
    if isinstance(members, str):
        if not isinstance(X, pd.DataFrame) or members not in X.columns:
            columns = list(map(str, X.columns)) if isinstance(X, pd.DataFrame) else "none"
            raise DataError(
                f"The dpaudit evaluator_config 'members' names the column {members!r}, "
                f"which data does not have. Columns: {columns}."
            )
        flags = _flags(X[members], f"The column {members!r}")
        return X.drop(columns=[members]), y, flags
    flags = _flags(members, "The dpaudit evaluator_config 'members'")
    if flags.size != y.size:
        raise DataError(
            f"The dpaudit evaluator_config 'members' has {flags.size} flags for "
            f"{y.size} rows of data; give one per row."
        )
    return X, y, flags


def _raw_model(model: Any) -> Any:
    """The model under MLflow's pyfunc wrapper (what ``mlflow.sklearn`` loads), else itself."""
    impl = getattr(model, "_model_impl", None)
    get_raw = getattr(impl, "get_raw_model", None)
    if callable(get_raw):
        return get_raw()
    return impl if impl is not None else model


def _class_outputs(model: Any, X: Any, output: str) -> tuple[np.ndarray, str, np.ndarray | None]:
    """Per-class outputs on every row: ``(values, "probabilities" | "logits", classes)``."""
    raw = _raw_model(model)
    predict_proba = getattr(raw, "predict_proba", None)
    if callable(predict_proba):
        classes = getattr(raw, "classes_", None)
        return np.asarray(predict_proba(X), dtype=np.float64), "probabilities", classes
    out = model.predict(X)
    values = np.asarray(out.to_numpy() if hasattr(out, "to_numpy") else out)
    if values.ndim == 2 and values.shape[1] >= 2 and np.issubdtype(values.dtype, np.number):
        return values.astype(np.float64), output, None
    raise DataError(
        f"The dpaudit evaluator needs per-class outputs: the model has no predict_proba "
        f"and its predict returned shape {values.shape}. Membership attacks need each "
        "row's probabilities (or logits, with evaluator_config output='logits')."
    )


def _class_indices(labels: np.ndarray, classes: np.ndarray | None, width: int) -> np.ndarray:
    """Labels as column indices of the outputs (through the estimator's ``classes_``)."""
    if classes is not None:
        index = {c.item() if isinstance(c, np.generic) else c: i for i, c in enumerate(classes)}
        missing = sorted({str(v) for v in labels.tolist() if v not in index})
        if missing:
            raise DataError(
                f"Labels {missing[:5]} are not among the model's classes {list(classes)}."
            )
        return np.asarray([index[v] for v in labels.tolist()], dtype=np.int64)
    ints = np.asarray(labels)
    if not np.issubdtype(ints.dtype, np.number) or np.any(np.mod(ints, 1) != 0):
        raise DataError(
            "Without predict_proba and classes_, the labels must be class numbers 0 .. "
            f"{width - 1} (the columns of predict's output). Got {ints[:5].tolist()}."
        )
    ints = ints.astype(np.int64)
    if ints.min() < 0 or ints.max() >= width:
        raise DataError(
            f"The labels must lie in 0 .. {width - 1} (predict returned {width} columns)."
        )
    return ints


def _toml(value: Any, where: str) -> str:
    """A TOML value (string, number, bool, list of them): their JSON spelling is TOML."""
    if isinstance(value, Mapping) or value is None:
        raise ConfigError(f"{where} must be a number, text, true/false or a list. Got {value!r}.")
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml(v, where) for v in value) + "]"
    if isinstance(value, np.generic):
        value = value.item()
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{where} must be a finite number, text or true/false. Got {value!r}."
        ) from None


def audit_text(config: EvaluatorConfig, *, scores: str, run_id: str | None = None) -> str:
    """The audit file the evaluator runs (``dpaudit run`` on it gives the same result)."""
    gate = dict(config.gate)
    lines = [
        _header(run_id),
        "[audit]",
        f"name = {_toml(config.name, 'name')}",
        'kinds = ["membership"]',
        f"seed = {_toml(config.seed, 'seed')}",
        f"confidence_level = {_toml(config.confidence_level, 'confidence_level')}",
        f"delta = {_toml(config.delta, 'delta')}",
        "",
        "[target]",
        f"scores = {_toml(scores, 'scores')}",
        'membership = "member"',
        f"membership_by_coin = {_toml(bool(config.membership_by_coin), 'membership_by_coin')}",
        "",
        "[membership]",
        'attacks = ["loss"]',
        "",
        "[report]",
        f"html = {_toml(bool(config.html), 'html')}",
        "",
        "[gate]",
    ]
    for key, value in gate.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)):
            raise ConfigError(f"The dpaudit evaluator_config 'gate' has a bad key {key!r}.")
        lines.append(f"{key} = {_toml(value, f'gate {key!r}')}")
    return "\n".join(lines) + "\n"


def _write_scores(path: Path, outputs: np.ndarray, kind: str, labels: np.ndarray,
                  member: np.ndarray) -> None:  # fmt: skip
    import pandas as pd

    column = "prob" if kind == "probabilities" else "logit"
    frame = pd.DataFrame({f"{column}_{k}": outputs[:, k] for k in range(outputs.shape[1])})
    frame.insert(0, "label", labels)
    frame["member"] = member.astype(np.int64)
    frame.to_csv(path, index=False)  # floats as repr: read back exactly


class DpauditEvaluator(ModelEvaluator):
    """MLflow's ``dpaudit`` evaluator: a membership audit of the evaluated classifier."""

    name = "dpaudit"

    @classmethod
    def can_evaluate(cls, *, model_type: Any, evaluator_config: Any, **kwargs: Any) -> bool:
        """True for a classifier whose config says which rows trained it."""
        return (
            model_type == "classifier"
            and isinstance(evaluator_config, Mapping)
            and any(evaluator_config.get(k) is not None for k in MEMBERSHIP_KEYS)
        )

    def evaluate(
        self,
        *,
        model_type: Any,
        dataset: Any,
        run_id: str,
        evaluator_config: Mapping[str, Any] | None,
        model: Any = None,
        extra_metrics: Any = None,
        custom_artifacts: Any = None,
        predictions: Any = None,
        **kwargs: Any,
    ) -> EvaluationResult:
        """Audit, log the metrics and artifacts to ``run_id``, and return them.

        Raises:
            ConfigError, DataError: a bad config, no labels, no per-class outputs, labels
                the model does not know; any error of the audit itself.
        """
        config = EvaluatorConfig.from_mapping(evaluator_config)
        if model is None:
            raise DataError(
                "The dpaudit evaluator needs the model itself (it queries its per-class "
                "outputs); it cannot audit a static predictions dataset."
            )
        if config.output_dir is not None:
            return self._audit(config, dataset, model, run_id, Path(config.output_dir))
        with tempfile.TemporaryDirectory(prefix="dpaudit-mlflow-") as folder:
            return self._audit(config, dataset, model, run_id, Path(folder))

    def _audit(
        self, config: EvaluatorConfig, dataset: Any, model: Any, run_id: str, folder: Path
    ) -> EvaluationResult:
        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        # The session (the audit engine) is imported on first use: MLflow imports every
        # registered evaluator when it lists them.
        from dpaudit.session import clear_previous, run_session

        clear_previous(folder.resolve() / "run")  # before any step that can fail
        X, labels, member = _split_features(config, dataset)
        folder.mkdir(parents=True, exist_ok=True)
        run_dir = folder / "run"
        raw = _raw_model(model)
        if _is_model_object(raw):
            # A scikit-learn estimator or torch module: the audit `dpaudit run` and
            # `audit_model` run on it (the same attacks and defaults), the model queried
            # only by the session's watched child.
            audit_file = write_model_audit(
                raw,
                as_features(X, "The audited features"),
                labels,
                member,
                folder,
                settings=ModelAuditSettings(
                    name=config.name,
                    seed=config.seed,
                    confidence_level=config.confidence_level,
                    delta=config.delta,
                    attacks=config.attacks,
                    references=config.references,
                    reference_models=config.reference_models,
                    shadow_models=config.shadow_models,
                    output=config.output,
                    membership_by_coin=config.membership_by_coin,
                    gate=config.gate,
                    report=config.html,
                    header=_header(run_id),
                ),
            )
        else:
            audit_file = self._scores_audit(config, model, X, labels, member, folder, run_id)
        run_session(audit_file, output_dir=run_dir)  # supervised; a pass is verified
        results = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
        metrics = metrics_from_results(results, prefix=config.metric_prefix)

        client = MlflowClient()
        stamp = int(1000 * time.time())
        client.log_batch(
            run_id, metrics=[Metric(k, v, stamp, 0) for k, v in sorted(metrics.items())]
        )
        logged = [run_dir / "results.json", run_dir / "report.html", audit_file]
        logged += _card_files(run_dir)
        for path in logged:
            if path.is_file():
                client.log_artifact(run_id, str(path), artifact_path=_ARTIFACT_DIR)
        root = client.get_run(run_id).info.artifact_uri.rstrip("/")
        artifacts: dict[str, Any] = {}
        for path in logged:
            if not path.is_file():
                continue
            uri = f"{root}/{_ARTIFACT_DIR}/{path.name}"
            key = f"{config.metric_prefix}{path.stem.replace('-', '_')}"
            text = path.read_text(encoding="utf-8")
            artifacts[key] = (
                JsonEvaluationArtifact(uri, json.loads(text))
                if path.suffix == ".json"
                else TextEvaluationArtifact(uri, text)
            )
        return EvaluationResult(metrics=metrics, artifacts=artifacts, run_id=run_id)

    @staticmethod
    def _scores_audit(
        config: EvaluatorConfig,
        model: Any,
        X: Any,
        labels: np.ndarray,
        member: np.ndarray,
        folder: Path,
        run_id: str,
    ) -> Path:
        """A model of another flavour (a custom pyfunc): its per-class outputs, queried in
        a watched child, written as a scores file; the loss attack is what a scores file
        supports (``dpaudit run`` on a ``[target] scores`` file runs the same)."""
        if config.attacks is not None and list(config.attacks) != ["loss"]:
            raise ConfigError(
                f"The dpaudit evaluator queries a model of this flavour "
                f"({type(_raw_model(model)).__name__}) for its outputs only: the attacks "
                f"{list(config.attacks)} need a scikit-learn estimator or a torch module "
                "(they clone or retrain it). Give attacks=['loss'] or leave attacks out."
            )
        from dpaudit.session import call_watched

        if safe_mode_active():
            raise ConfigError(
                f"safe mode ({NO_PLUGINS_ENV}=1) runs no user code, and this model's outputs "
                "come from its own predict: audit its scores file with `dpaudit run "
                "--no-plugins` instead"
            )
        outputs, kind, classes = call_watched(
            _class_outputs, model, X, config.output, what="the MLflow model's predict"
        )
        if outputs.ndim != 2 or outputs.shape[0] != labels.size:
            raise DataError(
                f"The model returned outputs of shape {outputs.shape} for {labels.size} rows."
            )
        index = _class_indices(labels, classes, outputs.shape[1])
        # the files written below go into a fresh folder: none already there is overwritten
        inputs = Path(tempfile.mkdtemp(prefix="audit-", dir=folder))
        _write_scores(inputs / "scores.csv", outputs, kind, index, member)
        audit_file = inputs / "audit.toml"
        audit_file.write_text(audit_text(config, scores="scores.csv", run_id=run_id))
        return audit_file


def _header(run_id: str | None) -> str:
    return (
        "# Written by dpaudit's MLflow evaluator"
        + (f" for MLflow run {run_id}" if run_id else "")
        + "; `dpaudit run` on this file reruns the audit."
    )


def _is_model_object(raw: Any) -> bool:
    """A scikit-learn estimator or a torch module: what a brought-model audit loads,
    clones and retrains like ``dpaudit run``."""
    torch = sys.modules.get("torch")  # a torch module exists only once torch is imported
    return is_estimator(raw) or (torch is not None and isinstance(raw, torch.nn.Module))


def _card_files(run_dir: Path) -> list[Path]:
    """The run's model card and registry record (``dpaudit card RUN_DIR``), written into
    the run directory after the run is verified against its stored units."""
    from dpaudit.card import card_for_run

    return list(card_for_run(run_dir))
