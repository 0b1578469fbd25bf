"""Reverse samplers by name (``sample.method``): DDPM ancestral and DDIM for the Gaussian process,
Euler and Heun ODE solvers for the rectified flow. One registry entry each; a process kind lists
the methods that apply to it (:attr:`Solver.kinds`, checked by ``components.check_config``).

Every solver runs one batch: ``solver.run(denoise, process, noise, shape, steps=..., ...) -> x_0``,
where ``denoise(x_t, t) -> (x0_hat, eps_hat)`` and ``noise`` supplies each sample's initial and
per-step noise (:class:`timestep_lab.generate.sampling.StackedGenerator`).

DDPM step (Ho et al. 2020, eq. 6-7, fixed variance), respaced to ``steps`` original timesteps
(iDDPM ``space_timesteps``: evenly spaced; or ``quadratic``, DDIM's "quad" skip, dense near t = 0,
for the contribution analysis' chain)::

    x_{s-1} = c1_s x0_hat + c2_s x_s + sigma_s z,    z ~ N(0, I), no noise at the last step

DDIM step (Song et al. 2021, eq. 12)::

    sigma   = eta * sqrt((1 - ab_prev) / (1 - ab)) * sqrt(1 - ab / ab_prev)
    x_prev  = sqrt(ab_prev) x0_hat + sqrt(1 - ab_prev - sigma^2) eps_hat + sigma z

Flow ODE ``dx/dsigma = v = eps - x0`` on the grid ``sigma_0 = 1 > ... > sigma_{n-1} = 1/T > 0``
(:meth:`RectifiedFlow.inference_sigmas`, diffusers' ``FlowMatchEulerDiscreteScheduler`` grid)::

    Euler   x_{k+1} = x_k + (sigma_{k+1} - sigma_k) v(x_k, sigma_k)                         n evaluations
    Heun    x~ = Euler step;  x_{k+1} = x_k + (sigma_{k+1} - sigma_k) (v(x_k) + v(x~, sigma_{k+1})) / 2,
            an Euler step into sigma = 0                                                     2n - 1 evaluations

with ``v = eps_hat - x0_hat`` from the denoiser (x0_hat is not clipped by default,
``RectifiedFlow.clip_x0_default``, as in diffusers; ``sample.clip_x0: true`` clips it and so the velocity),
on the grid shifted by ``sample.shift`` (``s sigma / (1 + (s - 1) sigma)``, as SD3's and Flux's
pipelines sample) and the network's time input ``t = sigma T - 1``
(fractional between grid points). Euler and Heun equal diffusers' ``FlowMatchEulerDiscreteScheduler``
and ``FlowMatchHeunDiscreteScheduler`` steps (tests/test_flow.py).

Ground-truth replacement (docs/methods.md §3.4): inside an inclusive range of original timesteps
``[lo, hi]`` x0_hat is the true x0 of a held-out image (``gt``, duck-typed: ``x0``, ``lo``, ``hi``).
Knows nothing of files, seeds or metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.registry import Registry

__all__ = ["SOLVERS", "Solver", "SPACINGS", "respaced_timesteps", "make_solver", "GroundTruth", "Chain", "reverse_step"]

Denoise = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
SOLVERS: Registry["Solver"] = Registry("reverse sampler")


SPACINGS = ("uniform", "quadratic")


def respaced_timesteps(T: int, steps: int | None, spacing: str = "uniform") -> Tensor:
    """``steps`` original timesteps in ``[0, T-1]`` (all T when ``steps`` is None), increasing,
    always including 0 and T-1: evenly spaced (``uniform``), or ``quadratic``,
    ``round((i / (steps-1))^2 (T-1))`` (DDIM's "quad" skip, dense near t = 0), duplicates removed
    (so a quadratic chain can hold a few fewer than ``steps``)."""
    if spacing not in SPACINGS:
        raise ValueError(f"spacing must be one of {', '.join(SPACINGS)}, got {spacing!r}")
    if steps is None or steps >= T:
        return torch.arange(T)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if steps == 1:
        return torch.tensor([T - 1])
    u = torch.linspace(0, 1, steps, dtype=torch.float64)
    return torch.unique(torch.round((u if spacing == "uniform" else u * u) * (T - 1)).long())


@dataclass(frozen=True)
class Solver:
    """One reverse sampler: which process kinds it applies to, its loop, how many steps it takes
    for ``steps`` (``count(process, steps)``) and how many network evaluations n steps cost."""

    name: str
    kinds: tuple[str, ...]
    loop: Callable[..., Tensor]
    count: Callable[[Any, int | None], int]
    evaluations_per_step: Callable[[int], int] = lambda n: n
    shiftable: bool = False  # takes an inference-time shift of its grid (``sample.shift``)

    def num_steps(self, process: Any, steps: int | None) -> int:
        """Steps the loop takes (progress-bar units; ``steps`` in the samples' metadata)."""
        return self.count(process, steps)

    def evaluations(self, process: Any, steps: int | None) -> int:
        """Network evaluations per sample."""
        return self.evaluations_per_step(self.num_steps(process, steps))

    def run(self, denoise: Denoise, process: Any, noise: Any, shape: tuple[int, ...], *, steps: int | None = None,
            eta: float = 1.0, gt: Any = None, device: torch.device | str = "cpu",
            on_step: Callable[[int], None] | None = None, spacing: str = "uniform", shift: float = 1.0) -> Tensor:
        """x_0 as float ``[B, *shape]`` (about [-1, 1]) for one batch; ``shift`` != 1 only for a
        :attr:`shiftable` solver."""
        if shift != 1.0 and not self.shiftable:
            raise ValueError(f"reverse sampler {self.name!r} has no inference-time shift (sample.shift = {shift})")
        kw = {"shift": shift} if self.shiftable else {}
        return self.loop(denoise, process, noise, shape, steps=steps, eta=eta, gt=gt, device=torch.device(device),
                         on_step=on_step, spacing=spacing, **kw)


def _respaced_count(process: Any, steps: int | None) -> int:
    return len(respaced_timesteps(process.T, steps))


def _ode_count(process: Any, steps: int | None) -> int:
    return len(process.inference_sigmas(steps)) - 1


def make_solver(name: str) -> Solver:
    """The solver ``name`` (``ddpm``, ``ddim``, ``euler``, ``heun``)."""
    return SOLVERS.build(name, None)


# ---------------------------------------------------------------- Gaussian: ancestral and DDIM

def _ddpm_step(x, x0_hat, eps_hat, *, i, ab, sub, z, eta):
    s = torch.full((x.shape[0],), i, device=x.device, dtype=torch.long)
    mean, logvar = sub.p_mean_logvar(x0_hat, x, s)
    return mean if z is None else mean + torch.exp(0.5 * logvar) * z


def _ddim_step(x, x0_hat, eps_hat, *, i, ab, sub, z, eta):
    a, a_prev = float(ab[i]), float(ab[i - 1]) if i > 0 else 1.0
    sigma = eta * ((1 - a_prev) / (1 - a)) ** 0.5 * (1 - a / a_prev) ** 0.5
    x = a_prev**0.5 * x0_hat + max(1 - a_prev - sigma**2, 0.0) ** 0.5 * eps_hat
    return x + sigma * z if z is not None and sigma > 0 else x


_STEPS = {"ddpm": _ddpm_step, "ddim": _ddim_step}


@dataclass
class GroundTruth:
    """Replace x0_hat by ``x0 [B, C, H, W]`` for original timesteps in ``[lo, hi]`` (inclusive)."""

    x0: Tensor
    lo: int
    hi: int


@dataclass
class Chain:
    """The respaced reverse chain: ``used [S]`` original timesteps (increasing; step ``i`` denoises
    at ``used[i]``, the last step is ``i = 0``), ``ab [S]`` their alpha-bar and ``sub`` the respaced
    process (indices ``0..S-1``)."""

    used: Tensor
    ab: Tensor
    sub: GaussianDiffusion

    @classmethod
    def of(cls, diffusion: GaussianDiffusion, steps: int | None, spacing: str = "uniform") -> "Chain":
        used = respaced_timesteps(diffusion.T, steps, spacing)
        ab = diffusion.alpha_bar[used]
        return cls(used, ab, GaussianDiffusion(ab, diffusion.variance))

    def __len__(self) -> int:
        return len(self.used)


@torch.no_grad()
def reverse_step(denoise: Denoise, diffusion: GaussianDiffusion, chain: Chain, i: int, x: Tensor, noise: Any, *,
                 method: str = "ddpm", eta: float = 1.0, gt: GroundTruth | None = None) -> Tensor:
    """One DDPM or DDIM step ``x_{used[i]} -> x_{used[i-1]}`` (``x_0`` at ``i = 0``) of ``x [B,
    *shape]``; draws the step's noise from ``noise`` (none at ``i = 0``). Inside ``gt``'s range
    the true x0 replaces the prediction and the network is not called. The contribution analysis
    forks chains between steps (:mod:`timestep_lab.studies.contribution`)."""
    B, device = x.shape[0], x.device
    t_orig = torch.full((B,), int(chain.used[i]), device=device, dtype=torch.long)
    if gt is not None and gt.lo <= int(chain.used[i]) <= gt.hi:
        x0_hat = gt.x0.to(device)
        eps_hat = diffusion.eps_from_x0(x, t_orig, x0_hat)
    else:
        x0_hat, eps_hat = denoise(x, t_orig)
    z = noise.randn(tuple(x.shape[1:]), to=device) if i > 0 else None
    return _STEPS[method](x, x0_hat, eps_hat, i=i, ab=chain.ab, sub=chain.sub, z=z, eta=eta)


def _respaced_loop(method: str):
    """The reverse loop over the respaced timesteps, one DDPM or DDIM step per timestep."""

    def loop(denoise, diffusion, noise, shape, *, steps, eta, gt, device, on_step, spacing="uniform"):
        chain = Chain.of(diffusion, steps, spacing)
        x = noise.randn(shape, to=device)
        for i in reversed(range(len(chain))):
            x = reverse_step(denoise, diffusion, chain, i, x, noise, method=method, eta=eta, gt=gt)
            if on_step is not None:
                on_step(i)
        return x

    return loop


@SOLVERS.register("ddpm")
def _ddpm(_params) -> Solver:
    return Solver("ddpm", ("gaussian",), _respaced_loop("ddpm"), _respaced_count)


@SOLVERS.register("ddim")
def _ddim(_params) -> Solver:
    return Solver("ddim", ("gaussian",), _respaced_loop("ddim"), _respaced_count)


# ---------------------------------------------------------------- flow: Euler and Heun

def _velocity(denoise: Denoise, flow: Any, x: Tensor, sigma: float, gt: Any, device: torch.device) -> Tensor:
    """``v = eps_hat - x0_hat`` at noise fraction ``sigma`` (network time ``sigma T - 1``)."""
    t_val = float(flow.t_of_sigma(torch.tensor(sigma, dtype=torch.float64)))
    t = torch.full((x.shape[0],), t_val, device=device, dtype=torch.float32)
    x0_hat, eps_hat = denoise(x, t)
    if gt is not None and gt.lo <= t_val <= gt.hi:
        x0_hat = gt.x0.to(device)
        eps_hat = flow.eps_from_x0(x, t, x0_hat)
    return eps_hat - x0_hat


def _uniform_only(spacing: str) -> None:
    if spacing != "uniform":
        raise ValueError(f"the flow solvers step on the flow's own sigma grid; spacing {spacing!r} does not apply")


def _euler_loop(denoise, flow, noise, shape, *, steps, eta, gt, device, on_step, spacing="uniform", shift=1.0):
    _uniform_only(spacing)
    sig = flow.inference_sigmas(steps, shift).tolist()
    x = noise.randn(shape, to=device)  # x at sigma = 1 is pure noise
    n = len(sig) - 1
    for k in range(n):
        x = x + (sig[k + 1] - sig[k]) * _velocity(denoise, flow, x, sig[k], gt, device)
        if on_step is not None:
            on_step(n - 1 - k)
    return x


def _heun_loop(denoise, flow, noise, shape, *, steps, eta, gt, device, on_step, spacing="uniform", shift=1.0):
    _uniform_only(spacing)
    sig = flow.inference_sigmas(steps, shift).tolist()
    x = noise.randn(shape, to=device)
    n = len(sig) - 1
    for k in range(n):
        dt = sig[k + 1] - sig[k]
        d = _velocity(denoise, flow, x, sig[k], gt, device)
        x_euler = x + dt * d
        if sig[k + 1] > 0:  # the last step (into sigma = 0, where v is not defined) stays an Euler step
            x = x + dt * 0.5 * (d + _velocity(denoise, flow, x_euler, sig[k + 1], gt, device))
        else:
            x = x_euler
        if on_step is not None:
            on_step(n - 1 - k)
    return x


@SOLVERS.register("euler")
def _euler(_params) -> Solver:
    return Solver("euler", ("flow",), _euler_loop, _ode_count, shiftable=True)


@SOLVERS.register("heun")
def _heun(_params) -> Solver:
    return Solver("heun", ("flow",), _heun_loop, _ode_count, evaluations_per_step=lambda n: 2 * n - 1,
                  shiftable=True)
