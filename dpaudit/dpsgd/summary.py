"""From the stored units to the dpsgd kind's tests, comparisons and grey-box checks.

The scores of the two arms of the many-run units are independent trials of H0 (canary
out) and H1 (canary in), so their ε and μ lower bounds (:mod:`dpaudit.bounds`) are
``rigorous-multi-run``. They are held against the upper bounds read from what the trainer
says it RAN (its DPSGDRecords through the accountant, or its Claim, or both:
:mod:`dpaudit.accounting.upper_bounds`). The one run is held against its own accountant ε
(:mod:`dpaudit.dpsgd.one_run`), and the grey-box tests of the run's internals
(:mod:`dpaudit.bounds.greybox`) become gate checks.

When the trainer states a claim beside its records of what ran, the claim is held
against the tight accountant of those records (:func:`dpaudit.accounting.upper_bounds.check_claim`):
a claim below what ran allows is a failed check from the records alone, which cannot
fail by chance and takes no share of the budget. With it, even one model per arm decides
something: too few models for any canary bound leave the bounds out, not the audit.

What enters the verdict is decided once, by :func:`in_verdict`: the kind's
``comparisons`` counts that list before any bound is computed, and :func:`summarise`
puts exactly the listed comparisons and checks into the verdict.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from dpaudit.accounting.upper_bounds import Claim, UpperBound, check_claim, from_claim, from_records
from dpaudit.bounds import (
    EpsilonBound,
    MuBound,
    design_can_bound,
    epsilon_lower_bound,
    mu_bound_against_bracket,
    mu_lower_bound,
)
from dpaudit.bounds.claim_curve import claim_curve_epsilon
from dpaudit.bounds.greybox import GreyBoxObservations, GreyBoxTest, greybox_tests
from dpaudit.dpsgd.one_run import ONE_RUN_UNIT, one_run_comparisons
from dpaudit.dpsgd.schema import ENGINE_TRAINERS, DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.setup import _setup, resolve_canary_direction, worst_case_details
from dpaudit.dpsgd.units import CHECKPOINTS_KEY, trainer_libraries
from dpaudit.kinds.base import KindSummary, Outputs, RunContext
from dpaudit.planning.last_iterate import last_iterate_details
from dpaudit.records import DPSGDRecord
from dpaudit.results import (
    Check,
    Comparison,
    TestSummary,
    gdp_implied_comparison,
    null_result_warning,
    paired_comparisons,
    score_summary,
    theory_curves,
)
from dpaudit.trainers.protocol import TrainerMessages

__all__ = [
    "StoredUnits",
    "checkpoint_views",
    "count_in_verdict",
    "in_verdict",
    "most_in_verdict",
    "read_units",
    "summarise",
]

#: Built-in trainers that run no DP-SGD: the grey-box checks do not apply to them.
_NOT_DPSGD = (
    "output-perturbation",
    "multiparty",
    "multiparty-gradient",
    "plain",
    "gradient-laplace",
)
#: The grey-box tests that can fail by chance, so take a share when evaluated
#: (:attr:`dpaudit.bounds.greybox.GreyBoxTest.chance`); clipping and steps are deterministic.
_CHANCE_GREYBOX = ("greybox_batch_sizes", "greybox_noise")
#: The names :func:`in_verdict` gives the many-run and one-run comparisons.
_MANY_EPSILON, _MANY_MU = "many-run epsilon", "many-run mu"
#: The many-run scores held against the accountant's own trade-off curve of what ran.
_MANY_CURVE = "many-run claim curve"
_ONE_RUN = "one-run epsilon or mu"
#: The gate check of a stated claim against what ran (deterministic, no budget share).
CLAIM_CHECK = "claim_vs_records"


@dataclass(frozen=True)
class StoredUnits:
    """The stored units of a dpsgd audit, read once, with what they are held against.

    Attributes:
        many: the many-run units' arrays, in unit order.
        one: the one-run unit's arrays (``None`` without ``[dpsgd.one_run]``).
        upper: the upper bound read from what the many-run models ran (``None`` without
            many-run units).
        greybox: every grey-box test of the many-run units.
        canary_bounds: whether the many-run canary bounds are computed: False only when
            the models per arm are too few for any bound above 0 and a stated claim is
            held against the records instead (:func:`_too_few_for_a_bound`).
        claim: the claim held against what ran: ``[dpsgd.claim]``, else the one the
            trainer stated in its units (:func:`stated_claim`), else ``None``.
    """

    many: tuple[Mapping[str, np.ndarray], ...]
    one: Mapping[str, np.ndarray] | None
    upper: UpperBound | None
    greybox: tuple[GreyBoxTest, ...]
    canary_bounds: bool = True
    claim: Claim | None = None

    @property
    def claim_and_records(self) -> bool:
        """Whether the units carry records of what ran and a claim is stated."""
        return self.claim is not None and bool(self.many) and "noise_multiplier" in self.many[0]

    @property
    def trials_per_arm(self) -> int:
        """The fewer of the two arms' models (0 without many-run units)."""
        if not self.many:
            return 0
        inc = np.concatenate([p["included"] for p in self.many]).astype(bool)
        return int(min(inc.sum(), (~inc).sum()))


