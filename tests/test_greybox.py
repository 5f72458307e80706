"""Grey-box checks of what a DP-SGD run did (dpaudit/bounds/greybox.py) and their gate checks.

Each p-value is checked against a closed form or scipy on hand-made inputs; each check
catches its planted bug; on correct (simulated) runs each check's false-rejection rate
over 400 repeats stays under the 99.9 % binomial upper bound of its level; and end to end
a correct engine run passes while a user trainer with a planted bug exits 1 naming it.
"""

from __future__ import annotations

import math
import shutil
from itertools import product
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from typer.testing import CliRunner

from dpaudit.bounds.greybox import (
    GreyBoxObservations,
    batch_size_test,
    clipping_test,
    dispersion_lower_tail_pvalue,
    greybox_tests,
    noise_test,
    steps_test,
)
from dpaudit.errors import DpauditError

PLUGINS = Path(__file__).parent / "plugins_greybox"
REPEATS = 400
ALPHA = 0.05  # 1 − c at c = 0.95: the level of a check that is the verdict's only share


def _obs(
    batch: np.ndarray,
    *,
    n: int | np.ndarray = 200,
    q: float | np.ndarray = 0.1,
    noise: np.ndarray | None = None,
    norms: np.ndarray | None = None,
    sigma: float = 1.0,
    clip: float = 1.0,
    steps_run: np.ndarray | None = None,
    steps_accounted: int | np.ndarray | None = None,
) -> GreyBoxObservations:
    batch = np.asarray(batch)
    k, t = batch.shape
    return GreyBoxObservations(
        batch_sizes=batch,
        dataset_size=n,
        sampling_rate=q,
        clipped_norms_max=np.full((k, t), np.nan) if norms is None else norms,
        clipping_norm=clip,
        untouched_noise=np.full((k, t), np.nan) if noise is None else noise,
        noise_multiplier=sigma,
        steps_run=np.full(k, t) if steps_run is None else steps_run,
        steps_accounted=t if steps_accounted is None else steps_accounted,
    )


def _rejection_ceiling(repeats: int, level: float) -> int:
    """The largest count of false rejections compatible with ``level`` at 99.9 %: under a
    valid test the count is stochastically below Binomial(repeats, level)."""
    return int(stats.binom.ppf(0.999, repeats, level))


# --------------------------------------------------------------------- closed forms
def test_noise_pvalue_is_the_chi2_lower_tail() -> None:
    # σC = 0.5·2 = 1; Q = 1 + 4 + 0.25 = 5.25 over N = 3 observed steps (NaN skipped).
    noise = np.array([[1.0, 2.0], [0.5, np.nan]])
    t = noise_test(_obs(np.array([[20, 20], [20, 20]]), noise=noise, sigma=0.5, clip=2.0))
    assert t.p_value == pytest.approx(stats.chi2.cdf(5.25, 3), rel=1e-12)
    # χ²_2 has the closed form P(χ² ≤ x) = 1 − e^{−x/2}.
    t2 = noise_test(_obs(np.array([[20, 20]]), noise=np.array([[1.0, 2.0]])))
    assert t2.p_value == pytest.approx(1 - math.exp(-2.5), rel=1e-12)
    assert t2.chance
    assert t2.details["degrees_of_freedom"] == 2


def test_noise_ignores_steps_not_run_and_sigma_zero() -> None:
    noise = np.array([[1.0, 100.0]])
    t = noise_test(_obs(np.array([[20, 0]]), noise=noise, steps_run=np.array([1])))
    assert t.p_value == pytest.approx(stats.chi2.cdf(1.0, 1), rel=1e-12)
    assert noise_test(_obs(np.array([[20]]), noise=np.array([[0.1]]), sigma=0.0)).p_value is None
    assert noise_test(_obs(np.array([[20]]))).p_value is None  # nothing observed


