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
5. ``--grid`` (runs only this): 5 seeds × {statsmodels:fair, sklearn:digits} × K ∈ {16, 64}
   reference models. Per seed a non-private target (fair: the recipe above; digits: MLP
   with 64 hidden units, 100 epochs, expected batch 32, learning rate 0.05, momentum 0.9,
   the recipe of audits/byo-sklearn.toml, which mirrors its scikit-learn model), 1,000
   audited rows with fair coins, and ONE reference set of K models scoring every LiRA
   variant and RMIA (the loss attack as a baseline). Prints, per cell, the median and
   [min, max] over seeds of TPR at 1 % and 0.1 % FPR and of AUC, marks the best variant
   (highest median), and says whether the configured default attack (the membership
   kind's ``headline``, else the reference attack in its default ``attacks``) is within
   the best variant's seed range: the default's median lies in [min, max] of the best
   variant's seeds. CPU seconds (``time.process_time``, one torch thread), wall time and
   load average per cell.

   .venv/bin/python benchmarks/membership_attacks.py --grid [--grid-seeds 5] [--grid-first-seed 0]
       [--grid-json F]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import time
from typing import Any

import numpy as np
import torch

from dpaudit import accounting
from dpaudit.data import load_dataset
from dpaudit.membership.pipeline import (
    audit_attribute,
    audit_membership,
    fair_coins,
    prepare_target,
)
from dpaudit.membership.schema import REFERENCE_ATTACKS
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
    parser.add_argument(
        "--grid",
        action="store_true",
        help="only the seeds x datasets x K grid of every LiRA variant and RMIA (section 5)",
    )
    parser.add_argument("--grid-seeds", type=int, default=5, help="N seeds of --grid")
    parser.add_argument(
        "--grid-first-seed", type=int, default=0, help="--grid's seeds start here (default 0)"
    )
    parser.add_argument("--grid-json", default=None, help="write --grid's per-seed values here")
    args = parser.parse_args()
    if args.grid:
        first = args.grid_first_seed
        run_grid(seeds=range(first, first + args.grid_seeds), json_path=args.grid_json)
        return
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
            attacks=("loss", "shadow", "lira"),
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
            swept = audit_membership(
                ds,
                model=MODEL,
                training=PLAIN,
                attacks=("loss", "shadow", "lira"),
                audited_size=AUDITED,
                seed=seed,
            )
            by_attack = {x.attack: x.metrics for x in swept.outcomes}
            t = {k: v.tpr_at_fpr[1].tpr for k, v in by_attack.items()}
            ratios.append(math.inf if t["loss"] == 0 else t["lira"] / t["loss"])
            shadow_wins += by_attack["shadow"].auc > by_attack["loss"].auc
            print(
                f"  seed {seed}: AUC loss {by_attack['loss'].auc:.3f} shadow "
                f"{by_attack['shadow'].auc:.3f} "
                f"lira {by_attack['lira'].auc:.3f}; TPR@1% loss {t['loss']:.3f} shadow "
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
        attacks=("loss", "shadow", "lira"),
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
    accountant = dp.accountant_epsilon
    if accountant is None:  # a DP-SGD target always leaves a record to account
        raise SystemExit("the DP-SGD target has no accountant epsilon")
    all_inside = True
    for o in dp.outcomes:
        for row in o.dp_region(accountant, DELTA):
            all_inside &= row["inside"]
            print(
                f"  {o.attack:6s} FPR {row['target_fpr']:<6g} TPR_low {row['tpr_low']:.4f} "
                f"<= e^eps*FPR_high+delta = {row['limit']:.4f}: {row['inside']}"
            )
        ok = o.one_run.value <= accountant
        all_inside &= ok
        print(
            f"  {o.attack:6s} one-run eps LB {o.one_run.value:.3f} <= accountant "
            f"{accountant:.3f}: {ok}"
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
        attr = audit_attribute(
            ds,
            model=MODEL,
            training=training,
            audited_size=AUDITED,
            seed=args.seed,
            delta=DELTA,
            target=target,
        )
        print(f"\n[3] attribute inference ({SENSITIVE}, values {attr.values}), {label}")
        show_attribute(attr)

    if args.variants:
        show_variants(plain_target, seed=args.seed, label="non-private", accountant_epsilon=None)
        show_variants(
            dp_target, seed=args.seed, label="DP-SGD", accountant_epsilon=dp.accountant_epsilon
        )


VARIANTS = REFERENCE_ATTACKS  # every LiRA variant and RMIA, as the membership kind lists them


def show_variants(target, *, seed: int, label: str, accountant_epsilon: float | None) -> None:
    """Every LiRA variant and RMIA from one reference set of 64 models (section 4)."""
    from dpaudit.attacks import get_attack, score_with_shared_references
    from dpaudit.membership.pipeline import DEFAULT_GUESS_FRACTION, attack_seed, one_run_bound
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


# ----------------------------------------------------------------------------- 5. grid

#: The non-private target recipe of each dataset in the grid: (load_dataset options,
#: architecture, training). fair: the recipe of sections 1-4; digits: the recipe of
#: audits/byo-sklearn.toml (MLP 64, 100 epochs, batch 32, lr 0.05, momentum 0.9), which
#: mirrors the scikit-learn MLP of scripts/make_byo_sklearn.py and fits its ~500 members
#: perfectly (train accuracy 1.0) while generalising less well (the membership signal).
GRID_RECIPES: dict[str, tuple[dict[str, Any], ModelSpec, TrainingSpec]] = {
    "statsmodels:fair": ({"sensitive": SENSITIVE}, MODEL, PLAIN),
    "sklearn:digits": (
        {},
        ModelSpec(kind="mlp", hidden=(64,)),
        TrainingSpec(epochs=100, batch_size=32, learning_rate=0.05, momentum=0.9),
    ),
}
GRID_KS = (16, 64)
#: (label, target FPR or None for AUC): the three metrics of every cell.
GRID_METRICS = (("TPR@1%", 0.01), ("TPR@0.1%", 0.001), ("AUC", None))
#: The named variants compared (``"lira"``, the configurable attack, duplicates one of
#: them: online, variance "auto"); the loss attack is shown as a baseline only.
GRID_CANDIDATES = tuple(v for v in VARIANTS[1:] if v != "auto")


def configured_default() -> str:
    """The attack the membership kind's defaults put in the headline (and so the gate).

    ``[membership] headline`` when its default is set; otherwise every default attack's
    bound enters the verdict, and the reference-model attack among them (LiRA) is the one
    whose choice of variant is in question.
    """
    from dpaudit.membership.schema import REFERENCE_ATTACKS, MembershipSection

    section = MembershipSection()
    if section.headline is not None:
        return section.headline
    return next((a for a in section.attacks if a in REFERENCE_ATTACKS), section.attacks[0])


def _default_equivalent(name: str, k: int) -> str:
    """The named variant that ``name`` computes with K reference models (itself if none)."""
    from dpaudit.attacks import LIRA_VARIANTS, LiraAttack

    if name != "lira":
        return name
    attack = LiraAttack(num_reference_models=k)
    for variant, options in LIRA_VARIANTS.items():
        if options == {"variant": attack.variant, "variance": attack.resolved_variance()}:
            return variant
    return name


def grid_cell_scores(target, *, k: int, seed: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Scores of the audited rows by the loss attack and, from ONE reference set of ``k``
    models (the set the kind's default ``["loss", "shadow", "auto"]`` trains: the seed of
    position 2), by every LiRA variant, RMIA and "auto"; and what "auto" chose."""
    from dpaudit.attacks import LossAttack, get_attack, score_with_shared_references
    from dpaudit.membership.pipeline import attack_seed

    context = target.context()
    X, y = target.audited_X, target.audited_y
    names = list(VARIANTS)
    attacks = [get_attack(name, num_reference_models=k) for name in names]
    scores = score_with_shared_references(context, X, y, attacks, seed=attack_seed(seed, 2))
    out = {"loss": np.asarray(LossAttack().score(context, X, y, seed=attack_seed(seed, 0)))[0]}
    chosen: dict[str, str] = {}
    for name, s, attack in zip(names, scores, attacks, strict=True):
        out[name] = np.asarray(s, dtype=np.float64)[0]
        if attack.outcome():
            chosen[name] = attack.outcome()["selected"]
    return out, chosen


def grid_metrics(scores: np.ndarray, coins: np.ndarray) -> dict[str, float]:
    """TPR at 1 % and 0.1 % FPR and AUC of one attack's scores (members = coins)."""
    from dpaudit.tradeoff import membership_metrics

    fprs = tuple(f for _, f in GRID_METRICS if f is not None)
    m = membership_metrics(scores[~coins], scores[coins], fprs=fprs)
    tpr = {r.target_fpr: r.tpr for r in m.tpr_at_fpr}
    return {label: (m.auc if f is None else tpr[f]) for label, f in GRID_METRICS}


def run_grid(*, seeds: range, json_path: str | None) -> None:
    """Section 5: the seeds × datasets × K grid, a markdown table per (dataset, K)."""
    import json

    torch.set_num_threads(1)
    default = configured_default()
    print(
        f"torch threads: {torch.get_num_threads()}; configured default attack: {default!r}; "
        f"seeds {list(seeds)}; audited rows {AUDITED} per target"
    )
    # values[dataset][k][attack][metric] = one value per seed
    values: dict[str, dict[int, dict[str, dict[str, list[float]]]]] = {}
    cost: list[dict[str, Any]] = []
    # per (dataset, K): the variant "auto" chose at each seed
    auto_choices: dict[tuple[str, int], list[str]] = {}
    for dataset_name, (options, model, training) in GRID_RECIPES.items():
        ds = load_dataset(dataset_name, **options)
        values[dataset_name] = {k: {} for k in GRID_KS}
        for seed in seeds:
            load0 = os.getloadavg()[0]
            c0, t0 = time.process_time(), time.perf_counter()
            target = prepare_target(
                ds, model=model, training=training, audited_size=AUDITED, seed=seed
            )
            c_target, t_target = time.process_time() - c0, time.perf_counter() - t0
            coins = target.membership
            acc = _accuracies(target)
            for k in GRID_KS:
                c1, t1 = time.process_time(), time.perf_counter()
                scores, chosen = grid_cell_scores(target, k=k, seed=seed)
                if "auto" in chosen:
                    auto_choices.setdefault((dataset_name, k), []).append(chosen["auto"])
                for name, row in scores.items():
                    per = values[dataset_name][k].setdefault(name, {})
                    for label, value in grid_metrics(row, coins).items():
                        per.setdefault(label, []).append(value)
                cost.append(
                    {
                        "dataset": dataset_name,
                        "seed": seed,
                        "k": k,
                        "cpu_s": time.process_time() - c1,
                        "wall_s": time.perf_counter() - t1,
                        "target_cpu_s": c_target,
                        "target_wall_s": t_target,
                        "load_before": load0,
                        "load_after": os.getloadavg()[0],
                    }
                )
                print(
                    f"  {dataset_name} seed {seed} K={k}: members {int(coins.sum())}, "
                    f"accuracy members {acc[0]:.3f} non-members {acc[1]:.3f}; target "
                    f"{c_target:.1f} s CPU; {len(VARIANTS)} attacks from one reference set "
                    f"{cost[-1]['cpu_s']:.1f} s CPU, {cost[-1]['wall_s']:.1f} s wall; "
                    f"load {load0:.1f} -> {cost[-1]['load_after']:.1f}",
                    flush=True,
                )
    verdicts: list[dict[str, Any]] = []
    for dataset_name, per_k in values.items():
        for k, per_attack in per_k.items():
            verdicts += show_grid_cell(dataset_name, k, per_attack, default=default)
    for (dataset_name, k), chosen in auto_choices.items():
        print(f"'auto' chose, {dataset_name} K={k}, seeds in order: {', '.join(chosen)}")
    print("\n### Is the configured default within the best variant's seed range?\n")
    print(
        "| dataset | K | metric | default (= variant) median "
        "| best variant: median [min, max] | within |"
    )
    print("|---|---|---|---|---|---|")
    for v in verdicts:
        print(
            f"| {v['dataset']} | {v['k']} | {v['metric']} | {v['default']} (= {v['equivalent']}) "
            f"{v['default_median']:.3f} | {v['best']}: {v['best_median']:.3f} "
            f"[{v['best_min']:.3f}, {v['best_max']:.3f}] | {'yes' if v['within'] else 'NO'} |"
        )
    missed = [v for v in verdicts if not v["within"]]
    print(
        f"\nDefault within the best variant's seed range in {len(verdicts) - len(missed)} of "
        f"{len(verdicts)} cells."
    )
    everywhere = [
        name for name in GRID_CANDIDATES if all(name in v["within_range"] for v in verdicts)
    ]
    print(f"Variants within the best's seed range in every cell: {everywhere or 'none'}")
    print("\n| variant | cells within | the cells it misses: its median vs the best's range |")
    print("|---|---|---|")
    for name in GRID_CANDIDATES:
        misses = [v for v in verdicts if name not in v["within_range"]]
        said = "; ".join(
            f"{v['dataset'].split(':')[1]} K={v['k']} {v['metric']} "
            f"{v['medians'][name]:.3f} vs {v['best']} [{v['best_min']:.3f}, {v['best_max']:.3f}]"
            for v in misses
        )
        print(f"| {name} | {len(verdicts) - len(misses)} / {len(verdicts)} | {said or '-'} |")
    cpu = [float(c["cpu_s"]) + float(c["target_cpu_s"]) / len(GRID_KS) for c in cost]
    attacks_cpu = sum(float(c["cpu_s"]) for c in cost)
    targets_cpu = sum(float(c["target_cpu_s"]) for c in cost) / len(GRID_KS)
    print(
        f"Cost: {len(cost)} cells, CPU {attacks_cpu:.1f} s for the "
        f"reference sets and attacks + {targets_cpu:.1f} s "
        f"for the targets (1 thread); per cell median {statistics.median(cpu):.1f} s CPU; "
        f"wall {sum(float(c['wall_s']) for c in cost):.1f} s; load average "
        f"{min(float(c['load_before']) for c in cost):.1f}-"
        f"{max(float(c['load_after']) for c in cost):.1f}"
    )
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "default": default,
                    "seeds": list(seeds),
                    "values": {d: {str(k): a for k, a in pk.items()} for d, pk in values.items()},
                    "verdicts": verdicts,
                    "cost": cost,
                    "auto_choices": {f"{d} K={k}": c for (d, k), c in auto_choices.items()},
                },
                f,
                indent=1,
            )
        print(f"per-seed values written to {json_path}")


def _accuracies(target) -> tuple[float, float]:
    from dpaudit.attacks.base import stack_logits

    pred = stack_logits(target.models, target.audited_X)[0].argmax(axis=-1)
    correct = pred == target.audited_y
    coins = target.membership
    return float(correct[coins].mean()), float(correct[~coins].mean())


def show_grid_cell(
    dataset_name: str, k: int, per_attack: dict[str, dict[str, list[float]]], *, default: str
) -> list[dict[str, Any]]:
    """One (dataset, K) table; returns, per metric, whether the default is within range."""
    equivalent = _default_equivalent(default, k)
    best = {}
    for label, _ in GRID_METRICS:
        # Highest median over seeds; a tie goes to the earlier variant in GRID_CANDIDATES.
        best[label] = max(GRID_CANDIDATES, key=lambda a: statistics.median(per_attack[a][label]))
    n = len(next(iter(per_attack.values()))[GRID_METRICS[0][0]])
    print(f"\n#### {dataset_name}, K = {k} ({n} seeds; median [min, max]; * best median)\n")
    print("| attack | " + " | ".join(label for label, _ in GRID_METRICS) + " |")
    print("|---|" + "---|" * len(GRID_METRICS))
    for name in ("loss", *VARIANTS):
        cells = []
        for label, _ in GRID_METRICS:
            xs = per_attack[name][label]
            star = "*" if name == best[label] else ""
            cells.append(f"{statistics.median(xs):.3f}{star} [{min(xs):.3f}, {max(xs):.3f}]")
        tag = ""
        if name == "loss":
            tag = " (baseline)"
        elif name == default or (default != equivalent and name == equivalent):
            tag = " (default)" if name == default else f" (= {default})"
        print(f"| {name}{tag} | " + " | ".join(cells) + " |")
    out = []
    for label, _ in GRID_METRICS:
        b = per_attack[best[label]][label]
        low, high = min(b), max(b)
        within_range = [
            a for a in GRID_CANDIDATES if low <= statistics.median(per_attack[a][label]) <= high
        ]
        d = statistics.median(per_attack[default][label])
        out.append(
            {
                "dataset": dataset_name,
                "k": k,
                "metric": label,
                "default": default,
                "equivalent": equivalent,
                "default_median": d,
                "best": best[label],
                "best_median": statistics.median(b),
                "best_min": low,
                "best_max": high,
                "within": low <= d <= high,
                "within_range": within_range,
                "medians": {a: statistics.median(per_attack[a][label]) for a in GRID_CANDIDATES},
            }
        )
    return out


if __name__ == "__main__":
    main()
