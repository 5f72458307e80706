"""The likelihood-ratio attack, LiRA (Carlini et al. 2022)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from scipy import stats

from dpaudit.attacks.base import check_int, logit_confidence
from dpaudit.attacks.reference import (
    ReferenceAttack,
    ReferenceLogits,
    balanced_halves,
    train_models,
)
from dpaudit.errors import check_choice

__all__ = ["LIRA_VARIANTS", "LiraAttack", "balanced_halves", "lira_scores", "train_models"]

# Carlini et al. (2022, ablation over the number of shadow models) find a single global
# variance better than per-example variances when few reference models are available;
# "auto" switches at 64 reference models (32 in / 32 out per example), the regime of their
# per-example results.
_AUTO_PER_EXAMPLE_FROM = 64
# Floor on a fitted standard deviation, relative to the global one: a per-example fit on
# identical confidences (e.g. rows every reference model fits perfectly) would otherwise
# give σ = 0 and infinite scores.
_RELATIVE_SIGMA_FLOOR = 1e-2

LiraVariant = Literal["online", "offline"]
LiraVariance = Literal["per-example", "global"]
_VARIANTS: tuple[LiraVariant, ...] = ("online", "offline")
_FITTED_VARIANCES: tuple[LiraVariance, ...] = ("per-example", "global")
_VARIANCES: tuple[LiraVariance | Literal["auto"], ...] = (*_FITTED_VARIANCES, "auto")


def lira_scores(
    target_phi: np.ndarray,
    reference_phi: np.ndarray,
    reference_in: np.ndarray,
    *,
    variant: LiraVariant = "online",
    variance: LiraVariance = "per-example",
) -> np.ndarray:
    """LiRA's test statistic from logit-scaled confidences.

    Args:
        target_phi: ``(T, m)`` φ of the target model(s) on the audited rows.
        reference_phi: ``(K, m)`` φ of the reference models on the same rows.
        reference_in: ``(K, m)`` bool, whether reference model k trained on row i.
        variant: ``"online"`` — log N(φ; μ_in, σ_in²) − log N(φ; μ_out, σ_out²), the
            log-likelihood ratio of Carlini et al. (2022) Algorithm 1; ``"offline"`` — the
            one-sided test on the "out" fit only, log P[Z ≤ φ] for Z ~ N(μ_out, σ_out²)
            (their offline attack; the log keeps the far tail ordered).
        variance: ``"per-example"`` σ per row, or ``"global"`` one σ for all rows (pooled
            within-row deviations), per hypothesis.

    Returns:
        ``(T, m)`` float64 scores, larger meaning "member".
    """
    check_choice("variant", variant, _VARIANTS)
    check_choice("variance", variance, _FITTED_VARIANCES)
    mu_out, sd_out = _fit(reference_phi, ~reference_in, variance)
    if variant == "offline":
        return stats.norm.logcdf(target_phi, loc=mu_out, scale=sd_out)
    mu_in, sd_in = _fit(reference_phi, reference_in, variance)
    return stats.norm.logpdf(target_phi, loc=mu_in, scale=sd_in) - stats.norm.logpdf(
        target_phi, loc=mu_out, scale=sd_out
    )


def _fit(phi: np.ndarray, mask: np.ndarray, variance: str) -> tuple[np.ndarray, np.ndarray]:
    counts = mask.sum(axis=0)
    mean = np.where(mask, phi, 0.0).sum(axis=0) / np.maximum(counts, 1)
    dev2 = np.where(mask, (phi - mean) ** 2, 0.0)
    # Unbiased pooled variance: Σ over rows of within-row squares / Σ (n_i − 1).
    pooled = np.sqrt(dev2.sum() / max(int((counts - 1).clip(min=0).sum()), 1))
    if variance == "global":
        sd = np.full(mean.shape, pooled)
    else:
        sd = np.sqrt(dev2.sum(axis=0) / np.maximum(counts - 1, 1))
    sd = np.maximum(sd, _RELATIVE_SIGMA_FLOOR * pooled + 1e-12)
    return mean, sd


class LiraAttack(ReferenceAttack):
    """LiRA: per-example Gaussian fits of in / out confidences from reference models.

    Reference models are trained with the target's recipe, each on a random half of a pool
    made of the audited rows (and, with ``include_population``, the attacker's population
    rows), every pool row in exactly half of them (:func:`balanced_halves`). The pool's
    halves have about the target's training size when the target trained on half the
    audited rows (as :func:`dpaudit.membership.audit_membership` arranges).

    Args:
        num_reference_models: K ≥ 2 (online needs both halves non-empty).
        variant: ``"online"`` (likelihood ratio) or ``"offline"`` (out fit only).
        variance: ``"per-example"``, ``"global"`` or ``"auto"`` (per-example from 64
            reference models on, global below, following Carlini et al. 2022).
        include_population: also put the population rows into the reference pool.

    References:
        Carlini, Chien, Nasr, Song, Terzis, Tramèr (2022), "Membership Inference Attacks
        From First Principles", IEEE S&P, Algorithm 1 (online LiRA, and the offline
        variant that fits only the "out" Gaussian), the logit scaling of the confidence, and
        the fixed (global) variance for few shadow models.
    """

    name: ClassVar[str] = "lira"

    def __init__(
        self,
        *,
        num_reference_models: int = 64,
        variant: LiraVariant = "online",
        variance: LiraVariance | Literal["auto"] = "auto",
        include_population: bool = False,
    ) -> None:
        self.num_reference_models = check_int(
            "num_reference_models", num_reference_models, minimum=2
        )
        self.variant = check_choice("variant", variant, _VARIANTS)
        self.variance = check_choice("variance", variance, _VARIANCES)
        self.include_population = bool(include_population)

    def options(self) -> dict[str, Any]:
        return {
            "num_reference_models": self.num_reference_models,
            "variant": self.variant,
            "variance": self.variance,
            "include_population": self.include_population,
        }

    def resolved_variance(self) -> LiraVariance:
        if self.variance != "auto":
            return self.variance
        return "per-example" if self.num_reference_models >= _AUTO_PER_EXAMPLE_FROM else "global"

    def score_from(self, refs: ReferenceLogits) -> np.ndarray:
        """``(T, m)`` LiRA scores from a trained reference set (:mod:`.reference`)."""
        return lira_scores(
            logit_confidence(refs.target_x, refs.y),
            logit_confidence(refs.reference_x, refs.y),
            refs.reference_in,
            variant=self.variant,
            variance=self.resolved_variance(),
        )


#: The four LiRA variants by name: (online | offline) × (per-example | global variance).
#: "lira" itself stays the configurable attack (online, variance "auto").
LIRA_VARIANTS: dict[str, dict[str, Any]] = {
    "lira-online": {"variant": "online", "variance": "per-example"},
    "lira-offline": {"variant": "offline", "variance": "per-example"},
    "lira-online-global": {"variant": "online", "variance": "global"},
    "lira-offline-global": {"variant": "offline", "variance": "global"},
}
