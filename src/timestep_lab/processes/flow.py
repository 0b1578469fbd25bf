"""The rectified-flow process (Liu et al. 2022; SD3, Esser et al., arXiv 2403.03206, Sec. 2-3) on the
same discrete grid of T timesteps as :class:`~timestep_lab.processes.diffusion.GaussianDiffusion`.

Notation (0-based t = 0 .. T-1, t = 0 the least noisy; ``sigma`` is SD3's t, the noise fraction)::

    sigma_t = (t + 1) / T                     diffusers' FlowMatchEulerDiscreteScheduler(shift=1) sigmas
    x_t     = (1 - sigma_t) x0 + sigma_t eps                              (SD3 eq. 3 with a_t = 1 - t, b_t = t)
    v       = eps - x0 = dx_t / dsigma                                     (the velocity target)
    x0      = x_t - sigma v,           eps = x_t + (1 - sigma) v
    x0      = (x_t - sigma eps) / (1 - sigma),   eps = (x_t - (1 - sigma) x0) / sigma

``t`` may be a ``LongTensor[B]`` (training, analyses) or a float tensor (the ODE samplers evaluate
between grid points); ``sigma(t) = (t + 1) / T`` either way. At t = T - 1, sigma = 1: x_t is pure
noise and the eps -> x0 conversion divides by zero (a network that predicts eps cannot give x0
there; v- and x0-prediction can).

The same process, scaled: ``x_t / s_t`` with ``s_t = sqrt((1 - sigma)^2 + sigma^2)`` is the
variance-preserving ``sqrt(ab) x0 + sqrt(1 - ab) eps`` with

    ab_t = (1 - sigma_t)^2 / s_t^2,    SNR_t = ((1 - sigma_t) / sigma_t)^2,    log-SNR = 2 logit(1 - sigma)

so every sampler and weighting that reads ``alpha_bar`` (SNR, log-SNR, d(1 - ab)/dt) applies as it
is, and the per-timestep variational-bound terms are those of that equivalent discrete chain
(:meth:`vlb_terms`, for the loss profile and the adaptive sampler). ``ab`` at sigma = 1 is 0; it
is floored at :data:`AB_FLOOR` so that SNR-based tables stay finite (docs/methods.md §12.1).

A squared error converts between loss spaces as (for the same x_t)::

    ||x0_hat - x0||^2 = ||eps_hat - eps||^2 / SNR,    ||v_hat - v||^2 = ||eps_hat - eps||^2 / (1 - sigma)^2

(:attr:`v_scale` is the second factor; the Gaussian process' is ``ab``). Knows nothing about
networks, samplers or weightings.
"""

from __future__ import annotations

import torch
from torch import Tensor

from timestep_lab.processes import exact
from timestep_lab.processes.diffusion import GaussianDiffusion

__all__ = ["RectifiedFlow", "AB_FLOOR", "shift_sigma", "unshift_sigma"]

#: alpha_bar of the equivalent VP chain is floored here (it is 0 at sigma = 1): SNR 1e-12 instead of 0
AB_FLOOR = 1e-12


def shift_sigma(sigma: Tensor, shift: float) -> Tensor:
    """SD3's timestep shift (Sec. 5.3.2, eq. 23): ``s sigma / (1 + (s - 1) sigma)``; maps [0, 1] onto
    itself, fixes 0 and 1, and moves mass toward noise for ``s > 1`` (diffusers'
    ``FlowMatchEulerDiscreteScheduler(shift=s)``)."""
    return shift * sigma / (1.0 + (shift - 1.0) * sigma)


def unshift_sigma(sigma: Tensor, shift: float) -> Tensor:
    """Inverse of :func:`shift_sigma`: ``sigma / (s - (s - 1) sigma)``."""
    return sigma / (shift - (shift - 1.0) * sigma)


