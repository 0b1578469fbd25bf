"""A run's ``run.yaml``: its run-table config plus what is only known when the job runs.

Knows the run-config file format (through :mod:`timestep_lab.config`) and the two run-time
facts: the model a run starts from and, for slot fine-tuning, the slot ranges measured on the
reference model. Imports no torch at module level (the Snakefile imports this package at DAG
build); reading a diffusers folder's schedule needs the checkpoint code, imported only then.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Mapping

from timestep_lab.config import config_from_dict, dump_config

__all__ = ["write_run_config"]


def write_run_config(cfg: Mapping[str, Any], path: str, *, init_from: str | None = None,
                     slots_file: str | None = None) -> None:
    """Write a run's config file, filling in what is only known at run time: the model to start
    from and, for slot fine-tuning, the slot ranges measured on the reference model.

    An ``init_from`` that is a folder is a diffusers ``UNet2DModel`` (the only checkpoint format
    that is a folder): the run then trains that network, so its ``model`` section is replaced by
    ``{name: diffusers_unet2d, pretrained: <folder>, pretrained_format: diffusers}`` and its
    ``diffusion`` section takes the folder's ``num_timesteps``, ``schedule``,
    ``schedule_params``, ``prediction`` and ``variance`` (from ``scheduler_config.json``; see
    :func:`timestep_lab.models.pretrained.diffusers_run_config`), so the fine-tuned model is
    trained on the very process the reference was profiled and sampled with.
    """
    cfg = copy.deepcopy(dict(cfg))
    if init_from:
        cfg.setdefault("train", {})["init_from"] = str(init_from)
    if init_from and Path(init_from).is_dir():
        # torch-heavy checkpoint code, needed only for a diffusers folder: imported here so the
        # run table stays importable at DAG build without torch
        from timestep_lab.checkpoints import diffusers_run_config

        pre = diffusers_run_config(init_from)
        cfg["model"] = pre["model"]
        # schedule_params belong to the folder's schedule: replace them rather than merge
        cfg["diffusion"] = {**(cfg.get("diffusion") or {}), **pre["diffusion"]}
    if slots_file:
        ranges = json.loads(Path(slots_file).read_text())["slots"]
        cfg.setdefault("timesteps", {}).setdefault("params", {})["slots"] = [list(r) for r in ranges]
    dump_config(config_from_dict(cfg, f"{path} (run config)"), path)
