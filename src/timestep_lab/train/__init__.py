"""Training: one optimizer step and the loop around it.

==================  ==========================================================================
module              holds
==================  ==========================================================================
:mod:`.step`        :class:`TrainStep` / :func:`build_train_step`: one optimizer step, the
                    loss and VLB closures, the torch.compile fallback
:mod:`.monitor`     per-log-interval sums on the device (per-bin losses), the non-finite guard
:mod:`.loop`        :func:`train`: resume, logging, checkpoints, snapshots, final files
:mod:`.files`       the run folder (:class:`RunPaths`), resume checks, publishing
:mod:`.mixed_heads` the per-t inference head table of a ``mixed`` model, measured at the end
==================  ==========================================================================

The objective, optimizer, EMA, batch accounting and resume rules: docs/methods.md, section 7.
"""

from timestep_lab.train.files import RunPaths, snapshot_name
from timestep_lab.train.loop import TrainResult, train
from timestep_lab.train.monitor import LOG_BINS, NonFiniteLossError
from timestep_lab.train.step import StepOutput, TrainStep, build_train_step

__all__ = ["train", "build_train_step", "TrainStep", "StepOutput", "snapshot_name", "TrainResult", "NonFiniteLossError",
           "RunPaths", "LOG_BINS"]
