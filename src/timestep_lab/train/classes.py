"""The class labels a class-conditional network trains on (:func:`class_conditioning`), checked
against the network where a run starts (docs/methods.md §7.8)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from timestep_lab.config import ConfigError, RunConfig
from timestep_lab.data import PreparedData
from timestep_lab.latents import LatentData

__all__ = ["class_conditioning"]


def class_conditioning(cfg: RunConfig, data: PreparedData | LatentData, net: nn.Module) -> dict[str, Any]:
    """:class:`TrainStep`'s ``labels`` (the data's classes, long ``[N]`` on the host),
    ``num_classes`` and ``class_dropout`` for a class-conditional network (``net.num_classes`` >
    0); ``labels`` None for an unconditional one, which never sees labels (CIFAR-10's
    unconditional UNets train on a labelled folder). :class:`ConfigError` naming the key when a
    class-conditional network gets a folder without labels, or labels outside ``[0, num_classes)``."""
    num_classes = int(getattr(net, "num_classes", 0) or 0)
    if num_classes <= 0:
        return {"labels": None, "num_classes": 0, "class_dropout": 0.0}
    if data.labels is None:
        raise ConfigError(f"model.params.num_classes: {num_classes} makes the model class-conditional, but "
                          f"{cfg.data.path} has no class labels (CelebA-HQ and FFHQ have none); set num_classes: 0 "
                          f"for an unconditional model")
    labels = torch.from_numpy(np.asarray(data.labels).astype(np.int64))
    lo, hi = int(labels.min()), int(labels.max())
    if lo < 0 or hi >= num_classes:
        raise ConfigError(f"model.params.num_classes: {num_classes}, but {cfg.data.path} holds labels {lo}..{hi}; "
                          f"set num_classes to the data's number of classes")
    return {"labels": labels, "num_classes": num_classes, "class_dropout": float(getattr(net, "class_dropout", 0.0))}
