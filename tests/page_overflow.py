"""What overflows a page horizontally, measured in headless Chromium (CI installs it; no webdriver,
no network): a copy of the page with a small script appended that lists every element whose right
edge passes the viewport's and that no ancestor with ``overflow-x: auto | scroll`` holds, written
into the DOM that ``chromium --headless --dump-dom`` prints. One launch per page (~1 s)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

#: measured after ``load`` (embedded images are laid out); ``W + 1``: sub-pixel rounding
_SCRIPT = """<script>window.addEventListener("load", () => {
  const W = document.documentElement.clientWidth, bad = [];
  for (const el of document.body.querySelectorAll("*")) {
    let p = el.parentElement, held = false;
    for (; p; p = p.parentElement) { const o = getComputedStyle(p).overflowX; if (o === "auto" || o === "scroll") { held = true; break; } }
    const r = el.getBoundingClientRect();
    if (!held && r.right > W + 1) bad.push(el.tagName + (el.className ? "." + el.className : "") + ":" + Math.round(r.right));
  }
  const out = document.createElement("pre"); out.id = "overflow-result";
  out.textContent = JSON.stringify({width: W, overflowing: bad}); document.body.appendChild(out);
});</script>"""


def chromium() -> str | None:
    """The Chromium binary on PATH (chromium, chromium-browser, google-chrome), or None."""
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def overflowing(page: Path, width: int = 1280, timeout: float = 60) -> list[str]:
    """Elements of ``page`` (an HTML file) that overflow a ``width``-px window outside a scroll
    container: ``"TAG.class:right-edge-px"`` each; [] when the page fits."""
    text = Path(page).read_text()
    with tempfile.TemporaryDirectory(prefix="overflow-") as tmp:
        probe = Path(tmp) / Path(page).name  # same folder layout not needed: reports load nothing
        probe.write_text(text.replace("</body>", _SCRIPT + "</body>") if "</body>" in text else text + _SCRIPT)
        proc = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               f"--window-size={width},900", f"--user-data-dir={tmp}/profile", "--dump-dom",
                               probe.as_uri()], capture_output=True, text=True, timeout=timeout)
    m = re.search(r'<pre id="overflow-result">(.*?)</pre>', proc.stdout, re.S)
    if not m:
        raise RuntimeError(f"chromium measured nothing on {page}: {proc.stderr[-2000:]}")
    result = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    assert result["width"] == width or result["width"] >= width - 20, result  # a vertical scrollbar may take some
    return result["overflowing"]
