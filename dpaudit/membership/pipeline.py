"""Membership and attribute audits of a target model that dpaudit trains itself.

The pipeline (a Python API; the audit-file / CLI layer wraps it, so nothing here reads or
writes files or prints):

1. :func:`prepare_target` draws ``audited_size`` rows of the dataset (the audited pool)
   and keeps the rest (or ``population_size`` of it) as the attacker's population; the
   standardisation is fitted on the population only, so no audited row shapes the
   preprocessing (DP-SGD does not protect a mean and scale computed from its members).
   Each audited row is put into the target's training set by an independent fair coin,
   and the target is trained with :func:`dpaudit.training.train_many`.
2. :func:`audit_membership` runs each membership attack on the audited rows — attacks see
   the features and labels, never the coins — and summarises the scores: ROC metrics with
   intervals, the one-run ε lower bound (rigorous, because membership was decided by fair
   coins), and ε / μ bounds that treat rows as independent trials (labelled "heuristic":
   the rows share one trained model, so they are not independent).
3. :func:`audit_attribute` runs Yeom et al.'s attribute inference on the same target.

When the target was trained with DP-SGD, the accountant's ε for what the engine actually
ran (its :class:`~dpaudit.records.DPSGDRecord`) is reported next to the lower bounds.

The attacks score through :func:`dpaudit.membership.scoring.score_rows` and each attack's
scores are summarised by :func:`dpaudit.membership.summary.summarise_attack`: the same
two functions serve the ``membership`` audit kind, so the API and an audit file compute
every score and bound the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit.accounting.upper_bounds import from_records
from dpaudit.attacks import AttackContext, AttributeAttack, MembershipAttack, sensitive_prior
from dpaudit.data import Dataset, split_dataset
from dpaudit.errors import DataError, DpauditError, check_in_interval, check_integer
from dpaudit.membership.input_perturbation import InputPerturbation, randomise
from dpaudit.membership.scoring import (
    Progress,
    resolve_attacks,
    score_rows,
    stage,
    target_accuracy,
)
from dpaudit.membership.summary import (
    DEFAULT_FPRS,
    DEFAULT_GUESS_FRACTION,
    AttackOutcome,
    AttackScores,
    AttributeAuditResult,
    AttributeGuesses,
    attack_seed,
    attribute_result,
    one_run_bound,
    summarise_attack,
)
from dpaudit.models import ModelStack
from dpaudit.stats import check_confidence_level
from dpaudit.training import train_many

if TYPE_CHECKING:
    from dpaudit.models import ModelSpec
    from dpaudit.records import DPSGDRecord
    from dpaudit.training import TrainingSpec, TrainResult

__all__ = [
    "AttackOutcome",
    "AttackScores",
    "AttributeAuditResult",
    "AttributeGuesses",
    "AuditedTarget",
    "MembershipAuditResult",
    "attack_seed",
    "attribute_result",
    "audit_attribute",
    "audit_membership",
    "fair_coins",
    "guess_attributes",
    "one_run_bound",
    "prepare_target",
    "resolve_attacks",
    "score_attacks",
]


# ----------------------------------------------------------------------------- target


@dataclass(frozen=True, repr=False)
class AuditedTarget:
    """A target model trained on the audited rows that won their fair coin.

    Attributes:
        dataset: the dataset, standardised on the population rows.
        audited: ``(m,)`` row indices of the audited pool.
        population: ``(P,)`` row indices of the attacker's population (disjoint).
        membership: ``(m,)`` bool, the coins: whether each audited row trained the target.
        models: the trained target (a stack of one model).
        record: what DP-SGD actually ran, or ``None`` for non-private training.
        model: the architecture; training: the recipe; seed: the seed.
        seconds: training time.
        perturbation: for the input-perturbation variant, the randomisers' parameters as
            they ran (:func:`dpaudit.membership.input_perturbation.randomise`); else ``None``.
    """

    dataset: Dataset
    audited: np.ndarray
    population: np.ndarray
    membership: np.ndarray
    models: ModelStack
    record: DPSGDRecord | None
    model: ModelSpec
    training: TrainingSpec
    seed: int
    seconds: float
    perturbation: dict[str, Any] | None = None

    @property
    def audited_X(self) -> np.ndarray:
        return self.dataset.X[self.audited]

    @property
    def audited_y(self) -> np.ndarray:
        return self.dataset.y[self.audited]

    def context(self, *, device: str = "cpu", progress: Any = None) -> AttackContext:
        """The attacker's knowledge of this target (no coins in it)."""
        return AttackContext(
            target=self.models,
            model=self.model,
            training=self.training,
            # The expected size under fair coins, not the realised count: the attacker's
            # knowledge must not depend on the coins at all. The input-perturbation target
            # trains on every slot (members and substitutes): its size is m, whatever the coins.
            target_train_size=(
                self.audited.size
                if self.perturbation is not None
                else max(1, self.audited.size // 2)
            ),
            population_X=self.dataset.X[self.population],
            population_y=self.dataset.y[self.population],
            num_classes=self.dataset.num_classes,
            device=device,
            progress=progress,
        )

    def __repr__(self) -> str:
        return (
            f"AuditedTarget(dataset={self.dataset.name!r}, audited={self.audited.size}, "
            f"members={int(self.membership.sum())}, population={self.population.size}, "
            f"dp={self.record is not None}, seed={self.seed})"
        )


def fair_coins(audited_size: int, *, seed: int) -> np.ndarray:
    """The audited rows' membership coins that :func:`prepare_target` draws for ``seed``.

    One independent fair coin per audited row: the premise of the one-run theorem
    (Steinke, Nasr, Jagielski 2023: canaries included i.i.d. with probability 1/2).
    Exposed so that a caller can size DP noise for the actual number of members before
    training (the sampling rate q = batch_size / members).
    """
    m = check_integer("audited_size", audited_size, low=1)
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xC01]))
    return rng.random(m) < 0.5


