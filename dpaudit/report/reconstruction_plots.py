"""The report's reconstruction section: defence table, log-log error plot, images drawn.

Reads only what the ``reconstruction`` kind wrote into ``results.json`` (each test's
``reconstruction`` details): the defence rows with the lecture's complexity column, the
scaling grid's cells and slopes, and a few raw inputs and reconstructions per row. The
images are drawn here, at report time, as inline SVG (one grey square per pixel): no
image file, no data URI, no URL.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from dpaudit.report.plots import _RC, COLOURS, svg_fragment

__all__ = ["digit_svg", "reconstruction_section", "scaling_plot"]

_SERIES = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#222222")


def digit_svg(pixels: Any, *, side: int = 8, size: int = 56, direction: bool = False) -> str:
    """An inline SVG of a ``side × side`` grey image (0 = white, 1 = black ink).

    Pixels are clipped to [0, 1]. A ``direction`` (the tensor method's ±x/‖x‖) has no
    scale or sign of its own: it is drawn with the sign that makes its pixels sum
    positive, divided by its largest pixel.
    """
    v = np.nan_to_num(np.asarray(pixels, dtype=float).reshape(-1))
    if v.size != side * side:
        raise ValueError(f"an image of {side}×{side} needs {side * side} pixels, got {v.size}")
    if direction:
        v = v if v.sum() >= 0 else -v
        top = float(v.max())
        v = v / top if top > 0 else v
    v = np.clip(v, 0.0, 1.0)
    cells = []
    for k, value in enumerate(v):
        grey = round(255 * (1.0 - value))
        cells.append(
            f'<rect x="{k % side}" y="{k // side}" width="1" height="1" '
            f'fill="#{grey:02x}{grey:02x}{grey:02x}"/>'
        )
    return (
        f'<svg role="img" viewBox="0 0 {side} {side}" width="{size}" height="{size}" '
        f'shape-rendering="crispEdges" class="digit">{"".join(cells)}</svg>'
    )


def _reference(cells: list[dict[str, Any]], d: int) -> float:
    """The constant c of c·B√(d/m) through the cells (least squares on logs, slope fixed)."""
    logs = [
        math.log(c["median_error"]) - math.log(c["batch_size"] * math.sqrt(d / c["width"]))
        for c in cells
        if c.get("median_error", 0) > 0
    ]
    return math.exp(float(np.mean(logs))) if logs else 1.0


def scaling_plot(details: dict[str, Any], *, id_prefix: str = "scaling-") -> str | None:
    """Median error against B (one line per m) and against m (one line per B), log axes.

    Dashed: the rate c·B√(d/m), with c the one constant that fits the cells best in
    log space (the rate is O(·): only its slopes are predicted). Error bars: the cells'
    order-statistic intervals for the median.
    """
    cells = [c for c in details.get("cells") or [] if (c.get("median_error") or 0) > 0]
    if len(cells) < 2:
        return None
    d = int(details.get("input_size") or 64)
    c0 = _reference(cells, d)
    bs = sorted({int(c["batch_size"]) for c in cells})
    ms = sorted({int(c["width"]) for c in cells})
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(8.6, 3.8))
        axes = fig.subplots(1, 2, sharey=True)
        panels = (
            (axes[0], "batch_size", "width", bs, ms, "batch size B", "m"),
            (axes[1], "width", "batch_size", ms, bs, "hidden width m", "B"),
        )
        for ax, xkey, gkey, xs, groups, xlabel, gname in panels:
            for i, g in enumerate(groups):
                colour = _SERIES[i % len(_SERIES)]
                row = sorted((c for c in cells if c[gkey] == g), key=lambda c: c[xkey])
                if not row:
                    continue
                x = np.array([c[xkey] for c in row], float)
                y = np.array([c["median_error"] for c in row], float)
                ci = [c.get("median_error_interval") or [c["median_error"]] * 2 for c in row]
                lo = np.array([float(v[0]) for v in ci])
                hi = np.array([float(v[1]) for v in ci])
                lo = np.where(lo > 0, lo, y)  # a log axis cannot show 0
                err = np.vstack([np.maximum(y - lo, 0), np.maximum(hi - y, 0)])
                ax.errorbar(
                    x,
                    y,
                    yerr=err,
                    color=colour,
                    marker="o",
                    ms=4,
                    lw=1.3,
                    capsize=2,
                    label=f"{gname} = {g}",
                )
                grid = np.geomspace(min(xs), max(xs), 20) if len(xs) > 1 else np.array(xs, float)
                if xkey == "batch_size":
                    rate = c0 * grid * math.sqrt(d / g)
                else:
                    rate = c0 * g * np.sqrt(d / grid)
                ax.plot(grid, rate, ls="--", lw=1.0, color=colour, alpha=0.8)
            ax.set(xscale="log", yscale="log")
            ax.set_xlabel(xlabel)
            ax.set_xticks(xs)
            ax.set_xticklabels([str(x) for x in xs])
            ax.minorticks_off()
        axes[0].set_ylabel("median error")
        axes[0].plot([], [], ls="--", color=COLOURS["empirical"], lw=1.0, label=f"{c0:.2g}·B√(d/m)")
        axes[0].legend(loc="best")
        axes[1].legend(loc="best")
        return svg_fragment(fig, id_prefix=id_prefix)


def _fmt_fit(fit: dict[str, Any] | None) -> dict[str, Any] | None:
    if not fit:
        return None
    return {
        "slope_batch": fit.get("slope_batch"),
        "slope_batch_interval": fit.get("slope_batch_interval"),
        "slope_width": fit.get("slope_width"),
        "slope_width_interval": fit.get("slope_width_interval"),
        "theory": fit.get("theory") or {},
        "confidence_level": fit.get("confidence_level"),
    }


def reconstruction_section(results: dict[str, Any]) -> dict[str, Any] | None:
    """What ``_reconstruction.html.j2`` shows, or None when no test is a reconstruction.

    Defence rows (with their images), the scaling grids, and the identification games
    (their numbers only: the game's ε bound is in the bounds table).
    """
    rows, scaling, error_names, games = [], [], [], []
    for i, test in enumerate(results.get("tests") or []):
        rec = test.get("reconstruction")
        if not isinstance(rec, dict):
            continue
        if "metrics" in rec:
            examples = rec.get("examples") or {}
            direction = examples.get("scale") == "direction"
            side = int(examples.get("side") or 8)
            pairs = [
                {
                    "true": digit_svg(t, side=side),
                    "found": digit_svg(f, side=side, direction=direction),
                }
                for t, f in zip(
                    examples.get("x_true") or [], examples.get("x_hat") or [], strict=False
                )
            ]
            metrics = rec["metrics"]
            error_names.append(metrics.get("error"))
            rows.append(
                {
                    "defence": (rec.get("defence") or {}).get("name"),
                    "recovered": _recovered(metrics),
                    "label": rec.get("defence_label") or test.get("label"),
                    "attack": rec.get("attack"),
                    "batch_size": rec.get("batch_size"),
                    "metrics": metrics,
                    "complexity": rec.get("complexity") or {},
                    "pairs": pairs,
                    "direction": direction,
                }
            )
        elif "cells" in rec:
            scaling.append(
                {
                    "label": test.get("label"),
                    "cells": rec["cells"],
                    "fit": _fmt_fit(rec.get("fit")),
                    "error": rec.get("error"),
                    "svg": scaling_plot(rec, id_prefix=f"rs{i}-"),
                }
            )
        elif "game" in rec:
            # a sequential game ([audit] stopping = "sequential") carries its path
            games.append({"label": test.get("label"), **rec, "sequential": test.get("sequential")})
    if not rows and not scaling and not games:
        return None
    names = [n for n in dict.fromkeys(error_names) if n]
    return {
        "rows": rows,
        "scaling": scaling,
        "games": games,
        "errors": names,
        # The lead: exact recoveries without a defence against those under DP-SGD.
        "undefended": [r for r in rows if r["defence"] == "none"],
        "dpsgd": [r for r in rows if r["defence"] == "dpsgd"],
    }


def _recovered(metrics: dict[str, Any]) -> int | None:
    """How many examples came back within the tolerance (fraction × examples, whole)."""
    fraction, examples = metrics.get("fraction_recovered"), metrics.get("examples")
    if not isinstance(fraction, int | float) or not isinstance(examples, int):
        return None
    return round(fraction * examples)
