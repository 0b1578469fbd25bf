"""``slots``: uniform over the union of chosen timestep slots (fine-tuning one loss scale).

Source: Xie & Agam, "Rethinking Timesteps Samplers and Prediction Types", arXiv 2502.01990,
Sec. 2.1 and Table 1 (slots of equal summed eps-MSE for guided-diffusion ImageNet-256, T = 1000);
docs/methods.md §1.6. The paper fine-tunes slots 3, 5, 7 and 9, counting from 1::

    p(t) = 1 / |U|  for t in U = union of slots[a - 1] over a in active,   0 otherwise

Weight 1 (training only on a subset changes the objective on purpose).

Parameters: ``slots`` -- inclusive ``[lo, hi]`` ranges, sorted and non-overlapping, inside
``[0, T-1]`` (our pipeline computes its own from its loss profile: ``studies.equal_loss_slots``);
``active`` -- **1-based** slot numbers (the paper's convention), default ``[3, 5, 7, 9]``.

Default ``slots`` (``null``): the paper's Table 1 for T = 1000,
``[0,4] [5,12] [13,22] [23,36] [37,55] [56,81] [82,119] [120,176] [177,276] [277,999]``. For
another T the slot starts are scaled, ``lo_k = max(floor(lo_k^1000 T / 1000 + 1/2), lo_{k-1} + 1)``
(each slot keeps at least one timestep), ``hi_k = lo_{k+1} - 1`` and the last slot ends at T - 1;
this needs T >= 10.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TabulatedSampler
from timestep_lab.timesteps.registry import SAMPLERS

__all__ = ["PAPER_SLOTS", "default_slots", "check_slots", "resolve_slots", "SlotsSampler"]

# 2502.01990 Table 1 (guided-diffusion ImageNet-256, T = 1000), inclusive ranges
PAPER_SLOTS = ((0, 4), (5, 12), (13, 22), (23, 36), (37, 55), (56, 81), (82, 119), (120, 176), (177, 276), (277, 999))


def default_slots(T: int) -> tuple[tuple[int, int], ...]:
    """The paper's slots scaled from T = 1000 to ``T`` (identical for T = 1000)."""
    if T < len(PAPER_SLOTS):
        raise ValueError(f"slots must be given explicitly when num_timesteps={T} < {len(PAPER_SLOTS)} "
                         f"(the default paper slots need one timestep each)")
    starts = [0]
    for lo, _ in PAPER_SLOTS[1:]:
        starts.append(max(int(lo * T / 1000 + 0.5), starts[-1] + 1))
    return tuple((lo, hi - 1) for lo, hi in zip(starts, starts[1:] + [T]))


def check_slots(slots: tuple[tuple[int, int], ...] | None) -> None:
    """T-independent checks: non-empty, ``0 <= lo <= hi``, sorted, non-overlapping."""
    if slots is None:
        return
    if not slots:
        raise ValueError("slots must be a non-empty list of [lo, hi] ranges")
    prev_hi = -1
    for i, (lo, hi) in enumerate(slots):
        if not 0 <= lo <= hi:
            raise ValueError(f"slots must be inclusive ranges [lo, hi] with 0 <= lo <= hi, got slots[{i}] = [{lo}, {hi}]")
        if lo <= prev_hi:
            raise ValueError(f"slots must be sorted and non-overlapping, got slots[{i}] = [{lo}, {hi}] "
                             f"after a slot ending at {prev_hi}")
        prev_hi = hi


def resolve_slots(slots: tuple[tuple[int, int], ...] | None, T: int, cover: bool = False) -> list[tuple[int, int]]:
    """The slots for ``T`` timesteps (``None``: the scaled paper slots), checked to lie in
    ``[0, T-1]`` and, with ``cover``, to tile it without gaps."""
    out = list(default_slots(T) if slots is None else slots)
    if out[-1][1] > T - 1:
        i = next(i for i, (_, hi) in enumerate(out) if hi > T - 1)
        raise ValueError(f"slots must lie in [0, T-1] = [0, {T - 1}], got slots[{i}] = {list(out[i])}")
    if cover:
        gaps = [(a[1], b[0]) for a, b in zip(out, out[1:]) if b[0] != a[1] + 1]
        if out[0][0] != 0 or out[-1][1] != T - 1 or gaps:
            raise ValueError(f"slots must cover [0, {T - 1}] without gaps (first starts at {out[0][0]}, "
                             f"last ends at {out[-1][1]}{f', gap after {gaps[0][0]}' if gaps else ''})")
    return out


@dataclass(frozen=True)
class SlotsParams:
    active: tuple[int, ...] = (3, 5, 7, 9)  # 1-based slot numbers, as in the paper
    slots: tuple[tuple[int, int], ...] | None = None  # None: the paper's Table 1, scaled to T

    def __post_init__(self) -> None:
        check_slots(self.slots)
        n = len(PAPER_SLOTS) if self.slots is None else len(self.slots)
        if not self.active:
            raise ValueError("active must name at least one slot (1-based)")
        for a in self.active:
            check_range("active", a, 1, n)  # "active must be in [1, n], got 0"
        if len(set(self.active)) != len(self.active):
            raise ValueError(f"active must not repeat a slot, got {list(self.active)}")


@SAMPLERS.register("slots", SlotsParams)
class SlotsSampler(TabulatedSampler):
    def __init__(self, params: SlotsParams, *, num_timesteps: int, device="cpu", **_):
        self.slots = resolve_slots(params.slots, num_timesteps)
        self.active = tuple(params.active)
        p = torch.zeros(num_timesteps, dtype=torch.float64)
        for a in self.active:
            lo, hi = self.slots[a - 1]
            p[lo:hi + 1] = 1.0
        super().__init__(p, num_timesteps, device)
