"""Text that reaches a terminal, a CI log, JUnit XML or HTML, made safe for its medium.

Audit files, plug-ins and data carry strings dpaudit prints back: an audit name, a test
label, a file path, a value echoed in an error. Such a string may hold a newline and a
forged "FAIL" line, terminal escape sequences, NUL, characters XML cannot carry, or ten
megabytes. Every user string passes through one of these before it is shown.

- :func:`one_line` — for a terminal or log line: control characters (C0, DEL, C1, and the
  Unicode line and paragraph separators and bidirectional overrides, which can reorder
  what a reader sees) become visible escapes such as ``\\x1b`` and ``\\n``, and the text is
  cut to a length with a note of how much was left out.
- :func:`for_xml` — for JUnit XML: the same, plus every character XML 1.0 cannot hold.
- :data:`ASCII_ERRORS` — an encoding error handler for streams that cannot encode ε, μ, δ
  (``PYTHONIOENCODING=ascii``, some Windows consoles): the field's letters become their
  names (``eps``, ``mu``, ``delta``) instead of crashing the program after its work.

- :func:`for_html` — for the report: control characters shown as escapes (newlines and
  tabs kept); Jinja2's autoescape (:mod:`dpaudit.report`) then escapes the markup.
"""

from __future__ import annotations

import codecs
import re

__all__ = ["ASCII_ERRORS", "cut", "for_html", "for_xml", "one_line"]

#: Default longest text shown for one value or message.
LIMIT = 2000

# C0 controls, DEL, C1 controls, line/paragraph separators, bidirectional controls.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# Characters XML 1.0 cannot carry at all (beyond the controls above).
_NOT_XML = re.compile("[\ud800-\udfff\ufffe\uffff]")


def _visible(match: re.Match[str]) -> str:
    ch = match.group(0)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(
        ch, f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}"
    )


def cut(text: str, limit: int = LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def one_line(text: object, *, limit: int = LIMIT) -> str:
    """``text`` as one safe line for a terminal or a log (see the module docstring)."""
    return cut(_CONTROL.sub(_visible, str(text)), limit)


_CONTROL_NOT_LAYOUT = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def for_html(value: object) -> object:
    """A value for an HTML page (Jinja2 escapes ``<&>"'`` after this): the control
    characters of :func:`one_line` shown as escapes, newlines and tabs kept (the report
    shows the audit file as written), nothing cut. Non-strings pass through."""
    if not isinstance(value, str):
        return value
    return _CONTROL_NOT_LAYOUT.sub(_visible, value)


def for_xml(text: object, *, limit: int = LIMIT) -> str:
    """``text`` safe for an XML attribute or text node (ElementTree escapes ``<&>"``)."""
    return _NOT_XML.sub("?", one_line(text, limit=limit))


_ASCII_NAMES = {
    "ε": "eps",
    "μ": "mu",
    "δ": "delta",
    "σ": "sigma",
    "ρ": "rho",
    "α": "alpha",
    "β": "beta",
    "Φ": "Phi",
    "≥": ">=",
    "≤": "<=",
    "−": "-",
    "–": "-",
    "—": "-",
    "…": "...",
    "→": "->",
    "⇒": "=>",
    "×": "x",
    "·": "*",
    "√": "sqrt",
    "∞": "inf",
    "’": "'",
    "“": '"',
    "”": '"',
}

#: Name of the codec error handler that writes the field's letters by name.
ASCII_ERRORS = "dpaudit-ascii"


def _ascii_names(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    return "".join(_ASCII_NAMES.get(ch, "?") for ch in text), error.end


codecs.register_error(ASCII_ERRORS, _ascii_names)
