"""Claim-curve test vs the (ε, δ) and μ routes: models per arm to prove a planted bug.

White-box Poisson DP-SGD with a Dirac gradient canary (q = 0.25, T = 8, C = 1), claimed
σ = 1, run with σ_run = 0.7 (``--ratio``). Scores are drawn from the exact law of the
white-box observation (:mod:`dpaudit.theory.whitebox`: per step x_t ~ N(b_t, σ_run²), b_t ~
Bernoulli(q) with the canary in, 0 without) and scored by the mixture likelihood ratio at
the CLAIMED σ, as the ``dpsgd`` kind scores white-box runs.

``ladder``: for each seed, the fewest models per arm on a doubling ladder at which each
route alone (each at the full confidence c, threshold ``split``, seed-fixed) proves the
claim false: (ε, δ) route ε_LB > accountant ε at δ; μ route μ_LB > the accountant's μ
bracket high end; claim-curve route a point below the PLD curve of the claim. Median over
seeds. Beside it, each route's IDEAL test at the same n: the threshold fixed in advance
(the best one for that route on 2·10⁶ independent draws per arm) and all n trials counted;
no split, no selection. A correct run (σ_run = σ) is audited at every rung of every seed:
no route may exit 1.

``validity``: repeated claim-curve audits of a correct trainer (σ_run = σ) at n models per
arm: false-violation rate held against the binomial bound for 1 − c; power control at the
planted σ_run = 0.7σ; coverage of the effective noise multiplier (σ′ ≥ σ_run).

CPU seconds by time.process_time (single-threaded numpy), wall, load average.

Usage:
    .venv/bin/python benchmarks/claim_curve.py ladder --seeds 5
    .venv/bin/python benchmarks/claim_curve.py validity --audits 400 --models 2000
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from dpaudit.accounting import dpsgd_epsilon, dpsgd_mu_bracket  # noqa: E402
from dpaudit.bounds import (  # noqa: E402
    epsilon_from_rates,
    epsilon_lower_bound,
    mu_from_rates,
    mu_lower_bound,
)
from dpaudit.bounds.claim_curve import (  # noqa: E402
    claim_curve_test,
    dpsgd_claim,
    effective_noise_multiplier,
)
from dpaudit.errors import InsufficientTrialsError  # noqa: E402
from dpaudit.stats import clopper_pearson_upper  # noqa: E402
from dpaudit.theory.whitebox import mixture_log_likelihood_ratio  # noqa: E402

Q, T, SIGMA, DELTA = 0.25, 8, 1.0, 1e-5


def scores(n: int, sigma_run: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """n white-box scores per arm from the exact law, scored at the claimed σ."""
    out = rng.normal(0.0, sigma_run, (n, T))
    inc = rng.normal(0.0, sigma_run, (n, T)) + (rng.random((n, T)) < Q)

    def score(x: np.ndarray) -> np.ndarray:
        llr = mixture_log_likelihood_ratio(
            x, sampling_rate=Q, noise_multiplier=SIGMA, clipping_norm=1.0
        )
        return np.asarray(llr.sum(axis=1))

    return score(out), score(inc)


def routes(neg: np.ndarray, pos: np.ndarray, *, c: float, seed: int, upper: dict) -> dict:
    """Whether each route proves the claim false on these scores."""
    out = {}
    try:
        out["eps"] = (
            epsilon_lower_bound(neg, pos, delta=DELTA, confidence_level=c, seed=seed).value
            > upper["eps"]
        )
    except InsufficientTrialsError:
        out["eps"] = False
    try:
        out["mu"] = mu_lower_bound(neg, pos, confidence_level=c, seed=seed).value > upper["mu"]
    except InsufficientTrialsError:
        out["mu"] = False
    try:
        out["curve"] = claim_curve_test(
            neg, pos, claim=upper["claim"], confidence_level=c, seed=seed
        ).violated
    except InsufficientTrialsError:
        out["curve"] = False
    return out


def ideal_thresholds(sigma_run: float, upper: dict) -> tuple[np.ndarray, np.ndarray]:
    """The planted run's exact FPR and FNR at a grid of thresholds (2·10⁶ draws per arm)."""
    rng = np.random.default_rng(12345)
    neg, pos = scores(2_000_000, sigma_run, rng)
    grid = np.quantile(neg, 1.0 - np.geomspace(1e-5, 0.9, 400))
    fpr = np.array([np.mean(neg >= t) for t in grid])
    fnr = np.array([np.mean(pos < t) for t in grid])
    return fpr, fnr


