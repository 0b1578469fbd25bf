# Warm start (timestep_lab.warmstart, docs/design.md "Warm start"): on a local run, jobs fork
# from one server process that has imported torch, torchvision, torch-fidelity and clean-fid
# once, instead of each paying 2-3.5 CPU-s for it. Not on a cluster (jobs land on other nodes,
# and must run inside their own SLURM allocation), not in the snakemake a cluster job runs, not
# in a dry run, not for a run of fewer than MIN_JOBS commands (the server's own imports cost
# more). Same numbers either way (tests/test_warmstart.py). TIMESTEP_LAB_WARM_START=0 turns it
# off. The executor is decided in `onstart`, not here: while the Snakefile is read, Snakemake
# has no executor yet and `workflow.local_exec` is True even for --executor slurm
# (tests/test_slurm.py asserts that a cluster run starts no server).
import os as _os

from timestep_lab.warmstart.launch import MIN_JOBS, WarmStart

WARM_START = WarmStart(f"{LOGS}/warm_start.log")


def _commands_to_run():
    """How many shell jobs (`python -m timestep_lab ...`) this run starts; `run:` jobs run in
    Snakemake itself. Jobs a checkpoint adds later are not known yet."""
    return sum(1 for job in workflow.dag.needrun_jobs() if job.is_shell)


onstart:
    if (
        _os.environ.get("TIMESTEP_LAB_WARM_START", "1") != "0"
        and workflow.local_exec
        and workflow.is_main_process
        and _commands_to_run() >= MIN_JOBS
    ):
        WARM_START.start()


onsuccess:
    WARM_START.stop()


onerror:
    WARM_START.stop()
