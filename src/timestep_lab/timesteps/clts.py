"""``clts``: curriculum-learning timestep schedule (reconstruction, [unverified]).

Source: the idea of Xu et al., "Towards Faster Training of Diffusion Models: An Inspiration of A
Consistency Phenomenon", arXiv 2404.07946 (abstract only): the noise level indicates difficulty,
and timesteps near T (nearly pure noise: easy) are drawn less and less often as training goes
on. No primary code was available; this is docs/methods.md §1.5's reconstruction::

    p_s(t) = (1 - lambda_s) / T + lambda_s N(t; mu, sigma^2) / Z_N,     t in {0, ..., T-1}
    lambda_s = lambda_max * min(1, nimg / (1000 * horizon_kimg))
    Z_N = sum_{t=0}^{T-1} N(t; mu, sigma^2)       (the Gaussian truncated to [0, T-1], normalised)

Defaults: ``lambda_max = 0.8``, ``mu = 300``, ``sigma = 200`` (timesteps; for T = 1000 -- set them
explicitly for other T), ``horizon_kimg = 100`` (set it to the run's length). Weight 1.

The progress ``nimg`` comes from the ``update`` context (images seen after the step), so the draw
for the next batch uses the images seen before it; it is checkpointed (``state_dict``), so a
resumed run draws exactly as an uninterrupted one. ``probs()`` is p at the current progress.
SpeeD's repository has a "clts" baseline whose Gaussian is mis-parenthesised and whose mixing
weight exceeds 1 after its horizon; neither bug is reproduced here (lambda_s is capped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TimestepSampler, cdf_table, inverse_cdf
from timestep_lab.timesteps.registry import SAMPLERS


@dataclass(frozen=True)
class CltsParams:
    lambda_max: float = 0.8
    horizon_kimg: float = 100.0
    mu: float = 300.0
    sigma: float = 200.0

    def __post_init__(self) -> None:
        check_range("lambda_max", self.lambda_max, 0.0, 1.0)
        check_range("horizon_kimg", self.horizon_kimg, 0.0, None, lo_open=True)
        check_range("sigma", self.sigma, 0.0, None, lo_open=True)


@SAMPLERS.register("clts", CltsParams)
class CltsSampler(TimestepSampler):
    stateful = True

    def __init__(self, params: CltsParams, *, num_timesteps: int, device="cpu", **_):
        super().__init__(num_timesteps, device)
        self.params = params
        t = torch.arange(self.T, dtype=torch.float64)
        self.gauss = torch.softmax(-0.5 * ((t - params.mu) / params.sigma) ** 2, dim=0)  # N(t) / Z_N, no underflow
        self.nimg = 0
        self._gauss_on: dict[torch.device, Tensor] = {}
        self._cdf: tuple[int, torch.device, Tensor] | None = None  # p changes at most once per step

    def mixing(self, nimg: int | None = None) -> float:
        """lambda_s at ``nimg`` images seen (default: the current progress)."""
        nimg = self.nimg if nimg is None else nimg
        return self.params.lambda_max * min(1.0, nimg / (1000.0 * self.params.horizon_kimg))

    def probs(self, nimg: int | None = None) -> Tensor:
        return self._p(self.gauss, nimg)

    def _p(self, gauss: Tensor, nimg: int | None = None) -> Tensor:
        lam = self.mixing(nimg)
        return (1.0 - lam) / self.T + lam * gauss

    def sample(self, batch_size, generator, x0=None):
        device = generator.device
        if self._cdf is None or self._cdf[:2] != (self.nimg, device):
            if device not in self._gauss_on:
                self._gauss_on[device] = self.gauss.to(device)
            gauss = self._gauss_on[device]
            self._cdf = (self.nimg, device, cdf_table(self._p(gauss)))
        return inverse_cdf(self._cdf[2], batch_size, generator), torch.ones(batch_size, device=device)

    def update(self, t: Tensor, losses: Tensor, **context: Any) -> None:
        self.nimg = int(context["nimg"])

    def state_dict(self) -> dict[str, Any]:
        return {"nimg": self.nimg}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.nimg = int(state["nimg"])
