"""The process group seen by the training loop (one code path for 1 or N processes), and the
device a process runs on (:func:`resolve_device`, used by training, sampling and evaluation).

``World`` is created by the CLI (which reads torchrun's environment) and passed in; library
code never reads environment variables itself. Must not know what runs on the devices.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["World", "resolve_device"]


@dataclass(frozen=True)
class World:
    """Rank ``rank`` of ``size`` processes; ``local_rank`` picks the GPU on this node."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def gather(self, x: Tensor) -> Tensor:
        """Concatenate equally-shaped per-rank tensors along dim 0, in rank order."""
        if not self.distributed:
            return x
        parts = [torch.empty_like(x) for _ in range(self.size)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim=0)

    def all_reduce_sum(self, x: Tensor) -> Tensor:
        if self.distributed:
            dist.all_reduce(x, op=dist.ReduceOp.SUM)
        return x

    def all_reduce_max(self, x: Tensor) -> Tensor:
        if self.distributed:
            dist.all_reduce(x, op=dist.ReduceOp.MAX)
        return x

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def shard(self, global_batch: int) -> slice:
        """This rank's contiguous slice of a global batch."""
        if global_batch % self.size:
            raise ValueError(f"global batch {global_batch} is not divisible by world size {self.size}")
        n = global_batch // self.size
        return slice(self.rank * n, (self.rank + 1) * n)


def resolve_device(name: str, world: World = World()) -> torch.device:
    """The torch device for ``name`` (``auto``: CUDA when available, else CPU); a CUDA device
    without an index is this process's GPU (``world.local_rank``).

    :raises RuntimeError: ``name`` asks for CUDA on a machine without it.
    """
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(f"train.device={name} but CUDA is not available on this machine")
        if device.index is None:
            device = torch.device("cuda", world.local_rank)
    return device
