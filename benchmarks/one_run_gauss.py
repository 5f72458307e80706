"""One-run audits of DP-SGD: the Gaussian-pair μ (Agrawal et al. 2026) beside the f-DP ladder.

``--mode bounds`` (default): for each seed, one training run of dpaudit's one-run audit
(m Dirac canaries, fair coins, white-box likelihood-ratio scores:
``dpaudit.dpsgd.one_run.one_run_unit``) summarised as the ``dpsgd`` kind does
(``one_run_comparisons`` at ``--level``): the rigorous f-DP ladder μ, and the Gaussian-pair
μ (``dpaudit.bounds.one_run_gauss``, validity ``asymptotic-one-run``, never in the verdict).
Beside them, both on scores drawn from the mechanism's exact law with no interference
between canaries (per step x_t ~ N(b_t·C, σ²C²), b_t ~ Bernoulli(q) for an included canary,
0 otherwise; the same mixture likelihood ratio): the "ideal" one-run inputs. The settings,
the run and the exact-law draw are those of ``benchmarks/one_run_fdp.py`` (imported).

``--mode coverage``: how often the Gaussian-pair limit at level c covers the pair's own
κ = (a₁ − a₀)/s of the exact white-box score law at small m, where its model (Gaussian
scores) is only approximate: Poisson DP-SGD q 0.25, σ 1, T ∈ {8, 1} steps, likelihood-
ratio scores, κ by quadrature of the per-step law (steps are independent, so the sum's mean
and variance are T times one step's); and how often the limit exceeds the high end of the
accountant's μ bracket (a false violation if it were in a verdict). Also the exactly
Gaussian case (full-batch, where the model holds and coverage is exact).

CPU seconds by time.process_time with torch, OMP and BLAS at 1 thread; medians over seeds.

Usage:
    .venv/bin/python benchmarks/one_run_gauss.py --setting poisson --seeds 5
    .venv/bin/python benchmarks/one_run_gauss.py --setting full-batch --seeds 5
    .venv/bin/python benchmarks/one_run_gauss.py --mode coverage --repeats 2000
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import statistics
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _fdp_harness():
    """benchmarks/one_run_fdp.py: its settings, audit section and exact-law scores."""
    spec = importlib.util.spec_from_file_location(
        "one_run_fdp", ROOT / "benchmarks" / "one_run_fdp.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(one: dict, section, *, level: float) -> dict:
    """The ladder μ and the Gaussian-pair μ of one stored run, as the dpsgd kind reports
    them (one_run_comparisons)."""
    from dpaudit.dpsgd.one_run import one_run_comparisons

    comps = one_run_comparisons(one, section, delta=1e-5, level=level, in_verdict=True)
    ladder = next(
        c for c in comps if c.parameter == "mu" and c.lower.validity == "rigorous-one-run"
    )
    gauss = next(c for c in comps if c.lower.validity == "asymptotic-one-run")
    assert not gauss.in_verdict
    return {
        "ladder": ladder.lower.value,
        "gauss": gauss.lower.value,
        "gauss_point": gauss.lower.details["point_estimate"],
        "variance_ratio": gauss.lower.details["variance_ratio"],
        "mu_upper": ladder.upper,
    }


def run_bounds(setting_name: str, seeds: int, level: float) -> None:
    import torch

    torch.set_num_threads(1)
    from dpaudit.dpsgd.one_run import one_run_unit
    from dpaudit.dpsgd.schema import DpsgdSpec

    harness = _fdp_harness()
    setting = harness.SETTINGS[setting_name]
    m = setting["canaries"]
    section = harness._section(setting, m)
    rows = []
    for seed in range(seeds):
        spec = DpsgdSpec(section=section, seed=seed, unit_size=1, base_dir=str(ROOT / "audits"))
        load0 = os.getloadavg()[0]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        one = one_run_unit(spec)
        train_cpu = time.process_time() - cpu0
        cpu1 = time.process_time()
        got = _read(one, section, level=level)
        read_cpu = time.process_time() - cpu1
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        q, steps = float(one["sampling_rate"][0]), int(one["steps"][0])
        scores, coins = harness._ideal_scores(
            m, q=q, steps=steps, sigma=setting["sigma"], seed=seed
        )
        ideal = _read(
            {**one, "one_run_scores": scores, "one_run_included": coins}, section, level=level
        )
        rows.append((got, ideal, cpu, train_cpu, read_cpu, wall, load0))
        print(
            f"seed {seed}: dpaudit ladder μ {got['ladder']:.3f} gauss μ {got['gauss']:.3f} "
            f"(point {got['gauss_point']:.3f}, var ratio {got['variance_ratio']:.2f}) | exact law "
            f"ladder {ideal['ladder']:.3f} gauss {ideal['gauss']:.3f} | q {q:g} T {steps} | "
            f"CPU {cpu:.1f} s (training {train_cpu:.1f}, bounds {read_cpu:.2f}) wall "
            f"{wall:.1f} s load {load0:.1f}",
            flush=True,
        )

    def med(i: int, key: str) -> float:
        return statistics.median(r[i][key] for r in rows)

    mu_ub = rows[0][0]["mu_upper"]
    print(
        f"\n{setting_name}: m = {m}, level {level}, {seeds} seeds; μ_UB {mu_ub:.4f}\n"
        f"median μ_LB: dpaudit ladder {med(0, 'ladder'):.3f}  dpaudit gauss {med(0, 'gauss'):.3f}"
        f"  exact-law ladder {med(1, 'ladder'):.3f}  exact-law gauss {med(1, 'gauss'):.3f}\n"
        f"median gauss/μ_UB {med(0, 'gauss') / mu_ub:.3f}  ladder/μ_UB "
        f"{med(0, 'ladder') / mu_ub:.3f}; median gauss point estimate {med(0, 'gauss_point'):.3f}\n"
        f"median CPU {statistics.median(r[2] for r in rows):.1f} s (training "
        f"{statistics.median(r[3] for r in rows):.1f} s, both bounds "
        f"{statistics.median(r[4] for r in rows):.2f} s), wall "
        f"{statistics.median(r[5] for r in rows):.1f} s, load "
        f"{statistics.median(r[6] for r in rows):.1f}"
    )


# ---------------------------------------------------------------------------- coverage


def _step_moments(q: float, sigma: float, included: bool) -> tuple[float, float]:
    """Mean and variance of one step's likelihood ratio log[(1 − q) + q·e^((x − 1/2)/σ²)]."""
    from scipy import integrate, stats

    def llr(x: float) -> float:
        return float(np.logaddexp(math.log1p(-q), math.log(q) + (x - 0.5) / sigma**2))

    def density(x: float) -> float:
        out = stats.norm.pdf(x, 0.0, sigma)
        return (1 - q) * out + q * stats.norm.pdf(x, 1.0, sigma) if included else out

    lo, hi = -12.0 * sigma, 1.0 + 12.0 * sigma
    mean = integrate.quad(lambda x: llr(x) * density(x), lo, hi, limit=200)[0]
    second = integrate.quad(lambda x: llr(x) ** 2 * density(x), lo, hi, limit=200)[0]
    return mean, second - mean**2


