"""Several checkpoints of one run (``checkpoint = [t₁, t₂, ...]``, 'multiparty-gradient').

Checked: the table's errors; each θ_t's stored scores and records are bit for bit those of
a single-checkpoint audit of t (the same run, its first t steps); each θ_t is held against
the tighter of its corollary (√(t/T)·ε, δ) and the exact GDP of t steps, with its claim
checked against its records; the verdict's budget is split over every checkpoint's
comparisons (Bonferroni: 1 − (1 − c)/k each, k = 3 per checkpoint); and the family of
checkpoint audits, whose scores are dependent (one run), violates no more often than the
binomial ceiling allows, while a planted mix-up of checkpoints is caught (power control).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from dpaudit import theory
from dpaudit.accounting.upper_bounds import Claim, from_claim, from_records
from dpaudit.audit import run_audit
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.summary import _many_run_bounds, _tighter, checkpoint_views
from dpaudit.dpsgd.units import dpsgd_unit
from dpaudit.errors import ConfigError
from dpaudit.kinds.base import VerdictBudget
from dpaudit.records import DPSGDRecord

DELTA = 1e-5


def _section(checkpoint: Any, *, trials: int = 40, epochs: int = 4, **extra: Any) -> dict:
    return {
        "trainer": "multiparty-gradient",
        "canary": "dirac",
        "threat_model": "white-box",
        "rows": 20,
        "normalize": True,
        "trials": trials,
        "options": {
            "parties": 3,
            "epsilon": 15.0,
            "delta": DELTA,
            "lam": 0.01,
            "checkpoint": checkpoint,
        },
        "training": {"epochs": epochs, "learning_rate": 0.5},
        **extra,
    }


@pytest.mark.parametrize(
    ("section", "match"),
    [
        (
            {
                **_section([1, 2]),
                "trainer": "output-perturbation",
                "canary": "ood",
                "threat_model": "black-box",
            },
            "audited for the 'multiparty-gradient' trainer only",
        ),
        (_section([2, 2]), r"distinct whole steps with 1 <= t <= T = epochs = 4; got \[2, 2\]"),
        (_section([1, 5]), r"1 <= t <= T = epochs = 4; got \[1, 5\]"),
        (_section([]), r"got \[\]"),
        (
            {**_section(2), "options": {**_section(2)["options"], "lam": [1, 2]}},
            r"only the 'checkpoint' option takes a list of steps; got lists for \['lam'\]",
        ),
    ],
)
def test_table_errors_teach(section: dict, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        DpsgdSection.model_validate(section)


def _unit(section: dict) -> dict[str, np.ndarray]:
    spec = DpsgdSpec(
        section=DpsgdSection.model_validate(section), seed=3, unit_size=80, base_dir="."
    )
    return dpsgd_unit(spec, "dpsgd-00000")


def test_each_checkpoint_is_the_single_checkpoint_audit_of_the_same_run() -> None:
    several = _unit(_section([1, 2, 4]))
    views = checkpoint_views({"dpsgd-00000": several})
    assert [t for t, _ in views] == [1, 2, 4]
    for t, view in views:
        single = _unit(_section(t))
        got = view["dpsgd-00000"]
        assert set(got) == set(single)
        for key in single:
            np.testing.assert_array_equal(got[key], single[key], err_msg=f"θ_{t}: {key}")
        records = DPSGDRecord.from_arrays([got])
        assert {r.steps for r in records} == {t}
    # θ_T of the list is the final model of a run with no checkpoint at all, except that
    # the list states the corollary claim beside the records (√(4/4)·ε = ε).
    plain = _section(None)
    del plain["options"]["checkpoint"]
    final = _unit(plain)
    np.testing.assert_array_equal(views[2][1]["dpsgd-00000"]["scores"], final["scores"])
    assert "claim" not in final


def test_audit_holds_each_checkpoint_under_one_split_budget(tmp_path: Path) -> None:
    steps, epsilon, total = [1, 2, 4], 15.0, 4
    audit = tmp_path / "checkpoints.toml"
    audit.write_text(
        '[audit]\nname = "checkpoints"\nkinds = ["dpsgd"]\nseed = 0\ndelta = 1e-5\n\n'
        '[dpsgd]\ntrainer = "multiparty-gradient"\ncanary = "dirac"\n'
        'threat_model = "white-box"\nrows = 20\nnormalize = true\ntrials = 200\n'
        "options = { parties = 3, epsilon = 15.0, delta = 1e-5, lam = 0.01, "
        "checkpoint = [1, 2, 4] }\n\n[dpsgd.training]\nepochs = 4\nlearning_rate = 0.5\n"
    )
    data = run_audit(audit, output_dir=tmp_path / "run", write=False).to_dict()
    # k = 3 comparisons per checkpoint (ε, μ, claim curve): 9 shares of 1 − c = 0.05
    budget = data["provenance"]["verdict_budget"]
    assert budget["comparisons"] == 9
    assert budget["level_each"] == pytest.approx(1 - 0.05 / 9, rel=1e-15)
    in_verdict = [b for b in data["bounds"] if b["in_verdict"]]
    assert len(in_verdict) == 9
    assert {b["lower"]["confidence_level"] for b in in_verdict} == {budget["level_each"]}
    checks = [c for c in data["checks"] if c["name"] == "claim_vs_records"]
    assert len(checks) == 3
    sigma_per_sqrt_t = math.sqrt(2 * math.log(1 / DELTA)) / epsilon * math.sqrt(total)
    for t, check in zip(steps, checks, strict=True):
        label = f"checkpoint θ_{t} of T = {total}"
        assert label in check["message"]
        assert check["limit"] == pytest.approx(math.sqrt(t / total) * epsilon, rel=1e-12)
        mu_t = math.sqrt(t) / sigma_per_sqrt_t  # exact GDP of t steps at the run's σ
        eps_exact = theory.gdp_epsilon(mu_t, DELTA)
        assert check["value"] == pytest.approx(eps_exact, rel=1e-6)
        mu_row = next(b for b in in_verdict if b["parameter"] == "mu" and b["test"].endswith(label))
        assert mu_row["upper"] == pytest.approx(mu_t, rel=1e-9)
        eps_row = next(
            b for b in in_verdict if b["parameter"] == "epsilon" and b["test"].endswith(label)
        )
        # the tighter of the corollary and the exact ε of t steps
        assert eps_row["upper"] == pytest.approx(
            min(math.sqrt(t / total) * epsilon, eps_exact), rel=1e-6
        )


def test_family_of_checkpoints_rarely_violates_and_a_mixup_is_caught() -> None:
    # 400 repeats of a 3-checkpoint audit (T = 4, t ∈ {1, 2, 4}, ε = 15), 100 models per
    # arm, ε and μ per checkpoint at 1 − 0.05/6 each, against the bounds the kind uses for
    # each θ_t (tighter of corollary and exact GDP, from the trainer's own output). The
    # white-box likelihood-ratio score of θ_t is the running sum of per-step terms
    # ±m²/2 + m·z_s, z_s iid N(0, 1), m = μ_1 (its law N(∓μ_t²/2, μ_t²) is tied to the
    # trainer in test_intermediate_models.py), so the three checkpoints' scores are
    # dependent, as in one run. The union bound gives P(any of the 6 violates) ≤ 0.05:
    # V > binom.ppf(0.999, 400, 0.05) = 35 has probability ≤ 1e-3. Power control: θ_4's
    # scores held against θ_1's bounds (a planted mix-up) violate in most repeats.
    repeats, per_arm, c, steps, total = 400, 100, 0.95, (1, 2, 4), 4
    ceiling = int(stats.binom.ppf(0.999, repeats, 1 - c))
    assert ceiling == 35
    level = VerdictBudget(c, 2 * len(steps)).level
    section = DpsgdSection.model_validate(_section(list(steps), trials=per_arm))
    several = _unit(_section(list(steps), trials=1))
    uppers = {}
    for t, view in checkpoint_views({"u": several}):
        arrays = view["u"]
        claim = Claim(epsilon=float(arrays["claim"][0]), delta=float(arrays["claim"][1]))
        records = DPSGDRecord.from_arrays([arrays])
        uppers[t] = _tighter(from_records(records, DELTA), from_claim(claim, DELTA))
    record = DPSGDRecord.from_arrays([checkpoint_views({"u": several})[0][1]["u"]])[0]
    m = 1.0 / record.noise_multiplier  # μ of one step (the records say steps = 1)
    rng = np.random.default_rng(31)
    violations, mixups = 0, 0
    for r in range(repeats):
        arms = {}
        for sign, name in ((-1.0, "neg"), (1.0, "pos")):
            terms = sign * m**2 / 2 + m * rng.standard_normal((per_arm, total))
            arms[name] = np.cumsum(terms, axis=1)
        bad = False
        for t in steps:
            upper = uppers[t]
            assert upper.mu is not None
            eps, mu_lb = _many_run_bounds(
                section, upper, arms["neg"][:, t - 1], arms["pos"][:, t - 1], level=level, seed=r
            )
            bad |= eps.value > upper.epsilon or mu_lb.value > upper.mu
        violations += int(bad)
        eps, mu_lb = _many_run_bounds(
            section, uppers[1], arms["neg"][:, -1], arms["pos"][:, -1], level=level, seed=r
        )
        mixups += int(eps.value > uppers[1].epsilon or mu_lb.value > (uppers[1].mu or math.inf))
    assert violations <= ceiling, violations
    assert mixups > repeats // 2, mixups


def test_sequential_audit_refuses_a_list_of_checkpoints(tmp_path: Path) -> None:
    audit = tmp_path / "sequential.toml"
    audit.write_text(
        '[audit]\nname = "s"\nkinds = ["dpsgd"]\nstopping = "sequential"\ndelta = 1e-5\n\n'
        '[dpsgd]\ntrainer = "multiparty-gradient"\nrows = 20\nnormalize = true\n'
        "options = { parties = 3, epsilon = 15.0, delta = 1e-5, lam = 0.01, "
        "checkpoint = [1, 4] }\n\n[dpsgd.training]\nepochs = 4\nlearning_rate = 0.5\n"
    )
    with pytest.raises(ConfigError, match=r"give one checkpoint t, not a list"):
        run_audit(audit, output_dir=tmp_path / "run", write=False)
