"""``dpaudit run FILE``: run an audit through the session, print its summary table."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dpaudit.cli import _library as lib
from dpaudit.cli._common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    NO_PLUGINS,
    console,
    say,
    user_code,
)
from dpaudit.cli.progress import progress
from dpaudit.config import load_config
from dpaudit.membership.sanity import accuracy_line
from dpaudit.plugins import safe_mode
from dpaudit.safe_text import one_line

if TYPE_CHECKING:
    from dpaudit.results import AuditResult


def run_command(
    file: Annotated[Path, typer.Argument(help="The audit file (TOML).")],
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", "-o", help="Run directory (default reports/<name>/)."),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress, no table.")] = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write the checks as JUnit XML.")
    ] = None,
    no_plugins: Annotated[bool, NO_PLUGINS] = False,
) -> None:
    """Run an audit; exit 0 if every gate check passed, 1 if one failed, 2 on bad input."""
    # Resolved once, before any user code runs: a plug-in that changes the working
    # directory cannot move where the results are written.
    given = None if output_dir is None else output_dir.resolve()
    junit = None if junit is None else junit.resolve()
    if given is None:
        with user_code(), safe_mode(no_plugins):
            given = lib.default_run_dir(load_config(file)).resolve()
    if junit is not None:
        lib.check_junit_path(junit, given, file.resolve())
    with user_code(given), progress(quiet) as bars:
        result = lib.run_session(
            file,
            output_dir=given,
            safe=no_plugins,
            supervise=False,  # the console script watches this process
            junit=junit,
            progress=bars,
            log=None if quiet else say,
        )
    if junit is not None:
        lib.write_junit(result, junit)
    if not quiet:
        summary(result)
    elif result.verdict != "pass":
        for check in result.failed_checks:
            say(f"FAIL {check.name}: {check.message}")
    raise typer.Exit(EXIT_OK if result.verdict == "pass" else EXIT_CHECK_FAILED)


#: Characters of a test label the console table shows whole (longer ones: their head).
_TABLE_LABEL = 24


def summary(result: AuditResult) -> None:
    """The console table of a finished audit: its bounds, checks, warnings and verdict."""
    # no padding at the outer edges: two more characters for the labels in 80 columns
    table = Table(
        title=Text(one_line(f"dpaudit: {result.name}")), title_justify="left", pad_edge=False
    )
    table.add_column("test", ratio=1, overflow="fold")
    table.add_column("bound", no_wrap=True)
    for col in ("lower", "upper", "tightness"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("validity", no_wrap=True)
    shown = [
        c for c in result.comparisons if c.in_verdict or c.lower.validity.startswith("rigorous")
    ]
    hidden = len(result.comparisons) - len(shown)
    # A long label ("search #1 (remove-0): D=[...], D'=[...], event ...") keeps its head in
    # the table and is written out in full below it: the table fits an 80-column CI log.
    spelled: list[str] = []
    for c in shown:
        head, colon, _ = c.test.partition(": ")
        label = c.test
        if colon and len(c.test) > _TABLE_LABEL:
            # "search #2 (one-below-rest-above)": the table says "search #2", the line
            # below the table the whole label
            label = head.partition(" (")[0] if len(head) > _TABLE_LABEL // 2 else head
            if c.test not in spelled:
                spelled.append(c.test)
        upper = "-" if c.upper is None else f"{c.upper:.4g}"
        tight = "-" if c.tightness is None else f"{c.tightness:.3f}"
        name = f"ε δ={c.lower.delta:g}" if isinstance(c.lower, lib.EpsilonBound) else "μ"
        mark = " [bold red]VIOLATION[/]" if c.violation else ""
        validity = c.lower.validity.replace("rigorous-", "rigorous, ")
        table.add_row(
            Text(one_line(label)), name, f"{c.lower.value:.4g}{mark}", upper, tight, validity
        )
    if shown:
        console.print(table)
    for full in spelled:
        # wrapped at the table's 80 columns, continuation lines indented under the label
        for line in textwrap.wrap(one_line(full), width=80, subsequent_indent="    "):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    said = set()  # one line per target, however many attacks it had
    for test in result.tests:
        target = test.details.get("target")
        accuracy = target.get("accuracy") if isinstance(target, dict) else None
        if isinstance(target, dict) and accuracy:
            name = target.get("variant") or target.get("path") or test.label
            line = f"target accuracy ({name}): {accuracy_line(accuracy)}"
            if line not in said:
                said.add(line)
                console.print(one_line(line), markup=False)
    if hidden:
        console.print(f"({hidden} informational bounds outside the verdict are in the report)")
    for check in result.checks:
        status = (
            "[bold red]FAIL[/]"
            if not check.passed
            else "[yellow]not evaluated[/]"
            if check.status == "not-evaluated"
            else "[dim]not applicable[/]"
            if check.status == "not-applicable"
            else "[green]pass[/]"
        )
        # The message is text ("[gate] on_unmeasured", a user's label), not markup.
        message = escape(one_line(check.message))
        console.print(f"{status} {escape(one_line(check.name))}: {message}", highlight=False)
    for w in result.warnings:
        console.print(f"[yellow]warning[/]: {escape(one_line(w))}")
    colour = "green" if result.verdict == "pass" else "bold red"
    run_dir = Path(str(result.provenance.get("run_dir")))
    console.print(f"verdict: [{colour}]{result.verdict}[/] ({escape(one_line(result.headline))})")
    console.print(one_line(f"results: {run_dir / 'results.json'}"), markup=False)
    if (run_dir / "report.html").is_file():
        console.print(one_line(f"report: {run_dir / 'report.html'}"), markup=False)
