"""A forest plot of the scorecard: one row per claim, its paired difference (arm - baseline, in the
row's ``units``) as a point with its 95% interval, the line of no effect (0), colour by the direction
verdict; claims not run or not judged are rows with their verdict written instead of a point.

Drawn as inline SVG by hand (no matplotlib): the bytes depend on the verdicts only, so a report is
byte-reproducible and loads nothing from the network. Input: the ``claims`` of ``verdicts.json``
(:mod:`timestep_lab.reporting.scorecard`); knows nothing of how a verdict is reached.
"""

from __future__ import annotations

import html
import math
from typing import Any, Mapping

__all__ = ["forest_rows", "forest_svg", "VERDICT_COLOURS"]

#: fill colour per direction verdict; anything else (not run, not judged) is drawn grey, without a point.
VERDICT_COLOURS = {"reproduced": "#1b7f3b", "contradicted": "#b00020", "inconclusive": "#8a6d00"}
_GREY = "#888888"
_ROW_H, _LABEL_W, _PLOT_W, _TEXT_W, _TOP = 22, 230, 420, 300, 26


def _finite(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def forest_rows(verdicts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One dict per claim in the file's order: ``id``, ``verdict``, ``units`` and ``diff``, ``lo``,
    ``hi`` (floats, or None where the claim was not run, not judged or has no interval)."""
    out = []
    for row in verdicts.get("claims", []):
        verdict = str(row.get("verdict", "not run"))
        shown = verdict in VERDICT_COLOURS
        out.append({"id": str(row.get("id", "")), "verdict": verdict, "units": str(row.get("units") or ""),
                    "diff": _finite(row.get("diff")) if shown else None,
                    "lo": _finite(row.get("ci_low")) if shown else None,
                    "hi": _finite(row.get("ci_high")) if shown else None})
    return out


def _fmt(x: float) -> str:
    return f"{x:+.3g}"


def forest_svg(rows: list[Mapping[str, Any]]) -> str:
    """The plot of :func:`forest_rows` as one ``<svg>`` element (width 950 px, a viewBox so it
    scales down). Rows of the same ``units`` share one axis, symmetric about 0 and spanning 1.1x
    their largest |bound| (its end printed in the row's title); rows of other units (an FID
    difference beside a relative loss change) get their own, so no row collapses onto 0."""
    spans: dict[str, float] = {}
    for r in rows:
        for v in (r.get("lo"), r.get("hi"), r.get("diff")):
            if v is not None:
                spans[r["units"]] = max(spans.get(r["units"], 0.0), abs(v) * 1.1)
    width = _LABEL_W + _PLOT_W + _TEXT_W
    height = _TOP + _ROW_H * max(len(rows), 1) + 10

    def x(v: float, span: float = 1.0) -> float:
        return round(_LABEL_W + _PLOT_W * (v + span) / (2 * span), 2)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="forest" role="img" viewBox="0 0 {width} {height}" '
             f'width="{width}" style="max-width:100%;height:auto" font-family="sans-serif" font-size="12">',
             "<title>Forest plot: each claim's paired difference with its 95% interval</title>",
             f'<text x="{x(0)}" y="14" text-anchor="middle" fill="#333">0 (no effect)</text>',
             f'<text x="{x(-1)}" y="14" fill="#666">arm - baseline &lt; 0</text>',
             f'<text x="{x(1)}" y="14" text-anchor="end" fill="#666">arm - baseline &gt; 0</text>',
             f'<line x1="{x(0)}" y1="{_TOP - 6}" x2="{x(0)}" y2="{height - 6}" stroke="#333" stroke-dasharray="3,3"/>']
    for i, r in enumerate(rows):
        y = _TOP + _ROW_H * i + _ROW_H / 2
        colour = VERDICT_COLOURS.get(r["verdict"], _GREY)
        attrs = (f'data-claim="{html.escape(r["id"])}" data-verdict="{html.escape(r["verdict"])}"')
        span = spans.get(r["units"]) or 1.0
        parts.append(f'<g class="forest-row" {attrs}>')
        parts.append(f"<title>{html.escape(r['id'])}: {html.escape(r['units'] or 'no units')}; axis "
                     f"{_fmt(-span)} to {_fmt(span)}</title>")
        parts.append(f'<text x="{_LABEL_W - 8}" y="{y + 4}" text-anchor="end">{html.escape(r["id"])}</text>')
        if r.get("diff") is None:
            parts.append(f'<text x="{x(0) + 6}" y="{y + 4}" fill="{_GREY}" font-style="italic">'
                         f'{html.escape(r["verdict"] if r["verdict"] not in VERDICT_COLOURS else "n/a")}</text>')
        else:
            lo, hi = r.get("lo"), r.get("hi")
            if lo is not None and hi is not None:
                parts.append(f'<line class="ci" data-lo="{lo!r}" data-hi="{hi!r}" x1="{x(lo, span)}" y1="{y}" x2="{x(hi, span)}" '
                             f'y2="{y}" stroke="{colour}" stroke-width="2"/>')
            parts.append(f'<circle class="point" data-diff="{r["diff"]!r}" cx="{x(r["diff"], span)}" cy="{y}" r="4" '
                         f'fill="{colour}"/>')
            label = f'{_fmt(r["diff"])}' + (f" [{_fmt(lo)}, {_fmt(hi)}]" if lo is not None and hi is not None else "")
            parts.append(f'<text x="{_LABEL_W + _PLOT_W + 8}" y="{y + 4}" fill="{colour}">'
                         f'{html.escape(label)} {html.escape(r["verdict"])}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)
