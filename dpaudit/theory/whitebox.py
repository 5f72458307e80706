"""White-box scores of a gradient canary: the likelihood ratio of Poisson DP-SGD.

A white-box auditor of DP-SGD sees, at every step t, the privatised gradient's
coordinate along a Dirac gradient canary. Rescaled to the units of the noisy SUM
(clipped per-example gradients summed, N(0, σ²C²) noise added, before any division by
the batch size), that observation is

    x_t ~ N(0, σ²C²)                                    canary out (H0),
    x_t ~ (1 − q)·N(0, σ²C²) + q·N(C, σ²C²)             canary in (H1),

independently over steps, when no real example's gradient touches the coordinate and
the canary joins each step's Poisson batch with probability q (always, q = 1, for
full-batch DP-GD). By the Neyman–Pearson lemma the most powerful test of H0 against H1
at every level thresholds the log-likelihood ratio of the whole transcript, which is
the sum over steps of the per-step log-ratios (the steps are independent given the
hypothesis):

    Λ = Σ_t log[(1 − q) + q·exp((C·x_t − C²/2) / (σ²C²))].

For q = 1 this is (Σ_t x_t)/(σ²C) − T/(2σ²), an increasing affine map of the plain sum
of projections (Nasr et al. 2023, §3), so both scores give the same threshold tests;
for q < 1 the plain sum is not the likelihood ratio and loses power: it weighs a step
with a large observation (the canary was probably sampled) no more than a step with a
small one.

Pure functions of arrays and numbers; no torch (the torch-free statistics core:
docs/architecture.md, "The statistics core").

References:
    Neyman, Pearson 1933, "On the Problem of the Most Efficient Tests of Statistical
    Hypotheses" (the lemma); Abadi et al. 2016, Algorithm 1 (Poisson sampling, noise
    N(0, σ²C²) on the clipped sum); Dong, Roth, Su 2019 (arXiv:1905.02383v3), §5
    (Poisson-subsampled Gaussian steps, whose trade-off the mixture describes);
    Nasr et al. 2023, "Tight Auditing of Differentially Private Machine Learning"
    (USENIX Security), §3 (Dirac gradient canaries, the summed white-box score).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from dpaudit.errors import DpauditError, check_in_interval

__all__ = [
    "WHITE_BOX_SCORES",
    "WhiteBoxScore",
    "mixture_log_likelihood_ratio",
]

WhiteBoxScore = Literal["likelihood-ratio", "sum"]
#: The white-box statistics a canary audit can score runs by (``[dpsgd] score``).
WHITE_BOX_SCORES: tuple[WhiteBoxScore, ...] = ("likelihood-ratio", "sum")


def _rates(sampling_rate: float | np.ndarray) -> np.ndarray:
    q = np.asarray(sampling_rate, dtype=np.float64)
    if q.size == 1:
        check_in_interval("sampling_rate", float(q.reshape(-1)[0]), 0.0, 1.0, low_open=True)
    elif not np.all((q > 0.0) & (q <= 1.0)):
        bad = float(q[~((q > 0.0) & (q <= 1.0))].reshape(-1)[0])
        raise DpauditError(f"The 'sampling_rate' parameter must be in (0, 1]. Got {bad!r} instead.")
    return q


def mixture_log_likelihood_ratio(
    observations: np.ndarray | float,
    *,
    sampling_rate: float | np.ndarray,
    noise_multiplier: float,
    clipping_norm: float,
) -> np.ndarray:
    """Per-step log-likelihood ratio of (1 − q)N(0, σ²C²) + qN(C, σ²C²) to N(0, σ²C²).

    log[(1 − q) + q·exp((C·x − C²/2)/(σ²C²))], computed as
    logaddexp(log1p(−q), log q + (x/C − 1/2)/σ²): no overflow for large x, no loss of
    precision for small q, and exactly (x/C − 1/2)/σ² for q = 1.

    Args:
        observations: the per-step observations x_t in units of the noisy sum (clipped
            gradients summed plus N(0, σ²C²) noise, before any division), any shape.
        sampling_rate: q in (0, 1], a number or an array broadcastable against
            ``observations`` (one rate per model).
        noise_multiplier: σ > 0.
        clipping_norm: C > 0, the canary's norm (a clipped gradient at the bound).

    Returns:
        The per-step log-ratios, float64, the broadcast shape of the inputs. Summed over
        steps they are the Neyman–Pearson score of a run (larger = canary in).

    Raises:
        DpauditError: q outside (0, 1], σ or C not positive, or a non-finite
            observation.

    References:
        Neyman, Pearson 1933 (the most powerful test thresholds the likelihood ratio);
        Abadi et al. 2016, Algorithm 1 (the Poisson-subsampled Gaussian step).
    """
    sigma = check_in_interval(
        "noise_multiplier", noise_multiplier, 0.0, float("inf"), low_open=True, high_open=True
    )
    clip = check_in_interval(
        "clipping_norm", clipping_norm, 0.0, float("inf"), low_open=True, high_open=True
    )
    q = _rates(sampling_rate)
    x = np.asarray(observations, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise DpauditError("The 'observations' parameter must hold finite numbers only.")
    shifted = (x / clip - 0.5) / (sigma * sigma)
    with np.errstate(divide="ignore"):
        # log1p(−1) = −inf for q = 1, and logaddexp(−inf, a) = a exactly.
        log_out = np.log1p(-q)
    result: np.ndarray = np.logaddexp(log_out, np.log(q) + shifted)
    return result
