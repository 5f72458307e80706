"""The ``mechanism`` kind's summary: stored outputs on D and D' → ε and μ lower bounds held
against the mechanism's upper bound, the score test, and the identification of its
privacy profile.

Two paths, chosen by the number of trials per arm and of units alone (never by what the
units hold):

- **In memory** (up to :data:`EXACT_TRIALS_LIMIT` = 10⁶ trials per arm, or a single
  stored unit): every score is held, and the bounds search every distinct threshold
  (:func:`~dpaudit.bounds.epsilon_and_mu_lower_bounds`). Its peak memory grows with the
  trials: a whole ``dpaudit run`` peaks at about 0.27 GB at 10⁶ per arm (1.8 GB at 10⁷).
- **Streamed** (above it): units are read one at a time and only per-unit counts at a
  grid of candidate thresholds are kept and merged (:class:`~dpaudit.tradeoff.GridCounts`),
  so the peak memory is that of one unit plus the grid, whatever the number of trials: a
  whole run peaks at about 0.14 GB at 10⁸ per arm (plus, below 10⁸, the run's cache of
  stored units, at most 256 MB; ``benchmarks/mechanism_memory.py``).
  What keeps the bound rigorous is which units do what, fixed from the unit names before
  any unit is read (:func:`unit_design`): the grid and the threshold come from some
  units, the bound counts only the others (:func:`stream_counts`,
  :func:`streamed_bounds`). Every count-to-bound step is in :mod:`dpaudit.bounds`.

With ``score = "learned"`` the units hold raw outputs and a score is first fitted on
trials that are never counted (:func:`learned_bounds`): in memory (up to
:data:`LEARNED_EXACT_LIMIT` = 2¹⁸ trials per arm), a seeded share of each arm's trials
(:func:`dpaudit.bounds.learned_lower_bounds`); streamed (above it), the first units by
index (:func:`learned_streamed`). Either way the rest goes through the path above.

Where the claim declares an exact trade-off curve (:func:`declared_curve`: a 1-D Laplace
claimed (ε, δ)-DP, a Gaussian claimed (ε, δ > 0)-DP or ρ-zCDP), the same trials, or the
same streamed counts, are also held against it (:mod:`dpaudit.bounds.claim_curve`): one more
share of the verdict's budget, which the kind's ``comparisons`` counts through the same
:func:`declared_curve`.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dpaudit.accounting.upper_bounds import Claim, UpperBound
from dpaudit.bounds import (
    EpsilonBound,
    MuBound,
    OutputBlocks,
    Scorer,
    epsilon_and_mu_from_grid_bonferroni,
    epsilon_and_mu_from_grid_split,
    epsilon_and_mu_lower_bounds,
    learned_lower_bounds,
    score_with,
)
from dpaudit.bounds.bayesian import bayesian_estimate
from dpaudit.bounds.claim_curve import (
    ClaimCurve,
    Criterion,
    claim_curve_test,
    claim_curve_test_from_grid,
    declared_curve_bound,
    gdp_claim,
    gdp_curve_parameter,
    laplace_claim,
    laplace_curve_parameter,
    laplace_epsilon_of_claim,
)
from dpaudit.bounds.threshold_search import ScoreSketch
from dpaudit.errors import DpauditError
from dpaudit.kinds.base import KindSummary, Outputs, RunContext, unit_index
from dpaudit.mechanisms import learned as learned_scores
from dpaudit.mechanisms import sequential
from dpaudit.mechanisms.noise import Mechanism
from dpaudit.mechanisms.schema import (
    CATEGORICAL,
    EXACT_TRIALS_LIMIT,
    FIT_FRACTION,
    FIT_TRIALS_LIMIT,
    GAUSSIAN,
    LEARNED,
    LEARNED_EXACT_LIMIT,
    LOCAL,
    MechanismSection,
)
from dpaudit.mechanisms.units import build_mechanism, in_verdict, local_pair, upper_bound
from dpaudit.results import (
    Comparison,
    TestSummary,
    gdp_implied_comparison,
    histogram_counts,
    histogram_edges_from_quantiles,
    null_result_warning,
    paired_comparisons,
    score_summary,
    score_summary_from_counts,
    theory_curves,
)
from dpaudit.store import KEEP_BYTES
from dpaudit.theory import gdp_mu
from dpaudit.theory.identification import IDENTIFIABLE_MECHANISMS, identify_mechanism
from dpaudit.tradeoff import GridCounts, as_scores

#: Trials per arm up to which every score is held in memory and every distinct threshold
#: is searched (the exact path, whose results the shipped audits' goldens fix). Its
#: memory grows with the trials: a run peaks at about 0.27 GB at 10⁶ per arm (1.8 GB at
#: 10⁷). Above it, the streamed path, whose peak is one unit's scores plus O(grid) counts.
#: Share of the units (the first ones) that choose the streamed ``split`` threshold: the
#: in-memory split's default ½.
SELECTION_FRACTION = 0.5
#: Trials per arm, at least, set aside to draw a streamed ``bonferroni`` grid (whole
#: units, the first ones; never counted). 2¹⁶ place its quantiles finely enough, and
#: cost the bound under 1 % of its trials above the exact-path limit.
GRID_TRIALS = 1 << 16
HISTOGRAM_BINS = 60


def mechanism_summary(
    section: MechanismSection, context: RunContext, outputs: Outputs, *, level: float
) -> KindSummary:
    """The ``mechanism`` kind's summary; every in-verdict bound at ``level``."""
    mech = build_mechanism(section, str(context.base_dir))
    upper = upper_bound(section, mech, context.delta)
    entered = in_verdict(upper)
    label = f"{mech.name} mechanism"
    learned_notes: tuple[str, ...] = ()
    # What the claim-curve test counts: the scores, or a streamed run's counts.
    evidence: Evidence | None = None
    if context.sequential is not None:
        eps_lb, mu_lb, summary = _sequential(section, context, outputs, level=level, label=label)
    elif section.score == LEARNED:
        eps_lb, mu_lb, summary, learned_notes, evidence = learned_bounds(
            section, context, outputs, delta=upper.epsilon_delta, level=level, label=label
        )
    elif section.trials <= EXACT_TRIALS_LIMIT or len(outputs) < 2:
        # One unit holds every trial anyway: no streaming can make it smaller.
        eps_lb, mu_lb, summary, evidence = _in_memory(
            section, context, outputs, delta=upper.epsilon_delta, level=level, label=label
        )
    else:
        design = unit_design(
            tuple(outputs), threshold=section.threshold, unit_size=context.unit_size
        )
        counts = stream_counts(outputs, design)
        eps_lb, mu_lb = streamed_bounds(counts, delta=upper.epsilon_delta, confidence_level=level)
        summary = _streamed_test(label, counts, context)
        evidence = counts
    source = upper.source
    comparisons = paired_comparisons(
        label,
        eps_lb,
        mu_lb,
        upper_epsilon=upper.epsilon,
        upper_mu=upper.mu,
        source=source,
        in_verdict=[p for p, entering in entered.items() if entering],
    )
    curve = declared_curve(section, context, upper)
    if curve is not None:
        # the kind's `comparisons` counted this share through the same declared_curve
        assert evidence is not None  # declared_curve is None on the sequential path
        comparisons.append(
            _declared_curve_comparison(curve, evidence, section, context, level=level, label=label)
        )
    claim = Claim(**upper.detail["claim"])
    if mu_lb.value > 0 and claim.mu is not None:
        # Informational, outside the verdict: the ε that μ_LB implies IF the trade-off
        # curve is Gaussian-shaped ("assumes-gdp"), shown only against a GDP claim.
        comparisons.append(
            gdp_implied_comparison(label, mu_lb, claim.mu, delta=context.delta, source=source)
        )
    curves = theory_curves(
        epsilon=claim.epsilon, delta=claim.delta, mu=claim.mu, label=f"{source}: "
    ) + theory_curves(mu=mu_lb.value if mu_lb.value > 0 else None, label="lower bound: ")
    summary = summary.with_details(
        theory_curves=curves,
        mechanism={
            "name": mech.name,
            "parameters": mech.parameters,
            "claim": claim.to_dict(),
            "claim_source": source,
            "claim_rho": section.claim.rho if section.claim is not None else None,
            "identification": _identification(mech),
        },
        bayesian=_bayesian(eps_lb, mu_lb),
    )
    warnings = list(learned_notes)
    if eps_lb.value == 0.0 and mu_lb.value == 0.0:
        trials = f"{summary.negatives} trials per hypothesis"
        warnings.append(null_result_warning(label, trials, eps_lb) + _null_hint(section, evidence))
    distance = mech.parameters.get("distance")
    if distance is not None and distance > mech.parameters["sensitivity"] * (1 + 1e-12):
        warnings.append(
            f"{label}: the two inputs differ by {distance:g} "
            f"({mech.parameters['norm']}), more than the sensitivity "
            f"{mech.parameters['sensitivity']:g} the noise is calibrated to; the "
            "guarantee does not cover this pair."
        )
    data = _audited_inputs(section)
    data_hash = hashlib.sha256(json.dumps(data).encode()).hexdigest()
    return KindSummary((summary,), tuple(comparisons), (), tuple(warnings), data_hash)


