"""The exit-code contract: 0 pass, 1 a gate check failed, 2 unusable input, 130 interrupted.

Every unusable input or environment gives exit 2 with ONE line naming the file, key or
resource, no traceback, and leaves nothing half-written. Long runs tell what happens.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dpaudit.cli import PlainProgress, app

runner = CliRunner()
DPAUDIT = str(Path(sys.executable).parent / "dpaudit")

LAPLACE = """
[audit]
name = "contract"
kinds = ["mechanism"]
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 2000
{extra}
"""


def _run(args: list[str]):
    return runner.invoke(app, args)


def _one_line_exit_2(result, pattern: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in result.output
    assert pattern in lines[0], lines[0]


def _write(tmp_path: Path, extra: str = "", name: str = "a.toml") -> Path:
    f = tmp_path / name
    f.write_text(LAPLACE.format(extra=extra))
    return f


def test_version_prints_and_exits_0() -> None:
    from dpaudit._version import __version__

    result = _run(["--version"])
    assert (result.exit_code, result.output.strip()) == (0, f"dpaudit {__version__}")


def test_help_states_the_exit_codes() -> None:
    assert "Exit codes: 0 every gate check passed; 1 a gate check failed; 2" in " ".join(
        _run(["--help"]).output.split()
    )


def test_audit_file_that_is_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "latin1.toml"
    f.write_bytes('[audit]\nname = "caf\xe9"\n'.encode("latin-1"))
    _one_line_exit_2(_run(["run", str(f), "-q", "-o", str(tmp_path / "r")]), "not UTF-8 text")
    assert not (tmp_path / "r").exists()


def test_a_folder_given_as_the_audit_file(tmp_path: Path) -> None:
    _one_line_exit_2(_run(["validate", str(tmp_path)]), "is a folder; give the audit file")


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_a_non_finite_claim_is_refused_before_work(tmp_path: Path, value: str) -> None:
    f = _write(tmp_path, f"[mechanism.claim]\nepsilon = {value}")
    _one_line_exit_2(_run(["run", str(f), "-q", "-o", str(tmp_path / "r")]), "mechanism.claim")
    assert not (tmp_path / "r").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_exit_2(tmp_path: Path) -> None:
    f = _write(tmp_path, '[execution]\ndevice = "cuda"')
    _one_line_exit_2(
        _run(["run", str(f), "-q", "-o", str(tmp_path / "r")]),
        "[execution] device = 'cuda': no such device is available on this machine",
    )
    assert not (tmp_path / "r" / "units").exists()


def test_unreachable_dask_scheduler_is_exit_2(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    with socket.socket() as s:  # a loopback port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = _write(tmp_path, f'[execution]\nexecutor = "dask"\naddress = "tcp://127.0.0.1:{port}"')
    _one_line_exit_2(
        _run(["run", str(f), "-q", "-o", str(tmp_path / "r")]),
        "no Dask scheduler answers there",
    )


def test_unwritable_output_directory_is_exit_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    _one_line_exit_2(
        _run(["run", str(_write(tmp_path)), "-q", "-o", str(blocker / "run")]),
        "cannot write to the run directory",
    )


def test_disk_full_at_the_end_is_exit_2_and_keeps_the_units(tmp_path: Path, monkeypatch) -> None:
    import dpaudit.audit

    def full(path, obj):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(dpaudit.audit, "atomic_write_json", full)
    run_dir = tmp_path / "r"
    _one_line_exit_2(
        _run(["run", str(_write(tmp_path)), "-q", "-o", str(run_dir)]),
        "No space left on device; every finished unit is kept there",
    )
    assert not (run_dir / "results.json").exists()
    assert len(list((run_dir / "units").glob("*/*.npz"))) == 1
    monkeypatch.undo()  # space again: the same command resumes and finishes
    again = _run(["run", str(_write(tmp_path)), "-o", str(run_dir)])
    assert again.exit_code == 0
    assert "mechanism: reused 1 of 1 units" in again.output


def test_plain_progress_off_a_terminal_reports_every_tenth_and_estimates() -> None:
    lines: list[str] = []
    now = [0.0]
    progress = PlainProgress(lines.append, clock=lambda: now[0])
    progress("training", 20, 0)  # the audit announces each kind's units before they run
    for _ in range(20):
        now[0] += 3.0  # 3 s a unit
        progress("training", 20, 1)
    assert lines[0] == "training: 0/20 units"
    # one line per 10 %: 2, 4, ..., 20 units of 20
    assert len(lines) == 11
    assert lines[1] == "training: 2/20 units (10%), 6 s elapsed, about 54 s left"
    assert lines[-1] == "training: 20/20 units (100%), 60 s elapsed"


def test_plain_progress_also_reports_every_30_seconds() -> None:
    lines: list[str] = []
    now = [0.0]
    progress = PlainProgress(lines.append, clock=lambda: now[0])
    progress("slow", 1000, 0)
    for _ in range(5):
        now[0] += 31.0
        progress("slow", 1000, 1)  # 0.1 % a step: only the clock triggers a line
    assert len(lines) == 6
    # 155 s for 5 units: 995 more at 31 s each ≈ 8.6 h
    assert lines[-1] == "slow: 5/1000 units (0%), 3 min elapsed, about 8.6 h left"


SLOW_PLUGIN = """
import time
import numpy as np

