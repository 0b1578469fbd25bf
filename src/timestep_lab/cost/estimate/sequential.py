"""The cost of a study's sequential design (``budget:``, docs/methods.md §14): expected and worst case.

A study with a ``budget:`` block runs its claims' arms in stages (§14.3): ``initial_seeds`` paired
seeds per arm first, more seeds only for claims still open, never past ``max_seeds``, and runs
``max_length`` times longer only for claims that cannot be judged at the configured length. What it
costs depends on what the data say, so the estimate prices it under stated assumptions:

* **one seed of an arm** is what the fixed design's runs of that arm cost per seed, from the
  estimate's own per-job figures (:attr:`Row.job_seconds`): the run's config, training, scoring
  and progress points (every job that works on that run alone);
* **growing a run** (training it ``max_length`` times as long, resuming it) costs ``max_length - 1``
  times its training and progress points again; the claims judged at convergence
  (``judged_at: convergence``, §9.7) are the ones expected to need it;
* **every other job** (data, reference statistics, the analyses and their derived runs, runs of
  arms no FID claim reads, reports) is paid once, as in the fixed design; so are the arms of a claim
  that reads a group the workflow does not stage (one that lists no ``seeds:``, e.g. the consistency
  group's momentum-decay entries: :func:`timestep_lab.workflow.stages.staged_groups`): the planner
  never adds seeds to them, and the estimate prices them as configured;
* **the first look** is stage 0's DAG: the staged groups at ``initial_seeds``, and every run an
  unstaged group needs whatever the claims say (the consistency group's seeds are the sampler
  comparison's uniform runs: that arm starts with all of them). For a study config with ``budget:``
  the estimate's table prices exactly that DAG, and the first look is its total;
* **the fixed design** is the same study without ``budget:``, priced by the caller (the estimate
  command prices both), so that the expectation is read against what it replaces;
* the claims' true effects, in units of one run's SD, are a **scenario**: all 0 (nothing to find:
  every claim runs to ``max_seeds``), all 1 and all 2. The expectation of each is a simulation of
  the design (:func:`timestep_lab.evidence.sequential_sim.expected_cost`, 2,000 studies, seeded),
  in which the claims share one baseline (the correlation of its seeds' noise is approximate for
  claims of different groups; the prices are each claim's own arms).

Pure: a :class:`~timestep_lab.cost.estimate.study.Plan` and its priced
:class:`~timestep_lab.cost.estimate.table.Estimate` in, numbers out; no files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from timestep_lab.claims import CLAIMS, Claim
from timestep_lab.config import BudgetConfig
from timestep_lab.cost.estimate.study import Plan
from timestep_lab.cost.estimate.table import Estimate
from timestep_lab.evidence.sequential_sim import expected_cost
from timestep_lab.evidence.verdicts import resolve_selector, select_arm
from timestep_lab.workflow import arm_id, base_columns, run_table, study_runs
from timestep_lab.workflow.stages import staged_groups, staged_study

__all__ = ["PER_RUN_RULES", "GROWING_RULES", "SCENARIOS", "SequentialCost", "claim_arms", "seed_costs",
           "sequential_cost", "format_sequential"]

#: the jobs that work on one run alone: what one more seed of an arm costs
PER_RUN_RULES = ("run_config", "train", "sample_score", "evaluate_progress")
#: the part of a run that grows with its length (training, and the progress points along it)
GROWING_RULES = ("train", "evaluate_progress")
#: the true effects (run SDs) the expectation is computed under, every claim alike
SCENARIOS = (0.0, 1.0, 2.0)
STUDIES = 2000  # simulated studies per scenario
#: budget.calibration -> the simulation's test (docs/methods.md §14.2: the skew envelope resolves later)
_TESTS = {"skew_envelope": "envelope", "normal": "safe"}
SEED = 20261129  # the simulation's seed: the same estimate every time


@dataclass(frozen=True)
class SequentialCost:
    """Hours on the estimate's device (CPU-core-hours on ``cpu``). ``fixed``: the jobs paid once;
    ``first_look``: stage 0, ``fixed`` + every claim arm at its stage-0 seeds (``initial_seeds``, or
    more where an unstaged group runs more of it); ``expected``: scenario (effect
    in run SDs) -> mean cost; ``resolved``: scenario -> mean share of claims resolved; ``worst``: every
    claim arm at ``max_seeds`` and every growing arm ``max_length`` times as long; ``fixed_design``:
    the same study without ``budget:`` (nan when not priced); ``claims``: claim id -> (arm, baseline
    arm) priced; ``left_out``: claim id -> why it is not priced (an analysis, its arms not in the study
    or not one arm each, its group not staged); ``seed_cost``: claim arm ->
    one more seed of it, ``extend_cost``: growing arm -> one seed of it trained to ``max_length``
    (what the workflow's stage planner prices a stage with, docs/methods.md §14.5)."""

    budget: BudgetConfig
    device: str
    unit: str
    fixed: float
    first_look: float
    expected: dict[float, float]
    resolved: dict[float, float]
    worst: float
    fixed_design: float
    claims: dict[str, tuple[str, str]]
    left_out: dict[str, str]
    longer: tuple[str, ...]
    seed_cost: dict[str, float] = field(default_factory=dict)
    extend_cost: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"device": self.device, "unit": self.unit, "fixed": self.fixed, "first_look": self.first_look,
                "expected": {f"{k:g}": v for k, v in self.expected.items()},
                "resolved": {f"{k:g}": v for k, v in self.resolved.items()}, "worst": self.worst,
                "fixed_design": self.fixed_design, "claims": {k: list(v) for k, v in self.claims.items()},
                "left_out": dict(self.left_out), "longer": list(self.longer),
                "seed_cost": dict(self.seed_cost), "extend_cost": dict(self.extend_cost),
                "assumes": assumptions(self.budget)}


