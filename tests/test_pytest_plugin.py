"""The pytest plugin ``dpaudit.testing``, run inside pytest's own ``pytester``.

The audits are tiny mechanism audits (a few thousand trials, well under a second each):
a Laplace mechanism that keeps its claim, and one that runs with ε = 2 while claiming
ε = 0.5. With 4,000 trials per arm the violation is certain to show: even with half of
the trials spent on choosing the threshold, the ε lower bound of ε = 2 Laplace noise is
above 1 at 95 % confidence (the report of laplace-violation.toml, with 20,000 trials,
finds 1.88), far above the claimed 0.5.
"""

from __future__ import annotations

import importlib.metadata
import textwrap
from pathlib import Path

import pytest

from dpaudit.testing import (
    AuditFailed,
    AuditInputError,
    assert_audit_passes,
    config_from_tables,
    plugin_name,
)

pytest_plugins = ["pytester"]

# Once dpaudit is installed with its entry point, pytest loads the plugin by itself;
# before that (an editable install made before the entry point existed) it is named here.
_INSTALLED = any(
    ep.value == "dpaudit.testing" for ep in importlib.metadata.entry_points(group="pytest11")
)
# The inner sessions keep file order (-p no:randomly): the assertions read their lines in
# that order.
PLUGIN = (
    ("-p", "no:cacheprovider", "-p", "no:randomly")
    if _INSTALLED
    else (
        "-p",
        "dpaudit.testing",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-W",
        "ignore::pytest.PytestAssertRewriteWarning",
    )
)


def _audit(name: str, *, epsilon: float, claim: float, trials: int = 4_000) -> str:
    return textwrap.dedent(
        f"""
        [audit]
        name = "{name}"
        kinds = ["mechanism"]
        seed = 1

        [mechanism]
        name = "laplace"
        epsilon = {epsilon}
        trials = {trials}

        [mechanism.claim]
        epsilon = {claim}

        [report]
        html = false  # no plots: these tests time the plugin, not the report
        """
    )


GOOD = _audit("good-laplace", epsilon=1.0, claim=1.0)
BAD = _audit("bad-laplace", epsilon=2.0, claim=0.5)
BROKEN = GOOD.replace('name = "laplace"', 'name = "laplacian"')
REASON = "Privacy violation proven: a rigorous empirical lower bound exceeds its upper bound"


