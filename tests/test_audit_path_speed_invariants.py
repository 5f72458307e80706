"""The many-run dpsgd audit path costs what the engine costs: invariants that fail if
its overhead comes back (benchmarks/audit_path_speed.py measures the CPU itself).

* the engine trains in this process on one torch intra-op thread, whatever the caller
  set (restored afterwards): with torch's default threads on a small machine the audit
  path cost 4 to 8 times the CPU of the engine benchmark, which sets one thread;
* a unit stores its grey-box observations compactly and losslessly (one byte per batch
  size, float32 noise, no all-NaN clipped norms), so that writing, digesting and reading
  it back stays small next to training;
* one audit writes each unit once, decodes it once (the check after it is stored, whose
  arrays the summary then reads), reads the dpsgd kind's units (upper bound, grey-box
  join and tests) once for both ``comparisons`` and ``summarise``, and runs the PLD
  accountant once per distinct record;
* records read back from 10⁴ models cost a handful of record objects, not one each.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dpaudit import run_audit
from dpaudit.bounds.greybox import GreyBoxObservations
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.units import dpsgd_unit
from dpaudit.models import ModelSpec
from dpaudit.records import DPSGDRecord
from dpaudit.store import RunStore, StoredOutputs, read_back
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


def test_one_audit_saves_and_decodes_each_unit_once_reads_them_once_and_accounts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dpaudit import accounting, store
    from dpaudit.accounting import upper_bounds
    from dpaudit.dpsgd import summary

    calls = {"save": 0, "load": 0, "pld": 0, "read": 0, "greybox": 0}
    save, load, pld = (
        store.RunStore.save,
        store.RunStore.load_verified,
        accounting.dpsgd_epsilon,
    )
    read, greybox = summary._read_units, summary.greybox_tests

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(store.RunStore, "save", counting("save", save))
    monkeypatch.setattr(store.RunStore, "load_verified", counting("load", load))
    monkeypatch.setattr(accounting, "dpsgd_epsilon", counting("pld", pld))
    monkeypatch.setattr(summary, "_read_units", counting("read", read))
    monkeypatch.setattr(summary, "greybox_tests", counting("greybox", greybox))
    upper_bounds._poisson_epsilon.cache_clear()
    (tmp_path / "a.toml").write_text(AUDIT)
    result = run_audit(tmp_path / "a.toml", output_dir=tmp_path / "run")
    assert result.verdict in ("pass", "fail")
    units = 3  # 80 models, 32 per unit
    assert calls["save"] == units
    # the units just saved are not decoded again: the arrays their digests were computed
    # from are handed to the summary (a read from disk, as by verify, checks the digest)
    assert calls["load"] == 0
    assert calls["read"] == 1  # comparisons and summarise share one reading
    assert calls["greybox"] == 1
    assert calls["pld"] == 1  # one distinct record, however often the summary reads it
    # the summary is the one a fresh read gives (nothing stale is shared)
    again = run_audit(tmp_path / "a.toml", output_dir=tmp_path / "run")
    fresh, first = json.loads(again.to_json()), json.loads(result.to_json())
    for part in ("bounds", "checks", "tests"):
        assert fresh[part] == first[part]


def _units(tmp_path: Path, sizes: tuple[int, ...]) -> tuple[RunStore, dict[str, str]]:
    runs = RunStore(tmp_path, "key")
    digests = {
        f"u{i}": runs.save(f"u{i}", {"x": np.arange(n, dtype=np.float64)})
        for i, n in enumerate(sizes)
    }
    return runs, digests


def test_units_read_back_are_kept_within_their_budget_and_handed_over(tmp_path: Path) -> None:
    runs, digests = _units(tmp_path, (10, 20, 30))
    found, kept = read_back(runs, ["u0", "u1", "u2"])
    assert found == digests
    assert sorted(kept) == ["u0", "u1", "u2"]
    assert np.array_equal(kept["u2"]["x"], np.arange(30.0))
    # over the budget (80 + 160 bytes fit, 480 more do not): none is kept
    assert read_back(runs, ["u0", "u1", "u2"], keep_bytes=300)[1] == {}
    outputs = StoredOutputs(runs, digests, preloaded=kept)
    assert outputs["u1"] is kept["u1"]  # handed over: not read from disk again
    # a unit the mapping does not hold is never handed over
    assert "u9" not in StoredOutputs(runs, digests, preloaded={"u9": kept["u0"]})


def test_a_value_derived_from_stored_units_is_kept_only_while_they_are(tmp_path: Path) -> None:
    runs, digests = _units(tmp_path, (10, 20))
    calls: list[int] = []

    def total() -> float:
        calls.append(1)
        return float(sum(outputs[u]["x"].sum() for u in outputs))

    outputs = StoredOutputs(runs, digests)
    assert outputs.memo("sum", total) == outputs.memo("sum", total) == 45.0 + 190.0
    assert len(calls) == 1
    assert outputs.memo("other", total) == 235.0  # another key: computed again
    assert len(calls) == 2
    calls.clear()
    outputs = StoredOutputs(runs, digests, cache_bytes=0)  # too large to keep
    assert outputs.memo("sum", total) == outputs.memo("sum", total)
    assert len(calls) == 2


def test_records_read_back_equal_their_elementwise_reading_and_share_objects() -> None:
    made = [DPSGDRecord(0.6, 2 / 100 if k % 2 else 2 / 101, 500, 1.0) for k in range(1000)] + [
        DPSGDRecord(1.0, 1.0, 8, 0.5, sampling="full-batch")
    ]
    parts = [DPSGDRecord.to_arrays(made[:600]), DPSGDRecord.to_arrays(made[600:])]
    back = DPSGDRecord.from_arrays(parts)
    reference = [
        DPSGDRecord(
            noise_multiplier=float(p["noise_multiplier"][k]),
            sampling_rate=float(p["sampling_rate"][k]),
            steps=int(p["steps"][k]),
            clipping_norm=float(p["clipping_norm"][k]),
            sampling="full-batch" if bool(p["full_batch"][k]) else "poisson",
        )
        for p in parts
        for k in range(p["noise_multiplier"].size)
    ]
    assert back == reference
    assert all(type(r.steps) is int and type(r.sampling_rate) is float for r in back)
    assert len({id(r) for r in back}) == 3  # three distinct mechanisms ran


def _canary_run(
    observer: Callable[[StepInfo], None] | None, *, canary: bool, epochs: int = 3
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nine models of 20 to 40 members (3 epochs of ⌊n/6⌋ steps: 9 to 18 steps, so some
    finish before others), every other one holding a Dirac gradient canary."""
    from dpaudit.training import GradientCanary

    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    membership = np.arange(40)[None, :] < rng.integers(20, 41, size=(9, 1))
    direction = np.zeros(2 * 3 + 2)
    direction[0] = 1.0
    included = np.arange(9) % 2 == 1
    training = TrainingSpec(epochs=epochs, batch_size=6, learning_rate=0.1, dp=DPConfig(0.8, 1.0))
    result = train_many(
        x,
        rng.integers(0, 2, 40),
        membership,
        model=ModelSpec(kind="logistic"),
        training=training,
        seed=11,
        num_classes=2,
        step_observer=observer,
        gradient_canary=GradientCanary(direction, included) if canary else None,
    )
    steps = np.array([r.steps for r in result.records])
    rates = np.array([r.sampling_rate for r in result.records])
    return included, steps, rates


