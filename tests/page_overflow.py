"""What overflows a page horizontally, measured in headless Chromium (CI installs it; no webdriver,
no network). A harness page holds each page to check in a frame of the window's width; after
``load`` (embedded images laid out) a script lists, per frame, every element whose right edge
passes the frame's and that no ancestor with ``overflow-x: auto | scroll`` holds, and writes the
list into the DOM that ``chromium --headless --dump-dom`` prints. One Chromium launch for any
number of pages (``--allow-file-access-from-files`` lets the harness read their DOM)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

#: ``W + 1``: sub-pixel rounding
_HARNESS = """<!DOCTYPE html><html><body style="margin:0">%s<script>
function measure(doc) {
  const W = doc.documentElement.clientWidth, bad = [], win = doc.defaultView;
  for (const el of doc.body.querySelectorAll("*")) {
    let p = el.parentElement, held = false;
    for (; p; p = p.parentElement) {
      const o = win.getComputedStyle(p).overflowX;
      if (o === "auto" || o === "scroll") { held = true; break; }
    }
    const r = el.getBoundingClientRect();
    if (!held && r.right > W + 1) bad.push(el.tagName + (el.className ? "." + el.className : "") + ":" + Math.round(r.right));
  }
  return {width: W, overflowing: bad};
}
window.addEventListener("load", () => {
  const out = {};
  for (const f of document.querySelectorAll("iframe")) {
    try { out[f.dataset.name] = measure(f.contentDocument); } catch (e) { out[f.dataset.name] = {error: String(e)}; }
  }
  const pre = document.createElement("pre"); pre.id = "overflow-result"; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script></body></html>"""


def chromium() -> str | None:
    """The Chromium binary on PATH (chromium, chromium-browser, google-chrome), or None."""
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def overflowing_pages(pages: list[Path], width: int = 1280, timeout: float = 120) -> dict[str, list[str]]:
    """Page file name -> the elements of that page (an HTML file) that overflow a ``width``-px
    window outside a scroll container, ``"TAG.class:right-edge-px"`` each ([] when it fits)."""
    frames = "".join(f'<iframe data-name="{html.escape(Path(p).name)}" src="{Path(p).resolve().as_uri()}" '
                     f'style="width:{width}px;height:900px;border:0;display:block"></iframe>' for p in pages)
    with tempfile.TemporaryDirectory(prefix="overflow-") as tmp:
        harness = Path(tmp) / "harness.html"
        harness.write_text(_HARNESS % frames)
        proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               "--allow-file-access-from-files", f"--window-size={width + 40},900",
                               f"--user-data-dir={tmp}/profile", "--dump-dom", harness.as_uri()],
                              capture_output=True, text=True, timeout=timeout)
    m = re.search(r'<pre id="overflow-result">(.*?)</pre>', proc.stdout, re.S)
    if not m:
        raise RuntimeError(f"chromium measured nothing: {proc.stderr[-2000:]}")
    result = json.loads(html.unescape(m.group(1)))
    out = {}
    for name, r in result.items():
        if "error" in r:
            raise RuntimeError(f"{name}: {r['error']}")
        assert r["width"] == width, (name, r["width"])
        out[name] = r["overflowing"]
    return out


def overflowing(page: Path, width: int = 1280, timeout: float = 60) -> list[str]:
    """:func:`overflowing_pages` of one page."""
    return overflowing_pages([Path(page)], width, timeout)[Path(page).name]
