"""Grey-box checks: did a DP-SGD run do what its accountant was told?

A canary audit bounds ε from below by what an attacker sees; it cannot see that batches
were shuffled instead of Poisson-sampled, or that fewer steps were accounted than run, until
the leak is large. A trainer that reports what it ran step by step
(:class:`GreyBoxObservations`) lets dpaudit test those internals directly:

* batch sizes: under Poisson sampling at rate q every realised batch size is
  Binomial(n, q), independently (:func:`batch_size_test`);
* clipping: every per-example gradient norm after clipping is at most C
  (:func:`clipping_test`, deterministic);
* noise: the privatised gradient sum on a coordinate that no example's gradient touches
  is N(0, (σC)²), independently per step (:func:`noise_test`);
* steps: the steps each model ran equal the steps accounted (:func:`steps_test`,
  deterministic).

Each test returns a :class:`GreyBoxTest` with a p-value that is valid (super-uniform)
under a correct run, so the verdict can spend a share (1 − c)/k of its ONE budget on it
(:class:`dpaudit.kinds.base.VerdictBudget`): the check fails when p < (1 − c)/k. The
deterministic checks cannot fail on a correct run whatever the randomness (p is 1 on every
correct run, 0 otherwise), so they take no share of the budget.

Pure numpy/scipy: no torch, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.stats import binom, binomtest, chi2

from dpaudit.errors import DpauditError

__all__ = [
    "CLIPPING_RTOL",
    "GREYBOX_CHECKS",
    "GreyBoxObservations",
    "GreyBoxTest",
    "batch_size_test",
    "clipping_test",
    "dispersion_lower_tail_pvalue",
    "greybox_tests",
    "noise_test",
    "steps_test",
]

#: Relative tolerance of the clipping check: a clipped norm up to C·(1 + 1e-5) passes.
#: Float32 rounding of a norm computed from a few thousand terms stays below ~1e-6
#: relative; anything larger is a clipping bug, not rounding.
CLIPPING_RTOL = 1e-5

#: Check name → what it tests (the title of the gate check).
GREYBOX_CHECKS = {
    "greybox_batch_sizes": "batch sizes follow Binomial(n, q)",
    "greybox_clipping": "clipped per-example gradient norms ≤ C",
    "greybox_noise": "noise on an untouched coordinate has standard deviation ≥ σC",
    "greybox_steps": "steps run equal steps accounted",
}

# The per-model parameters a trainer may give as one number or one value per model.
_PER_MODEL = ("dataset_size", "sampling_rate", "clipping_norm", "noise_multiplier")
_ARRAY_PREFIX = "greybox_"


@dataclass(frozen=True)
class GreyBoxObservations:
    """What a trainer saw itself run, per model (K models, T steps).

    Entries of the ``(K, T)`` arrays at steps a model did not run (``t ≥ steps_run[k]``)
    are ignored, so models with fewer steps pad their rows (0 or NaN). ``dataset_size``,
    ``sampling_rate``, ``clipping_norm``, ``noise_multiplier`` and ``steps_accounted``
    may also be given per model, as ``(K,)`` arrays (models of one call trained on
    datasets of different sizes, e.g. with and without a canary record).

    Attributes:
        batch_sizes: ``(K, T)`` int: the realised batch size of every step (the records
            of the data set, canary included when sampled).
        dataset_size: n: the records the sampler draws from (canary included when present).
        sampling_rate: the q the run was ACCOUNTED with (what the claim/accountant used).
        clipped_norms_max: ``(K, T)`` float: the largest per-example gradient norm AFTER
            clipping, per step (NaN where unknown).
        clipping_norm: the C accounted.
        untouched_noise: ``(K, T)`` float: the privatised gradient SUM (before dividing by
            the batch size) on one coordinate no example's gradient touches; under correct
            DP-SGD it is N(0, (σC)²), independent over steps and models (NaN where unknown,
            e.g. for a model whose canary touches that coordinate).
        noise_multiplier: the σ accounted.
        steps_run: ``(K,)`` int: optimizer steps actually taken.
        steps_accounted: the T the accountant was told / the claim assumes.

    Raises:
        DpauditError: a shape or value that does not fit (one line naming the field).
    """

    batch_sizes: np.ndarray = field(repr=False)
    dataset_size: int | np.ndarray
    sampling_rate: float | np.ndarray
    clipped_norms_max: np.ndarray = field(repr=False)
    clipping_norm: float | np.ndarray
    untouched_noise: np.ndarray = field(repr=False)
    noise_multiplier: float | np.ndarray
    steps_run: np.ndarray = field(repr=False)
    steps_accounted: int | np.ndarray

    def __post_init__(self) -> None:
        steps_run = _int_array("steps_run", self.steps_run, ndim=1, low=0)
        k = steps_run.size
        batch = _int_array("batch_sizes", self.batch_sizes, ndim=2, low=0)
        width = batch.shape[1]
        if batch.shape[0] != k:
            raise DpauditError(
                f"The 'batch_sizes' parameter must have one row per model ({k}, as "
                f"'steps_run'). Got shape {batch.shape} instead."
            )
        for name in ("clipped_norms_max", "untouched_noise"):
            arr = _float_array(name, getattr(self, name), shape=(k, width))
            object.__setattr__(self, name, arr)
        if np.any(self.clipped_norms_max < 0):
            raise DpauditError(
                "The 'clipped_norms_max' parameter must hold norms ≥ 0 (or NaN). Got a "
                f"negative value {float(np.nanmin(self.clipped_norms_max))!r} instead."
            )
        if np.any(np.isinf(self.untouched_noise)):
            raise DpauditError(
                "The 'untouched_noise' parameter must be finite (or NaN where unknown). "
                "Got an infinite value instead."
            )
        if k and int(steps_run.max()) > width:
            raise DpauditError(
                f"The 'steps_run' parameter must be at most the {width} steps (columns) of "
                f"'batch_sizes'. Got {int(steps_run.max())} instead."
            )
        object.__setattr__(self, "batch_sizes", batch)
        object.__setattr__(self, "steps_run", steps_run)
        _per_model_value("dataset_size", self.dataset_size, k, integer=True, low=1)
        _per_model_value("steps_accounted", self.steps_accounted, k, integer=True, low=0)
        rates = _per_model_value("sampling_rate", self.sampling_rate, k, low=0.0)
        if np.any(rates <= 0) or np.any(rates > 1):
            bad = float(rates[(rates <= 0) | (rates > 1)][0])
            raise DpauditError(
                f"The 'sampling_rate' parameter must be in (0, 1]. Got {bad!r} instead."
            )
        clip = _per_model_value("clipping_norm", self.clipping_norm, k, low=0.0)
        if np.any(clip <= 0):
            raise DpauditError(
                f"The 'clipping_norm' parameter must be > 0. Got {float(clip.min())!r} instead."
            )
        _per_model_value("noise_multiplier", self.noise_multiplier, k, low=0.0)
        sizes = self.per_model("dataset_size")
        # Steps past steps_run are ignored: only when some row's largest entry is above n
        # do the steps run need to be told apart (one pass over the batch sizes otherwise).
        if k and width and bool(np.any(batch.max(axis=1) > sizes)):
            over = np.where(self.ran, batch, 0) > sizes[:, None]
        else:
            over = np.zeros((k, width), dtype=bool)
        if np.any(over):
            i, t = (int(v[0]) for v in np.nonzero(over))
            raise DpauditError(
                f"The 'batch_sizes' parameter must be at most the dataset size n: model {i} "
                f"step {t} has a batch of {int(batch[i, t])} records out of n = "
                f"{int(sizes[i])}."
            )

    @property
    def num_models(self) -> int:
        return int(self.steps_run.size)

    @property
    def ran(self) -> np.ndarray:
        """``(K, T)`` bool: the steps each model ran (``t < steps_run[k]``)."""
        width = self.batch_sizes.shape[1]
        return np.arange(width)[None, :] < self.steps_run[:, None]

    def per_model(self, name: str) -> np.ndarray:
        """``(K,)`` values of a parameter given as one number or one per model."""
        value = np.asarray(getattr(self, name))
        dtype = np.int64 if name in ("dataset_size", "steps_accounted") else np.float64
        return np.broadcast_to(value.astype(dtype), (self.num_models,)).copy()

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The raw arrays a work unit stores (``greybox_*`` keys, per-model parameters).

        The ``(K, T)`` arrays are stored compactly and losslessly, since they are most of
        a unit's bytes (written, digested and read again by every audit): batch sizes in
        the smallest unsigned integer type that holds them, the untouched noise in float32
        when float32 holds every value exactly (the engine's gradients are float32), and
        clipped norms that are all unknown as a ``(K, 0)`` array, which
        :meth:`from_arrays` pads back with NaN. :meth:`from_arrays` restores the same
        values (int64, float64) whichever form a unit holds.
        """
        out = {
            f"{_ARRAY_PREFIX}batch_sizes": _compact_counts(self.batch_sizes),
            f"{_ARRAY_PREFIX}clipped_norms_max": _compact_floats(
                self.clipped_norms_max, drop_all_nan=True
            ),
            f"{_ARRAY_PREFIX}untouched_noise": _compact_floats(self.untouched_noise),
            f"{_ARRAY_PREFIX}steps_run": np.asarray(self.steps_run),
        }
        for name in (*_PER_MODEL, "steps_accounted"):
            out[f"{_ARRAY_PREFIX}{name}"] = self.per_model(name)
        return out

    @classmethod
    def from_arrays(cls, parts: Sequence[Mapping[str, np.ndarray]]) -> GreyBoxObservations | None:
        """Join the arrays of several work units (``None`` if any unit has none).

        Units with fewer steps are padded (batch size 0, NaN), which the checks ignore
        since those steps are past each model's ``steps_run``.
        """
        key = f"{_ARRAY_PREFIX}steps_run"
        if not parts or any(key not in p for p in parts):
            return None
        width = max(p[f"{_ARRAY_PREFIX}batch_sizes"].shape[1] for p in parts)

        def joined(name: str, fill: float) -> np.ndarray:
            arrays = [np.asarray(p[f"{_ARRAY_PREFIX}{name}"]) for p in parts]
            dtype = np.result_type(*arrays)
            if dtype.kind not in "iuf" or any(a.ndim != 2 for a in arrays):
                padded = []
                for a in arrays:
                    pad = width - a.shape[1]
                    padded.append(np.pad(a, ((0, 0), (0, pad)), constant_values=fill) if pad else a)
                return np.concatenate(padded)
            # One pass into the type the observations keep (int64 counts, float64
            # values; compactly stored units widen losslessly), padding each unit.
            if dtype.kind == "f" or math.isnan(fill):
                dtype = np.result_type(dtype, np.float64)
            elif dtype != np.uint64:
                dtype = np.dtype(np.int64)
            out = np.empty((sum(a.shape[0] for a in arrays), width), dtype=dtype)
            row = 0
            for a in arrays:
                out[row : row + a.shape[0], : a.shape[1]] = a
                out[row : row + a.shape[0], a.shape[1] :] = fill
                row += a.shape[0]
            return out

        def flat(name: str) -> np.ndarray:
            return np.concatenate([np.asarray(p[f"{_ARRAY_PREFIX}{name}"]) for p in parts])

        return cls(
            batch_sizes=joined("batch_sizes", 0),
            dataset_size=flat("dataset_size"),
            sampling_rate=flat("sampling_rate"),
            clipped_norms_max=joined("clipped_norms_max", math.nan),
            clipping_norm=flat("clipping_norm"),
            untouched_noise=joined("untouched_noise", math.nan),
            noise_multiplier=flat("noise_multiplier"),
            steps_run=flat("steps_run"),
            steps_accounted=flat("steps_accounted"),
        )


