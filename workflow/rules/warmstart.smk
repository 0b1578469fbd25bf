# Warm start (timestep_lab.warmstart, docs/design.md "Warm start"): jobs fork from one server
# process that has imported torch, torchvision, torch-fidelity and clean-fid once, instead of each
# paying 2-3.5 CPU-s for it. Same numbers either way (tests/test_warmstart.py);
# TIMESTEP_LAB_WARM_START=0 turns it off. A local-run convenience only: never for a run of fewer
# than MIN_JOBS commands (the server's own imports cost more), never in a dry run, never on a
# cluster. `onstart` below starts it; the executor is decided there, not while the Snakefile is
# read: Snakemake has no executor yet then, and `workflow.local_exec` is True even for --executor
# slurm. A cluster run's submitting snakemake starts none, and a cluster job's own snakemake gets
# --no-hooks, so none runs `onstart`: every command of a cluster run starts cold, a process of
# its own in its SLURM allocation (tests/test_slurm.py).
import os as _os

from timestep_lab.warmstart.launch import MIN_JOBS, WarmStart

WARM_START = WarmStart(f"{LOGS}/warm_start.log")


def _warm_start_wanted():
    return _os.environ.get("TIMESTEP_LAB_WARM_START", "1") != "0"


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
