"""One contract, every surface: the command line, the pytest plugin, the action and the
notebook API reach an audit through the one run session (the MLflow evaluator's own
contract tests are in ``test_mlflow_evaluator.py``). For each surface:

- a plug-in's ``os._exit(0)`` is a failure, never a pass;
- no pass artefact of an earlier run (results, report, card, registry, our JUnit) survives
  a failed or unusable rerun;
- safe mode imports nothing the audit file names (every code key is walked in
  ``test_safe_mode.py``; here each surface is shown to apply it);
- a run directory whose lock file is a symbolic link is refused, and the link's target
  is left as it was (a dangling link creates nothing).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dpaudit.cli import app
from dpaudit.errors import DpauditError
from dpaudit.testing import AuditInputError, run_checked

runner = CliRunner()

ROOT = Path(__file__).resolve().parents[1]
DPAUDIT = [sys.executable, "-c", "from dpaudit.cli import main; main()"]
PASSING = """
[audit]
name = "surface"
kinds = ["mechanism"]
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 2_000
"""
PLUGIN = """
[audit]
name = "surface"
kinds = ["mechanism"]
[mechanism]
name = "{module}:mechanism"
data = [[0.0], [1.0]]
trials = 2_000
[mechanism.claim]
epsilon = 1.0
"""
EXITS = "import os\n\ndef mechanism(data, *, rng, size):\n    os._exit(0)\n"
ARTEFACTS = ("results.json", "report.html", "model-card.md", "privacy-registry.json")


def _sentinel(folder: Path, name: str) -> Path:
    """A plug-in module that records being imported; the marker it writes."""
    marker = folder / f"{name}.imported"
    (folder / f"{name}.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('imported')\n"
        "def mechanism(data, *, rng, size):\n    return rng.laplace(0.0, 1.0, size)\n"
    )
    return marker


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script (its watching parent included), as a user runs it."""
    return subprocess.run(
        [*DPAUDIT, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
        timeout=600,
    )


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _link_lock(run_dir: Path, target: Path) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / ".dpaudit.lock").symlink_to(target)


# ------------------------------------------------------------------------ command line


def test_cli_exit_of_a_plug_in_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "exits.py").write_text(EXITS)
    (tmp_path / "a.toml").write_text(PLUGIN.format(module="exits"))
    done = _cli("run", str(tmp_path / "a.toml"), "-q", "-o", str(tmp_path / "run"))
    assert done.returncode == 2, done.stderr
    assert "without finishing its command" in done.stderr
    assert not (tmp_path / "run" / "results.json").exists()


def test_cli_rerun_that_cannot_load_leaves_no_earlier_pass(tmp_path: Path) -> None:
    audit, run_dir, junit = tmp_path / "a.toml", tmp_path / "run", tmp_path / "junit.xml"
    audit.write_text(PASSING)
    first = runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir), "--junit", str(junit)])
    assert first.exit_code == 0, first.output
    assert runner.invoke(app, ["card", str(run_dir)]).exit_code == 0
    assert [name for name in ARTEFACTS if not (run_dir / name).is_file()] == []
    assert junit.is_file()
    audit.write_text(PASSING.replace('"laplace"', '"laplacian"'))
    again = runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir), "--junit", str(junit)])
    assert again.exit_code == 2
    assert [name for name in ARTEFACTS if (run_dir / name).exists()] == []
    assert not junit.exists()


def test_cli_safe_mode_imports_nothing_on_any_command(tmp_path: Path) -> None:
    marker = _sentinel(tmp_path, "synthetic")
    audit = tmp_path / "a.toml"
    audit.write_text(PLUGIN.format(module="synthetic"))
    refused = "error: 'mechanism.name' = 'synthetic:mechanism' is a plug-in"
    for args in (["run", "--no-plugins", str(audit)], ["validate", "--no-plugins", str(audit)]):
        done = runner.invoke(app, args)
        assert (done.exit_code, _lines(done.output)[0][: len(refused)]) == (2, refused)
    # a finished run whose file names a plug-in: verify, card and plan refuse it by env
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    marker.unlink()
    sys.modules.pop("synthetic", None)
    safe = {"DPAUDIT_NO_PLUGINS": "1"}
    commands = (
        ["verify", str(run_dir)],
        ["card", str(run_dir)],
        ["plan", "--target", "1", "--perfect", str(audit)],
    )
    for args in commands:
        done = runner.invoke(app, args, env=safe)
        assert done.exit_code == 2, (args, done.output)
        assert refused in done.output, args
    assert not marker.exists()
    # a misspelt value is one line and exit 2 for any command (the console script)
    garbage = _cli("account", "--help", env={"DPAUDIT_NO_PLUGINS": "yes"})
    assert garbage.returncode == 2
    assert _lines(garbage.stderr) == [
        "error: The environment variable DPAUDIT_NO_PLUGINS must be 0, 1 or unset. "
        "Got 'yes' instead."
    ]