# ------------------------------------------------------------------------- storage


def _compact_counts(batch: np.ndarray) -> np.ndarray:
    """Non-negative int64 counts in the smallest unsigned type that holds them."""
    top = int(batch.max()) if batch.size else 0
    for dtype in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dtype).max:
            return batch.astype(dtype)
    return np.asarray(batch)


def _compact_floats(values: np.ndarray, *, drop_all_nan: bool = False) -> np.ndarray:
    """float64 values as float32 when that is exact (NaN kept), else unchanged; with
    ``drop_all_nan``, all-NaN values as a ``(K, 0)`` array (padded back with NaN)."""
    narrow = values.astype(np.float32)
    if drop_all_nan and bool(np.isnan(narrow).all()):
        return np.empty((values.shape[0], 0), dtype=np.float64)
    same = np.array_equal(narrow.astype(np.float64), values, equal_nan=True)
    return narrow if same else np.asarray(values)


# ------------------------------------------------------------------------- validation


def _int_array(name: str, value: Any, *, ndim: int, low: int) -> np.ndarray:
    arr = np.asarray(value)
    what = "(K,)" if ndim == 1 else "(K, T)"
    if arr.ndim != ndim:
        raise DpauditError(
            f"The {name!r} parameter must be a {ndim}-D integer array {what}. Got shape "
            f"{arr.shape} instead."
        )
    integral = arr.dtype.kind in "iu" or (
        arr.dtype.kind == "f"
        and bool(np.all(np.isfinite(arr)))
        and bool(np.all(arr == np.round(arr)))
    )
    if not integral:
        raise DpauditError(
            f"The {name!r} parameter must hold integers. Got dtype {arr.dtype} with "
            "non-integer values instead."
        )
    if arr.size and arr.min() < low:
        raise DpauditError(
            f"The {name!r} parameter must hold integers ≥ {low}. Got {int(arr.min())} instead."
        )
    return arr.astype(np.int64, copy=False)


