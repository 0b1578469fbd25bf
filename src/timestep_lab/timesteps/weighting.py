"""Per-timestep loss weightings, separate from timestep samplers (docs/methods.md §2).

``make_weighting(name, alpha_bar=..., prediction=..., **params).weights() -> Tensor[T]`` is the
weight that multiplies the per-sample loss of a sample at timestep t, *in the loss space of the
prediction type* (``eps``, ``x0`` or ``v``; ``mixed`` trains in x0 space).

Weightings defined on the eps-MSE are converted exactly to the prediction's own loss space,
using ``||x0_hat - x0||^2 = ||eps_hat - eps||^2 / SNR`` and ``||v_hat - v||^2 = ||eps_hat - eps||^2 / c_v``
with the process' ``v_scale`` ``c_v`` (``ab`` for the Gaussian process' v, ``(1 - sigma)^2`` for the
rectified flow's velocity ``eps - x0``; default ``ab``):

    w_x0 = w_eps * SNR,     w_v = w_eps * c_v      (Gaussian: w_eps * ab = w_eps * SNR / (SNR + 1))

=========  ==========================================================================  =======
name       definition                                                                  space
=========  ==========================================================================  =======
none       w = 1                                                                       native
eps_units  w = 1 on the eps-MSE: x0 loss weighted by SNR, v loss by c_v (every              eps
           prediction type at the eps loss's per-t weighting)
speed      g = d(1 - ab)/dt (central differences), g^ = (g - min g)/(max g - min g);    native
           w = (1 - lam) + (2 lam - 1) g^ for t < tau, ``after_tau`` (1) otherwise
           (SpeeD, arXiv 2405.17403; lam in [0.5, 1])
min_snr    eps: min(SNR, gamma)/SNR  (x0: min(SNR, gamma), v: min(SNR, gamma)/(SNR+1))  eps
           (Hang et al. 2023, gamma = 5)
p2         1 / (k + SNR)^gamma   (Choi et al. 2022, k = 1, gamma = 1)                  eps
edm        (sigma^2 + sigma_data^2) / (sigma sigma_data)^2, sigma = sqrt((1-ab)/ab)   x0
           (Karras et al. 2022, sigma_data = 0.5), converted: w_eps = w_x0 / SNR
density    T p(t), p the pmf of a fixed timestep sampler (``sampler: {name, params}``):  native
           "density as weight", uniform t with E_uniform[w L] = E_p[L] (arXiv 2407.03297's
           comparison; diffusers' ``cosmap`` is ``density`` of SD3's cosmap density)
precondition_outputs
           sigma^2 w_s(sigma): diffusers' SD3 default (train_dreambooth_sd3.py,          v (flow)
           ``--precondition_outputs 1``): the output turned into ``x0_hat = x_t - sigma
           v_hat`` and regressed on x0, ``||x0_hat - x0||^2 = sigma^2 ||v_hat - v||^2``,
           times ``compute_loss_weighting_for_sd3(scheme)``: w_s = 1 (none),
           sigma^-2 (sigma_sqrt), 2/(pi (1 - 2 sigma + 2 sigma^2)) (cosmap)
sigma_sqrt sigma^-2 (diffusers' ``weighting_scheme: sigma_sqrt`` on the velocity loss,       v (flow)
           as its scripts without preconditioning apply it)
=========  ==========================================================================  =======

The two flow entries read the flow's own ``sigma`` table (``make_weighting(..., sigma=...)``) and
are defined on the velocity loss: they need ``diffusion.kind: flow`` and ``prediction: v``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from torch import Tensor

from timestep_lab.registry import NoParams, Registry, check_range
from timestep_lab.timesteps import SAMPLERS
from timestep_lab.timesteps.compose import check_spec

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
    flow_velocity_only = False  # defined on the rectified flow's velocity loss (needs ``sigma``, prediction v)

    def __init__(self, params: object, *, alpha_bar: Tensor, prediction: str = "eps", v_scale: Tensor | None = None,
                 sigma: Tensor | None = None):
        self.p = params
        self.sigma = None if sigma is None else sigma.double()  # the flow's noise fraction [T]; None: Gaussian
        self.alpha_bar = alpha_bar.double()
        self.snr = self.alpha_bar / (1.0 - self.alpha_bar)
        self.v_scale = self.alpha_bar if v_scale is None else v_scale.double()
        self.prediction_space = {"mixed": "x0"}.get(prediction, prediction)
        self._weights = self._convert(self.formula()).float()

    def formula(self) -> Tensor:
        raise NotImplementedError

    def _convert(self, w: Tensor) -> Tensor:
        if self.space == "native" or self.space == self.prediction_space:
            return w
        w_eps = w if self.space == "eps" else w / self.snr  # only eps and x0 formulas exist
        return {"eps": w_eps, "x0": w_eps * self.snr, "v": w_eps * self.v_scale}[self.prediction_space]

    def weights(self) -> Tensor:
        """``[T]`` float32 weights."""
        return self._weights


@WEIGHTINGS.register("none", NoParams)
class NoWeighting(Weighting):
    def formula(self) -> Tensor:
        return torch.ones_like(self.alpha_bar)


@WEIGHTINGS.register("eps_units", NoParams)
class EpsUnits(Weighting):
    """``w_eps = 1``: every prediction type trained on the eps-MSE's per-t weighting (x0: ``SNR``,
    v: ``c_v``), so eps, x0 and v differ only in their parameterisation (issue 42: an unweighted
    x0 or v loss weights t by ``1/SNR`` or ``1/ab`` in eps units, up to ~2.5e4 apart)."""

    space = "eps"

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
    def __init__(self, params: SpeedWeightParams, *, alpha_bar: Tensor, prediction: str = "eps",
                 v_scale: Tensor | None = None, sigma: Tensor | None = None):
        T = alpha_bar.numel()
        self.tau = round(0.7 * T) if params.tau is None else params.tau
        if self.tau > T:
            raise ValueError(f"tau must be <= T={T}, got {self.tau}")
        super().__init__(params, alpha_bar=alpha_bar, prediction=prediction, v_scale=v_scale, sigma=sigma)

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


@dataclass(frozen=True)
class DensityParams:
    """``sampler``: ``{name, params}`` of a fixed-density timestep sampler whose pmf becomes the weight."""

    sampler: Mapping[str, Any] = field(default_factory=lambda: {"name": "logit_normal"})

    def __post_init__(self) -> None:
        check_spec("sampler", self.sampler)


@WEIGHTINGS.register("density", DensityParams)
class DensityWeighting(Weighting):
    """``w(t) = T p(t)``: uniform timesteps weighted by a sampler's density over the uniform one, so
    ``E_{t ~ U}[w(t) L(t)] = sum_t p(t) L(t) = E_{t ~ p}[L(t)]``: the same expected objective as
    drawing t from p (arXiv 2407.03297, Sec. 2: importance sampling vs loss weighting). The pmf is
    the sampler's exact ``probs()`` (the bin average of its density); the sampler must not learn."""

    def formula(self) -> Tensor:
        spec = self.p.sampler
        sampler = SAMPLERS.build(spec["name"], spec.get("params"), num_timesteps=self.alpha_bar.numel(),
                                 alpha_bar=self.alpha_bar)
        if sampler.stateful:
            raise ValueError(f"sampler: {spec['name']} learns during training; density as weight needs a fixed p(t)")
        p = sampler.probs().double()
        return p.numel() * p / p.sum()


