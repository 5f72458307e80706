"""What a perfect distinguisher could certify with a given number of trials.

An audit's lower bound is limited twice: by its attack (the score) and by its trials (the
Clopper–Pearson limits). For a mechanism whose likelihood ratio is known, the first limit
can be removed: an oracle that scores by the exact log-likelihood ratio (the
Neyman–Pearson optimal test) and knows the best threshold in advance needs no selection
split. Counting, at that threshold, exactly the expected number of errors out of ``trials``
per hypothesis, and putting the audit's Clopper–Pearson limits on those counts, gives the
bound that a typical audit of that size could at best certify — the yardstick against
which an audit's own bound is read ("tightness at this budget").

The exact rates come from a large simulation of the likelihood ratio (10⁷ draws per
hypothesis make their sampling error negligible next to the limits at 10⁵ trials).

Pure functions of arrays; no I/O.

References:
    Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini, Terzis 2023, "Tight
    Auditing of Differentially Private Machine Learning" (USENIX Security), Sec. 3 (the
    ε a perfect distinguisher can certify from finitely many trials).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpaudit.bounds import epsilon_from_rates, mu_from_rates
from dpaudit.errors import check_choice, check_in_interval, check_integer
from dpaudit.stats import check_confidence_level, clopper_pearson_upper
from dpaudit.tradeoff import as_scores

__all__ = ["IdealBound", "ideal_for_mechanism", "ideal_lower_bound"]

#: Candidate thresholds scanned (quantiles of the pooled exact scores; atoms included).
_CANDIDATES = 4096


@dataclass(frozen=True)
class IdealBound:
    """The bound a perfect distinguisher certifies at its best threshold.

    Attributes:
        value: the ε (or μ) lower bound at the expected counts.
        parameter: ``"epsilon"`` or ``"mu"``.
        trials: counted trials per hypothesis.
        confidence_level: c; each rate's limit is one-sided at (1 − c)/2.
        delta: δ of the ε bound (0 for μ).
        threshold: the best threshold on the exact log-likelihood ratio.
        fpr: exact false-positive rate at that threshold.
        fnr: exact false-negative rate at that threshold.
    """

    value: float
    parameter: str
    trials: int
    confidence_level: float
    delta: float
    threshold: float
    fpr: float
    fnr: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def ideal_lower_bound(
    negative_llr: Any,
    positive_llr: Any,
    *,
    trials: int,
    delta: float = 0.0,
    confidence_level: float = 0.95,
    parameter: str = "epsilon",
) -> IdealBound:
    """The best bound at ``trials`` per hypothesis from the exact likelihood-ratio test.

    Args:
        negative_llr: a large sample of the log-likelihood ratio under D (H0).
        positive_llr: the same under D' (H1); larger means "D'".
        trials: trials per hypothesis the oracle counts (an audit with
            ``threshold = "split"`` counts half of its trials).
        delta: δ of the ε bound.
        confidence_level: c, split as in the audit: (1 − c)/2 per rate.
        parameter: ``"epsilon"`` or ``"mu"``.

    Returns:
        :class:`IdealBound`.
    """
    check_choice("parameter", parameter, ("epsilon", "mu"))
    c = check_confidence_level(confidence_level)
    d = check_in_interval("delta", delta, 0.0, 1.0, high_open=True)
    trials = check_integer("trials", trials, low=1)
    neg = np.sort(as_scores("negative_llr", negative_llr))
    pos = np.sort(as_scores("positive_llr", positive_llr))
    pooled = np.concatenate([neg, pos])
    cand = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, _CANDIDATES), method="nearest"))
    fpr = (neg.size - np.searchsorted(neg, cand, side="left")) / neg.size
    fnr = np.searchsorted(pos, cand, side="left") / pos.size
    level = 1.0 - (1.0 - c) / 2.0  # the audit's union bound over the two rates
    # expected counts, rounded: the audit that sees exactly its expected errors
    fpr_hi = clopper_pearson_upper(np.rint(fpr * trials).astype(int), trials, level=level)
    fnr_hi = clopper_pearson_upper(np.rint(fnr * trials).astype(int), trials, level=level)
    if parameter == "epsilon":
        values = epsilon_from_rates(fpr_hi, fnr_hi, delta=d)
    else:
        values = mu_from_rates(fpr_hi, fnr_hi)
    i = int(np.argmax(values))
    return IdealBound(
        value=float(values[i]),
        parameter=parameter,
        trials=trials,
        confidence_level=c,
        delta=d if parameter == "epsilon" else 0.0,
        threshold=float(cand[i]),
        fpr=float(fpr[i]),
        fnr=float(fnr[i]),
    )


class _Runs(Protocol):
    def run(self, neighbour: int, *, rng: np.random.Generator, size: int) -> np.ndarray: ...


def ideal_for_mechanism(
    mechanism: _Runs,
    *,
    trials: int,
    draws: int = 10_000_000,
    seed: int = 0,
    delta: float = 0.0,
    confidence_level: float = 0.95,
    parameter: str = "epsilon",
) -> IdealBound:
    """:func:`ideal_lower_bound` for a mechanism whose outputs ARE its exact
    log-likelihood ratio (the vector and local built-ins of :mod:`dpaudit.mechanisms.noise`).

    Args:
        mechanism: anything with ``run(neighbour, rng=..., size=...)``.
        trials: trials per hypothesis the oracle counts.
        draws: simulated draws per hypothesis (in chunks of 10⁶).
        seed: seed of the simulation.
        delta, confidence_level, parameter: as in :func:`ideal_lower_bound`.
    """
    draws = check_integer("draws", draws, low=2)
    rng = np.random.default_rng(seed)
    chunks = [min(1_000_000, draws - i) for i in range(0, draws, 1_000_000)]
    neg = np.concatenate([mechanism.run(0, rng=rng, size=n) for n in chunks])
    pos = np.concatenate([mechanism.run(1, rng=rng, size=n) for n in chunks])
    return ideal_lower_bound(
        neg,
        pos,
        trials=trials,
        delta=delta,
        confidence_level=confidence_level,
        parameter=parameter,
    )
