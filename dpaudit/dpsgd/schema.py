"""The ``[dpsgd]`` audit-file tables and the spec every dpsgd unit receives.

Validating an audit file reads only this module (pydantic, no torch, no scipy): every
rule that can be checked from the tables alone is a validator here, with a message that
names what to change.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dpaudit.dpsgd.canaries import INPUT_CANARY_KINDS
from dpaudit.dpsgd.language_schema import LanguageFineTuningSection
from dpaudit.plugins import NamesCode
from dpaudit.sections import ClaimSection, Table, TrainingSection

__all__ = [
    "BUILTIN_TRAINERS",
    "ENGINE_TRAINERS",
    "ERM_TRAINERS",
    "BlackBoxSection",
    "DpsgdSection",
    "DpsgdSpec",
    "DpsgdTrainingSection",
    "OneRunSection",
    "erm_mechanism",
]

#: The trainers of :data:`dpaudit.trainers.TRAINERS` (kept here so that validating an
#: audit file needs no torch; a test checks the two agree).
BUILTIN_TRAINERS = (
    "dpsgd",
    "dpgd",
    "output-perturbation",
    "multiparty",
    "multiparty-gradient",
    "plain",
    "gradient-laplace",
)
#: dpaudit's own DP-SGD trainers (the engine).
ENGINE_TRAINERS = ("dpsgd", "dpgd")
#: The trainers that release a regularised ERM minimiser plus calibrated noise.
ERM_TRAINERS = ("output-perturbation", "multiparty")


class DpsgdTrainingSection(TrainingSection):
    """``[dpsgd.training]``: the shared ``[training]`` schema; only ``epochs`` defaults to 1."""

    epochs: Annotated[int, Field(ge=1)] = 1


class OneRunSection(Table):
    """``[dpsgd.one_run]``: m canaries in one run, r guesses (top r/2 and bottom r/2)."""

    canaries: Annotated[int, Field(ge=2, le=100_000)] = 1000
    guesses: Annotated[int, Field(ge=2)] = 100

    @model_validator(mode="after")
    def _guesses_fit(self) -> OneRunSection:
        if self.guesses > self.canaries or self.guesses % 2:
            raise ValueError("'guesses' must be even and at most 'canaries'")
        return self


class BlackBoxSection(Table):
    """``[dpsgd.black_box]``: the black-box levers of Annamalai and De Cristofaro (2024).

    Attributes:
        initial: ``random`` (each model's own random initialisation) or ``worst-case``: one
            θ₀ shared by every model of both arms, all zeros except the decoy class's
            weight on the crafted canary's feature, far enough ahead that the canary stays
            misclassified and its clipped gradient is the same known vector in every step
            (:func:`dpaudit.dpsgd.canaries.worst_case_initial_parameters`).
        score: ``loss`` (minus the canary's loss on the final model) or ``logit-shift``:
            the final model's logit margin of the canary's label over its decoy class on
            the canary, minus the same margin on the canary with its feature set to 0,
            divided by the canary's value. Two queries of the final model; for a logistic
            regression it is exactly the canary's weight difference W[label, j] −
            W[decoy, j], which is Gaussian under full-batch DP-GD.

    References:
        Annamalai and De Cristofaro 2024, "Nearly Tight Black-Box Auditing of
        Differentially Private Machine Learning", arXiv 2405.14106v4, §3 (worst-case
        initial parameters; full-batch training; the final model's output on the target).
    """

    initial: Literal["random", "worst-case"] = "random"
    score: Literal["loss", "logit-shift"] = "loss"


class DpsgdSection(Table):
    """``[dpsgd]``: a canary audit of a training procedure.

    Attributes:
        dataset: ``"synthetic"`` (two Gaussian classes) or a name for
            :func:`dpaudit.data.load_dataset` (``"sklearn:digits"``, ``"csv:path"``, ...).
        label: the label column for csv/parquet (or ``"col>value"``).
        rows: keep this many rows (seeded choice); synthetic: how many to make.
        features: synthetic only: number of features.
        zero_features: all-zero feature columns appended; a Dirac canary sits on the
            first layer's weight of one of them, which no real gradient touches.
        normalize: scale every row (canary included) to norm ≤ 1 (needed by the ERM
            trainers, whose loss must be 1-Lipschitz).
        model: ``"logistic"`` or ``"mlp"`` (with ``hidden``).
        training: the shared training table (``epochs`` defaults to 1 here).
        trainer: a registered trainer (:data:`BUILTIN_TRAINERS`) or ``"pkg.module:function"``.
        options: trainer options (``epsilon``, ``lam``, ``parties``, or a user trainer's).
            ``multiparty-gradient`` also takes ``checkpoint`` = t (audit the intermediate
            model θ_t) or a list of steps ``[t₁, t₂, ...]`` (audit each θ_t of one
            training run, every one a test of its own under the verdict's one budget);
            ``gradient-laplace`` takes ``epsilon``, ``clip`` and ``examples``.
        canary: ``mislabeled`` | ``ood`` | ``clipbkd`` | ``crafted`` (input rows) | ``dirac``
            (gradient). ``crafted`` sits on an appended all-zero feature that only it uses.
            ``gradient`` (black-box, engine trainers): the Dirac gradient added at every
            step its Poisson coin comes up, scored on the final model's parameter along
            it (:func:`dpaudit.dpsgd.canaries.gradient_canary_scores`); every model starts
            from the same θ₀ (0 for ``logistic``, one shared draw of torch's default init
            for ``mlp``), 0 on the canary's coordinate, so the score's law is the
            last-iterate pair.
            ``worst-case`` (ERM trainers): the replace-one pair of unit records that moves
            the exact minimiser most, scored by the exact log-likelihood ratio of the
            released model under the mechanism's noise density (:mod:`dpaudit.theory.erm`).
        canary_direction: where the white-box ``dirac`` canary points. ``every-group``:
            an equal part in every parameter tensor (unit norm overall,
            :func:`dpaudit.dpsgd.canaries.every_group_direction`), which a trainer that
            clips tensor by tensor cannot hide a noise calibrated for one tensor from;
            ``one-coordinate``: the one-hot Dirac canary on one first-layer weight (the
            behaviour before ``canary_direction`` existed). ``auto`` (default): the one
            coordinate for trainers that clip the whole per-example gradient to one norm by
            construction (dpaudit's own and a trainer that declares ``clipping = "flat"``,
            see :func:`dpaudit.dpsgd.setup.resolve_canary_direction`), where it is exactly
            canary + noise; every group for any other user trainer, whose clipping
            dpaudit cannot see. ``results.json`` says which ran and why.
        mechanism: the ERM mechanism whose density the ``worst-case`` score uses
            (``output-perturbation`` or ``multiparty``); default: the trainer's own.
        threat_model: ``black-box`` (final model's canary loss) or ``white-box`` (a
            score of every step's update projected on the Dirac canary).
        score: the white-box statistic: ``likelihood-ratio`` (default; the sum over
            steps of the log-likelihood ratio of (1 − q)N(0, σ²C²) + qN(C, σ²C²) to
            N(0, σ²C²), the Neyman–Pearson test for Poisson-subsampled steps, see
            :mod:`dpaudit.theory.whitebox`) or ``sum`` (the plain sum of the projections,
            Nasr et al. 2023 §3). The one-run audit scores its canaries the same way.
        trials: models per arm (with and without the canary).
        threshold: ``split`` or ``bonferroni`` (see :mod:`dpaudit.bounds`).
        models_per_unit: models per work unit (default ``[execution] unit_size``, capped).
        one_run: optional one-run audit.
        language: a one-run audit of DP fine-tuning of a causal language model with
            new-token canaries (:class:`~dpaudit.dpsgd.language_schema.LanguageFineTuningSection`);
            it is the whole audit: no other ``[dpsgd]`` key but ``claim`` is read with it.
        black_box: optional black-box levers (worst-case θ₀, logit-shift score).
        claim: ``[dpsgd.claim]``, the privacy the release claims (``epsilon`` with
            ``delta``, and/or ``mu``): held against the accountant of what ran (the
            ``claim_vs_records`` check) and against the canary bounds. It replaces a claim
            the trainer states, and it is no input: it changes no model, so it is left
            out of the units' key (editing it reuses every stored unit). Trainer options
            (an Opacus loop's ``epsilon`` for ``make_private_with_epsilon``) stay inputs.
    """

    dataset: str = "synthetic"
    label: str | None = None
    rows: Annotated[int, Field(ge=2)] | None = None
    features: Annotated[int, Field(ge=1)] = 4
    zero_features: Annotated[int, Field(ge=0)] | None = None
    normalize: bool = False
    model: Literal["logistic", "mlp"] = "logistic"
    hidden: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [32])
    training: DpsgdTrainingSection = DpsgdTrainingSection()
    trainer: Annotated[str, NamesCode(builtins=BUILTIN_TRAINERS)] = "dpsgd"
    options: dict[str, float | int | str | list[int]] = Field(default_factory=dict)
    canary: Literal[
        "mislabeled", "ood", "clipbkd", "crafted", "dirac", "gradient", "worst-case"
    ] = "dirac"
    canary_direction: Literal["auto", "every-group", "one-coordinate"] = "auto"
    mechanism: Literal["output-perturbation", "multiparty"] | None = None
    threat_model: Literal["black-box", "white-box"] = "white-box"
    score: Literal["likelihood-ratio", "sum"] = "likelihood-ratio"
    trials: Annotated[int, Field(ge=0, le=10_000_000)] = 1000
    threshold: Literal["split", "bonferroni"] = "split"
    models_per_unit: Annotated[int, Field(ge=1)] | None = None
    one_run: OneRunSection | None = None
    language: LanguageFineTuningSection | None = None
    black_box: BlackBoxSection | None = None
    claim: ClaimSection | None = None

    @property
    def full_batch(self) -> bool:
        return self.trainer == "dpgd" or self.training.full_batch

    def number(self, key: str) -> float:
        """A numeric trainer option (only ``checkpoint`` may be a list, and is not read here)."""
        value = self.options[key]
        if isinstance(value, list):
            raise ValueError(f"the {key!r} option must be a number; got {value!r}")
        return float(value)

    @property
    def checkpoints(self) -> tuple[int, ...] | None:
        """The steps t of ``options.checkpoint = [t₁, t₂, ...]`` (None for one step or none)."""
        raw = self.options.get("checkpoint")
        return tuple(raw) if isinstance(raw, list) else None

    @model_validator(mode="after")
    def _consistent(self) -> DpsgdSection:
        if self.language is not None:
            return self._language_alone()
        t = self.trainer
        if t not in BUILTIN_TRAINERS and ":" not in t:
            raise ValueError(
                f"unknown trainer {t!r}; allowed: {', '.join(BUILTIN_TRAINERS)} or "
                "'pkg.module:function'"
            )
        if (self.canary == "dirac") != (self.threat_model == "white-box"):
            raise ValueError(
                "a 'dirac' gradient canary is observed white-box and input canaries "
                f"({', '.join((*INPUT_CANARY_KINDS, 'worst-case'))}) black-box; "
                f"got canary={self.canary!r} "
                f"with threat_model={self.threat_model!r}"
            )
        if t in ENGINE_TRAINERS and self.training.dp is None:
            raise ValueError(f"the {t!r} trainer needs [dpsgd.training.dp]")
        if self.threat_model == "white-box" and t in ("plain", *ERM_TRAINERS):
            raise ValueError(f"the {t!r} trainer supports black-box audits only")
        if t in ERM_TRAINERS:
            need = ["epsilon", "lam"] + (["parties"] if t == "multiparty" else [])
            missing = [k for k in need if k not in self.options]
            if missing:
                raise ValueError(f"the {t!r} trainer needs options {missing}")
        problem = self.training.target_mu_problem(full_batch=self.full_batch)
        if problem is not None:
            raise ValueError(problem)
        if self.trials == 0 and self.one_run is None:
            raise ValueError("set 'trials' > 0, or a [dpsgd.one_run] table, or both")
        if self.one_run is not None and (t != "dpsgd" or self.canary != "dirac"):
            raise ValueError("[dpsgd.one_run] audits the 'dpsgd' trainer with 'dirac' canaries")
        problem = _checkpoints_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    def _language_alone(self) -> DpsgdSection:
        """``[dpsgd.language]`` builds, trains and audits its own language model: no
        other ``[dpsgd]`` key but the claim (``[dpsgd.claim]``) is read with it, so giving
        one is a mistake."""
        others = sorted(self.model_fields_set - {"language", "claim"})
        if others:
            raise ValueError(
                f"{others[0]!r} is not read with [dpsgd.language], which builds, trains and "
                "audits its own language model; remove it"
            )
        return self

    @model_validator(mode="after")
    def _black_box_levers(self) -> DpsgdSection:
        problem = (
            _black_box_problem(self)
            or _worst_case_problem(self)
            or _gradient_problem(self)
            or _direction_problem(self)
        )
        if problem is not None:
            raise ValueError(problem)
        return self


def _checkpoints_problem(s: DpsgdSection) -> str | None:
    """Why a list-valued option cannot be used as configured (only ``checkpoint`` of
    ``multiparty-gradient`` takes a list: distinct steps 1 <= t <= T = ``epochs``)."""
    lists = sorted(k for k, v in s.options.items() if isinstance(v, list) and k != "checkpoint")
    if lists:
        return f"only the 'checkpoint' option takes a list of steps; got lists for {lists}"
    steps = s.checkpoints
    if steps is None:
        return None
    if s.trainer != "multiparty-gradient":
        return (
            "a list of checkpoints is audited for the 'multiparty-gradient' trainer only; "
            f"got trainer={s.trainer!r}"
        )
    total = s.training.epochs
    if not steps or len(set(steps)) != len(steps) or not all(1 <= t <= total for t in steps):
        return (
            "checkpoint = [t₁, t₂, ...] must list distinct whole steps with 1 <= t <= T = "
            f"epochs = {total}; got {list(steps)}"
        )
    return None


def _black_box_problem(s: DpsgdSection) -> str | None:
    """Why the crafted canary or ``[dpsgd.black_box]`` cannot be used as configured."""
    if s.canary == "crafted":
        if s.zero_features == 0:
            return "the 'crafted' canary needs an all-zero feature: zero_features >= 1"
        if s.normalize:
            return "the 'crafted' canary is not normalised: set normalize = false"
    b = s.black_box
    if b is None:
        return None
    if s.threat_model != "black-box":
        return "[dpsgd.black_box] needs threat_model = 'black-box'"
    if (b.initial == "worst-case" or b.score == "logit-shift") and s.canary != "crafted":
        return (
            "initial = 'worst-case' and score = 'logit-shift' need canary = 'crafted'; "
            f"got canary={s.canary!r}"
        )
    if b.initial == "worst-case":
        if s.trainer not in ENGINE_TRAINERS:
            return (
                "initial = 'worst-case' needs the 'dpsgd' or 'dpgd' trainer (the engine "
                f"starts every model from it); got trainer={s.trainer!r}"
            )
        if s.model != "logistic":
            return f"initial = 'worst-case' is made for model = 'logistic'; got {s.model!r}"
        if s.training.momentum != 0.0 or s.training.weight_decay != 0.0:
            return "initial = 'worst-case' needs momentum = 0 and weight_decay = 0"
    return None


def _gradient_problem(s: DpsgdSection) -> str | None:
    """Why the black-box ``gradient`` canary cannot be used as configured."""
    if s.canary != "gradient":
        return None
    if s.trainer not in ENGINE_TRAINERS:
        return (
            "canary = 'gradient' needs the 'dpsgd' or 'dpgd' trainer (the engine adds it to "
            f"every step); got trainer={s.trainer!r}"
        )
    if s.training.momentum != 0.0 or s.training.weight_decay != 0.0:
        return (
            "canary = 'gradient' reads the final parameter as the plain sum of the steps: "
            "set momentum = 0 and weight_decay = 0"
        )
    if s.zero_features == 0:
        return "canary = 'gradient' needs an all-zero feature: zero_features >= 1"
    if s.black_box is not None:
        return "[dpsgd.black_box] does not apply to canary = 'gradient'"
    return None


def _direction_problem(s: DpsgdSection) -> str | None:
    """Why ``canary_direction = "every-group"`` cannot be used as configured."""
    if s.canary_direction != "every-group":
        return None
    if s.canary != "dirac":
        return (
            "canary_direction = 'every-group' shapes the white-box 'dirac' canary; "
            f"got canary={s.canary!r} (the 'gradient' canary reads one coordinate)"
        )
    if s.trainer not in ENGINE_TRAINERS and ":" not in s.trainer:
        return (
            "canary_direction = 'every-group' needs a trainer with parameter tensors to "
            f"spread over: 'dpsgd', 'dpgd' or a user trainer; got trainer={s.trainer!r}"
        )
    if s.one_run is not None:
        return "[dpsgd.one_run] places its own m Dirac canaries: leave canary_direction unset"
    return None


def erm_mechanism(s: DpsgdSection) -> str | None:
    """The ERM mechanism whose noise density scores a worst-case canary, if any."""
    if s.mechanism is not None:
        return s.mechanism
    return s.trainer if s.trainer in ERM_TRAINERS else None


def _worst_case_problem(s: DpsgdSection) -> str | None:
    """Why ``canary = "worst-case"`` (or ``mechanism``) cannot be used as configured."""
    if s.canary != "worst-case":
        return "'mechanism' is used by canary = 'worst-case' only" if s.mechanism else None
    mechanism = erm_mechanism(s)
    if mechanism is None:
        return (
            "canary = 'worst-case' needs an ERM trainer ('output-perturbation', "
            f"'multiparty') or 'mechanism' naming the density; got trainer={s.trainer!r}"
        )
    need = ["epsilon", "lam"] + (["parties"] if mechanism == "multiparty" else [])
    missing = [k for k in need if k not in s.options]
    if missing:
        return f"canary = 'worst-case' with mechanism {mechanism!r} needs options {missing}"
    if s.black_box is not None:
        return "[dpsgd.black_box] does not apply to canary = 'worst-case'"
    return None


class DpsgdSpec(Table):
    """What a dpsgd unit depends on: a pure, picklable function input."""

    section: DpsgdSection
    seed: int
    unit_size: int
    base_dir: str
