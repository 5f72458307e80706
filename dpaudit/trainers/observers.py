"""Step observers of the engine trainers: the white-box canary scores and the grey-box record.

:func:`canary_observer` scores a white-box gradient canary step by step (the plain sum of
its projections, or the sum of their mixture log-likelihood ratios); the grey-box
observer records what the engine ran (batch sizes, the noise on an untouched coordinate,
steps) for the checks of :mod:`dpaudit.bounds.greybox`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from dpaudit.bounds.greybox import GreyBoxObservations
from dpaudit.errors import ConfigError, DpauditError, check_choice
from dpaudit.records import DPSGDRecord
from dpaudit.theory.whitebox import WHITE_BOX_SCORES, mixture_log_likelihood_ratio
from dpaudit.trainers.protocol import CanarySetup
from dpaudit.training import StepInfo, TrainingSpec
from dpaudit.training.sampling import sampling_plan


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
            # unit 0's first-layer weights are the flat indices below d; the Dirac canary
            # has one of them, the every-group canary one too (its first tensor's part)
            first = [int(i) for i in np.flatnonzero(canary.direction) if int(i) < X.shape[1]]
            if len(first) == 1:
                used = first[0]  # first layer, unit 0, feature `used`
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
