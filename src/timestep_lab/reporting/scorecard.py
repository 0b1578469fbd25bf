"""The claim-by-claim scorecard as display strings, for the index and every report notebook.

Input: ``verdicts.json`` (:func:`timestep_lab.workflow.collect.write_verdicts`), ``{"claims": [row,
...]}`` with per row ``id``, ``paper``, ``claim``, ``verdict`` and, when the claim ran, ``n``
(paired seeds), ``diff``, ``ci_low``, ``ci_high`` (95% t-interval of the mean paired difference,
in ``units``), ``p_adj`` (Holm), ``detectable`` (smallest |difference| found with 80% power at
this n), optionally ``speedup`` (the censored per-seed label, ">x" / "<x"); ``needs`` when not
run (docs/methods.md §9.3, §9.4). Output: one dict of strings per claim, no numbers to format
again. Knows nothing of how a verdict is reached; pure Python (the index job imports it).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from timestep_lab.io import read_json

__all__ = ["COLUMNS", "load_verdicts", "scorecard_rows", "format_difference"]

#: (key, header) of the scorecard's columns, in order.
COLUMNS = (("paper", "paper"), ("claim", "claim"), ("difference", "our paired difference [95% CI]"),
           ("n", "n seeds"), ("p_adj", "Holm-adjusted p"), ("verdict", "verdict"),
           ("detail", "detectable effect / what it needs"), ("speedup", "speed-up (per seed, censored)"))


def load_verdicts(path: str | Path | None) -> dict[str, Any]:
    """``verdicts.json``, or ``{"claims": []}`` when ``path`` is empty or absent."""
    if not path or not Path(str(path)).is_file():
        return {"claims": []}
    return read_json(path)


def _num(x: Any) -> float:
    return math.nan if x is None else float(x)


def _fmt(x: float) -> str:
    return f"{x:+.3g}" if math.isfinite(x) else "n/a"


def format_difference(row: Mapping[str, Any]) -> str:
    """``"-3.1 [-5.02, -1.2] final FID, arm - baseline"``; "n/a" with fewer than 2 seeds."""
    d, lo, hi = _num(row.get("diff")), _num(row.get("ci_low")), _num(row.get("ci_high"))
    if not math.isfinite(d):
        return "n/a"
    interval = f"[{_fmt(lo)}, {_fmt(hi)}]" if math.isfinite(lo) and math.isfinite(hi) else "[no interval: n < 2]"
    units = row.get("units") or ""
    return f"{_fmt(d)} {interval}" + (f" ({units})" if units else "")


def scorecard_rows(verdicts: Mapping[str, Any], ids: Iterable[str] | None = None) -> list[dict[str, str]]:
    """One row of strings per claim (keys of :data:`COLUMNS`, plus ``id``), in the file's order;
    ``ids`` keeps those claims only (in the file's order)."""
    keep = None if ids is None else set(ids)
    out = []
    for row in verdicts.get("claims", []):
        if keep is not None and row.get("id") not in keep:
            continue
        verdict = row.get("verdict", "not run")
        ran = verdict != "not run"
        p = _num(row.get("p_adj"))
        detectable = _num(row.get("detectable"))
        if not ran:
            detail = f"needs: {row.get('needs') or 'runs this study does not have'}"
        elif verdict == "inconclusive":
            detail = f"detectable: |difference| >= {abs(detectable):.3g}" if math.isfinite(detectable) else \
                "detectable: n/a (fewer than 2 paired seeds)"
        else:
            detail = ""
        out.append({
            "id": str(row.get("id", "")), "paper": str(row.get("paper", "")), "claim": str(row.get("claim", "")),
            "difference": format_difference(row) if ran else "",
            "n": str(int(row["n"])) if ran and row.get("n") is not None else "",
            "p_adj": (f"{p:.3g}" if math.isfinite(p) else "n/a") if ran else "",
            "verdict": verdict, "detail": detail, "speedup": str(row.get("speedup") or "") if ran else "",
        })
    return out