def ideal_needed(
    fpr: np.ndarray, fnr: np.ndarray, *, c: float, upper: dict, ladder: list[int]
) -> dict:
    """Each route's ideal test: the threshold fixed in advance, all n counted, expected
    counts (the median count) in place of random ones; the least ladder rung that
    succeeds, over the best fixed threshold."""
    level = 1.0 - (1.0 - c) / 2.0
    claim = upper["claim"]
    found: dict[str, int | None] = {"eps": None, "mu": None, "curve": None}
    for n in ladder:
        u0 = clopper_pearson_upper(np.round(fpr * n).astype(int), n, level=level)
        u1 = clopper_pearson_upper(np.round(fnr * n).astype(int), n, level=level)
        ok = {
            "eps": bool(np.any(epsilon_from_rates(u0, u1, delta=DELTA) > upper["eps"])),
            "mu": bool(np.any(mu_from_rates(u0, u1) > upper["mu"])),
            "curve": bool(np.any(u1 < claim(u0))),
        }
        for k, v in ok.items():
            if v and found[k] is None:
                found[k] = n
    return found


def ladder_cmd(args: argparse.Namespace) -> None:
    t0, w0 = time.process_time(), time.perf_counter()
    claim = dpsgd_claim(noise_multiplier=SIGMA, sampling_rate=Q, steps=T)
    upper = {
        "eps": dpsgd_epsilon(noise_multiplier=SIGMA, sampling_rate=Q, steps=T, delta=DELTA),
        "mu": dpsgd_mu_bracket(noise_multiplier=SIGMA, sampling_rate=Q, steps=T)[1],
        "claim": claim,
    }
    print(f"accountant: ε = {upper['eps']:.4f} at δ = {DELTA}, μ high = {upper['mu']:.4f}")
    ladder = [args.start * 2**k for k in range(args.rungs)]
    needed: dict[str, list[float]] = {"eps": [], "mu": [], "curve": []}
    false_exits = 0
    for seed in range(args.seeds):
        rng = np.random.default_rng(1000 + seed)
        first: dict[str, int | None] = {"eps": None, "mu": None, "curve": None}
        for n in ladder:
            neg, pos = scores(n, args.ratio * SIGMA, rng)
            got = routes(neg, pos, c=args.confidence, seed=seed, upper=upper)
            for k, v in got.items():
                if v and first[k] is None:
                    first[k] = n
            cneg, cpos = scores(n, SIGMA, rng)
            correct = routes(cneg, cpos, c=args.confidence, seed=seed, upper=upper)
            false_exits += sum(correct.values())
            if all(first[k] is not None for k in ("mu", "curve")) and (
                first["eps"] is not None or n >= args.eps_cap
            ):
                break
        print(f"seed {seed}: {first}")
        for k in needed:
            needed[k].append(float(first[k]) if first[k] is not None else float("inf"))
    fpr, fnr = ideal_thresholds(args.ratio * SIGMA, upper)
    ideal = ideal_needed(
        fpr, fnr, c=args.confidence, upper=upper, ladder=[args.start * 2**k for k in range(16)]
    )
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    print(
        "| route | models per arm to exit 1 (median of seeds) | per seed "
        "| ideal test (fixed threshold, all counted) |"
    )
    print("|---|---|---|---|")
    for k, name in (("eps", "(ε, δ)"), ("mu", "μ vs μ bracket"), ("curve", "claim curve (PLD)")):
        med = statistics.median(needed[k])
        print(f"| {name} | {med:,.0f} | {', '.join(f'{v:,.0f}' for v in needed[k])} | {ideal[k]} |")
    print(f"correct run (σ_run = σ): exits 1 on {false_exits} of all route × rung × seed audits")
    print(f"CPU {cpu:.1f} s, wall {wall:.1f} s, load {os.getloadavg()}")


