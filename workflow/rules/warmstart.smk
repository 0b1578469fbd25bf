# Warm start (timestep_lab.warmstart, docs/design.md "Warm start"): jobs fork from one server
# process that has imported torch, torchvision, torch-fidelity and clean-fid once, instead of each
# paying 2-3.5 CPU-s for it. Same numbers either way (tests/test_warmstart.py);
# TIMESTEP_LAB_WARM_START=0 turns it off. Never for a run of fewer than MIN_JOBS commands (the
# server's own imports cost more), never in a dry run. Two places start one:
# * a local run: `onstart` below. The executor is decided there, not while the Snakefile is read:
#   Snakemake has no executor yet then, and `workflow.local_exec` is True even for --executor slurm.
#   A cluster run's submitting snakemake starts none: its jobs land on other nodes and must run
#   inside their own SLURM allocation (tests/test_slurm.py).
# * a cluster group job (several jobs in one SLURM allocation: the profile's `groups`): the
#   snakemake the job's batch script runs (remote mode; it runs each of the group's jobs through
#   `srun snakemake` with that one job) starts one for them while it reads the Snakefile. Such a
#   snakemake gets --no-hooks, so no `onstart`, and while the Snakefile is read its settings are
#   not set yet: its command line says what it is (--local-groupid and the group's --target-jobs,
#   which only a group job's gets). The server is its child in the job's allocation, and the
#   jobs' commands fork from it there; it ends with that snakemake (its stdin is a pipe from it).
#   The profile groups CPU-only rules alone (GPU rules never share an allocation).
import atexit as _atexit
import os as _os
import sys as _sys

from timestep_lab.warmstart.launch import MIN_JOBS, WarmStart, group_job_size

WARM_START = WarmStart(f"{LOGS}/warm_start.log")


def _warm_start_wanted():
    return _os.environ.get("TIMESTEP_LAB_WARM_START", "1") != "0"


if _warm_start_wanted() and group_job_size(_sys.argv, workflow.remote_exec) >= MIN_JOBS:
    GROUP_WARM_START = WarmStart(f"{LOGS}/warm_start/slurm-{_os.environ.get('SLURM_JOB_ID', _os.getpid())}.log")
    GROUP_WARM_START.start()
    _atexit.register(GROUP_WARM_START.stop)  # reaped, so that its log ends with its usage line


def _commands_to_run():
    """How many commands (`python -m timestep_lab ...`) this run starts (every job but the named
    targets is one). Jobs a checkpoint adds later are not known yet."""
    return sum(1 for job in workflow.dag.needrun_jobs() if job.is_shell)


onstart:
    if (
        _warm_start_wanted()
        and workflow.local_exec
        and workflow.is_main_process
        and _commands_to_run() >= MIN_JOBS
    ):
        WARM_START.start()


onsuccess:
    WARM_START.stop()


onerror:
    WARM_START.stop()
