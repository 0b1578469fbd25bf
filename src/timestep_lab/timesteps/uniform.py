"""``uniform``: t ~ U{0, ..., T-1}, weight 1 (DDPM, Ho et al. 2020, Algorithm 1)."""

from __future__ import annotations

import torch

from timestep_lab.registry import NoParams
from timestep_lab.timesteps.base import TimestepSampler
from timestep_lab.timesteps.registry import SAMPLERS


@SAMPLERS.register("uniform", NoParams)
class UniformSampler(TimestepSampler):
    """p(t) = 1 / T."""

    def __init__(self, params: NoParams, *, num_timesteps: int, device="cpu", **_):
        super().__init__(num_timesteps, device)

    def sample(self, batch_size, generator, x0=None):
        t = torch.randint(0, self.T, (batch_size,), generator=generator, device=generator.device)
        return t, torch.ones(batch_size, device=generator.device)

    def probs(self):
        return torch.full((self.T,), 1.0 / self.T, dtype=torch.float64)