def read_units(s: DpsgdSection, outputs: Outputs, *, delta: float) -> StoredUnits:
    """Split the stored units into the many-run and one-run ones; read their upper bound
    and grey-box tests.

    Read once per run: the kind's ``comparisons`` and ``summarise`` both need it, and the
    audit's stored units keep it (:meth:`dpaudit.store.StoredOutputs.memo`).
    """
    memo = getattr(outputs, "memo", None)
    if memo is None:
        return _read_units(s, outputs, delta=delta)
    key = ("dpsgd.read_units", s.model_dump_json(), delta)
    return cast(StoredUnits, memo(key, lambda: _read_units(s, outputs, delta=delta)))


def _read_units(s: DpsgdSection, outputs: Outputs, *, delta: float) -> StoredUnits:
    many = [outputs[u] for u in sorted(outputs) if u != ONE_RUN_UNIT]
    claim = stated_claim(s, many)
    stored = StoredUnits(
        tuple(many),
        outputs.get(ONE_RUN_UNIT),
        _many_run_upper(many, delta, claim=claim, source=claim_source(s)),
        _greybox_tests(s, many),
        claim=claim,
    )
    if stored.claim_and_records and _too_few_for_a_bound(s, stored.trials_per_arm, delta):
        return replace(stored, canary_bounds=False)
    return stored


def _too_few_for_a_bound(s: DpsgdSection, trials: int, delta: float) -> bool:
    """Whether ``trials`` models per arm can give no canary ε bound above 0 at any
    confidence level of 0.5 or more, whatever the attack.

    The rule of :func:`dpaudit.bounds.minimum_trials` on the trials that are counted
    (half of them with ``threshold = "split"``; all with ``"bonferroni"``, each rate at
    1 − (1 − c)/(2(n + 1))): zero errors in n give the upper limit u = 1 − a^(1/n), and
    the bound is positive iff 1 − δ − u > u. At c = 0.5, the least confidence a verdict
    would state, a design this small proves nothing at any higher c either, so it is
    decided without knowing the verdict's per-bound level.
    """
    return not design_can_bound(trials, delta=delta, confidence_level=0.5, threshold=s.threshold)


