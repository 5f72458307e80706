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
from dpaudit.report.local_central_plots import local_central_section
from dpaudit.report.reconstruction_plots import reconstruction_section
from dpaudit.safe_text import for_html

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
        # control characters in user strings shown as escapes; markup made here is kept
        finalize=lambda v: v if isinstance(v, Markup) else for_html(v),
    )
    env.filters["num"] = fmt_number
    env.filters["interval"] = fmt_interval
    env.filters["pct"] = fmt_percent
    env.filters["seconds"] = fmt_seconds
    env.filters["count"] = fmt_count
    env.filters["sentence"] = sentence_case
    return env


def fmt_number(x: Any, digits: int = 4) -> str:
    """A number with ``digits`` significant digits; ``None``/NaN as an em dash.

    Compact, so that table cells stay narrow: ``1e-5`` (not ``1e-05``), ``12,346`` (not
    ``1.235e+04``), and a true minus sign in front of negative numbers.
    """
    if x is None or isinstance(x, bool) or not isinstance(x, int | float):
        return "—" if x is None else str(x)
    if isinstance(x, int):
        text = f"{abs(x):,}"
    elif math.isnan(x):
        return "—"
    elif math.isinf(x):
        return "∞" if x > 0 else "−∞"
    elif 10**digits <= abs(x) < 1e15:
        text = f"{round(abs(x)):,}"
    else:
        text = _EXPONENT.sub(lambda m: "e" + m[1].replace("+", "") + m[2], f"{abs(x):.{digits}g}")
    return "−" + text if x < 0 else text


_EXPONENT = re.compile(r"e([+-])0*(\d)")


def fmt_interval(pair: Any, digits: int = 3) -> str:
    """``[low, high]`` of a two-element interval (or an em dash)."""
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return "—"
    return f"[{fmt_number(pair[0], digits)}, {fmt_number(pair[1], digits)}]"


def fmt_count(n: Any, singular: str, plural: str | None = None) -> str:
    """``n`` and a noun that agrees with it: "1 gate check", "3 gate checks", "0 bounds"."""
    word = singular if n == 1 else (plural or singular + "s")
    return f"{fmt_number(n)} {word}"


def sentence_case(text: Any) -> str:
    """The text with its first letter capitalised (the rest as written)."""
    text = str(text)
    return text[:1].upper() + text[1:]


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


