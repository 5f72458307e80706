"""The tensor method as an audit-file attack, the lecture's complexity column, the fitted
slopes, and the report's reconstruction section (dpaudit/reconstruction.py,
dpaudit/kinds/reconstruction.py, dpaudit/report/reconstruction_plots.py)."""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from dpaudit.audit import run_audit
from dpaudit.errors import ConfigError, DpauditError
from dpaudit.reconstruction.methods import (
    Defence,
    direction_nrmse,
    fit_scaling,
    lecture_complexity,
    load_digits_images,
)

# ------------------------------------------------------------- the complexity column

# B = 2, d = 64, m = 256: √(d/m) = 1/2.
CASES = [
    (Defence("none"), "B√(d/m)", 2 * 0.5),
    (Defence("clipping", clipping_norm=0.1), "B√(d/m)", 2 * 0.5),
    (Defence("aggregation", k=3), "kB√(d/m)", 3 * 2 * 0.5),
    (Defence("noise", sigma=0.5), "(B + σ)√(d/m)", (2 + 0.5) * 0.5),
    # ‖g‖ = 4 > s = 1: (B + σ‖g‖/s)√(d/m).
    (Defence("dpsgd", sigma=0.5, clipping_norm=1.0), "(B + σ·max{1, ‖g‖/s})√(d/m)", 2.0),
    # ‖g‖ = 4 < s = 8: max{1, ‖g‖/s} = 1.
    (Defence("dpsgd", sigma=0.5, clipping_norm=8.0), "(B + σ·max{1, ‖g‖/s})√(d/m)", 1.25),
    # drop probability 1/4: the lecture's p keeps 3/4 of the units, 2√(64/192) = 2/√3.
    (Defence("dropout", p=0.25), "B√(d/(mp))", 2 / math.sqrt(3)),
    (Defence("pruning", keep=0.1), "not covered by the theory", None),
]


@pytest.mark.parametrize(("defence", "formula", "value"), CASES)
def test_complexity_column_is_the_lectures_formula(defence, formula, value) -> None:
    c = lecture_complexity(defence, batch_size=2, input_size=64, width=256, gradient_norm=4.0)
    assert c.formula == formula
    if value is None:
        assert c.value is None
    else:
        assert c.value == pytest.approx(value, rel=1e-15)
    assert (c.parameters["B"], c.parameters["d"], c.parameters["m"]) == (2, 64, 256)


def test_complexity_without_a_gradient_norm_and_bad_sizes() -> None:
    dpsgd = Defence("dpsgd", sigma=1.0)
    assert lecture_complexity(dpsgd, batch_size=1, input_size=64, width=64).value is None
    with pytest.raises(
        DpauditError,
        match=r"The 'width' parameter must be an integer in \[1, inf\)\. Got 0 instead\.",
    ):
        lecture_complexity(Defence(), batch_size=1, input_size=64, width=0)


# --------------------------------------------------------------------- the slopes


def test_fit_scaling_recovers_planted_exponents_exactly() -> None:
    # Medians c·B^α·m^β with α = 1, β = −1/2 and no spread: the fit and every bootstrap
    # resample return the exponents (up to rounding).
    cells = [(b, m, np.full(4, 0.3 * b * m**-0.5)) for b in (1, 2, 4, 8) for m in (64, 256, 1024)]
    fit = fit_scaling(cells, resamples=50)
    assert fit.slope_batch == pytest.approx(1.0, abs=1e-12)
    assert fit.slope_width == pytest.approx(-0.5, abs=1e-12)
    assert fit.slope_batch_interval is not None
    assert fit.slope_batch_interval.low == pytest.approx(1.0, abs=1e-12)
    assert fit.to_dict()["theory"] == {"batch": 1.0, "width": -0.5}


