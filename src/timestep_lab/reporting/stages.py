"""The index's lines on a budgeted study's stages (docs/methods.md §14.5): how it was judged, what
each stage spent, why it stopped, and what each open claim would still need.

Reads the plan files the workflow's checkpoint wrote (:func:`timestep_lab.workflow.stages.read_plan`),
in stage order; the last one says why the study stopped.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from timestep_lab.workflow.stages import MAX_STAGES, StagePlan, read_plan

__all__ = ["STOP_TEXT", "stage_lines", "read_stage_plans"]

#: why a study stopped, as the index says it
STOP_TEXT = {
    "all resolved": "every claim it can judge is resolved (reproduced or contradicted)",
    "budget": "the budget is spent: what is left pays for no further seed of any open claim",
    "no claim can resolve within the budget": "nothing more can resolve within the budget: no open claim's remaining "
                                              "need fits in what is left, or none can resolve by max_seeds",
    MAX_STAGES: "the maximum number of stages (budget.max_stages) is reached",
}


def read_stage_plans(paths: Sequence[str]) -> list[StagePlan]:
    """The plans in stage order (1, 2, ...)."""
    return sorted((read_plan(str(p)) for p in paths), key=lambda p: p.stage)


def _need_text(need: Mapping[str, Any], unit: str) -> str:
    """What an open claim still needs, as the end of the sentence "Still open: <claim> (<verdict>) ..."."""
    if need.get("seeds") is not None and need.get("cost") is not None:
        text = f"would need {need['seeds']} paired seeds, {need['cost']:.3g} {unit} more"
        return text + ("" if need.get("served") or not need.get("why") else f" ({need['why']})")
    return f"cannot resolve here: {need.get('why') or 'no seed target'}"


def stage_lines(plans: Sequence[StagePlan], verdicts: Mapping[str, Any]) -> list[str]:
    """The index's lines for ``plans`` (every plan written, in stage order) and the study's verdicts."""
    if not plans:
        return []
    last = plans[-1]
    fam = (verdicts.get("family") or {}).get("sequential") or {}
    lines = [f"Sequential design (docs/methods.md §14): the verdicts on final FID are the safe t-test's anytime-valid "
             f"p-values (referred to {fam.get('reference', 'the skew envelope')}) and confidence sequences, "
             f"Holm-adjusted across the family, valid although the card was looked at after each of its "
             f"{len(plans)} stage(s); the fixed design's numbers are kept in verdicts.json under fixed_design."]
    spent = list(last.spent)
    per = "; ".join(f"stage {k}: {v:.3g}" for k, v in enumerate(spent))
    lines.append(f"Spent (priced by the estimate, in {last.unit}): {per}; total {sum(spent):.3g} of the budget's "
                 f"{last.amount:g}.")
    for p in plans[:-1]:
        lines.append(f"Stage {p.stage} added {len(p.new_runs)} run(s) for {len(p.served)} open comparison(s): "
                     + (", ".join(p.new_runs) if p.new_runs else "none") + ".")
    lines.append(f"Stopped after stage {last.stage - 1}: {STOP_TEXT.get(last.stop or '', last.stop)}.")
    verdict_of = {r.get("id"): r.get("verdict") for r in verdicts.get("claims") or []}
    for cid, need in last.needs.items():
        if verdict_of.get(cid) in ("reproduced", "contradicted"):
            continue
        lines.append(f"Still open: {cid} ({verdict_of.get(cid, 'not judged')}) {_need_text(need, last.unit)}.")
    return lines
