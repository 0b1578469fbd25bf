"""Paired comparisons per study group and a verdict per paper claim (docs/methods.md §9).

Input: the tidy metrics table written by the results collection (one row per run x stage x
images seen x metric x tool, with the run's axes, ``seed``, ``groups`` and ``arm`` = the run id
without its seed). Output: plain dicts, ready for ``summary.json``/``verdicts.json`` and reports.

* :func:`compare_group`: within one group, every arm against the group's baseline arm, paired by
  seed: final-FID difference and log-FID difference with 95% t-intervals, Holm-adjusted p across
  the arms of the group, and the speed-up from progress curves (:func:`timestep_lab.stats.speedup`).
* :data:`GROUP_BASELINES` + :func:`study_comparisons`: :func:`compare_group` for every group
  of a study against its baseline arm (within each schedule for ``schedules``).
* :data:`CLAIMS` + :func:`judge_claims`: one verdict per claim: reproduced, contradicted,
  inconclusive (with the smallest effect this budget could detect) or not run (with what it needs).
* :func:`interference_effect`, :func:`consistency_effect`: the measured effect of the two
  analysis claims, read from the analyses' output dicts.

Knows nothing about Snakemake, files or plotting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from timestep_lab.stats import holm, paired, speedup, verdict

#: Sign of ``arm - baseline`` in final FID that a group's per-arm ``verdict`` tests: the arm lowers FID.
BETTER = -1

__all__ = ["Claim", "CLAIMS", "GROUP_BASELINES", "arm_of", "select_arm", "compare_group", "study_comparisons",
           "judge_claims", "interference_effect", "consistency_effect", "FID_TOOL_ORDER", "speedup_text"]

#: Which tool's FID is the headline when several measured the same samples.
FID_TOOL_ORDER = ("torch-fidelity", "clean-fid")


def arm_of(run_id: str, seed: Any) -> str:
    """The arm a run belongs to: its id without the ``_s<seed>`` component (runs of one arm
    differ only in seed, so paired comparisons join arms on seed)."""
    token = f"_s{seed}"
    i = run_id.find(token + "_")
    if i < 0 and run_id.endswith(token):
        i = len(run_id) - len(token)
    return run_id if i < 0 else run_id[:i] + run_id[i + len(token):]


def _fid(metrics: pd.DataFrame, stage: str) -> pd.DataFrame:
    fid = metrics[(metrics["stage"] == stage) & (metrics["metric"] == "fid")]
    for tool in FID_TOOL_ORDER:
        if (fid["tool"] == tool).any():
            return fid[fid["tool"] == tool]
    return fid


def _in_group(df: pd.DataFrame, group: str) -> pd.DataFrame:
    return df[df["groups"].fillna("").astype(str).str.split(";").apply(lambda gs: group in gs)]


def select_arm(df: pd.DataFrame, selector: Mapping[str, Any]) -> list[str]:
    """Arms of ``df`` whose rows match every ``column: value`` of ``selector``; the key ``arm~``
    matches a substring of the arm id (for arms told apart by overrides, e.g. momentum decay)."""
    mask = pd.Series(True, index=df.index)
    for key, value in selector.items():
        if key == "arm~":
            mask &= df["arm"].astype(str).str.contains(str(value), regex=False)
        elif key == "arm!~":  # one substring or a list of them, none may occur
            for v in ([value] if isinstance(value, str) else value):
                mask &= ~df["arm"].astype(str).str.contains(str(v), regex=False)
        else:
            mask &= df[key].astype(str) == str(value)
    return sorted(df.loc[mask, "arm"].unique())


def compare_group(metrics: pd.DataFrame, group: str, baseline: Mapping[str, Any]) -> dict[str, Any]:
    """Paired comparisons of every arm of ``group`` against the arm matching ``baseline``.

    :returns: ``{"group", "baseline", "seeds", "arms": {arm: {...}}, "comparisons": {arm: {"n",
        "diff", "ci_low", "ci_high", "p", "p_adj", "detectable", "log": {...}, "speedup": {...}}}}``;
        ``comparisons`` is empty when the baseline arm is missing or has no finished seed.
        Each comparison's ``verdict`` reads "reproduced" when the arm's final FID is lower than
        the baseline's (interval below 0 and Holm-adjusted p < 0.05), "contradicted" when higher.
    """
    final = _in_group(_fid(metrics, "final"), group)
    out: dict[str, Any] = {"group": group, "baseline": None, "arms": {}, "comparisons": {}}
    base_arms = select_arm(final, baseline) if len(final) else []
    if len(base_arms) != 1:
        out["note"] = f"baseline {dict(baseline)} matches {len(base_arms)} arms"
        return out
    base = out["baseline"] = base_arms[0]
    by_arm = {arm: dict(zip(d["seed"].astype(int), d["value"].astype(float))) for arm, d in final.groupby("arm")}
    for arm, fids in sorted(by_arm.items()):
        vals = list(fids.values())
        out["arms"][arm] = {"n": len(vals), "mean": sum(vals) / len(vals), "seeds": sorted(fids)}
    prog = _in_group(_fid(metrics, "progress"), group)
    curves = {(arm, int(seed)): (d.sort_values("kimg")["kimg"].tolist(), d.sort_values("kimg")["value"].tolist())
              for (arm, seed), d in prog.groupby(["arm", "seed"])} if len(prog) else {}
    stats = {}
    for arm, fids in sorted(by_arm.items()):
        if arm == base:
            continue
        seeds = sorted(set(fids) & set(by_arm[base]))
        b, a = [by_arm[base][s] for s in seeds], [fids[s] for s in seeds]
        row = {"seeds": seeds, **paired(b, a).as_dict(), "log": paired(b, a, log=True).as_dict()}
        # pair the final FID of the baseline's own run with the arm's progress curve; the
        # baseline's last progress point is replaced by nothing: its final FID is the target
        pairs = [(s, curves.get((base, s)), curves.get((arm, s))) for s in seeds]
        pairs = [(s, bc, ac) for s, bc, ac in pairs if bc and ac]
        if pairs:
            sp = speedup([bc for _, bc, _ in pairs], [ac for _, _, ac in pairs])
            row["speedup"] = {"value": sp.value, "ci_low": sp.ci_low, "ci_high": sp.ci_high, "bound": sp.bound,
                              "kimg_bound": sp.kimg_bound, "label": sp.label(), "n": len(pairs)}
        stats[arm] = row
    for arm, p_adj in zip(stats, holm([r["p"] for r in stats.values()])):
        stats[arm]["p_adj"] = p_adj
        stats[arm]["verdict"] = verdict(stats[arm]["ci_low"], stats[arm]["ci_high"], BETTER, p_adj)
    out["comparisons"] = stats
    out["seeds"] = sorted(by_arm[base])
    return out


def study_comparisons(metrics: pd.DataFrame, *, base_batch: int | None = None,
                      baselines: Mapping[str, tuple[Mapping[str, Any], str | None]] | None = None
                      ) -> dict[str, dict[str, Any]]:
    """:func:`compare_group` for every group of ``metrics`` that has a baseline in ``baselines``.

    Keyed by group, or ``"<group>/<column>=<value>"`` for a stratified group (each value of the
    column compared on its own, e.g. ``schedules/schedule=cosine``). Groups without a known
    baseline are left out; ``baselines`` defaults to :data:`GROUP_BASELINES`."""
    baselines = GROUP_BASELINES if baselines is None else baselines
    out: dict[str, dict[str, Any]] = {}
    if not len(metrics) or "groups" not in metrics:
        return out
    present = sorted({g for gs in metrics["groups"].fillna("").astype(str) for g in gs.split(";") if g})
    for group in present:
        if group not in baselines:
            continue
        selector, column = baselines[group]
        selector = _resolve(selector, _in_group(metrics, group), base_batch)
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


def consistency_effect(analysis: Mapping[str, Any] | None, space: str = "pixel") -> dict[str, Any] | None:
    """The consistency claim's effect from ``consistency.json``: over the model pairs, the mean of
    ``paired - unpaired`` sample distance (``space`` pixel or feature), with a 95% t-interval over
    pairs (pairs share models, so the interval is optimistic; docs/methods.md §9.5)."""
    test = ((analysis or {}).get(space) or {}).get("test")
    if test and test.get("n"):  # the test over models (studies/consistency.py): n counts models, not pairs
        return {**test, "units": f"{space} distance, paired - unpaired (jackknife over models)"}
    pairs = [p for p in (analysis or {}).get("pairs", []) if p.get(space)]
    if not pairs:
        return None
    res = paired([p[space]["unpaired"] for p in pairs], [p[space]["paired"] for p in pairs])
    ratio = [p[space]["ratio"] for p in pairs if p[space].get("ratio") is not None]
    return {**res.as_dict(), "p_adj": res.p, "units": f"{space} distance", "pairs": len(pairs),
            "mean_ratio": sum(ratio) / len(ratio) if ratio else math.nan}


@dataclass(frozen=True)
class Claim:
    """One published claim and how this study tests it.

    ``kind="fid"``: the final-FID difference ``arm - baseline`` in ``group`` should have sign
    ``expected_sign`` (-1: the arm reaches a lower FID). ``kind="analysis"``: ``judge`` reads a
    measured effect ``{"diff", "ci_low", "ci_high", "detectable", "n"}`` from the analyses dict.
    A claim whose inputs are absent is "not run", with ``needs`` saying what would run it.
    """

    id: str
    paper: str
    statement: str
    kind: str = "fid"
    group: str = ""
    arm: Mapping[str, Any] = field(default_factory=dict)
    baseline: Mapping[str, Any] = field(default_factory=dict)
    expected_sign: int = -1
    needs: str = ""
    analysis: str = ""


SEED = "Xie & Agam 2025 (2502.01990)"
SPEED = "SpeeD (2405.17403)"
ADAPTIVE = "Kim et al. 2024 (2411.09998)"
CONSISTENCY = "Consistency (2404.07946)"
UNIFORM = {"sampler": "uniform", "weighting": "none"}
#: the consistency group's plain arm: no optimizer-schedule override (``_opt...``) and the base width (``_ch...``)
CONSTANT_BASE = {"arm!~": ["_opt", "_ch"]}

#: Per group: the baseline arm every other arm is compared with, and the column whose values are
#: compared separately (``schedules``: uniform vs the others within each noise schedule).
GROUP_BASELINES: dict[str, tuple[dict[str, Any], str | None]] = {
    "sampler_comparison": (UNIFORM, None),
    "schedules": (UNIFORM, "schedule"),
    "prediction_types": ({"prediction": "eps"}, None),
    "batch_size": ({"batch_size": "{base}"}, None),
    "consistency": (CONSTANT_BASE, None),
}

def _sampler_claim(claim_id: str, paper: str, statement: str, sampler: str, weighting: str = "none") -> Claim:
    """A sampler-comparison claim: the arm ``sampler + weighting`` lowers final FID against uniform."""
    spelled = f"sampler {sampler}" + (f" + weighting {weighting}" if weighting != "none" else "")
    return Claim(claim_id, paper, statement, group="sampler_comparison",
                 arm={"sampler": sampler, "weighting": weighting}, baseline=UNIFORM,
                 needs=f"groups.sampler_comparison with {spelled}")


CLAIMS: tuple[Claim, ...] = (
    _sampler_claim("speed_faster", SPEED, "asymmetric sampling + change-aware weighting beats uniform at equal images",
                   "speed", "speed"),
    _sampler_claim("speed_sampling_alone", SPEED, "asymmetric timestep sampling alone beats uniform", "speed"),
    _sampler_claim("adaptive_faster", ADAPTIVE, "the learned Beta timestep sampler beats uniform", "adaptive"),
    _sampler_claim("clts_faster", CONSISTENCY, "the curriculum timestep schedule (CLTS) beats uniform", "clts"),
    Claim("momentum_decay", CONSISTENCY, "decaying Adam's beta1 during training lowers FID",
          group="consistency", arm={"arm~": "momentum-decay", "arm!~": "compensate"}, baseline=CONSTANT_BASE,
          needs="groups.consistency with momentum_decay entries (paired seeds)"),
    Claim("momentum_decay_compensated", CONSISTENCY, "momentum decay with the SGD-style lr compensation "
          "(lr falls with 1 - beta1: a confounded variant) lowers FID",
          group="consistency", arm={"arm~": "compensate"}, baseline=CONSTANT_BASE,
          needs="groups.consistency with momentum_decay entries with compensate: true"),
    Claim("mixed_heads", SEED, "a mixed x0/eps prediction head beats eps prediction",
          group="prediction_types", arm={"prediction": "mixed"}, baseline={"prediction": "eps"},
          needs="groups.prediction_types with prediction mixed"),
    # 2502.01990 Sec. 1 / Fig. 1: with a small batch and proportionally more steps (the same
    # number of samples per timestep) "the final model achieves a poor performance": FID goes up
    Claim("small_batch", SEED, "a small batch trains worse than a large one at equal images seen",
          # the plain small-batch run, not its retraining toward t = 0 nor its uniform continuation (batch-sized small too)
          group="batch_size", arm={"batch_size": "{smallest}", "arm!~": ["toward_zero", "_from-"]},
          baseline={"batch_size": "{base}"},
          expected_sign=+1, needs="groups.batch_size with two batch sizes"),
    Claim("slot_interference", SEED, "fine-tuning one slot raises the other slots' loss more than "
          "fine-tuning on uniform t does", kind="analysis", analysis="interference", expected_sign=+1,
          needs="analyses.slots.finetune with a uniform control"),
    Claim("same_noise_same_image", CONSISTENCY, "models trained from different seeds map the same noise to "
          "close images (paired distance below unpaired)", kind="analysis", analysis="consistency",
          expected_sign=-1, needs="groups.consistency and analyses.consistency"),
    Claim("table1_pretrained", SEED, "Table 1: slot fine-tuning of the guided-diffusion ImageNet-256 model (Sec. 2.1)",
          kind="analysis", analysis="table1",
          needs="the guided-diffusion ImageNet-256 unconditional checkpoint as reference.pretrained (config/imagenet.yaml)"),
)


def _resolve(selector: Mapping[str, Any], df: pd.DataFrame, base_batch: int | None) -> dict[str, Any]:
    sizes = sorted({int(b) for b in df["batch_size"].dropna()}) if "batch_size" in df and len(df) else []
    fill = {"{smallest}": sizes[0] if sizes else None, "{base}": base_batch}
    return {k: fill.get(v, v) if isinstance(v, str) else v for k, v in selector.items()}


def _verdict_row(claim: Claim, effect: Mapping[str, Any] | None, **extra: Any) -> dict[str, Any]:
    row = {"id": claim.id, "paper": claim.paper, "claim": claim.statement, **extra}
    if not effect or not effect.get("n"):
        return {**row, "verdict": "not run", "needs": claim.needs}
    v = verdict(effect.get("ci_low"), effect.get("ci_high"), claim.expected_sign, effect.get("p_adj"))
    row.update({k: effect.get(k, math.nan) for k in ("n", "diff", "ci_low", "ci_high", "p_adj", "detectable")})
    row["units"] = effect.get("units") or ("final FID, arm - baseline" if claim.kind == "fid" else "")
    row["verdict"] = v
    return row


def speedup_text(sp: Mapping[str, Any] | None) -> str | None:
    """``"1.84x [1.21, 2.80] (5 seeds)"``, ``">3.00x (censored, 5 seeds)"``; None without curves."""
    if not sp or sp.get("label") in (None, "n/a"):
        return None
    lo, hi = sp.get("ci_low"), sp.get("ci_high")
    finite = lo is not None and hi is not None and math.isfinite(lo) and math.isfinite(hi)
    interval = f" [{lo:.2f}, {hi:.2f}]" if finite else ""
    n = sp.get("n")
    return f"{sp['label']}{interval} ({'censored, ' if sp.get('bound') else ''}{n} seed{'' if n == 1 else 's'})"


def judge_claims(metrics: pd.DataFrame, analyses: Mapping[str, Mapping[str, Any]] | None = None, *,
                 base_batch: int | None = None, claims: Sequence[Claim] = CLAIMS,
                 compare: Callable[..., dict[str, Any]] = compare_group) -> list[dict[str, Any]]:
    """One verdict row per claim (see :class:`Claim`); ``analyses`` maps an analysis name to its
    measured effect dict; ``base_batch`` is the study's base ``train.batch_size``."""
    analyses = analyses or {}
    rows, cache = [], {}
    for claim in claims:
        if claim.kind == "analysis":
            rows.append(_verdict_row(claim, analyses.get(claim.analysis)))
            continue
        final = _in_group(_fid(metrics, "final"), claim.group) if len(metrics) else metrics
        if not len(final):
            rows.append(_verdict_row(claim, None))
            continue
        baseline = _resolve(claim.baseline, final, base_batch)
        arms = select_arm(final, _resolve(claim.arm, final, base_batch))
        key = (claim.group, repr(sorted(baseline.items())))
        if key not in cache:
            cache[key] = compare(metrics, claim.group, baseline)
        comp = cache[key]["comparisons"]
        arm = next((a for a in arms if a in comp), None)
        rows.append(_verdict_row(claim, comp.get(arm) if arm else None, group=claim.group, arm=arm,
                                 baseline=cache[key]["baseline"],
                                 speedup=speedup_text((comp.get(arm) or {}).get("speedup"))))
    return rows
