"""The stages of a budgeted (sequential) study: which runs each stage trains, and the plan file between stages.

A study with ``budget:`` (docs/methods.md §14) runs in stages. The *staged groups* are the groups
a claim on final FID reads that list ``seeds:``; every other group (and every analysis) runs once,
as in the fixed design. Each staged group's seeds are taken in a fixed order (its listed seeds,
then the next integers), never picked (the sequential test needs seeds in their order, §14.1):

* **stage 0** runs the first ``budget.initial_seeds`` of them (:func:`staged_study`);
* **the universe** is the first ``budget.max_seeds`` of them: every run a later stage may add, with
  the same run id (and so the same folder) whichever stage trains it;
* after stage ``k`` is judged, the workflow's checkpoint writes the plan of stage ``k + 1``
  (:class:`StagePlan`, one JSON file, atomic): the runs it adds (the next seeds of the arms the
  planner serves, :func:`next_runs`), the cumulative list of runs added since stage 0, what each
  stage cost, each open claim's need and, when nothing more is planned, why (:data:`STOP_REASONS`).

Pure functions of dicts and one JSON file: no Snakemake, no torch, no pandas (the Snakefile imports
this at DAG build). The planning itself is :func:`timestep_lab.evidence.planner.plan_stage`'s.
"""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from timestep_lab.artifacts.io import ArtifactError, atomic_write_json, read_json
from timestep_lab.claims import CLAIMS
from timestep_lab.workflow.runs import Run, arm_id
from timestep_lab.workflow.study import study_runs

__all__ = ["PLAN_FORMAT", "MAX_STAGES", "STOP_REASONS", "StagePlan", "staged_groups", "seed_order", "staged_study",
           "run_tables", "arm_runs", "next_runs", "write_plan", "read_plan"]

PLAN_FORMAT = "timestep_lab.stage_plan/1"
#: why a study stopped (the planner's three, :data:`timestep_lab.evidence.planner.STOP_REASONS`, and the DAG's bound)
MAX_STAGES = "max stages"
STOP_REASONS = ("all resolved", "budget", "no claim can resolve within the budget", MAX_STAGES)


@dataclass(frozen=True)
class StagePlan:
    """The plan of stage ``stage`` (>= 1), written after stage ``stage - 1`` was judged.

    ``runs``: every run added since stage 0, in the order added (the stage's run list is stage
    0's plus these); ``new_runs``: those this stage adds; ``extend``: arms whose runs the planner
    would train longer (recorded; the workflow does not stage lengths yet, §14.5); ``spent``: per
    stage ``0..stage - 1`` what it cost, in ``unit`` (priced by the estimate, ``estimate.json``);
    ``cost``: this stage's price; ``amount``: the budget; ``stop``: None, or why nothing more is
    planned (:data:`STOP_REASONS`; then ``new_runs`` is empty); ``served``: the claims (distinct
    comparisons) it serves; ``needs``: per open claim id, what it would still need
    (:class:`timestep_lab.evidence.planner.ClaimNeed` as a dict: seeds, extend, cost, chance, served, why)."""

    stage: int
    runs: tuple[str, ...]
    new_runs: tuple[str, ...]
    spent: tuple[float, ...]
    unit: str
    amount: float
    cost: float = 0.0
    stop: str | None = None
    extend: tuple[str, ...] = ()
    served: tuple[str, ...] = ()
    needs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for k in ("runs", "new_runs", "spent", "extend", "served"):
            out[k] = list(out[k])
        out["needs"] = {k: dict(v) for k, v in self.needs.items()}
        return {"format": PLAN_FORMAT, **out}


def staged_groups(study: Mapping[str, Any]) -> tuple[str, ...]:
    """The groups a claim on final FID reads that list ``seeds:``, in config order."""
    fid = {c.group for c in CLAIMS if c.kind == "fid"}
    return tuple(g for g, spec in (study.get("groups") or {}).items()
                 if g in fid and isinstance(spec, Mapping) and spec.get("seeds") is not None)


def seed_order(seeds: Sequence[int], n: int) -> list[int]:
    """The first ``n`` seeds of a staged group: its listed ``seeds`` in their order, then the next
    integers above the largest listed (skipping listed ones)."""
    out = [int(s) for s in seeds][:n]
    s = max(out, default=-1) + 1
    while len(out) < n:
        if s not in out:
            out.append(s)
        s += 1
    return out


