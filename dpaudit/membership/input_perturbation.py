"""Input perturbation: randomise every training record once, locally, then train plainly.

The ``input-perturbation`` target variant (``[target] variants``, table
``[target.input_perturbation]``) trains dpaudit's fair-coin target on records that each
went through a local randomiser first:

- features: every coordinate clipped to the stated domain [−B, B] (B = ``bound``, in the
  standardised units the target is trained in), then Laplace noise of scale
  Δ₁/ε_f with Δ₁ = 2B·d, the domain's ℓ1 diameter (Dwork, McSherry, Nissim, Smith 2006,
  Prop. 1), or Gaussian noise whose σ is calibrated to (ε_f, δ) for the domain's ℓ2
  diameter Δ₂ = 2B·√d by the analytic Gaussian mechanism (Balle, Wang 2018, Thm. 8;
  :func:`dpaudit.mechanisms.gaussian_calibrated`);
- labels: k-ary randomised response over the C classes, truthful with probability
  e^ε_l/(e^ε_l + C − 1) (Kairouz, Oh, Viswanath 2016, §2;
  :func:`dpaudit.mechanisms.k_rr_probabilities`).

With both randomisers ε_l = ``label_share``·ε and ε_f = ε − ε_l; with one, it gets all
of ε. The noise is drawn from a generator seeded by the target's seed alone, so the same
audit seed gives the same randomised data.

The guarantee, and the claim the audit holds its bounds against:

1. Each record's randomised version is (ε, δ)-LDP: for ANY two records r, r′ (features
   in the domain after clipping, any labels), the feature report is (ε_f, δ)-close (pure
   for Laplace: δ = 0) and the label report ε_l-close, independently, so the pair is
   (ε_f + ε_l, δ)-close by basic composition (Dwork, Roth 2014, "The Algorithmic
   Foundations of Differential Privacy", Thm. 3.16).
2. Training sees only the randomised records, each randomised independently: changing
   ONE record (replace-one) changes the law of one independent input by at most
   (ε, δ), and training is post-processing (Dwork, Roth 2014, Prop. 2.1), so the trained
   model is (ε, δ)-DP under replace-one.
3. The membership game's relation is add/remove (a non-member is simply absent). Local
   DP gives NO finite bound there: the training set's size is seen by training and
   changes with every coin, and replace-one ε-DP does not imply add/remove DP (only the
   converse holds, at 2ε, by group privacy: Dwork, Roth 2014, Thm. 2.2). So this variant
   plays the game as replace-one: every audited slot always holds a record — the audited
   row when its coin says "member", otherwise a substitute, a population row drawn for
   that slot independently of the coins — and the m slots are randomised and trained on.
   Flipping coin i swaps x_i for its substitute z_i: a replace-one change, so the target
   is (ε, δ)-DP in each coin, which is all that the one-run theorem (Steinke, Nasr,
   Jagielski 2023, Thm. 3.1: an (ε, δ)-DP algorithm of the inclusion vector S) and the
   attribute-advantage bound (a_in vs a_out with the record in or swapped out) use.

The claim therefore enters as (ε, δ) of the stated parameters
(:func:`dpaudit.accounting.upper_bounds.from_claim`, source "input perturbation claim"); it is
finite only when BOTH features and labels are randomised (with either left as it is,
the record is not protected and nothing is claimed). The stated ε is what is claimed;
the noise is computed separately from the same section (:func:`feature_noise`), so a
randomiser that runs with less noise than it claims is what an audit can catch.

The theorem numbers of Dwork, Roth 2014 above (3.16 basic composition, 2.1
post-processing, 2.2 group privacy) are as recalled, not verified against the text.

Nothing here imports torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from dpaudit.mechanisms.noise import Claim, gaussian_calibrated, k_rr_probabilities

if TYPE_CHECKING:
    from dpaudit.sections import InputPerturbationSection

__all__ = [
    "FEATURE_RANDOMISERS",
    "LABEL_RANDOMISERS",
    "InputPerturbation",
    "Randomised",
    "feature_noise",
    "randomise",
    "randomiser_seed",
]

FEATURE_RANDOMISERS = ("laplace", "gaussian", "none")
LABEL_RANDOMISERS = ("k-rr", "none")


@dataclass(frozen=True)
class InputPerturbation:
    """The local randomisers applied to each training record (validated by the section).

    Attributes:
        features: ``"laplace"``, ``"gaussian"`` or ``"none"``.
        labels: ``"k-rr"`` or ``"none"``.
        epsilon: ε of one record's randomised version (features and labels together).
        label_share: the share of ε spent on the label when both are randomised.
        bound: B, features are clipped to [−B, B] (standardised units).
        delta: δ of the Gaussian feature randomiser (0 for Laplace).
    """

    features: Literal["laplace", "gaussian", "none"]
    labels: Literal["k-rr", "none"]
    epsilon: float
    label_share: float = 0.5
    bound: float = 2.0
    delta: float = 0.0

    @classmethod
    def from_section(cls, section: InputPerturbationSection | None) -> InputPerturbation:
        """The randomisers of ``[target.input_perturbation]`` (``ValueError`` without it)."""
        if section is None:
            raise ValueError("the input-perturbation variant needs [target.input_perturbation]")
        return cls(
            features=section.features,
            labels=section.labels,
            epsilon=section.epsilon,
            label_share=section.label_share,
            bound=section.bound,
            delta=0.0 if section.delta is None else section.delta,
        )

    @property
    def label_epsilon(self) -> float:
        if self.labels == "none":
            return 0.0
        return self.epsilon if self.features == "none" else self.label_share * self.epsilon

    @property
    def feature_epsilon(self) -> float:
        return 0.0 if self.features == "none" else self.epsilon - self.label_epsilon

    def claim(self) -> Claim | None:
        """(ε, δ) per record, hence for the replace-one membership game; ``None`` when
        features or labels are left as they are (the record is then not protected)."""
        if self.features == "none" or self.labels == "none":
            return None
        return Claim(epsilon=self.epsilon, delta=self.delta if self.features == "gaussian" else 0.0)


def feature_noise(
    spec: InputPerturbation, dimension: int, *, epsilon: float | None = None
) -> dict[str, Any]:
    """The feature randomiser's noise for ``dimension`` features at ε_f (``epsilon``,
    default the section's): Laplace ``scale`` from the domain's ℓ1 diameter, or Gaussian
    ``sigma`` from its ℓ2 diameter."""
    b, d = spec.bound, int(dimension)
    eps = spec.feature_epsilon if epsilon is None else epsilon
    if spec.features == "laplace":
        diameter = 2.0 * b * d
        return {"scale": diameter / eps, "l1_diameter": diameter}
    if spec.features == "gaussian":
        diameter = 2.0 * b * math.sqrt(d)
        sigma, how = gaussian_calibrated(
            sensitivity=diameter, epsilon=eps, delta=spec.delta, calibration="exact"
        )
        return {"sigma": sigma, "l2_diameter": diameter, "calibration": how}
    return {}


def randomiser_seed(seed: int) -> np.random.SeedSequence:
    """The randomisers' seed: a function of the target's seed only."""
    return np.random.SeedSequence([seed, 0x1D9])


def _running_epsilons(spec: InputPerturbation) -> tuple[float, float]:
    """(ε_f, ε_l) the randomisers are calibrated to (a test plants a bug here)."""
    return spec.feature_epsilon, spec.label_epsilon


@dataclass(frozen=True)
class Randomised:
    """Randomised records and the parameters the randomisers RAN with."""

    X: np.ndarray
    y: np.ndarray
    parameters: dict[str, Any]


def randomise(
    X: np.ndarray, y: np.ndarray, *, num_classes: int, spec: InputPerturbation, seed: int
) -> Randomised:
    """Randomise each row of ``(X, y)`` once.

    The noise draws depend on the seed and the number of rows only, never on the rows'
    values: row i's randomised version is a function of row i and its own draws, so
    changing one row changes no other row's output (the independence step 2 of the
    module's guarantee uses).

    Args:
        X: ``(n, d)`` standardised features; y: ``(n,)`` labels in 0..C−1.
        num_classes: C, the label alphabet of k-RR.
        spec: the randomisers.
        seed: the target's seed (:func:`randomiser_seed`).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    n, d = X.shape
    # Separate streams: the feature noise does not depend on whether labels are randomised.
    feature_rng, label_rng = (np.random.default_rng(s) for s in randomiser_seed(seed).spawn(2))
    eps_f, eps_l = _running_epsilons(spec)
    parameters: dict[str, Any] = {
        "features": spec.features,
        "labels": spec.labels,
        "epsilon": spec.epsilon,
        "feature_epsilon": eps_f,
        "label_epsilon": eps_l,
        "bound": spec.bound,
        "dimension": d,
    }
    out_X = X.copy()
    if spec.features != "none":
        noise = feature_noise(spec, d, epsilon=eps_f)
        parameters.update(noise)
        clipped = np.clip(X, -spec.bound, spec.bound)
        if spec.features == "laplace":
            out_X = clipped + feature_rng.laplace(0.0, noise["scale"], (n, d))
        else:
            parameters["delta"] = spec.delta
            out_X = clipped + feature_rng.normal(0.0, noise["sigma"], (n, d))
    out_y = y.copy()
    if spec.labels != "none":
        k = int(num_classes)
        p, q = k_rr_probabilities(k=k, epsilon=eps_l)
        parameters.update({"classes": k, "truthful": p, "each_other": q})
        truthful = label_rng.random(n) < p
        # uniform over the k − 1 other classes: draw from 0..k−2 and skip the truth
        other = label_rng.integers(0, k - 1, n)
        other = other + (other >= y)
        out_y = np.where(truthful, y, other).astype(y.dtype)
    return Randomised(out_X, out_y, parameters)
