"""The ``dpaudit`` command line: a thin Typer app over the public API.

Exit codes are a contract (README, ``--help``): 0 every gate check passed; 1 a gate check
failed; 2 unusable input or environment (a bad or unreadable file, a missing resource, an
unavailable device or scheduler, an unwritable output), with one line naming it and no
traceback; 130 interrupted (Ctrl-C), with a line saying what was kept. Nothing else exits 1.
Only what a command needs is imported, when it needs it: ``--help``, ``--version``,
``init`` and ``validate`` load neither torch nor dp-accounting.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, suppress
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from xml.etree import ElementTree as ET

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from dpaudit._version import __version__
from dpaudit.config import check_runnable, load_config, run_context, size_notes
from dpaudit.errors import DpauditError, check_in_interval
from dpaudit.kinds import get_kind, kind_names
from dpaudit.membership.sanity import accuracy_line
from dpaudit.plugins import guard_user_exit, interrupt_handler, safe_mode, safe_mode_active
from dpaudit.recipes import sampling_plan, steps_from_rate
from dpaudit.safe_text import ASCII_ERRORS, for_xml, one_line
from dpaudit.store import LOCK_NAME, atomic_write_bytes, atomic_write_text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dpaudit.audit import TrialCost
    from dpaudit.results import AuditResult

EXIT_CODES_HELP = (
    "Exit codes: 0 every gate check passed; 1 a gate check failed; 2 unusable input or "
    "environment (one line says which file, key or resource); 130 interrupted."
)

app = typer.Typer(
    name="dpaudit",
    help="Audit differential privacy: attacks, empirical lower bounds, accountant upper bounds.",
    epilog=EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# No emoji codes and no markup in what users wrote: ":train:" in a trainer's name stays text.
err_console = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
console = Console(highlight=False, soft_wrap=True, emoji=False)

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def fail(message: str) -> typer.Exit:
    """Print one error line to stderr and return the exit to raise (code 2).

    The message is made one safe line (control characters shown as escapes, cut to a
    readable length): it may echo a value from the audit file or a plug-in's text.
    """
    err_console.print(f"error: {one_line(message)}", markup=False)
    return typer.Exit(EXIT_BAD_INPUT)


def _say(line: str) -> None:
    err_console.print(one_line(line), markup=False)


@contextmanager
def _user_code(run_dir: Path | None = None) -> Iterator[None]:
    """Turn what user code can throw at a command into the exit-code contract.

    Inside, dpaudit runs plug-ins, brought models and data readers. Whatever they raise
    ends as exit 2 with one line (a :class:`DpauditError` with its own message, an
    ``OSError`` naming the file, ``SystemExit`` / ``EOFError`` / a ``KeyboardInterrupt``
    raised by code as "user code cannot end a run", a dead worker process), except a real
    Ctrl-C, which is exit 130 and says the finished units are kept.
    """
    kept = f"every finished unit is kept in {run_dir}; " if run_dir is not None else ""
    try:
        yield
    except DpauditError as exc:
        raise fail(str(exc)) from None
    except BrokenProcessPool:
        raise fail(
            f"a worker process died while computing units (user code may have called "
            f"os._exit() or crashed the interpreter); {kept}the same command resumes"
        ) from None
    except OSError as exc:  # disk full, permissions, ... while the run was under way
        where = exc.filename or run_dir or "the run"
        raise fail(
            f"{where}: {exc.strerror or exc}; {kept}fix this, then run the same command again"
        ) from None
    except typer.Exit:
        raise
    except BaseException as exc:
        converted = guard_user_exit(exc, "user code run by this audit (a plug-in or model)")
        if isinstance(converted, KeyboardInterrupt):
            _say(f"interrupted: {kept}run the same command again to resume")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if converted is not exc:
            raise fail(str(converted)) from None
        raise


def _version(value: bool) -> None:
    if value:
        console.print(f"dpaudit {__version__}", markup=False)
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """dpaudit: audit differential privacy in machine learning."""


@contextmanager
def _progress(quiet: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """Progress whose callback matches :data:`dpaudit.audit.Progress`.

    On a terminal: rich bars with a spinner, elapsed time and an estimate of the time left
    once the first units are done. Off a terminal (CI logs): :class:`PlainProgress` lines.
    """
    if quiet:
        yield None
        return
    if not err_console.is_terminal:
        plain = PlainProgress(lambda line: err_console.print(line, markup=False))
        try:
            yield plain
        finally:  # an audit that stopped early leaves the models logger as it found it
            plain.close()
        return
    bars = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    )
    tasks: dict[str, TaskID] = {}

    def update(description: str, total: int, advance: int) -> None:
        if description not in tasks:
            tasks[description] = bars.add_task(description, total=total)
        bars.update(tasks[description], advance=advance)

    with bars:
        yield update


class PlainProgress:
    """Progress as plain lines: one at start, then at every 10 % or 30 s, and at the end.

    For logs that are not a terminal (CI): a bar would print nothing useful there. Each
    line says the units done, the elapsed time and, once work is done, the time left
    estimated from the pace so far (units take similar time within one kind).

    One unit can take minutes (an Opacus audit of 200 models is one unit), so a unit that
    trains models may report each one: :meth:`models`, which this calls for every record
    on the ``dpaudit.models`` logger (the Opacus adapter's, ``extra={"models": (done,
    total)}``) while a kind's units run. Between units the lines then count the models of
    the unit in progress, at every 10 % or 30 s of the whole. Units that run in worker
    processes report nothing here; they count as units.
    """

    #: The logger units report their trained models on (see :meth:`models`).
    MODELS_LOGGER = "dpaudit.models"

    class _Listener(logging.Handler):
        """Passes each model record to the progress it belongs to, while that one lives."""

        def __init__(self, owner: PlainProgress, *, level: int) -> None:
            super().__init__(logging.INFO)
            self.owner = weakref.ref(owner)
            self.restore_level = level  # the logger's own level before the progress listened

        def emit(self, record: logging.LogRecord) -> None:
            owner = self.owner()
            models = getattr(record, "models", None)
            if owner is not None and models is not None:
                owner.models(*models)

        def detach(self) -> None:
            """Stop listening and give the logger back its level."""
            logger = logging.getLogger(PlainProgress.MODELS_LOGGER)
            logger.removeHandler(self)
            logger.setLevel(self.restore_level)

    def __init__(
        self,
        emit: Callable[[str], None],
        *,
        every_fraction: float = 0.1,
        every_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.emit = emit
        self.every_fraction = every_fraction
        self.every_seconds = every_seconds
        self.clock = clock
        # description → [units done, total units, start, last line, tenths reached]
        self._state: dict[str, list[float]] = {}
        self._current: str | None = None  # the kind whose units are running
        self._models: tuple[int, int] | None = None  # (done, total) of the unit running
        self._listener: PlainProgress._Listener | None = None
        self._detach: weakref.finalize | None = None

    def __call__(self, description: str, total: int, advance: int) -> None:
        now = self.clock()
        if description not in self._state:
            self._state[description] = [0.0, float(total), now, now, 0.0]
            self.emit(f"{description}: 0/{total} units")
            self._current, self._models = description, None
            self._listen(True)
        state = self._state[description]
        state[0] += advance
        if advance:
            self._models = None  # a unit finished: its models now count in the units
        self._report(description, now)
        if state[0] >= state[1] and description == self._current:
            self._current = None
            self._listen(False)

    def models(self, done: int, total: int) -> None:
        """The unit in progress has trained ``done`` of its ``total`` models."""
        if self._current is None or total <= 0:
            return
        self._models = (done, total)
        if done < total:  # the unit's own line follows the last one
            self._report(self._current, self.clock())

    def _report(self, description: str, now: float) -> None:
        """Print a line if a tenth was crossed, the interval passed, or all is done."""
        state = self._state[description]
        units, total, start, last, tenths = state
        models = self._models if description == self._current else None
        work = units + (models[0] / models[1] if models else 0.0)  # in units
        # 1e-9: 60 of 200 models is the 3rd tenth although 60 / 200 / 0.1 = 2.9999999999999996
        state[4] = int(work / total / self.every_fraction + 1e-9)
        if units >= total or state[4] > tenths or now - last >= self.every_seconds:
            state[3] = now
            elapsed = now - start
            line = f"{description}: {int(units)}/{int(total)} units"
            if models:
                line += f", {models[0]}/{models[1]} models"
            line += f" ({work / total:.0%}), {_duration(elapsed)} elapsed"
            if 0 < work < total:
                line += f", about {_duration(elapsed / work * (total - work))} left"
            self.emit(line)

    def close(self) -> None:
        """Stop listening to the models logger, whether or not every unit finished."""
        self._current = None
        self._listen(False)

    def _listen(self, on: bool) -> None:
        """Listen to the units' model records (INFO on the models logger), or stop."""
        logger = logging.getLogger(self.MODELS_LOGGER)
        if on and self._listener is None:
            self._listener = PlainProgress._Listener(self, level=logger.level)
            # A progress dropped before its kind finished (an audit that raised) detaches
            # too, once collected: the logger never keeps a level nobody listens at.
            self._detach = weakref.finalize(self, self._listener.detach)
            logger.addHandler(self._listener)
            if not logger.isEnabledFor(logging.INFO):
                logger.setLevel(logging.INFO)
        elif not on and self._detach is not None:
            self._detach()  # a finalizer runs at most once
            self._listener = self._detach = None


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 9.5:
        return f"{seconds:.1g} s" if seconds < 1 else f"{seconds:.0f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


