"""The bug zoo's mechanisms: known DP bugs, each next to its fixed implementation.

Every function follows the user-mechanism protocol of ``[mechanism] name =
"zoo_mechanisms:function"``: ``fn(data, *, rng, size)`` returns ``size`` independent
outputs of the mechanism run on ``data`` (one of the audit file's two neighbouring
inputs), ``(size,)`` or ``(size, d)``. Nothing here scores an output: the audits use
``score = "learned"``, which fits a classifier on a share of the trials (the float
Laplace's use ``score = "floating"``, the floating-point attack).

The parameters (ε, the sparse vector's threshold and cut-off, the grid of the snapping
mechanism) are module constants, so that the audit files only name a function and a
pair; each docstring says what the buggy version really guarantees and where the bug
was published.

References:
    Lyu, Su, Li, "Understanding the Sparse Vector Technique for Differential Privacy",
    PVLDB 10(6), 2017 (arXiv:1603.01699v4): Algorithms 1-6 of their Figure 1, and
    Theorems 2, 6, 7.
    Ding, Wang, Wang, Zhang, Kifer, "Detecting Violations of Differential Privacy",
    CCS 2018 (arXiv:1805.10277v4): the noisy-max variants and the worst-case pairs.
    Dwork, Roth, "The Algorithmic Foundations of Differential Privacy", 2014: Thm. 3.6
    (Laplace), Thm. A.1 (Gaussian), Thm. 3.10 (exponential mechanism).
    Mironov, "On Significance of the Least Significant Bits for Differential Privacy",
    CCS 2012: the floating-point attack and the snapping mechanism.
"""

from __future__ import annotations

import math

import numpy as np

#: The ε every ε-DP mechanism of the zoo claims.
EPSILON = 1.0
#: Sparse vector: the public threshold T and the cut-off c (abort after c answers ⊤).
SVT_THRESHOLD = 0.5
SVT_CUTOFF = 1
#: Sparse vector outputs: ⊤, ⊥, and "not answered" (after the cut-off).
TOP, BOTTOM, UNANSWERED = 1.0, 0.0, -1.0
#: Gaussian: the (ε, δ) the classic calibration is asked for (ε < 1: Dwork, Roth 2014,
#: Thm. A.1).
GAUSSIAN_EPSILON = 0.9
GAUSSIAN_DELTA = 1e-5
#: Dimension of the vector-sum query of the ℓ2-versus-ℓ1 bug.
VECTOR_DIMENSION = 4
#: Categories of the k-ary randomised response.
RR_CATEGORIES = 4


# ------------------------------------------------------------------------ sparse vector


def _queries(data: np.ndarray) -> np.ndarray:
    return np.asarray(data, dtype=float).reshape(-1)


def _svt(
    data: np.ndarray,
    rng: np.random.Generator,
    size: int,
    *,
    threshold_scale: float,
    query_scale: float,
    cutoff: int | None,
    release_value: bool = False,
) -> np.ndarray:
    """The sparse vector technique's skeleton, vectorised over ``size`` runs.

    A noisy threshold T + ρ, ρ ~ Lap(``threshold_scale``), is drawn once per run; query i
    answers ⊤ when q_i + ν_i ≥ T + ρ, ν_i ~ Lap(``query_scale``) (0 = no noise), and the
    run stops answering after ``cutoff`` ⊤ (``None``: never). With ``release_value`` a ⊤
    is released as the noisy answer q_i + ν_i itself; the output then holds two
    coordinates per query: the answer code and the released value (0 when none).
    """
    q = _queries(data)
    m = q.size
    rho = rng.laplace(0.0, threshold_scale, (size, 1))
    nu = rng.laplace(0.0, query_scale, (size, m)) if query_scale > 0 else np.zeros((size, m))
    noisy = q[None, :] + nu
    above = noisy >= SVT_THRESHOLD + rho
    answered: np.ndarray = np.ones_like(above)
    if cutoff is not None:
        # query i is answered while fewer than `cutoff` earlier queries answered ⊤
        earlier: np.ndarray = np.cumsum(above, axis=1) - above
        answered = earlier < cutoff
    code = np.where(answered, np.where(above, TOP, BOTTOM), UNANSWERED)
    if not release_value:
        return code
    value = np.where(answered & above, noisy, 0.0)
    return np.hstack([code, value])


