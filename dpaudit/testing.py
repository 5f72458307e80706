"""dpaudit in a test suite: a pytest plugin (entry point ``pytest11``: ``dpaudit``).

Three ways to hold a release to its privacy audit from pytest:

- :func:`assert_audit_passes` ``("audits/x.toml")``: runs the audit as ``dpaudit run``
  does and raises :class:`AuditFailed` (an ``AssertionError``) with the gate's one-line
  reason when ``dpaudit run`` would exit 1, and :class:`AuditInputError` (not an assertion)
  when it would exit 2: a bad audit file, missing data, an unusable plug-in.
- the fixture ``dpaudit_audit``: the same for an audit file, a loaded
  :class:`~dpaudit.config.AuditConfig`, or the audit file's tables as a dict, whose
  plug-ins may be Python functions (a mechanism, a trainer) instead of
  ``"pkg.module:function"`` names. A failed gate fails the test with its reason alone.
- ``pytest --dpaudit``: every ``audits/*.toml`` (or the ``.toml`` files and folders given
  on the command line, or the ``dpaudit_paths`` ini setting) becomes one test item. Run
  directories are ``reports/<audit name>/`` as for ``dpaudit run`` (``--dpaudit-output
  DIR`` puts them in DIR), so a re-run resumes from the stored units.

The plugin is loaded into every pytest session of an environment where dpaudit is
installed, so this module imports nothing of dpaudit until a test uses it, and
``--dpaudit`` changes nothing unless it is given.
"""

from __future__ import annotations

import inspect
import tempfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dpaudit.errors import DpauditError

if TYPE_CHECKING:
    from dpaudit.config import AuditConfig
    from dpaudit.results import AuditResult

__all__ = [
    "AuditFailed",
    "AuditInputError",
    "AuditItem",
    "assert_audit_passes",
    "dpaudit_audit",
    "run_checked",
]

#: The folder ``pytest --dpaudit`` collects audit files from, relative to the rootdir.
DEFAULT_FOLDER = "audits"


class AuditFailed(AssertionError):
    """A gate check failed (``dpaudit run`` would exit 1). ``result`` is the audit's."""

    def __init__(self, message: str, result: AuditResult) -> None:
        super().__init__(message)
        self.result = result


class AuditInputError(DpauditError):
    """The audit could not be run (``dpaudit run`` would exit 2): its message says why."""


def gate_reason(result: AuditResult) -> str:
    """The gate's reason as ``dpaudit run`` prints it: the headline on the first line,
    then one ``FAIL check: message`` line per failed check."""
    from dpaudit.safe_text import one_line

    lines = [one_line(f"dpaudit audit {result.name!r} failed its gate: {result.headline}")]
    lines += [one_line(f"FAIL {c.name}: {c.message}") for c in result.failed_checks]
    return "\n".join(lines)


def run_checked(
    audit: str | Path | AuditConfig, *, output_dir: str | Path | None = None
) -> AuditResult:
    """Run an audit as ``dpaudit run`` does and return its result, whatever the verdict.

    The audit goes through the one run session (:func:`dpaudit.session.run_session`): the
    previous run's artefacts are removed first, user code runs in a watched child process
    (a plug-in's ``os._exit(0)`` is an unusable run, never a pass), and a pass counts
    only once ``dpaudit verify`` accepts this run's ``results.json``.

    Args:
        audit: an audit file or a loaded configuration.
        output_dir: the run directory (written as by ``dpaudit run``); ``None`` runs in a
            temporary folder that is removed afterwards (nothing is kept, nothing resumes).

    Raises:
        AuditInputError: unusable input or environment (the exit-2 cases of ``dpaudit run``).
    """
    from dpaudit.session import run_session

    try:
        if output_dir is not None:
            return run_session(audit, output_dir=output_dir)
        with tempfile.TemporaryDirectory(prefix="dpaudit-") as tmp:
            return run_session(audit, output_dir=Path(tmp) / "run")
    except DpauditError as exc:
        raise AuditInputError(f"the audit cannot run (dpaudit run would exit 2): {exc}") from None
    except OSError as exc:
        where = exc.filename or output_dir or "the run directory"
        raise AuditInputError(
            f"the audit cannot run (dpaudit run would exit 2): {where}: {exc.strerror or exc}"
        ) from None


