"""Optimizer, its per-step schedule (learning rate and Adam's beta1), and the EMA of weights.

Everything is a function of *images seen* (``nimg``), never of optimizer steps, so runs with
different batch sizes are comparable (EDM, Karras et al. 2022).

Schedules (``optim.schedule.name``):

``constant``
    lr_s = lr_0 * min(1, nimg / warmup_nimg); beta1 fixed.
``momentum_decay`` (arXiv 2404.07946, reconstruction, docs/methods.md §4.2)
    beta1_s decays linearly in images seen from beta1_0 to ``beta1_min`` over ``decay_kimg``
    (starting at ``start_kimg``); the learning rate is left alone by default. ``compensate``
    applies the SGD-momentum rescaling lr_s = lr_0 * (1 - beta1_0) / (1 - beta1_s) as an
    option (a learning-rate change confounded with the beta1 change: Adam's first moment is
    already bias-normalised). The warm-up factor applies on top.

EMA: ``beta = 0.5 ** (batch_size / halflife_nimg)``; with ``rampup_ratio`` the half-life is
``min(halflife_nimg, nimg * rampup_ratio)`` (EDM). Updated with ``torch._foreach_lerp_``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from timestep_lab.config import OptimConfig
from timestep_lab.registry import Registry, check_range

__all__ = ["OPTIM_SCHEDULES", "OptimSchedule", "make_optimizer", "make_schedule", "EMA"]

OPTIM_SCHEDULES: Registry["OptimSchedule"] = Registry("optimizer schedule")


class OptimSchedule:
    """Maps images seen to ``(lr, beta1)`` and writes them into the optimizer: the one owner of
    the learning rate during training (the training step calls :meth:`apply` before each
    optimizer step and records what it set; the loop logs that record)."""

    def __init__(self, lr: float, beta1: float, warmup_kimg: float):
        self.lr0, self.beta1_0, self.warmup_nimg = lr, beta1, warmup_kimg * 1000.0

    def warmup(self, nimg: float) -> float:
        return min(1.0, nimg / self.warmup_nimg) if self.warmup_nimg > 0 else 1.0

    def values(self, nimg: float) -> tuple[float, float]:
        raise NotImplementedError

    def apply(self, optimizer: torch.optim.Optimizer, nimg: float) -> tuple[float, float]:
        lr, beta1 = self.values(nimg)
        for group in optimizer.param_groups:
            group["lr"] = lr  # python floats: changing them causes no recompilation or sync
            group["betas"] = (beta1, group["betas"][1])
        return lr, beta1


@dataclass(frozen=True)
class ConstantParams:
    pass


@OPTIM_SCHEDULES.register("constant", ConstantParams)
class ConstantSchedule(OptimSchedule):
    def __init__(self, params: ConstantParams, *, lr: float, beta1: float, warmup_kimg: float):
        super().__init__(lr, beta1, warmup_kimg)

    def values(self, nimg: float) -> tuple[float, float]:
        return self.lr0 * self.warmup(nimg), self.beta1_0


@dataclass(frozen=True)
class MomentumDecayParams:
    beta1_min: float = 0.5
    decay_kimg: float = 100.0
    start_kimg: float = 0.0
    # Adam's first moment is normalised by (1 - beta1^t) already, so the SGD-momentum rescaling
    # lr*(1-beta1_0)/(1-beta1) is not needed to keep the step size and would confound "decay
    # beta1" with a learning-rate decay (5x from beta1 0.9 -> 0.5). Off by default; the
    # consistency group runs both (docs/methods.md §4.2).
    compensate: bool = False

    def __post_init__(self) -> None:
        check_range("beta1_min", self.beta1_min, 0.0, 1.0, hi_open=True)
        check_range("decay_kimg", self.decay_kimg, 0.0, None, lo_open=True)
        check_range("start_kimg", self.start_kimg, 0.0, None)


@OPTIM_SCHEDULES.register("momentum_decay", MomentumDecayParams)
class MomentumDecaySchedule(OptimSchedule):
    def __init__(self, params: MomentumDecayParams, *, lr: float, beta1: float, warmup_kimg: float):
        super().__init__(lr, beta1, warmup_kimg)
        if params.beta1_min > beta1:
            raise ValueError(f"beta1_min must be <= optim.betas[0]={beta1}, got {params.beta1_min}")
        self.p = params

    def beta1(self, nimg: float) -> float:
        frac = min(1.0, max(0.0, (nimg / 1000.0 - self.p.start_kimg) / self.p.decay_kimg))
        return self.beta1_0 + frac * (self.p.beta1_min - self.beta1_0)

    def values(self, nimg: float) -> tuple[float, float]:
        b1 = self.beta1(nimg)
        lr = self.lr0 * ((1.0 - self.beta1_0) / (1.0 - b1) if self.p.compensate else 1.0)
        return lr * self.warmup(nimg), b1


def make_schedule(cfg: OptimConfig) -> OptimSchedule:
    return OPTIM_SCHEDULES.build(cfg.schedule.name, cfg.schedule.params, lr=cfg.lr, beta1=cfg.betas[0],
                                 warmup_kimg=cfg.warmup_kimg)


def make_optimizer(params, cfg: OptimConfig, device: torch.device, schedule: OptimSchedule) -> torch.optim.Optimizer:
    """Adam / AdamW with fused kernels on CUDA and on the CPU (``cfg.fused`` overrides; False: foreach).

    The learning rate and beta1 are the schedule's: it starts the optimizer at its values for 0
    images seen, and the training step (:meth:`OptimSchedule.apply`) sets them before every
    step; ``cfg.lr`` reaches the optimizer only through the schedule (``lr_0``).

    Why fused on the CPU too: the foreach and single-tensor updates take ``sqrt(v)`` with
    torch's CPU sqrt, which is MKL's VML ``vsSqrt``: not correctly rounded, and its last bit
    depends on the CPU's approximate reciprocal-square-root instruction (QEMU's emulated CPUs
    gave other bits than the AMD machine in 20% of values). The fused kernel takes the exact
    ``sqrtps``, so an update is the same on every CPU of a reproducibility level
    (docs/methods.md §13)."""
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[cfg.name]
    fused = device.type in ("cuda", "cpu") if cfg.fused is None else cfg.fused
    lr, beta1 = schedule.values(0)
    kwargs = dict(lr=lr, betas=(beta1, cfg.betas[1]), eps=cfg.eps, weight_decay=cfg.weight_decay)
    if fused:
        return cls(params, fused=True, **kwargs)
    return cls(params, foreach=True, **kwargs)


class EMA:
    """Exponential moving average of a model's parameters (buffers are copied).

    :param halflife_kimg: half-life in thousands of images seen; 0 disables averaging.
    """

    def __init__(self, model: nn.Module, halflife_kimg: float, rampup_ratio: float | None = None):
        self.halflife_nimg = halflife_kimg * 1000.0
        self.rampup_ratio = rampup_ratio
        self.params = [p.detach().clone() for p in model.parameters()]
        self.buffers = [b.detach().clone() for b in model.buffers()]

    def beta(self, batch_size: int, nimg: float) -> float:
        halflife = self.halflife_nimg
        if self.rampup_ratio is not None:
            halflife = min(halflife, nimg * self.rampup_ratio)
        return 0.5 ** (batch_size / max(halflife, 1e-8)) if halflife > 0 else 0.0

    @torch.no_grad()
    def update(self, model: nn.Module, batch_size: int, nimg: float) -> None:
        """``ema <- beta ema + (1 - beta) param``, one fused foreach call."""
        beta = self.beta(batch_size, nimg)
        # under no_grad the parameters can be read as they are (no per-step list of detached views)
        torch._foreach_lerp_(self.params, list(model.parameters()), 1.0 - beta)
        for b_ema, b in zip(self.buffers, model.buffers()):
            b_ema.copy_(b)

    def state_dict(self) -> dict:
        return {"params": self.params, "buffers": self.buffers}

    def load_state_dict(self, state: dict) -> None:
        for dst, src in zip(self.params, state["params"]):
            dst.copy_(src)
        for dst, src in zip(self.buffers, state["buffers"]):
            dst.copy_(src)

    def copy_to(self, model: nn.Module) -> None:
        with torch.no_grad():
            for p, e in zip(model.parameters(), self.params):
                p.copy_(e)
            for b, e in zip(model.buffers(), self.buffers):
                b.copy_(e)
