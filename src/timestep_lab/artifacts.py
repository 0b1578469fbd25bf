"""Trained-model files and how to load them.

``model.pt`` (final), ``snapshots/snapshot-XXXXXXkimg.pt`` (EMA weights during training) and
``train_state/checkpoint.pt`` (full resumable state) are plain dicts of tensors and Python
values, loaded with ``weights_only=True``. Each carries its resolved run config, so a model
file alone says how it was trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from timestep_lab.components import build_model
from timestep_lab.config import RunConfig, config_from_dict
from timestep_lab.io import ArtifactError, load_torch

__all__ = ["CHECKPOINT_FORMAT", "MODEL_FORMAT", "SNAPSHOT_FORMAT", "load_model"]

CHECKPOINT_FORMAT = "timestep_lab.checkpoint/1"
MODEL_FORMAT = "timestep_lab.model/1"
SNAPSHOT_FORMAT = "timestep_lab.snapshot/1"


def load_model(path: str | Path, *, use_ema: bool = True, device: Any = "cpu") -> tuple[nn.Module, RunConfig, dict]:
    """Load ``model.pt`` or a snapshot: ``(network in eval mode, its RunConfig, metadata)``."""
    path = Path(path)
    obj = load_torch(path, map_location="cpu")
    if not isinstance(obj, dict) or obj.get("format") not in (MODEL_FORMAT, SNAPSHOT_FORMAT, CHECKPOINT_FORMAT):
        raise ArtifactError(f"{path}: not a timestep_lab model, snapshot or checkpoint")
    cfg = config_from_dict(obj["config"], source=f"{path} (embedded config)")
    model = build_model(cfg, obj["image_size"], obj["channels"])
    key = "ema" if use_ema else "model"
    if key not in obj:
        raise ArtifactError(f"{path}: has no '{key}' weights")
    state = obj[key]
    if obj["format"] == CHECKPOINT_FORMAT and key == "ema":
        state = dict(zip([n for n, _ in model.named_parameters()], state["params"]))
        state.update(dict(zip([n for n, _ in model.named_buffers()], obj["ema"]["buffers"])))
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ArtifactError(f"{path}: weights do not fit the configured network ({str(exc).splitlines()[0]})") from None
    model.to(device).eval()
    meta = {k: v for k, v in obj.items() if k not in ("model", "ema", "optimizer")}
    return model, cfg, meta
