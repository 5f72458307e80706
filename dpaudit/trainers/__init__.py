"""The registry of trainers a canary audit can audit, and the user-trainer protocol.

A trainer trains K models, model ``k`` on the rows ``i`` of ``X`` with
``membership[k, i]``, and returns what the audit needs: the canary's score under every
model (or the models, from which the audit computes black-box scores) and **what it
actually ran** — a :class:`~dpaudit.records.DPSGDRecord` per model, which the
accountant turns into ε(δ) and μ, or a :class:`~dpaudit.accounting.upper_bounds.Claim` (ε, δ, μ) for
procedures without a DP-SGD accountant. The upper bound of the audit is read from that
output, never from the configuration.

Built-ins (:data:`TRAINERS`):

* ``dpsgd``: the engine's Poisson-subsampled DP-SGD (Abadi et al. 2016, Alg. 1).
* ``dpgd``: the engine's full-batch DP-GD (q = 1, every member in every step).
* ``output-perturbation``: λ-regularised logistic regression trained to its optimum,
  then noise b with density ∝ exp(−nλε‖b‖/2) (Chaudhuri, Monteleoni, Sarwate 2011,
  Alg. 1); claims ε-DP.
* ``multiparty``: m parties' λ-regularised models averaged, then noise of scale
  2G/(m·n₍₁₎·λ·ε) (Jayaraman et al. 2018, model aggregation); claims ε-DP.
* ``plain``: the engine without clipping or noise; claims nothing.
* ``gradient-laplace``: full-batch GD with Laplace noise of scale Δ1·T/ε on the
  clipped-gradient sum, Δ1 = m·√d·C; claims ε-DP by basic composition.

User trainers are given as ``"pkg.module:function"`` and follow this protocol::

    def my_trainer(X, y, membership, *, seed, canary, settings) -> TrainerOutput | dict

    X           (n, d) float32 features; with an input-space canary its row is X[canary.row]
    y           (n,) int64 labels
    membership  (K, n) bool: model k trains on rows i with membership[k, i]
                (the canary's column is ``canary.included``)
    seed        int: the base seed; a unit of models is ``settings.model_offset`` onwards,
                and model k must draw its randomness from (seed, model_offset + k) only
    canary      CanarySetup: kind, threat_model, row, direction (Dirac), included (K,)
    settings    TrainerSettings: model, training (TrainingSpec), num_classes, options

returning a :class:`TrainerOutput` (or a dict with the same keys): ``scores`` (K,)
(larger = "canary in") or ``models`` (a ModelStack, scored black-box by the audit), and
``records`` (one DPSGDRecord per model) or ``claim`` (a Claim, or a dict
``{"epsilon": .., "delta": .., "mu": ..}``), and optionally ``observations`` (a
:class:`~dpaudit.bounds.greybox.GreyBoxObservations` of what ran step by step: batch sizes,
clipped norms, the noise on a coordinate no example touches, steps), which the audit
turns into grey-box gate checks.

White-box scores. A trainer that returns ``scores`` computes them itself; any function
of a model's transcript gives a valid audit, but its power depends on the choice.
``canary.score`` says which statistic the audit file asks for:

* ``"sum"``: Σ_t ⟨g_t, direction⟩, the plain sum of the privatised gradients g_t along
  the canary (Nasr et al. 2023, §3).
* ``"likelihood-ratio"`` (the default): for every step t, rescale the projection to
  the units of the noisy SUM, x_t = ⟨g_t, direction⟩ · (the divisor the trainer applied
  to the clipped sum + noise: the expected batch size q·n for Opacus-style DP-SGD, n
  for full-batch DP-GD, 1 if it does not divide), so that x_t ~ N(0, σ²C²) without
  the canary and (1 − q)·N(0, σ²C²) + q·N(C, σ²C²) with it, and return
  Σ_t ``mixture_log_likelihood_ratio(x_t, sampling_rate=q, noise_multiplier=σ,
  clipping_norm=C)`` (re-exported here from :mod:`dpaudit.theory.whitebox`). By the
  Neyman–Pearson lemma this is the most powerful test of "canary out" against
  "canary in" when the canary's coordinate is touched by no real gradient; for full
  batch (q = 1) it is an increasing affine map of the plain sum. Use the q, σ and C
  your training actually ran, and skip the steps a model did not take.

The built-in engine trainers do this with the sampling plan of the spec they run.
"""

from __future__ import annotations

import io
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit import theory
from dpaudit.accounting.upper_bounds import Claim
from dpaudit.bounds.greybox import GreyBoxObservations
from dpaudit.errors import ConfigError, DpauditError, check_choice
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.plugins import load_plugin
from dpaudit.records import DPSGDRecord
from dpaudit.safe_text import one_line
from dpaudit.theory import erm
from dpaudit.theory.whitebox import WHITE_BOX_SCORES, mixture_log_likelihood_ratio
from dpaudit.training import GradientCanary, StepInfo, TrainingSpec, train_many
from dpaudit.training.sampling import sampling_plan

__all__ = [
    "TRAINERS",
    "CanarySetup",
    "CapturedOutput",
    "TrainerOutput",
    "TrainerSettings",
    "canary_observer",
    "get_trainer",
    "mixture_log_likelihood_ratio",
    "output_perturbation_models",
    "regularised_logistic_optimum",
]


@dataclass(frozen=True)
class CanarySetup:
    """What a trainer is told about the canary.

    Attributes:
        kind: ``"mislabeled"``, ``"ood"``, ``"clipbkd"`` or ``"dirac"``.
        threat_model: ``"black-box"`` (the audit scores the final models) or
            ``"white-box"`` (the trainer returns a score of the privatised updates'
            projections on ``direction``, the one ``score`` names).
        included: ``(K,)`` whether each model's dataset holds the canary.
        row: the canary's row in ``X`` for input-space canaries, else ``None``.
        direction: ``(P,)`` the gradient canary (Dirac) in flat parameter order, else ``None``.
        score: the white-box statistic asked for (``[dpsgd] score``):
            ``"likelihood-ratio"`` (the sum over steps of
            :func:`mixture_log_likelihood_ratio`) or ``"sum"`` (the plain sum of the
            projections). Black-box audits ignore it.
        replaced: in a replace-one audit (``canary = "worst-case"``), the row the canary
            replaces: in the models without the canary only; else ``None``.
    """

    kind: str
    threat_model: str
    included: np.ndarray = field(repr=False)
    row: int | None = None
    direction: np.ndarray | None = field(default=None, repr=False)
    score: str = "likelihood-ratio"
    replaced: int | None = None


