"""The relative membership inference attack, RMIA (Zarifzadeh, Liu, Shokri, ICML 2024)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from scipy.special import logsumexp

from dpaudit.attacks.base import check_int, log_softmax
from dpaudit.attacks.reference import ReferenceAttack, ReferenceLogits
from dpaudit.errors import DataError, DpauditError, check_choice

__all__ = ["RMIA_VARIANTS", "RmiaAttack", "rmia_scores", "true_class_log_probability"]

RmiaVariant = Literal["online", "offline"]
_VARIANTS: tuple[RmiaVariant, ...] = ("online", "offline")
# ML Privacy Meter's default for the offline approximation's a (the paper tunes a on a
# reference model treated as a target; with no such tuning 0.3 is their fallback).
_DEFAULT_OFFLINE_A = 0.3

#: The two RMIA variants by name ("rmia" is online).
RMIA_VARIANTS: dict[str, dict[str, Any]] = {
    "rmia": {"variant": "online"},
    "rmia-offline": {"variant": "offline"},
}


def true_class_log_probability(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log Pr(x | θ) = log softmax(logits)_y: ``(K, m, C)`` logits, ``(m,)`` labels → ``(K, m)``."""
    logp = log_softmax(logits)
    idx = np.broadcast_to(y[None, :, None], (*logp.shape[:2], 1))
    return np.take_along_axis(logp, idx, -1)[..., 0]


