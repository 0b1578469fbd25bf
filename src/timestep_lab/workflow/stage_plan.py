"""The decision between two stages of a budgeted study: stage k's verdicts in, stage k+1's plan out.

:func:`plan_next` reads what the workflow's checkpoint gives it (docs/methods.md §14.5):

* ``verdicts``: stage ``k``'s ``verdicts.json`` (judged sequentially): per claim its comparison
  (``test``), arm, baseline, paired seeds ``n``, mean difference, SD, detectable effect and verdict;
* ``costs``: the estimate's prices (``estimate.json``'s ``sequential`` block,
  :mod:`timestep_lab.cost.estimate.sequential`): ``first_look`` (what stage 0 costs),
  ``seed_cost[arm]`` (one more seed of an arm), the ``device`` they are priced on (the budget's
  own: anything else is refused) and its ``unit``;
* the budget, the arms' runs in seed order (:func:`timestep_lab.workflow.stages.arm_runs`), the
  staged runs of stage 0 and the previous plan (None after stage 0);

and returns the :class:`~timestep_lab.workflow.stages.StagePlan` of stage ``k + 1``: the planner's
(:func:`timestep_lab.evidence.planner.plan_stage`) seeds turned into run ids, what each stage cost,
every open claim's need and, when nothing more is planned, why. One claim per distinct comparison
enters the planner (two claims on one comparison are one test of the family); each claim id reads
its comparison's need, except a claim the regime check holds back, which needs longer runs
(:func:`claim_states`). Longer training is not staged by the workflow (§14.5): a claim "not judged
at this length" needs what the planner says of a run at its longest.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Mapping, Sequence

from timestep_lab.artifacts.io import ArtifactError
from timestep_lab.config import BudgetConfig
from timestep_lab.evidence.family import FINDINGS
from timestep_lab.evidence.planner import ALL_RESOLVED, UNREACHABLE, ClaimState, StageBudget, plan_stage
from timestep_lab.evidence.stats import NOT_JUDGED
from timestep_lab.workflow.stages import MAX_STAGES, StagePlan, next_runs

__all__ = ["claim_states", "plan_next"]

_LONGER = "not judged at this length, and the workflow does not train runs longer yet (docs/methods.md §14.5)"


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else math.nan


def claim_states(verdicts: Mapping[str, Any]) -> tuple[list[ClaimState], dict[str, list[str]]]:
    """One :class:`ClaimState` per distinct FID comparison of ``verdicts`` that has run, and
    ``{comparison: [claim ids]}``. Two claims on one comparison share its seeds and its test but
    not always its regime (a claim on the converged model and one on early training): the
    comparison is held back by the regime check ("not judged at this length") only when every claim
    on it is, and resolved only when every claim judged on it is, whatever order they come in."""
    rows: dict[str, list[Mapping[str, Any]]] = {}
    for r in verdicts.get("claims") or []:
        if r.get("kind") != "fid" or not r.get("test") or r.get("verdict") == "not run":
            continue
        rows.setdefault(r["test"], []).append(r)
    states: list[ClaimState] = []
    for test, rs in rows.items():
        judged = [r for r in rs if r.get("verdict") != NOT_JUDGED]
        r = (judged or rs)[0]
        states.append(ClaimState(test, (r["arm"], r["baseline"]), int(r.get("n") or 0),
                                 resolved=bool(judged) and all(x.get("verdict") in FINDINGS for x in judged),
                                 not_judged=not judged, mean=_num(r.get("diff")), sd=_num(r.get("sd")),
                                 detectable=_num(r.get("detectable"))))
    return states, {test: [r["id"] for r in rs] for test, rs in rows.items()}


def _need_dict(need: Any) -> dict[str, Any]:
    d = asdict(need)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def plan_next(verdicts: Mapping[str, Any], costs: Mapping[str, Any], budget: BudgetConfig,
              arms: Mapping[str, Sequence[str]], stage0: Sequence[str], previous: StagePlan | None,
              judged_stage: int) -> StagePlan:
    """The plan of stage ``judged_stage + 1`` (module docstring). Never more than ``budget.max_stages``
    stages: the plan after the last one stops with :data:`~timestep_lab.workflow.stages.MAX_STAGES`
    (it still says what each open claim would need)."""
    if not isinstance(costs.get("seed_cost"), Mapping) or not _num(costs.get("first_look")) >= 0:
        raise ArtifactError("estimate.json: no sequential block with first_look and seed_cost (a study with budget: "
                            "prices it; rerun the estimate job)")
    if costs.get("device") != budget.device:  # prices and budget.amount must be in one unit
        raise ArtifactError(f"estimate.json: priced on {costs.get('device')!r}, but the budget counts {budget.unit}"
                            f"{f' on {budget.gpu}' if budget.gpu else ''} (device {budget.device!r}): rerun the "
                            "estimate job, which prices a budgeted study on its budget's device")
    spent = previous.spent + (previous.cost,) if previous is not None else (float(costs["first_look"]),)
    have = list(stage0) + list(previous.runs if previous is not None else ())
    states, ids = claim_states(verdicts)
    priced = {a: float(v) for a, v in costs["seed_cost"].items()}
    plannable = [c for c in states if all(a in priced and a in arms for a in c.arms)]
    left_out = {c.name: "its arms are not staged runs priced by the estimate" for c in states if c not in plannable}
    held = set(have)
    arm_seeds = {a: sum(r in held for r in arms[a]) for c in plannable for a in c.arms}
    sb = StageBudget(remaining=budget.amount - sum(spent), seed_cost=priced, arm_seeds=arm_seeds,
                     max_seeds=budget.max_seeds, step_seeds=budget.step_seeds, prior_sd=budget.prior_sd,
                     horizon=budget.max_seeds if budget.calibration == "skew_envelope" else None)
    stage = plan_stage(plannable, sb)
    needs: dict[str, dict[str, Any]] = {}
    for test, need in stage.needs.items():
        for cid in ids[test]:
            needs[cid] = _need_dict(need)
    # a claim the regime check holds back needs longer runs, whatever its comparison gets (seeds for a
    # sibling on early training, or nothing when the siblings are resolved)
    verdict_of = {r.get("id"): r.get("verdict") for r in verdicts.get("claims") or []}
    held_back = [cid for cids in ids.values() for cid in cids if verdict_of.get(cid) == NOT_JUDGED]
    for cid in held_back:
        needs[cid] = {"seeds": None, "extend": True, "cost": None, "chance": None, "served": False, "why": _LONGER}
    for test, why in left_out.items():
        for cid in ids[test]:
            needs[cid] = {"seeds": None, "extend": False, "cost": None, "chance": None, "served": False, "why": why}
    stop = stage.stop
    if stop == ALL_RESOLVED and (any(not c.resolved for c in states) or held_back):  # open claims, none servable
        stop = UNREACHABLE
    new = next_runs(arms, have, stage.seeds) if stop is None else []
    if stop is None and not new:  # served claims whose next seeds are already planned: nothing to run
        stop = UNREACHABLE
    if stop is None and judged_stage + 1 >= budget.max_stages:
        stop = MAX_STAGES
    if stop is not None:  # nothing runs: no claim is served, whatever the planner would have given it
        needs = {cid: {**d, "served": False} for cid, d in needs.items()}
        return StagePlan(judged_stage + 1, tuple(have[len(stage0):]), (), spent, str(costs.get("unit", "")),
                         budget.amount, 0.0, stop, (), (), needs)
    return StagePlan(judged_stage + 1, tuple(have[len(stage0):]) + tuple(new), tuple(new), spent,
                     str(costs.get("unit", "")), budget.amount, float(stage.cost), None, tuple(stage.extend),
                     tuple(stage.claims), needs)
