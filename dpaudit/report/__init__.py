"""The self-contained HTML report of an audit, rendered from its ``results.json`` dict.

The report computes nothing: it lays out what :class:`~dpaudit.results.AuditResult`
already holds (verdict, checks, bounds, metrics, curves, provenance). It is one file that
works offline: inline CSS, inline SVG plots, no script, no font or image from the network,
and not a single ``http://`` or ``https://`` in it. Every user-supplied string is escaped
(Jinja2 autoescaping for HTML; matplotlib escapes SVG text).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from dpaudit.errors import DpauditError
from dpaudit.report import plots
from dpaudit.report.answers import mechanism_answers
from dpaudit.report.local_central_plots import local_central_section
from dpaudit.report.reconstruction_plots import reconstruction_section
from dpaudit.report.sweep_plots import sweep_section
from dpaudit.safe_text import for_html
from dpaudit.schemas import validate_results
from dpaudit.store import atomic_write_text

__all__ = ["render_report", "render_report_file"]

#: Short readings of the validity labels, for the bounds table (the full meaning is in
#: each bound's ``validity_meaning``).
VALIDITY_TITLES = {
    "rigorous-multi-run": "rigorous",
    "rigorous-one-run": "rigorous (one run)",
    "heuristic": "heuristic",
    "assumes-gdp": "assumes GDP",
    "asymptotic-one-run": "asymptotic (one run)",
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


def _folded_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One table row per test, a line per (test, parameter): the rigorous bound, its twins
    folded in.

    A membership attack gives a rigorous one-run bound and a heuristic twin on the same
    test; a white-box canary a rigorous ε and an ε that assumes GDP. The table's row is the
    first rigorous bound of its (test, parameter) (or the first bound when none is
    rigorous); the others become its ``twins``, shown in a column of their own. Two
    rigorous bounds of one (test, parameter) keep a line each. Each returned row is
    ``{"test": label, "subrows": [line, ...]}``.
    """
    folded: list[dict[str, Any]] = []
    primary: dict[tuple[str, str], dict[str, Any]] = {}
    pending: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        key = (str(row.get("test")), str(row.get("parameter")))
        if row["rigorous"] and key not in primary:
            primary[key] = {**row, "twins": pending.pop(key, [])}
            folded.append(primary[key])
        elif not row["rigorous"] and key in primary:
            primary[key]["twins"].append(row)
        elif not row["rigorous"]:
            pending.setdefault(key, []).append(row)
        else:
            folded.append({**row, "twins": []})
    for twins in pending.values():  # no rigorous bound: the first leads its twins
        folded.append({**twins[0], "twins": twins[1:]})
    # In the order of each (test, parameter)'s first bound (a stable sort keeps two
    # rigorous rows of one key in their order), then gathered per test: one table row
    # per test, a line in it per parameter (ε, μ).
    tests: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(folded, key=lambda r: _first(rows, r)):
        tests.setdefault(str(row.get("test")), []).append(row)
    return [{"test": test, "subrows": subrows} for test, subrows in tests.items()]


def _first(rows: list[dict[str, Any]], row: dict[str, Any]) -> int:
    """Position of the first bound of ``row``'s (test, parameter) in ``rows``."""
    key = (row.get("test"), row.get("parameter"))
    return next(i for i, r in enumerate(rows) if (r.get("test"), r.get("parameter")) == key)


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
                    "test": best.get("test"),
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


#: Fewer trials than this in either hypothesis: no curve is drawn, its points are listed.
MIN_CURVE_TRIALS = 20


def _series_name(test: dict[str, Any], attack: str) -> str:
    """An attack's name in a legend: "auto: lira-online" when "auto" chose a variant."""
    options = (test.get("attack") or {}).get("options") or {}
    selected = (options.get("selection") or {}).get("selected")
    return f"{attack}: {selected}" if selected else attack