#: Characters of a test label the console table shows whole (longer ones: their head).
_TABLE_LABEL = 24


def _summary(result: AuditResult) -> None:
    from dpaudit.bounds import EpsilonBound

    table = Table(title=Text(one_line(f"dpaudit: {result.name}")), title_justify="left")
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
        if colon and len(c.test) > _TABLE_LABEL and len(head) <= _TABLE_LABEL:
            label = head
            if c.test not in spelled:
                spelled.append(c.test)
        upper = "-" if c.upper is None else f"{c.upper:.4g}"
        tight = "-" if c.tightness is None else f"{c.tightness:.3f}"
        name = f"ε δ={c.lower.delta:g}" if isinstance(c.lower, EpsilonBound) else "μ"
        mark = " [bold red]VIOLATION[/]" if c.violation else ""
        validity = c.lower.validity.replace("rigorous-", "rigorous, ")
        table.add_row(
            Text(one_line(label)), name, f"{c.lower.value:.4g}{mark}", upper, tight, validity
        )
    if shown:
        console.print(table)
    for full in spelled:
        console.print(one_line(full), markup=False, highlight=False)
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


def _check_junit_path(junit: Path, run_dir: Path, audit_file: Path) -> None:
    """``--junit`` may not overwrite the audit file or anything in the run directory."""
    if junit == audit_file:
        raise fail(f"--junit {junit} is the audit file itself; give another path")
    owned = (run_dir, run_dir / "results.json", run_dir / "report.html", run_dir / LOCK_NAME)
    if junit in owned or run_dir / "units" in junit.parents or junit.name.endswith(".tmp"):
        raise fail(
            f"--junit {junit} would overwrite a file of the run directory {run_dir} "
            "(results.json, report.html, units, the lock); give another path"
        )
    if junit.is_dir():
        raise fail(f"--junit {junit} is a folder; give a file path")


