"""``loss_second_moment``: importance sampling by the second moment of recent losses.

Source: Nichol & Dhariwal, "Improved Denoising Diffusion Probabilistic Models", arXiv 2102.09672,
Sec. 3.3, official code ``improved_diffusion/resample.py`` (``LossSecondMomentResampler``);
docs/methods.md §1.2.

State: per timestep the last ``history`` (10) raw per-sample losses (detached, before any
weighting; a ring buffer, the oldest entry dropped when a row is full) and an int64 count capped
at ``history``. Until every row is full, p is uniform; then::

    w_t = sqrt( mean_j loss_{t,j}^2 ),   p_t = (1 - u) w_t / sum_s w_s + u / T,   u = uniform_prob

``sample`` draws t ~ p with importance weight ``1 / (T p_t)``, so ``E_p[w(t) L(t)]`` is the
uniform-t loss. ``update`` runs after the batch was drawn and trained on, so batch k's
distribution is built from batches < k only. Under DDP every rank gathers all ranks' (t, loss)
pairs (``context["gather"]``, rank order = global batch order) and applies the same update, so
the histories stay identical and match a single-process run.

The original targets the VLB objective; here it sees whatever per-sample loss the run trains
(the raw, unweighted loss of the prediction type) -- say which in a report. Everything stays on
the sampler's device: the update is a handful of sort/scatter ops with no host synchronisation.
Duplicates of a timestep within one batch are appended in batch order, as the sequential
original does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from timestep_lab.processes import exact
from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TimestepSampler, cdf_table, importance_weights, inverse_cdf
from timestep_lab.timesteps.registry import SAMPLERS


@dataclass(frozen=True)
class LossSecondMomentParams:
    history: int = 10
    uniform_prob: float = 0.001

    def __post_init__(self) -> None:
        check_range("history", self.history, 1, None)
        check_range("uniform_prob", self.uniform_prob, 0.0, 1.0)


@SAMPLERS.register("loss_second_moment", LossSecondMomentParams)
class LossSecondMomentSampler(TimestepSampler):
    stateful = True

    def __init__(self, params: LossSecondMomentParams, *, num_timesteps: int, device="cpu", **_):
        super().__init__(num_timesteps, device)
        self.history, self.uniform_prob = params.history, params.uniform_prob
        # the [T, history] history, plus one scratch element that absorbs dropped writes (no masking sync)
        self._flat = torch.zeros(self.T * self.history + 1, dtype=torch.float64, device=self.device)
        self.losses = self._flat[:-1].view(self.T, self.history)
        self.seen = torch.zeros(self.T, dtype=torch.int64, device=self.device)  # losses ever appended per t
        self._refresh()

    # ------------------------------------------------------------------ distribution

    @property
    def counts(self) -> Tensor:
        """Entries held per timestep (capped at ``history``), int64 ``[T]``."""
        return self.seen.clamp(max=self.history)

    def _refresh(self) -> None:
        """Recompute p, its CDF and the importance weights from the history (device ops only)."""
        w = exact.sqrt(self.losses.pow(2).mean(dim=1))
        p = w / w.sum().clamp_min(1e-300)
        p = (1.0 - self.uniform_prob) * p + self.uniform_prob / self.T
        warm = (self.seen >= self.history).all()
        self._p = torch.where(warm, p, torch.full_like(p, 1.0 / self.T))
        self._cdf = cdf_table(self._p)
        self._w = importance_weights(self._p).float()

    def sample(self, batch_size, generator, x0=None):
        t = inverse_cdf(self._cdf.to(generator.device), batch_size, generator)
        return t, self._w.to(generator.device)[t]

    def probs(self) -> Tensor:
        return self._p.double().cpu()

    def importance_table(self) -> Tensor:
        return importance_weights(self.probs())

    # ------------------------------------------------------------------ update

    def update(self, t: Tensor, losses: Tensor, **context: Any) -> None:
        gather = context.get("gather")
        if gather is not None:
            t, losses = gather(t.contiguous()), gather(losses.detach().contiguous())
        t = t.to(self.device).long()
        losses = losses.detach().to(self.device, torch.float64)
        H = self.history
        # occurrence rank of each entry among the same t in this batch (batch order), via a stable sort
        order = torch.sort(t, stable=True).indices
        t_sorted = t[order]
        first = torch.searchsorted(t_sorted, t_sorted, right=False)
        rank = torch.empty_like(t)
        rank[order] = torch.arange(t.numel(), device=self.device) - first
        n_new = torch.zeros(self.T, dtype=torch.int64, device=self.device).index_add_(0, t, torch.ones_like(t))
        # with more than H copies of t in one batch only its last H survive; their slots are distinct
        keep = (n_new[t] - rank) <= H
        index = torch.where(keep, t * H + (self.seen[t] + rank) % H, self.T * H)
        self._flat.index_copy_(0, index, losses)
        self.seen += n_new
        self._refresh()

    # ------------------------------------------------------------------ checkpoint

    def state_dict(self) -> dict[str, Any]:
        return {"losses": self.losses.cpu().clone(), "seen": self.seen.cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["losses"].shape != self.losses.shape:
            raise ValueError(f"loss_second_moment state has shape {tuple(state['losses'].shape)}, "
                             f"expected {tuple(self.losses.shape)} (num_timesteps x history)")
        self.losses.copy_(state["losses"])
        self.seen.copy_(state["seen"])
        self._refresh()