def staged_study(study: Mapping[str, Any], seeds: int, max_seeds: int | None = None) -> dict[str, Any]:
    """``study`` with every staged group's seeds the first ``seeds`` of :func:`seed_order` (stage 0:
    ``initial_seeds``; the universe: ``max_seeds``). A new dict; ``study`` is not modified."""
    out = copy.deepcopy(dict(study))
    for g in staged_groups(study):
        out["groups"][g]["seeds"] = seed_order(study["groups"][g]["seeds"], max(seeds, max_seeds or 0))[:seeds]
    return out


def run_tables(study: Mapping[str, Any], budget: Any, source: str = "study") -> tuple[dict[str, Run], dict[str, Run]]:
    """``(stage 0's run table, the universe's)`` of a study with ``budget`` (a
    :class:`~timestep_lab.config.BudgetConfig`); without one (None) both are the configured run table."""
    if budget is None:
        runs = study_runs(study, source)
        return runs, runs
    return (study_runs(staged_study(study, budget.initial_seeds, budget.max_seeds), source),
            study_runs(staged_study(study, budget.max_seeds), source))


def arm_runs(universe: Mapping[str, Run], study: Mapping[str, Any]) -> dict[str, list[str]]:
    """``{arm: [run ids in seed order]}`` of the staged groups' runs of ``universe`` (the run table of
    :func:`staged_study` at ``max_seeds``); an arm is a run id without its seed (``runs.csv``'s ``arm``)."""
    staged = staged_groups(study)
    order: dict[str, list[int]] = {}  # a staged group's listed seeds: their rank comes first
    out: dict[str, list[tuple[int, str]]] = {}
    for rid, run in universe.items():
        groups = [g for g in run.groups if g in staged]
        if not groups or "seed" not in run.axes:
            continue
        g = groups[0]
        if g not in order:
            order[g] = [int(s) for s in study["groups"][g]["seeds"]]
        seed = int(run.axes["seed"])
        rank = order[g].index(seed) if seed in order[g] else len(order[g]) + seed
        out.setdefault(arm_id(rid, run.axes["seed"]), []).append((rank, rid))
    return {arm: [rid for _, rid in sorted(v)] for arm, v in sorted(out.items())}


def next_runs(arms: Mapping[str, Sequence[str]], have: Sequence[str], add: Mapping[str, int]) -> list[str]:
    """The runs that add ``add[arm]`` seeds to each arm: its next runs in seed order not in ``have``
    (an arm's seeds are never skipped: §14.1). More seeds than the universe holds is an error."""
    got = set(have)
    out = []
    for arm, k in add.items():
        missing = [r for r in arms.get(arm, []) if r not in got]
        if k > len(missing):
            raise ValueError(f"arm {arm}: {k} more seeds asked for, {len(missing)} left below max_seeds")
        out += missing[:k]
    return out


def write_plan(path: str, plan: StagePlan) -> None:
    """The plan file, written atomically (a killed job leaves the old file or none)."""
    atomic_write_json(path, plan.as_dict())


def _floats(values: Any, where: str) -> tuple[float, ...]:
    if not isinstance(values, list) or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        raise ArtifactError(f"{where}: expected a list of finite numbers")
    return tuple(float(v) for v in values)


def _words(values: Any, where: str) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ArtifactError(f"{where}: expected a list of names")
    return tuple(values)


def read_plan(path: str) -> StagePlan:
    """The :class:`StagePlan` of a plan file; a file that is not one is one :class:`ArtifactError` naming it."""
    data = read_json(path)
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise ArtifactError(f"{path}: not a stage plan (format {PLAN_FORMAT}; the plan_stage job writes it)")
    try:
        stop = data["stop"]
        if stop is not None and stop not in STOP_REASONS:
            raise ArtifactError(f"{path}: stop: {stop!r} is none of {', '.join(STOP_REASONS)}")
        if not isinstance(data["stage"], int) or data["stage"] < 1:
            raise ArtifactError(f"{path}: stage: expected an integer >= 1, got {data['stage']!r}")
        if not isinstance(data["needs"], dict):
            raise ArtifactError(f"{path}: needs: expected a mapping")
        return StagePlan(data["stage"], _words(data["runs"], f"{path}: runs"), _words(data["new_runs"], f"{path}: new_runs"),
                         _floats(data["spent"], f"{path}: spent"), str(data["unit"]), float(data["amount"]),
                         float(data["cost"]), stop, _words(data["extend"], f"{path}: extend"),
                         _words(data["served"], f"{path}: served"), {k: dict(v) for k, v in data["needs"].items()})
    except KeyError as exc:
        raise ArtifactError(f"{path}: not a stage plan (no {exc.args[0]!r})") from None
