"""The many-run dpsgd audit path costs what the engine costs: invariants that fail if
its overhead comes back (benchmarks/audit_path_speed.py measures the CPU itself).

* the engine trains in this process on one torch intra-op thread, whatever the caller
  set (restored afterwards): with torch's default threads on a small machine the audit
  path cost 4 to 8 times the CPU of the engine benchmark, which sets one thread;
* a unit stores its grey-box observations compactly and losslessly (one byte per batch
  size, float32 noise, no all-NaN clipped norms), so that writing, digesting and reading
  it back stays small next to training;
* one audit writes each unit once, reads it back at most twice (the check before the
  summary, then one cached read), and runs the PLD accountant once per distinct record.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dpaudit import run_audit
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.units import dpsgd_unit
from dpaudit.greybox import GreyBoxObservations
from dpaudit.models import ModelSpec
from dpaudit.training import DPConfig, StepInfo, TrainingSpec, train_many

SECTION = {
    "trainer": "dpsgd",
    "canary": "dirac",
    "threat_model": "white-box",
    "rows": 40,
    "trials": 3,
    "training": {
        "epochs": 1,
        "batch_size": 4,
        "learning_rate": 0.5,
        "dp": {"noise_multiplier": 0.8, "clipping_norm": 1.0},
    },
}

AUDIT = """
[audit]
name = "speed-invariants"
kinds = ["dpsgd"]
seed = 0
delta = 1e-5

[dpsgd]
trainer = "dpsgd"
canary = "dirac"
threat_model = "white-box"
rows = 40
trials = 40
models_per_unit = 32

[dpsgd.training]
epochs = 1
batch_size = 4
learning_rate = 0.5

[dpsgd.training.dp]
noise_multiplier = 0.8
clipping_norm = 1.0
"""


def _unit() -> tuple[DpsgdSpec, dict[str, np.ndarray]]:
    spec = DpsgdSpec(
        section=DpsgdSection.model_validate(SECTION), seed=0, unit_size=6, base_dir="."
    )
    return spec, dpsgd_unit(spec, "dpsgd-00000")


def test_the_engine_trains_on_one_intra_op_thread_and_restores_the_callers() -> None:
    seen: list[int] = []

    def observer(info: StepInfo) -> None:
        seen.append(torch.get_num_threads())

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        rng = np.random.default_rng(0)
        x = rng.normal(size=(30, 3)).astype(np.float32)
        train_many(
            x,
            rng.integers(0, 2, 30),
            np.ones((4, 30), dtype=bool),
            model=ModelSpec(),
            training=TrainingSpec(epochs=1, batch_size=5, learning_rate=0.1, dp=DPConfig(1.0, 1.0)),
            seed=0,
            step_observer=observer,
        )
        assert torch.get_num_threads() == 2  # the caller's setting is back
    finally:
        torch.set_num_threads(before)
    assert seen
    assert set(seen) == {1}


def test_a_unit_stores_its_greybox_observations_compactly_and_losslessly() -> None:
    _, arrays = _unit()
    k, steps = 6, 10  # 3 models per arm; 40 rows // batch 4 = 10 steps
    batch = arrays["greybox_batch_sizes"]
    assert batch.dtype == np.uint8
    assert batch.shape == (k, steps)
    assert arrays["greybox_clipped_norms_max"].shape == (k, 0)  # the engine sees none
    noise = arrays["greybox_untouched_noise"]
    assert noise.dtype == np.float32
    assert noise.shape == (k, steps)
    per_step = sum(
        a.nbytes for name, a in arrays.items() if name.startswith("greybox_") and a.ndim == 2
    )
    assert per_step == k * steps * (1 + 4)  # was 3 × 8 bytes per model and step
    # Read back: the values the trainer observed, as int64 and float64 again.
    obs = GreyBoxObservations.from_arrays([arrays])
    assert obs is not None
    assert obs.batch_sizes.dtype == np.int64
    assert obs.untouched_noise.dtype == np.float64
    assert np.isnan(obs.clipped_norms_max).all()
    assert obs.clipped_norms_max.shape == (k, steps)
    again = GreyBoxObservations.from_arrays([obs.to_arrays()])
    assert again is not None
    for name in ("batch_sizes", "clipped_norms_max", "untouched_noise", "steps_run"):
        assert np.array_equal(getattr(obs, name), getattr(again, name), equal_nan=True)


def test_values_float32_cannot_hold_are_stored_as_they_are() -> None:
    obs = GreyBoxObservations(
        batch_sizes=np.array([[300, 2]]),
        dataset_size=1000,
        sampling_rate=0.3,
        clipped_norms_max=np.array([[0.5, np.nan]]),
        clipping_norm=1.0,
        untouched_noise=np.array([[0.1, np.nan]]),
        noise_multiplier=1.0,
        steps_run=np.array([2]),
        steps_accounted=2,
    )
    arrays = obs.to_arrays()
    assert arrays["greybox_batch_sizes"].dtype == np.uint16  # 300 > 255
    assert arrays["greybox_clipped_norms_max"].dtype == np.float32  # 0.5 is exact
    assert arrays["greybox_untouched_noise"].dtype == np.float64  # 0.1 is not
    back = GreyBoxObservations.from_arrays([arrays])
    assert back is not None
    assert back.untouched_noise[0, 0] == 0.1
    assert back.batch_sizes.tolist() == [[300, 2]]


def test_one_audit_saves_each_unit_once_reads_it_twice_and_accounts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpaudit import accounting, store, upper_bounds

    calls = {"save": 0, "load": 0, "pld": 0}
    save, load, pld = (
        store.RunStore.save,
        store.RunStore.load_verified,
        accounting.dpsgd_epsilon,
    )

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(store.RunStore, "save", counting("save", save))
    monkeypatch.setattr(store.RunStore, "load_verified", counting("load", load))
    monkeypatch.setattr(accounting, "dpsgd_epsilon", counting("pld", pld))
    upper_bounds._poisson_epsilon.cache_clear()
    (tmp_path / "a.toml").write_text(AUDIT)
    result = run_audit(tmp_path / "a.toml", output_dir=tmp_path / "run")
    assert result.verdict in ("pass", "fail")
    units = 3  # 80 models, 32 per unit
    assert calls["save"] == units
    assert calls["load"] <= 2 * units
    assert calls["pld"] == 1  # one distinct record, however often the summary reads it