def _run_table(plan: Plan, budget: BudgetConfig | None = None, stage0: bool = False) -> pd.DataFrame:
    """One row per run of a study group: ``run``, ``arm``, ``groups``, the axes and the arm columns
    (what claims select arms by, as in ``runs.csv``): the runs the estimate priced. For a study config
    with ``budget:`` (or with ``stage0``): stage 0's run table (the staged groups at ``initial_seeds``,
    :func:`timestep_lab.workflow.stages.staged_study`), the runs the workflow's DAG holds before its
    first look."""
    staged = budget is not None and (stage0 or plan.study.get("budget") is not None)
    study = staged_study(plan.study, budget.initial_seeds, budget.max_seeds) if staged else plan.study
    table = run_table(study_runs(study, plan.source))  # the rows collect writes to runs.csv
    return pd.DataFrame([{"run": rid, "arm": arm_id(rid, info["axes"].get("seed")), "groups": ";".join(info["groups"]),
                          **info["axes"], **info["columns"]} for rid, info in table.items() if info["groups"]])


def claim_arms(plan: Plan, claims: Sequence[Claim] = CLAIMS, budget: BudgetConfig | None = None
               ) -> tuple[dict[str, tuple[str, str]], dict[str, str], pd.DataFrame]:
    """Each FID claim's ``(arm, baseline arm)`` in the plan's run table, as the verdicts select them
    (:func:`timestep_lab.evidence.verdicts.select_arm`); claims whose arm or baseline is not exactly
    one arm of the study are left out, with the reason, and so are claims of a group the workflow does
    not stage (:func:`~timestep_lab.workflow.stages.staged_groups`: their runs are paid once, as
    configured). Also returns the run table (stage 0's with ``budget``)."""
    table = _run_table(plan, budget)
    base = base_columns(plan.study)
    staged = staged_groups(plan.study)
    found, left = {}, {}
    for c in claims:
        if c.kind != "fid":
            left[c.id] = "an analysis, not a comparison of arms"
            continue
        rows = table[table["groups"].str.split(";").apply(lambda g, grp=c.group: grp in g)] if len(table) else table
        if not len(rows):
            left[c.id] = f"the study has no group {c.group}"
            continue
        if c.group not in staged:
            left[c.id] = f"group {c.group} lists no seeds: not staged, its runs are paid once as configured"
            continue
        arm = select_arm(rows, resolve_selector(c.arm, rows, base))
        baseline = select_arm(rows, resolve_selector(c.baseline, rows, base))
        if len(arm) == 1 and len(baseline) == 1 and arm != baseline:
            found[c.id] = (arm[0], baseline[0])
        else:
            left[c.id] = f"{len(arm)} arm(s) and {len(baseline)} baseline arm(s) in group {c.group}"
    return found, left, table


