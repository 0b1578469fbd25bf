# Warm start (timestep_lab.warmstart, docs/design.md "Warm start"): on a local run, jobs fork
# from one server process that has imported torch, torchvision, torch-fidelity and clean-fid
# once, instead of each paying 2-3.5 CPU-s for it. Not on a cluster (jobs land on other nodes),
# not in the snakemake a cluster job runs, not in a dry run. Same numbers either way
# (tests/test_warmstart.py). TIMESTEP_LAB_WARM_START=0 turns it off.
import os as _os

from timestep_lab.workflow.warm import WarmStart

WARM_START = WarmStart(
    f"{LOGS}/warm_start.log",
    enabled=_os.environ.get("TIMESTEP_LAB_WARM_START", "1") != "0"
    and workflow.local_exec
    and workflow.is_main_process,
)


onstart:
    WARM_START.start()


onsuccess:
    WARM_START.stop()


onerror:
    WARM_START.stop()