def validity_cmd(args: argparse.Namespace) -> None:
    t0, w0 = time.process_time(), time.perf_counter()
    claim = dpsgd_claim(noise_multiplier=SIGMA, sampling_rate=Q, steps=T)
    rng = np.random.default_rng(7)
    c = args.confidence
    false, power = 0, 0
    # Coverage of "no more private than σ′": σ′ < σ_run may happen at most a 1 − c
    # fraction of the time, for the correct (σ_run = σ) and the planted run alike. The
    # point is the μ bound's (any threshold chosen on the split's other part keeps the
    # joint level of its two limits), so σ′ is informative also for correct runs.
    missed = {1.0: 0, args.ratio: 0}
    sigmas: dict[float, list[float]] = {1.0: [], args.ratio: []}
    for i in range(args.audits):
        neg, pos = scores(args.models, SIGMA, rng)
        r = claim_curve_test(neg, pos, claim=claim, confidence_level=c, seed=i)
        false += r.violated
        bneg, bpos = scores(args.models, args.ratio * SIGMA, rng)
        power += claim_curve_test(bneg, bpos, claim=claim, confidence_level=c, seed=i).violated
        if i >= args.coverage:
            continue
        for ratio, (n_, p_) in ((1.0, (neg, pos)), (args.ratio, (bneg, bpos))):
            mu = mu_lower_bound(n_, p_, confidence_level=c, seed=i)
            if mu.fpr is None or mu.fnr is None:
                continue
            e = effective_noise_multiplier(
                mu.fpr.high,
                mu.fnr.high,
                reference=SIGMA,
                sampling_rate=Q,
                steps=T,
                delta=DELTA,
                confidence_level=c,
            )
            if e.sigma is not None:
                sigmas[ratio].append(e.sigma)
                missed[ratio] += e.sigma < ratio * SIGMA
    ceiling = int(stats.binom.ppf(0.999, args.audits, 1.0 - c))
    cpu, wall = time.process_time() - t0, time.perf_counter() - w0
    print(
        f"claim-curve false violations: {false}/{args.audits} "
        f"(binomial 0.999 quantile at 1 − c = {1 - c:g}: {ceiling})"
    )
    print(f"power control (σ_run = {args.ratio}σ): {power}/{args.audits} violations")
    for ratio in missed:
        med = statistics.median(sigmas[ratio]) if sigmas[ratio] else float("nan")
        print(
            f"σ′ coverage, σ_run = {ratio:g}σ: σ′ < σ_run in {missed[ratio]}/{args.coverage} "
            f"audits (σ′ found in {len(sigmas[ratio])}, median {med:.3f}; ceiling "
            f"{int(stats.binom.ppf(0.999, args.coverage, 1.0 - c))})"
        )
    print(f"CPU {cpu:.1f} s, wall {wall:.1f} s, load {os.getloadavg()}")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("ladder")
    a.add_argument("--seeds", type=int, default=5)
    a.add_argument("--start", type=int, default=125)
    a.add_argument("--rungs", type=int, default=10)
    a.add_argument("--eps-cap", type=int, default=64_000)
    a.add_argument("--ratio", type=float, default=0.7)
    a.add_argument("--confidence", type=float, default=0.95)
    v = sub.add_parser("validity")
    v.add_argument("--audits", type=int, default=400)
    v.add_argument("--models", type=int, default=2000)
    v.add_argument("--coverage", type=int, default=100)
    v.add_argument("--ratio", type=float, default=0.7)
    v.add_argument("--confidence", type=float, default=0.95)
    args = p.parse_args()
    (ladder_cmd if args.cmd == "ladder" else validity_cmd)(args)


if __name__ == "__main__":
    main()
