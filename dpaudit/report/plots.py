"""Inline SVG plots for the HTML report (matplotlib, Agg/SVG backend, no network).

Every function takes the plain dicts of ``results.json`` and returns an SVG fragment ready
to be placed inside HTML: no XML prolog, no DOCTYPE, no namespace URLs, no metadata block,
and element ids prefixed so that several plots can live in one page without clashing.
Text is written as SVG ``<text>`` (``svg.fonttype = "none"``), which matplotlib escapes,
so user strings (hypothesis names, curve labels) cannot inject markup.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import numpy as np

# Figures are built with the object API (matplotlib.figure.Figure), never pyplot: no GUI
# backend is touched, the caller's (e.g. a notebook's) backend stays as it is, and
# savefig(format="svg") renders with matplotlib's SVG backend.
from matplotlib.figure import Figure

if TYPE_CHECKING:  # the rc keys as a Literal type; imported for mypy only
    from matplotlib.typing import RcKeyType

#: Calm, colour-blind-safe colours (Okabe–Ito): H0 / H1 / empirical / theory kinds.
COLOURS = {
    "negative": "#0072B2",
    "positive": "#D55E00",
    "empirical": "#222222",
    "region": "#56B4E9",
    "dp": "#009E73",
    "gdp": "#CC79A7",
    "other": "#E69F00",
}

_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",  # <text> elements: small, selectable, escaped by matplotlib
    "svg.hashsalt": "dpaudit",  # deterministic ids, so the same result renders the same file
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e3e3e3",
    "grid.linewidth": 0.6,
    "axes.edgecolor": "#888888",
    "axes.labelcolor": "#333333",
    "xtick.color": "#555555",
    "ytick.color": "#555555",
    "legend.frameon": False,
    "legend.fontsize": 8.0,
    "text.usetex": False,
}


def plain_text(label: Any) -> str:
    """A user string made safe for matplotlib text: no mathtext, not hidden from legends.

    ``$`` would start mathtext (and can raise on malformed input); a label starting with
    ``_`` is silently dropped from legends.
    """
    text = str(label).replace("$", r"\$")
    return " " + text if text.startswith("_") else text


def svg_fragment(fig: Any, *, id_prefix: str = "fig-") -> str:
    """Serialise a figure to an SVG fragment safe to inline in HTML5.

    Args:
        fig: A matplotlib figure.
        id_prefix: Prepended to every element id (and reference), unique per plot in a page.
    """
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = buf.getvalue()
    # The HTML parser needs neither the XML prolog nor the DOCTYPE, and both name URLs.
    svg = re.sub(r"<\?xml[^>]*\?>\s*", "", svg)
    svg = re.sub(r"<!DOCTYPE[^>]*>\s*", "", svg, flags=re.DOTALL)
    # The RDF metadata block only names its vocabularies (URLs); nothing renders it.
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.DOTALL)
    # Inline <svg> in HTML5 is in the SVG namespace without xmlns, and the HTML parser
    # maps xlink:href itself (HTML Living Standard, "adjust foreign attributes").
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    # Ids from different figures must not clash in one document.
    prefix = id_prefix
    svg = re.sub(r'\bid="', f'id="{prefix}', svg)
    svg = svg.replace("url(#", f"url(#{prefix}").replace('href="#', f'href="#{prefix}')
    svg = svg.replace("<svg ", '<svg role="img" ', 1)
    return svg.strip()


def _arrays(curve: dict[str, Any], *keys: str) -> list[np.ndarray]:
    return [np.asarray(curve.get(k) or [], dtype=float) for k in keys]


#: Colours of several tests drawn in one plot (Okabe–Ito, without the two class colours).
SERIES = ("#222222", "#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")


def _curves(
    tests: Sequence[dict[str, Any]], names: Sequence[str] | None
) -> list[tuple[str, str, list[np.ndarray]]]:
    """(label, colour, arrays) of every test whose curve can be drawn."""
    out = []
    single = len(tests) == 1
    for i, test in enumerate(tests):
        arrays = _arrays(
            test.get("curve") or {}, "fpr", "fnr", "fpr_low", "fpr_high", "fnr_low", "fnr_high"
        )
        fpr, fnr = arrays[0], arrays[1]
        if fpr.size == 0 or fpr.size != fnr.size:
            continue
        name = "empirical" if single or names is None else plain_text(names[i])
        colour = COLOURS["empirical"] if single else SERIES[i % len(SERIES)]
        out.append((name, colour, arrays))
    return out


def _theory(tests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The theory curves of the tests, each label once (tests on one target share them)."""
    seen: dict[str, dict[str, Any]] = {}
    for test in tests:
        for tc in test.get("theory_curves") or []:
            seen.setdefault(str(tc.get("label")), tc)
    return list(seen.values())


