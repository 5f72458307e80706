"""The audit as a release artefact: a model-card section and a registry-shaped privacy record.

``dpaudit card RUN_DIR`` turns a finished, verified run into two files:

- ``privacy-registry.json``: the privacy claim the run was held against, in the shape of an
  entry of the OpenDP Deployments Registry (the privacy unit, the flavour of DP, the
  privacy parameters ε, δ, μ, ρ, the accounting), plus an ``audit`` block: what dpaudit
  measured (every ε and μ lower bound with its confidence level, validity and limit of
  detection), under which threat model, what ran, the versions and hashes that identify
  the run, and the verdict. Its JSON Schema (draft 2020-12) is
  ``dpaudit/schemas/card.schema.json``; every field is described in
  ``docs/integrations.md``.
- ``model-card.md``: a Markdown section for a model card, headed by a YAML metadata block
  in the Hugging Face model-card style (``tags`` and a ``dpaudit`` mapping that repeats
  the record's key figures).

Nothing is computed here: every number is copied from ``results.json``, after
:func:`card_for_run` has recomputed that file from the run's stored units
(:func:`dpaudit.audit.verify_run`), so a card is never made from a tampered result.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple

import jsonschema

from dpaudit._version import __version__
from dpaudit.errors import DataError, DpauditError
from dpaudit.safe_text import one_line
from dpaudit.store import atomic_write_text

__all__ = [
    "CARD_SCHEMA_VERSION",
    "MODEL_CARD_NAME",
    "REGISTRY_NAME",
    "CardFiles",
    "build_card",
    "card_for_run",
    "card_metadata",
    "card_schema",
    "render_model_card",
    "to_yaml",
    "validate_card",
    "write_card",
]

#: The version of the card's keys (``privacy-registry.json``'s ``schema_version``).
CARD_SCHEMA_VERSION = "1.0"
#: File names written into the output folder.
MODEL_CARD_NAME = "model-card.md"
REGISTRY_NAME = "privacy-registry.json"

#: The flavours of DP a claim can state, in the registry's words.
FLAVORS = ("Pure DP", "Approximate DP", "zCDP", "Gaussian DP")

#: The threat model of each kind of test (the test's extra key names the kind).
_THREAT_MODELS = {
    "mechanism": "output: the adversary sees each release of the mechanism",
    "local_central": "output: the adversary sees each release of the randomiser",
    "reconstruction": "gradient: the server sees one (defended) batch gradient",
    "attack": "black-box: the adversary queries the model's outputs on the audited records",
}


# ------------------------------------------------------------------------------ claim


def _finite(x: Any) -> float | None:
    """A number as a finite float, or None (JSON has no infinity: unbounded is null)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def _flavor(epsilon: Any, delta: Any, mu: Any, rho: Any) -> str | None:
    """The flavour of DP a stated claim is: ρ → zCDP; ε with δ = 0 → pure; ε with δ > 0 →
    approximate; μ alone → Gaussian DP (Dong, Roth, Su 2019); nothing stated → None."""
    if _finite(rho) is not None:
        return "zCDP"
    if _finite(epsilon) is not None:
        return "Pure DP" if not delta else "Approximate DP"
    if _finite(mu) is not None:
        return "Gaussian DP"
    return None


def _source_kind(source: str) -> str:
    """ "accountant", "claim", "theoretical" or "none" from a bound's ``upper_source``."""
    text = source.lower()
    if text.startswith("accountant"):
        return "accountant"
    if text.startswith("theoretical"):
        return "theoretical"
    if "claim" in text:
        return "claim"
    return "none"


