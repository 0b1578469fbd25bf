"""Per-timestep loss weightings, separate from timestep samplers (docs/methods.md §2).

``make_weighting(name, alpha_bar=..., prediction=..., **params).weights() -> Tensor[T]`` is the
weight that multiplies the per-sample loss of a sample at timestep t, *in the loss space of the
prediction type* (``eps``, ``x0`` or ``v``; ``mixed`` trains in x0 space).

Weightings defined on the eps-MSE are converted exactly to the prediction's own loss space,
using ``||x0_hat - x0||^2 = ||eps_hat - eps||^2 / SNR`` and ``||v_hat - v||^2 = ||eps_hat - eps||^2 / ab``:

    w_x0 = w_eps * SNR,     w_v = w_eps * ab = w_eps * SNR / (SNR + 1)

=========  ==========================================================================  =======
name       definition                                                                  space
=========  ==========================================================================  =======
none       w = 1                                                                       native
speed      g = d(1 - ab)/dt (central differences), g^ = (g - min g)/(max g - min g);    native
           w = (1 - lam) + (2 lam - 1) g^ for t < tau, ``after_tau`` (1) otherwise
           (SpeeD, arXiv 2405.17403; lam in [0.5, 1])
min_snr    eps: min(SNR, gamma)/SNR  (x0: min(SNR, gamma), v: min(SNR, gamma)/(SNR+1))  eps
           (Hang et al. 2023, gamma = 5)
p2         1 / (k + SNR)^gamma   (Choi et al. 2022, k = 1, gamma = 1)                  eps
edm        (sigma^2 + sigma_data^2) / (sigma sigma_data)^2, sigma = sqrt((1-ab)/ab)   x0
           (Karras et al. 2022, sigma_data = 0.5), converted: w_eps = w_x0 / SNR
=========  ==========================================================================  =======
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from timestep_lab.registry import NoParams, Registry, check_range

__all__ = ["WEIGHTINGS", "make_weighting", "Weighting", "finite_difference"]

WEIGHTINGS: Registry["Weighting"] = Registry("loss weighting")


def finite_difference(y: Tensor) -> Tensor:
    """Gradient of ``y [T]`` along t with unit spacing: central differences inside, one-sided
    at the ends (``numpy.gradient``, as the SpeeD code uses)."""
    return torch.gradient(y.double())[0]


class Weighting:
    """A fixed per-timestep weight. ``space`` is the loss space the formula is defined in;
    ``p`` holds the entry's parameters (its registry dataclass)."""

    space = "native"

    def __init__(self, params: object, *, alpha_bar: Tensor, prediction: str = "eps"):
        self.p = params
        self.alpha_bar = alpha_bar.double()
        self.snr = self.alpha_bar / (1.0 - self.alpha_bar)
        self.prediction_space = {"mixed": "x0"}.get(prediction, prediction)
        self._weights = self._convert(self.formula()).float()

    def formula(self) -> Tensor:
        raise NotImplementedError

    def _convert(self, w: Tensor) -> Tensor:
        if self.space == "native" or self.space == self.prediction_space:
            return w
        w_eps = w if self.space == "eps" else w / self.snr  # only eps and x0 formulas exist
        return {"eps": w_eps, "x0": w_eps * self.snr, "v": w_eps * self.alpha_bar}[self.prediction_space]

    def weights(self) -> Tensor:
        """``[T]`` float32 weights."""
        return self._weights


@WEIGHTINGS.register("none", NoParams)
class NoWeighting(Weighting):
    def formula(self) -> Tensor:
        return torch.ones_like(self.alpha_bar)


@dataclass(frozen=True)
class SpeedWeightParams:
    lam: float = 0.6
    tau: int | None = None  # None: 0.7 T (700 for T = 1000)
    after_tau: float = 1.0

    def __post_init__(self) -> None:
        check_range("lam", self.lam, 0.5, 1.0)
        if self.tau is not None:
            check_range("tau", self.tau, 0, None)
        check_range("after_tau", self.after_tau, 0.0, None)


@WEIGHTINGS.register("speed", SpeedWeightParams)
class SpeedWeighting(Weighting):
    def __init__(self, params: SpeedWeightParams, *, alpha_bar: Tensor, prediction: str = "eps"):
        T = alpha_bar.numel()
        self.tau = round(0.7 * T) if params.tau is None else params.tau
        if self.tau > T:
            raise ValueError(f"tau must be <= T={T}, got {self.tau}")
        super().__init__(params, alpha_bar=alpha_bar, prediction=prediction)

    def formula(self) -> Tensor:
        g = finite_difference(1.0 - self.alpha_bar)
        g_hat = (g - g.min()) / (g.max() - g.min()).clamp_min(1e-30)
        w = (1.0 - self.p.lam) + (2.0 * self.p.lam - 1.0) * g_hat
        t = torch.arange(w.numel())
        return torch.where(t < self.tau, w, torch.full_like(w, self.p.after_tau))


@dataclass(frozen=True)
class MinSnrParams:
    gamma: float = 5.0

    def __post_init__(self) -> None:
        check_range("gamma", self.gamma, 0.0, None, lo_open=True)


@WEIGHTINGS.register("min_snr", MinSnrParams)
class MinSnrWeighting(Weighting):
    space = "eps"

    def formula(self) -> Tensor:
        return self.snr.clamp(max=self.p.gamma) / self.snr


@dataclass(frozen=True)
class P2Params:
    k: float = 1.0
    gamma: float = 1.0

    def __post_init__(self) -> None:
        check_range("k", self.k, 0.0, None, lo_open=True)
        check_range("gamma", self.gamma, 0.0, None)


@WEIGHTINGS.register("p2", P2Params)
class P2Weighting(Weighting):
    space = "eps"

    def formula(self) -> Tensor:
        return 1.0 / (self.p.k + self.snr) ** self.p.gamma


@dataclass(frozen=True)
class EdmParams:
    sigma_data: float = 0.5

    def __post_init__(self) -> None:
        check_range("sigma_data", self.sigma_data, 0.0, None, lo_open=True)


@WEIGHTINGS.register("edm", EdmParams)
class EdmWeighting(Weighting):
    space = "x0"

    def formula(self) -> Tensor:
        sigma2 = (1.0 - self.alpha_bar) / self.alpha_bar
        sd2 = self.p.sigma_data**2
        return (sigma2 + sd2) / (sigma2 * sd2)


def make_weighting(name: str, alpha_bar: Tensor, prediction: str = "eps", **params) -> Weighting:
    """Build a weighting by name; ``params`` are checked against its parameter dataclass."""
    return WEIGHTINGS.build(name, params, alpha_bar=alpha_bar, prediction=prediction)
