"""A longer run continued from a shorter run of the same config: its training state copied in.

A sequential study (docs/methods.md §14) may train a claim's runs longer after a look. The longer
run is a run of its own (its own ``train.total_kimg``, id and folder: the shorter run's files, read
by the claims judged at that length, never change), but it need not train from image 0: the
shorter run's training state *is* the longer run's state at the shorter length, because nothing a
training step computes depends on ``train.total_kimg`` (the learning-rate, EMA, warm-up and sampler
schedules are all in images seen, and the state holds the optimizer, EMA, sampler, data stream and
generator). :func:`seed_state` copies that state into the longer run's empty folder; training then
resumes it as it would resume a killed run, and ends with the same weights as the
longer run trained from scratch, tensor for tensor (``tests/test_continuation.py``).

Only a state of this very run at a shorter length is taken, by the rule every resume follows
(:func:`timestep_lab.train.files.not_this_run`): the same config up to
:data:`~timestep_lab.config.identity.RESUMABLE_CHANGES` (length, logging, device, ...), the same
data content, parent model and reproducibility level, not past this run's length. Anything else is
an error naming the difference (resuming would set the copy aside and train from image 0: the
right weights, at the whole cost, which a workflow asking for a continuation should hear about). A
run folder that has a state or a model of its own keeps it: continuation only fills an empty folder.

The copy: ``checkpoint.pt`` and the snapshots are hard links where the file system allows (training
replaces them atomically, never writes into them), the log a real copy (a resumed run truncates and
appends to it). It is built beside the folder and renamed into place, so a killed copy leaves no
half state. Must not know the training step.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from timestep_lab.artifacts.io import ArtifactError
from timestep_lab.config import RunConfig
from timestep_lab.distributed import World
from timestep_lab.train.files import RunPaths, link_or_copy, load_state, not_this_run

__all__ = ["seed_state", "continue_run"]

log = logging.getLogger(__name__)


def seed_state(paths: RunPaths, shorter: str | Path, cfg: RunConfig, inputs: dict) -> bool:
    """Copy the training state of the run folder ``shorter`` into ``paths`` (module docstring).
    ``inputs``: what this run is made from (:func:`timestep_lab.train.files.run_inputs`).

    :returns: True when copied; False when ``paths`` already has a state or a model of its own
        (it is resumed or left as it is, as without continuation).
    :raises ArtifactError: ``shorter`` has no training state, or its state is not this run's at a
        shorter length (:func:`~timestep_lab.train.files.not_this_run`'s reason).
    """
    if paths.checkpoint.exists() or paths.model.exists():
        return False
    src = RunPaths(Path(shorter))
    if not src.checkpoint.exists():
        raise ArtifactError(f"{src.checkpoint}: no training state to continue from (train the shorter run first)")
    ckpt = load_state(src.checkpoint)
    why = not_this_run(ckpt, cfg, inputs)
    if why:
        raise ArtifactError(f"{shorter}: not a shorter run of {paths.out}: its train_state/ {why}")
    nimg = int(ckpt.get("nimg", 0))
    paths.out.mkdir(parents=True, exist_ok=True)
    tmp = paths.out / f".train_state.continue-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "snapshots").mkdir(parents=True)
    link_or_copy(src.checkpoint, tmp / src.checkpoint.name)
    if src.state_log.exists():
        shutil.copyfile(src.state_log, tmp / src.state_log.name)
    for snap in sorted(src.state_snapshots.glob("*.pt")) if src.state_snapshots.exists() else ():
        link_or_copy(snap, tmp / "snapshots" / snap.name)
    shutil.rmtree(paths.state, ignore_errors=True)  # an empty or partial state folder: nothing of this run's
    os.replace(tmp, paths.state)
    log.info("%s: continues %s from %.1f kimg", paths.out, shorter, nimg / 1000)
    return True


def continue_run(paths: RunPaths, shorter: str | Path, cfg: RunConfig, inputs: dict, world: World) -> None:
    """:func:`seed_state` by the main process only (the one that writes files), every process waiting
    for it: then every rank resumes the copied state."""
    if world.is_main:
        seed_state(paths, shorter, cfg, inputs)
    world.barrier()