def test_fit_scaling_interval_covers_the_true_slope() -> None:
    # Log-normal batch errors around c·B·m^(−1/2), 9 cells × 15 batches. The percentile
    # bootstrap is approximate, so the check is coverage at a loose, derived level: over
    # 60 repeats a 90 % interval should miss about 6 times; 15 or more misses has
    # probability < 1e-3 under Bin(60, 0.1) (and would signal a biased interval).
    from scipy import stats

    rng = np.random.default_rng(5)
    misses = misses_b = 0
    for _ in range(60):
        cells = [
            (b, m, 0.3 * b * m**-0.5 * np.exp(rng.normal(0, 0.3, 15)))
            for b in (1, 2, 4)
            for m in (64, 256, 1024)
        ]
        fit = fit_scaling(cells, confidence_level=0.9, resamples=200, seed=int(rng.integers(1e9)))
        ci, ci_b = fit.slope_width_interval, fit.slope_batch_interval
        assert ci is not None
        assert ci_b is not None
        misses += not ci.low <= -0.5 <= ci.high
        misses_b += not ci_b.low <= 1.0 <= ci_b.high
    assert stats.binom.sf(misses - 1, 60, 0.1) > 1e-3, misses
    assert stats.binom.sf(misses_b - 1, 60, 0.1) > 1e-3, misses_b


def test_fit_scaling_needs_two_cells() -> None:
    with pytest.raises(DpauditError, match="at least two cells"):
        fit_scaling([(1, 64, np.array([0.5])), (2, 64, np.zeros(3))])


def test_direction_error_is_the_sine_and_ignores_scale_and_sign() -> None:
    x = np.array([[1.0, 0.0], [0.0, 2.0]])
    theta = 0.3
    u = np.array([[0.0, -5.0], [math.cos(theta), math.sin(theta)]])  # swapped, scaled, flipped
    errors, match = direction_nrmse(x, u)
    np.testing.assert_allclose(errors, [math.sin(theta), 0.0], atol=1e-15)
    assert match.tolist() == [1, 0]


# ---------------------------------------------------- the tensor attack, from a file

TENSOR_AUDIT = """
[audit]
name = "tensor-test"
kinds = ["reconstruction"]
seed = 1

[reconstruction]
attack = "tensor"
hidden = [4096]
activation = "tanh"
batch_size = 1
batches = 2
tolerance = 0.2

[[reconstruction.defences]]
name = "none"

[[reconstruction.defences]]
name = "dpsgd"
sigma = 0.5

[[reconstruction.defences]]
name = "pruning"
keep = 0.5

[reconstruction.scaling]
batch_sizes = [1]
widths = [256, 4096]
batches = 2
"""


@pytest.fixture(scope="module")
def tensor_run(tmp_path_factory) -> tuple[dict, str]:
    folder = tmp_path_factory.mktemp("tensor")
    f = folder / "a.toml"
    f.write_text(TENSOR_AUDIT)
    run_audit(f, output_dir=folder / "run")
    data = json.loads((folder / "run" / "results.json").read_text())
    return data, (folder / "run" / "report.html").read_text()


