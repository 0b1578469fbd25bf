"""``python tests/slurm_polls.py ARGS``: ``snakemake ARGS`` with the SLURM executor's status checks
at most :data:`POLL_CAP_S` apart. Tests only: the SLURM tests start snakemake through this.

The slurm executor plugin (2.8) waits 10 s longer after every status check that finds no job
finished, up to 180 s, and returns to ``--slurm-init-seconds-before-status-checks`` once one has.
On a real cluster that spares the scheduler; on the tests' one-node loopback cluster, where a job
takes seconds, a finished job waited up to tens of seconds to be seen, and the jobs after it as
long to be submitted. The cap changes only when snakemake asks (``Executor.sleep`` reads
``next_seconds_between_status_checks``), not what it submits or how it reads the answers. Where
the plugin no longer has that attribute, snakemake runs unchanged.
"""

from __future__ import annotations

import sys

POLL_CAP_S = 2.0


def cap_status_polls(cap_s: float = POLL_CAP_S) -> bool:
    """Wrap the plugin's ``check_active_jobs`` so that its back-off never exceeds ``cap_s``;
    False (nothing patched) when the plugin lacks what this relies on."""
    try:
        from snakemake_executor_plugin_slurm import Executor
    except ImportError:
        return False
    check = getattr(Executor, "check_active_jobs", None)
    if check is None or not hasattr(Executor, "next_seconds_between_status_checks"):
        return False

    async def check_active_jobs(self, active_jobs):
        async for job in check(self, active_jobs):
            yield job
        if (self.next_seconds_between_status_checks or 0) > cap_s:
            self.next_seconds_between_status_checks = cap_s

    Executor.check_active_jobs = check_active_jobs
    return True


if __name__ == "__main__":
    cap_status_polls()
    from snakemake.cli import main

    sys.exit(main(sys.argv[1:]))
