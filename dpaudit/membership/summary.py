"""What an attack's output shows: the one summariser of each attack's scores or guesses.

:func:`summarise_attack` turns one membership attack's scores of the audited rows, their
membership and the audit's settings into the attack's metrics (ROC, AUC, TPR at low FPR,
advantage, with intervals), its one-run ε and μ lower bounds (Steinke, Nasr, Jagielski's
ε; the f-DP μ of Mahloujifar, Melis, Chaudhuri over a guess ladder) and its heuristic ε / μ
bounds.
:func:`attribute_result` does the same for attribute guesses. The Python API
(:mod:`dpaudit.membership.pipeline`) and the audit kinds (:mod:`dpaudit.membership.verdict`)
both call them, so a bound is computed one way whichever path asked for it.

Nothing here imports torch: the scores are arrays.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.bounds import (
    EpsilonBound,
    MuBound,
    epsilon_lower_bound,
    mu_lower_bound,
    one_run_epsilon_lower_bound,
    one_run_guesses,
)
from dpaudit.bounds.fdp_one_run import guess_ladder, one_run_bounds, one_run_mu_ladder_bound
from dpaudit.errors import DpauditError, InsufficientTrialsError
from dpaudit.stats import ConfidenceInterval, clopper_pearson
from dpaudit.theory import dp_attribute_advantage_bound
from dpaudit.tradeoff import MembershipMetrics, membership_metrics

__all__ = [
    "DEFAULT_FPRS",
    "DEFAULT_GUESS_FRACTION",
    "RISKIEST_RECORDS",
    "AttackOutcome",
    "AttackScores",
    "AttributeAuditResult",
    "AttributeGuesses",
    "attack_seed",
    "attribute_result",
    "one_run_bound",
    "riskiest_records",
    "summarise_attack",
]

DEFAULT_FPRS: tuple[float, ...] = (0.1, 0.01, 0.001)
# Share of the audited rows guessed on by the one-run test, at each end of the score
# order (top = "member", bottom = "non-member"). It is fixed before the scores are seen,
# as Steinke, Nasr, Jagielski (2023) require: choosing it after looking at the scores
# would void the confidence level.
DEFAULT_GUESS_FRACTION = 0.05


def attack_seed(seed: int, position: int) -> int:
    """The seed of the attack at ``position``: adding an attack leaves the others' alone."""
    return int(np.random.SeedSequence([seed, 0xA77, position]).generate_state(1)[0])


@dataclass(frozen=True, repr=False)
class AttackScores:
    """One attack's raw scores of the audited rows (what a work unit stores).

    Attributes:
        attack: the attack's name; options: its options (and what it chose, if anything).
        scores: ``(m,)`` float64 scores, larger meaning "member".
        seconds: wall time of the scoring (a shared reference set's time for each of the
            attacks that read it).
        reference_set: the attack whose seed trained the reference set this attack read,
            or ``None`` for an attack that reads none.
    """

    attack: str
    options: dict[str, Any]
    scores: np.ndarray
    seconds: float
    reference_set: str | None = None


