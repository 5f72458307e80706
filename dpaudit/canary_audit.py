"""The ``dpsgd`` audit kind: canary audits of DP training, many runs and one run.

Many runs: 2·``trials`` models are trained by the configured trainer on the same data,
the odd-numbered ones with the canary, the even-numbered ones without; each model gives
one score (black-box: minus the canary's loss on the final model; white-box: the sum over
steps of the privatised update's projection on a Dirac gradient canary). The scores of
the two arms are independent trials of H0 (canary out) and H1 (canary in), so the ε and
μ lower bounds of :mod:`dpaudit.bounds` are ``rigorous-multi-run``. They are held against
the upper bounds read from what the trainer says it RAN (its DPSGDRecords through the
accountant, or its Claim).

One run: m Dirac canaries on m distinct coordinates that no real example's gradient
touches, each included by an independent fair coin in ONE DP-SGD run; the auditor guesses
"in" for the r/2 largest scores and "out" for the r/2 smallest, and the number of correct
guesses gives the one-run bound (Steinke, Nasr, Jagielski 2023, Thm. 3.1).

Work is cut into units of models, each a pure function of (:class:`UnitConfig`, unit
name), computed by :func:`dpaudit.executors.run_units` into the run store.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from dpaudit import accounting, theory
from dpaudit.bounds import (
    epsilon_lower_bound,
    mu_from_rates,
    mu_lower_bound,
    one_run_epsilon_lower_bound,
)
from dpaudit.canaries import INPUT_CANARY_KINDS, dirac_direction, input_canary, with_zero_feature
from dpaudit.errors import ConfigError, DataError
from dpaudit.executors import UnitStats, run_units
from dpaudit.mechanisms import Claim
from dpaudit.models import ModelSpec, layer_shapes
from dpaudit.records import DPSGDRecord
from dpaudit.results import Comparison, gdp_implied_comparison, score_summary, theory_curves
from dpaudit.store import RunStore
from dpaudit.trainers import (
    TRAINERS,
    CanarySetup,
    TrainerOutput,
    TrainerSettings,
    coerce_output,
    get_trainer,
)
from dpaudit.training import DPConfig, TrainingSpec

if TYPE_CHECKING:
    from dpaudit.audit import KindOutcome

__all__ = [
    "DpsgdSection",
    "UnitConfig",
    "dpsgd_unit",
    "run_dpsgd",
    "run_dpsgd_from_section",
]

Progress = Callable[[str, int, int], None]

#: Distinguishes this kind's random streams from other kinds' under the same audit seed.
_STREAM_DPSGD = 2
_ENGINE_TRAINERS = ("dpsgd", "dpgd")

Positive = Annotated[float, Field(gt=0.0)]


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DPSection(_Table):
    """``[dpsgd.training.dp]``: the noise, given directly or calibrated to a target."""

    noise_multiplier: Annotated[float, Field(ge=0.0)] | None = None
    target_epsilon: Positive | None = None
    target_mu: Positive | None = None
    clipping_norm: Positive = 1.0

    @model_validator(mode="after")
    def _one_noise(self) -> DPSection:
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


class TrainingSection(_Table):
    """``[dpsgd.training]``: the optimiser (see :class:`dpaudit.training.TrainingSpec`)."""

    epochs: Annotated[int, Field(ge=1)] = 1
    batch_size: Annotated[int, Field(ge=1)] = 64
    learning_rate: Positive = 0.1
    momentum: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.0
    full_batch: bool = False
    dp: DPSection | None = None


class OneRunSection(_Table):
    """``[dpsgd.one_run]``: m canaries in one run, r guesses (top r/2 and bottom r/2)."""

    canaries: Annotated[int, Field(ge=2, le=100_000)] = 1000
    guesses: Annotated[int, Field(ge=2)] = 100

    @model_validator(mode="after")
    def _guesses_fit(self) -> OneRunSection:
        if self.guesses > self.canaries or self.guesses % 2:
            raise ValueError("'guesses' must be even and at most 'canaries'")
        return self


class DpsgdSection(_Table):
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
        trainer: a registered trainer (:data:`dpaudit.trainers.TRAINERS`) or
            ``"pkg.module:function"``.
        options: trainer options (``epsilon``, ``lam``, ``parties``, or a user trainer's).
        canary: ``mislabeled`` | ``ood`` | ``clipbkd`` (input rows) | ``dirac`` (gradient).
        threat_model: ``black-box`` (final model's canary loss) or ``white-box`` (sum over
            steps of the update's projection on the Dirac canary).
        trials: models per arm (with and without the canary).
        threshold: ``split`` or ``bonferroni`` (see :mod:`dpaudit.bounds`).
        models_per_unit: models per work unit (default ``[execution] unit_size``, capped).
        one_run: optional one-run audit.
    """

    dataset: str = "synthetic"
    label: str | None = None
    rows: Annotated[int, Field(ge=2)] | None = None
    features: Annotated[int, Field(ge=1)] = 4
    zero_features: Annotated[int, Field(ge=0)] | None = None
    normalize: bool = False
    model: Literal["logistic", "mlp"] = "logistic"
    hidden: list[Annotated[int, Field(ge=1)]] = [32]
    training: TrainingSection = TrainingSection()
    trainer: str = "dpsgd"
    options: dict[str, float | int | str] = {}
    canary: Literal["mislabeled", "ood", "clipbkd", "dirac"] = "dirac"
    threat_model: Literal["black-box", "white-box"] = "white-box"
    trials: Annotated[int, Field(ge=0, le=10_000_000)] = 1000
    threshold: Literal["split", "bonferroni"] = "split"
    models_per_unit: Annotated[int, Field(ge=1)] | None = None
    one_run: OneRunSection | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DpsgdSection:
        t = self.trainer
        if t not in TRAINERS and ":" not in t:
            raise ValueError(
                f"unknown trainer {t!r}; allowed: {', '.join(TRAINERS)} or 'pkg.module:function'"
            )
        if (self.canary == "dirac") != (self.threat_model == "white-box"):
            raise ValueError(
                "a 'dirac' gradient canary is observed white-box and input canaries "
                f"({', '.join(INPUT_CANARY_KINDS)}) black-box; got canary={self.canary!r} "
                f"with threat_model={self.threat_model!r}"
            )
        if t in _ENGINE_TRAINERS and self.training.dp is None:
            raise ValueError(f"the {t!r} trainer needs [dpsgd.training.dp]")
        if self.threat_model == "white-box" and t in ("plain", "output-perturbation", "multiparty"):
            raise ValueError(f"the {t!r} trainer supports black-box audits only")
        if t in ("output-perturbation", "multiparty"):
            need = ["epsilon", "lam"] + (["parties"] if t == "multiparty" else [])
            missing = [k for k in need if k not in self.options]
            if missing:
                raise ValueError(f"the {t!r} trainer needs options {missing}")
        dp = self.training.dp
        full = t == "dpgd" or self.training.full_batch
        if dp is not None and dp.target_mu is not None and not full:
            raise ValueError(
                "'target_mu' is exact only for full-batch DP-GD (trainer 'dpgd' or "
                "training.full_batch = true)"
            )
        if self.trials == 0 and self.one_run is None:
            raise ValueError("set 'trials' > 0, or a [dpsgd.one_run] table, or both")
        if self.one_run is not None and (t != "dpsgd" or self.canary != "dirac"):
            raise ValueError("[dpsgd.one_run] audits the 'dpsgd' trainer with 'dirac' canaries")
        return self


