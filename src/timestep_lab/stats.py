"""Paired comparisons across seeds: differences, intervals, Holm correction, verdicts, speed-ups.

Every comparison in a study is *paired*: for seed ``s`` the arm and the group's baseline arm
start from the same weights, see the same data and noise streams and are scored with the same
sample seeds (docs/methods.md §9). So the unit of evidence is the per-seed difference
``d_s = metric(arm, s) - metric(baseline, s)`` and not the two arms' means.

What this module computes (docs/methods.md §9):

* ``paired(baseline, arm)``: mean difference ``d̄``, its standard error ``s_d / √n``, a 95%
  Student-t interval ``d̄ ± t_{0.975, n-1} · s_d / √n``, the two-sided paired t-test p-value,
  and the smallest effect this design could have detected (80% power at α = 0.05,
  ``(t_{0.975,n-1} + t_{0.80,n-1}) · s_d / √n``). Also on log FID, where a difference is a ratio.
* ``holm(p)``: Holm's step-down adjustment across the arms of one group.
* ``verdict(...)``: reproduced / contradicted / inconclusive from the interval and the sign the
  paper claims. An interval that covers 0 is "inconclusive" whatever its mean says.
* ``speedup(...)``: images an arm needs to reach the baseline's final FID, with log-FID
  interpolation between progress points, censored at both ends ("> x", "< x").

Pure numpy/scipy; no torch, no pandas, so reports and the workflow can import it cheaply.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy import stats as sps

__all__ = ["Paired", "paired", "holm", "verdict", "Speedup", "kimg_to_reach", "speedup",
           "VERDICTS", "json_safe", "holm_table"]

#: The verdict vocabulary of reports and ``verdicts.json``.
VERDICTS = ("reproduced", "contradicted", "inconclusive", "not run")


@dataclass(frozen=True)
class Paired:
    """One paired comparison ``arm - baseline`` over ``n`` seeds (units of the metric).

    ``ci_low``/``ci_high`` bound the mean difference (95% Student-t interval); ``p`` is the
    two-sided paired t-test p-value (``p_adj`` after Holm, filled by :func:`holm_table`);
    ``detectable`` is the smallest |mean difference| this design detects with 80% power at
    α = 0.05 given the observed spread of differences. NaN where ``n < 2``.
    """

    n: int
    baseline_mean: float
    arm_mean: float
    diff: float
    sd: float
    ci_low: float
    ci_high: float
    p: float
    detectable: float
    interval: str = "t95"
    p_adj: float = math.nan

    def as_dict(self) -> dict:
        return asdict(self)


def paired(baseline: Sequence[float], arm: Sequence[float], *, log: bool = False,
           level: float = 0.95, power: float = 0.80) -> Paired:
    """Paired difference ``arm - baseline`` (per position = per seed), optionally of ``log``.

    ``baseline[i]`` and ``arm[i]`` must come from the same seed; non-finite pairs are dropped
    (a failed run is missing data, not a zero). With ``log=True`` the difference is
    ``log(arm) - log(baseline)``: ``exp(diff)`` is the geometric-mean FID ratio.
    """
    b = np.asarray(baseline, dtype=np.float64)
    a = np.asarray(arm, dtype=np.float64)
    if b.shape != a.shape:
        raise ValueError(f"paired samples need equal length, got {b.shape} and {a.shape}")
    if log:
        with np.errstate(divide="ignore", invalid="ignore"):
            b, a = np.log(b), np.log(a)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = int(a.size)
    nan = math.nan
    if n == 0:
        return Paired(0, nan, nan, nan, nan, nan, nan, nan, nan)
    d = a - b
    mean = float(d.mean())
    if n < 2:
        return Paired(n, float(b.mean()), float(a.mean()), mean, nan, nan, nan, nan, nan)
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    tq = float(sps.t.ppf(0.5 + level / 2, n - 1))
    if se == 0.0:
        # identical differences: the interval is the point; p is 0 unless the point is 0
        p = 1.0 if mean == 0.0 else 0.0
    else:
        p = float(2 * sps.t.sf(abs(mean) / se, n - 1))
    detectable = (tq + float(sps.t.ppf(power, n - 1))) * se
    return Paired(n, float(b.mean()), float(a.mean()), mean, sd, mean - tq * se, mean + tq * se,
                  p, detectable)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (same order as given; NaN stays NaN, not counted).

    ``p_(i)`` sorted ascending over the ``m`` finite values:
    ``p_adj_(i) = max_{j <= i} min(1, (m - j + 1) · p_(j))``.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    m = idx.size
    running = 0.0
    for rank, i in enumerate(idx[np.argsort(p[idx], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * float(p[i])))
        out[i] = running
    return out.tolist()


def holm_table(comparisons: Mapping[str, Paired]) -> dict[str, Paired]:
    """The same comparisons with ``p_adj`` filled by :func:`holm` across all of them."""
    names = list(comparisons)
    adj = holm([comparisons[k].p for k in names])
    return {k: Paired(**{**comparisons[k].as_dict(), "p_adj": a}) for k, a in zip(names, adj)}


def verdict(ci_low: float | None, ci_high: float | None, expected_sign: int, p_adj: float | None = math.nan,
            alpha: float = 0.05) -> str:
    """Verdict on a claim from a 95% interval of ``arm - baseline``.

    ``expected_sign`` is the sign of the difference the paper claims (-1: the arm lowers FID).
    reproduced: the interval excludes 0 on the claimed side; contradicted: it excludes 0 on the
    other side; inconclusive: it covers 0 (or could not be computed), or the Holm-adjusted
    ``p_adj`` (when given) is not below ``alpha``: an interval that excludes 0 only before the
    correction for the other arms of its group is not evidence. ``None`` (JSON null, as
    :func:`json_safe` writes NaN) counts as not computed.
    """
    if expected_sign not in (-1, 1):
        raise ValueError(f"expected_sign must be -1 or +1, got {expected_sign!r}")
    if ci_low is None or ci_high is None or not (math.isfinite(ci_low) and math.isfinite(ci_high)):
        return "inconclusive"
    if p_adj is not None and math.isfinite(p_adj) and p_adj >= alpha:
        return "inconclusive"
    if ci_high < 0:
        return "reproduced" if expected_sign < 0 else "contradicted"
    if ci_low > 0:
        return "reproduced" if expected_sign > 0 else "contradicted"
    return "inconclusive"


def kimg_to_reach(kimg: Sequence[float], fid: Sequence[float], target: float) -> float:
    """First images seen (kimg) at which ``fid(kimg)`` reaches ``target`` (NaN if never).

    Between two progress points the curve is interpolated linearly in log FID (FID falls
    roughly geometrically with training, so this is closer to the truth than linear FID). If
    the first point is already at or below ``target`` the answer is that point's kimg: the
    crossing happened at or before it (callers report "< x").
    """
    pts = sorted((float(x), float(y)) for x, y in zip(kimg, fid) if math.isfinite(y) and y > 0)
    if not pts or not (target > 0):
        return math.nan
    lt = math.log(target)
    for i, (x, y) in enumerate(pts):
        if y <= target:
            if i == 0:
                return x
            x0, y0 = pts[i - 1]
            l0, l1 = math.log(y0), math.log(y)
            return x if l1 == l0 else x0 + (lt - l0) * (x - x0) / (l1 - l0)
    return math.nan


@dataclass(frozen=True)
class Speedup:
    """Speed-up of an arm: ``kimg_baseline_total / kimg_arm_to_reach(baseline final FID)``.

    ``value`` is the geometric mean of the per-seed ratios; ``ci_low``/``ci_high`` a 95%
    t-interval on the per-seed log ratios (NaN with < 2 seeds or when censored). Censoring
    (docs/methods.md §9.4), stated on the images the arm needs (``kimg_bound``) and on the ratio
    (``bound``), which point opposite ways:

    * some seed never reached the target: it needs "> last kimg" images, so its ratio is at most
      ``K / last`` and the speed-up is reported as "< value";
    * else some seed reached it at or before its first progress point: it needs "< first kimg"
      images, so the speed-up is "> value" (the spacing of progress points cannot say more).
    """

    value: float
    ci_low: float
    ci_high: float
    bound: str
    kimg_bound: str
    per_seed: tuple[float, ...]

    def label(self) -> str:
        if not math.isfinite(self.value):
            return "n/a"
        return f"{self.bound}{self.value:.2f}x"


def speedup(baseline: Sequence[tuple[Sequence[float], Sequence[float]]],
            arm: Sequence[tuple[Sequence[float], Sequence[float]]]) -> Speedup:
    """Paired speed-up from progress curves; ``baseline[i]``/``arm[i]`` = ``(kimg, fid)`` of seed i.

    Per seed: target ``F`` = the baseline's FID at its last point, ``K`` = that point's kimg;
    ratio = ``K / kimg_to_reach(arm, F)``. A seed that never reaches ``F`` uses the arm's last
    kimg and one that reaches it at its first point uses that kimg; both censor the result (see
    :class:`Speedup`) and suppress the interval.
    """
    if len(baseline) != len(arm):
        raise ValueError("speedup needs one baseline curve per arm curve (paired seeds)")
    ratios: list[float] = []
    never = early = False
    for (bk, bf), (ak, af) in zip(baseline, arm):
        pts = sorted(zip(bk, bf))
        if not pts or not len(ak):
            continue
        total, target = float(pts[-1][0]), float(pts[-1][1])
        reach = kimg_to_reach(ak, af, target)
        first, last = float(min(ak)), float(max(ak))
        if not math.isfinite(reach):
            never, reach = True, last
        elif reach <= first:
            early, reach = True, first
        ratios.append(total / reach)
    if not ratios:
        return Speedup(math.nan, math.nan, math.nan, "", "", ())
    logs = np.log(np.asarray(ratios))
    value = float(np.exp(logs.mean()))
    bound, kimg_bound = ("<", ">") if never else ((">", "<") if early else ("", ""))
    lo = hi = math.nan
    if not bound and len(ratios) >= 2:
        se = float(logs.std(ddof=1)) / math.sqrt(len(ratios))
        tq = float(sps.t.ppf(0.975, len(ratios) - 1))
        lo, hi = float(np.exp(logs.mean() - tq * se)), float(np.exp(logs.mean() + tq * se))
    return Speedup(value, lo, hi, bound, kimg_bound, tuple(float(r) for r in ratios))


def json_safe(obj):
    """``obj`` with NaN/inf floats replaced by ``None`` (strict JSON), recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, np.generic):
        return json_safe(obj.item())
    return obj
