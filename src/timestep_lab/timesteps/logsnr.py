"""``laplace`` and ``cauchy``: densities in log-SNR, mapped to the nearest discrete t.

Source: Hang, Gu, Geng & Guo, "Improved Noise Schedule for Diffusion Training", arXiv 2407.03297,
Sec. 2 (importance sampling of lambda = log SNR; docs/methods.md §12.2)::

    laplace   p(lambda) = exp(-|lambda - mu| / b) / (2 b)                    defaults mu = 0, b = 0.5
    cauchy    p(lambda) = gamma / (pi ((lambda - mu)^2 + gamma^2))           defaults mu = 0, gamma = 1
    t = argmin_i | lambda - lambda_i |,   lambda_i = log(ab_i / (1 - ab_i))   (decreasing in i)

drawn by inverse CDF from one uniform per sample and landed on the grid by ``landing``:

* ``below`` (default): t is the first grid point whose log-SNR is at or below the draw, edges
  ``m_i = lambda_i``. For the rectified flow that is ``t = min(floor(sigma T), T - 1)``, the rule of
  every other flow sampler (logit_normal, mode, cosmap, shift; diffusers' scripts): the pure-noise
  point t = T - 1 gets ``P(sigma >= (T - 1)/T)`` (cauchy: 2.3% at T = 1000; 0 in the limit T -> inf).
* ``nearest``: the nearest t in log-SNR, edges the midpoints ``m_i = (lambda_i + lambda_{i+1}) / 2``
  (as ``lognormal`` does in log sigma = -lambda / 2). For the flow the last midpoint rests on the
  floored log-SNR at sigma = 1 (``AB_FLOOR``, an arbitrary constant): cauchy put 1.54% on pure noise
  there. This was the rule before issue 43 (docs/methods.md §12.2).

``P(t = i) = F(m_{i-1}) - F(m_i)`` with ``m_{-1} = +inf``, ``m_{T-1} = -inf``. That is ``probs()``.
Weight 1. For the rectified flow lambda = 2 log((1 - sigma) / sigma), so ``laplace`` concentrates
training around sigma = 1/2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TimestepSampler
from timestep_lab.timesteps.registry import SAMPLERS

__all__ = ["laplace_cdf", "laplace_icdf", "cauchy_cdf", "cauchy_icdf", "LANDINGS"]

#: how a log-SNR draw lands on the grid: the edges between t = i and i + 1 from lambda [T] (decreasing)
LANDINGS = {
    "below": lambda lam: lam[:-1],
    "nearest": lambda lam: (lam[1:] + lam[:-1]) / 2,
}


def _check_landing(landing: str) -> None:
    if landing not in LANDINGS:
        raise ValueError(f"landing must be one of {', '.join(LANDINGS)}, got {landing!r}")


def laplace_cdf(x: Tensor, mu: float, b: float) -> Tensor:
    z = (x - mu) / b
    return torch.where(z < 0, 0.5 * torch.exp(z.clamp(max=0.0)), 1.0 - 0.5 * torch.exp(-z.clamp(min=0.0)))


def laplace_icdf(u: Tensor, mu: float, b: float) -> Tensor:
    """Inverse CDF for ``u`` in [0, 1): ``mu - b sign(u - 1/2) log(1 - 2 |u - 1/2|)`` (-inf at u = 0)."""
    c = u - 0.5
    return mu - b * torch.sign(c) * torch.log1p(-2.0 * c.abs())


def cauchy_cdf(x: Tensor, mu: float, gamma: float) -> Tensor:
    return 0.5 + torch.atan((x - mu) / gamma) / math.pi


def cauchy_icdf(u: Tensor, mu: float, gamma: float) -> Tensor:
    return mu + gamma * torch.tan(math.pi * (u - 0.5))


class _LogSnrSampler(TimestepSampler):
    """A density in log-SNR (``cdf``, ``icdf``), discretised to the nearest t (module docstring)."""

    def __init__(self, params, *, num_timesteps: int, alpha_bar: Tensor | None = None, device="cpu", **_):
        super().__init__(num_timesteps, device)
        if alpha_bar is None:
            raise ValueError(f"{type(self).__name__} needs the process' alpha_bar to map log-SNR to t")
        ab = alpha_bar.detach().double().cpu()
        lam = torch.log(ab) - torch.log1p(-ab)  # decreasing in t
        self.params = params
        # searchsorted needs increasing values: work with -lambda (right=False: a draw on an edge
        # lambda_i lands on t = i, the grid point at or below it)
        self.neg_mid = -LANDINGS[params.landing](lam)  # [T-1], increasing
        self._mid_on: dict[torch.device, Tensor] = {}

    def cdf(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def icdf(self, u: Tensor) -> Tensor:
        raise NotImplementedError

    def sample(self, batch_size, generator, x0=None):
        device = generator.device
        if device not in self._mid_on:
            self._mid_on[device] = self.neg_mid.to(device)
        u = torch.rand(batch_size, generator=generator, device=device, dtype=torch.float64)
        lam = self.icdf(u)
        return torch.searchsorted(self._mid_on[device], -lam), torch.ones(batch_size, device=device)

    def probs(self) -> Tensor:
        inf = torch.tensor([float("inf")], dtype=torch.float64)
        mids = torch.cat([inf, -self.neg_mid, -inf])  # m_{-1} = +inf > m_0 > ... > m_{T-1} = -inf
        return (self.cdf(mids[:-1]) - self.cdf(mids[1:])).clamp_min(0.0)


@dataclass(frozen=True)
class LaplaceParams:
    mu: float = 0.0
    b: float = 0.5
    landing: str = "below"

    def __post_init__(self) -> None:
        check_range("b", self.b, 0.0, None, lo_open=True)
        _check_landing(self.landing)


@SAMPLERS.register("laplace", LaplaceParams)
class LaplaceSampler(_LogSnrSampler):
    def cdf(self, x):
        return laplace_cdf(x, self.params.mu, self.params.b)

    def icdf(self, u):
        return laplace_icdf(u, self.params.mu, self.params.b)


@dataclass(frozen=True)
class CauchyParams:
    mu: float = 0.0
    gamma: float = 1.0
    landing: str = "below"

    def __post_init__(self) -> None:
        check_range("gamma", self.gamma, 0.0, None, lo_open=True)
        _check_landing(self.landing)


@SAMPLERS.register("cauchy", CauchyParams)
class CauchySampler(_LogSnrSampler):
    def cdf(self, x):
        return cauchy_cdf(x, self.params.mu, self.params.gamma)

    def icdf(self, u):
        return cauchy_icdf(u, self.params.mu, self.params.gamma)
