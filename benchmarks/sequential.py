"""Sequential (anytime-valid) mechanism audits: trials to a decision, validity under
monitoring, and the fixed designs beside them.

Every sequential figure runs the audit's own decision (:func:`dpaudit.mechanisms.sequential
.outcome`, the function ``dpaudit run`` asks after each stored round) on rounds drawn by the
kind's own round function (:func:`dpaudit.mechanisms.sequential.mechanism_round`), lazily, so a
repeat costs only the rounds it reads. Repeat i uses audit seed i.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py detect --seeds 50
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py monitor --repeats 1000
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py monitor --mechanism laplace
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py certify --seeds 20
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py certify --seeds 100
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py certify-monitor --repeats 1000
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py dpsgd --seeds 20
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/sequential.py control --repeats 1000

``dpsgd``: white-box DP-SGD (Poisson q = 0.25, T = 8, C = 1) that RUNS σ/2 of the σ its
records claim. Each round's canary scores are drawn from the exact law of the white-box
transcript (:mod:`dpaudit.theory.whitebox`: per step N(0, σ²C²) out, (1 − q)N(0, σ²C²) +
qN(C, σ²C²) in, scored by the Neyman–Pearson sum of per-step log-ratios at the σ that
ran), with the records of the claimed σ; the decision is the audit's own
(:func:`dpaudit.dpsgd.sequential.outcome`). ``audits/dpsgd-sequential-violation.toml``
runs one seed through ``dpaudit run`` with real training.

``control``: the power control of the monitored validity test (see :func:`control`).

``certify-monitor``: the validity of certification under monitoring (see
:func:`certify_monitor`).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
from scipy import stats

from dpaudit.bounds import epsilon_and_mu_lower_bounds, epsilon_from_counts, mu_from_counts
from dpaudit.kinds.base import RunContext, SequentialSettings
from dpaudit.mechanisms.schema import MechanismSection
from dpaudit.mechanisms.sequential import mechanism_round, outcome, plan_rounds
from dpaudit.planning import plan_trials
from dpaudit.sequential import SequentialRule, select_threshold

#: The share of a comparison's 1 − level its target test spends (the rule's default).
TARGET_SHARE = SequentialRule("epsilon", 0.0, 0.5).target_share


class LazyRounds(Mapping[str, Mapping[str, np.ndarray]]):
    """The plan's rounds, each sampled by the unit function when first read."""

    def __init__(self, plan) -> None:
        self.plan, self.cache = plan, {}

    def __getitem__(self, unit: str) -> Mapping[str, np.ndarray]:
        if unit not in self.cache:
            self.cache[unit] = self.plan.fn(self.plan.spec, unit)
        return self.cache[unit]

    def __iter__(self) -> Iterator[str]:
        return iter(self.plan.units)

    def __len__(self) -> int:
        return len(self.plan.units)


def section(**kw) -> MechanismSection:
    return MechanismSection(**kw)


def context(seed: int, round_trials: int, **kw) -> RunContext:
    return RunContext(
        seed=seed,
        confidence_level=0.95,
        delta=1e-5,
        base_dir=Path("."),
        sequential=SequentialSettings(round_trials=round_trials, **kw),
    )


def run_sequential(sec: MechanismSection, seed: int, round_trials: int, level: float, **kw):
    ctx = context(seed, round_trials, **kw)
    plan = plan_rounds(sec, ctx)
    assert plan.fn is mechanism_round
    return outcome(sec, ctx, LazyRounds(plan), level=level)


def fixed_detects(sec: MechanismSection, n: int, seed: int, level: float) -> bool:
    """The fixed split design with n trials per arm (the shipped default): does any of its
    in-verdict bounds exceed the claim?"""
    rng = np.random.default_rng([seed, 99])
    from dpaudit.mechanisms.units import build_mechanism, upper_bound

    mech = build_mechanism(sec, ".")
    up = upper_bound(sec, mech, 1e-5)
    neg, pos = mech.run(0, rng=rng, size=n), mech.run(1, rng=rng, size=n)
    eps, mu = epsilon_and_mu_lower_bounds(
        neg, pos, delta=up.epsilon_delta, confidence_level=level, threshold="split", seed=seed
    )
    return eps.value > up.epsilon or (up.mu is not None and mu.value > up.mu)


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f}"


