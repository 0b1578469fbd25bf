"""Rendering a report notebook to one self-contained HTML page.

Notebook templates live in ``reports/*.py`` (jupytext percent format, no outputs; a cell tagged
``parameters`` holds the defaults the report job overrides). :func:`render_notebook` reads one,
injects the parameters and executes it in this process (``execute.py``: IPython's shell, no
kernel), then converts the result with nbconvert's ``basic`` template (no scripts), wrapped in a
page with inline CSS: plots are embedded as data URIs and nothing is loaded from the network
(docs/design.md#artifacts).

Must not know what a notebook computes, the study index, or the results' columns.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from timestep_lab.artifacts.io import ArtifactError, atomic_write_text
from timestep_lab.reporting.execute import CellError, execute_notebook, inject_parameters

__all__ = ["render_notebook", "network_references", "PAGE_CSS"]

PAGE_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1.5em; color: #1d1d1f; line-height: 1.5; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; } h2 { margin-top: 1.8em; }
table { border-collapse: collapse; margin: 1em 0; font-size: .92em; display: block; max-width: 100%;
        overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: .3em .7em; text-align: right; vertical-align: top; }
th { background: #f4f4f6; } td:first-child, th:first-child { text-align: left; }
table.text td, table.text th { text-align: left; } table.text td.num { text-align: right; white-space: nowrap; }
details summary { cursor: pointer; color: #555; font-size: .9em; } details dt { font-weight: bold; margin-top: .4em; }
details dd { margin-left: 1em; }
img { max-width: 100%; height: auto; }
.scroll { overflow-x: auto; max-width: 100%; } td { overflow-wrap: anywhere; }
b[data-key="verdict"] { display: inline-block; overflow-wrap: normal; }  /* breaks between words, never inside one */
svg.forest { display: block; margin: 1em 0; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: .85em; }
.jp-OutputPrompt, .jp-InputPrompt, .prompt { display: none; }
.note { background: #fff8e1; border-left: 4px solid #f0b400; padding: .5em 1em; }
.finding { background: #eef6ff; border-left: 4px solid #2f7de1; padding: .5em 1em; }
.failed { color: #b00020; font-weight: bold; }
.rehearsal { background: #fff3cd; border: 2px solid #b8860b; padding: .8em 1em; margin: 1em 0; }
"""


def render_notebook(notebook: str | Path, out_html: str | Path, parameters: dict[str, Any] | None = None,
                    title: str | None = None, cwd: str | Path | None = None, banner: str | None = None) -> Path:
    """Execute a jupytext notebook with ``parameters`` and write self-contained HTML atomically.

    The executed ``.ipynb`` is kept next to the HTML (``<name>.ipynb``) for inspection, also when a
    cell fails. ``banner``: a warning above the report (a rehearsal's reports say that no number in
    them is a result).
    """
    # jupytext and nbconvert take about a second to import: only when a report renders
    import jupytext
    import nbformat
    from nbconvert import HTMLExporter

    notebook, out_html = Path(notebook), Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    try:
        nb = jupytext.read(notebook, fmt="py:percent")
    except Exception as exc:  # noqa: BLE001 - any failure to parse the given file: say which file
        raise ArtifactError(f"{notebook}: not a jupytext percent-format notebook ({type(exc).__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    # a .py without jupytext's header names no kernel: it is Python all the same
    nb.metadata.setdefault("kernelspec", {"name": "python3", "language": "python", "display_name": "Python 3"})
    inject_parameters(nb, parameters or {})
    for i, cell in enumerate(nb.cells):  # jupytext draws random ids: the page's anchors would differ each run
        cell.id = f"cell-{i}"
    try:
        execute_notebook(nb, cwd=cwd)
    except CellError as exc:  # a cell failed: keep the notebook, say where
        kept = out_html.with_suffix(".ipynb")
        atomic_write_text(kept, nbformat.writes(nb))
        raise ArtifactError(f"{notebook}: cell {exc.count} failed with {exc.ename}: "
                            f"{exc.evalue.splitlines()[0] if exc.evalue else ''} (executed notebook: "
                            f"{kept})") from None
    exporter = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True, embed_images=True, anchor_link_text="")
    body, _ = exporter.from_notebook_node(nb)
    page_title = title or _first_heading(nb) or notebook.stem.replace("_", " ")
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(page_title)}</title><style>{PAGE_CSS}</style></head>\n<body>\n"
            f"<p><a href=\"index.html\">&larr; study index</a></p>\n"
            + (f"<div class=\"rehearsal\" role=\"alert\">{html.escape(banner)}</div>\n" if banner else "")
            + f"{body}\n</body></html>\n")
    atomic_write_text(out_html, page)
    atomic_write_text(out_html.with_suffix(".ipynb"), nbformat.writes(nb))
    return out_html


def _first_heading(nb: Any) -> str | None:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            m = re.search(r"^#\s+(.+)$", cell.source, re.M)
            if m:
                return m.group(1).strip()
    return None


def network_references(page: str) -> list[str]:
    """Resources a page would load from the network (scripts, styles, images, fonts, frames)."""
    pattern = re.compile(
        r"""(?:<(?:script|img|iframe|source|embed|audio|video)\b[^>]*\bsrc\s*=\s*["']?((?:https?:)?//[^"'\s>]+))"""
        r"""|(?:<link\b[^>]*\bhref\s*=\s*["']?((?:https?:)?//[^"'\s>]+))"""
        r"""|(?:url\(\s*["']?((?:https?:)?//[^"')\s]+))"""
        r"""|(?:@import\s+["']((?:https?:)?//[^"']+))""",
        re.I,
    )
    return [next(g for g in m.groups() if g) for m in pattern.finditer(page)]