def _in_memory(
    section: MechanismSection,
    context: RunContext,
    outputs: Outputs,
    *,
    delta: float,
    level: float,
    label: str,
) -> tuple[EpsilonBound, MuBound, TestSummary, Evidence]:
    """The exact path: every score in memory, every distinct threshold searched."""
    # In unit order (the plan's, by number): the same as by name below 10⁵ units.
    parts = [outputs[u] for u in outputs]
    neg = np.concatenate([p["negative"] for p in parts])
    pos = np.concatenate([p["positive"] for p in parts])
    del parts
    # Both comparisons enter the verdict's one budget: each bound at `level`. Computed
    # together (one split, one selection curve), each is what its own call would give.
    eps_lb, mu_lb = epsilon_and_mu_lower_bounds(
        neg,
        pos,
        delta=delta,
        confidence_level=level,
        threshold=section.threshold,
        seed=context.seed,
    )
    summary = score_summary(
        "mechanism",
        label,
        neg,
        pos,
        confidence_level=context.confidence_level,
        hypotheses=("D", "D'"),
    )
    return eps_lb, mu_lb, summary, (neg, pos)


def _sequential(
    section: MechanismSection,
    context: RunContext,
    outputs: Outputs,
    *,
    level: float,
    label: str,
) -> tuple[EpsilonBound, MuBound, TestSummary]:
    """``[audit] stopping = "sequential"``: the bounds the sequential test stopped with
    (:mod:`dpaudit.mechanisms.sequential`); the test describes the rounds it used."""
    eps_lb, mu_lb, details, used = sequential.sequential_summary(
        section, context, outputs, level=level
    )
    neg = np.concatenate([used[u]["negative"] for u in used])
    pos = np.concatenate([used[u]["positive"] for u in used])
    summary = score_summary(
        "mechanism",
        label,
        neg,
        pos,
        confidence_level=context.confidence_level,
        hypotheses=("D", "D'"),
    ).with_details(sequential=details)
    return eps_lb, mu_lb, summary


