"""The study index: ``index.html`` with the claim-by-claim scorecard, the papers' figures beside
our verdicts, the protocol and links to every report.

Reads ``verdicts.json`` (:func:`timestep_lab.workflow.collect.write_verdicts`), ``summary.json``
(failed runs, the FID protocol) and ``slots.json``; renders ``reports/index.html.j2`` with
jinja2. Every difference it prints is a paired one with its 95% interval, and every speed-up the
censored per-seed one (docs/methods.md §9): no unpaired mean or mean-curve speed-up reaches
the page. Must not know how the numbers are computed or how the notebooks are executed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from timestep_lab.io import atomic_write_text, read_json
from timestep_lab.reporting.cost import estimate_vs_measured, local_rules, study_cost
from timestep_lab.reporting.render import PAGE_CSS
from timestep_lab.reporting.scorecard import COLUMNS, load_verdicts, scorecard_rows

__all__ = ["render_index", "headline_rows", "protocol_lines", "PAPER_NUMBERS"]

# docs/methods.md#published-figures: published figures to put beside ours (protocol stated with
# each); ``claim`` names the scorecard row (timestep_lab.verdicts.CLAIMS) that tests the same question.
PAPER_NUMBERS = [
    {"paper": "SpeeD (2405.17403)", "setting": "DiT-XL/2 MetFaces 256, 50K iter, FID-10K", "baseline": "29.3", "method": "21.1", "claim": "speed_faster"},
    {"paper": "SpeeD (2405.17403)", "setting": "DiT-XL/2 FFHQ 256, 50K iter, FID-10K", "baseline": "12.9", "method": "9.9", "claim": "speed_faster"},
    {"paper": "SpeeD ablation", "setting": "FFHQ U-Net: uniform / +weighting / asym. sampling / both", "baseline": "17.37 / 16.75 / 15.82", "method": "15.07", "claim": "speed_sampling_alone"},
    {"paper": "SpeeD (2405.17403)", "setting": "claimed speed-up vs uniform", "baseline": "", "method": "about 3x", "claim": "speed_faster", "speedup": True},
    {"paper": "Adaptive sampler (2411.09998)", "setting": "CIFAR-10 FID-50K, vs SpeeD", "baseline": "3.57", "method": "2.94", "claim": "adaptive_faster", "ours_vs": "adaptive vs uniform"},
    {"paper": "Consistency / CLTS (2404.07946)", "setting": "CIFAR-10, ImageNet-128 training speed-up", "baseline": "", "method": "2x to 2.6x", "claim": "clts_faster", "speedup": True},
    {"paper": "Rethinking samplers (2502.01990)", "setting": "slots of guided-diffusion ImageNet-256", "baseline": "Table 1", "method": "", "claim": "slots"},
]


def render_index(template: str | Path, out_html: str | Path, *, study: str, summary: str | Path,
                 reports: list[str], config_source: str, verdicts: str | Path | None = None,
                 slots: str | Path | None = None, pending: list[str] | None = None,
                 estimate: str | Path | None = None, results_dir: str | Path | None = None,
                 logs_dir: str | Path | None = None, rules_dir: str | Path | None = None,
                 rehearsal: Mapping[str, Any] | None = None) -> Path:
    """The study's ``index.html``: scorecard, the papers' figures beside our verdicts, protocol, the
    cost estimate (``estimate``: the JSON of ``estimate --out``) beside the measured cost per rule (the
    benchmark files under ``results_dir``, :mod:`timestep_lab.reporting.cost`), links. ``rehearsal``:
    the study config's ``rehearsal`` section (``of``, ``stand_ins``), which puts a banner on top:
    nothing on the page is a result."""
    import jinja2  # only the Snakemake index job renders; the rule's module import stays light

    summary_data = read_json(summary)
    if slots is not None and Path(slots).exists():
        summary_data["slots"] = read_json(slots)["slots"]
    card = scorecard_rows(load_verdicts(verdicts))
    est = read_json(estimate) if estimate is not None and Path(estimate).exists() else None
    try:
        local = local_rules(sorted(Path(rules_dir).glob("*.smk"))) if rules_dir is not None else set()
        measured = study_cost(results_dir, logs_dir, local) if results_dir is not None else {}
    except (FileNotFoundError, ValueError):  # not run yet, or a malformed benchmark file: show the estimate alone
        measured = {}
    cost = estimate_vs_measured(est, measured) if (est or measured) else []
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(template).parent)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    page = env.get_template(Path(template).name).render(
        study=study, summary=summary_data, css=PAGE_CSS, config_source=config_source,
        scorecard=card, columns=COLUMNS, headline=headline_rows(summary_data, card),
        protocol=protocol_lines(summary_data),
        reports=[{"name": Path(r).stem.replace("_", " "), "file": Path(r).name} for r in reports],
        pending=pending or [], papers=PAPER_NUMBERS, cost=cost, rehearsal=dict(rehearsal) if rehearsal else None,
        cost_device=(est or {}).get("device_name", "n/a"), cost_gpu=bool(est and est.get("device") != "cpu"),
    )
    atomic_write_text(out_html, page)
    return Path(out_html)


def headline_rows(summary: Mapping[str, Any], scorecard: list[dict[str, str]]) -> list[dict[str, str]]:
    """The papers' figures, each with ours for the same question: the scorecard row's paired
    difference and verdict (or its censored speed-up), never an unpaired mean."""
    by_id = {r["id"]: r for r in scorecard}
    rows = []
    for paper in PAPER_NUMBERS:
        row = by_id.get(paper["claim"])
        if paper["claim"] == "slots":
            ours = " ".join(f"[{a},{b}]" for a, b in summary["slots"]) if summary.get("slots") else ""
        elif row is None or row["verdict"] == "not run":
            ours = ""
        elif paper.get("speedup"):
            ours = f"speed-up {row['speedup'] or 'n/a (no progress curves)'}; {row['verdict']}"
        else:
            ours = f"{row['difference']}; {row['verdict']}"
        if ours and paper.get("ours_vs"):
            ours = f"{paper['ours_vs']}: {ours}"
        rows.append({**paper, "ours": ours or "not in this study", "verdict": row["verdict"] if row else ""})
    return rows


def protocol_lines(summary: Mapping[str, Any]) -> list[str]:
    p = summary.get("protocol") or {}
    if not p:
        return ["no metrics collected yet"]
    return [
        f"Metric: {p.get('label')} via torch-fidelity and clean-fid (headline numbers: {p.get('tool')} {p.get('tool_version')}); "
        f"feature extractor {p.get('feature_extractor')}.",
        f"{p.get('num_generated')} generated vs {p.get('num_reference')} reference images; reverse sampler "
        f"{p.get('method')} with {p.get('steps')} steps; {'EMA' if p.get('ema') else 'raw'} weights; sample i uses seed base + i.",
        "Runs are paired by seed (same initial weights, data order, noise and sample seeds); a difference is "
        "arm - baseline per seed, reported as its mean with a 95% Student-t interval over seeds, p-values "
        "Holm-adjusted within a group (docs/methods.md §9).",
        "Speed-up: images an arm needs to reach the baseline's final FID, per seed, interpolated in log FID "
        "between progress points; '>x' when a seed got there before its first point, '<x' when one never did.",
    ]
