"""Grey-box checks on correct DP-SGD runs, end to end: how often does each one fail?

Run:  .venv/bin/python benchmarks/greybox_false_alarms.py [runs] [first_seed]

Each run is the many-run units of one white-box Dirac-canary audit of dpaudit's own
DP-SGD trainer (``rows = 100``, ``batch_size = 25``, σ = 0.8, C = 1, two epochs of 4 steps,
``trials = 200``: 200 models per arm, the setting of the reported false alarm at seed 3), trained by the unit function the audit runs, at seeds
``first_seed``, ``first_seed + 1``, ... Every grey-box test is read from the stored
observations as the audit reads them and held at α = (1 − c)/k, the share the verdict
gives it (c = 0.95, k = 5: three many-run comparisons and the two p-value checks).

For each p-value check the count of runs with p < α is held against its binomial
ceiling: under a valid test the count is at most Binomial(runs, α), so it exceeds
the 99.9 % quantile of that law with probability at most 0.001. The 95 % Clopper–Pearson
interval of the false-alarm rate is printed beside it. The batch-size test's mean rate
(its sum statistic) is also pooled over all runs, which shows a bias in the sampler
that single runs cannot.
"""
# ruff: noqa: E501  (long result lines are printed as they are read)

import os
import sys
import time

import numpy as np
from scipy import stats

from dpaudit.bounds.greybox import GreyBoxObservations, greybox_tests
from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
from dpaudit.dpsgd.units import dpsgd_unit, unit_names

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 400
FIRST = int(sys.argv[2]) if len(sys.argv) > 2 else 0
CONFIDENCE, SHARES = 0.95, 5
ALPHA = (1 - CONFIDENCE) / SHARES

SECTION = DpsgdSection.model_validate(
    {
        "trainer": "dpsgd",
        "canary": "dirac",
        "threat_model": "white-box",
        "rows": 100,
        "trials": 200,
        "training": {
            "epochs": 2,
            "batch_size": 25,
            "learning_rate": 0.5,
            "dp": {"noise_multiplier": 0.8, "clipping_norm": 1.0},
        },
    }
)


def one_run(seed: int) -> tuple[dict[str, float | None], float, int]:
    spec = DpsgdSpec(section=SECTION, seed=seed, unit_size=2000, base_dir=".")
    parts = [dpsgd_unit(spec, unit) for unit in unit_names(spec)]
    obs = GreyBoxObservations.from_arrays(parts)
    assert obs is not None
    tests = {t.check: t.p_value for t in greybox_tests(obs)}
    ran = obs.ran
    return tests, float(obs.batch_sizes[ran].sum()), int(ran.sum())


cpu0, wall0 = time.process_time(), time.perf_counter()
pvalues: dict[str, list[float | None]] = {}
total_b, batches = 0.0, 0
for seed in range(FIRST, FIRST + RUNS):
    tests, b, count = one_run(seed)
    for name, p in tests.items():
        pvalues.setdefault(name, []).append(p)
    total_b += b
    batches += count
cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0

print(
    f"{RUNS} correct runs (seeds {FIRST}..{FIRST + RUNS - 1}), alpha = (1 - {CONFIDENCE})/{SHARES} = {ALPHA:g}"
)
ceiling = int(stats.binom.ppf(0.999, RUNS, ALPHA))
for name, ps in pvalues.items():
    if any(p is None for p in ps):
        print(f"{name}: not evaluated")
        continue
    arr = np.array(ps, dtype=float)
    low = arr < ALPHA
    alarms = int(low.sum())
    ci = stats.binomtest(alarms, RUNS).proportion_ci(confidence_level=0.95, method="exact")
    deterministic = bool(np.all((arr == 0.0) | (arr == 1.0)))
    kind = (
        "deterministic"
        if deterministic
        else f"ceiling {ceiling} (99.9 % of Binomial({RUNS}, {ALPHA:g}))"
    )
    print(
        f"{name}: {alarms}/{RUNS} false alarms = {alarms / RUNS:.4f} "
        f"(95 % CP [{ci.low:.4f}, {ci.high:.4f}]); {kind}; "
        f"smallest p {arr.min():.3g}, seeds failing {[FIRST + i for i in np.flatnonzero(low)][:10]}"
    )
q, n = 0.25, 100
expected = batches * n * q
z = (total_b - expected) / np.sqrt(batches * n * q * (1 - q))
pooled_p = stats.binomtest(int(total_b), batches * n, q).pvalue
print(
    f"pooled mean rate {total_b / (batches * n):.5f} over {batches} batches against q = {q} "
    f"(z = {z:.2f}, exact binomial p = {pooled_p:.3g})"
)
print(f"CPU {cpu:.1f} s, wall {wall:.1f} s, load average {os.getloadavg()[0]:.2f}")
