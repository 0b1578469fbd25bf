"""``python -m timestep_lab``: the command line of :mod:`timestep_lab.cli`. A command that succeeds
ends its stderr with its CPU and memory use (:mod:`timestep_lab.cost.usage`), which
``benchmarks/study_cost.py`` reads from the jobs' logs, and then leaves without the
interpreter's teardown (:func:`timestep_lab.cost.usage.exit_now`).

In a local study the command runs in a worker forked from the warm-start server, which has
torch imported already (:func:`timestep_lab.warmstart.forward_if_asked`, the one call), and this
process only waits for it.

First of all, before numpy or torch is loaded here or the command is handed to the server, the
reproducibility level the environment names (``TIMESTEP_LAB_ARITHMETIC``, set by the workflow)
pins the libraries' CPU code paths (:func:`timestep_lab.arithmetic.pin`): a command rerun by hand
with that one variable computes the same numbers as the study's job did.
"""

import os
import sys

from timestep_lab.arithmetic import pin, this_cpu
from timestep_lab.warmstart import forward_if_asked

try:
    pin(os.environ, **this_cpu())
except ValueError as exc:  # a level this code or this CPU does not know: one line, as for any bad input
    sys.exit(f"error: {exc}")

forwarded = forward_if_asked()
if forwarded is not None:
    sys.exit(forwarded)

from timestep_lab.cli import run_command  # noqa: E402 - only when the command runs here
from timestep_lab.cost.usage import exit_now  # noqa: E402

status = run_command()
if status == 0:
    exit_now(status)
sys.exit(status)
