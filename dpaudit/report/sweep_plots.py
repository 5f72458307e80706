"""The report's privacy–utility sweep section (``[membership.sweep]``): the Bernau figure.

Reads only ``results.json``: the tests whose details carry a ``sweep`` point (written by
the membership kind for each point of a sweep) and the bounds of those tests. Draws, against
ε (log axis), four panels side by side: the target's test accuracy (its audited
non-members, rows that never trained it), the accountant's ε (central) or the claimed ε
(local) with the rigorous one-run ε lower bound of each attack, each attack's TPR at 1 %
FPR, and its advantage (TPR − FPR, Yeom et al. 2018); central DP in one colour, local DP
in another, the plain baseline as a dotted line. The layout follows Bernau et al.
(arXiv 1912.11328v4, Figs. 3–6).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from dpaudit.report.plots import _RC, COLOURS, svg_fragment

__all__ = ["LOW_FPR", "sweep_plot", "sweep_rows", "sweep_section"]

#: The false-positive rate at which the figure reads each attack's TPR.
LOW_FPR = 0.01
_SETTINGS = (
    ("central", COLOURS["negative"], "central DP (DP-SGD)"),
    ("local", COLOURS["positive"], "local DP (input perturbation)"),
)
_MARKERS = ("o", "s", "^", "D", "v", "P")


def _tpr_at(test: dict[str, Any], fpr: float) -> float | None:
    for row in (test.get("metrics") or {}).get("tpr_at_fpr") or []:
        if abs(float(row["target_fpr"]) - fpr) < 1e-12:
            return float(row["tpr"])
    return None


def _one_run(bounds: list[dict[str, Any]], label: str) -> tuple[float | None, float | None]:
    """The rigorous one-run ε lower bound of a test and what it is held against."""
    for b in bounds:
        lower = b.get("lower") or {}
        if (
            b.get("test") == label
            and b.get("parameter") == "epsilon"
            and lower.get("validity") == "rigorous-one-run"
        ):
            upper = b.get("upper")
            return float(lower["value"]), None if upper is None else float(upper)
    return None, None


def sweep_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (point, attack) of a sweep, in the order of the tests: the setting, the
    swept parameter and value, ε (the point's ε: the accountant's for a central point
    swept by σ), the attack, test accuracy, the one-run ε lower bound, TPR at 1 % FPR and
    the advantage. Empty when the audit has no sweep."""
    bounds = results.get("bounds") or []
    rows = []
    for test in results.get("tests") or []:
        point = test.get("sweep")
        if not isinstance(point, dict):
            continue
        accuracy = (test.get("target") or {}).get("accuracy") or {}
        lower, upper = _one_run(bounds, str(test.get("label")))
        epsilon = upper
        if point.get("parameter") in ("target_epsilon", "epsilon"):
            epsilon = float(point["value"])
        rows.append(
            {
                "point": point.get("point"),
                "setting": point.get("setting"),
                "parameter": point.get("parameter"),
                "value": point.get("value"),
                "epsilon": epsilon,
                "upper": upper,
                "attack": (test.get("attack") or {}).get("name"),
                "test_accuracy": accuracy.get("non_members"),
                "epsilon_lower": lower,
                "tpr_low_fpr": _tpr_at(test, LOW_FPR),
                "advantage": (test.get("metrics") or {}).get("advantage"),
            }
        )
    return rows


def sweep_plot(rows: list[dict[str, Any]], *, id_prefix: str = "sweep-") -> str | None:
    """The four panels against ε (see the module); ``None`` without a point with an ε."""
    if not any(r["epsilon"] is not None for r in rows):
        return None
    attacks = list(dict.fromkeys(r["attack"] for r in rows))
    panels = (
        ("test_accuracy", "test accuracy"),
        ("epsilon_lower", "ε: accountant / claim (line), lower bound (points)"),
        ("tpr_low_fpr", f"TPR at {LOW_FPR:.0%} FPR"),
        ("advantage", "advantage (TPR − FPR)"),
    )
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(11.0, 3.0))
        axes = fig.subplots(1, 4)
        for ax, (key, title) in zip(axes, panels, strict=True):
            for setting, colour, name in _SETTINGS:
                by_attack: dict[str, list[dict[str, Any]]] = defaultdict(list)
                for r in rows:
                    if r["setting"] == setting and r["epsilon"] is not None:
                        by_attack[r["attack"]].append(r)
                if key == "epsilon_lower":
                    pts = sorted(next(iter(by_attack.values()), []), key=lambda r: r["epsilon"])
                    if pts and any(r["upper"] is not None for r in pts):
                        eps = [r["epsilon"] for r in pts]
                        up = [np.nan if r["upper"] is None else r["upper"] for r in pts]
                        ax.plot(eps, up, color=colour, lw=1.2, ls="--", label=f"{name}: ε")
                for j, attack in enumerate(attacks):
                    pts = sorted(by_attack.get(attack, []), key=lambda r: r["epsilon"])
                    if key == "test_accuracy" and j > 0:
                        break  # one accuracy per target, whichever attack
                    vals = [np.nan if r[key] is None else r[key] for r in pts]
                    if not pts:
                        continue
                    label = name if key == "test_accuracy" else f"{name}, {attack}"
                    ax.plot(
                        [r["epsilon"] for r in pts],
                        vals,
                        color=colour,
                        marker=_MARKERS[j % len(_MARKERS)],
                        ms=4,
                        lw=1.0,
                        label=label,
                    )
            plain = [r for r in rows if r["setting"] == "plain" and r[key] is not None]
            if plain:
                ax.axhline(
                    max(float(r[key]) for r in plain),
                    color=COLOURS["empirical"],
                    ls=":",
                    lw=1.0,
                    label="no DP" if key == "test_accuracy" else "no DP (best attack)",
                )
            ax.set_xscale("log")
            if key == "epsilon_lower":
                ax.set_yscale("symlog", linthresh=0.1)  # lower bounds of 0 stay on the axis
                ax.set_ylim(bottom=0.0)
            ax.set_xlabel("ε")
            ax.set_title(title, fontsize=8.5)
        axes[0].legend(loc="best", fontsize=7)
        axes[2].legend(loc="best", fontsize=6.5)
        return svg_fragment(fig, id_prefix=id_prefix)


def sweep_section(results: dict[str, Any]) -> dict[str, Any] | None:
    """What ``_sweep.html.j2`` shows: the rows and the figure, ``None`` without a sweep."""
    rows = sweep_rows(results)
    if not rows:
        return None
    return {"rows": rows, "svg": sweep_plot(rows), "low_fpr": LOW_FPR}
