#!/usr/bin/env python3
"""Run the composite GitHub action in ``action.yml`` on this machine, step by step.

Each ``run:`` step is executed in order with bash, as a runner would
(``bash --noprofile --norc -eo pipefail``), with its ``${{ ... }}`` expressions
substituted: ``inputs.*`` (the action's defaults, overridden by ``--input NAME=VALUE``),
``github.action_path`` (the folder of action.yml), ``github.workspace`` (``--workdir``),
``runner.os``, ``runner.temp``, ``steps.<id>.outputs.*`` (read from each step's
``$GITHUB_OUTPUT``) and ``env.*``. ``$GITHUB_ENV`` and ``$GITHUB_PATH`` carry over to later
steps; ``$GITHUB_STEP_SUMMARY`` is kept.

``uses:`` steps (setup-python, the cache, the uploads) are not run: their ``with:``
values are substituted, and after the last step every ``path`` they name must exist
(reported as missing otherwise). A step's ``if:`` may be ``always()``, ``success()``,
``failure()`` or ``!cancelled()`` on a ``run:`` step; on a ``uses:`` step anything after
a status function (none means ``success()``) is left unevaluated, as the step is not run.
As on GitHub, once a step fails the later steps run only if their condition says
``always()`` or ``failure()``.

Usage, from the folder the audit's paths are relative to (the workspace)::

    scripts/run_action_locally.py audits/laplace.toml [--json]

or with every input spelled out and another workspace::

    python scripts/run_action_locally.py --input audit=audits/laplace.toml \\
        --input install=false --workdir /tmp/ci [--json]

``AUDIT`` is the ``audit`` input. Two things differ from the action's defaults on
purpose, as this runs on a machine that already has dpaudit: ``install`` is ``false``
unless given (``--input install=true`` runs the install step), and the folder of the
Python running this script goes first on ``PATH`` (in place of setup-python), so the
steps' ``python`` and ``dpaudit`` are that environment's.

The exit code is the first failing step's (0 when every step passed), as the job's
would be. ``--json`` prints the steps, the action's outputs and the missing paths.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
_EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
_STATUS = re.compile(r"^\s*(always|success|failure|!\s*cancelled)\(\)\s*(?:&&.*)?$", re.S)


class ActionError(Exception):
    """action.yml asks for something this runner does not do (it says what)."""


@dataclass
class StepRun:
    """What happened to one step."""

    name: str
    kind: str  # "run" or "uses"
    status: str  # "passed", "failed", "skipped" (a condition), "not-run" (a uses step)
    exit_code: int | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    with_: dict[str, str] = field(default_factory=dict)


@dataclass
class ActionRun:
    """The whole run: the job's exit code, each step, the action's outputs, the paths
    that ``uses:`` steps name but that do not exist after the last step."""

    exit_code: int
    steps: list[StepRun]
    outputs: dict[str, str]
    missing_paths: list[str]
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "steps": [
                {
                    "name": s.name,
                    "kind": s.kind,
                    "status": s.status,
                    "exit_code": s.exit_code,
                    "outputs": s.outputs,
                    "with": s.with_,
                }
                for s in self.steps
            ],
            "outputs": self.outputs,
            "missing_paths": self.missing_paths,
            "summary": self.summary,
        }


def read_outputs(path: Path) -> dict[str, str]:
    """``$GITHUB_OUTPUT``'s lines: ``name=value`` and ``name<<DELIMITER`` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            end = lines.index(delimiter, i + 1)
            out[name] = "\n".join(lines[i + 1 : end])
            i = end + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


class _Context:
    def __init__(self, inputs: dict[str, str], action_path: Path, workdir: Path, temp: Path):
        self.inputs = inputs
        self.github = {"action_path": str(action_path), "workspace": str(workdir)}
        system = {"Linux": "Linux", "Darwin": "macOS"}.get(platform.system(), "Windows")
        self.runner = {"os": system, "temp": str(temp)}
        self.steps: dict[str, dict[str, str]] = {}
        self.env: dict[str, str] = {}

    def value(self, expression: str) -> str:
        """One ``${{ }}`` reference (dotted names only)."""
        parts = expression.split(".")
        head, rest = parts[0], parts[1:]
        if head == "inputs" and len(rest) == 1:
            if rest[0] not in self.inputs:
                raise ActionError(f"${{{{ {expression} }}}}: action.yml has no input {rest[0]!r}")
            return self.inputs[rest[0]]
        if head in ("github", "runner") and len(rest) == 1:
            table = self.github if head == "github" else self.runner
            if rest[0] in table:
                return table[rest[0]]
        if head == "steps" and len(rest) == 3 and rest[1] == "outputs":
            # As on GitHub, an output nobody wrote is the empty string.
            return self.steps.get(rest[0], {}).get(rest[2], "")
        if head == "env" and len(rest) == 1:
            return self.env.get(rest[0], "")
        raise ActionError(f"${{{{ {expression} }}}} is not an expression this runner knows")

    def substitute(self, text: Any) -> str:
        return _EXPR.sub(lambda m: self.value(m.group(1)), str(text))


def _should_run(condition: Any, failed: bool, *, uses: bool = False) -> bool:
    """Whether a step runs, from the status function of its ``if:``.

    As on GitHub, a condition without a status function implies ``success()``. What
    follows the status function (``&& inputs.cache == 'true'``) is not evaluated: it is
    allowed only on a ``uses:`` step, which this runner does not run anyway.
    """
    if condition is None:
        return not failed
    text = str(condition).strip()
    match = _STATUS.match(text)
    if match is None or (not uses and text != f"{match.group(1)}()"):
        if not uses:
            raise ActionError(
                f"if: {condition!r}: on a run step this runner evaluates only always(), "
                "success(), failure() or !cancelled()"
            )
        return not failed if match is None else _status(match.group(1), failed)
    return _status(match.group(1), failed)


