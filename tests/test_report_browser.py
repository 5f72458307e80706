"""The report in a real browser (headless Chromium): it parses, logs no error, draws; at
1280 × 800 it shows its headline above the fold with no table wider than the page, the
quickstart's whole page stays under 5,000 px, and every bound and gate check of
results.json is in it; at a phone's 390 px nothing but a scrolling table box is wider than
the screen."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpaudit.audit import run_audit
from dpaudit.config import load_config
from dpaudit.report import fmt_number

AUDITS = Path(__file__).resolve().parents[1] / "audits"
CHROMIUM = shutil.which("chromium") or (
    "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None
)

if CHROMIUM is None:
    if os.environ.get("CI"):
        # In CI the browser check must run: .ci/run installs chromium when missing.
        pytest.fail("chromium is not installed but CI is set", pytrace=False)
    pytest.skip(
        "chromium is not installed (set CI to make this a failure)", allow_module_level=True
    )

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    config = load_config(AUDITS / "laplace-violation.toml")
    small = config.with_section("mechanism", trials=4_000)
    out = tmp_path_factory.mktemp("run")
    run_audit(small, output_dir=out)
    return out / "report.html"


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_dom_parses_without_console_errors(report: Path, tmp_path: Path) -> None:
    done = chromium("--dump-dom", report.as_uri(), profile=tmp_path / "profile")
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # The parsed document holds the verdict, the tables and the three inline plots.
    assert "laplace-violation" in dom
    assert "FAIL" in dom
    assert dom.count("<svg") == 3
    assert "<table" in dom
    for marker in ("Uncaught", "ERROR:CONSOLE", "Failed to load resource"):
        assert marker not in done.stderr


def test_screenshot_is_not_blank(report: Path, tmp_path: Path) -> None:
    from PIL import Image

    shot = tmp_path / "report.png"
    done = chromium(
        f"--screenshot={shot}",
        "--window-size=1200,2000",
        "--hide-scrollbars",
        report.as_uri(),
        profile=tmp_path / "profile",
    )
    assert shot.exists(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    assert pixels.shape[:2] == (2000, 1200)
    non_white = (pixels.min(axis=2) < 245).mean()
    # Measured with this flags set: the report covers ≈ 14 % of the window with ink, the
    # same page without its CSS ≈ 6 %, a blank page 0 %: more than 3 % means it drew.
    assert non_white > 0.03
    # The styled FAIL banner is drawn (title colour #b42318): ≈ 1300 such pixels measured,
    # none without the CSS.
    red = (pixels[..., 0] > 150) & (pixels[..., 1] < 80) & (pixels[..., 2] < 80)
    assert red.sum() > 500


# ------------------------------------------------------------- quickstart: above the fold

#: Appended to a copy of the report (the report itself has no script): measures the laid
#: out page and writes the numbers into the DOM, which --dump-dom then prints.
MEASURE = """<script>
(() => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.top, r.bottom, r.right]; };
  const out = {width: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
               height: document.documentElement.scrollHeight};
  // What a reader sees of each test's rows in the bounds table and of each gate-check row
  // (innerText: the rendered text).
  out.boundRows = [...document.querySelectorAll("table.bounds tbody")].map(
    (tr) => tr.innerText.replace(/\\s+/g, " "));
  out.checkRows = [...document.querySelectorAll("#checks + .scroll tbody tr")].map(
    (tr) => tr.innerText.replace(/\\s+/g, " "));
  out.headline = box(document.getElementById("headline"));
  out.bounds = [...document.querySelectorAll("#headline .bound")].map(
    (el) => [el.textContent.replace(/\\s+/g, " "), ...box(el)]);
  // A scrolling table box wider than its frame would hide columns.
  out.overflow = [...document.querySelectorAll(".scroll")].map(
    (el) => el.scrollWidth - el.clientWidth);
  // Number cells and no-wrap spans must each lay out on one line: a text node that wraps
  // has client rectangles at more than one height.
  out.wrapped = [];
  for (const el of document.querySelectorAll("td.num, .nowrap")) {
    const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      if (!n.textContent.trim()) continue;
      const range = document.createRange();
      range.selectNodeContents(n);
      const tops = new Set([...range.getClientRects()].map((q) => Math.round(q.top)));
      if (tops.size > 1) out.wrapped.push(n.textContent.trim());
    }
  }
  const pre = document.createElement("pre");
  pre.id = "measured";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quickstart audit with fewer reference and shadow models (same data and targets)."""
    text = (AUDITS / "quickstart.toml").read_text(encoding="utf-8")
    small = re.sub(r"(?m)^reference_models = \d+", "reference_models = 16", text)
    small = re.sub(r"(?m)^shadow_models = \d+", "shadow_models = 4", small)
    assert "reference_models = 16" in small
    assert "shadow_models = 4" in small
    folder = tmp_path_factory.mktemp("quickstart")
    audit = folder / "quickstart.toml"
    audit.write_text(small, encoding="utf-8")
    run_audit(load_config(audit), output_dir=folder / "run")
    return folder / "run"


def largest_rigorous(results: dict[str, Any], fragment: str) -> float:
    """The largest rigorous ε lower bound among the bounds whose test label has ``fragment``."""
    return max(
        b["lower"]["value"]
        for b in results["bounds"]
        if fragment in b["test"]
        and b["parameter"] == "epsilon"
        and b["lower"]["validity"].startswith("rigorous")
    )


def measured_in_the_dom(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The numbers a measuring script wrote into the dumped DOM."""
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.DOTALL)
    assert found, done.stdout[-2000:]
    out: dict[str, Any] = json.loads(html.unescape(found[1]))
    return out


