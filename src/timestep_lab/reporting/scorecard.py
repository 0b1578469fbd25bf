"""The claim-by-claim scorecard as display strings, for the index and every report notebook.

Input: ``verdicts.json`` (:func:`timestep_lab.workflow.collect.write_verdicts`, format
``timestep_lab.verdicts/2``, docs/design.md#verdicts-json): ``{"family": {"size", "level", ...},
"claims": [row, ...]}`` with per row the claim's record (``paper``, ``where``, ``status``,
``quote``, ``statement``, ``direction``, ``numbers``), both verdicts (``verdict``: direction;
``size_verdict`` + ``size_detail``) and, when the claim ran, ``n`` (paired seeds), ``diff``,
``ci_low``, ``ci_high`` (95% interval of the mean paired difference on the family's calibration, in
``units``), ``p_adj``
(Holm across the scorecard's ``family_size`` comparisons), ``detectable`` (at that level,
estimated from the sample SD), ``seeds_needed``, ``log`` (the same test on log-FID ratios),
``speedup`` (the censored per-seed label) and ``regime`` (baseline FID, floor, length); ``needs``
when not run (docs/methods.md §9). Output: one dict of strings per claim, no numbers to format
again. Knows nothing of how a verdict is reached; pure Python (the index job imports it).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from timestep_lab.artifacts.io import read_json
from timestep_lab.evidence.convergence import span_text

__all__ = ["COLUMNS", "load_verdicts", "scorecard_rows", "format_difference", "format_ratio", "regime_text",
           "size_text", "floor_text"]

#: (key, header) of the scorecard's columns, in order.
COLUMNS = (("claim", "claim: source, where, its own words"), ("tested", "what we test (direction)"),
           ("difference", "our paired difference [95% CI]"), ("n", "n seeds"),
           ("p_adj", "Holm p (scorecard family)"), ("verdict", "direction verdict"), ("size", "size verdict"),
           ("power", "detectable effect / seeds needed / what it needs"),
           ("speedup", "speed-up (per seed, censored)"), ("robustness", "log-ratio check"),
           ("regime", "regime: baseline final FID vs floor, length"))


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


def format_ratio(log: Mapping[str, Any] | None) -> str:
    """``"0.85 [0.80, 0.91]"``: the geometric-mean FID ratio arm / baseline from a log-FID comparison."""
    vals = [_num((log or {}).get(k)) for k in ("diff", "ci_low", "ci_high")]
    if not all(math.isfinite(v) for v in vals):
        return "n/a"
    r, lo, hi = (math.exp(v) for v in vals)
    return f"{r:.3f} [{lo:.3f}, {hi:.3f}]"


def floor_text(floor: Mapping[str, Any] | None) -> str:
    """``"9.06 [1.98, 20.7] (359 held-out images)"``; "no floor" without one."""
    if not floor or floor.get("value") is None:
        return "no floor (no held-out split)"
    lo, hi = (floor.get("ci") or [None, None])[:2]
    ci = f" [{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else ""
    return f"{floor['value']:.3g}{ci} ({floor.get('num_samples')} held-out images)"


def regime_text(regime: Mapping[str, Any] | None) -> str:
    """``"baseline 130 vs floor 9.06 [1.98, 20.7] (359 held-out images), 14x; 12 kimg; FID fell 25% over
    the last third"``; "" without a regime (analysis claims)."""
    if not regime:
        return ""
    fid, kimg, ratio = _num(regime.get("baseline_fid")), _num(regime.get("train_kimg")), _num(regime.get("floor_ratio"))
    parts = [f"baseline {fid:.3g} vs floor {floor_text(regime.get('floor'))}"
             + (f", {ratio:.1f}x the floor" if math.isfinite(ratio) else "")]
    if math.isfinite(kimg):
        parts.append(f"{kimg:g} kimg")
    plateau = regime.get("plateau")
    if plateau:
        state = "converged" if regime.get("converged") else "not converged"
        span = span_text(plateau["from_kimg"], plateau["to_kimg"]) if plateau.get("to_kimg") else "the last third"
        parts.append(f"FID fell {plateau['drop']:.0%} over {span} ({state})")
    else:
        parts.append("no progress curve: convergence unknown")
    return "; ".join(parts)