def prepare_target(
    dataset: Dataset,
    *,
    model: ModelSpec,
    training: TrainingSpec,
    audited_size: int,
    population_size: int | None = None,
    seed: int,
    device: str = "cpu",
    progress: Callable[[int, int], None] | None = None,
    input_perturbation: InputPerturbation | None = None,
) -> AuditedTarget:
    """Draw the audited pool, toss a fair coin per row, and train the target on the winners.

    With ``input_perturbation`` the game is replace-one (see
    :mod:`dpaudit.membership.input_perturbation`): every audited slot holds its row when the coin
    says "member", else a substitute population row drawn for that slot independently of
    the coins; the m slots are randomised once and the target trains on all of them.

    Args:
        dataset: an encoded (not yet standardised) dataset.
        model: architecture of the target.
        training: its training recipe (plain or DP-SGD).
        audited_size: m, rows whose membership is audited; about m/2 train the target.
        population_size: rows kept for the attacker (default: every other row).
        seed: seed of the split, the coins and the training.
        device: torch device.
        progress: ``(done, total)`` callback passed to the training engine.
        input_perturbation: the local randomisers, or ``None`` (train on the rows as they are).

    Raises:
        DataError: the dataset is too small, or no audited row won its coin.
    """
    m = check_integer("audited_size", audited_size, low=2)
    if population_size is None:
        population_size = dataset.num_rows - m
        if population_size < 0:
            raise DataError(
                f"The dataset {dataset.name!r} has {dataset.num_rows} rows, fewer than "
                f"audited_size={m}."
            )
    split = split_dataset(
        dataset,
        target_size=m,
        holdout_size=0,
        population_size=population_size,
        seed=seed,
        standardize="population" if population_size > 1 else "none",
    )
    coins = fair_coins(m, seed=seed)
    if not coins.any():
        raise DataError("No audited row won its coin; use a larger 'audited_size'.")
    X = split.dataset.X[split.train]
    y = split.dataset.y[split.train]
    mask = coins[None, :]
    perturbation = None
    if input_perturbation is not None:
        X, y, perturbation = _randomised_slots(
            split.dataset, split.train, split.population, coins, input_perturbation, seed=seed
        )
        mask = np.ones_like(mask)
    result: TrainResult = train_many(
        X,
        y,
        mask,
        model=model,
        training=training,
        seed=int(np.random.SeedSequence([seed, 0x7A6]).generate_state(1)[0]),
        num_classes=dataset.num_classes,
        device=device,
        progress=progress,
    )
    if not isinstance(result.models, ModelStack):  # the engine path always gives a stack
        raise DpauditError("The target's training returned no ModelStack.")
    return AuditedTarget(
        dataset=split.dataset,
        audited=split.train,
        population=split.population,
        membership=coins,
        models=result.models,
        record=result.records[0],
        model=model,
        training=training,
        seed=seed,
        seconds=float(result.seconds),
        perturbation=perturbation,
    )


