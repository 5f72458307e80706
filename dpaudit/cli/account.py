"""``dpaudit account``: accountant upper bounds of a DP-SGD run, or of an equation σ = g(ε, δ).

The options are parsed here; the bounds are assembled by
:func:`dpaudit.accounting.statement.account_dpsgd` (or ``account_equation``, or the
composition table of :func:`dpaudit.accounting.composition.compare`), and printed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from dpaudit.cli import _library as lib
from dpaudit.cli._common import console, fail
from dpaudit.errors import DpauditError, check_in_interval
from dpaudit.recipes import sampling_plan, steps_from_rate

if TYPE_CHECKING:
    from dpaudit.accounting.statement import DpsgdAccount, EquationAccount


def account_command(
    noise_multiplier: Annotated[
        float | None, typer.Option("--noise-multiplier", help="σ: noise std / clipping norm.")
    ] = None,
    sampling_rate: Annotated[
        float | None, typer.Option("--sampling-rate", help="q, Poisson rate per step.")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option("--batch-size", help="Expected batch B (q = B/N).")
    ] = None,
    dataset_size: Annotated[int | None, typer.Option("--dataset-size", help="N rows.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="T noisy updates.")] = None,
    epochs: Annotated[
        int | None,
        typer.Option("--epochs", help="E epochs: T = E·⌊N/B⌋, as the engine runs (or E·⌊1/q⌋)."),
    ] = None,
    delta: Annotated[float, typer.Option("--delta", help="δ for ε(δ).")] = 1e-5,
    identify: Annotated[
        bool,
        typer.Option("--identify", help="Decide whether the run is exactly μ-GDP (Liu et al.)."),
    ] = False,
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Compare composition theorems (naive, advanced, optimal, RDP, PLD, GDP).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead.")] = False,
    equation: Annotated[
        str | None,
        typer.Option(
            "--equation",
            help="A guarantee given as a privacy–utility equation σ = g(ε, δ): sgd, laplace, "
            "icea or pkg.module:function (Liu et al. 2022); parameters with --param.",
        ),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", help="KEY=VALUE for --equation (repeatable), e.g. sigma=2."),
    ] = None,
    amplify_mix: Annotated[
        float | None,
        typer.Option(
            "--amplify-mix",
            help="With --equation: post-process by a uniform draw w.p. p (needs field_size).",
        ),
    ] = None,
    figure: Annotated[
        Path | None,
        typer.Option("--figure", help="With --equation: write its profiles (.svg or .png)."),
    ] = None,
) -> None:
    """Accountant upper bounds for DP-SGD: ε(δ) by PLD and RDP, the μ bracket, and ρ (q = 1).

    Full batch (q = 1) is T compositions of the Gaussian mechanism: ρ = T/(2σ²)-zCDP
    (Bun, Steinke 2016, Prop. 1.6 and Lemma 2.3). A subsampled Gaussian has no such ρ.
    With --equation, a guarantee σ = g(ε, δ) instead: its naive and refined profiles,
    GDP identification, μ bracket, optional amplification and figure.
    """
    if equation is not None:
        if noise_multiplier is not None or steps is not None or epochs is not None:
            raise fail("--equation takes its parameters from --param, not the DP-SGD options.")
        _equation(equation, _params(param or []), amplify_mix, figure, as_json=as_json)
        return
    if noise_multiplier is None:
        raise fail("Give --noise-multiplier (DP-SGD) or --equation (a privacy–utility equation).")
    if (sampling_rate is None) == (batch_size is None and dataset_size is None):
        raise fail("Give either --sampling-rate or both --batch-size and --dataset-size.")
    if sampling_rate is None:
        if batch_size is None or dataset_size is None:
            raise fail("--batch-size and --dataset-size must be given together.")
        if batch_size < 1 or dataset_size < 1:
            raise fail(
                f"--batch-size and --dataset-size must be positive. "
                f"Got {batch_size} and {dataset_size} instead."
            )
        sampling_rate = batch_size / dataset_size
    if (steps is None) == (epochs is None):
        raise fail("Give exactly one of --steps and --epochs.")
    try:
        q = check_in_interval("sampling_rate", sampling_rate, 0.0, 1.0, low_open=True)
        if epochs is not None:
            check_in_interval("epochs", epochs, 0.0, math.inf, low_open=True)
            # The engine's own rule (recipes.sampling_plan): an epoch is ⌊N/B⌋ Poisson steps.
            if batch_size is not None and dataset_size is not None:
                _, steps = sampling_plan(
                    dataset_size, batch_size=batch_size, epochs=epochs, full_batch=False
                )
            else:
                steps = steps_from_rate(q, epochs=epochs)
        if steps is None:  # exactly one of --steps / --epochs, checked above
            raise fail("Give exactly one of --steps and --epochs.")
        if compare:
            table = lib.compare(
                noise_multiplier=noise_multiplier, sampling_rate=q, steps=steps, delta=delta
            )
            if as_json:
                typer.echo(json.dumps(table.to_dict(), indent=2, ensure_ascii=False))
            else:
                typer.echo(lib.format_markdown(table))
            return
        account = lib.account_dpsgd(
            noise_multiplier=noise_multiplier,
            sampling_rate=q,
            steps=steps,
            delta=delta,
            identify=identify,
        )
    except DpauditError as exc:
        raise fail(exc) from None
    if as_json:
        # JSON has no infinity: an unbounded value is null, and its reason says why.
        console.print_json(json.dumps(lib.json_finite(account.to_dict()), allow_nan=False))
        return
    _print_dpsgd(account)


def _params(items: list[str]) -> dict[str, float]:
    """``--param KEY=NUMBER`` options as a dict."""
    values: dict[str, float] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        try:
            if not sep:
                raise ValueError
            values[key.strip()] = float(raw)
        except ValueError:
            raise fail(f"--param must be KEY=NUMBER. Got {item!r} instead.") from None
    return values


def _print_dpsgd(account: DpsgdAccount) -> None:
    eps, bracket, delta = account.epsilon, account.mu_bracket, account.delta
    table = Table(
        title=f"DP-SGD: σ = {account.noise_multiplier:g}, q = {account.sampling_rate:.6g}, "
        f"T = {account.steps}"
    )
    table.add_column("bound")
    table.add_column("value", justify="right")
    for kind in ("pld", "rdp"):
        value = "∞" if math.isinf(eps[kind]) else f"{eps[kind]:.4f}"
        table.add_row(f"ε at δ = {delta:g} ({kind.upper()})", value)
    high = "∞" if not bracket.bounded else f"{bracket.high:.4f}"
    table.add_row("μ bracket (GDP measurement)", f"[{bracket.low:.4f}, {high}]")
    if bracket.tail_delta == 0.0:
        table.add_row("μ bracket covers", "every ε")
    else:
        table.add_row(
            "μ bracket covers ε ≤",
            f"{bracket.epsilon_max:.3f} (beyond: δ ≤ {bracket.tail_delta:.1e})",
        )
    if account.rho is not None:
        table.add_row("ρ-zCDP (full batch)", f"{account.rho:.4g}")
    console.print(table)
    for kind, reason in account.epsilon_reason.items():
        value = "∞" if math.isinf(eps[kind]) else f"{eps[kind]:.4f}"
        console.print(f"ε ({kind.upper()}) = {value}: {reason}.", markup=False)
    if bracket.reason:
        console.print(f"μ: {bracket.reason}.", markup=False)
    if account.identification is not None:
        console.print(account.identification.summary, markup=False)


def _equation(
    name: str, values: dict[str, float], mix: float | None, figure: Path | None, *, as_json: bool
) -> None:
    """``dpaudit account --equation``: identify, measure, amplify and draw a guarantee
    σ = g(ε, δ) (:mod:`dpaudit.theory.equations`)."""
    try:
        account = lib.account_equation(name, values, mix=mix, base_dir=Path.cwd())
        if figure is not None:
            eq, amp = account.identification.equation, account.amplified
            lib.write_profile_figure(
                figure,
                [(eq, account.figure_top)],
                amplified={eq.name: amp} if amp is not None else None,
            )
    except DpauditError as exc:
        raise fail(exc) from None
    if as_json:
        found = account.to_dict()
        if figure is not None:
            found["figure"] = str(figure)
        console.print_json(json.dumps(lib.json_finite(found), allow_nan=False))
        return
    _print_equation(account, figure)


def _print_equation(account: EquationAccount, figure: Path | None) -> None:
    console.print(account.identification.summary, markup=False)
    amp = account.amplified
    if amp is not None:
        b = amp.identification.bracket
        console.print(
            f"amplified (uniform draw w.p. {amp.mix:g} on q = {amp.field_size}): "
            f"{amp.epsilon_star:.4g}-DP and μ-GDP for μ ≥ {b.high:.4g} (not for "
            f"μ < {b.low:.4g}), for every ε",
            markup=False,
        )
    if figure is not None:
        console.print(f"figure: {figure}", markup=False)