@dataclass(frozen=True)
class TrainerSettings:
    """How to train: the architecture, the optimiser and DP spec, and trainer options.

    Attributes:
        model: the architecture (logistic regression or MLP).
        training: epochs, batch size, learning rate and ``dp`` (σ, C) for the engine.
        num_classes: number of classes.
        model_offset: global index of the first model of this call (work units).
        options: trainer-specific numbers (``epsilon``, ``lam``, ``parties``, ...).
    """

    model: ModelSpec
    training: TrainingSpec
    num_classes: int
    model_offset: int = 0
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainerOutput:
    """What a trainer ran and produced.

    Attributes:
        scores: ``(K,)`` canary scores (larger = "in"), or ``None`` when ``models`` is set.
        models: the trained stack, scored black-box by the audit when ``scores`` is None.
        records: one :class:`DPSGDRecord` per model stating what was executed, or ``None``.
        claim: the (ε, δ)/μ guarantee of what ran, for trainers without a record.
        observations: what the trainer saw itself run, step by step (batch sizes, clipped
            norms, the noise on an untouched coordinate, steps), for the grey-box checks
            of :mod:`dpaudit.bounds.greybox`; ``None`` leaves those checks not evaluated.
    """

    scores: np.ndarray | None = field(default=None, repr=False)
    models: ModelStack | None = field(default=None, repr=False)
    records: tuple[DPSGDRecord, ...] | None = field(default=None, repr=False)
    claim: Claim | None = None
    observations: GreyBoxObservations | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.scores is None and self.models is None:
            raise DpauditError("A trainer must return 'scores' or 'models'. Got neither.")
        if self.records is None and self.claim is None:
            raise DpauditError(
                "A trainer must return what it ran: 'records' (DPSGDRecord per model) or "
                "'claim' (epsilon, delta, mu or rho). Got neither."
            )


Trainer = Callable[..., TrainerOutput]


class CapturedOutput:
    """What user code wrote to stdout and stderr while a trainer ran it once per model.

    A user's loop that prints its loss every epoch prints it once per model: hundreds of
    times in an audit. A trainer that runs user code per model captures each run
    (:meth:`capture`) and reports the lot once (:meth:`summary`). Lines are counted, not
    kept: the first line and up to :attr:`MAX_DISTINCT` distinct lines are remembered.
    A run that raises writes what it printed to the real stderr first, next to its error.
    """

    #: Distinct lines remembered; past this many, "distinct" is a lower bound.
    MAX_DISTINCT = 10_000
    #: Characters of the first line quoted in the summary.
    QUOTED = 200

    def __init__(self) -> None:
        self.lines = 0
        self.first: str | None = None
        self._distinct: set[str] = set()

    @contextmanager
    def capture(self) -> Iterator[None]:
        """Capture one run's stdout and stderr (Python-level writes, in order)."""
        buffer = io.StringIO()
        try:
            with redirect_stdout(buffer), redirect_stderr(buffer):
                yield
        except BaseException:
            sys.stderr.write(buffer.getvalue())
            raise
        finally:
            self._add(buffer.getvalue())

    def _add(self, text: str) -> None:
        # splitlines() also splits on the carriage returns a progress bar redraws with.
        for line in (line.strip() for line in text.splitlines()):
            if not line:
                continue
            self.lines += 1
            if self.first is None:
                self.first = line
            if len(self._distinct) < self.MAX_DISTINCT:
                self._distinct.add(line)

    def summary(self, who: str, runs: int) -> str | None:
        """One line on what ``runs`` runs of ``who`` printed, or ``None`` if nothing."""
        if self.first is None:
            return None
        distinct = len(self._distinct)
        more = "+" if distinct >= self.MAX_DISTINCT else ""
        plural = "" if self.lines == 1 else "s"
        first = one_line(self.first, limit=self.QUOTED)
        return (
            f"{who} printed {self.lines} line{plural} ({distinct}{more} distinct) over "
            f"{runs} model{'' if runs == 1 else 's'}, captured rather than shown; the "
            f'first: "{first}"'
        )


# ----------------------------------------------------------------------- engine trainers


class _ProjectionObserver:
    """Scores each model's white-box transcript along a gradient canary, step by step.

    After every step it reads each model's privatised gradient along the canary: the
    projection on ``direction`` (one run per model), or the coordinates ``columns``
    (the one-run audit's m Dirac canaries, one score per coordinate). It keeps two
    running scores per model and canary:

    * ``sums``: the plain sum of the projections, the white-box statistic of Nasr et al.
      2023 (§3). The update is −learning_rate × the privatised gradient when momentum
      and weight decay are 0, so this is the summed update up to a positive factor,
      which changes no threshold test.
    * ``log_likelihood_ratios`` (with ``mixture``): the sum over steps of
      :func:`dpaudit.theory.whitebox.mixture_log_likelihood_ratio` of the projection rescaled
      to the noisy sum's units. The engine divides (clipped sum + N(0, σ²C²) noise +
      canary) by the expected batch size q·n (n for full batch), so multiplying the
      projection by that divisor gives x_t = noise + C·[canary sampled] exactly (up to
      rounding) on a coordinate that no real gradient touches. By the Neyman–Pearson
      lemma this sum is the most powerful score against (1 − q)N(0, σ²C²) + qN(C, σ²C²)
      per step (see :mod:`dpaudit.theory.whitebox`).

    Models that have finished their steps (``info.active`` false) add nothing to either.
    """

    def __init__(
        self,
        direction: np.ndarray | None,
        num_models: int,
        model_offset: int,
        *,
        columns: np.ndarray | None = None,
        mixture: _Mixture | None = None,
    ) -> None:
        self.columns: torch.Tensor | None = None
        self.direction: torch.Tensor | None = None
        if columns is not None:
            self.columns = torch.as_tensor(np.asarray(columns, dtype=np.int64))
            width = int(self.columns.numel())
        else:
            d = np.asarray(direction, dtype=np.float64)
            nonzero = np.flatnonzero(d)
            if nonzero.size == 1:  # Dirac: one column
                self.columns = torch.as_tensor(nonzero[:1])
            else:
                self.direction = torch.as_tensor(d / np.linalg.norm(d))
            width = 1
        self.offset = model_offset
        self.mixture = mixture
        self._sums = np.zeros((num_models, width))
        self._llr = np.zeros((num_models, width))

    def __call__(self, info: StepInfo) -> None:
        g = info.gradients
        if self.columns is not None:
            proj = g[:, self.columns]
        else:
            assert self.direction is not None  # one of the two is set in __init__
            proj = (g @ self.direction.to(g.dtype)).unsqueeze(1)
        active = info.active.unsqueeze(1)
        proj = torch.where(active, proj, torch.zeros_like(proj))
        rows = info.model_indices.numpy() - self.offset
        values = proj.double().numpy()
        self._sums[rows] += values
        if self.mixture is not None:
            m = self.mixture
            x = values * m.expected[rows, None]  # back to the noisy sum's units
            llr = mixture_log_likelihood_ratio(
                x,
                sampling_rate=m.rates[rows, None],
                noise_multiplier=m.noise_multiplier,
                clipping_norm=m.clipping_norm,
            )
            self._llr[rows] += np.where(active.numpy(), llr, 0.0)

    @property
    def sums(self) -> np.ndarray:
        """The plain sums: ``(K,)`` along a direction, ``(K, m)`` on ``columns``."""
        return self._sums[:, 0].copy() if self._sums.shape[1] == 1 else self._sums.copy()

    @property
    def log_likelihood_ratios(self) -> np.ndarray:
        """The likelihood-ratio scores, shaped as :attr:`sums`."""
        if self.mixture is None:
            raise DpauditError("This observer was made without a mixture: no likelihood ratio.")
        return self._llr[:, 0].copy() if self._llr.shape[1] == 1 else self._llr.copy()

    def scores(self, score: str) -> np.ndarray:
        """The white-box scores asked for: ``"likelihood-ratio"`` or ``"sum"``."""
        check_choice("score", score, WHITE_BOX_SCORES)
        return self.log_likelihood_ratios if score == "likelihood-ratio" else self.sums


