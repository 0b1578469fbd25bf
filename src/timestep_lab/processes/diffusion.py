"""The Gaussian diffusion process (DDPM): forward noising, posterior, parameter conversions
and per-timestep variational-bound terms.

Notation (0-based t = 0 .. T-1, t = 0 the least noisy)::

    x_t      = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps                       q(x_t | x0)
    v        = sqrt(ab_t) eps - sqrt(1 - ab_t) x0                        (Salimans & Ho 2022)
    x0       = (x_t - sqrt(1 - ab_t) eps) / sqrt(ab_t) = sqrt(ab_t) x_t - sqrt(1 - ab_t) v
    q(x_{t-1} | x_t, x0) = N(c1_t x0 + c2_t x_t, beta~_t),                (DDPM eq. 6-7)
        c1_t = beta_t sqrt(ab_{t-1}) / (1 - ab_t),  c2_t = (1 - ab_{t-1}) sqrt(alpha_t) / (1 - ab_t),
        beta~_t = beta_t (1 - ab_{t-1}) / (1 - ab_t)

``ab`` is alpha_bar. Tensors are images ``[B, C, H, W]`` (any trailing shape works) and
timesteps ``t`` are ``LongTensor[B]``. Coefficients are computed in float64 once and cached per
device in float32.

The process knows nothing about networks, timestep samplers or loss weightings.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from timestep_lab.processes import exact

__all__ = ["GaussianDiffusion", "normal_kl", "discretized_gaussian_log_likelihood", "mean_flat"]


def mean_flat(x: Tensor) -> Tensor:
    """Mean over all non-batch dimensions: ``[B, ...] -> [B]``."""
    return x.flatten(1).mean(dim=1)


def normal_kl(mean1: Tensor, logvar1: Tensor, mean2: Tensor, logvar2: Tensor) -> Tensor:
    """Elementwise KL(N(mean1, exp(logvar1)) || N(mean2, exp(logvar2))) in nats."""
    return 0.5 * (-1.0 + logvar2 - logvar1 + torch.exp(logvar1 - logvar2) + (mean1 - mean2) ** 2 * torch.exp(-logvar2))


def discretized_gaussian_log_likelihood(x: Tensor, mean: Tensor, log_scale: Tensor) -> Tensor:
    """Elementwise log-likelihood (nats) of 8-bit data ``x`` in [-1, 1] under a Gaussian
    discretised into 256 bins of width 2/255, the edge bins extended to +-inf (DDPM Sec. 3.3).

    ``log_scale`` is the log standard deviation.
    """
    centered = x - mean
    inv_std = torch.exp(-log_scale)
    upper = inv_std * (centered + 1.0 / 255.0)
    lower = inv_std * (centered - 1.0 / 255.0)
    log_cdf_upper = torch.special.log_ndtr(upper)
    log_sf_lower = torch.special.log_ndtr(-lower)  # log(1 - Phi(lower)), stable for large lower
    # The bin mass Phi(upper) - Phi(lower), in log space and in the tail the bin lies in (below the
    # mean: CDFs; above it: survival functions), so it never is a difference of two numbers that
    # round to 1 (which gave -inf in float32 for a bin far above the mean):
    #   log(Phi(u) - Phi(l)) = log Phi(u) + log(-expm1(log Phi(l) - log Phi(u)))
    #   log(S(l) - S(u))     = log S(l)   + log(-expm1(log S(u) - log S(l)))
    # (the exponent is clamped below 0 so a bin narrower than float precision stays finite)
    below = log_cdf_upper + torch.log(-torch.expm1((torch.special.log_ndtr(lower) - log_cdf_upper).clamp(max=-1e-30)))
    above = log_sf_lower + torch.log(-torch.expm1((torch.special.log_ndtr(-upper) - log_sf_lower).clamp(max=-1e-30)))
    log_delta = torch.where(centered > 0, above, below)
    return torch.where(x < -0.999, log_cdf_upper, torch.where(x > 0.999, log_sf_lower, log_delta))


class GaussianDiffusion:
    """DDPM forward process for a schedule ``alpha_bar [T]``.

    :param alpha_bar: cumulative product of (1 - beta), shape ``[T]``, decreasing, in (0, 1).
    :param variance: the fixed reverse-process variance: ``"fixed_large"`` uses beta_t
        (with beta~_1 at t = 0, as iDDPM), ``"fixed_small"`` the posterior variance beta~_t.
    """

    kind = "gaussian"  # its name in the process registry (timestep_lab.processes.registry)
    clip_x0_default = True  # sample.clip_x0 null: clip x0_hat to [-1, 1] (DDPM's and DDIM's official code do)

    def __init__(self, alpha_bar: Tensor, variance: str = "fixed_large"):
        ab = alpha_bar.detach().double().cpu()
        if ab.ndim != 1 or ab.numel() < 2:
            raise ValueError(f"alpha_bar must be a 1-D tensor of length >= 2, got shape {tuple(ab.shape)}")
        if not (torch.all(ab > 0) and torch.all(ab < 1) and torch.all(ab[1:] <= ab[:-1])):
            raise ValueError("alpha_bar must be non-increasing and inside (0, 1)")
        if variance not in ("fixed_large", "fixed_small"):
            raise ValueError(f"variance must be fixed_large or fixed_small, got {variance!r}")
        self.T = int(ab.numel())
        self.variance = variance
        ab_prev = torch.cat([ab.new_ones(1), ab[:-1]])
        betas = 1.0 - ab / ab_prev
        post_var = betas * (1.0 - ab_prev) / (1.0 - ab)
        # beta~_0 = 0: use beta~_1 in its place so logs stay finite (iDDPM's "clipped" log variance)
        post_logvar = torch.log(torch.cat([post_var[1:2], post_var[1:]]))
        model_var = torch.cat([post_var[1:2], betas[1:]]) if variance == "fixed_large" else torch.exp(post_logvar)
        self._coefs64 = {
            "alpha_bar": ab,
            "alpha_bar_prev": ab_prev,
            "betas": betas,
            "sqrt_ab": exact.sqrt(ab),
            "sqrt_1m_ab": exact.sqrt(1.0 - ab),
            "snr": ab / (1.0 - ab),
            "post_var": post_var,
            "post_logvar": post_logvar,
            "post_c1": betas * exact.sqrt(ab_prev) / (1.0 - ab),
            "post_c2": (1.0 - ab_prev) * exact.sqrt(1.0 - betas) / (1.0 - ab),
            "model_logvar": torch.log(model_var),
        }
        self._cache: dict[tuple[str, torch.device], dict[str, Tensor]] = {}

    # ---------------------------------------------------------------- coefficient lookup

    @property
    def alpha_bar(self) -> Tensor:
        """``[T]`` float64 on CPU."""
        return self._coefs64["alpha_bar"]

    @property
    def betas(self) -> Tensor:
        return self._coefs64["betas"]

    @property
    def snr(self) -> Tensor:
        """``SNR_t = ab_t / (1 - ab_t)``, ``[T]`` float64."""
        return self._coefs64["snr"]

    @property
    def v_scale(self) -> Tensor:
        """``ab_t``: ``||v_hat - v||^2 = ||eps_hat - eps||^2 / ab_t`` for the same x_t, ``[T]`` float64."""
        return self._coefs64["alpha_bar"]

    def table(self, name: str, device: torch.device | str = "cpu") -> Tensor:
        """A coefficient ``[T]`` as float32 on ``device`` (cached)."""
        device = torch.device(device)
        key = ("f32", device)
        tables = self._cache.get(key)
        if tables is None:
            tables = {k: v.to(device=device, dtype=torch.float32) for k, v in self._coefs64.items()}
            self._cache[key] = tables
        return tables[name]

    def _c(self, name: str, t: Tensor, like: Tensor) -> Tensor:
        """Coefficient ``name`` at ``t [B]``, shaped ``[B, 1, 1, ...]`` to broadcast with ``like``."""
        c = self.table(name, t.device)[t]
        return c.view(-1, *([1] * (like.ndim - 1))).to(like.dtype)

    # ---------------------------------------------------------------- forward process

    def q_sample(self, x0: Tensor, t: Tensor, noise: Tensor) -> Tensor:
        """``x_t = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps``."""
        return self._c("sqrt_ab", t, x0) * x0 + self._c("sqrt_1m_ab", t, x0) * noise

    def q_posterior(self, x0: Tensor, x_t: Tensor, t: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Mean, variance and (clipped) log-variance of q(x_{t-1} | x_t, x0)."""
        mean = self._c("post_c1", t, x_t) * x0 + self._c("post_c2", t, x_t) * x_t
        return mean, self._c("post_var", t, x_t), self._c("post_logvar", t, x_t)

    def p_mean_logvar(self, x0_hat: Tensor, x_t: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        """Reverse-step mean and log-variance given an x0 estimate (fixed variance)."""
        mean = self._c("post_c1", t, x_t) * x0_hat + self._c("post_c2", t, x_t) * x_t
        return mean, self._c("model_logvar", t, x_t)

    # ---------------------------------------------------------------- conversions

    def x0_from_eps(self, x_t: Tensor, t: Tensor, eps: Tensor) -> Tensor:
        return (x_t - self._c("sqrt_1m_ab", t, x_t) * eps) / self._c("sqrt_ab", t, x_t)

    def eps_from_x0(self, x_t: Tensor, t: Tensor, x0: Tensor) -> Tensor:
        return (x_t - self._c("sqrt_ab", t, x_t) * x0) / self._c("sqrt_1m_ab", t, x_t)

    def v_from_x0_eps(self, x0: Tensor, t: Tensor, eps: Tensor) -> Tensor:
        return self._c("sqrt_ab", t, x0) * eps - self._c("sqrt_1m_ab", t, x0) * x0

    def x0_from_v(self, x_t: Tensor, t: Tensor, v: Tensor) -> Tensor:
        return self._c("sqrt_ab", t, x_t) * x_t - self._c("sqrt_1m_ab", t, x_t) * v

    def eps_from_v(self, x_t: Tensor, t: Tensor, v: Tensor) -> Tensor:
        return self._c("sqrt_1m_ab", t, x_t) * x_t + self._c("sqrt_ab", t, x_t) * v

    # ---------------------------------------------------------------- variational bound

    def vlb_terms(self, x0: Tensor, x_t: Tensor, t: Tensor, x0_hat: Tensor, *,
                  t0_term: str = "decoder_nll") -> Tensor:
        """Per-sample VLB term in bits/dim, ``[B]``.

        For t > 0: ``L_t = KL(q(x_{t-1} | x_t, x0) || p(x_{t-1} | x_t))``. For t = 0,
        ``t0_term="decoder_nll"`` gives the decoder NLL ``-log p(x0 | x_t)`` under the
        discretised Gaussian (the bound's own term, used by the loss profile) and
        ``t0_term="kl"`` the same KL expression as t > 0 with the clipped posterior variance
        (what the adaptive sampler's official code feeds its reward; docs/methods.md §1.4).
        Both divided by ``D ln 2`` (D = number of pixels x channels). ``x0`` must be in [-1, 1];
        ``x0_hat`` is used as given (callers decide whether to clamp it).
        """
        if t0_term not in ("decoder_nll", "kl"):
            raise ValueError(f"t0_term must be 'decoder_nll' or 'kl', got {t0_term!r}")
        true_mean, _, true_logvar = self.q_posterior(x0, x_t, t)
        mean, logvar = self.p_mean_logvar(x0_hat, x_t, t)
        kl = mean_flat(normal_kl(true_mean, true_logvar, mean, logvar)) / math.log(2.0)
        if t0_term == "kl":
            return kl
        nll = -mean_flat(discretized_gaussian_log_likelihood(x0, mean, 0.5 * logvar)) / math.log(2.0)
        return torch.where(t == 0, nll, kl)

    def prior_bpd(self, x0: Tensor) -> Tensor:
        """``KL(q(x_{T-1} | x0) || N(0, I))`` in bits/dim, ``[B]``."""
        t = torch.full((x0.shape[0],), self.T - 1, device=x0.device, dtype=torch.long)
        mean = self._c("sqrt_ab", t, x0) * x0
        logvar = torch.log(1.0 - self._c("alpha_bar", t, x0))
        return mean_flat(normal_kl(mean, logvar, torch.zeros_like(mean), torch.zeros_like(mean))) / math.log(2.0)
