"""The mechanism kind's claim-curve comparison: validity, power, and a planted bug.

``validity``: repeated audits of CORRECT Laplace, Gaussian and randomized-response
mechanisms, each held against the exact curve its claim declares (Laplace ε = 1: the
Laplace curve; Gaussian claimed ρ = ½ zCDP and (ε, δ) = (1, 1e-5): G_μ at √(2ρ) resp.
μ(ε, δ); RR p = ¾: its curve, which is f_{ε,0}). Scores are drawn from the exact law of
the built-in (output = f(D) + noise; RR: the reported bit) and go through the test the
kind runs (:func:`dpaudit.bounds.claim_curve.claim_curve_test` with the family's threshold rule,
threshold ``split``, seed = audit index), at c = 0.95. False violations are held against
``binom.ppf(0.999, audits, 1 − c)``. Two power controls: the same test on the mechanism
at 0.7× its noise (RR: at ε/0.7), and a broken procedure on the correct mechanism, the
threshold chosen AFTER seeing the counted trials (every threshold of all trials, each at
the unadjusted (1 − c)/2 per rate).

``planted``: Laplace at half its claimed scale (ε = 2 claimed 1), per trial count, over
seeds: how often the kind's old comparisons (ε or μ, each at the per-bound level of three
shares) and the claim curve exit 1, and how often each alone does. Draws are the kind's
own units (:func:`dpaudit.mechanisms.units.mechanism_unit`, audit seed = seed).

CPU seconds by time.process_time (single-threaded numpy), wall, load average.

Usage (the figures in benchmarks/RESULTS.md; ``--peek-audits 400`` too):
    .venv/bin/python benchmarks/claim_curve_mechanism.py validity --audits 400 --trials 5000
    .venv/bin/python benchmarks/claim_curve_mechanism.py planted --seeds 400
"""

from __future__ import annotations

import argparse
import math
import os
import time

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from dpaudit.bounds import epsilon_and_mu_lower_bounds  # noqa: E402
from dpaudit.bounds.claim_curve import (  # noqa: E402
    ClaimCurve,
    Criterion,
    claim_curve_test,
    gdp_claim,
    gdp_curve_parameter,
    laplace_claim,
    laplace_curve_parameter,
    randomized_response_claim,
)
from dpaudit.mechanisms.schema import MechanismSection  # noqa: E402
from dpaudit.mechanisms.units import MechanismSpec, mechanism_unit  # noqa: E402
from dpaudit.stats import clopper_pearson_upper  # noqa: E402
from dpaudit.theory import gdp_mu, mu_from_pure_dp  # noqa: E402
from dpaudit.tradeoff import TradeoffCurve  # noqa: E402

C = 0.95


def _laplace(scale: float):
    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.laplace(0.0, scale, n), 1.0 + rng.laplace(0.0, scale, n)

    return draw


def _gaussian(sigma: float):
    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.normal(0.0, sigma, n), 1.0 + rng.normal(0.0, sigma, n)

    return draw