@dataclass(frozen=True, repr=False)
class AttackOutcome:
    """One membership attack's scores and what they show.

    Attributes:
        attack: the attack's registry name; options: its options.
        scores: ``(m,)`` scores of the audited rows (larger = "member").
        metrics: ROC summary (AUC, TPR at each FPR, advantage) with intervals.
        one_run: ε lower bound from the one-run test on the top / bottom scores (validity
            ``"rigorous-one-run"`` when membership was decided by fair coins, else
            ``"heuristic"``).
        one_run_mu: the f-DP μ lower bound of the same run, its number of guesses chosen
            over a ladder (:func:`dpaudit.bounds.fdp_one_run.one_run_mu_ladder_bound`; same
            validity rule), or ``None`` for an outcome built without it.
        epsilon_heuristic: ε lower bound treating audited rows as independent trials
            (validity ``"heuristic"``), or ``None`` when too few rows for any bound.
        mu_heuristic: the μ analogue, or ``None``.
        seconds: wall time of the attack (shadow / reference training included).
        notes: why a bound is missing, if one is.
    """

    attack: str
    options: dict[str, Any]
    scores: np.ndarray
    metrics: MembershipMetrics
    one_run: EpsilonBound
    epsilon_heuristic: EpsilonBound | None
    mu_heuristic: MuBound | None
    seconds: float
    notes: tuple[str, ...] = ()
    one_run_mu: MuBound | None = None

    def dp_region(self, epsilon: float, delta: float) -> list[dict[str, Any]]:
        """Check each TPR-at-FPR point against (ε, δ)-DP: TPR ≤ e^ε·FPR + δ.

        The check is conservative towards the claim: the TPR's lower confidence limit is
        compared with the limit at the FPR's upper confidence limit, so an ``inside=False``
        means the attack beat the DP region beyond the metrics' own uncertainty (both
        two-sided Clopper–Pearson at the metrics' confidence level; a descriptive check,
        the rigorous test is :attr:`one_run`).
        """
        rows = []
        for r in self.metrics.tpr_at_fpr:
            limit = min(1.0, math.exp(epsilon) * r.fpr_interval.high + delta)
            rows.append(
                {
                    "target_fpr": r.target_fpr,
                    "tpr_low": r.tpr_interval.low,
                    "fpr_high": r.fpr_interval.high,
                    "limit": limit,
                    "inside": bool(r.tpr_interval.low <= limit),
                }
            )
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "options": dict(self.options),
            "scores": [float(s) for s in self.scores],
            "metrics": self.metrics.to_dict(),
            "one_run": self.one_run.to_dict(),
            "one_run_mu": None if self.one_run_mu is None else self.one_run_mu.to_dict(),
            "epsilon_heuristic": (
                None if self.epsilon_heuristic is None else self.epsilon_heuristic.to_dict()
            ),
            "mu_heuristic": None if self.mu_heuristic is None else self.mu_heuristic.to_dict(),
            "seconds": self.seconds,
            "notes": list(self.notes),
        }

    def __repr__(self) -> str:
        tprs = ", ".join(f"{r.target_fpr:g}:{r.tpr:.3f}" for r in self.metrics.tpr_at_fpr)
        return (
            f"AttackOutcome(attack={self.attack!r}, auc={self.metrics.auc:.4f}, "
            f"tpr_at_fpr={{{tprs}}}, one_run_epsilon={self.one_run.value:.3f}, "
            f"seconds={self.seconds:.1f})"
        )


def one_run_bound(
    scores: np.ndarray,
    membership: np.ndarray,
    *,
    guesses_per_side: int,
    delta: float,
    confidence_level: float,
) -> EpsilonBound:
    """Steinke–Nasr–Jagielski one-run ε lower bound from membership scores.

    Guess "member" for the ``guesses_per_side`` highest scores and "non-member" for as many
    lowest ones, abstain on the rest, and count the correct guesses. Valid because every
    audited row was included by an independent fair coin and the scores never saw the
    coins. The guessing rule, ties included, is :func:`dpaudit.bounds.one_run_guesses`.

    References:
        Steinke, Nasr, Jagielski (2023), "Privacy Auditing with One (1) Training Run",
        NeurIPS, Algorithm 1 (guess on the top k+ and bottom k− scores) and Theorem 3.1.
    """
    guesses, correct = one_run_guesses(scores, membership, guesses_per_side=guesses_per_side)
    return one_run_epsilon_lower_bound(
        canaries=scores.size,
        guesses=guesses,
        correct=correct,
        delta=delta,
        confidence_level=confidence_level,
    )


def _one_run_bounds(
    scores: np.ndarray,
    membership: np.ndarray,
    *,
    guesses_per_side: int,
    delta: float,
    level: float,
    confidence_level: float,
    mu_tail: float | None,
) -> tuple[EpsilonBound, MuBound]:
    """The one-run ε (at ``level``) and μ bounds: one share split in halves when μ is held
    against an upper bound (``mu_tail`` given), else ε as before and μ at
    ``confidence_level`` (it takes no share)."""
    held = mu_tail is not None
    both = one_run_bounds(
        scores,
        membership,
        guesses=2 * guesses_per_side,
        delta=delta,
        confidence_level=level,
        with_mu=held,
        mu_tail=mu_tail or 0.0,
    )
    if both.mu is not None:
        return both.epsilon, both.mu
    mu = one_run_mu_ladder_bound(
        scores,
        membership,
        ladder=guess_ladder(scores.size, include=(both.epsilon.counts["guesses"],)),
        confidence_level=confidence_level,
    )
    return both.epsilon, dataclasses.replace(
        mu, details={**mu.details, "share": "none: reported, held against no upper bound"}
    )


