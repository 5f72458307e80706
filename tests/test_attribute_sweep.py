"""The attribute sweep (``[attribute.sweep]``): each point is the single attribute audit
at that point.

A point's unit is the unit a single attribute audit at that σ runs (bit for bit), and its
row (accuracies, advantage with its intervals, the DP-implied bound from the point's own
record) equals that audit's row; only the label names the point, and the row carries the
point for the report. Attribute rows enter no verdict, so the sweep takes no budget.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpaudit.audit import run_audit
from dpaudit.config import load_config_text
from dpaudit.errors import ConfigError

_HEAD = """
[audit]
name = "{name}"
kinds = ["attribute"]
seed = 5
delta = 1e-5

[data]
dataset = "statsmodels:fair"
sensitive = "rate_marriage"
audited_size = 200

[model]
kind = "logistic"

[training]
epochs = 2
batch_size = 40
learning_rate = 0.2

[training.dp]
noise_multiplier = {sigma}
clipping_norm = 1.0
{target}
[attribute]
"""
_SWEEP = """
[attribute.sweep]
noise_multiplier = [0.5, 4.0]
"""
_SINGLE = """
[target]
variants = ["dp"]
"""


def _run(tmp_path: Path, name: str, text: str) -> tuple[dict, Path]:
    run_dir = tmp_path / name
    config = load_config_text(text, base_dir=tmp_path, source=name)
    return run_audit(config, output_dir=run_dir, write=False).to_dict(), run_dir


def _units(run_dir: Path) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for path in run_dir.glob("units/*/*.npz"):
        with np.load(path) as z:
            out[path.stem] = {k: z[k] for k in z.files}
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, Path]]:
    tmp = tmp_path_factory.mktemp("attribute-sweep")
    out = {"sweep": _run(tmp, "sweep", _HEAD.format(name="s", sigma=1.0, target="") + _SWEEP)}
    for sigma in (0.5, 4.0):
        text = _HEAD.format(name=f"a{sigma}", sigma=sigma, target=_SINGLE)
        out[str(sigma)] = _run(tmp, f"single-{sigma}", text)
    return out


def test_each_point_is_the_single_attribute_audit(runs: dict) -> None:
    sweep, sweep_dir = runs["sweep"]
    units = _units(sweep_dir)
    assert sorted(units) == ["attribute-0-central-sigma-0.5", "attribute-1-central-sigma-4.0"]
    rows = sweep["attribute"]
    assert [r["sweep"]["point"] for r in rows] == ["central-sigma-0.5", "central-sigma-4.0"]
    for sigma, row in zip(("0.5", "4.0"), rows, strict=True):
        single, single_dir = runs[sigma]
        (only,) = _units(single_dir).values()
        point = units[f"attribute-{sigma == '4.0':d}-central-sigma-{sigma}"]
        for key in ("guesses", "truth", "membership", "prior"):
            np.testing.assert_array_equal(point[key], only[key], err_msg=f"σ = {sigma}: {key}")
        (expected,) = single["attribute"]
        assert row["label"] == f"attribute inference on the central-sigma-{sigma} target " + (
            "(rate_marriage)"
        )
        strip = {"label", "sweep"}
        assert {k: v for k, v in row.items() if k not in strip} == {
            k: v for k, v in expected.items() if k not in strip
        }
        assert row["dp_bound"] is not None  # read from the point's own DP-SGD record
    # more noise, a smaller DP-implied advantage bound (each point's own accountant)
    assert _bound(rows[1]["dp_bound"]) < _bound(rows[0]["dp_bound"])
    assert sweep["provenance"]["verdict_budget"]["comparisons"] == 0


def _bound(value: float | dict) -> float:
    return min(value.values()) if isinstance(value, dict) else float(value)


def test_sweep_needs_a_dp_table(tmp_path: Path) -> None:
    text = _HEAD.format(name="x", sigma=1.0, target="") + _SWEEP
    text = text.replace("[training.dp]\nnoise_multiplier = 1.0\nclipping_norm = 1.0\n", "")
    with pytest.raises(ConfigError, match=r"\[attribute\.sweep\] noise_multiplier varies"):
        load_config_text(text, base_dir=tmp_path, source="x")
