"""The library functions the commands call, each imported on its first use (PEP 562).

A command is a shell: it parses, calls one of these, prints the result. Importing
``dpaudit.cli`` (for ``--help``, ``--version``, ``init`` or ``validate``) loads none of
them, so neither torch, dp-accounting nor scipy's statistics: the name → module table
below is read by :func:`dpaudit._lazy.lazy_exports` when a command first needs a name.
The CLI's own writers that only some runs need (terminal bars, JUnit XML) load here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit._lazy import lazy_exports

#: Name → the module that defines it.
_EXPORTS: dict[str, str] = {
    "EpsilonBound": "dpaudit.bounds",
    "account_dpsgd": "dpaudit.accounting.statement",
    "account_equation": "dpaudit.accounting.statement",
    "card_for_run": "dpaudit.card",
    "check_junit_path": "dpaudit.cli.junit",
    "compare": "dpaudit.accounting.composition",
    "default_run_dir": "dpaudit.audit",
    "format_markdown": "dpaudit.accounting.composition",
    "ideal_guess_accuracy": "dpaudit.planning",
    "json_finite": "dpaudit.accounting.statement",
    "plan_from_file": "dpaudit.audit",
    "plan_one_run": "dpaudit.planning",
    "plan_sequential_beside_fixed": "dpaudit.sequential",
    "plan_sequential_curve": "dpaudit.sequential.curve",
    "plan_shuffled_run": "dpaudit.sequential.shuffle",
    "plan_trials": "dpaudit.planning",
    "render_report_file": "dpaudit.report",
    "run_session": "dpaudit.session",
    "terminal_bars": "dpaudit.cli.bars",
    "verify_result": "dpaudit.audit",
    "verify_run": "dpaudit.audit",
    "write_junit": "dpaudit.cli.junit",
    "write_profile_figure": "dpaudit.report.profile_plots",
}

__all__ = [
    "EpsilonBound",
    "account_dpsgd",
    "account_equation",
    "card_for_run",
    "check_junit_path",
    "compare",
    "default_run_dir",
    "format_markdown",
    "ideal_guess_accuracy",
    "json_finite",
    "plan_from_file",
    "plan_one_run",
    "plan_sequential_beside_fixed",
    "plan_sequential_curve",
    "plan_shuffled_run",
    "plan_trials",
    "render_report_file",
    "run_session",
    "terminal_bars",
    "verify_result",
    "verify_run",
    "write_junit",
    "write_profile_figure",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the names as static type checkers should see them
    from dpaudit.accounting.composition import compare, format_markdown
    from dpaudit.accounting.statement import account_dpsgd, account_equation, json_finite
    from dpaudit.audit import default_run_dir, plan_from_file, verify_result, verify_run
    from dpaudit.bounds import EpsilonBound
    from dpaudit.card import card_for_run
    from dpaudit.cli.bars import terminal_bars
    from dpaudit.cli.junit import check_junit_path, write_junit
    from dpaudit.planning import ideal_guess_accuracy, plan_one_run, plan_trials
    from dpaudit.report import render_report_file
    from dpaudit.report.profile_plots import write_profile_figure
    from dpaudit.sequential import plan_sequential_beside_fixed
    from dpaudit.sequential.curve import plan_sequential_curve
    from dpaudit.sequential.shuffle import plan_shuffled_run
    from dpaudit.session import run_session
