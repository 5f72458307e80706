"""The shared tables of an audit file: ``[audit]``, ``[data]``, ``[model]``, ``[training]``,
``[target]``, ``[gate]``, ``[execution]`` and ``[report]``.

Each table is a frozen pydantic model whose unknown keys are errors. Every audit kind
declares its own table in its module (:mod:`dpaudit.kinds`); the tables here are the ones
several kinds read. ``[training]`` and ``[dpsgd.training]`` are ONE schema
(:class:`TrainingSection`), differing only in the documented default of ``epochs``.

Nothing here imports torch: loading and validating an audit file stays fast.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dpaudit.plugins import NamesCode

Probability = Annotated[float, Field(gt=0.0, lt=1.0)]
Delta = Annotated[float, Field(ge=0.0, lt=1.0)]
Positive = Annotated[float, Field(gt=0.0, allow_inf_nan=False)]
#: The largest ε and μ an audit file may state: e^100 > 10^43, so an ε beyond it promises
#: nothing, and larger values overflow the arithmetic of the bounds (e^ε, Φ(−ε/μ)).
MAX_EPSILON = 100.0
Epsilon = Annotated[float, Field(gt=0.0, le=MAX_EPSILON, allow_inf_nan=False)]
Mu = Annotated[float, Field(gt=0.0, le=MAX_EPSILON, allow_inf_nan=False)]

#: δ at which ``target_epsilon`` calibrates the noise when the file does not say
#: (Opacus' ``make_private_with_epsilon(target_delta=...)``). It is deliberately not the
#: audit's δ: the audit MEASURES at ``[audit] delta``, so changing that δ re-measures the
#: same trained models instead of training new ones.
DEFAULT_TARGET_DELTA = 1e-5


class Table(BaseModel):
    """A TOML table: unknown keys are errors, values are frozen once loaded."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class AuditSection(Table):
    """``[audit]``: the name, the kinds to run, and the verdict's statistics settings.

    ``kinds`` is checked against the registry of :mod:`dpaudit.kinds` when the file loads.
    """

    name: Annotated[str, Field(min_length=1, max_length=200)]
    kinds: Annotated[list[str], Field(min_length=1)]
    description: str = ""
    seed: Annotated[int, Field(ge=0)] = 0
    confidence_level: Probability = 0.95
    delta: Delta = 1e-5
    #: ``"sequential"``: run the trials in rounds of ``round_trials`` per arm and stop as
    #: soon as a violation is proven or the target is certified, with bounds valid over
    #: every round at once (:mod:`dpaudit.sequential`); a kind's ``trials`` is then the cap.
    stopping: Literal["fixed", "sequential"] = "fixed"
    round_trials: Annotated[int, Field(ge=2, le=10_000_000)] = 100
    #: Sequential: stop once a lower bound reaches this share of its upper bound.
    certify_tightness: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    #: Sequential: stop once the ε lower bound reaches this value.
    certify_epsilon: Annotated[float, Field(gt=0.0, le=MAX_EPSILON)] | None = None

    @model_validator(mode="after")
    def _sequential_keys(self) -> AuditSection:
        if self.stopping == "fixed":
            given = [
                k
                for k in ("round_trials", "certify_tightness", "certify_epsilon")
                if k in self.model_fields_set
            ]
            if given:
                raise ValueError(
                    f"'{given[0]}' configures a sequential audit; set stopping = 'sequential' "
                    f"or remove '{given[0]}'"
                )
        return self


class ClaimSection(Table):
    """The privacy claimed: ε (with δ) and/or μ. Omitted: the mechanism's own guarantee."""

    epsilon: Epsilon | None = None
    delta: Delta = 0.0
    mu: Mu | None = None

    @model_validator(mode="after")
    def _something_claimed(self) -> ClaimSection:
        if self.epsilon is None and self.mu is None:
            raise ValueError("a claim needs 'epsilon' (with 'delta') or 'mu'")
        return self


class DataSection(Table):
    """The dataset a target is trained on (see :func:`dpaudit.data.load_dataset`)."""

    dataset: str
    label: str | None = None
    sensitive: str | None = None
    features: list[str] | None = None
    audited_size: Annotated[int, Field(ge=2)] = 500
    population_size: Annotated[int, Field(ge=2)] | None = None


