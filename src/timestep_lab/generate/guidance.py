"""Classifier-free guidance (Ho & Salimans 2022) for a class-conditional network, and the class
of each sample drawn from the sample's own seed.

With labels ``y [B]`` and the null class ``null`` (DiT: ``num_classes``), the guided output at
scale ``s`` is

    f_s(x_t, t, y) = f(x_t, t, null) + s * (f(x_t, t, y) - f(x_t, t, null))

(DiT's ``forward_with_cfg`` on its ``eps`` channels; with fixed variance every output channel is
the prediction). The combination is affine with weights ``1 - s`` and ``s``, so it commutes with
the prediction type's affine maps to ``(x0_hat, eps_hat)``: guiding an x0 or v output is guiding
eps. ``s = 1`` calls the network once with ``y`` and returns exactly the conditional output (no
unconditional pass, no arithmetic); ``s = 0`` is the unconditional model. Must not know
samplers, files or configs.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["guided", "guided_output", "sample_classes"]


def guided(cond: Tensor, uncond: Tensor, scale: float) -> Tensor:
    """``uncond + scale * (cond - uncond)`` (any shapes that broadcast)."""
    return uncond + scale * (cond - uncond)


def guided_output(model: nn.Module, x_t: Tensor, t: Tensor, y: Tensor, null: int, scale: float) -> Tensor:
    """The network's output ``[B, ...]`` at ``x_t [B, C, H, W]``, ``t [B]``, labels ``y [B]``
    guided at ``scale`` (module docstring): one call with ``y`` at ``scale == 1``, else one call
    on the doubled batch ``[x_t; x_t]`` with labels ``[y; null]`` (as DiT's sampler)."""
    if scale == 1.0:
        return model(x_t, t, y)
    t = torch.as_tensor(t, device=x_t.device)
    if t.ndim == 0:
        t = t.expand(x_t.shape[0])
    out = model(torch.cat([x_t, x_t]), torch.cat([t, t]), torch.cat([y, torch.full_like(y, null)]))
    cond, uncond = out.chunk(2)
    return guided(cond, uncond, scale)


def sample_classes(generators: list[torch.Generator], num_classes: int) -> Tensor:
    """One class per sample, long ``[B]`` uniform on ``[0, num_classes)``: row ``i`` is the first
    draw of generator ``i`` (the sample's own, seeded ``seed_base + i``), so a sample's class
    depends on its seed alone, not on the batch it is drawn in."""
    return torch.stack([torch.randint(num_classes, (), generator=g, device=g.device) for g in generators])