# ------------------------------------------------------------------------ streamed path


@dataclass(frozen=True)
class UnitDesign:
    """Which stored units do what in a streamed bound, fixed from the unit names alone
    before any unit is read.

    Attributes:
        threshold: ``"split"`` or ``"bonferroni"``.
        grid_units: The units the grid of candidate thresholds is drawn from; for
            ``split`` also the selection part that chooses the threshold. Never counted
            in the bound.
        counted_units: The units whose counts enter the bound (``split``: the evaluation
            part).
    """

    threshold: str
    grid_units: tuple[str, ...]
    counted_units: tuple[str, ...]


def unit_design(units: Sequence[str], *, threshold: str, unit_size: int) -> UnitDesign:
    """Cut the units into those that fix the grid (and the split's threshold) and those
    that are counted: always the FIRST units by index, whatever they hold.

    The units' trials are i.i.d. (every unit samples the same mechanism from its own
    random stream, :func:`~dpaudit.mechanisms.units.mechanism_unit`), so a cut made from
    the unit names alone is as good as a random split of the trials, and nothing the
    counted trials hold can influence the grid or the threshold.

    - ``split``: the first ⌈½·units⌉ units (at most all but one) are the selection part.
    - ``bonferroni``: the first ⌈2¹⁶ / unit_size⌉ units (at least one, at most all but
      one), at least :data:`GRID_TRIALS` trials per arm, are set aside for the grid.

    Raises:
        DpauditError: fewer than two units (nothing would be left to count).
    """
    ordered = tuple(sorted(units, key=unit_index))
    if len(ordered) < 2:
        raise DpauditError(f"A streamed bound needs at least two stored units; got {len(ordered)}.")
    if threshold == "split":
        first = math.ceil(SELECTION_FRACTION * len(ordered))
    else:
        first = math.ceil(GRID_TRIALS / unit_size)
    first = min(max(first, 1), len(ordered) - 1)
    return UnitDesign(threshold, ordered[:first], ordered[first:])