def test_batch_sum_part_is_scipys_exact_binomial_test() -> None:
    b = np.array([[18, 25, 21], [19, 22, 30]])
    t = batch_size_test(_obs(b, n=200, q=0.1))
    expected = stats.binomtest(int(b.sum()), 6 * 200, 0.1).pvalue
    assert t.details["p_sum"] == pytest.approx(expected, rel=1e-12)
    d = float(np.sum((b - 20.0) ** 2) / (200 * 0.1 * 0.9))
    assert t.details["dispersion"] == pytest.approx(d, rel=1e-12)
    # Bonferroni over the two parts.
    assert t.p_value == pytest.approx(
        min(1.0, 2 * min(t.details["p_sum"], t.details["p_dispersion"]))
    )


def test_batch_groups_are_tested_separately_with_bonferroni() -> None:
    b = np.array([[20, 24], [30, 28]])
    t = batch_size_test(_obs(b, n=np.array([200, 300]), q=np.array([0.1, 0.1])))
    p1 = stats.binomtest(44, 400, 0.1).pvalue
    p2 = stats.binomtest(58, 600, 0.1).pvalue
    assert t.details["groups"] == 2
    assert t.details["p_sum"] == pytest.approx(min(1.0, 2 * min(p1, p2)), rel=1e-12)


def test_full_batch_is_deterministic() -> None:
    ok = batch_size_test(_obs(np.full((3, 4), 50), n=50, q=1.0))
    assert (ok.p_value, ok.chance) == (1.0, False)
    bad = batch_size_test(_obs(np.array([[50, 49]]), n=50, q=1.0))
    assert bad.p_value == 0.0
    assert "model 0 step 1 used 49 of n = 50" in bad.reason


def test_dispersion_bound_exact_edge_cases() -> None:
    # n = 1, q = 1/2: every term (b − 1/2)²/(1/4) is exactly 1, so D = N surely.
    assert dispersion_lower_tail_pvalue(9.5, [(1, 0.5, 10)]) == 0.0
    assert dispersion_lower_tail_pvalue(10.0, [(1, 0.5, 10)]) == 1.0


def test_dispersion_bound_is_the_chernoff_infimum_and_covers_the_exact_tail() -> None:
    n, q, count = 4, 0.3, 3
    b = np.arange(n + 1)
    z = (b - n * q) ** 2 / (n * q * (1 - q))
    pmf = stats.binom.pmf(b, n, q)
    # Exact law of D over the 5³ outcomes.
    values, probs = [], []
    for combo in product(range(n + 1), repeat=count):
        values.append(sum(z[list(combo)]))
        probs.append(float(np.prod(pmf[list(combo)])))
    values_a, probs_a = np.array(values), np.array(probs)
    lam = np.logspace(-4, 3, 20_001)
    log_m = np.log(np.exp(-np.outer(lam, z)) @ pmf)
    for d in (0.05, 0.3, 1.0, 2.0, 2.9):
        bound = dispersion_lower_tail_pvalue(d, [(n, q, count)])
        exact = float(probs_a[values_a <= d + 1e-12].sum())
        grid = float(np.exp(np.min(lam * d + count * log_m)))
        assert exact <= bound + 1e-12, (d, exact, bound)  # a valid p-value
        assert bound == pytest.approx(min(1.0, grid), rel=1e-3)  # the infimum, found


def test_clipping_is_deterministic_with_tolerance() -> None:
    norms = np.array([[0.5, 1.0 + 0.5e-5], [np.nan, 0.2]])
    ok = clipping_test(_obs(np.full((2, 2), 20), norms=norms))
    assert (ok.p_value, ok.chance) == (1.0, False)
    bad = clipping_test(_obs(np.full((2, 2), 20), norms=np.array([[0.5, 1.0], [1.2, 0.2]])))
    assert bad.p_value == 0.0
    assert "largest clipped norm 1.2 > C = 1" in bad.reason
    assert "model 1, step 0" in bad.reason
    assert clipping_test(_obs(np.full((1, 2), 20))).p_value is None