def _points(test: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The trade-off curve's distinct (FPR, FNR) points, in threshold order."""
    curve = test.get("curve") or {}
    points: list[tuple[Any, Any]] = []
    for fpr, fnr in zip(curve.get("fpr") or [], curve.get("fnr") or [], strict=False):
        if not points or points[-1] != (fpr, fnr):
            points.append((fpr, fnr))
    return points


def _few_trials(test: dict[str, Any]) -> bool:
    trials = [test.get("negatives"), test.get("positives")]
    return any(isinstance(n, int) and n < MIN_CURVE_TRIALS for n in trials)


def _test_groups(tests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tests in sections: the attacks on one target together, one plot of each kind.

    Tests named "<attack> on <target>" share a section per target, and the gradient
    inversion tests of a reconstruction audit one section; any other test has its own.
    A test with fewer than :data:`MIN_CURVE_TRIALS` trials in a hypothesis is drawn in no
    curve (a curve through a handful of points suggests a precision it does not have):
    its points are listed instead.
    """
    groups: dict[str, dict[str, Any]] = {}
    for i, test in enumerate(tests):
        label = str(test.get("label", ""))
        match = _ON_TARGET.match(label)
        rec = test.get("reconstruction")
        if match:
            key, title, name = match["subject"], f"Tests on {match['subject']}", match["attack"]
            name = _series_name(test, name)
        elif isinstance(rec, dict) and "metrics" in rec:
            key, title, name = "reconstruction", "Gradient inversion as a test", label
        else:
            key, title, name = f"test {i}", label, label
        group = groups.setdefault(
            key, {"title": title, "tests": [], "names": [], "index": len(groups) + 1}
        )
        group["tests"].append({"data": test, "name": name, "index": i, "few": _few_trials(test)})
        group["names"].append(name)
    out = []
    for group in groups.values():
        entries = group["tests"]
        drawn = [e for e in entries if not e["few"]]
        title = f"Test: {entries[0]['data'].get('label')}" if len(entries) == 1 else group["title"]
        prefix = f"g{group['index']}-"
        data, names = [e["data"] for e in drawn], [e["name"] for e in drawn]
        out.append(
            {
                "title": title,
                "index": group["index"],
                "tests": entries,
                "single": len(entries) == 1,
                "tradeoff_svg": _safe(
                    plots.tradeoff_plot(data, names=names, id_prefix=prefix + "t-")
                )
                if data
                else None,
                "roc_svg": _safe(plots.roc_plot(data, names=names, id_prefix=prefix + "r-"))
                if data
                else None,
                "histogram_svg": _safe(
                    plots.histograms_plot(data, names=names, id_prefix=prefix + "h-")
                )
                if data
                else None,
                "few": [dict(e, points=_points(e["data"])) for e in entries if e["few"]],
            }
        )
    return out


def _subject_of(label: str) -> str | None:
    match = _ON_TARGET.match(label)
    return match["subject"] if match else None


def _utility(
    tests: list[dict[str, Any]],
    attribute: list[dict[str, Any]],
    headline: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Per target, its accuracy beside what the audit found: the report's first table.

    Accuracy (members, non-members, held-out rows, always guessing the most common label)
    comes from the target's tests; the privacy side is the headline's statement of that
    target and the attribute-inference advantage on it, when the audit measured one.
    """
    rows: dict[str, dict[str, Any]] = {}
    for test in tests:
        target = test.get("target") or {}
        accuracy = target.get("accuracy")
        if not isinstance(accuracy, dict):
            continue
        label = str(test.get("label", ""))
        subject = _subject_of(label) or str(target.get("variant") or label)
        rows.setdefault(subject, {"subject": subject, "accuracy": accuracy, "attribute": None})
    for h in headline:
        if h["subject"] in rows:
            rows[h["subject"]]["statements"] = h["statements"]
    for a in attribute:
        for subject, row in rows.items():
            if f" on {subject}" in str(a.get("label", "")) and row["attribute"] is None:
                row["attribute"] = a
    return list(rows.values())


def _riskiest(tests: list[dict[str, Any]], headline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target, the riskiest records of the attack that leads its headline (or the
    first attack that listed any)."""
    leads = {h["subject"]: h["statements"][0].get("test") for h in headline if h.get("statements")}
    chosen: dict[str, dict[str, Any]] = {}
    for test in tests:
        records = test.get("riskiest_records")
        if not isinstance(records, dict) or not records.get("top"):
            continue
        label = str(test.get("label", ""))
        subject = _subject_of(label) or label
        match = _ON_TARGET.match(label)
        entry = {
            "subject": subject,
            "test": label,
            "attack": _series_name(test, match["attack"]) if match else label,
            "records": records,
            "last": records["top"][-1],
        }
        if subject not in chosen or leads.get(subject) == label:
            chosen[subject] = entry
    return list(chosen.values())


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
    raw_tests = results.get("tests") or []
    checks = results.get("checks") or []
    bounds = _bound_rows(results.get("bounds") or [])
    headline = _headline(bounds, raw_tests, _verdict_level(results))
    level = _verdict_level(results)
    answers = mechanism_answers(
        bounds,
        raw_tests,
        best_of_level=lambda found: _best_of_level(found, level),
        number=fmt_number,
        percent=fmt_percent,
    )
    attribute = _attribute_rows(results.get("attribute") or [])
    html = (
        _environment()
        .get_template("report.html.j2")
        .render(
            r=results,
            failed=[c for c in checks if not c.get("passed")],
            checks=checks,
            bounds=bounds,
            rows=_folded_rows(bounds),
            headline=headline,
            answers=answers,
            validities=_validity_legend(bounds),
            groups=_test_groups(raw_tests),
            utility=_utility(raw_tests, attribute, headline),
            riskiest=_riskiest(raw_tests, headline),
            min_curve_trials=MIN_CURVE_TRIALS,
            attribute=attribute,
            provenance=results.get("provenance") or {},
            # A kind's own section: present only when its tests carry its details.
            rec=reconstruction_section(results),
            lc=local_central_section(results),
            sweep=sweep_section(results),
            exposure=[
                row for t in raw_tests for row in ((t.get("run") or {}).get("exposure") or [])
            ],
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


def render_report_file(run_dir: str | Path) -> Path:
    """Render ``RUN_DIR/report.html`` again from ``RUN_DIR/results.json`` (``dpaudit
    report RUN_DIR``): the file is read, checked against its schema and rendered.

    Returns:
        The report written.

    Raises:
        DpauditError: no results.json there, or one that is not readable JSON, not an
            object, or does not fit its schema.
    """
    run = Path(run_dir)
    path = run / "results.json"
    if not path.is_file():
        raise DpauditError(
            f"no results.json in {str(run_dir)!r}; run `dpaudit run FILE -o DIR` first"
        )
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DpauditError(f"{path}: not readable JSON: {exc}") from None
    if not isinstance(results, dict):
        raise DpauditError(f"{path}: not a results object (a JSON object is expected)")
    try:
        validate_results(results)
    except DpauditError as exc:
        raise DpauditError(f"{path}: {exc}") from None
    written = run / "report.html"
    atomic_write_text(written, render_report(results))
    return written
