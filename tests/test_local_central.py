"""Local versus central DP for the same query (dpaudit/local_central.py, the local-central kind).

Tolerances come from the sampling laws: chi-square (a sum of R squared normal errors
over their variance), Gamma (Σ|Laplace|/b), binomial (counts of reports, of exceedances).
Every seed is fixed; each check is two-sided at 1 − 1e-3 unless stated.
"""

from __future__ import annotations

import math
from html.parser import HTMLParser

import numpy as np
import pytest
from scipy import stats

from dpaudit.bounds import epsilon_lower_bound
from dpaudit.local_central import simulate as lc

LN3 = math.log(3.0)
A = 1e-3  # two-sided failure probability of each statistical check


def _chi2_ok(errors: np.ndarray, variance: float) -> bool:
    """Σ e²/σ² ~ χ²_R for R independent N(0, σ²) errors (unbiased estimator)."""
    r = errors.size
    s = float(np.sum(errors**2) / variance)
    return stats.chi2.ppf(A / 2, r) <= s <= stats.chi2.ppf(1 - A / 2, r)


def test_mean_closed_forms_are_the_derived_expressions() -> None:
    counts = lc.true_counts(query="mean", n=10_000, share=0.3)
    assert counts.tolist() == [7_000, 3_000]
    # ε = ln 3: p = 3/4, Var = p(1 − p)/(n(2p − 1)²) = (3/16)/(n/4) = 3/(4n)
    assert lc.local_rmse(counts, query="mean", epsilon=LN3) == pytest.approx(math.sqrt(3 / 4e4))
    assert lc.central_rmse(10_000, query="mean", epsilon=1.0) == pytest.approx(math.sqrt(2) / 1e4)
    for eps in (0.1, 1.0, 3.0):
        exact = math.sqrt(1e4) * eps * math.exp(eps / 2) / (math.sqrt(2) * math.expm1(eps))
        assert lc.rmse_ratio(counts, query="mean", epsilon=eps) == pytest.approx(exact, rel=1e-12)
        # = √n (ε/2)/(√2 sinh(ε/2)) → √(n/2) as ε → 0
        assert exact == pytest.approx(100 * (eps / 2) / (math.sqrt(2) * math.sinh(eps / 2)))
    assert lc.rmse_ratio(counts, query="mean", epsilon=1e-6) == pytest.approx(math.sqrt(5e3))


@pytest.mark.parametrize("eps", [0.5, LN3, 2.0])
def test_mean_simulated_errors_match_the_closed_forms(eps: float) -> None:
    counts = lc.true_counts(query="mean", n=5_000, share=0.4)
    rng = np.random.default_rng(11)
    local, central = lc.simulate_errors(counts, query="mean", epsilon=eps, repeats=4_000, rng=rng)
    # local: a sum of n Bernoullis, normal to a good approximation → chi-square
    assert _chi2_ok(local[:, 0], lc.local_rmse(counts, query="mean", epsilon=eps) ** 2)
    # central: error = Lap(b)/n exactly, so Σ|e|·n/b ~ Gamma(R, 1) (no approximation)
    b = 1.0 / eps
    g = float(np.sum(np.abs(central[:, 0])) * 5_000 / b)
    assert stats.gamma.ppf(A / 2, 4_000) <= g <= stats.gamma.ppf(1 - A / 2, 4_000)
    assert lc.central_rmse(5_000, query="mean", epsilon=eps) == pytest.approx(
        math.sqrt(2) * b / 5e3
    )


