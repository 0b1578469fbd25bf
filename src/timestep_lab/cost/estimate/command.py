"""``python -m timestep_lab estimate STUDY.yaml [--gpu h100] [--json]``: the cost of a study
before it runs. ``configure`` adds the options to the command's parser, ``run`` prints the table
(or the JSON) and returns the exit status; a bad study config raises :class:`ConfigError`, which
the CLI turns into one ``error:`` line.

The study is priced as the DAG ``--snakefile`` (default ``./Snakefile``) builds for it (:mod:`dag`).

Calibration (``--gpu cpu``, :mod:`calibration`): the CPU figures are fitted to the package's measured
studies (``--measured``, default ``measured_studies.json`` beside this module), each replaced by this
machine's own record of the same study when it has one. When the study has run (its benchmark files
under ``--results``, default ``results/<study>``, and its job logs under ``logs/<study>``), its
jobs' measured CPU is recorded in the calibration file ``--calibration`` (default
``results/calibration.json``) under this machine's name, and the CPU figures of any study are
then priced from the per-rule fit to those studies. ``--no-record`` only
prices (the workflow's estimate job: the study is just starting, its cost files are partial or
stale); ``--no-calibration`` does neither. This module is where those paths and the machine's name are decided; the library
below reads only what it is given.

Knows argparse and this package; knows nothing of the CLI's entry or other commands.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from pathlib import Path

from timestep_lab.artifacts.io import atomic_write_json
from timestep_lab.cost.estimate.throughput import DEVICES, device_for

__all__ = ["configure", "run", "machine_name", "DEFAULT_CALIBRATION"]

DEFAULT_CALIBRATION = "results/calibration.json"
#: the studies measured for the estimate's own calibration (benchmarks/fit_estimate.py writes it)
MEASURED_STUDIES = Path(__file__).with_name("measured_studies.json")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", help="a study config, e.g. config/cifar10.yaml")
    parser.add_argument("--gpu", default=None, choices=sorted(DEVICES), metavar="DEVICE",
                        help=f"price on this device ({', '.join(DEVICES)}); default: a budgeted study's budget "
                             "device (budget.gpu, or cpu for CPU-core-hours), else the study's resources (cuda: "
                             "gpu_model or h100; cpu: cpu)")
    parser.add_argument("--json", action="store_true", help="print the estimate as JSON instead of a table")
    parser.add_argument("--out", default=None, help="also write the estimate as JSON to this file (atomically; "
                                                    "the study index shows it beside the measured cost)")
    parser.add_argument("--calibration", default=DEFAULT_CALIBRATION, metavar="FILE",
                        help="this machine's CPU calibration: the measured jobs of finished studies and the "
                             f"per-rule fit to them (default: {DEFAULT_CALIBRATION})")
    parser.add_argument("--measured", default=str(MEASURED_STUDIES), metavar="FILE",
                        help="the measured studies the CPU figures are fitted to before this machine has "
                             "recorded any of its own (default: the package's measured_studies.json)")
    parser.add_argument("--no-calibration", action="store_true",
                        help="neither record the study's measured cost nor price from a fit")
    parser.add_argument("--no-record", action="store_true",
                        help="price from the calibration file as it is, without reading this study's cost files "
                             "(the workflow's own estimate job, which runs as the study starts)")
    parser.add_argument("--results", default=None, metavar="DIR",
                        help="the study's results folder to learn from (default: results/<study>)")
    parser.add_argument("--logs", default=None, metavar="DIR", help="its job logs (default: logs/<study>)")
    parser.add_argument("--snakefile", default="Snakefile", metavar="FILE",
                        help="the workflow whose DAG of the study is priced (default: ./Snakefile)")


def machine_name() -> str:
    """This machine as the calibration knows it: CPU model and logical CPUs."""
    model = platform.processor() or platform.machine()
    try:
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        model = found.group(1).strip() if found else model
    except OSError:
        pass
    return f"{model} x{os.cpu_count()}"


def _profile_retries(root: Path) -> int | None:
    """``retries`` of the cluster profile of the project at ``root`` (None when there is none)."""
    profile = root / "workflow" / "profiles" / "cluster" / "config.yaml"
    try:
        found = re.search(r"^retries:\s*(\d+)", profile.read_text(), re.M)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def _learn(plan, args, device: str):
    """Record the study's measured jobs (when it has run) and return (calibration, measured seconds)."""
    from timestep_lab.cost.estimate.calibration import Store, observe
    from timestep_lab.cost.estimate.rules import rule_costs
    from timestep_lab.cost.measured import job_usages, logs_dir_of, read_helper_usage, study_cost

    results = Path(args.results) if args.results else Path("results") / plan.study["study"]
    logs = Path(args.logs) if args.logs else logs_dir_of(results)
    store = Store.load(args.calibration)
    machine = machine_name()
    measured = None
    if not args.no_record and (results / "benchmarks").is_dir():
        local = plan.local_rules()
        rules = rule_costs(plan)
        observations, unknown = observe(rules, job_usages(results, logs), local)
        helpers = {row: [c.cpu_s / c.jobs] * c.jobs for row, c in read_helper_usage(logs).items()}
        if observations:
            store.record(machine, plan.study["study"], observations, helpers, plan.source)
            store.save()
            print(f"calibration: recorded {len(observations)} measured jobs of {results} for this machine in "
                  f"{store.path}" + (f"; {len(unknown)} measured jobs are not in {plan.source} and were left out "
                                    f"(e.g. {unknown[0]})" if unknown else ""), file=sys.stderr)
        ran_on_gpu = plan.study["resources"].get("device") == "cuda"
        if ran_on_gpu == DEVICES[device].gpu:
            try:
                costs = study_cost(results, logs, plan.local_rules())
            except ValueError as exc:  # a malformed benchmark file: say so, price without the comparison
                print(f"warning: no measured cost beside the estimate: {exc}", file=sys.stderr)
                return _calibration(store, machine, args), None
            gpus = max(1, int(plan.study["resources"].get("gpus") or 0))
            measured = ({name: c.cpu_s for name, c in costs.items()} if not ran_on_gpu else
                        {name: c.wall_s * (gpus if name == "train" else 1) for name, c in costs.items()
                         if name in {r.rule for r in rules if r.gpu}})
    return _calibration(store, machine, args), measured


