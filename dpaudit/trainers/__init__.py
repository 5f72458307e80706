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
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.accounting.upper_bounds import Claim
from dpaudit.bounds.greybox import GreyBoxObservations
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.models import ModelSpec, ModelStack
from dpaudit.plugins import load_plugin
from dpaudit.records import DPSGDRecord
from dpaudit.safe_text import one_line
from dpaudit.theory.whitebox import mixture_log_likelihood_ratio
from dpaudit.training import TrainingSpec

__all__ = [
    "TRAINERS",
    "CanarySetup",
    "CapturedOutput",
    "TrainerOutput",
    "TrainerSettings",
    "canary_observer",
    "coerce_output",
    "dpgd_trainer",
    "dpsgd_trainer",
    "get_trainer",
    "gradient_laplace_trainer",
    "intermediate_claim",
    "mixture_log_likelihood_ratio",
    "multiparty_gradient_trainer",
    "multiparty_trainer",
    "output_perturbation_models",
    "output_perturbation_trainer",
    "plain_trainer",
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


# --------------------------------------------------------------------------- registry
# The built-in trainers live in the sibling modules, which import the protocol above:
# so they are imported after it.

from dpaudit.trainers.engine import dpgd_trainer, dpsgd_trainer, plain_trainer  # noqa: E402
from dpaudit.trainers.observers import canary_observer  # noqa: E402
from dpaudit.trainers.perturbation import (  # noqa: E402
    gradient_laplace_trainer,
    intermediate_claim,
    multiparty_gradient_trainer,
    multiparty_trainer,
    output_perturbation_models,
    output_perturbation_trainer,
    regularised_logistic_optimum,
)

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
