"""Inserted secrets and their candidate spaces, for canary exposure (Carlini et al., "The
Secret Sharer", USENIX Security 2019, arXiv:1802.08232, §3–4).

A secret format is a text with one random digit per ``#`` ("my number is # # # # #"):
its candidate space R is every filling of the ``#`` by digits, |R| = 10^d. Secrets are
drawn uniformly from R (seeded) and put in the training set; afterwards every candidate
of R (or a uniform sample of it, when R is too large to enumerate) is scored by the
trained model's log-probability (:func:`dpaudit.language.scoring.total_log_probs`), and
:mod:`dpaudit.bounds.exposure` ranks each secret among them.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "SECRET_DIGIT",
    "candidate_digits",
    "draw_secrets",
    "fill",
    "format_words",
]

#: The placeholder of one random digit in a secret format.
SECRET_DIGIT = "#"


def format_words(secret_format: str) -> list[str]:
    """The words a word-level vocabulary needs for the format: its words other than the
    digit places, then the ten digits."""
    words = [w for w in secret_format.split() if SECRET_DIGIT not in w]
    return [*dict.fromkeys(words), *"0123456789"]


def fill(secret_format: str, digits: str) -> str:
    """The format with its ``#`` replaced, in order, by ``digits``."""
    parts = secret_format.split(SECRET_DIGIT)
    if len(digits) != len(parts) - 1:
        raise ValueError(f"{secret_format!r} has {len(parts) - 1} digit places; got {digits!r}")
    return "".join(p + d for p, d in zip(parts, [*digits, ""], strict=True))


def _as_digits(numbers: np.ndarray, places: int) -> list[str]:
    return [str(int(n)).zfill(places) for n in numbers]


def draw_secrets(secret_format: str, count: int, *, seed: int) -> list[str]:
    """``count`` secrets' digits, each drawn uniformly from the 10^d fillings (seeded)."""
    places = secret_format.count(SECRET_DIGIT)
    rng = np.random.default_rng([seed, 0x5EC])
    return _as_digits(rng.integers(0, 10**places, size=count), places)


def candidate_digits(secret_format: str, *, limit: int, seed: int) -> tuple[list[str], bool]:
    """The candidates a secret is ranked against.

    Returns:
        Every filling of the format, in numeric order, and ``True`` when |R| ≤ ``limit``
        (the rank is exact); otherwise ``limit`` fillings drawn uniformly with
        replacement (seeded) and ``False`` (the rank is estimated).
    """
    places = secret_format.count(SECRET_DIGIT)
    size = 10**places
    if size <= limit:
        return _as_digits(np.arange(size), places), True
    rng = np.random.default_rng([seed, 0xCA2D])
    return _as_digits(rng.integers(0, size, size=limit), places), False