def summarise_attack(
    scored: AttackScores,
    membership: np.ndarray,
    *,
    confidence_level: float,
    delta: float,
    seed: int,
    fprs: tuple[float, ...] = DEFAULT_FPRS,
    guess_fraction: float = DEFAULT_GUESS_FRACTION,
    one_run_level: float | None = None,
    by_coin: bool = True,
    mu_tail: float | None = None,
) -> AttackOutcome:
    """One attack's metrics, one-run bounds and heuristic bounds.

    The one-run ε and μ bounds read the same guesses' scores and coins. When ``mu_tail``
    is given (the μ bound is held against a μ upper bound, whose bracket has this tail δ),
    the two share ONE share of a budget: each is computed at 1 − (1 − c₁)/2, c₁ =
    ``one_run_level`` (Bonferroni), both are reported at c₁, and a verdict may count a
    violation of either (:func:`dpaudit.bounds.fdp_one_run.one_run_bounds`). Otherwise ε is
    computed at c₁ as before and μ, held against nothing, at ``confidence_level``.

    Args:
        scored: the attack's scores of the audited rows.
        membership: ``(m,)`` bool, whether each audited row trained the target.
        confidence_level: c of the metrics' intervals and of the heuristic bounds.
        delta: δ of the ε bounds.
        seed: seed of the heuristic bounds' split of the rows into a threshold-choosing
            half and a counting half.
        fprs: FPRs at which TPR is reported.
        guess_fraction: share of m guessed at each end by the one-run test (fixed before
            the scores are seen).
        one_run_level: confidence level of the one-run bound (default ``confidence_level``;
            an audit gives a bound that enters its verdict its share of the budget).
        by_coin: whether membership was decided by independent fair coins; without them
            the one-run theorem's premise fails and its bound is labelled heuristic.
        mu_tail: the tail δ of the μ bracket the one-run μ bound is held against, or
            ``None`` when it is held against none.

    Raises:
        DpauditError: a score is not finite.

    References:
        Steinke, Nasr, Jagielski (2023), "Privacy Auditing with One (1) Training Run",
        Theorem 3.1 (why fair coins make the one-run bound rigorous).
    """
    scores = scored.scores
    if not np.all(np.isfinite(scores)):
        raise DpauditError(
            f"The {scored.attack!r} attack returned {int((~np.isfinite(scores)).sum())} "
            "non-finite scores."
        )
    negatives, positives = scores[~membership], scores[membership]
    metrics = membership_metrics(negatives, positives, confidence_level=confidence_level, fprs=fprs)
    one_run, one_run_mu = _one_run_bounds(
        scores,
        membership,
        guesses_per_side=max(1, int(guess_fraction * scores.size)),
        delta=delta,
        level=confidence_level if one_run_level is None else one_run_level,
        confidence_level=confidence_level,
        mu_tail=mu_tail,
    )
    if not by_coin:
        # Without fair coins the one-run theorem's premise fails (Steinke et al. 2023,
        # §3): the same count is only a description of the attack.
        one_run = dataclasses.replace(one_run, validity="heuristic")
        one_run_mu = dataclasses.replace(one_run_mu, validity="heuristic")
    eps, mu, notes = _heuristic_bounds(
        negatives, positives, delta=delta, confidence_level=confidence_level, seed=seed
    )
    return AttackOutcome(
        attack=scored.attack,
        options=scored.options,
        scores=scores,
        metrics=metrics,
        one_run=one_run,
        one_run_mu=one_run_mu,
        epsilon_heuristic=eps,
        mu_heuristic=mu,
        seconds=scored.seconds,
        notes=tuple(notes),
    )


#: How many of the highest-scored audited rows a membership test lists (``records``).
RISKIEST_RECORDS = 10