def test_tensor_attack_from_the_audit_file_recovers_b1_directions(tensor_run) -> None:
    data, _ = tensor_run
    none = next(t for t in data["tests"] if t["id"] == "reconstruction-0")
    rec = none["reconstruction"]
    assert rec["attack"] == "tensor"
    errors = rec["metrics"]
    # The best guess that ignores the gradient, the mean digit's direction, has
    # sin∠ ≥ 0.35 to every one of these inputs (computed here); the attack must do far
    # better: its median below half of that smallest baseline.
    images = load_digits_images()[0]
    x_true = np.array(rec["examples"]["x_true"])
    baseline = direction_nrmse(x_true, images.mean(axis=0, keepdims=True).repeat(2, 0))[0]
    assert baseline.min() >= 0.35
    assert errors["median_nrmse"] < baseline.min() / 2
    # The complexity column at this run: B√(d/m) = √(64/4096) = 1/8.
    assert rec["complexity"] == {
        "formula": "B√(d/m)",
        "value": 0.125,
        "parameters": {"B": 1, "d": 64, "m": 4096},
    }
    # DP-SGD's row reads ‖g‖, the median per-example gradient norm of the run.
    dpsgd = next(t for t in data["tests"] if t["id"] == "reconstruction-1")["reconstruction"]
    p = dpsgd["complexity"]["parameters"]
    assert dpsgd["complexity"]["value"] == pytest.approx(
        (1 + 0.5 * max(1.0, p["‖g‖"] / 1.0)) * 0.125, rel=1e-12
    )
    pruning = next(t for t in data["tests"] if t["id"] == "reconstruction-2")["reconstruction"]
    assert pruning["complexity"]["value"] is None
    # The scaling grid: error falls with m; the fit's slope in m is negative.
    scaling = next(t for t in data["tests"] if t["id"] == "reconstruction-scaling")
    cells = scaling["reconstruction"]["cells"]
    assert [(c["batch_size"], c["width"]) for c in cells] == [(1, 256), (1, 4096)]
    assert cells[1]["median_error"] < cells[0]["median_error"]
    assert scaling["reconstruction"]["fit"]["slope_width"] < 0
    assert scaling["reconstruction"]["fit"]["slope_batch"] is None


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[tuple[str, dict]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self.svgs: list[dict] = []
        self.figures: list[str] = []
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        named = [c for c in a.get("class", "").split() if c.startswith("reconstruction")]
        if tag == "table" and named:
            self._table = named[0]
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "svg":
            self.svgs.append(a)
        elif tag == "figure" and a.get("class"):
            self.figures.append(a["class"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_report_shows_the_table_the_plot_and_the_images(tensor_run) -> None:
    data, html = tensor_run
    page = _Collect()
    page.feed(html)
    assert "honest-but-curious server" in html
    table = page.tables["reconstruction-defences"]
    header, rows = table[0], table[1:]
    assert header[-2:] == ["predicted error rate", "rate here"]
    assert [r[0] for r in rows] == ["none", "dpsgd(σ=0.5, C=1)", "pruning(keep=0.5)"]
    assert rows[0][6].startswith("B√(d/m)")
    assert rows[0][7] == "0.125"
    assert rows[2][6].startswith("not covered by the theory")
    assert rows[2][7] == "—"
    median = data["tests"][0]["reconstruction"]["metrics"]["median_nrmse"]
    assert rows[0][3].startswith(f"{median:.3g}")
    # The log-log plot (matplotlib SVG) and the slopes next to the theory's 1 and −1/2.
    assert page.figures.count("reconstruction-scaling") == 1
    slopes = page.tables["reconstruction-slopes"]
    assert [r[0] for r in slopes[1:]] == ["log B", "log m"]
    assert slopes[2][3] == "−0.5"
    # The images, in the report's lead: 3 defences × 2 examples, each an original and a
    # reconstruction.
    digits = [s for s in page.svgs if s.get("class") == "digit"]
    assert len(digits) == 2 * 3 * 2
    assert all(s["viewbox"] == "0 0 8 8" for s in digits)
    images = page.tables["reconstruction-lead"]
    assert [r[0].removesuffix("directions, drawn at their own scale") for r in images[1:]] == [
        r[0] for r in rows
    ]
    # Self-contained: no URL anywhere.
    assert "http://" not in html
    assert "https://" not in html


def test_digit_svg_draws_pixels_and_directions() -> None:
    from dpaudit.report.reconstruction_plots import digit_svg

    pixels = np.zeros(64)
    pixels[0] = 1.0
    svg = digit_svg(pixels)
    assert svg.count("<rect") == 64
    assert svg.count('fill="#000000"') == 1
    assert svg.count('fill="#ffffff"') == 63
    # A direction is drawn at its own scale and sign: −0.1·e_0 is the same picture.
    assert digit_svg(-0.1 * pixels, direction=True) == svg
    with pytest.raises(ValueError, match="needs 64 pixels, got 3"):
        digit_svg([0, 1, 0])


# --------------------------------------------------------------------- bad tables


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ([("hidden = [4096]", "hidden = [64, 64]")], r"varies m of a two-layer network"),
        (
            [('activation = "tanh"', 'activation = "tanh"\noutputs = 10')],
            "two-layer network with a scalar output: hidden = \\[m\\], outputs = 1",
        ),
        (
            [('activation = "tanh"', 'activation = "relu"')],
            "needs activation 'tanh' or 'sigmoid'",
        ),
        ([("batch_sizes = [1]", "batch_sizes = [1, 65]")], "reconstruction.scaling.batch_sizes"),
        (
            [
                ("batch_size = 1\n", "batch_size = 2\n"),
                ('name = "none"', 'name = "aggregation"\nk = 33'),
            ],
            "finds at most d = 64 inputs: .* got 66",
        ),
        ([('attack = "tensor"', 'attack = "tensors"')], "reconstruction.attack"),
    ],
)
def test_bad_tensor_tables_are_one_clear_error(tmp_path: Path, changes, match) -> None:
    text = TENSOR_AUDIT
    for old, new in changes:
        text = text.replace(old, new)
    f = tmp_path / "a.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=match):
        run_audit(f, output_dir=tmp_path / "run", write=False)