def assert_audit_passes(
    audit: str | Path | AuditConfig, *, output_dir: str | Path | None = None
) -> AuditResult:
    """Run an audit and assert that every gate check passed.

    Args:
        audit: an audit file (``"audits/x.toml"``) or a loaded configuration.
        output_dir: the run directory to keep (results.json, report.html, units); default
            a temporary one, removed afterwards.

    Returns:
        The :class:`~dpaudit.results.AuditResult` of a passing audit.

    Raises:
        AuditFailed: a gate check failed; the message is the gate's reason
            (:func:`gate_reason`).
        AuditInputError: the audit cannot run (bad file, missing data, ...).
    """
    result = run_checked(audit, output_dir=output_dir)
    if result.verdict != "pass":
        raise AuditFailed(gate_reason(result), result)
    return result


# ------------------------------------------------------------------------------ fixture


def plugin_name(fn: Callable[..., Any]) -> tuple[str, Path]:
    """``"module:function"`` for a top-level function, and the folder of its module (the
    plug-in loader searches it after the installed packages).

    Raises:
        AuditInputError: ``fn`` is not a top-level function of a module in a file (a
            lambda, a nested function, a method, a function typed into a notebook cell).
    """
    name = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        source = None
    if not module or module == "__main__" or "." in name or "<" in name or source is None:
        raise AuditInputError(
            f"{fn!r} cannot be named as a plug-in: give a top-level function of a module "
            "in a file (dpaudit runs plug-ins by their 'pkg.module:function' name)"
        )
    return f"{module}:{name}", Path(source).parent


def _named(value: Any, folders: list[Path]) -> Any:
    """``value`` with every callable replaced by its plug-in name (folders collected)."""
    if isinstance(value, Mapping):
        return {str(k): _named(v, folders) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_named(v, folders) for v in value]
    if callable(value):
        name, folder = plugin_name(value)
        folders.append(folder)
        return name
    return value


def config_from_tables(
    tables: Mapping[str, Any], *, base_dir: str | Path | None = None
) -> AuditConfig:
    """An :class:`~dpaudit.config.AuditConfig` from the audit file's tables as a dict.

    Python functions may stand for plug-ins (``{"mechanism": {"name": my_mechanism}}``,
    ``{"dpsgd": {"trainer": my_trainer}}``): each becomes its ``"module:function"`` name,
    and relative paths and plug-ins resolve against ``base_dir`` (default: the folder of
    the functions' module, else the working directory).

    Raises:
        AuditInputError: the tables do not validate, or a function cannot be named.
    """
    from dpaudit.config import check_safe, parse_config
    from dpaudit.plugins import safe_mode_active

    folders: list[Path] = []
    data = _named(tables, folders)
    try:
        config = parse_config(data, source="audit tables")
        folder = Path(base_dir) if base_dir is not None else (folders[0] if folders else Path.cwd())
        config._base_dir = folder.resolve()
        if safe_mode_active():  # DPAUDIT_NO_PLUGINS=1: decided before any import
            check_safe(config)
    except DpauditError as exc:
        raise AuditInputError(str(exc)) from None
    return config


