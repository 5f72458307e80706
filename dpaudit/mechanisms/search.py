"""Neighbour search: find the pair of inputs, and the output event, that break a claim.

An audit of a mechanism on ONE pair (D, D') proves nothing about the pairs it did not
try, and the worst pair is rarely the obvious one (a sparse-vector bug shows only when
some queries go up while others go down). ``[mechanism.search]`` generates candidate
pairs around the given ``data``, screens them, and audits the most promising on fresh
trials; the counterexample it reports is a pair and an event a developer can replay:
``pair D=[...], D'=[...], event score ≥ t: ε ≥ x``.

Candidates (:func:`query_candidates`, :func:`record_candidates`):

- vectors of query answers: the patterns of StatDP (Ding, Wang, Wang, Zhang, Kifer,
  "Detecting violations of differential privacy", CCS 2018, §5): one above, one below,
  one above rest below, one below rest above, half and half, all above, all below, each
  coordinate moved by the stated sensitivity Δ (ℓ∞ neighbours, as StatDP; with ``norm =
  "l1"``/``"l2"`` each pattern is scaled to norm Δ), and random moves within Δ;
- lists of records: replace one record by another value, remove one, add one.

**How the search keeps the verdict's confidence level.** Three sets of trials, each
drawn from its own random stream of the audit seed, never shared:

1. *Screening* (:func:`screen`): every candidate, in both directions, runs on
   ``screen_trials`` trials per arm; its screening statistic (an ε lower bound at the
   audit's confidence, then a smoothed plug-in estimate to break ties) ranks it. These
   trials decide only WHICH pairs are audited and in which direction; they never enter a
   bound, so screening spends nothing.
2. *Auditing* (:func:`audit_pair`): each of the k chosen pairs runs on ``trials`` FRESH
   trials per arm, independent of the screening given the choice. Its bound is the
   ordinary one (a learned score fitted on a third, the threshold chosen on another part,
   the count on the rest; or the mechanism's score with ``split``/``bonferroni``), so it
   holds at its level conditionally on the pair chosen, whatever the screening did.
3. *The budget*: the k audited pairs are k comparisons (2k with a μ claim), each at a
   Bonferroni share of the verdict's one budget: the kind announces them
   (:func:`audited_pairs`) and the audit's ``VerdictBudget`` gives each the level
   1 − (1 − c)/K, K counting every comparison of the verdict. A union bound over the k
   pairs then gives the verdict's level c. The number of candidates screened costs
   nothing; only k does.

The Python API :func:`search_audit` runs the same steps on a callable (used by the bug
zoo in ``benchmarks/``); the kind runs them on a ``[mechanism]`` table
(:func:`search_plan`, :func:`search_unit`, :func:`search_summary`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dpaudit.bounds import (
    EpsilonBound,
    MuBound,
    ThresholdStrategy,
    epsilon_and_mu_lower_bounds,
    epsilon_inequalities,
    epsilon_lower_bound,
    learned_lower_bounds,
)
from dpaudit.errors import DpauditError, InsufficientTrialsError, check_choice
from dpaudit.kinds.base import (
    KindSummary,
    Outputs,
    RunContext,
    UnitPlan,
    claim_left_out,
    unit_index,
)
from dpaudit.mechanisms import learned as learned_scores
from dpaudit.mechanisms.noise import Mechanism, user_mechanism
from dpaudit.mechanisms.schema import (
    FIT_FRACTION,
    FIT_TRIALS_LIMIT,
    LEARNED,
    MechanismSection,
    SearchSection,
)
from dpaudit.mechanisms.units import build_mechanism, in_verdict, upper_bound
from dpaudit.plugins import plugin_digest
from dpaudit.results import paired_comparisons, score_summary
from dpaudit.sections import Table
from dpaudit.tradeoff import TradeoffCurve

#: The StatDP patterns (Ding et al. 2018, §5), as moves of each query answer in units of Δ.
PATTERNS = (
    "one-above",
    "one-below",
    "one-above-rest-below",
    "one-below-rest-above",
    "half-half",
    "all-above",
    "all-below",
)
#: Random moves within Δ for query vectors, unless ``random_pairs`` says.
RANDOM_PAIRS = 8
#: Random streams of the audit seed: the screening trials and the audit trials are drawn
#: from different streams, so the audited trials are fresh (never the screening's).
_STREAM_CANDIDATES = 2
_STREAM_SCREEN = 3
_STREAM_AUDIT = 4
#: Distinct outputs, at most, listed by name in an event (else "score ≥ t").
_EVENT_OUTPUTS = 6


# ----------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidate:
    """A neighbouring pair: D, D' and how it was made.

    Attributes:
        label: The pattern (``one-above``, ``random-3``, ``replace-2=0``, ``remove-1``,
            ``add=1``), with ``reversed`` appended when D and D' were swapped.
        d: The input D.
        d_prime: The input D'.
    """

    label: str
    d: tuple[float, ...]
    d_prime: tuple[float, ...]

    def reversed(self) -> Candidate:
        """The same pair the other way round (D' becomes D)."""
        label = self.label.removesuffix(" reversed")
        if label == self.label:
            label = f"{self.label} reversed"
        return Candidate(label, self.d_prime, self.d)

    def describe(self) -> str:
        """``D=[...], D'=[...]`` as a developer would type it."""
        return f"D={_vector(self.d)}, D'={_vector(self.d_prime)}"

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "d": list(self.d), "d_prime": list(self.d_prime)}