@dataclass(frozen=True)
class StreamedCounts:
    """What one read of the stored units keeps: counts at the grid and a histogram.

    Attributes:
        design: Which units fixed the grid and which were counted.
        selection: The grid units' counts (``split``: the threshold is chosen on them).
        counted: The counted units' counts (they alone enter the bound).
        histogram: ``edges``, ``negatives``, ``positives`` of every unit's scores.
    """

    design: UnitDesign
    selection: GridCounts = field(repr=False)
    counted: GridCounts = field(repr=False)
    histogram: Mapping[str, list[Any]] = field(repr=False)

    @property
    def whole(self) -> GridCounts:
        """Every unit's counts (the report's curve and metrics)."""
        return self.selection + self.counted

    def describe(self) -> dict[str, Any]:
        """The ``streamed`` details of the test: how its curve and bounds were made."""
        return {
            "grid_thresholds": int(self.counted.grid.size),
            "units": len(self.design.grid_units) + len(self.design.counted_units),
            "grid_units": len(self.design.grid_units),
            "counted_units": len(self.design.counted_units),
            "exact_trials_limit": EXACT_TRIALS_LIMIT,
            "curve": (
                "binned: the curve, AUC, TPR at FPR and advantage are those of the scores "
                "rounded down to the grid of candidate thresholds"
            ),
        }


def _read(outputs: Outputs, unit: str) -> tuple[np.ndarray, np.ndarray]:
    part = outputs[unit]
    return as_scores("negative", part["negative"]), as_scores("positive", part["positive"])


def stream_counts(outputs: Outputs, design: UnitDesign) -> StreamedCounts:
    """Read the units one at a time (the grid units twice) and keep only merged counts.

    1. The grid units are summarised (:class:`~dpaudit.bounds.threshold_search.ScoreSketch`)
       and the grid of candidate thresholds and the histogram's edges are drawn from that
       summary: from the grid units alone.
    2. Every unit is counted at the grid; the grid units' counts and the counted units'
       counts are merged separately (sums of per-unit counts: exactly the counts of the
       merged trials).

    Memory: one unit's scores and the O(grid) counts, however many units.
    """
    sketch = ScoreSketch()
    for unit in design.grid_units:
        sketch.add(*_read(outputs, unit))
    grid = sketch.grid()
    edges = histogram_edges_from_quantiles(
        sketch.quantiles(np.array([0.005, 0.995])),
        [sketch.quantiles(np.array([0.01, 0.99]), arm=arm) for arm in (0, 1)],
        bins=HISTOGRAM_BINS,
    )
    hist_neg = np.zeros(HISTOGRAM_BINS, dtype=np.int64)
    hist_pos = np.zeros(HISTOGRAM_BINS, dtype=np.int64)

    def count(units: tuple[str, ...]) -> GridCounts:
        total = GridCounts.zero(grid)
        for unit in units:
            neg, pos = _read(outputs, unit)
            total = total + GridCounts.count(grid, neg, pos)
            hist_neg[:] += histogram_counts(neg, edges)
            hist_pos[:] += histogram_counts(pos, edges)
        return total

    selection, counted = count(design.grid_units), count(design.counted_units)
    histogram = {
        "edges": edges.tolist(),
        "negatives": hist_neg.tolist(),
        "positives": hist_pos.tolist(),
    }
    return StreamedCounts(design, selection, counted, histogram)


def streamed_bounds(
    counts: StreamedCounts, *, delta: float, confidence_level: float
) -> tuple[EpsilonBound, MuBound]:
    """The ε and μ lower bounds of the streamed path, from its merged counts only.

    ``split``: the threshold is chosen on the grid units' counts, FP and FN are the
    counted units' counts at it (:func:`~dpaudit.bounds.epsilon_and_mu_from_grid_split`).
    ``bonferroni``: the counted units' counts, with limits simultaneous over the grid
    (:func:`~dpaudit.bounds.epsilon_and_mu_from_grid_bonferroni`); the grid units are
    not counted, which is what lets the union bound run over the grid alone.
    """
    design = counts.design
    details: dict[str, Any] = {
        "streamed": True,
        "units": len(design.grid_units) + len(design.counted_units),
        "grid_units": len(design.grid_units),
        "grid_source": "the first units' scores (never counted in the bound)",
    }
    if design.threshold == "split":
        return epsilon_and_mu_from_grid_split(
            counts.selection,
            counts.counted,
            delta=delta,
            confidence_level=confidence_level,
            details={**details, "selection_fraction": SELECTION_FRACTION},
        )
    sel = counts.selection
    return epsilon_and_mu_from_grid_bonferroni(
        counts.counted,
        delta=delta,
        confidence_level=confidence_level,
        details={**details, "grid_negatives": sel.negatives, "grid_positives": sel.positives},
    )


# ------------------------------------------------------------------------ learned score


