"""Privacy profiles against GDP curves (the figure of Liu, Sun, Jiang, Kong 2022, Fig. 1).

One panel per guarantee: the naive profile δ_naive(ε) (dashed), the refined profile
(solid, by their Thm. 2.1), optionally the amplified one (dotted), and the GDP
profiles δ_μ(ε) for μ = 1, 2, 4 (thin), on a log δ axis so that tails are visible.
Written as SVG or PNG (by the file's suffix) with matplotlib's object API (no pyplot).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from dpaudit.errors import DpauditError
from dpaudit.report.plots import _RC, COLOURS
from dpaudit.theory import gdp_delta
from dpaudit.theory.equations import (
    AmplifiedGuarantee,
    PrivacyEquation,
    naive_profile,
    refined_equation_profile,
)

__all__ = ["DEFAULT_GDP_MUS", "liu_figure1_examples", "profile_figure", "write_profile_figure"]

DEFAULT_GDP_MUS = (1.0, 2.0, 4.0)
_GDP_STYLES = ("#999999", "#666666", "#333333")


def liu_figure1_examples() -> list[tuple[PrivacyEquation, float]]:
    """The three running examples of Liu et al. 2022 (§2) with the ε range of their panel:
    Laplace with θ = Δ/b = 1 (b = 2, Δ = 2), "SGD" (A = 2, B = 1, σ = 2) and ICEA
    (m > 10·ln(n/(εδ)) with m = 20, n = 4; q = 1024 for amplification)."""
    from dpaudit.theory.equations import icea_equation, laplace_equation, sgd_equation

    return [
        (laplace_equation(scale=2.0, sensitivity=2.0), 4.0),
        (sgd_equation(sigma=2.0, a=2.0, b=1.0), 4.0),
        (icea_equation(messages=20, parties=4, a=10.0, field_size=1024), 40.0),
    ]


def profile_figure(
    panels: Sequence[tuple[PrivacyEquation, float]],
    *,
    mus: Sequence[float] = DEFAULT_GDP_MUS,
    amplified: dict[str, AmplifiedGuarantee] | None = None,
    delta_min: float = 1e-6,
) -> Figure:
    """Build the figure: one panel per (equation, ε range).

    Args:
        panels: (equation, largest ε shown) per panel.
        mus: the GDP curves drawn.
        amplified: amplified guarantees to overlay, keyed by equation name.
        delta_min: bottom of the log δ axis.
    """
    if not panels:
        raise DpauditError("The 'panels' parameter must name at least one equation.")
    amplified = amplified or {}
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(3.4 * len(panels), 3.2))
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (eq, eps_top) in zip(axes, panels, strict=True):
            eps = np.linspace(0.0, float(eps_top), 801)
            for mu, colour in zip(mus, _GDP_STYLES * 4, strict=False):
                ax.plot(eps, gdp_delta(eps, mu), color=colour, lw=0.8, label=f"{mu:g}-GDP")
            naive = naive_profile(eq, eps)
            refined, _, _ = refined_equation_profile(eq)
            ax.plot(
                eps,
                np.maximum(naive, delta_min / 10),
                color=COLOURS["positive"],
                ls="--",
                lw=1.2,
                label="naive",
            )
            ax.plot(
                eps,
                np.maximum(refined(eps), delta_min / 10),
                color=COLOURS["negative"],
                lw=1.6,
                label="refined",
            )
            amp = amplified.get(eq.name)
            if amp is not None:
                ax.plot(
                    eps,
                    np.maximum(amp.profile(eps), delta_min / 10),
                    color=COLOURS["dp"],
                    ls=":",
                    lw=1.6,
                    label=f"amplified (p={amp.mix:g})",
                )
            ax.set_yscale("log")
            ax.set_ylim(delta_min, 1.5)
            ax.set_xlim(0.0, float(eps_top))
            ax.set_xlabel("ε")
            ax.set_title(f"{eq.name} (σ={eq.sigma:g})", fontsize=9)
        axes[0].set_ylabel("δ(ε)")
        axes[-1].legend(fontsize=7, loc="upper right", frameon=False)
        fig.tight_layout()
    return fig


def write_profile_figure(
    path: str | Path,
    panels: Sequence[tuple[PrivacyEquation, float]],
    *,
    mus: Sequence[float] = DEFAULT_GDP_MUS,
    amplified: dict[str, AmplifiedGuarantee] | None = None,
) -> Path:
    """Write the figure to ``path`` (``.svg`` or ``.png``) and return the path."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("svg", "png"):
        raise DpauditError(
            f"The figure path must end in '.svg' or '.png'. Got {str(path)!r} instead."
        )
    fig = profile_figure(panels, mus=mus, amplified=amplified)
    path.parent.mkdir(parents=True, exist_ok=True)
    # no date in the metadata: the same numbers give the same file
    meta = {"Date": None} if fmt == "svg" else {}
    with mpl.rc_context(_RC):  # its svg.hashsalt makes the clip-path ids deterministic
        fig.savefig(path, format=fmt, bbox_inches="tight", metadata=meta)
    return path
