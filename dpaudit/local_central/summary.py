"""The ``local-central`` kind's summary: per ε, the local and central errors (closed form
and simulated, with intervals), their ratio, and each mechanism's ε lower bound held
against the ε it runs with.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpaudit.bounds import epsilon_lower_bound
from dpaudit.kinds.base import KindSummary, Outputs, RunContext
from dpaudit.local_central.schema import LocalCentralSection, measured_mechanisms
from dpaudit.local_central.simulate import (
    central_rmse,
    local_rmse,
    rmse_estimate,
    rmse_ratio,
    rmse_ratio_estimate,
)
from dpaudit.local_central.units import STREAM, audited_counts
from dpaudit.results import Comparison, score_summary


def local_central_summary(
    section: LocalCentralSection, context: RunContext, outputs: Outputs, *, level: float
) -> KindSummary:
    """The ``local-central`` kind's summary; every in-verdict bound at ``level``."""
    counts = audited_counts(section)
    n, c = int(counts.sum()), context.confidence_level
    randomiser = section.randomiser or "k-rr"
    measured = measured_mechanisms(section)
    rows, tests, comparisons = [], [], []
    for i, eps in enumerate(section.epsilons):
        out = outputs[f"local-central-{i:05d}"]
        rng = np.random.default_rng([context.seed, STREAM, 1_000 + i])
        local = rmse_estimate(out["local_errors"], confidence_level=c, rng=rng)
        central = rmse_estimate(out["central_errors"], confidence_level=c, rng=rng)
        ratio = rmse_ratio_estimate(
            out["local_errors"], out["central_errors"], confidence_level=c, rng=rng
        )
        row: dict[str, Any] = {
            "epsilon": eps,
            "local": {
                "rmse": local_rmse(counts, query=section.query, epsilon=eps, randomiser=randomiser),
                "simulated": local.to_dict(),
            },
            "central": {
                "rmse": central_rmse(n, query=section.query, epsilon=eps),
                "simulated": central.to_dict(),
            },
            "ratio": rmse_ratio(counts, query=section.query, epsilon=eps, randomiser=randomiser),
            "ratio_simulated": {"value": ratio[0], "interval": [ratio[1], ratio[2]]},
            "ratio_over_sqrt_n": rmse_ratio(
                counts, query=section.query, epsilon=eps, randomiser=randomiser
            )
            / math.sqrt(n),
        }
        for side, what in measured:
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
        "local_randomiser": measured[0][1],
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
