"""snakemake as the SLURM tests start it: the real CLI, with the SLURM executor polling at a steady
interval.

The executor plugin (snakemake-executor-plugin-slurm 2.8) backs off by 10 s after every status
check that finds no job finished, up to 180 s, a guard for busy production clusters. On the tests'
one-node cluster a phase of the workflow (one or two group jobs of 1-2 minutes) then ends well
before the next check: in the cluster rehearsal of stop 47, 143 of the 555 s of snakemake's run
were waits between a group job's end and the check that saw it (15, 20, 52, 33 and 23 s at its
five phases). Here every check is at most ``CAP_S`` after the one before: the jobs, their groups,
sbatch and squeue are the ones users get. Usage: ``python tests/snakemake_steady_poll.py ARGS``.
"""

from __future__ import annotations

import sys

from snakemake_executor_plugin_slurm import Executor
from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor

CAP_S = 3  # seconds: a squeue call on this cluster takes ~0.05 s

_interval = RemoteExecutor.next_seconds_between_status_checks
Executor.next_seconds_between_status_checks = _interval.setter(
    lambda self, seconds: _interval.fset(self, min(seconds, CAP_S)))

if __name__ == "__main__":
    from snakemake.cli import main

    sys.argv[0] = "snakemake"
    sys.exit(main())
