"""A new audit kind is one module plus one registry line.

The kind below is complete: its table, its units, its comparison count and its summary.
Registering it (one line) makes ``[audit] kinds = ["coin"]`` and a ``[coin]`` table valid,
runs its units through the executor and store, and puts its bound into the verdict's one
budget next to the built-in kinds.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Annotated

import numpy as np
import pytest
from pydantic import Field
from typer.testing import CliRunner

import dpaudit.audit as audit_module
import dpaudit.kinds as kinds
from dpaudit.audit import run_audit
from dpaudit.bounds import epsilon_lower_bound
from dpaudit.cli import app
from dpaudit.errors import ConfigError, KindContractError
from dpaudit.kinds.base import AuditKind, KindSummary, Outputs, RunContext, UnitPlan
from dpaudit.results import Comparison, score_summary
from dpaudit.sections import Table


class CoinSection(Table):
    """``[coin]``: randomized response with truth probability p, claimed ε-DP."""

    p: Annotated[float, Field(gt=0.5, lt=1.0)]
    claimed_epsilon: Annotated[float, Field(gt=0.0)]
    trials: Annotated[int, Field(ge=2)] = 20_000


class CoinSpec(Table):
    section: CoinSection
    seed: int


def coin_unit(spec: CoinSpec, unit: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([spec.seed, 99])
    n, p = spec.section.trials, spec.section.p
    return {"negative": (rng.random(n) > p) * 1.0, "positive": (rng.random(n) < p) * 1.0}


class CoinKind(AuditKind[CoinSection]):
    name = "coin"
    section = CoinSection
    description = "a biased coin (test kind)"

    def plan(self, section: CoinSection, context: RunContext) -> UnitPlan:
        spec = CoinSpec(section=section, seed=context.seed)
        return UnitPlan(coin_unit, spec, ("coin-00000",), spec.model_dump(), "flipping")

    def comparisons(self, section: CoinSection, context: RunContext, outputs: Outputs) -> int:
        return 1

    def summarise(
        self, section: CoinSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        neg, pos = outputs["coin-00000"]["negative"], outputs["coin-00000"]["positive"]
        bound = epsilon_lower_bound(neg, pos, delta=0.0, confidence_level=level, seed=0)
        test = score_summary("coin", "coin", neg, pos, confidence_level=context.confidence_level)
        comparison = Comparison(
            test="coin",
            parameter="epsilon",
            lower=bound,
            upper=section.claimed_epsilon,
            upper_source="claim",
            in_verdict=True,
        )
        return KindSummary((test,), (comparison,))


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))
    kinds.register_kind(CoinKind())  # the one registry line


AUDIT = """
[audit]
name = "coin"
kinds = ["coin", "mechanism"]
confidence_level = 0.95
[coin]
p = 0.75
claimed_epsilon = {claim}
[mechanism]
name = "laplace"
epsilon = 1.0
trials = 5000
claim_curve = false  # ε and μ only (the curve's share: tests/test_claim_curve_mechanism.py)
"""


def test_a_registered_kind_runs_and_shares_the_budget(registered, tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    f.write_text(AUDIT.format(claim=math.log(3)))
    result = run_audit(f, output_dir=tmp_path / "run", write=False)
    in_verdict = [c for c in result.comparisons if c.in_verdict]
    # coin: 1 comparison, laplace: ε and μ → three bounds share 1 − c = 0.05
    assert len(in_verdict) == 3
    assert {round(c.lower.confidence_level, 12) for c in in_verdict} == {round(1 - 0.05 / 3, 12)}
    assert result.provenance["verdict_budget"]["per_kind"] == {"coin": 1, "mechanism": 2}
    assert result.privacy_verdict == "consistent"
    # a false claim (ε = 0.5 for ln 3 ≈ 1.10) is caught by the plug-in kind
    f.write_text(AUDIT.format(claim=0.5))
    caught = run_audit(f, output_dir=tmp_path / "run", write=False)
    assert caught.privacy_verdict == "violation"


def test_a_kind_table_is_validated_by_its_own_schema(registered, tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    f.write_text(AUDIT.format(claim=1.0).replace("p = 0.75", "p = 1.5"))
    with pytest.raises(ConfigError, match=r"'coin\.p': Input should be less than 1"):
        run_audit(f, output_dir=tmp_path / "run", write=False)


def test_an_unregistered_kind_is_refused_with_the_valid_names(tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    f.write_text(AUDIT.format(claim=1.0))
    with pytest.raises(ConfigError, match=r"unknown key 'coin'; allowed keys: audit, "):
        run_audit(f, output_dir=tmp_path / "run", write=False)


# ------------------------------------------------------------------ the budget, at run time


class GreedyCoinKind(CoinKind):
    """Announces one comparison, then puts two bounds into the verdict."""

    name = "greedy-coin"

    def summarise(
        self, section: CoinSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        one = super().summarise(section, context, outputs, level=level)
        return KindSummary(one.tests, one.comparisons * 2)


class OffLevelCoinKind(CoinKind):
    """Announces one comparison and puts one in, but at the full level c, not its share."""

    name = "off-level-coin"

    def summarise(
        self, section: CoinSection, context: RunContext, outputs: Outputs, *, level: float
    ) -> KindSummary:
        return super().summarise(section, context, outputs, level=context.confidence_level)


@pytest.mark.parametrize(
    ("kind", "match"),
    [
        (
            GreedyCoinKind,
            r"^internal error in audit kind 'greedy-coin': its comparisons\(\) announced 1 "
            r"in-verdict comparison\(s\) but its summarise\(\) put 2 into the verdict; the "
            r"verdict's confidence level would not hold, so the audit stops \(a bug in the "
            r"kind, not in your audit file\)\.$",
        ),
        (
            OffLevelCoinKind,
            r"^internal error in audit kind 'off-level-coin': the in-verdict bound of 'coin' "
            r"\(epsilon\) is at confidence level 0\.95, not the verdict's per-bound level "
            r"0\.9833",
        ),
    ],
)
def test_a_kind_that_spends_other_than_it_announced_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: type[CoinKind], match: str
) -> None:
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))
    kinds.register_kind(kind())
    f = tmp_path / "a.toml"
    f.write_text(AUDIT.format(claim=math.log(3)).replace("coin", kind.name))
    with pytest.raises(KindContractError, match=match):
        run_audit(f, output_dir=tmp_path / "run", write=False)


def test_the_cli_reports_a_kind_contract_breach_in_one_line_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))
    kinds.register_kind(GreedyCoinKind())
    f = tmp_path / "a.toml"
    f.write_text(AUDIT.format(claim=math.log(3)).replace("coin", "greedy-coin"))
    out = CliRunner().invoke(app, ["run", str(f), "-q", "-o", str(tmp_path / "run")])
    assert out.exit_code == 2, out.output
    assert "internal error in audit kind 'greedy-coin'" in out.output
    assert "Traceback" not in out.output
    assert not (tmp_path / "run" / "results.json").exists()


@pytest.mark.parametrize("kind", kinds.kind_names())
def test_every_registered_kind_spends_what_it_announced(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    # The contract, over every registered kind: its packaged example runs through the
    # audit, whose run-time check compares summarise's spending with comparisons' count.
    seen: dict[str, tuple[int, int]] = {}
    real = audit_module.check_spending

    def recording(name: str, announced: int, summary: KindSummary, level: float) -> None:
        seen[name] = (announced, summary.spent)
        real(name, announced, summary, level)

    monkeypatch.setattr(audit_module, "check_spending", recording)
    text = resources.files("dpaudit").joinpath("examples", f"{kind}.toml").read_text("utf-8")
    f = tmp_path / f"{kind}.toml"
    f.write_text(text)
    result = run_audit(f, output_dir=tmp_path / "run", write=False)
    announced, spent = seen[kind]
    assert announced == spent
    assert result.provenance["verdict_budget"]["per_kind"][kind] == announced
