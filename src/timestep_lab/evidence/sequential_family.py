"""The scorecard of a budgeted study judged sequentially (docs/methods.md §14.1): anytime-valid verdicts.

A study with ``budget:`` is looked at after every stage, so its verdicts cannot be the fixed
design's t-test (its error grows with every look). :func:`judge_sequentially` takes the fixed
design's judged family (:func:`timestep_lab.evidence.verdicts.judge_claims`: which claims are
judged, their arm, baseline and paired seeds, the regime's "not judged at this length") and
replaces, for every judged claim on final FID, the test by the safe t-test's
(:func:`timestep_lab.evidence.sequential.judge_sequential`):

* ``p``: the anytime p-value of the per-seed differences ``arm - baseline`` in seed order, referred
  to the skew envelope up to ``horizon`` seeds (``budget.calibration: skew_envelope``) or to
  Ville's bound (``normal``);
* ``ci_low``/``ci_high``: the confidence sequence at ``1 - alpha`` (running intersection over the
  looks), which keeps its coverage after a data-dependent stop;
* ``p_adj``: Holm across the family: every distinct FID comparison's anytime p and every analysis
  claim's own p (the analyses run once, in stage 0), one family as the scorecard's (§9.2);
* ``verdict``: :func:`timestep_lab.evidence.stats.verdict` on that interval and ``p_adj``;
  ``detectable``: the smallest mean difference the sequential test rejects at Holm's first level.

The fixed design's numbers stay under ``fixed_design`` in each row (for reading, never a verdict);
the size verdict (a fixed-design interval against the paper's number) is withdrawn on FID claims:
``size_verdict`` None with the reason. The family says ``method: "holm (anytime-valid, safe t)"``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from timestep_lab.evidence.family import ALPHA, FINDINGS
from timestep_lab.evidence.sequential import PRIOR_SD, resolvable_effect, sequential
from timestep_lab.evidence.stats import holm, verdict

__all__ = ["SEQUENTIAL_METHOD", "judge_sequentially"]

SEQUENTIAL_METHOD = "holm (anytime-valid, safe t)"
_REPLACED = ("p", "p_adj", "p_family", "ci_low", "ci_high", "verdict", "detectable", "detectable_level")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def judge_sequentially(judged: Mapping[str, Any], fids: Mapping[str, Mapping[int, float]], *,
                       prior_sd: float = PRIOR_SD, horizon: int | None = None, alpha: float = ALPHA) -> dict[str, Any]:
    """``judged`` (``{"family", "claims"}`` of :func:`~timestep_lab.evidence.verdicts.judge_claims`) judged
    sequentially (module docstring). ``fids``: ``{arm: {seed: final FID}}``
    (:func:`~timestep_lab.evidence.verdicts.study_final_fids`); ``horizon``: the skew envelope's horizon
    (the budget's ``max_seeds``) or None (Ville). Returns a new ``{"family", "claims"}``."""
    rows = [dict(r) for r in judged["claims"]]
    judged_rows = [r for r in rows if r.get("verdict") not in ("not run", "not judged at this length")
                   and _finite(r.get("p"))]
    seq: dict[str, Any] = {}
    for r in judged_rows:
        if r.get("kind") != "fid" or r["test"] in seq:
            continue
        arm, base = fids.get(r.get("arm") or "", {}), fids.get(r.get("baseline") or "", {})
        seeds = sorted(set(arm) & set(base))  # seeds enter in their fixed order (§14.1)
        seq[r["test"]] = sequential([arm[s] - base[s] for s in seeds], alpha, prior_sd, horizon)
    p = {}
    for r in judged_rows:
        p.setdefault(r["test"], seq[r["test"]].p if r["test"] in seq else float(r["p"]))
    names = list(p)
    adj = dict(zip(names, holm([p[k] for k in names]))) if names else {}
    m = len(names)
    level = alpha / m if m else alpha
    for r in judged_rows:
        t = r["test"]
        if t not in seq:  # an analysis claim: its own test, in the same Holm family
            r["p_adj"] = r["p_family"] = adj[t]
            r["verdict"] = verdict(r.get("ci_low"), r.get("ci_high"), int(r["expected_sign"]), adj[t], alpha)
            r["family_size"] = m
            continue
        s = seq[t]
        r["fixed_design"] = {k: r.get(k) for k in _REPLACED}
        low, high = (s.ci_low if math.isfinite(s.ci_low) else None), (s.ci_high if math.isfinite(s.ci_high) else None)
        word = verdict(low, high, int(r["expected_sign"]), adj[t], alpha)
        r.update(p=s.p, p_adj=adj[t], p_family=adj[t], ci_low=low, ci_high=high, verdict=word, family_size=m,
                 e_value=s.e_value, n=s.n, detectable=resolvable_effect(s.sd, s.n, level, prior_sd, horizon),
                 detectable_level=level, interval="confidence sequence (safe t)",
                 detectable_basis="the smallest |mean difference| the sequential test rejects at Holm's first level",
                 size_verdict=None, size_band=None,
                 size_detail="not judged: a size verdict needs a fixed-design interval (docs/methods.md §14.1)")
        if r.get("verdict_before_log_check") and word not in FINDINGS:
            r.pop("verdict_before_log_check")
        if word in FINDINGS and r.get("log", {}).get("agrees") is False:
            r["verdict_before_log_check"], r["verdict"] = word, "inconclusive"
            r["verdict_note"] = (f"{word} sequentially, but the fixed-design log-ratio check disagrees: read as "
                                 f"inconclusive (docs/methods.md §9.6)")
    reference = f"the skew envelope up to {horizon} seeds" if horizon else "Ville's bound"
    condition = (f"per-seed differences within the skew envelope (normal, Student t 3, lognormal of log-SD up to 1) "
                 f"and at most {horizon} seeds per arm" if horizon else "normal per-seed differences")
    family = {**judged["family"], "size": m, "level": level, "tests": names, "method": SEQUENTIAL_METHOD,
              "calibration": f"sequential ({reference})", "condition": condition,
              "promise": (f"a study with no true effect prints a false finding in at most {alpha:.0%} of studies, "
                          f"however many stages looked at the card, when {condition} (docs/methods.md §14.1-14.2)"),
              "sequential": {"prior_sd": prior_sd, "horizon": horizon, "reference": reference, "fid_tests": list(seq)}}
    return {"family": family, "claims": [json_row(r) for r in rows]}


def json_row(r: dict[str, Any]) -> dict[str, Any]:
    """NumPy scalars as Python numbers (the row is written as JSON)."""
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in r.items()}