def test_cli_refuses_a_linked_lock(tmp_path: Path) -> None:
    audit = tmp_path / "a.toml"
    audit.write_text(PASSING)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    _link_lock(tmp_path / "run", victim)
    done = runner.invoke(app, ["run", str(audit), "-q", "-o", str(tmp_path / "run")])
    assert done.exit_code == 2
    assert _lines(done.output) == [
        f"error: {tmp_path / 'run' / '.dpaudit.lock'} is a symbolic link; the run "
        "directory's lock must be a file"
    ]
    assert victim.read_text() == "keep me"
    _link_lock(tmp_path / "dangling", tmp_path / "outside" / "created")
    done = runner.invoke(app, ["run", str(audit), "-q", "-o", str(tmp_path / "dangling")])
    assert done.exit_code == 2
    assert not (tmp_path / "outside").exists()


# ------------------------------------------------------------------------ pytest plugin


def test_pytest_exit_of_a_plug_in_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "exits.py").write_text(EXITS)
    (tmp_path / "a.toml").write_text(PLUGIN.format(module="exits"))
    with pytest.raises(AuditInputError, match=r"os\._exit\(\)"):
        run_checked(tmp_path / "a.toml", output_dir=tmp_path / "run")


@pytest.mark.slow  # a whole pytest session in a subprocess
def test_pytest_dpaudit_items_fail_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "exits.py").write_text(EXITS)
    (tmp_path / "a.toml").write_text(PLUGIN.format(module="exits"))
    # pytest --dpaudit: each item fails with its one line (an exit, a raise), pytest exits 1
    (tmp_path / "raises.py").write_text(
        "def mechanism(data, *, rng, size):\n    raise ValueError('boom from the plug-in')\n"
    )
    (tmp_path / "b.toml").write_text(PLUGIN.format(module="raises").replace("surface", "b"))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider",
         "--dpaudit", "--dpaudit-output", str(tmp_path / "out"), str(tmp_path / "a.toml"),
         str(tmp_path / "b.toml")],
        capture_output=True, text=True, cwd=tmp_path, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    assert "2 failed" in done.stdout
    assert "os._exit()" in done.stdout
    assert "unexpected ValueError: boom from the plug-in" in done.stdout
    assert "Traceback" not in done.stdout
    assert "dpaudit/" not in done.stdout  # no frame of dpaudit's own code


def test_pytest_rerun_that_cannot_load_leaves_no_earlier_pass(tmp_path: Path) -> None:
    audit, run_dir = tmp_path / "a.toml", tmp_path / "run"
    audit.write_text(PASSING)
    assert run_checked(audit, output_dir=run_dir).verdict == "pass"
    (run_dir / "model-card.md").write_text("an earlier card")
    audit.write_text(PASSING.replace("epsilon = 1.0", "epsilon = -1.0"))
    with pytest.raises(AuditInputError):
        run_checked(audit, output_dir=run_dir)
    assert [name for name in ARTEFACTS if (run_dir / name).exists()] == []


def test_pytest_safe_mode_imports_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = _sentinel(tmp_path, "parquet")
    (tmp_path / "a.toml").write_text(PLUGIN.format(module="parquet"))
    monkeypatch.setenv("DPAUDIT_NO_PLUGINS", "1")
    with pytest.raises(AuditInputError, match=re.escape("'mechanism.name' = 'parquet:mechanism'")):
        run_checked(tmp_path / "a.toml", output_dir=tmp_path / "run")
    assert not marker.exists()


def test_pytest_refuses_a_linked_lock(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(PASSING)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    _link_lock(tmp_path / "run", victim)
    with pytest.raises(AuditInputError, match="is a symbolic link"):
        run_checked(tmp_path / "a.toml", output_dir=tmp_path / "run")
    assert victim.read_text() == "keep me"


# ------------------------------------------------------------------------------ action


def _action(workdir: Path, audit: str, env: dict[str, str] | None = None) -> dict:
    script = str(ROOT / "scripts" / "run_action_locally.py")
    args = [sys.executable, script, "--workdir", str(workdir), "--json"]
    args += ["--input", "install=false", "--input", f"audit={audit}"]
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = subprocess.run(
        args,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path, **(env or {})},
        check=False,
        timeout=900,
    )
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow  # three runs of the whole action (several dpaudit processes each)
def test_action_never_passes_on_an_earlier_run_or_an_exit(tmp_path: Path) -> None:
    audit = tmp_path / "a.toml"
    audit.write_text(PASSING)
    first = _action(tmp_path, "a.toml")
    assert (first["exit_code"], first["outputs"]["verdict"]) == (0, "pass")
    assert (tmp_path / "dpaudit-run" / "model-card.md").is_file()
    audit.write_text("[audit\n")  # no longer parses
    broken = _action(tmp_path, "a.toml")
    assert (broken["exit_code"], broken["outputs"]["verdict"]) == (2, "none")
    assert [n for n in ARTEFACTS if (tmp_path / "dpaudit-run" / n).exists()] == []
    assert not (tmp_path / "dpaudit-junit.xml").exists()
    (tmp_path / "exits.py").write_text(EXITS)
    audit.write_text(PLUGIN.format(module="exits"))
    exits = _action(tmp_path, "a.toml")
    assert (exits["exit_code"], exits["outputs"]["verdict"]) == (2, "none")