@dataclass(frozen=True)
class _Mixture:
    """What the likelihood-ratio score needs of the run, per model: q, the divisor of the
    noisy sum, σ and C (read from the training spec that runs, never from a claim)."""

    rates: np.ndarray
    expected: np.ndarray
    noise_multiplier: float
    clipping_norm: float


def _mixture(membership: np.ndarray, training: TrainingSpec, score: str) -> _Mixture | None:
    """The run's mixture parameters, or ``None`` when the score is the plain sum.

    q and T come from :func:`dpaudit.training.sampling.sampling_plan`, the formula the engine runs;
    the divisor is the engine's expected batch size q·n (n for full batch).

    Raises:
        ConfigError: no DP, or σ = 0 (the likelihood ratio of noiseless steps is
            degenerate; the plain sum still works).
    """
    if score != "likelihood-ratio":
        return None
    dp = training.dp
    if dp is None or dp.noise_multiplier <= 0:
        raise ConfigError(
            "The 'likelihood-ratio' white-box score needs noise (noise_multiplier > 0). "
            'Set score = "sum" in [dpsgd] for a noiseless run.'
        )
    sizes = membership.sum(axis=1).astype(np.int64)
    rates, _ = sampling_plan(
        sizes,
        batch_size=training.batch_size,
        epochs=training.epochs,
        full_batch=training.full_batch,
    )
    expected = sizes.astype(np.float64) if training.full_batch else rates * sizes
    return _Mixture(
        rates=np.asarray(rates, dtype=np.float64),
        expected=expected,
        noise_multiplier=dp.noise_multiplier,
        clipping_norm=dp.clipping_norm,
    )


def canary_observer(
    membership: np.ndarray,
    training: TrainingSpec,
    *,
    score: str,
    direction: np.ndarray | None = None,
    columns: np.ndarray | None = None,
    model_offset: int = 0,
) -> _ProjectionObserver:
    """A step observer that scores white-box canaries of the models ``membership`` trains.

    Args:
        membership: ``(K, n)`` the models' members (their sizes fix q and q·n).
        training: the spec that will run (σ, C, batch size, epochs, full batch).
        score: ``"likelihood-ratio"`` or ``"sum"``; both running scores are kept when the
            first is asked (:meth:`_ProjectionObserver.scores`).
        direction: the gradient canary ``(P,)`` (one score per model), or
        columns: m flat parameter indices (one score per model and coordinate).
        model_offset: global index of the first model (work units).

    Raises:
        DpauditError: an unknown ``score``.
        ConfigError: the likelihood ratio without noise.
    """
    check_choice("score", score, WHITE_BOX_SCORES)
    return _ProjectionObserver(
        direction,
        membership.shape[0],
        model_offset,
        columns=columns,
        mixture=_mixture(membership, training, score),
    )


