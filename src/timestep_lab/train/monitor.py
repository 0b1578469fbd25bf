"""What training watches on the device between log intervals, without a host sync per step.

:class:`Accumulators` sums the losses, per-timestep-bin losses (``LOG_BINS`` equal bins of
``[0, T)``: ``bin = t * LOG_BINS // T``), gradient norms and mixed-prediction head wins of one
log interval; :class:`NonFiniteGuard` remembers the first step whose loss was NaN/inf.
Both live on the training device and are read once per interval. Must not know the network,
the optimizer or files.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from timestep_lab.distributed import World
from timestep_lab.errors import NonFiniteLossError  # torch-free, so the CLI entry catches it without torch
from timestep_lab.processes.predictions import HEADS

__all__ = ["LOG_BINS", "Accumulators", "NonFiniteGuard", "NonFiniteLossError", "bin_of"]

LOG_BINS = 10


def bin_of(t: Tensor, T: int) -> Tensor:
    """The log bin ``[B]`` (0 .. LOG_BINS - 1) of timesteps ``t [B]`` out of ``T``."""
    return (t * LOG_BINS) // T


@dataclass
class Accumulators:
    """Per-log-interval sums kept on the device (read once per interval: no per-step sync)."""

    device: torch.device
    loss: Tensor = field(init=False)
    loss_raw: Tensor = field(init=False)
    bin_sum: Tensor = field(init=False)
    bin_count: Tensor = field(init=False)
    grad_norm: Tensor = field(init=False)
    heads: Tensor = field(init=False)
    steps: int = 0
    wall: float = 0.0

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        z = lambda *s: torch.zeros(*s, dtype=torch.float64, device=self.device)  # noqa: E731
        self.loss, self.loss_raw, self.grad_norm = z(()), z(()), z(())
        self.bin_sum, self.bin_count, self.heads = z(LOG_BINS), z(LOG_BINS), z(len(HEADS), LOG_BINS)
        self.steps = 0
        self.wall = 0.0

    def state_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("loss", "loss_raw", "bin_sum", "bin_count", "grad_norm", "heads",
                                              "steps", "wall")}

    def load_state_dict(self, s: dict) -> None:
        for k, v in s.items():
            setattr(self, k, v.to(self.device) if isinstance(v, Tensor) else v)


class NonFiniteGuard:
    """Remembers, on the device, the first step whose loss was not finite and its timesteps."""

    def __init__(self, device: torch.device, batch: int):
        self.first_step = torch.full((), -1, dtype=torch.long, device=device)
        self.t = torch.full((batch,), -1, dtype=torch.long, device=device)
        self.bad = torch.zeros(batch, dtype=torch.bool, device=device)

    def observe(self, step: int, t: Tensor, losses: Tensor) -> None:
        bad = ~torch.isfinite(losses)
        new = bad.any() & (self.first_step < 0)
        # masked_fill passes ``step`` to the kernel as a scalar argument; torch.as_tensor(step, device=...)
        # would be a pageable host-to-device copy, which on CUDA waits for the queued work every step
        self.first_step = self.first_step.masked_fill(new, step)
        self.t = torch.where(new, t, self.t)
        self.bad = torch.where(new, bad, self.bad)

    def message(self, world: World | None = None) -> str | None:
        """The first bad step, or None. With ``world`` (a collective: call it on every rank at
        the same point) a bad loss on any rank is reported on all of them."""
        step = int(self.first_step)
        if world is not None and world.distributed:
            worst = world.all_reduce_max(self.first_step.clone().view(1).float())
            if step < 0 and worst.item() >= 0:
                return f"non-finite loss on another rank at optimizer step {int(worst.item())}"
        if step < 0:
            return None
        ts = sorted(set(int(x) for x in self.t[self.bad].tolist()))
        shown = ", ".join(map(str, ts[:20])) + (" ..." if len(ts) > 20 else "")
        return f"non-finite loss at optimizer step {step} (timesteps {shown})"
