"""The scorecard as one family: Holm across every judged claim, both verdicts, power, robustness.

Input: one measured row per claim (:func:`timestep_lab.evidence.verdicts.judge_claims` builds them; the
tests build them from synthetic seeds): the claim's record (``id``, ``expected_sign``,
``judged_at``, ``numbers``, ...) and, when the study ran it, its effect: ``test`` (the comparison
it reads; two claims on one comparison, such as a finding and the opposite hypothesis, share
it), ``n``, ``diff``, ``sd`` (of the per-seed differences), ``ci_low``, ``ci_high``, ``p`` (the
Student-t summary), optionally ``p_method`` ("permutation": ``p`` comes from an exact test of
its own and is kept; ``se``: its standard error), ``log`` (the same on log FID), ``speedup_detail``
(a :class:`timestep_lab.evidence.stats.Speedup` as a dict) and ``regime`` (``converged``).

What :func:`judge_family` adds (docs/methods.md §9.1-§9.7):

* a claim judged "at convergence" in a study whose baseline has not stopped improving is
  "not judged at this length" and leaves the family;
* each paired comparison's t-statistic ``d̄ / (s_d / √n)`` referred to the scorecard's
  calibration (:mod:`timestep_lab.evidence.calibration`, default the skew envelope): its p
  (``p``) and 95% interval ``d̄ ± c_{n, 0.05} s_d / √n`` (``ci_low``, ``ci_high``); the Student-t
  ones are kept under ``t_test``. Zero spread (identical differences) is no test;
* Holm across the distinct comparisons of every other claim the study ran (the family, size
  ``m``): a study of ``m`` null comparisons prints a false finding in at most ``alpha`` of
  studies whenever the seeds meet the calibration's condition (printed with the family); the
  direction verdict uses that adjusted p (``p_adj``);
* the detectable effect at the level the verdict uses (``alpha / m``, Holm's first step, at the
  calibration's critical value), for normal differences, estimated from the sample SD, and the
  seeds needed to resolve the paper's own number where it is comparable with ours;
* the size verdict (:mod:`timestep_lab.evidence.size`): the paper's number and its band against
  our interval, as an equivalence statement;
* the same test on log-FID ratios (its own Holm over the same family); a finding it disagrees
  with is flagged (``log.agrees`` false) and read as inconclusive (§9.6), the finding kept as
  ``verdict_before_log_check``.

:func:`family_findings` is the same decision for many simulated scorecards at once (numpy).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from timestep_lab.evidence.calibration import DEFAULT_CALIBRATION, Calibration, calibration, studentized
from timestep_lab.evidence.size import SIZE_BAND, size_of
from timestep_lab.evidence.stats import NOT_JUDGED, POWER, detectable_effect, holm, holm_rows, seeds_needed, verdict

__all__ = ["ALPHA", "judge_family", "family_findings", "calibrated", "DETECTABLE_BASIS", "RULES", "promise"]

#: Family-wise error rate of the scorecard.
ALPHA = 0.05
#: Direction verdicts that are findings (a log-ratio check that disagrees with one makes it inconclusive).
FINDINGS = ("reproduced", "contradicted")
#: Seeds the seeds-needed plan searches up to, and the coarser envelope it uses (a plan, not a verdict).
PLAN_MAX_SEEDS, PLAN_DRAWS = 50, 2 ** 14
DETECTABLE_BASIS = (f"true |difference| found with {POWER:.0%} power at the verdict's Holm level alpha/m and the "
                    "calibration's critical value, for normal per-seed differences, estimated from the sample SD "
                    "(averaged over its spread at this n)")
#: What verdicts.json says its verdicts mean (workflow/collect.py writes them beside the family).
RULES = {
    "interval": "95% interval of the mean paired difference over seeds (arm - baseline): mean +- c s_d / sqrt(n), "
                "c the calibration's critical value (docs/methods.md §9.1); the Student-t one is under t_test",
    "verdict_rule": "direction: reproduced / contradicted when the interval excludes 0 on the claimed / the other "
                    "side and the calibrated p-value, Holm-adjusted across every judged claim of the study (family), "
                    "is < 0.05; inconclusive otherwise (zero spread across seeds: no test), and where the log-ratio check "
                    "disagrees with a finding (docs/methods.md §9.6: the finding depends on the scale); not judged at this "
                    "length: a claim about convergence in a study whose baseline has not stopped improving; not run: "
                    "the study lacks the runs",
    "size_rule": f"the paper's number with a band of a factor {SIZE_BAND:g} either way: consistent when our interval "
                 "lies inside the band and excludes no effect (1x); smaller / larger when our whole interval lies "
                 "below / above the band (a censored bound: its one-sided 95% bound); not comparable otherwise, "
                 "with the reason (a different metric or question, an interval covering no effect or too wide, a "
                 "censored bound reaching into the band)",
    "detectable_rule": "true |difference| reproduced with 80% power at the family's Holm level alpha/m and the "
                       "calibration's critical value, for normal per-seed differences, estimated from the sample SD",
}


def _finite(x: Any) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def promise(cal: Calibration, alpha: float = ALPHA) -> str:
    """The sentence the scorecard prints about its error rate, with the condition it rests on."""
    return (f"a study with no true effect prints a false finding (reproduced or contradicted) in at most "
            f"{alpha:.0%} of studies when {cal.condition}; {cal.beyond}")


def calibrated(effect: Mapping[str, Any], cal: Calibration) -> dict[str, Any]:
    """``effect`` (``n``, ``diff``, ``sd``, Student-t ``ci_low``/``ci_high``/``p``) with its p and
    95% interval from ``cal``; the Student-t ones under ``t_test``; ``no_test`` says why there is
    none (fewer than 2 seeds, zero spread, no p-value). ``p_method`` "permutation": ``p`` is kept
    (an exact test of its own), the interval too."""
    out = {**effect, "t_test": {k: effect.get(k) for k in ("ci_low", "ci_high", "p")}, "calibration": cal.name}
    n, diff, sd = int(effect.get("n") or 0), effect.get("diff"), effect.get("sd")
    if effect.get("p_method") == "permutation":
        if not _finite(effect.get("p")):
            out["no_test"] = "no p-value: not a test the family can adjust"
        return out
    if n < 2 or not _finite(diff):
        out.update(p=math.nan, ci_low=math.nan, ci_high=math.nan,
                   no_test="fewer than 2 paired seeds: no interval, no test")
    elif not _finite(sd):
        out.update(p=math.nan, ci_low=math.nan, ci_high=math.nan, no_test="no spread: no interval, no test")
    elif sd == 0:
        out.update(p=math.nan, ci_low=math.nan, ci_high=math.nan,
                   no_test=f"the {n} per-seed differences are identical (zero spread): the t-statistic is undefined, "
                           "no test")
    else:
        half = cal.critical(n, 0.05) * sd / math.sqrt(n)
        out.update(p=float(cal.pvalue(studentized(diff, sd, n), n)), ci_low=diff - half, ci_high=diff + half)
    return out


def _seeds_needed(numbers: Sequence[Mapping[str, Any]], speedup: Mapping[str, Any] | None, alpha: float,
                  cal_name: str) -> dict[str, Any] | None:
    """Seeds that would resolve the paper's comparable speed-up (its low end, against none) at
    ``alpha`` with the spread of our per-seed log speed-ups; None without both."""
    num = next((n for n in numbers if not n.get("not_comparable")), None)
    sd = (speedup or {}).get("sd_log")
    if num is None or num.get("kind") != "speedup" or not _finite(sd) or not num.get("low") or num["low"] <= 1:
        return None
    plan = calibration(cal_name, PLAN_DRAWS if cal_name == "skew_envelope" else None)
    n = seeds_needed(math.log(float(num["low"])), float(sd), alpha, max_n=PLAN_MAX_SEEDS, critical=plan.critical)
    return {"n": n, "max_n": PLAN_MAX_SEEDS, "effect": num["text"], "sd": sd, "alpha": alpha,
            "measure": "per-seed log speed-up, tested against no speed-up"}


def _detectable(r: Mapping[str, Any], level: float, cal: Calibration) -> float:
    """The row's detectable effect: for a permutation test over models (its SE as ``s / √n``) that
    of a t-test over the models, which a permutation test matches for normal data; else at the
    calibration's critical value."""
    n = int(r["n"])
    sd = r.get("sd")
    if r.get("p_method") == "permutation":
        sd = float(r["se"]) * math.sqrt(n) if _finite(r.get("se")) else math.nan
        cal = calibration("student_t")
    if not _finite(sd) or sd <= 0 or n < 2:  # zero spread: no test, so no power to state
        return math.nan
    return detectable_effect(float(sd), n, level, crit=cal.critical(n, level))