def _vector(v: Sequence[float]) -> str:
    return "[" + ", ".join(f"{x:g}" for x in v) + "]"


def _pattern(name: str, d: int) -> np.ndarray:
    """The move of each coordinate, in units of Δ, of a StatDP pattern."""
    move = np.zeros(d)
    if name == "one-above":
        move[0] = 1.0
    elif name == "one-below":
        move[0] = -1.0
    elif name == "one-above-rest-below":
        move[:] = -1.0
        move[0] = 1.0
    elif name == "one-below-rest-above":
        move[:] = 1.0
        move[0] = -1.0
    elif name == "half-half":
        move[: d // 2] = -1.0
        move[d // 2 :] = 1.0
    elif name == "all-above":
        move[:] = 1.0
    else:  # all-below
        move[:] = -1.0
    return move


def _scaled(move: np.ndarray, sensitivity: float, norm: str) -> np.ndarray:
    """A move scaled so that its norm is Δ (ℓ∞: every coordinate at most Δ)."""
    size = {
        "linf": float(np.max(np.abs(move))),
        "l1": float(np.sum(np.abs(move))),
        "l2": float(np.sqrt(np.sum(move**2))),
    }[norm]
    return move * (sensitivity / size)


def query_candidates(
    data: Sequence[float],
    *,
    sensitivity: float,
    norm: str = "linf",
    random_pairs: int = RANDOM_PAIRS,
    seed: int = 0,
) -> tuple[Candidate, ...]:
    """Pairs (D, D + move) for a vector D of query answers: the StatDP patterns, then
    ``random_pairs`` random moves (uniform directions in the ℓ∞ cube, scaled to norm Δ).

    Patterns that coincide for short vectors (``one-above`` and ``all-above`` for d = 1)
    are listed once.

    References:
        Ding, Wang, Wang, Zhang, Kifer, "Detecting violations of differential privacy",
        CCS 2018, §5 (the patterns of the query answers).
    """
    check_choice("norm", norm, ("linf", "l1", "l2"))
    base = np.asarray(data, dtype=float)
    if base.ndim != 1 or base.size == 0 or not np.all(np.isfinite(base)):
        raise DpauditError("The 'data' parameter must be a non-empty vector of finite numbers.")
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise DpauditError(f"The sensitivity must be positive and finite. Got {sensitivity}.")
    out: list[Candidate] = []
    seen: set[tuple[float, ...]] = set()

    def add(label: str, move: np.ndarray) -> None:
        d_prime = tuple(float(v) for v in base + _scaled(move, sensitivity, norm))
        if d_prime not in seen:
            seen.add(d_prime)
            out.append(Candidate(label, tuple(float(v) for v in base), d_prime))

    for name in PATTERNS:
        add(name, _pattern(name, base.size))
    rng = np.random.default_rng([seed, _STREAM_CANDIDATES])
    for i in range(random_pairs):
        move = rng.uniform(-1.0, 1.0, base.size)
        if np.any(move != 0):
            add(f"random-{i}", move)
    return tuple(out)


def record_candidates(
    data: Sequence[float],
    *,
    values: Sequence[float],
    relation: str = "both",
    max_candidates: int = 64,
    seed: int = 0,
) -> tuple[Candidate, ...]:
    """Pairs (D, D') for a list D of records: replace record i by a value of ``values``,
    remove record i, or append a value (``relation``: ``replace-one``, ``add-remove``,
    ``both``). Beyond ``max_candidates``, a seeded uniform subset is kept (drawn from the
    configuration alone, before any trial)."""
    check_choice("relation", relation, ("replace-one", "add-remove", "both"))
    records = [float(v) for v in data]
    options = sorted({float(v) for v in values})
    out: list[Candidate] = []
    d = tuple(records)
    if relation in ("replace-one", "both"):
        for i, old in enumerate(records):
            for v in options:
                if v != old:
                    out.append(
                        Candidate(f"replace-{i}={v:g}", d, (*records[:i], v, *records[i + 1 :]))
                    )
    if relation in ("add-remove", "both"):
        if len(records) > 1:
            for i in range(len(records)):
                out.append(Candidate(f"remove-{i}", d, (*records[:i], *records[i + 1 :])))
        for v in options:
            out.append(Candidate(f"add={v:g}", d, (*records, v)))
    if not out:
        raise DpauditError(
            "No neighbouring pair can be made from these records and values: give 'values' "
            "that differ from the records, or relation = 'add-remove'."
        )
    if len(out) > max_candidates:
        rng = np.random.default_rng([seed, _STREAM_CANDIDATES])
        keep = np.sort(rng.choice(len(out), size=max_candidates, replace=False))
        out = [out[i] for i in keep]
    return tuple(out)


def candidates_of(search: SearchSection, *, sensitivity: float, seed: int) -> tuple[Candidate, ...]:
    """The candidate pairs of a ``[mechanism.search]`` table (a function of the table and
    the seed alone)."""
    if search.neighbours == "queries":
        found = query_candidates(
            search.data,
            sensitivity=sensitivity,
            norm=search.norm or "linf",
            random_pairs=RANDOM_PAIRS if search.random_pairs is None else search.random_pairs,
            seed=seed,
        )
        return found[: search.max_candidates]
    assert search.values is not None  # the schema requires values for records
    return record_candidates(
        search.data,
        values=search.values,
        relation=search.relation or "both",
        max_candidates=search.max_candidates,
        seed=seed,
    )


# ------------------------------------------------------------------------ screening

#: Makes the mechanism that runs on one candidate pair (``run`` gives scores, ``outputs``
#: raw outputs).
Factory = Callable[[Candidate], Mechanism]


@dataclass(frozen=True)
class Screened:
    """One candidate's screening: its pair (oriented as it will be audited) and the
    statistics that ranked it (never part of any bound).

    Attributes:
        candidate: The pair, in the direction that screened better.
        epsilon: The ε lower bound on the screening trials (ranks first).
        estimate: A smoothed plug-in ε estimate (breaks ties, e.g. when every bound is 0).
    """

    candidate: Candidate
    epsilon: float
    estimate: float

    def to_dict(self) -> dict[str, Any]:
        return {**self.candidate.to_dict(), "epsilon": self.epsilon, "estimate": self.estimate}


@dataclass(frozen=True)
class Screening:
    """Every candidate screened, best first, and the k pairs chosen for the audit."""

    screened: tuple[Screened, ...]
    chosen: tuple[Candidate, ...]
    screen_trials: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidates": len(self.screened),
            "screen_trials": self.screen_trials,
            "audited": [c.to_dict() for c in self.chosen],
            "ranking": [s.to_dict() for s in self.screened],
            "budget": (
                "screening trials choose the pairs and their direction only and enter no "
                "bound; each audited pair is one comparison on fresh trials at a Bonferroni "
                "share of the verdict's budget"
            ),
        }


def plug_in_epsilon(neg: np.ndarray, pos: np.ndarray, *, delta: float) -> float:
    """max over thresholds of the ε that the smoothed rates (k + ½)/(n + 1) give: a
    ranking statistic only (no confidence level)."""
    curve = TradeoffCurve.from_scores(neg, pos)
    n0, n1 = curve.negatives, curve.positives
    fpr = (np.asarray(curve.fpr) * n0 + 0.5) / (n0 + 1)
    fnr = (np.asarray(curve.fnr) * n1 + 0.5) / (n1 + 1)
    one, two = epsilon_inequalities(fpr, fnr, delta=delta)
    return float(max(np.max(one), np.max(two), 0.0))


def _screen_statistics(
    neg: np.ndarray, pos: np.ndarray, *, delta: float, confidence_level: float, seed: int
) -> tuple[float, float]:
    try:
        bound = epsilon_lower_bound(
            neg, pos, delta=delta, confidence_level=confidence_level, seed=seed
        ).value
    except InsufficientTrialsError:
        bound = 0.0
    return bound, plug_in_epsilon(neg, pos, delta=delta)


def screen(
    make: Factory,
    candidates: Sequence[Candidate],
    *,
    screen_trials: int,
    audit_pairs: int,
    learned: bool,
    learner: str = "auto",
    delta: float = 0.0,
    confidence_level: float = 0.95,
    seed: int = 0,
) -> Screening:
    """Run every candidate on ``screen_trials`` trials per arm and choose the best
    ``audit_pairs``.

    With a learned score, a classifier is fitted on half of each candidate's screening
    trials and scores the other half (its direction is learned); with the mechanism's
    own score both directions of the pair are screened (swapping D and D' changes which
    events the bound tests) and the better one is kept. Screening trials come from a
    stream of their own (candidate i: ``[seed, 3, i]``) and never enter a bound.
    """
    if not candidates:
        raise DpauditError("The search has no candidate pairs to screen.")
    rows: list[Screened] = []
    for i, cand in enumerate(candidates):
        rng = np.random.default_rng([seed, _STREAM_SCREEN, i])
        mech = make(cand)

        def stats(neg: np.ndarray, pos: np.ndarray) -> tuple[float, float]:
            return _screen_statistics(
                neg, pos, delta=delta, confidence_level=confidence_level, seed=seed
            )

        if learned:
            neg = mech.outputs(0, rng=rng, size=screen_trials)
            pos = mech.outputs(1, rng=rng, size=screen_trials)
            if neg.shape[1] != pos.shape[1]:
                raise DpauditError(
                    f"The mechanism's outputs have {neg.shape[1]} coordinates on D and "
                    f"{pos.shape[1]} on D' for the pair {cand.describe()} ({cand.label}): their "
                    "length alone tells the inputs apart. Pad the outputs to a fixed length, "
                    "or search with relation = 'replace-one'."
                )
            half = screen_trials // 2
            score = learned_scores.fit_score(neg[:half], pos[:half], learner=learner, seed=seed)
            eps, est = stats(score(neg[half:]), score(pos[half:]))
            rows.append(Screened(cand, eps, est))
            continue
        neg = mech.run(0, rng=rng, size=screen_trials)
        pos = mech.run(1, rng=rng, size=screen_trials)
        forward = Screened(cand, *stats(neg, pos))
        backward = Screened(cand.reversed(), *stats(pos, neg))
        rows.append(max(forward, backward, key=_rank))
    # stable: equal statistics keep the candidates' order (patterns before random moves)
    ranked = tuple(sorted(rows, key=_rank, reverse=True))
    chosen = tuple(s.candidate for s in ranked[:audit_pairs])
    return Screening(ranked, chosen, screen_trials)


def _rank(s: Screened) -> tuple[float, float]:
    return (s.epsilon, s.estimate)


# ------------------------------------------------------------------------- auditing


@dataclass(frozen=True)
class PairAudit:
    """One chosen pair audited on fresh trials.

    Attributes:
        candidate: The pair (D, D').
        epsilon: The ε lower bound (at the pair's share of the budget).
        mu: The μ lower bound (same trials and level).
        event: The output event of the bound, in words (``score ≥ 1.2``, ``output ∈
            {[1]}``, ...): the event whose probabilities under D and D' break the claim.
        negative_scores: Scores of the counted-or-selected trials on D (the report).
        positive_scores: Scores on D'.
        learned: The learned score's description, if one was fitted.
    """

    candidate: Candidate
    epsilon: EpsilonBound
    mu: MuBound
    event: str
    negative_scores: np.ndarray = field(repr=False)
    positive_scores: np.ndarray = field(repr=False)
    learned: dict[str, Any] | None = field(default=None, repr=False)

    def counterexample(self) -> str:
        """``pair D=[...], D'=[...], event ...: ε ≥ x``: what a developer replays."""
        return f"pair {self.candidate.describe()}, event {self.event}: ε ≥ {self.epsilon.value:.4g}"


def _direction(bound: EpsilonBound) -> str:
    """Which inequality of (ε, δ)-DP the bound came from: ``above`` when the event
    ``s ≥ t`` is too likely under D' (ln((1 − δ − FNR)/FPR)), ``below`` when ``s < t`` is
    too likely under D (ln((1 − δ − FPR)/FNR))."""
    if bound.fpr is None or bound.fnr is None:
        return "above"
    one, two = epsilon_inequalities(bound.fpr.high, bound.fnr.high, delta=bound.delta)
    return "above" if one >= two else "below"


def _event(
    bound: EpsilonBound,
    name: str,
    raw: tuple[np.ndarray, np.ndarray] | None,
    scores: tuple[np.ndarray, np.ndarray],
) -> str:
    """The bound's event in words; for few distinct raw outputs, the outputs it holds."""
    t = bound.threshold_value
    if t is None:
        return f"{name} (no threshold)"
    above = _direction(bound) == "above"
    # "above": P[s ≥ t | D'] > e^ε·P[s ≥ t | D] + δ; "below": P[s < t | D] > e^ε·P[s < t | D'] + δ
    where = "" if above else " (likelier under D)"
    text = f"{name} ≥ {t:.6g}" if above else f"{name} < {t:.6g}"
    if raw is not None:
        rows = np.concatenate(raw)
        s = np.concatenate(scores)
        inside = rows[(s >= t) if above else (s < t)]
        distinct = np.unique(inside, axis=0) if inside.size else inside
        if 0 < len(distinct) <= _EVENT_OUTPUTS:
            text = "output ∈ {" + ", ".join(_vector(r) for r in distinct) + "}"
    return text + where


def audit_pair(
    candidate: Candidate,
    negative: np.ndarray,
    positive: np.ndarray,
    *,
    learned: bool,
    score_name: str = "score",
    learner: str = "auto",
    fit_fraction: float = FIT_FRACTION,
    threshold: ThresholdStrategy = "split",
    delta: float = 0.0,
    level: float = 0.95,
    seed: int = 0,
) -> PairAudit:
    """Bound one chosen pair from its FRESH trials (never the screening's).

    Args:
        candidate: The pair.
        negative: Trials on D: raw outputs ``(n, d)`` if ``learned``, else scores.
        positive: Trials on D'.
        learned: Fit a score on a share ``fit_fraction`` of these trials
            (:func:`dpaudit.bounds.learned_lower_bounds`), else use the scores as given.
        score_name: What the score is called in the event (``output``, ``score``).
        learner, fit_fraction: The learned score's learner and fitting share.
        threshold: ``split`` or ``bonferroni`` (as every mechanism audit).
        delta: δ of the ε bound.
        level: The pair's confidence level: its Bonferroni share of the verdict's budget.
        seed: Seeds the fitting cut and the split.
    """
    if not learned:
        eps_lb, mu_lb = epsilon_and_mu_lower_bounds(
            negative, positive, delta=delta, confidence_level=level, threshold=threshold, seed=seed
        )
        event = _event(eps_lb, score_name, None, (negative, positive))
        return PairAudit(candidate, eps_lb, mu_lb, event, negative, positive)
    fitted: list[learned_scores.LearnedScore] = []

    def fit(fit_neg: np.ndarray, fit_pos: np.ndarray) -> learned_scores.LearnedScore:
        fitted.append(learned_scores.fit_score(fit_neg, fit_pos, learner=learner, seed=seed))
        return fitted[-1]

    result = learned_lower_bounds(
        negative,
        positive,
        fit=fit,
        delta=delta,
        confidence_level=level,
        threshold=threshold,
        seed=seed,
        fit_fraction=fit_fraction,
        fit_limit=FIT_TRIALS_LIMIT,
    )
    (score,) = fitted
    raw = (np.asarray(negative, dtype=float), np.asarray(positive, dtype=float))
    raw = tuple(r.reshape(r.shape[0], -1) for r in raw)  # type: ignore[assignment]
    event = _event(result.epsilon, "learned score", raw, (score(raw[0]), score(raw[1])))
    return PairAudit(
        candidate,
        result.epsilon,
        result.mu,
        event,
        result.negative_scores,
        result.positive_scores,
        score.describe(),
    )


# ------------------------------------------------------------------- the Python API


@dataclass(frozen=True)
class SearchResult:
    """A search audit of a callable (:func:`search_audit`).

    Attributes:
        pairs: The audited pairs, in screening order, each with its bound.
        screening: Every candidate screened.
        claim_epsilon: The ε claimed.
        confidence_level: The verdict's level c; each pair is bounded at
            1 − (1 − c)/k (Bonferroni over the k audited pairs).
    """

    pairs: tuple[PairAudit, ...]
    screening: Screening = field(repr=False)
    claim_epsilon: float
    confidence_level: float

    @property
    def worst(self) -> PairAudit:
        """The audited pair with the largest ε lower bound."""
        return max(self.pairs, key=lambda p: p.epsilon.value)

    @property
    def violation(self) -> bool:
        """Whether some audited pair's ε lower bound exceeds the claim (at level c)."""
        return self.worst.epsilon.value > self.claim_epsilon

    def counterexample(self) -> str | None:
        """The worst pair's counterexample when it breaks the claim, else None."""
        if not self.violation:
            return None
        return f"{self.worst.counterexample()} (claimed {self.claim_epsilon:g})"


def _callable_mechanism(fn: Callable[..., Any], name: str) -> Factory:
    def make(cand: Candidate) -> Mechanism:
        inputs = (np.asarray(cand.d), np.asarray(cand.d_prime))

        def draw(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
            return np.asarray(fn(inputs[neighbour], rng=rng, size=size), dtype=float)

        return Mechanism(name, draw, {"callable": name}, draw)

    return make


def search_audit(
    mechanism: Callable[..., Any],
    *,
    data: Sequence[float],
    neighbours: str,
    claim_epsilon: float,
    sensitivity: float = 1.0,
    values: Sequence[float] | None = None,
    relation: str = "both",
    norm: str = "linf",
    random_pairs: int = RANDOM_PAIRS,
    max_candidates: int = 64,
    screen_trials: int = 2_000,
    audit_pairs: int = 3,
    trials: int = 20_000,
    learned: bool = True,
    learner: str = "auto",
    threshold: ThresholdStrategy = "split",
    delta: float = 0.0,
    confidence_level: float = 0.95,
    seed: int = 0,
) -> SearchResult:
    """Search for the pair that breaks an ε claim of ``mechanism`` around ``data``.

    ``mechanism(data, *, rng, size)`` follows the user-mechanism protocol of
    :mod:`dpaudit.mechanisms.noise`. The arguments mirror ``[mechanism.search]``;
    ``learned=False`` scores scalar outputs by themselves (both directions screened).

    Returns:
        :class:`SearchResult`; ``.violation`` and ``.counterexample()`` give the verdict
        at ``confidence_level`` (Bonferroni over the audited pairs; screening spends
        nothing, see the module docstring).
    """
    check_choice("neighbours", neighbours, ("queries", "records"))
    name = getattr(mechanism, "__name__", "mechanism")
    if neighbours == "queries":
        cands = query_candidates(
            data, sensitivity=sensitivity, norm=norm, random_pairs=random_pairs, seed=seed
        )[:max_candidates]
    else:
        if values is None:
            raise DpauditError("neighbours='records' needs 'values' (e.g. values=[0, 1]).")
        cands = record_candidates(
            data, values=values, relation=relation, max_candidates=max_candidates, seed=seed
        )
    make = _callable_mechanism(mechanism, name)
    k = min(audit_pairs, len(cands))
    screening = screen(
        make,
        cands,
        screen_trials=screen_trials,
        audit_pairs=k,
        learned=learned,
        learner=learner,
        delta=delta,
        confidence_level=confidence_level,
        seed=seed,
    )
    # Bonferroni over the k audited pairs: each bound at 1 − (1 − c)/k.
    level = 1.0 - (1.0 - confidence_level) / k
    audits = []
    for j, cand in enumerate(screening.chosen):
        neg, pos = _fresh_trials(make(cand), learned, trials, [seed, _STREAM_AUDIT, j, 0])
        audits.append(
            audit_pair(
                cand,
                neg,
                pos,
                learned=learned,
                score_name="output",
                learner=learner,
                threshold=threshold,
                delta=delta,
                level=level,
                seed=seed,
            )
        )
    return SearchResult(tuple(audits), screening, claim_epsilon, confidence_level)


def _fresh_trials(
    mech: Mechanism, learned: bool, size: int, stream: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(stream)
    if learned:
        return mech.outputs(0, rng=rng, size=size), mech.outputs(1, rng=rng, size=size)
    return mech.run(0, rng=rng, size=size), mech.run(1, rng=rng, size=size)


# ------------------------------------------------------------------------ the kind


class SearchSpec(Table):
    """What a search unit depends on (picklable): the table, the chosen pairs."""

    section: MechanismSection
    seed: int
    unit_size: int
    base_dir: str
    pairs: list[tuple[list[float], list[float]]]


def _factory(section: MechanismSection, base_dir: str) -> Factory:
    score = None if section.score == LEARNED else section.score

    def make(cand: Candidate) -> Mechanism:
        return user_mechanism(
            section.name,
            data=(list(cand.d), list(cand.d_prime)),
            log_density=section.log_density,
            score=score,
            base_dir=base_dir,
        )

    return make


def audited_pairs(section: MechanismSection, seed: int) -> int:
    """k, the number of pairs audited (and comparisons per bound parameter): fixed by the
    table and the seed, before any trial."""
    assert section.search is not None
    cands = candidates_of(section.search, sensitivity=section.sensitivity, seed=seed)
    return min(section.search.audit_pairs, len(cands))


@functools.lru_cache(maxsize=8)
def _screening(section_json: str, seed: int, base_dir: str, delta: float, c: float) -> Screening:
    section = MechanismSection.model_validate_json(section_json)
    assert section.search is not None
    cands = candidates_of(section.search, sensitivity=section.sensitivity, seed=seed)
    return screen(
        _factory(section, base_dir),
        cands,
        screen_trials=section.search.screen_trials,
        audit_pairs=min(section.search.audit_pairs, len(cands)),
        learned=section.score == LEARNED,
        learner=section.learner or "auto",
        delta=delta,
        confidence_level=c,
        seed=seed,
    )


def screening_of(section: MechanismSection, context: RunContext) -> Screening:
    """The screening of a table (a pure function of the table, the seed, δ and c;
    computed once per process)."""
    return _screening(
        section.model_dump_json(),
        context.seed,
        str(context.base_dir),
        float(context.delta),
        float(context.confidence_level),
    )


def _chunks(section: MechanismSection, unit_size: int) -> int:
    return math.ceil(section.trials / unit_size)


def search_plan(section: MechanismSection, context: RunContext) -> UnitPlan:
    """Screen now (it decides which pairs the units run), then one set of units per
    chosen pair: ``mechanism-{j·chunks + c}`` is chunk c of pair j."""
    chosen = screening_of(section, context).chosen
    spec = SearchSpec(
        section=section,
        seed=context.seed,
        unit_size=context.unit_size,
        base_dir=str(context.base_dir),
        pairs=[(list(c.d), list(c.d_prime)) for c in chosen],
    )
    n = _chunks(section, context.unit_size) * len(chosen)
    return UnitPlan(
        fn=search_unit,
        spec=spec,
        units=tuple(f"mechanism-{i:05d}" for i in range(n)),
        key_data={
            # the claim reaches the units only through the pairs screening chose (in the key)
            **claim_left_out(
                spec.model_dump(
                    mode="json",
                    exclude={
                        "base_dir": True,
                        "section": {"learner", "fit_fraction", "claim_curve"},
                    },
                ),
                "section",
                "claim",
            ),
            "mechanism_file": plugin_digest(section.name, base_dir=context.base_dir),
            **{
                f"{key}_file": plugin_digest(getattr(section, key), base_dir=context.base_dir)
                for key in ("log_density", "score")
                if getattr(section, key) not in (None, LEARNED)
            },
        },
        description="searching neighbours",
    )


def search_unit(spec: SearchSpec, unit: str) -> dict[str, np.ndarray]:
    """Chunk c of pair j's fresh trials, from the audit stream ``[seed, 4, j, c]`` (never
    the screening's): raw outputs with a learned score, else scores."""
    chunks = _chunks(spec.section, spec.unit_size)
    index = unit_index(unit)
    j, c = divmod(index, chunks)
    if j >= len(spec.pairs):
        raise DpauditError(f"unit {unit!r} is beyond the {len(spec.pairs)} audited pairs")
    size = min(spec.unit_size, spec.section.trials - c * spec.unit_size)
    d, d_prime = spec.pairs[j]
    cand = Candidate(f"pair-{j}", tuple(d), tuple(d_prime))
    mech = _factory(spec.section, spec.base_dir)(cand)
    neg, pos = _fresh_trials(
        mech, spec.section.score == LEARNED, size, [spec.seed, _STREAM_AUDIT, j, c]
    )
    return {"negative": neg, "positive": pos}


def _pair_outputs(outputs: Outputs, j: int, chunks: int) -> tuple[np.ndarray, np.ndarray]:
    units = sorted((u for u in outputs if unit_index(u) // chunks == j), key=unit_index)
    neg = np.concatenate([np.asarray(outputs[u]["negative"]) for u in units])
    pos = np.concatenate([np.asarray(outputs[u]["positive"]) for u in units])
    return neg, pos


def search_summary(
    section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
) -> KindSummary:
    """Every audited pair's bounds, each comparison at ``level`` (its Bonferroni share)."""
    mech = build_mechanism(section, str(context.base_dir))
    upper = upper_bound(section, mech, context.delta)
    entered = in_verdict(upper)
    screening = screening_of(section, context)
    chunks = _chunks(section, context.unit_size)
    learned = section.score == LEARNED
    plain = section.score is None and section.log_density is None
    tests, comparisons, warnings = [], [], []
    for j, cand in enumerate(screening.chosen):
        neg, pos = _pair_outputs(outputs, j, chunks)
        pair = audit_pair(
            cand,
            neg,
            pos,
            learned=learned,
            score_name="output" if plain else "score",
            learner=section.learner or "auto",
            fit_fraction=section.fit_fraction or FIT_FRACTION,
            threshold=section.threshold,
            delta=upper.epsilon_delta,
            level=level,
            seed=context.seed,
        )
        label = f"search #{j + 1} ({cand.label}): {cand.describe()}, event {pair.event}"
        details = {"pair": cand.to_dict(), "event": pair.event, "rank": j + 1}
        more: dict[str, Any] = {"search": {**details, "screening": screening.to_dict()}}
        if pair.learned:
            more["learned"] = pair.learned
        eps_lb = _with(pair.epsilon, search=details)
        mu_lb = _with(pair.mu, search=details)
        summary = score_summary(
            "mechanism",
            label,
            pair.negative_scores,
            pair.positive_scores,
            confidence_level=context.confidence_level,
            hypotheses=("D", "D'"),
        ).with_details(**more)
        tests.append(summary)
        comparisons += paired_comparisons(
            label,
            eps_lb,
            mu_lb,
            upper_epsilon=upper.epsilon,
            upper_mu=upper.mu,
            source=upper.source,
            in_verdict=[p for p, entering in entered.items() if entering],
        )
        if entered["epsilon"] and pair.epsilon.value > upper.epsilon:
            warnings.append(
                f"counterexample: {pair.counterexample()} (claimed ε = {upper.epsilon:g} at "
                f"δ = {upper.epsilon_delta:g})"
            )
    data = json.dumps([c.to_dict() for c in screening.chosen])
    return KindSummary(
        tuple(tests),
        tuple(comparisons),
        (),
        tuple(warnings),
        hashlib.sha256(data.encode()).hexdigest(),
    )


def _with(bound: Any, **more: Any) -> Any:
    return replace(bound, details={**bound.details, **more})


__all__ = [
    "PATTERNS",
    "Candidate",
    "PairAudit",
    "Screened",
    "Screening",
    "SearchResult",
    "audit_pair",
    "audited_pairs",
    "candidates_of",
    "plug_in_epsilon",
    "query_candidates",
    "record_candidates",
    "screen",
    "search_audit",
    "search_plan",
    "search_summary",
    "search_unit",
]