def detect(seeds: int) -> None:
    cases = [
        (
            "gaussian mu=2, claim mu=1",
            section(name="gaussian", mu=2.0, trials=20_000, claim={"mu": 1.0}),
        ),
        (
            "gaussian sigma/10 (mu=10), claim mu=1",
            section(name="gaussian", mu=10.0, trials=20_000, claim={"mu": 1.0}),
        ),
        (
            "laplace eps=2, claim eps=1",
            section(name="laplace", epsilon=2.0, trials=20_000, claim={"epsilon": 1.0}),
        ),
    ]
    level = 1 - 0.05 / 2  # two comparisons (ε and μ) in the verdict
    for label, sec in cases:
        c0, w0 = time.process_time(), time.perf_counter()
        used, why = [], []
        for s in range(seeds):
            r = run_sequential(sec, s, 50, level)
            used.append(r.trials)
            why.append(r.decision)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        detected = why.count("violation") / seeds
        # The fixed split design at n: its detection probability over the same seeds.
        fixed = None
        for n in (50, 100, 150, 200, 250, 300, 400, 500, 600, 800, 1000, 1500, 2000):
            power = np.mean([fixed_detects(sec, n, s, level) for s in range(seeds)])
            if power >= min(detected, 0.95):
                fixed = (n, power)
                break
        print(
            f"{label}: sequential (rounds of 50) median {np.median(used):.0f}, mean "
            f"{np.mean(used):.0f}, p95 {np.quantile(used, 0.95):.0f} trials per arm; "
            f"detected {detected:.2f} of {seeds} seeds; fixed split design reaching detection "
            f"probability {min(detected, 0.95):.2f}: {fixed[0] if fixed else '>2000'} trials per "
            f"arm (power {fixed[1] if fixed else float('nan'):.2f}); {cpu:.1f} s CPU, "
            f"{wall:.1f} s wall (sequential), {load()}",
            flush=True,
        )


def monitor(repeats: int, mechanism: str) -> None:
    """A correct mechanism, decided after every round of 50 up to 2,000 per arm; the
    false-violation share against 1 − c, and the power control: the same rounds checked
    every round with the fixed-design (Clopper–Pearson) bounds at the round-0 threshold.

    ``rr``: randomized response with p = e/(1 + e), exactly ε = 1 and claimed so: its one
    threshold sits ON the claim's boundary, the hardest null for a monitored bound.
    ``laplace``: Laplace ε = 1, claim ε = 1."""
    if mechanism == "rr":
        p = float(np.e / (1 + np.e))
        sec = section(name="randomized-response", p=p, trials=2_000, claim={"epsilon": 1.0})
    else:
        sec = section(name="laplace", epsilon=1.0, trials=2_000, claim={"epsilon": 1.0})
    level = 1 - 0.05 / 2
    c0, w0 = time.process_time(), time.perf_counter()
    false_seq = false_fixed = 0
    for s in range(repeats):
        ctx = context(s, 50)
        plan = plan_rounds(sec, ctx)
        rounds = LazyRounds(plan)
        r = outcome(sec, ctx, rounds, level=level)
        false_seq += r.decision == "violation"
        # Uncorrected: Clopper–Pearson at each round, stop when it crosses the claim.
        first = rounds[plan.units[0]]
        te, *_ = select_threshold(
            first["negative"], first["positive"], parameter="epsilon", delta=0.0, level=level
        )
        tm, *_ = select_threshold(
            first["negative"], first["positive"], parameter="mu", delta=0.0, level=level
        )
        fpe = fne = fpm = fnm = n = 0
        crossed = False
        for unit in plan.units[1:]:
            part = rounds[unit]
            neg, pos = part["negative"], part["positive"]
            n += neg.size
            fpe += int(np.sum(neg >= te))
            fne += int(np.sum(pos < te))
            fpm += int(np.sum(neg >= tm))
            fnm += int(np.sum(pos < tm))
            e = epsilon_from_counts(fpe, n, fne, n, delta=0.0, confidence_level=level).value
            m = mu_from_counts(fpm, n, fnm, n, confidence_level=level).value
            if e > r.uppers["epsilon"] or m > r.uppers["mu"]:
                crossed = True
                break
        false_fixed += crossed
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    alpha = 1 - 0.95
    hi = stats.beta.ppf(0.95, false_seq + 1, repeats - false_seq)
    lo = stats.beta.ppf(0.05, false_fixed, repeats - false_fixed + 1) if false_fixed else 0.0
    print(
        f"monitored correct {mechanism} (eps=1, claim 1), {repeats} audits, rounds of 50 to 2,000 "
        f"per arm (40 looks): sequential false violations {false_seq}/{repeats} "
        f"(95% upper limit {hi:.4f} vs 1 - c = {alpha:.2f}); uncorrected fixed-design bound "
        f"checked every round: {false_fixed}/{repeats} (95% lower limit {lo:.4f}); "
        f"{cpu:.1f} s CPU, {wall:.1f} s wall, {load()}",
        flush=True,
    )


