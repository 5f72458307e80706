"""The ``[membership]`` and ``[attribute]`` tables, and the specs their units receive.

Nothing here imports torch, scipy.stats or dp-accounting: loading and validating an audit
file stays fast.

Attack names (``[membership] attacks``):

- ``"loss"`` (Yeom et al. 2018), ``"shadow"`` (Shokri et al. 2017);
- ``"lira"``: LiRA online with variance "auto" (per-example from 64 reference models,
  global below), as in earlier releases;
- ``"lira-online"``, ``"lira-offline"``: LiRA with per-example variances, online (IN and
  OUT fits) or offline (OUT fit only); ``"lira-online-global"``,
  ``"lira-offline-global"``: the same with one global variance (Carlini et al. 2022);
  ``"lira-online-shrunk"``, ``"lira-offline-shrunk"``: per-example variances shrunk
  toward the global one by a conjugate prior whose strength is fitted across rows;
  ``"lira-online-shrunk-t"``, ``"lira-offline-shrunk-t"``: the same prior with the
  Student-t posterior predictive in place of the Gaussian;
- ``"rmia"``, ``"rmia-offline"``: RMIA (Zarifzadeh, Liu, Shokri 2024), online or offline
  with the linear approximation's ``rmia_offline_a``; ``rmia_gamma`` is its γ and
  ``rmia_population_samples`` the population rows z;
- ``"auto"`` (the default's reference attack): the online LiRA variant or RMIA with the
  highest TPR at low FPR when each reference model in turn plays the target and the
  others its references (:mod:`dpaudit.attacks.auto`); the choice depends on the
  reference models only, so it is no multiple comparison on the target. Needs
  ``reference_models >= 4``.
- ``"whitebox"``: per-example gradient norms of the target, layer by layer, scored by an
  attack model fitted on ``shadow_models`` shadow models (Nasr, Shokri, Houmansadr 2019;
  :mod:`dpaudit.attacks.whitebox`); reads the parameters of a target dpaudit trains.

- ``"zlib"``, ``"min-k"``, ``"min-k++"``, ``"reference"`` (and ``"loss"``): the attacks on
  a causal language model (``[target] format = "huggingface"``), defined in
  :mod:`dpaudit.language.attacks`; ``reference`` needs ``[target] reference_paths``.
  ``min_k_fraction`` is Min-K%'s k (default 0.2).

``headline`` names the attack whose one-run bound enters the verdict (and so the report's
headline and the gate's bound checks); the other attacks' tests (metrics, curves, their
own one-run and heuristic bounds in the test's details) still go into results.json.
Without ``headline`` every attack's one-run bound enters the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, get_args

from pydantic import Field, model_validator

from dpaudit.errors import ConfigError
from dpaudit.kinds.base import dataset_digest
from dpaudit.sections import (
    DataSection,
    Epsilon,
    InputPerturbationSection,
    ModelSection,
    Table,
    TargetSection,
    TrainingSection,
)

if TYPE_CHECKING:
    from dpaudit.kinds.base import RunContext

__all__ = [
    "DEFAULT_ATTACKS",
    "DEFAULT_LANGUAGE_ATTACKS",
    "DEFAULT_POPULATION_SHARE",
    "INPUT_PERTURBATION",
    "LANGUAGE_ATTACKS",
    "POPULATION_NEEDED",
    "REFERENCE_ATTACKS",
    "RMIA_ATTACKS",
    "SWEEP_PARAMETERS",
    "TRAINS_REFERENCES",
    "Attack",
    "AttributeSection",
    "LocalRandomisers",
    "MembershipSection",
    "OwnSpec",
    "SweepSection",
    "TargetSpec",
    "check_language_attacks",
    "check_variants",
    "language_attacks",
    "population_share",
    "population_shortfall",
    "variants",
]

Attack = Literal[
    "loss",
    "shadow",
    "lira",
    "lira-online",
    "lira-offline",
    "lira-online-global",
    "lira-offline-global",
    "lira-online-shrunk",
    "lira-offline-shrunk",
    "lira-online-shrunk-t",
    "lira-offline-shrunk-t",
    "rmia",
    "rmia-offline",
    "auto",
    "whitebox",
    "zlib",
    "min-k",
    "min-k++",
    "reference",
]
#: The attacks on a causal language model (``[target] format = "huggingface"``); ``loss``
#: is the one attack both kinds of target take (:mod:`dpaudit.language.attacks`).
LANGUAGE_ATTACKS: tuple[Attack, ...] = ("loss", "zlib", "min-k", "min-k++", "reference")
#: A language model's attacks when ``[membership] attacks`` is not given.
DEFAULT_LANGUAGE_ATTACKS: tuple[Attack, ...] = ("loss", "zlib", "min-k", "min-k++")
#: Attacks that read one shared reference set (LiRA's variants and RMIA).
REFERENCE_ATTACKS: tuple[Attack, ...] = tuple(
    a for a in get_args(Attack) if a not in ("loss", "shadow", "whitebox", *LANGUAGE_ATTACKS)
)
#: Attacks that read RMIA's options ("auto" has RMIA among its candidates).
RMIA_ATTACKS: tuple[Attack, ...] = ("rmia", "rmia-offline", "auto")
#: Attacks that train shadow or reference models.
TRAINS_REFERENCES: tuple[Attack, ...] = ("shadow", "whitebox", *REFERENCE_ATTACKS)
DEFAULT_ATTACKS: tuple[Attack, ...] = ("loss", "shadow", "auto")
#: OwnSpec fields that change only RMIA's scores (left out of the unit key without RMIA).
_RMIA_OPTIONS = ("rmia_offline_a", "rmia_gamma", "rmia_population_samples")
#: The ``[target] variants`` name of the input-perturbation target.
INPUT_PERTURBATION = "input-perturbation"
#: The rows of the attacker's population each attack needs, and what for: shadow models
#: train on population rows (and see others as non-members); RMIA compares each audited
#: row with population samples z; "auto" has RMIA among its candidates.
POPULATION_NEEDED: dict[str, tuple[int, str]] = {
    "shadow": (2, "it trains its shadow models on them"),
    "whitebox": (2, "it trains its shadow models on them"),
    "rmia": (1, "its reference samples z"),
    "rmia-offline": (1, "its reference samples z"),
    "auto": (1, "RMIA, one of its candidates, compares rows with them"),
}
#: ``[target] population_share`` when the file does not say and an attack needs
#: population rows: half the held-out rows, so the audited rows keep the other half.
DEFAULT_POPULATION_SHARE = 0.5


#: What ``[membership.sweep]`` may sweep: DP-SGD's σ directly, or σ calibrated to each ε.
SWEEP_PARAMETERS = ("noise_multiplier", "target_epsilon")


class LocalRandomisers(Table):
    """``[membership.sweep.input_perturbation]``: the local randomisers of a sweep's local
    points, every field of ``[target.input_perturbation]`` but ``epsilon`` (each point's).
    The default randomises every feature (each pixel of an image) by Laplace noise after
    clipping it to [−1, 1] (standardised units) and the label by k-ary randomised
    response: a record is protected, and its ε claimed, only when both are randomised."""

    features: Literal["laplace", "gaussian", "none"] = "laplace"
    labels: Literal["k-rr", "none"] = "k-rr"
    label_share: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    bound: Annotated[float, Field(gt=0.0, allow_inf_nan=False)] = 1.0
    delta: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None

    def at(self, epsilon: float) -> InputPerturbationSection:
        """The ``[target.input_perturbation]`` table of a single audit at ``epsilon``."""
        given = self.model_dump(exclude_unset=True)
        return InputPerturbationSection.model_validate(
            {"features": self.features, "labels": self.labels, "bound": self.bound}
            | given
            | {"epsilon": epsilon}
        )


class SweepSection(Table):
    """``[membership.sweep]``: one full membership audit per setting (a privacy–utility sweep).

    Give exactly one of ``noise_multiplier`` (DP-SGD's σ at each point) or
    ``target_epsilon`` (σ calibrated to each ε at ``[training.dp] target_delta``); every
    other field of ``[training.dp]`` (its clipping norm, δ) is shared by the points.
    ``local = true`` adds an ``input-perturbation`` point at each ``target_epsilon`` (the
    ε of one record's local randomisers, :class:`LocalRandomisers`), so local and
    central DP are compared at the same ε (Bernau et al., arXiv 1912.11328v4, Sect. 5).
    See :mod:`dpaudit.membership.sweep`.
    """

    noise_multiplier: (
        Annotated[
            list[Annotated[float, Field(gt=0.0, allow_inf_nan=False)]],
            Field(min_length=1),
        ]
        | None
    ) = None
    target_epsilon: (
        Annotated[
            list[Epsilon],
            Field(min_length=1),
        ]
        | None
    ) = None
    local: bool = False
    input_perturbation: LocalRandomisers = Field(default_factory=LocalRandomisers)

    @model_validator(mode="after")
    def _one_parameter(self) -> SweepSection:
        given = [k for k in SWEEP_PARAMETERS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of 'noise_multiplier' or 'target_epsilon' (got "
                f"{', '.join(given) or 'none'})"
            )
        values = self.values
        if len(set(values)) != len(values):
            raise ValueError(f"{self.parameter} lists a value twice: {values}")
        if self.local and self.target_epsilon is None:
            raise ValueError(
                "local = true compares local and central DP at the same ε: sweep "
                "'target_epsilon' (a noise multiplier has no local counterpart)"
            )
        if self.local:
            for value in values:
                self.input_perturbation.at(value)  # refuses randomisers that cannot run
        elif "input_perturbation" in self.model_fields_set:
            raise ValueError("input_perturbation is read only with local = true")
        return self

    @property
    def parameter(self) -> str:
        """The swept field of ``[training.dp]``."""
        return "noise_multiplier" if self.noise_multiplier is not None else "target_epsilon"

    @property
    def values(self) -> list[float]:
        """The swept values, in the order the file lists them."""
        return list(self.noise_multiplier or self.target_epsilon or [])


class MembershipSection(Table):
    """``[membership]``: the attacks and their reference models (and ``[membership.sweep]``,
    a sweep over the DP noise: :class:`SweepSection`)."""

    attacks: Annotated[list[Attack], Field(min_length=1)] = Field(
        default_factory=lambda: list(DEFAULT_ATTACKS)
    )
    reference_models: Annotated[int, Field(ge=2)] = 64
    shadow_models: Annotated[int, Field(ge=1)] = 16
    headline: Attack | None = None
    rmia_offline_a: Annotated[float, Field(ge=0.0, le=1.0)] = 0.3
    rmia_gamma: Annotated[float, Field(gt=0.0)] = 1.0
    rmia_population_samples: Annotated[int, Field(ge=1)] = 1000
    sweep: SweepSection | None = None
    min_k_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = 0.2

    @model_validator(mode="after")
    def _headline_is_listed(self) -> MembershipSection:
        if self.headline is not None and self.headline not in self.attacks:
            raise ValueError(
                f"headline = {self.headline!r} is not one of the attacks {self.attacks}"
            )
        if len(set(self.attacks)) != len(self.attacks):
            raise ValueError(f"attacks lists an attack twice: {self.attacks}")
        if "auto" in self.attacks and self.reference_models < 4:
            raise ValueError(
                f"the 'auto' attack needs reference_models >= 4 (each reference model in "
                f"turn plays the target with the others as its references); got "
                f"{self.reference_models}. Raise reference_models or list another attack."
            )
        return self


def language_attacks(section: MembershipSection) -> list[str]:
    """A language model's attacks: ``[membership] attacks`` when the file gives them, else
    :data:`DEFAULT_LANGUAGE_ATTACKS`."""
    if "attacks" in section.model_fields_set:
        return list(section.attacks)
    return list(DEFAULT_LANGUAGE_ATTACKS)


def check_language_attacks(section: MembershipSection, *, language: bool) -> None:
    """``ValueError`` when an attack does not fit the target: the language attacks need a
    language model, and a language model takes only those."""
    if language:
        wrong = [a for a in language_attacks(section) if a not in LANGUAGE_ATTACKS]
        if wrong:
            raise ValueError(
                f"[membership] attacks {wrong} need a classifier; a language model "
                f"(format = 'huggingface') takes {', '.join(LANGUAGE_ATTACKS)}"
            )
        if section.sweep is not None:
            raise ValueError("[membership.sweep] trains its own targets; a language model is yours")
        return
    wrong = [a for a in section.attacks if a in LANGUAGE_ATTACKS and a != "loss"]
    if wrong:
        raise ValueError(
            f"[membership] attacks {wrong} score texts under a causal language model: "
            "give [target] format = 'huggingface', path, members and non_members"
        )
    if "min_k_fraction" in section.model_fields_set:
        raise ValueError("[membership] min_k_fraction is read only for a language model")


class AttributeSection(Table):
    """``[attribute]``: Yeom et al. attribute inference on ``[data] sensitive``; with
    ``[attribute.sweep]`` (the table of :class:`SweepSection`) one full attribute audit
    per DP setting (:mod:`dpaudit.membership.sweep`)."""

    sweep: SweepSection | None = None


# ------------------------------------------------------------------------ unit specs


class TargetSpec(Table):
    """The recipe of dpaudit's own target (picklable; its JSON names the stored units).

    The ``membership`` and ``attribute`` kinds train the same target from it, so each
    kind's units can train it on their own and still attack the very same model.
    """

    data: DataSection
    model: ModelSection
    training: TrainingSection
    seed: int
    base_dir: str
    device: str = "cpu"
    input_perturbation: InputPerturbationSection | None = None

    @classmethod
    def for_audit(cls, context: RunContext, **fields: Any) -> Self:
        """The spec of the audit's own target (``fields``: a subclass's own fields)."""
        sh = context.shared
        if sh.data is None:  # the kinds' check() refuses such a file when it loads
            raise ConfigError("dpaudit's own target needs a [data] table")
        return cls(
            data=sh.data,
            model=sh.model,
            training=sh.training,
            seed=context.seed,
            base_dir=str(context.base_dir),
            input_perturbation=sh.target.input_perturbation,
            **fields,
        )

    def key_data(self) -> dict[str, Any]:
        """What names the units: the recipe and the data file's bytes, not the device or
        folder (``input_perturbation`` only when given, so earlier audits keep their unit
        keys)."""
        return self._key_data(set())

    def _key_data(self, exclude: set[str]) -> dict[str, Any]:
        exclude |= {"base_dir", "device"}
        if self.input_perturbation is None:
            exclude.add("input_perturbation")
        return {
            **self.model_dump(mode="json", exclude=exclude),
            "data_file": dataset_digest(self.data.dataset, Path(self.base_dir)),
        }


class OwnSpec(TargetSpec):
    """An own target's membership units: the target recipe and the attacks."""

    attacks: tuple[str, ...]
    reference_models: int
    shadow_models: int
    rmia_offline_a: float = 0.3
    rmia_gamma: float = 1.0
    rmia_population_samples: int = 1000

    def key_data(self) -> dict[str, Any]:
        """The target's key, and RMIA's options only when an RMIA attack runs."""
        rmia = set(RMIA_ATTACKS) & set(self.attacks)
        return self._key_data(set() if rmia else set(_RMIA_OPTIONS))


def population_share(target: TargetSection, attacks: Sequence[str]) -> float | None:
    """The share of a brought target's held-out rows that becomes the attacker's population
    when no row is left for it: ``[target] population_share``, else
    :data:`DEFAULT_POPULATION_SHARE` when an attack needs population rows, else ``None``
    (every row stays audited)."""
    if target.population_share is not None:
        return target.population_share
    if any(a in POPULATION_NEEDED for a in attacks):
        return DEFAULT_POPULATION_SHARE
    return None


def population_shortfall(attacks: Sequence[str], rows: int) -> str | None:
    """What the first attack that needs more than ``rows`` population rows says, or ``None``.

    Returns:
        ``"The shadow attack needs at least 2 rows of the attacker's population (it
        trains its shadow models on them); this audit leaves 0."``: the callers add what
        to change.
    """
    for attack in attacks:
        needed, why = POPULATION_NEEDED.get(attack, (0, ""))
        if rows < needed:
            row_s = "row" if needed == 1 else "rows"
            return (
                f"The {attack} attack needs at least {needed} {row_s} of the attacker's "
                f"population ({why}); this audit leaves {rows}."
            )
    return None


def variants(target: TargetSection, training: TrainingSection) -> list[str]:
    """The targets to train: ``[target] variants``, else ``dp`` when DP is configured."""
    if target.variants is not None:
        return list(dict.fromkeys(target.variants))
    return ["dp"] if training.dp is not None else ["plain"]


def check_variants(target: TargetSection, training: TrainingSection) -> None:
    """``ValueError`` when a listed variant cannot be trained."""
    if "dp" in variants(target, training) and training.dp is None:
        raise ValueError("[target] variants lists 'dp' but [training.dp] is missing")
    problem = training.target_mu_problem(full_batch=training.full_batch)
    if problem is not None:
        raise ValueError(f"[training] {problem}")