def _rr(p: float):
    def draw(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        neg = (rng.random(n) >= p).astype(float)  # the bit 0, flipped w.p. 1 − p
        pos = (rng.random(n) < p).astype(float)
        return neg, pos

    return draw


def _rr_p(epsilon: float) -> float:
    return math.exp(epsilon) / (1.0 + math.exp(epsilon))


#: name → (claimed curve, threshold rule, correct draw, 0.7×-noise draw)
CASES: dict[str, tuple[ClaimCurve, Criterion | None, object, object]] = {
    "Laplace ε = 1 (scale 1)": (
        laplace_claim(1.0),
        laplace_curve_parameter,
        _laplace(1.0),
        _laplace(0.7),
    ),
    "Gaussian ρ = ½ zCDP (σ = 1, μ = 1)": (
        gdp_claim(1.0),
        gdp_curve_parameter,
        _gaussian(1.0),
        _gaussian(0.7),
    ),
    "Gaussian (ε, δ) = (1, 1e-5) (σ = 1/μ(ε, δ))": (
        gdp_claim(gdp_mu(1.0, 1e-5)),
        gdp_curve_parameter,
        _gaussian(1.0 / gdp_mu(1.0, 1e-5)),
        _gaussian(0.7 / gdp_mu(1.0, 1e-5)),
    ),
    "RR p = ¾ (ε = ln 3; curve = f_{ε,0})": (
        randomized_response_claim(0.75),
        None,
        _rr(0.75),
        _rr(_rr_p(math.log(3.0) / 0.7)),
    ),
}


def _peeking(neg: np.ndarray, pos: np.ndarray, claim: ClaimCurve) -> bool:
    """The broken procedure: every threshold of ALL trials, each rate's limit at the
    unadjusted (1 − c)/2, violation if any point is below the curve."""
    curve = TradeoffCurve.from_scores(neg, pos)
    level = 1.0 - (1.0 - C) / 2.0
    u0 = clopper_pearson_upper(curve.fp, curve.negatives, level=level)
    u1 = clopper_pearson_upper(curve.fn, curve.positives, level=level)
    return bool(np.any(u1 < claim(u0)))


def validity(audits: int, trials: int, peek_audits: int) -> None:
    ceiling = int(stats.binom.ppf(0.999, audits, 1 - C))
    peek_ceiling = int(stats.binom.ppf(0.999, peek_audits, 1 - C))
    print(f"c = {C}, {audits} audits, {trials} trials per arm, split; ceiling {ceiling}")
    print("| mechanism | false violations (correct) | power: 0.7× noise | power: peeking |")
    print("|---|---|---|---|")
    for name, (claim, criterion, correct, buggy) in CASES.items():
        counts = []
        for k, draw in enumerate((correct, buggy)):
            hits = 0
            for r in range(audits):
                rng = np.random.default_rng([2026, k, r])
                neg, pos = draw(rng, trials)  # type: ignore[operator]
                test = claim_curve_test(
                    neg, pos, claim=claim, confidence_level=C, seed=r, criterion=criterion
                )
                hits += test.violated
            counts.append(hits)
        peek = 0
        for r in range(peek_audits):
            rng = np.random.default_rng([2026, 9, r])
            peek += _peeking(*correct(rng, trials), claim)  # type: ignore[operator]
        print(
            f"| {name} | {counts[0]} / {audits} (≤ {ceiling}) | {counts[1]} / {audits} | "
            f"{peek} / {peek_audits} (ceiling {peek_ceiling}) |",
            flush=True,
        )


def planted(seeds: int, trial_counts: list[int]) -> None:
    level = 1.0 - (1.0 - C) / 3.0  # ε, μ and the claim curve share the verdict's budget
    mu_claim = mu_from_pure_dp(1.0)
    print(f"Laplace scale 0.5 claimed ε = 1; {seeds} audit seeds; per-bound level {level:.4f}")
    print("| trials per arm | exit 1: ε or μ | exit 1: claim curve | curve only | ε/μ only |")
    print("|---|---|---|---|---|")
    for n in trial_counts:
        section = MechanismSection(name="laplace", scale=0.5, trials=n, claim={"epsilon": 1.0})
        old_n = curve_n = curve_only = old_only = 0
        for seed in range(seeds):
            spec = MechanismSpec(section=section, seed=seed, unit_size=max(n, 1), base_dir=".")
            unit = mechanism_unit(spec, "mechanism-00000")
            neg, pos = unit["negative"], unit["positive"]
            eps, mu = epsilon_and_mu_lower_bounds(
                neg, pos, delta=0.0, confidence_level=level, seed=seed
            )
            old = eps.value > 1.0 or mu.value > mu_claim
            curve = claim_curve_test(
                neg,
                pos,
                claim=laplace_claim(1.0),
                confidence_level=level,
                seed=seed,
                criterion=laplace_curve_parameter,
            ).violated
            old_n += old
            curve_n += curve
            curve_only += curve and not old
            old_only += old and not curve
        print(
            f"| {n} | {old_n / seeds:.3f} | {curve_n / seeds:.3f} | {curve_only / seeds:.3f} | "
            f"{old_only / seeds:.3f} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validity")
    v.add_argument("--audits", type=int, default=400)
    v.add_argument("--trials", type=int, default=2000)
    v.add_argument("--peek-audits", type=int, default=400)
    p = sub.add_parser("planted")
    p.add_argument("--seeds", type=int, default=400)
    p.add_argument("--trials", type=int, nargs="+", default=[100, 150, 200, 300, 400, 600])
    args = parser.parse_args()
    cpu, wall = time.process_time(), time.perf_counter()
    if args.command == "validity":
        validity(args.audits, args.trials, args.peek_audits)
    else:
        planted(args.seeds, args.trials)
    print(
        f"CPU {time.process_time() - cpu:.1f} s, wall {time.perf_counter() - wall:.1f} s, "
        f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


if __name__ == "__main__":
    main()