def _validity_legend(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each validity label of the bounds table once, with its meaning, in table order."""
    legend: dict[tuple[str, str], None] = {}
    for row in rows:
        legend.setdefault((row["validity_title"], str(row.get("validity_meaning") or "")), None)
    return list(legend)


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
                "rigorous": validity.startswith("rigorous"),
                "validity_title": VALIDITY_TITLES.get(validity, validity),
            }
        )
    return rows


#: How the headline names a bound's validity ("… (rigorous one-run bound, …)").
HEADLINE_VALIDITY = {
    "rigorous-multi-run": "rigorous multi-run",
    "rigorous-one-run": "rigorous one-run",
}

#: Labels of tests on a trained target, as the membership kinds write them: "lira on the
#: plain target", "loss attack on your target (model.skops)". Their bounds are grouped per
#: target in the headline, and the attack is named as the source of the bound.
_ON_TARGET = re.compile(r"^(?P<attack>.+?) on (?P<subject>(?:the .+ target|your target\b.*))$")


def _subject(label: str, test: dict[str, Any] | None) -> tuple[str, str | None, bool]:
    """Who a bound is about: (subject, source, whether the subject is a noun phrase)."""
    match = _ON_TARGET.match(label)
    if match:
        attack = match["attack"]
        return (
            match["subject"],
            f"the {attack}" + ("" if attack.endswith("attack") else " attack"),
            True,
        )
    if label.endswith(" mechanism") or (test is not None and test.get("mechanism")):
        return ("" if label.lower().startswith("the ") else "the ") + label, None, True
    return label, None, False


def _against(row: dict[str, Any]) -> dict[str, Any]:
    """What the bound is held against, for the headline (the template words it)."""
    upper = row.get("upper")
    source = str(row.get("upper_source") or "")
    if upper is None:
        return {"upper": None}
    if source.startswith("accountant "):
        # "accountant ε (PLD)" reads "the accountant's ε = 1 (PLD)".
        head, _, rest = source.removeprefix("accountant ").partition(" ")
        return {"upper": upper, "who": "the accountant's", "what": head, "rest": rest}
    if row["symbol"] in source:
        head, _, rest = source.partition(row["symbol"])
        return {
            "upper": upper,
            "who": "the " + head.strip(),
            "what": row["symbol"],
            "rest": rest.strip(),
        }
    return {"upper": upper, "who": "the " + source, "what": row["symbol"], "rest": ""}


def _best_of_level(found: list[dict[str, Any]], verdict_level: float | None) -> float | None:
    """The confidence of "the largest of these bounds" (a best-of is a multiple comparison).

    The largest of m bounds is valid only when every one of them is (the largest could be
    any), so by the union bound (Bonferroni) it holds at 1 − Σᵢ (1 − cᵢ) when bound i
    holds at cᵢ. Bounds inside the verdict were computed at 1 − (1 − c)/k each, so their
    largest holds at the verdict's c at least; bounds outside it (a brought target, no
    upper bound) were each computed at c, and the largest of m of them holds at
    1 − m(1 − c), which the headline states instead of c.
    """
    levels = [r["lower"].get("confidence_level") for r in found]
    if not all(isinstance(x, int | float) for x in levels):
        return None
    joint = max(0.0, 1.0 - sum(1.0 - float(x) for x in levels))
    if verdict_level is not None and all(r.get("in_verdict") for r in found):
        return max(joint, verdict_level)
    return joint


def _headline(
    rows: list[dict[str, Any]], tests: list[dict[str, Any]], verdict_level: float | None = None
) -> list[dict[str, Any]]:
    """Per target (or per test), the largest rigorous lower bound, ready to put in words.

    Only rigorous bounds (validity "rigorous-…") lead the report: a heuristic number
    describes an attack and says nothing about the DP guarantee. Within a subject, one
    statement per parameter (ε first, then μ), each with the largest bound; a violation
    beats a larger bound that is not one. Picking the largest of several bounds is a
    multiple comparison: the statement's confidence is that of the best-of
    (:func:`_best_of_level`), not of the single bound picked. Each statement carries the
    design's limit of detection (the most a perfect attack could have certified). When no
    rigorous bound of a subject exceeds 0 the statement says so (which is not evidence of
    privacy: a stronger attack or more trials might find leakage).
    """
    by_label = {str(t.get("label")): t for t in tests}
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        label = str(row.get("test", ""))
        subject, source, named = _subject(label, by_label.get(label))
        group = groups.setdefault(
            subject, {"subject": subject, "named": named, "rows": [], "heuristic": 0}
        )
        if row["rigorous"]:
            group["rows"].append({**row, "source": source})
        else:
            group["heuristic"] += 1
    headline = []
    for group in groups.values():
        statements = []
        for parameter in ("epsilon", "mu"):
            found = [r for r in group["rows"] if r.get("parameter") == parameter]
            if not found:
                continue
            best = max(
                found, key=lambda r: (bool(r.get("violation")), r["lower"].get("value") or 0.0)
            )
            validities = {r["validity"] for r in found}
            levels = [r["lower"].get("confidence_level") for r in found]
            statements.append(
                {
                    "symbol": best["symbol"],
                    "value": best["lower"].get("value") or 0.0,
                    "leaks": (best["lower"].get("value") or 0.0) > 0,
                    "validity": HEADLINE_VALIDITY.get(best["validity"], best["validity"]),
                    "confidence_level": best["lower"].get("confidence_level"),
                    # The largest of several bounds: the confidence of the best-of.
                    "best_of": len(found),
                    "best_of_level": _best_of_level(found, verdict_level),
                    "in_verdict": all(r.get("in_verdict") for r in found),
                    "source": best["source"],
                    "violation": bool(best.get("violation")),
                    "tightness": best.get("tightness"),
                    "against": _against(best),
                    # For "no evidence of leakage": how many bounds were looked at, and
                    # the most any of their designs could have certified.
                    "count": len(found),
                    "limit": max(
                        (
                            r.get("limit_of_detection")
                            for r in found
                            if isinstance(r.get("limit_of_detection"), int | float)
                        ),
                        default=None,
                    ),
                    "sources": len({r["source"] for r in found if r["source"]}),
                    "all_validity": (
                        HEADLINE_VALIDITY.get(found[0]["validity"], found[0]["validity"])
                        if len(validities) == 1
                        else "rigorous"
                    ),
                    "min_confidence_level": min(
                        (x for x in levels if isinstance(x, int | float)), default=None
                    ),
                }
            )
        leaking = [st for st in statements if st["leaks"]]
        headline.append(
            {
                "subject": group["subject"],
                "named": group["named"],
                # Zero statements are dropped when another parameter shows leakage; when
                # none does, the first (ε if any) says there is no evidence of leakage.
                "statements": leaking or statements[:1],
                "leaks": bool(leaking),
                "heuristic_only": not statements and group["heuristic"] > 0,
            }
        )
    return headline


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
    bounds = _bound_rows(results.get("bounds") or [])
    html = (
        _environment()
        .get_template("report.html.j2")
        .render(
            r=results,
            failed=[c for c in checks if not c.get("passed")],
            checks=checks,
            bounds=bounds,
            headline=_headline(bounds, results.get("tests") or [], _verdict_level(results)),
            validities=_validity_legend(bounds),
            tests=tests,
            attribute=_attribute_rows(results.get("attribute") or []),
            provenance=results.get("provenance") or {},
            # A kind's own section: present only when its tests carry its details.
            rec=reconstruction_section(results),
            lc=local_central_section(results),
        )
    )
    # No URL at all in the file, even from user text (a comment in the audit file, a
    # label): "http:" becomes "http&#58;", which displays the same and links nowhere.
    return _URL_SCHEME.sub(r"\1&#58;", html)


def _verdict_level(results: dict[str, Any]) -> float | None:
    budget = (results.get("provenance") or {}).get("verdict_budget") or {}
    audit = ((results.get("config") or {}).get("audit")) or {}
    level = budget.get("confidence_level", audit.get("confidence_level"))
    return float(level) if isinstance(level, int | float) else None


def _safe(svg: str | None) -> Markup | None:
    # The SVG comes from matplotlib, which escapes every text it writes.
    return None if svg is None else Markup(svg)