def test_steps_check() -> None:
    ok = steps_test(_obs(np.full((2, 3), 20)))
    assert (ok.p_value, ok.chance) == (1.0, False)
    bad = steps_test(_obs(np.full((2, 3), 20), steps_run=np.array([3, 2])))
    assert bad.p_value == 0.0
    assert "model 1 ran 2 steps, 3 accounted" in bad.reason


def test_without_observations_every_check_is_not_evaluated() -> None:
    tests = greybox_tests(None)
    assert [t.check for t in tests] == [
        "greybox_batch_sizes",
        "greybox_clipping",
        "greybox_noise",
        "greybox_steps",
    ]
    assert all(t.p_value is None for t in tests)
    assert [t.chance for t in tests] == [True, False, True, False]


# ------------------------------------------------------------------------- validation
_BAD_FIELDS = [
    (
        {"batch_sizes": np.zeros(3)},
        r"The 'batch_sizes' parameter must be a 2-D integer array "
        r"\(K, T\). Got shape \(3,\) instead.",
    ),
    (
        {"batch_sizes": np.full((2, 3), 1.5)},
        r"The 'batch_sizes' parameter must hold integers. Got dtype "
        r"float64",
    ),
    (
        {"batch_sizes": np.full((2, 3), -1)},
        r"The 'batch_sizes' parameter must hold integers ≥ 0. Got -1 "
        r"instead.",
    ),
    (
        {"batch_sizes": np.full((2, 3), 201)},
        r"must be at most the dataset size n: model 0 step 0 has a "
        r"batch of 201 records out of n = 200.",
    ),
    (
        {"steps_run": np.array([3, 4])},
        r"The 'steps_run' parameter must be at most the 3 steps "
        r"\(columns\) of 'batch_sizes'. Got 4 instead.",
    ),
    (
        {"steps_run": np.array([3, 3, 3])},
        r"The 'batch_sizes' parameter must have one row per model "
        r"\(3, as 'steps_run'\). Got shape \(2, 3\) instead.",
    ),
    (
        {"untouched_noise": np.zeros((2, 2))},
        r"The 'untouched_noise' parameter must have the shape of "
        r"'batch_sizes' \(2, 3\). Got shape \(2, 2\) instead.",
    ),
    (
        {"untouched_noise": np.full((2, 3), np.inf)},
        r"The 'untouched_noise' parameter must be finite \(or NaN "
        r"where unknown\).",
    ),
    (
        {"clipped_norms_max": np.full((2, 3), -1.0)},
        r"The 'clipped_norms_max' parameter must hold norms ≥ 0 \(or "
        r"NaN\). Got a negative value -1.0 instead.",
    ),
    (
        {"sampling_rate": 0.0},
        r"The 'sampling_rate' parameter must be in \(0, 1\]. Got 0.0 "
        r"instead.",
    ),
    (
        {"sampling_rate": 1.5},
        r"The 'sampling_rate' parameter must be in \(0, 1\]. Got 1.5 "
        r"instead.",
    ),
    (
        {"sampling_rate": np.array([0.1, 0.1, 0.1])},
        r"The 'sampling_rate' parameter must be one number or one "
        r"per model \(2\). Got shape \(3,\) instead.",
    ),
    (
        {"dataset_size": 0},
        r"The 'dataset_size' parameter must be finite and ≥ 1. Got "
        r"0.0 instead.",
    ),
    (
        {"dataset_size": 20.5},
        r"The 'dataset_size' parameter must be an integer. Got 20.5 "
        r"instead.",
    ),
    (
        {"clipping_norm": 0.0},
        r"The 'clipping_norm' parameter must be > 0. Got 0.0 "
        r"instead.",
    ),
    (
        {"noise_multiplier": -1.0},
        r"The 'noise_multiplier' parameter must be finite and ≥ 0. "
        r"Got -1.0 instead.",
    ),
    (
        {"noise_multiplier": "one"},
        r"The 'noise_multiplier' parameter must be a number. Got "
        r"'one' instead.",
    ),
    (
        {"steps_accounted": -1},
        r"The 'steps_accounted' parameter must be finite and ≥ 0. "
        r"Got -1.0 instead.",
    ),
]


