"""A claim's verdicts at several scales: does it hold, flip, or stay unresolved as scale grows
(docs/methods.md §9.9)?

Input: per scale (a study, smallest first), the claim's row of that study's ``verdicts.json``
(format ``timestep_lab.verdicts/2``, docs/design.md#verdicts-json), or None when the study's
file has no such claim. Each study judged its claims in its own Holm family (its own ``m``);
nothing here re-tests anything: the trend is a rule over the studies' own direction verdicts.

* :func:`effective_verdict`: the verdict a scale contributes. A finding whose log-ratio check
  disagrees (``log.agrees`` false, methods.md §9.6) counts as inconclusive, as that section says
  to read it; a claim absent from a study's file counts as "absent".
* :func:`trend`: ``holds`` when at least two scales judged the claim and every scale that judged
  it gave the same finding (all reproduced, or all contradicted); ``flips`` when it was
  reproduced at one scale and contradicted at another; ``unresolved`` otherwise (judged at fewer
  than two scales, or inconclusive at one of them), each with the reason in words.

A scale "judged" a claim when its effective verdict is reproduced, contradicted or inconclusive;
"not run", "not judged at this length" and "absent" say nothing about the claim at that scale.
Pure Python: knows the verdicts' words, not how they are reached, nor files.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["TRENDS", "FINDINGS", "JUDGED", "ABSENT", "effective_verdict", "point_side", "trend"]

#: The three trends a claim can have across scales.
TRENDS = ("holds", "flips", "unresolved")
#: Direction verdicts that are findings.
FINDINGS = ("reproduced", "contradicted")
#: Effective verdicts that count as the scale having judged the claim.
JUDGED = FINDINGS + ("inconclusive",)
#: A claim the study's ``verdicts.json`` does not list (a study run before the claim was added).
ABSENT = "absent"


def effective_verdict(row: Mapping[str, Any] | None) -> tuple[str, str]:
    """``(verdict, note)``: the direction verdict a scale contributes to the trend, and why it
    differs from the study's own verdict ("" when it does not)."""
    if row is None:
        return ABSENT, "not in this study's verdicts.json"
    verdict = str(row.get("verdict") or "not run")
    if verdict in FINDINGS and (row.get("log") or {}).get("agrees") is False:
        return "inconclusive", (f"{verdict} on FID differences, but the log-ratio check says "
                                f"{row['log'].get('verdict')}: read as inconclusive (docs/methods.md §9.6)")
    return verdict, ""


def point_side(row: Mapping[str, Any] | None) -> str | None:
    """Which side of no effect the point estimate lies on: "claimed" (the sign the claim
    predicts), "other", or None (no finite estimate, or exactly 0). Descriptive, not a test."""
    diff = (row or {}).get("diff")
    if diff is None or not isinstance(diff, (int, float)) or not math.isfinite(diff) or diff == 0:
        return None
    return "claimed" if (diff > 0) == (int(row["expected_sign"]) > 0) else "other"


def _names(studies: Sequence[str]) -> str:
    return ", ".join(studies)


def trend(cells: Sequence[tuple[str, Mapping[str, Any] | None]]) -> dict[str, Any]:
    """The claim's trend over ``cells`` = ``[(study, its verdicts.json row or None), ...]`` in
    scale order (module docstring).

    :returns: ``{"trend": "holds" | "flips" | "unresolved", "finding": "reproduced" |
        "contradicted" | None (the finding that holds), "judged": [study, ...], "verdicts":
        {study: effective verdict}, "sides": {study: "claimed" | "other" | None} (point estimates
        of the scales that judged it), "reason": str}``.
    """
    verdicts = {study: effective_verdict(row)[0] for study, row in cells}
    judged = [s for s, v in verdicts.items() if v in JUDGED]
    rows = dict(cells)
    sides = {s: point_side(rows[s]) for s in judged}
    by_verdict: dict[str, list[str]] = {}
    for s, v in verdicts.items():
        by_verdict.setdefault(v, []).append(s)
    said = "; ".join(f"{v} at {_names(ss)}" for v, ss in by_verdict.items())
    out: dict[str, Any] = {"finding": None, "judged": judged, "verdicts": verdicts, "sides": sides}
    if by_verdict.get("reproduced") and by_verdict.get("contradicted"):
        out.update(trend="flips", reason=said)
    elif len(judged) >= 2 and len({verdicts[s] for s in judged}) == 1 and verdicts[judged[0]] in FINDINGS:
        out.update(trend="holds", finding=verdicts[judged[0]],
                   reason=f"{verdicts[judged[0]]} at every scale that judged it ({_names(judged)})"
                   + ("" if len(judged) == len(verdicts) else
                      "; " + "; ".join(f"{v} at {_names(ss)}" for v, ss in by_verdict.items() if v not in JUDGED)))
    elif not judged:
        out.update(trend="unresolved", reason=f"judged at no scale ({said})")
    elif len(judged) == 1:
        out.update(trend="unresolved", reason=f"judged at one scale only, a trend needs two ({said})")
    else:
        out.update(trend="unresolved", reason=f"no finding at every scale that judged it ({said})")
    if out["trend"] == "unresolved" and len(judged) >= 2:
        claimed = sum(side == "claimed" for side in sides.values())
        out["reason"] += (f"; point estimates on the claimed side at {claimed} of the {len(judged)} scales that "
                          "judged it (descriptive, not a test)")
    return out

