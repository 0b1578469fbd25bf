"""What a finished study cost, per rule: CPU-s, wall-s, max RSS, and the share spent starting processes.

    python benchmarks/study_cost.py results/digits            # a table per rule and a total line
    python benchmarks/study_cost.py results/smoke --json cost.json

Reads the Snakemake benchmark file every rule writes (results/<study>/benchmarks/<rule>/*.tsv;
timestep_lab.cost.measured). The start-up share is measured here, in this run: the CPU time of
starting one job process the way every job starts (the interpreter, torch and the CLI, then the
fast exit a successful command takes, timestep_lab.cost.usage.exit_now), the minimum over a few starts,
times the number of jobs that started a process of their own (rules not declared `localrules:`,
and whose usage line names no other start, start=...), plus the CPU of the processes that served
the jobs (their named usage lines in logs/<study>/*.log; the table's "(NAME)" rows). It is the
least a fresh job pays: sampling and scoring jobs also import torchvision, torch-fidelity and
clean-fid (about 1.6 CPU-s more; --startup-imports measures that instead).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

from timestep_lab.cost.measured import format_cost, logs_dir_of, study_cost

STARTUP = "import os, torch, timestep_lab.cli; os._exit(0)"
SCORING_STARTUP = "import os, torch, torchvision, torch_fidelity, cleanfid, timestep_lab.cli; os._exit(0)"


def startup_cpu_seconds(code: str = STARTUP, repeats: int = 3) -> float:
    """CPU seconds (user + system) of ``python -c code`` in a child process, the minimum of ``repeats``."""
    best = float("inf")
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", code], check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    return best


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results_dir", type=Path, help="a finished study's results folder, e.g. results/digits")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    p.add_argument("--no-startup", action="store_true", help="skip measuring the start-up cost")
    p.add_argument("--startup-imports", action="store_true",
                   help="charge every job the imports of a scoring job (torchvision, torch-fidelity, clean-fid): an upper bound")
    p.add_argument("--logs", type=Path, default=None, help="the study's job logs (default: logs/<study> beside results/)")
    args = p.parse_args(argv)
    try:
        costs = study_cost(args.results_dir, args.logs or logs_dir_of(args.results_dir))
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    startup = None if args.no_startup else startup_cpu_seconds(SCORING_STARTUP if args.startup_imports else STARTUP)
    print(format_cost(costs, startup_cpu_s=startup))
    if args.json:
        args.json.write_text(json.dumps({"rules": [c.as_dict() for c in costs.values()],
                                         "startup_cpu_s_per_job": startup}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
