"""Rich progress bars for a terminal (loaded when a terminal shows them: ``rich.progress``
is not needed by ``--help``, ``validate`` or a run whose log is not a terminal)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
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


def terminal_bars(console: Console) -> tuple[Progress, Callable[[str, int, int], None]]:
    """Bars with a spinner, elapsed time and the time left, and the callback that feeds
    them (:data:`dpaudit.audit.Progress`): one bar per description."""
    bars = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    tasks: dict[str, TaskID] = {}

    def update(description: str, total: int, advance: int) -> None:
        if description not in tasks:
            tasks[description] = bars.add_task(description, total=total)
        bars.update(tasks[description], advance=advance)

    return bars, update