def write_junit(result: AuditResult, path: Path) -> None:
    """Write the audit as a JUnit XML test suite: one test case per gate check and one
    per bound (lower bound held against its upper bound).

    - The suite's properties: the verdicts, the report and results paths, the config
      hash, dpaudit's version and each kind's compute seconds; its ``time`` is the run's.
    - A gate check fails when it failed (a check not evaluated under
      ``on_unmeasured = "warn"`` is ``skipped``); its properties are value, limit, status.
    - A bound fails only when it is a violation (rigorous and above its upper bound); its
      properties are what ``results.json`` says of it (value, confidence level, validity,
      method, δ, upper bound and its source, tightness, limit of detection, whether it
      is in the verdict), numbers written as ``results.json`` writes them.
    - ``time``: the checks and bounds carry no timing of their own, so each test case gets
      an even share of the kinds' compute seconds (the cases add up to them).

    Every string is made safe for XML (:func:`dpaudit.safe_text.for_xml`): an audit name
    or message with control characters still gives a file every CI system can parse.
    """

    data = result.to_dict()  # the numbers exactly as results.json holds them
    timings = {k: float(v) for k, v in data["provenance"].get("timings_seconds", {}).items()}
    total = timings.pop("total", sum(timings.values()))
    checks, bounds = data["checks"], data["bounds"]
    cases = len(checks) + len(bounds)
    share = f"{sum(timings.values()) / cases:.6f}" if cases else "0.000000"

    def properties(parent: ET.Element, values: dict[str, Any]) -> None:
        props = ET.SubElement(parent, "properties")
        for key, value in values.items():
            if value is not None:
                text = json.dumps(value) if isinstance(value, bool | float | int) else value
                ET.SubElement(props, "property", name=key, value=for_xml(text))

    failures = sum(not c["passed"] for c in checks) + sum(b["violation"] for b in bounds)
    unmeasured = ("not-evaluated", "not-applicable")
    skipped = sum(c["passed"] and c["status"] in unmeasured for c in checks)
    name = for_xml(f"dpaudit.{result.name}")
    suite = ET.Element(
        "testsuite",
        name=name,
        tests=str(cases),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{total:.6f}",
    )
    run_dir = Path(str(data["provenance"].get("run_dir", ".")))
    report = run_dir / "report.html"
    properties(
        suite,
        {
            "verdict": data["verdict"],
            "privacy_verdict": data["privacy_verdict"],
            "report": str(report) if report.is_file() else None,
            "results": str(run_dir / "results.json"),
            "config_hash": data["provenance"].get("config_hash"),
            "dpaudit_version": data["provenance"].get("dpaudit_version"),
            **{f"seconds.{kind}": seconds for kind, seconds in timings.items()},
        },
    )
    for check in checks:
        case = ET.SubElement(
            suite, "testcase", classname=name, name=for_xml(check["name"]), time=share
        )
        properties(
            case, {"value": check["value"], "limit": check["limit"], "status": check["status"]}
        )
        if not check["passed"]:
            failure = ET.SubElement(case, "failure", message=for_xml(check["message"]))
            failure.text = for_xml(f"value={check['value']} limit={check['limit']}")
        elif check["status"] in unmeasured:
            ET.SubElement(case, "skipped", message=for_xml(check["message"]))
    for bound in bounds:
        lower = bound["lower"]
        symbol = {"epsilon": "ε", "mu": "μ"}.get(lower["parameter"], lower["parameter"])
        at = f"δ={lower['delta']:g}, " if lower.get("delta") is not None else ""
        title = f"{bound['test']}: {symbol} lower bound ({at}{lower['validity']})"
        case = ET.SubElement(
            suite, "testcase", classname=f"{name}.bounds", name=for_xml(title), time=share
        )
        properties(
            case,
            {
                "parameter": lower["parameter"],
                "value": lower["value"],
                "confidence_level": lower["confidence_level"],
                "validity": lower["validity"],
                "method": lower["method"],
                "delta": lower.get("delta"),
                "upper": bound["upper"],
                "upper_source": bound["upper_source"],
                "tightness": bound["tightness"],
                "limit_of_detection": bound["limit_of_detection"],
                "in_verdict": bound["in_verdict"],
                "violation": bound["violation"],
            },
        )
        if bound["violation"]:
            failure = ET.SubElement(
                case, "failure", message=for_xml(f"{title} exceeds its upper bound")
            )
            failure.text = for_xml(
                f"lower={lower['value']} upper={bound['upper']} ({bound['upper_source']})"
            )
    atomic_write_bytes(path, ET.tostring(suite, encoding="utf-8", xml_declaration=True))