def _randomised_slots(
    dataset: Dataset,
    audited: np.ndarray,
    population: np.ndarray,
    coins: np.ndarray,
    spec: InputPerturbation,
    *,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The m training slots of the input-perturbation target, randomised.

    Slot i holds audited row i if its coin is heads, else its substitute: population
    rows drawn for the slots from their own seed, before and whatever the coins are
    (with replacement when the population is smaller than m), so flipping one coin is a
    replace-one change of one slot.
    """
    if population.size == 0:
        raise DataError(
            "The input-perturbation target needs population rows to stand in for non-members "
            "(population_size >= 1)."
        )
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5B5]))
    m = audited.size
    substitutes = rng.choice(population, size=m, replace=population.size < m)
    rows = np.where(coins, audited, substitutes)
    out = randomise(
        dataset.X[rows], dataset.y[rows], num_classes=dataset.num_classes, spec=spec, seed=seed
    )
    parameters = dict(out.parameters, substitutes=int((~coins).sum()), game="replace-one")
    return out.X.astype(dataset.X.dtype, copy=False), out.y, parameters


def _accountant_epsilon(record: DPSGDRecord | None, delta: float) -> float | None:
    """The accountant's ε at δ for what the target ran (the one place: upper_bounds)."""
    if record is None:
        return None
    return from_records([record], delta, with_mu=False).epsilon


# ------------------------------------------------------------------------- membership


@dataclass(frozen=True, repr=False)
class MembershipAuditResult:
    """Membership audit of one target: per-attack outcomes and the accountant's ε.

    Attributes:
        dataset: dataset name; data_hash: its hash (after standardisation).
        audited_size: m; members: how many won their coin.
        membership: ``(m,)`` the coins (revealed only here, after the attacks ran).
        outcomes: one :class:`AttackOutcome` per attack, in the order asked.
        accountant_epsilon: the accountant's ε at ``delta`` for the target's DP-SGD run
            (``None`` for non-private training); record: that run.
        confidence_level, delta, seed: the audit's settings.
        target_accuracy: the target's accuracy on its members, on the non-members, on the
            population rows (``held_out``: they never trained it; not for the
            input-perturbation target, which trains on some) and the majority-class
            rate of its members (:func:`dpaudit.membership.scoring.target_accuracy`).
        seconds: timings (``"target"``, each attack, ``"total"``).
    """

    dataset: str
    data_hash: str
    audited_size: int
    members: int
    membership: np.ndarray
    outcomes: tuple[AttackOutcome, ...]
    accountant_epsilon: float | None
    record: DPSGDRecord | None
    confidence_level: float
    delta: float
    seed: int
    target_accuracy: dict[str, float]
    seconds: dict[str, float] = field(default_factory=dict)

    def outcome(self, attack: str) -> AttackOutcome:
        for o in self.outcomes:
            if o.attack == attack:
                return o
        known = ", ".join(repr(o.attack) for o in self.outcomes)
        raise DpauditError(f"No outcome for attack {attack!r}; this audit ran {known}.")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "membership",
            "dataset": self.dataset,
            "data_hash": self.data_hash,
            "audited_size": self.audited_size,
            "members": self.members,
            "membership": [bool(b) for b in self.membership],
            "outcomes": [o.to_dict() for o in self.outcomes],
            "accountant_epsilon": self.accountant_epsilon,
            "record": None if self.record is None else self.record.to_dict(),
            "confidence_level": self.confidence_level,
            "delta": self.delta,
            "seed": self.seed,
            "target_accuracy": dict(self.target_accuracy),
            "seconds": dict(self.seconds),
        }

    def __repr__(self) -> str:
        eps = "None" if self.accountant_epsilon is None else f"{self.accountant_epsilon:.3f}"
        return (
            f"MembershipAuditResult(dataset={self.dataset!r}, audited_size="
            f"{self.audited_size}, members={self.members}, attacks="
            f"{[o.attack for o in self.outcomes]}, accountant_epsilon={eps}, "
            f"confidence_level={self.confidence_level}, delta={self.delta})"
        )


