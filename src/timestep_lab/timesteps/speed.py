"""``speed``: SpeeD asymmetric timestep sampling with dual (paired) draws.

Source: Wang et al., "A Closer Look at Time Steps is Worthy of Triple Speed-Up for Diffusion
Model Training", arXiv 2405.17403 (paper + official code, ``SpeeDiffusion.t_sample``);
docs/methods.md §1.3.

Base pdf (threshold ``tau``, suppression ``k``)::

    p(t) = k / Z  for t < tau,     p(t) = 1 / Z  for t >= tau,     Z = T + tau (k - 1)

Dual pairing (``dual = true``, the official code): with ``g = d/dt sqrt(1 - ab_t)`` (central
differences, ``numpy.gradient``), ``m = 1 + min{t : g_t < 1e-4}``. Draw ``n = floor(B/2) + 1``
timesteps from p, pair each with ``d(t) = m - t if t < m else t - m``, concatenate ``[t, d(t)]``
and keep the first B. So a batch holds ``n_p = min(n, B)`` draws from p and ``n_d = B - n_p``
draws from the push-forward ``q = p o d^-1`` (``q(s) = sum_{t: d(t) = s} p(t)``), and the
marginal of a position chosen uniformly in the batch -- what :meth:`probs` returns -- is::

    p_B = (n_p p + n_d q) / B,    n_d = B/2 - 1 (B even),  (B - 1)/2 (B odd),  0 (B <= 2)

It depends on B (and its parity); ``probs()`` uses the batch size of the last ``sample`` call
(``probs(batch_size=...)`` for another), and the B -> infinity limit ``(p + q) / 2`` before any
draw. ``m`` is clamped to ``T - 1`` so that ``d(t)`` stays in range; when ``g`` never drops below
1e-4 (short chains, e.g. T = 100 with the cosine schedule) we use ``m = T - 1`` where the official
code's ``argmax`` would silently give ``m = 1``. ``dual = false`` draws all B from p.

Weight 1: SpeeD changes the objective on purpose; its loss weighting is ``weighting: speed``.
The official class defaults (k = 1, lambda = 5) give negative weights; ours default to
``tau = 0.7 T`` (700 for T = 1000), ``k = 5``, ``dual = true``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from timestep_lab.processes import exact
from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TimestepSampler, cdf_table, inverse_cdf
from timestep_lab.timesteps.registry import SAMPLERS

DUAL_GRAD_THRESHOLD = 1e-4  # the official code's constant


@dataclass(frozen=True)
class SpeedParams:
    tau: int | None = None  # None: round(0.7 T)
    k: float = 5.0
    dual: bool = True

    def __post_init__(self) -> None:
        if self.tau is not None:
            check_range("tau", self.tau, 0, None)
        check_range("k", self.k, 0.0, None, lo_open=True)


def dual_offset(alpha_bar: Tensor) -> int:
    """``m = 1 + min{t : d/dt sqrt(1 - ab_t) < 1e-4}``, clamped to ``T - 1`` (``T - 1`` if none)."""
    T = alpha_bar.numel()
    g = torch.gradient(exact.sqrt(1.0 - alpha_bar.double()))[0]
    below = torch.nonzero(g < DUAL_GRAD_THRESHOLD)
    return min(int(below[0]) + 1, T - 1) if len(below) else T - 1


@SAMPLERS.register("speed", SpeedParams)
class SpeedSampler(TimestepSampler):
    def __init__(self, params: SpeedParams, *, num_timesteps: int, alpha_bar: Tensor | None = None, device="cpu", **_):
        super().__init__(num_timesteps, device)
        T = self.T
        self.tau = round(0.7 * T) if params.tau is None else params.tau
        if self.tau > T:
            raise ValueError(f"tau must be <= num_timesteps={T}, got {self.tau}")
        self.k, self.dual = float(params.k), params.dual
        t = torch.arange(T)
        self.p = torch.where(t < self.tau, self.k, 1.0).double()
        self.p /= self.p.sum()  # Z = T + tau (k - 1)
        if self.dual:
            if alpha_bar is None:
                raise ValueError("dual must be false when no alpha_bar is given (the pairing needs the schedule)")
            self.m = dual_offset(alpha_bar)
            self.pair = torch.where(t < self.m, self.m - t, t - self.m)  # d(t), in [0, T-1]
            self.q = torch.zeros(T, dtype=torch.float64).index_add_(0, self.pair, self.p)
        else:
            self.pair = torch.arange(T)
        self._tables: dict[torch.device, tuple[Tensor, Tensor]] = {}
        self._last_batch: int | None = None

    def sample(self, batch_size, generator, x0=None):
        device = generator.device
        if device not in self._tables:
            self._tables[device] = (cdf_table(self.p).to(device), self.pair.to(device))
        cdf, pair = self._tables[device]
        self._last_batch = batch_size
        ones = torch.ones(batch_size, device=device)
        if not self.dual:
            return inverse_cdf(cdf, batch_size, generator), ones
        t = inverse_cdf(cdf, batch_size // 2 + 1, generator)
        return torch.cat([t, pair[t]])[:batch_size], ones

    def probs(self, batch_size: int | None = None) -> Tensor:
        """Marginal p(t) of a uniformly chosen position of a batch of ``batch_size`` (default: the
        last batch drawn; the large-batch limit before any draw)."""
        if not self.dual:
            return self.p.clone()
        B = batch_size or self._last_batch
        if B is None:
            return (self.p + self.q) / 2
        n_p = min(B // 2 + 1, B)
        return (n_p * self.p + (B - n_p) * self.q) / B
