"""Result objects of a whole audit, and their stable JSON form (``results.json``).

The keys written here are documented in ``dpaudit/schemas/results.schema.json`` and
versioned by ``SCHEMA_VERSION``; every run validates against that schema in the tests.
The gate that turns these results into checks and a verdict is :mod:`dpaudit.results.gate`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dpaudit.bounds import VALIDITY_MEANING, EpsilonBound, MuBound, _jsonable
from dpaudit.errors import DpauditError
from dpaudit.planning import limit_for_bound
from dpaudit.stats import clopper_pearson
from dpaudit.theory import gdp_epsilon, tradeoff_dp, tradeoff_gdp
from dpaudit.tradeoff import (
    GridCounts,
    TradeoffCurve,
    as_scores,
    binned_metrics,
    membership_metrics,
)

SCHEMA_VERSION = "1.1"


@dataclass(frozen=True)
class Check:
    """One gate check: a named policy with the value measured, its limit and its status.

    ``status`` is ``"passed"``, ``"failed"``, ``"not-evaluated"`` (nothing the audit
    measured speaks to the policy) or ``"not-applicable"`` (a default policy the file did
    not set, with nothing in the audit to apply it to: it passes and decides nothing). The
    gate fails closed: a check that was not evaluated counts as failed (``passed`` is
    False) unless ``[gate] on_unmeasured = "warn"``.
    """

    name: str
    value: float | None
    limit: float | None
    passed: bool
    message: str
    status: str = ""
    #: True for a check that can fail by chance (a p-value test at the verdict's
    #: per-comparison level): it takes one share of the verdict's budget, like an
    #: in-verdict comparison. Deterministic checks take none. Not serialised.
    spends_budget: bool = field(default=False, compare=False)
    #: What this check failing means, in plain words with its consequence, for the
    #: verdict's words (:func:`verdict_findings`); "" leaves the wording to the check's
    #: name. Not serialised in the check: ``results.json``'s ``findings`` carries it.
    finding: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.status:
            object.__setattr__(self, "status", "passed" if self.passed else "failed")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": _finite(self.value),
            "limit": _finite(self.limit),
            "passed": self.passed,
            "status": self.status,
            "message": self.message,
        }


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """A lower bound held against an upper bound (a claim or an accountant's value).

    ``violation`` is True only when the lower bound is rigorous (not heuristic, not
    GDP-assuming) and exceeds the upper bound: then the DP claim is false at the stated
    confidence.
    """

    test: str
    parameter: str
    lower: EpsilonBound | MuBound
    upper: float | None
    upper_source: str
    in_verdict: bool

    @property
    def tightness(self) -> float | None:
        if self.upper is None or not math.isfinite(self.upper) or self.upper <= 0:
            return None
        return self.lower.value / self.upper

    @property
    def limit_of_detection(self) -> float | None:
        """The largest value this bound's design could certify: a perfect attack's bound
        with the same trials (or canaries and guesses), δ and confidence
        (:func:`dpaudit.planning.limit_for_bound`); ``None`` when the bound carries no
        counts to read the design from. A null result proves nothing above it."""
        try:
            return limit_for_bound(self.lower).value
        except DpauditError:
            return None

    @property
    def violation(self) -> bool:
        return (
            self.in_verdict
            and self.upper is not None
            and self.lower.validity.startswith("rigorous")
            and self.lower.value > self.upper
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "parameter": self.parameter,
            "lower": self.lower.to_dict(),
            "upper": _finite(self.upper),
            "upper_source": self.upper_source,
            "tightness": _finite(self.tightness),
            "limit_of_detection": _finite(self.limit_of_detection),
            "violation": self.violation,
            "in_verdict": self.in_verdict,
            "validity_meaning": VALIDITY_MEANING[self.lower.validity],
        }


def paired_comparisons(
    test: str,
    epsilon: EpsilonBound,
    mu: MuBound | None,
    *,
    upper_epsilon: float | None,
    upper_mu: float | None,
    source: str | tuple[str, str],
    in_verdict: Collection[str] = (),
) -> list[Comparison]:
    """One test's ε and μ lower bounds, each held against its upper bound.

    Args:
        test: the test's label, shared by both comparisons.
        epsilon: the ε lower bound.
        mu: the μ lower bound, or ``None`` (then only the ε comparison is returned).
        upper_epsilon: the ε the lower bound is held against, or ``None``.
        upper_mu: the μ the lower bound is held against, or ``None``.
        source: where the upper bounds come from: ``"accountant"`` names them
            ``"accountant ε"`` and ``"accountant μ"``; a pair gives the two names as they
            are. A missing upper bound is named ``"none"``.
        in_verdict: the parameters (``"epsilon"``, ``"mu"``) whose comparison enters the
            verdict; the others are reported only.

    Returns:
        The ε comparison, then the μ comparison (when ``mu`` is given).
    """
    names = source if isinstance(source, tuple) else (f"{source} ε", f"{source} μ")
    pairs: list[tuple[str, EpsilonBound | MuBound, float | None, str]] = [
        ("epsilon", epsilon, upper_epsilon, names[0])
    ]
    if mu is not None:
        pairs.append(("mu", mu, upper_mu, names[1]))
    return [
        Comparison(
            test=test,
            parameter=parameter,
            lower=lower,
            upper=upper,
            upper_source=name if upper is not None else "none",
            in_verdict=parameter in in_verdict,
        )
        for parameter, lower, upper, name in pairs
    ]


#: A test's ``details`` key that withholds its metrics from every gate policy that reads
#: tests (``max_auc``, ``max_tpr_at_fpr``, ``max_advantage``), with the reason as its value:
#: a membership target that predicts no better than its members' majority class, whose
#: scores describe a model nobody would release. Those policies become not evaluated.
WITHHELD = "withheld_from_gate"


@dataclass(frozen=True)
class TestSummary:
    """One audited test's scores summarised: metrics, curve points, histogram, theory curves.

    Built whole by :func:`score_summary` (kinds add their own ``details`` with
    :meth:`with_details`, which returns a new object), serialised by :meth:`to_dict` with
    ``details`` merged at the top level (``"mechanism"``, ``"attack"``, ``"dpsgd"``,
    ``"target"``, ``"record"``: the keys of ``results.json``'s test objects).
    """

    __test__ = False  # not a pytest test class

    id: str
    label: str
    hypotheses: tuple[str, str]
    negatives: int
    positives: int
    metrics: Mapping[str, Any] = field(repr=False)
    curve: Mapping[str, list[float]] = field(repr=False)
    histogram: Mapping[str, list[Any]] = field(repr=False)
    theory_curves: tuple[Mapping[str, Any], ...] = field(default=(), repr=False)
    details: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def with_details(
        self, *, theory_curves: tuple[Mapping[str, Any], ...] | None = None, **details: Any
    ) -> TestSummary:
        """A copy with more details (and, if given, other theory curves)."""
        return replace(
            self,
            theory_curves=self.theory_curves if theory_curves is None else theory_curves,
            details={**self.details, **details},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "label": self.label,
            "hypotheses": list(self.hypotheses),
            "negatives": self.negatives,
            "positives": self.positives,
            "metrics": dict(self.metrics),
            "curve": dict(self.curve),
            "histogram": dict(self.histogram),
            "theory_curves": [dict(c) for c in self.theory_curves],
            **self.details,
        }


@dataclass(frozen=True)
class AuditResult:
    """Everything an audit found; what ``results.json`` and the report are made from.

    Attributes:
        name: The audit's name.
        verdict: ``"pass"`` when every gate check passed, else ``"fail"``.
        privacy_verdict: ``"violation"`` when a rigorous lower bound exceeds its upper
            bound, else ``"consistent"``.
        checks: The gate checks.
        comparisons: Every lower bound with its upper bound and tightness.
        tests: One summary per audited test (mechanism, attack, canary): metrics, curve
            points, histogram, theoretical curves.
        attribute: Attribute-inference results (accuracies, advantage, DP bound).
        config: The validated configuration as a dict.
        config_text: The audit file as written.
        provenance: Versions, hashes, seed, timings, unit counts.
        warnings: Plain-language warnings for the report.
    """

    name: str
    verdict: str
    privacy_verdict: str
    checks: tuple[Check, ...]
    comparisons: tuple[Comparison, ...]
    tests: tuple[TestSummary, ...] = field(repr=False)
    config: dict[str, Any] = field(repr=False)
    attribute: tuple[Mapping[str, Any], ...] = field(repr=False, default=())
    config_text: str = field(repr=False, default="")
    provenance: dict[str, Any] = field(repr=False, default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def failed_checks(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def findings(self) -> tuple[dict[str, Any], ...]:
        """What failed, one entry per failed check, in words (:func:`verdict_findings`)."""
        return verdict_findings(self.checks, self.comparisons)

    @property
    def headline(self) -> str:
        """The verdict in one line, from what failed (:func:`verdict_headline`)."""
        return verdict_headline(self.findings, privacy_verdict=self.privacy_verdict)

    def to_dict(self) -> dict[str, Any]:
        findings = self.findings
        return {
            "schema_version": SCHEMA_VERSION,
            "name": self.name,
            "verdict": self.verdict,
            "privacy_verdict": self.privacy_verdict,
            "headline": verdict_headline(findings, privacy_verdict=self.privacy_verdict),
            "findings": list(findings),
            "checks": [c.to_dict() for c in self.checks],
            "bounds": [c.to_dict() for c in self.comparisons],
            "tests": _jsonable([t.to_dict() for t in self.tests]),
            "attribute": _jsonable([dict(a) for a in self.attribute]),
            "config": self.config,
            "config_text": self.config_text,
            "provenance": _jsonable(self.provenance),
            "warnings": list(self.warnings),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"


#: Each kind of finding: its title (the verdict's words lead with it) and whether it
#: shows the stated privacy false (a privacy violation) or only fails the gate.
FINDING_KINDS: dict[str, tuple[str, bool]] = {
    "bound": ("Privacy violation proven", True),
    "greybox": ("The run did not do what was accounted", True),
    "claim": ("The claim does not cover what ran", True),
    "check": ("A check of the audit failed", True),
    "gate": ("Gate limit exceeded", False),
    "unmeasured": ("Not evaluated", False),
}

#: What a failed grey-box check means when the check carries no words of its own.
_GREYBOX_WORDS = {
    "greybox_batch_sizes": (
        "the batch sizes do not vary as Poisson sampling at rate q makes them; the stated ε "
        "assumes Poisson sampling, so it does not hold for what ran"
    ),
    "greybox_clipping": (
        "per-example gradients were not clipped to C; a record can move an update further "
        "than accounted, so the stated ε does not hold for what ran"
    ),
    "greybox_noise": (
        "the run added less noise than σC; the stated ε assumes σC, so it does not hold for "
        "what ran"
    ),
    "greybox_steps": (
        "the models ran other numbers of steps than accounted, so the accountant's ε is not "
        "that of what ran"
    ),
}


def verdict_findings(
    checks: tuple[Check, ...] | list[Check], comparisons: tuple[Comparison, ...] | list[Comparison]
) -> tuple[dict[str, Any], ...]:
    """The verdict in words: one finding per failed check, saying what failed and what
    follows from it.

    Which check failed decides the words: ``fail_on_violation`` failed on a bound (the
    largest rigorous lower bound above its upper bound is quoted); a grey-box check
    (``greybox_*``: the run did not do what was accounted); the check of a stated claim
    against the records of what ran (``claim_vs_records``); another kind's check; a
    gate limit; or a policy nothing measured (it fails closed). A check's own ``finding``
    words are used when it carries them.

    Returns:
        Entries ``{"check", "kind", "title", "privacy", "statement"}`` in check order:
        ``kind`` a key of :data:`FINDING_KINDS`, ``privacy`` whether it shows the stated
        privacy false, ``statement`` one sentence.
    """
    out = []
    for c in checks:
        if c.passed:
            continue
        kind, statement = _finding(c, comparisons)
        title, privacy = FINDING_KINDS[kind]
        out.append(
            {
                "check": c.name,
                "kind": kind,
                "title": title,
                "privacy": privacy,
                "statement": statement,
            }
        )
    return tuple(out)


def _finding(c: Check, comparisons: tuple[Comparison, ...] | list[Comparison]) -> tuple[str, str]:
    """(kind, statement) of one failed check."""
    if c.status == "not-evaluated":
        return "unmeasured", f"{c.name}: {c.message}"
    if c.name == "fail_on_violation":
        bad = [x for x in comparisons if x.violation]
        if not bad:
            return "bound", c.message
        worst = max(bad, key=lambda x: x.lower.value - (x.upper or 0.0))
        symbol = "ε" if worst.parameter == "epsilon" else "μ"
        more = f" ({len(bad) - 1} more bound(s) also exceed theirs)" if len(bad) > 1 else ""
        validity = worst.lower.validity.replace("rigorous-", "rigorous ")
        return "bound", (
            f"a rigorous empirical lower bound exceeds its upper bound: {symbol} ≥ "
            f"{worst.lower.value:.4g} in {worst.test} ({validity}, "
            f"{100 * worst.lower.confidence_level:.4g} % confidence) against the "
            f"{worst.upper_source} upper bound {worst.upper:.4g}{more}, so the stated "
            "differential-privacy guarantee is false at the stated confidence"
        )
    if c.name.startswith("greybox_"):
        return "greybox", c.finding or _GREYBOX_WORDS.get(c.name, c.message)
    if c.name == "claim_vs_records":
        return "claim", c.finding or c.message
    if c.spends_budget or c.finding:
        return "check", c.finding or f"{c.name}: {c.message}"
    if c.name.startswith("max_"):
        return "gate", f"{c.message}: the release gate's limit {c.name} is exceeded"
    return "check", f"{c.name}: {c.message}"


def verdict_headline(
    findings: tuple[dict[str, Any], ...] | list[dict[str, Any]], *, privacy_verdict: str
) -> str:
    """The verdict in one line: ``privacy: consistent`` when nothing failed, else the
    first finding (privacy findings first) as "title: statement", and how many more."""
    if not findings:
        return f"privacy: {privacy_verdict}"
    ordered = sorted(findings, key=lambda f: not f["privacy"])
    first = ordered[0]
    more = len(ordered) - 1
    tail = f" (and {more} more failed check{'s' if more > 1 else ''})" if more else ""
    return f"{first['title']}: {first['statement']}{tail}"


def null_result_warning(label: str, design: str, bound: EpsilonBound) -> str:
    """What a null result says: no evidence above 0 at this budget, never "private".

    It names the design's limit of detection (:func:`dpaudit.planning.limit_for_bound`,
    a perfect attack's bound with the same trials), when the bound carries its counts.
    """
    text = f"{label}: no lower bound exceeds 0 with {design}: no evidence of leakage above 0"
    try:
        limit = limit_for_bound(bound).value
    except DpauditError:
        pass
    else:
        text += f"; with these trials even a perfect attack could certify at most ε = {limit:.3g}"
    return text + " (a null result is not a proof of privacy)."


def gdp_implied_comparison(
    test: str, mu_lower: MuBound, mu_upper: float, *, delta: float, source: str
) -> Comparison:
    """The ε at δ that a μ lower bound implies, held against the ε of the μ upper bound.

    Informational and outside the verdict ("assumes-gdp"): valid only if the audited
    trade-off curve is Gaussian-shaped.
    """
    return Comparison(
        test=test,
        parameter="epsilon",
        lower=mu_lower.epsilon(delta),
        upper=gdp_epsilon(mu_upper, delta),
        upper_source=f"{source} μ ⇒ ε",
        in_verdict=False,
    )


def score_summary(
    test_id: str,
    label: str,
    negative_scores: np.ndarray,
    positive_scores: np.ndarray,
    *,
    confidence_level: float,
    max_points: int = 300,
    bins: int = 60,
    hypotheses: tuple[str, str] = ("H0", "H1"),
) -> TestSummary:
    """The plotting and metric summary of one test's scores (for results.json and the report).

    The curve is thinned to at most ``max_points`` thresholds (always keeping both ends,
    half of them at log-spaced FPRs);
    each point carries pointwise two-sided Clopper–Pearson intervals for its FPR and FNR,
    the confidence region the report draws around the empirical trade-off curve.
    """
    # each class sorted once: the curve, the histogram's edges and its counts read them
    neg = np.sort(as_scores("negative_scores", negative_scores))
    pos = np.sort(as_scores("positive_scores", positive_scores))
    curve = TradeoffCurve.from_sorted(neg, pos)
    points = _curve_points(curve, confidence_level, max_points)
    edges = histogram_edges(neg, pos, bins=bins)
    metrics = membership_metrics(neg, pos, confidence_level=confidence_level, curve=curve)
    return TestSummary(
        id=test_id,
        label=label,
        hypotheses=hypotheses,
        negatives=curve.negatives,
        positives=curve.positives,
        metrics=metrics.to_dict(),
        curve=points,
        histogram={
            "edges": edges.tolist(),
            "negatives": sorted_histogram_counts(neg, edges).tolist(),
            "positives": sorted_histogram_counts(pos, edges).tolist(),
        },
    )


def score_summary_from_counts(
    test_id: str,
    label: str,
    counts: GridCounts,
    histogram: Mapping[str, Any],
    *,
    confidence_level: float,
    max_points: int = 300,
    hypotheses: tuple[str, str] = ("H0", "H1"),
) -> TestSummary:
    """:func:`score_summary` of scores known only through their counts at a grid of
    thresholds (:class:`~dpaudit.tradeoff.GridCounts`), for tests whose scores are too
    many to hold: memory O(grid), whatever the number of scores.

    The curve, its intervals and the metrics are those of the scores rounded down to the
    grid (:func:`~dpaudit.tradeoff.binned_metrics`; the metrics' ``auc_method`` says
    so); ``histogram`` (``edges``, ``negatives``, ``positives``) is counted by the caller,
    e.g. with :func:`histogram_counts` on edges from :func:`histogram_edges_from_quantiles`.
    """
    curve = counts.curve()
    metrics = binned_metrics(curve, confidence_level=confidence_level)
    return TestSummary(
        id=test_id,
        label=label,
        hypotheses=hypotheses,
        negatives=curve.negatives,
        positives=curve.positives,
        metrics=metrics.to_dict(),
        curve=_curve_points(curve, confidence_level, max_points),
        histogram={
            "edges": [float(e) for e in histogram["edges"]],
            "negatives": [int(k) for k in histogram["negatives"]],
            "positives": [int(k) for k in histogram["positives"]],
        },
    )


def _curve_points(
    curve: TradeoffCurve, confidence_level: float, max_points: int
) -> dict[str, list[float]]:
    """The curve thinned to at most ``max_points`` rows, with pointwise intervals."""
    # Half the points evenly over thresholds, half at log-spaced FPRs, so that the
    # low-FPR region a log-log ROC shows is not left with a handful of points.
    even = np.linspace(0, curve.thresholds.size - 1, max_points // 2).round().astype(int)
    targets = np.logspace(np.log10(1.0 / curve.negatives), 0.0, max_points // 2)
    at_fpr = np.searchsorted(curve.fpr, targets, side="right") - 1  # fpr rises with index
    idx = np.unique(np.concatenate([even, np.clip(at_fpr, 0, curve.thresholds.size - 1)]))
    fpr_ci = [
        clopper_pearson(int(curve.fp[i]), curve.negatives, confidence_level=confidence_level)
        for i in idx
    ]
    fn = curve.fn  # an array of the size of the curve: computed once, not per point
    fnr_ci = [
        clopper_pearson(int(fn[i]), curve.positives, confidence_level=confidence_level) for i in idx
    ]
    return {
        "fpr": curve.fpr[idx].tolist(),
        "fnr": curve.fnr[idx].tolist(),
        "fpr_low": [c.low for c in fpr_ci],
        "fpr_high": [c.high for c in fpr_ci],
        "fnr_low": [c.low for c in fnr_ci],
        "fnr_high": [c.high for c in fnr_ci],
    }


def histogram_counts(scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Counts of ``scores`` in the bins of ``edges``; outliers are counted in the end
    bins, so the counts still add up to the trials (and counts of disjoint samples add)."""
    lo, hi = float(edges[0]), float(edges[-1])
    clipped = np.clip(scores, lo, hi)
    bins = edges.size - 1
    if hi > lo and np.array_equal(edges, np.linspace(lo, hi, bins + 1)):
        # Equal-width edges (histogram_edges' own): numpy bins by arithmetic, corrected
        # against exactly these edges, so the counts are those of the edges, without
        # the sort numpy does for edges given as an array.
        return np.histogram(clipped, bins=bins, range=(lo, hi))[0]
    return np.histogram(clipped, edges)[0]


def sorted_histogram_counts(sorted_scores: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """:func:`histogram_counts` of scores sorted in increasing order, by binary search:
    bin i counts the scores in [edges[i], edges[i+1]), the last bin also those at or
    above its right edge and the first those below its left edge (the end bins' outliers,
    as :func:`histogram_counts` clips them)."""
    inner = np.searchsorted(sorted_scores, edges[1:-1], side="left")
    return np.diff(np.concatenate([[0], inner, [sorted_scores.size]]))


def histogram_edges(
    negative_scores: np.ndarray, positive_scores: np.ndarray, *, bins: int = 60
) -> np.ndarray:
    """Equal-width bin edges that show both classes, whatever their outliers.

    The range covers 0.5 %–99.5 % of the pooled scores, widened so that each class's own
    1 %–99 % range fits (neither class sits in one end bin); scores beyond it are counted
    in the end bins. The full min–max range made a loss attack's histogram one spike at 0
    when a few rows had huge losses. A constant sample gets a unit-wide range around it.
    """
    pooled = np.concatenate([negative_scores, positive_scores])
    pooled_range = np.quantile(pooled, [0.005, 0.995])
    class_ranges = [np.quantile(s, [0.01, 0.99]) for s in (negative_scores, positive_scores)]
    return histogram_edges_from_quantiles(pooled_range, class_ranges, bins=bins)


def histogram_edges_from_quantiles(pooled: Any, classes: Any, *, bins: int = 60) -> np.ndarray:
    """:func:`histogram_edges` from the quantiles it reads: the pooled scores' 0.5 % and
    99.5 % quantiles, and each class's 1 % and 99 % (exact, or from a sketch of scores too
    many to hold)."""
    lo, hi = (float(v) for v in pooled)
    for q_lo, q_hi in classes:
        lo, hi = min(lo, float(q_lo)), max(hi, float(q_hi))
    if not hi > lo:
        lo, hi = lo - 0.5, lo + 0.5
    return np.linspace(lo, hi, bins + 1)


def theory_curves(
    *, epsilon: float | None = None, delta: float = 0.0, mu: float | None = None, label: str = ""
) -> tuple[dict[str, Any], ...]:
    """Points of the theoretical trade-off curves f_{ε,δ} and G_μ for plotting."""
    alpha = np.concatenate([np.logspace(-6, -1, 60), np.linspace(0.1, 1.0, 60)[1:]])
    out = []
    if epsilon is not None and math.isfinite(epsilon):
        beta = tradeoff_dp(alpha, epsilon=epsilon, delta=delta)
        out.append(
            {
                "label": f"{label}({epsilon:.3g}, {delta:.2g})-DP",
                "kind": "dp",
                "fpr": alpha.tolist(),
                "fnr": np.asarray(beta).tolist(),
            }
        )
    if mu is not None and math.isfinite(mu):
        beta = tradeoff_gdp(alpha, mu=mu)
        out.append(
            {
                "label": f"{label}{mu:.3g}-GDP",
                "kind": "gdp",
                "fpr": alpha.tolist(),
                "fnr": np.asarray(beta).tolist(),
            }
        )
    return tuple(out)


def _finite(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None