def certify(seeds: int) -> None:
    for tight, rt in ((0.5, 100), (0.9, 1000)):
        sec = section(name="laplace", epsilon=1.0, trials=200_000, claim={"epsilon": 1.0})
        level = 1 - 0.05 / 2
        c0, w0 = time.process_time(), time.perf_counter()
        runs = [run_sequential(sec, s, rt, level, certify_tightness=tight) for s in range(seeds)]
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        used = [r.trials for r in runs]
        why = [r.decision for r in runs]
        by_test = sum(
            r.decision == "target"
            and r.paths["epsilon"][-1].log_evalue is not None
            and r.paths["epsilon"][-1].log_evalue >= -np.log((1 - level) * TARGET_SHARE)
            for r in runs
        )
        plan = plan_trials(tight, 0.0, level, tradeoff="laplace", mechanism_epsilon=1.0)
        within = float(np.mean(np.asarray(used) <= plan.trials_per_arm))
        print(
            f"certify eps_LB >= {tight} eps (Laplace eps=1, rounds of {rt}): median "
            f"{np.median(used):.0f}, mean {np.mean(used):.0f}, p95 {np.quantile(used, 0.95):.0f} "
            f"trials per arm over {seeds} seeds ({why.count('target')} certified, "
            f"{by_test} by the target's e-process); fixed plan (dpaudit plan, split, level "
            f"{level}): {plan.trials_per_arm}, reached by then in {within:.2f} of the seeds; "
            f"audits/laplace.toml: 100000; {cpu:.1f} s CPU, {wall:.1f} s wall, {load()}",
            flush=True,
        )


class PeekingTarget:
    """The power control of :func:`certify_monitor`: the target test's capital with each
    bet chosen on the round it bets on (not predictable: what the validity argument
    forbids). Wraps a :class:`dpaudit.sequential.TargetTest`."""

    def __init__(self, test) -> None:
        self.test = test

    def add(self, neg: np.ndarray, pos: np.ndarray) -> None:
        t = self.test
        saved = (t.ge_neg.copy(), t.ge_pos.copy(), t.n_neg, t.n_pos)
        t.ge_neg[:], t.ge_pos[:], t.n_neg, t.n_pos = 0.0, 0.0, 0, 0
        t._count(neg, pos)
        bet = t.bet()
        t.ge_neg, t.ge_pos, t.n_neg, t.n_pos = saved
        if bet is not None:
            up = bet.direction == "up"
            x = (neg >= bet.threshold) if up else (pos < bet.threshold)
            y = (pos >= bet.threshold) if up else (neg < bet.threshold)
            t.log_evalue += float(np.sum(np.log1p(bet.stake * (y - bet.slope * x - bet.intercept))))
            t.max_log_evalue = max(t.max_log_evalue, t.log_evalue)
        t._count(neg, pos)


