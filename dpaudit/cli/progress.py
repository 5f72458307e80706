"""Progress of an audit's units: rich bars on a terminal, plain lines in a CI log."""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dpaudit.cli import _common
from dpaudit.cli import _library as lib
from dpaudit.cli._common import duration


@contextmanager
def progress(quiet: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    """Progress whose callback matches :data:`dpaudit.audit.Progress`.

    On a terminal: rich bars with a spinner, elapsed time and an estimate of the time left
    once the first units are done. Off a terminal (CI logs): :class:`PlainProgress` lines.
    """
    if quiet:
        yield None
        return
    err_console = _common.err_console  # looked up now: a test may give it another file
    if not err_console.is_terminal:
        plain = PlainProgress(lambda line: err_console.print(line, markup=False))
        try:
            yield plain
        finally:  # an audit that stopped early leaves the models logger as it found it
            plain.close()
        return
    bars, update = lib.terminal_bars(err_console)
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
            line += f" ({work / total:.0%}), {duration(elapsed)} elapsed"
            if 0 < work < total:
                line += f", about {duration(elapsed / work * (total - work))} left"
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