def _test_claim(test: Mapping[str, Any], bounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The privacy claim one test was held against, from the test and its in-verdict bounds.

    The stated claim is the one the mechanism or trainer made (a mechanism's ``claim`` and
    ``claim_rho``, a trainer's ``upper_bound.claim``); without one (an accountant, a
    membership or reconstruction test) it is the upper bounds the verdict compared. The
    numbers ``epsilon`` (at ``delta``) and ``mu`` are the upper bounds the lower bounds met.
    """
    held = [b for b in bounds if b.get("in_verdict") and _finite(b.get("upper")) is not None]
    eps_rows = [b for b in held if b["parameter"] == "epsilon"]
    mu_rows = [b for b in held if b["parameter"] == "mu"]
    epsilon = max((b["upper"] for b in eps_rows), default=None)
    delta = max((b["lower"].get("delta") or 0.0 for b in eps_rows), default=None)
    mu = max((b["upper"] for b in mu_rows), default=None)
    sources = sorted({str(b["upper_source"]) for b in held})
    stated: dict[str, Any] = {"epsilon": epsilon, "delta": delta, "mu": mu, "rho": None}
    records: list[dict[str, Any]] = []
    if isinstance(test.get("mechanism"), Mapping):
        claim = test["mechanism"].get("claim") or {}
        stated = {
            "epsilon": _finite(claim.get("epsilon")),
            "delta": _finite(claim.get("delta")),
            "mu": _finite(claim.get("mu")),
            "rho": _finite(test["mechanism"].get("claim_rho")),
        }
    elif isinstance(test.get("dpsgd"), Mapping):
        upper = test["dpsgd"].get("upper_bound") or {}
        claim = upper.get("claim")
        if isinstance(claim, Mapping):
            stated = {
                "epsilon": _finite(claim.get("epsilon")),
                "delta": _finite(claim.get("delta")),
                "mu": _finite(claim.get("mu")),
                "rho": _finite(claim.get("rho")),
            }
        records = [dict(r) for r in upper.get("records") or []]
    if isinstance(test.get("record"), Mapping):
        records.append(dict(test["record"]))
    rho = stated.get("rho")
    flavor = _flavor(stated["epsilon"], stated["delta"], stated["mu"], rho)
    if epsilon is None and mu is None and rho is None:
        flavor = None  # nothing was held against a DP guarantee: no claim to state
    return {
        "test": str(test.get("label", "")),
        "flavor": flavor,
        "stated": stated,
        "epsilon": _finite(epsilon),
        "delta": _finite(delta),
        "mu": _finite(mu),
        "rho": _finite(rho),
        "accounting": {
            "kind": _source_kind(sources[0]) if sources else "none",
            "sources": sources,
            "records": records,
        },
    }


def _deployment_claim(claims: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The one claim the registry entry states: the weakest (largest ε, then μ, then ρ)
    of the tests' claims, so that it covers every test the verdict held."""
    stated = [c for c in claims if c["flavor"] is not None]
    if not stated:
        return None

    def weakness(c: dict[str, Any]) -> tuple[float, float, float]:
        def big(x: Any) -> float:
            return -math.inf if x is None else float(x)

        return (big(c["epsilon"]), big(c["mu"]), big(c["rho"]))

    return max(stated, key=weakness)


# ------------------------------------------------------------------------------ audit


def _threat_model(test: Mapping[str, Any]) -> str:
    dpsgd = test.get("dpsgd")
    if isinstance(dpsgd, Mapping):
        model = str(dpsgd.get("threat_model", "black-box"))
        what = (
            "the adversary sees every update of the training run"
            if model == "white-box"
            else "the adversary sees the final model only"
        )
        return f"{model}: {what} (canary: {dpsgd.get('canary', 'unknown')})"
    for key, words in _THREAT_MODELS.items():
        if key in test:
            return words
    # A test without its kind's extra key (a mechanism found by a search, say) is named
    # by its id: "mechanism", "local-central-…", "reconstruction-…".
    test_id = str(test.get("id", "")).replace("-", "_")
    for key, words in _THREAT_MODELS.items():
        if test_id.startswith(key):
            return words
    return "unspecified"


def _lower_bound_row(b: Mapping[str, Any]) -> dict[str, Any]:
    lower = b["lower"]
    return {
        "test": str(b["test"]),
        "parameter": str(b["parameter"]),
        "value": float(lower["value"]),
        "confidence_level": float(lower["confidence_level"]),
        "delta": _finite(lower.get("delta")),
        "validity": str(lower["validity"]),
        "validity_meaning": str(b.get("validity_meaning", "")),
        "method": str(lower.get("method", "")),
        "threshold": str(lower.get("threshold", "")),
        "upper": _finite(b.get("upper")),
        "upper_source": str(b.get("upper_source", "")),
        "tightness": _finite(b.get("tightness")),
        "limit_of_detection": _finite(b.get("limit_of_detection")),
        "violation": bool(b.get("violation", False)),
        "in_verdict": bool(b.get("in_verdict", False)),
    }


def _strongest(rows: list[dict[str, Any]], parameter: str) -> dict[str, Any] | None:
    """The largest rigorous lower bound on ``parameter`` (heuristic and GDP-assuming bounds
    prove nothing about the guarantee, so they never headline)."""
    rigorous = [
        r for r in rows if r["parameter"] == parameter and r["validity"].startswith("rigorous")
    ]
    if not rigorous:
        return None
    best = max(rigorous, key=lambda r: r["value"])
    keys = (
        "test", "value", "confidence_level", "delta", "validity", "upper", "limit_of_detection",
    )  # fmt: skip
    return {k: best[k] for k in keys if parameter == "epsilon" or k != "delta"}


def _ran(results: Mapping[str, Any], claims: list[dict[str, Any]]) -> dict[str, Any]:
    """What ran: each test's trials, the records of the training runs, the work units."""
    tests = []
    for t in results.get("tests", []):
        row: dict[str, Any] = {
            "test": str(t.get("label", "")),
            "id": str(t.get("id", "")),
            "threat_model": _threat_model(t),
            "hypotheses": [str(h) for h in t.get("hypotheses", [])],
            "negatives": int(t.get("negatives", 0)),
            "positives": int(t.get("positives", 0)),
        }
        mechanism = t.get("mechanism")
        if isinstance(mechanism, Mapping):
            row["mechanism"] = {
                "name": str(mechanism.get("name", "")),
                "parameters": dict(mechanism.get("parameters") or {}),
            }
        tests.append(row)
    seen: list[dict[str, Any]] = []
    for c in claims:
        for r in c["accounting"]["records"]:
            if r not in seen:
                seen.append(r)
    units = (results.get("provenance") or {}).get("units") or {}
    return {
        "tests": tests,
        "records": seen,
        "units": {k: int(v.get("total", 0)) for k, v in units.items() if isinstance(v, Mapping)},
    }


def _privacy_unit(tests: list[dict[str, Any]]) -> str:
    pairs = sorted({" vs ".join(f"'{h}'" for h in t["hypotheses"]) for t in tests})
    return (
        "One record: each test compares two neighbouring inputs that differ in one record "
        f"({'; '.join(pairs) or 'no test ran'}), as dpaudit's hypotheses H0 vs H1."
    )


# ------------------------------------------------------------------------------- card


def build_card(results: Mapping[str, Any]) -> dict[str, Any]:
    """The registry-shaped privacy record of a finished run (``privacy-registry.json``).

    Args:
        results: A ``results.json`` dict (:meth:`dpaudit.results.AuditResult.to_dict`).

    Returns:
        A dict that fits ``dpaudit/schemas/card.schema.json``: ``deployment`` (the claim,
        in the OpenDP Deployments Registry's terms) and ``audit`` (what dpaudit measured).

    Raises:
        DataError: ``results`` lacks a key the card needs.
    """
    try:
        return _build(results)
    except (KeyError, TypeError, AttributeError) as exc:
        raise DataError(
            f"results.json cannot be made into a card: missing or malformed {exc}; check it "
            "with dpaudit.schemas.validate_results"
        ) from None


def _build(results: Mapping[str, Any]) -> dict[str, Any]:
    provenance = results.get("provenance") or {}
    config = results.get("config") or {}
    audit_section = config.get("audit") or {}
    bounds = list(results["bounds"])
    claims = []
    for t in results["tests"]:
        own = [b for b in bounds if b["test"] == t.get("label")]
        if own:
            claims.append(_test_claim(t, own))
    claim = _deployment_claim(claims)
    rows = [_lower_bound_row(b) for b in bounds]
    ran = _ran(results, claims)
    budget = provenance.get("verdict_budget") or {}
    confidence = _finite(budget.get("confidence_level", audit_section.get("confidence_level")))
    kinds = [str(k) for k in audit_section.get("kinds", [])]
    models = {"dpsgd", "membership", "attribute", "reconstruction"}
    parameters = {k: None if claim is None else claim[k] for k in ("epsilon", "delta", "mu", "rho")}
    local = "local-central" in kinds or any(
        "input_perturbation" in t for t in results.get("tests", [])
    )
    return {
        "schema_version": CARD_SCHEMA_VERSION,
        "generator": {"name": "dpaudit", "version": str(__version__)},
        "deployment": {
            "name": str(results["name"]),
            "description": str(audit_section.get("description", "")),
            "data_product_type": (
                "Machine learning model" if models & set(kinds) else "Statistical release"
            ),
            "dp_flavor": {
                "name": None if claim is None else claim["flavor"],
                "description": (
                    "no differential-privacy claim was held against this audit"
                    if claim is None
                    else f"the claim held against {claim['test']!r}"
                ),
            },
            "privacy_loss": {
                "privacy_unit": "record-level",
                "privacy_unit_description": _privacy_unit(ran["tests"]),
                "privacy_parameters": parameters,
                "privacy_parameters_description": (
                    "none stated"
                    if claim is None
                    else "the weakest claim held against any test (largest ε, then μ, then ρ); "
                    "ε holds at δ, μ is the μ-GDP bound of the same claim"
                ),
                "per_test": claims,
            },
            "model": {
                "model_name": "Local" if local else "Central",
                "release_type": "One release",
            },
            "accounting": None if claim is None else claim["accounting"],
        },
        "audit": {
            "name": str(results["name"]),
            "kinds": kinds,
            "verdict": str(results["verdict"]),
            "privacy_verdict": str(results["privacy_verdict"]),
            "headline": str(results.get("headline", "")),
            "confidence_level": confidence,
            "epsilon_lower_bound": _strongest(rows, "epsilon"),
            "mu_lower_bound": _strongest(rows, "mu"),
            "lower_bounds": rows,
            "checks": [
                {
                    "name": str(c["name"]),
                    "status": str(c.get("status") or ("passed" if c["passed"] else "failed")),
                    "passed": bool(c["passed"]),
                    "value": _finite(c.get("value")),
                    "limit": _finite(c.get("limit")),
                    "message": str(c.get("message", "")),
                }
                for c in results.get("checks", [])
            ],
            "threat_models": sorted({t["threat_model"] for t in ran["tests"]}),
            "ran": ran,
            "provenance": {
                "dpaudit_version": str(provenance.get("dpaudit_version", "")),
                "config_hash": provenance.get("config_hash"),
                "data_hash": provenance.get("data_hash"),
                "seed": provenance.get("seed"),
                "started": provenance.get("started"),
                "finished": provenance.get("finished"),
                "libraries": dict(provenance.get("libraries") or {}),
            },
            "warnings": [str(w) for w in results.get("warnings", [])],
        },
    }


@cache
def _schema_text() -> str:
    return resources.files("dpaudit.schemas").joinpath("card.schema.json").read_text("utf-8")


def card_schema() -> dict[str, Any]:
    """The JSON Schema of ``privacy-registry.json`` (a fresh copy each call)."""
    return dict(json.loads(_schema_text()))


@cache
def _validator(definition: str | None) -> jsonschema.Draft202012Validator:
    """A validator of the whole card, or of one of its ``$defs`` (built once each)."""
    schema = card_schema()
    if definition is not None:
        schema = {**schema, "$ref": f"#/$defs/{definition}"}
        for key in ("properties", "required", "additionalProperties", "type"):
            schema.pop(key, None)
    return jsonschema.Draft202012Validator(schema)


def validate_card(card: Mapping[str, Any], *, definition: str | None = None) -> None:
    """Check a card (or, with ``definition="metadata"``, its YAML ``dpaudit`` mapping)
    against ``card.schema.json``.

    Raises:
        DataError: The first problem found, naming where, e.g. "the card does not fit its
            schema at 'audit/verdict': 'maybe' is not one of ['pass', 'fail']".
    """
    error = jsonschema.exceptions.best_match(_validator(definition).iter_errors(card))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise DataError(f"the card does not fit its schema at {where!r}: {error.message}")


def card_metadata(card: Mapping[str, Any]) -> dict[str, Any]:
    """The ``dpaudit`` mapping of the model card's YAML block: the record's key figures."""
    audit, deployment = card["audit"], card["deployment"]
    loss = deployment["privacy_loss"]
    return {
        "audit": audit["name"],
        "version": card["generator"]["version"],
        "verdict": audit["verdict"],
        "privacy_verdict": audit["privacy_verdict"],
        "confidence_level": audit["confidence_level"],
        "dp_flavor": deployment["dp_flavor"]["name"],
        "privacy_unit": loss["privacy_unit"],
        "claim": dict(loss["privacy_parameters"]),
        "epsilon_lower_bound": audit["epsilon_lower_bound"],
        "mu_lower_bound": audit["mu_lower_bound"],
        "threat_models": list(audit["threat_models"]),
        "config_hash": audit["provenance"]["config_hash"],
        "data_hash": audit["provenance"]["data_hash"],
    }


# ------------------------------------------------------------------------------- YAML

# Characters a YAML stream may not hold, and the ones YAML reads as line breaks inside a
# quoted scalar (NEL, LS, PS: they would be folded into a space), all written as escapes.
_YAML_UNSAFE = re.compile(
    r"[^\t\n\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


def _yaml_scalar(value: Any) -> str:
    """One YAML 1.1/1.2 scalar that PyYAML's safe loader reads back as ``value``.

    Strings are double-quoted with JSON's escapes (valid YAML escapes), characters YAML
    may not hold written as ``\\uXXXX``; a float always has a dot before its exponent
    (YAML 1.1 reads ``1e-05`` as a string); non-finite numbers are ``null``.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "null"
        text = repr(value)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exponent = text.split("e")
            text = f"{mantissa}.0e{exponent}"
        if "e" in text and text.split("e")[1][0] not in "+-":
            text = text.replace("e", "e+")
        return text
    text = json.dumps(str(value), ensure_ascii=False)
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


def to_yaml(value: Any, indent: int = 0) -> str:
    """``value`` (dicts with string keys, lists, scalars) as block-style YAML lines."""
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return pad + "{}\n"
        out = []
        for k, v in value.items():
            key = _yaml_scalar(str(k)) if not re.fullmatch(r"[A-Za-z_][\w-]*", str(k)) else k
            if isinstance(v, Mapping | list | tuple) and v:
                out.append(f"{pad}{key}:\n{to_yaml(v, indent + 2)}")
            else:
                empty = "{}" if isinstance(v, Mapping) else "[]"
                scalar = empty if isinstance(v, Mapping | list | tuple) else _yaml_scalar(v)
                out.append(f"{pad}{key}: {scalar}\n")
        return "".join(out)
    if isinstance(value, list | tuple):
        out = []
        for v in value:
            if isinstance(v, Mapping | list | tuple) and v:
                body = to_yaml(v, indent + 2)
                out.append(f"{pad}-{body[indent + 1 :]}")
            elif isinstance(v, Mapping | list | tuple):  # empty
                out.append(f"{pad}- {'{}' if isinstance(v, Mapping) else '[]'}\n")
            else:
                out.append(f"{pad}- {_yaml_scalar(v)}\n")
        return "".join(out)
    return pad + _yaml_scalar(value) + "\n"


# --------------------------------------------------------------------------- Markdown


def _md(text: Any) -> str:
    """User text for a Markdown table cell or line: one line, ``|`` and markup escaped."""
    line = one_line(text, limit=300)
    return re.sub(r"([\\`*_{}\[\]<>|#])", r"\\\1", line)


def _code(text: Any) -> str:
    """User text for an inline code span (no escapes work there): one line, no backticks."""
    return one_line(text, limit=300).replace("`", "'")


def _num(x: Any, digits: int = 4) -> str:
    value = _finite(x)
    if value is None:
        return "—" if x is None else "∞"
    return f"{value:.{digits}g}"


def render_model_card(card: Mapping[str, Any]) -> str:
    """``model-card.md``: the YAML metadata block, then a "Privacy audit" section."""
    audit, deployment = card["audit"], card["deployment"]
    loss = deployment["privacy_loss"]
    params = loss["privacy_parameters"]
    meta = {"tags": ["differential-privacy", "dpaudit"], "dpaudit": card_metadata(card)}
    lines = ["---", to_yaml(meta).rstrip("\n"), "---", ""]
    lines.append(f"## Privacy audit (dpaudit {_md(card['generator']['version'])})")
    lines.append("")
    lines.append(
        f"**Verdict: {_md(audit['verdict'])}** ({_md(audit['headline'])}) — audit "
        f"`{_code(audit['name'])}`, kinds {_md(', '.join(audit['kinds']))}, confidence level "
        f"{_num(audit['confidence_level'])}."
    )
    lines.append("")
    flavor = deployment["dp_flavor"]["name"]
    if flavor is None:
        lines.append("No differential-privacy claim was held against this audit.")
    else:
        stated = ", ".join(
            f"{name} = {_num(params[key])}"
            for key, name in (("epsilon", "ε"), ("delta", "δ"), ("mu", "μ"), ("rho", "ρ"))
            if params[key] is not None
        )
        lines.append(
            f"**Claim** ({_md(flavor)}, privacy unit: {_md(loss['privacy_unit'])}): {stated}; "
            f"upper bounds from {_md(', '.join(deployment['accounting']['sources']))}."
        )
    lines.append("")
    for parameter, name in (("epsilon", "ε"), ("mu", "μ")):
        best = audit[f"{parameter}_lower_bound"]
        if best is not None:
            at = f" at δ = {_num(best['delta'])}" if parameter == "epsilon" else ""
            lines.append(
                f"- Strongest rigorous {name} lower bound{at}: **{_num(best['value'])}** "
                f"({_md(best['validity'])}, confidence {_num(best['confidence_level'])}, "
                f"test {_md(best['test'])}; a perfect attack could certify at most "
                f"{_num(best['limit_of_detection'])})."
            )
    lines.append("")
    lines.append("| test | bound | lower | upper | tightness | limit of detection | validity |")
    lines.append("|---|---|---|---|---|---|---|")
    for r in audit["lower_bounds"]:
        name = f"ε (δ = {_num(r['delta'])})" if r["parameter"] == "epsilon" else "μ"
        mark = " **VIOLATION**" if r["violation"] else ""
        lines.append(
            f"| {_md(r['test'])} | {name} | {_num(r['value'])}{mark} | {_num(r['upper'])} | "
            f"{_num(r['tightness'], 3)} | {_num(r['limit_of_detection'])} | "
            f"{_md(r['validity'])} |"
        )
    lines.append("")
    lines.append("Gate checks:")
    lines.append("")
    for c in audit["checks"]:
        lines.append(f"- {_md(c['status'])} `{_code(c['name'])}`: {_md(c['message'])}")
    lines.append("")
    lines.append(f"Threat model: {_md('; '.join(audit['threat_models']))}.")
    lines.append("")
    prov = audit["provenance"]
    lines.append(
        f"Provenance: dpaudit {_md(prov['dpaudit_version'])}, config hash "
        f"`{_code(prov['config_hash'])}`, data hash `{_code(prov['data_hash'])}`, seed "
        f"{_md(prov['seed'])}, finished {_md(prov['finished'])}."
    )
    lines.append("")
    lines.append(
        "A lower bound is what the attacks proved at the stated confidence: a rigorous one "
        "above its upper bound shows the claim false; one below it does not show the claim "
        "true, and nothing above the limit of detection could have been shown by this design."
    )
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ files


class CardFiles(NamedTuple):
    """The files a card is: the model card and the registry record."""

    model_card: Path
    registry: Path


def write_card(results: Mapping[str, Any], out_dir: str | Path) -> CardFiles:
    """Write ``model-card.md`` and ``privacy-registry.json`` for ``results`` into
    ``out_dir`` (created if needed), each atomically. No verification: see
    :func:`card_for_run`.

    Returns:
        The paths of the model card and of the registry record (:class:`CardFiles`).

    Raises:
        DataError: the card does not fit its schema (a results dict it cannot describe).
    """
    card = build_card(results)
    validate_card(card)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        registry = out / REGISTRY_NAME
        atomic_write_text(registry, json.dumps(card, indent=2, ensure_ascii=False) + "\n")
        model_card = out / MODEL_CARD_NAME
        atomic_write_text(model_card, render_model_card(card))
    except OSError as exc:
        raise DataError(f"{exc.filename or out}: cannot write the card: {exc.strerror}") from None
    return CardFiles(model_card, registry)


def card_for_run(run_dir: str | Path, out_dir: str | Path | None = None) -> CardFiles:
    """Verify a finished run, then write its card (``dpaudit card RUN_DIR``).

    The run is verified as ``dpaudit verify`` does (:func:`dpaudit.audit.verify_run`):
    ``results.json`` must fit its schema and equal what the run's stored units give; the
    card is then rendered from the recomputed document, not from the file.

    Args:
        run_dir: A run directory holding ``results.json`` and its units.
        out_dir: Where to write (default: ``run_dir``).

    Returns:
        The paths of the model card and of the registry record (:class:`CardFiles`).

    Raises:
        DpauditError: no readable results.json, or one that does not fit its schema, or
            that its stored units do not reproduce (missing, tampered).
    """
    from dpaudit.audit import verify_run
    from dpaudit.schemas import validate_results

    run = Path(run_dir)
    path = run / "results.json"
    if not path.is_file():
        raise DataError(f"no results.json in {str(run)!r}; run `dpaudit run FILE -o {run}` first")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"{str(path)!r} is not a readable results file: {exc}") from None
    if not isinstance(results, dict):
        raise DataError(f"{str(path)!r} is not a results object (a JSON object is expected)")
    validate_results(results)
    recomputed: dict[str, Any] = {}
    problems = verify_run(run, recompute=recomputed)
    if problems:
        raise DpauditError(
            f"{run}: results.json does not match its stored units ({len(problems)} "
            f"problems, the first: {problems[0]}); no card is made from an unverified run"
        )
    # rendered from what the stored units give, never from the file's own values
    return write_card(recomputed, run if out_dir is None else out_dir)
