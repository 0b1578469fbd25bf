"""The timestep-sampler interface (improved-diffusion's ``resample.py`` shape).

Every sampler draws ``t`` and an importance weight, and may learn from the losses it sees::

    t, weight = sampler.sample(batch_size, generator, x0=None)   # LongTensor[B], Tensor[B]
    sampler.before_update(**context)                               # before the optimizer step
    sampler.update(t, losses, **context)                           # after it; no-op if stateless
    sampler.probs()                                                # Tensor[T], current marginal p(t)

``weight`` keeps the objective unbiased where the method asks for it (``1 / (T p_t)``) and is 1
for methods that deliberately change the objective. Timesteps are 0-based.

The training loop passes ``context`` keyword arguments to both hooks:

``step`` (optimizer steps done), ``nimg`` (images seen), ``x0`` (the global clean batch,
``[B, C, H, W]``), ``vlb_fn(x0, t, noise) -> [B]`` (per-sample VLB term in bits/dim with the
current network, no gradient), ``gather(tensor) -> tensor`` (concatenate a per-rank tensor
across DDP ranks in rank order; identity in one process), ``world_size`` and ``shard`` (this
rank's slice of the global batch). Samplers ignore what they do not need.

Randomness: :meth:`TimestepSampler.sample` draws only from ``generator`` (on
``generator.device``), so the training loop's generator state fully determines the batch. Helpers
here: :func:`cdf_table` and :func:`inverse_cdf` (sampling a tabulated p(t) without a host sync),
:func:`discrete_cdf_pmf` (the pmf of a discretised continuous variable).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["TimestepSampler", "TabulatedSampler", "cdf_table", "inverse_cdf", "discrete_cdf_pmf",
           "importance_weights"]


def cdf_table(p: Tensor) -> Tensor:
    """Float64 CDF of the (unnormalised, non-negative) table ``p [T]``, equal to exactly 1 from the
    last positive entry on, so :func:`inverse_cdf` never returns a zero-probability timestep.
    Device ops only (no host sync): usable on a table that lives on the GPU."""
    p = p.double()
    c = torch.cumsum(p, 0)
    c = c / c[-1]
    idx = torch.arange(p.numel(), device=p.device)
    last = torch.where(p > 0, idx, torch.zeros_like(idx)).max()
    return torch.where(idx >= last, torch.ones_like(c), c)


def inverse_cdf(cdf: Tensor, batch_size: int, generator: torch.Generator) -> Tensor:
    """``batch_size`` draws ``t`` with ``P(t = i) = cdf[i] - cdf[i-1]`` (``cdf`` from :func:`cdf_table`,
    on ``generator.device``): ``t = min{i : cdf[i] > u}``, ``u ~ U[0, 1)``."""
    u = torch.rand(batch_size, generator=generator, device=generator.device, dtype=torch.float64)
    return torch.searchsorted(cdf, u, right=True).clamp_(max=cdf.numel() - 1)


def discrete_cdf_pmf(cdf_at_edges: Tensor) -> Tensor:
    """pmf ``[..., T]`` of a discretised continuous variable from its CDF at the ``T + 1`` bin edges
    ``[..., T+1]`` (the first and last edge at the ends of its support); differences clamped at 0
    against rounding."""
    return (cdf_at_edges[..., 1:] - cdf_at_edges[..., :-1]).clamp_min(0.0)


def importance_weights(p: Tensor) -> Tensor:
    """``1 / (T p_t)`` (0 where ``p_t = 0``: such t are never drawn), so ``E_p[w(t) L(t)] = mean_t L(t)``."""
    T = p.numel()
    return torch.where(p > 0, 1.0 / (T * p.double()).clamp_min(1e-300), torch.zeros_like(p, dtype=torch.float64))


class TimestepSampler:
    """Base class. Subclasses implement :meth:`sample` and :meth:`probs`; stateful samplers set
    ``stateful = True`` and implement :meth:`update`, :meth:`state_dict` and
    :meth:`load_state_dict` so a resumed run continues identically."""

    stateful: bool = False

    def __init__(self, num_timesteps: int, device: torch.device | str = "cpu"):
        self.T = int(num_timesteps)
        self.device = torch.device(device)

    def sample(self, batch_size: int, generator: torch.Generator, x0: Tensor | None = None) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def probs(self) -> Tensor:
        """Current marginal p(t), ``[T]`` float64 summing to 1."""
        raise NotImplementedError

    def importance_table(self) -> Tensor:
        """The weight :meth:`sample` returns for each t, ``[T]`` float64 (all ones for samplers
        that change the objective on purpose; ``1 / (T p_t)`` for unbiased ones)."""
        return torch.ones(self.T, dtype=torch.float64)

    def before_update(self, **context: Any) -> None:
        """Called before the diffusion update of every step (no-op by default)."""

    def update(self, t: Tensor, losses: Tensor, **context: Any) -> None:
        """Called after the diffusion update with the batch's timesteps and raw per-sample
        losses ``[B]`` (detached, unweighted). No-op for stateless samplers."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} is stateless but got a state with keys {sorted(state)}")

    def log_summary(self, bins: int = 10) -> dict[str, Any] | None:
        """For stateful samplers: p(t) summed into ``bins`` equal t-ranges (for train_log)."""
        if not self.stateful:
            return None
        p = self.probs().double().cpu()
        edges = torch.linspace(0, self.T, bins + 1).round().long()
        return {"p_bins": [float(p[edges[i]:edges[i + 1]].sum()) for i in range(bins)]}


class TabulatedSampler(TimestepSampler):
    """A fixed table ``p [T]`` drawn by inverse CDF from the caller's generator. The weight is 1,
    or the importance weight ``1 / (T p_t)`` when ``unbiased`` (the objective stays the uniform-t
    loss in expectation)."""

    def __init__(self, p: Tensor, num_timesteps: int, device: torch.device | str = "cpu", unbiased: bool = False):
        super().__init__(num_timesteps, device)
        p = p.detach().double().cpu()
        if p.shape != (self.T,) or not torch.all(p >= 0) or not p.sum() > 0:
            raise ValueError(f"p(t) must be a non-negative [{self.T}] table with positive mass")
        self._p = p / p.sum()
        self.unbiased = unbiased
        self._tables: dict[torch.device, tuple[Tensor, Tensor]] = {}

    def _on(self, device: torch.device) -> tuple[Tensor, Tensor]:
        tables = self._tables.get(device)
        if tables is None:
            tables = (cdf_table(self._p).to(device), importance_weights(self._p).float().to(device))
            self._tables[device] = tables
        return tables

    def sample(self, batch_size, generator, x0=None):
        cdf, w = self._on(generator.device)
        t = inverse_cdf(cdf, batch_size, generator)
        return t, (w[t] if self.unbiased else torch.ones(batch_size, device=generator.device))

    def probs(self) -> Tensor:
        return self._p.clone()

    def importance_table(self) -> Tensor:
        return importance_weights(self._p) if self.unbiased else super().importance_table()
