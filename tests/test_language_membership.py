"""Membership audits of a brought causal LM: every attack against an independent
computation, padding that changes no score, and the edges (offline folder, pickle
weights, text files, attacks that do not fit the target)."""

from __future__ import annotations

import json
import math
import re
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from dpaudit.cli import app
from dpaudit.errors import ConfigError, DataError
from dpaudit.language.attacks import attack_scores
from dpaudit.language.loading import load_causal_lm
from dpaudit.language.scoring import token_statistics
from dpaudit.language.texts import read_texts
from dpaudit.language.tiny import build_tiny_lm, generate_texts, save_lm, train_plain

ATTACKS = ("loss", "zlib", "min-k", "min-k++")
AUDIT = """[audit]
name = "lm"
kinds = ["membership"]

[target]
format = "huggingface"
path = "model"
members = "members.jsonl"
non_members = "non_members.jsonl"

[membership]
attacks = ["loss", "zlib", "min-k", "min-k++"]
"""


def _jsonl(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 trained on 40 member texts; 40 non-members kept apart; texts of one to
    three sentences so that batches pad."""
    root = tmp_path_factory.mktemp("lm")
    texts = [t for n in (1, 2, 3) for t in generate_texts(27, seed=n, sentences=n)][:80]
    rng = np.random.default_rng(0)
    order = rng.permutation(len(texts))
    members = [texts[i] for i in order[:40]]
    non_members = [texts[i] for i in order[40:]]
    lm = build_tiny_lm(seed=0)
    train_plain(lm, members, epochs=10, seed=0, learning_rate=1e-2)
    save_lm(lm, root / "model")
    _jsonl(root / "members.jsonl", members)
    _jsonl(root / "non_members.jsonl", non_members)
    (root / "lm.toml").write_text(AUDIT)
    return root


def _independent_scores(model: torch.nn.Module, tokenizer, text: str) -> dict[str, float]:
    """Each attack computed from scratch, one text alone, no padding: transformers' own
    loss for labels = input_ids, and numpy for the rest."""
    ids = tokenizer(text)["input_ids"]
    x = torch.tensor([ids])
    with torch.no_grad():
        out = model(input_ids=x, labels=x)
    logits = out.logits[0, :-1].double().numpy()
    logp = logits - logits.max(axis=1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
    chosen = logp[np.arange(len(ids) - 1), ids[1:]]
    p = np.exp(logp)
    mu = (p * logp).sum(axis=1)
    sigma = np.sqrt((p * logp**2).sum(axis=1) - mu**2)
    k = max(1, math.floor(0.2 * chosen.size))
    nll = float(out.loss)  # transformers' mean token NLL (float32)
    return {
        "loss": -nll,
        "zlib": -nll / len(zlib.compress(text.encode("utf-8"))),
        "min-k": float(np.sort(chosen)[:k].mean()),
        "min-k++": float(np.sort((chosen - mu) / sigma)[:k].mean()),
    }


def test_every_attack_auc_equals_an_independent_computation(folder: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(folder / "lm.toml"), "-q", "-o", str(run)])
    # no [gate] policy is set and nothing is held against an upper bound: the default
    # fail_on_violation is not applicable and decides nothing alone (exit 0)
    assert result.exit_code == 0, result.output
    data = json.loads((run / "results.json").read_text())
    got = {t["attack"]["name"]: t["metrics"]["auc"] for t in data["tests"]}
    lm = load_causal_lm(folder / "model")
    members = read_texts(folder / "members.jsonl")
    non_members = read_texts(folder / "non_members.jsonl")
    rows = [_independent_scores(lm.model, lm.tokenizer, t) for t in members + non_members]
    truth = np.r_[np.ones(len(members)), np.zeros(len(non_members))]
    for attack in ATTACKS:
        # roc_auc_score counts ties one half, members positive
        want = roc_auc_score(truth, [r[attack] for r in rows])
        assert got[attack] == pytest.approx(want, abs=1e-6), attack
    assert set(got) == set(ATTACKS)
    assert got["loss"] > 0.6  # the model memorised its members (power of the fixture)


def test_padding_changes_no_score(folder: Path) -> None:
    lm = load_causal_lm(folder / "model")
    lm.model.double()  # float64: padded and alone agree to rounding of 1e-16 per operation
    texts = read_texts(folder / "members.jsonl")[:12]
    assert len({len(lm.tokenizer(t)["input_ids"]) for t in texts}) > 1  # batches do pad
    alone = token_statistics(lm, texts, batch_size=1)
    batched = token_statistics(lm, texts, batch_size=12)
    for a, b in zip(alone, batched, strict=True):
        np.testing.assert_allclose(b.log_probs, a.log_probs, rtol=0, atol=1e-10)
        np.testing.assert_allclose(b.mean, a.mean, rtol=0, atol=1e-10)
        np.testing.assert_allclose(b.std, a.std, rtol=0, atol=1e-10)


def test_left_padding_without_position_ids_would_change_scores(folder: Path) -> None:
    """The control: GPT-2's learned positions shift when left padding is given no position
    ids, so the padding test above can fail."""
    lm = load_causal_lm(folder / "model")
    short, long_ = "the cache reads a string in place .", "the cache reads a string in place . " * 2
    ids = [lm.tokenizer(t)["input_ids"] for t in (short, long_.strip())]
    width = max(map(len, ids))
    x = torch.zeros((2, width), dtype=torch.long)
    mask = torch.zeros((2, width), dtype=torch.long)
    for b, r in enumerate(ids):
        x[b, width - len(r) :] = torch.tensor(r)
        mask[b, width - len(r) :] = 1
    with torch.no_grad():
        naive = lm.model(input_ids=x, attention_mask=mask).logits[0, width - len(ids[0]) :]
        alone = lm.model(input_ids=torch.tensor([ids[0]])).logits[0]
    assert not torch.allclose(naive, alone, atol=1e-3)
    (ours,) = token_statistics(lm, [short])
    (padded, _) = token_statistics(lm, [short, long_.strip()], batch_size=2)
    np.testing.assert_allclose(padded.log_probs, ours.log_probs, atol=1e-5)


def test_attack_scores_on_hand_made_statistics() -> None:
    from dpaudit.language.scoring import TokenStatistics

    s = TokenStatistics(
        log_probs=np.log([0.5, 0.25, 0.125, 0.9, 0.6]),
        mean=np.array([-1.0, -1.0, -2.0, -0.5, -1.0]),
        std=np.array([1.0, 2.0, 1.0, 0.5, 0.0]),
    )
    nll = -np.mean(np.log([0.5, 0.25, 0.125, 0.9, 0.6]))
    assert attack_scores("loss", [s], ["x"])[0] == pytest.approx(-nll)
    assert attack_scores("zlib", [s], ["abc"])[0] == pytest.approx(
        -nll / len(zlib.compress(b"abc"))
    )
    # K = max(1, floor(0.2 * 5)) = 1: the smallest log p, log 0.125
    assert attack_scores("min-k", [s], ["x"])[0] == pytest.approx(math.log(0.125))
    # K = floor(0.4 * 5) = 2: the two smallest z; σ = 0 gives z = 0
    z = sorted([(math.log(0.5) + 1), (math.log(0.25) + 1) / 2, math.log(0.125) + 2, 0.0, 0.0])
    got = attack_scores("min-k++", [s], ["x"], k_fraction=0.4)[0]
    assert got == pytest.approx((z[0] + z[1]) / 2)
    ref = attack_scores("reference", [s], ["x"], reference=[[s], [s]])[0]
    assert ref == pytest.approx(0.0)
    with pytest.raises(ConfigError, match="must be one of loss, zlib, min-k, min-k\\+\\+, "):
        attack_scores("lira", [s], ["x"])
    with pytest.raises(ConfigError, match="k_fraction must be in"):
        attack_scores("min-k", [s], ["x"], k_fraction=0.0)


def test_text_files_of_three_shapes(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text('{"text": "one"}\n\n{"text": "two"}\n')
    (tmp_path / "a.csv").write_text('id,text\n1,"one, with a comma"\n2,two\n')
    (tmp_path / "a.txt").write_text("one\n\ntwo\n")
    assert read_texts(tmp_path / "a.jsonl") == ["one", "two"]
    assert read_texts(tmp_path / "a.csv") == ["one, with a comma", "two"]
    assert read_texts(tmp_path / "a.txt") == ["one", "two"]
    (tmp_path / "b.jsonl").write_text('{"body": "one"}\n')
    with pytest.raises(
        DataError, match=re.escape("b.jsonl line 1 has no non-empty string field 'text'")
    ):
        read_texts(tmp_path / "b.jsonl")
    (tmp_path / "b.csv").write_text("id,body\n1,x\n")
    with pytest.raises(
        DataError, match=re.escape("b.csv has no 'text' column (columns: id, body)")
    ):
        read_texts(tmp_path / "b.csv")


def test_a_name_that_is_not_a_local_folder_is_refused_in_one_line(
    folder: Path, tmp_path: Path
) -> None:
    for name in ("members.jsonl", "non_members.jsonl"):
        (tmp_path / name).write_text((folder / name).read_text())
    (tmp_path / "lm.toml").write_text(AUDIT.replace('path = "model"', 'path = "gpt2"'))
    result = CliRunner().invoke(app, ["run", str(tmp_path / "lm.toml"), "-q"])
    assert result.exit_code == 2
    assert "is not a local folder; dpaudit never downloads models" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_pickle_weights_are_refused_unless_trusted(tmp_path: Path) -> None:
    lm = build_tiny_lm(seed=1)
    save_lm(lm, tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    torch.save(lm.model.state_dict(), tmp_path / "m" / "pytorch_model.bin")
    with pytest.raises(ConfigError, match="holds only pickle weights"):
        load_causal_lm(tmp_path / "m")
    loaded = load_causal_lm(tmp_path / "m", allow_pickle=True)
    x = torch.tensor([[2, 5, 6]])
    with torch.no_grad():
        assert torch.allclose(loaded.model(x).logits, lm.model(x).logits, atol=1e-5)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ('attacks = ["loss", "zlib", "min-k", "min-k++"]', 'attacks = ["loss", "lira"]'),
            "need a classifier; a language model",
        ),
        (('non_members = "non_members.jsonl"\n', ""), "needs 'non_members'"),
        (
            ('format = "huggingface"\n', 'format = "huggingface"\nmembership = "m.csv"\n'),
            "'membership' is not read for a language model",
        ),
    ],
)
def test_files_that_do_not_fit_a_language_model_exit_2(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    (tmp_path / "lm.toml").write_text(AUDIT.replace(*edit))
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "lm.toml")])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_language_attacks_need_a_language_model(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(
        '[audit]\nname = "x"\nkinds = ["membership"]\n[data]\ndataset = "synthetic"\n'
        '[membership]\nattacks = ["min-k"]\n'
    )
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "a.toml")])
    assert result.exit_code == 2
    assert "score texts under a causal language model" in result.output


def _mean_nll(model: torch.nn.Module, tokenizer, text: str) -> float:  # type: ignore[no-untyped-def]
    """transformers' own mean token NLL for labels = input_ids, one text alone."""
    x = torch.tensor([tokenizer(text)["input_ids"]])
    with torch.no_grad():
        return float(model(input_ids=x, labels=x).loss)


def test_the_reference_attack_of_an_audit_file_equals_its_independent_auc(
    folder: Path, tmp_path: Path
) -> None:
    """Two reference models trained like the target on other texts of the grammar, saved
    to folders: the attack scores each text by the references' mean NLL less the target's."""
    for k in (1, 2):
        ref = build_tiny_lm(seed=10 + k)
        train_plain(ref, generate_texts(40, seed=100 + k), epochs=10, seed=k, learning_rate=1e-2)
        save_lm(ref, tmp_path / f"ref{k}")
    text = AUDIT.replace('path = "model"', f'path = "{folder / "model"}"')
    text = text.replace('members = "members.jsonl"', f'members = "{folder / "members.jsonl"}"')
    text = text.replace(
        'non_members = "non_members.jsonl"',
        f'non_members = "{folder / "non_members.jsonl"}"\nreference_paths = ["ref1", "ref2"]',
    )
    text = text.replace('attacks = ["loss", "zlib", "min-k", "min-k++"]', 'attacks = ["reference"]')
    (tmp_path / "ref.toml").write_text(text + '\n[execution]\ndevice = "cpu"\n')
    run = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(tmp_path / "ref.toml"), "-q", "-o", str(run)])
    assert result.exit_code == 0, result.output
    (test,) = json.loads((run / "results.json").read_text())["tests"]
    assert test["attack"]["name"] == "reference"
    assert test["target"]["device"] == "cpu"  # [execution] device, recorded with the target
    members = read_texts(folder / "members.jsonl")
    non_members = read_texts(folder / "non_members.jsonl")
    target = load_causal_lm(folder / "model")
    refs = [load_causal_lm(tmp_path / f"ref{k}") for k in (1, 2)]
    score = {
        t: np.mean([_mean_nll(r.model, r.tokenizer, t) for r in refs])
        - _mean_nll(target.model, target.tokenizer, t)
        for t in members + non_members
    }
    # Mann–Whitney by hand: pairs (member, non-member) the member wins, ties one half
    wins = sum(
        1.0 if score[m] > score[n] else 0.5 if score[m] == score[n] else 0.0
        for m in members
        for n in non_members
    )
    assert test["metrics"]["auc"] == pytest.approx(
        wins / (len(members) * len(non_members)), abs=1e-6
    )
    assert test["metrics"]["auc"] > 0.6  # the references did not see the members


def test_cuda_on_a_machine_without_it_is_one_line_exit_2_for_a_brought_model(
    folder: Path,
) -> None:
    (folder / "cuda.toml").write_text(AUDIT + '\n[execution]\ndevice = "cuda"\n')
    result = CliRunner().invoke(app, ["run", str(folder / "cuda.toml"), "-q"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"error: [execution] device = 'cuda': no such device is available on this machine "
        f"(torch {torch.__version__}); use device = 'cpu'"
    )