def certify_monitor(repeats: int, mechanism: str) -> None:
    """A mechanism exactly at the target: randomized response p = e/(1 + e) or Laplace, both
    ε = 1, claim ε = 1, asked to certify ε ≥ 1 (``certify_epsilon = 1``: the target test's
    null boundary, where every threshold of RR and every t ≥ 1 of Laplace sits on the
    line), looked at after every round of 50 up to 2,000 per arm. A "target" decision here
    certifies a value the mechanism only just has: its share must stay ≤ 1 − c. Power
    control: the same rounds, the target test's capital with bets chosen on the round they
    bet on, at the same level share."""
    from dpaudit.sequential import TargetTest

    if mechanism == "rr":
        p = float(np.e / (1 + np.e))
        sec = section(name="randomized-response", p=p, trials=2_000, claim={"epsilon": 1.0})
    else:
        sec = section(name="laplace", epsilon=1.0, trials=2_000, claim={"epsilon": 1.0})
    level = 1 - 0.05 / 2
    c0, w0 = time.process_time(), time.perf_counter()
    certified = peeked = 0
    for s in range(repeats):
        ctx = context(s, 50, certify_epsilon=1.0)
        plan = plan_rounds(sec, ctx)
        rounds = LazyRounds(plan)
        r = outcome(sec, ctx, rounds, level=level)
        certified += r.decision == "target"
        first = rounds[plan.units[0]]
        peek = PeekingTarget(
            TargetTest(
                first["negative"],
                first["positive"],
                parameter="epsilon",
                target=1.0,
                delta=0.0,
                level=1 - (1 - level) * TARGET_SHARE,
            )
        )
        for unit in plan.units[1:]:
            part = rounds[unit]
            peek.add(np.asarray(part["negative"], float), np.asarray(part["positive"], float))
        peeked += peek.test.certified
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    hi = stats.beta.ppf(0.95, certified + 1, repeats - certified)
    lo = stats.beta.ppf(0.05, peeked, repeats - peeked + 1) if peeked else 0.0
    print(
        f"monitored certification at the boundary ({mechanism}, eps=1, claim 1, certify eps >= "
        f"1), {repeats} audits, rounds of 50 to 2,000 per arm (39 looks): 'target' decisions "
        f"{certified}/{repeats} (95% upper limit {hi:.4f} vs 1 - c = 0.05); power control, bets "
        f"chosen on their own round: {peeked}/{repeats} certified (95% lower limit {lo:.4f}); "
        f"{cpu:.1f} s CPU, {wall:.1f} s wall, {load()}",
        flush=True,
    )


# ------------------------------------------------------------------ DP-SGD, sequential

Q, STEPS, CLIP = 0.25, 8, 1.0


def whitebox_round(seed: int, index: int, models: int, sigma_run: float, sigma_claim: float):
    """One round of 2·``models`` white-box canary scores (model g in iff g odd), drawn
    from the exact law of the transcript, with the records of the claimed σ."""
    from dpaudit.records import DPSGDRecord
    from dpaudit.theory.whitebox import mixture_log_likelihood_ratio

    rng = np.random.default_rng([seed, index, 77])
    included = (np.arange(2 * models) % 2) == 1
    noise = rng.normal(0.0, sigma_run * CLIP, (2 * models, STEPS))
    sampled = rng.random((2 * models, STEPS)) < Q
    x = noise + CLIP * (sampled & included[:, None])
    scores = mixture_log_likelihood_ratio(
        x, sampling_rate=Q, noise_multiplier=sigma_run, clipping_norm=CLIP
    ).sum(axis=1)
    record = DPSGDRecord(
        noise_multiplier=sigma_claim, sampling_rate=Q, steps=STEPS, clipping_norm=CLIP
    )
    return {
        "scores": scores,
        "included": included,
        **DPSGDRecord.to_arrays([record] * (2 * models)),
    }


class SimulatedRounds(Mapping[str, Mapping[str, np.ndarray]]):
    """The sequential plan's rounds, each drawn from the exact law when first read."""

    def __init__(self, units, seed, models, sigma_run, sigma_claim) -> None:
        self.units, self.args, self.cache = units, (seed, models, sigma_run, sigma_claim), {}

    def __getitem__(self, unit: str) -> Mapping[str, np.ndarray]:
        if unit not in self.cache:
            seed, models, run, claim = self.args
            self.cache[unit] = whitebox_round(seed, int(unit[-5:]), models, run, claim)
        return self.cache[unit]

    def __iter__(self) -> Iterator[str]:
        return iter(self.units)

    def __len__(self) -> int:
        return len(self.units)


