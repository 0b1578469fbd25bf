"""Timestep samplers, one module each, chosen by name::

    from timestep_lab.timesteps import make_sampler
    sampler = make_sampler("uniform", num_timesteps=T, alpha_bar=alpha_bar)
    t, weight = sampler.sample(batch_size, generator, x0=None)

See :mod:`timestep_lab.timesteps.base` for the interface.
"""

from __future__ import annotations

from typing import Any

import torch

from timestep_lab.timesteps import uniform  # noqa: F401  (registers itself)
from timestep_lab.timesteps.base import TimestepSampler
from timestep_lab.timesteps.registry import SAMPLERS

__all__ = ["SAMPLERS", "TimestepSampler", "make_sampler"]


def make_sampler(name: str, num_timesteps: int, alpha_bar: torch.Tensor | None = None,
                 device: torch.device | str = "cpu", **params: Any) -> TimestepSampler:
    """Build the sampler ``name``; ``params`` are checked against its parameter dataclass."""
    return SAMPLERS.build(name, params, num_timesteps=num_timesteps, alpha_bar=alpha_bar, device=device)
