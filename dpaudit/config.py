"""The audit file: its schema (pydantic, unknown keys are errors) and loading from TOML.

An audit file is a TOML document with an ``[audit]`` table naming the audit and its kinds,
one table per kind (``[mechanism]``, ...), and the shared ``[gate]``, ``[execution]`` and
``[report]`` tables. Paths resolve relative to the audit file. Any mistake is a single
:class:`~dpaudit.errors.ConfigError` line naming the key path, the value and what is allowed.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from dpaudit.canary_audit import DpsgdSection
from dpaudit.errors import ConfigError

AuditKind = Literal["mechanism", "membership", "attribute", "dpsgd"]
BUILTIN_MECHANISMS = ("laplace", "gaussian", "randomized-response")

Probability = Annotated[float, Field(gt=0.0, lt=1.0)]
Delta = Annotated[float, Field(ge=0.0, lt=1.0)]
Positive = Annotated[float, Field(gt=0.0)]


class _Table(BaseModel):
    """A TOML table: unknown keys are errors, values are frozen once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditSection(_Table):
    name: Annotated[str, Field(min_length=1, max_length=200)]
    kinds: Annotated[list[AuditKind], Field(min_length=1)]
    description: str = ""
    seed: Annotated[int, Field(ge=0)] = 0
    confidence_level: Probability = 0.95
    delta: Delta = 1e-5


class ClaimSection(_Table):
    """The privacy claimed: ε (with δ) and/or μ. Omitted: the mechanism's own guarantee."""

    epsilon: Positive | None = None
    delta: Delta = 0.0
    mu: Positive | None = None

    @model_validator(mode="after")
    def _something_claimed(self) -> ClaimSection:
        if self.epsilon is None and self.mu is None:
            raise ValueError("a claim needs 'epsilon' (with 'delta') or 'mu'")
        return self


class MechanismSection(_Table):
    """A DP mechanism audited on two neighbouring inputs.

    ``name`` is a built-in (``laplace``, ``gaussian``, ``randomized-response``) or a user
    callable ``"pkg.module:function"``. The noise the mechanism RUNS with is given by
    ``epsilon`` or ``scale`` (Laplace), ``sigma`` or ``mu`` (Gaussian), ``p`` (randomized
    response); ``[mechanism.claim]`` is what it CLAIMS (defaults to what it runs with).
    """

    name: str
    sensitivity: Positive = 1.0
    epsilon: Positive | None = None
    scale: Positive | None = None
    sigma: Positive | None = None
    mu: Positive | None = None
    p: Annotated[float, Field(ge=0.5, le=1.0)] | None = None
    data: tuple[list[float], list[float]] | None = None
    trials: Annotated[int, Field(ge=2, le=100_000_000)] = 100_000
    threshold: Literal["split", "bonferroni"] = "split"
    claim: ClaimSection | None = None

    @model_validator(mode="after")
    def _parameters_fit_the_mechanism(self) -> MechanismSection:
        name = self.name
        if name not in BUILTIN_MECHANISMS and ":" not in name:
            raise ValueError(
                f"unknown mechanism {name!r}; allowed: {', '.join(BUILTIN_MECHANISMS)} or "
                "'pkg.module:function'"
            )
        if name == "laplace" and (self.epsilon is None) == (self.scale is None):
            raise ValueError("the laplace mechanism needs exactly one of 'epsilon' or 'scale'")
        if name == "gaussian" and (self.sigma is None) == (self.mu is None):
            raise ValueError("the gaussian mechanism needs exactly one of 'sigma' or 'mu'")
        if name == "randomized-response" and self.p is None:
            raise ValueError("randomized-response needs 'p', the probability of a truthful answer")
        if ":" in name and self.claim is None:
            raise ValueError(f"a user mechanism ({name!r}) needs a [mechanism.claim] table")
        return self