def _kappa(q: float, sigma: float, steps: int) -> float:
    """κ of the T-step likelihood-ratio sums: √T·(E₁ − E₀)/√((V₀ + V₁)/2)."""
    m0, v0 = _step_moments(q, sigma, False)
    m1, v1 = _step_moments(q, sigma, True)
    return math.sqrt(steps) * (m1 - m0) / math.sqrt((v0 + v1) / 2)


def _poisson_scores(rng, repeats: int, m: int, *, q: float, steps: int, sigma: float):
    from dpaudit.theory.whitebox import mixture_log_likelihood_ratio

    coins = rng.random((repeats, m)) < 0.5
    sampled = (rng.random((repeats, m, steps)) < q) & coins[..., None]
    x = rng.normal(sampled * 1.0, sigma)
    llr = mixture_log_likelihood_ratio(
        x, sampling_rate=q, noise_multiplier=sigma, clipping_norm=1.0
    ).sum(axis=2)
    return coins, llr


def run_coverage(repeats: int, level: float) -> None:
    from scipy import stats

    from dpaudit.accounting import dpsgd_mu_bracket
    from dpaudit.bounds.one_run_gauss import one_run_gaussian_mu_lower_bound

    print(f"coverage at c = {level}, {repeats} one-run audits per row")
    print(
        "| scores | m | κ of the score law | μ_high | covers κ | > μ_high | median μ_LB | CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    cases = [
        ("Poisson q 0.25, T 8, σ 1, likelihood ratio", 0.25, 8, 1.0),
        ("Poisson q 0.25, T 1, σ 1, likelihood ratio", 0.25, 1, 1.0),
        ("full batch T 5, σ √5 (exactly Gaussian, κ = μ = 1)", 1.0, 5, math.sqrt(5.0)),
    ]
    for name, q, steps, sigma in cases:
        kappa = _kappa(q, sigma, steps) if q < 1 else math.sqrt(steps) / sigma
        high = dpsgd_mu_bracket(noise_multiplier=sigma, sampling_rate=q, steps=steps)[1]
        for m in (20, 50, 200, 1000):
            rng = np.random.default_rng([m, steps, 0x6A55])
            cpu0 = time.process_time()
            coins, scores = _poisson_scores(rng, repeats, m, q=q, steps=steps, sigma=sigma)
            values = []
            for s, k in zip(scores, coins, strict=True):
                try:
                    values.append(
                        one_run_gaussian_mu_lower_bound(s, k, confidence_level=level).value
                    )
                except ValueError:  # < 2 canaries in a group (m = 20: rare)
                    values.append(0.0)
            v = np.array(values)
            cpu = time.process_time() - cpu0
            covers = float((v <= kappa).mean())
            lo, hi = stats.binomtest(int((v <= kappa).sum()), repeats).proportion_ci(0.95)
            print(
                f"| {name} | {m} | {kappa:.4f} | {high:.4f} | {covers:.4f} [{lo:.3f}, {hi:.3f}] "
                f"| {int((v > high).sum())} | {np.median(v):.3f} | {cpu:.1f} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("bounds", "coverage"), default="bounds")
    parser.add_argument("--setting", choices=("poisson", "full-batch"), default="poisson")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--level", type=float, default=0.95, help="the one-run share's level")
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    if args.mode == "bounds":
        run_bounds(args.setting, args.seeds, args.level)
    else:
        run_coverage(args.repeats, args.level)


if __name__ == "__main__":
    main()
