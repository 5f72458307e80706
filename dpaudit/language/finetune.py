"""DP fine-tuning of a causal LM with new-token canaries, for one-run audits.

DP-SGD as Opacus runs it (Abadi et al. 2016, Alg. 1, with Poisson sampling): each step
includes every training record by an independent coin of probability q, clips each
included record's whole-model gradient to ℓ2 norm C, adds N(0, σ²C²) to the sum of the
clipped gradients on every parameter, and divides by the expected batch size q·N; Adam
then applies the privatised gradient (post-processing). The per-record gradients come from
``torch.func`` (``vmap`` over ``grad`` of a ``functional_call``) rather than from Opacus:
they are exact for any ``torch.nn`` module, the LM's own attention and tied embeddings
included, where Opacus needs a per-sample-gradient rule for each layer type (GPT-2's
``Conv1D`` has none in Opacus 1.6). The run returns the :class:`~dpaudit.records.DPSGDRecord`
of what it executed, which the accountant reads.

Canaries follow Panda et al., "Privacy Auditing of Large Language Models", ICLR 2025,
arXiv:2503.06808, §3 (new-token canaries): canary i is a prefix drawn like the training
text followed by a token ``<canary-i>`` added to the vocabulary that no other record
contains, so only canary i's gradient raises that token's output row; its score is the
final model's log-probability of ``<canary-i>`` after its prefix (``log-prob``).

The canary's training loss is its secret token's alone by default, its prefix a prompt
that is read but not learned (labels −100 on the prefix, as supervised fine-tuning masks
a prompt). Clipping bounds the record's whole gradient by C, so a loss averaged over the
prefix too spends most of C on the prefix's tokens: on the tiny model the secret token's
own output row holds about 60 % of the clipped gradient's squared norm with the secret's
loss alone, about 12 % with the mean over all the canary's tokens. It does not touch
validity: the canary is still one record included by a fair coin, the trainer the same
DP-SGD, and the score a function of the released model.

``calibrated`` scores log p(⟨canary-i⟩ | prefix_i) minus the mean of
log p(⟨canary-j⟩ | prefix_i) over the other canaries' tokens j: the normaliser of prefix
i and the push-down every record's gradient gives all new tokens alike cancel. On the
tiny model's prefixes, which all end alike, it measured no stronger than ``log-prob``
(docs/language-models.md); it is there for models whose prefixes differ more.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from dpaudit.errors import ConfigError
from dpaudit.language.loading import CausalLM
from dpaudit.records import DPSGDRecord
from dpaudit.training.engine import one_intra_op_thread

__all__ = [
    "CANARY_SCORES",
    "DPFineTuning",
    "add_tokens",
    "canary_scores",
    "canary_tokens",
    "dp_finetune",
    "per_record_gradients",
]

#: The canary scores: ``log-prob`` (the default) and ``calibrated``.
CANARY_SCORES = ("log-prob", "calibrated")


def canary_tokens(m: int) -> list[str]:
    """The m new tokens, one per canary."""
    return [f"<canary-{i}>" for i in range(m)]


@dataclass(frozen=True)
class DPFineTuning:
    """What one DP fine-tuning run does.

    Attributes:
        noise_multiplier: σ the run is configured with.
        clipping_norm: C.
        sampling_rate: q, each record's Poisson inclusion probability per step.
        steps: T.
        learning_rate: Adam's step size.
        noise_fraction: the share of σ the run adds (1: correct; 0.1 divides the noise by
            10, for testing). The record states the noise that ran, σ·noise_fraction.
    """

    noise_multiplier: float
    clipping_norm: float
    sampling_rate: float
    steps: int
    learning_rate: float
    noise_fraction: float = 1.0


def _loss_fn(
    lm: CausalLM,
) -> Callable[[dict[str, torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]:
    model = lm.model

    def loss(
        params: dict[str, torch.Tensor], ids: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        # An explicit all-ones mask: right padding sits after a record's last token, which
        # causal attention never lets an earlier position see (and it keeps transformers
        # from inspecting the ids for padding, a data-dependent branch vmap refuses).
        mask = torch.ones_like(ids)[None]
        logits = functional_call(model, params, (ids[None],), {"attention_mask": mask}).logits
        # the mean NLL of the record's tokens 1..T given their prefixes (labels −100: padding)
        return torch.nn.functional.cross_entropy(logits[0, :-1], labels[1:], ignore_index=-100)

    return loss


def add_tokens(lm: CausalLM, tokens: Sequence[str]) -> list[int]:
    """Add ``tokens`` to a loaded model's tokenizer as whole tokens and grow its embedding
    (and a tied output layer) to match; the new rows are drawn as the model initialises
    its embeddings.

    Returns:
        The new tokens' ids, in order.

    Raises:
        ConfigError: a token is already in the vocabulary (a canary token must be new).
    """
    vocabulary = lm.tokenizer.get_vocab()
    known = [t for t in tokens if t in vocabulary]
    if known:
        raise ConfigError(f"the model's tokenizer already has the canary token {known[0]!r}")
    lm.tokenizer.add_tokens(list(tokens))
    lm.model.resize_token_embeddings(len(lm.tokenizer), mean_resizing=False)
    ids = lm.tokenizer.convert_tokens_to_ids(list(tokens))
    return [int(i) for i in ids]


def _padded(
    rows: Sequence[Sequence[int]], width: int, prompts: Sequence[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids, and labels −100 on the padding and on each row's first
    ``prompts[b]`` tokens (a prompt is read, not learned)."""
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(list(r))
        start = 0 if prompts is None else prompts[b]
        labels[b, start : len(r)] = torch.tensor(list(r)[start:])
    return ids, labels