@pytest.fixture
def dpaudit_audit(
    tmp_path: Path,
) -> Callable[..., AuditResult]:
    """Run an audit in the test; a failed gate fails the test with the gate's reason.

    Call it with an audit file, a loaded configuration, or the audit file's tables as a
    dict (functions may stand for plug-ins, see :func:`config_from_tables`). The run
    directory is under the test's ``tmp_path``. Returns the
    :class:`~dpaudit.results.AuditResult`; unusable input raises :class:`AuditInputError`.
    """
    counter = iter(range(1_000_000))

    def run(
        audit: str | Path | AuditConfig | Mapping[str, Any],
        *,
        base_dir: str | Path | None = None,
    ) -> AuditResult:
        config = (
            config_from_tables(audit, base_dir=base_dir) if isinstance(audit, Mapping) else audit
        )
        run_dir = tmp_path / f"dpaudit-run-{next(counter)}"
        try:
            return assert_audit_passes(config, output_dir=run_dir)
        except AuditFailed as exc:
            reason = str(exc)
        # outside the except block: the reason alone, without the chained AuditFailed
        pytest.fail(reason, pytrace=False)

    return run


# ------------------------------------------------------------------- pytest --dpaudit


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dpaudit", "privacy audits (dpaudit)")
    group.addoption(
        "--dpaudit",
        action="store_true",
        default=False,
        help="Collect audit files as tests: audits/*.toml, or the .toml files and folders "
        "given as arguments. An audit whose gate fails fails its test.",
    )
    group.addoption(
        "--dpaudit-output",
        default=None,
        metavar="DIR",
        help="Put each audit's run directory in DIR/<audit name> (default: as dpaudit run, "
        "reports/<audit name>).",
    )
    parser.addini(
        "dpaudit_paths",
        type="args",
        default=[],
        help="Audit files or folders pytest --dpaudit runs when no path is given "
        "(default: audits).",
    )


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("dpaudit", default=False):
        return
    config.addinivalue_line("markers", "dpaudit: a privacy audit run by pytest --dpaudit")
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        # No path on the command line: the audit files, not the test paths.
        given = config.getini("dpaudit_paths") or [DEFAULT_FOLDER]
        config.args = [str(config.rootpath / p) for p in given]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if file_path.suffix != ".toml" or not config.getoption("dpaudit", default=False):
        return None
    # An audit file: named on the command line, or inside a collected audits folder
    # (pyproject.toml and other TOML files elsewhere are not audits).
    if not parent.session.isinitpath(file_path) and not _in_audit_folder(file_path, config):
        return None
    return AuditFile.from_parent(parent, path=file_path)


def _in_audit_folder(path: Path, config: pytest.Config) -> bool:
    folders = [config.rootpath / p for p in (config.getini("dpaudit_paths") or [DEFAULT_FOLDER])]
    return any(path.parent == f or path == f for f in folders) or path.parent.name == "audits"


class AuditFile(pytest.File):
    """An audit file: one test item, named after the file."""

    def collect(self) -> Iterator[AuditItem]:
        yield AuditItem.from_parent(self, name=self.path.stem)


class AuditItem(pytest.Item):
    """One audit, run as ``dpaudit run`` runs it; fails when its gate fails."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_marker("dpaudit")

    def runtest(self) -> None:
        from dpaudit.audit import default_run_dir
        from dpaudit.config import load_config

        output = self.config.getoption("dpaudit_output")
        if output is not None:
            # the run directory is known before the file loads: a file that no longer
            # loads leaves no earlier pass there (the session clears it first)
            run_dir = Path(output) / self.path.stem
            result = assert_audit_passes(self.path, output_dir=run_dir)
        else:
            try:
                config = load_config(self.path)
            except DpauditError as exc:
                raise AuditInputError(
                    f"the audit cannot run (dpaudit run would exit 2): {exc}"
                ) from None
            run_dir = default_run_dir(config)
            result = assert_audit_passes(self.path, output_dir=run_dir)
        self.user_properties.append(("dpaudit_run_dir", str(run_dir)))
        self.user_properties.append(("dpaudit_verdict", result.verdict))

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str:
        if isinstance(excinfo.value, AuditFailed | AuditInputError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"dpaudit audit {self.name}"