def slow_laplace(data, *, rng, size):
    time.sleep(0.3)
    return float(np.sum(data)) + rng.laplace(0.0, 1.0, size)
"""

SLOW_AUDIT = """
[audit]
name = "slow"
kinds = ["mechanism"]
seed = 7
[mechanism]
name = "slow_plugin:slow_laplace"
trials = 20000
[mechanism.claim]
epsilon = 1.0
[execution]
unit_size = 1000
"""


def _start(tmp_path: Path, run_dir: Path) -> subprocess.Popen:
    (tmp_path / "slow_plugin.py").write_text(SLOW_PLUGIN)
    (tmp_path / "slow.toml").write_text(SLOW_AUDIT)
    return subprocess.Popen(
        [DPAUDIT, "run", str(tmp_path / "slow.toml"), "-o", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_units(run_dir: Path, n: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if len(list(run_dir.glob("units/*/*.npz"))) >= n:
            return
        time.sleep(0.05)
    raise AssertionError("the run made no progress")


def test_ctrl_c_says_what_was_kept_and_how_to_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir)
    _wait_for_units(run_dir, 3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == (
        f"interrupted: every finished unit is kept in {run_dir}; run the same command "
        "again to resume"
    )
    kept = len(list(run_dir.glob("units/*/*.npz")))
    assert 3 <= kept < 20
    assert not (run_dir / "results.json").exists()


def test_kill_9_then_rerun_says_it_resumes_and_matches_a_fresh_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _start(tmp_path, run_dir)
    _wait_for_units(run_dir, 3)
    proc.kill()
    proc.communicate(timeout=60)
    kept = len(list(run_dir.glob("units/*/*.npz")))
    again = subprocess.run(
        [DPAUDIT, "run", str(tmp_path / "slow.toml"), "-o", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines()[0].startswith(f"mechanism: reused {kept} of 20 units from ")
    fresh = subprocess.run(
        [DPAUDIT, "run", str(tmp_path / "slow.toml"), "-q", "-o", str(tmp_path / "fresh")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fresh.returncode == 0
    got = json.loads((run_dir / "results.json").read_text())["bounds"]
    want = json.loads((tmp_path / "fresh" / "results.json").read_text())["bounds"]
    assert [b["lower"]["value"] for b in got] == [b["lower"]["value"] for b in want]


def test_a_crashing_plug_in_is_exit_2_never_1(tmp_path: Path) -> None:
    # Exit 1 is reserved for a failed gate check: an exception in user code is unusable
    # input, reported in one line (the traceback only with DPAUDIT_TRACEBACK=1).
    (tmp_path / "crash_plugin.py").write_text(
        "def mech(data, *, rng, size):\n    raise ZeroDivisionError('boom')\n"
    )
    (tmp_path / "a.toml").write_text(
        '[audit]\nname = "crash"\nkinds = ["mechanism"]\n[mechanism]\n'
        'name = "crash_plugin:mech"\ntrials = 100\n[mechanism.claim]\nepsilon = 1.0\n'
    )
    args = [DPAUDIT, "run", str(tmp_path / "a.toml"), "-q", "-o", str(tmp_path / "r")]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "error: unexpected ZeroDivisionError: boom (in a plug-in of yours or a bug in dpaudit; "
        "set DPAUDIT_TRACEBACK=1 to see where)"
    ]
    env = {**os.environ, "DPAUDIT_TRACEBACK": "1"}
    loud = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    # The traceback is shown, and the run still never exits 1 ("a check failed"): the
    # process that ran the audit ended on the uncaught exception, its supervisor says 2.
    assert loud.returncode == 2
    assert "Traceback" in loud.stderr


def test_a_dead_worker_pool_is_exit_2_and_says_the_units_are_kept(capsys) -> None:
    # The pool's exception is recognised without the CLI importing multiprocessing at start.
    from concurrent.futures.process import BrokenProcessPool

    import typer

    from dpaudit.cli._common import user_code

    with pytest.raises(typer.Exit) as info, user_code(Path("runs/a")):
        raise BrokenProcessPool("A process in the process pool was terminated abruptly")
    assert info.value.exit_code == 2
    assert " ".join(capsys.readouterr().err.split()) == (
        "error: a worker process died while computing units (user code may have called "
        "os._exit() or crashed the interpreter); every finished unit is kept in runs/a; the "
        "same command resumes"
    )