def learned_bounds(
    section: MechanismSection,
    context: RunContext,
    outputs: Outputs,
    *,
    delta: float,
    level: float,
    label: str,
) -> tuple[EpsilonBound, MuBound, TestSummary, tuple[str, ...], Evidence]:
    """``score = "learned"``: fit a score on trials that are never counted, then bound.

    The units hold raw outputs. In memory (up to :data:`LEARNED_EXACT_LIMIT` trials per
    arm, or fewer than three units) the fitting trials are a seeded share of each arm
    (:func:`~dpaudit.bounds.learned_lower_bounds`); above it, the first units
    (:func:`learned_streamed`). Returns the bounds, the test's summary of the scored
    trials, the learner's warnings, and what the claim-curve test counts (the scored
    trials, or the streamed counts).
    """
    learner = section.learner or "auto"
    fraction = section.fit_fraction if section.fit_fraction is not None else FIT_FRACTION
    if section.trials > LEARNED_EXACT_LIMIT and len(outputs) >= 3:
        return learned_streamed(
            section,
            context,
            outputs,
            learner=learner,
            fraction=fraction,
            delta=delta,
            level=level,
            label=label,
        )
    # the units in order, as blocks of one array each (never concatenated)
    parts = [outputs[u] for u in outputs]
    neg = OutputBlocks("negative outputs", [p["negative"] for p in parts])
    pos = OutputBlocks("positive outputs", [p["positive"] for p in parts])
    del parts
    fitted: list[learned_scores.LearnedScore] = []

    def fit(fit_neg: np.ndarray, fit_pos: np.ndarray) -> Scorer:
        fitted.append(
            learned_scores.fit_score(fit_neg, fit_pos, learner=learner, seed=context.seed)
        )
        return fitted[-1]

    result = learned_lower_bounds(
        neg,
        pos,
        fit=fit,
        delta=delta,
        confidence_level=level,
        threshold=section.threshold,
        seed=context.seed,
        fit_fraction=fraction,
        fit_limit=FIT_TRIALS_LIMIT,
    )
    (score,) = fitted
    learned = score.describe()
    summary = score_summary(
        "mechanism",
        label,
        result.negative_scores,
        result.positive_scores,
        confidence_level=context.confidence_level,
        hypotheses=("D", "D'"),
    ).with_details(learned={**learned, "fit": result.epsilon.details["fit"]})
    eps_lb = replace(result.epsilon, details={**result.epsilon.details, "learned": learned})
    mu_lb = replace(result.mu, details={**result.mu.details, "learned": learned})
    # the scores of the trials never fitted on: the score is independent of them
    scored = (result.negative_scores, result.positive_scores)
    return eps_lb, mu_lb, summary, score.warnings, scored


class ScoredUnits(Mapping[str, Mapping[str, np.ndarray]]):
    """Stored units of raw outputs seen through a fitted score: each unit is read and
    scored when it is asked for.

    The scores of the units in ``keep`` (the grid units, which :func:`stream_counts` reads
    twice) are kept after their first scoring while together they fit in ``keep_bytes``,
    so that they are not scored twice; nothing else is kept (the streamed path's memory:
    one unit, plus at most ``keep_bytes`` of kept scores).
    """

    def __init__(
        self,
        outputs: Outputs,
        units: Sequence[str],
        score: Scorer,
        *,
        keep: Collection[str] = (),
        keep_bytes: int = KEEP_BYTES,
    ) -> None:
        self._outputs, self._units, self._score = outputs, tuple(units), score
        self._keep, self._room = frozenset(keep), keep_bytes
        self._kept: dict[str, Mapping[str, np.ndarray]] = {}

    def __getitem__(self, unit: str) -> Mapping[str, np.ndarray]:
        if unit not in self._units:
            raise KeyError(unit)
        if unit in self._kept:
            return self._kept[unit]
        part = self._outputs[unit]
        scored = {
            "negative": score_with(self._score, np.asarray(part["negative"]), "negative scores"),
            "positive": score_with(self._score, np.asarray(part["positive"]), "positive scores"),
        }
        size = scored["negative"].nbytes + scored["positive"].nbytes
        if unit in self._keep and size <= self._room:
            self._kept[unit] = scored
            self._room -= size
        return scored

    def __iter__(self) -> Iterator[str]:
        return iter(self._units)

    def __len__(self) -> int:
        return len(self._units)


def fit_units(units: Sequence[str], *, fit_trials: int, unit_size: int) -> tuple[str, ...]:
    """The units a streamed learned score is fitted on: the FIRST units by index, enough
    for ``fit_trials`` per arm, at least one, and at most all but two (the rest must still
    be cut into a selection and a counted part, :func:`unit_design`). Fixed from the unit
    names alone, before any unit is read."""
    ordered = sorted(units, key=unit_index)
    if len(ordered) < 3:
        raise DpauditError(
            f"A streamed learned score needs at least three stored units; got {len(ordered)}."
        )
    first = min(max(1, math.ceil(fit_trials / unit_size)), len(ordered) - 2)
    return tuple(ordered[:first])


