"""The likelihood-ratio attack, LiRA (Carlini et al. 2022)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import numpy as np
from scipy import optimize, special, stats

from dpaudit.attacks.base import check_int, logit_confidence
from dpaudit.attacks.reference import (
    ReferenceAttack,
    ReferenceLogits,
    balanced_halves,
    train_models,
)
from dpaudit.errors import check_choice

__all__ = [
    "LIRA_VARIANTS",
    "LiraAttack",
    "balanced_halves",
    "lira_scores",
    "prior_degrees_of_freedom",
    "shrunk_variances",
    "train_models",
]

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
LiraVariance = Literal["per-example", "global", "shrunk", "shrunk-t"]
_VARIANTS: tuple[LiraVariant, ...] = ("online", "offline")
_FITTED_VARIANCES: tuple[LiraVariance, ...] = ("per-example", "global", "shrunk", "shrunk-t")
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
        variance: ``"per-example"`` σ per row, ``"global"`` one σ for all rows (pooled
            within-row deviations), ``"shrunk"`` each row's variance shrunk toward the
            global one (:func:`shrunk_variances`), per hypothesis; ``"shrunk-t"`` the same
            prior with the Student-t posterior predictive in place of the Gaussian: φ of a
            new model ~ t_{ν+d_i}(mean_i, σ̃_i² (1 + 1/n_i)) (the mean's uncertainty under a
            flat prior on it, and heavier tails when few models fit σ̃_i).

    Returns:
        ``(T, m)`` float64 scores, larger meaning "member".
    """
    check_choice("variant", variant, _VARIANTS)
    check_choice("variance", variance, _FITTED_VARIANCES)
    mu_out, sd_out, df_out = _fit(reference_phi, ~reference_in, variance)
    if variant == "offline":
        return _log_cdf(target_phi, mu_out, sd_out, df_out)
    mu_in, sd_in, df_in = _fit(reference_phi, reference_in, variance)
    return _log_pdf(target_phi, mu_in, sd_in, df_in) - _log_pdf(target_phi, mu_out, sd_out, df_out)


def _log_pdf(x: np.ndarray, loc: np.ndarray, scale: np.ndarray, df: np.ndarray) -> np.ndarray:
    """log density of N(loc, scale²) where df = ∞, of loc + scale·t_df elsewhere."""
    return _log_of("logpdf", x, loc, scale, df)


def _log_cdf(x: np.ndarray, loc: np.ndarray, scale: np.ndarray, df: np.ndarray) -> np.ndarray:
    """log P[Z ≤ x] for the distribution of :func:`_log_pdf`."""
    return _log_of("logcdf", x, loc, scale, df)


def _log_of(
    method: str, x: np.ndarray, loc: np.ndarray, scale: np.ndarray, df: np.ndarray
) -> np.ndarray:
    """``method`` ("logpdf" or "logcdf") of the normal where df = ∞, of Student's t elsewhere."""
    normal = getattr(stats.norm, method)(x, loc=loc, scale=scale)
    if np.all(np.isinf(df)):
        return normal
    student = getattr(stats.t, method)(x, np.where(np.isinf(df), 1.0, df), loc=loc, scale=scale)
    return np.where(np.isinf(df), normal, student)