def in_verdict(stored: StoredUnits) -> tuple[str, ...]:
    """Every comparison and check that takes a share of the verdict's budget, by name.

    The kind's ``comparisons`` is the length of this list; :func:`summarise` marks as in
    the verdict exactly what it lists.
    """
    listed: list[str] = []
    if stored.upper is not None and stored.canary_bounds:
        # An infinite claim (the plain trainer's ε = ∞) can never be violated: it is
        # reported but kept out of the verdict, so it takes no share of the budget.
        listed += [_MANY_EPSILON] if stored.upper.epsilon_finite else []
        listed += [_MANY_MU] if stored.upper.mu_finite else []
        # The same scores against the whole curve of what ran (dpaudit.bounds.claim_curve): one
        # more share, so the three many-run comparisons hold jointly (union bound).
        listed += [_MANY_CURVE] if _curve_record(stored) is not None else []
    if stored.one is not None:
        # ONE share for the one run: its ε and μ bounds split it in halves and the
        # stronger of the two enters the verdict (dpaudit.dpsgd.one_run)
        listed.append(_ONE_RUN)
    # Each grey-box p-value test is one comparison of the budget (it fails when
    # p < (1 − c)/k); deterministic checks cannot fail by chance and take no share.
    listed += [t.check for t in stored.greybox if t.chance and t.evaluated]
    return tuple(listed)


def checkpoint_views(outputs: Outputs) -> list[tuple[int | None, Outputs]]:
    """The stored units as one audit per released model: ``[(None, outputs)]`` for one
    model per run, ``[(t, units of θ_t), ...]`` for ``checkpoint = [t₁, t₂, ...]``.

    A unit of several checkpoints stores θ_t's arrays under ``"<name>@t"`` (and the arm
    flags once); the view of θ_t has them under their plain names, so every checkpoint is
    summarised by the same code as a single model. Each is a test of its own: its
    comparisons take their own shares of the verdict's budget (Bonferroni over the
    checkpoints, which are dependent: they come from one run).
    """
    many = sorted(u for u in outputs if u != ONE_RUN_UNIT)
    if not many or CHECKPOINTS_KEY not in outputs[many[0]]:
        return [(None, outputs)]
    steps = [int(t) for t in outputs[many[0]][CHECKPOINTS_KEY]]
    return [(t, {u: _at_checkpoint(outputs[u], t) for u in many}) for t in steps]


def _at_checkpoint(arrays: Mapping[str, np.ndarray], t: int) -> dict[str, np.ndarray]:
    suffix = f"@{t}"
    view = {k.removesuffix(suffix): v for k, v in arrays.items() if k.endswith(suffix)}
    view["included"] = arrays["included"]
    return view


def count_in_verdict(s: DpsgdSection, outputs: Outputs, *, delta: float) -> int:
    """How many comparisons and checks :func:`summarise` puts into the verdict: the sum
    of :func:`in_verdict` over the released models (one per checkpoint)."""
    return sum(
        len(in_verdict(read_units(s, view, delta=delta))) for _, view in checkpoint_views(outputs)
    )


def most_in_verdict(s: DpsgdSection) -> int:
    """The most comparisons and checks :func:`in_verdict` can list for this table, from the
    table alone (no unit read): an upper bound on :func:`count_in_verdict` of any run of it.

    Per released model (one per checkpoint of ``checkpoint = [t₁, ...]``, else one):

    - many-run (``trials`` > 0): the ε and the μ bound against what ran (each only when
      that upper bound is finite, and neither when the models are too few for a canary
      bound beside a stated claim), and the claim curve (only when the units carry
      records with σ > 0): at most 3;
    - one run (``[dpsgd.one_run]``): 1, its ε and μ bounds sharing it;
    - grey-box p-value tests of the many-run units (batch sizes and noise, the two that
      can fail by chance), each only when evaluated: at most 2, none for the built-in
      trainers that run no DP-SGD (they report no observations, and their tests are left
      out); the engine's trainers and user trainers may report them.

    The claim-vs-records check is deterministic and takes no share.
    """
    many = 3 if s.trials > 0 else 0
    one = 1 if s.one_run is not None else 0
    greybox = len(_CHANCE_GREYBOX) if s.trials > 0 and s.trainer not in _NOT_DPSGD else 0
    return (many + one + greybox) * len(s.checkpoints or (None,))