def _decade_ticks(ax: Any, axis: str, low: float) -> None:
    """Log-axis ticks at powers of ten only, written as plain decimals (0.01, 0.1, 1).

    Matplotlib labels minor ticks of a log axis spanning less than a decade or two
    ("2×10⁻¹ 3×10⁻¹ …"), which overlap at report sizes; decades alone never do.
    """
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    first = math.floor(math.log10(low))
    ticks = [10.0**k for k in range(first, 1)]
    ticks = [t for t in ticks if t >= low * (1 - 1e-9)] or [1.0]
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_minor_locator(NullLocator())
    target.set_minor_formatter(NullFormatter())
    labels = [f"{t:.{max(0, -round(math.log10(t)))}f}" for t in ticks]
    (ax.set_xticklabels if axis == "x" else ax.set_yticklabels)(labels)


def tradeoff_plot(
    test: dict[str, Any] | Sequence[dict[str, Any]],
    *,
    id_prefix: str = "tradeoff-",
    names: Sequence[str] | None = None,
) -> str | None:
    """FPR vs FNR: the empirical trade-off curve(s), CP region(s), and the theory curves.

    ``test`` is one test, or several (drawn in one plot, one colour each, named by
    ``names``). The region is the union over thresholds of the boxes [fpr_low, fpr_high] ×
    [fnr_low, fnr_high] (pointwise two-sided Clopper–Pearson intervals); since both rates
    are monotone in the threshold, it is drawn as the polygon between the curve of upper
    corners and the curve of lower corners.
    """
    tests = [test] if isinstance(test, dict) else list(test)
    curves = _curves(tests, names)
    if not curves:
        return None
    single = len(tests) == 1
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(4.0, 2.8))
        ax = fig.subplots()
        for k, (_, colour, arrays) in enumerate(curves):
            fpr, _, fpr_lo, fpr_hi, fnr_lo, fnr_hi = arrays
            if fpr_lo.size == fpr.size == fpr_hi.size == fnr_lo.size == fnr_hi.size:
                xs = np.concatenate([fpr_hi, fpr_lo[::-1]])
                ys = np.concatenate([fnr_hi, fnr_lo[::-1]])
                ax.fill(
                    xs,
                    ys,
                    color=COLOURS["region"] if single else colour,
                    alpha=0.35 if single else 0.12,
                    lw=0,
                    label="confidence region" if k == 0 else None,
                )
        for tc in _theory(tests):
            tx, ty = _arrays(tc, "fpr", "fnr")
            if tx.size and tx.size == ty.size:
                colour = COLOURS.get(str(tc.get("kind")), COLOURS["other"])
                ax.plot(tx, ty, ls="--", lw=1.3, color=colour, label=plain_text(tc.get("label")))
        for name, colour, arrays in curves:
            ax.plot(arrays[0], arrays[1], color=colour, lw=1.4, label=name)
        ax.plot([0, 1], [1, 0], color="#bbbbbb", lw=0.8, ls=":", label="random guessing")
        ax.set(xlim=(0, 1), ylim=(0, 1))
        ax.set_xlabel("false positive rate (type I error)")
        ax.set_ylabel("false negative rate (type II error)")
        ax.legend(loc="upper right")
        return svg_fragment(fig, id_prefix=id_prefix)