#: diffusers' compute_loss_weighting_for_sd3 schemes as functions of sigma (float64 [T])
SD3_SCHEMES = {
    "none": lambda s: torch.ones_like(s),
    "sigma_sqrt": lambda s: s**-2.0,
    "cosmap": lambda s: 2.0 / (torch.pi * (1.0 - 2.0 * s + 2.0 * s**2)),
}


class _FlowVelocityWeighting(Weighting):
    """A weight defined on the flow's velocity loss as a function of its ``sigma`` table."""

    flow_velocity_only = True

    def _convert(self, w: Tensor) -> Tensor:
        if self.sigma is None:
            raise ValueError(f"{type(self).__name__} is defined on the flow's velocity loss: diffusion.kind flow only")
        if self.prediction_space != "v":
            raise ValueError(f"{type(self).__name__} is defined on the velocity loss: diffusion.prediction v only, "
                             f"got {self.prediction_space}")
        return w

    def formula(self) -> Tensor:
        return self.flow_formula(self.sigma) if self.sigma is not None else torch.ones_like(self.alpha_bar)

    def flow_formula(self, sigma: Tensor) -> Tensor:
        raise NotImplementedError


@dataclass(frozen=True)
class PreconditionParams:
    scheme: str = "none"  # diffusers' --weighting_scheme on the x0 loss: none | sigma_sqrt | cosmap

    def __post_init__(self) -> None:
        if self.scheme not in SD3_SCHEMES:
            raise ValueError(f"scheme must be one of {', '.join(SD3_SCHEMES)}, got {self.scheme!r}")


@WEIGHTINGS.register("precondition_outputs", PreconditionParams)
class PreconditionOutputs(_FlowVelocityWeighting):
    def flow_formula(self, sigma: Tensor) -> Tensor:
        return sigma**2 * SD3_SCHEMES[self.p.scheme](sigma)


@WEIGHTINGS.register("sigma_sqrt", NoParams)
class SigmaSqrt(_FlowVelocityWeighting):
    def flow_formula(self, sigma: Tensor) -> Tensor:
        return SD3_SCHEMES["sigma_sqrt"](sigma)


def make_weighting(name: str, alpha_bar: Tensor, prediction: str = "eps", v_scale: Tensor | None = None,
                   sigma: Tensor | None = None, **params) -> Weighting:
    """Build a weighting by name; ``params`` are checked against its parameter dataclass.
    ``v_scale`` converts eps-space formulas to the v loss space (default ``alpha_bar``, module docstring);
    ``sigma`` is the flow's noise-fraction table (the flow-only entries need it)."""
    return WEIGHTINGS.build(name, params, alpha_bar=alpha_bar, prediction=prediction, v_scale=v_scale, sigma=sigma)
