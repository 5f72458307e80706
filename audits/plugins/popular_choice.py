"""Release the most popular answer of a survey with the exponential mechanism, for
`audits/exponential-mechanism*.toml`.

Each record is one respondent's answer, a category in 0..4. The mechanism releases a
category r with probability ∝ exp(ε·u(r)/(2Δ)), u(r) the number of respondents who gave
r, Δ = 1 the sensitivity of every u(r) when one respondent changes their answer: ε-DP
(McSherry, Talwar 2007; Dwork, Roth 2014, Thm. 3.10). Changing an answer moves two
utilities in OPPOSITE directions (one count falls, another rises), which is what the 2
in 2Δ pays for.

``popular_choice_unhalved`` is the bug a DP library shipped in its own words: the
scores are scaled by ε/Δ instead of ε/(2Δ). It is only 2ε-DP in general. On the pair of
the audit files (four answers 1 in D; the last one changed to 0 in D') its exact ε at
δ = 1e-5 is 1.820 where the correct mechanism's is 0.721, both against the claimed
ε = 1 (the two output laws are in ``tests/test_exponential_mechanism.py``).

Protocol: ``fn(data, *, rng, size)`` returns ``size`` independent releases on ``data``.
"""

from __future__ import annotations

import numpy as np

#: Answers a respondent may give: 0, 1, ..., CATEGORIES − 1.
CATEGORIES = 5
#: The ε the mechanism is calibrated to, and the sensitivity of each count.
EPSILON = 1.0
SENSITIVITY = 1.0


def release_probabilities(data: np.ndarray, *, scale: float) -> np.ndarray:
    """P[release r] ∝ exp(scale·u(r)), u(r) the count of answer r in ``data``."""
    answers = np.asarray(data, dtype=float).reshape(-1)
    if answers.size == 0 or np.any(answers != np.round(answers)):
        raise ValueError(f"answers must be whole categories in 0..{CATEGORIES - 1}")
    if answers.min() < 0 or answers.max() >= CATEGORIES:
        raise ValueError(f"answers must be whole categories in 0..{CATEGORIES - 1}")
    counts = np.bincount(answers.astype(np.int64), minlength=CATEGORIES)
    logits = scale * counts
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


def popular_choice(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """The exponential mechanism as published: scores scaled by ε/(2Δ)."""
    p = release_probabilities(data, scale=EPSILON / (2.0 * SENSITIVITY))
    return rng.choice(CATEGORIES, size=size, p=p).astype(float)


def popular_choice_unhalved(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """The bug: scores scaled by ε/Δ, the factor ½ dropped."""
    p = release_probabilities(data, scale=EPSILON / SENSITIVITY)
    return rng.choice(CATEGORIES, size=size, p=p).astype(float)