class ModelSection(Table):
    kind: Literal["logistic", "mlp"] = "mlp"
    hidden: list[Annotated[int, Field(ge=1)]] = [64]
    activation: Literal["relu", "tanh", "sigmoid", "gelu"] = "relu"


class DPSection(Table):
    """``[training.dp]``: the noise, given directly or calibrated to a target.

    Exactly one of ``noise_multiplier`` (σ), ``target_epsilon`` (σ calibrated by the PLD
    accountant at ``target_delta`` for the q and T that will run) or ``target_mu`` (σ =
    √T/μ, exact only for full-batch DP-GD).
    """

    noise_multiplier: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] | None = None
    target_epsilon: Epsilon | None = None
    target_delta: Annotated[float, Field(gt=0.0, lt=1.0)] = DEFAULT_TARGET_DELTA
    target_mu: Mu | None = None
    clipping_norm: Positive = 1.0

    @model_validator(mode="after")
    def _one_noise_source(self) -> DPSection:
        given = [
            k
            for k in ("noise_multiplier", "target_epsilon", "target_mu")
            if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'noise_multiplier', 'target_epsilon' or 'target_mu' "
                f"(got {', '.join(given) or 'none'})"
            )
        return self


class TrainingSection(Table):
    """``[training]``: the optimiser and DP-SGD (see :class:`dpaudit.training.TrainingSpec`).

    ``full_batch`` trains on every member at every step (DP-GD, q = 1, T = epochs);
    otherwise each step takes a Poisson sample at q = batch_size / members and an epoch
    is ⌊members / batch_size⌋ steps (:func:`dpaudit.training.sampling.sampling_plan`).
    """

    epochs: Annotated[int, Field(ge=1)] = 10
    batch_size: Annotated[int, Field(ge=1)] = 64
    learning_rate: Positive = 0.1
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.0
    full_batch: bool = False
    dp: DPSection | None = None

    def target_mu_problem(self, *, full_batch: bool) -> str | None:
        """Why ``target_mu`` cannot be used here, or ``None`` (it is exact only for DP-GD)."""
        if self.dp is not None and self.dp.target_mu is not None and not full_batch:
            return (
                "'target_mu' is exact only for full-batch DP-GD (set full_batch = true, or "
                "use the 'dpgd' trainer)"
            )
        return None


#: Model file formats a ``[target] path`` may have, and the suffixes that imply each.
TARGET_FORMATS: dict[str, tuple[str, ...]] = {
    "safetensors": (".safetensors",),
    "torch-export": (".pt2",),
    "torchscript": (".torchscript", ".ts"),
    "skops": (".skops",),
    "onnx": (".onnx",),
    "pickle": (".pkl", ".pickle", ".joblib"),
    # a folder written by save_pretrained (a causal language model and its tokenizer)
    "huggingface": (),
}


#: ``[target] references`` values besides a training function ``"pkg.module:function"``.
REFERENCE_CHOICES = ("recipe", "clone")

#: A plug-in name ``"pkg.module:function"`` as ``[target]`` keys accept it.
PLUGIN_NAME = re.compile(r"[\w.]+:\w+")

#: How far below the ``[target] training_accuracy`` a brought target's accuracy on its
#: members may fall before it is taken to be queried otherwise than it was trained:
#: evaluation-mode layers (dropout, batch norm) and float rounding move an accuracy by
#: far less; wrong or untransformed features move it by far more.
ACCURACY_SHORTFALL = 0.1


def target_format_from_suffix(path: str) -> str | None:
    """The format a model file's suffix implies, or ``None`` when it implies none."""
    suffix = Path(path).suffix.lower()
    for name, suffixes in TARGET_FORMATS.items():
        if suffix in suffixes:
            return name
    return None