def dpsgd(
    seeds: int, sigma: float, round_trials: int = 50, cap: int = 5000, divisor: float = 2.0
) -> None:
    from dpaudit.accounting.upper_bounds import from_records
    from dpaudit.dpsgd.schema import DpsgdSection
    from dpaudit.dpsgd.sequential import outcome as dpsgd_outcome
    from dpaudit.dpsgd.sequential import plan_rounds as dpsgd_plan

    sec = DpsgdSection(
        trainer="dpsgd",
        canary="dirac",
        threat_model="white-box",
        rows=32,
        trials=cap,
        training={
            "epochs": 2,
            "batch_size": 8,
            "learning_rate": 0.5,
            "dp": {"noise_multiplier": sigma, "clipping_norm": CLIP},
        },
    )
    from dpaudit.dpsgd.sequential import COMPARISONS

    # the verdict's comparisons (ε, μ and the claim curve), each at its share
    level = 1 - 0.05 / COMPARISONS
    c0, w0 = time.process_time(), time.perf_counter()
    used, why, by = [], [], []
    for s in range(seeds):
        ctx = context(s, round_trials)
        units = dpsgd_plan(sec, ctx).units
        r, up = dpsgd_outcome(
            sec, ctx, SimulatedRounds(units, s, round_trials, sigma / divisor, sigma), level=level
        )
        used.append(r.trials)
        why.append(r.decision)
        by.append(r.decided_by)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    detected = why.count("violation") / seeds
    # The fixed split design at n models per arm, on the same law: detection probability.
    from dpaudit.records import DPSGDRecord

    up = from_records(
        [DPSGDRecord(noise_multiplier=sigma, sampling_rate=Q, steps=STEPS, clipping_norm=CLIP)],
        1e-5,
    )
    fixed = None
    for n in (100, 150, 200, 250, 300, 400, 500, 600, 800, 1000, 1500, 2000, 3000, 5000):
        hits = []
        for s in range(seeds):
            part = whitebox_round(s, 10_000 + n, n, sigma / divisor, sigma)
            inc = part["included"]
            eps, mu = epsilon_and_mu_lower_bounds(
                part["scores"][~inc],
                part["scores"][inc],
                delta=up.epsilon_delta,
                confidence_level=level,
                threshold="split",
                seed=s,
            )
            hits.append(eps.value > up.epsilon or (up.mu is not None and mu.value > up.mu))
        if np.mean(hits) >= min(detected, 0.95):
            fixed = (n, float(np.mean(hits)))
            break
    print(
        f"white-box DP-SGD q={Q} T={STEPS} running sigma {sigma / divisor:g}, records claim sigma "
        f"{sigma:g} (eps {up.epsilon:.3f} at delta 1e-5, mu {up.mu:.3f}): sequential (rounds of "
        f"{round_trials} models per arm, cap {cap}) median {np.median(used):.0f}, mean "
        f"{np.mean(used):.0f}, p95 {np.quantile(used, 0.95):.0f}, max {max(used)} models per "
        f"arm over {seeds} seeds; detected {detected:.2f} (decided by "
        f"{ {p: by.count(p) for p in set(by)} }); fixed split design reaching detection "
        f"probability {min(detected, 0.95):.2f}: {fixed[0] if fixed else '>5000'} models per "
        f"arm (power {fixed[1] if fixed else float('nan'):.2f}); {cpu:.1f} s CPU, {wall:.1f} s "
        f"wall (the sequential audits), {load()}",
        flush=True,
    )


# ------------------------------------------------------------- power control (monitor)


def uncorrected_crossings(
    epsilon: float, repeats: int, cap: int, round_trials: int, c: float, seed: int
) -> np.ndarray:
    """Per repeat, whether the uncorrected rule ever stops with a violation: a correct
    randomized response (ε = claim) monitored after every round with the fixed design's
    bounds (Clopper–Pearson upper limits of FPR and FNR, each at 1 − (1 − level)/2, at the
    round-0 threshold "output = 1") at the verdict's per-bound level ``level`` =
    1 − (1 − c)/2, stopped at the first round where ε_LB or μ_LB crosses the claim's."""
    from scipy import special

    from dpaudit.bounds import epsilon_from_rates, mu_from_rates

    sec = section(
        name="randomized-response",
        p=float(np.exp(epsilon) / (1 + np.exp(epsilon))),
        trials=cap,
        claim={"epsilon": epsilon},
    )
    from dpaudit.mechanisms.units import build_mechanism, upper_bound

    up = upper_bound(sec, build_mechanism(sec, "."), 0.0)
    level = 1 - (1 - c) / 2
    rate = 1 - (1 - level) / 2
    p = 1.0 / (1.0 + np.exp(epsilon))
    looks = cap // round_trials - 1
    rng = np.random.default_rng([seed, 5])
    fp = rng.binomial(round_trials, p, (repeats, looks)).cumsum(axis=1)
    fn = rng.binomial(round_trials, p, (repeats, looks)).cumsum(axis=1)
    n = np.broadcast_to(round_trials * np.arange(1, looks + 1), fp.shape)
    # Clopper–Pearson one-sided upper limits (k < n here: the rate is far from 1).
    fh = special.betaincinv(fp + 1.0, n - fp, rate)
    nh = special.betaincinv(fn + 1.0, n - fn, rate)
    crossed = epsilon_from_rates(fh, nh, delta=0.0) > up.epsilon
    if up.mu is not None:
        crossed |= mu_from_rates(fh, nh) > up.mu
    return np.asarray(crossed.any(axis=1))