class DataSection(_Table):
    """The dataset a target is trained on (see :func:`dpaudit.data.load_dataset`)."""

    dataset: str
    label: str | None = None
    sensitive: str | None = None
    features: list[str] | None = None
    audited_size: Annotated[int, Field(ge=2)] = 500
    population_size: Annotated[int, Field(ge=2)] | None = None


class ModelSection(_Table):
    kind: Literal["logistic", "mlp"] = "mlp"
    hidden: list[Annotated[int, Field(ge=1)]] = [64]
    activation: Literal["relu", "tanh", "sigmoid", "gelu"] = "relu"


class DPSection(_Table):
    """DP-SGD: give ``noise_multiplier`` or a ``target_epsilon`` to calibrate it for."""

    noise_multiplier: Annotated[float, Field(ge=0.0)] | None = None
    target_epsilon: Positive | None = None
    clipping_norm: Positive = 1.0

    @model_validator(mode="after")
    def _one_noise_source(self) -> DPSection:
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError("give exactly one of 'noise_multiplier' or 'target_epsilon'")
        return self


class TrainingSection(_Table):
    epochs: Annotated[int, Field(ge=1)] = 10
    batch_size: Annotated[int, Field(ge=1)] = 64
    learning_rate: Positive = 0.1
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.0
    dp: DPSection | None = None


#: Model file formats a ``[target] path`` may have, and the suffixes that imply each.
TARGET_FORMATS: dict[str, tuple[str, ...]] = {
    "safetensors": (".safetensors",),
    "torch-export": (".pt2",),
    "torchscript": (".torchscript", ".ts"),
    "skops": (".skops",),
    "onnx": (".onnx",),
    "pickle": (".pkl", ".pickle", ".joblib"),
}


def target_format_from_suffix(path: str) -> str | None:
    """The format a model file's suffix implies, or ``None`` when it implies none."""
    suffix = Path(path).suffix.lower()
    for name, suffixes in TARGET_FORMATS.items():
        if suffix in suffixes:
            return name
    return None


