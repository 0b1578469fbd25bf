"""The held-out FID floor's file format, its one reader, and the study's headline FID tool.

``floor.json`` (format :data:`FLOOR_FORMAT`; written by :mod:`timestep_lab.metrics.floor`, copied
into ``summary.json["floor"]`` by the results collection) holds one record per FID tool: the
held-out split's FID against the training reference, ``{"tool", "metric": "fid", "value", "ci":
[lo, hi], "num_samples", ...}``. Every reader of it (the verdicts' regime, the reports' regime
block, the index) goes through :func:`floor_records` / :func:`floor_record`.

When several tools scored the same samples, the headline number is the first of
:data:`FID_TOOL_ORDER` a table has (:func:`headline_tool`): the one place that order is written.

Pure Python: no torch, numpy or pandas.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["FLOOR_FORMAT", "FID_TOOL_ORDER", "headline_tool", "floor_records", "floor_record"]

FLOOR_FORMAT = "timestep_lab.floor/1"

#: Which tool's FID is the headline when several measured the same samples (docs/methods.md#fid-kid).
FID_TOOL_ORDER = ("torch-fidelity", "clean-fid")


def headline_tool(tools: Iterable[Any]) -> str | None:
    """The headline tool among ``tools`` (the ``tool`` column of a metrics table): the first of
    :data:`FID_TOOL_ORDER` present, else the first one given; None when there is none."""
    present = [str(t) for t in tools]
    return next((t for t in FID_TOOL_ORDER if t in present), present[0] if present else None)


def floor_records(floor: Any) -> dict[str, dict[str, Any]]:
    """``{tool: record}`` of a floor (``floor.json``'s content, or ``summary.json["floor"]``):
    accepts ``{"records": [...]}`` (the format), ``{"tools": {tool: record}}``, a list of records or
    ``{tool: record}``; only FID records with a value; ``{}`` for no floor."""
    if not floor:
        return {}
    if isinstance(floor, Mapping) and isinstance(floor.get("records"), list):
        recs = floor["records"]
    elif isinstance(floor, Mapping) and isinstance(floor.get("tools"), Mapping):
        recs = [{"tool": k, **v} for k, v in floor["tools"].items()]
    elif isinstance(floor, list):
        recs = floor
    elif isinstance(floor, Mapping):
        recs = [{"tool": k, **v} for k, v in floor.items() if isinstance(v, Mapping) and "value" in v]
    else:
        return {}
    return {str(r.get("tool")): dict(r) for r in recs
            if isinstance(r, Mapping) and r.get("metric", "fid") == "fid" and r.get("value") is not None}


def floor_record(floor: Any, tool: str | None = None) -> dict[str, Any] | None:
    """The floor's record for ``tool``, else for the headline tool it has (:func:`headline_tool`);
    None without a floor."""
    records = floor_records(floor)
    if tool is not None and str(tool) in records:
        return dict(records[str(tool)])
    best = headline_tool(records)
    return dict(records[best]) if best else None