def svt_alg1(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """FIXED: Lyu, Su, Li 2017, Alg. 1 (their sparse vector), ε-DP (their Thm. 2).

    ε₁ = ε/2, ρ ~ Lap(Δ/ε₁); ε₂ = ε − ε₁, ν_i ~ Lap(2cΔ/ε₂); abort after c answers ⊤.
    """
    e1 = EPSILON / 2.0
    e2 = EPSILON - e1
    return _svt(
        data,
        rng,
        size,
        threshold_scale=1.0 / e1,
        query_scale=2.0 * SVT_CUTOFF / e2,
        cutoff=SVT_CUTOFF,
    )


def svt_alg3(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: Lyu, Su, Li 2017, Alg. 3 (Roth's 2011 lecture notes): a ⊤ releases the
    noisy answer q_i + ν_i, and ν_i ~ Lap(cΔ/ε₂) is half of Alg. 1's noise. Not ε′-DP for
    any finite ε′ (their Thm. 6)."""
    e1 = EPSILON / 2.0
    e2 = EPSILON - e1
    return _svt(
        data,
        rng,
        size,
        threshold_scale=1.0 / e1,
        query_scale=SVT_CUTOFF / e2,
        cutoff=SVT_CUTOFF,
        release_value=True,
    )


def svt_alg4(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: Lyu, Su, Li 2017, Alg. 4 (Lee, Clifton 2014): ε₁ = ε/4, ρ ~ Lap(Δ/ε₁),
    ν_i ~ Lap(Δ/ε₂) with ε₂ = 3ε/4 (no factor 2c). It is ((1 + 6c)/4)·ε-DP, not ε-DP
    (their Thm. 7): 1.75·ε at c = 1."""
    e1 = EPSILON / 4.0
    e2 = EPSILON - e1
    return _svt(data, rng, size, threshold_scale=1.0 / e1, query_scale=1.0 / e2, cutoff=SVT_CUTOFF)


def svt_alg5(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: Lyu, Su, Li 2017, Alg. 5 (Stoddard, Chen, Machanavajjhala 2014): no noise on
    the queries and no cut-off. ∞-DP (their §3): a pattern of ⊤ and ⊥ that contradicts
    the order of the true answers is impossible."""
    return _svt(data, rng, size, threshold_scale=2.0 / EPSILON, query_scale=0.0, cutoff=None)


def svt_alg6(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: Lyu, Su, Li 2017, Alg. 6 (Chen, Machanavajjhala 2015): ν_i ~ Lap(Δ/ε₂) and
    no cut-off. ∞-DP (their §3): its privacy loss grows with the number of queries."""
    e1 = EPSILON / 2.0
    e2 = EPSILON - e1
    return _svt(data, rng, size, threshold_scale=1.0 / e1, query_scale=1.0 / e2, cutoff=None)


# -------------------------------------------------------------------------- noisy max


def _noisy_max(
    data: np.ndarray, rng: np.random.Generator, size: int
) -> tuple[np.ndarray, np.ndarray]:
    q = _queries(data)
    noisy = q[None, :] + rng.laplace(0.0, 2.0 / EPSILON, (size, q.size))
    index = np.argmax(noisy, axis=1)
    return index.astype(float), noisy[np.arange(size), index]


def noisy_max_index(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """FIXED: report noisy max, Lap(2Δ/ε) on each answer, releases the index only:
    ε-DP for any Δ-sensitive answers (Dwork, Roth 2014, Claim 3.9, doubled noise for
    answers that may move in opposite directions)."""
    return _noisy_max(data, rng, size)[0]


def noisy_max_value(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: report noisy max that also releases the noisy maximum itself (Ding et al.
    2018, "NoisyMax" variants returning the gap or value): the value tells how far below
    it every other noisy answer was, and the privacy loss grows with the number of
    answers."""
    index, value = _noisy_max(data, rng, size)
    return np.column_stack([index, value])


# ---------------------------------------------------------------------------- histograms


def _bin_counts(data: np.ndarray) -> np.ndarray:
    values = _queries(data)
    high = float(np.sum(values >= 0.5))
    return np.array([values.size - high, high])


def histogram_add_remove(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY under replace-one: a two-bin histogram with Lap(1/ε) on each count, the
    calibration for add/remove neighbours (ℓ1 sensitivity 1). Replacing one record moves
    one count down and another up (ℓ1 sensitivity 2): 2ε-DP under replace-one."""
    return _bin_counts(data) + rng.laplace(0.0, 1.0 / EPSILON, (size, 2))


def histogram_replace_one(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """FIXED: Lap(2/ε) on each count, calibrated to replace-one neighbours (ℓ1
    sensitivity 2): ε-DP under replace-one."""
    return _bin_counts(data) + rng.laplace(0.0, 2.0 / EPSILON, (size, 2))


# ---------------------------------------------------------- ℓ2 instead of ℓ1 sensitivity


def _vector_sum(data: np.ndarray) -> np.ndarray:
    records = np.clip(np.asarray(data, dtype=float).reshape(-1, VECTOR_DIMENSION), 0.0, 1.0)
    return records.sum(axis=0)


def vector_sum_l2(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: the sum of records in [0, 1]^d with Laplace noise scaled by the ℓ2
    sensitivity √d instead of the ℓ1 sensitivity d: (√d·ε)-DP, 2ε at d = 4."""
    scale = math.sqrt(VECTOR_DIMENSION) / EPSILON
    return _vector_sum(data) + rng.laplace(0.0, scale, (size, VECTOR_DIMENSION))


def vector_sum_l1(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """FIXED: Laplace scale d/ε, the ℓ1 sensitivity of adding one record (Dwork, Roth
    2014, Thm. 3.6): ε-DP."""
    scale = VECTOR_DIMENSION / EPSILON
    return _vector_sum(data) + rng.laplace(0.0, scale, (size, VECTOR_DIMENSION))


# ------------------------------------------------------------ Gaussian: log10 versus ln


def classic_sigma(*, log: str = "ln") -> float:
    """σ of the classic Gaussian mechanism, Δ√(2 ln(1.25/δ))/ε with Δ = 1 (Dwork, Roth
    2014, Thm. A.1); ``log = "log10"`` is the bug."""
    ratio = 1.25 / GAUSSIAN_DELTA
    logarithm = math.log(ratio) if log == "ln" else math.log10(ratio)
    return math.sqrt(2.0 * logarithm) / GAUSSIAN_EPSILON


def gaussian_ln(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """FIXED: a sum query (Δ = 1) with the classic σ: exactly (1/σ)-GDP."""
    return float(np.sum(data)) + rng.normal(0.0, classic_sigma(log="ln"), size)


def gaussian_log10(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: the classic σ computed with log10 for ln: σ is √(ln 10) ≈ 1.517 times too
    small, so the release is 1.517/σ-GDP, not the 1/σ its calibration promises."""
    return float(np.sum(data)) + rng.normal(0.0, classic_sigma(log="log10"), size)


# ------------------------------------------------------------------ randomised response


def _k_rr(data: np.ndarray, rng: np.random.Generator, size: int, *, among_all: bool) -> np.ndarray:
    k = RR_CATEGORIES
    value = int(_queries(data)[0])
    keep = math.exp(EPSILON) / (math.exp(EPSILON) + k - 1)
    kept = rng.random(size) < keep
    if among_all:
        other = rng.integers(0, k, size)
    else:
        shift = rng.integers(1, k, size)  # uniform over the k − 1 other categories
        other = (value + shift) % k
    return np.where(kept, value, other).astype(float)


def k_rr(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """FIXED: k-ary randomised response: keep w.p. e^ε/(e^ε + k − 1), else one of the
    k − 1 OTHER categories uniformly: ε-DP."""
    return _k_rr(data, rng, size, among_all=False)


def k_rr_shifted(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: the keep probability of k-RR, but the replacement is drawn among ALL k
    categories (the formula of one variant with the sampler of the other). The true
    value comes out w.p. p + (1 − p)/k: ln(1 + k·p/(1 − p)) = ln(1 + 4e/3) ≈ 1.531-DP at
    ε = 1, k = 4."""
    return _k_rr(data, rng, size, among_all=True)


# ------------------------------------------------------------------ exponential mechanism


def _exponential(
    data: np.ndarray, rng: np.random.Generator, size: int, *, factor: float
) -> np.ndarray:
    u = _queries(data)
    logits = factor * EPSILON * u
    p = np.exp(logits - logits.max())
    p /= p.sum()
    return rng.choice(u.size, size=size, p=p).astype(float)


def exponential_half(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """FIXED: P[r] ∝ exp(ε·u(r)/(2Δ)), Δ = 1: ε-DP (Dwork, Roth 2014, Thm. 3.10)."""
    return _exponential(data, rng, size, factor=0.5)


def exponential_no_half(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: P[r] ∝ exp(ε·u(r)/Δ), the factor 2 dropped (valid only for utilities that
    all move the same way): up to 2ε-DP when the utilities move in opposite directions."""
    return _exponential(data, rng, size, factor=1.0)


# ----------------------------------------------------------------------------- clipping


def clipped_sum(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """FIXED: the sum of records clipped to [0, 1] plus Lap(1/ε): ε-DP."""
    return float(np.clip(_queries(data), 0.0, 1.0).sum()) + rng.laplace(0.0, 1.0 / EPSILON, size)


def unclipped_sum(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: Lap(1/ε) calibrated to records in [0, 1], but the records are never
    clipped: a record of value v moves the sum by v, (v·ε)-DP."""
    return float(_queries(data).sum()) + rng.laplace(0.0, 1.0 / EPSILON, size)


# ------------------------------------------------------------------------ floating point


def float_laplace_naive(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """BUGGY: ``f(D) + rng.laplace(0, 1/ε)``, numpy's inverse-CDF Laplace sampler in double
    precision. The set of doubles it can output depends on f(D), so single outputs
    identify it (Mironov 2012, §4): not ε-DP for any ε."""
    return float(np.sum(data)) + rng.laplace(0.0, 1.0 / EPSILON, size)


#: The snapping mechanism's clamp bound B (outputs and inputs in [−B, B]).
SNAP_BOUND = 1_000.0


def float_laplace_snapping(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """FIXED: Mironov's snapping mechanism: clamp(Λ·round((clamp(q) ± b·ln U)/Λ)), Λ the
    smallest power of two ≥ b. (1/λ + 2⁻⁴⁹·B/λ²)-DP for b = 1/λ (Mironov 2012, Thm. 1);
    at B = 1000 the extra term is < 2·10⁻¹², so its audit claims ε = 1 + 10⁻⁶."""
    b = 1.0 / EPSILON
    lam = 2.0 ** math.ceil(math.log2(b))
    q = float(np.clip(np.sum(data), -SNAP_BOUND, SNAP_BOUND))
    sign = np.where(rng.random(size) < 0.5, -1.0, 1.0)
    u = 1.0 - rng.random(size)  # uniform on (0, 1]
    noisy = q + sign * b * np.log(u)
    return np.clip(lam * np.round(noisy / lam), -SNAP_BOUND, SNAP_BOUND)
