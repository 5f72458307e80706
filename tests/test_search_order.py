"""Neighbour search: the ONE selected pair is certified at the whole confidence level, and
the better order of a pair is found with no option (:mod:`dpaudit.mechanisms.search`).

Screening runs on trials of its own stream, so choosing a pair spends nothing: with
``audit_pairs = 1`` the audited pair's bound is exactly the bound of an ordinary audit of
that pair on the same fresh trials at the verdict's level c (not 1 − (1 − c)/K for K
screened candidates), however many candidates were screened. And a bug that shows only
when D and D' are swapped (a one-sided threshold on a score that D' makes SMALLER) is
found: the scalar score's screening tries both orders and audits the better one, and
the learned score learns the direction.
"""

from __future__ import annotations

import numpy as np

from dpaudit.mechanisms.search import (
    _STREAM_AUDIT,
    _callable_mechanism,
    _fresh_trials,
    audit_pair,
    search_audit,
)

CLAIM = 1.0
SHIFT = 3.0  # Laplace(scale 1) moved by 3: exactly 3-DP, claimed 1-DP


def shrinks(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """Laplace(3·x₀, 1): replacing the record 1 by 0 makes every output smaller."""
    return SHIFT * float(np.asarray(data).reshape(-1)[0]) + rng.laplace(0.0, 1.0, size)


def _search(*, learned: bool, audit_pairs: int = 1, data: tuple[float, ...] = (1.0,)):
    return search_audit(
        shrinks,
        data=list(data),
        neighbours="records",
        values=[0, 1],
        relation="replace-one",
        claim_epsilon=CLAIM,
        screen_trials=400,
        trials=6_000,
        audit_pairs=audit_pairs,
        learned=learned,
        seed=3,
    )


def test_a_bug_shown_only_in_the_reverse_order_is_found_with_no_option() -> None:
    # the only candidate is D = [1], D' = [0]: D' gives the smaller outputs
    forward_only = _search(learned=False)
    (screened,) = forward_only.screening.screened
    assert screened.candidate.label == "replace-0=0 reversed"
    pair = forward_only.worst.candidate
    assert (pair.d, pair.d_prime) == ((0.0,), (1.0,))  # audited as D' = [1]
    assert forward_only.violation
    # the same fresh trials in the given order: the event "output ≥ t" sees nothing
    make = _callable_mechanism(shrinks, "shrinks")
    neg, pos = _fresh_trials(make(pair.reversed()), False, 6_000, [3, _STREAM_AUDIT, 0, 0])
    given = audit_pair(pair.reversed(), neg, pos, learned=False, level=0.95, seed=3)
    assert given.epsilon.value < CLAIM < forward_only.worst.epsilon.value
    # the default, a learned score, learns the direction in the given order
    default = _search(learned=True)
    assert default.violation
    assert default.worst.candidate.label == "replace-0=0"
    # a valid bound stays below the true ε = 3
    assert max(forward_only.worst.epsilon.value, default.worst.epsilon.value) < SHIFT


def test_one_audited_pair_costs_one_comparison_however_many_were_screened() -> None:
    for data in ((1.0,), (1.0, 0.0, 1.0, 1.0)):  # 1 and 4 candidates screened (both orders)
        result = _search(learned=True, data=data)
        assert len(result.screening.screened) == len(data)
        (audited,) = result.pairs
        assert audited.epsilon.confidence_level == 0.95
        assert audited.mu.confidence_level == 0.95
        # bit for bit the ordinary audit of that one pair on the same fresh trials at c
        make = _callable_mechanism(shrinks, "shrinks")
        neg, pos = _fresh_trials(make(audited.candidate), True, 6_000, [3, _STREAM_AUDIT, 0, 0])
        alone = audit_pair(audited.candidate, neg, pos, learned=True, level=0.95, seed=3)
        assert alone.epsilon.value == audited.epsilon.value
        assert alone.mu.value == audited.mu.value
    # k = 2 pays the Bonferroni share: each pair at 1 − 0.05/2
    two = _search(learned=True, audit_pairs=2, data=(1.0, 0.0))
    assert [p.epsilon.confidence_level for p in two.pairs] == [0.975, 0.975]