@pytest.mark.parametrize("randomiser", ["k-rr", "unary-encoding"])
def test_histogram_per_bin_variances_match_the_closed_form(randomiser: str) -> None:
    counts = lc.true_counts(query="histogram", n=4_000, k=5)
    assert counts.sum() == 4_000
    rng = np.random.default_rng(5)
    local, central = lc.simulate_errors(
        counts, query="histogram", epsilon=1.0, repeats=3_000, rng=rng, randomiser=randomiser
    )
    p, q = lc.local_probabilities(query="histogram", k=5, epsilon=1.0, randomiser=randomiser)
    f = counts / 4_000
    var = (f * p * (1 - p) + (1 - f) * q * (1 - q)) / (4_000 * (p - q) ** 2)
    # Bonferroni over the k bins
    a = A / 5
    for j in range(5):
        s = float(np.sum(local[:, j] ** 2) / var[j])
        assert stats.chi2.ppf(a / 2, 3_000) <= s <= stats.chi2.ppf(1 - a / 2, 3_000)
    # the same variance in its Wang et al. form q(1−q)/(n(p−q)²) + f(1−p−q)/(n(p−q))
    other = q * (1 - q) / (4_000 * (p - q) ** 2) + f * (1 - p - q) / (4_000 * (p - q))
    np.testing.assert_allclose(var, other, rtol=1e-12)
    assert lc.local_rmse(
        counts, query="histogram", epsilon=1.0, randomiser=randomiser
    ) == pytest.approx(math.sqrt(var.mean()))
    g = float(np.sum(np.abs(central)) * 4_000 / 2.0)  # Lap(2/ε) per bin, ε = 1
    assert stats.gamma.ppf(A / 2, central.size) <= g <= stats.gamma.ppf(1 - A / 2, central.size)


def test_mean_ratio_is_of_order_sqrt_n_and_inside_its_interval() -> None:
    counts = lc.true_counts(query="mean", n=10_000, share=0.3)
    rng = np.random.default_rng(3)
    for eps in (0.5, 1.0, 2.0):
        local, central = lc.simulate_errors(
            counts, query="mean", epsilon=eps, repeats=2_000, rng=rng
        )
        _ratio, low, high = lc.rmse_ratio_estimate(local, central, confidence_level=0.999, rng=rng)
        exact = lc.rmse_ratio(counts, query="mean", epsilon=eps)
        assert low <= exact <= high
        assert 0.5 < exact / math.sqrt(10_000) < 1 / math.sqrt(2)  # order √n


def test_randomised_response_ln3_estimator_is_unbiased() -> None:
    """The blog's coin flips: p̂ = 2(P[yes] − 1/4) is the local estimator at ε = ln 3, and
    the reports of the mechanisms.py randomiser have P[yes] = 1/4 + x̄/2."""
    p, q = lc.local_probabilities(query="mean", k=2, epsilon=LN3, randomiser="k-rr")
    assert (p, q) == pytest.approx((0.75, 0.25))
    for y in (0.0, 0.3, 0.62, 1.0):
        assert (y - q) / (p - q) == pytest.approx(2 * (y - 0.25))
    rr = lc.local_randomiser(query="mean", k=2, epsilon=LN3)
    rng = np.random.default_rng(2)
    n1, n0 = 30_000, 70_000
    yes = int(rr.run(1, rng=rng, size=n1).sum() + rr.run(0, rng=rng, size=n0).sum())
    assert stats.binomtest(yes, n1 + n0, 0.25 + 0.3 / 2).pvalue > A
    # and over repeats, the mean of p̂ is the truth within its binomial-normal interval
    counts = lc.true_counts(query="mean", n=1_000, share=0.3)
    local, _ = lc.simulate_errors(counts, query="mean", epsilon=LN3, repeats=5_000, rng=rng)
    se = math.sqrt(3 / (4 * 1_000) / 5_000)
    assert abs(local.mean()) <= stats.norm.ppf(1 - A / 2) * se


@pytest.mark.parametrize("query", ["mean", "histogram"])
@pytest.mark.parametrize("side", ["local", "central"])
def test_epsilon_lower_bound_never_exceeds_epsilon_beyond_the_binomial_bound(
    side: str, query: str
) -> None:
    """Validity: 400 audits of correct randomisers at c = 0.95; ε_LB > ε in at most the
    Binomial(400, 0.05) upper 1e-3 quantile of them."""
    eps, c, repeats = 1.0, 0.95, 400
    counts = lc.true_counts(query=query, n=100, k=4)
    mech = (
        lc.local_randomiser(query=query, k=4, epsilon=eps, randomiser="k-rr")
        if side == "local"
        else lc.central_mechanism(counts, query=query, epsilon=eps)
    )
    rng = np.random.default_rng(17)
    over = 0
    for r in range(repeats):
        neg = mech.run(0, rng=rng, size=1_000)
        pos = mech.run(1, rng=rng, size=1_000)
        b = epsilon_lower_bound(neg, pos, delta=0.0, confidence_level=c, seed=r)
        over += b.value > eps
    assert over <= stats.binom.ppf(1 - A, repeats, 1 - c)


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.in_table = False
        self.rows = 0
        self.svgs = 0
        self.headings: list[str] = []
        self._h2 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("class") == "local-central":
            self.in_table = True
        elif tag == "tr" and self.in_table:
            self.rows += 1
        elif tag == "svg":
            self.svgs += 1
        elif tag == "h2" and str(a.get("id", "")).startswith("local-central"):
            self._h2 = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.in_table = False
        if tag == "h2":
            self._h2 = False

    def handle_data(self, data: str) -> None:
        if self._h2:
            self.headings.append(data)


