"""Reference values for dpaudit.bounds.fdp_one_run from jax_privacy's f-DP one-run auditor.

Kept for the record: tests/test_one_run_fdp.py holds the numbers this script printed as
literals. jax_privacy is NOT a dependency of dpaudit; run this in a scratch virtual
environment outside the repository (CPU only; it pulls jax and jaxlib, no CUDA):

    python3 -m venv /tmp/jaxp
    /tmp/jaxp/bin/pip install jax-privacy==2.0.0
    /tmp/jaxp/bin/python scripts/fdp_one_run_references.py

What it computes. jax_privacy 2.0's ``CanaryScoreAuditor.epsilon_one_run_fdp`` audits
Mahloujifar, Melis, Chaudhuri (ICML 2025, arXiv:2410.22235v1) with the Gaussian family
and reports an ε at a δ: the largest ε whose (ε, δ)-tight Gaussian mechanism the test
rejects, i.e. μ = 1/σ(ε, δ) with σ from dp_accounting's ``get_sigma_gaussian``. The
script feeds it scores that produce exactly (m, r, v) at one explicit threshold (v
"in" canaries and r − v "out" canaries score 1, the rest 0, threshold 0.5) and prints,
per grid row, (m, r, v, confidence, δ, ε, 1/σ(ε, δ)). The test maps ε back to μ with
dpaudit.theory.gdp_mu and compares it with dpaudit's μ bound.

Each row is also recomputed through the private per-count function the public method
calls (``_epsilon_one_run_fdp``), and the two must agree exactly.
"""

from __future__ import annotations

import platform

import numpy as np

# (canaries m, guesses r, correct v, confidence c, δ). Rows span m from 100 to 10,000,
# guess fractions from 5 % to 100 %, accuracies from 70 % to 100 %, c from 0.9 to 0.999,
# and two δ (the μ must not depend on δ).
GRID: list[tuple[int, int, int, float, float]] = [
    (1000, 100, 94, 0.99, 1e-5),
    (1000, 100, 100, 0.95, 1e-5),
    (1000, 100, 80, 0.95, 1e-5),
    (1000, 200, 150, 0.95, 1e-5),
    (1000, 500, 400, 0.95, 1e-5),
    (1000, 1000, 700, 0.95, 1e-5),
    (1000, 100, 94, 0.99, 1e-6),
    (10000, 1000, 900, 0.95, 1e-5),
    (10000, 500, 480, 0.99, 1e-5),
    (100, 50, 45, 0.9, 1e-5),
    (100, 100, 75, 0.95, 1e-5),
    (5000, 2000, 1500, 0.999, 1e-5),
    (1000, 50, 50, 0.999, 1e-5),
]


def scores_for(m: int, r: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """In- and out-canary scores whose threshold 0.5 gives tp = v and fp = r − v."""
    n_in = min(m - (r - v), max(v, m // 2))
    n_out = m - n_in
    in_scores = np.zeros(n_in)
    in_scores[:v] = 1.0
    out_scores = np.zeros(n_out)
    out_scores[: r - v] = 1.0
    return in_scores, out_scores


def main() -> None:
    from importlib import metadata

    import dp_accounting
    import jax
    import jax_privacy
    import scipy
    from jax_privacy import auditing

    print(
        f"# jax-privacy {jax_privacy.__version__}, jax {jax.__version__}, "
        f"dp-accounting {metadata.version('dp-accounting')}, numpy {np.__version__}, "
        f"scipy {scipy.__version__}, Python {platform.python_version()}"
    )
    print("# (m, r, v, confidence, delta, epsilon, 1/sigma(epsilon, delta))")
    for m, r, v, c, delta in GRID:
        in_scores, out_scores = scores_for(m, r, v)
        auditor = auditing.CanaryScoreAuditor(in_scores, out_scores)
        eps = float(
            auditor.epsilon_one_run_fdp(
                1.0 - c, delta, threshold_strategy=auditing.Explicit(threshold=0.5)
            )
        )
        direct = float(auditing._epsilon_one_run_fdp(0.0, m, r, v, 1.0 - c, delta))
        if direct != eps:
            raise SystemExit(f"public and per-count results differ: {eps!r} vs {direct!r}")
        sigma = dp_accounting.get_sigma_gaussian(eps, delta)
        mu = 1.0 / sigma if sigma > 0 else float("inf")
        print(f"    ({m}, {r}, {v}, {c}, {delta}, {eps!r}, {mu!r}),")


if __name__ == "__main__":
    main()