def control(repeats: int, epsilon: float, cap: int) -> None:
    """The monitored validity test with a power control that bites.

    Design: randomized response at ε = 3, claimed ε = 3 (a correct mechanism whose one
    threshold sits on the claim's boundary), c = 0.95 (per-bound level 0.975 for ε and μ),
    rounds of 50 per arm, looked at after every round up to 2,000 per arm (39 looks).
    At ε = 3 the false-positive rate is 0.047 and the ε bound is driven by its upper limit
    alone (1 − FNR is near 1 whatever the FNR limit): the fixed design's check is then a
    one-sided check of one rate at nearly its full share, where each look spends almost
    its α. At ε = 1 (the ``monitor`` design) both limits must be lucky at once and one look
    spends about α/20, so 40 looks could not inflate it past α. The anytime-valid side is
    the audit's own decision on rounds drawn by the kind's unit function (audit seed i);
    the uncorrected side runs on exact binomial counts of the same law (seeded, drawn
    separately: vectorised, since it costs nothing per look).
    """
    c = 0.95
    level = 1 - (1 - c) / 2
    p = float(np.exp(epsilon) / (1 + np.exp(epsilon)))
    sec = section(name="randomized-response", p=p, trials=cap, claim={"epsilon": epsilon})
    c0, w0 = time.process_time(), time.perf_counter()
    false_seq = 0
    for s in range(repeats):
        ctx = context(s, 50)
        plan = plan_rounds(sec, ctx)
        r = outcome(sec, ctx, LazyRounds(plan), level=level)
        false_seq += r.decision == "violation"
    cpu_seq = time.process_time() - c0
    crossed = uncorrected_crossings(epsilon, repeats, cap, 50, c, seed=0)
    false_unc = int(crossed.sum())
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    hi = stats.beta.ppf(0.95, false_seq + 1, repeats - false_seq)
    lo = stats.beta.ppf(0.05, false_unc, repeats - false_unc + 1) if false_unc else 0.0
    print(
        f"power control: correct randomized response eps={epsilon:g} (claim {epsilon:g}), c = "
        f"{c}, {repeats} audits, rounds of 50 to {cap:,} per arm ({cap // 50 - 1} looks): "
        f"anytime-valid false violations {false_seq}/{repeats} (95% upper limit {hi:.4f} vs "
        f"1 - c = {1 - c:.2f}); uncorrected rule {false_unc}/{repeats} (95% lower limit "
        f"{lo:.4f}); {cpu_seq:.1f} s CPU sequential, {cpu:.1f} s CPU total, {wall:.1f} s wall, "
        f"{load()}",
        flush=True,
    )


def main() -> None:
    import threadpoolctl  # noqa: F401  (OMP_NUM_THREADS=1 is set by the command line)

    p = argparse.ArgumentParser()
    p.add_argument(
        "what", choices=["detect", "monitor", "certify", "dpsgd", "control", "certify-monitor"]
    )
    p.add_argument("--seeds", type=int, default=50)
    p.add_argument("--repeats", type=int, default=1000)
    p.add_argument("--mechanism", choices=["rr", "laplace"], default="rr")
    p.add_argument("--sigma", type=float, default=2.0, help="dpsgd: the claimed σ")
    p.add_argument("--divisor", type=float, default=2.0, help="dpsgd: runs σ/divisor")
    p.add_argument("--round-trials", type=int, default=50, help="dpsgd: models per arm per round")
    p.add_argument("--epsilon", type=float, default=3.0, help="control: RR's ε (= claim)")
    p.add_argument("--cap", type=int, default=2000, help="control: trials per arm")
    a = p.parse_args()
    {
        "detect": lambda: detect(a.seeds),
        "monitor": lambda: monitor(a.repeats, a.mechanism),
        "certify": lambda: certify(a.seeds),
        "dpsgd": lambda: dpsgd(a.seeds, a.sigma, a.round_trials, divisor=a.divisor),
        "control": lambda: control(a.repeats, a.epsilon, a.cap),
        "certify-monitor": lambda: certify_monitor(a.repeats, a.mechanism),
    }[a.what]()


if __name__ == "__main__":
    main()