class _GreyBoxObserver:
    """Records what the engine ran, step by step, for the grey-box checks.

    Per model and step: the realised batch size (the valid entries of the batch, so the
    rows the sampler drew: an input canary counts when sampled, a gradient canary, whose
    coin is separate, does not) and the privatised gradient on ``coordinate``, a first-layer
    weight on a feature column that is zero in every row a model can sample. Real
    gradients are 0 there (∂/∂W = δ·aᵀ with a = 0), so after multiplying back by the
    engine's divisor q·n it is the noise N(0, σ²C²) alone, except in models whose
    gradient canary sits on it (``touched``: NaN there). Per-example clipped norms are
    not exposed by the engine's fused clipped sum: reported as NaN (not observed).
    """

    def __init__(
        self, num_models: int, model_offset: int, coordinate: int | None, touched: np.ndarray
    ) -> None:
        self.offset = model_offset
        self.coordinate = coordinate
        self.touched = touched
        self.batch = np.zeros((num_models, 0), dtype=np.int64)
        self.noise = np.full((num_models, 0), np.nan)
        self.steps = np.zeros(num_models, dtype=np.int64)

    @classmethod
    def for_run(
        cls, X: np.ndarray, membership: np.ndarray, canary: CanarySetup, model_offset: int
    ) -> _GreyBoxObserver:
        """Choose the untouched coordinate: the feature column zero in the members of the
        most models (preferring one the gradient canary does not use)."""
        k = membership.shape[0]
        used = None
        if canary.direction is not None:  # white-box Dirac or black-box gradient canary
            nonzero = np.flatnonzero(canary.direction)
            if nonzero.size == 1 and int(nonzero[0]) < X.shape[1]:
                used = int(nonzero[0])  # first layer, unit 0, feature `used`
        nonzero_cols = (np.asarray(X) != 0).astype(np.int64)
        member_touch = (membership.astype(np.int64) @ nonzero_cols) > 0  # (K, d)
        free = ~member_touch
        if used is not None:
            free[:, used] &= ~np.asarray(canary.included, dtype=bool)
        counts = free.sum(axis=0)
        if counts.size == 0 or counts.max() == 0:
            return cls(k, model_offset, None, np.ones(k, dtype=bool))
        # Most untouched models first; among equals, a column the canary does not use.
        order = sorted(range(counts.size), key=lambda j: (-int(counts[j]), j == used, j))
        j = order[0]
        return cls(k, model_offset, j, ~free[:, j])

    def _grow(self, step: int) -> None:
        width = self.batch.shape[1]
        if step < width:
            return
        extra = max(step + 1 - width, width, 8)
        self.batch = np.pad(self.batch, ((0, 0), (0, extra)))
        self.noise = np.pad(self.noise, ((0, 0), (0, extra)), constant_values=np.nan)

    def __call__(self, info: StepInfo) -> None:
        self._grow(info.step)
        active = info.active.numpy()
        indices = info.model_indices.numpy() - self.offset
        if indices.size and active.all():
            start = int(indices[0])
            if np.array_equal(indices, np.arange(start, start + indices.size)):
                # every model of one contiguous chunk ran (the usual step): the same
                # values written through slices, not gathered and scattered per model
                self._record(info, slice(start, start + indices.size))
                return
        rows = indices[active]
        self.batch[rows, info.step] = info.batch_valid.sum(dim=1).numpy()[active]
        self.steps[rows] += 1
        if self.coordinate is not None:
            g = info.gradients[:, self.coordinate].double().numpy()[active]
            self.noise[rows, info.step] = g

    def _record(self, info: StepInfo, rows: slice) -> None:
        """One step in which every model of the chunk ``rows`` was active."""
        self.batch[rows, info.step] = info.batch_valid.sum(dim=1).numpy()
        self.steps[rows] += 1
        if self.coordinate is not None:
            self.noise[rows, info.step] = info.gradients[:, self.coordinate].double().numpy()

    def observations(self, records: tuple[DPSGDRecord | None, ...]) -> GreyBoxObservations | None:
        """The observations, with n, q, σ, C and T read from the engine's records."""
        if not records or any(r is None for r in records):
            return None
        recs = [r for r in records if r is not None]
        rates = np.array([r.sampling_rate for r in recs])
        sizes = np.array([r.dataset_size or 0 for r in recs], dtype=np.int64)
        width = max(int(self.steps.max(initial=0)), 1)
        self._grow(width - 1)
        # The engine divided the noisy sum by q·n (its expected batch size; n for full
        # batch, where q = 1): multiplying back gives the sum's units.
        noise = self.noise[:, :width] * (rates * sizes)[:, None]
        noise[self.touched] = np.nan
        return GreyBoxObservations(
            batch_sizes=self.batch[:, :width].copy(),
            dataset_size=sizes,
            sampling_rate=rates,
            clipped_norms_max=np.full(noise.shape, np.nan),
            clipping_norm=np.array([r.clipping_norm for r in recs]),
            untouched_noise=noise,
            noise_multiplier=np.array([r.noise_multiplier for r in recs]),
            steps_run=self.steps.copy(),
            steps_accounted=np.array([r.steps for r in recs], dtype=np.int64),
        )


def _chain(*observers: Callable[[StepInfo], None] | None) -> Callable[[StepInfo], None] | None:
    """One step observer calling each given one in turn (``None`` when none is given)."""
    present = [o for o in observers if o is not None]
    if len(present) <= 1:
        return present[0] if present else None

    def both(info: StepInfo) -> None:
        for o in present:
            o(info)

    return both


def _engine_train(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
    training: TrainingSpec,
    greybox: _GreyBoxObserver | None = None,
) -> tuple[np.ndarray | None, ModelStack, tuple[DPSGDRecord | None, ...]]:
    observer = None
    gradient_canary = None
    if canary.threat_model == "white-box":
        if canary.direction is None:
            raise ConfigError("A white-box canary audit needs a gradient canary ('dirac').")
        observer = canary_observer(
            membership,
            training,
            score=canary.score,
            direction=canary.direction,
            model_offset=settings.model_offset,
        )
        gradient_canary = GradientCanary(canary.direction, canary.included)
    elif canary.direction is not None:
        # The black-box gradient canary: added to every step like the Dirac canary, but
        # only the final model is scored (dpaudit.dpsgd.canaries.gradient_canary_scores).
        gradient_canary = GradientCanary(canary.direction, canary.included)
    result = train_many(
        X,
        y,
        membership,
        model=settings.model,
        training=training,
        seed=seed,
        num_classes=settings.num_classes,
        model_offset=settings.model_offset,
        step_observer=_chain(observer, greybox),
        gradient_canary=gradient_canary,
    )
    scores = observer.scores(canary.score) if observer is not None else None
    return scores, result.models, result.records  # type: ignore[return-value]


def _require_dp(training: TrainingSpec, name: str) -> None:
    if training.dp is None:
        raise ConfigError(f"The {name!r} trainer needs [dpsgd.training.dp] (noise, clipping).")


def _engine_dp_trainer(name: str, *, full_batch: bool, doc: str) -> Callable[..., TrainerOutput]:
    """A built-in trainer that runs the engine's DP-SGD (``full_batch`` = DP-GD)."""

    def trainer(
        X: np.ndarray,
        y: np.ndarray,
        membership: np.ndarray,
        *,
        seed: int,
        canary: CanarySetup,
        settings: TrainerSettings,
    ) -> TrainerOutput:
        _require_dp(settings.training, name)
        training = _replace(settings.training, full_batch=full_batch)
        greybox = _GreyBoxObserver.for_run(X, membership, canary, settings.model_offset)
        scores, models, records = _engine_train(
            X,
            y,
            membership,
            seed=seed,
            canary=canary,
            settings=settings,
            training=training,
            greybox=greybox,
        )
        return TrainerOutput(
            scores=scores,
            models=models,
            records=records,  # type: ignore[arg-type]
            observations=greybox.observations(records),
        )

    trainer.__name__ = f"{name}_trainer"
    trainer.__doc__ = doc
    return trainer


dpsgd_trainer = _engine_dp_trainer(
    "dpsgd",
    full_batch=False,
    doc="The engine's Poisson-subsampled DP-SGD; returns the engine's records.",
)
dpgd_trainer = _engine_dp_trainer(
    "dpgd",
    full_batch=True,
    doc="The engine's full-batch DP-GD (q = 1); returns the engine's records.",
)


def plain_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
) -> TrainerOutput:
    """The engine without clipping or noise: no privacy is claimed (ε = ∞)."""
    if canary.threat_model == "white-box":
        raise ConfigError(
            "The 'plain' trainer supports black-box audits only (no DP, no canary hook)."
        )
    training = _replace(settings.training, dp=None)
    _, models, _ = _engine_train(
        X, y, membership, seed=seed, canary=canary, settings=settings, training=training
    )
    return TrainerOutput(models=models, claim=Claim(epsilon=math.inf, delta=0.0))