def learned_streamed(
    section: MechanismSection,
    context: RunContext,
    outputs: Outputs,
    *,
    learner: str,
    fraction: float,
    delta: float,
    level: float,
    label: str,
) -> tuple[EpsilonBound, MuBound, TestSummary, tuple[str, ...], Evidence]:
    """The learned score above :data:`LEARNED_EXACT_LIMIT` trials per arm.

    The first units (:func:`fit_units`; their first ``min(fraction·trials,
    FIT_TRIALS_LIMIT)`` trials per arm) fit the score and are never read again; every
    other unit is scored as it is read (:class:`ScoredUnits`) and goes through the
    streamed path of a fixed score (:func:`unit_design`, :func:`stream_counts`,
    :func:`streamed_bounds`), so the counted units are independent of both the score and
    the threshold. Memory: the fitting trials plus one unit.
    """
    fit_trials = min(max(1, round(fraction * section.trials)), FIT_TRIALS_LIMIT)
    fitting = fit_units(tuple(outputs), fit_trials=fit_trials, unit_size=context.unit_size)
    arms: dict[str, list[np.ndarray]] = {"negative": [], "positive": []}
    for unit in fitting:
        part = outputs[unit]
        for arm, rows in arms.items():
            need = fit_trials - sum(r.shape[0] for r in rows)
            if need > 0:
                rows.append(np.asarray(part[arm])[:need])
    score = learned_scores.fit_score(
        np.concatenate(arms["negative"]),
        np.concatenate(arms["positive"]),
        learner=learner,
        seed=context.seed,
    )
    del arms
    rest = tuple(u for u in sorted(outputs, key=unit_index) if u not in set(fitting))
    design = unit_design(rest, threshold=section.threshold, unit_size=context.unit_size)
    counts = stream_counts(ScoredUnits(outputs, rest, score, keep=design.grid_units), design)
    eps_lb, mu_lb = streamed_bounds(counts, delta=delta, confidence_level=level)
    fit = {
        "fit_negatives": score.fit_negatives,
        "fit_positives": score.fit_positives,
        "fit_units": len(fitting),
        "fit_fraction": fraction,
        "fit_limit": FIT_TRIALS_LIMIT,
        "fit_trials": (
            f"the first {len(fitting)} unit(s) by index (their first {fit_trials} trials per "
            "arm), fixed from the unit names before any unit was read; the score is fitted "
            "on these trials only, and these units are never scored or counted"
        ),
    }
    learned = score.describe()
    more = {"fit": fit, "learned": learned}
    summary = _streamed_test(label, counts, context, learned={**learned, "fit": fit})
    return (
        replace(eps_lb, details={**eps_lb.details, **more}),
        replace(mu_lb, details={**mu_lb.details, **more}),
        summary,
        score.warnings,
        counts,
    )


# ------------------------------------------------------------------ the claim's curve

#: What a claim-curve test counts: the scores of both arms, or a streamed run's counts.
Evidence = tuple[np.ndarray, np.ndarray] | StreamedCounts


@dataclass(frozen=True)
class DeclaredCurve:
    """The exact trade-off curve a built-in mechanism's claim declares, as a family.

    Attributes:
        family: θ ↦ the declared mechanism's curve at θ (falling as θ rises).
        claimed: the θ the claim allows at most.
        parameter: ``"epsilon"`` (Laplace's ε₀) or ``"mu"`` (the Gaussian's μ).
        source: where ``claimed`` comes from, in words (the comparison's upper source).
        assumption: what the bound's value (not its violation) assumes, in words.
        criterion: the threshold rule: the family's parameter at a point, which ranks
            the thresholds whose points lie above the claimed curve too.
    """

    family: Callable[[float], ClaimCurve] = field(repr=False)
    claimed: float
    parameter: str
    source: str
    assumption: str
    criterion: Criterion = field(repr=False)


def _one_dimensional_laplace(section: MechanismSection) -> bool:
    """A Laplace built-in whose two inputs differ in one coordinate: its trade-off curve
    is exactly the 1-D Laplace curve at ε₀ = distance / scale. (In d dimensions the
    curve is a product of 1-D Laplace curves, which no closed form here covers.)"""
    if section.name == "laplace":
        return section.query is None or len(section.query[0]) == 1
    return section.name == "local-laplace" and local_pair(section)[1] == 1


