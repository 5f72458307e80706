"""The one-run audit of DP fine-tuning of a causal LM (``[dpsgd.language]``).

One unit runs it all: a tiny GPT-2-style model with m new tokens is built from a config
and pre-trained without DP on public text; each of the m new-token canaries is included
by an independent fair coin; the model is fine-tuned ONCE with DP-SGD on the private
text and the included canaries (:func:`dpaudit.language.finetune.dp_finetune`), and each
canary is scored by the final model's log-probability of its new token after its prefix.

The summary reads the one-run ε bound (Steinke, Nasr, Jagielski 2023, Thm. 3.1: the top
r/2 scores guessed in, the bottom r/2 out) and the f-DP one-run μ bound (Mahloujifar,
Melis, Chaudhuri 2025) under ONE share of the verdict's budget
(:func:`dpaudit.bounds.fdp_one_run.one_run_bounds`), held against the accountant of the run's
record (its ε at the audit's δ, and the high end of its μ bracket); the stronger of the
two decides. Why it is valid: each canary is one training record, included by a fair
coin independent of everything else, and DP-SGD with Poisson sampling is (ε, δ)-DP (and
μ-GDP to the bracket's tail) with respect to adding or removing one record, at the
accountant's values for the record's (σ, q, T); the score is a function of the released
model alone. Those are the premises of both theorems, whatever the model or the score.
A stated ``claim_epsilon`` is held against the same record by the deterministic claim
check (:func:`dpaudit.accounting.upper_bounds.check_claim`), which takes no share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dpaudit.accounting.upper_bounds import Claim, check_claim, from_records
from dpaudit.bounds.fdp_one_run import one_run_bounds, stronger
from dpaudit.dpsgd.language_schema import LanguageFineTuningSection
from dpaudit.kinds.base import KindSummary, Outputs, RunContext, UnitPlan
from dpaudit.language.finetune import DPFineTuning, canary_scores, canary_tokens, dp_finetune
from dpaudit.language.tiny import build_tiny_lm, generate_texts, train_plain
from dpaudit.records import DPSGDRecord
from dpaudit.results import Check, paired_comparisons, score_summary
from dpaudit.sections import Table

__all__ = ["LANGUAGE_UNIT", "LanguageRunSpec", "language_plan", "language_summary", "language_unit"]

#: The one unit of the audit.
LANGUAGE_UNIT = "dpsgd-language-one-run"
#: The deterministic gate check of a stated claim against the run's record.
CLAIM_CHECK = "claim_vs_records"
# Seeds of each purpose, drawn from the audit seed (never reused across purposes).
_INIT, _PUBLIC, _PRIVATE, _PREFIX, _COINS, _RUN = range(6)


class LanguageRunSpec(Table):
    """What the unit receives: the table and the audit seed (the device is not in the
    unit's key: it changes where the run happens, not what it is)."""

    section: LanguageFineTuningSection
    seed: int


def _seed(seed: int, purpose: int) -> int:
    return int(np.random.SeedSequence([seed, 0x1A6, purpose]).generate_state(1)[0])


def language_unit(spec: LanguageRunSpec, unit: str) -> dict[str, np.ndarray]:
    """Pre-train, fine-tune once with DP-SGD and the coin-flipped canaries, score them."""
    s, seed = spec.section, spec.seed
    tokens = canary_tokens(s.canaries)
    lm = build_tiny_lm(seed=_seed(seed, _INIT), extra_tokens=tokens)
    lm = type(lm)(model=lm.model.to(s.device), tokenizer=lm.tokenizer, folder="", device=s.device)
    if s.public_texts and s.pretrain_epochs:
        public = generate_texts(s.public_texts, seed=_seed(seed, _PUBLIC))
        train_plain(lm, public, epochs=s.pretrain_epochs, seed=_seed(seed, _PUBLIC))
    private = generate_texts(s.texts, seed=_seed(seed, _PRIVATE))
    prefixes = generate_texts(s.canaries, seed=_seed(seed, _PREFIX), sentences=1)
    canaries = [
        list(lm.tokenizer(f"{p} {t}")["input_ids"]) for p, t in zip(prefixes, tokens, strict=True)
    ]
    included = np.random.default_rng(_seed(seed, _COINS)).random(s.canaries) < 0.5
    records = [list(lm.tokenizer(t)["input_ids"]) for t in private]
    records += [c for c, inc in zip(canaries, included, strict=True) if inc]
    run = DPFineTuning(
        noise_multiplier=s.noise_multiplier,
        clipping_norm=s.clipping_norm,
        sampling_rate=s.sampling_rate,
        steps=s.steps,
        learning_rate=s.learning_rate,
        noise_fraction=s.noise_fraction,
    )
    record = dp_finetune(lm, records, run, seed=_seed(seed, _RUN))
    return {
        "one_run_scores": canary_scores(lm, canaries),
        "one_run_included": included,
        **DPSGDRecord.to_arrays([record]),
    }


def language_plan(section: LanguageFineTuningSection, context: RunContext) -> UnitPlan:
    """The audit's one unit."""
    spec = LanguageRunSpec(section=section, seed=context.seed)
    return UnitPlan(
        fn=language_unit,
        spec=spec,
        units=(LANGUAGE_UNIT,),
        key_data=spec.model_dump(mode="json", exclude={"section": {"device", "claim_epsilon"}}),
        description="DP fine-tuning a language model with canaries",
    )


def language_summary(
    section: LanguageFineTuningSection, context: RunContext, outputs: Outputs, *, level: float
) -> KindSummary:
    """The run's canary scores, the one-run ε and μ bounds under ONE share at ``level``
    held against the record's accountant, and the claim check."""
    one = outputs[LANGUAGE_UNIT]
    scores = np.asarray(one["one_run_scores"], dtype=np.float64)
    included = np.asarray(one["one_run_included"], dtype=bool)
    records = DPSGDRecord.from_arrays([one])
    upper = from_records(records, context.delta)
    found = one_run_bounds(
        scores,
        included,
        guesses=section.guesses,
        delta=context.delta,
        confidence_level=level,
        with_mu=upper.mu_finite,
        mu_tail=upper.mu_tail,
    )
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
        source="accountant",
        in_verdict=(decides,),
    )
    test = score_summary(
        "dpsgd-language-one-run",
        label,
        scores[~included],
        scores[included],
        confidence_level=context.confidence_level,
        hypotheses=("canary out", "canary in"),
    ).with_details(run=_run_details(section, one))
    return KindSummary(
        tests=(test,),
        comparisons=tuple(comparisons),
        checks=_claim_check(section, records, context.delta),
    )


def _run_details(
    section: LanguageFineTuningSection, one: Mapping[str, np.ndarray]
) -> dict[str, Any]:
    return {
        "canary": section.canary,
        "canaries": section.canaries,
        "included": int(np.sum(one["one_run_included"])),
        "guesses": section.guesses,
        "noise_fraction": section.noise_fraction,
        "trainer": "DP-SGD with torch.func per-record gradients (dpaudit.language.finetune)",
    }


def _claim_check(
    section: LanguageFineTuningSection, records: list[DPSGDRecord], delta: float
) -> tuple[Check, ...]:
    if section.claim_epsilon is None:
        return ()
    found = check_claim(Claim(epsilon=section.claim_epsilon, delta=delta), records, delta=delta)
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