@pytest.mark.slow  # two runs of the whole action
def test_action_safe_mode_and_a_linked_lock(tmp_path: Path) -> None:
    marker = _sentinel(tmp_path, "synthetic")
    (tmp_path / "a.toml").write_text(PLUGIN.format(module="synthetic"))
    safe = _action(tmp_path, "a.toml", env={"DPAUDIT_NO_PLUGINS": "1"})
    assert (safe["exit_code"], safe["outputs"]["verdict"]) == (2, "none")
    assert not marker.exists()
    (tmp_path / "b.toml").write_text(PASSING)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    _link_lock(tmp_path / "dpaudit-run", victim)
    linked = _action(tmp_path, "b.toml")
    assert (linked["exit_code"], linked["outputs"]["verdict"]) == (2, "none")
    assert victim.read_text() == "keep me"


# ---------------------------------------------------------------------------- notebook


def _fitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, exits: bool = False):
    """A fitted classifier from a module the watched child can import."""
    module = "exiting_model" if exits else "plain_model"
    body = "import os\nos._exit(0)\n" if exits else "pass\n"
    (tmp_path / f"{module}.py").write_text(
        "from sklearn.linear_model import LogisticRegression\n\n"
        "class Model(LogisticRegression):\n"
        "    def predict_proba(self, X):\n"
        + "".join(f"        {line}\n" for line in body.splitlines())
        + "        return super().predict_proba(X)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ["PYTHONPATH"]])
                       if os.environ.get("PYTHONPATH") else str(tmp_path))  # fmt: skip
    cls = __import__(module).Model
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] > 0).astype(int)
    return cls().fit(X[:60], y[:60]), X, y  # fit never calls predict_proba


def test_notebook_exit_of_the_model_is_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpaudit.notebook import audit_model

    model, X, y = _fitted(tmp_path, monkeypatch, exits=True)
    with pytest.raises(DpauditError, match=r"os\._exit\(\)"):
        audit_model(model, X[:60], y[:60], X[60:], y[60:], output_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "results.json").exists()


def test_notebook_rerun_leaves_no_earlier_pass_and_overwrites_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpaudit.notebook import audit_model

    model, X, y = _fitted(tmp_path, monkeypatch)
    run_dir = tmp_path / "run"
    (run_dir / "inputs").mkdir(parents=True)
    mine = run_dir / "inputs" / "audit.toml"
    mine.write_text("# my own file")
    result = audit_model(model, X[:60], y[:60], X[60:], y[60:], output_dir=run_dir)
    assert result.verdict == "pass"
    assert mine.read_text() == "# my own file"
    (run_dir / "model-card.md").write_text("an earlier card")
    with pytest.raises(DpauditError):
        audit_model(model, X[:60], y[:60], X[60:, :2], y[60:], output_dir=run_dir)
    assert [name for name in ARTEFACTS if (run_dir / name).exists()] == []


def test_notebook_safe_mode_and_a_linked_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpaudit.notebook import audit_model

    model, X, y = _fitted(tmp_path, monkeypatch)
    marker = _sentinel(tmp_path, "synthetic")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    _link_lock(tmp_path / "linked", victim)
    with pytest.raises(DpauditError, match="is a symbolic link"):
        audit_model(model, X[:60], y[:60], X[60:], y[60:], output_dir=tmp_path / "linked")
    assert victim.read_text() == "keep me"
    monkeypatch.setenv("DPAUDIT_NO_PLUGINS", "1")
    with pytest.raises(
        DpauditError, match=re.escape("'target.references' = 'synthetic:mechanism'")
    ):
        audit_model(
            model, X[:60], y[:60], X[60:], y[60:], references="synthetic:mechanism",
            output_dir=tmp_path / "safe",
        )  # fmt: skip
    assert not marker.exists()


