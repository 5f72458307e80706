"""One contract, run against every registered trainer (and the example user trainer).

Each trainer is audited through its shipped example's ``[dpsgd]`` table with fewer
trials: the audit must be deterministic under its seed, count exactly the trials it was
asked for in each arm, give finite bounds, and read its upper bound from what the trainer
reports it ran (every trainer but ``plain`` claims something).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from dpaudit.dpsgd.api import run_dpsgd_from_section
from dpaudit.errors import ConfigError
from dpaudit.trainers import TRAINERS, get_trainer

AUDITS = Path(__file__).resolve().parent.parent / "audits"
EXAMPLES = {name: f"dpsgd-{name}" for name in TRAINERS} | {"user": "dpsgd-user-trainer"}
TRIALS = 40


def _section(example: str) -> dict:
    section = tomllib.loads((AUDITS / f"{example}.toml").read_text())["dpsgd"]
    section = {**section, "trials": TRIALS}
    section.pop("one_run", None)
    return section


def test_every_registered_trainer_has_a_shipped_example() -> None:
    for name, example in EXAMPLES.items():
        assert (AUDITS / f"{example}.toml").is_file(), name


@pytest.mark.parametrize("trainer", sorted(EXAMPLES))
class TestTrainerContract:
    def _run(self, trainer: str, run_dir: Path):
        return run_dpsgd_from_section(
            _section(EXAMPLES[trainer]), seed=3, run_dir=run_dir, base_dir=AUDITS
        )

    def test_deterministic_counts_and_finite(self, trainer: str, tmp_path: Path) -> None:
        first = self._run(trainer, tmp_path / "a")
        again = self._run(trainer, tmp_path / "b")
        values = [(c.parameter, c.lower.value, c.upper) for c in first.comparisons]
        assert values == [(c.parameter, c.lower.value, c.upper) for c in again.comparisons]
        summary = first.tests[0]
        assert (summary.negatives, summary.positives) == (TRIALS, TRIALS)
        assert all(math.isfinite(c.lower.value) and c.lower.value >= 0 for c in first.comparisons)

    def test_upper_bound_comes_from_what_ran(self, trainer: str, tmp_path: Path) -> None:
        outcome = self._run(trainer, tmp_path)
        in_verdict = [c for c in outcome.comparisons if c.in_verdict]
        if trainer == "plain":
            # ε = ∞ is reported but can never be violated: it stays out of the verdict
            assert not in_verdict
            assert math.isinf(outcome.comparisons[0].upper)
        else:
            assert in_verdict
            assert all(c.upper is not None and c.upper > 0 for c in in_verdict)


def test_unknown_trainer_lists_the_valid_ones() -> None:
    names = (
        r"\{'dpsgd', 'dpgd', 'output-perturbation', 'multiparty', 'multiparty-gradient', "
        r"'plain', 'gradient-laplace'\}"
    )
    with pytest.raises(ConfigError, match=rf"'trainer' parameter must be one of {names}"):
        get_trainer("sgd")
