"""The one-run audit of DP fine-tuning of a causal LM: per-record gradients against
autograd, the noise and clipping of one step, the table's rules, and a small run end to
end (the shipped examples and the 400-run validity sweep are run elsewhere:
tests/test_examples.py, benchmarks/lm_one_run_validity.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dpaudit.cli import app
from dpaudit.language.finetune import DPFineTuning, canary_tokens, dp_finetune, per_record_gradients
from dpaudit.language.tiny import build_tiny_lm, generate_texts


def _records(lm, texts):  # type: ignore[no-untyped-def]
    return [list(lm.tokenizer(t)["input_ids"]) for t in texts]


def test_per_record_gradients_equal_autograd_on_each_record_alone() -> None:
    lm = build_tiny_lm(seed=0)
    texts = [t for n in (1, 2) for t in generate_texts(3, seed=n, sentences=n)]
    rows = _records(lm, texts)
    got = per_record_gradients(lm, rows)
    for i, row in enumerate(rows):
        lm.model.zero_grad()
        x = torch.tensor([row])
        lm.model(input_ids=x, labels=x).loss.backward()
        for name, p in lm.model.named_parameters():
            torch.testing.assert_close(got[name][i], p.grad, rtol=1e-4, atol=1e-6)


def test_one_noiseless_full_batch_step_is_adam_on_the_clipped_mean() -> None:
    """q = 1, σ → 0 (noise_fraction 0): the privatised gradient is the sum of the clipped
    per-record gradients divided by N; with C far above every norm, the mean gradient."""
    lm = build_tiny_lm(seed=0)
    rows = _records(lm, generate_texts(4, seed=3))
    twin = build_tiny_lm(seed=0)
    run = DPFineTuning(
        noise_multiplier=1.0,
        clipping_norm=1e6,
        sampling_rate=1.0,
        steps=1,
        learning_rate=0.01,
        noise_fraction=0.0,
    )
    record = dp_finetune(lm, rows, run, seed=0)
    grads = per_record_gradients(twin, rows)
    optimiser = torch.optim.Adam(twin.model.parameters(), lr=0.01)
    for name, p in twin.model.named_parameters():
        p.grad = grads[name].mean(0)
    optimiser.step()
    for (name, a), b in zip(lm.model.named_parameters(), twin.model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7), name
    # the record states the noise that ran: σ · noise_fraction = 0
    assert (record.noise_multiplier, record.sampling_rate, record.steps) == (0.0, 1.0, 1)
    assert record.dataset_size == 4


def test_canary_tokens_are_one_token_each() -> None:
    tokens = canary_tokens(5)
    lm = build_tiny_lm(seed=0, extra_tokens=tokens)
    ids = lm.tokenizer(" ".join(tokens))["input_ids"]
    assert len(ids) == 1 + 5
    assert len(set(ids[1:])) == 5


AUDIT = """[audit]
name = "lm-small"
kinds = ["dpsgd"]
seed = 3

[dpsgd.language]
canaries = 40
guesses = 10
texts = 20
public_texts = 0
noise_multiplier = 2.0
steps = 20
claim_epsilon = 0.1
"""


def test_a_small_run_end_to_end_and_its_claim_check(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(AUDIT)
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(tmp_path / "a.toml"), "-q", "-o", str(run)])
    # the claim ε = 0.1 is below what σ = 2, q = 0.05, 20 steps gives: the claim check fails
    assert result.exit_code == 1, result.output
    data = json.loads((run / "results.json").read_text())
    (test,) = data["tests"]
    assert test["run"]["canaries"] == 40
    assert test["negatives"] + test["positives"] == 40
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["claim_vs_records"]["status"] == "failed"
    assert checks["fail_on_violation"]["status"] == "passed"
    bounds = [b for b in data["bounds"] if b["in_verdict"]]
    assert len(bounds) == 1
    assert bounds[0]["upper_source"].startswith("accountant")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("trials = 10\n", "'trials' is not read with [dpsgd.language]"),
        ("[dpsgd.language]\nnoise_multiplier = 1.0\nguesses = 3\n", "'guesses' must be even"),
    ],
)
def test_tables_that_do_not_fit_exit_2(tmp_path: Path, extra: str, message: str) -> None:
    body = '[audit]\nname = "x"\nkinds = ["dpsgd"]\n[dpsgd]\n' + extra
    if "[dpsgd.language]" not in extra:
        body += "[dpsgd.language]\nnoise_multiplier = 1.0\n"
    (tmp_path / "a.toml").write_text(body)
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "a.toml")])
    assert result.exit_code == 2, result.output
    assert message in result.output