@pytest.mark.parametrize(("change", "message"), _BAD_FIELDS)
def test_observations_validate_with_exact_messages(change: dict, message: str) -> None:
    fields = {
        "batch_sizes": np.full((2, 3), 20),
        "dataset_size": 200,
        "sampling_rate": 0.1,
        "clipped_norms_max": np.full((2, 3), np.nan),
        "clipping_norm": 1.0,
        "untouched_noise": np.full((2, 3), np.nan),
        "noise_multiplier": 1.0,
        "steps_run": np.array([3, 3]),
        "steps_accounted": 3,
    }
    with pytest.raises(DpauditError, match=message):
        GreyBoxObservations(**{**fields, **change})


def test_arrays_round_trip_across_units_with_padding() -> None:
    a = _obs(np.array([[20, 21, 19]]), noise=np.array([[0.1, 0.2, 0.3]]))
    b = _obs(np.array([[22, 18]]), noise=np.array([[0.4, 0.5]]))
    joined = GreyBoxObservations.from_arrays([a.to_arrays(), b.to_arrays()])
    assert joined is not None
    assert joined.batch_sizes.tolist() == [[20, 21, 19], [22, 18, 0]]
    assert np.isnan(joined.untouched_noise[1, 2])
    assert joined.per_model("steps_accounted").tolist() == [3, 2]
    assert steps_test(joined).p_value == 1.0
    assert GreyBoxObservations.from_arrays([a.to_arrays(), {"scores": np.zeros(1)}]) is None


# ---------------------------------------------------------------------- planted bugs
def test_fixed_size_batches_are_caught_from_one_run() -> None:
    # A shuffled loader with batches of exactly nq = 20, claimed as Poisson: the mean is
    # right (the sum test cannot see it), the dispersion is 0.
    t = batch_size_test(_obs(np.full((1, 8), 20)))
    assert t.details["p_sum"] == 1.0
    assert t.p_value < 1e-6


def test_a_wrong_q_is_caught_with_n_large() -> None:
    rng = np.random.default_rng(1)
    n, q = 10_000, 0.01
    caught = sum(
        batch_size_test(_obs(rng.binomial(n, 0.8 * q, (1, 8)), n=n, q=q)).p_value < ALPHA
        for _ in range(100)
    )
    # Power of the exact test here is > 0.999 (Σb ≈ 640 against 800 ± 28); allow the
    # 99.9 % lower binomial bound of 100 trials at that power.
    assert caught >= 100 - _rejection_ceiling(100, 0.001) - 1


def test_sigma_over_ten_is_caught_from_one_run() -> None:
    rng = np.random.default_rng(2)
    t = 8  # one run of 8 steps
    # Power: P(χ²_8/100 ≤ ppf(α)) = P(χ²_8 ≤ 100·ppf(α)), essentially 1.
    power = stats.chi2.cdf(100 * stats.chi2.ppf(ALPHA, t), t)
    assert power > 1 - 1e-12
    results = [
        noise_test(_obs(np.full((1, t), 20), noise=rng.normal(0, 0.1, (1, t)))).p_value
        for _ in range(REPEATS)
    ]
    assert all(p is not None and p < ALPHA for p in results)


def test_a_missing_step_is_caught() -> None:
    t = steps_test(_obs(np.full((1, 8), 20), steps_run=np.array([7]), steps_accounted=8))
    assert t.p_value == 0.0
    assert not t.passed(ALPHA)


# --------------------------------------------------------------- validity (coverage)
@pytest.mark.parametrize(
    ("n", "q", "k", "t"),
    [(200, 0.1, 4, 8), (5, 0.1, 2, 8), (1000, 0.5, 1, 3)],
)
def test_batch_check_false_rejections_within_binomial_bound(
    n: int, q: float, k: int, t: int
) -> None:
    rng = np.random.default_rng([n, k, t])
    rejected = sum(
        not batch_size_test(_obs(rng.binomial(n, q, (k, t)), n=n, q=q)).passed(ALPHA)
        for _ in range(REPEATS)
    )
    assert rejected <= _rejection_ceiling(REPEATS, ALPHA), rejected