class InputPerturbationSection(Table):
    """``[target.input_perturbation]``: the local randomisers of the ``input-perturbation``
    target (see :mod:`dpaudit.membership.input_perturbation` for the guarantee and its claim).

    ``features`` (``"laplace"``, ``"gaussian"`` or ``"none"``) perturbs every feature
    after clipping it to [−``bound``, ``bound``] (standardised units); ``labels``
    (``"k-rr"`` or ``"none"``) randomises the label by k-ary randomised response.
    ``epsilon`` is one record's ε; with both randomisers ``label_share`` of it goes to
    the label. ``delta`` is the Gaussian randomiser's δ (required for it, refused for the
    others).
    """

    features: Literal["laplace", "gaussian", "none"]
    labels: Literal["k-rr", "none"]
    epsilon: Epsilon
    label_share: Probability = 0.5
    bound: Positive = 2.0
    delta: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None

    @model_validator(mode="after")
    def _randomisers_fit(self) -> InputPerturbationSection:
        if self.features == "none" and self.labels == "none":
            raise ValueError(
                "randomises nothing (features = 'none' and labels = 'none'); use the "
                "'plain' variant"
            )
        if self.features == "gaussian" and self.delta is None:
            raise ValueError(
                "features = 'gaussian' needs 'delta' (the Gaussian randomiser is "
                "calibrated to (epsilon, delta))"
            )
        if self.features != "gaussian" and self.delta is not None:
            raise ValueError(
                f"'delta' is used only by features = 'gaussian'; got features = {self.features!r}"
            )
        if "label_share" in self.model_fields_set and "none" in (self.features, self.labels):
            raise ValueError(
                "'label_share' splits epsilon between features and labels; it needs both randomised"
            )
        return self