def seed_costs(plan: Plan, est: Estimate, table: pd.DataFrame) -> tuple[dict[str, float], dict[str, float]]:
    """Per arm: hours of one seed (the mean over its runs of the :data:`PER_RUN_RULES` jobs'
    central figures) and hours of its :data:`GROWING_RULES` jobs per seed (what a longer run repeats)."""
    per_job = {job: secs[0] for row in est.rows for job, secs in row.job_seconds.items()}
    run_s: dict[str, float] = {}
    grow_s: dict[str, float] = {}
    for job in plan.jobs:
        if job.rule in PER_RUN_RULES and len(job.runs) == 1 and job.name in per_job:
            run_s[job.runs[0]] = run_s.get(job.runs[0], 0.0) + per_job[job.name]
            if job.rule in GROWING_RULES:
                grow_s[job.runs[0]] = grow_s.get(job.runs[0], 0.0) + per_job[job.name]
    seed, grow = {}, {}
    for arm, runs in table.groupby("arm")["run"]:
        seed[arm] = float(np.mean([run_s.get(r, 0.0) for r in runs])) / 3600
        grow[arm] = float(np.mean([grow_s.get(r, 0.0) for r in runs])) / 3600
    return seed, grow


def assumptions(budget: BudgetConfig) -> str:
    """What the figures assume, in one paragraph (printed under them and stored with them)."""
    return (f"an arm's seed costs what the fixed design's runs of it cost per seed; {budget.initial_seeds} seeds per "
            f"arm first, then up to {budget.step_seeds} more per open claim and stage, at most {budget.max_seeds}; "
            f"claims judged at convergence train their arms {budget.max_length:g}x as long (the rest keep their "
            f"length); every claim's true effect equal to the scenario's, in units of one run's SD, with normal "
            f"seeds, judged by the {budget.calibration} calibration; the jobs no FID claim reads run once; the "
            f"budget ({budget.amount:g} {budget.unit}) caps what is spent, so a figure above it is what the budget "
            f"stops (docs/methods.md §14)")


