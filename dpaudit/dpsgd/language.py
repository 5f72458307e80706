"""The one-run audit of DP fine-tuning of a causal LM (``[dpsgd.language]``).

One unit runs it all: a causal LM (a tiny GPT-2-style model built from a config, or the
user's model folder, ``model``) gets m new tokens and is pre-trained without DP on
public text; each of the m new-token canaries is included by an independent fair coin;
the model is fine-tuned ONCE with DP-SGD on the private text, the inserted secrets and
the included canaries (:func:`dpaudit.language.finetune.dp_finetune`), and each canary
is scored on the final model (``score``: its token's log-probability by default).

The summary reads the one-run ε bound (Steinke, Nasr, Jagielski 2023, Thm. 3.1: the top
r/2 scores guessed in, the bottom r/2 out) and the f-DP one-run μ bound (Mahloujifar,
Melis, Chaudhuri 2025) under ONE share of the verdict's budget
(:func:`dpaudit.bounds.fdp_one_run.one_run_bounds`), held against the accountant of the
run's record (its ε at the audit's δ, and the high end of its μ bracket) and, when the
file states one, against the claim of ``[dpsgd.claim]`` (the smaller decides, as in the
many-run audit); the stronger of the two bounds decides. Why it is valid: each canary is
one training record, included by a fair coin independent of everything else, and DP-SGD
with Poisson sampling is (ε, δ)-DP (and μ-GDP to the bracket's tail) with respect to
adding or removing one record, at the accountant's values for the record's (σ, q, T);
the score is a function of the released model alone. Those are the premises of both
theorems, whatever the model or the score. The claim is also held against the same
record by the deterministic claim check
(:func:`dpaudit.accounting.upper_bounds.check_claim`), which takes no share. The claim is
no input: it is read at summary time and is in no unit key.

Secrets (``secrets``): the Secret Sharer's exposure of each inserted secret, its rank
among every candidate of its format (or a uniform sample of them), reported with the
test; exposure takes no share of the budget and decides nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit.accounting.upper_bounds import Claim, check_claim, from_records
from dpaudit.bounds.exposure import Exposure, estimated_exposure, exposure
from dpaudit.bounds.fdp_one_run import one_run_bounds, stronger
from dpaudit.dpsgd.language_schema import LanguageFineTuningSection
from dpaudit.dpsgd.summary import _many_run_upper
from dpaudit.kinds.base import KindSummary, Outputs, RunContext, UnitPlan
from dpaudit.language.finetune import (
    DPFineTuning,
    add_tokens,
    canary_scores,
    canary_tokens,
    dp_finetune,
)
from dpaudit.language.loading import CausalLM, load_causal_lm, weight_files
from dpaudit.language.scoring import total_log_probs
from dpaudit.language.secrets import candidate_digits, draw_secrets, fill, format_words
from dpaudit.language.tiny import build_tiny_lm, generate_texts, train_plain, vocabulary
from dpaudit.records import DPSGDRecord
from dpaudit.results import Check, paired_comparisons, score_summary
from dpaudit.sections import ClaimSection, Table

__all__ = [
    "LANGUAGE_UNIT",
    "FineTuned",
    "LanguageRunSpec",
    "candidate_seed",
    "fine_tune",
    "language_plan",
    "language_summary",
    "language_unit",
]

#: The one unit of the audit.
LANGUAGE_UNIT = "dpsgd-language-one-run"
#: The deterministic gate check of a stated claim against the run's record.
CLAIM_CHECK = "claim_vs_records"
#: The key that names a user's model folder, in messages.
MODEL_KEY = "[dpsgd.language] model"
# Seeds of each purpose, drawn from the audit seed (never reused across purposes).
_INIT, _PUBLIC, _PRIVATE, _PREFIX, _COINS, _RUN, _SECRETS, _CANDIDATES = range(8)


class LanguageRunSpec(Table):
    """What the unit receives: the table, the audit seed, the user's model folder and
    the digest of its files, and the device (neither the folder's place nor the device
    is in the unit's key: they change where the run reads and runs, not what it is)."""

    section: LanguageFineTuningSection
    seed: int
    model_path: str | None = None
    model_digest: str | None = None
    device: str = "cpu"

    def key_data(self) -> dict[str, Any]:
        """The unit key: the table and the seed, the model's digest when there is one."""
        out = self.model_dump(mode="json", exclude={"model_path", "device"})
        out["section"].pop("model")
        if self.model_digest is None:
            out.pop("model_digest")
        return out


def _seed(seed: int, purpose: int) -> int:
    return int(np.random.SeedSequence([seed, 0x1A6, purpose]).generate_state(1)[0])


def candidate_seed(seed: int) -> int:
    """The seed of the uniform sample of a secret format's candidates, from the audit's."""
    return _seed(seed, _CANDIDATES)


def _folder_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for f in weight_files(folder):
        h.update(str(f.relative_to(folder)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class FineTuned:
    """One fine-tuning run: the final model, the canaries (token ids, secret last), their
    coins, the record of what ran and the inserted secrets' digits."""

    lm: CausalLM
    canaries: list[list[int]]
    included: np.ndarray
    record: DPSGDRecord
    secrets: list[str]


def _model(spec: LanguageRunSpec, tokens: list[str]) -> tuple[CausalLM, list[int]]:
    """The model to fine-tune, with the canaries' new tokens, and those tokens' ids."""
    s = spec.section
    if spec.model_path is not None:
        lm = load_causal_lm(Path(spec.model_path), device=spec.device, key=MODEL_KEY, eager=True)
        # the new embedding rows are drawn by torch's generator: seeded, the caller's kept
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_seed(spec.seed, _INIT))
            ids = add_tokens(lm, tokens)
        return lm, ids
    known = set(vocabulary())
    words = [w for w in format_words(s.secret_format) if w not in known] if s.secrets else []
    lm = build_tiny_lm(seed=_seed(spec.seed, _INIT), extra_tokens=[*words, *tokens])
    lm = CausalLM(
        model=lm.model.to(spec.device), tokenizer=lm.tokenizer, folder="", device=spec.device
    )
    return lm, [int(i) for i in lm.tokenizer.convert_tokens_to_ids(tokens)]


def fine_tune(spec: LanguageRunSpec) -> FineTuned:
    """Pre-train, then fine-tune once with DP-SGD, the secrets and the coin-flipped
    canaries (the canary's prefix a prompt when ``canary_loss = "secret"``)."""
    s, seed = spec.section, spec.seed
    tokens = canary_tokens(s.canaries)
    lm, token_ids = _model(spec, tokens)
    if s.public_texts and s.pretrain_epochs:
        public = generate_texts(s.public_texts, seed=_seed(seed, _PUBLIC))
        train_plain(lm, public, epochs=s.pretrain_epochs, seed=_seed(seed, _PUBLIC))
    private = generate_texts(s.texts, seed=_seed(seed, _PRIVATE))
    secrets = draw_secrets(s.secret_format, s.secrets, seed=_seed(seed, _SECRETS))
    private += [fill(s.secret_format, d) for d in secrets for _ in range(s.secret_repeats)]
    prefixes = generate_texts(s.canaries, seed=_seed(seed, _PREFIX), sentences=1)
    canaries = [
        [*lm.tokenizer(p)["input_ids"], t] for p, t in zip(prefixes, token_ids, strict=True)
    ]
    included = np.random.default_rng(_seed(seed, _COINS)).random(s.canaries) < 0.5
    records = [list(lm.tokenizer(t)["input_ids"]) for t in private]
    prompts = [0] * len(records)
    for c, inc in zip(canaries, included, strict=True):
        if inc:
            records.append(c)
            prompts.append(len(c) - 1 if s.canary_loss == "secret" else 0)
    run = DPFineTuning(
        noise_multiplier=s.noise_multiplier,
        clipping_norm=s.clipping_norm,
        sampling_rate=s.sampling_rate,
        steps=s.steps,
        learning_rate=s.learning_rate,
        noise_fraction=s.noise_fraction,
    )
    record = dp_finetune(lm, records, run, seed=_seed(seed, _RUN), prompts=prompts)
    return FineTuned(lm, canaries, included, record, secrets)


def secret_arrays(spec: LanguageRunSpec, done: FineTuned) -> dict[str, np.ndarray]:
    """The secrets' and their candidates' log-perplexities (nats, −log p of the whole
    text): every candidate of the format when there are at most ``exposure_samples``,
    else that many drawn uniformly."""
    s = spec.section
    digits, exact = candidate_digits(
        s.secret_format, limit=s.exposure_samples, seed=candidate_seed(spec.seed)
    )
    candidates = -total_log_probs(done.lm, [fill(s.secret_format, d) for d in digits])
    if exact:  # the secret's own score is its candidate's: one number for one text
        secret = candidates[[int(d) for d in done.secrets]]
    else:
        secret = -total_log_probs(done.lm, [fill(s.secret_format, d) for d in done.secrets])
    return {
        "secret_digits": np.array(done.secrets, dtype=str),
        "secret_nll": secret,
        "candidate_nll": candidates,
        "candidates_exact": np.array(exact),
    }


def language_unit(spec: LanguageRunSpec, unit: str) -> dict[str, np.ndarray]:
    """Fine-tune once (:func:`fine_tune`), score the canaries and the secrets."""
    done = fine_tune(spec)
    out = {
        "one_run_scores": canary_scores(done.lm, done.canaries, score=spec.section.score),
        "one_run_included": done.included,
        "model": np.array(_describe(done.lm, spec)),
        **DPSGDRecord.to_arrays([done.record]),
    }
    if spec.section.secrets:
        out |= secret_arrays(spec, done)
    return out


def _describe(lm: CausalLM, spec: LanguageRunSpec) -> str:
    config = lm.model.config
    return (
        f"{type(lm.model).__name__}, {sum(p.numel() for p in lm.model.parameters())} "
        f"parameters, vocabulary {config.vocab_size}"
        + (", the user's folder" if spec.model_path is not None else ", built-in tiny")
        + f", on {spec.device}"
    )


def language_plan(section: LanguageFineTuningSection, context: RunContext) -> UnitPlan:
    """The audit's one unit."""
    path = None if section.model is None else context.resolve(section.model)
    if path is not None:
        # a folder that does not load is refused before anything runs, in the loader's
        # own one line (the unit loads it again: a plan holds no model)
        load_causal_lm(path, key=MODEL_KEY)
    spec = LanguageRunSpec(
        section=section,
        seed=context.seed,
        model_path=None if path is None else str(path),
        model_digest=None if path is None else _folder_digest(path),
        device=context.device,
    )
    return UnitPlan(
        fn=language_unit,
        spec=spec,
        units=(LANGUAGE_UNIT,),
        key_data=spec.key_data(),
        description="DP fine-tuning a language model with canaries",
    )


def language_summary(
    section: LanguageFineTuningSection,
    context: RunContext,
    outputs: Outputs,
    *,
    level: float,
    claim: ClaimSection | None = None,
) -> KindSummary:
    """The run's canary scores, the one-run ε and μ bounds under ONE share at ``level``
    held against the record's accountant and the ``[dpsgd.claim]`` (the smaller), the
    claim check, and the secrets' exposure."""
    one = outputs[LANGUAGE_UNIT]
    scores = np.asarray(one["one_run_scores"], dtype=np.float64)
    included = np.asarray(one["one_run_included"], dtype=bool)
    records = DPSGDRecord.from_arrays([one])
    stated = None if claim is None else Claim(epsilon=claim.epsilon, delta=claim.delta, mu=claim.mu)
    # the accountant of what ran and the claim, both held: the smaller decides (the
    # many-run audit's rule, dpaudit.dpsgd.summary); never None for one stored unit
    upper = _many_run_upper([one], context.delta, claim=stated, source="[dpsgd.claim]")
    if upper is None:
        raise ValueError("the fine-tuning unit stores no record")
    found = one_run_bounds(
        scores,
        included,
        guesses=section.guesses,
        delta=context.delta,
        confidence_level=level,
        with_mu=upper.mu_finite,
        mu_tail=upper.mu_tail,
    )
    accountant = from_records(records, context.delta)
    eps_source = "accountant ε" if upper.epsilon == accountant.epsilon else "[dpsgd.claim] ε"
    mu_source = "accountant μ" if upper.mu == accountant.mu else "[dpsgd.claim] μ"
    label = f"one run, {section.canaries} new-token canaries, DP fine-tuning of a causal LM"
    decides = stronger(
        (found.epsilon.value, upper.epsilon),
        None if found.mu is None else (found.mu.value, upper.mu),
    )
    comparisons = paired_comparisons(
        label,
        found.epsilon,
        found.mu,
        upper_epsilon=upper.epsilon,
        upper_mu=upper.mu,
        source=(eps_source, mu_source),
        in_verdict=(decides,),
    )
    details = _run_details(section, one)
    if "secret_nll" in one:
        details["exposure"] = exposure_rows(section, one, context.confidence_level)
    test = score_summary(
        "dpsgd-language-one-run",
        label,
        scores[~included],
        scores[included],
        confidence_level=context.confidence_level,
        hypotheses=("canary out", "canary in"),
    ).with_details(run=details)
    return KindSummary(
        tests=(test,),
        comparisons=tuple(comparisons),
        checks=_claim_check(stated, records, context.delta),
    )


def exposure_rows(
    section: LanguageFineTuningSection, one: Mapping[str, np.ndarray], confidence_level: float
) -> list[dict[str, Any]]:
    """Each secret's rank and exposure in bits (exact when its candidate space was
    enumerated, else estimated with its Clopper–Pearson interval)."""
    candidates = np.asarray(one["candidate_nll"], dtype=np.float64)
    exact = bool(np.asarray(one["candidates_exact"]))
    rows = []
    for digits, nll in zip(
        np.asarray(one["secret_digits"]).tolist(),
        np.asarray(one["secret_nll"], dtype=np.float64),
        strict=True,
    ):
        found: Exposure
        if exact:
            found = exposure(float(nll), np.delete(candidates, int(digits)))
        else:
            found = estimated_exposure(
                float(nll),
                candidates,
                space_size=section.space_size,
                confidence_level=confidence_level,
            )
        rows.append(
            {
                "secret": fill(section.secret_format, str(digits)),
                "repeats": section.secret_repeats,
                "log_perplexity": float(nll),
                "space_size": found.space_size,
                "candidates_scored": int(candidates.size),
                "rank": found.rank,
                "exposure": found.value,
                "interval": [found.interval.low, found.interval.high],
                "confidence_level": found.confidence_level,
                "method": found.method,
            }
        )
    return rows


def _run_details(
    section: LanguageFineTuningSection, one: Mapping[str, np.ndarray]
) -> dict[str, Any]:
    return {
        "canary": section.canary,
        "canaries": section.canaries,
        "included": int(np.sum(one["one_run_included"])),
        "guesses": section.guesses,
        "canary_loss": section.canary_loss,
        "score": section.score,
        "noise_fraction": section.noise_fraction,
        "model": str(np.asarray(one["model"])) if "model" in one else None,
        "trainer": "DP-SGD with torch.func per-record gradients (dpaudit.language.finetune)",
    }


def _claim_check(
    claim: Claim | None, records: list[DPSGDRecord], delta: float
) -> tuple[Check, ...]:
    if claim is None:
        return ()
    found = check_claim(claim, records, delta=delta)
    if found is None:
        return ()
    finding = "" if found.holds else f"{found.message} (read from the run's own record)"
    return (
        Check(
            CLAIM_CHECK,
            found.floor,
            found.stated,
            found.holds,
            f"{found.message} (deterministic)",
            finding=finding,
        ),
    )