class TargetSection(_Table):
    """The audited target: trained by dpaudit (``variants``) or brought by the user.

    dpaudit trains its own targets unless ``path``, ``factory`` or ``scores`` is given:
    ``plain`` ignores ``[training.dp]``, ``dp`` uses it. A target of your own is

    - a model file ``path`` (relative to the audit file) in ``format`` (default: from the
      suffix; see :data:`TARGET_FORMATS`): safetensors weights of the ``[model]``
      architecture (or of the module ``factory`` builds), a ``torch.export`` program, a
      TorchScript archive, a scikit-learn model saved with skops (only ``trusted_types``
      beyond skops' defaults are loaded), an ONNX model, or, only with
      ``allow_pickle = true``, a pickle;
    - a ``factory`` ``"pkg.module:function"`` returning a torch module, a scikit-learn
      estimator or a :class:`~dpaudit.models.ModelStack` (with ``path`` in safetensors
      format: the module the weights are loaded into);
    - a ``scores`` file (CSV or Parquet) of per-example rows for systems dpaudit cannot
      run: a ``label`` column and a ``loss`` column, or ``prob_0 .. prob_{C-1}``, or
      ``logit_0 .. logit_{C-1}``, and the membership column.

    ``membership`` says which audited rows trained the target: a column of ``[data]`` (or
    of the scores file; default ``"member"``) holding 1/0 or true/false, rows left empty
    being the attacker's population; or a CSV index file with columns ``row`` (0-based
    row of ``[data]``) and ``member``, unlisted rows being the population.
    ``membership_by_coin`` states that each audited row's membership was decided by an
    independent fair coin: only then is the one-run ε lower bound rigorous.
    ``output`` says whether a torch or ONNX model returns logits or probabilities.
    """

    variants: Annotated[list[Literal["plain", "dp"]], Field(min_length=1)] | None = None
    path: Annotated[str, Field(min_length=1)] | None = None
    format: (
        Literal["safetensors", "torch-export", "torchscript", "skops", "onnx", "pickle"] | None
    ) = None
    factory: Annotated[str, Field(pattern=r"^[\w.]+:[\w]+$")] | None = None
    scores: Annotated[str, Field(min_length=1)] | None = None
    membership: Annotated[str, Field(min_length=1)] | None = None
    membership_by_coin: bool = False
    output: Literal["logits", "probabilities"] = "logits"
    trusted_types: list[Annotated[str, Field(min_length=1)]] = []
    allow_pickle: bool = False

    def model_format(self) -> str | None:
        """The model file's format: ``format``, else the one its suffix implies."""
        if self.path is None:
            return None
        return self.format or target_format_from_suffix(self.path)

    @model_validator(mode="after")
    def _one_kind_of_target(self) -> TargetSection:
        own = self.path is not None or self.factory is not None or self.scores is not None
        if own and self.variants is not None:
            raise ValueError(
                "[target] 'variants' lists targets dpaudit trains; it cannot be combined "
                "with 'path', 'factory' or 'scores' (a target of your own)"
            )
        if self.scores is not None and (self.path is not None or self.factory is not None):
            raise ValueError("[target] give either 'scores' or a model ('path' / 'factory')")
        if self.format is not None and self.path is None:
            raise ValueError("[target] 'format' needs 'path', the model file")
        if self.membership is None and own and self.scores is None:
            raise ValueError(
                "[target] a model of your own needs 'membership': a column of [data] or a "
                "CSV index file (columns 'row', 'member') saying which rows trained it"
            )
        if self.path is not None:
            fmt = self.model_format()
            if fmt is None:
                known = ", ".join(s for v in TARGET_FORMATS.values() for s in v)
                raise ValueError(
                    f"[target] cannot tell the format of {self.path!r} from its suffix "
                    f"(known: {known}); set 'format' to one of {', '.join(TARGET_FORMATS)}"
                )
            if fmt == "pickle" and not self.allow_pickle:
                raise ValueError(
                    f"[target] {self.path!r} is a pickle file, which runs arbitrary code when "
                    "loaded; dpaudit refuses it unless you trust the file and set "
                    "[target] allow_pickle = true (better: save the model with skops, "
                    "safetensors or ONNX)"
                )
            if self.factory is not None and fmt != "safetensors":
                raise ValueError(
                    "[target] 'factory' with 'path' builds the module that safetensors "
                    f"weights load into; {self.path!r} is {fmt!r}"
                )
        return self


class MembershipSection(_Table):
    attacks: Annotated[list[Literal["loss", "shadow", "lira"]], Field(min_length=1)] = [
        "loss",
        "shadow",
        "lira",
    ]
    reference_models: Annotated[int, Field(ge=2)] = 64
    shadow_models: Annotated[int, Field(ge=1)] = 16


class AttributeSection(_Table):
    """Yeom et al. attribute inference on ``[data] sensitive`` (no options yet)."""


class GateSection(_Table):
    """Release-gate policies; each becomes a named check with value, limit and pass/fail."""

    fail_on_violation: bool = True
    max_epsilon_lower_bound: Annotated[float, Field(ge=0.0)] | None = None
    max_auc: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    max_tpr_at_fpr: list[tuple[Probability, Annotated[float, Field(ge=0.0, le=1.0)]]] = []
    max_advantage: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None
    max_attribute_advantage: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None


class ExecutionSection(_Table):
    executor: Literal["local", "dask"] = "local"
    workers: Annotated[int, Field(ge=1, le=256)] = 1
    address: str | None = None
    unit_size: Annotated[int, Field(ge=1)] = 25_000
    device: str = "cpu"


class ReportSection(_Table):
    html: bool = True
    output_dir: str | None = None