def _float_array(name: str, value: Any, *, shape: tuple[int, int]) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise DpauditError(f"The {name!r} parameter must be a float array (K, T).") from None
    if arr.shape != shape:
        raise DpauditError(
            f"The {name!r} parameter must have the shape of 'batch_sizes' {shape}. Got "
            f"shape {arr.shape} instead."
        )
    return arr


def _per_model_value(
    name: str, value: Any, k: int, *, low: float, integer: bool = False
) -> np.ndarray:
    arr = np.asarray(value)
    if arr.ndim > 1 or (arr.ndim == 1 and arr.size != k):
        raise DpauditError(
            f"The {name!r} parameter must be one number or one per model ({k}). Got shape "
            f"{arr.shape} instead."
        )
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise DpauditError(f"The {name!r} parameter must be a number. Got {value!r} instead.")
    flat = arr.astype(np.float64).reshape(-1)
    if not np.all(np.isfinite(flat)) or (flat.size and flat.min() < low):
        bad = flat[~np.isfinite(flat) | (flat < low)][0]
        raise DpauditError(
            f"The {name!r} parameter must be finite and ≥ {low:g}. Got {float(bad)!r} instead."
        )
    if integer and np.any(flat != np.round(flat)):
        raise DpauditError(f"The {name!r} parameter must be an integer. Got {value!r} instead.")
    return np.broadcast_to(flat, (k,))


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class GreyBoxTest:
    """One grey-box test of a run's internals.

    Attributes:
        check: the gate check's name (a key of :data:`GREYBOX_CHECKS`).
        p_value: a valid p-value under a correct run (``None``: not evaluated, nothing
            observed); deterministic tests give exactly 0 or 1.
        chance: whether a correct run can fail it by chance, i.e. whether it takes a share
            of the verdict's confidence budget (p-value tests: yes; deterministic: no).
        reason: one line: what was observed, against what.
        details: the statistic and its null law, for results.json.
    """

    check: str
    p_value: float | None
    chance: bool
    reason: str
    details: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def title(self) -> str:
        return GREYBOX_CHECKS[self.check]

    @property
    def evaluated(self) -> bool:
        return self.p_value is not None

    def passed(self, alpha: float) -> bool:
        """Whether the test passes at significance ``alpha`` (p ≥ α; a deterministic test
        passes iff p = 1). Not-evaluated tests pass here: the gate decides about them."""
        if self.p_value is None:
            return True
        if not self.chance:
            return self.p_value >= 1.0
        return self.p_value >= alpha