def _fit(
    phi: np.ndarray, mask: np.ndarray, variance: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row location, scale and degrees of freedom (∞: Gaussian) of one hypothesis."""
    counts = mask.sum(axis=0)
    mean = np.where(mask, phi, 0.0).sum(axis=0) / np.maximum(counts, 1)
    dev2 = np.where(mask, (phi - mean) ** 2, 0.0)
    dof = (counts - 1).clip(min=0)
    # Unbiased pooled variance: Σ over rows of within-row squares / Σ (n_i − 1).
    pooled_var = dev2.sum() / max(int(dof.sum()), 1)
    pooled = np.sqrt(pooled_var)
    row_var = dev2.sum(axis=0) / np.maximum(dof, 1)
    df = np.full(mean.shape, np.inf)
    if variance == "global":
        sd = np.full(mean.shape, pooled)
    elif variance in ("shrunk", "shrunk-t"):
        nu = prior_degrees_of_freedom(row_var, dof)
        var = shrunk_variances(row_var, dof, prior_variance=float(pooled_var), prior_dof=nu)
        if variance == "shrunk-t":
            # Posterior predictive of a new draw under the conjugate prior with a flat prior
            # on the mean: Student-t, ν + d_i degrees of freedom, scale² σ̃_i² (1 + 1/n_i)
            # (Gelman et al., Bayesian Data Analysis, 3rd ed., Section 3.3); ν = ∞ leaves a
            # Gaussian with the same widened scale.
            var = var * (1.0 + 1.0 / np.maximum(counts, 1))
            df = nu + dof.astype(np.float64)
        sd = np.sqrt(var)
    else:
        sd = np.sqrt(row_var)
    sd = np.maximum(sd, _RELATIVE_SIGMA_FLOOR * pooled + 1e-12)
    return mean, sd, df


def prior_degrees_of_freedom(variances: np.ndarray, dof: np.ndarray) -> float:
    """ν of a scaled inverse-χ² prior on the rows' variances, by the method of moments.

    Model: row i's sample variance is s_i² ~ σ_i² χ²_{d_i} / d_i given its true σ_i², and
    σ_i² ~ ν s₀² / χ²_ν across rows (the conjugate prior). Then
    e_i = log s_i² − ψ(d_i/2) + log(d_i/2) has mean E[log σ²] and variance
    ψ'(d_i/2) + ψ'(ν/2) (ψ the digamma function), whatever s₀². The moment estimate of
    ψ'(ν/2) is the mean over rows of (e_i − ē)² · m/(m − 1) − ψ'(d_i/2) (unbiased when all
    d_i are equal); ν solves ψ'(ν/2) = that estimate. When it is ≤ 0 the sample variances
    spread no more than sampling alone explains: ν = ∞ (one common variance).

    Only rows with d_i ≥ 1 and s_i² > 0 enter (a zero variance has no logarithm); with
    fewer than 2 such rows ν = ∞.

    Args:
        variances: ``(m,)`` per-row sample variances s_i² (divisor d_i).
        dof: ``(m,)`` their degrees of freedom d_i = n_i − 1.

    Returns:
        ν > 0, or ``inf``.

    References:
        Smyth (2004), "Linear models and empirical Bayes methods for assessing differential
        expression in microarray experiments", Statistical Applications in Genetics and
        Molecular Biology 3(1), Article 3, Section 6: the same hierarchical model and the
        moment estimator of the prior degrees of freedom from log sample variances.
    """
    s2 = np.asarray(variances, dtype=np.float64)
    d = np.asarray(dof, dtype=np.float64)
    use = (d >= 1) & (s2 > 0)
    m = int(use.sum())
    if m < 2:
        return float("inf")
    s2, d = s2[use], d[use]
    e = np.log(s2) - special.digamma(d / 2) + np.log(d / 2)
    excess = float(
        np.mean((e - e.mean()) ** 2) * m / (m - 1) - np.mean(special.polygamma(1, d / 2))
    )
    return 2.0 * _inverse_trigamma(excess) if excess > 0 else float("inf")


def _inverse_trigamma(y: float) -> float:
    """x > 0 with ψ'(x) = y (ψ' falls from ∞ to 0 on (0, ∞)); ``inf`` below ψ'(1e12)."""
    low, high = 1e-8, 1e12
    if y <= float(special.polygamma(1, high)):
        return float("inf")
    if y >= float(special.polygamma(1, low)):
        return low
    root = optimize.brentq(
        lambda t: float(special.polygamma(1, np.exp(t))) - y,
        np.log(low),
        np.log(high),
        xtol=1e-12,
    )
    return float(np.exp(root))


def shrunk_variances(
    variances: np.ndarray,
    dof: np.ndarray,
    *,
    prior_variance: float,
    prior_dof: float | None = None,
) -> np.ndarray:
    """Each row's variance shrunk toward ``prior_variance``: (ν s₀² + d_i s_i²) / (ν + d_i).

    The posterior scale of σ_i² under the conjugate scaled inverse-χ²(ν, s₀²) prior after
    d_i degrees of freedom of data with sample variance s_i²: the per-example variance when
    d_i ≫ ν, the prior (global) one when d_i ≪ ν or ν = ∞.

    Args:
        variances: ``(m,)`` per-row sample variances s_i².
        dof: ``(m,)`` their degrees of freedom d_i = n_i − 1 (0 gives s₀²).
        prior_variance: s₀², here the pooled (global) variance of the same rows.
        prior_dof: ν; ``None`` fits it by :func:`prior_degrees_of_freedom`.

    Returns:
        ``(m,)`` float64 variances.

    References:
        Brännvall (2026), "Exponential-Family Membership Inference: From LiRA and RMIA to
        BaVarIA", arXiv 2603.11799v1 (abstract: conjugate normal–inverse-gamma priors
        stabilise LiRA's per-example variances at few reference models); Smyth (2004),
        Section 6 (the posterior variance and the fitted ν).
    """
    s2 = np.asarray(variances, dtype=np.float64)
    d = np.asarray(dof, dtype=np.float64)
    nu = prior_degrees_of_freedom(s2, d) if prior_dof is None else float(prior_dof)
    if np.isinf(nu):
        return np.full(s2.shape, float(prior_variance))
    return (nu * prior_variance + d * s2) / (nu + d)


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
        variance: ``"per-example"``, ``"global"``, ``"shrunk"`` (per-example shrunk toward
            global, :func:`shrunk_variances`), ``"shrunk-t"`` (the same prior, Student-t
            predictive: :func:`lira_scores`) or ``"auto"`` (per-example from 64 reference
            models on, global below, following Carlini et al. 2022).
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


#: The LiRA variants by name: (online | offline) × (per-example | global | shrunk variance).
#: "lira" itself stays the configurable attack (online, variance "auto").
LIRA_VARIANTS: dict[str, dict[str, Any]] = {
    "lira-online": {"variant": "online", "variance": "per-example"},
    "lira-offline": {"variant": "offline", "variance": "per-example"},
    "lira-online-global": {"variant": "online", "variance": "global"},
    "lira-offline-global": {"variant": "offline", "variance": "global"},
    "lira-online-shrunk": {"variant": "online", "variance": "shrunk"},
    "lira-offline-shrunk": {"variant": "offline", "variance": "shrunk"},
    "lira-online-shrunk-t": {"variant": "online", "variance": "shrunk-t"},
    "lira-offline-shrunk-t": {"variant": "offline", "variance": "shrunk-t"},
}
