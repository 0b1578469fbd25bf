"""Networks only: ``f(x_t, t) -> tensor``. They know nothing about diffusion, noise
schedules, checkpoint formats or run configs (those are :mod:`timestep_lab.checkpoints`).

``MODELS`` maps an architecture name (``model.name`` in the config) to a factory
``factory(params, *, cfg: ModelConfig, image_size, in_channels, out_channels) -> nn.Module``.

==================  ==========================================================================
``unet``            our ADM-style UNet (:mod:`timestep_lab.models.unet`), from the config's fields
``diffusers_unet2d`` a ``diffusers.UNet2DModel`` read from the folder ``model.pretrained``
                    (architecture and initial weights from the folder; used to fine-tune
                    google/ddpm-* references, see
                    :func:`timestep_lab.models.diffusers.build_diffusers_unet2d`)
``dit``             DiT (Peebles & Xie 2023) on latents (:mod:`timestep_lab.models.dit`), its
                    size, classes and label dropout in ``model.params`` (:class:`DiTParams`)
==================  ==========================================================================
"""

from __future__ import annotations

from dataclasses import fields

from torch import nn

from timestep_lab.config import ConfigError, ModelConfig
from timestep_lab.models.diffusers import build_diffusers_unet2d
from timestep_lab.models.dit import DiT, DiTParams
from timestep_lab.models.unet import UNet
from timestep_lab.registry import NoParams, Registry

__all__ = ["MODELS", "DiT", "DiTParams", "UNet"]

# ModelConfig fields that every entry reads; the others are the UNet's architecture
_COMMON_KEYS = ("name", "params", "pretrained", "pretrained_format")

MODELS: Registry[nn.Module] = Registry("model architecture")


@MODELS.register("unet", NoParams)
def _unet(_: NoParams, *, cfg: ModelConfig, image_size: int, in_channels: int, out_channels: int) -> nn.Module:
    return UNet(
        image_size=image_size, in_channels=in_channels,
        out_channels=out_channels * (2 if cfg.learn_sigma else 1),
        channels=cfg.channels, channel_mult=tuple(cfg.channel_mult), num_res_blocks=cfg.num_res_blocks,
        attention_resolutions=tuple(cfg.attention_resolutions), dropout=cfg.dropout, num_heads=cfg.num_heads,
        num_head_channels=cfg.num_head_channels, resblock_updown=cfg.resblock_updown,
        use_scale_shift_norm=cfg.use_scale_shift_norm, norm_groups=cfg.norm_groups,
    )


@MODELS.register("diffusers_unet2d", NoParams)
def _diffusers_unet2d(_: NoParams, *, cfg: ModelConfig, image_size: int, in_channels: int,
                      out_channels: int) -> nn.Module:
    return build_diffusers_unet2d(cfg, image_size=image_size, in_channels=in_channels, out_channels=out_channels)


@MODELS.register("dit", DiTParams)
def _dit(params: DiTParams, *, cfg: ModelConfig, image_size: int, in_channels: int, out_channels: int) -> nn.Module:
    """DiT on ``in_channels x image_size x image_size`` inputs (4 x 32 x 32 latents of 256 px
    images); the UNet's fields must keep their defaults so a config never claims a width it does
    not get. Fixed variance: ``out_channels`` as the prediction asks (docs/methods.md "DiT")."""
    unet_fields = [f"model.{f.name}" for f in fields(ModelConfig)
                   if f.name not in _COMMON_KEYS and getattr(cfg, f.name) != f.default]
    if unet_fields:
        raise ConfigError(f"{', '.join(unet_fields)}: do not apply to model dit (its widths are model.params: "
                          f"size, depth, hidden, heads, patch); remove them from the model config")
    try:
        return DiT(params.shape(), input_size=image_size, in_channels=in_channels, out_channels=out_channels,
                   num_classes=params.num_classes, class_dropout=params.class_dropout)
    except ValueError as exc:
        raise ConfigError(f"model.params: {exc}") from None