def per_record_gradients(
    lm: CausalLM, records: Sequence[Sequence[int]], *, prompts: Sequence[int] | None = None
) -> dict[str, torch.Tensor]:
    """Each record's gradient of its mean token NLL, per parameter (leading dimension: the
    record), as :func:`dp_finetune` computes them (right padding ignored; a record's
    first ``prompts[i]`` tokens are context only)."""
    width = max(len(r) for r in records)
    ids, labels = _padded(records, width, prompts)
    device = torch.device(lm.device)
    params = {k: v.detach() for k, v in lm.model.named_parameters()}
    out: dict[str, torch.Tensor] = vmap(grad(_loss_fn(lm)), in_dims=(None, 0, 0))(
        params, ids.to(device), labels.to(device)
    )
    return out


def dp_finetune(
    lm: CausalLM,
    records: Sequence[Sequence[int]],
    run: DPFineTuning,
    *,
    seed: int,
    prompts: Sequence[int] | None = None,
) -> DPSGDRecord:
    """Fine-tune ``lm`` in place with DP-SGD on token-id ``records``.

    Every record is right-padded to the longest (labels −100 on the padding, attention
    to the right of a record's end changes none of its logits), so one record's loss is
    what it gets alone.

    Args:
        lm: the model, fine-tuned in place.
        records: each record's token ids.
        run: σ, C, q, T, the learning rate.
        seed: seeds the sampling coins and the noise.
        prompts: per record, how many of its first tokens are a prompt: read as context,
            never a target of the loss (None: every token after the first is a target).

    Returns:
        The record of what ran (the σ it added, q, T, C, Poisson sampling, N).
    """
    if not records:
        raise ConfigError("DP fine-tuning needs at least one record")
    device = torch.device(lm.device)
    width = max(len(r) for r in records)
    ids, labels = _padded(records, width, prompts)
    ids, labels = ids.to(device), labels.to(device)
    n = len(records)
    params = {k: v.detach() for k, v in lm.model.named_parameters()}
    per_record = vmap(grad(_loss_fn(lm)), in_dims=(None, 0, 0))
    optimiser = torch.optim.Adam(lm.model.parameters(), lr=run.learning_rate)
    coins = np.random.default_rng([seed, 0xC01])
    noise = torch.Generator(device=device).manual_seed(
        int(np.random.SeedSequence([seed, 0x5EED]).generate_state(1)[0])
    )
    sigma = run.noise_multiplier * run.noise_fraction * run.clipping_norm
    # Evaluation mode: no dropout, so a record's gradient is a function of the parameters
    # alone (the noise is the only randomness besides the sampling coins).
    lm.model.eval()
    with one_intra_op_thread(device):
        for _ in range(run.steps):
            batch = np.flatnonzero(coins.random(n) < run.sampling_rate)
            total = {k: torch.zeros_like(v) for k, v in params.items()}
            if batch.size:
                idx = torch.as_tensor(batch, device=device)
                grads = per_record(params, ids[idx], labels[idx])
                norms = torch.sqrt(
                    sum((g.reshape(g.shape[0], -1) ** 2).sum(1) for g in grads.values())
                )
                scale = (run.clipping_norm / (norms + 1e-12)).clamp(max=1.0)
                for k, g in grads.items():
                    total[k] = (g * scale.view(-1, *([1] * (g.dim() - 1)))).sum(0)
            for k, p in lm.model.named_parameters():
                z = torch.randn(p.shape, generator=noise, device=device, dtype=p.dtype)
                p.grad = (total[k] + sigma * z) / (run.sampling_rate * n)
            optimiser.step()
            params = {k: v.detach() for k, v in lm.model.named_parameters()}
    return DPSGDRecord(
        noise_multiplier=run.noise_multiplier * run.noise_fraction,
        sampling_rate=run.sampling_rate,
        steps=run.steps,
        clipping_norm=run.clipping_norm,
        sampling="poisson",
        dataset_size=n,
    )


def canary_scores(
    lm: CausalLM, canaries: Sequence[Sequence[int]], *, score: str = "log-prob"
) -> np.ndarray:
    """Each canary's score under the model (float64), the secret being its last token.

    ``log-prob``: log p(secret_i | prefix_i). ``calibrated``: that minus the mean of
    log p(secret_j | prefix_i) over the other canaries' secrets j ≠ i (module docstring).

    Raises:
        ConfigError: an unknown score, or ``calibrated`` with fewer than 2 canaries.
    """
    if score not in CANARY_SCORES:
        raise ConfigError(
            f"The canary score must be one of {', '.join(CANARY_SCORES)}. Got {score!r} instead."
        )
    if score == "calibrated" and len(canaries) < 2:
        raise ConfigError("the calibrated canary score needs at least 2 canaries")
    secrets = torch.tensor([row[-1] for row in canaries])
    out = np.empty(len(canaries))
    device = torch.device(lm.device)
    with torch.inference_mode(), one_intra_op_thread(device):
        for i, row in enumerate(canaries):
            x = torch.tensor([list(row[:-1])], device=device)
            logits = lm.model(input_ids=x).logits[0, -1].double()
            logp = torch.log_softmax(logits, dim=-1).cpu()
            out[i] = float(logp[row[-1]])
            if score == "calibrated":
                others = (float(logp[secrets].sum()) - out[i]) / (len(canaries) - 1)
                out[i] -= others
    return out
