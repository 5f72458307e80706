"""`dpaudit plan`'s trial count, run: the Laplace mechanism at ε = 1, target 0.95 at 95 %.

The criterion: the number of trials per arm `dpaudit plan --target 0.95
--mechanism-epsilon 1` prints reaches ε_LB ≥ 0.95 in at least half of 20 seeds when the
Laplace audit is run with it. The count is taken from the planning function the CLI
calls (and checked to be the number the CLI prints); the audit is the mechanism kind's
own code path, as `dpaudit run` executes it (its units; the ε bound its summary
computes, at the plan's confidence and δ: 0.95, δ = 0).

Why "at least half": :func:`dpaudit.planning.plan_trials` returns the fewest n whose
ε bound, computed at the EXPECTED error counts n·FPR and n·FNR, reaches the target. The
Clopper–Pearson limit is monotone in the count and the count's median is (within one)
its mean, so the bound at the expected counts is the median of the bound's sampling
distribution: the plan targets the median, P(ε_LB ≥ target) ≈ 1/2 at n, not a
high-probability guarantee. Half of the seeds is the sample version of "median ≥
target".

How sharp a test that is: with P(ε_LB ≥ target) = 1/2 exactly, 10 or more of 20
independent seeds succeed with probability P(Bin(20, 1/2) ≥ 10) = 0.588, so the criterion
fails on correct code for 41 % of seed sets; it catches a plan that undercounts by a
margin, not by a trial. `benchmarks/plan_check.py` measures the probability on 400 other
seeds (1000..1399), the same code path: 198 of 400, 0.495 [0.445, 0.545] (95 %
Clopper–Pearson), median bound 0.9497: the plan is right about the median. The power
control below (half the plan's trials) makes the check two-sided: a plan that overcounts
(10⁶ trials would pass the criterion trivially) fails it.

The seeds are the first twenty, 0..19, not chosen by their outcome (12 of 20 reach the
target here). The outcome depends on how the trials are drawn: the same seeds with all
trials in ONE unit (``unit_size`` = n instead of the default 25,000) give 7 of 20.

Note for a whole audit file: `dpaudit run` spends the confidence over the verdict's
comparisons; a Laplace file with a pure ε claim has two (ε and the μ it implies), so at
``confidence_level = 0.95`` its ε bound is at 0.975, and there the plan's count reaches
0.95 in only 0.333 [0.286, 0.381] of seeds. The plan for such a file is `dpaudit plan
--confidence-level 0.975` (38,365 trials per arm).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from typer.testing import CliRunner

from dpaudit.bounds import epsilon_lower_bound
from dpaudit.cli import app
from dpaudit.config import parse_config, run_context
from dpaudit.kinds import get_kind
from dpaudit.planning import plan_trials

TARGET = 0.95
MECHANISM_EPSILON = 1.0
CONFIDENCE = 0.95
DELTA = 0.0  # the plan's default δ: a pure ε-DP bound
SEEDS = range(20)

runner = CliRunner()


def _plan() -> int:
    """The count, from the function `dpaudit plan` calls, with the CLI's defaults."""
    return plan_trials(
        TARGET,
        DELTA,
        CONFIDENCE,
        tradeoff="laplace",
        mechanism_epsilon=MECHANISM_EPSILON,
        threshold="split",
    ).trials_per_arm


def _laplace_audit(seed: int, trials: int) -> tuple[Any, Any, Any, dict[str, Any]]:
    """The Laplace audit file's kind, table, context and unit outputs, sampled the way
    `dpaudit run` samples them (the mechanism kind's units at the default unit size)."""
    config = parse_config(
        {
            "audit": {
                "name": "plan-check",
                "kinds": ["mechanism"],
                "seed": seed,
                "confidence_level": CONFIDENCE,
                "delta": DELTA,
            },
            "mechanism": {
                "name": "laplace",
                "sensitivity": 1.0,
                "epsilon": MECHANISM_EPSILON,
                "trials": trials,
                "threshold": "split",
            },
        }
    )
    kind = get_kind("mechanism")
    section = config.section("mechanism")
    context = run_context(config)
    work = kind.plan(section, context)
    return kind, section, context, {unit: work.fn(work.spec, unit) for unit in work.units}