def _replace(training: TrainingSpec, **changes: Any) -> TrainingSpec:

    return replace(training, **changes)


# ------------------------------------------------------------ output perturbation (ERM)


def _binary_labels(y: np.ndarray, settings: TrainerSettings, name: str) -> np.ndarray:
    if settings.num_classes != 2:
        raise ConfigError(
            f"The {name!r} trainer is binary logistic regression: the dataset must have 2 "
            f"classes (use a label such as 'column>value'). Got {settings.num_classes} classes."
        )
    return np.where(np.asarray(y) == 1, 1.0, -1.0)


#: The exact minimisers of regularised logistic regression (Newton, float64, once per
#: distinct membership row; ``average = False`` is the planted "no 1/n" bug of the tests),
#: re-exported from :mod:`dpaudit.theory.erm`, where the worst-case pair search uses them too.
regularised_logistic_optimum = erm.regularised_logistic_optimum


def _gamma_ball_noise(
    num_models: int, dim: int, scale: float, *, seed: int, model_offset: int
) -> np.ndarray:
    """Noise with density ∝ exp(−‖b‖/scale): uniform direction, norm ~ Gamma(d, scale).

    Each model's draw comes from its own stream (seed, model index), so a model's noise
    does not depend on the unit it is computed in.

    References:
        Chaudhuri, Monteleoni, Sarwate 2011, Alg. 1 (the density and its sampling).
    """
    out = np.empty((num_models, dim))
    for k in range(num_models):
        rng = np.random.default_rng([seed, model_offset + k, 7])
        u = rng.standard_normal(dim)
        out[k] = rng.gamma(dim, scale) * u / np.linalg.norm(u)
    return out


def _row_norm_check(X: np.ndarray, name: str) -> None:
    top = float(np.max(np.linalg.norm(X, axis=1)))
    if top > 1.0 + 1e-6:
        raise ConfigError(
            f"The {name!r} trainer needs rows with ‖x‖ ≤ 1 (the loss must be 1-Lipschitz). "
            f"Got a row of norm {top:.4g}; set normalize = true in [dpsgd]."
        )


def _linear_stack(w: np.ndarray, num_features: int) -> ModelStack:
    """A binary linear model w as a 2-class logistic stack: logits (0, ⟨w, x⟩)."""
    k = w.shape[0]
    weight = torch.zeros((k, 2, num_features), dtype=torch.float64)
    weight[:, 1, :] = torch.as_tensor(w)
    bias = torch.zeros((k, 2), dtype=torch.float64)
    return ModelStack(ModelSpec(kind="logistic"), [weight], [bias])


def output_perturbation_models(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    epsilon: float,
    lam: float,
    seed: int,
    model_offset: int = 0,
    average: bool = True,
) -> np.ndarray:
    """K output-perturbed λ-regularised logistic regressions (Chaudhuri et al. 2011, Alg. 1).

    The noise scale is 2/(n·λ·ε) with n the smallest member count (sensitivity 2/(nλ),
    Cor. 8); the norm of b is Gamma(d, 2/(nλε)).
    """
    signs = np.where(np.asarray(y) == 1, 1.0, -1.0)
    w = regularised_logistic_optimum(X, signs, membership, lam=lam, average=average)
    # The neighbour relation is add/remove one row: the smaller of the two datasets has
    # the larger sensitivity, so the noise uses the smallest member count of the models.
    n = int(membership.sum(axis=1).min())
    scale = theory.output_perturbation_sensitivity(n, lam) / epsilon
    return w + _gamma_ball_noise(
        w.shape[0], w.shape[1], scale, seed=seed, model_offset=model_offset
    )


def _options(settings: TrainerSettings, name: str, *keys: str) -> list[float]:
    missing = [k for k in keys if settings.options.get(k) is None]
    if missing:
        raise ConfigError(
            f"The {name!r} trainer needs {', '.join(repr(k) for k in missing)} in [dpsgd]."
        )
    return [float(settings.options[k]) for k in keys]


def output_perturbation_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
) -> TrainerOutput:
    """Chaudhuri et al. 2011 output perturbation; claims ε-DP (δ = 0).

    Options: ``epsilon``, ``lam``.
    """
    if canary.threat_model != "black-box":
        raise ConfigError("The 'output-perturbation' trainer releases one model: black-box only.")
    epsilon, lam = _options(settings, "output-perturbation", "epsilon", "lam")
    _binary_labels(y, settings, "output-perturbation")
    _row_norm_check(X, "output-perturbation")
    w = output_perturbation_models(
        X, y, membership, epsilon=epsilon, lam=lam, seed=seed, model_offset=settings.model_offset
    )
    return TrainerOutput(
        models=_linear_stack(w, X.shape[1]), claim=Claim(epsilon=epsilon, delta=0.0)
    )


def multiparty_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
) -> TrainerOutput:
    """Jayaraman et al. 2018 model aggregation; claims ε-DP (δ = 0).

    The rows of ``X`` are dealt to ``parties`` parties round-robin (the canary row goes to
    party 0); each party fits its λ-regularised model on its members, the m models are
    averaged, and noise of density ∝ exp(−‖b‖/s), s = 2G/(m·n₍₁₎·λ·ε), is added once.
    Options: ``epsilon``, ``lam``, ``parties``.

    The ℓ2 form of the "Laplace" noise is the one whose density ratio is bounded by the
    ℓ2 sensitivity 2G/(m·n₍₁₎·λ) of the average (Chaudhuri et al. 2011, Thm. 6 argument);
    per-coordinate Laplace at this scale would need the ℓ1 sensitivity.

    References:
        Jayaraman, Wang, Evans, Gu 2018 (NeurIPS), §3 "model aggregation".
    """
    if canary.threat_model != "black-box":
        raise ConfigError("The 'multiparty' trainer releases one model: black-box only.")
    epsilon, lam, parties_f = _options(settings, "multiparty", "epsilon", "lam", "parties")
    parties = int(parties_f)
    if parties < 1:
        raise ConfigError(f"The 'parties' parameter must be an integer >= 1. Got {parties}.")
    _binary_labels(y, settings, "multiparty")
    _row_norm_check(X, "multiparty")
    signs = np.where(np.asarray(y) == 1, 1.0, -1.0)
    # The canary (and the record it replaces, in a replace-one audit) belong to party 0.
    fixed = tuple(r for r in (canary.row, canary.replaced) if r is not None)
    owner = erm.multiparty_owners(X.shape[0], parties, fixed)
    try:
        average, smallest = erm.multiparty_average(
            X, signs, membership, lam=lam, owner=owner, parties=parties
        )
    except DpauditError as exc:
        raise ConfigError(str(exc)) from None
    scale = theory.multiparty_laplace_scale(
        lipschitz=1.0, parties=parties, smallest_party_size=smallest, lam=lam, epsilon=epsilon
    )
    w = average + _gamma_ball_noise(
        average.shape[0], X.shape[1], scale, seed=seed, model_offset=settings.model_offset
    )
    return TrainerOutput(
        models=_linear_stack(w, X.shape[1]), claim=Claim(epsilon=epsilon, delta=0.0)
    )