def riskiest_records(
    scores: np.ndarray, membership: np.ndarray, *, top: int = RISKIEST_RECORDS
) -> dict[str, Any]:
    """The ``top`` audited rows with the highest attack scores, for the report.

    Each row carries its position among the audited rows, its score, whether it was in fact
    a member, and how many members and non-members score at least as high (ranked by score
    descending, ties by position). A high score is the attack's belief, not a proof that
    the row leaked: the counts of non-members at or above it say how often the attack is
    as confident about rows that never trained the target.

    Args:
        scores: ``(m,)`` finite scores of the audited rows (larger = "member").
        membership: ``(m,)`` bool, whether each audited row trained the target.
        top: how many rows to list (fewer when there are fewer rows).
    """
    scores = np.asarray(scores, dtype=np.float64)
    membership = np.asarray(membership, dtype=bool)
    order = np.argsort(-scores, kind="stable")[: max(0, int(top))]
    rows = []
    for i in order:
        at_or_above = scores >= scores[i]
        rows.append(
            {
                "row": int(i),
                "score": float(scores[i]),
                "member": bool(membership[i]),
                "members_at_or_above": int((at_or_above & membership).sum()),
                "non_members_at_or_above": int((at_or_above & ~membership).sum()),
            }
        )
    return {
        "rows": int(scores.size),
        "members": int(membership.sum()),
        "non_members": int((~membership).sum()),
        "top": rows,
    }


def _heuristic_bounds(
    negatives: np.ndarray,
    positives: np.ndarray,
    *,
    delta: float,
    confidence_level: float,
    seed: int,
) -> tuple[EpsilonBound | None, MuBound | None, list[str]]:
    """ε and μ lower bounds that treat the audited rows as independent trials.

    Rows share one trained model, so their outcomes are not independent trials: the
    Clopper–Pearson bounds are descriptive only (validity "heuristic"). A bound that too
    few rows cannot give is ``None``, with a note saying why.
    """
    notes: list[str] = []
    kw: dict[str, Any] = {
        "confidence_level": confidence_level,
        "threshold": "split",
        "seed": seed,
        "validity": "heuristic",
    }
    eps: EpsilonBound | None = None
    mu: MuBound | None = None
    try:
        eps = epsilon_lower_bound(negatives, positives, delta=delta, **kw)
    except InsufficientTrialsError as exc:
        notes.append(f"heuristic epsilon: {exc}")
    try:
        mu = mu_lower_bound(negatives, positives, **kw)
    except InsufficientTrialsError as exc:
        notes.append(f"heuristic mu: {exc}")
    return eps, mu, notes


# -------------------------------------------------------------------------- attribute


@dataclass(frozen=True, repr=False)
class AttributeGuesses:
    """The attack's raw output on a target: what an attribute work unit stores.

    Attributes:
        dataset: dataset name; sensitive: the sensitive column; values: its candidates.
        guesses: ``(m,)`` guessed candidate index; truth: ``(m,)`` true index.
        membership: the coins; prior: the attacker's prior over candidates.
    """

    dataset: str
    sensitive: str
    values: tuple[Any, ...]
    guesses: np.ndarray
    truth: np.ndarray
    membership: np.ndarray
    prior: np.ndarray