def summarise(
    s: DpsgdSection, context: RunContext, outputs: Outputs, *, level: float
) -> KindSummary:
    """Tests, comparisons and grey-box checks of the stored units; in-verdict ones at
    ``level`` (one summary per checkpoint when several models of a run are released)."""
    views = checkpoint_views(outputs)
    said = _trainer_messages(views)
    if views[0][0] is None:
        one = _summarise_model(s, context, outputs, level=level, label=_label(s))
        return replace(one, warnings=one.warnings + said)
    total = s.training.epochs
    parts = [
        _summarise_model(
            s, context, view, level=level, label=f"{_label(s)}, checkpoint θ_{t} of T = {total}"
        )
        for t, view in views
    ]
    return KindSummary(
        tuple(x for p in parts for x in p.tests),
        tuple(x for p in parts for x in p.comparisons),
        (),
        tuple(x for p in parts for x in p.warnings) + said,
        parts[0].data_hash,
        checks=tuple(x for p in parts for x in p.checks),
    )


def _trainer_messages(views: list[tuple[int | None, Outputs]]) -> tuple[str, ...]:
    """What the trainer's user code said over the whole run (every many-run unit, every
    checkpoint's runs), once: one line for what it printed, one per distinct warning with
    its count summed over the units, one for the models whose canary was coined
    (:class:`~dpaudit.trainers.TrainerMessages`)."""
    parts = [view[u] for _, view in views for u in sorted(view) if u != ONE_RUN_UNIT]
    messages = TrainerMessages.from_arrays(parts)
    return () if messages is None else tuple(messages.lines())


def _summarise_model(
    s: DpsgdSection, context: RunContext, outputs: Outputs, *, level: float, label: str
) -> KindSummary:
    """The summary of one released model per run (``label`` names it)."""
    delta = context.delta
    stored = read_units(s, outputs, delta=delta)
    verdict = in_verdict(stored)
    comparisons: list[Comparison] = []
    tests: list[TestSummary] = []
    warnings: list[str] = []
    upper = stored.upper
    if upper is not None and not stored.canary_bounds:
        warnings.append(
            f"{label}: {stored.trials_per_arm} model(s) per arm are too few for any "
            "canary bound above 0, so none is computed; the stated claim is held against "
            f"the records of what ran ({CLAIM_CHECK})."
        )
    elif upper is not None:
        scores = np.concatenate([p["scores"] for p in stored.many])
        inc = np.concatenate([p["included"] for p in stored.many]).astype(bool)
        neg, pos = scores[~inc], scores[inc]
        eps_lb, mu_lb = _many_run_bounds(s, upper, neg, pos, level=level, seed=context.seed)
        comparisons += paired_comparisons(
            label,
            eps_lb,
            mu_lb,
            upper_epsilon=upper.epsilon,
            upper_mu=upper.mu,
            source=upper.source,
            in_verdict=[
                p for p, key in (("epsilon", _MANY_EPSILON), ("mu", _MANY_MU)) if key in verdict
            ],
        )
        if mu_lb.value > 0 and upper.mu is not None and upper.mu_finite:
            # Informational: the ε that μ_LB implies IF the trade-off curve is Gaussian
            # ("assumes-gdp"); the white-box Dirac score of DP-GD is exactly Gaussian.
            comparisons.append(
                gdp_implied_comparison(label, mu_lb, upper.mu, delta=delta, source=upper.source)
            )
        record = _curve_record(stored) if _MANY_CURVE in verdict else None
        seed = context.seed
        if record is not None:
            comparisons.append(
                _claim_curve_comparison(
                    s, record, neg, pos, level=level, delta=delta, seed=seed, label=label
                )
            )
        test = _many_run_test(
            s, upper, neg, pos, mu_lb, context.confidence_level, context.base_dir, label=label
        )
        last = _last_iterate(s, stored, eps_lb, mu_lb, level=level, delta=delta, seed=context.seed)
        if last is not None:
            # Informational (a heuristic reference, never in the verdict): μ_LB and ε_LB
            # beside the last-iterate pair's μ and ε, next to the accountant's rows.
            comparisons += _last_iterate_rows(label, eps_lb, mu_lb, last)
            test = test.with_details(last_iterate=last)
        if s.canary == "worst-case":
            test = test.with_details(
                worst_case=_summary_worst_case(s, context, trials=int(neg.size), level=level)
            )
        tests.append(test)
        if eps_lb.value == 0.0 and mu_lb.value == 0.0:
            warnings.append(null_result_warning(label, f"{neg.size} models per arm", eps_lb))
    if stored.one is not None:
        # ε and μ of the one run share its one share; the stronger enters the verdict
        comparisons += one_run_comparisons(
            stored.one, s, delta=delta, level=level, in_verdict=_ONE_RUN in verdict
        )
    checks = tuple(
        _greybox_check(t, 1.0 - level, in_verdict=t.check in verdict) for t in stored.greybox
    ) + _claim_check(stored, delta, label=None if label == _label(s) else label)
    return KindSummary(
        tuple(tests), tuple(comparisons), (), tuple(warnings), _data_hash(s), checks=checks
    )


