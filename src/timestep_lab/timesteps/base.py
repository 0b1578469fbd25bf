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
across DDP ranks in rank order; identity in one process) and ``world_size``. Samplers ignore
what they do not need.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["TimestepSampler"]


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
