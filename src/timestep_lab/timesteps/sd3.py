"""``mode`` and ``cosmap``: SD3's two other timestep densities (Esser et al., arXiv 2403.03206,
Sec. 3.1; docs/methods.md §12.2), discretised like ``logit_normal`` (``t = min(floor(x T), T - 1)``
for a draw x in [0, 1], the noise fraction of the rectified flow)::

    mode     u ~ U[0, 1),  x = f_mode(u; s) = 1 - u - s (cos^2(pi u / 2) - 1 + u),   -1 <= s <= 2 / (pi - 2)
             (monotone decreasing there: the density pi_mode(x; s) = |d f_mode^{-1}(x) / dx|;
             s > 0 favours the middle, s < 0 the ends, s = 0 is uniform)
    cosmap   u ~ U[0, 1),  x = f(u) = 1 - 1 / (tan(pi u / 2) + 1),   pi_CosMap(x) = 2 / (pi - 2 pi x + 2 pi x^2)

``probs()``: ``P(t = i) = F((i + 1) / T) - F(i / T)`` with ``F(x) = 1 - f_mode^{-1}(x)`` (``f_mode^{-1}`` by
bisection) and ``F(x) = (2 / pi) atan(x / (1 - x))``. Weight 1.

diffusers' ``compute_density_for_timestep_sampling("mode")`` draws the same ``f_mode(u)``; its
``"cosmap"`` is not a sampler at all: ``compute_loss_weighting_for_sd3("cosmap")`` weights the loss of
uniformly drawn t by ``pi_CosMap(sigma)`` -- our ``density`` weighting of ``cosmap`` (docs/methods.md
§12.2: we follow the paper and keep diffusers' variant as that weighting; both are tested).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from timestep_lab.registry import NoParams, check_range
from timestep_lab.timesteps.base import TimestepSampler, discrete_cdf_pmf
from timestep_lab.timesteps.registry import SAMPLERS

__all__ = ["mode_map", "mode_inverse", "cosmap_map", "cosmap_cdf", "cosmap_density", "MODE_SCALE_MAX"]

MODE_SCALE_MAX = 2.0 / (math.pi - 2.0)  # f_mode is monotone for -1 <= s <= 2 / (pi - 2) (SD3 Sec. 3.1)


def mode_map(u: Tensor, s: float) -> Tensor:
    """``f_mode(u; s) = 1 - u - s (cos^2(pi u / 2) - 1 + u)``: uniform ``u`` -> SD3's mode-sampled t."""
    return 1.0 - u - s * (torch.cos(math.pi * u / 2.0) ** 2 - 1.0 + u)


def mode_inverse(x: Tensor, s: float, iterations: int = 60) -> Tensor:
    """``f_mode^{-1}(x)`` for ``x`` in [0, 1] by bisection on the decreasing ``f_mode`` (float64)."""
    x = x.double()
    lo, hi = torch.zeros_like(x), torch.ones_like(x)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        above = mode_map(mid, s) > x  # f decreasing: f(mid) > x means the root lies right of mid
        lo, hi = torch.where(above, mid, lo), torch.where(above, hi, mid)
    return 0.5 * (lo + hi)


def cosmap_map(u: Tensor) -> Tensor:
    """SD3's CosMap: ``1 - 1 / (tan(pi u / 2) + 1)``."""
    return 1.0 - 1.0 / (torch.tan(math.pi * u / 2.0) + 1.0)


def cosmap_cdf(x: Tensor) -> Tensor:
    """``P(cosmap_map(U) < x) = (2 / pi) atan(x / (1 - x))`` for ``x`` in [0, 1] (1 at x = 1)."""
    x = x.double()
    return torch.where(x >= 1.0, torch.ones_like(x), (2.0 / math.pi) * torch.atan(x / (1.0 - x).clamp_min(1e-300)))


def cosmap_density(x: Tensor) -> Tensor:
    """``pi_CosMap(x) = 2 / (pi - 2 pi x + 2 pi x^2)`` (SD3 Sec. 3.1)."""
    return 2.0 / (math.pi * (1.0 - 2.0 * x + 2.0 * x**2))


def _grid_t(x: Tensor, T: int) -> Tensor:
    return torch.floor(x * T).long().clamp_(0, T - 1)


@dataclass(frozen=True)
class ModeParams:
    scale: float = 1.29  # SD3 Table 1's rf/mode(1.29)

    def __post_init__(self) -> None:
        check_range("scale", self.scale, -1.0, MODE_SCALE_MAX)


@SAMPLERS.register("mode", ModeParams)
class ModeSampler(TimestepSampler):
    def __init__(self, params: ModeParams, *, num_timesteps: int, device="cpu", **_):
        super().__init__(num_timesteps, device)
        self.scale = params.scale

    def sample(self, batch_size, generator, x0=None):
        u = torch.rand(batch_size, generator=generator, device=generator.device, dtype=torch.float64)
        return _grid_t(mode_map(u, self.scale), self.T), torch.ones(batch_size, device=generator.device)

    def probs(self) -> Tensor:
        edges = torch.arange(self.T + 1, dtype=torch.float64) / self.T
        cdf = 1.0 - mode_inverse(edges, self.scale)
        cdf[0], cdf[-1] = 0.0, 1.0
        return discrete_cdf_pmf(cdf)


@SAMPLERS.register("cosmap", NoParams)
class CosmapSampler(TimestepSampler):
    def __init__(self, params: NoParams, *, num_timesteps: int, device="cpu", **_):
        super().__init__(num_timesteps, device)

    def sample(self, batch_size, generator, x0=None):
        u = torch.rand(batch_size, generator=generator, device=generator.device, dtype=torch.float64)
        return _grid_t(cosmap_map(u), self.T), torch.ones(batch_size, device=generator.device)

    def probs(self) -> Tensor:
        return discrete_cdf_pmf(cosmap_cdf(torch.arange(self.T + 1, dtype=torch.float64) / self.T))