def _not_evaluated(check: str, reason: str, *, chance: bool) -> GreyBoxTest:
    return GreyBoxTest(check, None, chance, reason)


# ----------------------------------------------------------------------- batch sizes


def dispersion_lower_tail_pvalue(
    statistic: float, groups: Sequence[tuple[int, float, int]]
) -> float:
    """P(D ≤ d) bounded from above, D = Σ (b − nq)²/(nq(1 − q)) over independent b.

    Each group ``(n, q, N)`` contributes N independent terms with b ~ Binomial(n, q),
    0 < q < 1. E[D] = Σ N (every term has mean 1). D is not χ²-distributed (b is discrete),
    so the lower tail is bounded by the Chernoff inequality, with the exact moment
    generating function of one term computed from the binomial pmf:

        P(D ≤ d) ≤ inf_{λ ≥ 0} exp(λ·d) · Π_g E[exp(−λ Z_g)]^{N_g},
        Z_g = (b − n_g q_g)²/(n_g q_g (1 − q_g)).

    The bound is valid for every d (Markov's inequality applied to exp(−λD)), so the
    returned value is a conservative p-value for a one-sided test of "too little
    dispersion" (fixed-size batches have D ≈ 0).

    References:
        Chernoff 1952 (Ann. Math. Statist. 23(4), Thm. 1), in the form of Boucheron,
        Lugosi, Massart, "Concentration Inequalities" (2013), §2.2 (the Cramér–Chernoff
        method); scipy.stats.binom for the pmf.
    """

    total = sum(count for _, _, count in groups)
    if statistic >= total:  # the bound's infimum is at λ = 0 (f'(0) = d − E[D] ≥ 0)
        return 1.0
    terms = []
    for n, q, count in groups:
        b = np.arange(n + 1)
        z = (b - n * q) ** 2 / (n * q * (1 - q))
        terms.append((binom.logpmf(b, n, q), z, count))

    def log_bound(u: float) -> float:
        lam = math.exp(u)
        value = lam * statistic
        for logpmf, z, count in terms:
            a = logpmf - lam * z
            top = float(a.max())
            value += count * (top + math.log(float(np.exp(a - top).sum())))
        return value

    # f(λ) is convex in λ with f(0) = 0 and f'(0) < 0 here, so f(e^u) is unimodal in u:
    # a bounded Brent search finds its minimum; the end points are kept as candidates.
    low, high = -30.0, 30.0
    found = minimize_scalar(log_bound, bounds=(low, high), method="bounded")
    best = min(0.0, float(found.fun), log_bound(low), log_bound(high))
    return float(min(1.0, math.exp(best)))