# ----------------------------------------------------------------------- smaller holes


def test_complex_mechanism_outputs_are_refused_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "cplx.py").write_text(
        "def mechanism(data, *, rng, size):\n"
        "    return rng.laplace(0.0, 1.0, size) + 1j * data[0]\n"
    )
    (tmp_path / "a.toml").write_text(PLUGIN.format(module="cplx"))
    done = runner.invoke(app, ["run", str(tmp_path / "a.toml"), "-q", "-o", str(tmp_path / "r")])
    assert done.exit_code == 2
    assert _lines(done.output) == [
        "error: Mechanism 'cplx:mechanism' returned complex128 values; dpaudit audits real "
        "numbers only (return floats: the real quantity your mechanism releases)"
    ]


def test_a_plug_in_s_stderr_at_import_is_quoted_in_the_one_line(tmp_path: Path) -> None:
    (tmp_path / "argv.py").write_text(
        "import argparse\nparser = argparse.ArgumentParser(prog='tool')\n"
        "parser.add_argument('--needed', required=True)\nparser.parse_args()\n"
        "def mechanism(data, *, rng, size):\n    return rng.laplace(0.0, 1.0, size)\n"
    )
    (tmp_path / "a.toml").write_text(PLUGIN.format(module="argv"))
    done = runner.invoke(app, ["validate", str(tmp_path / "a.toml")])
    assert done.exit_code == 2
    (line,) = _lines(done.output)
    assert line.startswith(
        "error: the mechanism plug-in 'argv:mechanism', while it was imported, called sys.exit(2)"
    )
    assert "(it wrote to stderr: 'usage: tool [-h] --needed NEEDED tool: error:" in line


# ------------------------------------------------------------ supervision, for every surface


def test_a_trainers_stderr_in_preflight_is_quoted_in_the_one_line(tmp_path: Path) -> None:
    (tmp_path / "loud.py").write_text(
        "import sys\nfrom dpaudit.errors import ConfigError\n\n"
        "def trainer(X, y, *, rng, **options):\n    raise AssertionError('never trained')\n\n"
        "def _preflight(X, y, *, white_box):\n"
        "    print('torch says: mat1 and mat2 shapes cannot be multiplied', file=sys.stderr)\n"
        "    raise ConfigError('the trainer failed its check on two rows')\n\n"
        "trainer.preflight = _preflight\n"
    )
    (tmp_path / "a.toml").write_text(
        '[audit]\nname = "loud"\nkinds = ["dpsgd"]\n[dpsgd]\ntrainer = "loud:trainer"\n'
        'threat_model = "white-box"\nrows = 20\ntrials = 20\n[dpsgd.training]\nepochs = 1\n'
        "full_batch = true\n[dpsgd.training.dp]\ntarget_mu = 1.0\n"
    )
    done = subprocess.run(
        [*DPAUDIT, "run", str(tmp_path / "a.toml"), "-q", "-o", str(tmp_path / "r")],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    assert done.returncode == 2
    assert _lines(done.stderr) == [
        "error: the trainer failed its check on two rows (it wrote to stderr: 'torch says: "
        "mat1 and mat2 shapes cannot be multiplied')"
    ]


def test_the_sessions_child_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(
        "import os, pathlib, time\n\n"
        "def mechanism(data, *, rng, size):\n"
        "    pathlib.Path('child.pid').write_text(str(os.getpid()))\n"
        "    time.sleep(120)\n"
    )
    (tmp_path / "a.toml").write_text(PLUGIN.format(module="slow"))
    parent = subprocess.Popen(
        [sys.executable, "-c",
         "from dpaudit.session import run_session; run_session('a.toml', output_dir='r')"],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    pid_file = tmp_path / "child.pid"
    try:
        for _ in range(600):  # the child starts, loads the audit and calls the mechanism
            if pid_file.is_file() and pid_file.read_text():
                break
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert child != parent.pid
    finally:
        parent.kill()
        parent.wait()
    for _ in range(100):
        if not _alive(child):
            break
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie waiting for its reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_a_watched_call_returns_its_value_or_its_error() -> None:
    from dpaudit.errors import DataError
    from dpaudit.session import SessionError, call_watched

    assert call_watched(np.add, 2, 3, what="add") == 5

    def bad() -> None:
        raise DataError("the model needs 3 columns")

    with pytest.raises(DataError, match=r"^the model needs 3 columns$"):
        call_watched(bad, what="bad")
    with pytest.raises(SessionError, match=r"the process that ran exit ended with status 0"):
        call_watched(os._exit, 0, what="exit")
    with pytest.raises(SessionError, match=r"unexpected ZeroDivisionError"):
        call_watched(lambda: 1 / 0, what="divide")
