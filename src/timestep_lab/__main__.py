"""``python -m timestep_lab``: the command line of :mod:`timestep_lab.cli`. A command that succeeds
ends its stderr with its CPU and memory use (:mod:`timestep_lab.usage`), which
``benchmarks/study_cost.py`` reads from the jobs' logs, and then leaves without the
interpreter's teardown (:func:`timestep_lab.usage.exit_now`)."""

import sys

from timestep_lab.cli import main
from timestep_lab.usage import exit_now, usage_line

status = main()
if status == 0:
    print(usage_line(), file=sys.stderr)
    exit_now(status)
sys.exit(status)
