"""Timestep samplers, one module each, chosen by name::

    from timestep_lab.timesteps import make_sampler
    sampler = make_sampler("uniform", num_timesteps=T, alpha_bar=alpha_bar)
    t, weight = sampler.sample(batch_size, generator, x0=None)

See :mod:`timestep_lab.timesteps.base` for the interface. One module per sampler (docs/methods.md §1):

==================  ===========================================================  ==========  ========
name                p(t)                                                         weight      stateful
==================  ===========================================================  ==========  ========
uniform             1 / T                                                        1
loss_second_moment  sqrt(E[L_t^2]) over the last 10 losses, mixed with uniform   1/(T p_t)   yes
speed               k/Z for t < tau, 1/Z after, with dual pairing (SpeeD)         1
adaptive            Beta(pi_phi(x0)) learned by REINFORCE (2411.09998)            1           yes
clts                uniform -> truncated Gaussian curriculum over images seen     1           yes
slots               uniform over the union of active slots (2502.01990)          1
slot_balanced       slot uniformly, then t uniformly in it                       1/(T p_t)(*)
toward_zero         exp(-t / scale)                                               1
logit_normal        floor(sigmoid(N(m, s^2)) T) (SD3)                            1
lognormal           nearest t to ln sigma ~ N(P_mean, P_std^2) (EDM)             1
mode                floor(f_mode(u; s) T) (SD3)                                  1
cosmap              floor((1 - 1/(tan(pi u/2) + 1)) T) (SD3)                     1
laplace             first t at or below log-SNR ~ Laplace(mu, b) (2407.03297)         1
cauchy              first t at or below log-SNR ~ Cauchy(mu, gamma) (2407.03297)      1
shift               SD3's shift s t/(1 + (s-1) t) around any ``base`` sampler    1           as base
truncate            any ``base`` mapped affinely into [lo, hi] (the trainers)    1           as base
sigmoid             OneTrainer's SIGMOID table                                   1
inverted_parabola   OneTrainer's INVERTED_PARABOLA table                         1
beta                floor(Beta(alpha, beta) T) (SimpleTuner)                     1
curriculum          ``first`` until ``switch_kimg``, then ``then`` (2603.12517)    as active   yes
==================  ===========================================================  ==========  ========

(*) when ``unbiased`` (the default).

The loss weightings w(t) live beside the samplers, in :mod:`timestep_lab.timesteps.weighting`
(``make_weighting``; not imported here): only p(t) w(t) matters to the objective.
"""

from __future__ import annotations

from typing import Any

import torch

# each module registers its sampler(s) on import
from timestep_lab.timesteps import (  # noqa: F401
    adaptive,
    clts,
    compose,
    logit_normal,
    lognormal,
    logsnr,
    loss_second_moment,
    sd3,
    slot_balanced,
    slots,
    speed,
    toward_zero,
    trainers,
    uniform,
)
from timestep_lab.timesteps.base import TimestepSampler
from timestep_lab.timesteps.registry import SAMPLERS

__all__ = ["SAMPLERS", "TimestepSampler", "make_sampler"]


def make_sampler(name: str, num_timesteps: int, alpha_bar: torch.Tensor | None = None,
                 device: torch.device | str = "cpu", **params: Any) -> TimestepSampler:
    """Build the sampler ``name``; ``params`` are checked against its parameter dataclass."""
    return SAMPLERS.build(name, params, num_timesteps=num_timesteps, alpha_bar=alpha_bar, device=device)
