"""Reports: papermill notebooks rendered to self-contained HTML, and the jinja2 study index.

Notebook templates live in ``reports/*.py`` (jupytext percent format, no outputs; a cell tagged
``parameters`` holds the defaults papermill overrides). :func:`render_notebook` converts one to
``.ipynb``, executes it with papermill and converts the result with nbconvert's ``basic``
template (no scripts), wrapped in a page with inline CSS: plots are embedded as data URIs and
nothing is loaded from the network.
"""

from __future__ import annotations

import html
import json
import re
import tempfile
from pathlib import Path
from typing import Any

from timestep_lab.io import atomic_write_text

__all__ = ["render_notebook", "render_index", "network_references", "headline_rows", "protocol_lines", "PAGE_CSS",
           "PAPER_NUMBERS"]

PAGE_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1100px; margin: 2em auto;
       padding: 0 1.5em; color: #1d1d1f; line-height: 1.5; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; } h2 { margin-top: 1.8em; }
table { border-collapse: collapse; margin: 1em 0; font-size: .92em; }
th, td { border: 1px solid #ccc; padding: .3em .7em; text-align: right; vertical-align: top; }
th { background: #f4f4f6; } td:first-child, th:first-child { text-align: left; }
table.text td, table.text th { text-align: left; }
img { max-width: 100%; height: auto; }
pre { background: #f6f8fa; padding: .8em; overflow-x: auto; font-size: .85em; }
.jp-OutputPrompt, .jp-InputPrompt, .prompt { display: none; }
.note { background: #fff8e1; border-left: 4px solid #f0b400; padding: .5em 1em; }
.finding { background: #eef6ff; border-left: 4px solid #2f7de1; padding: .5em 1em; }
.failed { color: #b00020; font-weight: bold; }
"""

# METHODS.md section 5: published figures to put beside ours (protocol stated with each).
PAPER_NUMBERS = [
    {"paper": "SpeeD (2405.17403)", "setting": "DiT-XL/2 MetFaces 256, 50K iter, FID-10K", "baseline": "29.3", "method": "21.1", "ours_key": "speed"},
    {"paper": "SpeeD (2405.17403)", "setting": "DiT-XL/2 FFHQ 256, 50K iter, FID-10K", "baseline": "12.9", "method": "9.9", "ours_key": "speed"},
    {"paper": "SpeeD ablation", "setting": "FFHQ U-Net: uniform / +weighting / asym. sampling / both", "baseline": "17.37 / 16.75 / 15.82", "method": "15.07", "ours_key": "speed_ablation"},
    {"paper": "SpeeD (2405.17403)", "setting": "claimed speed-up vs uniform", "baseline": "", "method": "about 3x", "ours_key": "speed_speedup"},
    {"paper": "Adaptive sampler (2411.09998)", "setting": "CIFAR-10 FID-50K, vs SpeeD", "baseline": "3.57", "method": "2.94", "ours_key": "adaptive"},
    {"paper": "Consistency / CLTS (2404.07946)", "setting": "CIFAR-10, ImageNet-128 training speed-up", "baseline": "", "method": "2x to 2.6x", "ours_key": "clts_speedup"},
    {"paper": "Rethinking samplers (2502.01990)", "setting": "slots of guided-diffusion ImageNet-256", "baseline": "Table 1", "method": "", "ours_key": "slots"},
]


def _kernel_name() -> str:
    """A kernel that runs this interpreter (the project's environment)."""
    return "python3"


def render_notebook(notebook: str | Path, out_html: str | Path, parameters: dict[str, Any] | None = None,
                    title: str | None = None, cwd: str | Path | None = None) -> Path:
    """Execute a jupytext notebook with ``parameters`` and write self-contained HTML atomically.

    The executed ``.ipynb`` is kept next to the HTML (``<name>.ipynb``) for inspection.
    """
    import jupytext
    import nbformat
    import papermill
    from nbconvert import HTMLExporter

    notebook, out_html = Path(notebook), Path(out_html)
    out_html.parent.mkdir(parents=True, exist_ok=True)
    nb = jupytext.read(notebook)
    with tempfile.TemporaryDirectory(prefix="report-") as tmp:
        src = Path(tmp) / f"{notebook.stem}.ipynb"
        executed = Path(tmp) / f"{notebook.stem}.out.ipynb"
        nbformat.write(nb, src)
        papermill.execute_notebook(str(src), str(executed), parameters=parameters or {}, kernel_name=_kernel_name(),
                                   progress_bar=False, cwd=str(cwd) if cwd else None)
        result = nbformat.read(executed, as_version=4)
    exporter = HTMLExporter(template_name="basic", exclude_input=True, exclude_input_prompt=True,
                            exclude_output_prompt=True, embed_images=True, anchor_link_text="")
    body, _ = exporter.from_notebook_node(result)
    page_title = title or _first_heading(result) or notebook.stem.replace("_", " ")
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(page_title)}</title><style>{PAGE_CSS}</style></head>\n<body>\n"
            f"<p><a href=\"index.html\">&larr; study index</a></p>\n{body}\n</body></html>\n")
    atomic_write_text(out_html, page)
    atomic_write_text(out_html.with_suffix(".ipynb"), nbformat.writes(result))
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


def render_index(template: str | Path, out_html: str | Path, *, study: str, summary: str | Path,
                 reports: list[str], config_source: str, slots: str | Path | None = None,
                 pending: list[str] | None = None) -> Path:
    """The study's ``index.html``: headline numbers beside the papers', the protocol, links."""
    import jinja2

    summary_data = json.loads(Path(summary).read_text())
    if slots is not None and Path(slots).exists():
        summary_data["slots"] = json.loads(Path(slots).read_text())["slots"]
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(template).parent)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    page = env.get_template(Path(template).name).render(
        study=study, summary=summary_data, css=PAGE_CSS, config_source=config_source,
        headline=headline_rows(summary_data), protocol=protocol_lines(summary_data),
        reports=[{"name": Path(r).stem.replace("_", " "), "file": Path(r).name} for r in reports],
        pending=pending or [], papers=PAPER_NUMBERS,
    )
    atomic_write_text(out_html, page)
    return Path(out_html)


def _fid(summary: dict, group: str, variant: str) -> str | None:
    v = summary.get("fid", {}).get(group, {})
    key = next((k for k in v if k.startswith(variant + "+")), None)
    if key is None:
        return None
    d = v[key]
    return f"{d['mean']:.2f}" + (f" ± {d['std']:.2f}" if d.get("n", 1) > 1 else "")


def _speed(summary: dict, variant: str) -> str | None:
    sp = summary.get("speedup", {})
    if variant not in sp:
        return None
    return "not reached" if sp[variant] is None else f"{sp[variant]:.2f}x"


def headline_rows(summary: dict) -> list[dict[str, str]]:
    """Rows of the index's headline table: the papers' figures and ours for the same question."""
    g = "sampler_comparison"
    uni = _fid(summary, g, "uniform+none")
    ours = {
        "speed": (f"uniform {uni} → SpeeD (speed sampler + speed weighting) {_fid(summary, g, 'speed+speed')}"
                  if uni and _fid(summary, g, "speed+speed") else None),
        "speed_ablation": (f"uniform {uni} / asym. sampling {_fid(summary, g, 'speed+none')} / both "
                           f"{_fid(summary, g, 'speed+speed')}" if uni and _fid(summary, g, "speed+none") else None),
        "speed_speedup": _speed(summary, "speed+speed"),
        "adaptive": (f"SpeeD {_fid(summary, g, 'speed+speed')} → adaptive {_fid(summary, g, 'adaptive+none')}"
                     if _fid(summary, g, "adaptive+none") and _fid(summary, g, "speed+speed") else None),
        "clts_speedup": _speed(summary, "clts+none"),
        "slots": (" ".join(f"[{a},{b}]" for a, b in summary["slots"]) if summary.get("slots") else None),
    }
    return [{**row, "ours": ours.get(row["ours_key"]) or "not in this study"} for row in PAPER_NUMBERS]


def protocol_lines(summary: dict) -> list[str]:
    p = summary.get("protocol") or {}
    if not p:
        return ["no metrics collected yet"]
    return [
        f"Metric: {p.get('label')} via torch-fidelity and clean-fid (headline numbers: {p.get('tool')} {p.get('tool_version')}); "
        f"feature extractor {p.get('feature_extractor')}.",
        f"{p.get('num_generated')} generated vs {p.get('num_reference')} reference images; reverse sampler "
        f"{p.get('method')} with {p.get('steps')} steps; {'EMA' if p.get('ema') else 'raw'} weights; sample i uses seed base + i.",
        "Means and spreads are over training seeds; speed-ups are images needed to reach uniform's final FID.",
    ]