def batch_size_test(obs: GreyBoxObservations) -> GreyBoxTest:
    """Do the realised batch sizes follow Binomial(n, q), independently per step?

    Two tests, combined by Bonferroni (each at half the level: the p-value is
    min(1, 2·min(p_sum, p_dispersion))):

    * the total Σ b over the N (model, step) pairs of one (n, q) is Binomial(N·n, q):
      an exact two-sided binomial test (scipy.stats.binomtest) has power against a q
      that differs from the one accounted; several (n, q) groups are tested separately
      and combined by Bonferroni again (G groups: G·min p);
    * the dispersion D = Σ (b − nq)²/(nq(1 − q)) has mean N; shuffled fixed-size
      batches give D ≈ 0, so a one-sided lower-tail test (a Chernoff bound with the
      exact binomial moment generating function, :func:`dispersion_lower_tail_pvalue`)
      catches them even when their size equals nq.

    Models with q = 1 (full batch) must have b = n at every step: a deterministic part
    (p = 0 on any other batch). When every model has q = 1, the test is deterministic.

    References:
        scipy.stats.binomtest (exact two-sided test, "minlike" p-value); Abadi et al.
        2016, Alg. 1 (each example joins a lot independently with probability q).
    """

    name = "greybox_batch_sizes"
    ran = obs.ran
    if not ran.any():
        return _not_evaluated(name, "no step was run", chance=False)
    n_all = obs.per_model("dataset_size")
    q_all = obs.per_model("sampling_rate")
    full = q_all >= 1.0
    if np.any(full):
        wrong = ran[full] & (obs.batch_sizes[full] != n_all[full][:, None])
        if wrong.any():
            k = int(np.flatnonzero(full)[np.nonzero(wrong)[0][0]])
            t = int(np.nonzero(wrong)[1][0])
            return GreyBoxTest(
                name,
                0.0,
                bool(not np.all(full)),
                f"q = 1 (full batch) but model {k} step {t} used {int(obs.batch_sizes[k, t])} "
                f"of n = {int(n_all[k])} records",
            )
    if np.all(full):
        return GreyBoxTest(
            name, 1.0, False, "every step used all n records, as q = 1 (full batch) requires"
        )
    groups: list[tuple[int, float, int]] = []
    sum_p: list[float] = []
    dispersion = 0.0
    pairs = sorted({(int(n), float(q)) for n, q in zip(n_all[~full], q_all[~full], strict=True)})
    total_b, expected_b = 0, 0.0
    for n, q in pairs:
        models = (n_all == n) & (q_all == q)
        b = obs.batch_sizes[models][ran[models]]
        count = int(b.size)
        if count == 0:
            continue
        s = int(b.sum())
        total_b += s
        expected_b += count * n * q
        sum_p.append(float(binomtest(s, count * n, q, alternative="two-sided").pvalue))
        dispersion += float(np.sum((b - n * q) ** 2) / (n * q * (1 - q)))
        groups.append((n, q, count))
    if not groups:  # only the full-batch models ran a step, each with all n records
        return GreyBoxTest(
            name, 1.0, False, "every step run used all n records, as q = 1 (full batch) requires"
        )
    entries = sum(c for _, _, c in groups)
    p_sum = min(1.0, len(sum_p) * min(sum_p))
    p_disp = dispersion_lower_tail_pvalue(dispersion, groups)
    p = min(1.0, 2.0 * min(p_sum, p_disp))
    q_hat = total_b / sum(n * c for n, _, c in groups)
    q_acc = expected_b / sum(n * c for n, _, c in groups)
    reason = (
        f"{entries} batches: mean rate {q_hat:.4g} against the accounted q = {q_acc:.4g} "
        f"(exact binomial p = {p_sum:.3g}); dispersion Σ(b − nq)²/(nq(1 − q)) = "
        f"{dispersion:.4g} against its mean {entries} under Poisson sampling (lower tail "
        f"p ≤ {p_disp:.3g}); Bonferroni p = {p:.3g}"
    )
    return GreyBoxTest(
        name,
        p,
        True,
        reason,
        {
            "batches": entries,
            "observed_rate": q_hat,
            "accounted_rate": q_acc,
            "p_sum": p_sum,
            "dispersion": dispersion,
            "p_dispersion": p_disp,
            "groups": len(groups),
        },
    )


