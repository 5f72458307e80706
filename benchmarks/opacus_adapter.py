"""White-box audit of a real Opacus loop through dpaudit's adapter, and its cost.

The loop is ``audits/plugins/opacus_loop.py`` (Opacus 1.6, logistic regression on
breast_cancer with dpaudit's all-zero feature, Poisson q = 1/4, T = 8, σ = 1, C = 1).
``--trials`` models per arm (odd models hold the Dirac canary), run by the adapter in
chunks; each model's per-step privatised sums on the canary's coordinate are scored two
ways from the SAME runs: the likelihood-ratio score (Σ_t of
dpaudit.theory.whitebox.mixture_log_likelihood_ratio, what ``[dpsgd] score`` defaults to) and
the plain sum. Bounds: rigorous ε (δ = 1e-5) and μ lower bounds, split threshold, each at
level 1 − 0.05/2 (the ε and μ comparisons of one verdict), against dpaudit's accountant
for the records read from Opacus (PLD ε, μ bracket high end) and Opacus' own PRV ε.

Cost: CPU seconds per model (time.process_time, torch.set_num_threads(1)) of the Opacus
loop through the adapter, of the same loop without the adapter (plain script), and of
dpaudit's own engine on the same problem (568 rows, batch 142, so q = 1/4 exactly; 8
steps; same model), next to wall time and the load average.

Validity (``--validity R``): R disjoint audits of ``--validity-trials`` models per arm of
the correct loop (both scores, the same levels); the number of audits with a lower bound
above its upper bound must stay below the binomial ceiling binom.ppf(0.999, R, 0.05) (each
audit's verdict fails with probability at most 1 − 0.95 on a correct loop).

Run: .venv/bin/python benchmarks/opacus_adapter.py [--trials 1000] [--seed 0]
     .venv/bin/python benchmarks/opacus_adapter.py --validity 400 [--validity-trials 16]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "audits"))


def _setup(seed: int):
    from dpaudit.dpsgd.schema import DpsgdSection
    from dpaudit.dpsgd.setup import _setup_cached

    section = DpsgdSection.model_validate(
        {
            "trainer": "plugins.opacus_loop:train",
            "dataset": "sklearn:breast_cancer",
            "canary": "dirac",
            "threat_model": "white-box",
        }
    )
    return _setup_cached(section.model_dump_json(), seed, str(ROOT / "audits"))


def _adapter_runs(trials: int, seed: int, chunk: int = 100):
    from plugins.opacus_loop import train

    from dpaudit.trainers import CanarySetup, TrainerSettings

    setup = _setup(seed)
    total = 2 * trials
    transcripts, records, claims = [], [], []
    cpu, wall = time.process_time(), time.perf_counter()
    for start in range(0, total, chunk):
        stop = min(total, start + chunk)
        included = (np.arange(start, stop) % 2) == 1
        out = train(
            setup.X,
            setup.y,
            np.ones((stop - start, setup.X.shape[0]), dtype=bool),
            seed=seed,
            canary=CanarySetup(
                kind="dirac",
                threat_model="white-box",
                included=included,
                direction=setup.direction,
                score="sum",
            ),
            settings=TrainerSettings(
                model=setup.model,
                training=setup.training,
                num_classes=setup.num_classes,
                model_offset=start,
                options={"delta": 1e-5},
            ),
        )
        transcripts.append(train.transcripts)
        records.extend(out.records)
        claims.append(out.claim.epsilon)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    x = np.concatenate(transcripts)
    included = (np.arange(total) % 2) == 1
    return x, included, records, max(claims), cpu / total, wall / total


def _plain_cost(models: int, seed: int) -> tuple[float, float]:
    from plugins.opacus_plain import train

    setup = _setup(seed)
    cpu, wall = time.process_time(), time.perf_counter()
    for k in range(models):
        torch.manual_seed(k)
        train(setup.X, setup.y)
    return (time.process_time() - cpu) / models, (time.perf_counter() - wall) / models


def _engine_cost(models: int, seed: int) -> tuple[float, float]:
    from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
    from dpaudit.dpsgd.units import dpsgd_unit

    section = DpsgdSection.model_validate(
        {
            "trainer": "dpsgd",
            "dataset": "sklearn:breast_cancer",
            "rows": 568,
            "canary": "dirac",
            "threat_model": "white-box",
            "trials": models // 2,
            "training": {
                "epochs": 2,
                "batch_size": 142,
                "learning_rate": 0.5,
                "dp": {"noise_multiplier": 1.0, "clipping_norm": 1.0},
            },
        }
    )
    spec = DpsgdSpec(section=section, seed=seed, unit_size=models, base_dir=str(ROOT))
    dpsgd_unit(
        DpsgdSpec(section=section, seed=seed, unit_size=2, base_dir=str(ROOT)), "dpsgd-00000"
    )
    cpu, wall = time.process_time(), time.perf_counter()
    out = dpsgd_unit(spec, "dpsgd-00000")
    assert out["steps"].tolist() == [8] * models
    assert float(out["sampling_rate"][0]) == 0.25
    return (time.process_time() - cpu) / models, (time.perf_counter() - wall) / models


def _validity(repeats: int, trials: int, seed: int) -> None:
    from scipy import stats

    from dpaudit.accounting.upper_bounds import from_records
    from dpaudit.bounds import epsilon_lower_bound, mu_lower_bound
    from dpaudit.theory.whitebox import mixture_log_likelihood_ratio

    x, included, records, _, cpu_model, _ = _adapter_runs(repeats * trials, seed)
    r = records[0]
    upper = from_records(records, 1e-5)
    scores = {
        "likelihood-ratio": mixture_log_likelihood_ratio(
            x,
            sampling_rate=r.sampling_rate,
            noise_multiplier=r.noise_multiplier,
            clipping_norm=r.clipping_norm,
        ).sum(axis=1),
        "sum": x.sum(axis=1),
    }
    ceiling = int(stats.binom.ppf(0.999, repeats, 0.05))
    level = 1 - 0.05 / 2
    for name, s in scores.items():
        violations = 0
        for a in range(repeats):
            part = slice(2 * trials * a, 2 * trials * (a + 1))
            neg, pos = s[part][~included[part]], s[part][included[part]]
            eps = epsilon_lower_bound(
                neg, pos, delta=1e-5, confidence_level=level, threshold="split", seed=a
            )
            mu = mu_lower_bound(neg, pos, confidence_level=level, threshold="split", seed=a)
            violations += int(eps.value > upper.epsilon or mu.value > upper.mu)
        print(
            f"validity {name}: {violations} of {repeats} audits ({trials} models per arm) "
            f"violate (ceiling {ceiling} = binom.ppf(0.999, {repeats}, 0.05))"
        )
    # The canary enters as the protocol says iff every step's privatised sum on its
    # coordinate is N(0, σ²C²) without it and (1 − q)N(0, σ²C²) + qN(C, σ²C²) with it.
    sd, q, shift = r.noise_multiplier * r.clipping_norm, r.sampling_rate, 1 / r.noise_multiplier
    out_ks = stats.kstest(x[~included].ravel() / sd, "norm")
    in_ks = stats.kstest(
        x[included].ravel() / sd,
        lambda z: (1 - q) * stats.norm.cdf(z) + q * stats.norm.cdf(z - shift),
    )
    print(
        f"per-step sums, {x[~included].size} steps without / {x[included].size} with the "
        f"canary: KS p = {out_ks.pvalue:.3g} against N(0, σ²C²), p = {in_ks.pvalue:.3g} "
        "against (1 − q)N(0, σ²C²) + qN(C, σ²C²)"
    )
    print(f"adapter CPU {cpu_model * 1e3:.1f} ms/model over {2 * repeats * trials} runs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cost-models", type=int, default=200)
    parser.add_argument("--validity", type=int, default=0, help="repeated audits instead")
    parser.add_argument("--validity-trials", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    if args.validity:
        print(f"load average before: {os.getloadavg()}")
        _validity(args.validity, args.validity_trials, args.seed)
        print(f"load average after: {os.getloadavg()}")
        return
    from dpaudit.accounting.upper_bounds import from_records
    from dpaudit.bounds import epsilon_lower_bound, mu_lower_bound
    from dpaudit.theory.whitebox import mixture_log_likelihood_ratio

    print(f"load average before: {os.getloadavg()}")
    x, included, records, opacus_eps, cpu_model, wall_model = _adapter_runs(args.trials, args.seed)
    sigma = records[0].noise_multiplier
    q, clip = records[0].sampling_rate, records[0].clipping_norm
    upper = from_records(records, 1e-5)
    print(
        f"records: σ {sigma}, q {q}, T {records[0].steps}, C {clip}; dpaudit PLD ε "
        f"{upper.epsilon:.3f}, μ ≤ {upper.mu:.3f}; Opacus PRV ε {opacus_eps:.3f}"
    )
    scores = {
        "likelihood-ratio": np.nansum(
            mixture_log_likelihood_ratio(
                np.nan_to_num(x), sampling_rate=q, noise_multiplier=sigma, clipping_norm=clip
            ),
            axis=1,
        ),
        "sum": np.nansum(x, axis=1),
    }
    level = 1 - 0.05 / 2
    for name, s in scores.items():
        neg, pos = s[~included], s[included]
        eps = epsilon_lower_bound(
            neg, pos, delta=1e-5, confidence_level=level, threshold="split", seed=args.seed
        )
        mu = mu_lower_bound(neg, pos, confidence_level=level, threshold="split", seed=args.seed)
        print(
            f"{name:16s} {args.trials} models/arm: μ_LB {mu.value:.3f} (tightness "
            f"{mu.value / upper.mu:.2f} of μ ≤ {upper.mu:.3f}), ε_LB {eps.value:.3f} "
            f"(tightness {eps.value / upper.epsilon:.3f} of ε {upper.epsilon:.3f})"
        )
    print(
        f"adapter: {2 * args.trials} Opacus runs, CPU {cpu_model * 1e3:.1f} ms/model, "
        f"wall {wall_model * 1e3:.1f} ms/model"
    )
    with tempfile.TemporaryDirectory():
        plain_cpu, plain_wall = _plain_cost(args.cost_models, args.seed)
        engine_cpu, engine_wall = _engine_cost(args.cost_models, args.seed)
    print(
        f"plain Opacus loop: CPU {plain_cpu * 1e3:.1f} ms/model, wall {plain_wall * 1e3:.1f}"
        f" ms/model; dpaudit engine: CPU {engine_cpu * 1e3:.2f} ms/model, wall "
        f"{engine_wall * 1e3:.2f} ms/model ({args.cost_models} models); adapter/engine CPU "
        f"{cpu_model / engine_cpu:.0f}×"
    )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