def score_attacks(
    target: AuditedTarget,
    attacks: Sequence[MembershipAttack],
    *,
    seed: int,
    device: str = "cpu",
    progress: Progress | None = None,
) -> tuple[AttackScores, ...]:
    """Run each attack on the audited rows of ``target`` (features and labels only, never
    the coins), through the one scoring path (:func:`dpaudit.membership.scoring.score_rows`:
    the attack at position i seeded with ``attack_seed(seed, i)``, reference attacks
    sharing one reference set).

    Raises:
        DpauditError: an attack returned non-finite scores.
    """
    context = target.context(device=device)
    return score_rows(
        context, target.audited_X, target.audited_y, attacks, seed=seed, progress=progress
    )


def audit_membership(
    dataset: Dataset,
    *,
    model: ModelSpec,
    training: TrainingSpec,
    attacks: Sequence[str | MembershipAttack] = ("loss", "shadow", "auto"),
    audited_size: int,
    population_size: int | None = None,
    num_reference_models: int = 64,
    num_shadow_models: int = 16,
    seed: int,
    confidence_level: float = 0.95,
    delta: float = 1e-5,
    fprs: tuple[float, ...] = DEFAULT_FPRS,
    guess_fraction: float = DEFAULT_GUESS_FRACTION,
    target: AuditedTarget | None = None,
    device: str = "cpu",
    progress: Progress | None = None,
) -> MembershipAuditResult:
    """Train a target on fair-coin members of an audited pool and attack its membership.

    Args:
        dataset: an encoded dataset (:func:`dpaudit.data.load_dataset`).
        model: the target's architecture.
        training: its training recipe (``training.dp`` set for DP-SGD).
        attacks: registry names (``"loss"``, ``"shadow"``, ``"lira"``, ...) or attack
            objects.
        audited_size: m, the audited rows; each joins the target by a fair coin.
        population_size: the attacker's rows (default: all other rows).
        num_reference_models: the reference models of every reference attack (LiRA's
            variants, RMIA, ``"auto"``); the attacks that agree on it share one set.
        num_shadow_models: the shadow attack's models (when ``"shadow"`` is named).
        seed: seed of everything (split, coins, training, attacks).
        confidence_level: c for every interval and bound.
        delta: δ of the ε bounds and of the accountant's ε.
        fprs: FPRs at which TPR is reported.
        guess_fraction: share of m guessed at each end by the one-run test (fixed before
            the scores are seen).
        target: an already trained target from :func:`prepare_target` (then ``dataset``,
            ``model``, ``training``, ``audited_size`` and ``population_size`` must match
            it; they are not re-checked).
        device: torch device.
        progress: ``(stage, done, total)`` callback, stage being ``"target"`` or an
            attack's name.

    Returns:
        :class:`MembershipAuditResult`.

    References:
        Steinke, Nasr, Jagielski (2023), "Privacy Auditing with One (1) Training Run",
        Theorem 3.1 (why the fair coins make the one-run bound rigorous).
    """
    c = check_confidence_level(confidence_level)
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    frac = check_in_interval("guess_fraction", guess_fraction, 0.0, 0.5, low_open=True)
    resolved = resolve_attacks(
        attacks, num_reference_models=num_reference_models, num_shadow_models=num_shadow_models
    )
    start = time.perf_counter()
    trained_here = target is None
    if target is None:
        target = prepare_target(
            dataset,
            model=model,
            training=training,
            audited_size=audited_size,
            population_size=population_size,
            seed=seed,
            device=device,
            progress=stage(progress, "target"),
        )
    seconds = {"target": target.seconds}
    X, y, coins = target.audited_X, target.audited_y, target.membership
    if coins.all():
        raise DataError("Every audited row won its coin; no non-member to compare with.")
    # The population never trained the target (the input-perturbation target trains on
    # population rows standing in for non-members: no held-out rows there).
    population = target.dataset.X[target.population], target.dataset.y[target.population]
    held_out = None if target.perturbation is not None else population
    accuracy = target_accuracy(target.models, X, y, coins, held_out=held_out)
    outcomes = []
    for i, scored in enumerate(
        score_attacks(target, resolved, seed=seed, device=device, progress=progress)
    ):
        key = scored.attack if scored.attack not in seconds else f"{scored.attack}#{i}"
        seconds[key] = scored.seconds
        outcomes.append(
            summarise_attack(
                scored,
                coins,
                confidence_level=c,
                delta=d,
                seed=attack_seed(seed, i),
                fprs=fprs,
                guess_fraction=frac,
            )
        )
    # A target passed in was trained before this call: add its training time.
    seconds["total"] = (time.perf_counter() - start) + (0.0 if trained_here else target.seconds)
    return MembershipAuditResult(
        dataset=target.dataset.name,
        data_hash=target.dataset.data_hash,
        audited_size=coins.size,
        members=int(coins.sum()),
        membership=coins.copy(),
        outcomes=tuple(outcomes),
        accountant_epsilon=_accountant_epsilon(target.record, d),
        record=target.record,
        confidence_level=c,
        delta=d,
        seed=seed,
        target_accuracy=accuracy,
        seconds=seconds,
    )