# ---------------------------------------------------------------------------- clipping


def clipping_test(obs: GreyBoxObservations, *, rtol: float = CLIPPING_RTOL) -> GreyBoxTest:
    """Is every observed clipped per-example gradient norm at most C·(1 + rtol)?

    Deterministic: a correct clipping step never exceeds C whatever the randomness (up to
    float rounding, :data:`CLIPPING_RTOL`), so the test takes no share of the confidence
    budget: p = 1 when every norm is within, 0 otherwise.
    """
    name = "greybox_clipping"
    norms = np.where(obs.ran, obs.clipped_norms_max, np.nan)
    seen = ~np.isnan(norms)
    if not seen.any():
        return _not_evaluated(name, "the trainer reported no clipped norms", chance=False)
    clip = obs.per_model("clipping_norm")
    ratio = np.where(seen, norms / clip[:, None], -np.inf)
    k, t = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    worst, c = float(norms[k, t]), float(clip[k])
    ok = bool(ratio[k, t] <= 1.0 + rtol)
    sign = "≤" if ok else ">"
    reason = (
        f"largest clipped norm {worst:.6g} {sign} C = {c:g} (relative tolerance {rtol:g}) over "
        f"{int(seen.sum())} steps"
    ) + ("" if ok else f" (model {int(k)}, step {int(t)})")
    details = {"largest_norm": worst, "clipping_norm": c, "steps_seen": int(seen.sum())}
    return GreyBoxTest(name, 1.0 if ok else 0.0, False, reason, details)