def test_batch_check_validity_with_two_groups() -> None:
    rng = np.random.default_rng(7)
    n = np.array([100, 101, 100, 101])
    q = 10 / n
    rejected = sum(
        not batch_size_test(_obs(rng.binomial(n[:, None], q[:, None], (4, 6)), n=n, q=q)).passed(
            ALPHA
        )
        for _ in range(REPEATS)
    )
    assert rejected <= _rejection_ceiling(REPEATS, ALPHA), rejected


@pytest.mark.parametrize(("k", "t"), [(1, 1), (1, 8), (50, 20)])
def test_noise_check_false_rejections_within_binomial_bound(k: int, t: int) -> None:
    rng = np.random.default_rng([k, t])
    sigma, clip = 0.8, 2.0
    rejected = sum(
        not noise_test(
            _obs(
                np.full((k, t), 20),
                noise=rng.normal(0, sigma * clip, (k, t)),
                sigma=sigma,
                clip=clip,
            )
        ).passed(ALPHA)
        for _ in range(REPEATS)
    )
    assert rejected <= _rejection_ceiling(REPEATS, ALPHA), rejected


def test_deterministic_checks_never_reject_a_correct_run() -> None:
    rng = np.random.default_rng(3)
    clip = 1.0
    for _ in range(REPEATS):
        raw = rng.gamma(2.0, 1.0, (3, 5))
        # Opacus' and the engine's factor min(1, C/(‖g‖ + 1e-6)), in float32.
        clipped = (raw * np.minimum(1.0, clip / (raw + 1e-6))).astype(np.float32)
        obs = _obs(np.full((3, 5), 20), norms=clipped.astype(np.float64), clip=clip)
        assert clipping_test(obs).passed(ALPHA)
        assert steps_test(obs).passed(ALPHA)


# ------------------------------------------------------------------------ end to end
_ENGINE = """
[audit]
name = "greybox-engine"
kinds = ["dpsgd"]
seed = 3

[dpsgd]
trainer = "dpsgd"
rows = 40
trials = 20

[dpsgd.training]
epochs = 2
batch_size = 10
learning_rate = 0.5

[dpsgd.training.dp]
noise_multiplier = 1.0
clipping_norm = 1.0

[report]
html = false
"""


def test_engine_run_passes_the_greybox_checks(tmp_path: Path) -> None:
    from dpaudit.audit import run_audit

    path = tmp_path / "engine.toml"
    path.write_text(_ENGINE, encoding="utf-8")
    result = run_audit(path, output_dir=tmp_path / "run", write=False)
    checks = {c.name: c for c in result.checks}
    for name in ("greybox_batch_sizes", "greybox_noise", "greybox_steps"):
        assert checks[name].status == "passed", checks[name].message
    # The engine's fused clipped sum exposes no per-example norms, and its clipping is
    # checked against Opacus (tests/test_training_opacus.py): no clipping check, no warning.
    assert "greybox_clipping" not in checks
    assert not [w for w in result.warnings if "greybox_clipping" in w]
    # Batch sizes and noise each take one share of the one budget, beside ε, μ and the
    # claim curve.
    budget = result.provenance["verdict_budget"]
    assert budget["comparisons"] == 5
    assert checks["greybox_noise"].limit == pytest.approx(0.05 / 5)
    assert result.verdict == "pass"


