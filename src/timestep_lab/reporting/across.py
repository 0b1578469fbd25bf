"""The scorecard across scales: ``reports/scorecard.html``, every claim's verdicts at every
scale side by side with whether it holds, flips or is unresolved as scale grows, and what each
scale is and cost (docs/methods.md §9.9).

Input: :class:`timestep_lab.reporting.study_scale.StudyScale` per study (its ``verdicts.json``,
scale and cost), ordered smallest scale first (:func:`~timestep_lab.reporting.study_scale.order_by_scale`).
Output: :func:`scorecard_data` (the rows, plain dicts of strings, also written as JSON by the
CLI), :func:`scorecard_text` (the same for a terminal) and :func:`render_scorecard` (the
self-contained HTML page, jinja2 template ``reports/scorecard.html.j2``). FID values never cross
a column: each scale's FID is in the feature space of its own extractor, so a cell shows the
verdicts, the FID ratio, the censored speed-up and the difference labelled with its own FID.
Knows nothing of how a verdict is reached (:mod:`timestep_lab.evidence.scaling` says what a trend is).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from timestep_lab.artifacts.io import atomic_write_text
from timestep_lab.evidence.scaling import TRENDS, effective_verdict, trend
from timestep_lab.reporting.forest import forest_rows, forest_svg
from timestep_lab.reporting.render import PAGE_CSS
from timestep_lab.reporting.scorecard import format_difference, format_ratio, size_text
from timestep_lab.reporting.study_scale import StudyScale

__all__ = ["scorecard_data", "scorecard_text", "render_scorecard", "scale_lines"]


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _cell(row: Mapping[str, Any] | None, study: StudyScale) -> dict[str, str]:
    """One claim at one scale, as strings."""
    eff, note = effective_verdict(row)
    if row is None:
        return {"verdict": "absent", "effective": eff, "note": note, "size": "", "ratio": "", "difference": "",
                "speedup": "", "n": "", "p_adj": "", "kimg": ""}
    verdict = str(row.get("verdict") or "not run")
    measured = verdict != "not run"
    judged = measured and verdict != "not judged at this length"
    fid = row.get("kind") == "fid"
    shown = dict(row)
    if fid and measured:  # the difference in this scale's own FID, named
        shown["units"] = f"final {study.fid_label}, arm - baseline"
    p, m = _num(row.get("p_adj")), row.get("family_size")
    kimg = (row.get("regime") or {}).get("train_kimg")
    if verdict == "not run":
        note = f"needs: {row.get('needs') or 'runs this study does not have'}"
    elif verdict == "not judged at this length":
        note = str(row.get("verdict_note") or "")
    elif row.get("verdict_note") and not note:
        note = str(row["verdict_note"])
    return {
        "verdict": verdict, "effective": eff, "note": note, "size": size_text(row),
        "ratio": f"FID ratio {format_ratio(row.get('log'))}" if fid and measured else "",
        "difference": format_difference(shown) if measured else "",
        "speedup": str(row.get("speedup") or "") if measured else "",
        "n": str(int(row["n"])) if measured and row.get("n") is not None else "",
        "p_adj": (f"{p:.3g} (family of {m})" if math.isfinite(p) else f"n/a (family of {m})") if judged else "",
        "kimg": f"{float(kimg):g} kimg" if kimg is not None else "",
    }


def scorecard_data(studies: Sequence[StudyScale]) -> dict[str, Any]:
    """Everything the page shows: ``studies`` (names, in scale order), ``scales`` (per study, its
    lines of :func:`scale_lines`), ``claims`` (per claim: ``id``, ``paper``, ``where``, ``status``,
    ``quote``, ``statement``, ``direction``, ``trend`` (:func:`timestep_lab.evidence.scaling.trend`) and
    ``cells`` {study: cell}), ``counts`` {trend: claims}. Claims in the order of the first study
    listing them, then any only later studies list."""
    by_study = {s.name: {r.get("id"): r for r in s.verdicts.get("claims", [])} for s in studies}
    ids: list[str] = []
    for s in studies:
        ids += [str(r.get("id")) for r in s.verdicts.get("claims", []) if r.get("id") not in ids]
    claims = []
    for cid in ids:
        record = next(by_study[s.name][cid] for s in studies if cid in by_study[s.name])
        rows = [(s.name, by_study[s.name].get(cid)) for s in studies]
        claims.append({
            "id": cid, "paper": str(record.get("paper", "")), "where": str(record.get("where", "")),
            "status": str(record.get("status", "")), "quote": str(record.get("quote") or ""),
            "statement": str(record.get("statement") or record.get("claim") or ""),
            "direction": str(record.get("direction") or ""), "trend": trend(rows),
            "cells": {s.name: _cell(by_study[s.name].get(cid), s) for s in studies},
        })
    counts = {t: sum(c["trend"]["trend"] == t for c in claims) for t in TRENDS}
    return {"studies": [s.name for s in studies], "scales": {s.name: scale_lines(s) for s in studies},
            "claims": claims, "counts": counts}


def _hours(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds:,.0f} s ({seconds / 3600:.2f} h)"


def scale_lines(study: StudyScale) -> dict[str, str]:
    """The study's scale and cost as ``{label: text}``, in the page's row order."""
    fam = study.verdicts.get("family") or {}
    rows = study.verdicts.get("claims", [])
    judged = sum(r.get("verdict") in ("reproduced", "contradicted", "inconclusive") for r in rows)
    cost = study.cost or {}
    est = cost.get("est_hours")
    ratio = cost.get("ratio")
    return {
        "results": study.path,
        "data set": f"{study.dataset or 'unknown'}" + (f", {study.images:,} training images" if study.images else ""),
        "resolution (H x W x C)": study.resolution(),
        "model": study.model or "unknown",
        "parameters": f"{study.params:,} ({study.params / 1e6:.2f}M)" if study.params else "unknown",
        "batch size": str(study.batch_size) if study.batch_size else "unknown",
        "images seen by each compared run": ", ".join(f"{k:g} kimg" for k in study.kimg) or "n/a",
        "FID": f"{study.fid_label}" + (f" ({study.fid_tool})" if study.fid_tool else ""),
        "FID protocol": study.protocol or "n/a",
        "claims judged / family": f"{judged} of {len(rows)} judged; Holm across {fam.get('size', '?')} comparisons "
                                  f"(first-step level {_num(fam.get('level')):.2g}) on "
                                  + (f"the '{fam['calibration']}' calibration: {fam.get('promise', '')}"
                                     if fam.get("calibration") else "Student-t p-values (normal seeds assumed: a file "
                                     "from before the calibration was stated)"),
        "CPU, measured": _hours(cost.get("cpu_s")) + (f" over {cost.get('jobs')} jobs ({cost.get('exact_jobs')} "
                                                      "from their own usage line)" if cost.get("jobs") else ""),
        "job wall time, summed": _hours(cost.get("wall_s")) + (" (jobs overlap: not the elapsed time)"
                                                               if cost.get("wall_s") else ""),
        "estimate before the run": (f"{est:.3g} {cost.get('est_unit')}" if est is not None else "no estimate.json")
        + (f"; estimate / measured {ratio:.2f}" if ratio else ""),
        "notes": "; ".join(([cost["note"]] if cost.get("note") else []) + study.notes),
    }


def scorecard_text(data: Mapping[str, Any]) -> str:
    """The claims' trends and each scale's verdict, one line per claim (for a terminal or a note)."""
    words = {c["id"]: c["trend"]["trend"] + (f" ({c['trend']['finding']})" if c["trend"]["finding"] else "")
             for c in data["claims"]}
    wide = {s: max([len(s)] + [len(c["cells"][s]["effective"]) for c in data["claims"]]) for s in data["studies"]}
    w_id, w_trend = max([5] + [len(i) for i in words]), max([13] + [len(w) for w in words.values()])
    lines = [f"{'claim':<{w_id}}  {'across scales':<{w_trend}}  " + "  ".join(f"{s:<{wide[s]}}" for s in data["studies"])]
    for c in data["claims"]:
        lines.append(f"{c['id']:<{w_id}}  {words[c['id']]:<{w_trend}}  "
                     + "  ".join(f"{c['cells'][s]['effective']:<{wide[s]}}" for s in data["studies"]))
    lines.append(", ".join(f"{n} {t}" for t, n in data["counts"].items()) + f" ({len(data['claims'])} claims)")
    return "\n".join(line.rstrip() for line in lines)


def render_scorecard(template: str | Path, out_html: str | Path, studies: Sequence[StudyScale],
                     skipped: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """Write the page (``template``: ``reports/scorecard.html.j2``) and return :func:`scorecard_data`.
    ``skipped``: ``(folder, reason)`` of folders left out, listed on the page."""
    import jinja2  # only the page needs it; the rows do not

    data = scorecard_data(studies)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(template).parent)), autoescape=True,
                             undefined=jinja2.StrictUndefined)
    # one forest per study (a column of points each): its differences are in its own FID, never one axis
    forests = {s.name: forest_svg(forest_rows(s.verdicts)) for s in studies}
    page = env.get_template(Path(template).name).render(css=PAGE_CSS, skipped=list(skipped), forests=forests,
                                                        labels={s.name: s.fid_label for s in studies}, **data)
    atomic_write_text(out_html, page)
    return data
