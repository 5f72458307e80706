"""DP mechanisms to audit: Laplace, Gaussian, randomized response, local randomisers,
and user callables.

A mechanism here is run on one of two neighbouring inputs, D (H0) or D' (H1), many times;
its outputs are the audit's scores, oriented so that larger means "D'". The scalar
built-ins answer a query with f(D) = 0 and f(D') = Δ (the sensitivity), the worst case
for a sensitivity-Δ query, and their output is the score. Given query values (vectors
f(D), f(D')), Laplace and Gaussian run in d dimensions; they, and the local randomisers
(k-ary randomized response, unary encoding, Laplace or Gaussian perturbation of one
record), are scored by the exact log-likelihood ratio of their output.

User mechanisms are given as ``"pkg.module:function"`` with the protocol

    def mechanism(data: numpy.ndarray, *, rng: numpy.random.Generator, size: int) -> array

returning ``size`` independent real outputs of the mechanism on ``data`` (one of the two
neighbouring inputs from the audit file). Larger outputs should point to the neighbour.
A mechanism with VECTOR outputs returns a ``(size, d)`` array and names how to score it:

    def log_density(outputs: numpy.ndarray, data: numpy.ndarray) -> numpy.ndarray  # (size,)

the log density of each output under the mechanism run on ``data`` (the audit then scores
each output by the exact log-likelihood ratio log p(y | D') − log p(y | D), the
Neyman–Pearson statistic), or

    def score(outputs: numpy.ndarray) -> numpy.ndarray  # (size,), larger = "D'"

any score of the user's choice (valid for any score; a weak one gives a weak bound), or
``score = "learned"``: a classifier fitted on some of the trials scores the others
(:mod:`dpaudit.mechanisms.learned`). A learned score needs the RAW outputs, which every
mechanism here can draw (:meth:`Mechanism.outputs`), as well as its score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.accounting.upper_bounds import Claim
from dpaudit.errors import ConfigError, DpauditError, check_choice, check_integer
from dpaudit.plugins import load_plugin
from dpaudit.theory import gaussian_sigma, gdp_mu

MechanismFn = Callable[..., Any]


@dataclass(frozen=True)
class Mechanism:
    """A mechanism ready to sample: a name, its sampler and the parameters it RUNS with.

    ``sample`` draws scores (the output itself for a scalar mechanism, else its exact
    log-likelihood ratio or the user's score); ``draw``, when given, draws the raw outputs
    those scores are computed from, from the same random stream in the same order, so
    that ``sample`` is ``draw`` followed by the score.
    """

    name: str
    sample: Callable[[int, np.random.Generator, int], np.ndarray] = field(repr=False)
    parameters: dict[str, Any] = field(default_factory=dict)
    draw: Callable[[int, np.random.Generator, int], np.ndarray] | None = field(
        default=None, repr=False
    )

    def run(self, neighbour: int, *, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` outputs on D (``neighbour=0``) or D' (``neighbour=1``) as float64."""
        out = np.asarray(self.sample(neighbour, rng, size), dtype=float).reshape(-1)
        if out.size != size:
            raise DpauditError(
                f"Mechanism {self.name!r} returned {out.size} outputs; {size} were asked for."
            )
        if not np.all(np.isfinite(out)):
            raise DpauditError(f"Mechanism {self.name!r} returned NaN or infinite outputs.")
        return out

    def outputs(self, neighbour: int, *, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` RAW outputs on D (``neighbour=0``) or D' (``neighbour=1``), one row each:
        a ``(size, d)`` float64 array (a scalar output is a row of one; a ``(size, h, w)``
        output is flattened to ``(size, h·w)``). What a learned score is fitted on.

        Raises:
            DpauditError: the mechanism has no raw outputs, or they are not ``size`` rows
                of finite numbers.
        """
        if self.draw is None:
            raise DpauditError(
                f"Mechanism {self.name!r} draws scores only; it has no raw outputs to learn a "
                "score from."
            )
        out = np.asarray(self.draw(neighbour, rng, size), dtype=float)
        if out.ndim == 0 or out.shape[0] != size:
            rows = 1 if out.ndim == 0 else out.shape[0]
            raise DpauditError(
                f"Mechanism {self.name!r} returned {rows} outputs; {size} were asked for."
            )
        out = out.reshape(size, -1)
        if out.shape[1] == 0:
            raise DpauditError(f"Mechanism {self.name!r} returned empty outputs.")
        if not np.all(np.isfinite(out)):
            raise DpauditError(f"Mechanism {self.name!r} returned NaN or infinite outputs.")
        return out


def laplace(*, sensitivity: float, scale: float) -> Mechanism:
    """Laplace mechanism: f(D) + Lap(scale), f(D) = 0, f(D') = sensitivity.

    It is (sensitivity/scale)-DP (Dwork, McSherry, Nissim, Smith 2006, Prop. 1).
    """

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return neighbour * sensitivity + rng.laplace(0.0, scale, size)

    return Mechanism("laplace", sample, {"sensitivity": sensitivity, "scale": scale}, sample)


def gaussian(*, sensitivity: float, sigma: float) -> Mechanism:
    """Gaussian mechanism: f(D) + N(0, σ²).

    It is (sensitivity/σ)-GDP (Dong, Roth, Su 2019, Thm. 2.7).
    """

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return neighbour * sensitivity + rng.normal(0.0, sigma, size)

    return Mechanism("gaussian", sample, {"sensitivity": sensitivity, "sigma": sigma}, sample)


def randomized_response(*, p: float) -> Mechanism:
    """Binary randomized response: report the true bit with probability p, else its flip.

    The bit is 0 on D and 1 on D'. With p = 3/4 (a fair coin decides between the truth and
    a second fair coin) it is ln 3-DP; in general ln(p/(1 − p))-DP for p ≥ ½.
    """

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        truthful = rng.random(size) < p
        return np.where(truthful, neighbour, 1 - neighbour).astype(float)

    return Mechanism("randomized-response", sample, {"p": p}, sample)


# --------------------------------------------------------------------------------------
# Local randomisers (one record in, one report out) and vector mechanisms.
#
# Their outputs are categorical or vectors, so each is scored by the exact log-likelihood
# ratio log p_{D'}(y) / p_D(y) of its output y: a scalar, larger means "D'", and by
# Neyman–Pearson the most powerful score there is (every threshold on it is a likelihood-
# ratio test). The audit's bounds then see the mechanism at its worst.
# --------------------------------------------------------------------------------------


def _check_values(values: tuple[int, int], k: int) -> tuple[int, int]:
    v0 = check_integer("values", values[0], low=0, high=k - 1)
    v1 = check_integer("values", values[1], low=0, high=k - 1)
    if v0 == v1:
        raise DpauditError(
            f"The 'values' parameter must be two different categories in 0..{k - 1}. "
            f"Got {tuple(values)!r} instead."
        )
    return v0, v1


def k_rr_probabilities(*, k: int, epsilon: float) -> tuple[float, float]:
    """(p, q) of k-ary randomized response: report the truth with p = e^ε/(e^ε + k − 1),
    each of the k − 1 other categories with q = 1/(e^ε + k − 1).

    p/q = e^ε, so it is ε-LDP, and no smaller ε holds (the two reports "D's value" and
    "D''s value" have likelihood ratio exactly e^{±ε}).

    References:
        Kairouz, Oh, Viswanath 2016, "Discrete distribution estimation under local
        privacy" (ICML), Sec. 2 (k-RR); Warner 1965 for k = 2.
    """
    # e^ε/(e^ε + k − 1) = 1/(1 + (k − 1)e^{−ε}), stable for large ε
    q = math.exp(-epsilon) / (1.0 + (k - 1) * math.exp(-epsilon))
    return 1.0 / (1.0 + (k - 1) * math.exp(-epsilon)), q


def k_randomized_response(*, k: int, epsilon: float, values: tuple[int, int] = (0, 1)) -> Mechanism:
    """k-ary randomized response of one categorical record; its value is ``values[0]``
    on D and ``values[1]`` on D'.

    Scored by the log-likelihood ratio of the report: ε if it names D''s value, −ε if it
    names D's, 0 otherwise (:func:`k_rr_probabilities`).
    """
    v0, v1 = _check_values(values, k)
    p, _ = k_rr_probabilities(k=k, epsilon=epsilon)
    llr = np.zeros(k)
    llr[v1], llr[v0] = epsilon, -epsilon

    def report(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        truth = (v0, v1)[neighbour]
        truthful = rng.random(size) < p
        # uniform over the k − 1 other categories: draw from 0..k−2, skip the truth
        other = rng.integers(0, k - 1, size)
        other = other + (other >= truth)
        return np.where(truthful, truth, other)

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return llr[report(neighbour, rng, size)]

    params = {"k": k, "epsilon": epsilon, "values": [v0, v1]}
    return Mechanism("k-rr", sample, params, report)


def unary_encoding_probabilities(*, epsilon: float, variant: str) -> tuple[float, float]:
    """(p, q) of unary encoding: each bit of the one-hot encoding is reported as 1 with
    probability p if it is the record's bit, q otherwise.

    ``"optimised"`` (OUE): p = 1/2, q = 1/(e^ε + 1); ``"symmetric"`` (SUE, basic
    one-time RAPPOR): p = e^{ε/2}/(e^{ε/2} + 1), q = 1 − p. Both have
    p(1 − q)/(q(1 − p)) = e^ε, hence ε-LDP (two bits differ between any two records).

    References:
        Wang, Blocki, Li, Jha 2017, "Locally Differentially Private Protocols for
        Frequency Estimation" (USENIX Security), Sec. 4.3 (SUE, OUE; Thm. 2 for ε-LDP);
        Erlingsson, Pihur, Korolova 2014 (RAPPOR).
    """
    check_choice("variant", variant, UNARY_VARIANTS)
    if variant == "optimised":
        return 0.5, 1.0 / (math.exp(epsilon) + 1.0)
    p = 1.0 / (1.0 + math.exp(-epsilon / 2.0))
    return p, 1.0 - p


UNARY_VARIANTS = ("optimised", "symmetric")

# Rows of bits sampled at once: bounds a unit's memory to ~16 MB whatever k is.
_BITS_PER_BLOCK = 1 << 24


def unary_encoding(
    *, k: int, epsilon: float, variant: str = "optimised", values: tuple[int, int] = (0, 1)
) -> Mechanism:
    """Unary encoding (RAPPOR-style bits) of one categorical record: all k bits are
    sampled, then scored by the exact log-likelihood ratio of the report.

    Only the bits of D's and D''s values differ in law between the two inputs, so the
    ratio is  b₁·log(p/q) + (1 − b₁)·log((1 − p)/(1 − q)) − [the same for b₀],  b₁ the
    bit of D''s value and b₀ of D's; its largest value is ε (b₁ = 1, b₀ = 0).
    """
    v0, v1 = _check_values(values, k)
    p, q = unary_encoding_probabilities(epsilon=epsilon, variant=variant)
    one = math.log(p) - math.log(q)
    zero = math.log1p(-p) - math.log1p(-q)

    prob = [np.full(k, q), np.full(k, q)]
    prob[0][v0] = prob[1][v1] = p
    rows = max(1, _BITS_PER_BLOCK // k)

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        out = np.empty(size)
        for start in range(0, size, rows):
            n = min(rows, size - start)
            bits = rng.random((n, k)) < prob[neighbour]  # the whole report, as sent
            b1, b0 = bits[:, v1], bits[:, v0]
            out[start : start + n] = np.where(b1, one, zero) - np.where(b0, one, zero)
        return out

    def report(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        # The same draws as `sample`, block by block, kept whole: (size, k) bits.
        return np.concatenate(
            [
                rng.random((min(rows, size - start), k)) < prob[neighbour]
                for start in range(0, size, rows)
            ]
        )

    params = {"k": k, "epsilon": epsilon, "variant": variant, "values": [v0, v1], "p": p, "q": q}
    return Mechanism("unary-encoding", sample, params, report)


def _query_pair(query: tuple[Any, Any]) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(query[0], dtype=float).reshape(-1)
    b = np.asarray(query[1], dtype=float).reshape(-1)
    if a.size == 0 or a.shape != b.shape or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise DpauditError(
            "The 'query' parameter must be two finite vectors of the same non-zero length "
            f"(f(D) and f(D')). Got lengths {a.size} and {b.size} instead."
        )
    return a, b


def vector_laplace(
    *, query: tuple[Any, Any], sensitivity: float, scale: float, name: str = "laplace"
) -> Mechanism:
    """Laplace mechanism in d dimensions: f(D) + Lap(scale)^d, ℓ1-sensitivity Δ.

    (Δ/scale)-DP (Dwork, McSherry, Nissim, Smith 2006, Prop. 1). Scored by the exact
    log-likelihood ratio (‖y − f(D)‖₁ − ‖y − f(D')‖₁)/scale ∈ [−ε, ε] for
    ‖f(D) − f(D')‖₁ ≤ Δ.
    """
    a, b = _query_pair(query)

    def draw(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return (a, b)[neighbour] + rng.laplace(0.0, scale, (size, a.size))

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return laplace_llr(draw(neighbour, rng, size), a, b, scale)

    params = {
        "sensitivity": sensitivity,
        "scale": scale,
        "dimension": int(a.size),
        "query": [a.tolist(), b.tolist()],
        "distance": float(np.abs(a - b).sum()),
        "norm": "l1",
    }
    return Mechanism(name, sample, params, draw)


def laplace_llr(y: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """log p_b(y)/p_a(y) of Laplace noise, rows of ``y``; exact on the likelihood
    ratio's atoms.

    Outside [min(a_i, b_i), max(a_i, b_i)] a coordinate contributes the constant
    ±(b_i − a_i)/scale, which carries half or more of the probability. It is set as that
    constant, not computed as |y − a| − |y − b|: in floating point the latter's last bits
    differ between y = a + L and y = b + L (b + L is rounded on a coarser grid), and a
    threshold placed between those rounding errors would measure the floating-point
    artefact (Mironov 2012, "On significance of the least significant bits for
    differential privacy") instead of the mechanism the claim is about.
    """
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    inner = np.abs(y - a) - np.abs(y - b)
    per = np.where(y >= hi, b - a, np.where(y <= lo, a - b, inner))
    return per.sum(axis=1) / scale


def vector_gaussian(
    *,
    query: tuple[Any, Any],
    sensitivity: float,
    sigma: float,
    name: str = "gaussian",
    calibration: Mapping[str, Any] | None = None,
) -> Mechanism:
    """Gaussian mechanism in d dimensions: f(D) + N(0, σ²I), ℓ2-sensitivity Δ.

    (Δ/σ)-GDP (Dong, Roth, Su 2019, Thm. 2.7). Scored by the exact log-likelihood ratio
    (‖y − f(D)‖² − ‖y − f(D')‖²)/(2σ²), which is N(∓m²/2, m²) with m = ‖f(D) − f(D')‖₂/σ.
    """
    a, b = _query_pair(query)
    mid = (a + b) / 2.0

    def draw(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return (a, b)[neighbour] + rng.normal(0.0, sigma, (size, a.size))

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        # (‖y − a‖² − ‖y − b‖²)/(2σ²) = (b − a)·(y − (a + b)/2)/σ²: no atoms, no cancellation
        return ((draw(neighbour, rng, size) - mid) @ (b - a)) / sigma**2

    params: dict[str, Any] = {
        "sensitivity": sensitivity,
        "sigma": sigma,
        "dimension": int(a.size),
        "query": [a.tolist(), b.tolist()],
        "distance": float(np.sqrt(((a - b) ** 2).sum())),
        "norm": "l2",
    }
    if calibration is not None:
        params["calibration"] = dict(calibration)
    return Mechanism(name, sample, params, draw)


def gaussian_calibrated(
    *, sensitivity: float, epsilon: float, delta: float, calibration: str
) -> tuple[float, dict[str, Any]]:
    """σ of a Gaussian mechanism calibrated to (ε, δ)-DP, and how it was calibrated.

    ``"classic"``: σ = Δ√(2 ln(1.25/δ))/ε (Dwork, Roth 2014, Thm. A.1), valid only for
    ε < 1. ``"exact"``: the analytic Gaussian mechanism, the smallest σ whose exact
    profile meets δ at ε (Balle, Wang 2018, "Improving the Gaussian Mechanism for
    Differential Privacy", Thm. 8): N(0, σ²) with sensitivity Δ is (Δ/σ)-GDP, whose
    profile is δ_μ(ε) (Dong, Roth, Su 2019, Cor. 2.13), increasing in μ, so
    σ = Δ/μ with μ solving δ_μ(ε) = δ.
    """
    check_choice("calibration", calibration, GAUSSIAN_CALIBRATIONS)
    if calibration == "classic":
        if not epsilon < 1.0:
            raise DpauditError(
                "calibration = 'classic' (σ = Δ√(2 ln(1.25/δ))/ε) is only valid for "
                f"epsilon < 1 (Dwork, Roth 2014, Thm. A.1). Got epsilon = {epsilon!r}; use "
                "calibration = 'exact' (the analytic Gaussian mechanism) instead."
            )
        sigma = gaussian_sigma(sensitivity, epsilon, delta)
    else:
        # gdp_mu's root is accurate to ~1e-14 relative; shrinking μ by 1e-12 makes σ err
        # on the large (private) side, so δ_{Δ/σ}(ε) ≤ δ holds in floating point too.
        sigma = sensitivity / (gdp_mu(epsilon, delta) * (1.0 - 1e-12))
    return sigma, {"method": calibration, "epsilon": epsilon, "delta": delta}


GAUSSIAN_CALIBRATIONS = ("classic", "exact")


def user_mechanism(
    spec: str,
    *,
    data: tuple[Any, Any],
    log_density: str | None = None,
    score: str | None = None,
    base_dir: str | Path | None = None,
) -> Mechanism:
    """Wrap a user callable following the module docstring's protocol.

    Args:
        spec: ``"pkg.module:function"``, the mechanism.
        data: the two neighbouring inputs (D, D').
        log_density: ``"pkg.module:function"`` giving log p(y | data): outputs are then
            scored by the exact log-likelihood ratio.
        score: ``"pkg.module:function"`` mapping outputs to scores (larger = D').
        base_dir: the audit file's folder, where plug-ins are also searched
            (:func:`dpaudit.plugins.load_plugin`).

    Raises:
        ConfigError: both ``log_density`` and ``score`` are given.
        DpauditError: at run time, vector outputs without either, or a scorer that does
            not return one finite number per output.
    """
    if log_density is not None and score is not None:
        raise ConfigError("Give 'log_density' or 'score' for a user mechanism, not both.")
    fn = load_plugin(spec, base_dir=base_dir)
    inputs = (np.asarray(data[0]), np.asarray(data[1]))
    density = (
        None
        if log_density is None
        else load_plugin(log_density, base_dir=base_dir, what="log density")
    )
    scorer = None if score is None else load_plugin(score, base_dir=base_dir, what="score")

    def to_scores(outputs: np.ndarray) -> np.ndarray:
        if density is not None:
            logp1 = _real(density(outputs, inputs[1]), f"The log density {log_density!r}")
            logp0 = _real(density(outputs, inputs[0]), f"The log density {log_density!r}")
            with np.errstate(invalid="ignore"):
                return _user_scores(logp1 - logp0, outputs, log_density)
        if scorer is not None:
            return _user_scores(_real(scorer(outputs), f"The score {score!r}"), outputs, score)
        if outputs.ndim > 1 and outputs.shape[1:] != (1,) * (outputs.ndim - 1):
            raise DpauditError(
                f"Mechanism {spec!r} returned outputs of shape {outputs.shape}: vector outputs "
                "need [mechanism] log_density = 'pkg.module:function' (scored by the "
                "likelihood ratio) or score = 'pkg.module:function'."
            )
        return outputs

    def draw(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return _real(fn(inputs[neighbour], rng=rng, size=size), f"Mechanism {spec!r}")

    def sample(neighbour: int, rng: np.random.Generator, size: int) -> np.ndarray:
        return to_scores(draw(neighbour, rng, size))

    parameters: dict[str, Any] = {"callable": spec}
    if log_density is not None:
        parameters["log_density"] = log_density
    if score is not None:
        parameters["score"] = score
    return Mechanism(spec, sample, parameters, draw)


def _real(values: Any, what: str) -> np.ndarray:
    """User code's numbers as float64, refusing what is not real: a complex output cut to
    its real part would be audited as another mechanism than the one that ran."""
    array = np.asarray(values)
    if np.iscomplexobj(array):
        raise DpauditError(
            f"{what} returned {array.dtype} values; dpaudit audits real numbers only "
            "(return floats: the real quantity your mechanism releases)"
        )
    return array.astype(float)


def _user_scores(values: np.ndarray, outputs: np.ndarray, where: str | None) -> np.ndarray:
    """One finite score per output from a user's scorer (a +∞/−∞ pair is a certain answer)."""
    values = values.reshape(-1)
    if values.size != outputs.shape[0]:
        raise DpauditError(
            f"{where!r} returned {values.size} values for {outputs.shape[0]} outputs; one per "
            "output is needed."
        )
    if np.any(np.isnan(values)):
        raise DpauditError(f"{where!r} gave NaN for some outputs (both densities zero?).")
    # An output impossible under one neighbour identifies it for certain: keep the order
    # (any threshold test is valid) with finite stand-ins beyond every finite score.
    finite = values[np.isfinite(values)]
    top = float(np.max(np.abs(finite))) + 1.0 if finite.size else 1.0
    return np.clip(values, -top, top)


def theoretical_claim(name: str, parameters: dict[str, Any]) -> Claim:
    """What a built-in mechanism provably guarantees with the parameters it runs with."""
    if name in ("laplace", "local-laplace"):
        return Claim(epsilon=parameters["sensitivity"] / parameters["scale"])
    if name in ("gaussian", "local-gaussian"):
        return Claim(mu=parameters["sensitivity"] / parameters["sigma"])
    if name in ("k-rr", "unary-encoding"):
        return Claim(epsilon=parameters["epsilon"])
    if name == "randomized-response":
        p = parameters["p"]
        return Claim(epsilon=math.log(max(p, 1 - p) / min(p, 1 - p)) if 0 < p < 1 else math.inf)
    raise DpauditError(f"No theoretical guarantee is known for mechanism {name!r}.")
