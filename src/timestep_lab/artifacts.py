"""Trained-model files and how to load them.

``model.pt`` (final), ``snapshots/snapshot-NNNNNNNNN.pt (images seen)`` (EMA weights during training) and
``train_state/checkpoint.pt`` (full resumable state) are plain dicts of tensors and Python
values, loaded with ``weights_only=True``. Each carries its resolved run config, so a model
file alone says how it was trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from timestep_lab.components import build_model
from timestep_lab.config import RunConfig, config_from_dict
from timestep_lab.diffusion import GaussianDiffusion
from timestep_lab.io import ArtifactError, load_torch
from timestep_lab.predictions import HEADS, MixedPrediction, Prediction

__all__ = ["CHECKPOINT_FORMAT", "MODEL_FORMAT", "SNAPSHOT_FORMAT", "load_model", "LoadedModel", "load_for_inference"]

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


@dataclass
class LoadedModel:
    """A network with everything needed to use it: ``net(x_t, t)``, its diffusion process and
    prediction type, and ``info`` (image_size, channels, nimg, format, sha256, ...)."""

    net: nn.Module
    diffusion: GaussianDiffusion
    prediction: Prediction
    info: dict[str, Any]


def load_for_inference(path: str | Path, fmt: str = "timestep_lab", *, use_ema: bool = True, device: Any = "cpu",
                       mixed_inference: str | None = None) -> LoadedModel:
    """Load our ``model.pt``/snapshots (``fmt="timestep_lab"``) or a pretrained checkpoint
    (``diffusers``, ``guided_diffusion``) for sampling and analysis.

    For a ``mixed`` model the per-t inference head comes from the model file
    (``mixed_inference="profile"``, the run's default) or a fixed head (``eps``/``x0``/``v``).
    """
    from timestep_lab.components import build_diffusion, build_prediction
    from timestep_lab.diffusion import GaussianDiffusion as _GD
    from timestep_lab.io import sha256_file
    from timestep_lab.predictions import make_prediction
    from timestep_lab.schedules import get_schedule

    path = Path(path)
    if fmt == "timestep_lab":
        net, cfg, meta = load_model(path, use_ema=use_ema, device=device)
        diffusion, prediction = build_diffusion(cfg), build_prediction(cfg)
        mode = mixed_inference or cfg.diffusion.mixed_inference
        if isinstance(prediction, MixedPrediction):
            if mode == "profile":
                if meta.get("mixed_head_per_t") is None:
                    raise ArtifactError(f"{path}: mixed model without a measured per-t head table "
                                        f"(diffusion.mixed_inference=profile); choose a fixed head eps|x0|v")
                prediction.head_per_t = torch.as_tensor(meta["mixed_head_per_t"], dtype=torch.long)
            else:
                prediction.head_per_t = torch.full_like(prediction.head_per_t, HEADS.index(mode))
        info = {"format": fmt, "path": str(path), "sha256": sha256_file(path), "image_size": int(meta["image_size"]),
                "channels": int(meta["channels"]), "nimg": int(meta.get("nimg", 0)), "status": meta.get("status", "ok"),
                "prediction": cfg.diffusion.prediction, "use_ema": use_ema, "config": meta.get("config")}
        return LoadedModel(net, diffusion, prediction, info)

    from timestep_lab.models.pretrained import load_pretrained

    net, pinfo = load_pretrained(path, fmt, device=device)
    if pinfo.get("schedule") is None:
        raise ArtifactError(f"{path}: cannot tell the noise schedule of this checkpoint "
                            f"({pinfo.get('schedule_error') or 'unknown'})")
    sched = pinfo["schedule"]
    alpha_bar = get_schedule(sched["name"], int(pinfo["num_timesteps"]), **sched.get("params", {}))
    diffusion = _GD(alpha_bar, pinfo.get("variance") or "fixed_large")
    prediction = make_prediction(pinfo.get("prediction", "eps"), num_timesteps=int(pinfo["num_timesteps"]))
    info = {**pinfo, "format": fmt, "path": str(path), "nimg": None, "status": "ok", "use_ema": None}
    return LoadedModel(net, diffusion, prediction, info)