# ----------------------------------------------------------------------- upper bounds


def _claim_check(
    stored: StoredUnits, delta: float, *, label: str | None = None
) -> tuple[Check, ...]:
    """The stated claim held against what ran, as a deterministic gate check (none when
    the units carry no claim beside their records, or the claim states nothing finite).

    Its value is what ran has at least, its limit what the claim states: it fails when
    the value is above the limit (:func:`dpaudit.accounting.upper_bounds.check_claim`). ``label``
    names the released model when a run releases several (its words lead the message).
    """
    if stored.claim is None or not stored.claim_and_records:
        return ()
    found = check_claim(stored.claim, DPSGDRecord.from_arrays(stored.many), delta=delta)
    if found is None:
        return ()
    finding = (
        ""
        if found.holds
        else f"{found.message} (read from the run's own records, not from an attack: it "
        "needs no trials and cannot be chance)"
    )
    message = f"{found.message} (deterministic)"
    if label is not None:
        message = f"{label}: {message}"
        finding = f"{label}: {finding}" if finding else ""
    return (Check(CLAIM_CHECK, found.floor, found.stated, found.holds, message, finding=finding),)


def _stored_claim(parts: Sequence[Mapping[str, np.ndarray]]) -> Claim:
    """The claim the units store: the weakest over them (it must cover every model)."""
    # (ε, δ, μ, ρ) per unit; units stored before ρ claims existed hold the first three.
    claims = np.concatenate(
        [
            np.pad(
                p["claim"].reshape(1, -1),
                ((0, 0), (0, 4 - p["claim"].size)),
                constant_values=np.nan,
            )
            for p in parts
        ]
    )

    def largest(column: np.ndarray) -> float | None:
        # The claim must cover every model: keep the weakest (largest) one stated.
        finite_or_inf = column[~np.isnan(column)]
        return float(finite_or_inf.max()) if finite_or_inf.size else None

    return Claim(
        epsilon=largest(claims[:, 0]),
        delta=float(claims[:, 1].max()),
        mu=largest(claims[:, 2]),
        rho=largest(claims[:, 3]),
    )


def stated_claim(s: DpsgdSection, many: Sequence[Mapping[str, np.ndarray]]) -> Claim | None:
    """The claim an audit holds against what ran: ``[dpsgd.claim]`` when the file gives
    one (read at summary time, never stored, so editing it retrains nothing), else the
    claim the trainer stated in its units, else ``None``."""
    if s.claim is not None:
        c = s.claim
        return Claim(epsilon=c.epsilon, delta=c.delta, mu=c.mu)
    if many and "claim" in many[0]:
        return _stored_claim(many)
    return None


def claim_source(s: DpsgdSection) -> str:
    """How the report names the claim's upper bounds: the file's or the trainer's."""
    return "[dpsgd.claim]" if s.claim is not None else "trainer claim"


def _many_run_upper(
    many: Sequence[Mapping[str, np.ndarray]],
    delta: float,
    *,
    claim: Claim | None,
    source: str = "trainer claim",
) -> UpperBound | None:
    if not many:
        return None
    if claim is None:
        # A trainer states records of what ran or a claim (coerce_output): records here.
        return from_records(DPSGDRecord.from_arrays(many), delta)
    stated = from_claim(claim, delta, source=source)
    if "noise_multiplier" in many[0]:
        return _tighter(from_records(DPSGDRecord.from_arrays(many), delta), stated)
    return stated


