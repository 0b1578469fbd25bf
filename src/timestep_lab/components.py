"""Build the objects of a run from its config, and check a config against every registry.

:func:`check_config` is what "fail before any job runs" means: the CLI and the Snakefile call
it on every run config, so an unknown sampler name or an impossible parameter is reported with
its key (``timesteps.params.lam``) before anything trains.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from timestep_lab.config import ConfigError, RunConfig
from timestep_lab.models import MODELS
from timestep_lab.models.conditioning import CONDITIONINGS, Conditioning, make_conditioning
from timestep_lab.optim import OPTIM_SCHEDULES, make_schedule
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.flow import RectifiedFlow
from timestep_lab.processes.predictions import PREDICTIONS, Prediction
from timestep_lab.processes.registry import PROCESSES, make_process
from timestep_lab.processes.schedules import SCHEDULES
from timestep_lab.processes.solvers import SOLVERS, make_solver
from timestep_lab.timesteps import SAMPLERS, TimestepSampler, make_sampler
from timestep_lab.timesteps.weighting import WEIGHTINGS, Weighting, make_weighting

__all__ = ["check_config", "check_method", "build_diffusion", "build_conditioning", "build_model", "build_prediction",
           "build_sampler", "build_weighting"]


def check_config(cfg: RunConfig, source: str = "config") -> RunConfig:
    """Validate registry names and parameters of ``cfg``; raise :class:`ConfigError` naming the key.

    Constructs the (cheap) process, weighting and sampler once so that parameter checks that
    depend on T (e.g. a slot range outside [0, T-1]) are caught too, and checks that the reverse
    sampler ``sample.method`` applies to the process ``diffusion.kind``.
    """
    d = cfg.diffusion
    PROCESSES.check(d.kind, "diffusion.kind", source)
    SCHEDULES.params(d.schedule, d.schedule_params, key="diffusion.schedule_params", source=source)
    check_method(cfg.sample.method, d.kind, source)
    if cfg.sample.shift != 1.0 and not make_solver(cfg.sample.method).shiftable:
        raise ConfigError(f"{source}: sample.shift: {cfg.sample.method} samples on its own timesteps; an "
                          f"inference-time shift applies to the flow solvers (euler, heun) only")
    PREDICTIONS.params(d.prediction, None, key="diffusion.prediction_params", source=source)
    SAMPLERS.params(cfg.timesteps.name, cfg.timesteps.params, key="timesteps.params", source=source)
    WEIGHTINGS.params(cfg.weighting.name, cfg.weighting.params, key="weighting.params", source=source)
    OPTIM_SCHEDULES.params(cfg.optim.schedule.name, cfg.optim.schedule.params, key="optim.schedule.params", source=source)
    MODELS.params(cfg.model.name, cfg.model.params, key="model.params", source=source)
    CONDITIONINGS.params(cfg.conditioning.name, cfg.conditioning.params, key="conditioning.params", source=source)
    try:
        process = build_diffusion(cfg)
    except ValueError as exc:
        raise ConfigError(f"{source}: diffusion: {exc}") from None
    for key, build in (("weighting.params", lambda: build_weighting(cfg, process)),
                       ("timesteps.params", lambda: build_sampler(cfg, process.alpha_bar, "cpu")),
                       ("optim.schedule.params", lambda: make_schedule(cfg.optim))):
        try:
            build()
        except ConfigError:
            raise
        except ValueError as exc:
            raise ConfigError(f"{source}: {key}: {exc}") from None
    return cfg


def check_method(method: str, kind: str, source: str = "config") -> None:
    """:class:`ConfigError` naming ``sample.method`` unless the reverse sampler ``method`` applies to
    the process ``kind`` (ddpm/ddim: gaussian; euler/heun: flow)."""
    if kind not in make_solver(method).kinds:
        choices = ", ".join(n for n in SOLVERS.names() if kind in make_solver(n).kinds)
        raise ConfigError(f"{source}: sample.method: {method} does not apply to diffusion.kind {kind}; "
                          f"choose one of: {choices}")


def build_diffusion(cfg: RunConfig) -> GaussianDiffusion | RectifiedFlow:
    """The forward process ``diffusion.kind`` (:mod:`timestep_lab.processes.registry`)."""
    return make_process(cfg.diffusion)


def build_prediction(cfg: RunConfig) -> Prediction:
    return PREDICTIONS.build(cfg.diffusion.prediction, None, num_timesteps=cfg.diffusion.num_timesteps)


def build_conditioning(cfg: RunConfig) -> Conditioning:
    """What the network sees besides (x_t, t): ``conditioning`` (``none``: nothing)."""
    return make_conditioning(cfg.conditioning.name, cfg.conditioning.params)


def build_model(cfg: RunConfig, image_size: int, channels: int) -> nn.Module:
    """The network for ``channels``-channel ``image_size`` images; input channels are
    ``channels`` plus the conditioning's (``lowres``: 2x), output channels
    ``channels * prediction.heads`` (3x for ``mixed``)."""
    prediction = PREDICTIONS.build(cfg.diffusion.prediction, None, num_timesteps=cfg.diffusion.num_timesteps)
    extra = build_conditioning(cfg).extra_channels(channels)
    return MODELS.build(cfg.model.name, cfg.model.params, cfg=cfg.model, image_size=image_size,
                        in_channels=channels + extra, out_channels=channels * prediction.heads)


def build_sampler(cfg: RunConfig, alpha_bar: torch.Tensor, device: Any = "cpu") -> TimestepSampler:
    return make_sampler(cfg.timesteps.name, num_timesteps=cfg.diffusion.num_timesteps, alpha_bar=alpha_bar,
                        device=device, **dict(cfg.timesteps.params))


def build_weighting(cfg: RunConfig, process: GaussianDiffusion | RectifiedFlow) -> Weighting:
    """The loss weighting, converted to the prediction's loss space with the process' factors
    (``alpha_bar`` and ``v_scale``: the flow's velocity error differs from the VP v's)."""
    return make_weighting(cfg.weighting.name, alpha_bar=process.alpha_bar, prediction=cfg.diffusion.prediction,
                          v_scale=process.v_scale, sigma=getattr(process, "sigmas", None),  # the flow's only
                          **dict(cfg.weighting.params))
