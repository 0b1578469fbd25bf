"""``slot_balanced``: a slot uniformly, then t uniformly inside it, so every batch covers the
loss scales evenly.

Source: Xie & Agam, "Rethinking Timesteps Samplers and Prediction Types", arXiv 2502.01990,
Sec. 2.1 ("sample the timesteps so that the MSE losses of all selected timesteps contain different
scales as much as possible"); docs/methods.md §1.6. With n slots of sizes |s_k| tiling [0, T-1]::

    p(t) = 1 / (n |s(t)|),        weight = 1 / (T p(t)) = n |s(t)| / T   if ``unbiased`` else 1

With ``unbiased = true`` the weighted loss is the uniform-t loss in expectation,
``E_p[w(t) L(t)] = mean_t L(t)``; with ``false`` small-t slots (few timesteps, large losses) get
the same share of each batch as the wide high-t slot, which changes the objective.

``stratified = true`` (default) draws each batch with ``floor(B/n)`` timesteps from every slot
plus one from each of ``B mod n`` distinct random slots, in random order, so every batch covers
all slots as evenly as B allows. Each position's slot is still uniform, so the marginal (what
``probs()`` returns) and the unbiasedness are the same as for independent draws
(``stratified = false``), with lower variance across batches.

``slots``: as for the ``slots`` sampler (default: the paper's Table 1 scaled to T); here they must
tile [0, T-1] without gaps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from timestep_lab.timesteps.base import TabulatedSampler
from timestep_lab.timesteps.registry import SAMPLERS
from timestep_lab.timesteps.slots import check_slots, resolve_slots


@dataclass(frozen=True)
class SlotBalancedParams:
    slots: tuple[tuple[int, int], ...] | None = None  # None: the paper's Table 1, scaled to T
    unbiased: bool = True
    stratified: bool = True

    def __post_init__(self) -> None:
        check_slots(self.slots)


@SAMPLERS.register("slot_balanced", SlotBalancedParams)
class SlotBalancedSampler(TabulatedSampler):
    def __init__(self, params: SlotBalancedParams, *, num_timesteps: int, device="cpu", **_):
        self.slots = resolve_slots(params.slots, num_timesteps, cover=True)
        self.stratified = params.stratified
        n = len(self.slots)
        p = torch.cat([torch.full((hi - lo + 1,), 1.0 / (n * (hi - lo + 1)), dtype=torch.float64)
                       for lo, hi in self.slots])
        super().__init__(p, num_timesteps, device, unbiased=params.unbiased)
        self._lo = torch.tensor([lo for lo, _ in self.slots])
        self._size = torch.tensor([hi - lo + 1 for lo, hi in self.slots])
        self._slot_tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def sample(self, batch_size, generator, x0=None):
        device = generator.device
        if device not in self._slot_tables:
            self._slot_tables[device] = (self._lo.to(device), self._size.to(device))
        lo, size = self._slot_tables[device]
        n = len(self.slots)
        if self.stratified:
            extra = torch.randperm(n, generator=generator, device=device)[: batch_size % n]
            slot = torch.cat([torch.arange(n, device=device).repeat(batch_size // n), extra])
            slot = slot[torch.randperm(batch_size, generator=generator, device=device)]
        else:
            slot = torch.randint(0, n, (batch_size,), generator=generator, device=device)
        u = torch.rand(batch_size, generator=generator, device=device, dtype=torch.float64)
        t = lo[slot] + torch.minimum((u * size[slot]).long(), size[slot] - 1)
        _, w = self._on(device)
        return t, (w[t] if self.unbiased else torch.ones(batch_size, device=device))