def _tighter(accountant: UpperBound, claim: UpperBound) -> UpperBound:
    """The accountant's bounds for what ran and a claim, both held: the smaller decides.

    Each must hold on its own, so a lower bound above either proves one of them false:
    comparing with the smaller of the two is the same test as comparing with both, at no
    extra share of the verdict's budget. A claim at δ' ≤ δ also holds at δ ((ε, δ')-DP
    implies (ε, δ)-DP); a claim at a larger δ' says nothing at δ and is only reported.
    """
    use_claim = claim.epsilon_delta <= accountant.epsilon_delta
    eps = claim if use_claim and claim.epsilon < accountant.epsilon else accountant
    mu = claim if claim.mu is not None and claim.mu < (accountant.mu or math.inf) else accountant
    source = eps.source if mu is eps or mu.mu is None else f"{eps.source} (ε), {mu.source} (μ)"
    return UpperBound(
        eps.epsilon,
        accountant.epsilon_delta,
        mu.mu,
        source,
        {**accountant.detail, **claim.detail, "accountant_epsilon": accountant.epsilon},
        mu.mu_tail,
    )


# ----------------------------------------------------------------------- many-run test


def _curve_record(stored: StoredUnits) -> DPSGDRecord | None:
    """The least private of the many-run records (smallest σ, largest q and T), whose
    trade-off curve lies below every model's: the claim-curve test holds against it.
    None without records, or when no finite curve is accounted (σ = 0)."""
    if not stored.many or "noise_multiplier" not in stored.many[0]:
        return None
    records = DPSGDRecord.from_arrays(stored.many)
    sigma = min(r.noise_multiplier for r in records)
    if not (sigma > 0 and math.isfinite(sigma)):
        return None
    q, steps = max(r.sampling_rate for r in records), max(r.steps for r in records)
    return replace(records[0], noise_multiplier=sigma, sampling_rate=q, steps=steps)


def _claim_curve_comparison(
    s: DpsgdSection,
    record: DPSGDRecord,
    neg: np.ndarray,
    pos: np.ndarray,
    *,
    level: float,
    delta: float,
    seed: int,
    label: str | None = None,
) -> Comparison:
    """The scores against the accountant's trade-off curve of what ran, at the verdict's
    per-bound level: an ε above the accountant's means a point below its curve
    (:func:`dpaudit.bounds.claim_curve.claim_curve_epsilon`)."""
    bound, accountant = claim_curve_epsilon(
        neg,
        pos,
        noise_multiplier=record.noise_multiplier,
        sampling_rate=record.sampling_rate,
        steps=record.steps,
        delta=delta,
        confidence_level=level,
        threshold=s.threshold,
        seed=seed,
    )
    return Comparison(
        test=f"{label or _label(s)} (claim curve)",
        parameter="epsilon",
        lower=bound,
        upper=accountant,
        # the lower value reads σ′ through the accounted q and T; the violation does not
        upper_source="accountant's trade-off curve of what ran (ε of the effective σ′)",
        in_verdict=True,
    )


def _many_run_bounds(
    s: DpsgdSection, upper: UpperBound, neg: np.ndarray, pos: np.ndarray, *, level: float, seed: int
) -> tuple[EpsilonBound, MuBound]:
    """The ε and μ lower bounds of the two arms, each at the verdict's per-bound level."""
    eps_lb = epsilon_lower_bound(
        neg,
        pos,
        delta=upper.epsilon_delta,
        confidence_level=level,
        threshold=s.threshold,
        seed=seed,
    )
    mu_lb = mu_lower_bound(neg, pos, confidence_level=level, threshold=s.threshold, seed=seed)
    return eps_lb, mu_bound_against_bracket(mu_lb, upper.mu_tail)


