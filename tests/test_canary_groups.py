"""The every-group white-box canary: a part in every parameter tensor, unit norm.

A trainer that clips each tensor to C on its own and adds noise made for ONE tensor
(benchmarks/zoo/zoo_trainers.py, ``dpgd_per_layer_one_group_noise``) runs μ = √G·μ_claim;
the one-coordinate Dirac canary lies in one tensor and sees μ_claim, the every-group
canary sees the whole clipped norm C·√G.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dpaudit.audit import run_audit
from dpaudit.config import load_config_text
from dpaudit.dpsgd.canaries import every_group_direction
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.dpsgd.setup import resolve_canary_direction

ZOO = Path(__file__).resolve().parent.parent / "benchmarks" / "zoo"


def _audit(name: str, tmp_path: Path, *, direction: str | None = None, trials: int = 300):
    text = (ZOO / f"{name}.toml").read_text()
    text = re.sub(r"^trials = [0-9_]+$", f"trials = {trials}", text, count=1, flags=re.M)
    if direction is not None:
        text = text.replace("[dpsgd]\n", f'[dpsgd]\ncanary_direction = "{direction}"\n', 1)
    config = load_config_text(text, base_dir=ZOO, source=name)
    result = run_audit(config, output_dir=tmp_path / name, write=False)
    return result, result.tests[0].details["dpsgd"]["canary_direction"]


def test_every_group_direction_is_unit_with_one_part_per_tensor() -> None:
    # logistic regression, 2 classes, 5 features: weight (2, 5) then bias (2,)
    d = every_group_direction([(2, 5)])
    assert np.linalg.norm(d) == pytest.approx(1.0, abs=1e-15)
    # weight: both classes on the last feature; bias: both classes; each 1/√2 · 1/√2
    assert np.flatnonzero(d).tolist() == [4, 9, 10, 11]
    assert d[[4, 9, 10, 11]] == pytest.approx([0.5] * 4, abs=1e-15)
    # MLP 5 → 8 → 3: W1 unit 0 on the last feature, b1[0], W2 column 0, b2 all classes
    d = every_group_direction([(8, 5), (3, 8)])
    w1, b1, w2 = 40, 8, 24
    want = [4, w1, w1 + b1, w1 + b1 + 8, w1 + b1 + 16, w1 + b1 + w2, w1 + b1 + w2 + 1, 74]
    assert np.flatnonzero(d).tolist() == want
    parts = np.split(d, np.cumsum([w1, b1, w2]))
    assert [np.linalg.norm(p) for p in parts] == pytest.approx([0.5] * 4, abs=1e-15)


def test_the_output_parts_are_orthogonal_to_every_softmax_gradient() -> None:
    # p − e_y sums to 0 over the classes: the output bias part sees no real gradient
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((50, 3))
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    grad = p - np.eye(3)[rng.integers(0, 3, 50)]
    bias = every_group_direction([(3, 4)])[-3:]
    assert np.abs(grad @ bias).max() < 1e-15


def test_auto_picks_one_coordinate_for_flat_clipping_and_every_group_else() -> None:
    def section(**kw: object) -> DpsgdSection:
        base = {"training": {"dp": {"noise_multiplier": 1.0, "clipping_norm": 1.0}}}
        return DpsgdSection.model_validate({**base, **kw})

    assert resolve_canary_direction(section(), ".").chosen == "one-coordinate"  # type: ignore[union-attr]
    user = resolve_canary_direction(section(trainer="zoo_trainers:dpsgd_correct"), str(ZOO))
    assert user is not None
    assert (user.chosen, user.asked) == ("every-group", "auto")
    forced = resolve_canary_direction(section(canary_direction="every-group"), ".")
    assert forced is not None
    assert forced.chosen == "every-group"
    black = section(canary="mislabeled", threat_model="black-box")
    assert resolve_canary_direction(black, ".") is None


def test_every_group_is_refused_where_one_coordinate_is_read() -> None:
    with pytest.raises(ValueError, match="canary_direction = 'every-group' shapes the white-box"):
        DpsgdSection.model_validate(
            {
                "canary": "gradient",
                "threat_model": "black-box",
                "canary_direction": "every-group",
                "training": {"dp": {"noise_multiplier": 1.0, "clipping_norm": 1.0}},
            }
        )


def test_per_layer_bug_is_caught_by_the_default_canary(tmp_path: Path) -> None:
    # G = 4 tensors: the buggy trainer runs μ = 2 against the recorded μ = 1
    result, direction = _audit("dpsgd-per-layer-buggy", tmp_path)
    assert result.verdict == "fail"
    assert direction["chosen"] == "every-group"
    mu = next(c for c in result.comparisons if c.parameter == "mu" and c.in_verdict)
    assert mu.lower.value > 1.0 == mu.upper


def test_per_layer_bug_hides_from_the_one_coordinate_canary(tmp_path: Path) -> None:
    result, direction = _audit("dpsgd-per-layer-buggy", tmp_path, direction="one-coordinate")
    assert direction == {
        "chosen": "one-coordinate",
        "asked": "one-coordinate",
        "reason": "set in [dpsgd]",
    }
    assert result.verdict == "pass"


def test_correct_per_layer_trainer_passes(tmp_path: Path) -> None:
    result, direction = _audit("dpsgd-per-layer-fixed", tmp_path)
    assert direction["chosen"] == "every-group"
    assert result.verdict == "pass"