def declared_curve(
    section: MechanismSection, context: RunContext, upper: UpperBound
) -> DeclaredCurve | None:
    """The claim's exact trade-off curve where one is known, else ``None``: decides, for
    the kind's ``comparisons`` and for :func:`mechanism_summary` alike, whether the
    claim-curve comparison takes a share of the verdict's budget.

    The curve is read from the CLAIM (``[mechanism.claim]``, else the built-in's own
    guarantee) and the mechanism the table DECLARES, never from the noise that ran:

    - one-dimensional Laplace claimed (ε, δ)-DP: the Laplace curve at
      ε₀ = ε − 2 ln(1 − δ) (:func:`dpaudit.bounds.claim_curve.laplace_epsilon_of_claim`), above
      f_{ε,δ} between its corners;
    - Gaussian claimed (ε, δ > 0)-DP: G_μ at μ = μ(ε, δ), the μ whose GDP profile reaches
      δ at ε (Dong, Roth, Su 2022, Cor. 2.13: a Gaussian mechanism is (ε, δ)-DP iff its μ
      is at most that); claimed ρ-zCDP: G_μ at μ = √(2ρ) (its Rényi divergence at order α
      is αμ²/2, Bun, Steinke 2016, Prop. 1.6); the smaller μ when the claim also states
      one.

    None where the test would repeat a comparison already in the verdict: against
    f_{ε,δ} a point is below the curve exactly when ε_LB > ε (Kairouz, Oh, Viswanath
    2015, Thm. 2.1), so a plain (ε, δ) claim, and binary randomized response, whose
    curve IS f_{ε,0}, add nothing; against G_μ of a μ claim a point is below exactly when
    μ_LB > μ. None also with ``claim_curve = false``, for user mechanisms (no declared
    curve), the other local randomisers, a search, and sequential stopping (whose rounds
    spend the budget their own way).
    """
    if not section.claim_curve or section.search is not None or context.sequential is not None:
        return None
    if section.score not in (None, LEARNED):
        return None
    claim = Claim(**upper.detail["claim"])
    rho = section.claim.rho if section.claim is not None else None
    if section.name in ("laplace", "local-laplace") and _one_dimensional_laplace(section):
        if rho is not None or claim.epsilon is None or not 0 < claim.epsilon < math.inf:
            return None
        e0 = laplace_epsilon_of_claim(claim.epsilon, claim.delta)
        stated = f"ε = {claim.epsilon:g}, δ = {claim.delta:g}"
        return DeclaredCurve(
            laplace_claim,
            e0,
            "epsilon",
            f"{upper.source} Laplace mechanism's exact curve ({stated} → ε₀ = {e0:.4g})",
            "assumes the mechanism is the Laplace mechanism it declares (only its ε₀ unknown)",
            laplace_curve_parameter,
        )
    if section.name not in GAUSSIAN:
        return None
    candidates: list[tuple[float, str]] = []
    if rho is not None:
        candidates.append((math.sqrt(2.0 * rho), f"ρ = {rho:g} zCDP → μ = √(2ρ)"))
    elif claim.epsilon is not None and math.isfinite(claim.epsilon) and claim.delta > 0:
        mu = gdp_mu(claim.epsilon, claim.delta)
        stated = f"ε = {claim.epsilon:g}, δ = {claim.delta:g}"
        candidates.append((mu, f"{stated} → μ(ε, δ)"))
    if not candidates:
        return None
    mu_c, why = min(candidates)
    if not mu_c > 0 or (claim.mu is not None and claim.mu <= mu_c):
        return None  # the μ comparison already tests this curve
    return DeclaredCurve(
        gdp_claim,
        mu_c,
        "mu",
        f"{upper.source} Gaussian mechanism's exact curve G_μ ({why} = {mu_c:.4g})",
        "assumes the mechanism is the Gaussian mechanism it declares (only its μ unknown)",
        gdp_curve_parameter,
    )


