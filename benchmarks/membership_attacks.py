"""Membership and attribute attacks on statsmodels:fair: strength, DP consistency, speed.

Run:  .venv/bin/python benchmarks/membership_attacks.py [--seed 0] [--repeats 1]

1. Non-private MLP (64 hidden units, 100 epochs, SGD with momentum) overfit on the ~500
   audited rows that won their fair coin (audited pool of 1,000 rows): loss, shadow (16
   shadow models) and online LiRA (64 reference models). Prints AUC and TPR at 10 / 1 /
   0.1 % FPR for each, the LiRA / loss ratio at 1 % FPR, and the wall time of the whole
   audit (target + all attacks, 64 reference models included).
2. The same recipe with DP-SGD at ε ≈ 1 (δ = 1e-5, σ from accounting.calibrate_noise for
   the actual number of members): every attack's TPR lower confidence limit at each FPR
   against e^ε·FPR_high + δ, and the rigorous one-run ε lower bound against the
   accountant's ε.
3. Attribute inference (sensitive column ``rate_marriage``) on both targets: accuracies,
   baseline, advantage with intervals, and the DP bound on the advantage.
4. ``--variants``: every LiRA variant (online / offline × per-example / global variance)
   and RMIA (online, offline with a = 0.3; 1,000 population samples z, γ = 1) scored from
   ONE set of 64 reference models on both targets, with the time of that shared pass
   against LiRA alone, each attack's one-run ε bound, and the one-run limit of detection
   (every guess right) of this design beside it.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import time

import torch

from dpaudit import accounting
from dpaudit.data import load_dataset
from dpaudit.membership import (
    audit_attribute,
    audit_membership,
    fair_coins,
    prepare_target,
)
from dpaudit.models import ModelSpec
from dpaudit.training import DPConfig, TrainingSpec

AUDITED = 1000
MODEL = ModelSpec(kind="mlp", hidden=(64,))
PLAIN = TrainingSpec(epochs=100, batch_size=64, learning_rate=0.1, momentum=0.9)
DELTA = 1e-5
SENSITIVE = "rate_marriage"


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # user + system time of every thread
    return usage.ru_utime + usage.ru_stime


def show_membership(result) -> None:
    print(f"  target accuracy: {result.target_accuracy}")
    print(
        f"  {'attack':8s} {'AUC':>16s} {'TPR@10%':>8s} {'TPR@1%':>8s} {'TPR@0.1%':>8s} "
        f"{'one-run eps':>11s} {'heur. eps':>9s} {'secs':>6s}"
    )
    for o in result.outcomes:
        m = o.metrics
        tprs = [r.tpr for r in m.tpr_at_fpr]
        heur = "-" if o.epsilon_heuristic is None else f"{o.epsilon_heuristic.value:.3f}"
        print(
            f"  {o.attack:8s} {m.auc:.4f} [{m.auc_interval.low:.3f},{m.auc_interval.high:.3f}]"
            f" {tprs[0]:8.3f} {tprs[1]:8.3f} {tprs[2]:8.3f} {o.one_run.value:11.3f} "
            f"{heur:>9s} {o.seconds:6.1f}"
        )


def show_attribute(result) -> None:
    def ci(x):
        return f"[{x.low:.3f}, {x.high:.3f}]"

    print(f"  members      {result.accuracy_members:.3f} {ci(result.accuracy_members_interval)}")
    print(
        f"  non-members  {result.accuracy_non_members:.3f} "
        f"{ci(result.accuracy_non_members_interval)}"
    )
    print(f"  prior only   {result.accuracy_baseline:.3f} {ci(result.accuracy_baseline_interval)}")
    print(f"  advantage    {result.advantage:+.3f} {ci(result.advantage_interval)}")
    if result.dp_bound is not None:
        b = result.dp_bound
        print(
            f"  DP bound at accountant eps={result.accountant_epsilon:.3f}: region "
            f"{b['region']:.3f}, Yeom e^eps-1+delta {b['yeom']:.3f}; advantage lower limit "
            f"{result.advantage_interval.low:+.3f} <= region: "
            f"{result.advantage_interval.low <= b['region']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1, help="timed non-private audits")
    parser.add_argument(
        "--sweep", type=int, default=0, help="also run the non-private audit at seeds 0..N-1"
    )
    parser.add_argument(
        "--variants", action="store_true", help="LiRA variants and RMIA from one reference set"
    )
    args = parser.parse_args()
    print(f"torch threads: {torch.get_num_threads()}")
    ds = load_dataset("statsmodels:fair", sensitive=SENSITIVE)

    # 1. Non-private: the timed audit (target + loss + shadow + LiRA with 64 models).
    walls, cpus = [], []
    for r in range(args.repeats):
        load = os.getloadavg()[0]
        t0, c0 = time.perf_counter(), _cpu_seconds()
        plain = audit_membership(
            ds,
            model=MODEL,
            training=PLAIN,
            audited_size=AUDITED,
            num_reference_models=64,
            seed=args.seed,
        )
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu_seconds() - c0)
        stages = ", ".join(f"{k} {v:.1f}" for k, v in plain.seconds.items())
        print(
            f"run {r}: wall {walls[-1]:.1f} s, CPU {cpus[-1]:.1f} s (all threads), "
            f"1-min load average before {load:.1f}; stages (s): {stages}"
        )
    print(f"\n[1] non-private, {plain.members} members of {AUDITED} audited rows, seed {args.seed}")
    show_membership(plain)
    loss_t = plain.outcome("loss").metrics.tpr_at_fpr[1].tpr
    lira_t = plain.outcome("lira").metrics.tpr_at_fpr[1].tpr
    ratio = math.inf if loss_t == 0 else lira_t / loss_t
    print(f"  LiRA / loss TPR at 1% FPR: {lira_t:.3f} / {loss_t:.3f} = {ratio:.1f}x")
    print(
        f"  shadow AUC - loss AUC: "
        f"{plain.outcome('shadow').metrics.auc - plain.outcome('loss').metrics.auc:+.4f}"
    )
    print(
        f"  whole audit: median wall {statistics.median(walls):.1f} s, median CPU "
        f"{statistics.median(cpus):.1f} s over {len(walls)} run(s) (2 cores: on an idle "
        f"machine wall >= CPU / 2)"
    )

    if args.sweep:
        print("\n[1b] seed sweep, non-private (AUC; TPR at 1 % FPR)")
        ratios, shadow_wins = [], 0
        for seed in range(args.sweep):
            res = audit_membership(ds, model=MODEL, training=PLAIN, audited_size=AUDITED, seed=seed)
            o = {x.attack: x.metrics for x in res.outcomes}
            t = {k: v.tpr_at_fpr[1].tpr for k, v in o.items()}
            ratios.append(math.inf if t["loss"] == 0 else t["lira"] / t["loss"])
            shadow_wins += o["shadow"].auc > o["loss"].auc
            print(
                f"  seed {seed}: AUC loss {o['loss'].auc:.3f} shadow {o['shadow'].auc:.3f} "
                f"lira {o['lira'].auc:.3f}; TPR@1% loss {t['loss']:.3f} shadow "
                f"{t['shadow']:.3f} lira {t['lira']:.3f}; ratio {ratios[-1]:.1f}x"
            )
        print(
            f"  LiRA/loss at 1 % FPR: median {statistics.median(ratios):.1f}x, "
            f">= 2x in {sum(r >= 2 for r in ratios)}/{len(ratios)} seeds; shadow AUC > "
            f"loss AUC in {shadow_wins}/{len(ratios)}"
        )

    # 2. DP-SGD at ε ≈ 1, σ calibrated for the members the coins will pick.
    members = int(fair_coins(AUDITED, seed=args.seed).sum())
    q = PLAIN.batch_size / members
    steps = PLAIN.epochs * (members // PLAIN.batch_size)
    sigma = accounting.calibrate_noise(
        target_epsilon=1.0, delta=DELTA, sampling_rate=q, steps=steps
    )
    dp_training = TrainingSpec(
        epochs=PLAIN.epochs,
        batch_size=PLAIN.batch_size,
        learning_rate=PLAIN.learning_rate,
        momentum=PLAIN.momentum,
        dp=DPConfig(noise_multiplier=sigma, clipping_norm=1.0),
    )
    dp_target = prepare_target(
        ds, model=MODEL, training=dp_training, audited_size=AUDITED, seed=args.seed
    )
    t0 = time.perf_counter()
    dp = audit_membership(
        ds,
        model=MODEL,
        training=dp_training,
        audited_size=AUDITED,
        num_reference_models=64,
        seed=args.seed,
        delta=DELTA,
        target=dp_target,
    )
    print(
        f"\n[2] DP-SGD: sigma={sigma:.4f}, q={q:.4f}, steps={steps}, record={dp.record}, "
        f"accountant eps={dp.accountant_epsilon:.4f} at delta={DELTA} "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    show_membership(dp)
    all_inside = True
    for o in dp.outcomes:
        for row in o.dp_region(dp.accountant_epsilon, DELTA):
            all_inside &= row["inside"]
            print(
                f"  {o.attack:6s} FPR {row['target_fpr']:<6g} TPR_low {row['tpr_low']:.4f} "
                f"<= e^eps*FPR_high+delta = {row['limit']:.4f}: {row['inside']}"
            )
        ok = o.one_run.value <= dp.accountant_epsilon
        all_inside &= ok
        print(
            f"  {o.attack:6s} one-run eps LB {o.one_run.value:.3f} <= accountant "
            f"{dp.accountant_epsilon:.3f}: {ok}"
        )
    print(f"  all DP checks pass: {all_inside}")

    # 3. Attribute inference on both targets (same coins, same split).
    plain_target = prepare_target(
        ds, model=MODEL, training=PLAIN, audited_size=AUDITED, seed=args.seed
    )
    for label, target, training in (
        ("non-private", plain_target, PLAIN),
        ("DP-SGD", dp_target, dp_training),
    ):
        res = audit_attribute(
            ds,
            model=MODEL,
            training=training,
            audited_size=AUDITED,
            seed=args.seed,
            delta=DELTA,
            target=target,
        )
        print(f"\n[3] attribute inference ({SENSITIVE}, values {res.values}), {label}")
        show_attribute(res)

    if args.variants:
        show_variants(plain_target, seed=args.seed, label="non-private", accountant_epsilon=None)
        show_variants(
            dp_target, seed=args.seed, label="DP-SGD", accountant_epsilon=dp.accountant_epsilon
        )


VARIANTS = (
    "lira",
    "lira-online",
    "lira-offline",
    "lira-online-global",
    "lira-offline-global",
    "rmia",
    "rmia-offline",
)


def show_variants(target, *, seed: int, label: str, accountant_epsilon: float | None) -> None:
    """Every LiRA variant and RMIA from one reference set of 64 models (section 4)."""
    from dpaudit.attacks import get_attack, score_with_shared_references
    from dpaudit.membership import DEFAULT_GUESS_FRACTION, attack_seed, one_run_bound
    from dpaudit.planning import one_run_limit
    from dpaudit.tradeoff import membership_metrics

    context = target.context()
    X, y, coins = target.audited_X, target.audited_y, target.membership
    attacks = [get_attack(name, num_reference_models=64) for name in VARIANTS]
    t0 = time.perf_counter()
    get_attack("lira", num_reference_models=64).score(context, X, y, seed=attack_seed(seed, 2))
    alone = time.perf_counter() - t0
    t0 = time.perf_counter()
    scores = score_with_shared_references(context, X, y, attacks, seed=attack_seed(seed, 2))
    shared = time.perf_counter() - t0
    k = max(1, int(DEFAULT_GUESS_FRACTION * coins.size))
    limit = one_run_limit(coins.size, 2 * k, delta=DELTA)
    print(
        f"\n[4] {label}: {len(VARIANTS)} attacks from one reference set of 64 models in "
        f"{shared:.1f} s (LiRA alone {alone:.1f} s); one-run limit of detection "
        f"({coins.size} canaries, {2 * k} guesses, all right) eps = {limit.value:.3f}"
        + ("" if accountant_epsilon is None else f"; accountant eps {accountant_epsilon:.3f}")
    )
    print(
        f"  {'attack':20s} {'AUC':>16s} {'TPR@10%':>8s} {'TPR@1%':>8s} {'TPR@0.1%':>8s} "
        f"{'one-run eps':>11s}"
    )
    for name, s in zip(VARIANTS, scores, strict=True):
        row = s[0]
        m = membership_metrics(row[~coins], row[coins])
        tprs = [r.tpr for r in m.tpr_at_fpr]
        bound = one_run_bound(row, coins, guesses_per_side=k, delta=DELTA, confidence_level=0.95)
        print(
            f"  {name:20s} {m.auc:.4f} [{m.auc_interval.low:.3f},{m.auc_interval.high:.3f}]"
            f" {tprs[0]:8.3f} {tprs[1]:8.3f} {tprs[2]:8.3f} {bound.value:11.3f}"
        )


if __name__ == "__main__":
    main()
