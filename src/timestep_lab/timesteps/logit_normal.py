"""``logit_normal``: SD3's logit-normal timestep density, discretised.

Source: Esser et al., "Scaling Rectified Flow Transformers for High-Resolution Image Synthesis"
(Stable Diffusion 3), arXiv 2403.03206, Sec. 3.1; docs/methods.md §1.7::

    n ~ N(m, s^2),   u = sigmoid(n),   t = min(floor(u T), T - 1)

so ``P(t = i) = Phi((logit((i+1)/T) - m) / s) - Phi((logit(i/T) - m) / s)`` with ``logit(0) = -inf``
and ``logit(1) = +inf`` -- what ``probs()`` returns. Defaults ``m = 0``, ``s = 1``. Weight 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.special import ndtr

from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TimestepSampler, discrete_cdf_pmf
from timestep_lab.timesteps.registry import SAMPLERS


@dataclass(frozen=True)
class LogitNormalParams:
    m: float = 0.0
    s: float = 1.0

    def __post_init__(self) -> None:
        check_range("s", self.s, 0.0, None, lo_open=True)


@SAMPLERS.register("logit_normal", LogitNormalParams)
class LogitNormalSampler(TimestepSampler):
    def __init__(self, params: LogitNormalParams, *, num_timesteps: int, device="cpu", **_):
        super().__init__(num_timesteps, device)
        self.m, self.s = params.m, params.s

    def sample(self, batch_size, generator, x0=None):
        device = generator.device
        n = self.m + self.s * torch.randn(batch_size, generator=generator, device=device, dtype=torch.float64)
        t = torch.floor(torch.sigmoid(n) * self.T).long().clamp_(0, self.T - 1)
        return t, torch.ones(batch_size, device=device)

    def probs(self):
        edges = torch.logit(torch.linspace(0.0, 1.0, self.T + 1, dtype=torch.float64))  # -inf ... +inf
        return discrete_cdf_pmf(ndtr((edges - self.m) / self.s))