@dataclass(frozen=True)
class UnitConfig:
    """What a work unit depends on: a pure, picklable function input."""

    section: DpsgdSection
    seed: int
    unit_size: int
    base_dir: str
    delta: float


# ---------------------------------------------------------------------------- the setup


@dataclass(frozen=True)
class _Setup:
    X: np.ndarray
    y: np.ndarray
    num_classes: int
    canary_row: int | None
    direction: np.ndarray | None
    model: ModelSpec
    training: TrainingSpec


def _stream_seed(seed: int, *purpose: int) -> int:
    return int(np.random.SeedSequence([seed, _STREAM_DPSGD, *purpose]).generate_state(1)[0])


def _load_data(s: DpsgdSection, seed: int, base_dir: str) -> tuple[np.ndarray, np.ndarray, int]:
    if s.dataset == "synthetic":
        rng = np.random.default_rng([_stream_seed(seed, 1)])
        n = s.rows or 200
        y = rng.integers(0, 2, n)
        centre = np.zeros(s.features)
        centre[0] = 1.0
        X = rng.standard_normal((n, s.features)) * 0.5 + np.where(y[:, None] == 1, centre, -centre)
        return X.astype(np.float32), y.astype(np.int64), 2
    from dpaudit.data import Standardizer, load_dataset

    try:
        data = load_dataset(s.dataset, label=s.label, base_dir=base_dir)
    except DataError:
        raise
    X, y = data.X, data.y
    if s.rows is not None and s.rows < X.shape[0]:
        keep = np.sort(
            np.random.default_rng([_stream_seed(seed, 2)]).permutation(X.shape[0])[: s.rows]
        )
        X, y = X[keep], y[keep]
    X = Standardizer.fit(X).transform(X)
    return X.astype(np.float32), y.astype(np.int64), data.num_classes