@app.command("run")
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
    from dpaudit.audit import default_run_dir
    from dpaudit.session import run_session

    # Resolved once, before any user code runs: a plug-in that changes the working
    # directory cannot move where the results are written.
    given = None if output_dir is None else output_dir.resolve()
    junit = None if junit is None else junit.resolve()
    if given is None:
        with _user_code(), safe_mode(no_plugins):
            given = default_run_dir(load_config(file)).resolve()
    if junit is not None:
        _check_junit_path(junit, given, file.resolve())
    say = None if quiet else _say
    with _user_code(given), _progress(quiet) as progress:
        result = run_session(
            file,
            output_dir=given,
            safe=no_plugins,
            supervise=False,  # the console script watches this process
            junit=junit,
            progress=progress,
            log=say,
        )
    if junit is not None:
        write_junit(result, junit)
    if not quiet:
        _summary(result)
    elif result.verdict != "pass":
        for check in result.failed_checks:
            _say(f"FAIL {check.name}: {check.message}")
    raise typer.Exit(EXIT_OK if result.verdict == "pass" else EXIT_CHECK_FAILED)


NO_PLUGINS = typer.Option(
    "--no-plugins",
    help="Safe mode for untrusted audit files: import no user code (plug-ins), unpickle "
    "nothing, touch no path outside the audit file's folder (also DPAUDIT_NO_PLUGINS=1, "
    "which every command honours).",
)


@app.command("validate")
def validate_command(
    file: Annotated[Path, typer.Argument(help="The audit file (TOML).")],
    no_plugins: Annotated[bool, NO_PLUGINS] = False,
) -> None:
    """Check an audit file without running it (exit 0 valid, 2 invalid).

    It runs the same checks as ``run`` before any work: plug-ins import, data and brought
    models load. With ``--no-plugins`` it imports and opens nothing the file names and
    refuses plug-ins and paths outside the file's folder.
    """

    no_plugins = no_plugins or safe_mode_active()
    with _user_code(), safe_mode(no_plugins):
        config = load_config(file)
        if not no_plugins:
            check_runnable(config)
    for line in size_notes(config):
        console.print(one_line(line), markup=False)
    mode = "; safe mode: no user code imported" if no_plugins else ""
    console.print(
        one_line(
            f"{file}: valid ({', '.join(config.audit.kinds)}; config hash "
            f"{config.config_hash()}{mode})"
        ),
        markup=False,
    )