def test_audit_writes_the_table_and_the_report_shows_it(tmp_path) -> None:
    from dpaudit.audit import run_audit
    from dpaudit.report import render_report

    audit = tmp_path / "lc.toml"
    audit.write_text(
        '[audit]\nname = "lc"\nkinds = ["local-central"]\nseed = 1\n\n'
        '[local-central]\nquery = "mean"\nn = 2_000\nepsilons = [0.5, 2.0]\n'
        "repeats = 300\ntrials = 2_000\n"
    )
    result = run_audit(audit, output_dir=tmp_path / "out", write=False).to_dict()
    table = result["tests"][0]["local_central"]
    assert [r["epsilon"] for r in table["rows"]] == [0.5, 2.0]
    for row in table["rows"]:
        assert row["ratio"] == pytest.approx(
            lc.rmse_ratio([1_400, 600], query="mean", epsilon=row["epsilon"])
        )
        assert row["local"]["epsilon_lower"] <= row["epsilon"]
    assert len(result["bounds"]) == 4
    assert all(b["in_verdict"] for b in result["bounds"])
    # The per-test score plots (ROC, histograms) are the shared report's, tested there;
    # dropped here to keep this test fast.
    result["tests"] = [
        {k: v for k, v in t.items() if k not in ("curve", "histogram")} for t in result["tests"]
    ]
    html = render_report(result)
    parser = _Tables()
    parser.feed(html)
    assert parser.rows == 1 + 2  # header + one row per ε
    assert any("Local versus central DP" in h for h in parser.headings)
    assert parser.svgs == 1  # the RMSE plot
    assert "RMSE against ε on log axes" in html
    section = html[html.index('id="local-central0"') :]
    assert "<svg" in section


def test_init_writes_an_example_that_validates(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from dpaudit.cli import app

    runner = CliRunner()
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["init", "--kind", "local-central", "-o", "audit.toml"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "audit.toml").read_text().startswith("# A dpaudit audit file")
    assert runner.invoke(app, ["validate", "audit.toml"]).exit_code == 0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"query": "mean", "k": 4}, "'k' is a parameter of query = 'histogram', not 'mean'"),
        ({"query": "histogram"}, "query = 'histogram' needs 'k', the number of bins"),
        ({"query": "histogram", "k": 3, "share": 0.2}, "'share' is a parameter of query = 'mean'"),
        (
            {"query": "histogram", "k": 3, "frequencies": [1, 2]},
            "'frequencies' must be 3 non-negative numbers with a positive sum",
        ),
        ({"query": "mean", "epsilons": [1.0, 1.0]}, "'epsilons' must be different values"),
    ],
)
def test_the_table_refuses_keys_of_the_other_query(table: dict, message: str) -> None:
    from pydantic import ValidationError

    from dpaudit.local_central.schema import LocalCentralSection

    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        LocalCentralSection(**table)


def test_true_counts_add_up_and_refuse_bad_frequencies() -> None:
    counts = lc.true_counts(query="histogram", n=1_001, k=3, frequencies=[1, 1, 1])
    assert counts.tolist() == [334, 334, 333]
    with pytest.raises(ValueError, match="must be 3 non-negative numbers"):
        lc.true_counts(query="histogram", n=10, k=3, frequencies=[1, -1, 1])
    with pytest.raises(ValueError, match=r"^The 'query' parameter must be one of"):
        lc.true_counts(query="median", n=10)