def _many_run_test(
    s: DpsgdSection,
    upper: UpperBound,
    neg: np.ndarray,
    pos: np.ndarray,
    mu_lb: MuBound,
    c: float,
    base_dir: Path | str = ".",
    *,
    label: str | None = None,
) -> TestSummary:
    label = label or _label(s)
    curves = theory_curves(
        epsilon=upper.epsilon, delta=upper.epsilon_delta, mu=upper.mu, label=f"{upper.source}: "
    ) + theory_curves(mu=mu_lb.value if mu_lb.value > 0 else None, label="lower bound: ")
    return score_summary(
        "dpsgd", label, neg, pos, confidence_level=c, hypotheses=("canary out", "canary in")
    ).with_details(
        theory_curves=curves,
        dpsgd={
            "trainer": s.trainer,
            **trainer_libraries(s.trainer, base_dir),
            "canary": s.canary,
            **_direction_details(s, base_dir),
            "threat_model": s.threat_model,
            "trials_per_arm": int(neg.size),
            "upper_bound": {
                "epsilon": upper.epsilon,
                "delta": upper.epsilon_delta,
                "mu": upper.mu,
                "source": upper.source,
                **upper.detail,
            },
        },
    )


def _last_iterate(
    s: DpsgdSection,
    stored: StoredUnits,
    eps_lb: EpsilonBound,
    mu_lb: MuBound,
    *,
    level: float,
    delta: float,
    seed: int,
) -> dict[str, Any] | None:
    """The last-iterate reference of a final-model audit of DP-SGD records (else None).

    Read from the least private model's record (largest q and T, smallest σ).
    """
    if (
        s.threat_model != "black-box"
        or s.trainer in _NOT_DPSGD
        or "noise_multiplier" not in stored.many[0]
    ):
        return None
    records = DPSGDRecord.from_arrays(stored.many)
    sigma = min(r.noise_multiplier for r in records)
    if not sigma > 0:
        return None
    counted = stored.trials_per_arm // 2 if s.threshold == "split" else stored.trials_per_arm
    return last_iterate_details(
        sampling_rate=max(r.sampling_rate for r in records),
        steps=max(r.steps for r in records),
        noise_multiplier=sigma,
        delta=eps_lb.delta,
        mu_lower=mu_lb.value,
        epsilon_lower=eps_lb.value,
        trials=counted,
        confidence_level=level,
        seed=seed,
    )


def _last_iterate_rows(
    label: str, eps_lb: EpsilonBound, mu_lb: MuBound, last: Mapping[str, Any]
) -> list[Comparison]:
    """The audit's ε and μ lower bounds held against the last-iterate reference (rows of
    their own, so that the console and the report name the reference; never in the
    verdict)."""
    return paired_comparisons(
        f"{label} · last-iterate reference",
        eps_lb,
        mu_lb,
        upper_epsilon=last["epsilon"],
        upper_mu=last["mu"],
        source="last-iterate heuristic (Steinke et al. 2025)",
    )


def _summary_worst_case(
    s: DpsgdSection, context: RunContext, *, trials: int, level: float
) -> dict[str, Any]:
    """The worst-case pair's realised sensitivity, realised ε and ideal bound (details)."""
    spec = DpsgdSpec(section=s, seed=context.seed, unit_size=1, base_dir=str(context.base_dir))
    worst = _setup(spec).worst_case
    assert worst is not None  # canary = "worst-case" builds it
    return worst_case_details(
        worst, trials=trials, threshold=s.threshold, level=level, seed=context.seed
    )


def _direction_details(s: DpsgdSection, base_dir: Path | str) -> dict[str, Any]:
    """Which way the white-box canary pointed and why (nothing for other canaries)."""
    pointing = resolve_canary_direction(s, str(base_dir))
    return {} if pointing is None else {"canary_direction": pointing.to_dict()}


def _label(s: DpsgdSection) -> str:
    return f"{s.canary} canary, {s.threat_model}, trainer {s.trainer}"


def _data_hash(s: DpsgdSection) -> str:
    keys = ("dataset", "label", "rows", "features", "zero_features", "normalize", "canary")
    return hashlib.sha256(
        json.dumps({k: getattr(s, k) for k in keys}, sort_keys=True).encode()
    ).hexdigest()