def roc_plot(
    test: dict[str, Any] | Sequence[dict[str, Any]],
    *,
    id_prefix: str = "roc-",
    names: Sequence[str] | None = None,
) -> str | None:
    """TPR vs FPR on log-log axes (low FPR is where privacy attacks matter).

    ``test`` is one test or several (one colour each, named by ``names``); each test's
    TPR confidence band is drawn under its curve.
    """
    tests = [test] if isinstance(test, dict) else list(test)
    curves = _curves(tests, names)
    if not curves:
        return None
    single = len(tests) == 1
    negatives = max(int(t.get("negatives") or 0) for t in tests)
    positives = max(int(t.get("positives") or 0) for t in tests)
    # Log axes cannot show rate 0: start one count above it (the smallest non-zero rate).
    floor = 1.0 / max(negatives, positives, 10)
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(4.0, 2.8))
        ax = fig.subplots()
        for k, (_, colour, arrays) in enumerate(curves):
            fpr, _, fpr_lo, fpr_hi, fnr_lo, fnr_hi = arrays
            if fnr_lo.size == fpr.size == fnr_hi.size == fpr_lo.size == fpr_hi.size:
                band = fpr > 0
                ax.fill_between(
                    fpr[band],
                    np.maximum(1.0 - fnr_hi[band], floor / 10),
                    1.0 - fnr_lo[band],
                    color=COLOURS["region"] if single else colour,
                    alpha=0.35 if single else 0.12,
                    lw=0,
                    step="post",
                    label="TPR confidence band" if k == 0 else None,
                )
        for tc in _theory(tests):
            tx, ty = _arrays(tc, "fpr", "fnr")
            if tx.size and tx.size == ty.size:
                ok = (tx > 0) & (1.0 - ty > 0)
                colour = COLOURS.get(str(tc.get("kind")), COLOURS["other"])
                ax.plot(
                    tx[ok],
                    1.0 - ty[ok],
                    ls="--",
                    lw=1.3,
                    color=colour,
                    label=plain_text(tc.get("label")),
                )
        for name, colour, arrays in curves:
            fpr, tpr = arrays[0], 1.0 - arrays[1]
            keep = (fpr > 0) & (tpr > 0)
            if keep.any():
                ax.plot(fpr[keep], tpr[keep], color=colour, lw=1.4, label=name)
        grid = np.logspace(math.log10(floor), 0, 50)
        ax.plot(grid, grid, color="#bbbbbb", lw=0.8, ls=":", label="random guessing")
        ax.set(xscale="log", yscale="log", xlim=(floor, 1), ylim=(floor, 1.05))
        _decade_ticks(ax, "x", floor)
        _decade_ticks(ax, "y", floor)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.legend(loc="lower right")
        return svg_fragment(fig, id_prefix=id_prefix)


#: A histogram is "concentrated" when at most this many bins hold ...
CONCENTRATED_BINS = 3
#: ... at least this share of all scores: then its y axis is logarithmic.
CONCENTRATED_SHARE = 0.5


