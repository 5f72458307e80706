"""Exact noise-free releases of the ERM trainers and their worst-case neighbouring pair.

Output perturbation (Chaudhuri, Monteleoni, Sarwate 2011, JMLR 12, Alg. 1) releases
θ*(D) + b and multi-party model aggregation (Jayaraman, Wang, Evans, Gu 2018, NeurIPS,
model aggregation) releases the average of m parties' θ*ₚ plus b; in both, b has density
∝ exp(−‖b‖/s). For two neighbouring datasets with noise-free releases c₀ (D) and c₁
(D′), the log-likelihood ratio of a released θ is

    L(θ) = log p(θ − c₁) − log p(θ − c₀) = (‖θ − c₀‖ − ‖θ − c₁‖)/s,

the Neyman–Pearson statistic of "D′" against "D". Its largest value is ‖c₁ − c₀‖/s: with
s = bound/ε the pair can show at most ε·‖c₁ − c₀‖/bound (the *realised* ε), and in d
dimensions L concentrates far below that maximum (the norm noise's privacy loss is
reached only when b points along c₁ − c₀), so finitely many trials certify much less.

The neighbouring relation is Chaudhuri et al.'s: replace one record, every ‖x‖ ≤ 1. The
worst-case pair replaces a record r by a record c, both from a candidate set of unit
vectors with either label, chosen to maximise ‖θ*(D₀ ∪ {c}) − θ*(D₀ ∪ {r})‖ over the
candidates (exactly computed minimisers, not a bound).

Pure numpy; no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpaudit.errors import DpauditError

__all__ = [
    "WorstCasePair",
    "gamma_ball_log_ratio",
    "gamma_ball_pair_llr",
    "multiparty_average",
    "multiparty_owners",
    "regularised_logistic_optimum",
    "unit_candidates",
    "worst_case_pair",
]


def regularised_logistic_optimum(
    X: np.ndarray,
    signs: np.ndarray,
    membership: np.ndarray,
    *,
    lam: float,
    average: bool = True,
    iterations: int = 30,
) -> np.ndarray:
    """The minimisers w_k of (1/n_k)·Σ_{i∈k} log(1 + e^{−y_i⟨w, x_i⟩}) + (λ/2)‖w‖².

    Newton's method from w = 0 in float64, solved once per DISTINCT membership row (the
    models of one audit arm share their dataset). The objective is λ-strongly convex with
    a Lipschitz Hessian, so Newton converges quadratically; 30 steps are far past machine
    precision for the problems audited (the tests check the gradient is ≤ 1e-12).

    Args:
        X: ``(n, d)`` features.
        signs: ``(n,)`` labels in {−1, +1}.
        membership: ``(K, n)`` booleans.
        lam: λ > 0.
        average: ``False`` drops the 1/n_k in front of the loss sum (a planted bug used
            in tests: the sensitivity is then 2/λ, not 2/(nλ)).
        iterations: Newton steps.

    Returns:
        ``(K, d)`` minimisers.
    """
    x = np.asarray(X, dtype=np.float64)
    s = np.asarray(signs, dtype=np.float64)
    rows, inverse = np.unique(np.asarray(membership, dtype=bool), axis=0, return_inverse=True)
    m = rows.astype(np.float64)
    counts = m.sum(axis=1, keepdims=True)
    if np.any(counts == 0):
        raise DpauditError("Every model needs at least one row to train on. Got an empty one.")
    weight = m / counts if average else m
    k, d = m.shape[0], x.shape[1]
    w = np.zeros((k, d))
    eye = np.eye(d)
    for _ in range(iterations):
        margins = s * (w @ x.T)  # (K, n)
        p = 0.5 * (1.0 - np.tanh(0.5 * margins))  # σ(−margin) = −∂ℓ/∂margin
        grad = -(weight * p * s) @ x + lam * w
        curvature = weight * p * (1.0 - p)
        hess = np.einsum("kn,ni,nj->kij", curvature, x, x) + lam * eye
        w = w - np.linalg.solve(hess, grad[..., None])[..., 0]
    out: np.ndarray = w[np.asarray(inverse).reshape(-1)]
    return out


def multiparty_owners(n: int, parties: int, fixed: tuple[int, ...] = ()) -> np.ndarray:
    """Row i's party: i mod m (round-robin), but the rows in ``fixed`` go to party 0."""
    owner = np.arange(n) % parties
    owner[list(fixed)] = 0
    return owner


def multiparty_average(
    X: np.ndarray,
    signs: np.ndarray,
    membership: np.ndarray,
    *,
    lam: float,
    owner: np.ndarray,
    parties: int,
) -> tuple[np.ndarray, int]:
    """The average of the m parties' λ-regularised minimisers, and n₍₁₎.

    Returns:
        ``(K, d)`` averages and the smallest party size over all models.

    Raises:
        DpauditError: a party without rows.
    """
    total = np.zeros((membership.shape[0], X.shape[1]))
    smallest = X.shape[0]
    for p in range(parties):
        part = membership & (owner == p)[None, :]
        sizes = part.sum(axis=1)
        if sizes.min() == 0:
            raise DpauditError(f"Party {p} has no rows: use fewer parties or more data.")
        smallest = min(smallest, int(sizes.min()))
        total += regularised_logistic_optimum(X, signs, part, lam=lam)
    return total / parties, smallest


