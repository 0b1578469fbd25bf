"""Our own files: ``model.pt`` (final), ``snapshots/snapshot-NNNNNNNNN.pt`` (EMA weights during
training, named by images seen) and ``train_state/checkpoint.pt`` (full resumable state).

They are plain dicts of tensors and Python values, loaded with ``weights_only=True``, tagged by
``format`` (:data:`MODEL_FORMAT`, :data:`SNAPSHOT_FORMAT`, :data:`CHECKPOINT_FORMAT`). Each
carries its resolved run config, so a model file alone says how it was trained and which
network to rebuild. Writing them is the training loop's job (:mod:`timestep_lab.train`); this
module only reads them. Must not know foreign formats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from timestep_lab.artifacts.io import ArtifactError, load_torch, sha256_file
from timestep_lab.checkpoints.info import LoadedModel, base_info, count_parameters
from timestep_lab.components import build_conditioning, build_diffusion, build_model, build_prediction
from timestep_lab.config import RunConfig, config_from_dict
from timestep_lab.processes.predictions import HEADS, MixedPrediction

__all__ = ["CHECKPOINT_FORMAT", "MODEL_FORMAT", "SNAPSHOT_FORMAT", "check_metadata", "load_model", "load_native",
           "load_native_for_inference", "native_init_state"]

CHECKPOINT_FORMAT = "timestep_lab.checkpoint/1"
MODEL_FORMAT = "timestep_lab.model/1"
SNAPSHOT_FORMAT = "timestep_lab.snapshot/1"


def load_model(path: str | Path, *, use_ema: bool = True, device: Any = "cpu") -> tuple[nn.Module, RunConfig, dict]:
    """Load ``model.pt`` or a snapshot: ``(network in eval mode, its RunConfig, metadata)``."""
    path = Path(path)
    obj = load_torch(path, map_location="cpu")
    if not isinstance(obj, dict) or obj.get("format") not in (MODEL_FORMAT, SNAPSHOT_FORMAT, CHECKPOINT_FORMAT):
        raise ArtifactError(f"{path}: not a timestep_lab model, snapshot or checkpoint")
    check_metadata(path, obj)
    cfg = config_from_dict(obj["config"], source=f"{path} (embedded config)")
    model = build_model(cfg, obj["image_size"], obj["channels"])
    key = "ema" if use_ema else "model"
    if key not in obj:
        raise ArtifactError(f"{path}: has no '{key}' weights")
    state = obj[key]
    if not isinstance(state, dict):
        raise ArtifactError(f"{path}: bad metadata: '{key}' must be a mapping of weights, got {type(state).__name__}")
    try:
        if obj["format"] == CHECKPOINT_FORMAT and key == "ema":
            state = dict(zip([n for n, _ in model.named_parameters()], state["params"]))
            state.update(dict(zip([n for n, _ in model.named_buffers()], obj["ema"]["buffers"])))
        model.load_state_dict(state)
    except (RuntimeError, TypeError, KeyError, AttributeError) as exc:
        raise ArtifactError(f"{path}: weights do not fit the configured network ({str(exc).splitlines()[0]})") from None
    model.to(device).eval()
    meta = {k: v for k, v in obj.items() if k not in ("model", "ema", "optimizer")}
    return model, cfg, meta


def _whole(value: Any, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def check_metadata(path: str | Path, obj: dict) -> None:
    """The plain items of one of our files, checked before anything is built from them: the
    embedded ``config`` a mapping, ``image_size`` and ``channels`` whole numbers >= 1, ``nimg`` and
    ``step`` whole numbers >= 0, ``status`` text, ``inputs`` (when recorded) a mapping. A file
    re-written with other values (its checksum then matches) is an :class:`ArtifactError`
    naming the file and the item, never a traceback from deep inside the network code."""
    if not isinstance(obj.get("config"), dict):
        raise ArtifactError(f"{path}: bad metadata: 'config' must be the run config (a mapping), got "
                            f"{type(obj.get('config')).__name__}")
    for key, low in (("image_size", 1), ("channels", 1)):
        if not _whole(obj.get(key), low):
            raise ArtifactError(f"{path}: bad metadata: '{key}' must be a whole number >= {low}, got {obj.get(key)!r}")
    for key in ("nimg", "step"):
        if key in obj and not _whole(obj[key], 0):
            raise ArtifactError(f"{path}: bad metadata: '{key}' must be a whole number >= 0, got {obj[key]!r}")
    if "status" in obj and not isinstance(obj["status"], str):
        raise ArtifactError(f"{path}: bad metadata: 'status' must be text, got {obj['status']!r}")
    if "inputs" in obj and not isinstance(obj["inputs"], dict):
        raise ArtifactError(f"{path}: bad metadata: 'inputs' must be a mapping, got {type(obj['inputs']).__name__}")


def load_native(path: Path, device: Any) -> tuple[nn.Module, dict[str, Any]]:
    """``load_pretrained(path, "timestep_lab")``: the EMA network and the common ``info``; the
    module returns what its prediction type says (``info["prediction"]``)."""
    net, cfg, meta = load_model(path, device=device)
    info = base_info("timestep_lab", path)
    d = cfg.diffusion
    info.update(prediction=d.prediction, num_timesteps=d.num_timesteps,
                schedule={"name": d.schedule, "params": dict(d.schedule_params)}, variance=d.variance,
                image_size=int(meta["image_size"]), channels=int(meta["channels"]),
                out_channels=int(getattr(net, "out_channels", 0)) or None, parameters=count_parameters(net),
                sha256=sha256_file(path))
    return net, info


def load_native_for_inference(path: Path, *, use_ema: bool, device: Any,
                              mixed_inference: str | None) -> LoadedModel:
    """Network, diffusion process and prediction rebuilt from the file's embedded config.

    For a ``mixed`` model the per-t inference head comes from the model file
    (``mixed_inference="profile"``, the run's default) or a fixed head (``eps``/``x0``/``v``)."""
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
    info = {"format": "timestep_lab", "path": str(path), "sha256": sha256_file(path),
            "image_size": int(meta["image_size"]), "channels": int(meta["channels"]),
            "nimg": int(meta.get("nimg", 0)), "status": meta.get("status", "ok"),
            "prediction": cfg.diffusion.prediction, "use_ema": use_ema, "config": meta.get("config"),
            "inputs": meta.get("inputs")}
    return LoadedModel(net, diffusion, prediction, info, build_conditioning(cfg))


def native_init_state(obj: dict, path: str, use_ema: bool) -> dict:
    """The weights ``train.init_from`` takes from one of our files: EMA or raw (``use_ema``)."""
    key = "ema" if use_ema else "model"
    if key not in obj:
        raise ArtifactError(f"{path}: train.init_from has no '{key}' weights")
    return obj[key]
