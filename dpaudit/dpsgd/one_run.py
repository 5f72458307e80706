"""The one-run audit: m Dirac canaries in ONE DP-SGD run, and its comparisons.

Each of m Dirac canaries sits on its own coordinate that no real example's gradient
touches and is included by an independent fair coin. Two lower bounds read the run:

- ε (Steinke, Nasr, Jagielski 2023, Thm. 3.1): the auditor guesses "in" for the r/2
  largest scores and "out" for the r/2 smallest (r = ``guesses``); the number of correct
  guesses bounds ε, held against the accountant's ε for what the one run recorded.
- μ (Mahloujifar, Melis, Chaudhuri 2025, the f-DP one-run test): the same kind of guesses,
  their number chosen by a union bound over a ladder fixed in advance
  (:func:`dpaudit.bounds.fdp_one_run.guess_ladder`, ``guesses`` included), held against the high
  end of the accountant's μ bracket (its tail included).

The two share the one-run comparison's ONE share of the verdict's budget: each is computed
at half of it (Bonferroni, :func:`dpaudit.bounds.fdp_one_run.one_run_bounds`), so with the
share's confidence both hold at once, and a violation of either is a violation. The one
of the two that is the larger fraction of its upper bound enters the verdict
(:func:`dpaudit.bounds.fdp_one_run.stronger`); the other is reported beside it. Without a finite
μ upper bound ε takes the whole share, as before.

A third reading of the same scores is reported and never decides: the Gaussian-pair μ of
Agrawal et al. 2026 (:func:`dpaudit.bounds.one_run_gauss.one_run_gaussian_mu_lower_bound`), which
uses every canary's score rather than guesses on the extremes. Its guarantee is
asymptotic (it holds if the scores are independent Gaussians with one variance, which
white-box scores approach as steps grow; no DP claim implies it), so it is labelled
``"asymptotic-one-run"``, computed at the one-run share's level so that it reads beside
the rigorous pair, kept out of the verdict and given no share. Only a rigorous statistic
could join the verdict, and then only by splitting the one-run share further (three
ways, each at 1 − (1 − c)/3, the strongest deciding): the share stays one, so the
verdict's budget does not change.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dpaudit.accounting.upper_bounds import from_records
from dpaudit.bounds.fdp_one_run import one_run_bounds, stronger
from dpaudit.bounds.one_run_gauss import one_run_gaussian_mu_lower_bound
from dpaudit.dpsgd.canaries import with_zero_feature
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.setup import _setup, purpose_seed
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.records import DPSGDRecord
from dpaudit.results import Comparison, paired_comparisons
from dpaudit.trainers import canary_observer
from dpaudit.training import CoordinateCanaries, train_many

__all__ = ["ONE_RUN_UNIT", "one_run_comparisons", "one_run_unit"]

#: The name of the one unit that holds the one-run audit.
ONE_RUN_UNIT = "dpsgd-one-run"


def one_run_unit(spec: DpsgdSpec) -> dict[str, np.ndarray]:
    """Train the one run with its m coin-flipped canaries; return their scores, coins and
    the run's record."""
    s = spec.section
    one = s.one_run
    assert one is not None  # only listed when configured
    base = _setup(spec)
    m = one.canaries
    if s.model != "logistic":
        raise ConfigError("The one-run audit puts its canaries on a logistic regression.")
    # One all-zero feature per canary: canary j is class 0's weight on zero feature j.
    real = base.X[:, : base.X.shape[1] - (1 if base.direction is not None else 0)]
    X = with_zero_feature(real, m)
    d = X.shape[1]
    indices = np.arange(d - m, d)  # flat index c·d + j with c = 0
    included = np.random.default_rng([purpose_seed(spec.seed, 5)]).random(m) < 0.5
    n = X.shape[0]
    membership = np.ones((1, n), dtype=bool)
    # The engine adds each included canary as an extra record of norm C, sampled with
    # the model's own q, and sums the privatised gradient at each canary's coordinate;
    # the observer sees those coordinates every step and scores each canary's
    # transcript with the likelihood ratio (Steinke, Nasr, Jagielski 2023 allow any
    # score that is a function of what the auditor sees).
    observer = canary_observer(membership, base.training, columns=indices, score=s.score)
    result = train_many(
        X,
        base.y,
        membership,
        model=base.model,
        training=base.training,
        seed=purpose_seed(spec.seed, 7),
        num_classes=base.num_classes,
        coordinate_canaries=CoordinateCanaries(indices, included, seed=purpose_seed(spec.seed, 6)),
        step_observer=observer,
    )
    r = result.records[0]
    assert r is not None
    assert result.canary_sums is not None  # asked for with coordinate_canaries
    # "sum": the engine's own running sums (the observer's are the same numbers).
    scores = result.canary_sums if s.score == "sum" else observer.scores(s.score)[0]
    return {
        "one_run_scores": scores,
        "one_run_included": included,
        **DPSGDRecord.to_arrays([r]),
    }


def one_run_comparisons(
    one: Mapping[str, np.ndarray],
    s: DpsgdSection,
    *,
    delta: float,
    level: float,
    in_verdict: bool,
) -> tuple[Comparison, ...]:
    """The one-run ε and μ lower bounds, sharing ONE share at ``level``, each held against
    the run's own accountant (ε; the μ bracket's high end with its tail).

    Both are reported; when ``in_verdict`` the stronger one (the larger fraction of its
    upper bound) is the comparison that enters the verdict, the other is marked outside
    it: it takes no further share, since the two halves of the share already cover both
    (module docstring). Without a finite μ upper bound only ε is computed, at ``level``.
    """
    assert s.one_run is not None
    upper = from_records(DPSGDRecord.from_arrays([one]), delta)
    with_mu = upper.mu_finite
    found = one_run_bounds(
        one["one_run_scores"],
        one["one_run_included"].astype(bool),
        guesses=s.one_run.guesses,
        delta=delta,
        confidence_level=level,
        with_mu=with_mu,
        mu_tail=upper.mu_tail,
    )
    label = f"one run, {s.one_run.canaries} dirac canaries, trainer {s.trainer}"
    decides = stronger(
        (found.epsilon.value, upper.epsilon),
        None if found.mu is None else (found.mu.value, upper.mu),
    )
    comparisons = paired_comparisons(
        label,
        found.epsilon,
        found.mu,
        upper_epsilon=upper.epsilon,
        upper_mu=upper.mu,
        source="accountant",
        in_verdict=(decides,) if in_verdict else (),
    )
    # The Gaussian-pair reading (module docstring): asymptotic, so never in the verdict
    # and no share. Scores without spread inside the coin groups fit no Gaussian pair:
    # then only the rigorous bounds are reported.
    try:
        gauss = one_run_gaussian_mu_lower_bound(
            one["one_run_scores"], one["one_run_included"].astype(bool), confidence_level=level
        )
    except DpauditError:
        gauss = None
    if gauss is not None:
        comparisons.append(
            Comparison(
                test=label,
                parameter="mu",
                lower=gauss,
                upper=upper.mu if with_mu else None,
                upper_source="accountant μ",
                in_verdict=False,
            )
        )
    return tuple(comparisons)