def _calibration(store, machine: str, args):
    """The fit to the package's measured studies, each replaced by this machine's own record of
    the study when it has one (a study recalibrates the estimate by its own run)."""
    from timestep_lab.cost.estimate.calibration import fit, measured_studies

    own = store.machine(machine)
    studies = {**measured_studies(args.measured), **own}
    source = ", ".join([Path(args.measured).name] + ([f"{store.path} ({', '.join(sorted(own))})"] if own else []))
    return fit(studies, machine, source)


def run(args: argparse.Namespace) -> int:
    # imported here, not at the top: they load torch, and the CLI builds this command's parser
    # for every invocation (``--help`` included)
    from timestep_lab.config import ConfigError, budget_config
    from timestep_lab.cost.estimate.sequential import format_sequential, sequential_cost
    from timestep_lab.cost.estimate.study import load_plan, plan_from_dict
    from timestep_lab.cost.estimate.table import estimate, format_table, to_json

    plan = load_plan(args.study, args.snakefile)
    budget = budget_config(plan.study, plan.source)  # None: the fixed design
    if budget is not None and args.gpu is None and budget.device not in DEVICES:
        raise ConfigError(f"{plan.source}: budget.gpu: unknown card {budget.gpu!r}; the estimator prices "
                          f"{', '.join(d for d in DEVICES if d != 'cpu')}")
    # A budgeted study is priced in its budget's unit (the stage plans weigh these prices against
    # budget.amount), whatever device it runs on; --gpu overrides, and the block then says so.
    device = device_for(plan.study["resources"], args.gpu or (budget.device if budget is not None else None))
    calibration, measured = (None, None) if args.no_calibration else _learn(plan, args, device)
    est = estimate(plan, device, calibration, measured, _profile_retries(Path(args.snakefile).resolve().parent))
    seq = None
    if budget is not None:  # the table prices stage 0; the fixed design it replaces is priced beside it
        fixed = plan_from_dict({k: v for k, v in plan.study.items() if k != "budget"}, plan.source, args.snakefile)
        fixed_est = estimate(fixed, device, calibration, measured, _profile_retries(Path(args.snakefile).resolve().parent))
        seq = sequential_cost(plan, est, budget, fixed_design=fixed_est.gpu_hours)
    record = {**to_json(est), **({"sequential": seq.as_dict()} if seq is not None else {})}
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        print(format_table(est) + (f"\n\n{format_sequential(seq)}" if seq is not None else ""))
    if args.out:
        atomic_write_json(args.out, record)
    return 0
