"""Paired comparisons across seeds: differences, intervals, Holm correction, verdicts, power, speed-ups.

Every comparison in a study is *paired*: for seed ``s`` the arm and the group's baseline arm
start from the same weights, see the same data and noise streams and are scored with the same
sample seeds (docs/methods.md §9). So the unit of evidence is the per-seed difference
``d_s = metric(arm, s) - metric(baseline, s)`` and not the two arms' means.

What this module computes (docs/methods.md §9):

* ``paired(baseline, arm)``: mean difference ``d̄``, its standard error ``s_d / √n``, a 95%
  Student-t interval ``d̄ ± t_{0.975, n-1} · s_d / √n``, the two-sided paired t-test p-value,
  and the detectable effect (:func:`detectable_effect`). Also on log FID, where a difference is a ratio.
* ``detectable_effect(sd, n, alpha, crit=...)``: the true difference a two-sided paired test at
  level ``alpha`` (critical value ``crit`` of ``|T|``; Student t's by default) finds with 80%
  power when the differences are normal (noncentral t), estimated from the sample SD and
  calibrated for that estimate's spread at ``n``; ``seeds_needed`` inverts it.
* ``holm(p)``, ``holm_rows(P)``: Holm's step-down adjustment across a family of comparisons (one
  family, or one per row of a matrix: thousands of simulated scorecards at once).
* ``verdict(...)``: reproduced / contradicted / inconclusive from the interval and the sign the
  paper claims. An interval that covers 0 is "inconclusive" whatever its mean says.

The scorecard refers its t-statistics to a calibration that holds under skewed seeds
(:mod:`timestep_lab.evidence.calibration`) and states sizes as equivalence
(:mod:`timestep_lab.evidence.size`); ``paired`` here is the plain Student-t summary the group
reports print.
* ``speedup(...)``: images an arm needs to reach the baseline's FID at its last progress point,
  with log-FID interpolation between progress points, per seed, censored at both ends.

Pure numpy/scipy; no torch, no pandas, so reports and the workflow can import it cheaply.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
from scipy import special as spf
from scipy import stats as sps

__all__ = ["Paired", "paired", "holm", "holm_rows", "verdict", "Speedup", "SeedSpeedup", "kimg_to_reach", "speedup",
           "VERDICTS", "NOT_JUDGED", "json_safe", "holm_table", "detectable_multiplier", "detectable_effect",
           "seeds_needed"]

#: A convergence claim in a study too short to say anything about convergence (docs/methods.md §9.7).
NOT_JUDGED = "not judged at this length"
#: The direction-verdict vocabulary of reports and ``verdicts.json``.
VERDICTS = ("reproduced", "contradicted", "inconclusive", NOT_JUDGED, "not run")

#: Power the detectable effect is defined at.
POWER = 0.80


@dataclass(frozen=True)
class Paired:
    """One paired comparison ``arm - baseline`` over ``n`` seeds (units of the metric).

    ``ci_low``/``ci_high`` bound the mean difference (95% Student-t interval); ``p`` is the
    two-sided paired t-test p-value (``p_adj`` after Holm, filled by :func:`holm_table`);
    ``detectable`` is :func:`detectable_effect` at ``alpha`` (the level it was computed for).
    NaN where ``n < 2``.
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
    alpha: float = 0.05

    def as_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=None)
def _t_quantile(q: float, df: int) -> float:
    return float(sps.t.ppf(q, df))