class TargetSection(Table):
    """The audited target: trained by dpaudit (``variants``) or brought by the user.

    dpaudit trains its own targets unless ``path``, ``factory`` or ``scores`` is given:
    ``plain`` ignores ``[training.dp]``, ``dp`` uses it, ``input-perturbation`` randomises
    each training record once with the local randomisers of ``[target.input_perturbation]``
    (:class:`InputPerturbationSection`) and trains plainly. A target of your own is

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

    What a model of your own receives: one row per row of ``[data]``, with the columns
    :func:`dpaudit.data.load_dataset` encodes, NOT standardised:

    - the ``[data] features`` in the order that list gives them; without ``features``,
      every column of the data file in file order (of a built-in dataset, its table less
      the columns dpaudit drops, such as ``statsmodels:anes96``'s ``popul``) except the
      label column and the membership column (when ``membership`` names a column; with an
      index file no column is left out but the label); the ``sensitive`` column stays;
    - a numeric column as one column of its values, as they are in the file;
    - a text, bool or category column (text only when ``features`` or ``sensitive``
      names it), and the built-in datasets' categorical codes (``statsmodels:fair``'s
      ``occupation`` and ``occupation_husb``), one-hot encoded in place: one 0/1 column
      per distinct value of the whole file, in sorted order (named ``"<column>=<value>"``);
    - as float32 (torch, ONNX) or float64 copies of those float32 values (scikit-learn).

    A model trained on transformed features (standardised, scaled, ...) is given the same
    transformation by ``preprocess``: a fitted scikit-learn transformer saved with skops (a
    path ending in ``.skops``; only ``trusted_types`` beyond skops' defaults are loaded;
    its ``transform`` is called) or ``"pkg.module:function"``, a function ``(X) -> X'``
    from the ``(n, d)`` float64 array above to the model's inputs (one row per row). It
    is applied to every row before the model sees it, and to the reference models that
    ``references = "clone"`` or a training function trains (they are trained on, and
    queried with, the transformed features, as the target was).

    ``membership`` says which audited rows trained the target: a column of ``[data]`` (or
    of the scores file; default ``"member"``) holding 1/0 or true/false, rows left empty
    being the attacker's population; or a CSV index file with columns ``row`` (0-based
    row of ``[data]``) and ``member``, unlisted rows being the population.
    ``membership_by_coin`` states that each audited row's membership was decided by an
    independent fair coin: only then is the one-run ε lower bound rigorous.
    ``output`` says whether a torch or ONNX model returns logits or probabilities.

    ``population_share`` is for a plain train/test split, where every row's membership
    is 1 or 0 and no row is left for the attacker: each row draws one seeded uniform
    number (from the audit seed), and the non-members whose number falls below the share
    become the attacker's population and leave the audited rows; with
    ``membership_by_coin = true`` the members whose number falls below it are set aside
    too (unused), so that being audited stays independent of membership and the coins
    stay fair. Default: 0.5 when an attack needs population rows (``shadow``, ``rmia``,
    ``rmia-offline``, ``auto``), else none (every row stays audited). With rows already
    left empty (a population of your own) ``population_share`` must not be given.

    A causal language model is ``format = "huggingface"`` with ``path`` its folder (what
    ``save_pretrained`` writes), ``members`` and ``non_members`` text files (JSONL field
    ``"text"``, CSV column ``"text"``, or one record per line) and, for the
    ``reference`` attack, ``reference_paths``: folders of reference language models
    (:mod:`dpaudit.membership.language_units`).

    ``training_accuracy`` is the accuracy your training reported on its training rows,
    if it reported one. A brought target whose accuracy on its own members is at or
    below the majority-class rate of those members, or more than
    :data:`ACCURACY_SHORTFALL` below ``training_accuracy``, is not being queried as it
    was trained (wrong features, a missing ``preprocess``): it is named in a warning and
    its membership tests are not evaluated (a ``[gate]`` policy that needs them fails
    closed unless ``on_unmeasured = "warn"``).

    ``references`` says how shadow and reference models (LiRA, RMIA, shadow) are trained
    for a model of your own (see :mod:`dpaudit.membership.brought`): ``"recipe"`` (default) with
    ``[model]`` / ``[training]``; ``"clone"``, for a scikit-learn estimator, as clones of
    it (``sklearn.base.clone``) fitted on each reference split; or
    ``"pkg.module:function"``, your own training function ``function(X, y, *, seed)``
    that builds and trains a model as yours was (a torch module, a
    :class:`~dpaudit.models.ModelStack` or a scikit-learn estimator) on raw ``[data]``
    features (after ``preprocess``, when given).
    """

    variants: (
        Annotated[list[Literal["plain", "dp", "input-perturbation"]], Field(min_length=1)] | None
    ) = None
    input_perturbation: InputPerturbationSection | None = None
    path: Annotated[str, Field(min_length=1)] | None = None
    format: (
        Literal[
            "safetensors", "torch-export", "torchscript", "skops", "onnx", "pickle", "huggingface"
        ]
        | None
    ) = None
    factory: Annotated[str, Field(pattern=r"^[\w.]+:[\w]+$"), NamesCode()] | None = None
    scores: Annotated[str, Field(min_length=1)] | None = None
    membership: Annotated[str, Field(min_length=1)] | None = None
    membership_by_coin: bool = False
    output: Literal["logits", "probabilities"] = "logits"
    trusted_types: list[Annotated[str, Field(min_length=1), NamesCode(form="type")]] = []
    allow_pickle: bool = False
    references: Annotated[str, NamesCode(builtins=REFERENCE_CHOICES)] = "recipe"
    preprocess: Annotated[str, Field(min_length=1), NamesCode(suffixes=(".skops",))] | None = None
    population_share: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None
    training_accuracy: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    members: Annotated[str, Field(min_length=1)] | None = None
    non_members: Annotated[str, Field(min_length=1)] | None = None
    reference_paths: list[Annotated[str, Field(min_length=1)]] = []

    @property
    def brought(self) -> bool:
        """True when the file names a model or scores file instead of training one."""
        return self.path is not None or self.factory is not None or self.scores is not None

    def model_format(self) -> str | None:
        """The model file's format: ``format``, else the one its suffix implies."""
        if self.path is None:
            return None
        return self.format or target_format_from_suffix(self.path)

    @model_validator(mode="after")
    def _one_kind_of_target(self) -> TargetSection:
        own = self.brought
        if own and self.variants is not None:
            raise ValueError(
                "[target] 'variants' lists targets dpaudit trains; it cannot be combined "
                "with 'path', 'factory' or 'scores' (a target of your own)"
            )
        if self.scores is not None and (self.path is not None or self.factory is not None):
            raise ValueError("[target] give either 'scores' or a model ('path' / 'factory')")
        if self.format is not None and self.path is None:
            raise ValueError("[target] 'format' needs 'path', the model file")
        if self._check_language_model():
            return self
        if self.membership is None and own and self.scores is None:
            raise ValueError(
                "[target] a model of your own needs 'membership': a column of [data] or a "
                "CSV index file (columns 'row', 'member') saying which rows trained it"
            )
        if self.path is not None:
            self._check_model_file()
        self._check_references()
        self._check_input_perturbation()
        self._check_model_only_keys()
        return self

    def _check_language_model(self) -> bool:
        """A causal LM (``format = "huggingface"``) is audited on the texts of ``members``
        and ``non_members``, which no other target reads. True for a language model."""
        texts = [k for k in ("members", "non_members") if getattr(self, k) is not None]
        if self.format != "huggingface":
            if self.reference_paths:
                texts.append("reference_paths")
            if texts:
                raise ValueError(
                    f"[target] {texts[0]!r} is the text file of a language model; set "
                    "format = 'huggingface' and path to its folder"
                )
            return False
        missing = [k for k in ("members", "non_members") if k not in texts]
        if missing:
            raise ValueError(
                f"[target] format = 'huggingface' needs {' and '.join(map(repr, missing))}: "
                "text files (JSONL field 'text', CSV column 'text', or one record per line)"
            )
        others = [
            k
            for k in (
                "factory",
                "membership",
                "preprocess",
                "population_share",
                "training_accuracy",
            )
            if getattr(self, k) is not None
        ]
        if others or self.references != "recipe":
            raise ValueError(
                f"[target] {(others or ['references'])[0]!r} is not read for a language model "
                "(format = 'huggingface'): members and non_members say which texts trained it"
            )
        return True

    def _check_model_only_keys(self) -> None:
        """``preprocess``, ``population_share`` and ``training_accuracy`` are about a model
        of your own that dpaudit queries (not a scores file, not dpaudit's own target)."""
        given = [
            k
            for k in ("preprocess", "population_share", "training_accuracy")
            if getattr(self, k) is not None
        ]
        if not given:
            return
        if self.scores is not None:
            raise ValueError(
                f"[target] {given[0]!r} is for a model dpaudit queries ('path' / 'factory'); "
                "a 'scores' file holds only its outputs"
            )
        if not self.brought:
            raise ValueError(
                f"[target] {given[0]!r} is for a model of your own ('path' / 'factory'); "
                "dpaudit trains its own targets on the [data] features and sizes their "
                "population with [data] population_size"
            )
        if self.preprocess is not None and not (
            PLUGIN_NAME.fullmatch(self.preprocess)
            or Path(self.preprocess).suffix.lower() == ".skops"
        ):
            raise ValueError(
                "[target] preprocess must be a scikit-learn transformer saved with skops "
                f"(a path ending in .skops) or a function 'pkg.module:function'; got "
                f"{self.preprocess!r}"
            )

    def _check_input_perturbation(self) -> None:
        listed = self.variants is not None and "input-perturbation" in self.variants
        if listed and self.input_perturbation is None:
            raise ValueError(
                "[target] variants lists 'input-perturbation' but [target.input_perturbation] "
                "is missing (features, labels, epsilon)"
            )
        if self.input_perturbation is not None and not listed:
            raise ValueError(
                "[target.input_perturbation] is given but [target] variants does not list "
                "'input-perturbation'"
            )

    def _check_references(self) -> None:
        r = self.references
        if r not in REFERENCE_CHOICES and not PLUGIN_NAME.fullmatch(r):
            raise ValueError(
                f"[target] references must be 'recipe', 'clone' or a training function "
                f"'pkg.module:function'; got {r!r}"
            )
        if r == "recipe":
            return
        if self.scores is not None:
            raise ValueError(
                f"[target] references = {r!r} trains models like yours, but 'scores' holds "
                "only its outputs: give the model ('path' / 'factory') or remove 'references'"
            )
        if not self.brought:
            raise ValueError(
                f"[target] references = {r!r} is for a model of your own ('path' / "
                "'factory'); dpaudit trains its own targets and their reference models "
                "with [model]/[training]"
            )

    def _check_model_file(self) -> None:
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


