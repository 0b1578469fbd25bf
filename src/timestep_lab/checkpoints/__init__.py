"""Checkpoint files: every format we read, behind one dispatcher (:mod:`.load`).

================================  ==============================================================
module                            holds
================================  ==============================================================
:mod:`.load`                      the dispatcher: :func:`load_pretrained`,
                                  :func:`load_for_inference`, :func:`load_init_weights`
:mod:`.native`                    our ``model.pt`` / snapshots / ``checkpoint.pt`` and their
                                  ``format`` tags; :func:`load_model`
:mod:`.diffusers`                 diffusers folders: scheduler config -> our process, the run
                                  config that fine-tunes one
:mod:`.guided_diffusion`          openai guided-diffusion state dicts, learned sigma
:mod:`.info`                      the ``info`` dict and :class:`LoadedModel` loaders return
================================  ==============================================================

The supported references and how their processes map to ours: docs/methods.md, section 3.1
("Reference model"). Networks live in :mod:`timestep_lab.models`; this package knows file formats, not the training
loop (which writes our files, with the format tags defined here).
"""

from timestep_lab.checkpoints.diffusers import diffusers_run_config, diffusers_schedule
from timestep_lab.checkpoints.guided_diffusion import (
    GUIDED_DIFFUSION_256_UNCOND,
    FirstChannels,
    build_guided_diffusion_unet,
    guided_diffusion_flags,
    infer_guided_diffusion_flags,
)
from timestep_lab.checkpoints.info import LoadedModel
from timestep_lab.checkpoints.load import (
    FORMATS,
    load_for_inference,
    load_init_weights,
    load_pretrained,
)
from timestep_lab.checkpoints.native import (
    CHECKPOINT_FORMAT,
    MODEL_FORMAT,
    SNAPSHOT_FORMAT,
    load_model,
)

__all__ = [
    "CHECKPOINT_FORMAT", "MODEL_FORMAT", "SNAPSHOT_FORMAT", "FORMATS", "GUIDED_DIFFUSION_256_UNCOND", "FirstChannels",
    "LoadedModel", "build_guided_diffusion_unet", "diffusers_run_config", "diffusers_schedule",
    "guided_diffusion_flags", "infer_guided_diffusion_flags", "load_for_inference", "load_init_weights",
    "load_model", "load_pretrained",
]
