"""The ``local-central`` kind: one query answered under local DP and under central DP.

For each ε of ``epsilons``: the error of the local estimator (every record randomised,
then the randomiser inverted) and of the central Laplace mechanism, closed form and
simulated over ``repeats`` releases, their ratio, and the empirical ε lower bound of each
randomiser, measured as the ``mechanism`` kind measures one: ``trials`` runs of the
:mod:`dpaudit.mechanisms.noise` randomiser on two neighbouring inputs, then
:func:`dpaudit.bounds.epsilon_lower_bound` (δ = 0, the verdict's per-comparison level).
Both ε lower bounds enter the verdict against the ε the randomiser runs with. The math is
in :mod:`dpaudit.local_central.simulate`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from dpaudit.kinds.base import AuditKind, KindSummary, Outputs, RunContext, UnitPlan, unit_index
from dpaudit.sections import Table

#: Distinguishes this kind's random streams under the same audit seed.
_STREAM = 7


class LocalCentralSection(Table):
    """``[local-central]``: a mean of bits or a histogram, local versus central DP.

    ``query`` is ``"mean"`` (n bits, ``share`` of them 1; binary randomised response
    against the Laplace mechanism on the count) or ``"histogram"`` (n records in ``k``
    bins, by ``frequencies`` or Zipf; ``randomiser`` k-RR or optimised unary encoding
    against Laplace per bin). ``repeats`` releases per ε measure the error; ``trials``
    runs per neighbouring input measure each randomiser's ε lower bound.
    """

    query: Literal["mean", "histogram"]
    n: Annotated[int, Field(ge=10, le=10_000_000)] = 10_000
    epsilons: list[Annotated[float, Field(gt=0.0, le=20.0)]] = Field(
        default_factory=lambda: [0.5, 1.0, 2.0], min_length=1, max_length=20
    )
    repeats: Annotated[int, Field(ge=20, le=1_000_000)] = 1_000
    trials: Annotated[int, Field(ge=100, le=10_000_000)] = 20_000
    share: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    k: Annotated[int, Field(ge=2, le=1_000)] | None = None
    frequencies: list[Annotated[float, Field(ge=0.0)]] | None = None
    randomiser: Literal["k-rr", "unary-encoding"] | None = None
    threshold: Literal["split", "bonferroni"] = "split"

    @model_validator(mode="after")
    def _keys_fit_the_query(self) -> LocalCentralSection:
        if self.query == "mean":
            for key in ("k", "frequencies", "randomiser"):
                if getattr(self, key) is not None:
                    raise ValueError(f"'{key}' is a parameter of query = 'histogram', not 'mean'")
        else:
            if self.share is not None:
                raise ValueError("'share' is a parameter of query = 'mean', not 'histogram'")
            if self.k is None:
                raise ValueError("query = 'histogram' needs 'k', the number of bins")
            if self.frequencies is not None and (
                len(self.frequencies) != self.k or sum(self.frequencies) <= 0
            ):
                raise ValueError(
                    f"'frequencies' must be {self.k} non-negative numbers with a positive sum"
                )
        if len(set(self.epsilons)) != len(self.epsilons):
            raise ValueError(f"'epsilons' must be different values; got {self.epsilons}")
        return self

    def counts(self) -> np.ndarray:
        from dpaudit.local_central.simulate import true_counts

        return true_counts(
            query=self.query,
            n=self.n,
            k=self.k or 2,
            share=0.3 if self.share is None else self.share,
            frequencies=self.frequencies,
        )


class LocalCentralSpec(Table):
    section: LocalCentralSection
    seed: int


def local_central_unit(spec: LocalCentralSpec, unit: str) -> dict[str, np.ndarray]:
    """One ε: the errors of ``repeats`` releases and ``trials`` runs of each randomiser."""
    from dpaudit.local_central.simulate import central_mechanism, local_randomiser, simulate_errors

    s = spec.section
    i = unit_index(unit)
    eps = s.epsilons[i]
    counts = s.counts()
    rng = np.random.default_rng([spec.seed, _STREAM, i])
    randomiser = s.randomiser or "k-rr"
    local_err, central_err = simulate_errors(
        counts, query=s.query, epsilon=eps, repeats=s.repeats, rng=rng, randomiser=randomiser
    )
    local = local_randomiser(query=s.query, k=counts.size, epsilon=eps, randomiser=randomiser)
    central = central_mechanism(counts, query=s.query, epsilon=eps)
    return {
        "local_errors": local_err,
        "central_errors": central_err,
        "local_negative": local.run(0, rng=rng, size=s.trials),
        "local_positive": local.run(1, rng=rng, size=s.trials),
        "central_negative": central.run(0, rng=rng, size=s.trials),
        "central_positive": central.run(1, rng=rng, size=s.trials),
    }


class LocalCentralKind(AuditKind[LocalCentralSection]):
    name = "local-central"
    section = LocalCentralSection
    description = "one query (a mean, a histogram) under local and under central DP: error and ε_LB"

    def plan(self, section: LocalCentralSection, context: RunContext) -> UnitPlan:
        spec = LocalCentralSpec(section=section, seed=context.seed)
        return UnitPlan(
            fn=local_central_unit,
            spec=spec,
            units=tuple(f"local-central-{i:05d}" for i in range(len(section.epsilons))),
            key_data=spec.model_dump(mode="json"),
            description="local vs central",
        )

    def comparisons(
        self, section: LocalCentralSection, context: RunContext, outputs: Outputs
    ) -> int:
        return 2 * len(section.epsilons)  # the local and the central ε_LB at every ε

    def summarise(
        self, section: LocalCentralSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        from dpaudit.bounds import epsilon_lower_bound
        from dpaudit.local_central.simulate import (
            central_rmse,
            local_rmse,
            rmse_estimate,
            rmse_ratio,
            rmse_ratio_estimate,
        )
        from dpaudit.results import Comparison, score_summary

        counts = section.counts()
        n, c = int(counts.sum()), context.confidence_level
        randomiser = section.randomiser or "k-rr"
        local_name = "randomised response" if section.query == "mean" else randomiser
        rows, tests, comparisons = [], [], []
        for i, eps in enumerate(section.epsilons):
            out = outputs[f"local-central-{i:05d}"]
            rng = np.random.default_rng([context.seed, _STREAM, 1_000 + i])
            local = rmse_estimate(out["local_errors"], confidence_level=c, rng=rng)
            central = rmse_estimate(out["central_errors"], confidence_level=c, rng=rng)
            ratio = rmse_ratio_estimate(
                out["local_errors"], out["central_errors"], confidence_level=c, rng=rng
            )
            row: dict[str, Any] = {
                "epsilon": eps,
                "local": {
                    "rmse": local_rmse(
                        counts, query=section.query, epsilon=eps, randomiser=randomiser
                    ),
                    "simulated": local.to_dict(),
                },
                "central": {
                    "rmse": central_rmse(n, query=section.query, epsilon=eps),
                    "simulated": central.to_dict(),
                },
                "ratio": rmse_ratio(
                    counts, query=section.query, epsilon=eps, randomiser=randomiser
                ),
                "ratio_simulated": {"value": ratio[0], "interval": [ratio[1], ratio[2]]},
                "ratio_over_sqrt_n": rmse_ratio(
                    counts, query=section.query, epsilon=eps, randomiser=randomiser
                )
                / math.sqrt(n),
            }
            for side, what in (("local", local_name), ("central", "central Laplace")):
                label = f"{what} ({section.query}, ε = {eps:g})"
                neg, pos = out[f"{side}_negative"], out[f"{side}_positive"]
                bound = epsilon_lower_bound(
                    neg,
                    pos,
                    delta=0.0,
                    confidence_level=level,
                    threshold=section.threshold,
                    seed=context.seed,
                )
                comparisons.append(
                    Comparison(
                        test=label,
                        parameter="epsilon",
                        lower=bound,
                        upper=eps,
                        upper_source="theoretical ε",
                        in_verdict=True,
                    )
                )
                row[side]["epsilon_lower"] = bound.value
                row[side]["label"] = label
                tests.append(
                    score_summary(
                        f"local-central-{side}-{i}",
                        label,
                        neg,
                        pos,
                        confidence_level=c,
                        hypotheses=("D", "D'"),
                    )
                )
            rows.append(row)
        table = {
            "query": section.query,
            "n": n,
            "counts": counts.tolist(),
            "local_randomiser": local_name,
            "central_mechanism": "Laplace, scale " + ("1/ε" if section.query == "mean" else "2/ε"),
            "repeats": section.repeats,
            "trials": section.trials,
            "confidence_level": c,
            "interval_method": "percentile bootstrap over the repeats",
            "error": "RMSE of the share of ones"
            if section.query == "mean"
            else "RMSE per bin (root of the mean over bins) of the frequencies",
            "rows": rows,
        }
        tests[0] = tests[0].with_details(local_central=table)
        return KindSummary(tuple(tests), tuple(comparisons))


KIND = LocalCentralKind()
