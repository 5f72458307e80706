"""Figure 1 of Liu, Sun, Jiang, Kong (NeurIPS 2022, arXiv:2210.09269v1), redrawn by dpaudit.

Left panel: the privacy profiles of the paper's three examples (§2), naive (the inverted
equation, dashed) and refined by Thm. 2.1 (solid); the Laplace mechanism's profile is
exact, so it has one curve. Right panel: the refined profiles against the 1-, 2- and
4-GDP profiles δ_μ (Thm. 3.1), with dpaudit's verdict on each of the paper's statements.

    .venv/bin/python scripts/liu_figure1.py            # writes docs/figures/liu-figure1.png
    .venv/bin/python scripts/liu_figure1.py --out x.png

Prints the per-statement table of docs/equations.md. The PNG is deterministic: the same
numbers and matplotlib version give the same bytes (no date or software in its metadata).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from dpaudit.report.plots import _RC, COLOURS
from dpaudit.theory import gdp_delta
from dpaudit.theory.equations import (
    PrivacyEquation,
    gdp_comparisons,
    icea_equation,
    identify_equation,
    laplace_equation,
    naive_profile,
    refined_equation_profile,
    sgd_equation,
)

OUT = Path(__file__).resolve().parents[1] / "docs" / "figures" / "liu-figure1.png"
MUS = (1.0, 2.0, 4.0)
GDP_GREYS = ("#aaaaaa", "#777777", "#333333")
LEFT_EPS = 4.0
RIGHT_EPS = 16.0

#: What the paper says of each example against μ-GDP (§3, on Figure 1): the relation of
#: the curves and whether the example is μ-GDP (None: the paper leaves it open).
PAPER = {
    ("laplace", 1.0): ("crosses", False),
    ("laplace", 2.0): ("below", True),
    ("laplace", 4.0): ("below", True),
    ("sgd", 1.0): ("cannot tell by looking", None),
    ("sgd", 2.0): ("cannot tell by looking", None),
    ("sgd", 4.0): ("cannot tell by looking", None),
    ("icea", 1.0): ("crosses", False),
    ("icea", 2.0): ("crosses", False),
    ("icea", 4.0): ("crosses", False),
}


def examples() -> list[PrivacyEquation]:
    """The paper's examples with its parameters (the library's defaults)."""
    return [laplace_equation(), sgd_equation(), icea_equation()]


def statements() -> list[dict[str, object]]:
    """One row per (example, μ): the paper's statement and what dpaudit computes."""
    rows: list[dict[str, object]] = []
    for eq in examples():
        ident = identify_equation(eq)
        for mu, cmp in zip(MUS, gdp_comparisons(ident, MUS), strict=True):
            paper_relation, paper_gdp = PAPER[(eq.name, mu)]
            is_gdp = cmp.relation == "below"
            rows.append(
                {
                    "example": eq.name,
                    "mu": mu,
                    "paper": paper_relation,
                    "dpaudit": cmp.relation,
                    "above_at": cmp.above_at,
                    "below_at": cmp.below_at,
                    "paper_gdp": paper_gdp,
                    "gdp": is_gdp,
                    "verdict_agrees": None if paper_gdp is None else paper_gdp == is_gdp,
                }
            )
    return rows


def draw(path: Path = OUT) -> Path:
    """Write the two panels to ``path`` (PNG) and return it."""
    eqs = examples()
    colours = {"laplace": COLOURS["dp"], "sgd": COLOURS["negative"], "icea": COLOURS["positive"]}
    labels = {
        "laplace": "Laplace (θ = Δ/b = 1)",
        "sgd": "SGD (A = 2, B = 1, σ = 2)",
        "icea": "ICEA (m = 20, n = 4)",
    }
    with mpl.rc_context(_RC):
        fig = Figure(figsize=(9.0, 3.6))
        left, right = fig.subplots(1, 2)
        e_left = np.linspace(0.0, LEFT_EPS, 801)
        e_right = np.linspace(0.0, RIGHT_EPS, 1601)
        for mu, grey in zip(MUS, GDP_GREYS, strict=True):
            right.plot(e_right, gdp_delta(e_right, mu), color=grey, lw=0.9, label=f"{mu:g}-GDP")
        for eq in eqs:
            refined, _, _ = refined_equation_profile(eq)
            colour = colours[eq.name]
            if eq.name != "laplace":  # the Laplace profile is exact: naive = refined
                left.plot(e_left, naive_profile(eq, e_left), color=colour, ls="--", lw=1.2)
            left.plot(e_left, refined(e_left), color=colour, lw=1.6, label=labels[eq.name])
            right.plot(e_right, refined(e_right), color=colour, lw=1.6, label=labels[eq.name])
        left.plot([], [], color="#555555", ls="--", lw=1.2, label="naive (dashed)")
        left.set_title("naive and refined (Thm. 2.1) profiles", fontsize=9)
        right.set_title("against 1-, 2-, 4-GDP", fontsize=9)
        for ax, top in ((left, LEFT_EPS), (right, RIGHT_EPS)):
            ax.set_xlim(0.0, top)
            ax.set_ylim(0.0, 1.02)
            ax.set_xlabel("ε")
            ax.set_ylabel("δ(ε)")
            ax.legend(loc="upper right", fontsize=7)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        # no date or software version in the metadata: the same numbers, the same bytes
        fig.savefig(path, format="png", dpi=110, metadata={"Software": None})
    return path


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="the PNG to write")
    args = parser.parse_args()
    print(f"wrote {draw(args.out)}")
    keys = ["example", "mu", "paper", "dpaudit", "above_at", "below_at", "gdp", "verdict_agrees"]
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in statements():
        print("| " + " | ".join(_cell(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
