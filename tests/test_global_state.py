"""The global state every test gives back (tests/conftest.py), so the suite passes in any
order: each thing a test may change is changed inside ``global_state_restored`` and must be
as before afterwards."""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import global_state_restored


def test_loggers_get_back_their_levels_and_handlers() -> None:
    root, models = logging.getLogger(), logging.getLogger("dpaudit.models")
    before = {log.name: (log.level, list(log.handlers)) for log in (root, models)}
    kept = logging.NullHandler()
    models.addHandler(kept)  # added before: stays
    with global_state_restored():
        models.setLevel(logging.DEBUG)
        models.removeHandler(kept)
        models.addHandler(logging.NullHandler())
        root.setLevel(logging.CRITICAL)
        root.addHandler(logging.NullHandler())
        created = logging.getLogger("dpaudit.created_inside_a_test")
        created.setLevel(logging.ERROR)
        created.addHandler(logging.NullHandler())
    try:
        assert (root.level, root.handlers) == before["root"]
        assert (models.level, models.handlers) == (
            before["dpaudit.models"][0],
            [*before["dpaudit.models"][1], kept],
        )
        assert (created.level, created.handlers) == (logging.NOTSET, [])
    finally:
        models.removeHandler(kept)


def test_the_random_generators_continue_as_if_nothing_drew() -> None:
    with global_state_restored():
        expected = (random.random(), np.random.random(), torch.rand(1).item())  # noqa: NPY002
    with global_state_restored():
        random.seed(1)
        np.random.seed(1)  # noqa: NPY002
        torch.manual_seed(1)
        _ = (random.random(), np.random.random(3), torch.rand(3))  # noqa: NPY002
    assert (random.random(), np.random.random(), torch.rand(1).item()) == expected  # noqa: NPY002


def test_torch_threads_environment_and_working_directory_come_back(tmp_path: Path) -> None:
    threads, cwd = torch.get_num_threads(), os.getcwd()
    environ = dict(os.environ)
    other = 2 if threads == 1 else 1
    with global_state_restored():
        torch.set_num_threads(other)
        os.environ["DPAUDIT_SET_BY_A_TEST"] = "1"
        os.environ.pop(next(iter(environ)))
        os.chdir(tmp_path)
        assert (torch.get_num_threads(), os.getcwd()) == (other, str(tmp_path))
    assert (torch.get_num_threads(), os.getcwd(), dict(os.environ)) == (threads, cwd, environ)


def _failing_test(level: int) -> None:
    with global_state_restored():
        logging.getLogger("dpaudit").setLevel(level)
        raise AssertionError("a failing test")


def test_state_is_given_back_when_the_test_fails() -> None:
    level = logging.getLogger("dpaudit").level
    with pytest.raises(AssertionError, match="a failing test"):
        _failing_test(logging.DEBUG if level != logging.DEBUG else logging.ERROR)
    assert logging.getLogger("dpaudit").level == level