def paired(baseline: Sequence[float], arm: Sequence[float], *, log: bool = False,
           level: float = 0.95, alpha: float = 0.05) -> Paired:
    """Paired difference ``arm - baseline`` (per position = per seed), optionally of ``log``.

    ``baseline[i]`` and ``arm[i]`` must come from the same seed; non-finite pairs are dropped
    (a failed run is missing data, not a zero). With ``log=True`` the difference is
    ``log(arm) - log(baseline)``: ``exp(diff)`` is the geometric-mean FID ratio. ``alpha``: the
    test level the detectable effect is computed for (the verdict's level, e.g. Holm's alpha / m).
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
        return Paired(0, nan, nan, nan, nan, nan, nan, nan, nan, alpha=alpha)
    d = a - b
    mean = float(d.mean())
    if n < 2:
        return Paired(n, float(b.mean()), float(a.mean()), mean, nan, nan, nan, nan, nan, alpha=alpha)
    sd = float(d.std(ddof=1))
    se = sd / math.sqrt(n)
    tq = _t_quantile(0.5 + level / 2, n - 1)
    if se == 0.0:
        # identical differences: the interval is the point; p is 0 unless the point is 0
        p = 1.0 if mean == 0.0 else 0.0
    else:
        p = float(2 * spf.stdtr(n - 1, -abs(mean) / se))  # = 2 t.sf(|t|), without scipy.stats' overhead
    return Paired(n, float(b.mean()), float(a.mean()), mean, sd, mean - tq * se, mean + tq * se,
                  p, detectable_effect(sd, n, alpha), alpha=alpha)


@functools.lru_cache(maxsize=None)
def detectable_multiplier(n: int, alpha: float = 0.05, power: float = POWER, nodes: int = 64,
                          crit: float | None = None) -> float:
    """``k`` such that a true mean difference ``k · s_d`` is found with probability ``power``.

    Found means: a two-sided paired test over ``n`` seeds rejects at level ``alpha`` on the side
    of the effect, i.e. ``T' > crit`` with ``T'`` noncentral t (``n - 1`` degrees of freedom,
    noncentrality ``delta √n / sigma``: normal differences) and ``crit`` the test's critical value
    of ``|T|`` (default ``t_{1-alpha/2, n-1}``; the scorecard passes its calibration's,
    :mod:`timestep_lab.evidence.calibration`). ``s_d`` is the *sample* SD, itself noisy
    (``s_d / sigma ~ sqrt(chi2_{n-1} / (n-1))``): ``k`` makes the power ``power`` on average over
    that spread (``nodes`` midpoint quantiles), so a printed ``k · s_d`` is found ``power`` of the
    time in a fresh study of the same design. Plugging ``s_d`` in for ``sigma`` instead would be
    optimistic (about 72% at n = 5). Cached per arguments.
    """
    if n < 2:
        return math.nan
    df = n - 1
    r = np.sqrt(sps.chi2.ppf((np.arange(nodes) + 0.5) / nodes, df) / df)  # quantiles of s_d / sigma
    crit = float(sps.t.ppf(1 - alpha / 2, df)) if crit is None else float(crit)

    def shortfall(k: float) -> float:
        return float(sps.nct.sf(crit, df, k * r * math.sqrt(n)).mean()) - power

    hi = 1.0
    while shortfall(hi) < 0:
        hi *= 2
    from scipy.optimize import brentq  # only needed the first time per (n, alpha, power, crit)

    return float(brentq(shortfall, hi / 2 if hi > 1 else 0.0, hi, xtol=1e-6))


def detectable_effect(sd: float, n: int, alpha: float = 0.05, power: float = POWER,
                      crit: float | None = None) -> float:
    """The smallest true |mean difference| found with ``power`` at level ``alpha`` (critical
    value ``crit``, default Student t's) over ``n`` paired seeds, estimated from the sample SD
    ``sd`` (:func:`detectable_multiplier`); NaN below 2 seeds or without a finite SD."""
    if n < 2 or sd is None or not math.isfinite(sd):
        return math.nan
    return detectable_multiplier(int(n), float(alpha), float(power), crit=crit) * float(sd)


def seeds_needed(effect: float, sd: float, alpha: float = 0.05, power: float = POWER, max_n: int = 200,
                 critical: Callable[[int, float], float] | None = None) -> int | None:
    """Fewest paired seeds whose :func:`detectable_effect` (same ``sd``, ``alpha``, ``power``;
    ``critical(n, alpha)`` the critical value at n seeds, default Student t's) is at most
    ``|effect|``: how many seeds would resolve an effect of that size. None when more than
    ``max_n`` are needed or ``sd``/``effect`` are not finite; 2 when ``sd`` is 0."""
    if effect is None or sd is None or not (math.isfinite(effect) and math.isfinite(sd)) or effect == 0:
        return None
    if sd == 0:
        return 2

    def ok(n: int) -> bool:
        crit = None if critical is None else critical(n, float(alpha))
        return detectable_multiplier(n, float(alpha), float(power), crit=crit) * sd <= abs(effect)

    if not ok(max_n):
        return None
    lo, hi = 2, max_n  # the multiplier falls with n: bisect for the first n that is enough
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def holm_rows(pvalues: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values of every row of ``pvalues`` ``[R, m]`` (each row one family;
    NaN stays NaN and is not counted in its row's ``m``).

    ``p_(i)`` sorted ascending over the ``m`` finite values of a row:
    ``p_adj_(i) = max_{j <= i} min(1, (m - j + 1) · p_(j))``.
    """
    p = np.atleast_2d(np.asarray(pvalues, dtype=np.float64))
    finite = np.isfinite(p)
    m = finite.sum(axis=1, keepdims=True)
    order = np.argsort(np.where(finite, p, np.inf), axis=1, kind="stable")
    ranked = np.take_along_axis(p, order, axis=1)
    rank = np.arange(p.shape[1])[None, :]
    adj = np.maximum.accumulate(np.minimum(1.0, np.where(rank < m, (m - rank) * ranked, 0.0)), axis=1)
    out = np.empty_like(p)
    np.put_along_axis(out, order, np.where(rank < m, adj, np.nan), axis=1)
    return out


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values of one family, in the order given (:func:`holm_rows`)."""
    if len(pvalues) == 0:
        return []
    return holm_rows(np.asarray(pvalues, dtype=np.float64)[None, :])[0].tolist()


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
    correction for the other comparisons of its family is not evidence. ``None`` (JSON null, as
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
class SeedSpeedup:
    """One seed of a speed-up: the level ``target`` (the baseline's FID at its last progress
    point, ``total_kimg``), the kimg the arm needs to reach it (``reach_kimg``; for a censored
    seed the progress point that bounds it), ``ratio = total_kimg / reach_kimg`` and
    ``censoring``: "" (reached between two points), "early" (at or before the first point: the
    ratio is a lower bound), "never" (not by the last point: an upper bound) or "dropped" (no
    finite level or no finite arm point: left out, ``note`` says why)."""

    seed: int | str | None
    target: float
    total_kimg: float
    reach_kimg: float
    ratio: float
    censoring: str
    note: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Speedup:
    """Speed-up of an arm: ``kimg_baseline_total / kimg_arm_to_reach(baseline level)`` per seed.

    ``value`` is the geometric mean of the per-seed ratios; ``ci_low``/``ci_high`` a 95%
    t-interval on the per-seed log ratios (NaN with < 2 seeds or when censored). Censoring
    (docs/methods.md §9.4), stated on the images the arm needs (``kimg_bound``) and on the ratio
    (``bound``), which point opposite ways:

    * some seed never reached the level: its ratio is at most ``K / last``, so the geometric
      mean of the ratios (each an upper bound) is reported as "< value";
    * some seed reached it at or before its first progress point: its ratio is at least
      ``K / first``, and the speed-up is "> value" (the spacing of points cannot say more);
    * both at once: the mean is bounded neither way: ``bound`` "both", ``value`` NaN, "n/a".

    ``per_seed`` holds every seed's ratio (kept seeds), ``seeds`` every seed's record, dropped ones too.
    """

    value: float
    ci_low: float
    ci_high: float
    bound: str
    kimg_bound: str
    per_seed: tuple[float, ...]
    seeds: tuple[SeedSpeedup, ...] = ()

    def label(self) -> str:
        if self.bound == "both":
            return "n/a (censored both ways)"
        if not math.isfinite(self.value):
            return "n/a"
        return f"{self.bound}{self.value:.2f}x"


def speedup(baseline: Sequence[tuple[Sequence[float], Sequence[float]]],
            arm: Sequence[tuple[Sequence[float], Sequence[float]]], seeds: Sequence[int | str] | None = None) -> Speedup:
    """Paired speed-up from progress curves; ``baseline[i]``/``arm[i]`` = ``(kimg, fid)`` of seed
    ``seeds[i]`` (default: its position).

    Per seed: the level ``F`` = the baseline's FID at its last progress point (same sample count
    and protocol as the arm's curve), ``K`` = that point's kimg; ratio = ``K / kimg_to_reach(arm, F)``.
    A seed whose ``F`` is not a finite positive FID, or whose arm curve has no finite point, is
    dropped (missing data: it bounds nothing). A seed that never reaches ``F`` uses the arm's last
    kimg and one that reaches it at its first point uses that kimg; both censor the result (see
    :class:`Speedup`) and suppress the interval.
    """
    if len(baseline) != len(arm):
        raise ValueError("speedup needs one baseline curve per arm curve (paired seeds)")
    seeds = list(range(len(baseline))) if seeds is None else list(seeds)
    records: list[SeedSpeedup] = []
    nan = math.nan
    for seed, (bk, bf), (ak, af) in zip(seeds, baseline, arm):
        pts = sorted(zip(bk, bf))
        arm_pts = [float(k) for k, f in zip(ak, af) if math.isfinite(float(f)) and float(f) > 0]
        if not pts:
            records.append(SeedSpeedup(seed, nan, nan, nan, nan, "dropped", "no baseline curve"))
            continue
        total, target = float(pts[-1][0]), float(pts[-1][1])
        if not (math.isfinite(target) and target > 0):
            records.append(SeedSpeedup(seed, target, total, nan, nan, "dropped", "baseline's last FID is not finite"))
            continue
        if not arm_pts:
            records.append(SeedSpeedup(seed, target, total, nan, nan, "dropped", "no finite FID on the arm's curve"))
            continue
        reach = kimg_to_reach(ak, af, target)
        first, last = min(arm_pts), max(arm_pts)
        censoring = ""
        if not math.isfinite(reach):
            censoring, reach = "never", last
        elif reach <= first:
            censoring, reach = "early", first
        records.append(SeedSpeedup(seed, target, total, reach, total / reach, censoring))
    kept = [r for r in records if r.censoring != "dropped"]
    if not kept:
        return Speedup(nan, nan, nan, "", "", (), tuple(records))
    ratios = [r.ratio for r in kept]
    logs = np.log(np.asarray(ratios))
    never = any(r.censoring == "never" for r in kept)
    early = any(r.censoring == "early" for r in kept)
    if never and early:
        return Speedup(nan, nan, nan, "both", "both", tuple(ratios), tuple(records))
    value = float(np.exp(logs.mean()))
    bound, kimg_bound = ("<", ">") if never else ((">", "<") if early else ("", ""))
    lo = hi = nan
    if not bound and len(ratios) >= 2:
        se = float(logs.std(ddof=1)) / math.sqrt(len(ratios))
        tq = _t_quantile(0.975, len(ratios) - 1)
        lo, hi = float(np.exp(logs.mean() - tq * se)), float(np.exp(logs.mean() + tq * se))
    return Speedup(value, lo, hi, bound, kimg_bound, tuple(ratios), tuple(records))


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
