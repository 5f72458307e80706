"""``score = "auto"`` (the default): which score a mechanism audit counts, and why.

A bound is valid for any score fixed independently of the trials it counts, so the choice
is about power only, and it is made from the audit file alone, before any output is read:

- a **built-in** mechanism is scored by its exact log-likelihood ratio (for scalar
  Laplace and Gaussian noise the output itself, a monotone function of it): by the
  Neyman–Pearson lemma no score gives a better test of the pair;
- a user mechanism with ``log_density`` is scored by the exact log-likelihood ratio of
  the two densities it gives;
- any other user mechanism by a **learned** score (:mod:`dpaudit.mechanisms.learned`,
  fitted on a share of the trials that is never counted), whose learner ``auto`` counts
  each output value when the outputs take few distinct values (a small discrete support:
  the estimated likelihood ratio of each value) and fits an additive logistic model
  otherwise. A user's scalar output is never its own score by default: an exponential
  mechanism's output is an index, whose order says nothing about which input it favours;
- under ``[audit] stopping = "sequential"`` the rounds count one score fixed before
  round 1, so a user mechanism without ``log_density`` is scored by its output (a learned
  score would need a fitting share of its own).

An explicit ``score`` (``"learned"``, ``"floating"`` or ``"pkg.module:function"``) is used
as given. The choice is recorded in the test's ``score`` key of ``results.json`` and said in
the report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpaudit.mechanisms.schema import AUTO, FLOATING, LEARNED, MechanismSection


@dataclass(frozen=True)
class ScoreChoice:
    """The score an audit counts and why.

    Attributes:
        requested: What the audit file asked for (``"auto"`` when it gave no ``score``).
        score: The ``[mechanism] score`` the audit runs with: ``None`` (the mechanism's
            own score), ``"learned"``, ``"floating"`` or ``"pkg.module:function"``.
        method: ``exact-likelihood-ratio``, ``output``, ``learned``, ``floating`` or
            ``user-score``.
        why: The reason, in words.
    """

    requested: str
    score: str | None
    method: str
    why: str

    def to_dict(self, *, learner: str | None = None) -> dict[str, Any]:
        """The test's ``score`` key; ``learner``: the learner a learned score resolved to."""
        chosen = self.method if learner is None else f"{self.method} ({learner})"
        return {
            "requested": self.requested,
            "chosen": chosen,
            "why": self.why,
            "summary": f"score = {self.requested!r} → {chosen}: {self.why}",
        }


def choose_score(section: MechanismSection, *, sequential: bool) -> ScoreChoice:
    """The score of ``section`` (see the module docstring), from the audit file alone."""
    requested = section.score if section.score not in (None, AUTO) else AUTO
    if requested == LEARNED:
        return ScoreChoice(requested, LEARNED, "learned", "set in the audit file")
    if requested == FLOATING:
        return ScoreChoice(requested, FLOATING, "floating", "set in the audit file")
    if requested != AUTO:
        return ScoreChoice(requested, requested, "user-score", "set in the audit file")
    if ":" not in section.name:
        return ScoreChoice(
            AUTO,
            None,
            "exact-likelihood-ratio",
            f"{section.name!r} is built in, so its exact log-likelihood ratio is known (the "
            "most powerful score, Neyman–Pearson)",
        )
    if section.log_density is not None:
        return ScoreChoice(
            AUTO,
            None,
            "exact-likelihood-ratio",
            "the mechanism gives its log density, so its outputs are scored by the exact "
            "log-likelihood ratio",
        )
    if sequential:
        return ScoreChoice(
            AUTO,
            None,
            "output",
            "sequential rounds count one score fixed before round 1, and a user mechanism "
            "without 'log_density' has no other; give 'log_density' or a score "
            "'pkg.module:function' for a stronger test",
        )
    return ScoreChoice(
        AUTO,
        LEARNED,
        "learned",
        "a user mechanism without 'log_density': a distinguisher is fitted on a share of the "
        "trials that is never counted (learner 'auto': each output's count for a small "
        "discrete support, else an additive logistic model)",
    )


def resolved(section: MechanismSection, *, sequential: bool) -> MechanismSection:
    """``section`` with ``score`` set to what :func:`choose_score` chose (``auto`` gone)."""
    choice = choose_score(section, sequential=sequential)
    if choice.score == section.score:
        return section
    return section.model_copy(update={"score": choice.score})
