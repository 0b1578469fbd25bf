"""Record a measured study in the estimate's own calibration (src/timestep_lab/cost/estimate/measured_studies.json).

    # a finished study's per-rule CPU (benchmarks/study_cost.py's figures), read from its results:
    python benchmarks/fit_estimate.py config/smoke.yaml --results results/smoke --commit abc1234 \
        --date 2026-11-28 --conditions "shared 2-core VM, load ~4"
    # per-rule totals as RESULTS.md gives them; the rest of the total spread over the other rules
    # in proportion to their CPU per job in another run's results (--shares):
    python benchmarks/fit_estimate.py config/config.yaml --rule train=599.7 ... --total 1015.4 \
        --helper "(warm-start server)=10.2" --shares /path/to/results/digits --commit 0717e5f ...
    python benchmarks/fit_estimate.py --refresh      # recompute every study's work from today's DAG

Each study is stored with its measured CPU-s per rule and the work the estimate counts for its
jobs today (the DAG Snakemake builds for its config: timestep_lab.cost.estimate.rules), one
observation per rule (calibration.rule_totals); `estimate` fits its per-rule CPU models to them.
Run from the project root (it builds the DAGs with ./Snakefile).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from timestep_lab.artifacts.io import atomic_write_json
from timestep_lab.cost.estimate.calibration import MEASURED_FORMAT, rule_totals
from timestep_lab.cost.estimate.rules import rule_costs
from timestep_lab.cost.estimate.study import load_plan
from timestep_lab.cost.measured import is_helper, logs_dir_of, study_cost

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "src" / "timestep_lab" / "cost" / "estimate" / "measured_studies.json"


def _pairs(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        key, _, value = item.rpartition("=")
        out[key] = float(value)
    return out


def observations(config: str, measured: dict[str, float]) -> list[dict]:
    plan = load_plan(config)
    local = {r: 0.0 for r in plan.local_rules()}  # run inside Snakemake's process: no CPU of their own
    return [o.as_dict() for o in rule_totals(rule_costs(plan), {**measured, **local})]


def spread(config: str, measured: dict[str, float], total: float, helpers: dict[str, float],
           shares_dir: str) -> dict[str, float]:
    """``total`` less the given rules and helper rows, over the study's other non-local rules in
    proportion to their jobs times their CPU per job in ``shares_dir``'s measured run."""
    plan = load_plan(config)
    per_job = {name: c.cpu_s / c.jobs for name, c in study_cost(shares_dir, logs_dir_of(shares_dir)).items()
               if c.jobs and not is_helper(name)}
    rest = {r: len(plan.rule_jobs(r)) * per_job.get(r, 0.0) for r in plan.rules()
            if r not in measured and r not in plan.local_rules()}
    left = total - sum(measured.values()) - sum(helpers.values())
    weight = sum(rest.values())
    return {**measured, **{r: left * w / weight for r, w in rest.items() if w > 0}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", nargs="?")
    ap.add_argument("--results", help="a finished study's results folder (its per-rule CPU)")
    ap.add_argument("--rule", action="append", default=[], metavar="RULE=CPU_S")
    ap.add_argument("--helper", action="append", default=[], metavar="ROW=CPU_S")
    ap.add_argument("--total", type=float, help="the study's CPU-s of jobs (with --rule: the rest is spread)")
    ap.add_argument("--shares", help="a measured run's results folder whose CPU per job spreads the rest")
    ap.add_argument("--commit", default="")
    ap.add_argument("--date", default="")
    ap.add_argument("--conditions", default="")
    ap.add_argument("--source", default="")
    ap.add_argument("--refresh", action="store_true")
    args = ap.parse_args()
    data = json.loads(FILE.read_text()) if FILE.exists() else {"format": MEASURED_FORMAT, "studies": {}}
    if args.refresh:
        for rec in data["studies"].values():
            rec["jobs"] = observations(rec["config"], rec["measured"])
    else:
        if args.results:
            costs = study_cost(args.results, logs_dir_of(args.results), load_plan(args.config).local_rules())
            measured = {n: c.cpu_s for n, c in costs.items() if not is_helper(n) and c.cpu_s > 0}
            helpers = {n: c.cpu_s / c.jobs for n, c in costs.items() if is_helper(n)}  # one per snakemake run
        else:
            measured, helpers = _pairs(args.rule), _pairs(args.helper)
            if args.total is not None:
                measured = spread(args.config, measured, args.total, helpers, args.shares)
        study = load_plan(args.config).study["study"]
        data["studies"][study] = {
            "config": args.config, "commit": args.commit, "date": args.date, "conditions": args.conditions,
            "source": args.source, "measured": {k: round(v, 2) for k, v in sorted(measured.items())},
            "helper_cpu_s": {k: [round(v, 2)] for k, v in helpers.items()},
            "jobs": observations(args.config, measured)}
    atomic_write_json(FILE, data)
    for name, rec in data["studies"].items():
        total = sum(rec["measured"].values()) + sum(sum(v) for v in rec["helper_cpu_s"].values())
        print(f"{name}: {total:,.1f} CPU-s of jobs measured ({rec['commit']}, {rec['date']}), {len(rec['jobs'])} rules")


if __name__ == "__main__":
    main()