@functools.lru_cache(maxsize=8)
def _setup_cached(section_json: str, seed: int, base_dir: str, delta: float) -> _Setup:
    s = DpsgdSection.model_validate_json(section_json)
    X, y, num_classes = _load_data(s, seed, base_dir)
    canary_row = None
    zero = s.zero_features if s.zero_features is not None else (1 if s.canary == "dirac" else 0)
    if zero:
        # Appended before an input canary is made: ClipBKD then finds the all-zero column
        # as the direction of least variance, where no real example pulls the model.
        X = with_zero_feature(X, zero)
    if s.canary in INPUT_CANARY_KINDS:
        c = input_canary(s.canary, X, y, seed=_stream_seed(seed, 3), num_classes=num_classes)
        X = np.concatenate([X, c.x[None, :].astype(np.float32)])
        y = np.concatenate([y, [c.y]]).astype(np.int64)
        canary_row = X.shape[0] - 1
    if s.normalize:
        X = (X / np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))).astype(np.float32)
    model = ModelSpec(kind=s.model, hidden=tuple(s.hidden))
    shapes = layer_shapes(model, X.shape[1], num_classes)
    num_parameters = sum(o * i + o for o, i in shapes)
    direction = None
    if s.canary == "dirac":
        # First layer, unit 0, weight on the last feature: flat index 0·d + (d − 1). When
        # that feature is all-zero, every real gradient is 0 there (∂/∂W = δ·aᵀ, a = 0).
        direction = dirac_direction(num_parameters, X.shape[1] - 1)
    training = _training_spec(
        s, num_members=int(X.shape[0]) - (canary_row is not None), delta=delta
    )
    return _Setup(X, y, num_classes, canary_row, direction, model, training)