class ByoSpec(Table):
    """What a brought target's units depend on (picklable; its JSON names the units).

    Attributes:
        data, target, model, training: the shared tables (``[model]`` / ``[training]``
            are the recipe of the reference models unless ``target.references`` trains
            them like the target: ``"clone"`` or a training function).
        attacks, reference_models, shadow_models: ``[membership]``.
        seed: the audit seed.
        base_dir: the audit file's folder (paths resolve here).
        device: torch device of the reference models.
        digest: hash of the files the target is read from, so a changed file never
            reuses units.
    """

    data: DataSection | None
    target: TargetSection
    model: ModelSection
    training: TrainingSection
    attacks: tuple[str, ...]
    reference_models: int
    shadow_models: int
    seed: int
    base_dir: str
    device: str = "cpu"
    digest: str = ""

    def resolve(self, path: str | Path) -> Path:
        """``path`` relative to the audit file's folder."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else (Path(self.base_dir) / p).resolve()


class GateSection(Table):
    """Release-gate policies; each becomes a named check with value, limit and status.

    A policy that nothing in the audit measured (``max_attribute_advantage`` without an
    ``attribute`` kind, ``fail_on_violation`` with no bound held against an upper bound)
    is ``not-evaluated`` and fails the gate, unless ``on_unmeasured = "warn"``.
    """

    on_unmeasured: Literal["fail", "warn"] = "fail"
    fail_on_violation: bool = True
    max_epsilon_lower_bound: Annotated[float, Field(ge=0.0)] | None = None
    max_auc: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    max_tpr_at_fpr: list[tuple[Probability, Annotated[float, Field(ge=0.0, le=1.0)]]] = []
    max_advantage: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None
    max_attribute_advantage: Annotated[float, Field(ge=-1.0, le=1.0)] | None = None


class ExecutionSection(Table):
    """``[execution]``: where units run. Only ``unit_size`` changes what a unit holds."""

    executor: Literal["local", "dask"] = "local"
    workers: Annotated[int, Field(ge=1, le=256)] = 1
    address: str | None = None
    # at most 10⁷ trials (models) in one unit: a unit is what one process holds in memory
    unit_size: Annotated[int, Field(ge=1, le=10_000_000)] = 25_000
    device: str = "cpu"
    #: Seconds one unit may take (local executor): a unit still running then is stopped,
    #: named, and the run exits 2 keeping every finished unit. None: no limit.
    unit_timeout: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] | None = None


class ReportSection(Table):
    html: bool = True
    output_dir: str | None = None


# ------------------------------------------------------------- validation messages


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


def format_validation_error(
    exc: ValidationError,
    *,
    source: str = "audit file",
    model: type[BaseModel],
    prefix: tuple[str, ...] = (),
    top_keys: str | None = None,
) -> str:
    """One line for the first problem: where, what was given, what is allowed.

    The one formatter of validation errors, for the audit file and for a table given to
    a Python entry point alike.

    Args:
        exc: pydantic's error.
        source: the file (or function), for the message.
        model: the schema that was validated (a kind's table, or the whole file).
        prefix: where that schema sits in the file (``("dpsgd",)`` for ``[dpsgd]``).
        top_keys: the keys allowed at the file's top level, when ``model`` is the file.
    """
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    path = ".".join(str(p) for p in prefix + loc) or "(top level)"
    given = err.get("input")
    if err["type"] == "extra_forbidden":
        if top_keys is not None and len(loc) == 1:
            return f"{source}: unknown key '{path}'; allowed keys: {top_keys}"
        allowed = _allowed_keys(model, loc)
        hint = f"; allowed keys: {', '.join(allowed)}" if allowed else ""
        return f"{source}: unknown key '{path}'{hint}"
    if err["type"] == "missing":
        return f"{source}: missing required key '{path}'"
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"].startswith("value_error") and not loc:
        return f"{source}: {msg}"
    shown = "" if isinstance(given, dict) else f" (got {given!r})"
    return f"{source}: '{path}': {msg}{shown}"