# -------------------------------------------------------------------------- attribute


def audit_attribute(
    dataset: Dataset,
    *,
    model: ModelSpec,
    training: TrainingSpec,
    audited_size: int,
    population_size: int | None = None,
    seed: int,
    confidence_level: float = 0.95,
    delta: float = 1e-5,
    target: AuditedTarget | None = None,
    device: str = "cpu",
    progress: Callable[[int, int], None] | None = None,
) -> AttributeAuditResult:
    """Yeom et al.'s attribute inference on a fair-coin target.

    The dataset must have been loaded with ``sensitive=<column>``. The same arguments as
    :func:`audit_membership` train the same target (or pass ``target=``).

    Raises:
        DataError: the dataset has no sensitive column.

    References:
        Yeom, Giacomelli, Fredrikson, Jha (2018), IEEE CSF (attribute inference and its advantage).
    """
    c = check_confidence_level(confidence_level)
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    if dataset.sensitive is None:
        raise DataError(
            "Attribute inference needs a sensitive column: load the dataset with "
            "sensitive='<column>'."
        )
    t0 = time.perf_counter()
    if target is None:
        target = prepare_target(
            dataset,
            model=model,
            training=training,
            audited_size=audited_size,
            population_size=population_size,
            seed=seed,
            device=device,
            progress=progress,
        )
    guesses = guess_attributes(target)
    eps = _accountant_epsilon(target.record, d)
    return attribute_result(
        guesses,
        confidence_level=c,
        delta=d,
        accountant_epsilon=eps,
        seed=seed,
        seconds=time.perf_counter() - t0,
    )


def guess_attributes(target: AuditedTarget) -> AttributeGuesses:
    """Yeom et al.'s attribute guesses for the audited rows of ``target``.

    Raises:
        DataError: the target's dataset has no sensitive column, or the audited rows lack
            members or non-members.
    """
    sensitive = target.dataset.sensitive
    if sensitive is None:  # a target prepared from another dataset
        raise DataError("The target's dataset has no sensitive column.")
    coins = target.membership
    if coins.all() or not coins.any():
        raise DataError("Need both members and non-members among the audited rows.")
    prior = sensitive_prior(sensitive.codes[target.population], sensitive.num_values)
    attack = AttributeAttack()
    scores = attack.score(
        target.models, target.audited_X, target.audited_y, sensitive=sensitive, prior=prior
    )[0]
    return AttributeGuesses(
        dataset=target.dataset.name,
        sensitive=sensitive.name,
        values=tuple(sensitive.values),
        guesses=attack.guess(scores),
        truth=sensitive.codes[target.audited],
        membership=coins.copy(),
        prior=prior,
    )