def _gated(r: dict[str, Any], cal) -> tuple[dict[str, Any], bool]:
    """A row as the family takes it, and whether the family judges it: "not run" without an
    effect, "not judged at this length" for a convergence claim before the baseline converged
    (both with their verdict set: False), else its test calibrated (:func:`calibrated`, its
    log-ratio check too: True)."""
    r.setdefault("verdict_note", "")
    if not r.get("n"):
        r["verdict"] = "not run"
        return r, False
    if r.get("judged_at") == "convergence" and (r.get("regime") or {}).get("converged") is not True:
        r["verdict"] = NOT_JUDGED
        r["verdict_note"] = (r.get("regime") or {}).get("convergence_note") or \
            "a claim about the converged model: this study's baseline has not stopped improving"
        return r, False
    r = calibrated(r, cal)
    if r.get("log") and r["log"].get("n"):
        r["log"] = calibrated(r["log"], cal)
    return r, True


def _judge(r: dict[str, Any], p_adj: float, p_adj_log: float, m: int, level: float, cal, alpha: float) -> None:
    """Both verdicts of one judged row, in place, given its Holm-adjusted p (and its log-ratio
    check's) in a family of ``m`` tests at first-step level ``level``."""
    sign = int(r["expected_sign"])
    r["p_adj"] = r["p_family"] = p_adj
    r["family_size"] = m
    if _finite(r.get("p")):
        r["verdict"] = verdict(r.get("ci_low"), r.get("ci_high"), sign, r["p_adj"], alpha)
    else:  # no test, nothing to adjust: never a finding on an interval alone
        r["verdict"] = "inconclusive"
        r["verdict_note"] = r.get("no_test") or "no p-value: not a test the family can adjust"
    r["detectable"] = _detectable(r, level, cal)
    r["detectable_level"] = level
    r["detectable_basis"] = DETECTABLE_BASIS
    numbers = r.get("numbers") or []
    r["seeds_needed"] = _seeds_needed(numbers, r.get("speedup_detail"), level, cal.name)
    r["size_verdict"], r["size_detail"], r["size_band"] = size_of(numbers, r.get("speedup_detail"), cal)
    log = r.get("log")
    if log and log.get("n"):
        lv = verdict(log.get("ci_low"), log.get("ci_high"), sign, p_adj_log, alpha)
        r["log"] = {**log, "p_adj": p_adj_log, "verdict": lv, "agrees": lv == r["verdict"]}
        if r["verdict"] in FINDINGS and lv != r["verdict"]:
            # §9.6: a finding that depends on the scale the effect is measured on is read as inconclusive
            r["verdict_before_log_check"] = r["verdict"]
            r["verdict"] = "inconclusive"
            r["verdict_note"] = (f"{r['verdict_before_log_check']} on FID differences, but the log-ratio check says "
                                 f"{lv}: the finding depends on the scale, read as inconclusive (docs/methods.md §9.6)")


