"""The sparse vector technique (SVT), correct and buggy, for `audits/search-svt*.toml`.

The input is a vector of query answers, each of sensitivity Δ = 1. SVT reports, query by
query, whether the noisy answer is above a noisy threshold, and stops after the first
"above" (c = 1). Output per trial: one entry per query, 1 (above), 0 (below) or −1 (not
answered: SVT had stopped).

``svt`` is Algorithm 1 of Lyu, Su, Li, "Understanding the sparse vector technique for
differential privacy", PVLDB 10(6), 2017: threshold noise Lap(Δ/ε₁), query noise
Lap(2cΔ/ε₂), ε₁ = ε₂ = ε/2; it is ε-DP (their Thm. 2). ``svt_no_query_noise`` omits the
query noise (their Alg. 5, after Stoddard et al. 2014), which they show is not ε'-DP for
any finite ε': the search finds a pair where some queries go up and others go down.
"""

from __future__ import annotations

import numpy as np

EPSILON = 1.0
THRESHOLD = 1.0


def _svt(data: np.ndarray, rng: np.random.Generator, size: int, query_noise: bool) -> np.ndarray:
    q = np.asarray(data, dtype=float).reshape(-1)
    eps1 = eps2 = EPSILON / 2
    rho = rng.laplace(0.0, 1.0 / eps1, (size, 1))
    nu = rng.laplace(0.0, 2.0 / eps2, (size, q.size)) if query_noise else 0.0
    above = q + nu >= THRESHOLD + rho
    first = np.where(above.any(axis=1), above.argmax(axis=1), q.size)
    index = np.arange(q.size)
    # before the first "above": 0; at it: 1; after it: −1 (SVT has stopped)
    return np.where(index < first[:, None], 0.0, np.where(index == first[:, None], 1.0, -1.0))


def svt(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """SVT with c = 1 (Lyu, Su, Li 2017, Alg. 1): ε-DP with ε = EPSILON."""
    return _svt(data, rng, size, query_noise=True)


def svt_no_query_noise(data: np.ndarray, *, rng: np.random.Generator, size: int) -> np.ndarray:
    """SVT without noise on the queries (Lyu, Su, Li 2017, Alg. 5): not DP at all."""
    return _svt(data, rng, size, query_noise=False)
