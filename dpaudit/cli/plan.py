"""``dpaudit plan [FILE]``: the trials (or guesses) an audit needs, planned without running it.

Each form of the command is one call of the planning library: an audit file's plan
(:func:`dpaudit.audit.plan_from_file`, from the parsed file), the ideal attack's trials
(:func:`dpaudit.planning.plan_trials`), a one-run design's guesses
(:func:`dpaudit.planning.plan_one_run`), or a sequential design's trials by simulation
(:func:`dpaudit.sequential.plan_sequential`,
:func:`dpaudit.sequential.curve.plan_sequential_curve`,
:func:`dpaudit.sequential.shuffle.plan_shuffled_run`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from dpaudit.cli import _library as lib
from dpaudit.cli._common import console, duration, fail, out, user_code
from dpaudit.errors import DpauditError

if TYPE_CHECKING:
    from dpaudit.audit import FilePlan
    from dpaudit.planning import TrialPlan

#: The plan's defaults when no audit file gives them.
CONFIDENCE_LEVEL = 0.95
DELTA = 0.0
PARAMETER = "epsilon"
THRESHOLD = "split"


def plan_command(
    target: Annotated[float, typer.Option("--target", help="The ε (or μ) to certify.")],
    audit_file: Annotated[
        Path | None,
        typer.Argument(
            help="An audit file to plan: its kind, mechanism, claim, δ and confidence level "
            "(shared over its verdict's comparisons) are read from it; nothing runs.",
        ),
    ] = None,
    mechanism_epsilon: Annotated[
        float | None,
        typer.Option("--mechanism-epsilon", help="ε of the Laplace mechanism audited."),
    ] = None,
    mechanism_mu: Annotated[
        float | None, typer.Option("--mechanism-mu", help="μ of the Gaussian mechanism audited.")
    ] = None,
    perfect: Annotated[
        bool, typer.Option("--perfect", help="An attack that makes no error (the design's limit).")
    ] = False,
    design: Annotated[
        str, typer.Option("--design", help="multi-run (trials per arm) or one-run (guesses).")
    ] = "multi-run",
    guess_accuracy: Annotated[
        float | None,
        typer.Option("--guess-accuracy", help="one-run: the fraction of guesses right."),
    ] = None,
    canaries_per_guess: Annotated[
        int, typer.Option("--canaries-per-guess", help="one-run: canaries m per guess r.")
    ] = 1,
    kind: Annotated[
        str | None, typer.Option("--kind", help="The kind of FILE to plan (default its first).")
    ] = None,
    parameter: Annotated[
        str | None,
        typer.Option("--parameter", help="epsilon or mu (FILE: mu for a claim of μ alone)."),
    ] = None,
    delta: Annotated[
        float | None, typer.Option("--delta", help="δ of an ε bound (FILE: its δ; else 0).")
    ] = None,
    confidence_level: Annotated[
        float | None,
        typer.Option(
            "--confidence-level",
            help="The confidence level (FILE: the verdict's, instead of the file's; else 0.95).",
        ),
    ] = None,
    threshold: Annotated[
        str | None, typer.Option("--threshold", help="split or bonferroni (FILE: its own).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead.")] = False,
    timed: Annotated[
        bool,
        typer.Option(
            "--time",
            help="With FILE: also estimate the wall and CPU time on this machine, by running "
            "its kind on a few trials in a temporary folder.",
        ),
    ] = False,
    sequential: Annotated[
        bool,
        typer.Option(
            "--sequential",
            help="Plan a sequential design by seeded simulation of the mechanism's law.",
        ),
    ] = False,
    claim: Annotated[
        float | None,
        typer.Option("--claim", help="sequential: the claimed ε (or μ) a violation exceeds."),
    ] = None,
    round_trials: Annotated[
        int, typer.Option("--round-trials", help="sequential: trials per arm per round.")
    ] = 100,
    max_trials: Annotated[
        int, typer.Option("--max-trials", help="sequential: the cap, trials per arm.")
    ] = 100_000,
    repeats: Annotated[int, typer.Option("--repeats", help="sequential: simulated audits.")] = 200,
    seed: Annotated[int, typer.Option("--seed", help="sequential: simulation seed.")] = 0,
    dpsgd_sigma: Annotated[
        float | None,
        typer.Option(
            "--dpsgd-sigma",
            help="sequential: plan the claim-curve test of white-box DP-SGD claiming this σ.",
        ),
    ] = None,
    run_sigma: Annotated[
        float | None,
        typer.Option("--run-sigma", help="sequential, --dpsgd-sigma: the σ the run really has."),
    ] = None,
    sampling_rate: Annotated[
        float, typer.Option("--sampling-rate", help="sequential, --dpsgd-sigma: q.")
    ] = 1.0,
    steps: Annotated[int, typer.Option("--steps", help="sequential, --dpsgd-sigma: T.")] = 1,
    run_sampling: Annotated[
        str,
        typer.Option(
            "--run-sampling",
            help="sequential, --dpsgd-sigma: how the run forms its batches, poisson (as "
            "claimed) or shuffled (fixed batches, each record once per epoch).",
        ),
    ] = "poisson",
    dataset_size: Annotated[
        int | None,
        typer.Option(
            "--dataset-size",
            help="--run-sampling shuffled: n, the records shuffled into batches of n·q "
            "(plans the grey-box batch-size check).",
        ),
    ] = None,
) -> None:
    """Trials per arm (or one-run guesses) an ideal attack needs to certify --target.

    The ideal attack has the rates of the mechanism's own trade-off curve (Laplace with
    --mechanism-epsilon, Gaussian with --mechanism-mu), or none at all with --perfect.
    With FILE, the plan is made from the file without running it: its kind, its
    mechanism (a built-in Laplace or Gaussian, unless a flag says otherwise), claim and δ,
    and its confidence level (or --confidence-level) shared over the comparisons its
    verdict holds, as the audit shares it. --time also runs the kind on a few trials to
    estimate the wall time of the planned audit.
    """
    if audit_file is not None and (sequential or design != "multi-run"):
        raise fail(
            "planning FILE is for --design multi-run without --sequential; a one-run audit "
            "is one run, and a sequential plan simulates the mechanism's law"
        )
    if timed and audit_file is None:
        raise fail("--time times an audit file's kind: give FILE")
    if run_sampling not in ("poisson", "shuffled"):
        raise fail(f"--run-sampling must be 'poisson' or 'shuffled'. Got {run_sampling!r}.")
    if run_sampling == "shuffled" and not (sequential and dpsgd_sigma is not None):
        raise fail(
            "--run-sampling shuffled plans the claim-curve test of white-box DP-SGD by "
            "simulation: give --sequential and --dpsgd-sigma (the σ claimed and run)."
        )
    if sequential:
        _sequential(
            target=target,
            claim=claim,
            mechanism_epsilon=mechanism_epsilon,
            mechanism_mu=mechanism_mu,
            parameter=parameter or PARAMETER,
            delta=DELTA if delta is None else delta,
            confidence_level=CONFIDENCE_LEVEL if confidence_level is None else confidence_level,
            round_trials=round_trials,
            max_trials=max_trials,
            repeats=repeats,
            seed=seed,
            dpsgd_sigma=dpsgd_sigma,
            run_sigma=run_sigma,
            sampling_rate=sampling_rate,
            steps=steps,
            run_sampling=run_sampling,
            dataset_size=dataset_size,
            as_json=as_json,
        )
        return
    if design not in ("multi-run", "one-run"):
        raise fail(f"--design must be 'multi-run' or 'one-run'. Got {design!r}.")
    given = [perfect, mechanism_mu is not None, mechanism_epsilon is not None]
    if design == "one-run":
        given.append(guess_accuracy is not None)
    if sum(given) > 1 or (sum(given) == 0 and audit_file is None):
        what = ", --guess-accuracy" if design == "one-run" else ""
        raise fail(
            f"Give exactly one of --mechanism-epsilon (Laplace), --mechanism-mu (Gaussian), "
            f"--perfect{what}."
        )
    if audit_file is not None:
        with user_code():
            planned = lib.plan_from_file(
                audit_file,
                target,
                kind=kind,
                confidence_level=confidence_level,
                mechanism_epsilon=mechanism_epsilon,
                mechanism_mu=mechanism_mu,
                perfect=perfect,
                parameter=parameter,
                delta=delta,
                threshold=threshold,
                time=timed,
            )
        if as_json:
            console.print_json(json.dumps(planned.to_dict()))
        else:
            _print_file_plan(planned)
        return
    level = CONFIDENCE_LEVEL if confidence_level is None else confidence_level
    try:
        if design == "one-run":
            one = lib.plan_one_run(
                target,
                DELTA if delta is None else delta,
                level,
                accuracy=1.0 if perfect else guess_accuracy,
                mechanism_epsilon=mechanism_epsilon,
                mechanism_mu=mechanism_mu,
                canaries_per_guess=canaries_per_guess,
            )
        else:
            tradeoff: Literal["laplace", "gaussian", "perfect"] = (
                "perfect" if perfect else "gaussian" if mechanism_mu is not None else "laplace"
            )
            plan = lib.plan_trials(
                target,
                DELTA if delta is None else delta,
                level,
                tradeoff=tradeoff,
                mechanism_epsilon=mechanism_epsilon,
                mechanism_mu=mechanism_mu,
                parameter=parameter or PARAMETER,  # type: ignore[arg-type]  # checked there
                threshold=threshold or THRESHOLD,  # type: ignore[arg-type]  # checked there
            )
    except DpauditError as exc:
        raise fail(exc) from None
    if design == "one-run":
        if as_json:
            console.print_json(json.dumps(one.to_dict()))
            return
        out(
            f"{one.guesses} guesses on {one.canaries} canaries: an attack right on "
            f"{one.accuracy:.4g} of its guesses is expected to certify ε ≥ "
            f"{one.expected_value:.4g} (target {one.target:g}) at {one.confidence_level:g} "
            f"confidence, δ = {one.delta:g}; every guess right would certify "
            f"{one.limit:.4g} (the design's limit of detection)."
        )
        return
    if as_json:
        console.print_json(json.dumps(plan.to_dict()))
        return
    out(_trials_line(plan))


def _trials_line(plan: TrialPlan) -> str:
    name = "ε" if plan.parameter == "epsilon" else "μ"
    return (
        f"{plan.trials_per_arm} trials per arm: an ideal attack ({plan.tradeoff}) is expected "
        f"to certify {name} ≥ {plan.expected_value:.4g} (target {plan.target:g}) at "
        f"{plan.confidence_level:g} confidence; a perfect attack would certify "
        f"{plan.limit:.4g} (the design's limit of detection)."
    )


def _print_file_plan(planned: FilePlan) -> None:
    plan = planned.plan
    out(_trials_line(plan))
    source = "the file's" if planned.confidence_source == "file" else "given"
    counts = ", ".join(f"{k} {n}" for k, n in planned.comparisons.items())
    total = sum(planned.comparisons.values())
    shared = (
        f"at most {total} comparisons ({counts}): planned conservatively, as "
        f"{', '.join(planned.comparisons_maximum)} counts from what a run stores"
        if planned.comparisons_maximum
        else f"{total} comparisons ({counts})"
    )
    out(
        f"Planned at {planned.level_each:.6g}, the confidence level of each bound in the "
        f"verdict of {planned.file}: confidence level {planned.confidence_level:g} ({source}) "
        f"shared over {shared}."
    )
    if planned.claim is not None:
        stated = ", ".join(f"{k} = {v:g}" for k, v in planned.claim.items())
        out(f"Its claim: {stated}.")
    enough = "enough" if planned.file_trials >= plan.trials_per_arm else "fewer than planned"
    out(f"The file runs {planned.file_trials} trials per arm: {enough}.")
    for line in planned.size_notes:
        out(line)
    cost = planned.time
    if cost is not None:
        n = plan.trials_per_arm
        out(
            f"Expected time on this machine for {cost.kind} ({planned.file}): "
            f"{duration(cost.wall_seconds(n))} wall, {duration(cost.cpu_seconds(n))} CPU "
            f"(extrapolated from {cost.trials[0]} and {cost.trials[1]} trials per arm, which "
            f"took {cost.wall[0]:.2f} s and {cost.wall[1]:.2f} s wall)."
        )


def _sequential(
    *,
    target: float,
    claim: float | None,
    mechanism_epsilon: float | None,
    mechanism_mu: float | None,
    parameter: str,
    delta: float,
    confidence_level: float,
    round_trials: int,
    max_trials: int,
    repeats: int,
    seed: int,
    dpsgd_sigma: float | None,
    run_sigma: float | None,
    sampling_rate: float,
    steps: int,
    run_sampling: str,
    dataset_size: int | None,
    as_json: bool,
) -> None:
    """``dpaudit plan --sequential``: trials to stop, simulated; the fixed plan beside. With
    ``--dpsgd-sigma``: models per arm the sequential claim-curve test of white-box DP-SGD
    needs to refute a run at ``--run-sigma`` (or one that shuffles fixed batches,
    ``--run-sampling shuffled``), simulated from the exact law."""
    if dpsgd_sigma is not None and run_sampling == "shuffled":
        _shuffled(
            sigma=dpsgd_sigma,
            run_sigma=run_sigma,
            sampling_rate=sampling_rate,
            steps=steps,
            dataset_size=dataset_size,
            level=confidence_level,
            round_trials=round_trials,
            max_trials=max_trials,
            repeats=repeats,
            seed=seed,
            as_json=as_json,
        )
        return
    if dpsgd_sigma is not None:
        if run_sigma is None:
            raise fail(
                "--dpsgd-sigma plans the refutation of a run that has another σ: give "
                "--run-sigma (the σ the run really has; below the claimed σ for a bug)."
            )
        try:
            curve = lib.plan_sequential_curve(
                noise_multiplier=dpsgd_sigma,
                run_noise_multiplier=run_sigma,
                sampling_rate=sampling_rate,
                steps=steps,
                level=confidence_level,
                round_trials=round_trials,
                max_trials=max_trials,
                repeats=repeats,
                seed=seed,
            )
        except DpauditError as exc:
            raise fail(exc) from None
        if as_json:
            console.print_json(json.dumps(curve.to_dict()))
            return
        out(
            f"sequential claim curve (white-box DP-SGD claiming σ {dpsgd_sigma:g}, running "
            f"σ {run_sigma:g}, q {curve.sampling_rate:g}, T {curve.steps}; rounds of "
            f"{curve.round_trials}, cap {curve.max_trials}, level {curve.level:g}): median "
            f"{curve.median_trials:.0f}, mean {curve.mean_trials:.0f}, 95th percentile "
            f"{curve.p95_trials:.0f} models per arm over {curve.repeats} simulated audits "
            f"(seed {curve.seed}); refuted in {curve.detected:.0%}. In an audit the curve is "
            "one of three comparisons: plan at its share, --confidence-level 1 − (1 − c)/3."
        )
        return
    if (mechanism_epsilon is None) == (mechanism_mu is None):
        raise fail(
            "--sequential simulates a mechanism: give exactly one of --mechanism-epsilon "
            "(Laplace) or --mechanism-mu (Gaussian)."
        )
    law: Literal["laplace", "gaussian"] = "laplace" if mechanism_epsilon is not None else "gaussian"
    true_value = mechanism_epsilon if mechanism_epsilon is not None else mechanism_mu
    try:
        beside = lib.plan_sequential_beside_fixed(
            law=law,
            true_value=float(true_value),  # type: ignore[arg-type]  # one is given, above
            parameter=parameter,  # type: ignore[arg-type]  # checked by SequentialRule
            target=target if target > 0 else None,
            upper=claim,
            delta=delta,
            level=confidence_level,
            round_trials=round_trials,
            max_trials=max_trials,
            repeats=repeats,
            seed=seed,
        )
    except DpauditError as exc:
        raise fail(exc) from None
    plan, fixed = beside.plan, beside.fixed_trials_per_arm
    if as_json:
        console.print_json(json.dumps(beside.to_dict()))
        return
    console.print(
        f"sequential ({law}, true {parameter} {plan.true_value:g}, rounds of {round_trials}, "
        f"cap {max_trials}): median {plan.median_trials:.0f}, mean {plan.mean_trials:.0f}, "
        f"95th percentile {plan.p95_trials:.0f} trials per arm over {repeats} simulated "
        f"audits (seed {seed}); stopped by "
        + ", ".join(f"{k} {v:.0%}" for k, v in plan.stop_share.items())
        + f"; the fixed split plan for the same goal: {fixed} trials per arm.",
        markup=False,
    )


def _shuffled(
    *,
    sigma: float,
    run_sigma: float | None,
    sampling_rate: float,
    steps: int,
    dataset_size: int | None,
    level: float,
    round_trials: int,
    max_trials: int,
    repeats: int,
    seed: int,
    as_json: bool,
) -> None:
    """``dpaudit plan --sequential --dpsgd-sigma S --run-sampling shuffled``: models per arm
    the claim-curve test needs, and batch sizes the grey-box check needs, to refute a run
    that shuffles fixed batches against the Poisson claim."""
    if run_sigma is not None:
        raise fail(
            "--run-sampling shuffled plans a run at the claimed σ (--dpsgd-sigma) that "
            "shuffles its batches: drop --run-sigma, or plan the σ mismatch without "
            "--run-sampling."
        )
    if dataset_size is None:
        raise fail(
            "--run-sampling shuffled also plans the grey-box batch-size check: give "
            "--dataset-size (n, the records the run shuffles into batches of n·q)."
        )
    try:
        plan = lib.plan_shuffled_run(
            noise_multiplier=sigma,
            sampling_rate=sampling_rate,
            steps=steps,
            dataset_size=dataset_size,
            level=level,
            round_trials=round_trials,
            max_trials=max_trials,
            repeats=repeats,
            seed=seed,
        )
    except DpauditError as exc:
        raise fail(exc) from None
    if as_json:
        console.print_json(json.dumps(plan.to_dict()))
        return
    curve, sizes = plan.curve, plan.batch_sizes
    grey = (
        "the grey-box batch-size check never fails (q = 1: full batches are the claim)"
        if sizes.batches is None
        else f"the grey-box batch-size check fails after {sizes.batches} batch sizes "
        f"({sizes.models} model{'s' if sizes.models != 1 else ''} of {sizes.steps} steps; "
        f"n {sizes.dataset_size}, batches of {sizes.batch_size}, p = {sizes.p_value:.3g})"
    )
    out(
        f"shuffled fixed batches claimed as Poisson (white-box DP-SGD σ {sigma:g}, q "
        f"{curve.sampling_rate:g}, T {curve.steps}, epochs of {plan.steps_per_epoch} steps; "
        f"rounds of {curve.round_trials}, cap {curve.max_trials}, level {curve.level:g}): "
        f"the sequential claim curve stops after a median {curve.median_trials:.0f}, mean "
        f"{curve.mean_trials:.0f}, 95th percentile {curve.p95_trials:.0f} models per arm over "
        f"{curve.repeats} simulated audits (seed {curve.seed}), refuted in "
        f"{curve.detected:.0%}; {grey}."
    )
