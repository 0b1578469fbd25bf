"""The study index: ``index.html`` with our headline numbers beside the papers', the protocol, links.

Reads ``summary.json`` (written by :mod:`timestep_lab.workflow.collect`) and ``slots.json``;
renders ``reports/index.html.j2`` with jinja2. Must not know how the numbers are computed or how
the notebooks are executed.
"""

from __future__ import annotations

import json
from pathlib import Path

from timestep_lab.io import atomic_write_text
from timestep_lab.reporting.render import PAGE_CSS

__all__ = ["render_index", "headline_rows", "protocol_lines", "PAPER_NUMBERS"]

# docs/methods.md#published-figures: published figures to put beside ours (protocol stated with each).
PAPER_NUMBERS = [
    {"paper": "SpeeD (2405.17403)", "setting": "DiT-XL/2 MetFaces 256, 50K iter, FID-10K", "baseline": "29.3", "method": "21.1", "ours_key": "speed"},
    {"paper": "SpeeD (2405.17403)", "setting": "DiT-XL/2 FFHQ 256, 50K iter, FID-10K", "baseline": "12.9", "method": "9.9", "ours_key": "speed"},
    {"paper": "SpeeD ablation", "setting": "FFHQ U-Net: uniform / +weighting / asym. sampling / both", "baseline": "17.37 / 16.75 / 15.82", "method": "15.07", "ours_key": "speed_ablation"},
    {"paper": "SpeeD (2405.17403)", "setting": "claimed speed-up vs uniform", "baseline": "", "method": "about 3x", "ours_key": "speed_speedup"},
    {"paper": "Adaptive sampler (2411.09998)", "setting": "CIFAR-10 FID-50K, vs SpeeD", "baseline": "3.57", "method": "2.94", "ours_key": "adaptive"},
    {"paper": "Consistency / CLTS (2404.07946)", "setting": "CIFAR-10, ImageNet-128 training speed-up", "baseline": "", "method": "2x to 2.6x", "ours_key": "clts_speedup"},
    {"paper": "Rethinking samplers (2502.01990)", "setting": "slots of guided-diffusion ImageNet-256", "baseline": "Table 1", "method": "", "ours_key": "slots"},
]


def render_index(template: str | Path, out_html: str | Path, *, study: str, summary: str | Path,
                 reports: list[str], config_source: str, slots: str | Path | None = None,
                 pending: list[str] | None = None) -> Path:
    """The study's ``index.html``: headline numbers beside the papers', the protocol, links."""
    import jinja2  # only the Snakemake index job renders; the rule's module import stays light

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