# ------------------------------------------- multi-party gradient perturbation (ERM)


def multiparty_gradient_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
    noise_factor: float = 1.0,
) -> TrainerOutput:
    """Jayaraman et al. 2018 multi-party gradient perturbation; returns q = 1 records.

    The rows of ``X`` are dealt to m = ``parties`` parties round-robin. Full-batch gradient
    descent from w = 0 on the λ-regularised logistic objective
    (1/m)·Σ_j (1/n_j)·Σ_{i∈j} log(1 + e^{−y_i⟨w, x_i⟩}) + (λ/2)‖w‖²: at every step the
    parties' averaged loss gradient ḡ_t is aggregated (securely, in the paper) and ONE
    Gaussian draw N(0, σ²I) is added to the aggregate, with σ² = 8G²T·ln(1/δ)/(m²·n₍₁₎²·ε²)
    (:func:`dpaudit.theory.multiparty_gradient_perturbation_variance`; G = 1: ‖x‖ ≤ 1
    makes the logistic loss 1-Lipschitz; n₍₁₎ the smallest party; T = ``epochs``);
    then w ← w − η·(ḡ_t + noise + λw). Options: ``parties``, ``epsilon``, ``delta``,
    ``lam``, and ``checkpoint`` = t (1 ≤ t ≤ T, optional): release the intermediate model
    θ_t instead of θ_T, with σ still calibrated for T steps.

    Intermediate models (``checkpoint`` = t): θ_t has seen t of the T Gaussian steps, so
    it is exactly (√t·Δ/σ)-GDP (the records say steps = t), and the multi-party slides'
    corollary states (√(t/T)·ε, δ)-DP for it; the trainer returns that corollary as its
    claim beside the records, so the audit holds the lower bounds against both and
    checks the corollary against what ran (its deterministic claim check). With the
    paper's σ, μ_t = √(t/T)·ε/√(2 ln(1/δ)), and the corollary holds wherever the final
    model's (ε, δ) does (see :func:`intermediate_claim`).

    What ran, as a :class:`DPSGDRecord` per model: one record of a party's data moves ḡ_t
    by at most Δ = 2G/(m·n₍₁₎) in ℓ2 (replacing it: 2G/n_j inside its party's mean, 1/m
    of that in the aggregate; adding or removing it: at most 2G/(n_j + 1) through the
    renormalised mean, also ≤ Δ), so each step is a Gaussian mechanism with noise σ/Δ
    times its sensitivity and T of them compose to exactly (√T·Δ/σ)-GDP (Dong, Roth, Su
    2019, Cor. 3.3): the record has clipping norm Δ, noise multiplier σ/Δ
    (= √(2T·ln(1/δ))/ε whatever n₍₁₎), q = 1 and T steps, so μ = ε/√(2·ln(1/δ)).

    White-box (Dirac canary on an all-zero feature c): both neighbouring datasets hold
    one extra record in the smallest party p*, counted in n_{p*}; its loss gradient is
    +G·e_c with the canary and −G·e_c without (the replace-one pair the sensitivity 2G/n
    is tight for; a gradient canary of norm G, Nasr et al. 2023 §3.2). No real gradient
    touches c, so the aggregate's coordinate c is x_t = ±a + N(0, σ²), a = G/(m·n_{p*}),
    and the score is the Gaussian likelihood ratio of x_t + a under N(2a, σ²) against
    N(0, σ²) (``mixture_log_likelihood_ratio`` at q = 1; ``"sum"``: Σ_t x_t). With
    n_{p*} = n₍₁₎ the shift 2a is Δ and the score reaches the record's μ. Black-box
    (an input canary row): the row joins the smallest party and the final models are
    returned.

    Args:
        noise_factor: multiplies the noise that runs, NOT the records (a planted bug for
            tests; 1 in the registered trainer).

    References:
        Jayaraman, Wang, Evans, Gu 2018, "Distributed Learning without Distress:
        Privacy-Preserving Empirical Risk Minimization" (NeurIPS), gradient perturbation
        in secure computation (the numbered algorithm and theorem unverified: the text
        was not reachable); Bun, Steinke 2016 (zCDP composition, the paper's route to σ).
    """
    name = "multiparty-gradient"
    epsilon, delta, lam, parties_f = _options(settings, name, "epsilon", "delta", "lam", "parties")
    parties = int(parties_f)
    if parties < 1 or parties != parties_f:
        raise ConfigError(f"The 'parties' parameter must be an integer >= 1. Got {parties_f}.")
    signs = _binary_labels(y, settings, name)
    _row_norm_check(X, name)
    x = np.asarray(X, dtype=np.float64)
    n, d = x.shape
    k_models = membership.shape[0]
    white = canary.threat_model == "white-box"
    owner = np.arange(n) % parties
    real = np.ones(n, dtype=bool)
    if canary.row is not None:
        real[canary.row] = False
    # The canary (row or gradient) goes to the party with the fewest real rows: its
    # n_{p*} is then n₍₁₎ (or n₍₁₎ + 1), where the sensitivity bound is reached.
    p_star = int(np.argmin(np.bincount(owner[real], minlength=parties)))
    if canary.row is not None:
        owner[canary.row] = p_star
    onehot = owner[None, :] == np.arange(parties)[:, None]  # (m, n)
    sizes = membership.astype(np.int64) @ onehot.T.astype(np.int64)  # (K, m)
    column = -1
    if white:
        if canary.direction is None:
            raise ConfigError("A white-box canary audit needs a gradient canary ('dirac').")
        column = int(np.flatnonzero(canary.direction)[0]) % d
        if np.any(x[:, column] != 0.0):
            raise ConfigError(
                f"The {name!r} trainer's Dirac canary needs an all-zero feature: set "
                "zero_features >= 1 in [dpsgd]."
            )
        sizes[:, p_star] += 1  # the canary record, held by both worlds
    if np.any(sizes == 0):
        raise ConfigError(f"A party of the {name!r} trainer has no rows: use fewer parties.")
    n1 = sizes.min(axis=1)  # (K,)
    total_steps = int(settings.training.epochs)
    steps = _checkpoint(settings, name, total_steps)
    eta = float(settings.training.learning_rate)
    lipschitz = 1.0
    sigma = np.array(
        [
            math.sqrt(
                theory.multiparty_gradient_perturbation_variance(
                    lipschitz=lipschitz,
                    parties=parties,
                    smallest_party_size=int(s),
                    steps=total_steps,
                    epsilon=epsilon,
                    delta=delta,
                )
            )
            for s in n1
        ]
    )
    sensitivity = 2.0 * lipschitz / (parties * n1)
    # Each record's weight in the aggregate: 1/(m·n_j) for its party j, 0 if not a member.
    weight = membership / (parties * sizes[:, owner])
    shift = lipschitz / (parties * sizes[:, p_star])  # a: the canary's ±a on coordinate c
    sign = np.where(canary.included, 1.0, -1.0)
    noise = np.empty((k_models, steps, d))
    for k in range(k_models):
        rng = np.random.default_rng([seed, settings.model_offset + k, 16])
        noise[k] = rng.standard_normal((steps, d))
    noise *= (noise_factor * sigma)[:, None, None]
    w = np.zeros((k_models, d))
    observed = np.zeros((k_models, steps))
    for t in range(steps):
        p = 1.0 / (1.0 + np.exp(signs[None, :] * (w @ x.T)))  # σ(−y⟨w, x⟩), (K, n)
        g = -(weight * p * signs[None, :]) @ x + noise[:, t]
        if white:
            g[:, column] += sign * shift
            observed[:, t] = g[:, column]
        w = w - eta * (g + lam * w)
    scores = None
    if white:
        # Σ_t log[N(x_t + a; 2a, σ²)/N(x_t + a; 0, σ²)] = Σ_t 2a·x_t/σ²: the Neyman–Pearson
        # score, mixture_log_likelihood_ratio(x_t + a, q = 1, σ/(2a), C = 2a) summed
        # (inlined because σ and a may differ between models).
        total = observed.sum(axis=1)
        scores = total if canary.score == "sum" else 2.0 * shift * total / sigma**2
    records = tuple(
        DPSGDRecord(
            noise_multiplier=float(s / c),
            sampling_rate=1.0,
            steps=steps,
            clipping_norm=float(c),
            sampling="full-batch",
            dataset_size=int(m),
        )
        for s, c, m in zip(sigma, sensitivity, membership.sum(axis=1), strict=True)
    )
    claim = None
    if "checkpoint" in settings.options:
        claim = intermediate_claim(
            epsilon=epsilon, delta=delta, checkpoint=steps, total_steps=total_steps
        )
    return TrainerOutput(scores=scores, models=_linear_stack(w, d), records=records, claim=claim)


