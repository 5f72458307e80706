"""The list experiment (item count technique) of a sensitive survey question, for
`audits/list-experiment.toml`.

A survey asks n respondents a sensitive yes/no question without asking it directly. The
respondents are split at random into two groups of equal size (a uniformly random
permutation; the treatment group takes ⌊n/2⌋ of them). Each respondent of the CONTROL
group is shown k non-sensitive items and reports only HOW MANY apply to them; each
respondent of the TREATMENT group is shown the same k items plus the sensitive one and
reports how many of the k + 1 apply. The survey releases the difference of the groups'
mean counts, an unbiased estimate of the share of "yes" answers to the sensitive item.
The only randomness is the split: no noise is added.

Data: one vector per dataset, two numbers per respondent, ``[c_1, s_1, c_2, s_2, ...]``:
``c_i`` ∈ {0, …, k} is how many non-sensitive items apply to respondent i and ``s_i`` ∈
{0, 1} the answer to the sensitive item. The audit's two neighbouring datasets differ in
ONE respondent's sensitive answer (replace-one).

Does this satisfy DP? When the changed respondent lands in the control group (probability
1/2 here) the release is the same under both datasets, and when it lands in the treatment
group the difference of means moves by exactly 1/⌊n/2⌋. If every other respondent answers
alike, the release under D is one value and under D′ it is another value with probability
1/2: no ε satisfies (ε, δ)-DP for δ < 1/2. The audit measures a finite-sample lower bound
ε_LB that grows with the number of trials; :func:`answer` says in words what it proves.

Protocol: ``fn(data, *, rng, size)`` returns ``size`` independent releases.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["answer", "difference_of_means", "list_experiment"]


def _respondents(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    values = np.asarray(data, dtype=np.float64).reshape(-1)
    if values.size < 4 or values.size % 2:
        raise ValueError(
            "The list experiment's data is [c_1, s_1, c_2, s_2, ...]: two numbers per "
            f"respondent and at least 2 respondents. Got {values.size} numbers."
        )
    counts, sensitive = values[0::2], values[1::2]
    if not np.all(np.isin(sensitive, (0.0, 1.0))):
        raise ValueError(f"Each sensitive answer s_i must be 0 or 1. Got {sensitive.tolist()}.")
    if np.any(counts < 0) or np.any(counts != np.round(counts)):
        raise ValueError(f"Each count c_i must be a whole number >= 0. Got {counts.tolist()}.")
    return counts, sensitive


def difference_of_means(
    counts: np.ndarray, sensitive: np.ndarray, treated: np.ndarray
) -> np.ndarray:
    """The released statistic for each row of a ``(size, n)`` boolean treatment mask.

    A treated respondent reports c_i + s_i, a control respondent c_i; the release is the
    treatment group's mean report minus the control group's.
    """
    reports = counts[None, :] + treated * sensitive[None, :]
    n_treated = treated.sum(axis=1)
    n_control = treated.shape[1] - n_treated
    treated_mean = (reports * treated).sum(axis=1) / n_treated
    control_mean = (reports * ~treated).sum(axis=1) / n_control
    result: np.ndarray = treated_mean - control_mean
    return result


def list_experiment(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` releases of the list experiment on ``data`` (a fresh random split each)."""
    counts, sensitive = _respondents(data)
    n = counts.size
    # A uniformly random split into ⌊n/2⌋ treated and the rest in control: the ranks of
    # i.i.d. uniforms are a uniformly random permutation.
    ranks = np.argsort(rng.random((size, n)), axis=1)
    treated = ranks < n // 2
    return difference_of_means(counts, sensitive, treated)


def answer(epsilon_lower_bound: float, *, confidence_level: float, delta: float) -> str:
    """The slide's question "does this satisfy DP?" answered from the audit's bound.

    A lower bound ε_LB on ε at confidence c means: with probability at least c over the
    audit's trials, the mechanism is NOT (ε, δ)-DP for any ε < ε_LB. It can never prove
    that a mechanism IS DP.
    """
    if not math.isfinite(epsilon_lower_bound) or epsilon_lower_bound < 0:
        raise ValueError(f"An ε lower bound is finite and >= 0. Got {epsilon_lower_bound}.")
    if epsilon_lower_bound == 0.0:
        return (
            "Does this satisfy DP? The audit found no evidence against any ε (lower bound "
            "0); that does not prove the list experiment is DP."
        )
    return (
        f"Does this satisfy DP? No, not at any ε below {epsilon_lower_bound:.3g}: with "
        f"confidence {confidence_level:g}, the list experiment is not (ε, δ = {delta:g})-DP "
        f"for any ε < {epsilon_lower_bound:.3g}. It adds no noise, so the bound only grows "
        "with more trials: it is not ε-DP for any finite ε at this δ."
    )
