"""Stopping a run between two steps when a signal asks for it: SLURM's time-limit warning,
a cancellation, ``kill``.

SLURM ends a job at its time limit with SIGTERM to every process of the job's steps, then
SIGKILL ``KillWait`` seconds later (30 s by default); the cluster profile also asks for SIGTERM a
few minutes before the limit (``sbatch --signal=TERM@<s>``). :class:`StopRequest` turns SIGTERM
and SIGUSR1 into a flag; the loop reads it between steps, so the running step finishes, then
writes the training state (atomically, like every checkpoint) and returns ``interrupted``; the
``train`` command exits with :data:`~timestep_lab.errors.EXIT_RESUMABLE` (75), which Snakemake
counts as a failed job and resubmits (the cluster profile's ``retries``). The next attempt
resumes from that state, bit-exactly on CPU. SIGINT (Ctrl-C) still interrupts at once.

Under torchrun every rank gets the signal, not necessarily before the same step; ranks agree
(an all-reduce of the flag) every :data:`AGREE_EVERY` steps so that all stop after the same one,
without a host sync per step (a SIGTERM to one rank only stops all of them within 16 steps; the
launcher then exits 1, which Snakemake resubmits as well). Must not know the training step or files.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import torch

from timestep_lab.distributed import World

__all__ = ["AGREE_EVERY", "STOP_SIGNALS", "StopRequest"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
AGREE_EVERY = 16  # steps between the ranks' agreements (distributed runs only)


class StopRequest:
    """A context manager that catches :data:`STOP_SIGNALS` while training runs (only in the main
    thread, where Python delivers signals; elsewhere it never asks to stop) and restores the
    previous handlers afterwards."""

    def __init__(self, signals: tuple[int, ...] = STOP_SIGNALS, agree_every: int = AGREE_EVERY):
        self.signals, self.agree_every = signals, agree_every
        self.signum: int | None = None  # the first signal received
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.signals}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is None:  # only a flag: the loop acts on it between steps
            self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def requested(self, world: World = World(), step: int = 0, device: torch.device | str = "cpu") -> bool:
        """Whether to stop before optimizer step ``step`` (a collective on a distributed run:
        call it on every rank before the same step)."""
        if not world.distributed:
            return self.signum is not None
        if step % self.agree_every:
            return False
        flag = torch.tensor([0.0 if self.signum is None else float(self.signum)], device=device)
        agreed = int(world.all_reduce_max(flag).item())
        if agreed and self.signum is None:
            self.signum = agreed  # another rank got it first: name that signal
        return agreed > 0