def _laplace_epsilon_bound(seed: int, trials: int) -> float:
    """ε_LB of the Laplace audit at ``seed`` with ``trials`` per arm, at the plan's
    confidence and δ: the call the mechanism kind's summary makes on its units (that it IS
    that call is checked by :func:`test_the_bound_is_the_kinds_summary`), without the
    summary's μ bound and ROC, which take three quarters of its time."""
    _, section, context, outputs = _laplace_audit(seed, trials)
    parts = [outputs[u] for u in sorted(outputs)]
    return epsilon_lower_bound(
        np.concatenate([p["negative"] for p in parts]),
        np.concatenate([p["positive"] for p in parts]),
        delta=DELTA,
        confidence_level=CONFIDENCE,
        threshold=section.threshold,
        seed=context.seed,
    ).value


def test_the_bound_is_the_kinds_summary():
    n = _plan()
    kind, section, context, outputs = _laplace_audit(3, n)
    assert len(outputs) == 2  # n > the default unit size: the units are concatenated
    summary = kind.summarise(section, context, outputs, level=CONFIDENCE)
    (eps,) = [
        c
        for c in summary.comparisons
        if c.parameter == "epsilon" and c.in_verdict and c.lower.method != "claim-curve"
    ]
    assert eps.lower.confidence_level == CONFIDENCE
    assert getattr(eps.lower, "delta", None) == DELTA
    assert eps.lower.threshold == "split"
    assert eps.lower.value == _laplace_epsilon_bound(3, n)


def test_cli_prints_the_planning_functions_count():
    n = _plan()
    args = ["plan", "--target", str(TARGET), "--mechanism-epsilon", str(MECHANISM_EPSILON)]
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert text.output.startswith(f"{n} trials per arm: ")
    as_json = runner.invoke(app, [*args, "--json"])
    assert as_json.exit_code == 0, as_json.output
    plan = json.loads(as_json.output)
    assert plan["trials_per_arm"] == n
    assert (plan["target"], plan["confidence_level"], plan["delta"]) == (TARGET, CONFIDENCE, DELTA)
    assert (plan["threshold"], plan["tradeoff"]) == ("split", "laplace")


def test_plan_trials_reach_the_target_in_at_least_half_of_20_seeds():
    n = _plan()
    values = [_laplace_epsilon_bound(seed, n) for seed in SEEDS]
    reached = sum(v >= TARGET for v in values)
    assert reached >= len(SEEDS) / 2, (
        f"{reached} of {len(SEEDS)} seeds reach eps_LB >= {TARGET} with {n} trials per arm; "
        f"bounds {sorted(round(v, 4) for v in values)}"
    )
    # Validity on the way: each bound exceeds the true ε = 1 with probability <= 0.05, so
    # the count of such seeds is at most Bin(20, 0.05); more than 5 has probability
    # P(Bin(20, 0.05) >= 6) = 3.3e-4 on correct code.
    assert sum(v > MECHANISM_EPSILON for v in values) <= 5


def test_half_the_planned_trials_fall_short_in_most_seeds():
    # Power control: the plan is the FEWEST trials that reach the target in expectation.
    # With half of them the bound reaches 0.95 with probability 0.163 [0.128, 0.202]
    # (benchmarks/plan_check.py, 400 seeds), so 10 or more of 20 seeds reaching it has
    # probability P(Bin(20, 0.202) >= 10) = 0.0028 at most on correct code.
    n = round(_plan() / 2)
    values = [_laplace_epsilon_bound(seed, n) for seed in SEEDS]
    assert sum(v >= TARGET for v in values) < len(SEEDS) / 2