@app.command("account")
def account(
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

    from dpaudit import accounting, theory

    if equation is not None:
        if noise_multiplier is not None or steps is not None or epochs is not None:
            raise fail("--equation takes its parameters from --param, not the DP-SGD options.")
        _account_equation(equation, param or [], amplify_mix, figure, as_json=as_json)
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
        assert steps is not None  # exactly one of --steps / --epochs, checked above
        if compare:
            _print_composition_comparison(noise_multiplier, q, steps, delta, as_json=as_json)
            return
        eps = {
            kind: accounting.dpsgd_epsilon(
                noise_multiplier=noise_multiplier,
                sampling_rate=q,
                steps=steps,
                delta=delta,
                accountant=kind,
            )
            for kind in ("pld", "rdp")
        }
        event = accounting.dpsgd_event(
            noise_multiplier=noise_multiplier, sampling_rate=q, steps=steps
        )
        bracket = accounting.mu_bracket(event)
        rho = (
            theory.full_batch_zcdp(noise_multiplier=noise_multiplier, steps=steps)
            if q == 1.0 and noise_multiplier > 0
            else None
        )
        identification = None
        if identify:
            from dpaudit.theory.identification import identify_bracket

            identification = identify_bracket(bracket, source="this DP-SGD run")
    except DpauditError as exc:
        raise fail(str(exc)) from None
    # An infinite ε is a finding about the run, stated with its reason, never an error;
    # so is a run too weakly noised for any PLD, whose ε comes from elsewhere.
    why_infinite = {
        kind: (
            "no finite ε at this δ: δ is below the probability the accountant gives to an "
            "infinite privacy loss"
            if kind == "pld"
            else "no finite ε at this δ: every RDP order is infinite"
        )
        for kind, value in eps.items()
        if math.isinf(value)
    }
    if accounting.pld_discretization(event) is None:
        why_infinite["pld"] = (
            f"no PLD of this run fits (its privacy losses span more than "
            f"{accounting.MAX_PLD_SPAN:.0e} nats): the value is the smaller of the RDP "
            "ε and the exact ε of the same run without subsampling, both upper bounds"
        )
    if as_json:
        out = {
            "noise_multiplier": noise_multiplier,
            "sampling_rate": q,
            "steps": steps,
            "delta": delta,
            "epsilon": eps,
            "mu_bracket": {
                k: v for k, v in bracket.to_dict().items() if k not in ("grid", "mu_values")
            },
            "rho": rho,
        }
        if why_infinite:
            out["epsilon_reason"] = why_infinite
        if identification is not None:
            out["identification"] = {
                k: v for k, v in identification.to_dict().items() if k != "bracket"
            }
        # JSON has no infinity: an unbounded value is null, and its reason says why.
        console.print_json(json.dumps(_json_finite(out), allow_nan=False))
        return
    table = Table(title=f"DP-SGD: σ = {noise_multiplier:g}, q = {q:.6g}, T = {steps}")
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
    if rho is not None:
        table.add_row("ρ-zCDP (full batch)", f"{rho:.4g}")
    console.print(table)
    for kind, reason in why_infinite.items():
        value = "∞" if math.isinf(eps[kind]) else f"{eps[kind]:.4f}"
        console.print(f"ε ({kind.upper()}) = {value}: {reason}.", markup=False)
    if bracket.reason:
        console.print(f"μ: {bracket.reason}.", markup=False)
    if identification is not None:
        console.print(identification.summary, markup=False)


def _account_equation(
    name: str, params: list[str], mix: float | None, figure: Path | None, *, as_json: bool
) -> None:
    """``dpaudit account --equation``: identify, measure, amplify and draw a guarantee
    σ = g(ε, δ) (:mod:`dpaudit.theory.equations`)."""
    from dpaudit.theory import equations

    values: dict[str, float] = {}
    for item in params:
        key, sep, raw = item.partition("=")
        try:
            if not sep:
                raise ValueError
            values[key.strip()] = float(raw)
        except ValueError:
            raise fail(f"--param must be KEY=NUMBER. Got {item!r} instead.") from None
    try:
        eq = equations.equation_from_name(name, values, base_dir=Path.cwd())
        ident = equations.identify_equation(eq)
        amp = equations.amplify_by_mixing(eq, mix=mix) if mix is not None else None
        if figure is not None:
            from dpaudit.report.profile_plots import write_profile_figure

            top = 40.0 if not ident.gdp else 4.0 * max(1.0, ident.refined.bracket.low)
            write_profile_figure(
                figure, [(eq, top)], amplified={eq.name: amp} if amp is not None else None
            )
    except DpauditError as exc:
        raise fail(str(exc)) from None
    out: dict[str, Any] = ident.to_dict()
    if amp is not None:
        out["amplified"] = amp.to_dict()
    if figure is not None:
        out["figure"] = str(figure)
    if as_json:
        console.print_json(json.dumps(_json_finite(out), allow_nan=False))
        return
    console.print(ident.summary, markup=False)
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


def _json_finite(value: Any) -> Any:
    """``value`` with every infinite or NaN float replaced by None (``dpaudit account --json``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_finite(v) for v in value]
    return value


def _print_composition_comparison(
    noise_multiplier: float, sampling_rate: float, steps: int, delta: float, *, as_json: bool
) -> None:
    """``dpaudit account --compare``: the composition table (dpaudit.accounting.composition)."""

    from dpaudit.accounting.composition import compare, format_markdown

    table = compare(
        noise_multiplier=noise_multiplier, sampling_rate=sampling_rate, steps=steps, delta=delta
    )
    if as_json:
        typer.echo(json.dumps(table.to_dict(), indent=2, ensure_ascii=False))
    else:
        typer.echo(format_markdown(table))


@app.command("plan")
def plan_command(
    target: Annotated[float, typer.Option("--target", help="The ε (or μ) to certify.")],
    audit_file: Annotated[
        Path | None,
        typer.Argument(
            help="An audit file whose kind is timed on this machine to estimate the wall time.",
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
        str | None, typer.Option("--kind", help="The kind of AUDIT_FILE to time.")
    ] = None,
    parameter: Annotated[str, typer.Option("--parameter", help="epsilon or mu.")] = "epsilon",
    delta: Annotated[float, typer.Option("--delta", help="δ of an ε bound.")] = 0.0,
    confidence_level: Annotated[float, typer.Option("--confidence-level")] = 0.95,
    threshold: Annotated[str, typer.Option("--threshold", help="split or bonferroni.")] = "split",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead.")] = False,
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
) -> None:
    """Trials per arm (or one-run guesses) an ideal attack needs to certify --target.

    The ideal attack has the rates of the mechanism's own trade-off curve (Laplace with
    --mechanism-epsilon, Gaussian with --mechanism-mu), or none at all with --perfect.
    With AUDIT_FILE, its kind (mechanism or dpsgd) is run twice on a few trials in a
    temporary folder and the expected wall time of the planned audit is extrapolated.
    """

    from dpaudit.planning import ideal_guess_accuracy, plan_one_run, plan_trials

    if sequential and dpsgd_sigma is not None:
        _plan_sequential_curve(
            claimed=dpsgd_sigma,
            run=run_sigma,
            sampling_rate=sampling_rate,
            steps=steps,
            confidence_level=confidence_level,
            round_trials=round_trials,
            max_trials=max_trials,
            repeats=repeats,
            seed=seed,
            as_json=as_json,
        )
        return
    if sequential:
        _plan_sequential(
            target=target,
            claim=claim,
            mechanism_epsilon=mechanism_epsilon,
            mechanism_mu=mechanism_mu,
            parameter=parameter,
            delta=delta,
            confidence_level=confidence_level,
            round_trials=round_trials,
            max_trials=max_trials,
            repeats=repeats,
            seed=seed,
            as_json=as_json,
        )
        return
    if design not in ("multi-run", "one-run"):
        raise fail(f"--design must be 'multi-run' or 'one-run'. Got {design!r}.")
    given = [perfect, mechanism_mu is not None, mechanism_epsilon is not None]
    if design == "one-run":
        given.append(guess_accuracy is not None)
    if sum(given) != 1:
        what = ", --guess-accuracy" if design == "one-run" else ""
        raise fail(
            f"Give exactly one of --mechanism-epsilon (Laplace), --mechanism-mu (Gaussian), "
            f"--perfect{what}."
        )
    if design == "one-run" and audit_file is not None:
        raise fail("timing AUDIT_FILE is for --design multi-run; a one-run audit is one run")
    try:
        if design == "one-run":
            accuracy = (
                1.0
                if perfect
                else guess_accuracy
                if guess_accuracy is not None
                else ideal_guess_accuracy(
                    mechanism_epsilon=mechanism_epsilon, mechanism_mu=mechanism_mu
                )
            )
            one = plan_one_run(
                target,
                delta,
                confidence_level,
                accuracy=accuracy,
                canaries_per_guess=canaries_per_guess,
            )
            if as_json:
                console.print_json(json.dumps(one.to_dict()))
                return
            console.print(
                f"{one.guesses} guesses on {one.canaries} canaries: an attack right on "
                f"{one.accuracy:.4g} of its guesses is expected to certify ε ≥ "
                f"{one.expected_value:.4g} (target {one.target:g}) at {one.confidence_level:g} "
                f"confidence, δ = {one.delta:g}; every guess right would certify "
                f"{one.limit:.4g} (the design's limit of detection).",
                markup=False,
            )
            return
        tradeoff: Literal["laplace", "gaussian", "perfect"] = (
            "perfect" if perfect else "gaussian" if mechanism_mu is not None else "laplace"
        )
        cost = None if audit_file is None else _measure(audit_file, kind)
        if cost is not None:
            # The file's verdict shares its confidence over its comparisons: each bound is
            # computed at that share, so the plan for the file is made at it too.
            confidence_level = cost.level_each
        plan = plan_trials(
            target,
            delta,
            confidence_level,
            tradeoff=tradeoff,
            mechanism_epsilon=mechanism_epsilon,
            mechanism_mu=mechanism_mu,
            parameter=parameter,  # type: ignore[arg-type]  # plan_trials checks the choice
            threshold=threshold,  # type: ignore[arg-type]  # plan_trials checks the choice
        )
        timing = None if cost is None else _timing(cost, audit_file, plan.trials_per_arm)
    except DpauditError as exc:
        raise fail(str(exc)) from None
    if as_json:
        console.print_json(json.dumps({**plan.to_dict(), **({"time": timing} if timing else {})}))
        return
    name = "ε" if plan.parameter == "epsilon" else "μ"
    console.print(
        f"{plan.trials_per_arm} trials per arm: an ideal attack ({plan.tradeoff}) is expected "
        f"to certify {name} ≥ {plan.expected_value:.4g} (target {plan.target:g}) at "
        f"{plan.confidence_level:g} confidence; a perfect attack would certify "
        f"{plan.limit:.4g} (the design's limit of detection).",
        markup=False,
    )
    if timing is not None:
        console.print(
            f"Planned at {plan.confidence_level:.4g}, the confidence level of each bound in "
            f"the verdict of {timing['file']} (its confidence shared over its comparisons).",
            markup=False,
        )
        console.print(
            f"Expected time on this machine for {timing['kind']} ({timing['file']}): "
            f"{_duration(timing['wall_seconds'])} wall, "
            f"{_duration(timing['cpu_seconds'])} CPU (extrapolated from "
            f"{timing['calibration_trials'][0]} and {timing['calibration_trials'][1]} trials "
            f"per arm, which took {timing['calibration_wall'][0]:.2f} s and "
            f"{timing['calibration_wall'][1]:.2f} s wall).",
            markup=False,
        )
        for line in _planned_size(Path(timing["file"]), timing["kind"], plan.trials_per_arm):
            console.print(one_line(line), markup=False)


def _plan_sequential(
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
    as_json: bool,
) -> None:
    """``dpaudit plan --sequential``: trials to stop, simulated; the fixed plan beside."""
    from dpaudit.planning import plan_trials
    from dpaudit.sequential import plan_sequential

    if (mechanism_epsilon is None) == (mechanism_mu is None):
        raise fail(
            "--sequential simulates a mechanism: give exactly one of --mechanism-epsilon "
            "(Laplace) or --mechanism-mu (Gaussian)."
        )
    law: Literal["laplace", "gaussian"] = "laplace" if mechanism_epsilon is not None else "gaussian"
    true_value = float(mechanism_epsilon if mechanism_epsilon is not None else mechanism_mu)  # type: ignore[arg-type]
    try:
        plan = plan_sequential(
            law=law,
            true_value=true_value,
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
        goal = target if target > 0 else claim
        fixed: int | str
        try:
            fixed = plan_trials(
                goal,  # type: ignore[arg-type]  # one of the two is given (plan_sequential)
                delta,
                confidence_level,
                tradeoff=law,
                mechanism_epsilon=mechanism_epsilon,
                mechanism_mu=mechanism_mu,
                parameter=parameter,  # type: ignore[arg-type]
            ).trials_per_arm
        except DpauditError as exc:
            fixed = f"none ({exc})"
    except DpauditError as exc:
        raise fail(str(exc)) from None
    if as_json:
        console.print_json(json.dumps({**plan.to_dict(), "fixed_plan_trials_per_arm": fixed}))
        return
    console.print(
        f"sequential ({law}, true {parameter} {true_value:g}, rounds of {round_trials}, cap "
        f"{max_trials}): median {plan.median_trials:.0f}, mean {plan.mean_trials:.0f}, 95th "
        f"percentile {plan.p95_trials:.0f} trials per arm over {repeats} simulated audits "
        f"(seed {seed}); stopped by "
        + ", ".join(f"{k} {v:.0%}" for k, v in plan.stop_share.items())
        + f"; the fixed split plan for the same goal: {fixed} trials per arm.",
        markup=False,
    )


def _plan_sequential_curve(
    *,
    claimed: float,
    run: float | None,
    sampling_rate: float,
    steps: int,
    confidence_level: float,
    round_trials: int,
    max_trials: int,
    repeats: int,
    seed: int,
    as_json: bool,
) -> None:
    """``dpaudit plan --sequential --dpsgd-sigma``: models per arm the sequential
    claim-curve test of white-box DP-SGD needs to refute a run at --run-sigma, simulated
    from the exact law (:func:`dpaudit.sequential.curve.plan_sequential_curve`)."""
    from dpaudit.sequential.curve import plan_sequential_curve

    if run is None:
        raise fail(
            "--dpsgd-sigma plans the refutation of a run that has another σ: give --run-sigma "
            "(the σ the run really has; below the claimed σ for a bug)."
        )
    try:
        plan = plan_sequential_curve(
            noise_multiplier=claimed,
            run_noise_multiplier=run,
            sampling_rate=sampling_rate,
            steps=steps,
            level=confidence_level,
            round_trials=round_trials,
            max_trials=max_trials,
            repeats=repeats,
            seed=seed,
        )
    except DpauditError as exc:
        raise fail(str(exc)) from None
    if as_json:
        console.print_json(json.dumps(plan.to_dict()))
        return
    console.print(
        f"sequential claim curve (white-box DP-SGD claiming σ {claimed:g}, running σ {run:g}, "
        f"q {plan.sampling_rate:g}, T {plan.steps}; rounds of {plan.round_trials}, cap "
        f"{plan.max_trials}, level {plan.level:g}): median {plan.median_trials:.0f}, mean "
        f"{plan.mean_trials:.0f}, 95th percentile {plan.p95_trials:.0f} models per arm over "
        f"{plan.repeats} simulated audits (seed {plan.seed}); refuted in "
        f"{plan.detected:.0%}. In an audit the curve is one of three comparisons: plan at "
        "its share, --confidence-level 1 − (1 − c)/3.",
        markup=False,
    )


def _planned_size(path: Path, kind: str, trials_per_arm: int) -> list[str]:
    """The kind's size notes for the planned number of trials (memory, disk)."""
    config = load_config(path)
    section = config.section(kind)
    if "trials" in type(section).model_fields:
        section = section.model_copy(update={"trials": trials_per_arm})
    return get_kind(kind).size_notes(section, run_context(config))


