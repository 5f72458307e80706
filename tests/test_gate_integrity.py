"""A gate nothing can fool: plug-ins that exit, tampered run folders, stale reports.

Each case goes through the CLI and checks the exit code, the one line it prints and what
is left in the run directory. Cases that need a real process (``os._exit``, kill -9, the
terminal's encoding) run ``dpaudit`` as a subprocess.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
from typer.testing import CliRunner

from dpaudit.audit import run_audit, verify_run
from dpaudit.cli import app
from dpaudit.store import DIGEST_KEY, RunLock, RunStore, unit_digest

runner = CliRunner()
DPAUDIT = str(Path(sys.executable).parent / "dpaudit")
ROOT = Path(__file__).resolve().parent.parent
_names = itertools.count()

LAPLACE = """
[audit]
name = "{name}"
kinds = ["mechanism"]
[mechanism]
name = "laplace"
epsilon = {epsilon}
trials = 8000
{claim}
[execution]
unit_size = 2000
{extra}
"""

PLUGIN_AUDIT = """
[audit]
name = "plug"
kinds = ["mechanism"]
[mechanism]
name = "{module}:mechanism"
data = [[0.0], [1.0]]
trials = 2000
[mechanism.claim]
epsilon = 1.0
"""


def _laplace(tmp_path: Path, *, name: str = "lap", epsilon: float = 1.0, claim: str = "",
             extra: str = "") -> Path:  # fmt: skip
    f = tmp_path / f"{name}.toml"
    f.write_text(LAPLACE.format(name=name, epsilon=epsilon, claim=claim, extra=extra))
    return f


def _plugin(tmp_path: Path, body: str) -> Path:
    """An audit whose mechanism plug-in runs ``body`` (a module name used once)."""
    module = f"hostile_plugin_{next(_names)}"
    (tmp_path / f"{module}.py").write_text(
        "import os, sys\nimport numpy as np\n\n"
        "def mechanism(data, *, rng, size):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "\n    return rng.laplace(float(np.sum(data)), 1.0, size)\n"
    )
    f = tmp_path / "plug.toml"
    f.write_text(PLUGIN_AUDIT.format(module=module))
    return f


def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


# ------------------------------------------------------------- plug-ins and the exit code


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ("sys.exit(0)", "called sys.exit(0)"),
        ("raise SystemExit(1)", "called sys.exit(1)"),
        ("input()", "read from standard input, which is closed (EOFError)"),
        ("raise KeyboardInterrupt", "raised KeyboardInterrupt"),
        ("raise GeneratorExit", "raised GeneratorExit"),
    ],
)
def test_a_plug_in_cannot_decide_the_exit_code(tmp_path: Path, body: str, what: str) -> None:
    audit = _plugin(tmp_path, body)
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)], input="")
    assert result.exit_code == 2, result.output
    (line,) = _lines(result.output)
    assert line.startswith("error: the mechanism plug-in 'hostile_plugin_"), line
    assert f":mechanism' {what}: user code cannot end or abort a dpaudit run" in line
    assert "Traceback" not in result.output
    assert not (run_dir / "results.json").exists()


def test_a_plug_in_that_kills_its_process_is_reported_and_never_passes(tmp_path: Path) -> None:
    audit = _plugin(tmp_path, "os._exit(0)")
    run_dir = tmp_path / "run"
    out = subprocess.run(
        [DPAUDIT, "run", str(audit), "-q", "-o", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2, out.stderr
    assert _lines(out.stderr) == [
        "error: the dpaudit process ended with status 0 without finishing its command (an "
        "uncaught error shown above, or user code that called os._exit() or crashed the "
        "interpreter); nothing was decided, the finished units are kept and the same "
        "command resumes"
    ]
    assert not (run_dir / "results.json").exists()


def test_a_plug_in_that_changes_directory_cannot_move_the_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    audit = _plugin(tmp_path, f"os.chdir({str(elsewhere)!r})")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", str(audit), "-q", "-o", "run"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "results.json").is_file()
    assert not (elsewhere / "run").exists()


def test_a_module_beside_the_plug_in_never_shadows_an_installed_library(tmp_path: Path) -> None:
    # jinja2 draws the report: a jinja2.py next to the audit file must not replace it.
    (tmp_path / "jinja2.py").write_text("raise RuntimeError('the fake jinja2 was imported')\n")
    audit = _plugin(tmp_path, "pass")
    result = runner.invoke(app, ["run", str(audit), "-q", "-o", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "report.html").is_file()
    assert sys.path.index(str(tmp_path)) > sys.path.index(str(Path(np.__file__).parent.parent))


# ------------------------------------------------------------ the run directory's units


def _tamper(run_dir: Path, unit: str, change, *, keep_digest: bool) -> None:
    (path,) = run_dir.glob(f"units/*/{unit}.npz")
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    digest = arrays.pop(DIGEST_KEY)
    arrays = change(arrays)
    if keep_digest:
        arrays[DIGEST_KEY] = digest
    np.savez(path, **arrays)


def _bounds(data: dict) -> list[tuple[str, float]]:
    return [(b["parameter"], b["lower"]["value"]) for b in data["bounds"]]


@pytest.mark.parametrize("keep_digest", [True, False])
def test_a_tampered_unit_that_would_fake_a_violation_is_caught_and_recomputed(
    tmp_path: Path, keep_digest: bool
) -> None:
    audit = _laplace(tmp_path, claim="[mechanism.claim]\nepsilon = 1.0")
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    honest = json.loads((run_dir / "results.json").read_text())

    def inflate(a: dict) -> dict:  # members' scores far above every non-member's
        return {**a, "positive": a["positive"] + 1e3}

    for unit in ("mechanism-00000", "mechanism-00001", "mechanism-00002", "mechanism-00003"):
        _tamper(run_dir, unit, inflate, keep_digest=keep_digest)
    assert verify_run(run_dir)  # the tampered folder no longer matches its results.json
    again = runner.invoke(app, ["run", str(audit), "-o", str(run_dir)])
    assert again.exit_code == 0, again.output
    # named once as it happens and once among the result's warnings
    assert sum(line.startswith("mechanism: stored unit") for line in _lines(again.output)) == 4
    assert again.output.count("was not used:") == 8
    reason = "do not match the digest" if keep_digest else "carries no digest"
    assert reason in again.output
    data = json.loads((run_dir / "results.json").read_text())
    assert _bounds(data) == _bounds(honest)
    assert data["provenance"]["units"]["mechanism"]["computed"] == 4
    assert len(list(run_dir.glob("units/*/*.rejected"))) == 4
    assert verify_run(run_dir) == []


def test_a_tampered_unit_that_would_hide_a_violation_is_caught_and_recomputed(
    tmp_path: Path,
) -> None:
    # Laplace noise for ε = 2 claimed as ε = 0.5: a real violation (exit 1).
    audit = _laplace(tmp_path, epsilon=2.0, claim="[mechanism.claim]\nepsilon = 0.5")
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 1

    def hide(a: dict) -> dict:  # members look exactly like non-members
        return {**a, "positive": a["negative"].copy()}

    for unit in ("mechanism-00000", "mechanism-00001", "mechanism-00002", "mechanism-00003"):
        _tamper(run_dir, unit, hide, keep_digest=True)
    again = runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)])
    assert again.exit_code == 1, again.output


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 not a zip", b"\x00" * 64])
def test_an_unreadable_unit_is_named_and_recomputed(tmp_path: Path, content: bytes) -> None:
    audit = _laplace(tmp_path)
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    (path,) = run_dir.glob("units/*/mechanism-00002.npz")
    path.write_bytes(content)
    again = runner.invoke(app, ["run", str(audit), "-o", str(run_dir)])
    assert again.exit_code == 0, again.output
    assert "stored unit mechanism-00002 was not used: unreadable (" in again.output
    assert verify_run(run_dir) == []


def test_a_unit_is_bound_to_its_name_and_its_configuration() -> None:
    arrays = {"negative": np.arange(3.0), "positive": np.ones(3)}
    d = unit_digest("mechanism-abc", "mechanism-00000", arrays)
    assert d != unit_digest("mechanism-abc", "mechanism-00001", arrays)
    assert d != unit_digest("mechanism-abd", "mechanism-00000", arrays)
    flipped = {**arrays, "positive": -arrays["positive"]}
    assert d != unit_digest("mechanism-abc", "mechanism-00000", flipped)
    # the same values as another type: another digest
    assert d != unit_digest(
        "mechanism-abc", "mechanism-00000", {**arrays, "negative": np.arange(3)}
    )
    assert d == unit_digest("mechanism-abc", "mechanism-00000", dict(reversed(arrays.items())))


def test_a_unit_copied_from_another_position_is_rejected(tmp_path: Path) -> None:
    store = RunStore(tmp_path, "mechanism-key")
    store.save("mechanism-00000", {"x": np.zeros(2)})
    store.save("mechanism-00001", {"x": np.ones(2)})
    store.path("mechanism-00001").write_bytes(store.path("mechanism-00000").read_bytes())
    with pytest.raises(Exception, match="do not match the digest"):
        store.load("mechanism-00001")


# ------------------------------------------------------------------------- dpaudit verify


def test_verify_a_clean_a_tampered_and_an_empty_run_directory(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    clean = runner.invoke(app, ["verify", str(run_dir)])
    assert clean.exit_code == 0, clean.output
    assert _lines(clean.output) == [f"{run_dir}: results.json matches its stored units"]
    # results.json edited: a bound made larger than its units give
    data = json.loads((run_dir / "results.json").read_text())
    data["bounds"][0]["lower"]["value"] += 1.0
    (run_dir / "results.json").write_text(json.dumps(data))
    edited = runner.invoke(app, ["verify", str(run_dir)])
    assert edited.exit_code == 1
    assert "MISMATCH results.json's 'bounds' differs from what its stored units give" in (
        edited.output
    )
    empty = runner.invoke(app, ["verify", str(tmp_path / "nothing")])
    assert empty.exit_code == 2
    assert "no finished run to verify there" in empty.output


@pytest.mark.parametrize(
    ("key", "value"),
    [("headline", "Passed: nothing to see"), ("findings", [])],
)
def test_verify_catches_the_verdicts_words_edited(tmp_path: Path, key: str, value) -> None:
    # The words a reader (and a model card) takes from results.json are recomputed too.
    # a Laplace mechanism run at ε = 2 while ε = 0.5 is claimed: a violation, in words
    audit = _laplace(tmp_path, epsilon=2.0, claim="[mechanism.claim]\nepsilon = 0.5")
    run_dir = tmp_path / "run"
    ran = runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)])
    assert ran.exit_code == 1, ran.output
    data = json.loads((run_dir / "results.json").read_text())
    assert data[key] != value, ran.output
    data[key] = value
    (run_dir / "results.json").write_text(json.dumps(data))
    edited = runner.invoke(app, ["verify", str(run_dir)])
    assert edited.exit_code == 1
    assert f"MISMATCH results.json's {key!r} differs from what its stored units give" in (
        edited.output
    )


# ------------------------------------------------------- results.json and report.html pair


def test_a_rerun_without_html_removes_the_stale_report(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    assert (run_dir / "report.html").is_file()
    audit.write_text(audit.read_text() + "\n[report]\nhtml = false\n")
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    assert not (run_dir / "report.html").exists()


def test_a_failed_run_leaves_no_earlier_verdict_behind(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    # the same folder, now for an audit that fails after the run started
    broken = _plugin(tmp_path, "raise SystemExit(0)")
    assert runner.invoke(app, ["run", str(broken), "-q", "-o", str(run_dir)]).exit_code == 2
    assert not (run_dir / "results.json").exists()
    assert not (run_dir / "report.html").exists()


def test_leftover_temporary_files_are_removed_by_the_next_run(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    (unit_dir,) = run_dir.glob("units/*")
    torn = [run_dir / ".results.json.x1.tmp", unit_dir / ".mechanism-00001.npz.x2.tmp"]
    for path in torn:
        path.write_bytes(b"torn")
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    assert not any(p.exists() for p in torn)


_CRASH = """
import os, sys
import dpaudit.store as store
real, calls = store.atomic_write_bytes, [0]
def crash_after(path, data):
    calls[0] += 1
    if calls[0] == int(sys.argv[3]):
        os._exit(9)  # as kill -9 at this write: the temporary file is written, not renamed
    real(path, data)
