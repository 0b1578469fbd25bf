"""What a network sees besides ``(x_t, t)``, by name (``conditioning.name`` of a run config).

==========  ====================================================================================
``none``    nothing: the network's input is ``x_t`` itself (every unconditional run; same
            tensors, so the same numbers and bytes as before the registry existed)
``lowres``  a super-resolution model (SR3, Saharia et al. 2021; guided-diffusion's
            ``SuperResModel``, which upsamples its low-resolution input and concatenates it to
            ``x_t``): the condition is the target ``x0`` average-pooled by ``factor`` and
            upsampled back to full size (``upsample``: nearest or bilinear); the network's input
            is ``cat([x_t, cond], dim=1)``, ``[B, 2C, H, W]``
==========  ====================================================================================

The condition is a pure function of ``x0`` (no randomness): training passes ``condition(x0)`` of
each batch's clean images, and an analysis conditions a chain on ``condition(x0)`` of the image it
wants back (the timestep-contribution analysis, docs/methods.md §3.4). The network is built with
``C + extra_channels(C)`` input channels (:func:`timestep_lab.components.build_model`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from timestep_lab.config import ConfigError
from timestep_lab.errors import InputError
from timestep_lab.registry import NoParams, Registry, check_range

__all__ = ["CONDITIONINGS", "Conditioning", "LowresParams", "make_conditioning", "NONE"]

CONDITIONINGS: Registry["Conditioning"] = Registry("conditioning")
UPSAMPLE_MODES = ("nearest", "bilinear")


@dataclass(frozen=True)
class Conditioning:
    """One entry: ``extra_channels(C)`` input channels it adds to a ``C``-channel image, and
    ``make(x0 [B, C, H, W]) -> cond [B, extra, H, W]`` (None for ``none``)."""

    name: str
    extra_channels: Callable[[int], int]
    make: Callable[[Tensor], Tensor | None]

    @property
    def conditioned(self) -> bool:
        """Whether the network needs a condition (``extra_channels`` > 0)."""
        return self.extra_channels(1) > 0

    def condition(self, x0: Tensor) -> Tensor | None:
        """The condition of the target images ``x0 [B, C, H, W]`` (None when unconditioned)."""
        return self.make(x0) if self.conditioned else None

    def network_input(self, x_t: Tensor, cond: Tensor | None) -> Tensor:
        """``x_t`` itself (``none``) or ``cat([x_t, cond], 1)``, ``[B, C + extra, H, W]``.

        :raises InputError: a conditioned network without its condition (or one of the wrong
            shape), or an unconditioned one given a condition (one ``error:`` line on the command line)."""
        if not self.conditioned:
            if cond is not None:
                raise InputError("the network is unconditioned (conditioning none) but was given a condition")
            return x_t
        if cond is None:
            raise InputError(f"the network is conditioned (conditioning {self.name}): it needs the condition of the "
                             f"image it makes (e.g. the low-resolution copy), none was given")
        want = (x_t.shape[0], self.extra_channels(x_t.shape[1]), *x_t.shape[2:])
        if tuple(cond.shape) != want:
            raise InputError(f"conditioning {self.name}: the condition is {list(cond.shape)}, x_t {list(x_t.shape)} "
                             f"needs {list(want)}")
        return torch.cat([x_t, cond.to(device=x_t.device, dtype=x_t.dtype)], dim=1)


@dataclass(frozen=True)
class LowresParams:
    """``factor``: the low-resolution copy is ``H / factor`` pixels wide (average pooling);
    ``upsample``: how it is brought back to ``H`` (nearest: blocks; bilinear: smooth)."""

    factor: int = 4
    upsample: str = "nearest"

    def __post_init__(self) -> None:
        check_range("factor", self.factor, 2)
        if self.upsample not in UPSAMPLE_MODES:
            raise ValueError(f"upsample must be one of {', '.join(UPSAMPLE_MODES)}, got {self.upsample!r}")


def lowres(x0: Tensor, factor: int, upsample: str = "nearest") -> Tensor:
    """``up(avg_pool(x0, factor))``: ``x0 [B, C, H, W]`` -> ``[B, C, H, W]``, the mean of each
    ``factor x factor`` block spread back over it (nearest) or interpolated (bilinear,
    ``align_corners=False``). Deterministic; values stay in ``x0``'s range.

    :raises ConfigError: ``H`` or ``W`` not a multiple of ``factor`` (naming the key)."""
    H, W = x0.shape[-2:]
    if H % factor or W % factor:
        raise ConfigError(f"conditioning.params.factor: {factor} does not divide the image size {H}x{W}")
    small = F.avg_pool2d(x0, factor)
    if upsample == "nearest":
        return F.interpolate(small, size=(H, W), mode="nearest")
    return F.interpolate(small, size=(H, W), mode="bilinear", align_corners=False)


@CONDITIONINGS.register("none", NoParams)
def _none(_: NoParams) -> Conditioning:
    return Conditioning("none", lambda c: 0, lambda x0: None)


@CONDITIONINGS.register("lowres", LowresParams)
def _lowres(p: LowresParams) -> Conditioning:
    return Conditioning("lowres", lambda c: c, lambda x0: lowres(x0, p.factor, p.upsample))


def make_conditioning(name: str = "none", params=None) -> Conditioning:
    """The entry ``name`` with its ``params`` (a mapping or the params dataclass)."""
    return CONDITIONINGS.build(name, params)


NONE = make_conditioning("none")