def _declared_curve_comparison(
    curve: DeclaredCurve,
    evidence: Evidence,
    section: MechanismSection,
    context: RunContext,
    *,
    level: float,
    label: str,
) -> Comparison:
    """The trials held against the declared curve at the verdict's per-bound level
    (:func:`dpaudit.bounds.claim_curve.declared_curve_bound`): a value above the claimed
    parameter means a point below the claimed curve."""
    claim = curve.family(curve.claimed)
    # Too few trials raise here as they do for the ε bound (the same least design, which
    # the ε bound of the same trials checks first).
    if isinstance(evidence, StreamedCounts):
        design = evidence.design
        test = claim_curve_test_from_grid(
            evidence.selection if design.threshold == "split" else None,
            evidence.counted,
            claim=claim,
            confidence_level=level,
            criterion=curve.criterion,
            details={
                "streamed": True,
                "units": len(design.grid_units) + len(design.counted_units),
                "grid_units": len(design.grid_units),
            },
        )
    else:
        test = claim_curve_test(
            *evidence,
            claim=claim,
            confidence_level=level,
            threshold=section.threshold,
            seed=context.seed,
            criterion=curve.criterion,
        )
    lower = declared_curve_bound(
        test,
        family=curve.family,
        claimed=curve.claimed,
        parameter=curve.parameter,
        assumption=curve.assumption,
    )
    return Comparison(
        test=f"{label} (claim curve)",
        parameter=curve.parameter,
        lower=lower,
        upper=curve.claimed,
        upper_source=curve.source,
        in_verdict=True,
    )


#: Distinct scores, at most, of an output called discrete by a null result's hint (the
#: learned score's ``counts`` learner takes up to 256 distinct values).
DISCRETE_SCORES = 256


def _null_hint(section: MechanismSection, evidence: Evidence | None) -> str:
    """What to try after a null result on a user mechanism's discrete output: the learned
    score (unless it ran) and the neighbour search (``docs/bug-hunting.md``); empty for a
    built-in (its exact likelihood ratio is the best score there is) or continuous
    scores."""
    if ":" not in section.name or not isinstance(evidence, tuple):
        return ""
    distinct = int(np.unique(np.concatenate(evidence)).size)
    if distinct > DISCRETE_SCORES:
        return ""
    if section.score == LEARNED:
        said = (
            f" Its learned score took only {distinct} distinct values (a discrete output) and "
            "found no event here"
        )
    else:
        said = (
            f" Its scores took only {distinct} distinct values (a discrete output): a learned "
            "score (score = 'learned', what the default 'auto' picks for a user mechanism "
            "without a fixed score) learns which outputs point to D' in either direction"
        )
    return (
        f"{said}; a [mechanism.search] table (data, neighbours) tries other pairs of inputs "
        "than the one given (docs/bug-hunting.md)."
    )


def _audited_inputs(m: MechanismSection) -> object:
    """The two inputs the audit ran on (hashed into the provenance)."""
    if m.data is not None:
        return m.data
    if m.query is not None:
        return m.query
    if m.name in LOCAL:
        return local_pair(m)[0]
    if m.name in CATEGORICAL:
        return list(m.values or (0, 1))
    return ([0.0], [m.sensitivity])


def _bayesian(eps_lb: EpsilonBound, mu_lb: MuBound) -> dict[str, Any] | None:
    """Bayesian ε and μ (Zanella-Béguelin et al. 2023) from the counts each rigorous bound
    used, next to it: labelled "bayesian (not rigorous)", in the test's details only, so
    no comparison, budget or gate ever reads them. None when a bound kept no counts."""
    out: dict[str, Any] = {}
    for name, bound in (("epsilon", eps_lb), ("mu", mu_lb)):
        c = bound.counts
        if (
            not {"fp", "negatives", "fn", "positives"} <= set(c)
            or min(c["negatives"], c["positives"]) < 1
        ):
            continue
        est = bayesian_estimate(
            int(c["fp"]),
            int(c["negatives"]),
            int(c["fn"]),
            int(c["positives"]),
            quantity="epsilon" if name == "epsilon" else "mu",
            delta=bound.delta if isinstance(bound, EpsilonBound) else 0.0,
            credible_level=bound.confidence_level,
        )
        out[name] = est.to_dict()
    return out or None


def _identification(mech: Mechanism) -> dict[str, Any] | None:
    """Whether the mechanism that ran is μ-GDP, and for which μ (Liu, Sun, Jiang, Kong 2022),
    from its exact privacy profile; None for a mechanism without a known profile (a user
    callable, or parameters the profile does not cover)."""
    if mech.name not in IDENTIFIABLE_MECHANISMS:
        return None
    try:
        found = identify_mechanism(mech.name, mech.parameters)
    except DpauditError:
        return None
    return {
        "exact": found.exact,
        "mu": found.mu,
        "bracket": [found.bracket.low, found.bracket.high],
        "summary": found.summary,
    }


def _streamed_test(label: str, counts: Any, context: RunContext, **details: Any) -> TestSummary:
    """The test of a streamed run, from its summed counts (never every score)."""
    return score_summary_from_counts(
        "mechanism",
        label,
        counts.whole,
        counts.histogram,
        confidence_level=context.confidence_level,
        hypotheses=("D", "D'"),
    ).with_details(streamed=counts.describe(), **details)
