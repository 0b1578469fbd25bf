"""Has training converged? The one rule the scorecard and the reports apply (docs/methods.md §9.7).

A run's FID curve (images seen in kimg, FID) has *plateaued* when its last point is less than
:data:`PLATEAU_DROP` below the point nearest two thirds of the way: per curve the ratio
``r = FID(last) / FID(point nearest 2/3 * kimg_last)``, over several curves (seeds) their geometric
mean, ``drop = 1 - exp(mean(log r))``, and ``converged = drop < PLATEAU_DROP``. Claims about the
converged model are judged only then; the reports say the same of the study's long run.

Pure numpy; knows nothing of tables or files.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["PLATEAU_DROP", "plateau", "span_text"]

#: the largest fall of FID over the last third of training that still reads as converged
PLATEAU_DROP = 0.10


def plateau(curves: Sequence[tuple[Sequence[float], Sequence[float]]]) -> dict[str, Any] | None:
    """The plateau test over ``curves`` (each ``(kimg, fid)``, any order; non-finite and
    non-positive FIDs dropped; curves with fewer than 2 points skipped).

    :returns: ``{"from_kimg", "to_kimg" (the first usable curve's span), "drop", "seeds" (curves
        used), "threshold": PLATEAU_DROP, "converged"}``, or None when no curve has 2 points.
    """
    ratios, spans = [], []
    for kimg, fid in curves:
        pts = sorted((float(k), float(f)) for k, f in zip(kimg, fid) if np.isfinite(float(f)) and float(f) > 0)
        if len(pts) < 2:
            continue
        last_k, last_f = pts[-1]
        earlier = pts[:-1]
        i = int(np.argmin(np.abs(np.asarray([k for k, _ in earlier]) - 2 * last_k / 3)))
        ratios.append(last_f / earlier[i][1])
        spans.append((earlier[i][0], last_k))
    if not ratios:
        return None
    drop = 1.0 - float(np.exp(np.mean(np.log(ratios))))
    return {"from_kimg": spans[0][0], "to_kimg": spans[0][1], "drop": drop, "seeds": len(ratios),
            "threshold": PLATEAU_DROP, "converged": drop < PLATEAU_DROP}


def span_text(from_kimg: float, to_kimg: float) -> str:
    """What part of training a plateau measured: ``"the last third"`` when its first point lies
    within 5% of training of two thirds of the way, else the share it spans, e.g. ``"the last 50%
    (the progress points hold none nearer two thirds)"``: a two-point curve (3, 6 kimg) measures the
    last half, and the page must not call that a third (issue 42)."""
    share = 1.0 - float(from_kimg) / float(to_kimg) if to_kimg else float("nan")
    if abs(share - 1 / 3) <= 0.05:
        return "the last third"
    return f"the last {share:.0%} (the progress points hold none nearer two thirds)"
