"""The Dask executor against a LocalCluster on loopback (2 worker processes).

Results must equal the local executor's for the same seed, and a worker killed mid-run
must cost only its units: the final unit set and every unit's arrays equal an
uninterrupted run, and the driver writes each unit file exactly once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("distributed")

from dpaudit.audit import run_audit, run_context
from dpaudit.config import load_config
from dpaudit.errors import DpauditError
from dpaudit.kinds import get_kind
from dpaudit.kinds.base import UnitPlan
from dpaudit.store import RunStore
from dpaudit.store.executors import run_units

SLOW_PLUGIN = """
import time
import numpy as np

def slow_laplace(data, *, rng, size):
    time.sleep(0.3)  # slow enough that a worker can be killed while it holds units
    return float(np.sum(data)) + rng.laplace(0.0, 1.0, size)
"""

AUDIT = """
[audit]
name = "dask-{name}"
kinds = ["mechanism"]
seed = 11
[mechanism]
name = "{mechanism}"
{params}
trials = {trials}
[mechanism.claim]
epsilon = 1.0
[execution]
unit_size = 1000
{execution}
"""


def _plan(config) -> UnitPlan:
    return get_kind("mechanism").plan(config.section("mechanism"), run_context(config))


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("distributed")
    from dpaudit.store.executors import local_cluster

    with local_cluster(2) as c:
        yield c


def _audit(tmp_path: Path, name: str, *, execution: str, slow: bool = False) -> Path:
    if slow:
        (tmp_path / "slow_plugin_dask.py").write_text(SLOW_PLUGIN)
        mechanism, params, trials = "slow_plugin_dask:slow_laplace", "", 16000
    else:
        mechanism, params, trials = "laplace", "epsilon = 1.0", 12000
    f = tmp_path / f"{name}.toml"
    f.write_text(
        AUDIT.format(
            name=name, mechanism=mechanism, params=params, trials=trials, execution=execution
        )
    )
    return f


class CountingStore(RunStore):
    """A RunStore that counts how often each unit is saved."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.saves: dict[str, int] = {}
        self.lock = threading.Lock()

    def save(self, unit, arrays) -> None:
        with self.lock:
            self.saves[unit] = self.saves.get(unit, 0) + 1
        super().save(unit, arrays)


def test_dask_results_equal_local_executor(tmp_path: Path, cluster) -> None:
    local = run_audit(_audit(tmp_path, "local", execution=""), output_dir=tmp_path / "l")
    on_dask = run_audit(
        _audit(
            tmp_path,
            "dask",
            execution=f'executor = "dask"\naddress = "{cluster.scheduler_address}"',
        ),
        output_dir=tmp_path / "d",
    )
    units = on_dask.provenance["units"]["mechanism"]
    assert (units["total"], units["reused"], units["computed"]) == (12, 0, 12)
    # the executor is not part of what a unit is: both runs name their units alike
    assert units["key"] == local.provenance["units"]["mechanism"]["key"]
    assert [c.to_dict()["lower"] for c in on_dask.comparisons] == [
        c.to_dict()["lower"] for c in local.comparisons
    ]
    assert on_dask.to_dict()["tests"] == local.to_dict()["tests"]
    assert on_dask.verdict == local.verdict


def test_killed_worker_loses_and_duplicates_no_unit(tmp_path: Path, cluster) -> None:
    distributed = pytest.importorskip("distributed")
    config = load_config(_audit(tmp_path, "slow", execution="", slow=True))
    plan = _plan(config)
    units = list(plan.units)
    assert len(units) == 16

    reference = RunStore(tmp_path / "reference", config.config_hash())
    run_units(plan.fn, plan.spec, units, reference)

    store = CountingStore(tmp_path / "killed", config.config_hash())
    with distributed.Client(cluster.scheduler_address) as client:
        pids = client.run(os.getpid)
    victim = sorted(pids.values())[0]
    killed = threading.Event()

    def kill_after_a_few_units() -> None:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            if len(store.finished()) >= 3:
                os.kill(victim, signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.02)

    killer = threading.Thread(target=kill_after_a_few_units, daemon=True)
    killer.start()
    stats = run_units(
        plan.fn,
        plan.spec,
        units,
        store,
        executor="dask",
        address=cluster.scheduler_address,
    )
    killer.join()
    assert killed.is_set()
    assert stats.computed == 16
    assert store.finished() == set(units)
    assert store.saves == dict.fromkeys(units, 1)
    for unit in units:
        got, want = store.load(unit), reference.load(unit)
        assert got.keys() == want.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])


def test_resume_on_dask_computes_only_missing_units(tmp_path: Path, cluster) -> None:
    config = load_config(_audit(tmp_path, "resume", execution=""))
    plan = _plan(config)
    units = list(plan.units)
    store = CountingStore(tmp_path / "r", config.config_hash())
    run_units(plan.fn, plan.spec, units[:5], store)
    stats = run_units(
        plan.fn, plan.spec, units, store, executor="dask", address=cluster.scheduler_address
    )
    assert (stats.reused, stats.computed) == (5, 7)
    assert store.saves == dict.fromkeys(units, 1)


def test_missing_dask_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import now raises ImportError
    config = load_config(_audit(tmp_path, "nodask", execution='executor = "dask"'))
    with pytest.raises(DpauditError, match=r'pip install "dpaudit\[dask\]"'):
        run_audit(config, output_dir=tmp_path / "x")


def test_unknown_executor_is_refused(tmp_path: Path) -> None:
    config = load_config(_audit(tmp_path, "bad", execution=""))
    store = RunStore(tmp_path / "b", config.config_hash())
    plan = _plan(config)
    with pytest.raises(DpauditError, match=r"'executor' parameter must be one of .*'dask'"):
        run_units(plan.fn, plan.spec, ["mechanism-00000"], store, executor="ray")
