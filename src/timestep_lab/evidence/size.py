"""The size verdict: a paper's number against ours as an equivalence statement (docs/methods.md §9.3).

A paper's number (or range ``low..high``) of a ratio-valued quantity, today a training speed-up,
is given a **band**: ``[low / SIZE_BAND, high * SIZE_BAND]``, the sizes we count as "the same
size" as the paper's (a factor 1.5 either way: 3x -> [2.00x, 4.50x]). Our measurement of the
same quantity is an interval (or a one-sided confidence bound when censored) from the per-seed
values, with the scorecard's calibration (:mod:`timestep_lab.evidence.calibration`). Then:

* **smaller** / **larger**: our whole interval lies below / above the band;
* **consistent**: our interval lies inside the band *and* excludes no effect (1x);
* **not comparable** otherwise, with the reason: the interval covers no effect, or reaches past
  an edge of the band without lying outside it (too wide to say), or a censored bound that
  reaches into the band (a bound counts only where it decides by itself), or nothing measured.

When our truth equals the paper's number, a wrong "smaller" / "larger" needs our interval to miss
the truth on one side: at most 5% of studies whenever the interval covers at its 95% level (the
calibration's promise). A censored speed-up (docs/methods.md §9.4) is a mean of per-seed bounds:
"<" (some seed never reached the level) bounds the truth from above, so its upper confidence
bound ``exp(mean log r + c s / √n)`` can only say "smaller"; ">" (some seed there at its first
point) bounds it from below, its lower confidence bound can only say "larger". Pure Python + numpy.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from timestep_lab.evidence.calibration import Calibration, calibration

__all__ = ["SIZE_BAND", "NO_EFFECT", "SIZE_VERDICTS", "band", "size_verdict", "speedup_interval", "size_of",
           "band_text"]

#: The factor either way around a paper's number that counts as the same size.
SIZE_BAND = 1.5
#: A speed-up of no effect.
NO_EFFECT = 1.0
#: The size-verdict vocabulary.
SIZE_VERDICTS = ("consistent", "smaller", "larger", "not comparable")


def band(paper_low: float, paper_high: float, factor: float = SIZE_BAND) -> tuple[float, float]:
    """``(paper_low / factor, paper_high * factor)``."""
    return paper_low / factor, paper_high * factor


def band_text(paper_low: float, paper_high: float, factor: float = SIZE_BAND) -> str:
    lo, hi = band(paper_low, paper_high, factor)
    return f"band [{lo:.2f}x, {hi:.2f}x] (the paper's number within a factor {factor:g})"


def _bad(x: Any) -> bool:
    return x is None or not isinstance(x, (int, float)) or math.isnan(x)


def size_verdict(paper_low: float, paper_high: float, ours_low: float, ours_high: float, *, censored: str = "",
                 factor: float = SIZE_BAND, no_effect: float = NO_EFFECT) -> tuple[str, str]:
    """``(word, reason)``: the equivalence rule of the module docstring.

    ``ours_low``/``ours_high``: our interval; a censored ``"<"`` bound passes its upper
    confidence bound as ``ours_high`` (``ours_low`` is ignored), ``">"`` its lower one as
    ``ours_low``. ``reason`` is "" for a decided verdict."""
    if censored not in ("", "<", ">"):
        raise ValueError(f"censored must be '', '<' or '>', got {censored!r}")
    lo_b, hi_b = band(paper_low, paper_high, factor)
    if censored == "<":
        if _bad(ours_high):
            return "not comparable", "no upper bound"
        if ours_high < lo_b:
            return "smaller", ""
        return "not comparable", "an upper bound that reaches into the band decides nothing"
    if censored == ">":
        if _bad(ours_low):
            return "not comparable", "no lower bound"
        if ours_low > hi_b:
            return "larger", ""
        return "not comparable", "a lower bound that reaches into the band decides nothing"
    if _bad(ours_low) or _bad(ours_high) or any(_bad(v) for v in (paper_low, paper_high)):
        return "not comparable", "no interval"
    if ours_high < lo_b:
        return "smaller", ""
    if ours_low > hi_b:
        return "larger", ""
    if ours_low <= no_effect <= ours_high:
        return "not comparable", f"our interval covers no effect ({no_effect:g}x)"
    if lo_b <= ours_low and ours_high <= hi_b:
        return "consistent", ""
    return "not comparable", "our interval reaches past the band without lying outside it: too wide to say"


def speedup_interval(speedup: Mapping[str, Any] | None, cal: Calibration, level: float = 0.05
                     ) -> tuple[str, float, float, str] | None:
    """``(censored, low, high, text)`` of our speed-up at confidence ``1 - level``: the per-seed
    log speed-ups' mean ``± c s / √n`` (``c = cal.critical(n, level)``), as ratios; censored
    ``"<"`` gives its upper bound only (low NaN), ``">"`` its lower bound only. None when nothing
    can be said (no speed-up, censored both ways, fewer than 2 seeds: the caller says why)."""
    sp = speedup or {}
    bound = sp.get("bound") or ""
    if bound == "both" or not isinstance(sp.get("value"), (int, float)) or not math.isfinite(sp["value"]):
        return None
    ratios = [float(r["ratio"]) for r in sp.get("per_seed") or [] if r.get("censoring") != "dropped"
              and isinstance(r.get("ratio"), (int, float)) and r["ratio"] > 0]
    if len(ratios) < 2:
        return None
    logs = [math.log(r) for r in ratios]  # a handful of seeds: plain Python beats numpy's per-call cost
    n = len(logs)
    mean = math.fsum(logs) / n
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in logs) / (n - 1))
    half = cal.critical(n, level) * sd / math.sqrt(n)
    lo, hi = math.exp(mean - half), math.exp(mean + half)
    conf = f"{1 - level:.0%}"
    if bound == "<":
        return "<", math.nan, hi, f"<{sp['value']:.2f}x (censored; {conf} upper bound {hi:.2f}x, {n} seeds)"
    if bound == ">":
        return ">", lo, math.nan, f">{sp['value']:.2f}x (censored; {conf} lower bound {lo:.2f}x, {n} seeds)"
    return "", lo, hi, f"{sp['value']:.2f}x [{lo:.2f}, {hi:.2f}] ({n} seeds)"


def _comparable(numbers: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((n for n in numbers if not n.get("not_comparable")), None)


def size_of(numbers: Sequence[Mapping[str, Any]], speedup: Mapping[str, Any] | None,
            cal: Calibration | None = None) -> tuple[str | None, str, list[float] | None]:
    """``(size verdict, detail, band)`` of a claim: its first comparable number against our speed-up
    (:func:`speedup_interval`); the first number's reason when none is comparable; ``(None, "",
    None)`` when the source gives none."""
    if not numbers:
        return None, "", None
    num = _comparable(numbers)
    if num is None:
        return "not comparable", f"{numbers[0]['text']}: {numbers[0]['not_comparable']}", None
    cal = cal or calibration()
    p_lo, p_hi = float(num["low"]), float(num["high"])
    paper = f"the paper's {num['text']}, {band_text(p_lo, p_hi)}"
    the_band = list(band(p_lo, p_hi))
    sp = speedup or {}
    if sp.get("bound") == "both":
        return "not comparable", (f"our speed-up is censored both ways (some seeds before the first progress point, "
                                  f"some never): it bounds nothing; {paper}"), the_band
    if not isinstance(sp.get("value"), (int, float)) or not math.isfinite(sp["value"]):
        return "not comparable", f"no speed-up measured (no progress curves, or no seed reached the level); {paper}", \
            the_band
    ours = speedup_interval(sp, cal)
    if ours is None:
        return "not comparable", f"ours {sp['value']:.2f}x has no interval (fewer than 2 seeds); {paper}", the_band
    censored, lo, hi, text = ours
    word, why = size_verdict(p_lo, p_hi, lo, hi, censored=censored)
    return word, f"ours {text} vs {paper}" + (f": {why}" if why else ""), the_band
