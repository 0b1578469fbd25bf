"""``python -m timestep_lab``: the command line of :mod:`timestep_lab.cli`. A command that succeeds
ends its stderr with its CPU and memory use (:mod:`timestep_lab.usage`), which
``benchmarks/study_cost.py`` reads from the jobs' logs."""

import sys

from timestep_lab.cli import main
from timestep_lab.usage import usage_line

status = main()
if status == 0:
    print(usage_line(), file=sys.stderr)
sys.exit(status)
