"""``lognormal``: EDM's log-normal noise-level density, mapped to the nearest discrete t.

Source: Karras et al., "Elucidating the Design Space of Diffusion-Based Generative Models" (EDM),
arXiv 2206.00364, Table 1 / Sec. 5 (``P_mean = -1.2``, ``P_std = 1.2``); docs/methods.md §1.7::

    ln sigma ~ N(P_mean, P_std^2),     t = argmin_i | ln sigma - ln sigma_i |,
    sigma_i = sqrt((1 - ab_i) / ab_i)       (the VP chain's noise level, increasing in i)

The nearest t in log-sigma space is found by ``searchsorted`` on the midpoints
``b_i = (ln sigma_i + ln sigma_{i+1}) / 2``, so ``P(t = i) = Phi((b_i - P_mean) / P_std) -
Phi((b_{i-1} - P_mean) / P_std)`` (``b_{-1} = -inf``, ``b_{T-1} = +inf``): the mass below sigma_0
goes to t = 0, above sigma_{T-1} to T - 1. That is ``probs()``. Weight 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.special import ndtr

from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TimestepSampler, discrete_cdf_pmf
from timestep_lab.timesteps.registry import SAMPLERS


@dataclass(frozen=True)
class LognormalParams:
    P_mean: float = -1.2
    P_std: float = 1.2

    def __post_init__(self) -> None:
        check_range("P_std", self.P_std, 0.0, None, lo_open=True)


@SAMPLERS.register("lognormal", LognormalParams)
class LognormalSampler(TimestepSampler):
    def __init__(self, params: LognormalParams, *, num_timesteps: int, alpha_bar: Tensor | None = None,
                 device="cpu", **_):
        super().__init__(num_timesteps, device)
        if alpha_bar is None:
            raise ValueError("lognormal needs the noise schedule (alpha_bar) to map sigma to t")
        ab = alpha_bar.detach().double().cpu()
        log_sigma = 0.5 * (torch.log1p(-ab) - torch.log(ab))
        self.P_mean, self.P_std = params.P_mean, params.P_std
        self.midpoints = (log_sigma[1:] + log_sigma[:-1]) / 2  # [T-1], increasing
        self._mid_on: dict[torch.device, Tensor] = {}

    def sample(self, batch_size, generator, x0=None):
        device = generator.device
        if device not in self._mid_on:
            self._mid_on[device] = self.midpoints.to(device)
        ln_sigma = self.P_mean + self.P_std * torch.randn(batch_size, generator=generator, device=device,
                                                          dtype=torch.float64)
        return torch.searchsorted(self._mid_on[device], ln_sigma), torch.ones(batch_size, device=device)

    def probs(self):
        inf = torch.tensor([float("inf")], dtype=torch.float64)
        edges = torch.cat([-inf, self.midpoints, inf])
        return discrete_cdf_pmf(ndtr((edges - self.P_mean) / self.P_std))
