"""What the network predicts: ``eps``, ``x0``, ``v`` or ``mixed`` (three heads, min loss).

Each prediction type turns the raw network output ``out [B, k*C, H, W]`` into the following, with
the conversions of the process it trains (``diffusion``: :class:`GaussianDiffusion` or
:class:`~timestep_lab.processes.flow.RectifiedFlow`, whose ``v`` is the velocity ``eps - x0``):

* a per-sample training loss (mean squared error in the type's own target space, before any
  loss weighting), and
* estimates ``(x0_hat, eps_hat)`` for sampling and analysis.

``mixed`` (Xie & Agam, arXiv 2502.01990, Sec. 2.2; docs/methods.md §3.5): the network has three
heads ``(eps, x0, v)``; each is converted to an x0 estimate

    x0_eps = (x_t - sqrt(1-ab) eps_hat) / sqrt(ab),   x0_x0 = x0_hat,   x0_v = sqrt(ab) x_t - sqrt(1-ab) v_hat

and per sample the loss is ``min_k ||x0_k - x0||^2`` (mean over pixels): the gradient flows only
through the head with the smallest x0 error. Its loss therefore lives in x0 space, and loss
weightings treat it as x0-prediction. At inference the head is chosen per timestep
(``head_per_t``, measured on a profile bank after training, or a fixed rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from timestep_lab.processes.diffusion import GaussianDiffusion, mean_flat
from timestep_lab.registry import Registry

__all__ = ["PREDICTIONS", "make_prediction", "Prediction", "LossOutput", "HEADS"]

PREDICTIONS: Registry["Prediction"] = Registry("prediction type")
HEADS = ("eps", "x0", "v")


@dataclass
class LossOutput:
    """Per-sample loss ``[B]`` (unweighted) and, for ``mixed``, the winning head ``[B]``."""

    loss: Tensor
    head: Tensor | None = None


class Prediction:
    """Base class. ``heads`` is the output-channel multiplier; ``space`` the loss space
    (``eps``, ``x0`` or ``v``) that loss weightings convert to."""

    name: str = ""
    heads: int = 1
    space: str = "eps"

    def __init__(self, _params=None, **_):  # the registry passes params and the run's context
        pass

    def loss(self, out: Tensor, x0: Tensor, eps: Tensor, x_t: Tensor, t: Tensor, diffusion: GaussianDiffusion) -> LossOutput:
        raise NotImplementedError

    def estimates(self, out: Tensor, x_t: Tensor, t: Tensor, diffusion: GaussianDiffusion) -> tuple[Tensor, Tensor]:
        """``(x0_hat, eps_hat)`` from the network output."""
        raise NotImplementedError


@PREDICTIONS.register("eps")
class EpsPrediction(Prediction):
    name = space = "eps"

    def loss(self, out, x0, eps, x_t, t, diffusion):
        return LossOutput(mean_flat((out.float() - eps) ** 2))

    def estimates(self, out, x_t, t, diffusion):
        eps_hat = out.float()
        return diffusion.x0_from_eps(x_t, t, eps_hat), eps_hat


@PREDICTIONS.register("x0")
class X0Prediction(Prediction):
    name = space = "x0"

    def loss(self, out, x0, eps, x_t, t, diffusion):
        return LossOutput(mean_flat((out.float() - x0) ** 2))

    def estimates(self, out, x_t, t, diffusion):
        x0_hat = out.float()
        return x0_hat, diffusion.eps_from_x0(x_t, t, x0_hat)


@PREDICTIONS.register("v")
class VPrediction(Prediction):
    name = space = "v"

    def loss(self, out, x0, eps, x_t, t, diffusion):
        return LossOutput(mean_flat((out.float() - diffusion.v_from_x0_eps(x0, t, eps)) ** 2))

    def estimates(self, out, x_t, t, diffusion):
        v_hat = out.float()
        return diffusion.x0_from_v(x_t, t, v_hat), diffusion.eps_from_v(x_t, t, v_hat)


@PREDICTIONS.register("mixed")
class MixedPrediction(Prediction):
    """Three heads; min x0-error per sample. ``head_per_t [T]`` (0 = eps, 1 = x0, 2 = v)
    selects the head used at inference; it defaults to ``default_head`` everywhere."""

    name = "mixed"
    heads = 3
    space = "x0"

    def __init__(self, _params=None, *, num_timesteps: int = 1000, default_head: str = "v", **_):
        self.head_per_t = torch.full((num_timesteps,), HEADS.index(default_head), dtype=torch.long)

    def head_x0(self, out: Tensor, x_t: Tensor, t: Tensor, diffusion: GaussianDiffusion) -> Tensor:
        """x0 estimates of the three heads, ``[3, B, C, H, W]``."""
        eps_hat, x0_hat, v_hat = out.float().chunk(3, dim=1)
        return torch.stack([diffusion.x0_from_eps(x_t, t, eps_hat), x0_hat, diffusion.x0_from_v(x_t, t, v_hat)])

    def head_errors(self, out: Tensor, x0: Tensor, x_t: Tensor, t: Tensor, diffusion: GaussianDiffusion) -> Tensor:
        """Per-head, per-sample x0 mean squared error, ``[3, B]``."""
        est = self.head_x0(out, x_t, t, diffusion)
        return ((est - x0.unsqueeze(0)) ** 2).flatten(2).mean(dim=2)

    def loss(self, out, x0, eps, x_t, t, diffusion):
        errors = self.head_errors(out, x0, x_t, t, diffusion)  # [3, B]
        loss, head = errors.min(dim=0)  # the gradient flows through the winning head only
        return LossOutput(loss, head)

    def estimates(self, out, x_t, t, diffusion):
        est = self.head_x0(out, x_t, t, diffusion)  # [3, B, ...]
        # the ODE solvers pass fractional t between grid points: the nearest grid point's head
        idx = t.round().long().clamp(0, self.head_per_t.numel() - 1) if t.is_floating_point() else t
        head = self.head_per_t.to(t.device)[idx]  # [B]
        x0_hat = est.gather(0, head.view(1, -1, *([1] * (est.ndim - 2))).expand(1, *est.shape[1:]))[0]
        return x0_hat, diffusion.eps_from_x0(x_t, t, x0_hat)


def make_prediction(name: str, num_timesteps: int = 1000, **kwargs) -> Prediction:
    """Construct a prediction type by name (``eps``, ``x0``, ``v``, ``mixed``)."""
    return PREDICTIONS.build(name, None, num_timesteps=num_timesteps, **kwargs)
