"""The ``[mechanism]`` table: which mechanism runs, with which noise, and what it claims.

Only pydantic is needed to check it, so validating an audit file stays fast; the
mechanism it describes is built by :func:`dpaudit.mechanisms.units.build_mechanism`.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, model_validator

from dpaudit.plugins import NamesCode
from dpaudit.sections import ClaimSection, Epsilon, Mu, Positive, Table

#: Trials per arm up to which the summary holds every output in memory (exact threshold
#: search); above it, units are read one at a time (:mod:`dpaudit.mechanisms.summary`).
EXACT_TRIALS_LIMIT = 1_000_000

BUILTIN_MECHANISMS = (
    "laplace",
    "gaussian",
    "randomized-response",
    "k-rr",
    "unary-encoding",
    "local-laplace",
    "local-gaussian",
)
#: Built-ins whose noise is Gaussian (σ given, from μ, or calibrated to (ε, δ)).
GAUSSIAN = ("gaussian", "local-gaussian")
#: Local randomisers of one categorical record.
CATEGORICAL = ("k-rr", "unary-encoding")
#: Local randomisers of one record in a box ``domain``.
LOCAL = ("local-laplace", "local-gaussian")

#: Two vectors: f(D) and f(D'), or the records x and x'.
Vectors = tuple[list[float], list[float]]

#: ``score = "learned"``: a classifier fitted on some trials scores the others.
LEARNED = "learned"
#: ``score = "auto"`` (the default, also when ``score`` is not given): the exact likelihood
#: ratio where it is known, else a learned score (:mod:`dpaudit.mechanisms.auto_score`).
AUTO = "auto"
#: The classifiers of a learned score (:mod:`dpaudit.mechanisms.learned`): ``auto`` is
#: ``counts`` for outputs with few distinct values, else ``logistic``.
LEARNERS = ("auto", "logistic", "boosting", "knn", "counts")
#: Share of the trials per arm a learned score is fitted on, unless ``fit_fraction`` says.
FIT_FRACTION = 1.0 / 3.0
#: Fitting trials per arm, at most: more barely improves a score and slows every learner.
FIT_TRIALS_LIMIT = 100_000
#: A learned score's trials per arm above which its summary streams (the score fitted on
#: the first units, a grid of thresholds from units set aside, counts unit by unit) instead
#: of searching every distinct threshold in memory. At 10⁶ trials per arm the streamed
#: bounds were within the seed-to-seed spread of the in-memory ones on a Gaussian, a
#: noisy max and a sparse vector (``benchmarks/dpsniper_compare.py``), in 72–80% of the
#: CPU and one unit's memory.
LEARNED_EXACT_LIMIT = 1 << 18
#: Unary encoding's report is k bits; a learned score holds them all, so k is capped.
LEARNED_UNARY_MAX_K = 64


class MechanismClaim(ClaimSection):
    """``[mechanism.claim]``: ε (with δ), μ, or ρ (zCDP) claimed by the mechanism.

    A ρ-zCDP claim is held as (ρ + 2√(ρ ln(1/δ)), δ)-DP at the audit's δ (Bun, Steinke
    2016, Prop. 1.3; :func:`dpaudit.theory.zcdp_to_dp`); it implies no μ-GDP bound.
    """

    rho: Positive | None = None

    @model_validator(mode="after")
    def _something_claimed(self) -> MechanismClaim:
        if self.epsilon is None and self.mu is None and self.rho is None:
            raise ValueError("a claim needs 'epsilon' (with 'delta'), 'mu' or 'rho'")
        if self.rho is not None and (self.epsilon is not None or self.mu is not None):
            raise ValueError("a claim gives 'rho' (zCDP) alone, or 'epsilon'/'mu' without it")
        return self


def _pair_length(pair: Vectors | None) -> int | None:
    if pair is None:
        return None
    if len(pair[0]) == 0 or len(pair[0]) != len(pair[1]):
        raise ValueError("two vectors of the same non-zero length are needed")
    return len(pair[0])


#: ``score = "floating"``: the floating-point attack on a textbook Laplace sampler
#: (:mod:`dpaudit.mechanisms.floating`), configured by ``[mechanism.floating]``.
FLOATING = "floating"
#: The sampler forms whose reachable doubles :mod:`dpaudit.mechanisms.floating` computes.
FLOATING_SAMPLERS = ("exp-sign", "numpy-laplace")


class SearchSection(Table):
    """``[mechanism.search]``: search for the worst neighbouring pair around ``data``.

    ``neighbours = "queries"``: ``data`` is a vector of query answers; candidates are the
    StatDP patterns (Ding et al., CCS 2018, §5) at the stated ``sensitivity`` and
    ``random_pairs`` random perturbations within it (``norm``: ``linf`` moves every
    coordinate by at most Δ, as StatDP; ``l1``/``l2`` scale the move to norm Δ).
    ``neighbours = "records"``: ``data`` is a list of records; candidates replace one
    record by one of ``values``, remove one, or add one of ``values`` (``relation``).
    Each candidate is screened on ``screen_trials`` trials per arm, and the
    ``audit_pairs`` most promising are audited on ``trials`` FRESH trials per arm
    (:mod:`dpaudit.mechanisms.search`).
    """

    data: Annotated[list[float], Field(min_length=1, max_length=10_000)]
    neighbours: Literal["queries", "records"]
    values: Annotated[list[float], Field(min_length=1, max_length=1_000)] | None = None
    relation: Literal["replace-one", "add-remove", "both"] | None = None
    norm: Literal["linf", "l1", "l2"] | None = None
    random_pairs: Annotated[int, Field(ge=0, le=1_000)] | None = None
    max_candidates: Annotated[int, Field(ge=1, le=10_000)] = 64
    screen_trials: Annotated[int, Field(ge=20, le=1_000_000)] = 2_000
    audit_pairs: Annotated[int, Field(ge=1, le=100)] = 3

    @model_validator(mode="after")
    def _keys_fit_the_neighbours(self) -> SearchSection:
        if not all(math.isfinite(v) for v in [*self.data, *(self.values or [])]):
            raise ValueError("'data' and 'values' of [mechanism.search] must be finite")
        only = {"records": ("values", "relation"), "queries": ("norm", "random_pairs")}
        for kind, keys in only.items():
            for key in keys:
                if getattr(self, key) is not None and self.neighbours != kind:
                    raise ValueError(
                        f"[mechanism.search] '{key}' is used with neighbours = {kind!r}; got "
                        f"neighbours = {self.neighbours!r}"
                    )
        if self.neighbours == "records" and self.values is None:
            raise ValueError(
                "[mechanism.search] neighbours = 'records' needs 'values', the values a "
                "replaced or added record may take (e.g. values = [0, 1])"
            )
        return self


class FloatingSection(Table):
    """``[mechanism.floating]``: which textbook Laplace sampler the mechanism runs, with
    which scale, on which two exact query values (``values`` = [f(D), f(D')]); the
    outputs are scored by the floating-point attack (:mod:`dpaudit.mechanisms.floating`).
    """

    sampler: Literal["exp-sign", "numpy-laplace"]
    scale: Positive
    values: tuple[float, float]


class MechanismSection(Table):
    """``[mechanism]``: a DP mechanism audited on two neighbouring inputs.

    ``name`` is a built-in (``laplace``, ``gaussian``, ``randomized-response``, ``k-rr``,
    ``unary-encoding``, ``local-laplace``, ``local-gaussian``) or a user callable
    ``"pkg.module:function"``. The noise the mechanism RUNS with is given by ``epsilon``
    or ``scale`` (Laplace), ``sigma``, ``mu`` or ``epsilon`` with ``delta`` and
    ``calibration`` (Gaussian), ``p`` (randomized response), ``k`` and ``epsilon`` (k-RR,
    unary encoding with ``variant``); ``[mechanism.claim]`` is what it CLAIMS (defaults to
    what it runs with).

    ``query`` = [f(D), f(D')] runs Laplace/Gaussian in d dimensions (``sensitivity`` is
    then the ℓ1 resp. ℓ2 sensitivity). The local randomisers perturb one record: ``k-rr``
    and ``unary-encoding`` a category (``values`` = [D's, D''s], default [0, 1]),
    ``local-laplace``/``local-gaussian`` a vector in ``domain`` = [low, high] per
    coordinate (``records`` = [x, x'], default [[low], [high]]), whose sensitivity is the
    domain's ℓ1 resp. ℓ2 diameter. These are scored by the exact log-likelihood ratio.

    ``score = "learned"`` (any mechanism but unary encoding with k > 64) scores the raw
    outputs by a classifier fitted on a share ``fit_fraction`` of the trials (default ⅓,
    at most :data:`FIT_TRIALS_LIMIT` per arm) chosen before any output is read;
    ``learner`` picks it (``auto``, ``logistic``, ``boosting``, ``knn``, ``counts``).
    The bound is counted on the other trials only.

    ``[mechanism.search]`` (:class:`SearchSection`) searches for the worst pair around its
    ``data`` instead of auditing a given one; ``score = "floating"`` with
    ``[mechanism.floating]`` (:class:`FloatingSection`) scores a textbook floating-point
    Laplace sampler's outputs by which input could have produced them
    (``docs/bug-hunting.md``).

    ``claim_curve`` (default true) also holds the scores against the exact trade-off curve
    the claim declares, where one is known (a one-dimensional Laplace claimed (ε, δ)-DP; a
    Gaussian claimed (ε, δ > 0)-DP or ρ-zCDP): one more share of the verdict's budget
    (:func:`dpaudit.mechanisms.summary.declared_curve`). ``false`` leaves it out.
    """

    name: Annotated[str, NamesCode(builtins=BUILTIN_MECHANISMS)]
    sensitivity: Positive = 1.0
    epsilon: Epsilon | None = None
    delta: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    calibration: Literal["classic", "exact"] | None = None
    scale: Positive | None = None
    sigma: Positive | None = None
    mu: Mu | None = None
    p: Annotated[float, Field(ge=0.5, le=1.0)] | None = None
    k: Annotated[int, Field(ge=2, le=100_000)] | None = None
    values: tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]] | None = None
    variant: Literal["optimised", "symmetric"] | None = None
    query: Vectors | None = None
    domain: tuple[float, float] | None = None
    records: Vectors | None = None
    data: tuple[list[float], list[float]] | None = None
    log_density: Annotated[str, NamesCode()] | None = None
    score: Annotated[str, NamesCode(builtins=(LEARNED, FLOATING))] | None = None
    learner: Literal["auto", "logistic", "boosting", "knn", "counts"] | None = None
    fit_fraction: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    trials: Annotated[int, Field(ge=2, le=100_000_000)] = 100_000
    threshold: Literal["split", "bonferroni"] = "split"
    claim_curve: bool = True
    claim: MechanismClaim | None = None
    search: SearchSection | None = None
    floating: FloatingSection | None = None

    @model_validator(mode="after")
    def _parameters_fit_the_mechanism(self) -> MechanismSection:
        name = self.name
        if name not in BUILTIN_MECHANISMS and ":" not in name:
            raise ValueError(
                f"unknown mechanism {name!r}; allowed: {', '.join(BUILTIN_MECHANISMS)} or "
                "'pkg.module:function'"
            )
        self._only_where_used()
        if name in ("laplace", "local-laplace") and (self.epsilon is None) == (self.scale is None):
            raise ValueError(f"the {name} mechanism needs exactly one of 'epsilon' or 'scale'")
        if name in GAUSSIAN:
            self._gaussian_noise()
        if name == "randomized-response" and self.p is None:
            raise ValueError("randomized-response needs 'p', the probability of a truthful answer")
        if name in CATEGORICAL:
            if self.k is None or self.epsilon is None:
                raise ValueError(f"{name} needs 'k' (the number of categories) and 'epsilon'")
            v = self.values if self.values is not None else (0, 1)
            if v[0] == v[1] or max(v) >= self.k:
                raise ValueError(
                    f"'values' must be two different categories in 0..{self.k - 1}; got {list(v)}"
                )
        if name in LOCAL:
            self._local_records()
        try:
            _pair_length(self.query)
        except ValueError as exc:
            raise ValueError(f"'query' (f(D), f(D')): {exc}") from None
        if ":" in name and self.claim is None:
            raise ValueError(f"a user mechanism ({name!r}) needs a [mechanism.claim] table")
        self._scorer()
        self._search_and_floating()
        return self

    def _scorer(self) -> None:
        """``log_density`` and ``score``: a user's scorer, or ``score = "learned"``."""
        learned = self.score == LEARNED
        auto = self.score in (None, AUTO)
        if self.score == FLOATING:
            return  # checked with its table by _search_and_floating
        if not auto and not learned and ":" not in self.score:  # type: ignore[operator]
            raise ValueError(
                f"'score' is {AUTO!r} (the default), {LEARNED!r} (a classifier fitted on some "
                f"of the trials), {FLOATING!r} or 'pkg.module:function'; got {self.score!r}"
            )
        for key in ("log_density", "score"):
            if key == "score" and (learned or auto):
                continue  # a learned score needs no user code: any mechanism may have one
            if getattr(self, key) is not None and ":" not in self.name:
                raise ValueError(
                    f"'{key}' scores a user mechanism's outputs; {self.name!r} is built in and "
                    "scores its own"
                )
        if self.log_density is not None and not auto:
            raise ValueError("give 'log_density' or 'score' for a user mechanism, not both")
        # score = "auto" learns a score for a user mechanism without a log density
        learns = learned or (auto and ":" in self.name and self.log_density is None)
        for key in ("learner", "fit_fraction"):
            if getattr(self, key) is not None and not learns:
                raise ValueError(
                    f"'{key}' configures a learned score; set score = {LEARNED!r} or remove '{key}'"
                )
        if learned and self.name == "unary-encoding" and (self.k or 0) > LEARNED_UNARY_MAX_K:
            raise ValueError(
                f"score = {LEARNED!r} learns from unary encoding's whole k-bit report, at most "
                f"k = {LEARNED_UNARY_MAX_K}; got k = {self.k} (its built-in score is the exact "
                "likelihood ratio: remove 'score')"
            )

    def _search_and_floating(self) -> None:
        """``[mechanism.search]`` and ``score = "floating"`` (with ``[mechanism.floating]``)
        audit user mechanisms; the search generates the inputs, so ``data`` is not given."""
        user = ":" in self.name
        if self.search is not None:
            if not user:
                raise ValueError(
                    f"[mechanism.search] searches the inputs of a user mechanism "
                    f"('pkg.module:function'); {self.name!r} is built in"
                )
            if self.data is not None:
                raise ValueError(
                    "[mechanism.search] generates the pairs from its own 'data'; remove "
                    "[mechanism] 'data'"
                )
            if self.score == FLOATING:
                raise ValueError(
                    "score = 'floating' tests two given values; it cannot be combined with "
                    "[mechanism.search]"
                )
            if self.trials > EXACT_TRIALS_LIMIT:
                raise ValueError(
                    f"[mechanism.search] audits each chosen pair in memory: trials must be at "
                    f"most {EXACT_TRIALS_LIMIT:,} per arm; got {self.trials:,}"
                )
        floating = self.score == FLOATING
        if floating != (self.floating is not None):
            raise ValueError(
                "score = 'floating' and the [mechanism.floating] table (sampler, scale, values) "
                "go together: give both or neither"
            )
        if floating and not user:
            raise ValueError(
                f"score = 'floating' scores a user mechanism's outputs; {self.name!r} is built in"
            )
        for key in ("learner", "fit_fraction", "log_density"):
            if floating and getattr(self, key) is not None:
                raise ValueError(f"'{key}' does not apply to score = 'floating'; remove it")

    def _only_where_used(self) -> None:
        """Keys of one family of mechanisms are errors elsewhere (never silently ignored)."""
        used = {
            "k": CATEGORICAL,
            "values": CATEGORICAL,
            "variant": ("unary-encoding",),
            "query": ("laplace", "gaussian"),
            "domain": LOCAL,
            "records": LOCAL,
            "delta": GAUSSIAN,
            "calibration": GAUSSIAN,
        }
        if "sensitivity" in self.model_fields_set and self.name in (*CATEGORICAL, *LOCAL):
            raise ValueError(
                f"'sensitivity' is not a parameter of {self.name!r}: a local randomiser's "
                "neighbours are any two records ('domain' sets the sensitivity)"
            )
        for key, names in used.items():
            if getattr(self, key) is not None and self.name not in names:
                raise ValueError(
                    f"'{key}' is not a parameter of {self.name!r}; it is used by {', '.join(names)}"
                )

    def _gaussian_noise(self) -> None:
        given = [k for k in ("sigma", "mu", "epsilon") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"the {self.name} mechanism needs exactly one of 'sigma', 'mu' or 'epsilon' "
                f"(with 'delta'); got {', '.join(given) or 'none'}"
            )
        if self.epsilon is not None and self.delta is None:
            raise ValueError(f"the {self.name} mechanism calibrated to 'epsilon' needs 'delta'")
        if self.epsilon is None and (self.delta is not None or self.calibration is not None):
            raise ValueError("'delta' and 'calibration' calibrate σ to 'epsilon'; give 'epsilon'")
        if self.calibration == "classic" and self.epsilon is not None and self.epsilon >= 1.0:
            raise ValueError(
                "calibration = 'classic' (σ = Δ√(2 ln(1.25/δ))/ε) is only valid for epsilon < 1 "
                f"(Dwork, Roth 2014, Thm. A.1); got epsilon = {self.epsilon}; use "
                "calibration = 'exact' (the analytic Gaussian mechanism of Balle, Wang 2018)"
            )

    def _local_records(self) -> None:
        if self.domain is None:
            raise ValueError(f"{self.name} needs 'domain' = [low, high], the range of a record")
        low, high = self.domain
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"'domain' must be finite with low < high; got {list(self.domain)}")
        if self.records is not None:
            try:
                _pair_length(self.records)
            except ValueError as exc:
                raise ValueError(f"'records' (x, x'): {exc}") from None
            flat = [*self.records[0], *self.records[1]]
            if any(not (low <= x <= high) for x in flat):
                raise ValueError(
                    f"every coordinate of 'records' must lie in the domain {[low, high]}"
                )
