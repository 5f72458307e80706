"""Every text token's log-probability given its prefix, and the law it was drawn from.

A text is tokenized by the model's own tokenizer with its default special tokens (a start
token where the tokenizer adds one). Token t ≥ 1 is scored given tokens 0..t−1, as
``transformers`` scores ``labels = input_ids`` (the first token has no prefix and is not
scored). Logs are natural. Besides log p(x_t | x_<t) each position keeps the mean μ_t and
the standard deviation σ_t of log p(v | x_<t) over the whole vocabulary, v drawn from
that same next-token distribution (what Min-K%++ normalises by).

Texts run in batches with LEFT padding, an attention mask that hides the padding, and
position ids counted from each text's first real token, so a text's scores are those it
gets alone (up to float rounding); the log-softmax and the moments are computed in
float64 from the model's logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from dpaudit.errors import DataError
from dpaudit.language.loading import CausalLM
from dpaudit.training.engine import one_intra_op_thread

__all__ = ["TokenStatistics", "token_ids", "token_statistics", "total_log_probs"]


@dataclass(frozen=True)
class TokenStatistics:
    """One text's scored tokens (T of them, float64).

    Attributes:
        log_probs: log p(x_t | x_<t), t = 1..T.
        mean: μ_t = Σ_v p(v | x_<t) log p(v | x_<t).
        std: σ_t = (Σ_v p(v | x_<t) (log p(v | x_<t) − μ_t)²)^½.
    """

    log_probs: np.ndarray
    mean: np.ndarray
    std: np.ndarray

    @property
    def tokens(self) -> int:
        """T, the number of scored tokens."""
        return int(self.log_probs.size)


def token_ids(lm: CausalLM, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids, as the tokenizer makes them by default.

    Raises:
        DataError: a text gives fewer than 2 tokens (no token has a prefix to score it by)
            or more than the model's context.
    """
    limit = getattr(lm.model.config, "max_position_embeddings", None) or getattr(
        lm.model.config, "n_positions", None
    )
    out = []
    for i, text in enumerate(texts):
        ids = list(lm.tokenizer(text)["input_ids"])
        if len(ids) < 2:
            raise DataError(
                f"text record {i} ({text[:40]!r}) gives {len(ids)} token(s); at least 2 are "
                "needed (each scored token is scored given its prefix)"
            )
        if limit is not None and len(ids) > limit:
            raise DataError(
                f"text record {i} gives {len(ids)} tokens, more than the model's context "
                f"({limit}); shorten or split it"
            )
        out.append(ids)
    return out


def token_statistics(
    lm: CausalLM, texts: Sequence[str], *, batch_size: int = 8
) -> list[TokenStatistics]:
    """Score every token of every text (see the module docstring for the conventions).

    Args:
        lm: the model and its tokenizer.
        texts: the text records.
        batch_size: texts per forward pass (left-padded; the scores do not depend on it).

    Returns:
        One :class:`TokenStatistics` per text, in the order of ``texts``.
    """
    if batch_size < 1:
        raise DataError(f"batch_size must be at least 1; got {batch_size}")
    ids = token_ids(lm, texts)
    out: list[TokenStatistics | None] = [None] * len(ids)
    # Texts of similar length share a batch, so little compute goes to padding.
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    device = torch.device(lm.device)
    # one intra-op thread on the CPU: small forward passes only wait on more (the engine's
    # measurement, dpaudit.training.engine.one_intra_op_thread)
    with torch.inference_mode(), one_intra_op_thread(device):
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            for i, stats in zip(
                chunk, _batch(lm.model, [ids[i] for i in chunk], device), strict=True
            ):
                out[i] = stats
    return [s for s in out if s is not None]


def _batch(
    model: torch.nn.Module, rows: list[list[int]], device: torch.device
) -> list[TokenStatistics]:
    width = max(len(r) for r in rows)
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        input_ids[b, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[b, width - len(r) :] = 1
    # Left padding: a text's first real token gets position 0, as it would alone.
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(
        input_ids=input_ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
    ).logits
    out = []
    for b, r in enumerate(rows):
        offset = width - len(r)
        # Position t−1's logits predict token t: rows offset .. width−2 score tokens 1..T.
        logp = torch.log_softmax(logits[b, offset : width - 1].double(), dim=-1)
        target = input_ids[b, offset + 1 :].to(logp.device)
        chosen = logp.gather(1, target[:, None])[:, 0]
        p = logp.exp()
        mean = (p * logp).sum(dim=-1)
        std = (p * (logp - mean[:, None]) ** 2).sum(dim=-1).sqrt()
        out.append(
            TokenStatistics(
                log_probs=chosen.cpu().numpy(), mean=mean.cpu().numpy(), std=std.cpu().numpy()
            )
        )
    return out


def total_log_probs(lm: CausalLM, texts: Sequence[str], *, batch_size: int = 256) -> np.ndarray:
    """Each text's log-probability under the model, Σ_t log p(x_t | x_<t) over its scored
    tokens (natural log, float64), batched with the left padding of
    :func:`token_statistics` (no score depends on the batch).

    Minus it is the text's log-perplexity in nats, the score by which the Secret Sharer
    ranks candidates (Carlini et al. 2019, Def. 1, in bits there: same order).
    """
    if batch_size < 1:
        raise DataError(f"batch_size must be at least 1; got {batch_size}")
    ids = token_ids(lm, texts)
    out = np.empty(len(ids))
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    device = torch.device(lm.device)
    with torch.inference_mode(), one_intra_op_thread(device):
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            rows = [ids[i] for i in chunk]
            for i, value in zip(chunk, _batch_totals(lm.model, rows, device), strict=True):
                out[i] = value
    return out


def _batch_totals(
    model: torch.nn.Module, rows: list[list[int]], device: torch.device
) -> list[float]:
    width = max(len(r) for r in rows)
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        input_ids[b, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[b, width - len(r) :] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(
        input_ids=input_ids.to(device),
        attention_mask=mask.to(device),
        position_ids=positions.to(device),
    ).logits
    logp = torch.log_softmax(logits[:, :-1].double(), dim=-1)
    chosen = logp.gather(2, input_ids[:, 1:].to(logp.device)[:, :, None])[:, :, 0]
    # padding positions (mask 0 at the predicted token) add nothing
    chosen = torch.where(mask[:, 1:].to(chosen.device) > 0, chosen, torch.zeros_like(chosen))
    return [float(v) for v in chosen.sum(dim=1).cpu()]
