"""Sampler comparison: FID curves against images seen and the speed-up to a baseline.

Speed-up (SpeeD, arXiv 2405.17403, Sec. 4; CLTS, arXiv 2404.07946): how many fewer images a
method needs to reach the baseline's *final* FID ``F``::

    speedup = kimg_baseline_to_reach(F) / kimg_method_to_reach(F)

where ``kimg_to_reach`` is the first crossing of the mean curve, interpolated linearly between
evaluation points. Measuring the baseline with the same crossing rule makes its own speed-up
exactly 1 even when its curve is noisy (it may touch its final value before the end). A method
that never reaches ``F`` has no speed-up (NaN), which reports print as "not reached".
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence

__all__ = ["kimg_to_reach", "speedups"]


def kimg_to_reach(kimg: Sequence[float], fid: Sequence[float], target: float) -> float:
    """First images seen (kimg) at which the curve ``fid(kimg)`` is at or below ``target``."""
    pts = sorted(zip(kimg, fid))
    for i, (x, y) in enumerate(pts):
        if y <= target:
            if i == 0:
                return float(x)
            (x0, y0) = pts[i - 1]
            return float(x0 + (target - y0) * (x - x0) / (y - y0)) if y != y0 else float(x)
    return math.nan


def speedups(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], baseline: str) -> dict[str, float]:
    """``{variant: speed-up}`` relative to ``baseline``'s final FID; ``curves[v] = (kimg, fid)``."""
    if baseline not in curves:
        return {}
    bk, bf = curves[baseline]
    last = max(range(len(bk)), key=lambda i: bk[i])
    target = bf[last]
    base_reach = kimg_to_reach(bk, bf, target)
    out = {}
    for variant, (k, f) in curves.items():
        reach = kimg_to_reach(k, f, target)
        out[variant] = base_reach / reach if reach == reach and reach > 0 else math.nan
    return out