def judge_family(rows: Sequence[Mapping[str, Any]], *, alpha: float = ALPHA,
                 calibration_name: str = DEFAULT_CALIBRATION) -> dict[str, Any]:
    """Both verdicts for every row, with Holm across the scorecard (module docstring).

    :returns: ``{"family": {"size", "alpha", "level", "method", "tests", "calibration", "condition",
        "promise"}, "claims": [row + "verdict", "verdict_note", "p" and "ci_low"/"ci_high"
        (calibrated), "t_test", "p_adj", "p_family", "family_size", "detectable", "detectable_level",
        "detectable_basis", "seeds_needed", "size_verdict", "size_detail", "size_band", "log" (+
        "p_adj", "verdict", "agrees")]}``; rows without an effect get verdict "not run".
    """
    cal = calibration(calibration_name)
    gated = [_gated(dict(r), cal) for r in rows]
    out, judged = [r for r, _ in gated], [r for r, judge in gated if judge]
    # one entry per distinct comparison; rows on the same comparison share its p
    tests: dict[str, tuple[float, float]] = {}
    for r in judged:
        log = r.get("log") or {}
        p = r["p"] if _finite(r.get("p")) else math.nan
        tests.setdefault(r["test"], (p, log["p"] if _finite(log.get("p")) else p))
    names = [t for t, (p, _) in tests.items() if math.isfinite(p)]
    m = len(names)
    level = alpha / m if m else alpha
    p_adj = dict(zip(names, holm([tests[t][0] for t in names])))
    p_adj_log = dict(zip(names, holm([tests[t][1] for t in names])))
    for r in judged:
        _judge(r, p_adj.get(r["test"], math.nan), p_adj_log.get(r["test"], math.nan), m, level, cal, alpha)
    for r in out:
        if r["verdict"] in ("not run", NOT_JUDGED):
            r.setdefault("size_verdict", None)
            r.setdefault("size_detail", "")
            r.setdefault("size_band", None)
            r["family_size"] = m
    family = {"size": m, "alpha": alpha, "level": level, "method": "holm", "tests": names,
              "calibration": cal.name, "condition": cal.condition, "promise": promise(cal, alpha)}
    return {"family": family, "claims": out}


def family_findings(pvalues: np.ndarray, signs: np.ndarray, *, alpha: float = ALPHA) -> np.ndarray:
    """The direction findings of many scorecards at once: ``pvalues`` ``[R, m]`` (one row per
    scorecard, one column per distinct comparison; NaN: no test), ``signs`` ``[R, m]`` the sign of
    each mean difference. Returns ``[R, m]``: the sign where Holm's adjusted p < ``alpha`` (a
    finding, in the direction of the difference), 0 elsewhere: :func:`judge_family`'s verdicts,
    since a calibrated p < 0.05 puts its 95% interval off 0 on the side of the difference."""
    adj = holm_rows(pvalues)
    return np.where(np.isfinite(adj) & (adj < alpha), np.sign(signs), 0).astype(np.int8)
