"""The scorecard as one family: Holm across every judged claim, both verdicts, power, robustness.

Input: one measured row per claim (:func:`timestep_lab.evidence.verdicts.judge_claims` builds them; the
tests build them from synthetic seeds): the claim's record (``id``, ``expected_sign``,
``judged_at``, ``numbers``, ...) and, when the study ran it, its effect: ``test`` (the comparison
it reads; two claims on one comparison, such as a finding and the opposite hypothesis, share
it), ``n``, ``diff``, ``sd``, ``ci_low``, ``ci_high`` (95% t-interval), ``p`` (two-sided paired
t-test), optionally ``log`` (the same on log FID), ``speedup`` (a :class:`timestep_lab.evidence.stats.Speedup`
as a dict, with ``sd_log``) and ``regime`` (``converged``: True / False / None).

What :func:`judge_family` adds (docs/methods.md §9.2-§9.7):

* a claim judged "at convergence" in a study whose baseline has not stopped improving is
  "not judged at this length" and leaves the family;
* Holm across the distinct comparisons of every other claim the study ran (the family, size
  ``m``), so a study of ``m`` null comparisons prints a false "reproduced" in at most
  ``alpha`` of studies; the direction verdict uses that adjusted p (``p_adj``);
* the detectable effect at the level the verdict uses (``alpha / m``, Holm's first step),
  estimated from the sample SD (:func:`timestep_lab.evidence.stats.detectable_effect`), and the seeds
  needed to resolve the paper's own number where it is comparable with ours;
* the size verdict: the paper's comparable number against our interval;
* the same test on log-FID ratios (its own Holm over the same family), disagreements flagged.

Pure Python + numpy/scipy (via :mod:`timestep_lab.evidence.stats`): fast enough to judge thousands of
synthetic scorecards in a test.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from timestep_lab.evidence.stats import NOT_JUDGED, POWER, detectable_effect, holm, seeds_needed, size_verdict, verdict

__all__ = ["ALPHA", "judge_family", "size_of", "DETECTABLE_BASIS"]

#: Family-wise error rate of the scorecard.
ALPHA = 0.05
DETECTABLE_BASIS = (f"true |difference| found with {POWER:.0%} power at the verdict's Holm level alpha/m, "
                    "estimated from the sample SD (averaged over its spread at this n)")


def _finite(x: Any) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _comparable(numbers: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((n for n in numbers if not n.get("not_comparable")), None)


def size_of(numbers: Sequence[Mapping[str, Any]], speedup: Mapping[str, Any] | None) -> tuple[str | None, str]:
    """``(size verdict, detail)`` of a claim: its first comparable number against our measurement
    of the same quantity (a speed-up: our per-seed speed-up's interval or censored bound); the
    first number's reason when none is comparable; ``(None, "")`` when the source gives none."""
    if not numbers:
        return None, ""
    num = _comparable(numbers)
    if num is None:
        return "not comparable", f"{numbers[0]['text']}: {numbers[0]['not_comparable']}"
    lo, hi = float(num["low"]), float(num["high"])
    paper = f"the paper's {num['text']}"
    sp = speedup or {}
    value, bound = sp.get("value"), sp.get("bound") or ""
    if bound == "both":
        return "not comparable", f"our speed-up is censored both ways (some seeds before the first progress point, " \
                                 f"some never): it bounds nothing to set against {paper}"
    if not _finite(value):
        return "not comparable", f"no speed-up measured (no progress curves, or no seed reached the level) " \
                                 f"to set against {paper}"
    if bound == "<":
        ours, o_lo, o_hi = f"<{value:.2f}x (censored)", 0.0, float(value)
    elif bound == ">":
        ours, o_lo, o_hi = f">{value:.2f}x (censored)", float(value), math.inf
    elif _finite(sp.get("ci_low")) and _finite(sp.get("ci_high")):
        ours, o_lo, o_hi = f"{value:.2f}x [{sp['ci_low']:.2f}, {sp['ci_high']:.2f}]", float(sp["ci_low"]), float(sp["ci_high"])
    else:
        return "not comparable", f"ours {value:.2f}x has no interval (fewer than 2 seeds) to set against {paper}"
    word = size_verdict(lo, hi, o_lo, o_hi)
    if word == "not comparable":
        return word, f"ours {ours} is a bound that includes {paper}"
    return word, f"ours {ours} vs {paper}"


def _seeds_needed(numbers: Sequence[Mapping[str, Any]], speedup: Mapping[str, Any] | None,
                  alpha: float) -> dict[str, Any] | None:
    """Seeds that would resolve the paper's comparable speed-up (its low end, against none) at
    ``alpha`` with the spread of our per-seed log speed-ups; None without both."""
    num = _comparable(numbers)
    sd = (speedup or {}).get("sd_log")
    if num is None or num.get("kind") != "speedup" or not _finite(sd) or not num.get("low") or num["low"] <= 1:
        return None
    n = seeds_needed(math.log(float(num["low"])), float(sd), alpha)
    return {"n": n, "effect": num["text"], "measure": "per-seed log speed-up, tested against no speed-up",
            "sd": sd, "alpha": alpha}


def judge_family(rows: Sequence[Mapping[str, Any]], *, alpha: float = ALPHA) -> dict[str, Any]:
    """Both verdicts for every row, with Holm across the scorecard (module docstring).

    :returns: ``{"family": {"size", "alpha", "level", "method", "tests"}, "claims": [row + "verdict",
        "verdict_note", "p_adj", "p_family", "family_size", "detectable", "detectable_level",
        "detectable_basis", "seeds_needed", "size_verdict", "size_detail", "log" (+ "p_adj",
        "verdict", "agrees")]}``; rows without an effect get verdict "not run".
    """
    out = [dict(r) for r in rows]
    judged: list[dict[str, Any]] = []
    for r in out:
        r.setdefault("verdict_note", "")
        if not r.get("n"):
            r["verdict"] = "not run"
            continue
        if r.get("judged_at") == "convergence" and (r.get("regime") or {}).get("converged") is not True:
            r["verdict"] = NOT_JUDGED
            r["verdict_note"] = (r.get("regime") or {}).get("convergence_note") or \
                "a claim about the converged model: this study's baseline has not stopped improving"
            continue
        judged.append(r)
    # one entry per distinct comparison; rows on the same comparison share its p
    tests: dict[str, tuple[float, float]] = {}
    for r in judged:
        log = r.get("log") or {}
        p = r.get("p") if _finite(r.get("p")) else math.nan
        tests.setdefault(r["test"], (p, log.get("p") if _finite(log.get("p")) else p))
    names = [t for t, (p, _) in tests.items() if math.isfinite(p)]
    m = len(names)
    level = alpha / m if m else alpha
    p_adj = dict(zip(names, holm([tests[t][0] for t in names])))
    p_adj_log = dict(zip(names, holm([tests[t][1] for t in names])))
    for r in judged:
        sign = int(r["expected_sign"])
        r["p_adj"] = r["p_family"] = p_adj.get(r["test"], math.nan)
        r["family_size"] = m
        if _finite(r.get("p")):
            r["verdict"] = verdict(r.get("ci_low"), r.get("ci_high"), sign, r["p_adj"], alpha)
        else:  # no test, nothing to adjust: never a finding on an interval alone
            r["verdict"] = "inconclusive"
            r["verdict_note"] = "fewer than 2 paired seeds: no interval, no test" if int(r["n"]) < 2 else \
                "no p-value: not a test the family can adjust"
        r["detectable"] = detectable_effect(r.get("sd") if _finite(r.get("sd")) else math.nan, int(r["n"]), level)
        r["detectable_level"] = level
        r["detectable_basis"] = DETECTABLE_BASIS
        numbers = r.get("numbers") or []
        r["seeds_needed"] = _seeds_needed(numbers, r.get("speedup_detail"), level)
        r["size_verdict"], r["size_detail"] = size_of(numbers, r.get("speedup_detail"))
        log = r.get("log")
        if log and log.get("n"):
            lv = verdict(log.get("ci_low"), log.get("ci_high"), sign, p_adj_log.get(r["test"], math.nan), alpha)
            r["log"] = {**log, "p_adj": p_adj_log.get(r["test"], math.nan), "verdict": lv, "agrees": lv == r["verdict"]}
    for r in out:
        if r["verdict"] in ("not run", NOT_JUDGED):
            r.setdefault("size_verdict", None)
            r.setdefault("size_detail", "")
            r["family_size"] = m
    family = {"size": m, "alpha": alpha, "level": level, "method": "holm", "tests": names}
    return {"family": family, "claims": out}