def sequential_cost(plan: Plan, est: Estimate, budget: BudgetConfig, claims: Sequence[Claim] = CLAIMS,
                    *, studies: int = STUDIES, seed: int = SEED, fixed_design: float | None = None) -> SequentialCost:
    """The :class:`SequentialCost` of ``plan`` under ``budget``, priced by ``est`` (module docstring).
    ``fixed_design``: the total of the same study without ``budget:`` (the estimate command prices it);
    None: ``est``'s own total when ``plan`` is not staged (it is then the fixed design), else unknown (nan)."""
    found, left, table = claim_arms(plan, claims, budget)  # the DAG the estimate priced
    seed_h, grow_h = seed_costs(plan, est, table)
    priced = {arm: int((table["arm"] == arm).sum()) for arm in seed_h}  # each arm's seeds in the priced DAG
    stage0 = _run_table(plan, budget, stage0=True)
    first_seeds = {arm: int((stage0["arm"] == arm).sum()) for arm in seed_h}  # ... and in stage 0's
    arms = sorted({a for pair in found.values() for a in pair})
    fixed = est.gpu_hours - sum(priced[a] * seed_h[a] for a in arms)
    by_id = {c.id: c for c in claims}
    longer = tuple(k for k in found if by_id[k].judged_at == "convergence")
    # only the arms of claims the regime check can hold back ("not judged at this length") ever grow
    extend = {a: (budget.max_length - 1.0) * grow_h[a] for k in longer for a in found[k]}
    claim_arm_lists = {k: list(v) for k, v in found.items()}
    costs = {**{a: seed_h[a] for a in arms}, "baseline": 0.0}  # every claim lists its own baseline arm
    expected, resolved = {}, {}
    for effect in (SCENARIOS if found else ()):
        out = expected_cost(claim_arm_lists, {k: effect for k in found}, costs, extend_cost=extend, longer=longer,
                            n_start=budget.initial_seeds, step=budget.step_seeds, n_max=budget.max_seeds,
                            studies=studies, prior_sd=budget.prior_sd, rng=np.random.default_rng(seed),
                            test=_TESTS[budget.calibration], start={a: first_seeds[a] for a in arms})
        expected[effect], resolved[effect] = fixed + out["expected"], out["p_resolved"]
    # whatever the data: every claim arm at max_seeds (or more, where stage 0 has more), the growing ones
    # at max_length
    worst = fixed + sum(max(budget.max_seeds, first_seeds[a]) * (seed_h[a] + extend.get(a, 0.0)) for a in arms)
    first = fixed + sum(first_seeds[a] * seed_h[a] for a in arms)  # = est's total when the plan is stage 0's
    if fixed_design is None:
        fixed_design = est.gpu_hours if plan.study.get("budget") is None else float("nan")
    unit = "CPU-core-hours" if est.device == "cpu" else f"GPU-hours ({est.device})"
    return SequentialCost(budget, est.device, unit, fixed, first, expected, resolved, worst, fixed_design, found, left,
                          longer, {a: seed_h[a] for a in arms}, extend)


def _h(x: float) -> str:
    return f"{x:,.1f}" if x >= 10 else f"{x:.3g}"


def format_sequential(s: SequentialCost, show_left_out: int = 4) -> str:
    """The sequential design's block under the estimate's table."""
    b = s.budget
    lines = [f"sequential design (budget: {b.amount:g} {b.unit}{f' on {b.gpu}' if b.gpu else ''}; "
             f"docs/methods.md §14), in {s.unit}:",
             f"  fixed design (the same study without budget:): {_h(s.fixed_design)}",
             f"  paid once (data, references, analyses, reports, runs no FID claim reads): {_h(s.fixed)}",
             f"  first look (stage 0: {b.initial_seeds} seeds per arm of {len(s.claims)} claims, every run of the "
             f"unstaged groups): {_h(s.first_look)}"]
    for effect, cost in s.expected.items():
        lines.append(f"  expected if every claim's true effect is {effect:g} run SD: {_h(cost)} "
                     f"({s.resolved[effect]:.0%} of claims resolved)")
    lines.append(f"  worst case ({b.max_seeds} seeds per arm, {len(s.longer)} convergence claims' arms "
                 f"{b.max_length:g}x as long): {_h(s.worst)}")
    if s.left_out:
        names = ", ".join(list(s.left_out)[:show_left_out]) + (", ..." if len(s.left_out) > show_left_out else "")
        lines.append(f"  not priced as claims ({len(s.left_out)}: {names}): their jobs are in the once-paid part")
    lines.append("  assumes: " + assumptions(b))
    if b.device != s.device:  # only with an explicit --gpu: a budgeted study is priced on its budget's device
        lines.append(f"  note: the budget counts {b.unit}{f' on {b.gpu}' if b.gpu else ''}; these figures are "
                     f"{s.unit}: `estimate --gpu {b.device}` prices it in the budget's own unit")
    return "\n".join(lines)