#: Calibration trial counts per kind for ``dpaudit plan FILE``: mechanism trials are
#: cheap (microseconds), models are not (milliseconds or more each).
_CALIBRATION = {"mechanism": (20_000, 100_000)}


def _measure(path: Path, kind: str | None) -> TrialCost:
    from dpaudit.audit import measure_trial_cost

    config = load_config(path)
    name = kind or config.audit.kinds[0]
    return measure_trial_cost(config, name, trials=_CALIBRATION.get(name, (32, 96)))


def _timing(cost: TrialCost, path: Path | None, trials_per_arm: int) -> dict[str, Any]:
    return {
        "kind": cost.kind,
        "file": str(path),
        "trials_per_arm": trials_per_arm,
        "level_each": cost.level_each,
        "wall_seconds": cost.wall_seconds(trials_per_arm),
        "cpu_seconds": cost.cpu_seconds(trials_per_arm),
        "calibration_trials": list(cost.trials),
        "calibration_wall": list(cost.wall),
        "calibration_cpu": list(cost.cpu),
    }


@app.command("verify")
def verify_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory with results.json.")],
) -> None:
    """Recompute every bound from the stored units and check results.json (exit 0 it
    matches, 1 it does not, 2 nothing to verify)."""
    from dpaudit.audit import verify_run

    with _user_code():
        problems = verify_run(run_dir)
    if problems:
        for line in problems:
            _say(f"MISMATCH {line}")
        _say(f"{run_dir}: results.json does NOT match its stored units ({len(problems)} problems)")
        raise typer.Exit(EXIT_CHECK_FAILED)
    console.print(one_line(f"{run_dir}: results.json matches its stored units"), markup=False)