# ---------------------------------------------------------------------- grey-box checks


def _greybox_tests(
    s: DpsgdSection, many: Sequence[Mapping[str, np.ndarray]]
) -> tuple[GreyBoxTest, ...]:
    """Every grey-box test of the stored units: evaluated when every unit carries
    observations, listed as not evaluated when a DP-SGD trainer gave none, absent for
    trainers that run no DP-SGD (and gave none)."""
    if not many:
        return ()
    obs = GreyBoxObservations.from_arrays(many)
    if obs is None and s.trainer in _NOT_DPSGD:
        return ()
    tests = greybox_tests(obs)
    if s.trainer in ENGINE_TRAINERS:
        # dpaudit's own engine clips inside its fused step and does not report the
        # clipped norms (its clipped steps match Opacus in tests/test_training_opacus.py): the
        # unobserved clipping check would only add a warning to every audit.
        tests = tuple(t for t in tests if not (t.check == "greybox_clipping" and t.p_value is None))
    return tests


def _greybox_check(test: GreyBoxTest, alpha: float, *, in_verdict: bool) -> Check:
    """A grey-box test as a gate check: p-value tests fail when p < α = (1 − c)/k, the
    verdict's per-comparison share, and spend that share when ``in_verdict``;
    deterministic ones fail when p = 0 and take no share."""
    what = f"{test.title}: {test.reason}"
    if test.p_value is None:
        return Check(test.check, None, alpha if test.chance else None, True, what, "not-evaluated")
    ok = test.passed(alpha)
    bug = "" if ok else ": the run did not do what was accounted"
    finding = "" if ok else _greybox_finding(test)
    if not test.chance:
        message = f"{what} (deterministic){bug}"
        return Check(test.check, test.p_value, None, ok, message, finding=finding)
    sign = "≥" if ok else "<"
    return Check(
        test.check,
        test.p_value,
        alpha,
        ok,
        f"{test.title}: p = {test.p_value:.3g} {sign} {alpha:.3g} ({test.reason}){bug}",
        spends_budget=in_verdict,
        finding=finding,
    )


def _greybox_finding(test: GreyBoxTest) -> str:
    """What a failed grey-box test says about the run, and what follows for the stated ε
    (the verdict's words; :func:`dpaudit.results.verdict_findings`)."""
    d = test.details
    if test.check == "greybox_batch_sizes":
        batches = float(d.get("batches") or 0)
        if batches and float(d.get("dispersion", batches)) < 0.1 * batches:
            # Σ(b − nq)²/(nq(1 − q)) has mean 1 per batch under Poisson sampling; batches
            # of one fixed size leave only the rounding of nq.
            what = "batches had a fixed size"
        elif float(d.get("p_sum", 1.0)) <= float(d.get("p_dispersion", 1.0)):
            what = (
                f"batches drew records at rate {float(d['observed_rate']):.4g}, not the "
                f"accounted q = {float(d['accounted_rate']):.4g}"
            )
        else:
            what = "batch sizes vary less than Poisson sampling makes them"
        return f"{what}; the stated ε assumes Poisson sampling at q, so it does not hold"
    if test.check == "greybox_noise":
        ratio = d.get("std_ratio")
        size = f" ({float(ratio):.3g}·σC on a coordinate no example touches)" if ratio else ""
        return (
            f"the run added less noise than σC{size}; the stated ε assumes σC, so it does not hold"
        )
    if test.check == "greybox_clipping":
        norm = d.get("largest_norm")
        size = f" (a clipped norm of {float(norm):.4g} > C)" if norm is not None else ""
        return (
            f"per-example gradients were not clipped to C{size}; one record can move an "
            "update further than accounted, so the stated ε does not hold"
        )
    if test.check == "greybox_steps":
        return (
            f"{test.reason}: the accountant's ε is that of the steps accounted, not of the "
            "steps run"
        )
    return f"{test.title}: {test.reason}"
