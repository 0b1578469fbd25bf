"""The forward processes by name (``diffusion.kind``): the Gaussian diffusion and the rectified flow.

==========  ===================================================================  =================
kind        x_t                                                                  reverse samplers
==========  ===================================================================  =================
gaussian    sqrt(ab_t) x0 + sqrt(1 - ab_t) eps, ab from ``diffusion.schedule``   ddpm, ddim
flow        (1 - sigma_t) x0 + sigma_t eps, sigma_t = (t + 1) / T (SD3)         euler, heun
==========  ===================================================================  =================

Both live on the grid t = 0 .. T-1 (``diffusion.num_timesteps``) and expose the same interface
(``T``, ``alpha_bar``, ``snr``, ``v_scale``, ``q_sample``, the x0/eps/v conversions, ``vlb_terms``),
so every timestep sampler, loss weighting and prediction type applies to either. The flow ignores
``diffusion.schedule``, ``schedule_params`` and ``variance`` (docs/methods.md §12).
"""

from __future__ import annotations

from typing import Any

from timestep_lab.config import DiffusionConfig
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.flow import RectifiedFlow
from timestep_lab.processes.schedules import get_schedule
from timestep_lab.registry import NoParams, Registry

__all__ = ["PROCESSES", "make_process"]

PROCESSES: Registry[Any] = Registry("diffusion process")


@PROCESSES.register("gaussian", NoParams)
def _gaussian(_params: NoParams, *, cfg: DiffusionConfig) -> GaussianDiffusion:
    return GaussianDiffusion(get_schedule(cfg.schedule, cfg.num_timesteps, **cfg.schedule_params), cfg.variance)


@PROCESSES.register("flow", NoParams)
def _flow(_params: NoParams, *, cfg: DiffusionConfig) -> RectifiedFlow:
    return RectifiedFlow(cfg.num_timesteps)


def make_process(cfg: DiffusionConfig) -> GaussianDiffusion | RectifiedFlow:
    """The process ``cfg.kind`` built from the run config's diffusion section."""
    return PROCESSES.build(cfg.kind, None, cfg=cfg)
