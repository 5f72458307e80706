"""One-run audits of DP-SGD: Steinke et al.'s ε and the f-DP μ (guess ladder) side by side.

For each setting and seed, one training run of dpaudit's one-run audit (m Dirac canaries,
fair coins, white-box likelihood-ratio scores: ``dpaudit.dpsgd.one_run.one_run_unit``) is
summarised exactly as the ``dpsgd`` kind does (``one_run_comparisons``: ε and μ sharing one
share at ``--level``, each at half of it). Beside it, the ideal one-run test at the same m:
the same rule on scores drawn from the mechanism's exact law with no interference between
canaries (per step x_t ~ N(b_t·C, σ²C²), b_t ~ Bernoulli(q) for an included canary, 0
otherwise; scored by the same mixture likelihood ratio), same seed count.

Settings (``--setting``):

- ``dpsgd-dpsgd``: audits/dpsgd-dpsgd.toml's training (100 rows, q = 0.25, T = 8, σ = 0.8),
  m canaries (``--canaries``, default 1000, the file's), guesses as in the file (100).
- ``poisson``: the same with σ = 1 (q = 0.25, T = 8), m = 10⁴, 1,000 configured guesses.
- ``full-batch``: DP-GD (batch = the 100 rows, q = 1), T = 5, σ = √5: exactly 1-GDP.

CPU seconds by time.process_time with torch, OMP and BLAS at 1 thread; medians over seeds.

Usage:
    .venv/bin/python benchmarks/one_run_fdp.py --setting dpsgd-dpsgd --seeds 5
    .venv/bin/python benchmarks/one_run_fdp.py --setting poisson --seeds 5
    .venv/bin/python benchmarks/one_run_fdp.py --setting full-batch --seeds 5
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

SETTINGS = {
    "dpsgd-dpsgd": {"sigma": 0.8, "batch": 25, "epochs": 2, "canaries": 1000, "guesses": 100},
    "poisson": {"sigma": 1.0, "batch": 25, "epochs": 2, "canaries": 10_000, "guesses": 1000},
    "full-batch": {
        "sigma": math.sqrt(5.0),
        "batch": 100,
        "epochs": 5,
        "canaries": 10_000,
        "guesses": 1000,
    },
}


def _section(setting: dict, canaries: int):
    from dpaudit.dpsgd.schema import DpsgdSection

    return DpsgdSection.model_validate(
        {
            "trainer": "dpsgd",
            "canary": "dirac",
            "threat_model": "white-box",
            "rows": 100,
            "trials": 0,
            "training": {
                "epochs": setting["epochs"],
                "batch_size": setting["batch"],
                "learning_rate": 0.5,
                "dp": {"noise_multiplier": setting["sigma"], "clipping_norm": 1.0},
            },
            "one_run": {"canaries": canaries, "guesses": setting["guesses"]},
        }
    )


def _ideal_scores(m: int, *, q: float, steps: int, sigma: float, seed: int):
    """Scores of m canaries from the exact law of the white-box transcript (C = 1)."""
    from dpaudit.theory.whitebox import mixture_log_likelihood_ratio

    rng = np.random.default_rng([seed, 0x1DEA1])
    coins = rng.random(m) < 0.5
    sampled = (rng.random((m, steps)) < q) & coins[:, None]
    x = rng.normal(sampled * 1.0, sigma)
    llr = mixture_log_likelihood_ratio(
        x, sampling_rate=q, noise_multiplier=sigma, clipping_norm=1.0
    )
    return llr.sum(axis=1), coins


def _bounds(one: dict, section, *, level: float) -> dict:
    from dpaudit.dpsgd.one_run import one_run_comparisons

    comps = one_run_comparisons(one, section, delta=1e-5, level=level, in_verdict=True)
    eps = next(c for c in comps if c.parameter == "epsilon")
    mu = next(c for c in comps if c.parameter == "mu")
    return {
        "eps": eps.lower.value,
        "eps_upper": eps.upper,
        "mu": mu.lower.value,
        "mu_upper": mu.upper,
        "rung": mu.lower.counts["guesses"],
        "correct": mu.lower.counts["correct"],
        "decides": "mu" if mu.in_verdict else "epsilon",
    }


def _uncorrected(scores: np.ndarray, coins: np.ndarray, section, *, level: float) -> float:
    """NOT a valid bound: the best rung's μ at the whole share, no union bound over the
    rungs and no split with ε. Shows what the two corrections cost."""
    from dpaudit.bounds import one_run_guesses
    from dpaudit.bounds.fdp_one_run import guess_ladder, one_run_mu_lower_bound

    best = 0.0
    for r in guess_ladder(scores.size, include=(section.one_run.guesses,)):
        rr, v = one_run_guesses(scores, coins, guesses_per_side=r // 2)
        b = one_run_mu_lower_bound(
            canaries=scores.size, guesses=rr, correct=v, confidence_level=level
        )
        best = max(best, b.value)
    return best


def run(setting_name: str, seeds: int, level: float, canaries: int | None) -> None:
    import torch

    torch.set_num_threads(1)
    from dpaudit.dpsgd.one_run import one_run_unit
    from dpaudit.dpsgd.schema import DpsgdSpec

    setting = SETTINGS[setting_name]
    m = canaries or setting["canaries"]
    section = _section(setting, m)
    rows = []
    for seed in range(seeds):
        spec = DpsgdSpec(section=section, seed=seed, unit_size=1, base_dir=str(ROOT / "audits"))
        load0 = os.getloadavg()[0]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        one = one_run_unit(spec)
        train_cpu = time.process_time() - cpu0
        got = _bounds(one, section, level=level)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        q, steps = float(one["sampling_rate"][0]), int(one["steps"][0])
        scores, coins = _ideal_scores(m, q=q, steps=steps, sigma=setting["sigma"], seed=seed)
        ideal_one = {**one, "one_run_scores": scores, "one_run_included": coins}
        ideal = _bounds(ideal_one, section, level=level)
        ideal["uncorrected"] = _uncorrected(scores, coins, section, level=level)
        rows.append((got, ideal, cpu, train_cpu, wall, load0))
        print(
            f"seed {seed}: dpaudit ε {got['eps']:.3f} μ {got['mu']:.3f} (rung {got['rung']}, "
            f"{got['correct']} right, decides {got['decides']}) | ideal ε {ideal['eps']:.3f} "
            f"μ {ideal['mu']:.3f} (rung {ideal['rung']}) | q {q:g} T {steps} | CPU {cpu:.1f} s "
            f"(training {train_cpu:.1f}) wall {wall:.1f} s load {load0:.1f}",
            flush=True,
        )

    def med(i: int, key: str) -> float:
        return statistics.median(r[i][key] for r in rows)

    mu_ub, eps_ub = rows[0][0]["mu_upper"], rows[0][0]["eps_upper"]
    print(
        f"\n{setting_name}: m = {m}, level {level}, {seeds} seeds; μ_UB {mu_ub:.4f}, ε_UB "
        f"{eps_ub:.4f}\n"
        f"median dpaudit μ_LB {med(0, 'mu'):.3f}  ideal μ_LB {med(1, 'mu'):.3f}  "
        f"ratio {med(0, 'mu') / med(1, 'mu'):.3f}  μ_LB/μ_UB {med(0, 'mu') / mu_ub:.3f}\n"
        f"median dpaudit ε_LB {med(0, 'eps'):.3f}  ideal ε_LB {med(1, 'eps'):.3f}\n"
        f"median ideal best rung without the union bounds (not valid) "
        f"{med(1, 'uncorrected'):.3f}\n"
        f"median CPU {statistics.median(r[2] for r in rows):.1f} s (training "
        f"{statistics.median(r[3] for r in rows):.1f} s), wall "
        f"{statistics.median(r[4] for r in rows):.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="dpsgd-dpsgd")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--level", type=float, default=0.99, help="the one-run share's level")
    parser.add_argument("--canaries", type=int, default=None)
    args = parser.parse_args()
    run(args.setting, args.seeds, args.level, args.canaries)


if __name__ == "__main__":
    main()