def _crop_empty_ends(
    edges: np.ndarray, neg: np.ndarray, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drop leading and trailing bins that hold no score of either class."""
    filled = np.flatnonzero((neg + pos) > 0)
    if filled.size == 0:
        return edges, neg, pos
    first, last = int(filled[0]), int(filled[-1])
    return edges[first : last + 2], neg[first : last + 1], pos[first : last + 1]


def is_concentrated(neg: np.ndarray, pos: np.ndarray) -> bool:
    """Whether a few bins hold most of the scores (outliers stretched the bin range).

    Then a linear y axis shows one spike and hides everything else, including where the two
    classes differ; counts cannot be re-binned here, so the plot switches to a log y axis.
    """
    pooled = np.sort(neg + pos)[::-1]
    total = pooled.sum()
    if total <= 0 or pooled.size <= 2 * CONCENTRATED_BINS:
        return False
    return bool(pooled[:CONCENTRATED_BINS].sum() >= CONCENTRATED_SHARE * total)


def _histogram_series(
    test: dict[str, Any],
) -> tuple[np.ndarray, list[tuple[np.ndarray, Any, str]], bool, float] | None:
    """(edges, [(density, name, class)], log scale?, share in the fullest bins) or None."""
    hist = test.get("histogram") or {}
    (edges,) = _arrays(hist, "edges")
    neg, pos = _arrays(hist, "negatives", "positives")
    if edges.size < 2 or neg.size != edges.size - 1 or pos.size != edges.size - 1:
        return None
    names: Sequence[Any] = test.get("hypotheses") or ("H0", "H1")
    # Densities use each class's own total (before cropping: cropped bins are empty).
    totals = {"negative": neg.sum(), "positive": pos.sum()}
    edges, neg, pos = _crop_empty_ends(edges, neg, pos)
    widths = np.diff(edges)
    if not np.all(widths > 0):
        return None
    log = is_concentrated(neg, pos)
    share = float(np.sort(neg + pos)[::-1][:CONCENTRATED_BINS].sum() / max((neg + pos).sum(), 1))
    series = []
    for counts, name, key in ((neg, names[0], "negative"), (pos, names[-1], "positive")):
        total = totals[key]
        series.append((counts / (total * widths) if total > 0 else counts, name, key))
    return edges, series, log, share


def _draw_histogram(
    ax: Any, test: dict[str, Any], *, legend: bool, title: str | None, compact: bool = False
) -> bool:
    """One test's two histograms on ``ax`` (see :func:`histogram_plot`); False if none."""
    found = _histogram_series(test)
    if found is None:
        return False
    edges, series, log, share = found
    floor = 0.0
    if log:
        # One score in the widest bin of the sparser class, halved: the axis starts just
        # below the smallest non-zero density, and empty bins sit on that floor.
        positive = np.concatenate([d[d > 0] for d, _, _ in series])
        floor = float(positive.min()) / 2 if positive.size else 1e-12
    for density, name, key in series:
        dashed = key == "positive"
        shown = np.maximum(density, floor) if log else density
        ax.stairs(
            shown,
            edges,
            baseline=floor,
            color=COLOURS[key],
            lw=1.4,
            ls=(0, (4, 2)) if dashed else "-",
            label=plain_text(name),
            zorder=3 if dashed else 2,
        )
        ax.stairs(shown, edges, baseline=floor, color=COLOURS[key], alpha=0.15, fill=True)
    ax.set_xlim(edges[0], edges[-1])
    ax.xaxis.set_major_locator(mpl.ticker.MaxNLocator(nbins=5))
    bins = series[0][0].size
    heading = [] if title is None else [plain_text(title)]
    if log:
        ax.set_yscale("log")
        ax.set_ylim(bottom=floor)
        ax.yaxis.set_minor_formatter(mpl.ticker.NullFormatter())
        heading.append(
            f"Log scale: {100 * share:.0f} % of the scores fall in {CONCENTRATED_BINS} of "
            f"{bins} bins"
        )
    if heading:
        ax.set_title("\n".join(heading), fontsize=8.0, color="#555555", loc="left")
    if legend:
        right = _mass_on_the_right(series[0][0] + series[1][0])
        ax.legend(loc="upper left" if right else "upper right", ncols=2 if compact else 1)
    return True


def histogram_plot(test: dict[str, Any], *, id_prefix: str = "histogram-") -> str | None:
    """The score histograms of the two hypotheses (as densities, one step line each).

    The bins come from ``results.json`` as they are. Empty bins at either end are not
    drawn; when a few bins hold most scores (:func:`is_concentrated`) the y axis is
    logarithmic, so that the tails and both classes stay visible. The second class is drawn
    dashed on top of the first, so it shows where the two coincide.
    """
    found = _histogram_series(test)
    if found is None:
        return None
    names: Sequence[Any] = test.get("hypotheses") or ("H0", "H1")
    log = found[2]
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(4.0, 2.8))
        ax = fig.subplots()
        _draw_histogram(ax, test, legend=True, title=None)
        ax.set_xlabel(f"attack score\n(larger: more like {plain_text(names[-1])})")
        ax.set_ylabel("density (log scale)" if log else "density")
        return svg_fragment(fig, id_prefix=id_prefix)


def histograms_plot(
    tests: Sequence[dict[str, Any]], *, names: Sequence[str], id_prefix: str = "histograms-"
) -> str | None:
    """The score histograms of several tests, one small panel each (own score axis)."""
    drawable = [(t, n) for t, n in zip(tests, names, strict=True) if _histogram_series(t)]
    if not drawable:
        return None
    if len(drawable) == 1:
        return histogram_plot(drawable[0][0], id_prefix=id_prefix)
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(4.0, 0.45 + 0.8 * len(drawable)), layout="constrained")
        axes = fig.subplots(len(drawable), 1)
        for i, (ax, (test, name)) in enumerate(zip(axes, drawable, strict=True)):
            _draw_histogram(ax, test, legend=i == 0, title=name, compact=True)
            ax.set_ylabel("density")
            ax.tick_params(labelsize=7.5)
        axes[-1].set_xlabel("attack score (each attack on its own scale)")
        return svg_fragment(fig, id_prefix=id_prefix)


def _mass_on_the_right(counts: np.ndarray) -> bool:
    """Whether most scores lie in the right half of the bins (the legend goes left)."""
    half = counts.size // 2
    return bool(counts[half:].sum() > counts[:half].sum())