# ------------------------------------------------------------------------------- noise


def noise_test(obs: GreyBoxObservations) -> GreyBoxTest:
    """Is the noise on an untouched coordinate at least N(0, (σC)²)?

    Under correct DP-SGD the privatised sum x on a coordinate no example touches is the
    noise alone, N(0, (σC)²), independent over steps and models, so
    Q = Σ x²/(σC)² ~ χ²_N over the N observed steps. Too little noise makes Q small: the
    one-sided p-value is P(χ²_N ≤ Q) (scipy.stats.chi2.cdf). With σ/10, Q ≈ N/100, and
    P(χ²_8 ≤ 0.08) ≈ 2e-10: a single run of 8 steps shows it. More noise than σC is not
    a privacy bug, so the test is one-sided.

    References:
        Lehmann & Romano, "Testing Statistical Hypotheses" (3rd ed., 2005), §3.4: the
        normal family with known mean 0 has monotone likelihood ratio in Σx², so the
        one-sided test that rejects for small Σx²/(σC)² (χ²_N under the boundary of the
        null) is uniformly most powerful; scipy.stats.chi2 for its distribution function.
    """

    name = "greybox_noise"
    sigma = obs.per_model("noise_multiplier")
    if np.all(sigma == 0):
        return _not_evaluated(name, "σ = 0: the run claims no noise", chance=True)
    scale = sigma * obs.per_model("clipping_norm")
    x = np.where(obs.ran & (scale[:, None] > 0), obs.untouched_noise, np.nan)
    seen = ~np.isnan(x)
    count = int(seen.sum())
    if count == 0:
        return _not_evaluated(
            name, "the trainer reported no noise on an untouched coordinate", chance=True
        )
    q_stat = float(np.sum(np.where(seen, (x / scale[:, None]) ** 2, 0.0)))
    p = float(chi2.cdf(q_stat, count))
    ratio = math.sqrt(q_stat / count)
    reason = (
        f"noise standard deviation {ratio:.4g}·σC over {count} steps (Σx²/(σC)² = "
        f"{q_stat:.4g} against χ²_{count}, lower tail p = {p:.3g})"
    )
    return GreyBoxTest(
        name,
        p,
        True,
        reason,
        {"statistic": q_stat, "degrees_of_freedom": count, "std_ratio": ratio},
    )


# ------------------------------------------------------------------------------- steps


def steps_test(obs: GreyBoxObservations) -> GreyBoxTest:
    """Did every model run exactly the steps accounted? Deterministic (p is 1 or 0)."""
    name = "greybox_steps"
    if obs.num_models == 0:
        return _not_evaluated(name, "no model was trained", chance=False)
    accounted = obs.per_model("steps_accounted")
    wrong = np.flatnonzero(obs.steps_run != accounted)
    if wrong.size:
        k = int(wrong[0])
        return GreyBoxTest(
            name,
            0.0,
            False,
            f"{wrong.size} of {obs.num_models} models ran a number of steps other than the "
            f"accounted; model {k} ran {int(obs.steps_run[k])} steps, {int(accounted[k])} "
            "accounted",
            {"models_wrong": int(wrong.size)},
        )
    lo, hi = int(accounted.min()), int(accounted.max())
    steps = f"{lo}" if lo == hi else f"{lo} to {hi}"
    return GreyBoxTest(
        name, 1.0, False, f"all {obs.num_models} models ran the {steps} steps accounted"
    )


def greybox_tests(obs: GreyBoxObservations | None) -> tuple[GreyBoxTest, ...]:
    """Every grey-box test of ``obs`` (all not evaluated when there are no observations)."""
    if obs is None:
        why = "the trainer returned no grey-box observations (TrainerOutput.observations)"
        return tuple(
            _not_evaluated(name, why, chance=name in ("greybox_batch_sizes", "greybox_noise"))
            for name in GREYBOX_CHECKS
        )
    return (batch_size_test(obs), clipping_test(obs), noise_test(obs), steps_test(obs))
