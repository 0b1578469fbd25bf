"""The checkpoint-format dispatcher: one entry per use, whatever the file's format.

==================  ==========================================================================
``fmt``             what ``path`` is
==================  ==========================================================================
``timestep_lab``    our own ``model.pt`` / snapshot / checkpoint (:mod:`.native`)
``diffusers``       a ``diffusers.UNet2DModel`` folder with its ``scheduler_config.json``
                    (:mod:`.diffusers`), e.g. google/ddpm-cifar10-32
``guided_diffusion`` openai guided-diffusion's released state dict (:mod:`.guided_diffusion`),
                    e.g. ``256x256_diffusion_uncond.pt``
==================  ==========================================================================

:func:`load_pretrained` gives the bare network and its ``info``; :func:`load_for_inference`
adds the diffusion process and prediction type (for sampling and analyses);
:func:`load_init_weights` loads ``train.init_from`` into a run's network (fine-tuning), telling
the format from the file itself. Nothing is ever downloaded. Must not know the training loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import torch
from torch import nn

from timestep_lab.artifacts.io import ArtifactError, load_torch
from timestep_lab.checkpoints.diffusers import load_diffusers
from timestep_lab.checkpoints.guided_diffusion import (
    guided_diffusion_init_state,
    is_guided_diffusion_state,
    load_guided_diffusion,
)
from timestep_lab.checkpoints.info import LoadedModel
from timestep_lab.checkpoints.native import (
    load_native,
    load_native_for_inference,
    native_init_state,
)
from timestep_lab.config import ModelConfig
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import make_prediction
from timestep_lab.processes.schedules import get_schedule

__all__ = ["FORMATS", "load_pretrained", "load_for_inference", "load_init_weights"]

FORMATS = ("timestep_lab", "diffusers", "guided_diffusion")


def load_pretrained(path: str | Path, fmt: str, *, image_size: int | None = None, device: Any = "cpu",
                    overrides: ModelConfig | Mapping[str, Any] | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Load a pretrained network from ``path`` (offline): ``(module, info)``.

    :param fmt: ``timestep_lab``, ``diffusers`` or ``guided_diffusion`` (module docstring).
    :param image_size: the resolution the network is used at (guided-diffusion: places the
        attention layers; default 256 or ``overrides["image_size"]``; diffusers: reported only).
    :param overrides: guided-diffusion only: a dict of flags (keys of
        :data:`~timestep_lab.checkpoints.guided_diffusion.GUIDED_DIFFUSION_256_UNCOND`) or a
        :class:`ModelConfig`, applied over the released 256x256 flags and what the state dict's
        shapes say (``channels``, ``channel_mult``, ``num_res_blocks``, ``learn_sigma``,
        ``resblock_updown``, ``use_scale_shift_norm``, attention placement).
        ``num_head_channels`` (default 64) cannot be read from the file.
    :returns: the module in eval mode on ``device``, ``forward(x [B, C, H, W] float32 in model
        units, t LongTensor[B] 0-based) -> [B, C, H, W]``, and ``info``
        (:mod:`timestep_lab.checkpoints.info`).
    :raises ArtifactError: missing/corrupted files or weights that do not fit, naming the path;
        :class:`~timestep_lab.artifacts.io.UnsafeCheckpointError` for pickles that would run code.
    """
    path = Path(path)
    if fmt not in FORMATS:
        raise ValueError(f"unknown pretrained format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if overrides is not None and fmt != "guided_diffusion":
        raise ValueError(f"overrides are only used for guided_diffusion checkpoints, not {fmt}")
    if fmt == "timestep_lab":
        net, info = load_native(path, device)
    elif fmt == "diffusers":
        net, info = load_diffusers(path, device, image_size)
    else:
        net, info = load_guided_diffusion(path, device, image_size, overrides)
    bad = [name for name, p in net.named_parameters() if p.numel() and not bool(torch.isfinite(p.detach()).all())]
    if bad:
        raise ArtifactError(f"{path}: {len(bad)} parameter tensor(s) contain NaN or Inf (first: {bad[0]})")
    return net, info


def load_for_inference(path: str | Path, fmt: str = "timestep_lab", *, use_ema: bool = True, device: Any = "cpu",
                       mixed_inference: str | None = None, image_size: int | None = None) -> LoadedModel:
    """Load our ``model.pt``/snapshots (``fmt="timestep_lab"``) or a pretrained checkpoint
    (``diffusers``, ``guided_diffusion``) for sampling and analysis.

    For a ``mixed`` model the per-t inference head comes from the model file
    (``mixed_inference="profile"``, the run's default) or a fixed head (``eps``/``x0``/``v``).
    A foreign checkpoint's process is the one its ``info`` names (fixed_large variance when it
    names none). ``image_size``: the resolution a guided-diffusion state dict is used at (it does
    not record one; default 256); the other formats record theirs.
    """
    path = Path(path)
    if fmt == "timestep_lab":
        return load_native_for_inference(path, use_ema=use_ema, device=device, mixed_inference=mixed_inference)

    net, pinfo = load_pretrained(path, fmt, device=device, image_size=image_size if fmt == "guided_diffusion" else None)
    if pinfo.get("schedule") is None:
        raise ArtifactError(f"{path}: cannot tell the noise schedule of this checkpoint "
                            f"({pinfo.get('schedule_error') or 'unknown'})")
    sched = pinfo["schedule"]
    alpha_bar = get_schedule(sched["name"], int(pinfo["num_timesteps"]), **sched.get("params", {}))
    diffusion = GaussianDiffusion(alpha_bar, pinfo.get("variance") or "fixed_large")
    prediction = make_prediction(pinfo.get("prediction", "eps"), num_timesteps=int(pinfo["num_timesteps"]))
    info = {**pinfo, "format": fmt, "path": str(path), "nimg": None, "status": "ok", "use_ema": None}
    return LoadedModel(net, diffusion, prediction, info)


def load_init_weights(net: nn.Module, path: str, use_ema: bool) -> None:
    """Fine-tuning: load the weights of ``path`` (``train.init_from``) into ``net``.

    Accepts our ``model.pt``/snapshots (EMA or raw weights, ``use_ema``), openai
    guided-diffusion state dicts (same parameter names as our UNet; with learned sigma only the
    eps output channels are kept) and diffusers ``UNet2DModel`` folders (the one weight set of
    the folder; ``use_ema`` does not apply), which fit the ``diffusers_unet2d`` network
    (:func:`~timestep_lab.checkpoints.diffusers.diffusers_run_config` sets a run up for it).

    :raises ArtifactError: an unknown format or weights that do not fit ``net``, naming the path.
    """
    # A folder is a diffusers UNet2DModel: the only checkpoint format that is not a single file.
    # The diffusers_unet2d network already holds those weights when built from the same folder;
    # loading them again keeps one code path (and works when model.pretrained is another folder).
    is_diffusers = Path(path).is_dir()
    obj = None if is_diffusers else load_torch(path)
    if is_diffusers:
        state = load_pretrained(path, "diffusers")[0].state_dict()  # keys unet.*, as DiffusersEps has them
    elif isinstance(obj, dict) and "format" in obj:
        state = native_init_state(obj, path, use_ema)
    elif is_guided_diffusion_state(obj):
        state = guided_diffusion_init_state(obj, net)
    else:
        raise ArtifactError(f"{path}: train.init_from must be a timestep_lab model.pt/snapshot, a guided-diffusion "
                            f"state dict or a diffusers UNet2DModel folder")
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:
        hint = ("; a diffusers folder needs model: {name: diffusers_unet2d, pretrained: <folder>, "
                "pretrained_format: diffusers}" if is_diffusers else "")
        raise ArtifactError(f"{path}: weights do not fit this run's network ({str(exc).splitlines()[0]}){hint}") from None
