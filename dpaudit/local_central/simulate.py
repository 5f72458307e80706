"""Local versus central DP for the same query: closed-form and simulated error.

Two queries over n records, each answered at privacy ε in two ways:

* **mean of bits** (x_i ∈ {0, 1}, the query is x̄ = (1/n)Σx_i). Locally, every record
  goes through binary randomised response (truth with probability p = e^ε/(1 + e^ε)),
  and the server inverts the randomiser: x̂ = (ȳ − (1 − p))/(2p − 1), unbiased. At
  ε = ln 3 (p = 3/4: answer truthfully on heads, else a second fair coin) this is the
  founding blog's p̂ = 2(P̂[yes] − 1/4). Centrally, a trusted curator releases
  (Σx_i + Lap(1/ε))/n.
* **histogram over k bins** (the frequencies f_j = c_j/n). Locally, k-ary randomised
  response or (optimised) unary encoding, with the unbiased frequency estimator
  f̂_j = (C_j/n − q)/(p − q) (C_j: how many reports name bin j, or have bit j set).
  Centrally, the counts plus Lap(2/ε) each, divided by n.

Neighbouring datasets differ by REPLACING one record, as in local DP (where any two
records are neighbours) and with n public: the count of ones then moves by at most 1 and
a histogram by at most 2 in ℓ1, hence the Laplace scales 1/ε and 2/ε.

Closed forms (all estimators are unbiased, so RMSE = standard deviation):

* local mean: every report is a Bernoulli with P[y_i = 1] ∈ {1 − p, p}, variance
  p(1 − p) whatever x_i, so Var x̂ = p(1 − p)/(n(2p − 1)²) = e^ε/(n(e^ε − 1)²);
* central mean: Var = 2/(nε)² (Laplace with scale b has variance 2b²);
* their ratio, exactly: RMSE_local/RMSE_central = √n · ε e^{ε/2}/(√2 (e^ε − 1))
  = √n · (ε/2)/(√2 sinh(ε/2)), which tends to √(n/2) as ε → 0: the local error is larger
  by a factor of order √n;
* local frequency j (k-RR or unary encoding with their (p, q)):
  Var f̂_j = [f_j p(1 − p) + (1 − f_j) q(1 − q)]/(n(p − q)²)
  = q(1 − q)/(n(p − q)²) + f_j(1 − p − q)/(n(p − q)) (the count C_j is a sum of
  independent Bernoullis with success p for the n f_j records in bin j, q for the rest);
  the histogram's RMSE is the root of the mean over the k bins;
* central frequency: Var f̂_j = 8/(nε)².

References:
    Warner 1965, "Randomized response" (JASA 60(309)), the binary randomiser;
    Kairouz, Oh, Viswanath 2016 (ICML), k-RR; Wang, Blocki, Li, Jha 2017, "Locally
    Differentially Private Protocols for Frequency Estimation" (USENIX Security), Sec. 3
    (the pure-protocol estimator and its variance; the equation number unverified) and
    Sec. 4.3 (optimised unary encoding); Dwork, McSherry, Nissim, Smith 2006, Prop. 1
    (the Laplace mechanism). The formulas above are derived here, not copied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.errors import DpauditError, check_choice, check_integer
from dpaudit.mechanisms.noise import (
    Mechanism,
    k_randomized_response,
    k_rr_probabilities,
    laplace,
    randomized_response,
    unary_encoding,
    unary_encoding_probabilities,
    vector_laplace,
)

QUERIES = ("mean", "histogram")
LOCAL_RANDOMISERS = ("k-rr", "unary-encoding")

__all__ = [
    "LOCAL_RANDOMISERS",
    "QUERIES",
    "RmseEstimate",
    "central_mechanism",
    "central_rmse",
    "local_probabilities",
    "local_randomiser",
    "local_rmse",
    "rmse_estimate",
    "rmse_ratio",
    "rmse_ratio_estimate",
    "simulate_errors",
    "true_counts",
]


def _check_epsilon(epsilon: float) -> float:
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon > 0):
        raise DpauditError(f"The 'epsilon' parameter must be a finite number > 0. Got {epsilon!r}.")
    return float(epsilon)


def true_counts(
    *, query: str, n: int, k: int = 2, share: float = 0.3, frequencies: Any = None
) -> np.ndarray:
    """The counts of the audited dataset: [n − ones, ones] for the mean of bits (``share``
    of the records are 1), else n records spread over k bins by ``frequencies``
    (default Zipf: f_j ∝ 1/(j + 1)), rounded so that they add up to n."""
    check_choice("query", query, QUERIES)
    n = check_integer("n", n, low=1)
    if query == "mean":
        if not 0.0 <= share <= 1.0:
            raise DpauditError(f"The 'share' parameter must lie in [0, 1]. Got {share!r}.")
        ones = round(share * n)
        return np.array([n - ones, ones], dtype=np.int64)
    w = (
        1.0 / np.arange(1, k + 1)
        if frequencies is None
        else np.asarray(frequencies, dtype=float).reshape(-1)
    )
    if w.size != k or np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise DpauditError(
            f"The 'frequencies' parameter must be {k} non-negative numbers with a positive sum."
        )
    raw = n * w / w.sum()
    counts = np.floor(raw).astype(np.int64)
    # largest remainders get the records rounding left over
    counts[np.argsort(-(raw - counts), kind="stable")[: n - int(counts.sum())]] += 1
    return counts


def local_probabilities(
    *, query: str, k: int, epsilon: float, randomiser: str
) -> tuple[float, float]:
    """(p, q): a report names (or sets the bit of) bin j with p if the record is in j, q if not.

    For the mean of bits this is binary randomised response, p = e^ε/(1 + e^ε), q = 1 − p.
    """
    epsilon = _check_epsilon(epsilon)
    if query == "mean":
        return k_rr_probabilities(k=2, epsilon=epsilon)
    check_choice("randomiser", randomiser, LOCAL_RANDOMISERS)
    if randomiser == "k-rr":
        return k_rr_probabilities(k=k, epsilon=epsilon)
    return unary_encoding_probabilities(epsilon=epsilon, variant="optimised")


def local_rmse(counts: Any, *, query: str, epsilon: float, randomiser: str = "k-rr") -> float:
    """Closed-form RMSE of the local estimator (see the module docstring).

    The mean of bits: √(e^ε/(n(e^ε − 1)²)); a histogram: the root of the mean over bins of
    [f_j p(1 − p) + (1 − f_j) q(1 − q)]/(n(p − q)²).
    """
    c = np.asarray(counts, dtype=float)
    n = float(c.sum())
    if query == "mean":
        e = math.exp(_check_epsilon(epsilon))
        return math.sqrt(e / n) / math.expm1(_check_epsilon(epsilon))
    p, q = local_probabilities(query=query, k=c.size, epsilon=epsilon, randomiser=randomiser)
    f = c / n
    var = (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (n * (p - q) ** 2)
    return float(math.sqrt(float(var.mean())))


def central_rmse(n: int, *, query: str, epsilon: float) -> float:
    """Closed-form RMSE of the central Laplace estimator: √2·b/n, b = 1/ε (mean) or 2/ε
    (histogram, per bin)."""
    check_choice("query", query, QUERIES)
    b = (1.0 if query == "mean" else 2.0) / _check_epsilon(epsilon)
    return math.sqrt(2.0) * b / n


def rmse_ratio(counts: Any, *, query: str, epsilon: float, randomiser: str = "k-rr") -> float:
    """RMSE_local / RMSE_central in closed form; for the mean exactly
    √n · ε e^{ε/2}/(√2 (e^ε − 1))."""
    n = int(np.asarray(counts).sum())
    return local_rmse(counts, query=query, epsilon=epsilon, randomiser=randomiser) / central_rmse(
        n, query=query, epsilon=epsilon
    )


def simulate_errors(
    counts: Any,
    *,
    query: str,
    epsilon: float,
    repeats: int,
    rng: np.random.Generator,
    randomiser: str = "k-rr",
) -> tuple[np.ndarray, np.ndarray]:
    """Errors (estimate − truth) of ``repeats`` independent releases, local and central.

    Returns two arrays of shape (repeats, bins) (one bin, the share of ones, for the
    mean). The local reports are drawn by their aggregate law, exact in distribution:
    with c_v records of value v, the reports of k-RR are a sum over v of
    Multinomial(c_v, [q, …, p at v, …, q]); the bits of unary encoding are independent, so
    C_j = Binomial(c_j, p) + Binomial(n − c_j, q); binary randomised response is k-RR
    with k = 2.
    """
    c = np.asarray(counts, dtype=np.int64)
    n, k = int(c.sum()), c.size
    repeats = check_integer("repeats", repeats, low=2)
    p, q = local_probabilities(query=query, k=k, epsilon=epsilon, randomiser=randomiser)
    if query == "histogram" and randomiser == "unary-encoding":
        reported = rng.binomial(c, p, (repeats, k)) + rng.binomial(n - c, q, (repeats, k))
    else:
        reported = np.zeros((repeats, k), dtype=np.int64)
        for v in range(k):
            prob = np.full(k, q)
            prob[v] = p
            prob /= prob.sum()  # (p + (k − 1)q = 1 up to rounding)
            reported += rng.multinomial(int(c[v]), prob, size=repeats)
    f = c / n
    local = (reported / n - q) / (p - q) - f
    b = (1.0 if query == "mean" else 2.0) / _check_epsilon(epsilon)
    central = rng.laplace(0.0, b, (repeats, k)) / n
    if query == "mean":  # the share of ones: bin 1
        local, central = local[:, 1:], central[:, 1:]
    return local, central


@dataclass(frozen=True)
class RmseEstimate:
    """A simulated RMSE with its bootstrap percentile interval.

    Attributes:
        value: √(mean over repeats of the mean squared error over bins).
        low, high: the two-sided percentile-bootstrap interval at ``confidence_level``.
        repeats: independent releases simulated.
        confidence_level: of the interval.
    """

    value: float
    low: float
    high: float
    repeats: int
    confidence_level: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "interval": [self.low, self.high],
            "repeats": self.repeats,
            "confidence_level": self.confidence_level,
        }


_RESAMPLES = 2000


def _bootstrap_mse(sq: np.ndarray, rng: np.random.Generator, resamples: int) -> np.ndarray:
    idx = rng.integers(0, sq.size, (resamples, sq.size))
    return sq[idx].mean(axis=1)


def rmse_estimate(
    errors: np.ndarray,
    *,
    confidence_level: float,
    rng: np.random.Generator,
    resamples: int = _RESAMPLES,
) -> RmseEstimate:
    """RMSE of the (repeats, bins) errors and its percentile-bootstrap interval.

    The repeats are independent, so resampling them is the bootstrap's i.i.d. setting; the
    squared error of a Laplace release is far from normal (so no chi-square interval here),
    and the percentile interval of the MSE, square-rooted, needs no normality
    (Efron, Tibshirani 1993, "An Introduction to the Bootstrap", Ch. 13).
    """
    sq = np.mean(np.asarray(errors, dtype=float) ** 2, axis=1)
    boot = np.sqrt(_bootstrap_mse(sq, rng, resamples))
    a = (1.0 - confidence_level) / 2.0
    lo, hi = np.quantile(boot, [a, 1.0 - a])
    return RmseEstimate(
        float(math.sqrt(sq.mean())), float(lo), float(hi), int(sq.size), float(confidence_level)
    )


def rmse_ratio_estimate(
    local_errors: np.ndarray,
    central_errors: np.ndarray,
    *,
    confidence_level: float,
    rng: np.random.Generator,
    resamples: int = _RESAMPLES,
) -> tuple[float, float, float]:
    """(ratio, low, high): RMSE_local/RMSE_central and its percentile-bootstrap interval,
    the two independent samples resampled independently."""
    sl = np.mean(np.asarray(local_errors, dtype=float) ** 2, axis=1)
    sc = np.mean(np.asarray(central_errors, dtype=float) ** 2, axis=1)
    boot = np.sqrt(_bootstrap_mse(sl, rng, resamples) / _bootstrap_mse(sc, rng, resamples))
    a = (1.0 - confidence_level) / 2.0
    lo, hi = np.quantile(boot, [a, 1.0 - a])
    return float(math.sqrt(sl.mean() / sc.mean())), float(lo), float(hi)


def local_randomiser(*, query: str, k: int, epsilon: float, randomiser: str = "k-rr") -> Mechanism:
    """The local randomiser of one record, from :mod:`dpaudit.mechanisms.noise`, on the
    neighbouring records 0 and 1 (binary randomised response for the mean)."""
    if query == "mean":
        p, _ = k_rr_probabilities(k=2, epsilon=_check_epsilon(epsilon))
        return randomized_response(p=p)
    check_choice("randomiser", randomiser, LOCAL_RANDOMISERS)
    if randomiser == "k-rr":
        return k_randomized_response(k=k, epsilon=epsilon, values=(0, 1))
    return unary_encoding(k=k, epsilon=epsilon, variant="optimised", values=(0, 1))


def central_mechanism(counts: Any, *, query: str, epsilon: float) -> Mechanism:
    """The central Laplace mechanism on the dataset's counts and a neighbour's (one record
    of bin 0 replaced by one of bin 1), from :mod:`dpaudit.mechanisms.noise`.

    The mean: the count of ones, sensitivity 1, scale 1/ε. The histogram: k counts, ℓ1
    sensitivity 2, scale 2/ε, scored by the exact log-likelihood ratio.
    """
    epsilon = _check_epsilon(epsilon)
    if query == "mean":
        return laplace(sensitivity=1.0, scale=1.0 / epsilon)
    c = np.asarray(counts, dtype=float)
    neighbour = c.copy()
    neighbour[0] -= 1.0
    neighbour[1] += 1.0
    return vector_laplace(
        query=(c.tolist(), neighbour.tolist()), sensitivity=2.0, scale=2.0 / epsilon
    )
