"""Learned scores for ``[mechanism] score = "learned"``: a classifier tells D' from D.

A score learned from outputs is only as good as the classifier, but its bound is valid
whatever the classifier does, because the classifier is fitted on trials that are never
scored or counted (the three-way split of :func:`dpaudit.bounds.learned_lower_bounds`;
the streamed path cuts by whole units, :func:`dpaudit.mechanisms.summary.learned_streamed`).
This module only fits: it maps the fitting part's raw outputs under D (label 0) and D'
(label 1) to a function whose value on an output is the fitted log-odds of D' against D.
Larger means "D'" as for every score, and the direction is learned, never assumed.

The learners:

- ``logistic``: an additive logistic model: each coordinate (up to
  :data:`SPLINE_MAX_DIMENSION` of them) enters through a cubic spline with knots at
  :data:`SPLINE_KNOTS` quantiles of its fitting values, constant beyond the outermost
  knots, and a coordinate with fewer distinct knots (e.g. a bit) enters linearly. The
  score can then be flat in the tails (the Laplace mechanism's likelihood ratio is
  constant beyond its two centres), rise in both tails (outputs under D' more spread) or
  be linear (the Gaussian mechanism's, unary encoding's). Beyond
  :data:`SPLINE_MAX_DIMENSION` coordinates, the outputs enter linearly. It is fitted on
  the splines' basis columns and scores through one spline per coordinate, the fitted
  coefficients folded into it (the same function; its last bits may differ).
- ``boosting``: gradient-boosted trees (scikit-learn's ``HistGradientBoostingClassifier``)
  on the standardised outputs: any shape, at the cost of a noisier score.
- ``knn``: the share of D' among the ⌈√n⌉ nearest fitting outputs (standardised), as
  log-odds with half a vote added to each side.
- ``counts``: for outputs with few distinct values, the estimated log-likelihood ratio of
  each value, log((c₁(v) + ½)/(n₁ + ½V)) − log((c₀(v) + ½)/(n₀ + ½V)), V the number of
  distinct fitting outputs plus one (every output unseen in fitting shares one score).
  With exact per-value counts this is the likelihood-ratio test of a discrete mechanism.
- ``auto`` (the default): ``counts`` when the fitting outputs take at most
  :data:`DISCRETE_VALUES` distinct values, each seen :data:`DISCRETE_PER_VALUE` times
  on average, else ``logistic``.

scikit-learn is imported when a score is fitted, never when an audit file is loaded.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.interpolate import BSpline
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import SplineTransformer
from threadpoolctl import ThreadpoolController

from dpaudit.errors import DpauditError, check_choice
from dpaudit.mechanisms.schema import LEARNERS

#: ``auto`` counts outputs with at most this many distinct values ...
DISCRETE_VALUES = 256
#: ... when the fitting outputs hold at least this many per distinct value on average.
DISCRETE_PER_VALUE = 8
#: ``logistic`` places this many knots (quantiles) in each coordinate's spline ...
SPLINE_KNOTS = 8
#: ... for outputs of at most this many coordinates (linear in each beyond).
SPLINE_MAX_DIMENSION = 100
#: ``logistic`` fits by Newton's method up to this many features, by L-BFGS beyond.
NEWTON_MAX_FEATURES = 500
#: Half a count (a vote) added to each side of a ``counts`` (``knn``) ratio: a value seen
#: under one neighbour only gets a large finite score, never an infinite one.
PSEUDO_COUNT = 0.5
#: Coefficients (or values) a learned score's description lists, largest first.
DESCRIBED = 12
#: A fitted score scores at most this many rows at a time (its memory is bounded).
SCORE_CHUNK = 1 << 16
#: ``auto`` first counts the distinct rows among this many fitting outputs: more than
#: :data:`DISCRETE_VALUES` of them decides ``logistic`` without a table of all of them.
AUTO_PROBE = 4 * DISCRETE_VALUES


@dataclass(frozen=True)
class LearnedScore:
    """A fitted score: ``score(outputs)`` is the log-odds of D' for each output row.

    Attributes:
        learner: The learner fitted (``auto`` resolved).
        requested: The learner the audit file asked for.
        fit_negatives: Outputs on D it was fitted on.
        fit_positives: Outputs on D' it was fitted on.
        model: A JSON-able description of the fitted model.
        warnings: What a reader of the bound should know about the fit.
    """

    learner: str
    requested: str
    fit_negatives: int
    fit_positives: int
    scorer: Callable[[np.ndarray], np.ndarray] = field(repr=False)
    model: dict[str, Any] = field(default_factory=dict, repr=False)
    warnings: tuple[str, ...] = ()

    def __call__(self, outputs: np.ndarray) -> np.ndarray:
        rows = _rows(outputs)
        # Every learner scores each row on its own, so scoring in chunks gives the same
        # bits as scoring at once, and bounds the memory of a learner's features
        # whatever the number of rows.
        with one_thread():
            parts = [
                np.asarray(self.scorer(rows[start : start + SCORE_CHUNK]), dtype=float).reshape(-1)
                for start in range(0, rows.shape[0], SCORE_CHUNK)
            ]
        return np.concatenate(parts) if parts else np.zeros(0)

    def describe(self) -> dict[str, Any]:
        """The ``learned`` details of a bound: which classifier, fitted how."""
        return {
            "learner": self.learner,
            "requested": self.requested,
            "score": "the classifier's log-odds of D' against D (larger = D')",
            "direction": "learned on the fitting trials, never assumed",
            "model": self.model,
        }


_controller: list[ThreadpoolController] = []


def one_thread() -> Any:
    """A context in which BLAS and OpenMP run one thread each.

    A fitted score's last bits depend on how many threads summed its products (a sum's
    order), and a count at a threshold can turn on the last bit: fitting and scoring on
    one thread make the score, and so the bound, the same on every machine and under any
    ``OMP_NUM_THREADS``, which ``dpaudit verify`` relies on. The controller is made once
    (finding the loaded thread pools takes milliseconds; using it, microseconds).
    """
    if not _controller:
        _controller.append(ThreadpoolController())
    return _controller[0].limit(limits=1)


def _rows(outputs: Any) -> np.ndarray:
    arr = np.asarray(outputs, dtype=float)
    # math.prod, not -1: zero rows of d coordinates stay (0, d)
    return (
        arr.reshape(arr.shape[0], math.prod(arr.shape[1:])) if arr.ndim != 1 else arr.reshape(-1, 1)
    )


def fit_score(
    negatives: np.ndarray, positives: np.ndarray, *, learner: str = "auto", seed: int = 0
) -> LearnedScore:
    """Fit a score telling outputs on D' (``positives``) from outputs on D (``negatives``).

    Args:
        negatives: Raw outputs on D, ``(n0, d)``.
        positives: Raw outputs on D', ``(n1, d)``.
        learner: One of :data:`~dpaudit.mechanisms.schema.LEARNERS`.
        seed: Seeds the learners that draw random numbers (boosting's validation split).

    Returns:
        :class:`LearnedScore`.

    Raises:
        DpauditError: an unknown learner, or outputs of different dimensions.
    """
    check_choice("learner", learner, LEARNERS)
    neg, pos = _rows(negatives), _rows(positives)
    if neg.shape[1] != pos.shape[1] or neg.shape[0] == 0 or pos.shape[0] == 0:
        raise DpauditError(
            f"A learned score needs outputs of one dimension on both inputs; got shapes "
            f"{neg.shape} and {pos.shape}."
        )
    chosen = learner
    table: tuple[np.ndarray, np.ndarray] | None = None
    if learner == "auto":
        pooled = np.concatenate([neg, pos])
        few = False
        # More than DISCRETE_VALUES distinct rows among the first few already decides
        # "logistic": the whole table (a sort of every fitting row) is built only when
        # the outputs may be few-valued, and the choice is the one the table would make.
        if _distinct_count(pooled[:AUTO_PROBE]) <= DISCRETE_VALUES:
            table = distinct_rows(pooled)
            distinct = table[0].shape[0]
            few = distinct <= DISCRETE_VALUES and distinct * DISCRETE_PER_VALUE <= len(pooled)
        chosen = "counts" if few else "logistic"
    fitters: dict[str, Callable[..., tuple[Callable, dict, tuple[str, ...]]]] = {
        "logistic": _fit_logistic,
        "boosting": _fit_boosting,
        "knn": _fit_knn,
        "counts": _fit_counts,
    }
    with one_thread():
        if chosen == "counts":  # the table auto has already built, if it has
            scorer, model, notes = _fit_counts(neg, pos, seed=seed, table=table)
        else:
            scorer, model, notes = fitters[chosen](neg, pos, seed=seed)
    return LearnedScore(chosen, learner, neg.shape[0], pos.shape[0], scorer, model, notes)


def distinct_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of finite ``x`` (−0.0 read as 0.0) in :func:`numpy.unique`'s
    order (lexicographic by value), and each row's index among them.

    The same as ``numpy.unique(x + 0.0, axis=0, return_inverse=True)``, at a fraction of
    its cost: the rows are told apart by their bytes, first through one 64-bit hash per
    row (:class:`ValueTable`'s), whose sort is that of integers; every row is then
    compared with the first row of its hash, and only if two different rows share a hash
    are the rows sorted by their bytes (one memcmp per comparison) instead. Only the few
    distinct rows are put in numpy's order, which is therefore the same either way.
    """
    rows = x + 0.0
    words = _words(rows)
    drawn = np.random.default_rng([_HASH_STREAM, 0]).integers(
        0, 2**63, size=words.shape[1], dtype=np.uint64
    )
    multipliers = np.asarray(drawn * np.uint64(2) + np.uint64(1), dtype=np.uint64)
    _, first, inverse = np.unique(_hash(words, multipliers), return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    if not (words[first][inverse] == words).all():  # a collision: tell rows by bytes
        _, first, inverse = np.unique(_row_keys(rows), return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
    values = rows[first]
    order = np.lexsort(values.T[::-1])  # by the first coordinate, then the second, ...
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return values[order], rank[inverse]


# ------------------------------------------------------------------------ the learners


@dataclass(frozen=True)
class ValueTable:
    """The distinct rows of a fitting set, and where any output row falls among them.

    :meth:`index` maps each output row to the position of its value in ``values`` (rows
    that are all distinct, e.g. those of :func:`distinct_rows`), or to ``len(values)`` for
    a value never seen, at array speed, with no Python loop over rows or values: a row
    is its bytes after ``+ 0.0`` (−0.0 is 0.0, as in :func:`distinct_rows`; the outputs
    are finite), so the match is exactly that of a dictionary keyed by ``row.tobytes()``.
    Each row's 64-bit words are hashed to one ``uint64`` (a sum of the folded words times
    odd multipliers, modulo 2⁶⁴, then mixed), found by :func:`numpy.searchsorted` among
    the table's sorted hashes, and the row is then compared word for word with the table
    row found: equal rows have equal hashes, so a hit is never missed, and the comparison
    rejects every output that only shares a hash. The multipliers are drawn from fixed
    seeds until the table's own rows have distinct hashes: two rows that differ in one
    word never collide (an odd multiple of a nonzero difference is not 0 modulo 2⁶⁴), and
    a collision among rows that differ in several, rare, only costs another seed.
    """

    values: np.ndarray  # (V, d) distinct rows, + 0.0 applied
    multipliers: np.ndarray = field(init=False, repr=False)
    hashes: np.ndarray = field(init=False, repr=False)  # the rows' hashes, sorted
    position: np.ndarray = field(init=False, repr=False)  # sorted hash → row of values

    def __post_init__(self) -> None:
        words = _words(self.values)
        for seed in range(HASH_SEEDS):
            drawn = np.random.default_rng([_HASH_STREAM, seed]).integers(
                0, 2**63, size=words.shape[1], dtype=np.uint64
            )
            multipliers = np.asarray(drawn * np.uint64(2) + np.uint64(1), dtype=np.uint64)
            hashes = _hash(words, multipliers)
            order = np.argsort(hashes, kind="stable")
            if np.all(np.diff(hashes[order]) != 0):
                break
        else:  # pragma: no cover - every one of 16 seeds would need a collision
            raise DpauditError(
                f"The learned score's table of {words.shape[0]} distinct outputs could not "
                f"be hashed without a collision under {HASH_SEEDS} seeds."
            )
        object.__setattr__(self, "multipliers", multipliers)
        object.__setattr__(self, "hashes", hashes[order])
        object.__setattr__(self, "position", order)

    def index(self, out: np.ndarray) -> np.ndarray:
        """Each row's position in ``values``, ``len(values)`` where it is not there."""
        rows = np.asarray(out, dtype=np.float64)
        # each column's words after + 0.0, contiguous (the hash and the comparison read
        # a column at a time; the table's own columns are a few cached values)
        columns = [(rows[:, j] + 0.0).view(np.uint64) for j in range(rows.shape[1])]
        hashes = _hash_columns(columns, self.multipliers)
        at = np.minimum(np.searchsorted(self.hashes, hashes), self.hashes.size - 1)
        row = self.position[at]
        table = _words(self.values)
        same = np.ones(row.size, dtype=bool)
        for j, column in enumerate(columns):
            same &= table[:, j][row] == column
        return np.where(same, row, self.values.shape[0])


#: Seeds tried, at most, for multipliers that hash a table's rows without a collision.
HASH_SEEDS = 16
_HASH_STREAM = 0x5EED


def _words(rows: np.ndarray) -> np.ndarray:
    """A float array's rows as their 64-bit words (the same bytes)."""
    return np.ascontiguousarray(rows, dtype=np.float64).view(np.uint64)


def _hash(words: np.ndarray, multipliers: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of ``words`` (:func:`_hash_columns` of its columns)."""
    return _hash_columns([words[:, j] for j in range(words.shape[1])], multipliers)


def _hash_columns(columns: Sequence[np.ndarray], multipliers: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of the 64-bit words given column by column."""
    # Each word w is folded to w ^ (w >> 32) (a bijection of 64-bit words), so that
    # floats whose low bits are all zero, as small integers' are, still have varied low
    # bits; the folded words times their odd multipliers are summed, and the row's sum
    # is mixed by SplitMix64's last steps (Steele, Lea, Flood 2014). uint64 products
    # and sums wrap modulo 2⁶⁴, which is what the hash is. One column at a time into
    # two row-sized buffers: no temporary of the words' size.
    n = columns[0].shape[0]
    total = np.zeros(n, dtype=np.uint64)
    term = np.empty(n, dtype=np.uint64)
    for j, column in enumerate(columns):
        np.right_shift(column, np.uint64(32), out=term)
        term ^= column
        term *= multipliers[j]
        total += term
    np.right_shift(total, np.uint64(31), out=term)
    total ^= term
    total *= np.uint64(0x94D049BB133111EB)
    np.right_shift(total, np.uint64(29), out=term)
    total ^= term
    return total


def _distinct_count(rows: np.ndarray) -> int:
    """How many distinct rows ``rows`` holds (−0.0 read as 0.0, as in :func:`distinct_rows`)."""
    return int(np.unique(_row_keys(rows + 0.0)).size)


def _row_keys(rows: np.ndarray) -> np.ndarray:
    """Each row of a float array as one opaque key of its bytes (compared by memcmp)."""
    rows = np.ascontiguousarray(rows, dtype=float)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)


@dataclass(frozen=True)
class _Standardiser:
    """z = (y − mean)/sd with the fitting part's pooled mean and sd (sd 0 → 1)."""

    mean: np.ndarray
    sd: np.ndarray

    @classmethod
    def fit(cls, x: np.ndarray) -> _Standardiser:
        sd = x.std(axis=0)
        return cls(x.mean(axis=0), np.where(sd > 0, sd, 1.0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean) / self.sd

    def describe(self) -> dict[str, Any]:
        return {"mean": self.mean[:DESCRIBED].tolist(), "sd": self.sd[:DESCRIBED].tolist()}


def _labelled(neg: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([neg, pos]), np.r_[np.zeros(neg.shape[0]), np.ones(pos.shape[0])]


def spline_basis(spline: Any, column: np.ndarray) -> np.ndarray:
    """``spline.transform(column)`` of a fitted ``SplineTransformer`` with
    ``extrapolation="constant"``, bit for bit, at a third of its cost.

    Constant extrapolation gives a point beyond the outermost knots ``t[k]``, ``t[-k-1]``
    the basis values at that knot (:meth:`_AdditiveFeatures.folded`), which is the basis
    at the column clipped to them; the basis at each clipped point is scipy's sparse
    design matrix (de Boor's recurrence, the same values scikit-learn's dense path
    computes one basis function at a time), made dense. A column that is not all finite
    goes through ``transform`` itself, for scikit-learn's error.
    """
    if not np.isfinite(column).all():
        return np.asarray(spline.transform(column.reshape(-1, 1)))
    basis = spline.bsplines_[0]
    inside = np.clip(column, *_outer_knots(basis))
    return np.asarray(BSpline.design_matrix(inside, basis.t, int(basis.k)).toarray())


def _outer_knots(basis: BSpline) -> tuple[float, float]:
    """The outermost knots ``t[k]`` and ``t[-k-1]`` of a spline basis: beyond them
    ``extrapolation="constant"`` holds the basis at its value there."""
    k = int(basis.k)
    return float(basis.t[k]), float(basis.t[-k - 1])


@dataclass(frozen=True)
class _AdditiveFeatures:
    """Each coordinate's cubic B-spline basis (constant beyond the outermost knots), or
    the coordinate itself where it has fewer than three distinct knots."""

    std: _Standardiser
    splines: tuple[Any, ...]  # per coordinate: a fitted SplineTransformer or None

    @classmethod
    def fit(cls, x: np.ndarray) -> _AdditiveFeatures:

        std = _Standardiser.fit(x)
        z = std(x)
        splines: list[Any] = []
        if z.shape[1] <= SPLINE_MAX_DIMENSION:
            for j in range(z.shape[1]):
                knots = np.unique(np.quantile(z[:, j], np.linspace(0.0, 1.0, SPLINE_KNOTS)))
                if knots.size < 3:
                    splines.append(None)
                    continue
                spline = SplineTransformer(
                    knots=knots.reshape(-1, 1), degree=3, extrapolation="constant"
                )
                splines.append(spline.fit(z[:, j : j + 1]))
        return cls(std, tuple(splines))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        z = self.std(x)
        if not self.splines:
            return z
        blocks = [
            z[:, j : j + 1] if s is None else spline_basis(s, z[:, j])
            for j, s in enumerate(self.splines)
        ]
        return blocks[0] if len(blocks) == 1 else np.hstack(blocks)

    def folded(self, coef: np.ndarray, intercept: float) -> _AdditiveScore:
        """The linear score ``intercept + self(x) @ coef`` as one spline per coordinate.

        Each coordinate's block of fitted coefficients weights its basis functions, and a
        weighted sum of B-splines on the same knots is itself a B-spline with those
        weights as its coefficients (de Boor, *A Practical Guide to Splines*, ch. IX):
        one spline evaluation per coordinate instead of its ~10 basis columns and a
        product. ``extrapolation="constant"`` sets, below the first knot ``t[k]``, the
        basis to its values at ``t[k]`` (where only the first ``k`` are not 0), and above
        the last likewise; the folded spline at ``t[k]`` is the same sum, so clipping
        each coordinate to ``[t[k], t[-k-1]]`` is the same extrapolation. The value equals
        the basis-matrix product up to the order of the sum (its last bits).
        """
        terms: list[tuple[float, BSpline | None, float, float]] = []
        at = 0
        for s in self.splines:
            if s is None:
                terms.append((float(coef[at]), None, 0.0, 0.0))
                at += 1
                continue
            basis = s.bsplines_[0]
            width = basis.c.shape[1]
            k = int(basis.k)
            spline = BSpline(basis.t, np.array(coef[at : at + width], dtype=float), k)
            terms.append((0.0, spline, *_outer_knots(basis)))
            at += width
        return _AdditiveScore(self, np.array(coef, dtype=float), float(intercept), tuple(terms))

    def describe(self) -> dict[str, Any]:
        splined = sum(s is not None for s in self.splines)
        return {
            "features": (
                f"standardised outputs; {splined} coordinate(s) through a cubic spline with "
                f"up to {SPLINE_KNOTS} quantile knots (constant beyond them), the others "
                "linear"
            ),
            "standardisation": self.std.describe(),
        }


@dataclass(frozen=True)
class _AdditiveScore:
    """A fitted additive logistic score, each coordinate's term one folded spline
    (:meth:`_AdditiveFeatures.folded`) or a slope times the standardised coordinate."""

    features: _AdditiveFeatures
    coef: np.ndarray  # the fitted coefficients of the basis columns
    intercept: float
    terms: tuple[tuple[float, BSpline | None, float, float], ...]  # slope, spline, lo, hi

    def basis_score(self, x: np.ndarray) -> np.ndarray:
        """The same score through the basis matrix, as it was fitted (for checks)."""
        return np.asarray(self.features(x) @ self.coef + self.intercept)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        z = self.features.std(x)
        if not np.isfinite(z).all():
            # the basis path rejects what is not finite, with scikit-learn's message
            self.features(x)
        total = np.full(z.shape[0], self.intercept)
        for j, (slope, spline, lo, hi) in enumerate(self.terms):
            if spline is None:
                total += slope * z[:, j]
            else:
                total += spline(np.clip(z[:, j], lo, hi))
        return total


def _fit_logistic(
    neg: np.ndarray, pos: np.ndarray, *, seed: int
) -> tuple[Callable, dict, tuple[str, ...]]:

    x, y = _labelled(neg, pos)
    features = _AdditiveFeatures.fit(x)
    design = features(x)
    # Newton steps (exact Hessians) converge in a few iterations on a few hundred
    # features, ten times faster than L-BFGS here; beyond, a Hessian costs too much.
    solver = "newton-cholesky" if design.shape[1] <= NEWTON_MAX_FEATURES else "lbfgs"
    model = LogisticRegression(C=1.0, max_iter=2000, solver=solver)
    with warnings.catch_warnings(record=True) as caught:
        # An unconverged fit is still a fixed function of the fitting trials: valid,
        # only perhaps weaker. Say so instead of failing.
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(design, y)
    notes = tuple(
        "learned score: the logistic regression did not converge; the bound is valid, "
        "perhaps weaker"
        for w in caught
        if issubclass(w.category, ConvergenceWarning)
    )[:1]

    score: Callable[[np.ndarray], np.ndarray]
    if features.splines:
        score = features.folded(model.coef_[0], model.intercept_[0])
    else:  # linear in every coordinate: the model's own product

        def score(out: np.ndarray) -> np.ndarray:
            return model.decision_function(features(out))

    description = {
        **features.describe(),
        "regularisation": "L2, C = 1",
        "solver": solver,
        "intercept": float(model.intercept_[0]),
        "coefficients": int(model.coef_.size),
    }
    return score, description, notes


def _fit_boosting(
    neg: np.ndarray, pos: np.ndarray, *, seed: int
) -> tuple[Callable, dict, tuple[str, ...]]:

    std = _Standardiser.fit(np.concatenate([neg, pos]))
    x, y = _labelled(neg, pos)
    model = HistGradientBoostingClassifier(
        max_iter=100, early_stopping=True, random_state=seed % 2**32
    )
    model.fit(std(x), y)

    def score(out: np.ndarray) -> np.ndarray:
        return model.decision_function(std(out))

    description = {
        "features": "standardised outputs z",
        "trees": int(model.n_iter_),
        "early_stopping": bool(model.do_early_stopping_),
        "standardisation": std.describe(),
    }
    return score, description, ()


def _fit_knn(
    neg: np.ndarray, pos: np.ndarray, *, seed: int
) -> tuple[Callable, dict, tuple[str, ...]]:

    std = _Standardiser.fit(np.concatenate([neg, pos]))
    x, y = _labelled(neg, pos)
    k = min(x.shape[0], max(5, math.ceil(math.sqrt(x.shape[0]))))
    model = KNeighborsClassifier(n_neighbors=k)
    model.fit(std(x), y)

    def score(out: np.ndarray) -> np.ndarray:
        votes = model.predict_proba(std(out))[:, 1] * k
        return np.log(votes + PSEUDO_COUNT) - np.log(k - votes + PSEUDO_COUNT)

    description = {"features": "standardised outputs z", "neighbours": k}
    return score, description, ()


def _fit_counts(
    neg: np.ndarray,
    pos: np.ndarray,
    *,
    seed: int,
    table: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[Callable, dict, tuple[str, ...]]:
    # table: distinct_rows of the pooled outputs (negatives first), if already built
    values, inverse = table if table is not None else distinct_rows(np.concatenate([neg, pos]))
    n0, n1 = neg.shape[0], pos.shape[0]
    c0 = np.bincount(inverse[:n0], minlength=values.shape[0])
    c1 = np.bincount(inverse[n0:], minlength=values.shape[0])
    cells = values.shape[0] + 1  # every unseen output shares one cell
    a = PSEUDO_COUNT
    table = np.log((c1 + a) / (n1 + a * cells)) - np.log((c0 + a) / (n0 + a * cells))
    unseen = float(np.log(a / (n1 + a * cells)) - np.log(a / (n0 + a * cells)))
    lookup = ValueTable(values)
    scores = np.append(table, unseen)  # index len(values): every unseen output

    def score(out: np.ndarray) -> np.ndarray:
        return scores[lookup.index(out)]

    top = np.argsort(-(c0 + c1), kind="stable")[:DESCRIBED]
    description = {
        "distinct_outputs": int(values.shape[0]),
        "unseen_output_score": unseen,
        "most_frequent": [
            {
                "output": values[i].tolist(),
                "fit_counts": [int(c0[i]), int(c1[i])],
                "score": float(table[i]),
            }
            for i in top
        ],
    }
    notes: tuple[str, ...] = ()
    if values.shape[0] * 2 > n0 + n1:
        notes = (
            f"learned score: learner = 'counts' saw {values.shape[0]} distinct outputs among "
            f"{n0 + n1} fitting outputs: most outputs it scores were never seen and all score "
            f"{unseen:.3g}; for continuous outputs use learner = 'logistic'",
        )
    return score, description, notes