def size_text(row: Mapping[str, Any]) -> str:
    """``"smaller at this length: ours 1.51x [1.19, 1.93] (5 seeds) vs the paper's 3x, band [2.00x,
    4.50x] (...)"``, with the reason when not comparable; "no number in the paper" when the source
    gives none; "" when the claim was not judged."""
    word = row.get("size_verdict")
    if row.get("verdict") in ("not run", "not judged at this length"):
        return ""
    if not word:
        return "no number in the paper"
    speed = any(n.get("kind") == "speedup" and not n.get("not_comparable") for n in row.get("numbers") or [])
    at = " at this length" if speed and word != "not comparable" else ""
    return f"{word}{at}: {row.get('size_detail', '')}"


def _power(row: Mapping[str, Any], verdict: str) -> str:
    if verdict == "not run":
        return f"needs: {row.get('needs') or 'runs this study does not have'}"
    if verdict == "not judged at this length":
        return row.get("verdict_note") or ""
    det, level = _num(row.get("detectable")), _num(row.get("detectable_level"))
    n = row.get("n")
    over = "models" if row.get("p_method") == "permutation" else "paired seeds"
    if math.isfinite(det):
        text = (f"detectable: |difference| >= {abs(det):.3g} at level {level:.2g} (80% power for normal "
                f"differences; estimated from the sample SD over {n} {over})")
    elif row.get("no_test"):
        text = f"detectable: n/a ({row['no_test']})"
    else:
        text = f"detectable: n/a ({n} {over}: no spread to estimate it from)"
    need = row.get("seeds_needed")
    if need:
        k = need.get("n")
        text += f"; needs n = {k} seeds to resolve {need.get('effect')}" if k else \
            f"; more than {need.get('max_n', 200)} seeds to resolve {need.get('effect')}"
    return text


def _robustness(row: Mapping[str, Any]) -> str:
    log = row.get("log") or {}
    if not log.get("verdict"):
        return "" if row.get("kind") == "fid" else "n/a (not an FID comparison)"
    ratio = f"FID ratio {format_ratio(log)}"
    if log.get("agrees"):
        return f"agrees ({ratio})"
    before = row.get("verdict_before_log_check")
    if before:  # the finding the scorecard read as inconclusive (docs/methods.md §9.6)
        return (f"DISAGREES: {before} on FID differences, the log-ratio test says {log['verdict']} ({ratio}): "
                "read as inconclusive (docs/methods.md §9.6)")
    return f"DISAGREES: the log-ratio test says {log['verdict']} ({ratio})"


def scorecard_rows(verdicts: Mapping[str, Any], ids: Iterable[str] | None = None) -> list[dict[str, str]]:
    """One row of strings per claim (keys of :data:`COLUMNS`, plus ``id``, ``paper``, ``where``,
    ``status``, ``quote``, ``statement``, ``disagrees``), in the file's order; ``ids`` keeps those
    claims only (in the file's order)."""
    keep = None if ids is None else set(ids)
    out = []
    for row in verdicts.get("claims", []):
        if keep is not None and row.get("id") not in keep:
            continue
        verdict = row.get("verdict", "not run")
        measured = verdict != "not run"
        judged = measured and verdict != "not judged at this length"
        p, m = _num(row.get("p_adj")), row.get("family_size")
        quote = row.get("quote") or ""
        paper, where, status = str(row.get("paper", "")), str(row.get("where", "")), str(row.get("status", ""))
        out.append({
            "id": str(row.get("id", "")), "paper": paper, "where": where, "status": status, "quote": quote,
            "statement": str(row.get("statement") or row.get("claim", "")),
            "claim": f"{paper}, {where} ({status})" + (f": \u201c{quote}\u201d" if quote else ": no quote held"),
            "tested": f"{row.get('statement') or row.get('claim', '')}" + (f" ({row['direction']})" if row.get("direction") else ""),
            "difference": format_difference(row) if measured else "",
            "n": str(int(row["n"])) if measured and row.get("n") is not None else "",
            "p_adj": ((f"{p:.3g} (family of {m})" if math.isfinite(p) else f"n/a (family of {m})") if judged
                      else f"not in the family (of {m})" if measured else ""),
            "verdict": verdict, "size": size_text(row), "power": _power(row, verdict),
            "speedup": str(row.get("speedup") or "") if measured else "",
            "robustness": _robustness(row) if judged else "",
            "regime": regime_text(row.get("regime")) if measured else "",
            "disagrees": "yes" if judged and (row.get("log") or {}).get("agrees") is False else "",
        })
    return out