@app.command("card")
def card_command(
    run_dir: Annotated[Path, typer.Argument(help="A finished run directory (results.json).")],
    out: Annotated[
        Path | None, typer.Option("--out", help="Where to write the card (default RUN_DIR).")
    ] = None,
) -> None:
    """Write model-card.md and privacy-registry.json for a verified run (exit 0 written,
    2 a missing, broken or tampered run directory)."""
    from dpaudit.card import card_for_run

    with _user_code():
        written = card_for_run(run_dir, out)
    for path in written:
        console.print(one_line(f"wrote {path}"), markup=False)


@app.command("report")
def report_command(
    run_dir: Annotated[Path, typer.Argument(help="A run directory holding results.json.")],
) -> None:
    """Re-render RUN_DIR/report.html from RUN_DIR/results.json (exit 2 if missing/invalid)."""

    from dpaudit.report import render_report
    from dpaudit.schemas import validate_results

    path = run_dir / "results.json"
    if not path.is_file():
        raise fail(f"no results.json in {str(run_dir)!r}; run `dpaudit run FILE -o DIR` first")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise fail(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(results, dict):
        raise fail(f"{path}: not a results object (a JSON object is expected)")
    try:
        validate_results(results)
    except DpauditError as exc:
        raise fail(f"{path}: {exc}") from None
    out = run_dir / "report.html"
    atomic_write_text(out, render_report(results))
    console.print(str(out), markup=False, soft_wrap=True)


def _init_kinds() -> tuple[str, ...]:

    return kind_names()


@app.command("init")
def init_command(
    kind: Annotated[
        str, typer.Option("--kind", "-k", help="An audit kind (dpaudit init --kind x lists them).")
    ] = "mechanism",
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write it.")] = Path(
        "audit.toml"
    ),
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented example audit file that runs as written."""

    kinds = _init_kinds()
    if kind not in kinds:
        raise fail(f"--kind must be one of {', '.join(kinds)}. Got {kind!r} instead.")
    if output.exists() and not force:
        raise fail(f"{output} exists; pass --force to overwrite it")
    text = resources.files("dpaudit").joinpath("examples", f"{kind}.toml").read_text("utf-8")
    output.write_text(text, encoding="utf-8")
    console.print(f"wrote {output}; run it with: dpaudit run {output}", markup=False)


#: Commands that run user code: the console script runs them in a child process it
#: watches, so that user code that kills its process (``os._exit``) is still reported.
SUPERVISED = ("run", "validate", "plan", "verify", "card")
_CHILD = "DPAUDIT_SUPERVISED_FD"


def _ascii_if_needed() -> None:
    """Streams that cannot encode the field's letters write them by name (ε → eps), so a
    run never fails after its work because of the terminal's encoding."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None) or "ascii"
        try:
            "εμδσ≥−…".encode(encoding)
        except (UnicodeEncodeError, LookupError):
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors=ASCII_ERRORS)


