"""A ``diffusers.UNet2DModel`` as one of our networks: ``f(x_t, t) -> unet(x_t, t).sample``.

Holds the wrapper :class:`DiffusersEps`, reading a ``UNet2DModel`` folder (``config.json`` plus
``diffusion_pytorch_model.safetensors`` or ``.bin``) offline, and the ``diffusers_unet2d``
model entry's factory :func:`build_diffusers_unet2d` (architecture and initial weights from the
folder ``model.pretrained``, used to fine-tune google/ddpm-* references).

Must not know noise schedules, ``scheduler_config.json`` or run configs: mapping a diffusers
folder to a diffusion process is :mod:`timestep_lab.checkpoints.diffusers`.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import torch
from torch import Tensor, nn

from timestep_lab.artifacts.io import ArtifactError
from timestep_lab.config import ConfigError, ModelConfig

__all__ = ["DIFFUSERS_WEIGHTS", "DiffusersEps", "build_diffusers_unet2d", "import_diffusers", "read_unet",
           "unet_folder"]

DIFFUSERS_WEIGHTS = ("diffusion_pytorch_model.safetensors", "diffusion_pytorch_model.bin")
# The fields of a model config that say where the network comes from; every other ModelConfig
# field describes our UNet's architecture, which a diffusers folder fixes in its config.json.
_DIFFUSERS_MODEL_KEYS = ("name", "pretrained", "pretrained_format", "params")


class DiffusersEps(nn.Module):
    """``f(x_t [B, C, H, W], t [B]) -> unet(x_t, t).sample`` for a ``diffusers.UNet2DModel``
    (``t`` passed as a long tensor, as the DDPM pipelines do).

    Also the trainable network of the ``diffusers_unet2d`` model entry: its ``state_dict`` is the
    UNet's under the prefix ``unet.``, which is what our checkpoints and ``model.pt`` store.
    """

    def __init__(self, unet: nn.Module):
        super().__init__()
        self.unet = unet
        config = getattr(unet, "config", None)
        self.in_channels = getattr(config, "in_channels", None)
        self.out_channels = getattr(config, "out_channels", None)

    def forward(self, x: Tensor, t: Tensor) -> Tensor:
        t = torch.as_tensor(t, device=x.device)
        if t.ndim == 0:
            t = t.expand(x.shape[0])
        return self.unet(x, t.long()).sample


def import_diffusers():
    """The ``diffusers`` module, or an ImportError saying how to install it."""
    try:
        # imported here: diffusers is an optional dependency, needed only for diffusers folders
        import diffusers
    except ImportError:
        raise ImportError("loading a diffusers checkpoint needs the optional dependency diffusers: "
                          "pip install 'timestep-lab[diffusers]'") from None
    return diffusers


def unet_folder(path: Path) -> tuple[Path, list[Path]]:
    """The ``UNet2DModel`` folder at ``path`` (``path`` itself, or ``path/unet`` for a whole
    pipeline folder) and its weight files; :class:`ArtifactError` naming what is missing."""
    if not path.is_dir():
        raise ArtifactError(f"{path}: diffusers model folder not found (expected a UNet2DModel folder with "
                            f"config.json and diffusion_pytorch_model.safetensors/.bin)")
    folder = path
    if not (folder / "config.json").is_file() and (folder / "unet" / "config.json").is_file():
        folder = folder / "unet"  # a whole pipeline folder: the UNet lives in unet/
    if not (folder / "config.json").is_file():
        raise ArtifactError(f"{path}: no config.json: not a diffusers UNet2DModel folder")
    weights = [folder / w for w in DIFFUSERS_WEIGHTS if (folder / w).is_file()]
    if not weights:
        raise ArtifactError(f"{folder}: no weights ({' or '.join(DIFFUSERS_WEIGHTS)}) next to config.json")
    return folder, weights


def read_unet(folder: Path) -> nn.Module:
    """``diffusers.UNet2DModel.from_pretrained(folder)`` offline, in float32 (train mode)."""
    diffusers = import_diffusers()
    try:
        config = json.loads((folder / "config.json").read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{folder / 'config.json'}: corrupted JSON ({exc})") from None
    if config.get("_class_name", "UNet2DModel") != "UNet2DModel":
        raise ArtifactError(f"{folder / 'config.json'}: a {config.get('_class_name')}, not a UNet2DModel")
    try:
        unet = diffusers.UNet2DModel.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # diffusers raises OSError/ValueError/EnvironmentError/safetensors errors
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ArtifactError(f"{folder}: could not load the diffusers UNet2DModel ({first})") from None
    return unet.float().train()


def build_diffusers_unet2d(cfg: ModelConfig, *, image_size: int, in_channels: int, out_channels: int) -> DiffusersEps:
    """The ``diffusers_unet2d`` model entry: a trainable ``diffusers.UNet2DModel`` read from the
    folder ``cfg.pretrained`` (architecture from its ``config.json``, weights loaded from the
    folder offline), wrapped as ``forward(x [B, C, H, W], t [B] long) -> unet(x, t).sample
    [B, C_out, H, W]``.

    The model config must be ``{name: diffusers_unet2d, pretrained: <folder>, pretrained_format:
    diffusers}``; the architecture fields (``channels``, ``channel_mult``, ``dropout``, ...) do not
    apply and must keep their defaults, so a config never claims an architecture it does not get.
    ``cfg.pretrained`` is read again whenever the network is rebuilt (``load_model`` of a
    fine-tuned ``model.pt``), relative to the working directory (the repo root in the workflow);
    the weights loaded then are overwritten by the stored ones. ``image_size`` is not checked:
    the UNet is convolutional (any size divisible by ``2**(levels - 1)`` works).

    :raises ConfigError: a missing ``model.pretrained``, a non-default architecture field, or a
        folder whose input/output channels differ from the data's channels / the prediction's
        outputs (``in_channels`` / ``out_channels``).
    :raises ArtifactError: a missing or unreadable folder, naming the path.
    """
    if not cfg.pretrained or cfg.pretrained_format != "diffusers":
        raise ConfigError(f"model: diffusers_unet2d needs model.pretrained (a diffusers UNet2DModel folder) and "
                          f"model.pretrained_format: diffusers, got pretrained={cfg.pretrained!r}, "
                          f"pretrained_format={cfg.pretrained_format!r}")
    set_fields = [f"model.{f.name}" for f in fields(ModelConfig)
                  if f.name not in _DIFFUSERS_MODEL_KEYS and getattr(cfg, f.name) != f.default]
    if set_fields:
        raise ConfigError(f"{', '.join(set_fields)}: do not apply to model diffusers_unet2d (the architecture is read "
                          f"from {cfg.pretrained}/config.json); remove them from the model config")
    folder, _ = unet_folder(Path(cfg.pretrained))
    unet = read_unet(folder)
    got = (int(unet.config.in_channels), int(unet.config.out_channels))
    if got != (in_channels, out_channels):
        raise ConfigError(f"{folder / 'config.json'}: the UNet2DModel has in_channels={got[0]}, out_channels={got[1]}; "
                          f"this run needs {in_channels} input channels (the data) and {out_channels} output "
                          f"channels (the prediction type)")
    return DiffusersEps(unet)
