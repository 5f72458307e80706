"""Shared test settings, and the global state every test gives back (the suite runs in random
order: pytest-randomly)."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch

# Two xdist workers on a 2-core machine: one intra-op thread each avoids oversubscription.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

#: Loggers whose level and handlers a test gives back: the root, dpaudit's own, and absl's
#: (dp-accounting's, which the CLI quietens).
RESTORED_LOGGERS = ("", "dpaudit", "absl")


def _restored_loggers() -> list[logging.Logger]:
    names = [
        name
        for name in logging.root.manager.loggerDict
        if any(name == n or name.startswith(n + ".") for n in RESTORED_LOGGERS if n)
    ]
    return [logging.getLogger(), *(logging.getLogger(name) for name in sorted(names))]


@contextmanager
def global_state_restored() -> Iterator[None]:
    """Give back what a test may change for the tests after it: the levels and handlers of
    the loggers above (one created inside drops back to no level and no handler), the state
    of Python's ``random``, numpy's global RNG and torch's, torch's thread count,
    ``os.environ`` and the working directory."""
    loggers = {log.name: (log.level, list(log.handlers)) for log in _restored_loggers()}
    python_rng = random.getstate()
    numpy_rng = np.random.get_state()  # noqa: NPY002 (the legacy global RNG is what leaks)
    torch_rng = torch.get_rng_state()
    threads = torch.get_num_threads()
    environ = dict(os.environ)
    cwd = os.getcwd()
    try:
        yield
    finally:
        os.chdir(cwd)
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.set_rng_state(torch_rng)
        np.random.set_state(numpy_rng)  # noqa: NPY002
        random.setstate(python_rng)
        for log in _restored_loggers():
            level, handlers = loggers.get(log.name, (logging.NOTSET, []))
            log.setLevel(level)
            for handler in [h for h in log.handlers if h not in handlers]:
                log.removeHandler(handler)
            for handler in [h for h in handlers if h not in log.handlers]:
                log.addHandler(handler)


@pytest.fixture(autouse=True)
def _global_state() -> Iterator[None]:
    with global_state_restored():
        yield


#: Tests measured at several CPU-seconds each (``tests/slow_tests.txt``, one node id a line,
#: with its measured CPU seconds after a ``#``) run in ``make test-slow``, as the tests
#: marked ``@pytest.mark.slow`` do: CI runs both sets; ``make test`` keeps the fast one.
_SLOW_LIST = os.path.join(os.path.dirname(__file__), "slow_tests.txt")


def _listed_slow() -> frozenset[str]:
    with open(_SLOW_LIST, encoding="utf-8") as lines:
        return frozenset(
            line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow = _listed_slow()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