def _supervise(argv: list[str]) -> int:
    """Run ``dpaudit ARGV`` in a child process and return the exit code to use.

    The child reports the exit code it chose through a pipe just before it exits. A child
    that ends without reporting (``os._exit`` in a plug-in, a crash of the interpreter, a
    signal) did not finish its command: that is exit 2 with one line, never the child's
    own code (``os._exit(0)`` must not read as "every gate check passed").
    """
    read, write = os.pipe()
    # The child holds the read end of `alive`: when this process ends, however it ends
    # (kill -9 included), the child reads EOF and ends too, as one process would.
    alive_read, alive_write = os.pipe()
    env = {**os.environ, _CHILD: f"{write},{alive_read}"}
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: object) -> None:
        # A terminal's Ctrl-C reaches both processes; a SIGINT sent to this one alone
        # (kill -INT) is passed on. The child ignores a second one that arrives at once.
        if child is not None:
            child.send_signal(signal.SIGINT)

    previous = signal.signal(signal.SIGINT, forward)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "dpaudit.cli", *argv],
            env=env,
            pass_fds=(write, alive_read),
        )
        os.close(write)
        os.close(alive_read)
        with os.fdopen(read, "rb") as pipe:
            reported = pipe.read()
        status = child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
        os.close(alive_write)
    if reported.strip().isdigit():
        return int(reported)
    how = f"was killed by signal {-status}" if status < 0 else f"ended with status {status}"
    err_console.print(
        f"error: the dpaudit process {how} without finishing its command (an uncaught error "
        "shown above, or user code that called os._exit() or crashed the interpreter); "
        "nothing was decided, the finished units are kept and the same command resumes",
        markup=False,
    )
    return EXIT_BAD_INPUT


def _child_fds() -> tuple[int, int] | None:
    """In a supervised child: (the fd to report the exit code on, the parent's alive fd)."""
    value = os.environ.get(_CHILD)
    if value is None:
        return None
    try:
        report, alive = (int(x) for x in value.split(","))
    except ValueError:
        return None
    return report, alive


def _end_with_parent(alive: int) -> None:
    """End this process when the supervising parent ends (EOF on its pipe)."""

    def watch() -> None:
        with suppress(OSError):
            os.read(alive, 1)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="dpaudit-parent-watch", daemon=True).start()


def _report_exit(code: int) -> None:
    """In a supervised child, tell the parent which exit code this process chose."""
    fds = _child_fds()
    if fds is None:
        return
    try:
        os.write(fds[0], str(code).encode())
        os.close(fds[0])
    except OSError:
        pass


def main() -> None:
    """Console-script entry point."""
    _ascii_if_needed()
    try:
        safe_mode_active()  # a misspelt DPAUDIT_NO_PLUGINS is one line, for every command
    except DpauditError as exc:
        err_console.print(f"error: {one_line(exc)}", markup=False)
        sys.exit(EXIT_BAD_INPUT)
    argv = sys.argv[1:]
    if argv and argv[0] in SUPERVISED and _CHILD not in os.environ and hasattr(os, "pipe"):
        sys.exit(_supervise(argv))
    fds = _child_fds()
    if fds is not None:
        _end_with_parent(fds[1])
    code = _main()
    _report_exit(code)
    sys.exit(code)


def _main() -> int:
    """Run the app in this process; the exit code it chose."""
    # dp-accounting's RDP code logs every order it drops while calibrating noise; the
    # accountant's answer is what matters on a terminal.
    logging.getLogger("absl").setLevel(logging.ERROR)
    signal.signal(signal.SIGINT, interrupt_handler)
    try:
        app()
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return EXIT_OK
        if isinstance(code, int):
            return code
        err_console.print(one_line(code), markup=False)
        return EXIT_BAD_INPUT
    except DpauditError as exc:  # a user mistake that escaped a command: one line, exit 2
        err_console.print(f"error: {one_line(exc)}", markup=False)
        return EXIT_BAD_INPUT
    except Exception as exc:
        # Exit 1 means "a gate check failed": a crash (in a plug-in, or a bug in dpaudit)
        # must never read as that. One line, exit 2; the traceback on request.
        if os.environ.get("DPAUDIT_TRACEBACK"):
            raise
        err_console.print(
            one_line(
                f"error: unexpected {type(exc).__name__}: {exc} (in a plug-in of yours or a "
                "bug in dpaudit; set DPAUDIT_TRACEBACK=1 to see where)"
            ),
            markup=False,
        )
        return EXIT_BAD_INPUT
    return EXIT_OK


if __name__ == "__main__":
    main()
