"""The membership sweep (``[membership.sweep]``): each point is the single audit at that point.

The sweep's units are the units a single audit at each setting runs, and every point's
in-verdict bounds, at the sweep's budget level, equal (bit for bit) those of a single audit
whose confidence level gives it the same level: 1 − (1 − c)/k with k = points × attacks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit.audit import run_audit
from dpaudit.config import load_config_text
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.membership.schema import SweepSection
from dpaudit.membership.sweep import SweepPoint, sweep_points
from dpaudit.report import render_report
from dpaudit.report.sweep_plots import sweep_rows, sweep_section

# Small enough to train in a second: 120 audited digits, a tiny MLP, two epochs.
_HEAD = """
[audit]
name = "{name}"
kinds = ["membership"]
seed = 3
confidence_level = {confidence}
delta = 1e-5

[data]
dataset = "sklearn:digits"
audited_size = 120

[model]
kind = "mlp"
hidden = [8]

[training]
epochs = 2
batch_size = 30
learning_rate = 0.1

[training.dp]
{dp}
clipping_norm = 1.0

[membership]
attacks = ["loss"]
"""
_SWEEP = """
[membership.sweep]
target_epsilon = [4.0]
local = true

[membership.sweep.input_perturbation]
label_share = 0.25
"""
_LOCAL = """
[target]
variants = ["input-perturbation"]

[target.input_perturbation]
features = "laplace"
labels = "k-rr"
epsilon = 4.0
label_share = 0.25
bound = 1.0
"""


def _config(tmp_path: Path, name: str, text: str):
    return load_config_text(text, base_dir=tmp_path, source=name)


def _run(tmp_path: Path, name: str, text: str) -> tuple[dict, Path]:
    run_dir = tmp_path / name
    result = run_audit(_config(tmp_path, name, text), output_dir=run_dir, write=False)
    return result.to_dict(), run_dir


def _units(run_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for path in run_dir.glob("units/*/*.npz"):
        with np.load(path) as z:
            out[path.stem] = {k: z[k] for k in z.files}
    return out


def _in_verdict(results: dict, label: str) -> list[dict]:
    return [b["lower"] for b in results["bounds"] if b["test"] == label and b["in_verdict"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, Path]]:
    """The sweep (central and local at ε = 4, one attack: k = 2 comparisons) and the two
    single audits at its points, their confidence level set to the sweep's budget level."""
    tmp = tmp_path_factory.mktemp("sweep")
    level = 1.0 - 0.05 / 2
    central = "noise_multiplier = 1.0"
    sweep = _run(tmp, "sweep", _HEAD.format(name="s", confidence=0.95, dp=central) + _SWEEP)
    # The σ the sweep's central point calibrated to ε = 4: a single audit given that σ
    # trains exactly as one given ε = 4 would (and calibrating twice doubles the time).
    sigma = next(t["record"] for t in sweep[0]["tests"] if "record" in t)["noise_multiplier"]
    single = _HEAD.format(name="c", confidence=level, dp=f"noise_multiplier = {sigma!r}")
    return {
        "sweep": sweep,
        "central": _run(tmp, "central", single),
        "local": _run(tmp, "local", _HEAD.format(name="l", confidence=level, dp=central) + _LOCAL),
    }


def test_sweep_budget_is_points_times_attacks(runs: dict) -> None:
    budget = runs["sweep"][0]["provenance"]["verdict_budget"]
    assert budget["comparisons"] == 2
    assert budget["level_each"] == pytest.approx(0.975, abs=1e-15)


@pytest.mark.parametrize(
    ("single", "point", "variant"),
    [("central", "central-eps-4.0", "dp"), ("local", "local-eps-4.0", "input-perturbation")],
)
def test_each_point_equals_a_single_audit(
    runs: dict, single: str, point: str, variant: str
) -> None:
    sweep, sweep_dir = runs["sweep"]
    alone, alone_dir = runs[single]
    # the very same trained target and scores (the data, coins and split are shared)
    swept = next(v for k, v in _units(sweep_dir).items() if k.endswith(point))
    own = _units(alone_dir)[f"target-0-{variant}"]
    for key in ("membership", "scores"):
        np.testing.assert_array_equal(swept[key], own[key])
    # and the same in-verdict bounds, bit for bit, at the same level
    lowers = _in_verdict(sweep, f"loss on the {point} target")
    assert lowers
    assert lowers == _in_verdict(alone, f"loss on the {variant} target")
    assert all(b["confidence_level"] == 0.975 for b in lowers)


def test_report_draws_the_sweep(runs: dict) -> None:
    results = runs["sweep"][0]
    rows = sweep_rows(results)
    assert [(r["setting"], r["epsilon"], r["attack"]) for r in rows] == [
        ("central", 4.0, "loss"),
        ("local", 4.0, "loss"),
    ]
    test = next(t for t in results["tests"] if t["label"] == "loss on the local-eps-4.0 target")
    assert rows[1]["test_accuracy"] == test["target"]["accuracy"]["non_members"]
    assert rows[1]["tpr_low_fpr"] == next(
        r["tpr"] for r in test["metrics"]["tpr_at_fpr"] if r["target_fpr"] == 0.01
    )
    section = sweep_section(results)
    assert section is not None
    assert section["svg"] is not None
    assert 'id="sweep"' in render_report(json.loads(json.dumps(results)))
    assert sweep_section({"tests": [], "bounds": []}) is None


def test_points_in_order_with_the_plain_baseline() -> None:
    sweep = SweepSection(target_epsilon=[2.0, 0.5], local=True)
    assert [p.name for p in sweep_points(sweep, plain=True)] == [
        "plain",
        "central-eps-2.0",
        "central-eps-0.5",
        "local-eps-2.0",
        "local-eps-0.5",
    ]
    assert SweepPoint(setting="central", parameter="noise_multiplier", value=1).name == (
        "central-sigma-1.0"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "give exactly one of 'noise_multiplier' or 'target_epsilon' \\(got none\\)"),
        (
            {"noise_multiplier": [1.0], "local": True},
            "local = true compares local and central DP at the same ε: sweep 'target_epsilon'",
        ),
        ({"target_epsilon": [1.0, 1.0]}, "target_epsilon lists a value twice"),
        (
            {"target_epsilon": [1.0], "input_perturbation": {"bound": 2.0}},
            "input_perturbation is read only with local = true",
        ),
        (
            {
                "target_epsilon": [1.0],
                "local": True,
                "input_perturbation": {"features": "none", "labels": "none"},
            },
            "randomises nothing \\(features = 'none' and labels = 'none'\\)",
        ),
    ],
)
def test_sweep_table_refuses(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SweepSection.model_validate(fields)


def test_sweep_needs_dp_and_own_target(tmp_path: Path) -> None:
    text = _HEAD.format(name="x", confidence=0.95, dp="noise_multiplier = 1.0") + _SWEEP
    no_dp = text.replace("[training.dp]\nnoise_multiplier = 1.0\nclipping_norm = 1.0\n", "")
    with pytest.raises(DpauditError, match=r"add a \[training.dp\] table"):
        _config(tmp_path, "x", no_dp)
    listed = text + '\n[target]\nvariants = ["dp"]\n'
    with pytest.raises(ConfigError, match="\\[target\\] variants may list only 'plain'"):
        _config(tmp_path, "x", listed)
