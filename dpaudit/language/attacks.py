"""Membership scores of texts under a causal LM, from per-token statistics.

Every score is oriented as dpaudit's attacks are: the higher, the more likely a member.
With T scored tokens (:mod:`dpaudit.language.scoring`), natural logs:

- ``loss``: minus the mean token NLL, −(1/T) Σ_t −log p(x_t | x_<t) (Yeom et al. 2018, the
  LM form used by Carlini et al. 2021);
- ``zlib``: minus the ratio of that mean NLL to the text's zlib entropy, the length in
  bytes of ``zlib.compress(text.encode("utf-8"))`` at the default level (Carlini et al.,
  "Extracting Training Data from Large Language Models", USENIX Security 2021,
  arXiv:2012.07805, §5.2, the "zlib" membership metric);
- ``min-k``: the mean of the K = max(1, ⌊k·T⌋) smallest log p(x_t | x_<t), k = 0.2 by
  default (Shi et al., "Detecting Pretraining Data from Large Language Models", ICLR
  2024, arXiv:2310.16789, §3, "Min-K% Prob");
- ``min-k++``: the mean of the K smallest z_t = (log p(x_t | x_<t) − μ_t)/σ_t, μ_t and σ_t
  the mean and standard deviation of log p(v | x_<t) for v drawn from the next-token
  distribution (Zhang et al., "Min-K%++", ICLR 2025, arXiv:2404.02936, §3, the
  Min-K%++ score);
- ``reference``: the reference models' mean NLL (averaged over them) minus the target's
  (Carlini et al. 2021, §5.2, the "Small"/"Medium" reference ratio taken as a difference
  of log-perplexities; the LM counterpart of how LiRA and RMIA calibrate a classifier's
  loss by reference models).

The K smallest are taken with ties broken by position (any tie gives the same mean).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np

from dpaudit.errors import ConfigError
from dpaudit.language.scoring import TokenStatistics

__all__ = [
    "DEFAULT_K_FRACTION",
    "LM_ATTACKS",
    "attack_scores",
    "mean_nll",
    "smallest_k",
    "zlib_entropy",
]

#: The attacks that need only the target (``reference`` needs reference models too).
LM_ATTACKS = ("loss", "zlib", "min-k", "min-k++")
#: Min-K%'s k (Shi et al. 2024 report 20 % as their default).
DEFAULT_K_FRACTION = 0.2


def mean_nll(stats: TokenStatistics) -> float:
    """The mean token negative log-likelihood (natural log)."""
    return float(-np.mean(stats.log_probs))


def zlib_entropy(text: str) -> int:
    """Bytes of the text's UTF-8 encoding compressed by zlib at its default level."""
    return len(zlib.compress(text.encode("utf-8")))


def smallest_k(values: np.ndarray, fraction: float) -> float:
    """The mean of the K = max(1, ⌊fraction·T⌋) smallest of T values."""
    k = max(1, math.floor(fraction * values.size))
    return float(np.mean(np.sort(values)[:k]))


def _z(stats: TokenStatistics) -> np.ndarray:
    # σ_t = 0 only for a next-token law with all its mass on one token; then
    # log p(x_t) = μ_t whatever x_t is, and z_t = 0 is the limit of no surprise.
    std = np.where(stats.std > 0, stats.std, 1.0)
    return np.asarray((stats.log_probs - stats.mean) / std)


def attack_scores(
    attack: str,
    stats: Sequence[TokenStatistics],
    texts: Sequence[str],
    *,
    k_fraction: float = DEFAULT_K_FRACTION,
    reference: Sequence[Sequence[TokenStatistics]] = (),
) -> np.ndarray:
    """One membership score per text (higher: more likely a member).

    Args:
        attack: ``"loss"``, ``"zlib"``, ``"min-k"``, ``"min-k++"`` or ``"reference"``.
        stats: the target's token statistics, one per text.
        texts: the texts (``zlib`` compresses them).
        k_fraction: Min-K%'s k, in (0, 1].
        reference: the reference models' token statistics (``reference`` only), one
            sequence per model, each one per text.

    Returns:
        float64 scores, one per text.

    Raises:
        ConfigError: an unknown attack, k outside (0, 1], or ``reference`` without
            reference statistics.
    """
    if not 0.0 < k_fraction <= 1.0:
        raise ConfigError(f"k_fraction must be in (0, 1]; got {k_fraction}")
    if attack == "loss":
        return np.array([-mean_nll(s) for s in stats])
    if attack == "zlib":
        return np.array([-mean_nll(s) / zlib_entropy(t) for s, t in zip(stats, texts, strict=True)])
    if attack == "min-k":
        return np.array([smallest_k(s.log_probs, k_fraction) for s in stats])
    if attack == "min-k++":
        return np.array([smallest_k(_z(s), k_fraction) for s in stats])
    if attack == "reference":
        if not reference:
            raise ConfigError("the 'reference' attack needs at least one reference model")
        ref = np.mean([[mean_nll(s) for s in model] for model in reference], axis=0)
        return np.asarray(ref - np.array([mean_nll(s) for s in stats]))
    known = ", ".join((*LM_ATTACKS, "reference"))
    raise ConfigError(f"The language-model attack must be one of {known}. Got {attack!r} instead.")