class AuditConfig(_Table):
    """The whole audit file."""

    audit: AuditSection
    mechanism: MechanismSection | None = None
    data: DataSection | None = None
    model: ModelSection = ModelSection()
    training: TrainingSection = TrainingSection()
    target: TargetSection = TargetSection()
    membership: MembershipSection | None = None
    attribute: AttributeSection | None = None
    dpsgd: DpsgdSection | None = None
    gate: GateSection = GateSection()
    execution: ExecutionSection = ExecutionSection()
    report: ReportSection = ReportSection()

    # Where the file came from (not part of the schema, nor of the config hash).
    _base_dir: Path = PrivateAttr(default_factory=Path.cwd)
    _source: Path | None = PrivateAttr(default=None)
    _text: str = PrivateAttr(default="")

    @property
    def base_dir(self) -> Path:
        """The folder relative paths resolve against (the audit file's folder)."""
        return self._base_dir

    @property
    def source(self) -> Path | None:
        return self._source

    @property
    def text(self) -> str:
        """The audit file as written (shown in the report)."""
        return self._text

    def resolve(self, path: str | Path) -> Path:
        """Resolve ``path`` relative to the audit file's folder."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else (self._base_dir / p).resolve()

    @model_validator(mode="after")
    def _each_kind_has_its_table(self) -> AuditConfig:
        for kind in self.audit.kinds:
            if getattr(self, kind, None) is None:
                raise ValueError(
                    f"audit kind {kind!r} is listed in [audit] kinds but [{kind}] is missing"
                )
        # A scores file carries everything a membership audit needs; attribute inference
        # always runs a model on the data.
        scores_only = getattr(self.target, "scores", None) is not None
        needs_data = {"attribute"} | (set() if scores_only else {"membership"})
        needs_data &= set(self.audit.kinds)
        if needs_data and self.data is None:
            raise ValueError(f"audit kind {sorted(needs_data)[0]!r} needs a [data] table")
        if "attribute" in self.audit.kinds and self.data.sensitive is None:
            raise ValueError("audit kind 'attribute' needs [data] sensitive = '<column>'")
        if "dp" in self.target_variants() and self.training.dp is None:
            raise ValueError("[target] variants lists 'dp' but [training.dp] is missing")
        return self

    def target_variants(self) -> list[str]:
        """The targets to train: ``[target] variants``, else ``dp`` when DP is configured."""
        if self.target.variants is not None:
            return list(dict.fromkeys(self.target.variants))
        return ["dp"] if self.training.dp is not None else ["plain"]

    def canonical_json(self) -> str:
        """The configuration as sorted JSON: what the config hash is taken of."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def config_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """Walk ``loc`` through nested models and list the keys allowed at its parent."""
    current: Any = model
    for part in loc[:-1]:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = _model_in(field.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def format_validation_error(exc: ValidationError, *, source: str = "audit file") -> str:
    """One line for the first problem: where, what was given, what is allowed."""
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    path = ".".join(str(p) for p in loc) or "(top level)"
    given = err.get("input")
    if err["type"] == "extra_forbidden":
        allowed = _allowed_keys(AuditConfig, loc)
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"{source}: unknown key '{path}'{hint}"
    if err["type"] == "missing":
        return f"{source}: missing required key '{path}'"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"].startswith("value_error") and not loc:
        return f"{source}: {msg}"
    shown = "" if isinstance(given, dict) else f" (got {given!r})"
    return f"{source}: '{path}': {msg}{shown}"


def parse_config(data: dict[str, Any], *, source: str = "audit file") -> AuditConfig:
    """Validate a dict (as parsed from TOML) into an :class:`AuditConfig`."""
    try:
        return AuditConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=source)) from None


def load_config(path: str | Path) -> AuditConfig:
    """Read and validate an audit file.

    Args:
        path: A TOML audit file.

    Returns:
        The validated configuration; ``.base_dir`` is the folder its relative paths
        resolve against and ``.text`` the file as written.

    Raises:
        ConfigError: The file is missing, is not TOML, or does not fit the schema.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"audit file not found: {str(p)!r}")
    text = p.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    config = parse_config(data, source=str(p))
    config._base_dir = p.resolve().parent
    config._source = p.resolve()
    config._text = text
    return config
