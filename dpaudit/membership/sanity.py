"""Is a target fit to be attacked? Its accuracy on its own members says.

A model answers its own training rows at least as well as a constant guess of their most
common label: training minimises a loss on exactly those rows. A target that does not is
not being queried as it was trained (a brought model given raw features it was trained to
see standardised, columns in another order, a missing ``[target] preprocess``), or it
learned nothing. Attacks on it measure how it answers inputs it was never meant to see,
not what it leaks, so a release gate must not read their low scores as privacy.

:func:`accuracy_problem` decides, from the accuracies a unit stored
(:func:`dpaudit.membership.scoring.target_accuracy`), whether a target fails the check;
:mod:`dpaudit.membership.verdict` then names it in a warning and, for a brought target,
withholds its tests (a target dpaudit trained is queried exactly as it was trained: its
tests stand).

Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping

from dpaudit.sections import ACCURACY_SHORTFALL

__all__ = ["accuracy_line", "accuracy_problem"]


def accuracy_problem(accuracy: Mapping[str, float], *, reported: float | None) -> str | None:
    """Why a target's accuracy on its members shows it is not queried as it was trained.

    Args:
        accuracy: ``members`` (its accuracy on the rows that trained it) and
            ``majority_class`` (the share of those rows holding their most common label),
            as :func:`dpaudit.membership.scoring.target_accuracy` computes them.
        reported: the accuracy its training reported on its training rows
            (``[target] training_accuracy``), or ``None``.

    Returns:
        A clause naming the accuracy and what it fails (at or below the majority-class
        rate; more than :data:`~dpaudit.sections.ACCURACY_SHORTFALL` below ``reported``),
        or ``None`` when it fails neither. Units stored before the majority-class rate was
        recorded are checked against ``reported`` only.
    """
    members = accuracy["members"]
    majority = accuracy.get("majority_class")
    if majority is not None and members <= majority:
        return (
            f"its accuracy on its own members is {members:.3f}, at or below their "
            f"majority-class rate {majority:.3f} (always guessing the most common label "
            "does as well)"
        )
    if reported is not None and members < reported - ACCURACY_SHORTFALL:
        return (
            f"its accuracy on its own members is {members:.3f}, more than "
            f"{ACCURACY_SHORTFALL:g} below the {reported:.3f} its training reported "
            "([target] training_accuracy)"
        )
    return None


def accuracy_line(accuracy: Mapping[str, float]) -> str:
    """The accuracies in words: ``"members 0.920, non-members 0.610, held-out 0.640
    (majority class 0.678)"``."""
    parts = [f"members {accuracy['members']:.3f}", f"non-members {accuracy['non_members']:.3f}"]
    if "held_out" in accuracy:
        parts.append(f"held-out {accuracy['held_out']:.3f}")
    line = ", ".join(parts)
    if "majority_class" in accuracy:
        line += f" (majority class {accuracy['majority_class']:.3f})"
    return line