def _status(function: str, failed: bool) -> bool:
    name = function.replace(" ", "")
    return {"always": True, "!cancelled": True, "success": not failed, "failure": failed}[name]


def run_action(
    action: Path, inputs: dict[str, str], *, workdir: Path, env: dict[str, str] | None = None
) -> ActionRun:
    """Run ``action`` (a composite action.yml) in ``workdir`` with ``inputs``."""
    spec = yaml.safe_load(action.read_text(encoding="utf-8"))
    if spec.get("runs", {}).get("using") != "composite":
        raise ActionError(f"{action}: only composite actions are run here")
    declared = spec.get("inputs", {}) or {}
    unknown = sorted(set(inputs) - set(declared))
    if unknown:
        raise ActionError(f"unknown inputs {unknown}; action.yml declares {sorted(declared)}")
    values = {name: str(d.get("default", "")) for name, d in declared.items()}
    values.update(inputs)
    missing = [n for n, d in declared.items() if d.get("required") and not values.get(n)]
    if missing:
        raise ActionError(f"required inputs not given: {missing}")
    workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="action-") as folder:
        temp = Path(folder)
        ctx = _Context(values, action.resolve().parent, workdir.resolve(), temp)
        base_env = dict(os.environ if env is None else env)
        summary_file, env_file, path_file = temp / "summary.md", temp / "env", temp / "path"
        for f in (summary_file, env_file, path_file):
            f.touch()
        steps: list[StepRun] = []
        uses_paths: list[str] = []
        exit_code, failed = 0, False
        for i, step in enumerate(spec["runs"]["steps"]):
            name = str(step.get("name") or step.get("id") or f"step {i + 1}")
            if "uses" in step:
                with_ = {k: ctx.substitute(v) for k, v in (step.get("with") or {}).items()}
                if _should_run(step.get("if"), failed, uses=True) and "path" in with_:
                    uses_paths += [p.strip() for p in with_["path"].splitlines() if p.strip()]
                steps.append(StepRun(name, "uses", "not-run", with_=with_))
                continue
            if not _should_run(step.get("if"), failed):
                steps.append(StepRun(name, "run", "skipped"))
                continue
            if step.get("shell") != "bash":
                raise ActionError(f"step {name!r}: composite run steps here must say shell: bash")
            output_file = temp / f"output-{i}"
            output_file.touch()
            step_env = {
                **base_env,
                **ctx.env,
                "GITHUB_OUTPUT": str(output_file),
                "GITHUB_ENV": str(env_file),
                "GITHUB_PATH": str(path_file),
                "GITHUB_STEP_SUMMARY": str(summary_file),
                "GITHUB_WORKSPACE": ctx.github["workspace"],
                "GITHUB_ACTION_PATH": ctx.github["action_path"],
                "RUNNER_OS": ctx.runner["os"],
                "RUNNER_TEMP": ctx.runner["temp"],
                **{k: ctx.substitute(v) for k, v in (step.get("env") or {}).items()},
            }
            extra_path = [p for p in path_file.read_text().splitlines() if p]
            if extra_path:
                step_env["PATH"] = os.pathsep.join([*reversed(extra_path), step_env["PATH"]])
            script = temp / f"step-{i}.sh"
            script.write_text(ctx.substitute(step["run"]), encoding="utf-8")
            done = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
                cwd=ctx.github["workspace"],
                stdout=sys.stderr,  # stdout stays for --json
                env=step_env,
                check=False,
            )
            outputs = read_outputs(output_file)
            if "id" in step:
                ctx.steps[str(step["id"])] = outputs
            ctx.env.update(read_outputs(env_file))
            status = "passed" if done.returncode == 0 else "failed"
            steps.append(StepRun(name, "run", status, done.returncode, outputs))
            if done.returncode != 0 and not failed:
                failed, exit_code = True, done.returncode
        outputs = {
            name: ctx.substitute(d.get("value", ""))
            for name, d in (spec.get("outputs") or {}).items()
        }
        missing_paths = [p for p in uses_paths if not (workdir / p).exists()]
        return ActionRun(exit_code, steps, outputs, missing_paths, summary_file.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("audit", nargs="?", help="The audit file (the action's audit input).")
    parser.add_argument("--action", type=Path, default=ROOT / "action.yml")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--workdir", type=Path, default=Path.cwd())
    parser.add_argument("--json", action="store_true", help="Print the run as JSON.")
    args = parser.parse_args(argv)
    inputs = {}
    for item in args.input:
        if "=" not in item:
            parser.error(f"--input {item!r}: write NAME=VALUE")
        name, value = item.split("=", 1)
        inputs[name] = value
    if args.audit is not None and inputs.setdefault("audit", args.audit) != args.audit:
        parser.error(f"AUDIT {args.audit!r} and --input audit={inputs['audit']!r} differ")
    inputs.setdefault("install", "false")
    # setup-python's part: this interpreter's python and scripts (dpaudit) come first.
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PATH": path}
    try:
        run = run_action(args.action, inputs, workdir=args.workdir, env=env)
    except ActionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(run.to_dict(), indent=2))
    else:
        for s in run.steps:
            code = "" if s.exit_code is None else f" (exit {s.exit_code})"
            print(f"{s.status:8} {s.kind:4} {s.name}{code}")
        for path in run.missing_paths:
            print(f"missing: {path}")
    return run.exit_code


if __name__ == "__main__":
    sys.exit(main())