@pytest.fixture(scope="module")
def quickstart_1280(quickstart: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The quickstart report laid out 1280 px wide, measured once for the tests below."""
    folder = tmp_path_factory.mktemp("measured")
    page = (quickstart / "report.html").read_text(encoding="utf-8")
    measured = folder / "measured.html"
    measured.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    return measured_in_the_dom(
        chromium("--window-size=1280,800", "--dump-dom", measured.as_uri(), profile=folder / "p")
    )


def test_quickstart_headline_is_above_the_fold(
    quickstart: Path, quickstart_1280: dict[str, Any]
) -> None:
    results = json.loads((quickstart / "results.json").read_text(encoding="utf-8"))
    m = quickstart_1280
    # --dump-dom lays the page out 1280 px wide (its window keeps some height for itself:
    # innerHeight is below 800, but nothing on the page depends on the viewport height).
    assert m["width"] == 1280
    # The headline, and in it the plain target's largest rigorous bound, in the first 800 px.
    plain = largest_rigorous(results, "plain target")
    assert plain > 0  # the plain model leaks even with 16 reference models
    expected = f"ε ≥ {fmt_number(plain, 3)}"
    texts = [b[0].replace("\xa0", " ") for b in m["bounds"]]
    assert expected in texts, texts
    top, bottom, _ = m["bounds"][texts.index(expected)][1:]
    assert 0 < top < bottom <= 800
    assert m["headline"][1] <= 800  # the whole headline, the dp target's line included
    # The page fits 1280 px: no sideways scrolling, no table cut off, no wrapped number.
    assert m["scrollWidth"] <= 1280
    assert all(extra <= 0 for extra in m["overflow"]), m["overflow"]
    assert m["wrapped"] == []


def test_quickstart_screenshot(quickstart: Path, tmp_path: Path) -> None:
    from PIL import Image

    shot = tmp_path / "quickstart.png"
    done = chromium(
        f"--screenshot={shot}",
        "--window-size=1280,800",
        "--hide-scrollbars",
        (quickstart / "report.html").as_uri(),
        profile=tmp_path / "profile",
    )
    assert shot.exists(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=int)
    assert pixels.shape[:2] == (800, 1280)
    # The verdict box of a passing audit (background #e9f6ec) is drawn above the fold, and
    # the PASS title in it (#1a7f37): a few hundred pixels of each, none without the CSS.
    box = (abs(pixels - np.array([0xE9, 0xF6, 0xEC])).sum(axis=2) <= 6).sum()
    title = (abs(pixels - np.array([0x1A, 0x7F, 0x37])).sum(axis=2) <= 30).sum()
    assert box > 50_000
    assert title > 300


#: Quickstart's full page at 1280 px: measured ≈ 4,850 px with the shipped audit (it was
#: ≈ 11,900 px before the report led with its findings); 5,000 px is the budget.
MAX_HEIGHT = 5_000


def test_quickstart_is_short(quickstart_1280: dict[str, Any]) -> None:
    assert quickstart_1280["height"] < MAX_HEIGHT


def test_quickstart_shows_every_bound_and_check(
    quickstart: Path, quickstart_1280: dict[str, Any]
) -> None:
    """Every bound of results.json is rendered in its test's rows of the bounds table (one
    group of rows per test, a heuristic twin beside its rigorous sibling), with its upper
    bound and tightness; and every gate check in its row."""
    results = json.loads((quickstart / "results.json").read_text(encoding="utf-8"))
    rows = [r.replace("\xa0", " ").strip() for r in quickstart_1280["boundRows"]]
    tests = list(dict.fromkeys(b["test"] for b in results["bounds"]))
    assert len(rows) == len(tests)
    in_verdict = [b for b in results["bounds"] if b["in_verdict"]]
    assert in_verdict  # the dp target's bounds are held against the accountant
    for b in results["bounds"]:
        mine = rows[tests.index(b["test"])]
        assert mine.startswith(b["test"] + " ")
        assert fmt_number(b["lower"]["value"]) in mine
        assert fmt_number(b["lower"]["confidence_level"]) in mine
        if b["upper"] is not None:
            assert fmt_number(b["upper"]) in mine
            assert fmt_number(b["tightness"], 3) in mine
    checks = quickstart_1280["checkRows"]
    assert len(checks) == len(results["checks"])
    for c, row in zip(results["checks"], checks, strict=True):
        assert row.startswith(c["name"])
        assert c["message"] in row
        assert fmt_number(c["value"]) in row


#: Appended to a copy of the report that is shown in a 390 px wide frame of another page
#: (headless Chromium will not open a window narrower than 500 px): it measures the
#: frame's layout and writes the numbers into the outer page, which --dump-dom prints.
PHONE = """<script>
(() => {
  const out = {width: window.innerWidth, bodyWidth: document.body.scrollWidth,
               pageWidth: document.documentElement.scrollWidth, outside: []};
  // Anything wider than the screen must sit inside a scrolling table box (or a <pre>).
  for (const el of document.querySelectorAll("main *")) {
    if (el.closest(".scroll") || el.closest("pre")) continue;
    const r = el.getBoundingClientRect();
    if (r.right > window.innerWidth + 0.5 || r.left < -0.5) out.outside.push(el.tagName);
  }
  const pre = parent.document.createElement("pre");
  pre.id = "measured";
  pre.textContent = JSON.stringify(out);
  parent.document.body.appendChild(pre);
})();
</script>"""


@pytest.mark.parametrize("which", ["quickstart", "violation"])
def test_phone_width_has_no_sideways_overflow(
    which: str, quickstart: Path, report: Path, tmp_path: Path
) -> None:
    page = (quickstart / "report.html" if which == "quickstart" else report).read_text("utf-8")
    inner = page.replace("</body>", PHONE + "</body>")
    # srcdoc: the frame shares the outer page's origin, so its script may write there.
    outer = tmp_path / "phone.html"
    outer.write_text(
        '<!DOCTYPE html><html><body style="margin:0"><iframe style="border:0" width="390" '
        f'height="800" srcdoc="{html.escape(inner, quote=True)}"></iframe></body></html>',
        encoding="utf-8",
    )
    m = measured_in_the_dom(
        chromium("--window-size=1280,800", "--dump-dom", outer.as_uri(), profile=tmp_path / "p")
    )
    assert m["width"] == 390
    assert m["bodyWidth"] <= 390
    assert m["pageWidth"] <= 390
    assert m["outside"] == []
