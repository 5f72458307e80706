"""The one-run audit of DP fine-tuning of a causal LM: per-record gradients against
autograd, the noise and clipping of one step, the table's rules, and a small run end to
end (the shipped examples and the 400-run validity sweep are run elsewhere:
tests/test_examples.py, benchmarks/lm_one_run_validity.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import binomtest
from typer.testing import CliRunner

from dpaudit.accounting import dpsgd_epsilon
from dpaudit.cli import app
from dpaudit.config import load_config, run_context
from dpaudit.dpsgd.language import LanguageRunSpec, candidate_seed, fine_tune
from dpaudit.kinds import get_kind
from dpaudit.language.finetune import (
    DPFineTuning,
    canary_scores,
    canary_tokens,
    dp_finetune,
    per_record_gradients,
)
from dpaudit.language.loading import weight_files
from dpaudit.language.secrets import candidate_digits, fill
from dpaudit.language.tiny import build_tiny_lm, generate_texts, save_lm


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

[dpsgd.claim]
epsilon = 0.1
delta = 1e-5
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
    # the bounds are held against the claim's ε (smaller than the accountant's) and the
    # accountant's μ (the claim states none)
    sources = {b["parameter"]: b["upper_source"] for b in data["bounds"]}
    assert sources == {"epsilon": "[dpsgd.claim] ε", "mu": "accountant μ"}
    assert next(b for b in data["bounds"] if b["parameter"] == "epsilon")["upper"] == 0.1
    assert sum(b["in_verdict"] for b in data["bounds"]) == 1


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


def test_a_canary_loss_of_its_secret_alone_is_the_last_tokens_nll() -> None:
    """prompts = len − 1: the record's loss is −log p(secret | prefix), its gradient that
    of autograd on that one token; the prefix tokens are read, not learned."""
    lm = build_tiny_lm(seed=0, extra_tokens=canary_tokens(2))
    secret = lm.tokenizer.convert_tokens_to_ids("<canary-1>")
    rows = [[*lm.tokenizer(t)["input_ids"], secret] for t in generate_texts(3, seed=4)]
    got = per_record_gradients(lm, rows, prompts=[len(r) - 1 for r in rows])
    for i, row in enumerate(rows):
        lm.model.zero_grad()
        logits = lm.model(input_ids=torch.tensor([row[:-1]])).logits[0, -1]
        (-torch.log_softmax(logits, dim=-1)[secret]).backward()
        for name, p in lm.model.named_parameters():
            torch.testing.assert_close(got[name][i], p.grad, rtol=1e-4, atol=1e-6)


def test_the_calibrated_score_is_the_log_prob_less_the_mean_over_other_canaries() -> None:
    tokens = canary_tokens(4)
    lm = build_tiny_lm(seed=2, extra_tokens=tokens)
    ids = [lm.tokenizer.convert_tokens_to_ids(t) for t in tokens]
    prefixes = generate_texts(4, seed=5, sentences=1)
    rows = [[*lm.tokenizer(p)["input_ids"], t] for p, t in zip(prefixes, ids, strict=True)]
    plain = canary_scores(lm, rows, score="log-prob")
    assert np.array_equal(canary_scores(lm, rows), plain)  # the default
    calibrated = canary_scores(lm, rows, score="calibrated")
    # the logits are float32 (one thread there, torch's default here): agreement to 1e-6
    with torch.no_grad():
        for i, row in enumerate(rows):
            logp = torch.log_softmax(
                lm.model(input_ids=torch.tensor([row[:-1]])).logits[0, -1].double(), dim=-1
            )
            assert plain[i] == pytest.approx(float(logp[ids[i]]), abs=1e-6)
            others = [float(logp[j]) for k, j in enumerate(ids) if k != i]
            want = float(logp[ids[i]]) - sum(others) / 3
            assert calibrated[i] == pytest.approx(want, abs=1e-6)
            assert calibrated[i] != pytest.approx(plain[i], abs=1e-3)  # it does calibrate


def _claimed(epsilon: float) -> str:
    return AUDIT.replace("epsilon = 0.1", f"epsilon = {epsilon}")


def test_editing_the_claim_reuses_the_fine_tuning_unit(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (tmp_path / "a.toml").write_text(_claimed(0.1))
    (tmp_path / "b.toml").write_text(_claimed(50.0))
    first = CliRunner().invoke(app, ["run", str(tmp_path / "a.toml"), "-o", str(run)])
    assert first.exit_code == 1, first.output  # ε 0.1 is below what ran
    again = CliRunner().invoke(app, ["run", str(tmp_path / "b.toml"), "-o", str(run)])
    assert again.exit_code == 0, again.output
    assert "dpsgd: reused 1 of 1 units" in again.output
    data = json.loads((run / "results.json").read_text())
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["claim_vs_records"]["limit"] == 50.0
    assert checks["claim_vs_records"]["status"] == "passed"
    # the accountant of what ran (σ 2, q 0.05, 20 steps) is below 50: it is the ε bound's
    eps = next(b for b in data["bounds"] if b["parameter"] == "epsilon")
    assert eps["upper_source"] == "accountant ε"
    assert eps["upper"] == pytest.approx(
        dpsgd_epsilon(noise_multiplier=2.0, sampling_rate=0.05, steps=20, delta=1e-5)
    )


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "claim_epsilon = 2.0",
            "'claim_epsilon' is not read in [dpsgd.language]: the claim is the [dpsgd.claim] table",
        ),
        (
            'device = "cuda"',
            "'device' is not read in [dpsgd.language]: the device is [execution] device now",
        ),
        ("secrets = 1\nsecret_format = 'no digits'", "'secret_format' needs at least one '#'"),
    ],
)
def test_moved_and_misfit_keys_say_where_to_go(tmp_path: Path, key: str, message: str) -> None:
    body = '[audit]\nname = "x"\nkinds = ["dpsgd"]\n[dpsgd.language]\nnoise_multiplier = 1.0\n'
    (tmp_path / "a.toml").write_text(body + key + "\n")
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "a.toml")])
    assert result.exit_code == 2, result.output
    assert message in result.output


SMALL = """[audit]
name = "lm-small"
kinds = ["dpsgd"]
seed = 3
{audit}
[dpsgd.language]
canaries = 40
guesses = 10
texts = 20
public_texts = 0
noise_multiplier = 2.0
steps = 20
{language}
"""


def _small(tmp_path: Path, *, language: str = "", audit: str = "") -> Path:
    path = tmp_path / "a.toml"
    path.write_text(SMALL.format(language=language, audit=audit))
    return path


def test_cuda_on_a_machine_without_it_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["run", str(_small(tmp_path, audit='[execution]\ndevice = "cuda"')), "-q"]
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"error: [execution] device = 'cuda': no such device is available on this machine "
        f"(torch {torch.__version__}); use device = 'cpu'"
    )


def _plan_spec(path: Path) -> LanguageRunSpec:
    config = load_config(path)
    plan = get_kind("dpsgd").plan(config.section("dpsgd"), run_context(config))
    assert isinstance(plan.spec, LanguageRunSpec)
    return plan.spec


def test_a_user_model_folder_gets_the_canary_tokens_and_is_fine_tuned_on_cpu(
    tmp_path: Path,
) -> None:
    base = build_tiny_lm(seed=7)
    folder = save_lm(base, tmp_path / "mine")
    before = {f.name: f.read_bytes() for f in weight_files(folder)}
    vocabulary = len(base.tokenizer)
    parameters = sum(p.numel() for p in base.model.parameters())
    path = _small(tmp_path, language='model = "mine"', audit='[execution]\ndevice = "cpu"')
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(path), "-q", "-o", str(run)])
    assert result.exit_code == 0, result.output  # no claim, no gate policy
    (test,) = json.loads((run / "results.json").read_text())["tests"]
    # 40 new rows of the tied 32-wide embedding: the tokens went into the user's model
    assert test["run"]["model"] == (
        f"GPT2LMHeadModel, {parameters + 40 * 32} parameters, vocabulary {vocabulary + 40}, "
        "the user's folder, on cpu"
    )
    # the folder is read, never written
    assert {f.name: f.read_bytes() for f in weight_files(folder)} == before
    done = fine_tune(_plan_spec(path))
    ids = done.lm.tokenizer.convert_tokens_to_ids(canary_tokens(40))
    assert ids == list(range(vocabulary, vocabulary + 40))
    assert [c[-1] for c in done.canaries] == ids
    assert done.record.dataset_size == 20 + int(done.included.sum())
    assert test["positives"] == int(done.included.sum())


def test_a_model_that_is_not_a_local_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["run", str(_small(tmp_path, language='model = "gpt2"')), "-q"]
    )
    assert result.exit_code == 2, result.output
    assert "[dpsgd.language] model" in result.output
    assert "is not a local folder; dpaudit never downloads models" in result.output
    assert len(result.output.strip().splitlines()) == 1


def _independent_nll(lm, text: str) -> float:  # type: ignore[no-untyped-def]
    """−log p of a text's tokens after the first, one text alone, numpy's log-softmax."""
    ids = lm.tokenizer(text)["input_ids"]
    with torch.no_grad():
        logits = lm.model(input_ids=torch.tensor([ids])).logits[0, :-1].double().numpy()
    logp = logits - logits.max(axis=1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(ids) - 1), ids[1:]].sum())


def test_exposure_of_each_secret_equals_its_rank_among_every_candidate(tmp_path: Path) -> None:
    language = 'secrets = 2\nsecret_format = "my number is # #"\nsecret_repeats = 8\n'
    language += "learning_rate = 0.05"
    path = _small(tmp_path, language=language)
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(path), "-q", "-o", str(run)])
    assert result.exit_code == 0, result.output
    (test,) = json.loads((run / "results.json").read_text())["tests"]
    rows = test["run"]["exposure"]
    done = fine_tune(_plan_spec(path))
    assert [r["secret"] for r in rows] == ["my number is " + " ".join(d) for d in done.secrets]
    nll = {
        f"{a}{b}": _independent_nll(done.lm, f"my number is {a} {b}")
        for a in "0123456789"
        for b in "0123456789"
    }
    for row, secret in zip(rows, done.secrets, strict=True):
        others = np.array([v for k, v in nll.items() if k != secret])
        rank = 1 + np.sum(others < nll[secret]) + 0.5 * np.sum(others == nll[secret])
        assert row["rank"] == rank
        assert row["exposure"] == pytest.approx(math.log2(100) - math.log2(rank), abs=1e-12)
        assert row["space_size"] == 100
        assert row["candidates_scored"] == 100
        assert row["method"] == "exact"
        assert row["log_perplexity"] == pytest.approx(nll[secret], abs=1e-4)
    html = (run / "report.html").read_text()
    assert "Exposure of inserted secrets" in html
    assert rows[0]["secret"] in html


def test_a_space_too_large_to_enumerate_is_sampled_with_its_interval(tmp_path: Path) -> None:
    language = 'secrets = 1\nsecret_format = "my number is # # #"\nexposure_samples = 50'
    path = _small(tmp_path, language=language)
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(path), "-q", "-o", str(run)])
    assert result.exit_code == 0, result.output
    (test,) = json.loads((run / "results.json").read_text())["tests"]
    (row,) = test["run"]["exposure"]
    spec = _plan_spec(path)
    done = fine_tune(spec)
    # the 50 candidates the unit drew: uniform over the 1000 fillings, seeded
    digits, exact = candidate_digits("my number is # # #", limit=50, seed=candidate_seed(3))
    assert not exact
    sample = np.array([_independent_nll(done.lm, fill("my number is # # #", d)) for d in digits])
    secret = _independent_nll(done.lm, fill("my number is # # #", done.secrets[0]))
    k = int(np.sum(sample < secret))  # no tie among float64 sums of distinct texts
    assert row["exposure"] == pytest.approx(min(math.log2(1000), -math.log2((k + 0.5) / 50)))
    ci = binomtest(k, 50).proportion_ci(confidence_level=0.95, method="exact")
    low = 0.0 if ci.high >= 1 else -math.log2(ci.high)
    high = math.log2(1000) if ci.low <= 0 else min(math.log2(1000), -math.log2(ci.low))
    assert row["interval"] == pytest.approx([low, high], abs=1e-9)
    assert (row["method"], row["rank"], row["space_size"]) == (
        "sampled, clopper-pearson",
        None,
        1000,
    )
