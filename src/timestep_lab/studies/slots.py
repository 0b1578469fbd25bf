"""Timestep slots of equal summed loss (Xie & Agam, arXiv 2502.01990, Sec. 2.1 and Table 1;
docs/methods.md §3.1).

"Sum the MSE of all timesteps, then split so every slot holds the same share": with the
cumulative loss ``S(t) = sum_{s <= t} L(s)`` and ``S_tot = S(T-1)``, slot ``k`` (0-based) ends
at the timestep whose cumulative sum is closest to ``(k+1) S_tot / n``, so every slot sums to
``S_tot / n`` up to one timestep's loss. Slots are consecutive inclusive 0-based ranges
``(lo, hi)`` covering ``[0, T-1]``; ``t = 0`` is the least noisy. Because the loss is largest
near ``t = 0``, early slots are narrow (the paper's first slot is ``[0, 4]`` of 1000).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from timestep_lab.artifacts.io import ArtifactError, read_json
from timestep_lab.errors import InputError

__all__ = ["PAPER_SLOTS", "equal_loss_slots", "slot_sums", "scale_slots", "check_cover", "load_slots"]

# 2502.01990 Table 1: guided-diffusion ImageNet-256 (T = 1000), inclusive 0-based ranges.
# (The same table as timestep_lab.timesteps.slots.PAPER_SLOTS, which the slots sampler uses.)
PAPER_SLOTS: tuple[tuple[int, int], ...] = (
    (0, 4), (5, 12), (13, 22), (23, 36), (37, 55), (56, 81), (82, 119), (120, 176), (177, 276), (277, 999),
)


def _loss_array(loss_per_t: Sequence[float]) -> np.ndarray:
    if hasattr(loss_per_t, "detach"):  # torch tensor
        loss_per_t = loss_per_t.detach().cpu().numpy()
    arr = np.asarray(loss_per_t, dtype=np.float64)
    if arr.ndim != 1:
        raise InputError(f"loss_per_t must be 1-D [T], got shape {list(arr.shape)}")
    if arr.size == 0:
        raise InputError("loss_per_t is empty")
    if not np.all(np.isfinite(arr)):
        bad = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise InputError(f"loss_per_t must be finite; t = {bad} is {arr[bad]}")
    if np.any(arr < 0):
        bad = int(np.flatnonzero(arr < 0)[0])
        raise InputError(f"loss_per_t must be non-negative; t = {bad} is {arr[bad]}")
    return arr


def equal_loss_slots(loss_per_t: Sequence[float], n_slots: int) -> list[tuple[int, int]]:
    """Split ``[0, T-1]`` into ``n_slots`` consecutive non-empty inclusive ranges of (nearly)
    equal summed loss.

    :param loss_per_t: ``[T]`` non-negative finite per-timestep loss (e.g. the eps-MSE profile,
        interpolated to every t with :func:`~timestep_lab.studies.profile.full_profile`).
    :param n_slots: number of slots, ``1 <= n_slots <= T``.
    :returns: ``[(lo_0, hi_0), ..., (lo_{n-1}, hi_{n-1})]`` with ``lo_0 = 0``, ``hi_{n-1} = T-1``,
        ``lo_{k+1} = hi_k + 1``. Boundary ``hi_k`` is the ``t`` whose cumulative sum is closest to
        ``(k+1)/n`` of the total (ties: the earlier t), then moved as little as needed to keep every
        slot non-empty. Each slot's sum is then within ``max(loss)`` of ``total / n`` unless that
        move was needed. A zero total splits into equal widths. Deterministic.
    """
    arr = _loss_array(loss_per_t)
    T = int(arr.size)
    if isinstance(n_slots, bool) or not isinstance(n_slots, (int, np.integer)) or n_slots < 1:
        raise InputError(f"n_slots must be a positive integer, got {n_slots!r}")
    n = int(n_slots)
    if n > T:
        raise InputError(f"cannot make {n} non-empty slots from T = {T} timesteps")
    total = float(arr.sum())
    if total <= 0.0:
        arr = np.ones(T)
        total = float(T)
    cum = np.cumsum(arr)
    ends: list[int] = []
    for k in range(1, n):
        target = total * k / n
        j = int(np.searchsorted(cum, target, side="left"))  # first t with cum[t] >= target
        j = min(j, T - 1)
        if j > 0 and abs(cum[j - 1] - target) <= abs(cum[j] - target):
            j -= 1
        lo_bound = (ends[-1] + 1) if ends else 0
        hi_bound = T - 1 - (n - k)  # leave one timestep for each remaining slot
        ends.append(min(max(j, lo_bound), hi_bound))
    ends.append(T - 1)
    starts = [0] + [e + 1 for e in ends[:-1]]
    return [(int(a), int(b)) for a, b in zip(starts, ends)]


def check_cover(slots: Sequence[Sequence[int]], T: int) -> None:
    """Raise :class:`~timestep_lab.errors.InputError` unless ``slots`` are consecutive non-empty inclusive ranges covering ``[0, T-1]``."""
    if not slots:
        raise InputError("slots is empty")
    expect = 0
    for i, s in enumerate(slots):
        lo, hi = int(s[0]), int(s[1])
        if lo != expect or hi < lo:
            raise InputError(f"slots must be consecutive non-empty ranges starting at 0; slot {i} is [{lo}, {hi}], "
                             f"expected to start at {expect}")
        expect = hi + 1
    if expect != T:
        raise InputError(f"slots end at {expect - 1}, expected T - 1 = {T - 1}")


def slot_sums(loss_per_t: Sequence[float], slots: Sequence[Sequence[int]]) -> list[float]:
    """``[sum_{t=lo}^{hi} loss[t] for (lo, hi) in slots]`` (inclusive ranges inside ``[0, T-1]``)."""
    arr = np.asarray(loss_per_t.detach().cpu().numpy() if hasattr(loss_per_t, "detach") else loss_per_t,
                     dtype=np.float64)
    if arr.ndim != 1:
        raise InputError(f"loss_per_t must be 1-D [T], got shape {list(arr.shape)}")
    out = []
    for i, s in enumerate(slots):
        lo, hi = int(s[0]), int(s[1])
        if not 0 <= lo <= hi < arr.size:
            raise InputError(f"slot {i} [{lo}, {hi}] is not inside [0, {arr.size - 1}]")
        out.append(float(arr[lo : hi + 1].sum()))
    return out


def scale_slots(slots: Sequence[Sequence[int]], T_from: int, T_to: int) -> list[tuple[int, int]]:
    """Map consecutive slots covering ``[0, T_from-1]`` to ``[0, T_to-1]``.

    Slot starts are scaled, ``lo_k' = max(floor(lo_k T_to / T_from + 1/2), lo_{k-1}' + 1)`` (each slot
    keeps at least one timestep), ``hi_k' = lo_{k+1}' - 1`` and the last slot ends at ``T_to - 1``
    (the same rule as :func:`timestep_lab.timesteps.slots.default_slots`). Needs ``T_to >= len(slots)``.
    """
    check_cover(slots, T_from)
    n = len(slots)
    if T_to < n:
        raise InputError(f"cannot scale {n} slots to T = {T_to} < {n} timesteps")
    starts = [0]
    for k, s in enumerate(slots[1:], start=1):
        lo = int(np.floor(int(s[0]) * T_to / T_from + 0.5))
        lo = max(lo, starts[-1] + 1)
        lo = min(lo, T_to - (n - k))  # leave room for the remaining slots
        starts.append(lo)
    return [(a, b - 1) for a, b in zip(starts, starts[1:] + [T_to])]


def load_slots(path) -> list[list[int]]:
    """The ``slots`` of a slots JSON (``python -m timestep_lab slots``): ``[[lo, hi], ...]``.

    :raises ArtifactError: naming ``path`` when it is not one."""
    obj = read_json(path)
    slots = obj.get("slots") if isinstance(obj, dict) else None
    if (not isinstance(slots, list) or not slots
            or not all(isinstance(s, list) and len(s) == 2 and all(type(x) is int for x in s) for s in slots)):
        raise ArtifactError(f"{path}: not a slots file (a 'slots' list of [lo, hi] pairs, from "
                            f"`python -m timestep_lab slots`)")
    return slots