@pytest.fixture(scope="module", autouse=True)
def _modules_loaded(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Run one audit here first. pytester's in-process runs remove, when they end, every
    module they imported, and numpy's C extensions cannot be imported twice in one
    process: what an audit needs must be imported before the first inner run."""
    path = tmp_path_factory.mktemp("warm") / "good.toml"
    path.write_text(GOOD, encoding="utf-8")
    assert_audit_passes(path)


# ----------------------------------------------------------------- assert_audit_passes


def test_assert_audit_passes_returns_the_result(tmp_path: Path) -> None:
    path = tmp_path / "good.toml"
    path.write_text(GOOD, encoding="utf-8")
    result = assert_audit_passes(path)
    assert result.verdict == "pass"
    assert result.name == "good-laplace"
    assert list(tmp_path.iterdir()) == [path]  # the temporary run directory is gone


def test_assert_audit_passes_raises_the_gate_reason(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(BAD, encoding="utf-8")
    with pytest.raises(AuditFailed) as info:
        assert_audit_passes(path, output_dir=tmp_path / "run")
    first, *fails = str(info.value).splitlines()
    assert first.startswith(f"dpaudit audit 'bad-laplace' failed its gate: {REASON}")
    assert fails
    assert fails[0].startswith("FAIL fail_on_violation: epsilon lower bound")
    assert isinstance(info.value, AssertionError)
    assert info.value.result.verdict == "fail"
    assert (tmp_path / "run" / "results.json").is_file()  # kept where it was asked


def test_unusable_input_is_not_an_assertion(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text(BROKEN, encoding="utf-8")
    with pytest.raises(
        AuditInputError, match=r"would exit 2\): .*unknown mechanism 'laplacian'"
    ) as info:
        assert_audit_passes(path)
    assert not isinstance(info.value, AssertionError)
    with pytest.raises(AuditInputError, match="audit file not found"):
        assert_audit_passes(tmp_path / "missing.toml")


def test_functions_stand_for_plugins() -> None:
    assert plugin_name(test_functions_stand_for_plugins) == (
        f"{__name__}:test_functions_stand_for_plugins",
        Path(__file__).parent,
    )
    with pytest.raises(AuditInputError, match="cannot be named as a plug-in"):
        plugin_name(lambda x: x)
    with pytest.raises(AuditInputError, match="unknown key"):
        config_from_tables({"audit": {"name": "x", "kinds": ["mechanism"], "nope": 1}})


# -------------------------------------------------------------------- inside pytester


def test_fixture_passes_and_fails_with_the_reason(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", good=GOOD, bad=BAD)
    pytester.makepyfile(
        mechanisms=textwrap.dedent(
            """
            import numpy as np

            def leaky(data, *, rng, size):
                # claims ε = 0.5 but adds Laplace noise of scale 0.5: the scale of ε = 2.
                return float(np.sum(data)) + rng.laplace(0.0, 0.5, size)
            """
        ),
        test_audits=textwrap.dedent(
            """
            from mechanisms import leaky

            def test_good(dpaudit_audit):
                result = dpaudit_audit("good.toml")
                assert result.verdict == "pass"

            def test_bad(dpaudit_audit):
                dpaudit_audit("bad.toml")

            def test_in_memory(dpaudit_audit):
                dpaudit_audit({
                    "audit": {"name": "in-memory", "kinds": ["mechanism"], "seed": 2},
                    "mechanism": {
                        "name": leaky, "data": [[0.0], [1.0]], "trials": 4000,
                        "claim": {"epsilon": 0.5},
                    },
                    "report": {"html": False},
                })
            """
        ),
    )
    result = pytester.runpytest(*PLUGIN, "test_audits.py")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            f"*dpaudit audit 'bad-laplace' failed its gate: {REASON}*",
            "*FAIL fail_on_violation: epsilon lower bound*",
            f"*dpaudit audit 'in-memory' failed its gate: {REASON}*",
        ]
    )
    # pytest.fail(pytrace=False): the reason alone, no traceback of the plugin.
    assert "dpaudit/testing.py" not in result.stdout.str()


def test_collects_audit_files_only_with_the_option(pytester: pytest.Pytester) -> None:
    audits = pytester.mkdir("audits")
    (audits / "good.toml").write_text(GOOD, encoding="utf-8")
    (audits / "bad.toml").write_text(BAD, encoding="utf-8")
    (audits / "broken.toml").write_text(BROKEN, encoding="utf-8")
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    pytester.makefile(".toml", pyproject="[tool.other]\nkey = 1\n")

    without = pytester.runpytest(*PLUGIN)
    without.assert_outcomes(passed=1)

    out = pytester.path / "runs"
    run = pytester.runpytest(*PLUGIN, "--dpaudit", "--dpaudit-output", str(out))
    # audits/ only (no test_plain.py, no pyproject.toml): one pass, two failures.
    run.assert_outcomes(passed=1, failed=2)
    run.stdout.fnmatch_lines(
        [
            f"*dpaudit audit 'bad-laplace' failed its gate: {REASON}*",
            "*the audit cannot run (dpaudit run would exit 2):*laplacian*",
        ]
    )
    assert sorted(p.name for p in out.iterdir()) == ["bad", "good"]
    assert (out / "good" / "results.json").is_file()

    one = pytester.runpytest(
        *PLUGIN, "--dpaudit", "--dpaudit-output", str(out),
        "audits/good.toml", "test_plain.py",
    )  # fmt: skip
    one.assert_outcomes(passed=2)