store.atomic_write_bytes = crash_after
from dpaudit.audit import run_audit
run_audit(sys.argv[1], output_dir=sys.argv[2])
"""


@pytest.mark.parametrize("step", [1, 3, 5, 6])  # units 1..4, then report.html, results.json
def test_a_run_killed_at_any_write_leaves_no_result_and_the_next_run_matches(
    tmp_path: Path, step: int
) -> None:
    audit = _laplace(tmp_path)
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(tmp_path / "ref")]).exit_code == 0
    killed = subprocess.run(
        [sys.executable, "-c", _CRASH, str(audit), str(run_dir), str(step)], timeout=300
    )
    assert killed.returncode == 9
    assert not (run_dir / "results.json").exists()
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    ref = json.loads((tmp_path / "ref" / "results.json").read_text())
    assert _bounds(json.loads((run_dir / "results.json").read_text())) == _bounds(ref)
    assert verify_run(run_dir) == []
    assert not list(run_dir.rglob("*.tmp"))


# ------------------------------------------------------------------------------- the lock


def test_a_second_run_on_a_busy_run_directory_exits_2_naming_the_holder(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    run_dir = tmp_path / "run"
    with RunLock(run_dir):
        result = runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)])
    assert result.exit_code == 2
    (line,) = _lines(result.output)
    assert line.startswith(f"error: the run directory '{run_dir}' is in use by another dpaudit ")
    assert f"run (pid {os.getpid()} on " in line
    assert line.endswith("wait for it to finish, or give this run another --output-dir")
    # released: the same run now goes through
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0


# --------------------------------------------------------------- what reaches CI's screen


def test_user_strings_reach_the_terminal_and_junit_as_plain_safe_text(tmp_path: Path) -> None:
    name = "lab:train:\\nFAIL everything\\u001b[31m"
    audit = _laplace(tmp_path, name="x")
    audit.write_text(audit.read_text().replace('name = "x"', f'name = "{name}"'))
    junit = tmp_path / "checks.xml"
    result = runner.invoke(
        app, ["run", str(audit), "-o", str(tmp_path / "run"), "--junit", str(junit)]
    )
    assert result.exit_code == 0, result.output
    assert "🚋" not in result.output  # no emoji code in a user's text
    assert "\x1b[31m" not in result.output
    assert not any(line.startswith("FAIL everything") for line in result.output.splitlines())
    assert "lab:train:\\nFAIL everything\\x1b[31m" in result.output
    suite = ET.parse(junit).getroot()  # valid XML
    assert suite.get("name") == "dpaudit.lab:train:\\nFAIL everything\\x1b[31m"


def test_junit_may_not_overwrite_the_runs_own_files(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    run_dir = tmp_path / "run"
    for target in (run_dir / "results.json", run_dir / "report.html", audit):
        result = runner.invoke(
            app, ["run", str(audit), "-q", "-o", str(run_dir), "--junit", str(target)]
        )
        assert result.exit_code == 2, result.output
        assert "--junit" in _lines(result.output)[0]
    assert not (run_dir / "results.json").exists()


def test_a_terminal_that_cannot_encode_epsilon_still_gets_a_passing_run(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    out = subprocess.run(
        [DPAUDIT, "run", str(audit), "-o", str(tmp_path / "run")],
        capture_output=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode("ascii")  # nothing but ASCII was written
    assert "| eps delta=0 |" in text


# ------------------------------------------------------------- the audit file as a path


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    audit.write_bytes(b"\xef\xbb\xbf" + audit.read_bytes())
    result = runner.invoke(app, ["validate", str(audit)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: os.mkfifo(p), "is a named pipe (FIFO), not an audit file"),
        (lambda p: p.symlink_to("/dev/zero"), "is a device, not an audit file"),
        (lambda p: p.symlink_to(p), "is a symbolic link loop, not an audit file"),
        (lambda p: p.symlink_to(p.with_name("gone.toml")), "is a symbolic link to nothing"),
        (lambda p: p.write_text("#" * (2 << 20)), "an audit file is at most 1048576 bytes"),
    ],
)
def test_what_is_not_an_audit_file_is_named_as_what_it_is(tmp_path: Path, make, said) -> None:
    path = tmp_path / "a.toml"
    make(path)
    for command in ("validate", "run"):
        result = runner.invoke(app, [command, str(path)])
        assert result.exit_code == 2, result.output
        (line,) = _lines(result.output)
        assert said in line


def test_run_audit_from_python_also_holds_the_lock_and_writes_the_pair(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    run_dir = tmp_path / "run"
    result = run_audit(audit, output_dir=run_dir)
    data = json.loads((run_dir / "results.json").read_text())
    assert data["provenance"]["units"]["mechanism"]["digests"] == {
        u: d for u, d in result.provenance["units"]["mechanism"]["digests"].items()
    }
    assert len(data["provenance"]["units"]["mechanism"]["digests"]) == 4
    assert data["provenance"]["audit_file"] == str(audit.resolve())
    assert (ROOT / "dpaudit").is_dir()


# ------------------------------------------------- checked before work, and the safe mode


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            ("epsilon = 1.0", "epsilon = 1e308"),
            "'mechanism.epsilon': Input should be less than or equal to 100 (got 1e+308)",
        ),
        (("epsilon = 1.0", "epsilon = inf"), "'mechanism.epsilon': Input should be a finite"),
        (
            ('name = "laplace"\nepsilon = 1.0', 'name = "gaussian"\nsigma = 1.0'),
            "[audit] delta = 0 does not fit: The 'delta' parameter must be in (0, 1]",
        ),
    ],
)
def test_validate_refuses_what_run_would_refuse_before_any_work(
    tmp_path: Path, change: tuple[str, str], said: str
) -> None:
    audit = _laplace(tmp_path)
    text = audit.read_text().replace(*change)
    if "gaussian" in text:
        text = text.replace('name = "lap"', 'name = "lap"\ndelta = 0')
    audit.write_text(text)
    for command in ("validate", "run"):
        result = runner.invoke(
            app, [command, str(audit), "-o", str(tmp_path / "r")][: 2 + 2 * (command == "run")]
        )
        assert result.exit_code == 2, result.output
        (line,) = _lines(result.output)
        assert said in line
    assert not (tmp_path / "r" / "units").exists()


def test_safe_mode_imports_no_plug_in_and_refuses_paths_outside_the_folder(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "IMPORTED"
    module = f"hostile_plugin_{next(_names)}"
    (tmp_path / f"{module}.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n"
        "def mechanism(data, *, rng, size):\n    return rng.laplace(0.0, 1.0, size)\n"
    )
    (tmp_path / "plug.toml").write_text(PLUGIN_AUDIT.format(module=module))
    for command in ("validate", "run"):
        result = runner.invoke(app, [command, "--no-plugins", str(tmp_path / "plug.toml")])
        assert result.exit_code == 2, result.output
        assert _lines(result.output) == [
            f"error: 'mechanism.name' = '{module}:mechanism' is a plug-in: --no-plugins "
            "imports no user code"
        ]
    assert not marker.exists()
    outside = tmp_path / "m.toml"
    outside.write_text(
        '[audit]\nname = "m"\nkinds = ["membership"]\n[data]\ndataset = "csv:../x.csv"\n'
        'label = "y"\n[membership]\n'
    )
    result = runner.invoke(app, ["validate", "--no-plugins", str(outside)])
    assert result.exit_code == 2
    assert "'data.dataset' = 'csv:../x.csv' is outside the audit file's folder" in result.output
    # a plain built-in audit is valid, and runs, in safe mode (also set by the environment)
    audit = _laplace(tmp_path)
    ok = runner.invoke(app, ["validate", str(audit)], env={"DPAUDIT_NO_PLUGINS": "1"})
    assert ok.exit_code == 0, ok.output
    assert ok.output.strip().endswith("safe mode: no user code imported)")
    ran = runner.invoke(app, ["run", "--no-plugins", str(audit), "-q", "-o", str(tmp_path / "r")])
    assert ran.exit_code == 0, ran.output


def test_a_unit_past_its_timeout_is_stopped_and_named(tmp_path: Path) -> None:
    audit = _plugin(tmp_path, "import time; time.sleep(600)")
    audit.write_text(audit.read_text() + "\n[execution]\nunit_timeout = 1.5\n")
    run_dir = tmp_path / "run"
    result = runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)])
    assert result.exit_code == 2, result.output
    assert _lines(result.output) == [
        "error: unit mechanism-00000 did not finish within 1.5 s ([execution] unit_timeout) "
        "and was stopped; every finished unit is kept: raise the limit, or find what hangs "
        "(a plug-in?), then run again"
    ]
    assert not (run_dir / "results.json").exists()


def test_units_under_a_timeout_give_the_same_result(tmp_path: Path) -> None:
    plain = run_audit(_laplace(tmp_path, name="a"), output_dir=tmp_path / "a", write=False)
    timed = _laplace(tmp_path, name="b", extra="unit_timeout = 600")
    limited = run_audit(timed, output_dir=tmp_path / "b", write=False)
    assert _bounds(limited.to_dict()) == _bounds(plain.to_dict())


# ------------------------------------------------------- readers refuse before they inflate


def test_an_infinite_value_in_a_csv_names_the_file_and_column(tmp_path: Path) -> None:
    rows = "\n".join(f"{i % 5},{i % 3},{i % 2}" for i in range(40))
    data = tmp_path / "d.csv"
    data.write_text(f"a,b,y\n1,2,0\n3,-inf,1\n{rows}\n")
    audit = tmp_path / "m.toml"
    audit.write_text(
        '[audit]\nname = "m"\nkinds = ["membership"]\n[data]\ndataset = "csv:d.csv"\n'
        'label = "y"\n[membership]\n'
    )
    result = runner.invoke(app, ["run", str(audit), "-q", "-o", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    assert _lines(result.output) == [
        f"error: The data file {str(data)!r} has an infinite value in column 'b' (row 2 of "
        "the data, -inf); values must be finite."
    ]


def test_a_csv_with_too_many_columns_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    from dpaudit.data import MAX_COLUMNS, read_table
    from dpaudit.errors import DataError

    wide = tmp_path / "wide.csv"
    wide.write_text(
        ",".join(f"c{i}" for i in range(MAX_COLUMNS + 1)) + "\n" + "0," * MAX_COLUMNS + "0\n"
    )
    with pytest.raises(DataError, match=rf"has {MAX_COLUMNS + 1} columns; at most {MAX_COLUMNS}"):
        read_table(wide, fmt="csv")
    endless = tmp_path / "endless.csv"
    endless.write_bytes(b"a" * (2 << 20))
    with pytest.raises(DataError, match="has a header line longer than 1048576 bytes"):
        read_table(endless, fmt="csv")
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    with pytest.raises(DataError, match=r"pipe.csv' is a named pipe \(FIFO\), not a file\.$"):
        read_table(fifo, fmt="csv")


def test_a_zip_bomb_model_is_refused_from_its_directory_alone(tmp_path: Path) -> None:
    import zipfile

    from dpaudit.data import check_archive
    from dpaudit.errors import DataError

    bomb = tmp_path / "model.skops"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("schema.json", "{}")
        with z.open("zeros.bin", "w") as f:
            for _ in range(64):
                f.write(bytes(1 << 20))  # 64 MiB of zeros, about 64 KiB packed
    assert bomb.stat().st_size < 1 << 20
    with pytest.raises(DataError, match=r"model.skops' would unpack to 67108\d+ bytes from"):
        check_archive(bomb, "skops model file")
    honest = tmp_path / "ok.skops"
    with zipfile.ZipFile(honest, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("weights.bin", np.random.default_rng(0).random(1 << 16).tobytes())
    check_archive(honest, "skops model file")  # random bytes barely compress: accepted


def test_two_concurrent_runs_on_one_folder_one_waits_then_exits_2(tmp_path: Path) -> None:
    audit = _plugin(tmp_path, "import time; time.sleep(0.5)")
    audit.write_text(audit.read_text().replace("trials = 2000", "trials = 40000"))
    audit.write_text(audit.read_text() + "\n[execution]\nunit_size = 2000\n")
    run_dir = tmp_path / "run"
    first = subprocess.Popen(
        [DPAUDIT, "run", str(audit), "-q", "-o", str(run_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(run_dir.glob("units/*/*.npz")) and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run(
            [DPAUDIT, "run", str(audit), "-q", "-o", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 2, second.stderr
        (line,) = _lines(second.stderr)
        assert "is in use by another dpaudit run (pid " in line
        assert f"run {audit} -q -o {run_dir}" in line  # the holder's command
    finally:
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert verify_run(run_dir) == []


def test_validate_says_how_large_a_large_audit_is(tmp_path: Path) -> None:
    audit = _laplace(tmp_path)
    audit.write_text(audit.read_text().replace("trials = 8000", "trials = 100_000_000"))
    result = runner.invoke(app, ["validate", str(audit)])
    assert result.exit_code == 0, result.output
    assert _lines(result.output)[0] == (
        "mechanism: 100,000,000 trials per arm in 50,000 units of 2,000: about 1.5 GiB of "
        "unit files in the run directory; memory stays near one unit (0.0305 MiB of outputs) "
        "plus about 150 MB whatever the number of trials (units are read one at a time above "
        "1,000,000 trials per arm)"
    )
    small = runner.invoke(app, ["validate", str(_laplace(tmp_path, name="small"))])
    assert len(_lines(small.output)) == 1  # nothing to say about a small audit


def test_validate_says_a_design_is_too_small_before_any_trial(tmp_path: Path) -> None:
    from dpaudit.bounds import design_can_bound, trials_needed

    audit = _laplace(tmp_path)
    audit.write_text(audit.read_text().replace("trials = 8000", "trials = 10"))
    for args in (["validate", str(audit)], ["run", str(audit), "-o", str(tmp_path / "r")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert _lines(result.output) == [
            "error: [mechanism] trials = 10 per arm are too few for any ε lower bound above 0 "
            "at confidence 0.95 (threshold = 'split'): at least 12 are needed even for a "
            "perfect attack"
        ]
    assert not (tmp_path / "r" / "units").exists()
    # 12 per arm: 6 counted, zero errors, upper limit 1 − 0.025^(1/6) = 0.459 < 0.5
    assert trials_needed(delta=0.0, confidence_level=0.95) == 12
    assert design_can_bound(12, delta=0.0, confidence_level=0.95)
    assert not design_can_bound(11, delta=0.0, confidence_level=0.95)


def test_the_report_shows_control_characters_as_escapes(tmp_path: Path) -> None:
    audit = _laplace(tmp_path, name="x")
    audit.write_text(audit.read_text().replace('name = "x"', 'name = "a\\u0000b\\u001b[31mc"'))
    run_dir = tmp_path / "run"
    assert runner.invoke(app, ["run", str(audit), "-q", "-o", str(run_dir)]).exit_code == 0
    html = (run_dir / "report.html").read_text()
    assert "\x00" not in html
    assert "\x1b" not in html
    assert "a\\x00b\\x1b[31mc" in html
    assert "<svg" in html  # the plots, marked safe, are still drawn


def test_a_plug_in_never_runs_another_folders_module_of_the_same_name(tmp_path: Path) -> None:
    # One process, two audit folders, one module name: the second audit's plug-in must be
    # its own file, or the run refuses; a copy with the same bytes is the same code.
    module = f"same_name_{next(_names)}"
    body = "def mechanism(data, *, rng, size):\n    return rng.laplace({}, 1.0, size)\n"
    for folder, shift in (("a", "0.0"), ("b", "5.0"), ("c", "0.0")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{module}.py").write_text(body.format(shift))
        (tmp_path / folder / "plug.toml").write_text(PLUGIN_AUDIT.format(module=module))

    def run(folder: str):
        toml = tmp_path / folder / "plug.toml"
        return runner.invoke(app, ["run", str(toml), "-q", "-o", str(tmp_path / f"run-{folder}")])

    assert run("a").exit_code == 0
    other = run("b")
    assert other.exit_code == 2, other.output
    (line,) = _lines(other.output)
    assert f"for the module '{module}', not the file next to the audit file" in line
    assert str(tmp_path / "b" / f"{module}.py") in line
    assert run("c").exit_code == 0  # the same bytes in another folder: the same code


def test_verify_with_another_thread_count_accepts_a_learned_score_run(tmp_path: Path) -> None:
    """A learned score fitted with 1 BLAS thread and recomputed with 8 differed in its last
    bits, and `dpaudit verify` refused a correct run (seen on a machine with more cores).
    The bounds are computed on one thread, so the thread count the reader has is moot."""
    from threadpoolctl import threadpool_limits

    audit = _plugin(tmp_path, "")
    audit.write_text(audit.read_text().replace("trials = 2000", "trials = 40000"))
    run_dir = tmp_path / "run"
    with threadpool_limits(limits=1):
        result = run_audit(audit, output_dir=run_dir)
    assert result.tests[0].to_dict()["score"]["chosen"] == "learned (logistic)"
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "8", "OMP_NUM_THREADS": "8"}
    done = subprocess.run(
        [DPAUDIT, "verify", str(run_dir)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"{run_dir}: results.json matches its stored units"
