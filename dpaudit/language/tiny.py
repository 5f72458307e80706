"""A tiny GPT-2-style causal LM, a word-level tokenizer and text, all made offline.

Tests and the shipped examples need a causal LM that ``transformers`` loads from a folder
without any download: the model is built from a :class:`~transformers.GPT2Config` and
trained from scratch on CPU, the tokenizer is a word-level ``tokenizers`` vocabulary of
the generated text (a start token ``[BOS]`` put before every text), and the text is
sentences drawn by a seeded generator from a small fixed grammar, so the same seed gives
the same words on every machine and Python version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import AutoModelForCausalLM, GPT2Config, PreTrainedTokenizerFast

from dpaudit.errors import ConfigError
from dpaudit.language.loading import CausalLM, quiet_progress
from dpaudit.training.engine import one_intra_op_thread

__all__ = [
    "DIGITS",
    "SPECIAL_TOKENS",
    "TinyConfig",
    "build_tiny_lm",
    "generate_texts",
    "save_lm",
    "train_plain",
    "vocabulary",
]

#: Padding, unknown word and start token, ids 0, 1, 2.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[BOS]")
#: The ten digits, each a word of the vocabulary when secrets are inserted.
DIGITS = tuple("0123456789")

_SUBJECTS = (
    "the parser",
    "a buffer",
    "the socket",
    "each worker",
    "the scheduler",
    "a thread",
    "the encoder",
    "the logger",
    "a request",
    "the cache",
    "the queue",
    "a module",
    "the compiler",
    "the archive",
    "a timer",
    "the registry",
    "a context",
    "the handler",
)
_VERBS = (
    "reads",
    "writes",
    "returns",
    "raises",
    "closes",
    "opens",
    "copies",
    "flushes",
    "splits",
    "joins",
    "encodes",
    "decodes",
    "sorts",
    "checks",
    "formats",
    "converts",
)
_OBJECTS = (
    "the header",
    "a string",
    "the bytes",
    "every line",
    "the path",
    "a number",
    "the result",
    "an error",
    "the value",
    "a list",
    "the stream",
    "a record",
    "the message",
    "a pattern",
    "the file",
    "a table",
    "the key",
    "an object",
)
_ENDINGS = (
    "when asked",
    "before it exits",
    "after each call",
    "in place",
    "for the caller",
    "without a copy",
    "on demand",
    "at most once",
    "if it can",
    "as text",
    "by default",
    "with care",
    "in order",
    "unless told otherwise",
)


def vocabulary() -> list[str]:
    """The grammar's words, sorted (the tiny tokenizer's vocabulary after "." and the
    special tokens)."""
    words = {
        w for group in (_SUBJECTS, _VERBS, _OBJECTS, _ENDINGS) for p in group for w in p.split()
    }
    return sorted(words)


def generate_texts(count: int, *, seed: int, sentences: int = 2) -> list[str]:
    """``count`` distinct texts, each ``sentences`` sentences of the fixed grammar.

    Args:
        count: how many texts (at most a few thousand: they are drawn without repeats).
        seed: the generator's seed; the same seed gives the same texts everywhere.
        sentences: sentences per text.
    """
    rng = np.random.default_rng([seed, 0x7E47])
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < count:
        parts = []
        for _ in range(sentences):
            s = _SUBJECTS[rng.integers(len(_SUBJECTS))]
            v = _VERBS[rng.integers(len(_VERBS))]
            o = _OBJECTS[rng.integers(len(_OBJECTS))]
            e = _ENDINGS[rng.integers(len(_ENDINGS))]
            parts.append(f"{s} {v} {o} {e} .")
        text = " ".join(parts)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


@dataclass(frozen=True)
class TinyConfig:
    """The tiny model's shape (GPT-2 blocks)."""

    embedding: int = 32
    layers: int = 2
    heads: int = 2
    context: int = 64


def _tokenizer(extra: Sequence[str]) -> PreTrainedTokenizerFast:
    words = [*SPECIAL_TOKENS, ".", *vocabulary(), *extra]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.post_processor = processors.TemplateProcessing(
        single="[BOS] $A", special_tokens=[("[BOS]", SPECIAL_TOKENS.index("[BOS]"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="[BOS]", pad_token="[PAD]", unk_token="[UNK]"
    )


def build_tiny_lm(
    *, seed: int, shape: TinyConfig = TinyConfig(), extra_tokens: Sequence[str] = ()
) -> CausalLM:
    """A freshly initialised tiny GPT-2 and its word-level tokenizer.

    Args:
        seed: seeds the initialisation (the caller's torch RNG state is restored).
        shape: the model's size.
        extra_tokens: words added to the vocabulary after the grammar's (new-token
            canaries), each one token.
    """
    if len(set(extra_tokens)) != len(extra_tokens):
        raise ConfigError("extra_tokens lists a token twice")
    tokenizer = _tokenizer(extra_tokens)
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=shape.context,
        n_embd=shape.embedding,
        n_layer=shape.layers,
        n_head=shape.heads,
        bos_token_id=SPECIAL_TOKENS.index("[BOS]"),
        eos_token_id=SPECIAL_TOKENS.index("[BOS]"),
        pad_token_id=SPECIAL_TOKENS.index("[PAD]"),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # eager attention: torch.func's per-sample gradients run through it
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model.eval()
    return CausalLM(model=model, tokenizer=tokenizer, folder="", device="cpu")


def _padded(ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and the labels that ignore the padding (−100)."""
    width = max(len(r) for r in ids)
    x = torch.zeros((len(ids), width), dtype=torch.long)
    labels = torch.full((len(ids), width), -100, dtype=torch.long)
    for b, r in enumerate(ids):
        x[b, : len(r)] = torch.tensor(r)
        labels[b, : len(r)] = torch.tensor(r)
    return x, labels


def train_plain(
    lm: CausalLM,
    texts: Sequence[str],
    *,
    epochs: int,
    seed: int,
    learning_rate: float = 3e-3,
    batch_size: int = 16,
) -> CausalLM:
    """Fine-tune ``lm`` on ``texts`` without DP (Adam, shuffled batches), in place.

    Right padding with labels −100 on the padding: a text's loss is what it gets alone.
    """
    ids = [list(lm.tokenizer(t)["input_ids"]) for t in texts]
    rng = np.random.default_rng([seed, 0x7A1])
    optimiser = torch.optim.Adam(lm.model.parameters(), lr=learning_rate)
    lm.model.train()
    with torch.random.fork_rng(devices=[]), one_intra_op_thread(torch.device(lm.device)):
        torch.manual_seed(seed)
        for _ in range(epochs):
            order = rng.permutation(len(ids))
            for start in range(0, len(ids), batch_size):
                x, labels = _padded([ids[i] for i in order[start : start + batch_size]])
                mask = (labels != -100).long()
                loss = lm.model(input_ids=x, attention_mask=mask, labels=labels).loss
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
    lm.model.eval()
    return lm


def save_lm(lm: CausalLM, folder: Path) -> Path:
    """Write the model (safetensors) and tokenizer to ``folder`` as ``save_pretrained`` does."""
    folder.mkdir(parents=True, exist_ok=True)
    with quiet_progress():
        lm.model.save_pretrained(folder)
        lm.tokenizer.save_pretrained(folder)
    return folder