def _user_audit(tmp_path: Path, bug: str, gate: str = "") -> Path:
    shutil.copytree(PLUGINS, tmp_path / "plugins_greybox", dirs_exist_ok=True)
    path = tmp_path / f"user-{bug.replace('/', '-')}.toml"
    path.write_text(
        f"""
[audit]
name = "greybox-user"
kinds = ["dpsgd"]
seed = 0

[dpsgd]
trainer = "plugins_greybox.simulated:dirac_dpsgd"
rows = 100
trials = 20
options = {{ bug = "{bug}" }}

[dpsgd.training]
epochs = 2
batch_size = 20
learning_rate = 0.5

[dpsgd.training.dp]
noise_multiplier = 1.0
clipping_norm = 1.0

[gate]
{gate}

[report]
html = false
""",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("bug", "check", "text"),
    [
        ("fixed-batches", "greybox_batch_sizes", "batch sizes follow Binomial(n, q): p = "),
        (
            "sigma/10",
            "greybox_noise",
            "noise on an untouched coordinate has standard deviation ≥ σC",
        ),
        ("missing-step", "greybox_steps", "ran 9 steps, 10 accounted"),
    ],
)
def test_user_trainer_with_a_planted_bug_exits_1(
    tmp_path: Path, bug: str, check: str, text: str
) -> None:
    from dpaudit.cli import app

    path = _user_audit(tmp_path, bug)
    out = CliRunner().invoke(app, ["run", str(path), "-o", str(tmp_path / "run"), "--quiet"])
    assert out.exit_code == 1, out.output
    fails = [line for line in out.stderr.splitlines() if line.startswith("FAIL ")]
    assert len(fails) == 1, fails
    assert fails[0].startswith(f"FAIL {check}: ")
    assert text in fails[0]
    assert "the run did not do what was accounted" in fails[0]


def test_user_trainer_correct_passes_and_results_json_carries_the_checks(tmp_path: Path) -> None:
    import json

    from dpaudit.audit import run_audit

    result = run_audit(_user_audit(tmp_path, "none"), output_dir=tmp_path / "run")
    assert result.verdict == "pass"
    assert result.privacy_verdict == "consistent"
    saved = json.loads((tmp_path / "run" / "results.json").read_text(encoding="utf-8"))
    by_name = {c["name"]: c for c in saved["checks"]}
    assert by_name["greybox_batch_sizes"]["status"] == "passed"
    assert 0.0 <= by_name["greybox_noise"]["value"] <= 1.0  # the p-value
    assert by_name["greybox_clipping"]["status"] == "not-evaluated"
    # The report's checks table shows each check's p-value and its limit (1 − c)/k.
    from dpaudit.report import fmt_number, render_report

    html = render_report(saved)
    noise = by_name["greybox_noise"]
    row = html[html.index('<td class="check-name">greybox_noise</td>') :].split("</tr>")[0]
    assert f'<td class="num">{fmt_number(noise["value"])}</td>' in row
    assert f'<td class="num">{fmt_number(noise["limit"])}</td>' in row


def test_missing_observations_fail_only_when_the_file_asks(tmp_path: Path) -> None:
    from dpaudit.results import Check
    from dpaudit.results.gate import evaluate_gate
    from dpaudit.sections import GateSection

    missing = Check("greybox_noise", None, 0.01, True, "not observed", "not-evaluated")
    default = evaluate_gate(GateSection(), comparisons=(), tests=(), kind_checks=(missing,))
    strict = evaluate_gate(
        GateSection(on_unmeasured="fail"), comparisons=(), tests=(), kind_checks=(missing,)
    )
    assert [c.passed for c in default if c.name == "greybox_noise"] == [True]
    assert [c.passed for c in strict if c.name == "greybox_noise"] == [False]
    assert "fails closed" in next(c.message for c in strict if c.name == "greybox_noise")


