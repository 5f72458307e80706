"""The report's local-versus-central section: the error table and RMSE against ε.

Reads only what the ``local-central`` kind wrote into ``results.json`` (a test's
``local_central`` details); draws, on log axes, the closed-form RMSE of the local and the
central estimator against ε (lines) and the simulated RMSE with its interval (points).
"""

from __future__ import annotations

from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from dpaudit.report.plots import _RC, COLOURS, svg_fragment

__all__ = ["local_central_section", "rmse_plot"]

_SIDES = (("local", COLOURS["positive"], "local"), ("central", COLOURS["negative"], "central"))


def rmse_plot(table: dict[str, Any], *, id_prefix: str = "lc-") -> str | None:
    """RMSE against ε, log-log: closed form (lines), simulated with intervals (points)."""
    rows = sorted(table.get("rows") or [], key=lambda r: r["epsilon"])
    if not rows:
        return None
    eps = np.array([r["epsilon"] for r in rows], float)
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(5.6, 3.6))
        ax = fig.subplots()
        for side, colour, name in _SIDES:
            theory = np.array([r[side]["rmse"] for r in rows], float)
            sim = np.array([r[side]["simulated"]["value"] for r in rows], float)
            lo = np.array([r[side]["simulated"]["interval"][0] for r in rows], float)
            hi = np.array([r[side]["simulated"]["interval"][1] for r in rows], float)
            what = table.get("local_randomiser") if side == "local" else "Laplace"
            ax.plot(
                eps, theory, color=colour, lw=1.2, ls="--", label=f"{name} ({what}), closed form"
            )
            ax.errorbar(
                eps,
                sim,
                yerr=np.vstack([np.maximum(sim - lo, 0), np.maximum(hi - sim, 0)]),
                color=colour,
                marker="o",
                ms=4,
                lw=0,
                elinewidth=1.2,
                capsize=3,
                label=f"{name}, simulated",
            )
        ax.set(xscale="log", yscale="log")
        ax.set_xlabel("ε")
        ax.set_ylabel(str(table.get("error") or "RMSE"))
        ax.set_xticks(eps)
        ax.set_xticklabels([f"{e:.3g}" for e in eps])
        ax.minorticks_off()
        ax.legend(loc="best")
        return svg_fragment(fig, id_prefix=id_prefix)


def local_central_section(results: dict[str, Any]) -> list[dict[str, Any]]:
    """What ``_local_central.html.j2`` shows: one entry per comparison table (none when
    the audit has no ``local-central`` kind)."""
    found = []
    for i, test in enumerate(results.get("tests") or []):
        table = test.get("local_central")
        if isinstance(table, dict):
            found.append({"table": table, "svg": rmse_plot(table, id_prefix=f"lc{i}-")})
    return found
