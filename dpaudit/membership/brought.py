"""Targets brought by the user: model files, factories and score files, audited for membership.

``[target]`` names what to audit instead of a model dpaudit trains itself (see
:class:`~dpaudit.config.TargetSection`):

- a model file: safetensors weights of the ``[model]`` architecture (or of the module a
  factory builds), a ``torch.export`` program, a TorchScript archive, a scikit-learn model
  saved with skops, an ONNX model, or a pickle (refused unless ``allow_pickle = true``);
- a factory ``"pkg.module:function"`` returning a torch module, a scikit-learn estimator
  or a :class:`~dpaudit.models.ModelStack`;
- a scores file of per-example rows, for systems dpaudit cannot run.

A model is wrapped as a :class:`LoadedTarget`, a one-model stack with the ``logits``,
``probabilities`` and ``losses`` that attacks query (black-box: only its outputs on the
audited rows are read). Membership of the audited rows is given by the user. Shadow and
reference models (LiRA, RMIA) are trained as ``[target] references`` says:

- ``"recipe"`` (default): torch models of the ``[model]`` / ``[training]`` recipe on
  standardised features, so their strength depends on how well that recipe matches the
  one that trained the target;
- ``"clone"``: for a scikit-learn estimator, ``sklearn.base.clone`` of it (the same
  hyper-parameters, none of its fitted state) fitted on each reference split, as sacroml
  and the reference LiRA code do (Carlini et al. 2022, arXiv 2112.03570v2, §IV: shadow
  models trained like the target);
- ``"pkg.module:function"``: the user's ``function(X, y, *, seed)`` that builds and trains
  a model as the target was (e.g. a torch factory and its training loop).

Models trained like the target see its raw ``[data]`` features (after ``[target]
preprocess``, when given, as the target does), and every reference model is queried through
the same :class:`LoadedTarget` path as the target (:func:`load_like`).

With membership 1/0 on every row (a plain train/test split), ``[target] population_share``
of the non-members becomes the attacker's population (:func:`load_byo_data`).

This module loads: the model, ``[data]`` and the user's membership, a scores file, what
``[target] references`` names; :func:`preflight` checks it all before any work starts.
The work units that train the reference models and score the target are
:mod:`dpaudit.membership.brought_units`.

Nothing is unpickled unless the audit file says ``allow_pickle = true``: safetensors,
ONNX and skops files hold no code, ``torch.export`` and TorchScript archives are read by
torch's own loaders, and skops loads only the types it trusts by default plus
``trusted_types``.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import math
import pickle
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from dpaudit.attacks.base import true_class_loss
from dpaudit.data import (
    Dataset,
    check_archive,
    check_file,
    library_reason,
    load_dataset,
    read_table,
    split_population,
)
from dpaudit.errors import ConfigError, DataError, DpauditError
from dpaudit.membership.schema import population_share, population_shortfall
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.plugins import load_plugin
from dpaudit.sections import PLUGIN_NAME, ByoSpec

__all__ = [
    "ByoData",
    "ByoSpec",
    "LoadedTarget",
    "check_population",
    "load_byo_data",
    "load_like",
    "load_preprocess",
    "load_target",
    "preflight",
    "read_scores",
    "reference_source",
]

# A probability of exactly 0 has log −inf; the smallest positive float64 keeps the
# log-probabilities finite (log(tiny) ≈ −708) and changes no probability above it.
_TINY = float(np.finfo(np.float64).tiny)


# ------------------------------------------------------------------------------ models


@dataclass(frozen=True, repr=False)
class LoadedTarget:
    """A brought model seen as a one-model stack (``K = 1``), black-box.

    Attributes:
        predict: ``(m, d) float32 → (m, C)`` raw outputs of the model.
        num_features: d, the input width the model expects.
        num_classes: C.
        output: whether ``predict`` returns ``"logits"`` or ``"probabilities"``.
        description: where it came from (format, file, type) for the report.
        estimator: the scikit-learn estimator itself when the target is one (what
            ``[target] references = "clone"`` clones), else ``None``.
        preprocess: ``[target] preprocess`` as a function ``(m, d) → (m, d')`` applied to
            every input before ``predict`` (:func:`load_preprocess`), or ``None``.
    """

    predict: Callable[[np.ndarray], np.ndarray]
    num_features: int
    num_classes: int
    output: str = "logits"
    description: dict[str, Any] = field(default_factory=dict)
    estimator: Any = None
    preprocess: Callable[[np.ndarray], np.ndarray] | None = None

    num_models = 1

    def _logits64(self, X: Any) -> np.ndarray:
        x = np.asarray(X.detach().cpu() if isinstance(X, torch.Tensor) else X, np.float32)
        if x.ndim != 2 or x.shape[1] != self.num_features:
            raise DataError(
                f"The 'X' parameter must have shape (m, {self.num_features}). "
                f"Got {x.shape} instead."
            )
        model_input = x if self.preprocess is None else self.preprocess(x)
        out = np.asarray(self.predict(model_input), dtype=np.float64)
        out = _two_columns(out, self.output) if out.ndim == 1 or out.shape[-1] == 1 else out
        if out.shape != (x.shape[0], self.num_classes):
            raise DataError(
                f"The target returned outputs of shape {out.shape}; expected "
                f"({x.shape[0]}, {self.num_classes}) for {self.num_classes} classes."
            )
        if self.output == "probabilities":
            # log p is a valid logit vector: softmax(log p) = p (rows summing to 1).
            out = np.log(np.clip(out, _TINY, None))
        if not np.all(np.isfinite(out)):
            raise DataError("The target returned non-finite outputs.")
        return out

    def logits(self, X: Any) -> torch.Tensor:
        """``(1, m, C)`` float64 logits (log-probabilities for probability outputs)."""
        return torch.from_numpy(self._logits64(X))[None]

    def probabilities(self, X: Any) -> torch.Tensor:
        return torch.softmax(self.logits(X), dim=-1)

    def losses(self, X: Any, y: Any) -> torch.Tensor:
        """``(1, m)`` cross-entropy losses −log p_y."""
        logits = self.logits(X)
        labels = torch.as_tensor(np.asarray(y, dtype=np.int64))[None, :, None]
        return (torch.logsumexp(logits, -1) - logits.gather(-1, labels)[..., 0]).to(torch.float64)

    def __repr__(self) -> str:
        return (
            f"LoadedTarget({self.description.get('format', 'model')!r}, num_features="
            f"{self.num_features}, num_classes={self.num_classes}, output={self.output!r})"
        )


def _two_columns(out: np.ndarray, output: str) -> np.ndarray:
    """A single-output binary model as two classes: [0, z] for a logit z, [1 − p, p]."""
    z = out.reshape(-1)
    if output == "probabilities":
        return np.stack([1.0 - z, z], axis=1)
    return np.stack([np.zeros_like(z), z], axis=1)


def _torch_predict(module: Any) -> Callable[[np.ndarray], np.ndarray]:
    # Dropout / batch-norm in inference mode; torch.export modules have no train/eval
    # switch (they run as they were exported).
    with contextlib.suppress(AttributeError, NotImplementedError):
        module.eval()

    def predict(x: np.ndarray) -> np.ndarray:
        dtype = torch.float32
        params = getattr(module, "parameters", None)
        if callable(params):
            first = next(iter(params()), None)
            dtype = first.dtype if first is not None else dtype
        with torch.no_grad():
            return module(torch.from_numpy(x).to(dtype)).detach().cpu().double().numpy()

    return predict


def _sklearn_predict(estimator: Any) -> Callable[[np.ndarray], np.ndarray]:
    if not hasattr(estimator, "predict_proba"):
        raise DpauditError(
            f"The scikit-learn model {type(estimator).__name__} has no predict_proba; "
            "membership attacks need per-class probabilities."
        )

    def predict(x: np.ndarray) -> np.ndarray:
        return np.asarray(estimator.predict_proba(x.astype(np.float64)), dtype=np.float64)

    return predict


def _from_object(obj: Any, *, output: str, description: dict[str, Any]) -> tuple[Any, str]:
    """A (predict, output) pair for a torch module, ModelStack or scikit-learn estimator."""
    if isinstance(obj, ModelStack):
        if obj.num_models != 1:
            raise DpauditError(f"A target ModelStack must hold one model. Got {obj.num_models}.")
        description["type"] = repr(obj)

        def predict(x: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return obj.logits(x)[0].detach().double().numpy()

        return predict, "logits"
    if isinstance(obj, torch.nn.Module):
        description["type"] = type(obj).__name__
        return _torch_predict(obj), output
    if hasattr(obj, "predict_proba"):
        description["type"] = f"{type(obj).__module__}.{type(obj).__qualname__}"
        return _sklearn_predict(obj), "probabilities"
    raise DpauditError(
        f"A target must be a torch module, a dpaudit ModelStack or a scikit-learn estimator "
        f"with predict_proba. Got {type(obj).__name__}."
    )


def _import_factory(spec: str, base_dir: Path, *, key: str = "factory") -> Callable[..., Any]:
    return load_plugin(spec, base_dir=base_dir, what=f"[target] {key}")


# Each format's name in messages, and how such a file is written.
_FORMATS = {
    "safetensors": ("safetensors", "safetensors.torch.save_file"),
    "torch-export": ("torch.export", "torch.export.save"),
    "torchscript": ("TorchScript", "torch.jit.save"),
    "skops": ("skops", "skops.io.dump"),
    "onnx": ("ONNX", "torch.onnx.export or skl2onnx"),
    "pickle": ("pickle", "pickle.dump"),
}


def _unreadable(path: Path, fmt: str, exc: BaseException) -> DataError:
    """The one-line error for a model file its format's loader cannot read."""
    name, saved_with = _FORMATS[fmt]
    return DataError(
        f"The model file {str(path)!r} is not a readable {name} file ({library_reason(exc)}); "
        f"it may be truncated or corrupt: save it again with {saved_with}, or set "
        "[target] format if it is in another format."
    )


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """Silence a library's logger below ERROR for one call.

    ``torch.export.load`` logs a failed read at WARNING with its whole traceback before it
    raises; the error it raises is reported in one line instead, as the CLI promises.
    """
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _optional(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DpauditError(
            f"Loading this target needs {module.split('.')[0]}, which is not installed; "
            f'install it with: pip install "dpaudit[{extra}]"'
        ) from None


def _load_safetensors(
    path: Path, config: ByoSpec, num_features: int, num_classes: int, description: dict[str, Any]
) -> Any:
    st = _optional("safetensors.torch", "byo")
    safetensors = _optional("safetensors", "byo")
    try:
        state = st.load_file(str(path))
    except safetensors.SafetensorError as exc:  # a bad header, a truncated or garbage file
        raise _unreadable(path, "safetensors", exc) from None
    t = config.target
    if t.factory is not None:
        module = _import_factory(t.factory, Path(config.base_dir))()
        try:
            module.load_state_dict(state)
        except (RuntimeError, AttributeError) as exc:
            raise DataError(
                f"The weights in {str(path)!r} do not fit the factory's module: {exc}"
            ) from None
        return module
    m = config.model
    spec = ModelSpec(kind=m.kind, hidden=tuple(m.hidden), activation=m.activation)
    # Accept a plain module's state dict (weights (out, in)) or a one-model stack's ((1, out, in)).
    stacked = {
        k: (v[None] if (k.endswith(".weight") and v.dim() == 2) or v.dim() == 1 else v)
        for k, v in state.items()
    }
    stack = ModelStack.from_state_dict(spec, stacked)
    widths = tuple(int(w.shape[1]) for w in stack.weights[:-1])
    if widths != spec.hidden_widths or len(state) != 2 * len(stack.weights):
        raise DataError(
            f"The weights in {str(path)!r} have hidden widths {widths} ({len(state)} tensors); "
            f"[model] says kind={spec.kind!r}, hidden={list(spec.hidden_widths)}."
        )
    if stack.num_features != num_features or stack.num_classes != num_classes:
        raise DataError(
            f"The weights in {str(path)!r} make a model with {stack.num_features} inputs and "
            f"{stack.num_classes} classes; [data] has {num_features} features and "
            f"{num_classes} classes. Check [model] and [data] features."
        )
    description["architecture"] = repr(spec)
    return stack


def _load_skops(path: Path, trusted: list[str], description: dict) -> Any:
    sio = _optional("skops.io", "byo")
    check_archive(path, "skops model file")
    try:
        found = sio.get_untrusted_types(file=str(path))
    # A skops file is a zip archive holding schema.json: a truncated or foreign file is
    # not a zip (BadZipFile); another zip lacks schema.json (KeyError from ZipFile.read)
    # or holds a broken one (JSONDecodeError, a ValueError). KeyError and ValueError are
    # caught only around this one call, which reads nothing but the archive's schema.
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise _unreadable(path, "skops", exc) from None
    untrusted = sorted(set(found) - set(trusted))
    if untrusted:
        raise DpauditError(
            f"The skops file {str(path)!r} holds types skops does not trust by default: "
            f"{', '.join(untrusted)}. Loading a type runs its code; if you trust them, list "
            f"them in [target] trusted_types."
        )
    description["trusted_types"] = sorted(trusted)
    return sio.load(str(path), trusted=list(trusted) or None)


def _load_onnx(path: Path, description: dict) -> Callable[[np.ndarray], np.ndarray]:
    ort = _optional("onnxruntime", "byo")
    state = importlib.import_module("onnxruntime.capi.onnxruntime_pybind11_state")
    # ONNX Runtime's errors share no base class but Exception: a truncated or garbage file
    # is InvalidProtobuf, an empty one InvalidArgument, a broken graph InvalidGraph or Fail.
    errors = (state.InvalidProtobuf, state.InvalidArgument, state.InvalidGraph, state.Fail,
              state.NoModel, state.NoSuchFile, state.RuntimeException)  # fmt: skip
    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except errors as exc:
        raise _unreadable(path, "onnx", exc) from None
    inp = session.get_inputs()[0]
    dtype = np.float64 if inp.type == "tensor(double)" else np.float32
    description["onnx_input"] = inp.name

    def predict(x: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(None, {inp.name: x.astype(dtype)})[0], np.float64)

    return predict


def load_target(
    config: ByoSpec, *, num_features: int, num_classes: int
) -> tuple[LoadedTarget, list[str]]:
    """Load ``[target] path`` / ``factory`` as a :class:`LoadedTarget`.

    Args:
        config: The audit configuration (its ``[target]`` names the model).
        num_features: d, the width of ``[data]``'s encoded features.
        num_classes: C, the number of classes of ``[data]``'s label.

    Returns:
        The target, and warnings the report must carry (e.g. that a pickle was loaded).

    Raises:
        DpauditError: A missing model file (or a folder), a file its format's loader
            cannot read (truncated, corrupt, another format), a refused pickle, an untrusted
            skops type, or a model that does not fit the data.
    """
    t = config.target
    warnings: list[str] = []
    fmt = t.model_format()
    description: dict[str, Any] = {"format": fmt or "factory", "output": t.output}
    output: str = t.output
    obj: Any = None
    if t.path is None:
        assert t.factory is not None  # the schema requires path or factory here
        obj = _import_factory(t.factory, Path(config.base_dir))()
        description["factory"] = t.factory
        predict, output = _from_object(obj, output=output, description=description)
    else:
        path = check_file(config.resolve(t.path), "model file")
        description["path"] = t.path
        if fmt == "pickle":
            if not t.allow_pickle:  # also refused by the schema; kept for API callers
                raise DpauditError(
                    f"{str(path)!r} is a pickle file; set [target] allow_pickle = true to load it."
                )
            warnings.append(
                f"The target {t.path!r} was unpickled because [target] allow_pickle = true: "
                "unpickling runs any code the file holds; audit only files you trust."
            )
            with path.open("rb") as f:
                try:
                    obj = pickle.load(f)  # allowed explicitly by the audit file
                except (pickle.UnpicklingError, EOFError) as exc:  # truncated or not a pickle
                    raise _unreadable(path, "pickle", exc) from None
            predict, output = _from_object(obj, output=output, description=description)
        elif fmt == "safetensors":
            obj = _load_safetensors(path, config, num_features, num_classes, description)
            predict, output = _from_object(obj, output=output, description=description)
        elif fmt == "torch-export":
            check_archive(path, "torch.export model file")
            try:
                with _quiet("torch.export"):
                    program = torch.export.load(str(path))
            # A .pt2 archive is a zip: a truncated or garbage file is not one (BadZipFile);
            # a zip of another kind (a TorchScript archive) fails to deserialize with a
            # RuntimeError, torch's only error type for it, caught around this call alone.
            except (zipfile.BadZipFile, RuntimeError) as exc:
                raise _unreadable(path, fmt, exc) from None
            predict = _torch_predict(program.module())
            description["type"] = "torch.export.ExportedProgram"
        elif fmt == "torchscript":
            check_archive(path, "TorchScript model file")
            try:
                module = torch.jit.load(str(path), map_location="cpu")
            # torch's archive reader raises RuntimeError ("PytorchStreamReader failed ...")
            # for a truncated, garbage or foreign file; caught around this call alone.
            except RuntimeError as exc:
                raise _unreadable(path, fmt, exc) from None
            predict = _torch_predict(module)
            description["type"] = "torch.jit.ScriptModule"
        elif fmt == "skops":
            obj = _load_skops(path, list(t.trusted_types), description)
            predict, output = _from_object(obj, output=output, description=description)
        else:  # onnx
            predict = _load_onnx(path, description)
    description["output"] = output
    estimator = obj if _is_estimator(obj) else None
    preprocess = load_preprocess(config)
    if preprocess is not None:
        description["preprocess"] = t.preprocess
    target = LoadedTarget(
        predict, num_features, num_classes, output, description, estimator, preprocess
    )
    return target, warnings


def load_preprocess(config: ByoSpec) -> Callable[[np.ndarray], np.ndarray] | None:
    """``[target] preprocess`` as a checked function from ``[data]`` rows to model inputs.

    A path is a fitted scikit-learn transformer saved with skops (its ``transform`` is
    called; only skops' trusted types and ``[target] trusted_types`` are loaded); a
    ``"pkg.module:function"`` is called as ``function(X)``. Either receives the ``(m, d)``
    float64 features a brought model is otherwise given and must return ``m`` rows of
    finite numbers (a sparse result is made dense).

    Returns:
        The function, or ``None`` when ``[target] preprocess`` is not given.

    Raises:
        DpauditError: a missing or unreadable skops file, an untrusted type, an object
            without ``transform``, or a function that cannot be imported.
    """
    t = config.target
    if t.preprocess is None:
        return None
    name = t.preprocess
    transform: Callable[[np.ndarray], Any]
    if PLUGIN_NAME.fullmatch(name):
        transform = load_plugin(name, base_dir=config.base_dir, what="[target] preprocess")
    else:
        path = check_file(config.resolve(name), "preprocess file")
        obj = _load_skops(path, list(t.trusted_types), {})
        if not callable(getattr(obj, "transform", None)):
            raise DpauditError(
                f"[target] preprocess {name!r} holds a {type(obj).__name__}, which has no "
                "transform method; save a fitted scikit-learn transformer (a scaler, a "
                "ColumnTransformer, a Pipeline of transformers)."
            )
        transform = obj.transform

    def preprocess(x: np.ndarray) -> np.ndarray:
        out = transform(np.asarray(x, dtype=np.float64))
        if hasattr(out, "toarray"):  # a sparse matrix (one-hot encoders)
            out = out.toarray()
        out = np.asarray(out, dtype=np.float64)
        if out.ndim != 2 or out.shape[0] != x.shape[0]:
            raise DataError(
                f"[target] preprocess {name!r} turned {x.shape[0]} rows of [data] into an "
                f"array of shape {out.shape}; it must return one row per row (2 dimensions)."
            )
        if not np.all(np.isfinite(out)):
            raise DataError(
                f"[target] preprocess {name!r} returned {int((~np.isfinite(out)).sum())} "
                "non-finite values."
            )
        return out

    return preprocess


def _is_estimator(obj: Any) -> bool:
    """A scikit-learn estimator (not a torch module or a ModelStack) with predict_proba."""
    if obj is None or isinstance(obj, torch.nn.Module | ModelStack):
        return False
    return hasattr(obj, "predict_proba") and hasattr(obj, "get_params")


def preflight(spec: ByoSpec) -> None:
    """Check a brought target before any work starts, by loading all of it once.

    A scores file is read and checked whole (columns, numbers, members and non-members).
    Otherwise ``[data]`` and the membership column or index file are loaded (a train/test
    split's population set aside), every attack's need of population rows is checked
    (:func:`check_population`), the model file or factory and ``[target] preprocess`` are
    loaded (models are small), and both are run on two audited rows, so a model that does
    not take ``[data]``'s features fails here rather than in a work unit.
    ``[target] references`` is checked too (a clone needs a scikit-learn estimator; a
    training function must import).

    Args:
        spec: The brought target's spec (``dpaudit.membership.kind.byo_spec``).

    Raises:
        DpauditError: With one line naming the file and what to do.
    """
    if spec.target.scores is not None:
        read_scores(spec)
        return
    data = load_byo_data(spec)
    check_population(spec, data, spec.attacks)
    ds = data.dataset
    target, _ = load_target(spec, num_features=ds.num_features, num_classes=ds.num_classes)
    where = spec.target.path or spec.target.factory
    rows = ds.X[data.audited[:2]]
    if target.preprocess is not None:
        try:
            target.preprocess(rows)
        except DpauditError:
            raise
        # The user's transformer or function: whatever this one trial call raises means
        # it does not take [data]'s rows (as for the model below).
        except Exception as exc:
            raise DataError(
                f"[target] preprocess {spec.target.preprocess!r} failed on 2 rows of [data] "
                f"({ds.num_features} encoded features): {type(exc).__name__}: "
                f"{library_reason(exc)}. Check [data] features."
            ) from None
    try:
        target.logits(rows)
    except DpauditError:
        raise
    # The model is the user's: a torch module, an estimator or an ONNX graph reports an
    # input it cannot take with its own library's exception (torch's RuntimeError,
    # scikit-learn's ValueError, ONNX Runtime's InvalidArgument), so anything this one
    # trial call raises means the model does not take [data]'s rows.
    except Exception as exc:
        raise DataError(
            f"The target {where!r} failed on 2 rows of [data] ({ds.num_features} encoded "
            f"features, {ds.num_classes} classes): {type(exc).__name__}: "
            f"{library_reason(exc)}. Check [data] label and features"
            + (" and [target] preprocess." if spec.target.preprocess else ".")
        ) from None
    reference_source(spec, target)  # 'clone' of a non-estimator, an unimportable function


def reference_source(config: ByoSpec, target: LoadedTarget) -> Any:
    """What ``[target] references`` names for a brought target, loaded: ``None`` for
    ``"recipe"``, the target's scikit-learn estimator for ``"clone"``, the user's training
    function for ``"pkg.module:function"`` (the trainers that use them are
    :func:`dpaudit.membership.brought_units.reference_trainer`).

    Raises:
        ConfigError: ``"clone"`` for a target that is not a scikit-learn estimator, or a
            training function that cannot be imported.
    """
    references = config.target.references
    if references == "recipe":
        return None
    if references == "clone":
        if target.estimator is None:
            what = target.description.get("type") or target.description.get("format")
            raise ConfigError(
                f"[target] references = 'clone' clones a scikit-learn estimator "
                f"(sklearn.base.clone); the target is {what}. For a torch model give "
                "references = 'pkg.module:function', a function (X, y, *, seed) that "
                "builds and trains a model as yours was."
            )
        return target.estimator
    return _import_factory(references, Path(config.base_dir), key="references")


def load_like(model: Any, target: LoadedTarget, *, source: str) -> LoadedTarget:
    """A trained reference model wrapped as the target is (same outputs, same width)."""
    description: dict[str, Any] = {"format": "reference", "source": source}
    try:
        predict, output = _from_object(model, output=target.output, description=description)
    except DpauditError as exc:
        raise DpauditError(f"[target] references = {source!r}: {exc}") from None
    estimator = model if _is_estimator(model) else None
    # Trained on the target's preprocessed features: queried through the same transform.
    return LoadedTarget(
        predict,
        target.num_features,
        target.num_classes,
        output,
        description,
        estimator,
        target.preprocess,
    )


# -------------------------------------------------------------------------------- data


@dataclass(frozen=True, repr=False)
class ByoData:
    """The ``[data]`` rows of a brought target, split by the user's membership.

    Attributes:
        dataset: the encoded dataset (membership column removed), not standardised: the
            target receives these features as they are.
        audited: ``(m,)`` row indices whose membership is known.
        membership: ``(m,)`` bool, True for rows that trained the target.
        population: ``(P,)`` row indices of the attacker's own data: the rows left empty
            (membership unknown), or, for a train/test split, the non-members
            ``[target] population_share`` set aside (:func:`dpaudit.data.split_population`).
        mean, scale: standardisation fitted on the population (on the audited rows when the
            population has fewer than 2 rows), used only for reference models' inputs.
        split: how a train/test split's population was drawn (``share``, ``seed``,
            ``non_members``, ``population``, ``set_aside`` members), or ``None`` when the
            rows left empty are the population.
    """

    dataset: Dataset
    audited: np.ndarray
    membership: np.ndarray
    population: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    split: dict[str, Any] | None = None

    @property
    def held_out(self) -> np.ndarray | None:
        """Rows known never to have trained the target (a split's population), or ``None``
        when the population's membership is unknown."""
        return None if self.split is None else self.population

    def __repr__(self) -> str:
        return (
            f"ByoData(dataset={self.dataset.name!r}, audited={self.audited.size}, "
            f"members={int(self.membership.sum())}, population={self.population.size})"
        )


def _as_flags(values: Any, where: str) -> np.ndarray:
    """1/0/true/false (and empty) → float array of 1.0, 0.0 and NaN."""
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        s = str(v).strip().lower()
        if s in ("1", "1.0", "true", "yes"):
            out[i] = 1.0
        elif s in ("0", "0.0", "false", "no"):
            out[i] = 0.0
        elif s != "":
            raise DataError(f"{where} must hold 1/0 or true/false (empty: not audited). Got {v!r}.")
    return out


def _read_table(path: Path, what: str) -> Any:
    """A CSV or (by its suffix) Parquet table with rows, or a one-line DataError."""
    parquet = path.suffix.lower() in (".parquet", ".pq")
    return read_table(path, fmt="parquet" if parquet else "csv", what=what)


def load_byo_data(config: ByoSpec) -> ByoData:
    """Load ``[data]`` and the user's membership of its rows.

    Raises:
        DataError: An unknown membership column, a missing, unreadable or empty data or
            index file, bad flags, or no member / no non-member among the audited rows.
    """
    d, t = config.data, config.target
    if d is None:
        raise DataError("A brought target's membership audit needs a [data] table.")
    membership = t.membership or "member"
    index_file = config.resolve(membership)
    source, _, rest = d.dataset.partition(":")
    features = d.features
    flags: np.ndarray
    if membership.endswith((".csv", ".parquet", ".pq")):
        table = _read_table(index_file, "membership index file")
        if not {"row", "member"} <= set(table.columns):
            raise DataError(
                f"The membership index file {membership!r} needs columns 'row' and 'member'. "
                f"Got {', '.join(map(str, table.columns))}."
            )
        where = f"The membership index file {membership!r} column 'row'"
        rows = _integers(table["row"], f"{where} must hold 0-based row numbers of [data]")
        dataset = load_dataset(
            d.dataset, label=d.label, sensitive=d.sensitive, features=features,
            base_dir=config.base_dir,
        )  # fmt: skip
        if rows.size and (rows.min() < 0 or rows.max() >= dataset.num_rows):
            raise DataError(
                f"The membership index file {membership!r} names rows outside "
                f"0..{dataset.num_rows - 1}."
            )
        if np.unique(rows).size != rows.size:
            raise DataError(f"The membership index file {membership!r} lists a row twice.")
        flags = np.full(dataset.num_rows, np.nan)
        flags[rows] = _as_flags(list(table["member"]), f"{membership!r} column 'member'")
    else:
        if source not in ("csv", "parquet"):
            raise DataError(
                f"[target] membership = {membership!r} is neither a CSV/Parquet index file "
                f"nor a column: {d.dataset!r} is a built-in dataset; give an index file with "
                "columns 'row' and 'member'."
            )
        frame = _read_table(config.resolve(rest), "data file")
        if membership not in frame.columns:
            raise DataError(
                f"[target] membership = {membership!r} is not a column of {d.dataset!r} nor "
                f"an index file. Columns: {', '.join(map(str, frame.columns))}."
            )
        if features is not None and membership in features:
            raise DataError(f"The membership column {membership!r} cannot be a feature.")
        dataset = load_dataset(
            d.dataset, label=d.label, sensitive=d.sensitive, features=features,
            exclude=(membership,), base_dir=config.base_dir,
        )  # fmt: skip
        flags = _as_flags(list(frame[membership]), f"The column {membership!r}")
    audited = np.flatnonzero(~np.isnan(flags))
    member = flags[audited] == 1.0
    _check_both(member, audited.size, "")
    population = np.flatnonzero(np.isnan(flags))
    split = None
    share = population_share(t, config.attacks)
    if population.size and t.population_share is not None:
        raise ConfigError(
            f"[target] population_share sets a train/test split's held-out rows aside for "
            f"the attacker, but {membership!r} already leaves {population.size} rows of "
            "[data] without a membership (the attacker's population): remove "
            "population_share, or give every row 1 or 0."
        )
    if not population.size and share:
        drawn = split_population(
            member, share=share, seed=config.seed, keep_coins_fair=t.membership_by_coin
        )
        population = audited[drawn.population]
        split = {
            "share": share,
            "seed": config.seed,
            "non_members": int((~member).sum()),
            "population": int(drawn.population.size),
            "set_aside": int(drawn.set_aside.size),
        }
        audited, member = audited[drawn.audited], member[drawn.audited]
        _check_both(member, audited.size, f" after [target] population_share = {share:g}")
    fit_rows = population if population.size >= 2 else audited
    X = dataset.X[fit_rows].astype(np.float64)
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)  # constant columns: centred, not scaled
    return ByoData(dataset, audited, member, population, mean, scale, split)


def _check_both(member: np.ndarray, audited: int, when: str) -> None:
    if not member.any() or member.all():
        raise DataError(
            f"The audited rows need members and non-members; got {int(member.sum())} members "
            f"of {audited} audited rows{when}."
        )


def check_population(config: ByoSpec, data: ByoData, attacks: tuple[str, ...]) -> None:
    """Refuse attacks that need more of the attacker's population than ``data`` leaves,
    with the one message ``dpaudit validate`` and ``dpaudit run`` both give.

    Raises:
        DataError: the first attack short of population rows, and what to change.
    """
    problem = population_shortfall(attacks, data.population.size)
    if problem is None:
        return
    t = config.target
    if data.split is not None:
        s = data.split
        hint = (
            f"[target] population_share = {s['share']:g} set {s['population']} of the "
            f"{s['non_members']} non-member rows aside for it: raise population_share, or "
            "hold out more rows."
        )
    elif t.population_share == 0.0:
        hint = (
            "[target] population_share = 0 keeps every row audited: raise it to set a "
            "share of the non-member rows aside for the attacker."
        )
    else:
        hint = (
            "Leave some [data] rows' membership empty (not audited) so the attacker has "
            "data of its own; for a train/test split (every row 1 or 0) "
            "[target] population_share sets a share of the non-members aside instead."
        )
    raise DataError(f"{problem} {hint} Or list attacks that need no population (loss, lira).")


# ------------------------------------------------------------------------------ scores


def read_scores(config: ByoSpec) -> tuple[np.ndarray, np.ndarray, str]:
    """The per-example losses and membership in ``[target] scores``.

    The file holds one row per audited example: the membership column (``[target]
    membership``, default ``"member"``) and a ``loss`` column, or per-class
    ``prob_<k>`` / ``logit_<k>`` columns with a ``label`` column. Rows with an empty
    membership are skipped.

    Returns:
        ``(losses, membership, source)`` with source ``"loss"``, ``"probabilities"`` or
        ``"logits"``.

    Raises:
        DataError: A missing, unreadable or empty file, a missing or non-numeric column,
            labels out of range, non-finite losses, or no member / no non-member.
    """
    t = config.target
    if t.scores is None:
        raise DataError("[target] names no scores file.")
    frame = _read_table(config.resolve(t.scores), "scores file")
    column = t.membership or "member"
    if column not in frame.columns:
        raise DataError(
            f"The scores file {t.scores!r} has no membership column {column!r}. "
            f"Columns: {', '.join(map(str, frame.columns))}."
        )
    flags = _as_flags(list(frame[column]), f"The column {column!r}")
    keep = ~np.isnan(flags)
    frame = frame[keep]
    membership = flags[keep] == 1.0
    if not membership.any() or membership.all():
        raise DataError(
            f"The scores file {t.scores!r} needs both members and non-members; got "
            f"{int(membership.sum())} members of {membership.size} rows."
        )
    probs = sorted((c for c in frame.columns if str(c).startswith("prob_")), key=_class_index)
    logits = sorted((c for c in frame.columns if str(c).startswith("logit_")), key=_class_index)
    if "loss" in frame.columns:
        _check_numeric(frame, ["loss"], t.scores)
        losses, source = np.asarray(frame["loss"], dtype=np.float64), "loss"
    elif probs or logits:
        if "label" not in frame.columns:
            raise DataError(f"The scores file {t.scores!r} needs a 'label' column.")
        cols, source = (logits, "logits") if logits else (probs, "probabilities")
        _check_numeric(frame, cols, t.scores)
        where = f"The scores file {t.scores!r} column 'label'"
        y = _integers(frame["label"], f"{where} must hold class numbers 0, 1, ...")
        values = np.asarray(frame[cols], dtype=np.float64)
        if y.min() < 0 or y.max() >= len(cols):
            raise DataError(f"The scores file's labels must lie in 0..{len(cols) - 1}.")
        if source == "probabilities":
            values = np.log(np.clip(values, _TINY, None))
        losses = true_class_loss(values[None], y)[0]
    else:
        raise DataError(
            f"The scores file {t.scores!r} needs a 'loss' column, or 'prob_<k>' or "
            "'logit_<k>' columns with a 'label' column."
        )
    if not np.all(np.isfinite(losses)):
        raise DataError(f"The scores file {t.scores!r} has {int((~np.isfinite(losses)).sum())} "
                        "non-finite losses.")  # fmt: skip
    return losses, membership, source


def _check_numeric(frame: pd.DataFrame, columns: list[Any], scores: str) -> None:
    for col in columns:
        series = frame[col]
        if not pd.api.types.is_numeric_dtype(series):
            text = series[pd.to_numeric(series, errors="coerce").isna()]
            example = f" (e.g. {text.iloc[0]!r})" if len(text) else ""
            raise DataError(
                f"The scores file {scores!r} column {col!r} must hold numbers; it holds "
                f"text{example}."
            )


def _integers(series: pd.Series, must: str) -> np.ndarray:
    """A column of whole numbers (``3`` or ``3.0``) as int64, else ``must`` and an example."""
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values) | (np.mod(values, 1.0) != 0)
    if bad.any():
        value = series.iloc[int(np.argmax(bad))]
        raise DataError(
            f"{must}. Got {value.item() if isinstance(value, np.generic) else value!r}."
        )
    return values.astype(np.int64)


def _class_index(name: Any) -> int:
    try:
        return int(str(name).rsplit("_", 1)[1])
    except ValueError:
        raise DataError(f"Cannot read a class index from the column {name!r}.") from None