def test_the_canary_coins_are_one_uniform_per_step_drawn_in_blocks() -> None:
    from dpaudit.models import PURPOSE_CANARY, derive_generator

    seen: dict[int, np.ndarray] = {}

    def observer(info: StepInfo) -> None:
        assert info.canary_sampled is not None
        seen[info.step] = info.canary_sampled.numpy().copy()

    included, steps, rates = _canary_run(observer, canary=True)
    assert len(set(steps.tolist())) > 1  # ragged ends: some models finish first
    assert steps.max() > 16  # more than one block of coins
    # The reference: each included model's own canary stream, one call per step it runs,
    # compared with q as a Python float (what the engine drew before its coins came in
    # blocks: the same numbers, so the same models get the canary at the same steps).
    for k in np.flatnonzero(included):
        generator = derive_generator(11, int(k), PURPOSE_CANARY)
        for t in range(int(steps[k])):
            coin = float(torch.rand(1, generator=generator))
            assert bool(seen[t][k]) == (coin < rates[k]), (k, t)
    for t, flags in seen.items():
        assert not flags[~included].any()
        assert not flags[steps <= t].any()  # finished models draw nothing


def test_the_canary_coins_cost_one_call_per_model_and_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = {"rand": 0}
    rand = torch.rand

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls["rand"] += 1
        return rand(*args, **kwargs)

    monkeypatch.setattr(torch, "rand", counting)
    _canary_run(None, canary=False)
    without = calls["rand"]
    calls["rand"] = 0
    included, steps, _ = _canary_run(None, canary=True)
    blocks = -(-steps[included] // 16)  # ⌈T / 16⌉ blocks of coins per included model
    assert calls["rand"] - without == int(blocks.sum())  # was one call per model and step


def test_the_greybox_observer_records_every_step_as_the_engine_ran_it() -> None:
    """Whole-chunk steps (written through slices) and steps where some models have
    finished (gathered per model) record the same values the engine's step shows."""
    from dpaudit.trainers.observers import _GreyBoxObserver

    rng = np.random.default_rng(1)
    x = np.zeros((40, 3), dtype=np.float32)  # column 2 stays 0: the untouched coordinate
    x[:, :2] = rng.normal(size=(40, 2))
    membership = np.arange(40)[None, :] < rng.integers(20, 41, size=(7, 1))
    coordinate = 2  # first-layer weight on feature 2 (class 0)
    greybox = _GreyBoxObserver(7, 5, coordinate, np.zeros(7, dtype=bool))
    seen: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []

    def observer(info: StepInfo) -> None:
        greybox(info)
        active = info.active.numpy().copy()
        seen.append(
            (
                info.step,
                active,
                info.batch_valid.sum(dim=1).numpy().copy(),
                info.gradients[:, coordinate].double().numpy().copy(),
            )
        )

    result = train_many(
        x,
        rng.integers(0, 2, 40),
        membership,
        model=ModelSpec(kind="logistic"),
        training=TrainingSpec(epochs=3, batch_size=6, learning_rate=0.1, dp=DPConfig(0.8, 1.0)),
        seed=2,
        num_classes=2,
        model_offset=5,
        step_observer=observer,
        memory_budget_bytes=40_000,  # several chunks
    )
    steps = np.array([r.steps for r in result.records])
    assert len(set(steps.tolist())) > 1  # both kinds of step occur
    assert sum(t == 0 for t, *_ in seen) > 1  # in more than one chunk
    batch = np.zeros((7, int(steps.max())), dtype=np.int64)
    noise = np.full(batch.shape, np.nan)
    offset, width = 0, 0
    for t, active, sizes, g in seen:  # chunks in order: each restarts at step 0
        if t == 0:
            offset, width = offset + width, sizes.size
        rows = np.arange(offset, offset + width)[active]
        batch[rows, t], noise[rows, t] = sizes[active], g[active]
    assert np.array_equal(greybox.steps, steps)
    assert np.array_equal(greybox.batch[:, : batch.shape[1]], batch)
    assert np.array_equal(greybox.noise[:, : batch.shape[1]], noise, equal_nan=True)