def test_coerce_output_checks_observations() -> None:
    from dpaudit.records import DPSGDRecord
    from dpaudit.trainers import coerce_output

    record = DPSGDRecord(
        noise_multiplier=1.0, sampling_rate=0.1, steps=3, clipping_norm=1.0, dataset_size=200
    )
    good = _obs(np.full((1, 3), 20))
    out = coerce_output(
        {"scores": [0.0], "records": [record], "observations": good}, num_models=1, name="t"
    )
    assert out.observations is good
    with pytest.raises(
        DpauditError, match=r"must return observations of every model \(2\). Got 1."
    ):
        coerce_output({"scores": [0.0, 1.0], "claim": {"epsilon": 1.0, "delta": 0.0},
                       "observations": good}, num_models=2, name="t")  # fmt: skip
    with pytest.raises(DpauditError, match="must return 'observations' as a GreyBoxObservations"):
        coerce_output({"scores": [0.0], "records": [record], "observations": {}}, num_models=1,
                      name="t")  # fmt: skip


def test_batch_check_with_full_batch_and_unrun_poisson_models() -> None:
    # Model 0 (q = 1) ran two steps with all 50 records; model 1 (q = 0.1) ran none.
    obs = _obs(
        np.array([[50, 50], [0, 0]]), n=50, q=np.array([1.0, 0.1]), steps_run=np.array([2, 0])
    )
    t = batch_size_test(obs)
    assert (t.p_value, t.chance) == (1.0, False)


def test_a_failed_check_outside_the_gate_is_still_a_violation_and_a_warning(tmp_path: Path) -> None:
    from dpaudit.audit import run_audit

    path = _user_audit(tmp_path, "missing-step", gate="fail_on_violation = false")
    result = run_audit(path, output_dir=tmp_path / "run", write=False)
    assert result.verdict == "pass"  # nothing left to gate on
    assert result.privacy_verdict == "violation"
    assert not any(c.name.startswith("greybox") for c in result.checks)
    assert any(
        w.startswith("greybox_steps failed, but [gate] fail_on_violation") for w in result.warnings
    )


def test_engine_observer_with_an_input_canary() -> None:
    # ClipBKD puts the canary row on the all-zero column: only the models without the
    # canary keep it untouched; the two arms sample from n and n + 1 rows.
    from dpaudit.dpsgd.schema import DpsgdSection, DpsgdSpec
    from dpaudit.dpsgd.setup import _setup
    from dpaudit.trainers import TRAINERS, CanarySetup, TrainerSettings

    section = DpsgdSection.model_validate(
        {
            "trainer": "dpsgd",
            "canary": "clipbkd",
            "threat_model": "black-box",
            "zero_features": 1,
            "rows": 60,
            "trials": 10,
            "training": {
                "epochs": 2,
                "batch_size": 10,
                "learning_rate": 0.5,
                "dp": {"noise_multiplier": 1.0, "clipping_norm": 1.0},
            },
        }
    )
    setup = _setup(DpsgdSpec(section=section, seed=0, unit_size=20, base_dir="."))
    assert setup.canary_row is not None
    included = np.arange(20) % 2 == 1
    membership = np.ones((20, setup.X.shape[0]), dtype=bool)
    membership[:, setup.canary_row] = included
    out = TRAINERS["dpsgd"](
        setup.X,
        setup.y,
        membership,
        seed=5,
        canary=CanarySetup(
            kind="clipbkd", threat_model="black-box", included=included, row=setup.canary_row
        ),
        settings=TrainerSettings(model=setup.model, training=setup.training, num_classes=2),
    )
    obs = out.observations
    assert obs is not None
    assert obs.per_model("dataset_size").tolist() == [60 + int(i) for i in included]
    assert np.allclose(obs.per_model("sampling_rate"), 10 / obs.per_model("dataset_size"))
    touched_by_canary = setup.X[setup.canary_row, -1] != 0
    assert np.isnan(obs.untouched_noise[included]).all() == touched_by_canary
    assert np.isfinite(obs.untouched_noise[~included]).all()
    tests = {t.check: t for t in greybox_tests(obs)}
    assert tests["greybox_batch_sizes"].details["groups"] == 2
    assert tests["greybox_steps"].p_value == 1.0
    assert tests["greybox_noise"].p_value is not None
    assert tests["greybox_noise"].p_value >= 0.01
    assert tests["greybox_batch_sizes"].p_value is not None
    assert tests["greybox_batch_sizes"].p_value >= 0.01
