"""The self-contained HTML report of an audit, rendered from its ``results.json`` dict.

The report computes nothing: it lays out what :class:`~dpaudit.results.AuditResult`
already holds (verdict, checks, bounds, metrics, curves, provenance). It is one file that
works offline: inline CSS, inline SVG plots, no script, no font or image from the network,
and not a single ``http://`` or ``https://`` in it. Every user-supplied string is escaped
(Jinja2 autoescaping for HTML; matplotlib escapes SVG text).
"""

from __future__ import annotations

import math
import re
from typing import Any

import jinja2
from markupsafe import Markup

from dpaudit.report import plots

__all__ = ["render_report"]

#: Short readings of the validity labels, for the bounds table (the full meaning is in
#: each bound's ``validity_meaning``).
VALIDITY_TITLES = {
    "rigorous-multi-run": "rigorous",
    "rigorous-one-run": "rigorous (one run)",
    "heuristic": "heuristic",
    "assumes-gdp": "assumes GDP",
}

_URL_SCHEME = re.compile(r"(https?):(?=//)", re.IGNORECASE)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dpaudit.report", "templates"),
        autoescape=True,  # every {{ }} is HTML-escaped unless explicitly marked safe
        undefined=jinja2.ChainableUndefined,  # missing optional keys render as nothing
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["num"] = fmt_number
    env.filters["interval"] = fmt_interval
    env.filters["pct"] = fmt_percent
    env.filters["seconds"] = fmt_seconds
    return env


def fmt_number(x: Any, digits: int = 4) -> str:
    """A number with ``digits`` significant digits; ``None``/NaN as an em dash."""
    if x is None or isinstance(x, bool) or not isinstance(x, int | float):
        return "—" if x is None else str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    text = f"{x:.{digits}g}"
    return text.replace("-", "−") if text.startswith("-") else text


def fmt_interval(pair: Any, digits: int = 3) -> str:
    """``[low, high]`` of a two-element interval (or an em dash)."""
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return "—"
    return f"[{fmt_number(pair[0], digits)}, {fmt_number(pair[1], digits)}]"


def fmt_percent(x: Any) -> str:
    if not isinstance(x, int | float) or isinstance(x, bool) or not math.isfinite(x):
        return "—"
    return f"{100 * x:.3g} %"


def fmt_seconds(x: Any) -> str:
    if not isinstance(x, int | float) or isinstance(x, bool) or not math.isfinite(x):
        return "—"
    return f"{x:.3g} s" if x < 100 else f"{x / 60:.3g} min"


def _attribute_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Attribute-inference rows, accepting both spellings the attacks have used."""
    rows = []
    for a in entries:
        non = "accuracy_nonmembers" if "accuracy_nonmembers" in a else "accuracy_non_members"
        prior = "accuracy_prior" if "accuracy_prior" in a else "accuracy_baseline"
        dp = a.get("dp_bound")
        if isinstance(dp, dict):
            # The (ε, δ) region value is the tight one; Yeom et al.'s e^ε − 1 is shown too.
            dp_value, dp_note = dp.get("region"), dp.get("yeom")
        else:
            dp_value, dp_note = dp, None
        rows.append(
            {
                "label": a.get("label") or a.get("dataset") or "",
                "sensitive": a.get("sensitive", ""),
                "members": a.get("accuracy_members"),
                "members_interval": a.get("accuracy_members_interval"),
                "nonmembers": a.get(non),
                "nonmembers_interval": a.get(f"{non}_interval"),
                "prior": a.get(prior),
                "prior_interval": a.get(f"{prior}_interval"),
                "advantage": a.get("advantage"),
                "advantage_interval": a.get("advantage_interval"),
                "dp_bound": dp_value,
                "dp_bound_yeom": dp_note,
            }
        )
    return rows


def _bound_rows(bounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for b in bounds:
        lower = b.get("lower") or {}
        validity = str(lower.get("validity", ""))
        rows.append(
            {
                **b,
                "lower": lower,
                "symbol": "ε" if b.get("parameter") == "epsilon" else "μ",
                "validity": validity,
                "validity_title": VALIDITY_TITLES.get(validity, validity),
            }
        )
    return rows


def render_report(results: dict[str, Any]) -> str:
    """Render the HTML report of one audit.

    Args:
        results: The ``results.json`` dict (``AuditResult.to_dict()``); an object with a
            ``to_dict`` method is accepted too.

    Returns:
        One self-contained HTML document (UTF-8 text).
    """
    if hasattr(results, "to_dict"):
        results = results.to_dict()
    tests = []
    for i, test in enumerate(results.get("tests") or []):
        tests.append(
            {
                "data": test,
                "tradeoff_svg": _safe(plots.tradeoff_plot(test, id_prefix=f"t{i}-tradeoff-")),
                "roc_svg": _safe(plots.roc_plot(test, id_prefix=f"t{i}-roc-")),
                "histogram_svg": _safe(plots.histogram_plot(test, id_prefix=f"t{i}-hist-")),
            }
        )
    checks = results.get("checks") or []
    html = (
        _environment()
        .get_template("report.html.j2")
        .render(
            r=results,
            failed=[c for c in checks if not c.get("passed")],
            checks=checks,
            bounds=_bound_rows(results.get("bounds") or []),
            tests=tests,
            attribute=_attribute_rows(results.get("attribute") or []),
            provenance=results.get("provenance") or {},
        )
    )
    # No URL at all in the file, even from user text (a comment in the audit file, a
    # label): "http:" becomes "http&#58;", which displays the same and links nowhere.
    return _URL_SCHEME.sub(r"\1&#58;", html)


def _safe(svg: str | None) -> Markup | None:
    # The SVG comes from matplotlib, which escapes every text it writes.
    return None if svg is None else Markup(svg)