def _checkpoint(settings: TrainerSettings, name: str, total_steps: int) -> int:
    """The step t whose model θ_t is released (T = ``epochs`` when no checkpoint is set)."""
    raw = settings.options.get("checkpoint")
    if raw is None:
        return total_steps
    t = _number_option(raw, "checkpoint", name)
    if t != int(t) or not 1 <= t <= total_steps:
        raise ConfigError(
            f"The {name!r} trainer's 'checkpoint' must be a whole step t with 1 <= t <= "
            f"T = epochs = {total_steps}. Got {raw!r}."
        )
    return int(t)


def _number_option(raw: Any, key: str, name: str) -> float:
    """An option that must be a number, or a ConfigError naming it."""
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ConfigError(
            f"The {name!r} trainer's {key!r} option must be a number. Got {raw!r}."
        ) from None


def intermediate_claim(*, epsilon: float, delta: float, checkpoint: int, total_steps: int) -> Claim:
    """The multi-party slides' corollary: θ_t of T-step gradient perturbation calibrated
    to (ε, δ) is (√(t/T)·ε, δ)-DP.

    Why it holds for the Gaussian steps: T steps at noise σ are μ_T-GDP with μ_T = √T·Δ/σ
    and t of them μ_t = √(t/T)·μ_T (Dong, Roth, Su 2019, Cor. 3.3). For a fixed ratio
    a = ε/μ ≥ 0, δ_μ(aμ) = Φ(−a + μ/2) − e^{aμ}Φ(−a − μ/2) has derivative
    e^{aμ}·[φ(a + μ/2) − a·Φ(−a − μ/2)] > 0 in μ (Mills: Φ(−x) < φ(x)/x, x = a + μ/2 ≥ a),
    so ε(μ, δ)/μ is nondecreasing and ε(√(t/T)·μ_T, δ) ≤ √(t/T)·ε(μ_T, δ) ≤ √(t/T)·ε
    whenever the final model meets its (ε, δ). The audit checks it against the records.

    References:
        Jayaraman, Wang, Evans, Gu 2018 (NeurIPS), gradient perturbation: the privacy of
        intermediate models, as stated in the multi-party lecture slides.
    """
    if not 1 <= checkpoint <= total_steps:
        raise ConfigError(
            f"The checkpoint t must satisfy 1 <= t <= T = {total_steps}. Got {checkpoint}."
        )
    return Claim(epsilon=math.sqrt(checkpoint / total_steps) * epsilon, delta=delta)


# ----------------------------------------------------- gradient descent, Laplace noise


