"""The ``plan-stage`` command: a budgeted study's decision between stages (the workflow's checkpoint).

Reads stage k's verdicts, the estimate's prices and the previous plan, writes stage k+1's plan
(:func:`timestep_lab.workflow.stage_plan.plan_next`, docs/methods.md §14.5). Must not know the
entry (``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.artifacts.io import ArtifactError, read_json
from timestep_lab.cli.common import command, json_object, log
from timestep_lab.config import ConfigError, budget_config


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--study", type=json_object, required=True,
                   help="the study config as the workflow validated it, a JSON object with a budget: block")
    p.add_argument("--verdicts", type=Path, required=True, help="the judged stage's verdicts.json (judged sequentially)")
    p.add_argument("--estimate", type=Path, required=True,
                   help="the study's estimate.json: its sequential block prices a seed of each arm")
    p.add_argument("--previous", type=Path, default=None, help="the judged stage's own plan (none after stage 0)")
    p.add_argument("--stage", type=int, required=True, help="the stage just judged (0, 1, ...)")
    p.add_argument("--out", type=Path, required=True, help="the next stage's plan (JSON) to write")


@command("plan-stage", "a budgeted study's next stage: which runs it adds, or why it stops", _args)
def cmd_plan_stage(args: argparse.Namespace) -> int:
    """The plan of stage ``--stage`` + 1: the planner's seeds as run ids, what each stage cost, each
    open claim's need, and why the study stops when it does (docs/methods.md §14.3, §14.5)."""
    from timestep_lab.workflow.stage_plan import plan_next
    from timestep_lab.workflow.stages import arm_runs, read_plan, run_tables, write_plan

    for opt in ("verdicts", "estimate", "previous"):
        path = getattr(args, opt)
        if path is not None and not path.is_file():
            raise ArtifactError(f"{path}: --{opt} file not found")
    source = f"--study ({args.study.get('study')})"
    budget = budget_config(args.study, source)
    if budget is None:
        raise ConfigError(f"{source}: no budget: block (only a budgeted study runs in stages)")
    if args.stage < 0 or (args.stage > 0) != (args.previous is not None):
        raise ConfigError(f"--stage {args.stage}: --previous is the judged stage's plan, given exactly when --stage > 0")
    verdicts, estimate = read_json(args.verdicts), read_json(args.estimate)
    if not isinstance(verdicts, dict) or not isinstance(verdicts.get("claims"), list):
        raise ArtifactError(f"{args.verdicts}: no list of claims (the verdicts job writes it)")
    if not isinstance(estimate, dict):
        raise ArtifactError(f"{args.estimate}: not an estimate (the estimate job writes it)")
    previous = read_plan(str(args.previous)) if args.previous is not None else None
    try:
        first, universe = run_tables(args.study, budget, source)
    except ConfigError:
        raise
    except (KeyError, TypeError, AttributeError, ValueError) as exc:  # a hand-made one the schema never saw
        raise ConfigError(f"--study: not a study config as the workflow validates it ({type(exc).__name__}: "
                          f"{str(exc)[:120]})") from None
    arms = arm_runs(universe, args.study)
    stage0 = [r for a in arms.values() for r in a if r in first]
    plan = plan_next(verdicts, estimate.get("sequential") or {}, budget, arms, stage0, previous, args.stage)
    write_plan(str(args.out), plan)
    log.info("plan-stage: stage %d adds %d runs (%.4g %s); stop: %s", plan.stage, len(plan.new_runs), plan.cost,
             plan.unit, plan.stop)
    return 0
