"""Training-time batches: :class:`IndexStream` (resumable shuffled epochs) and :class:`Loader`
(the whole prepared array in host memory, uint8 -> [-1, 1] and flips on the device)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import Tensor

from timestep_lab.data.prepared import PreparedData, to_float
from timestep_lab.data.raw import DataError

log = logging.getLogger(__name__)

__all__ = ['IndexStream', 'Loader']


class IndexStream:
    """Endless shuffled epochs over ``n`` items, resumable: epoch ``e`` is the permutation
    drawn from ``Generator().manual_seed(seed + e)``; the state is ``(epoch, position)``."""

    def __init__(self, n: int, seed: int):
        if n <= 0:
            raise DataError("cannot draw batches from an empty data set")
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> Tensor:
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + epoch))

    def next(self, batch_size: int) -> Tensor:
        """The next ``batch_size`` indices, ``LongTensor[batch_size]`` (crossing epochs as needed).

        ``next(0)`` returns an empty ``LongTensor[0]`` and leaves the state unchanged.
        """
        if batch_size < 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size}")
        out = [self._perm[:0]]  # never empty, so torch.cat works (and keeps int64) for batch_size 0
        need = batch_size
        while need:
            take = min(need, self.n - self.pos)
            out.append(self._perm[self.pos:self.pos + take])
            self.pos += take
            need -= take
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
        return torch.cat(out)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos, "seed": self.seed, "n": self.n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["n"] != self.n:
            raise DataError(f"checkpoint was trained on {state['n']} images, the data set has {self.n}")
        self.seed, self.epoch, self.pos = int(state["seed"]), int(state["epoch"]), int(state["pos"])
        self._perm = self._permutation(self.epoch)


LOADER_COPY_CHUNK = 4096  # images converted NHWC -> NCHW per copy while loading (bounds the temporary)


def _host_tensor(shape: tuple[int, ...], pin: bool) -> tuple[Tensor, bool]:
    """An empty uint8 host tensor, page-locked when ``pin`` and the platform allows it.

    Returns ``(tensor, pinned)``. Pinning needs a CUDA driver; without one (a CPU-only machine)
    the tensor is ordinary pageable memory and ``pinned`` is False, so callers degrade to
    synchronous copies instead of failing."""
    if pin:
        try:
            return torch.empty(shape, dtype=torch.uint8, pin_memory=True), True
        except RuntimeError as exc:  # no CUDA driver / accelerator: pinning is impossible, not an error
            log.warning("cannot pin host memory (%s); host-to-device copies will be synchronous",
                        str(exc).splitlines()[0])
    return torch.empty(shape, dtype=torch.uint8), False


class Loader:
    """Batches from a prepared data set held in host memory as uint8 NCHW.

    ``batch(indices, generator)`` returns ``float32 [B, C, H, W]`` in [-1, 1] on ``device``;
    with ``hflip`` each image is flipped with probability 1/2 using ``generator`` (on the
    device, so augmentation never stalls the accelerator).

    The whole uint8 array is read into memory once (chunk by chunk from the memory-mapped
    file, so the peak is one copy of the data set plus a chunk).

    Host-to-device path (``stage``; default: when ``device`` is CUDA): each batch is gathered
    with ``index_select(out=...)`` into one of ``staging_buffers`` page-locked (pinned) staging
    buffers, allocated once, and copied with ``non_blocking=True``: the host neither waits for
    the copy nor allocates pinned memory per step. Only the staging buffers are pinned, not the
    data set: the gather runs on the CPU either way, and only the source of a DMA copy has to
    be page-locked (pinning all of ImageNet-64, 15.7 GB, would lock that much RAM, or fail).
    A ring slot is reused only after the copy that last read it has finished (a CUDA event per
    slot; with 2 slots the host runs up to one batch ahead of the copy engine without waiting).
    The uint8 -> float conversion and the flips run on the device after the copy (4x fewer
    bytes over PCIe than float32).

    Without a CUDA driver (``stage=True`` on a CPU-only machine) pinning is skipped with one
    warning and the same ring runs with ordinary memory. On a CPU device with ``stage`` off
    the batch is gathered directly (the float conversion makes a new tensor anyway).
    """

    def __init__(self, data: PreparedData, device: torch.device | str = "cpu", hflip: bool = False, *,
                 stage: bool | None = None, staging_buffers: int = 2):
        self.device = torch.device(device)
        self.hflip = hflip
        if staging_buffers < 1:
            raise ValueError(f"staging_buffers must be >= 1, got {staging_buffers}")
        src = data.images  # uint8 [N, H, W, C], memory-mapped
        n, h, w, c = (int(s) for s in src.shape)
        images = torch.empty((n, c, h, w), dtype=torch.uint8)
        for i in range(0, n, LOADER_COPY_CHUNK):  # NHWC -> NCHW chunk by chunk: no full-size temporaries
            chunk = np.array(src[i:i + LOADER_COPY_CHUNK])  # a writable copy: torch warns on read-only memmaps
            images[i:i + len(chunk)].copy_(torch.from_numpy(chunk).permute(0, 3, 1, 2))
        self.images = images  # uint8 [N, C, H, W] on the host
        self.stage = self.device.type == "cuda" if stage is None else bool(stage)
        self.pinned: bool | None = None  # whether the staging buffers are page-locked (known after the first batch)
        self._staging: list[Tensor | None] = [None] * staging_buffers
        self._events: list[Any] = [None] * staging_buffers  # torch.cuda.Event of the copy that last read a slot
        self._slot = 0

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def _staging_buffer(self, batch: int) -> tuple[int, Tensor]:
        """The next ring slot, at least ``batch`` images long, safe to overwrite now."""
        k = self._slot
        self._slot = (k + 1) % len(self._staging)
        if self._events[k] is not None:
            self._events[k].synchronize()  # normally long done: the copy was queued a ring turn ago
            self._events[k] = None
        buf = self._staging[k]
        if buf is None or buf.shape[0] < batch:  # once per slot (or when a larger batch comes)
            buf, pinned = _host_tensor((batch, *self.images.shape[1:]), self.pinned is not False)
            self.pinned = pinned if self.pinned is None else self.pinned and pinned
            self._staging[k] = buf
        return k, buf[:batch]

    def batch(self, indices: Tensor, generator: torch.Generator | None = None) -> Tensor:
        idx = indices.to("cpu", torch.long)
        if not self.stage:
            x = self.images.index_select(0, idx)
            if self.device.type != "cpu":  # staging switched off: a plain synchronous copy
                x = x.to(self.device)
        else:
            k, buf = self._staging_buffer(len(idx))
            torch.index_select(self.images, 0, idx, out=buf)
            x = buf.to(self.device, non_blocking=bool(self.pinned))
            if self.device.type == "cuda":
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(self.device))
                self._events[k] = event
        # to_float allocates a new tensor, so the result never aliases a staging buffer (even on CPU,
        # where .to() above returns the buffer itself)
        x = to_float(x)
        if self.hflip:
            if generator is None:
                raise ValueError("hflip needs a generator")
            flip = torch.rand(x.shape[0], generator=generator, device=generator.device) < 0.5
            x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
        return x