def gradient_laplace_trainer(
    X: np.ndarray,
    y: np.ndarray,
    membership: np.ndarray,
    *,
    seed: int,
    canary: CanarySetup,
    settings: TrainerSettings,
    noise_factor: float = 1.0,
) -> TrainerOutput:
    """Full-batch gradient descent with Laplace noise on the clipped-gradient sum.

    Binary logistic regression; every step adds i.i.d. Laplace noise of scale
    b = Δ1·T/ε per coordinate to the sum of per-example gradients clipped to ℓ2 norm C,
    with the ℓ1 sensitivity bound Δ1 = m·√d·C
    (:func:`dpaudit.training.gradient_laplace.gradient_l1_sensitivity`); T = ``epochs``
    steps are ε-DP by basic composition (δ = 0), the claim returned (computed from the
    scale that was calibrated, see :mod:`dpaudit.training.gradient_laplace`). Options:
    ``epsilon``, ``clip`` (C, default 1), ``examples`` (m, default 1: add/remove one).

    White-box (Dirac canary on an all-zero feature c): with the canary the sum holds the
    extra gradient C·e_c (already clipped), without it nothing (add/remove), so the
    coordinate c of the noisy sum is x_t = C·[in] + Lap(b) at every step, and the score
    is Σ_t (|x_t| − |x_t − C|)/b, the exact log-likelihood ratio (``"sum"``: Σ_t x_t).
    A Dirac canary moves the sum by C in ℓ1, a factor m·√d below Δ1: Δ1 is reached by a
    gradient whose d coordinates all have magnitude C/√d. Black-box: the final models.

    Args:
        noise_factor: multiplies the noise that runs, NOT the claim (a planted bug for
            tests; 1 in the registered trainer).
    """
    from dpaudit.training.gradient_laplace import (
        laplace_log_likelihood_ratio,
        train_gradient_laplace,
    )

    name = "gradient-laplace"
    (epsilon,) = _options(settings, name, "epsilon")
    clip = _number_option(settings.options.get("clip", 1.0), "clip", name)
    examples_f = _number_option(settings.options.get("examples", 1), "examples", name)
    if examples_f < 1 or examples_f != int(examples_f):
        raise ConfigError(f"The 'examples' parameter must be an integer >= 1. Got {examples_f}.")
    signs = _binary_labels(y, settings, name)
    x = np.asarray(X, dtype=np.float64)
    d = x.shape[1]
    column, gradient = None, None
    if canary.threat_model == "white-box":
        if canary.direction is None:
            raise ConfigError("A white-box canary audit needs a gradient canary ('dirac').")
        column = int(np.flatnonzero(canary.direction)[0]) % d
        if np.any(x[:, column] != 0.0):
            raise ConfigError(
                f"The {name!r} trainer's Dirac canary needs an all-zero feature: set "
                "zero_features >= 1 in [dpsgd]."
            )
        gradient = np.zeros(d)
        gradient[column] = clip
    k_models = membership.shape[0]
    try:
        run = train_gradient_laplace(
            x,
            signs,
            membership,
            epsilon=epsilon,
            clipping_norm=clip,
            steps=int(settings.training.epochs),
            learning_rate=float(settings.training.learning_rate),
            examples=int(examples_f),
            canary_gradient=gradient,
            canary_included=canary.included,
            column=column,
            rngs=[
                np.random.default_rng([seed, settings.model_offset + k, 17])
                for k in range(k_models)
            ],
            noise_factor=noise_factor,
        )
    except DpauditError as exc:
        raise ConfigError(str(exc)) from None
    scores = None
    if column is not None:
        if canary.score == "sum":
            scores = run.observed.sum(axis=1)
        else:
            b = run.scale / noise_factor  # the scale the claim was calibrated for
            scores = laplace_log_likelihood_ratio(run.observed, shift=clip, scale=b).sum(axis=1)
    return TrainerOutput(
        scores=scores,
        models=_linear_stack(run.weights, d),
        claim=Claim(epsilon=run.epsilon, delta=0.0),
    )


# --------------------------------------------------------------------------- registry

TRAINERS: dict[str, Trainer] = {
    "dpsgd": dpsgd_trainer,
    "dpgd": dpgd_trainer,
    "output-perturbation": output_perturbation_trainer,
    "multiparty": multiparty_trainer,
    "multiparty-gradient": multiparty_gradient_trainer,
    "plain": plain_trainer,
    "gradient-laplace": gradient_laplace_trainer,
}


def get_trainer(name: str, *, base_dir: str | Path | None = None) -> Trainer:
    """The trainer registered as ``name``, or a user trainer ``"pkg.module:function"``.

    Raises:
        ConfigError: An unknown name (the message lists the valid ones) or a user trainer
            that cannot be imported.
    """
    if name in TRAINERS:
        return TRAINERS[name]
    if isinstance(name, str) and ":" in name:
        fn = load_plugin(name, base_dir=base_dir, what="trainer")
        return _user_trainer(fn, name)
    valid = ", ".join(repr(t) for t in TRAINERS)
    raise ConfigError(
        f"The 'trainer' parameter must be one of {{{valid}}} or 'pkg.module:function'. "
        f"Got {name!r} instead."
    )


def _user_trainer(fn: Callable[..., Any], name: str) -> Trainer:
    def run(
        X: np.ndarray,
        y: np.ndarray,
        membership: np.ndarray,
        *,
        seed: int,
        canary: CanarySetup,
        settings: TrainerSettings,
    ) -> TrainerOutput:
        out = fn(X, y, membership, seed=seed, canary=canary, settings=settings)
        return coerce_output(out, num_models=membership.shape[0], name=name)

    return run


def coerce_output(out: Any, *, num_models: int, name: str) -> TrainerOutput:
    """Check a trainer's output (a :class:`TrainerOutput` or a dict) and normalise it."""
    if isinstance(out, dict):
        unknown = set(out) - {"scores", "models", "records", "claim", "observations"}
        if unknown:
            raise DpauditError(f"Trainer {name!r} returned unknown keys {sorted(unknown)}.")
        claim = out.get("claim")
        if isinstance(claim, dict):
            claim = Claim(**claim)
        records = out.get("records")
        scores = out.get("scores")
        out = TrainerOutput(
            scores=None if scores is None else np.asarray(scores, dtype=float),
            models=out.get("models"),
            records=None if records is None else tuple(records),
            claim=claim,
            observations=out.get("observations"),
        )
    if not isinstance(out, TrainerOutput):
        raise DpauditError(
            f"Trainer {name!r} must return a TrainerOutput or a dict. Got {type(out).__name__}."
        )
    if out.scores is not None:
        s = np.asarray(out.scores, dtype=float).reshape(-1)
        if s.size != num_models or not np.all(np.isfinite(s)):
            raise DpauditError(
                f"Trainer {name!r} must return {num_models} finite scores. Got {s.size} "
                f"values{'' if np.all(np.isfinite(s)) else ' with NaN or infinity'}."
            )
    if out.records is not None and len(out.records) != num_models:
        raise DpauditError(
            f"Trainer {name!r} must return one record per model ({num_models}). "
            f"Got {len(out.records)}."
        )
    obs = out.observations
    if obs is not None:
        if not isinstance(obs, GreyBoxObservations):
            raise DpauditError(
                f"Trainer {name!r} must return 'observations' as a GreyBoxObservations. "
                f"Got {type(obs).__name__}."
            )
        if obs.num_models != num_models:
            raise DpauditError(
                f"Trainer {name!r} must return observations of every model ({num_models}). "
                f"Got {obs.num_models}."
            )
    return out