def gamma_ball_log_ratio(
    released: np.ndarray, centre_out: np.ndarray, centre_in: np.ndarray, scale: float
) -> np.ndarray:
    """log p(θ − c₁) − log p(θ − c₀) for density ∝ exp(−‖b‖/scale); larger means "in"."""
    theta = np.atleast_2d(np.asarray(released, dtype=np.float64))
    far = np.linalg.norm(theta - centre_out, axis=1)
    near = np.linalg.norm(theta - centre_in, axis=1)
    out: np.ndarray = (far - near) / scale
    return out


def gamma_ball_pair_llr(
    distance: float, scale: float, dim: int, *, rng: np.random.Generator, size: int, arm: int
) -> np.ndarray:
    """Draws of the exact log-likelihood ratio of a pair at ``distance`` apart.

    With b of density ∝ exp(−‖b‖/s) in ``dim`` dimensions, ‖b‖ = R ~ Gamma(dim, s) and
    the cosine T of b's angle to c₁ − c₀ is that of a uniform direction,
    T = 2·Beta((dim − 1)/2, (dim − 1)/2) − 1, independent of R. With D = ‖c₁ − c₀‖:
    on D (arm 0, θ = c₀ + b) L = (R − √(R² − 2RDT + D²))/s; on D′ (arm 1, θ = c₁ + b)
    L = (√(R² + 2RDT + D²) − R)/s. Two scalars per draw instead of a dim-vector.
    """
    r = rng.gamma(dim, scale, size)
    if dim == 1:
        cos = np.where(rng.random(size) < 0.5, -1.0, 1.0)
    else:
        cos = 2.0 * rng.beta((dim - 1) / 2, (dim - 1) / 2, size) - 1.0
    if arm == 0:
        out: np.ndarray = (
            r - np.sqrt(np.maximum(r * r - 2 * r * distance * cos + distance**2, 0))
        ) / scale
    else:
        out = (np.sqrt(np.maximum(r * r + 2 * r * distance * cos + distance**2, 0)) - r) / scale
    return out


def unit_candidates(X: np.ndarray) -> np.ndarray:
    """Unit-norm candidate records: ±e_j and ± the principal axes of XᵀX, deduplicated.

    The principal axis of least variance is where the data's curvature is smallest, so a
    record there moves the minimiser most (the Hessian is closest to λI along it).
    """
    x = np.asarray(X, dtype=np.float64)
    d = x.shape[1]
    _, vecs = np.linalg.eigh(x.T @ x)
    base = np.concatenate([np.eye(d), vecs.T])
    dirs = np.concatenate([base, -base])
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    keep: list[np.ndarray] = []
    for v in dirs:
        if all(np.linalg.norm(v - u) > 1e-9 for u in keep):
            keep.append(v)
    return np.array(keep)


@dataclass(frozen=True)
class WorstCasePair:
    """The replaced record r (in D) and the canary c (in D′) that move the minimiser most.

    Attributes:
        replaced: ``(d,)`` r, ‖r‖ = 1.
        replaced_sign: r's label in {−1, +1}.
        canary: ``(d,)`` c, ‖c‖ = 1.
        canary_sign: c's label.
        distance: ‖θ*(D₀ ∪ {c}) − θ*(D₀ ∪ {r})‖ over the rows ``fixed`` of D₀.
        candidates: number of candidate records searched.
    """

    replaced: np.ndarray
    replaced_sign: float
    canary: np.ndarray
    canary_sign: float
    distance: float
    candidates: int


def worst_case_pair(
    X: np.ndarray, signs: np.ndarray, *, lam: float, rows: np.ndarray | None = None
) -> WorstCasePair:
    """Search :func:`unit_candidates` × {±1} for the pair (r, c) farthest apart in θ*.

    Args:
        X: ``(n, d)`` the fixed records D₀.
        signs: their labels.
        lam: λ.
        rows: the rows of D₀ the moved model trains on (a party's rows); default all.
    """
    x = np.asarray(X, dtype=np.float64)
    n = x.shape[0]
    use = np.ones(n, dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    dirs = unit_candidates(x[use])
    recs = np.concatenate([dirs, dirs])
    rec_signs = np.concatenate([np.ones(len(dirs)), -np.ones(len(dirs))])
    c = len(recs)
    aug = np.concatenate([x, recs])
    aug_signs = np.concatenate([np.asarray(signs, dtype=np.float64), rec_signs])
    membership = np.zeros((c, n + c), dtype=bool)
    membership[:, :n] = use
    membership[np.arange(c), n + np.arange(c)] = True
    theta = regularised_logistic_optimum(aug, aug_signs, membership, lam=lam)
    dist = np.linalg.norm(theta[:, None, :] - theta[None, :, :], axis=2)
    i, j = np.unravel_index(int(np.argmax(dist)), dist.shape)
    return WorstCasePair(
        replaced=recs[i],
        replaced_sign=float(rec_signs[i]),
        canary=recs[j],
        canary_sign=float(rec_signs[j]),
        distance=float(dist[i, j]),
        candidates=c,
    )
