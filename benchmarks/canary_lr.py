"""White-box tightness of Poisson DP-SGD audits: the likelihood-ratio score against the sum.

Settings (logistic regression on synthetic rows with one all-zero feature, a Dirac
gradient canary on its weight, δ = 1e-5, confidence 0.95 spent as the dpsgd kind spends
it: ε and μ bounds at 0.975 each, threshold "split", the μ bound held against the
accountant's μ bracket with its tail):

  (a) 100 rows, expected batch 2 (q = 0.02), 10 epochs (T = 500), σ = 0.6, C = 1;
  (b) 100 rows, expected batch 25 (q = 0.25), 2 epochs (T = 8), σ = 1, C = 1.

Per seed, ``--trials`` models per arm are trained ONCE on dpaudit's engine (the models
of the ``dpsgd`` kind: same data, canary and streams as ``trainer = "dpsgd"``); a step
observer keeps, per model, both running scores (the plain sum of the canary coordinate's
privatised gradient, and the sum of the per-step log-likelihood ratios of the mixture),
so the two scores are compared on the SAME runs. The oracle draws the T per-step
observations directly from N(0, σ²C²) (out) and (1 − q)N(0, σ²C²) + qN(C, σ²C²) (in),
the same number of runs per arm, scores them by the exact likelihood ratio, and goes
through the same bound code. Reported: medians over seeds of μ_LB (sum, LR, oracle),
the accountant's μ upper bound (the μ bracket's high end), the ratios LR/μ_UB and
LR/oracle, and ε_LB; CPU seconds (time.process_time, torch and BLAS at 1 thread), wall
seconds and the load average.

One run (``--one-run``): the one-run audit of the kind (m = 1000 Dirac canaries, 100
guesses, Steinke, Nasr, Jagielski 2023) in settings (a) and (b), scored by the sum and
by the likelihood ratio; the engine is deterministic given the seed, so the two scores
come from the same training run. Reported: the one-run ε lower bound (0.95) and the
correct guesses, medians over seeds.

``--no-oracle`` leaves the oracle out (its μ and ε are then NaN); ``--scores-out PATH``
saves the last seed's arm flags and both scores (``.npz``), so that
benchmarks/audit_path_speed.py can run this script as a subprocess next to ``dpaudit
run`` of the same models and check that both trained the same models.

Run: .venv/bin/python benchmarks/canary_lr.py [--trials 10000] [--seeds 5] [--setting a b]
     .venv/bin/python benchmarks/canary_lr.py --one-run [--seeds 5]
     .venv/bin/python benchmarks/canary_lr.py --setting a --seeds 1 --no-oracle --scores-out s.npz
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import math
import statistics
import time

import numpy as np
import torch

from dpaudit.accounting.upper_bounds import from_records
from dpaudit.dpsgd.api import run_dpsgd_from_section
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.setup import _setup
from dpaudit.dpsgd.setup import purpose_seed as _stream_seed
from dpaudit.dpsgd.summary import _many_run_bounds
from dpaudit.kinds.base import VerdictBudget
from dpaudit.theory.whitebox import mixture_log_likelihood_ratio
from dpaudit.trainers import canary_observer
from dpaudit.training import GradientCanary, train_many

DELTA = 1e-5
CONFIDENCE = 0.95
SETTINGS = {
    "a": {"rows": 100, "batch_size": 2, "epochs": 10, "sigma": 0.6},
    "b": {"rows": 100, "batch_size": 25, "epochs": 2, "sigma": 1.0},
}


def _section(setting: dict, trials: int) -> DpsgdSection:
    return DpsgdSection.model_validate(
        {
            "trainer": "dpsgd",
            "canary": "dirac",
            "threat_model": "white-box",
            "score": "likelihood-ratio",
            "rows": setting["rows"],
            "trials": trials,
            "training": {
                "epochs": setting["epochs"],
                "batch_size": setting["batch_size"],
                "learning_rate": 0.5,
                "dp": {"noise_multiplier": setting["sigma"], "clipping_norm": 1.0},
            },
        }
    )


def _train(section: DpsgdSection, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
    """Both scores of 2·trials engine runs (model g has the canary iff g is odd)."""
    spec = DpsgdSpec(section=section, seed=seed, unit_size=2 * section.trials, base_dir=".")
    setup = _setup(spec)
    total = 2 * section.trials
    included = (np.arange(total) % 2) == 1
    membership = np.ones((total, setup.X.shape[0]), dtype=bool)
    observer = canary_observer(
        membership, setup.training, score="likelihood-ratio", direction=setup.direction
    )
    result = train_many(
        setup.X,
        setup.y,
        membership,
        model=setup.model,
        training=setup.training,
        seed=_stream_seed(seed, 4),
        num_classes=setup.num_classes,
        step_observer=observer,
        gradient_canary=GradientCanary(setup.direction, included),
    )
    return included, observer.sums, observer.log_likelihood_ratios, list(result.records)


def _oracle(q: float, steps: int, sigma: float, trials: int, seed: int) -> np.ndarray:
    """Exact-LR scores of ``trials`` simulated runs per arm: (out scores, in scores)."""
    rng = np.random.default_rng([seed, 20261123])
    out = np.empty((2, trials))
    for arm in (0, 1):
        for start in range(0, trials, 1000):
            k = min(1000, trials - start)
            x = sigma * rng.standard_normal((k, steps))
            if arm:
                x += rng.random((k, steps)) < q  # C = 1 when the canary is sampled
            out[arm, start : start + k] = mixture_log_likelihood_ratio(
                x, sampling_rate=q, noise_multiplier=sigma, clipping_norm=1.0
            ).sum(axis=1)
    return out


def _bounds(section: DpsgdSection, upper, neg, pos, seed: int) -> tuple[float, float]:
    level = VerdictBudget(CONFIDENCE, 2).level  # the kind's ε and μ comparisons
    eps, mu = _many_run_bounds(section, upper, neg, pos, level=level, seed=seed)
    return eps.value, mu.value


def _ratio(a: float, b: float) -> float:
    """a / b, NaN when b is 0 or NaN (too few trials for a bound, or no oracle)."""
    return a / b if b > 0 else math.nan


def _one_run(names: list[str], seeds: int) -> None:
    import tempfile

    for name in names:
        setting = SETTINGS[name]
        rows: dict[str, list[tuple[float, int]]] = {"sum": [], "likelihood-ratio": []}
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for seed in range(seeds):
            for score in rows:
                section = _section(setting, 1).model_dump()
                section.update(trials=0, score=score, one_run={"canaries": 1000, "guesses": 100})
                with tempfile.TemporaryDirectory() as d:
                    (c,) = run_dpsgd_from_section(section, seed=seed, run_dir=d).comparisons
                rows[score].append((c.lower.value, int(c.lower.counts["correct"])))
            print(
                f"  ({name}) one run, seed {seed}: ε_LB sum {rows['sum'][-1][0]:.3f} "
                f"({rows['sum'][-1][1]}/100 correct), LR {rows['likelihood-ratio'][-1][0]:.3f} "
                f"({rows['likelihood-ratio'][-1][1]}/100), ε_UB {c.upper:.3f}",
                flush=True,
            )
        med = {k: statistics.median(v[0] for v in rows[k]) for k in rows}
        print(
            f"({name}) one run, medians of {seeds} seeds: ε_LB sum {med['sum']:.3f}, LR "
            f"{med['likelihood-ratio']:.3f}; CPU {time.process_time() - cpu0:.1f} s, wall "
            f"{time.perf_counter() - wall0:.1f} s, load {os.getloadavg()[0]:.2f}",
            flush=True,
        )


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--trials", type=int, default=10_000)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--setting", nargs="+", default=["a", "b"], choices=sorted(SETTINGS))
    p.add_argument("--one-run", action="store_true", help="the one-run audit instead")
    p.add_argument("--no-oracle", action="store_true", help="skip the simulated oracle")
    p.add_argument("--scores-out", default=None, help="save the last seed's scores (.npz)")
    a = p.parse_args()
    torch.set_num_threads(1)
    if a.one_run:
        _one_run(a.setting, a.seeds)
        return
    print(f"{a.trials} models per arm, seeds 0..{a.seeds - 1}, δ = {DELTA}, c = {CONFIDENCE}")
    for name in a.setting:
        setting = SETTINGS[name]
        section = _section(setting, a.trials)
        rows: list[dict[str, float]] = []
        for seed in range(a.seeds):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            included, sums, llrs, records = _train(section, seed)
            train_cpu = time.process_time() - cpu0
            upper = from_records(records, DELTA)
            r = records[0]
            q, steps, sigma = r.sampling_rate, r.steps, r.noise_multiplier
            eps_sum, mu_sum = _bounds(section, upper, sums[~included], sums[included], seed)
            eps_lr, mu_lr = _bounds(section, upper, llrs[~included], llrs[included], seed)
            eps_or, mu_or = math.nan, math.nan
            if not a.no_oracle:
                sim = _oracle(q, steps, sigma, a.trials, seed)
                eps_or, mu_or = _bounds(section, upper, sim[0], sim[1], seed)
            if a.scores_out is not None:
                np.savez(a.scores_out, included=included, sums=sums, llrs=llrs)
            row = {
                "q": q,
                "T": steps,
                "mu_ub": float(upper.mu or float("nan")),
                "eps_ub": upper.epsilon,
                "mu_sum": mu_sum,
                "mu_lr": mu_lr,
                "mu_oracle": mu_or,
                "eps_sum": eps_sum,
                "eps_lr": eps_lr,
                "eps_oracle": eps_or,
                "train_cpu": train_cpu,
                "cpu": time.process_time() - cpu0,
                "wall": time.perf_counter() - wall0,
                "load": os.getloadavg()[0],
            }
            rows.append(row)
            print(
                f"  ({name}) seed {seed}: q {q:.3g} T {steps} σ {sigma:g}: μ_LB sum "
                f"{mu_sum:.3f}, LR {mu_lr:.3f}, oracle {mu_or:.3f}; μ_UB {row['mu_ub']:.3f}; "
                f"ε_LB sum {eps_sum:.3f}, LR {eps_lr:.3f}, oracle {eps_or:.3f}, ε_UB "
                f"{upper.epsilon:.3f}; CPU {row['cpu']:.1f} s (training {train_cpu:.1f} s), "
                f"wall {row['wall']:.1f} s, load {row['load']:.2f}",
                flush=True,
            )
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(
            f"({name}) medians of {a.seeds} seeds: μ_LB sum {med['mu_sum']:.3f}, LR "
            f"{med['mu_lr']:.3f}, oracle {med['mu_oracle']:.3f}; μ_UB {med['mu_ub']:.3f}; "
            f"LR/μ_UB {_ratio(med['mu_lr'], med['mu_ub']):.3f} (goal ≥ 0.5), LR/oracle "
            f"{_ratio(med['mu_lr'], med['mu_oracle']):.3f} (goal ≥ 0.9), sum/μ_UB "
            f"{_ratio(med['mu_sum'], med['mu_ub']):.3f}, LR/sum "
            f"{_ratio(med['mu_lr'], med['mu_sum']):.3f}; "
            f"ε_LB sum {med['eps_sum']:.3f}, LR {med['eps_lr']:.3f}, oracle "
            f"{med['eps_oracle']:.3f} (ε_UB {med['eps_ub']:.3f}); CPU {med['cpu']:.1f} s per "
            f"seed, wall {med['wall']:.1f} s, load {med['load']:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
