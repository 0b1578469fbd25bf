"""``python -m timestep_lab``: the command line of :mod:`timestep_lab.cli`. A command that succeeds
ends its stderr with its CPU and memory use (:mod:`timestep_lab.cost.usage`), which
``benchmarks/study_cost.py`` reads from the jobs' logs, and then leaves without the
interpreter's teardown (:func:`timestep_lab.cost.usage.exit_now`).

In a local study the workflow runs a warm-start server and names its socket in
``TIMESTEP_LAB_WARM_SOCKET``: the command then runs in a worker forked from that server, which
has torch imported already (:mod:`timestep_lab.warmstart`), and this process only waits for it.
Under torchrun (``LOCAL_RANK`` set) every rank starts itself, as torchrun expects.
"""

import os
import sys

from timestep_lab.warmstart import SOCKET_ENV

if os.environ.get(SOCKET_ENV) and "LOCAL_RANK" not in os.environ:
    from timestep_lab.warmstart.client import forward

    forwarded = forward(os.environ[SOCKET_ENV])
    if forwarded is not None:
        sys.exit(forwarded)

from timestep_lab.cli import run_command  # noqa: E402 - only when the command runs here
from timestep_lab.cost.usage import exit_now  # noqa: E402

status = run_command()
if status == 0:
    exit_now(status)
sys.exit(status)
