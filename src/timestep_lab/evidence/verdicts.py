"""Paired comparisons per study group, and the claims measured and judged (docs/methods.md §9).

Input: the tidy metrics table written by the results collection (one row per run x stage x
images seen x metric x tool, with the run's axes, ``seed``, ``groups`` and ``arm`` = the run id
without its seed). Output: plain dicts, ready for ``summary.json``/``verdicts.json`` and reports.

* :func:`compare_group`: within one group, every arm against the group's baseline arm, paired by
  seed: final-FID difference and log-FID difference with 95% t-intervals, Holm-adjusted p across
  the arms of the group (the group reports' adjustment), and the per-seed, censored speed-up from
  progress curves (:func:`timestep_lab.evidence.stats.speedup`).
* :data:`GROUP_BASELINES` + :func:`study_comparisons`: :func:`compare_group` for every group
  of a study against its baseline arm (within each schedule for ``schedules``).
* :func:`regime`: how far the study trained: the baseline's final FID beside the floor (the
  held-out split's FID), the training length, and whether the baseline's FID has stopped falling.
* :func:`judge_claims`: the claims of :mod:`timestep_lab.claims` measured (the comparison each
  reads, its regime) and judged as one family (:func:`timestep_lab.evidence.family.judge_family`).
* :func:`interference_effect`, :func:`consistency_effect`: the measured effect of the two
  analysis claims, read from the analyses' output dicts.

Knows nothing about Snakemake, files or plotting.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import special as spf

from timestep_lab.artifacts.floor import floor_record, headline_tool
from timestep_lab.claims import CLAIMS, Claim
from timestep_lab.evidence.calibration import DEFAULT_CALIBRATION
from timestep_lab.evidence.convergence import PLATEAU_DROP, plateau, span_text
from timestep_lab.evidence.family import ALPHA, judge_family
from timestep_lab.evidence.jackknife import models_vs_control
from timestep_lab.evidence.stats import Speedup, holm, paired, speedup, verdict
from timestep_lab.groups import baselines

#: Sign of ``arm - baseline`` in final FID that a group's per-arm ``verdict`` tests: the arm lowers FID.
BETTER = -1

__all__ = ["Claim", "CLAIMS", "GROUP_BASELINES", "select_arm", "final_fids", "study_final_fids", "compare_group",
           "study_comparisons", "judge_claims", "claim_baseline", "interference_effect", "consistency_effect", "speedup_text",
           "regime", "resolve_selector"]


#: Per group: the baseline arm every other arm is compared with, and the column whose values are
#: compared separately (``schedules``: uniform vs the others within each noise schedule); from the
#: study groups' records (:mod:`timestep_lab.groups`).
GROUP_BASELINES: dict[str, tuple[Mapping[str, Any], str | None]] = baselines()


def _fid(metrics: pd.DataFrame, stage: str) -> pd.DataFrame:
    """The FID rows of ``stage`` measured by the headline tool."""
    fid = metrics[(metrics["stage"] == stage) & (metrics["metric"] == "fid")]
    return fid[fid["tool"] == headline_tool(fid["tool"].unique())] if len(fid) else fid


def _in_group(df: pd.DataFrame, group: str) -> pd.DataFrame:
    return df[df["groups"].fillna("").astype(str).str.split(";").apply(lambda gs: group in gs)]


def _same(column: pd.Series, value: Any) -> pd.Series:
    """``column == value`` as the run table's values are read back from CSV: numbers by value (a
    width column with an empty cell reads 16.0), the rest (names, booleans) by their text."""
    if not isinstance(value, bool):
        try:
            return pd.to_numeric(column, errors="coerce") == float(value)
        except (TypeError, ValueError):
            pass
    return column.astype(str) == str(value)


def select_arm(df: pd.DataFrame, selector: Mapping[str, Any]) -> list[str]:
    """Arms of ``df`` whose rows match every ``column: value`` of ``selector``: the run axes and the
    columns that tell arms apart beyond them (:data:`timestep_lab.workflow.runs.ARM_COLUMNS`; the
    run table carries them). A column the table lacks matches nothing: a selector is never ignored."""
    mask = pd.Series(True, index=df.index)
    for key, value in selector.items():
        mask &= _same(df[key], value) if key in df else False
    return sorted(df.loc[mask, "arm"].unique())


def final_fids(final: pd.DataFrame) -> dict[str, dict[int, float]]:
    """``{arm: {seed: final FID}}`` of FID rows (``_fid(metrics, "final")``, a group's or all); a
    failed score (non-finite) is missing data, not a value."""
    finite = final[np.isfinite(final["value"].astype(float))] if len(final) else final
    return {arm: dict(zip(d["seed"].astype(int), d["value"].astype(float))) for arm, d in finite.groupby("arm")} \
        if len(finite) else {}


def study_final_fids(metrics: pd.DataFrame) -> dict[str, dict[int, float]]:
    """:func:`final_fids` of every arm of the study (the headline tool's final FID)."""
    return final_fids(_fid(metrics, "final")) if len(metrics) else {}


def compare_group(metrics: pd.DataFrame, group: str, baseline: Mapping[str, Any]) -> dict[str, Any]:
    """Paired comparisons of every arm of ``group`` against the arm matching ``baseline``.

    :returns: ``{"group", "baseline", "seeds", "arms": {arm: {"n", "mean", "seeds"}}, "comparisons":
        {arm: {"seeds", "n", "diff", "sd", "ci_low", "ci_high", "p", "p_adj", "detectable", "alpha",
        "log": {...}, "speedup": {...}}}}``; ``comparisons`` is empty when the baseline arm is missing
        or has no finished seed. Only seeds with a finite FID count (``seeds``, ``n``, ``mean``).
        ``p_adj`` is Holm across the arms of this group, ``detectable`` at that level (``alpha`` =
        0.05 / arms) and each comparison's ``verdict`` reads "reproduced" when the arm's final FID is
        lower than the baseline's (interval below 0 and ``p_adj`` < 0.05), "contradicted" when higher.
    """
    final = _in_group(_fid(metrics, "final"), group)
    out: dict[str, Any] = {"group": group, "baseline": None, "arms": {}, "comparisons": {}}
    base_arms = select_arm(final, baseline) if len(final) else []
    if len(base_arms) != 1:
        out["note"] = f"baseline {dict(baseline)} matches {len(base_arms)} arms"
        return out
    base = out["baseline"] = base_arms[0]
    by_arm = final_fids(final)
    for arm, fids in sorted(by_arm.items()):
        vals = list(fids.values())
        out["arms"][arm] = {"n": len(vals), "mean": sum(vals) / len(vals), "seeds": sorted(fids)}
    out["seeds"] = sorted(by_arm.get(base, {}))
    if base not in by_arm:
        return out
    prog = _in_group(_fid(metrics, "progress"), group)
    curves = {(arm, int(seed)): (d.sort_values("kimg")["kimg"].tolist(), d.sort_values("kimg")["value"].tolist())
              for (arm, seed), d in prog.groupby(["arm", "seed"])} if len(prog) else {}
    others = [arm for arm in sorted(by_arm) if arm != base]
    alpha = ALPHA / max(1, len(others))  # the level the group's Holm verdict needs of its first comparison
    stats = {}
    for arm in others:
        fids = by_arm[arm]
        seeds = sorted(set(fids) & set(by_arm[base]))
        b, a = [by_arm[base][s] for s in seeds], [fids[s] for s in seeds]
        row = {"seeds": seeds, **paired(b, a, alpha=alpha).as_dict(), "log": paired(b, a, log=True, alpha=alpha).as_dict()}
        # the level each seed's arm must reach is the baseline's FID at its *last progress point*
        # (same sample count and protocol as the arm's curve), not its final FID
        pairs = [(s, curves.get((base, s)), curves.get((arm, s))) for s in seeds]
        pairs = [(s, bc, ac) for s, bc, ac in pairs if bc and ac]
        if pairs:
            row["speedup"] = speedup_dict(speedup([bc for _, bc, _ in pairs], [ac for _, _, ac in pairs],
                                                  seeds=[s for s, _, _ in pairs]))
        stats[arm] = row
    for arm, p_adj in zip(stats, holm([r["p"] for r in stats.values()])):
        stats[arm]["p_adj"] = p_adj
        stats[arm]["verdict"] = verdict(stats[arm]["ci_low"], stats[arm]["ci_high"], BETTER, p_adj)
    out["comparisons"] = stats
    return out


def speedup_dict(sp: Speedup) -> dict[str, Any]:
    """A :class:`~timestep_lab.evidence.stats.Speedup` for JSON: value, interval, bounds, label, ``n`` (seeds
    kept), ``sd_log`` (SD of the per-seed log ratios; NaN when censored or n < 2) and ``per_seed``
    (every seed's level, kimg to reach it, ratio and censoring; dropped seeds with the reason)."""
    logs = np.log(np.asarray(sp.per_seed, dtype=np.float64)) if sp.per_seed else np.array([])
    sd_log = float(logs.std(ddof=1)) if logs.size >= 2 and not sp.bound else math.nan
    return {"value": sp.value, "ci_low": sp.ci_low, "ci_high": sp.ci_high, "bound": sp.bound,
            "kimg_bound": sp.kimg_bound, "label": sp.label(), "n": len(sp.per_seed), "sd_log": sd_log,
            "per_seed": [r.as_dict() for r in sp.seeds]}


def study_comparisons(metrics: pd.DataFrame, *, base: Mapping[str, Any] | None = None,
                      baselines: Mapping[str, tuple[Mapping[str, Any], str | None]] | None = None
                      ) -> dict[str, dict[str, Any]]:
    """:func:`compare_group` for every group of ``metrics`` that has a baseline in ``baselines``.

    Keyed by group, or ``"<group>/<column>=<value>"`` for a stratified group (each value of the
    column compared on its own, e.g. ``schedules/schedule=cosine``). Groups without a known
    baseline are left out; ``baselines`` defaults to :data:`GROUP_BASELINES`; ``base``: the study's
    own column values, what a selector's ``"{base}"`` stands for
    (:func:`timestep_lab.workflow.runs.base_columns`)."""
    baselines = GROUP_BASELINES if baselines is None else baselines
    out: dict[str, dict[str, Any]] = {}
    if not len(metrics) or "groups" not in metrics:
        return out
    present = sorted({g for gs in metrics["groups"].fillna("").astype(str) for g in gs.split(";") if g})
    for group in present:
        if group not in baselines:
            continue
        selector, column = baselines[group]
        selector = resolve_selector(selector, _in_group(metrics, group), base)
        if column is None or column not in metrics:
            out[group] = compare_group(metrics, group, selector)
            continue
        rows = _in_group(metrics, group)
        for value in sorted(rows[column].dropna().astype(str).unique()):
            sub = metrics[metrics[column].astype(str) == value]
            out[f"{group}/{column}={value}"] = compare_group(sub, group, {**selector, column: value})
    return out


def interference_effect(analysis: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The slot-interference claim's effect from ``interference_control.json``
    (:func:`timestep_lab.studies.interference.interference_vs_control`): the paired difference
    over seeds of the mean off-diagonal relative loss change, slot fine-tune minus uniform control."""
    if not analysis or not analysis.get("off_diagonal"):
        return None
    units = analysis["off_diagonal"].get("units") or "relative loss change of the other slots, slot fine-tune - control"
    return {**analysis["off_diagonal"], "units": units}


#: The closed-form control the consistency claim is tested against: the Gaussian denoiser, the
#: "same early solution" every network passes through (docs/methods.md §4.1).
CONSISTENCY_CONTROL = "gaussian"


def consistency_effect(analysis: Mapping[str, Any] | None, space: str = "pixel",
                       control: str = CONSISTENCY_CONTROL) -> dict[str, Any] | None:
    """The consistency claim's effect from ``consistency.json``, models against the closed-form
    ``control`` (issue 42; docs/methods.md §9.5): over model pairs, ``log(paired/unpaired)`` of the
    pair minus the mean of its two models' ``log(paired/unpaired)`` against the control
    (:func:`timestep_lab.evidence.jackknife.models_vs_control`), negative when the models agree on
    a noise more than the control's own solution explains. ``n`` counts models; ``sd`` is the
    jackknife SE times sqrt(n), so the family's calibration refers ``diff / SE`` like any paired
    test. ``paired_unpaired``: the test before (paired - unpaired, permutation p), which the
    control itself passes, kept as a description. None without the control's samples (a file
    written before, with neither ``models_vs_control`` nor the per-pair ratios, too)."""
    block = (analysis or {}).get(space) or {}
    ctrl = (block.get("controls") or {}).get(control)
    if not ctrl:
        return None
    mvc = ctrl.get("models_vs_control")
    if mvc is None:  # a consistency.json written before issue 42: the same contrast from its pairs' ratios
        ratios = {(p["a"], p["b"]): (p.get(space) or {}).get("ratio") for p in (analysis or {}).get("pairs", [])}
        names = list((analysis or {}).get("models") or ctrl.get("ratio") or {})
        if not ratios or any(r is None for r in ratios.values()) or not set(ctrl.get("ratio") or {}) >= set(names):
            return None
        mvc = models_vs_control(names, ratios, ctrl["ratio"])
    n, se = int(mvc.get("n") or 0), mvc.get("se")
    if n < 3 or se is None or not math.isfinite(float(mvc["diff"])):
        return None
    test = block.get("test") or {}
    diff = float(mvc["diff"])
    p = float(2 * spf.stdtr(n - 1, -abs(diff) / float(se))) if float(se) > 0 else math.nan  # Student t, kept as t_test
    return {"n": n, "diff": diff, "sd": float(se) * math.sqrt(n), "se": float(se),
            "ci_low": mvc.get("ci_low"), "ci_high": mvc.get("ci_high"), "p": p, "control": control,
            "units": f"{space} log(paired/unpaired) ratio, model pair - its models against the {control} control "
                     "(jackknife over models)",
            "paired_unpaired": {k: test.get(k) for k in ("diff", "ci_low", "ci_high", "p", "paired", "unpaired", "n")}}


def resolve_selector(selector: Mapping[str, Any], df: pd.DataFrame, base: Mapping[str, Any] | None) -> dict[str, Any]:
    """``selector`` with its placeholders filled per column: ``"{base}"`` the study's own value of
    the column (``base``), ``"{smallest}"`` the smallest value the column takes in ``df``."""
    out = {}
    for key, value in selector.items():
        if value == "{base}":
            value = (base or {}).get(key)
        elif value == "{smallest}":
            values = pd.to_numeric(df[key], errors="coerce").dropna() if key in df and len(df) else pd.Series([], dtype=float)
            value = int(values.min()) if len(values) else None
        out[key] = value
    return out


def speedup_text(sp: Mapping[str, Any] | None) -> str | None:
    """``"1.84x [1.21, 2.80] (5 seeds)"``, ``">3.00x (censored, 5 seeds)"``, ``"n/a: censored both
    ways (2 seeds before the first point, 1 never; 5 seeds)"``; None without curves."""
    if sp and sp.get("bound") == "both":
        per = sp.get("per_seed") or []
        early, never = (sum(r.get("censoring") == c for r in per) for c in ("early", "never"))
        return f"n/a: censored both ways ({early} seed{'' if early == 1 else 's'} before the first point, " \
               f"{never} never; {sp.get('n')} seeds)"
    if not sp or sp.get("label") in (None, "n/a"):
        return None
    lo, hi = sp.get("ci_low"), sp.get("ci_high")
    finite = lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
    interval = f" [{lo:.2f}, {hi:.2f}]" if finite else ""
    n = sp.get("n")
    return f"{sp['label']}{interval} ({'censored, ' if sp.get('bound') else ''}{n} seed{'' if n == 1 else 's'})"


def regime(metrics: pd.DataFrame, baseline_arm: str, seeds: Sequence[int], floor: Mapping[str, Any] | None = None
           ) -> dict[str, Any]:
    """How far the runs of a comparison trained (docs/methods.md §9.7).

    ``baseline_fid``: the baseline arm's mean final FID over ``seeds`` (headline tool);
    ``train_kimg``: its images seen; ``floor``: the held-out split's FID against the same reference
    (:func:`floor_record`), ``floor_ratio`` = baseline_fid / floor; ``plateau``: per seed, the
    baseline's FID at its last progress point over its FID at the point nearest 2/3 of the way,
    geometric mean over seeds as ``drop`` = 1 - ratio; ``converged``: ``drop < PLATEAU_DROP``
    (None without a progress curve), which decides whether a claim about convergence is judged.
    """
    final = _fid(metrics, "final")
    final = final[(final["arm"] == baseline_arm) & final["seed"].astype(int).isin(list(seeds))]
    vals = final["value"].astype(float)
    tool = str(final["tool"].iloc[0]) if len(final) else None
    out: dict[str, Any] = {"baseline_fid": float(vals[np.isfinite(vals)].mean()) if len(vals) else math.nan,
                           "train_kimg": float(final["kimg"].max()) if len(final) else math.nan,
                           "floor": floor_record(floor, tool), "plateau": None, "converged": None}
    f = out["floor"]
    out["floor_ratio"] = out["baseline_fid"] / f["value"] if f and f.get("value") else math.nan
    prog = _fid(metrics, "progress")
    prog = prog[(prog["arm"] == baseline_arm) & prog["seed"].astype(int).isin(list(seeds))]
    out["plateau"] = plateau([(d["kimg"].astype(float).tolist(), d["value"].astype(float).tolist())
                              for _, d in prog.groupby("seed")])
    p = out["plateau"]
    if p is None:
        out["convergence_note"] = ("no progress curve for the baseline arm: whether its training has converged is "
                                   "unknown, so a claim about the converged model is not judged")
        return out
    out["converged"] = p.pop("converged")
    out["convergence_note"] = (
        f"the baseline's FID fell {p['drop']:.0%} over {span_text(p['from_kimg'], p['to_kimg'])} of training "
        f"({p['from_kimg']:g} -> "
        f"{p['to_kimg']:g} kimg, mean of {p['seeds']} seeds)"
        + (f", less than {PLATEAU_DROP:.0%}: judged as converged" if out["converged"]
           else f", not under {PLATEAU_DROP:.0%}: a claim about the converged model is not judged at this length"))
    return out


def _measured(claim: Claim, effect: Mapping[str, Any] | None, **extra: Any) -> dict[str, Any]:
    """The claim's record with its measured effect (no verdict yet: :func:`judge_family` gives it)."""
    rec = claim.record()
    rec["arm_selector"], rec["baseline_selector"] = rec.pop("arm"), rec.pop("baseline")
    row = {**rec, "paper": claim.paper, "claim": claim.statement, **extra}
    if not effect or not effect.get("n"):
        return row
    row.update({k: effect.get(k, math.nan) for k in ("n", "diff", "sd", "ci_low", "ci_high", "p")})
    row.update({k: effect[k] for k in ("se", "p_method", "p_note", "control", "paired_unpaired")
                if effect.get(k) is not None})
    row["units"] = effect.get("units") or ("final FID, arm - baseline" if claim.kind == "fid" else "")
    if claim.kind == "fid" and effect.get("log"):
        row["log"] = {k: effect["log"].get(k, math.nan) for k in ("n", "diff", "sd", "ci_low", "ci_high", "p")}
    return row


def claim_baseline(claim: Claim, metrics: pd.DataFrame, base: Mapping[str, Any] | None = None
                   ) -> tuple[pd.DataFrame, dict[str, Any]] | None:
    """The final-FID rows of a FID ``claim``'s group (headline tool) and its baseline selector with
    ``"{base}"`` resolved; None for an analysis claim or a group without rows. The one place both
    :func:`judge_claims` and ``collect`` (:func:`timestep_lab.evidence.comparisons.claim_comparisons`)
    resolve it, so the comparison one stores is the one the other reads."""
    if claim.kind == "analysis":
        return None
    final = _in_group(_fid(metrics, "final"), claim.group) if len(metrics) else metrics
    if not len(final):
        return None
    return final, resolve_selector(claim.baseline, final, base)


def judge_claims(metrics: pd.DataFrame, analyses: Mapping[str, Mapping[str, Any]] | None = None, *,
                 base: Mapping[str, Any] | None = None, claims: Sequence[Claim] = CLAIMS,
                 compare: Callable[..., dict[str, Any]] = compare_group,
                 floor: Mapping[str, Any] | None = None, alpha: float = ALPHA,
                 calibration: str = DEFAULT_CALIBRATION) -> dict[str, Any]:
    """Every claim measured and judged as one family.

    ``analyses`` maps an analysis name to its measured effect dict; ``base`` the study's own column
    values (:func:`timestep_lab.workflow.runs.base_columns`: batch size, width, length, ...); ``floor`` the study's
    ``floor.json``. Each FID claim reads the
    paired comparison of its arm against its group's baseline (:func:`compare_group`), its
    within-group Holm p as ``p_group``, its speed-up and its :func:`regime`. ``calibration``: the
    entry of :data:`timestep_lab.evidence.calibration.CALIBRATIONS` the family's tests are referred to.

    :returns: :func:`timestep_lab.evidence.family.judge_family`'s ``{"family", "claims"}``, one row per claim
        in ``claims`` order with every field of the claim's record.
    """
    analyses = analyses or {}
    rows, cache = [], {}
    for claim in claims:
        if claim.kind == "analysis":
            effect = analyses.get(claim.analysis)
            rows.append(_measured(claim, effect, test=f"analysis:{claim.analysis}" if effect else None))
            continue
        found = claim_baseline(claim, metrics, base)
        if found is None:
            rows.append(_measured(claim, None, test=None))
            continue
        final, baseline = found
        arms = select_arm(final, resolve_selector(claim.arm, final, base))
        key = (claim.group, repr(sorted(baseline.items())))
        if key not in cache:
            cache[key] = compare(metrics, claim.group, baseline)
        comp = cache[key]["comparisons"]
        arm = next((a for a in arms if a in comp), None)
        effect = comp.get(arm) if arm else None
        base_arm = cache[key]["baseline"]
        extra: dict[str, Any] = {"group": claim.group, "arm": arm, "baseline": base_arm,
                                 "test": f"{claim.group}:{arm}:{base_arm}" if arm and base_arm else None}
        if effect:
            sp = effect.get("speedup")
            extra.update(p_group=effect.get("p_adj"), seeds=effect.get("seeds"), speedup=speedup_text(sp),
                         speedup_detail=sp, regime=regime(metrics, base_arm, effect.get("seeds") or [], floor))
        rows.append(_measured(claim, effect, **extra))
    return judge_family(rows, alpha=alpha, calibration_name=calibration)