def _log_mean_exp(logp: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """log of the mean of exp(logp) over the models where ``mask`` holds (axis 0)."""
    counts = mask.sum(axis=0)
    total = logsumexp(np.where(mask, logp, -np.inf), axis=0)
    with np.errstate(divide="ignore"):
        return np.where(counts > 0, total - np.log(np.maximum(counts, 1)), -np.inf)


def _log_marginal(
    logp: np.ndarray, is_in: np.ndarray, *, variant: str, offline_a: float
) -> np.ndarray:
    """log Pr(·), the probability averaged over reference models, ``(K, n)`` → ``(n,)``."""
    log_out = _log_mean_exp(logp, ~is_in)
    if variant == "offline":
        # Offline RMIA sees only OUT models and approximates Pr(x) linearly from them:
        # Pr(x) = ½((1 + a)·Pr(x)_OUT + (1 − a)), i.e. Pr(x)_IN ≈ a·Pr(x)_OUT + (1 − a).
        high = np.log((1.0 + offline_a) / 2.0) + log_out
        if offline_a >= 1.0:
            return high
        return np.logaddexp(high, np.log((1.0 - offline_a) / 2.0))
    # Online: Pr(x) = ½(Pr(x)_IN + Pr(x)_OUT), the average over reference models of which
    # half trained on x. A row no model trained on (a population sample z outside the
    # reference pool) has only the OUT average.
    log_in = _log_mean_exp(logp, is_in)
    both = np.logaddexp(log_in, log_out) - np.log(2.0)
    return np.where(is_in.any(axis=0), both, log_out)


def rmia_scores(
    target_logp_x: np.ndarray,
    reference_logp_x: np.ndarray,
    reference_in: np.ndarray,
    target_logp_z: np.ndarray,
    reference_logp_z: np.ndarray,
    z_in: np.ndarray | None = None,
    *,
    variant: RmiaVariant = "online",
    offline_a: float = _DEFAULT_OFFLINE_A,
    gamma: float = 1.0,
) -> np.ndarray:
    """RMIA's score: the fraction of population samples z that x dominates.

    With Pr(x | θ) the model's probability of x's true label and Pr(x) its average over
    reference models, the pairwise likelihood ratio is
    LR_θ(x, z) = (Pr(x | θ) / Pr(x)) / (Pr(z | θ) / Pr(z)), and
    Score(x; θ) = Pr_{z ~ population}[LR_θ(x, z) ≥ γ], estimated on the given z.

    Args:
        target_logp_x: ``(T, m)`` log Pr(x | θ) of the target model(s) on the audited rows.
        reference_logp_x: ``(K, m)`` log Pr(x | θ_k) of the reference models.
        reference_in: ``(K, m)`` bool, whether reference model k trained on row i.
        target_logp_z: ``(T, n_z)`` log Pr(z | θ) of the target on the population samples.
        reference_logp_z: ``(K, n_z)`` log Pr(z | θ_k).
        z_in: ``(K, n_z)`` bool, whether reference model k trained on z (default: none did).
        variant: ``"online"`` (Pr(x) = ½(Pr_IN + Pr_OUT)) or ``"offline"`` (OUT models and
            the linear approximation with ``offline_a``, for x and z alike).
        offline_a: a in [0, 1] of the offline approximation.
        gamma: γ > 0, the threshold on the pairwise ratio.

    Returns:
        ``(T, m)`` float64 scores in [0, 1], larger meaning "member".

    Raises:
        DpauditError: a parameter is out of range or there is no population sample.

    References:
        Zarifzadeh, Liu, Shokri (2024), "Low-Cost High-Power Membership Inference
        Attacks", ICML, §3 (the pairwise likelihood ratio LR_θ(x, z), its Bayes-rule form
        from Pr(x | θ) / Pr(x), the score as the probability over z that it is ≥ γ, and
        Pr(x) as the average over reference models) and the offline approximation of Pr(x)
        from OUT models with the parameter a.
    """
    check_choice("variant", variant, _VARIANTS)
    if not 0.0 <= offline_a <= 1.0:
        raise DpauditError(f"The 'offline_a' parameter must be in [0, 1]. Got {offline_a!r}.")
    if not gamma > 0:
        raise DpauditError(f"The 'gamma' parameter must be > 0. Got {gamma!r}.")
    target_logp_z = np.atleast_2d(target_logp_z)
    n_z = target_logp_z.shape[-1]
    if n_z == 0:
        raise DataError("RMIA needs at least one population sample z; got none.")
    if z_in is None:
        z_in = np.zeros(reference_logp_z.shape, dtype=bool)
    log_px = _log_marginal(reference_logp_x, reference_in, variant=variant, offline_a=offline_a)
    log_pz = _log_marginal(reference_logp_z, z_in, variant=variant, offline_a=offline_a)
    log_ratio_x = np.atleast_2d(target_logp_x) - log_px  # log (Pr(x|θ) / Pr(x))
    log_ratio_z = target_logp_z - log_pz
    # LR(x, z) ≥ γ  ⇔  log ratio_z ≤ log ratio_x − log γ: count those z per target by a
    # binary search in the sorted z ratios (O((m + n_z) log n_z), not m × n_z).
    out = np.empty(log_ratio_x.shape, dtype=np.float64)
    for t in range(log_ratio_x.shape[0]):
        sorted_z = np.sort(log_ratio_z[t])
        out[t] = np.searchsorted(sorted_z, log_ratio_x[t] - np.log(gamma), side="right") / n_z
    return out


class RmiaAttack(ReferenceAttack):
    """RMIA: each audited row's likelihood ratio against population samples z.

    Reference models are trained exactly as LiRA's (:mod:`.reference`: each pool row in
    half of them), so RMIA and every LiRA variant can score from one reference set. The
    population samples z are ``population_samples`` rows of the attacker's population.

    Args:
        num_reference_models: K ≥ 2.
        variant: ``"online"`` (IN and OUT models) or ``"offline"`` (OUT models only, with
            the linear approximation of Pr(x)).
        offline_a: a in [0, 1] of the offline approximation (default 0.3, ML Privacy
            Meter's fallback; a = 1 means Pr(x) = Pr(x)_OUT).
        gamma: γ > 0, the threshold on the pairwise likelihood ratio (default 1).
        population_samples: how many population rows serve as z (at most all of them).
        include_population: also put the population rows into the reference pool.

    References:
        Zarifzadeh, Liu, Shokri (2024), "Low-Cost High-Power Membership Inference
        Attacks", ICML (:func:`rmia_scores`).
    """

    name: ClassVar[str] = "rmia"

    def __init__(
        self,
        *,
        num_reference_models: int = 64,
        variant: RmiaVariant = "online",
        offline_a: float = _DEFAULT_OFFLINE_A,
        gamma: float = 1.0,
        population_samples: int = 1000,
        include_population: bool = False,
    ) -> None:
        self.num_reference_models = check_int(
            "num_reference_models", num_reference_models, minimum=2
        )
        self.variant = check_choice("variant", variant, _VARIANTS)
        if isinstance(offline_a, bool) or not 0.0 <= float(offline_a) <= 1.0:
            raise DpauditError(
                f"The 'offline_a' parameter must be a number in [0, 1]. Got {offline_a!r}."
            )
        if isinstance(gamma, bool) or not float(gamma) > 0:
            raise DpauditError(f"The 'gamma' parameter must be a number > 0. Got {gamma!r}.")
        self.offline_a = float(offline_a)
        self.gamma = float(gamma)
        self.population_samples = check_int("population_samples", population_samples, minimum=1)
        self.include_population = bool(include_population)

    def options(self) -> dict[str, Any]:
        return {
            "num_reference_models": self.num_reference_models,
            "variant": self.variant,
            "offline_a": self.offline_a,
            "gamma": self.gamma,
            "population_samples": self.population_samples,
            "include_population": self.include_population,
        }

    def needed_population_samples(self) -> int:
        return self.population_samples

    def score_from(self, refs: ReferenceLogits) -> np.ndarray:
        """``(T, m)`` RMIA scores from a trained reference set (:mod:`.reference`)."""
        if refs.y_z.size == 0:
            raise DataError("RMIA needs population rows (its reference samples z); got none.")
        return rmia_scores(
            true_class_log_probability(refs.target_x, refs.y),
            true_class_log_probability(refs.reference_x, refs.y),
            refs.reference_in,
            true_class_log_probability(refs.target_z, refs.y_z),
            true_class_log_probability(refs.reference_z, refs.y_z),
            refs.z_in,
            variant=self.variant,
            offline_a=self.offline_a,
            gamma=self.gamma,
        )
