"""Named noise schedules: ``get_schedule(name, T) -> alpha_bar`` (float64 tensor ``[T]``).

alpha_bar_t = prod_{s <= t} (1 - beta_s), t = 0 .. T-1 (0-based, t = 0 the least noisy).

===============  =====================================================================
name             definition
===============  =====================================================================
linear           beta_t = linspace(1e-4 * 1000/T, 0.02 * 1000/T, T)       (DDPM; iDDPM's
                 1000/T rescaling keeps the end SNR fixed for other T; identity at T=1000)
quad             beta_t = linspace(sqrt(1e-4), sqrt(0.02), T) ** 2          (DDPM "quad")
cosine           alpha_bar(t) = f(t)/f(0), f(t) = cos(((t/T) + s)/(1 + s) * pi/2)^2,
                 s = 0.008, betas clipped at 0.999                          (iDDPM eq. 17)
scaled_linear    beta_t = linspace(sqrt(0.00085), sqrt(0.012), T) ** 2      (LDM)
===============  =====================================================================

Schedules may be added but must not be removed or changed once committed: results and
checkpoints refer to them by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from timestep_lab.registry import Registry, check_range

__all__ = ["SCHEDULES", "get_schedule", "betas_from_alpha_bar", "alpha_bar_from_betas"]

SCHEDULES: Registry[torch.Tensor] = Registry("noise schedule")


def alpha_bar_from_betas(betas: torch.Tensor) -> torch.Tensor:
    """``alpha_bar_t = prod_{s<=t} (1 - beta_s)`` for ``betas [T]`` (float64)."""
    return torch.cumprod(1.0 - betas.double(), dim=0)


def betas_from_alpha_bar(alpha_bar: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`alpha_bar_from_betas`: ``beta_t = 1 - alpha_bar_t / alpha_bar_{t-1}``."""
    alpha_bar = alpha_bar.double()
    prev = torch.cat([alpha_bar.new_ones(1), alpha_bar[:-1]])
    return 1.0 - alpha_bar / prev


@dataclass(frozen=True)
class LinearParams:
    beta_start: float = 1e-4
    beta_end: float = 0.02
    rescale: bool = True  # multiply both ends by 1000/T (iDDPM / guided-diffusion convention)

    def __post_init__(self) -> None:
        check_range("beta_start", self.beta_start, 0.0, 1.0, lo_open=True, hi_open=True)
        check_range("beta_end", self.beta_end, self.beta_start, 1.0, hi_open=True)


@dataclass(frozen=True)
class CosineParams:
    s: float = 0.008
    max_beta: float = 0.999

    def __post_init__(self) -> None:
        check_range("s", self.s, 0.0, None)
        check_range("max_beta", self.max_beta, 0.0, 1.0, lo_open=True, hi_open=True)


@dataclass(frozen=True)
class ScaledLinearParams:
    beta_start: float = 0.00085
    beta_end: float = 0.012

    def __post_init__(self) -> None:
        check_range("beta_start", self.beta_start, 0.0, 1.0, lo_open=True, hi_open=True)
        check_range("beta_end", self.beta_end, self.beta_start, 1.0, hi_open=True)


@SCHEDULES.register("linear", LinearParams)
def _linear(p: LinearParams, T: int) -> torch.Tensor:
    scale = 1000.0 / T if p.rescale else 1.0
    return alpha_bar_from_betas(torch.linspace(scale * p.beta_start, scale * p.beta_end, T, dtype=torch.float64))


@SCHEDULES.register("quad", LinearParams)
def _quad(p: LinearParams, T: int) -> torch.Tensor:
    # DDPM's "quad": the square root of beta is linear; no 1000/T rescaling in the original
    betas = torch.linspace(math.sqrt(p.beta_start), math.sqrt(p.beta_end), T, dtype=torch.float64) ** 2
    return alpha_bar_from_betas(betas)


@SCHEDULES.register("scaled_linear", ScaledLinearParams)
def _scaled_linear(p: ScaledLinearParams, T: int) -> torch.Tensor:
    betas = torch.linspace(math.sqrt(p.beta_start), math.sqrt(p.beta_end), T, dtype=torch.float64) ** 2
    return alpha_bar_from_betas(betas)


@SCHEDULES.register("cosine", CosineParams)
def _cosine(p: CosineParams, T: int) -> torch.Tensor:
    steps = torch.arange(T + 1, dtype=torch.float64) / T
    f = torch.cos((steps + p.s) / (1 + p.s) * math.pi / 2) ** 2
    betas = (1.0 - f[1:] / f[:-1]).clamp(max=p.max_beta)
    return alpha_bar_from_betas(betas)


def get_schedule(name: str, T: int, **params) -> torch.Tensor:
    """``alpha_bar`` for the named schedule: float64 tensor of shape ``[T]``, strictly
    decreasing in t, in (0, 1)."""
    if T < 2:
        raise ValueError(f"T must be >= 2, got {T}")
    return SCHEDULES.build(name, params, T=T)