@dataclass(frozen=True, repr=False)
class AttributeAuditResult:
    """Attribute inference on a target: accuracies, advantage, and the DP bound.

    Attributes:
        sensitive: the sensitive column's name; values: its candidate values.
        accuracy_members / accuracy_non_members: the attack's accuracy on each group, with
            two-sided Clopper–Pearson intervals (``*_interval``).
        accuracy_baseline: accuracy of always guessing the prior's mode, on all audited
            rows, with its interval.
        advantage: accuracy on members − accuracy on non-members; its interval combines
            the two rates' intervals at 1 − (1 − c)/2 each (union bound).
        guesses: ``(m,)`` guessed candidate index; truth: ``(m,)`` true index.
        membership: the coins.
        prior: the attacker's prior over candidates (from the population).
        accountant_epsilon: the target's ε at ``delta`` (``None`` without DP).
        dp_bound: :func:`dpaudit.theory.dp_attribute_advantage_bound` at that ε, or ``None``.

    The intervals treat rows as independent Bernoulli trials, which they are not (they
    share one model): like the membership metrics, they are descriptive.
    """

    dataset: str
    sensitive: str
    values: tuple[Any, ...]
    accuracy_members: float
    accuracy_members_interval: ConfidenceInterval
    accuracy_non_members: float
    accuracy_non_members_interval: ConfidenceInterval
    accuracy_baseline: float
    accuracy_baseline_interval: ConfidenceInterval
    advantage: float
    advantage_interval: ConfidenceInterval
    guesses: np.ndarray
    truth: np.ndarray
    membership: np.ndarray
    prior: np.ndarray
    accountant_epsilon: float | None
    dp_bound: dict[str, float] | None
    confidence_level: float
    delta: float
    seed: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "attribute",
            "dataset": self.dataset,
            "sensitive": self.sensitive,
            "values": list(self.values),
            "accuracy_members": self.accuracy_members,
            "accuracy_members_interval": list(self.accuracy_members_interval),
            "accuracy_non_members": self.accuracy_non_members,
            "accuracy_non_members_interval": list(self.accuracy_non_members_interval),
            "accuracy_baseline": self.accuracy_baseline,
            "accuracy_baseline_interval": list(self.accuracy_baseline_interval),
            "advantage": self.advantage,
            "advantage_interval": list(self.advantage_interval),
            "guesses": [int(g) for g in self.guesses],
            "truth": [int(t) for t in self.truth],
            "membership": [bool(b) for b in self.membership],
            "prior": [float(p) for p in self.prior],
            "accountant_epsilon": self.accountant_epsilon,
            "dp_bound": None if self.dp_bound is None else dict(self.dp_bound),
            "confidence_level": self.confidence_level,
            "delta": self.delta,
            "seed": self.seed,
            "seconds": self.seconds,
        }

    def __repr__(self) -> str:
        return (
            f"AttributeAuditResult(sensitive={self.sensitive!r}, "
            f"accuracy_members={self.accuracy_members:.3f}, "
            f"accuracy_non_members={self.accuracy_non_members:.3f}, "
            f"accuracy_baseline={self.accuracy_baseline:.3f}, advantage={self.advantage:.3f}, "
            f"advantage_interval=({self.advantage_interval.low:.3f}, "
            f"{self.advantage_interval.high:.3f}), accountant_epsilon={self.accountant_epsilon})"
        )


def attribute_result(
    g: AttributeGuesses,
    *,
    confidence_level: float,
    delta: float,
    accountant_epsilon: float | None,
    seed: int,
    seconds: float = 0.0,
) -> AttributeAuditResult:
    """Accuracies, advantage and intervals of attribute guesses (no model needed)."""
    c = confidence_level
    coins, truth, prior = g.membership, g.truth, g.prior
    correct = g.guesses == truth
    k_in, n_in = int(correct[coins].sum()), int(coins.sum())
    k_out, n_out = int(correct[~coins].sum()), int((~coins).sum())
    baseline_correct = int((truth == int(np.argmax(prior))).sum())
    joint = 1.0 - (1.0 - c) / 2.0  # union bound over the two accuracies
    in_joint = clopper_pearson(k_in, n_in, confidence_level=joint)
    out_joint = clopper_pearson(k_out, n_out, confidence_level=joint)
    eps = accountant_epsilon
    return AttributeAuditResult(
        dataset=g.dataset,
        sensitive=g.sensitive,
        values=g.values,
        accuracy_members=k_in / n_in,
        accuracy_members_interval=clopper_pearson(k_in, n_in, confidence_level=c),
        accuracy_non_members=k_out / n_out,
        accuracy_non_members_interval=clopper_pearson(k_out, n_out, confidence_level=c),
        accuracy_baseline=baseline_correct / truth.size,
        accuracy_baseline_interval=clopper_pearson(
            baseline_correct, truth.size, confidence_level=c
        ),
        advantage=k_in / n_in - k_out / n_out,
        advantage_interval=ConfidenceInterval(
            max(-1.0, in_joint.low - out_joint.high), min(1.0, in_joint.high - out_joint.low)
        ),
        guesses=g.guesses,
        truth=truth,
        membership=coins.copy(),
        prior=prior,
        accountant_epsilon=eps,
        dp_bound=None if eps is None else dp_attribute_advantage_bound(eps, delta),
        confidence_level=c,
        delta=delta,
        seed=seed,
        seconds=seconds,
    )