class RectifiedFlow:
    """The rectified-flow process on ``T`` grid points (module docstring).

    Exposes the interface of :class:`~timestep_lab.processes.diffusion.GaussianDiffusion` that samplers,
    weightings, prediction types, the training step and the analyses use: ``T``, ``alpha_bar``,
    ``snr``, ``q_sample``, the x0/eps/v conversions, ``vlb_terms``, ``prior_bpd``, plus ``sigmas``.
    """

    kind = "flow"
    variance = "fixed_large"  # of the equivalent chain, for its VLB terms
    clip_x0_default = False  # sample.clip_x0 null: no clipping (diffusers' flow pipelines never clip)

    def __init__(self, num_timesteps: int):
        T = int(num_timesteps)
        if T < 2:
            raise ValueError(f"num_timesteps must be >= 2, got {T}")
        self.T = T
        sigma = torch.arange(1, T + 1, dtype=torch.float64) / T
        scale2 = (1.0 - sigma) ** 2 + sigma**2
        ab = ((1.0 - sigma) ** 2 / scale2).clamp(min=AB_FLOOR)
        self._sigmas = sigma
        self._scale = exact.sqrt(scale2)
        self._v_scale = (1.0 - sigma) ** 2
        self.chain = GaussianDiffusion(ab, self.variance)  # the equivalent VP chain (VLB terms)
        self._cache: dict[torch.device, dict[str, Tensor]] = {}

    # ---------------------------------------------------------------- tables

    @property
    def sigmas(self) -> Tensor:
        """``sigma_t = (t + 1) / T``, ``[T]`` float64, increasing."""
        return self._sigmas

    @property
    def alpha_bar(self) -> Tensor:
        """The equivalent VP chain's ``ab_t = (1 - sigma)^2 / ((1 - sigma)^2 + sigma^2)``, floored at
        :data:`AB_FLOOR`; ``[T]`` float64."""
        return self.chain.alpha_bar

    @property
    def betas(self) -> Tensor:
        return self.chain.betas

    @property
    def snr(self) -> Tensor:
        return self.chain.snr

    @property
    def v_scale(self) -> Tensor:
        """``(1 - sigma)^2``: ``||v_hat - v||^2 = ||eps_hat - eps||^2 / v_scale`` (``[T]`` float64)."""
        return self._v_scale

    def table(self, name: str, device: torch.device | str = "cpu") -> Tensor:
        """``sigma``, ``scale`` or one of the equivalent chain's tables, float32 on ``device``."""
        device = torch.device(device)
        if name not in ("sigma", "scale"):
            return self.chain.table(name, device)
        tables = self._cache.get(device)
        if tables is None:
            tables = {"sigma": self._sigmas.float().to(device), "scale": self._scale.float().to(device)}
            self._cache[device] = tables
        return tables[name]

    def sigma(self, t: Tensor, like: Tensor) -> Tensor:
        """``sigma(t)`` shaped ``[B, 1, 1, ...]`` to broadcast with ``like``; integer ``t`` reads the
        table, floating ``t`` (between grid points) computes ``(t + 1) / T``."""
        if t.is_floating_point():
            s = (t.to(torch.float64) + 1.0) / self.T
        else:
            s = self.table("sigma", t.device)[t]
        return s.view(-1, *([1] * (like.ndim - 1))).to(like.dtype)

    # ---------------------------------------------------------------- forward process

    def q_sample(self, x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        """``x_t = (1 - sigma) x0 + sigma eps``."""
        s = self.sigma(t, x0)
        return (1.0 - s) * x0 + s * noise

    # ---------------------------------------------------------------- conversions

    def x0_from_eps(self, x_t: Tensor, t: Tensor, eps: Tensor) -> Tensor:
        s = self.sigma(t, x_t)
        return (x_t - s * eps) / (1.0 - s)

    def eps_from_x0(self, x_t: Tensor, t: Tensor, x0: Tensor) -> Tensor:
        s = self.sigma(t, x_t)
        return (x_t - (1.0 - s) * x0) / s

    def v_from_x0_eps(self, x0: Tensor, t: Tensor, eps: Tensor) -> Tensor:
        """The velocity target ``eps - x0`` (``t`` unused: the straight path's speed is constant)."""
        return eps - x0

    def x0_from_v(self, x_t: Tensor, t: Tensor, v: Tensor) -> Tensor:
        return x_t - self.sigma(t, x_t) * v

    def eps_from_v(self, x_t: Tensor, t: Tensor, v: Tensor) -> Tensor:
        return x_t + (1.0 - self.sigma(t, x_t)) * v

    # ---------------------------------------------------------------- variational bound

    def to_chain(self, x_t: Tensor, t: Tensor) -> Tensor:
        """``x_t / s_t``: the same point in the equivalent VP chain's coordinates."""
        return x_t / self.table("scale", t.device)[t].view(-1, *([1] * (x_t.ndim - 1))).to(x_t.dtype)

    def vlb_terms(self, x0: Tensor, x_t: Tensor, t: Tensor, x0_hat: Tensor, *,
                  t0_term: str = "decoder_nll") -> Tensor:
        """Per-sample VLB term in bits/dim ``[B]`` of the equivalent VP chain (integer ``t``): the
        KL divergences are invariant to the common scaling, so they are the chain's terms at
        ``x_t / s_t`` with the same ``x0_hat`` (:meth:`GaussianDiffusion.vlb_terms`)."""
        return self.chain.vlb_terms(x0, self.to_chain(x_t, t), t, x0_hat, t0_term=t0_term)

    def prior_bpd(self, x0: Tensor) -> Tensor:
        """``KL(q(x_{T-1} | x0) || N(0, I))`` in bits/dim: 0 up to the :data:`AB_FLOOR` (x_{T-1} = eps)."""
        return self.chain.prior_bpd(x0)

    # ---------------------------------------------------------------- sampling grid

    def inference_sigmas(self, steps: int | None, shift: float = 1.0) -> Tensor:
        """The ODE solvers' grid: ``steps`` sigmas ``linspace(1, 1/T, steps)`` (all T grid points when
        ``steps`` is None or >= T; ``[1]`` for one step), mapped through :func:`shift_sigma` with
        ``shift`` (inference-time shift), then a final 0; float64 ``[steps + 1]``, decreasing. Equal to
        ``FlowMatchEulerDiscreteScheduler().set_timesteps(steps).sigmas`` at shift 1 and to
        ``FlowMatchEulerDiscreteScheduler(shift=s).set_timesteps(sigmas=linspace(1, 1/T, steps))`` (tested)."""
        n = self.T if steps is None or steps >= self.T else int(steps)
        if n < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        sig = torch.linspace(1.0, 1.0 / self.T, n, dtype=torch.float64) if n > 1 else torch.ones(1, dtype=torch.float64)
        sig = shift_sigma(sig, float(shift))
        return torch.cat([sig, sig.new_zeros(1)])

    def t_of_sigma(self, sigma: Tensor) -> Tensor:
        """The (fractional) timestep of ``sigma``: ``sigma T - 1`` (the network's time input)."""
        return sigma * self.T - 1.0