def _training_spec(s: DpsgdSection, *, num_members: int, delta: float) -> TrainingSpec:
    t = s.training
    full_batch = s.trainer == "dpgd" or t.full_batch
    dp = None
    if t.dp is not None:
        steps = t.epochs if full_batch else t.epochs * (num_members // t.batch_size)
        if t.dp.noise_multiplier is not None:
            sigma = t.dp.noise_multiplier
        elif t.dp.target_mu is not None:
            # Full-batch DP-GD is exactly (√T/σ)-GDP (Dong, Roth, Su 2019, Cor. 3.3).
            sigma = math.sqrt(steps) / t.dp.target_mu
        else:
            if steps < 1:
                raise ConfigError("batch_size exceeds the number of rows: no DP-SGD step is made")
            q = 1.0 if full_batch else t.batch_size / num_members
            sigma = accounting.calibrate_noise(
                target_epsilon=t.dp.target_epsilon, delta=delta, sampling_rate=q, steps=steps
            )
        dp = DPConfig(noise_multiplier=sigma, clipping_norm=t.dp.clipping_norm)
    return TrainingSpec(
        epochs=t.epochs,
        batch_size=t.batch_size,
        learning_rate=t.learning_rate,
        momentum=t.momentum,
        weight_decay=t.weight_decay,
        dp=dp,
        full_batch=full_batch,
    )


def _setup(cfg: UnitConfig) -> _Setup:
    return _setup_cached(cfg.section.model_dump_json(), cfg.seed, cfg.base_dir, cfg.delta)


# ------------------------------------------------------------------------------- units


def _total_models(s: DpsgdSection) -> int:
    return 2 * s.trials


def dpsgd_units(cfg: UnitConfig) -> list[str]:
    n = math.ceil(_total_models(cfg.section) / cfg.unit_size)
    units = [f"dpsgd-{i:05d}" for i in range(n)]
    if cfg.section.one_run is not None:
        units.append("dpsgd-one-run")
    return units


def dpsgd_unit(cfg: UnitConfig, unit: str) -> dict[str, np.ndarray]:
    """Train one unit of models and return their scores and what they ran."""
    if unit == "dpsgd-one-run":
        return _one_run_unit(cfg)
    s = cfg.section
    index = int(unit.rsplit("-", 1)[1])
    start = index * cfg.unit_size
    stop = min(_total_models(s), start + cfg.unit_size)
    setup = _setup(cfg)
    # Model g is "in" iff g is odd: both arms in every unit, so a partial run stays balanced.
    included = (np.arange(start, stop) % 2) == 1
    membership = np.ones((stop - start, setup.X.shape[0]), dtype=bool)
    if setup.canary_row is not None:
        membership[:, setup.canary_row] = included
    canary = CanarySetup(
        kind=s.canary,
        threat_model=s.threat_model,
        included=included,
        row=setup.canary_row,
        direction=setup.direction,
    )
    settings = TrainerSettings(
        model=setup.model,
        training=setup.training,
        num_classes=setup.num_classes,
        model_offset=start,
        options=dict(s.options),
    )
    trainer = get_trainer(s.trainer, base_dir=cfg.base_dir)
    out = coerce_output(
        trainer(
            setup.X,
            setup.y,
            membership,
            seed=_stream_seed(cfg.seed, 4),
            canary=canary,
            settings=settings,
        ),
        num_models=stop - start,
        name=s.trainer,
    )
    return {"included": included, "scores": _scores(out, setup), **_ran_arrays(out)}


def _scores(out: TrainerOutput, setup: _Setup) -> np.ndarray:
    if out.scores is not None:
        return np.asarray(out.scores, dtype=np.float64).reshape(-1)
    if setup.canary_row is None:
        raise ConfigError("A trainer returning models needs an input-space canary to score.")
    x = setup.X[setup.canary_row : setup.canary_row + 1]
    y = setup.y[setup.canary_row : setup.canary_row + 1]
    # Black-box score: minus the canary's loss on the final model (lower loss ⇒ "in").
    losses = out.models.losses(x.astype(np.float64) if _is_double(out) else x, y)  # type: ignore[union-attr]
    scores = -losses[:, 0].double().numpy()
    if not np.all(np.isfinite(scores)):
        raise DataError("A model gave the canary an infinite or NaN loss.")
    return scores


def _is_double(out: TrainerOutput) -> bool:
    import torch

    return out.models is not None and out.models.dtype == torch.float64


_RECORD_KEYS = ("noise_multiplier", "sampling_rate", "steps", "clipping_norm", "full_batch")


def _ran_arrays(out: TrainerOutput) -> dict[str, np.ndarray]:
    if out.records is not None:
        recs = out.records
        if any(not isinstance(r, DPSGDRecord) for r in recs):
            raise ConfigError("Trainer records must be DPSGDRecord objects (DP training).")
        return {
            "noise_multiplier": np.array([r.noise_multiplier for r in recs]),
            "sampling_rate": np.array([r.sampling_rate for r in recs]),
            "steps": np.array([r.steps for r in recs], dtype=np.int64),
            "clipping_norm": np.array([r.clipping_norm for r in recs]),
            "full_batch": np.array([r.sampling == "full-batch" for r in recs]),
        }
    c = out.claim
    assert c is not None  # TrainerOutput guarantees records or claim
    nan = float("nan")
    return {
        "claim": np.array(
            [
                c.epsilon if c.epsilon is not None else nan,
                c.delta,
                c.mu if c.mu is not None else nan,
            ]
        )
    }


# ------------------------------------------------------------------------------ one run


class _OneRunCanaries:
    """Adds m Dirac canaries to the privatised gradient of ONE model and sums projections.

    The engine's :class:`~dpaudit.training.GradientCanary` holds one direction per model;
    here m coordinates of all-zero features are each a canary, included by a fair coin.
    Each included canary joins a step with the model's Poisson rate q (always, when full
    batch), adding C / (expected batch size) to its coordinate of the privatised gradient —
    exactly what the engine does for one gradient canary (its norm is C, the clipping
    bound, and it is summed before the division by q·n). The observer writes into the
    engine's gradient buffer, which the update then uses.
    """

    def __init__(
        self,
        indices: np.ndarray,
        included: np.ndarray,
        *,
        q: float,
        clip: float,
        denominator: float,
        seed: int,
        full_batch: bool,
    ) -> None:
        import torch

        self.indices = torch.as_tensor(indices)
        self.included = included
        self.q = q
        self.add = clip / denominator
        self.rng = np.random.default_rng([seed, 9])
        self.full_batch = full_batch
        self.sums = np.zeros(indices.size)
        self._torch = torch

    def __call__(self, info: Any) -> None:
        torch = self._torch
        if not bool(info.active[0]):
            return
        m = self.indices.numel()
        coins = np.ones(m, dtype=bool) if self.full_batch else self.rng.random(m) < self.q
        bump = torch.as_tensor((coins & self.included) * self.add, dtype=info.gradients.dtype)
        info.gradients[0, self.indices] += bump
        self.sums += info.gradients[0, self.indices].double().numpy()


def _one_run_unit(cfg: UnitConfig) -> dict[str, np.ndarray]:
    from dpaudit.training import train_many

    s = cfg.section
    one = s.one_run
    assert one is not None  # only listed when configured
    base = _setup(cfg)
    m = one.canaries
    if s.model != "logistic":
        raise ConfigError("The one-run audit puts its canaries on a logistic regression.")
    # One all-zero feature per canary: canary j is class 0's weight on zero feature j.
    real = base.X[:, : base.X.shape[1] - (1 if base.direction is not None else 0)]
    X = with_zero_feature(real, m)
    d = X.shape[1]
    indices = np.arange(d - m, d)  # flat index c·d + j with c = 0
    included = np.random.default_rng([_stream_seed(cfg.seed, 5)]).random(m) < 0.5
    training = base.training
    n = X.shape[0]
    q = 1.0 if training.full_batch else training.batch_size / n
    dp = training.dp
    assert dp is not None  # the schema requires dp for the dpsgd trainer
    observer = _OneRunCanaries(
        indices,
        included,
        q=q,
        clip=dp.clipping_norm,
        denominator=q * n,
        seed=_stream_seed(cfg.seed, 6),
        full_batch=training.full_batch,
    )
    result = train_many(
        X,
        base.y,
        np.ones((1, n), dtype=bool),
        model=base.model,
        training=training,
        seed=_stream_seed(cfg.seed, 7),
        num_classes=base.num_classes,
        step_observer=observer,
    )
    r = result.records[0]
    assert r is not None
    return {
        "one_run_scores": observer.sums,
        "one_run_included": included,
        "noise_multiplier": np.array([r.noise_multiplier]),
        "sampling_rate": np.array([r.sampling_rate]),
        "steps": np.array([r.steps], dtype=np.int64),
        "clipping_norm": np.array([r.clipping_norm]),
        "full_batch": np.array([r.sampling == "full-batch"]),
    }


def one_run_guesses(scores: np.ndarray, included: np.ndarray, guesses: int) -> tuple[int, int]:
    """Guess "in" for the r/2 largest scores and "out" for the r/2 smallest.

    Returns (guesses, correct). Ties are broken by a stable sort (index order), which does
    not depend on the coins, so the guesses stay a function of the scores alone.

    References:
        Steinke, Nasr, Jagielski 2023, Alg. 1 (abstain on all but k₊ + k₋ canaries).
    """
    order = np.argsort(scores, kind="stable")
    half = guesses // 2
    correct = int(np.sum(~included[order[:half]]) + np.sum(included[order[-half:]]))
    return guesses, correct


# ------------------------------------------------------------------------ upper bounds


@dataclass(frozen=True)
class _Upper:
    epsilon: float
    epsilon_delta: float
    mu: float | None
    source: str
    detail: dict[str, Any]
    # The μ bracket of a Poisson-subsampled Gaussian covers ε up to where δ = 1e-10;
    # beyond, δ ≤ mu_tail, so the trade-off curve is only ≥ G_μ(α + t) − t.
    mu_tail: float = 0.0


@functools.lru_cache(maxsize=64)
def _poisson_epsilon(sigma: float, q: float, steps: int, delta: float) -> float:
    # Cached: PLD composition dominates small audits; a record's ε depends on it alone.
    return accounting.dpsgd_epsilon(
        noise_multiplier=sigma, sampling_rate=q, steps=steps, delta=delta
    )


@functools.lru_cache(maxsize=64)
@functools.lru_cache(maxsize=64)
def _poisson_mu_high(sigma: float, q: float, steps: int) -> tuple[float, float]:
    """(μ_high, tail δ) of the GDP measurement of the record's PLD profile."""
    event = accounting.dpsgd_event(noise_multiplier=sigma, sampling_rate=q, steps=steps)
    bracket = accounting.mu_bracket(event)
    return bracket.high, bracket.tail_delta


def _records_upper(
    parts: list[dict[str, np.ndarray]], delta: float, *, with_mu: bool = True
) -> _Upper:
    rows = set()
    for p in parts:
        for k in range(p["noise_multiplier"].size):
            rows.add(tuple(p[key][k].item() for key in _RECORD_KEYS))
    eps, mus, tails = [], [], [0.0]
    records = []
    for sigma, q, steps, clip, full in sorted(rows):
        rec = DPSGDRecord(
            noise_multiplier=sigma,
            sampling_rate=q,
            steps=int(steps),
            clipping_norm=clip,
            sampling="full-batch" if full else "poisson",
        )
        records.append(rec.to_dict())
        if full or q == 1.0:
            # Full batch: exactly (√T/σ)-GDP, whose ε(δ) is exact (Dong, Roth, Su 2019,
            # Cor. 2.13 and 3.3); PLD would only add its discretisation excess.
            mu = math.sqrt(steps) / sigma
            mus.append(mu)
            eps.append(theory.gdp_epsilon(mu, delta))
        else:
            eps.append(_poisson_epsilon(sigma, q, int(steps), delta))
            if with_mu:
                high, tail = _poisson_mu_high(sigma, q, int(steps))
                mus.append(high)
                tails.append(tail)
    # Models of the two arms may have run slightly different q (b / n_k with the canary a
    # member or not): the claim must hold for every one of them, so take the largest.
    mu = max(mus) if mus else None
    return _Upper(max(eps), delta, mu, "accountant", {"records": records}, max(tails))


def _claim_upper(parts: list[dict[str, np.ndarray]], delta: float) -> _Upper:
    claims = np.concatenate([p["claim"].reshape(1, 3) for p in parts])

    def largest(column: np.ndarray) -> float | None:
        # The claim must cover every model: keep the weakest (largest) one stated.
        finite_or_inf = column[~np.isnan(column)]
        return float(finite_or_inf.max()) if finite_or_inf.size else None

    claim = Claim(
        epsilon=largest(claims[:, 0]), delta=float(claims[:, 1].max()), mu=largest(claims[:, 2])
    )
    if claim.epsilon is not None:
        eps_upper, eps_delta = claim.epsilon, claim.delta
    else:
        eps_upper, eps_delta = theory.gdp_epsilon(claim.mu, delta), delta  # type: ignore[arg-type]
    if claim.mu is not None:
        mu_upper: float | None = claim.mu
    elif claim.delta == 0.0 and claim.epsilon is not None and math.isfinite(claim.epsilon):
        # ε-DP implies μ-GDP with μ = −2Φ⁻¹(1/(1 + e^ε)) (Dong, Roth, Su 2019, §2).
        mu_upper = theory.mu_from_pure_dp(claim.epsilon)
    else:
        mu_upper = None
    return _Upper(eps_upper, eps_delta, mu_upper, "trainer claim", {"claim": claim.to_dict()})


# ----------------------------------------------------------------------------- pipeline


@dataclass(frozen=True)
class DpsgdOutcome:
    """What the pipeline found (the fields of :class:`~dpaudit.audit.KindOutcome`)."""

    tests: list[dict[str, Any]]
    comparisons: list[Comparison]
    warnings: list[str]
    units: UnitStats


def _pipeline(
    cfg: UnitConfig,
    store: RunStore,
    *,
    confidence_level: float,
    delta: float,
    workers: int,
    progress: Progress | None,
    executor: str = "local",
    address: str | None = None,
) -> DpsgdOutcome:
    s = cfg.section
    units = dpsgd_units(cfg)
    tick = (lambda k: progress("training canary models", len(units), k)) if progress else None
    stats = run_units(
        dpsgd_unit,
        cfg,
        units,
        store,
        workers=workers,
        progress=tick,
        executor=executor,
        address=address,
    )
    many = [store.load(u) for u in units if u != "dpsgd-one-run"]
    one = store.load("dpsgd-one-run") if s.one_run is not None else None

    label = f"{s.canary} canary, {s.threat_model}, trainer {s.trainer}"
    comparisons: list[Comparison] = []
    tests: list[dict[str, Any]] = []
    warnings: list[str] = []
    c = confidence_level

    upper: _Upper | None = None
    if many:
        upper = _claim_upper(many, delta) if "claim" in many[0] else _records_upper(many, delta)
    # Every bound entering the verdict shares the failure budget 1 − c (Bonferroni, as
    # run_mechanism does): each is computed at 1 − (1 − c)/k, the verdict keeps level c.
    # An infinite claim (the plain trainer's ε = ∞) can never be violated: it is reported
    # but kept out of the verdict, so it takes no share of the budget.
    eps_in = upper is not None and math.isfinite(upper.epsilon)
    mu_in = upper is not None and upper.mu is not None and math.isfinite(upper.mu)
    one_in = one is not None  # held against the one run's own accountant ε
    k = eps_in + mu_in + one_in
    c_each = 1.0 - (1.0 - c) / max(k, 1)

    if upper is not None:
        scores = np.concatenate([p["scores"] for p in many])
        inc = np.concatenate([p["included"] for p in many]).astype(bool)
        neg, pos = scores[~inc], scores[inc]
        eps_lb = epsilon_lower_bound(
            neg,
            pos,
            delta=upper.epsilon_delta,
            confidence_level=c_each,
            threshold=s.threshold,
            seed=cfg.seed,
        )
        mu_lb = mu_lower_bound(
            neg, pos, confidence_level=c_each, threshold=s.threshold, seed=cfg.seed
        )
        if upper.mu_tail > 0 and mu_lb.fpr is not None and mu_lb.fnr is not None:
            # Against a bracket with tail δ t: f_A(α) ≥ G_high(α + t) − t (MuBracket), so a
            # test with rates (α, β) proves μ_high ≥ Φ⁻¹(1 − (α + t)) − Φ⁻¹(β + t). The
            # lower bound held against μ_high uses the upper limits inflated by t.
            t = upper.mu_tail
            mu_lb = replace(
                mu_lb,
                value=float(mu_from_rates(mu_lb.fpr.high + t, mu_lb.fnr.high + t)),
                details={**mu_lb.details, "bracket_tail_delta": t},
            )
        comparisons.append(
            Comparison(label, "epsilon", eps_lb, upper.epsilon, f"{upper.source} ε", eps_in)
        )
        comparisons.append(
            Comparison(
                label,
                "mu",
                mu_lb,
                upper.mu,
                f"{upper.source} μ" if upper.mu is not None else "none",
                mu_in,
            )
        )
        if mu_lb.value > 0 and upper.mu is not None and math.isfinite(upper.mu):
            # Informational: the ε that μ_LB implies IF the trade-off curve is Gaussian
            # ("assumes-gdp"); the white-box Dirac score of DP-GD is exactly Gaussian.
            comparisons.append(
                gdp_implied_comparison(label, mu_lb, upper.mu, delta=delta, source=upper.source)
            )
        summary = score_summary(
            "dpsgd", label, neg, pos, confidence_level=c, hypotheses=("canary out", "canary in")
        )
        summary["theory_curves"] = theory_curves(
            epsilon=upper.epsilon,
            delta=upper.epsilon_delta,
            mu=upper.mu,
            label=f"{upper.source}: ",
        ) + theory_curves(mu=mu_lb.value if mu_lb.value > 0 else None, label="lower bound: ")
        summary["dpsgd"] = {
            "trainer": s.trainer,
            "canary": s.canary,
            "threat_model": s.threat_model,
            "trials_per_arm": int(neg.size),
            "upper_bound": {
                "epsilon": upper.epsilon,
                "delta": upper.epsilon_delta,
                "mu": upper.mu,
                "source": upper.source,
                **upper.detail,
            },
        }
        tests.append(summary)
        if eps_lb.value == 0.0 and mu_lb.value == 0.0:
            warnings.append(
                f"{label}: no lower bound exceeds 0 with {neg.size} models per arm; the audit "
                "cannot tell this trainer from a perfectly private one."
            )

    if one is not None:
        comparisons.append(_one_run_comparison(one, s, delta=delta, confidence_level=c_each))
    return DpsgdOutcome(tests, comparisons, warnings, stats)


def _one_run_comparison(
    one: dict[str, np.ndarray], s: DpsgdSection, *, delta: float, confidence_level: float
) -> Comparison:
    assert s.one_run is not None
    r, v = one_run_guesses(
        one["one_run_scores"], one["one_run_included"].astype(bool), s.one_run.guesses
    )
    bound = one_run_epsilon_lower_bound(
        canaries=s.one_run.canaries,
        guesses=r,
        correct=v,
        delta=delta,
        confidence_level=confidence_level,
    )
    upper = _records_upper([one], delta, with_mu=False)
    label = f"one run, {s.one_run.canaries} dirac canaries, trainer {s.trainer}"
    return Comparison(label, "epsilon", bound, upper.epsilon, "accountant ε", True)


def _unit_size(s: DpsgdSection, default: int) -> int:
    # The execution default (25 000, sized for scalar mechanism samples) is too coarse for
    # models: cap at 2 000 so a killed run loses little and workers share the load.
    return s.models_per_unit or max(1, min(default, 2000))


def run_dpsgd(config: Any, store: RunStore, progress: Progress | None) -> KindOutcome:
    """The ``dpsgd`` audit kind, with the contract of :func:`dpaudit.audit.run_mechanism`."""
    from dpaudit.audit import KindOutcome

    s: DpsgdSection = config.dpsgd
    cfg = UnitConfig(
        section=s,
        seed=config.audit.seed,
        unit_size=_unit_size(s, config.execution.unit_size),
        base_dir=str(config.base_dir),
        delta=config.audit.delta,
    )
    o = _pipeline(
        cfg,
        store,
        confidence_level=config.audit.confidence_level,
        delta=config.audit.delta,
        workers=config.execution.workers,
        progress=progress,
        executor=config.execution.executor,
        address=config.execution.address,
    )
    return KindOutcome(o.tests, o.comparisons, [], o.warnings, o.units)


def run_dpsgd_from_section(
    section: DpsgdSection | dict[str, Any],
    *,
    seed: int,
    confidence_level: float = 0.95,
    delta: float = 1e-5,
    run_dir: str | Path,
    workers: int = 1,
    base_dir: str | Path = ".",
    progress: Progress | None = None,
) -> DpsgdOutcome:
    """Run a ``[dpsgd]`` audit without the rest of an audit file (tests, notebooks).

    Args:
        section: the ``[dpsgd]`` table (validated here if a dict).
        seed: the audit seed.
        confidence_level: c; every bound in the verdict is at 1 − (1 − c)/k.
        delta: δ of the ε comparisons.
        run_dir: where the units are stored (a run resumes from them).
        workers: worker processes.
        base_dir: folder that user plug-ins and csv paths resolve against.
        progress: optional (description, total, just finished) callback.

    Raises:
        ConfigError: an invalid section (one line per pydantic's first error).
    """
    from pydantic import ValidationError

    if not isinstance(section, DpsgdSection):
        try:
            section = DpsgdSection.model_validate(section)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in err["loc"]) or "dpsgd"
            raise ConfigError(
                f"[dpsgd] {where}: {err['msg'].removeprefix('Value error, ')}"
            ) from None
    cfg = UnitConfig(
        section=section,
        seed=int(seed),
        unit_size=_unit_size(section, 25_000),
        base_dir=str(Path(base_dir).resolve()),
        delta=float(delta),
    )
    key = json.dumps([section.model_dump(mode="json"), seed, delta], sort_keys=True)
    store = RunStore(Path(run_dir), hashlib.sha256(key.encode()).hexdigest()[:16])
    return _pipeline(
        cfg,
        store,
        confidence_level=confidence_level,
        delta=delta,
        workers=workers,
        progress=progress,
    )
