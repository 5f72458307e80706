"""Validity and power of the two new trained-model bounds, with models actually trained.

(a) Intermediate models of 'multiparty-gradient' (``checkpoint`` = t): 400 audits of θ_1
    (T = 4, ε = 15, δ = 1e-5, 20 rows, 3 parties), ``--per-arm`` models per arm each, the
    ε and μ lower bounds at 0.975 each (the kind's split of 1 − c = 0.05) held against
    the tighter of the corollary (√(t/T)·ε, δ) and the accountant's exact GDP of the t
    steps that ran; power control: θ_4 audited against θ_1's bounds.
(b) 'gradient-laplace': 400 audits of the trainer (ε = 1, T = 4, C = 1, d = 5, 40 rows)
    against its claim (ε = 1, δ = 0; μ of pure ε-DP); power control: the same trainer
    with noise b/20 (``noise_factor`` = 0.05) against the same claim.

A correct audit violates with probability ≤ 0.05, so more than binom.ppf(0.999, 400,
0.05) = 35 violations would be a failure of validity. Reported: violations per setting,
CPU seconds (time.process_time, BLAS at 1 thread, torch 1 thread), wall seconds, load.

Run: .venv/bin/python benchmarks/intermediate_and_laplace_validity.py [--per-arm 100]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import time

import numpy as np
import torch
from scipy import stats

from dpaudit.accounting.upper_bounds import from_claim, from_records
from dpaudit.dpsgd.canaries import dirac_direction
from dpaudit.dpsgd.schema import DpsgdSection
from dpaudit.dpsgd.summary import _many_run_bounds, _tighter
from dpaudit.kinds.base import VerdictBudget
from dpaudit.models import ModelSpec
from dpaudit.trainers import (
    CanarySetup,
    TrainerSettings,
    gradient_laplace_trainer,
    multiparty_gradient_trainer,
)
from dpaudit.training import TrainingSpec

REPEATS, C = 400, 0.95


def _data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, n)
    X = rng.standard_normal((n, 4)) * 0.5
    X[:, 0] += np.where(y == 1, 1.0, -1.0)
    X /= np.maximum(1.0, np.linalg.norm(X, axis=1, keepdims=True))
    return np.concatenate([X, np.zeros((n, 1))], axis=1).astype(np.float32), y


def _train(trainer, total: int, n: int, epochs: int, options: dict, seed: int, **kw):
    X, y = _data(n)
    included = (np.arange(total) % 2) == 1
    canary = CanarySetup(
        kind="dirac",
        threat_model="white-box",
        included=included,
        direction=dirac_direction(2 * 5 + 2, 4),
    )
    settings = TrainerSettings(
        model=ModelSpec(kind="logistic"),
        training=TrainingSpec(epochs=epochs, learning_rate=0.5, full_batch=True),
        num_classes=2,
        options=options,
    )
    out = trainer(
        X, y, np.ones((total, n), bool), seed=seed, canary=canary, settings=settings, **kw
    )
    return included, out


def _violations(section, upper, included, scores, per_arm: int) -> int:
    level = VerdictBudget(C, 2).level
    v = 0
    for r in range(REPEATS):
        part = slice(2 * per_arm * r, 2 * per_arm * (r + 1))
        s, i = scores[part], included[part]
        e, m = _many_run_bounds(section, upper, s[~i], s[i], level=level, seed=r)
        v += int(e.value > upper.epsilon or (upper.mu is not None and m.value > upper.mu))
    return v


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-arm", type=int, default=100)
    per_arm = parser.parse_args().per_arm
    torch.set_num_threads(1)
    total = 2 * per_arm * REPEATS
    print(f"ceiling {int(stats.binom.ppf(0.999, REPEATS, 1 - C))} of {REPEATS}; per arm {per_arm}")
    cpu, wall = time.process_time(), time.time()
    mp = {"parties": 3, "epsilon": 15.0, "delta": 1e-5, "lam": 0.01}
    section = DpsgdSection.model_validate(
        {"trainer": "multiparty-gradient", "rows": 20, "trials": per_arm, "options": mp}
    )
    inc, theta_t = _train(multiparty_gradient_trainer, total, 20, 4, {**mp, "checkpoint": 1}, 23)
    upper = _tighter(from_records(list(theta_t.records), 1e-5), from_claim(theta_t.claim, 1e-5))
    inc_f, theta_f = _train(multiparty_gradient_trainer, total, 20, 4, mp, 24)
    print(
        f"(a) theta_1 vs (eps {upper.epsilon:.4g}, mu {upper.mu:.4g}): "
        f"{_violations(section, upper, inc, theta_t.scores, per_arm)} violations; "
        f"theta_4 vs the same: {_violations(section, upper, inc_f, theta_f.scores, per_arm)}"
    )
    gl = {"epsilon": 1.0, "clip": 1.0}
    section = DpsgdSection.model_validate(
        {"trainer": "gradient-laplace", "trials": per_arm, "options": gl}
    )
    inc, ok = _train(gradient_laplace_trainer, total, 40, 4, gl, 31)
    upper = from_claim(ok.claim, 1e-5)
    inc_b, bug = _train(gradient_laplace_trainer, total, 40, 4, gl, 32, noise_factor=0.05)
    print(
        f"(b) gradient-laplace vs (eps {upper.epsilon:.4g}, mu {upper.mu:.4g}): "
        f"{_violations(section, upper, inc, ok.scores, per_arm)} violations; "
        f"noise b/20 vs the same: {_violations(section, upper, inc_b, bug.scores, per_arm)}"
    )
    print(
        f"CPU {time.process_time() - cpu:.1f} s, wall {time.time() - wall:.1f} s, "
        f"load {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
