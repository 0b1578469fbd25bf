"""Closed-form denoisers of a finite training set: the floor under every model's loss, and the
"early solution" every model passes through (docs/methods.md §3.1, §4.1).

**Optimal denoiser** (:class:`EmpiricalDenoiser`). When the data distribution is the training
set itself, ``p(x0) = 1/N sum_j delta(x0 - y_j)``, the minimiser of ``E ||x0_hat(x_t, t) - x0||^2``
is the posterior mean, a softmax-weighted mean of the training images::

    E[x0 | x_t] = sum_j w_j(x_t) y_j,
    w_j(x_t) = softmax_j( -||x_t - sqrt(ab_t) y_j||^2 / (2 (1 - ab_t)) )

and the optimal eps prediction is ``(x_t - sqrt(ab_t) E[x0 | x_t]) / sqrt(1 - ab_t)``. No network
trained on these images can have a lower expected loss at t, in any of the eps, x0 or v spaces
(each is an affine function of the x0 estimate at fixed x_t). Near ``t = 0`` the posterior
collapses onto the one training image x_t came from, so the optimal eps-MSE there is ~0; near T
it is ``ab_t / (1 - ab_t)`` times the data variance around the mean, also tiny.
:func:`optimal_profile` evaluates it on the loss profile's fixed bank and noise
(:func:`timestep_lab.studies.profile.profile_bank`), so ``model - optimal`` is the model's
*excess* (learnable) loss per t, point by point.

**Gaussian denoiser** (:class:`GaussianDenoiser`): the posterior mean when the data are
replaced by a Gaussian with the training set's mean ``mu`` and covariance ``S = U diag(lam) U^T``::

    E[x0 | x_t] = mu + U diag( sqrt(ab) lam / (ab lam + 1 - ab) ) U^T (x_t - sqrt(ab) mu)

the linear solution networks learn first; the consistency analysis samples it with the same
seeds as the trained models as its "same early solution" control.

Both are ``denoise(x_t [B, C, H, W], t [B]) -> (x0_hat, eps_hat)`` callables, the interface of
:class:`timestep_lab.generate.sampling.Denoiser`, so :func:`timestep_lab.generate.sampling.sample_images` samples
them like a network. Arithmetic is float64 (at t = 0, ``1 - ab = 1e-4`` makes the logits of
neighbouring images differ by thousands).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

from timestep_lab.processes import exact
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.studies.profile import PROFILE_FORMAT, _images_array, profile_bank, profile_timesteps

__all__ = ["EmpiricalDenoiser", "GaussianDenoiser", "optimal_profile"]


def _train_matrix(images_uint8_nhwc: Any) -> tuple[Tensor, tuple[int, int, int]]:
    """Training images as float64 ``[N, D]`` in [-1, 1] and their ``(C, H, W)``."""
    arr = np.asarray(_images_array(images_uint8_nhwc))
    y = torch.from_numpy(np.array(arr)).permute(0, 3, 1, 2).double().div(127.5).sub(1.0)  # a writable copy
    return y.reshape(len(y), -1).contiguous(), tuple(y.shape[1:])


class EmpiricalDenoiser:
    """The optimal (posterior-mean) denoiser of a finite image set (module docstring).

    :param images_uint8_nhwc: the training set ``uint8 [N, H, W, C]``.
    :param chunk: rows of ``x_t`` per distance matrix ``[chunk, N]``.
    """

    def __init__(self, images_uint8_nhwc: Any, diffusion: GaussianDiffusion, chunk: int = 512):
        self.y, self.shape = _train_matrix(images_uint8_nhwc)
        self.y_sq = (self.y ** 2).sum(1)  # [N]
        self.diffusion, self.chunk = diffusion, int(chunk)

    def x0(self, x_t: Tensor, t: Tensor, exclude: Tensor | None = None) -> Tensor:
        """``E[x0 | x_t]`` as float64 ``[B, C, H, W]`` (``t`` original timesteps ``[B]``).

        ``exclude`` (``[B]`` indices into the training images): row b's posterior leaves image
        ``exclude[b]`` out, the leave-one-out (held-out) denoiser of an image it never saw."""
        B = x_t.shape[0]
        x = x_t.detach().double().cpu().reshape(B, -1)
        ab = self.diffusion.alpha_bar[t.cpu()].double()  # [B]
        out = torch.empty_like(x)
        for s in range(0, B, self.chunk):
            xs, a = x[s:s + self.chunk], ab[s:s + self.chunk, None]
            # ||x - sqrt(a) y||^2 = ||x||^2 - 2 sqrt(a) x.y + a ||y||^2; ||x||^2 is constant per row
            logits = (2 * exact.sqrt(a) * (xs @ self.y.T) - a * self.y_sq[None]) / (2 * (1 - a))
            if exclude is not None:
                rows = torch.arange(len(xs))
                logits[rows, exclude[s:s + self.chunk].long()] = -torch.inf
            out[s:s + self.chunk] = torch.softmax(logits, dim=1) @ self.y
        return out.reshape(B, *self.shape)

    @torch.no_grad()
    def __call__(self, x_t: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        x0 = self.x0(x_t, t).to(device=x_t.device, dtype=x_t.dtype)
        return x0, self.diffusion.eps_from_x0(x_t, t, x0)


class GaussianDenoiser:
    """The posterior-mean denoiser of the Gaussian with the images' mean and covariance."""

    def __init__(self, images_uint8_nhwc: Any, diffusion: GaussianDiffusion):
        y, self.shape = _train_matrix(images_uint8_nhwc)
        self.mu = y.mean(0)
        cov = torch.cov(y.T) if len(y) > 1 else torch.zeros(y.shape[1], y.shape[1], dtype=torch.float64)
        lam, self.u = torch.linalg.eigh(cov)
        self.lam = lam.clamp(min=0.0)
        self.diffusion = diffusion

    def x0(self, x_t: Tensor, t: Tensor) -> Tensor:
        B = x_t.shape[0]
        x = x_t.detach().double().cpu().reshape(B, -1)
        ab = self.diffusion.alpha_bar[t.cpu()].double()[:, None]  # [B, 1]
        gain = exact.sqrt(ab) * self.lam[None] / (ab * self.lam[None] + 1 - ab)  # [B, D] in the eigenbasis
        z = (x - exact.sqrt(ab) * self.mu[None]) @ self.u
        return (self.mu[None] + (gain * z) @ self.u.T).reshape(B, *self.shape)

    @torch.no_grad()
    def __call__(self, x_t: Tensor, t: Tensor) -> tuple[Tensor, Tensor]:
        x0 = self.x0(x_t, t).to(device=x_t.device, dtype=x_t.dtype)
        return x0, self.diffusion.eps_from_x0(x_t, t, x0)


def optimal_profile(train_images_uint8_nhwc: Any, diffusion: GaussianDiffusion, bank_images_uint8_nhwc: Any = None, *,
                    num_images: int = 256, stride: int = 1, seed: int = 1234) -> dict[str, Any]:
    """Per-t losses of the training set's optimal denoiser on the loss profile's fixed bank.

    :param train_images_uint8_nhwc: the images the models were trained on (the denoiser's data).
    :param bank_images_uint8_nhwc: where the bank is drawn from (default: the training images, as
        the ``profile`` command does), with the same ``num_images``/``seed`` as the models' profiles.
    :returns: a loss-profile dict (:data:`~timestep_lab.studies.profile.PROFILE_FORMAT`, loadable with
        ``load_profile``) with ``eps_mse``, ``x0_mse``, ``v_mse`` ``[K]`` and their ``*_sem``:
        ``eps_mse[t] = mean (eps* - eps)^2``, ``x0_mse[t] = mean (E[x0|x_t] - x0)^2`` over bank and
        pixels; ``loss`` = ``eps_mse``; ``model`` says what it is. ``heldout``: the same three (and
        their ``*_sem``) for the leave-one-out denoiser, each bank image scored by the posterior
        mean of the *other* training images (issue 42): the floor on an image the denoiser did not
        memorise. Near t = 0 the training floor is ~0 only because the bank image is in the sum;
        held out, the same denoiser snaps to the nearest other image. With a separate bank
        (not the training images) nothing is left out: ``heldout`` equals the training floor.
    """
    bank = train_images_uint8_nhwc if bank_images_uint8_nhwc is None else bank_images_uint8_nhwc
    x0, eps, idx = profile_bank(bank, num_images, seed)
    exclude = idx if bank_images_uint8_nhwc is None else None
    x0, eps = x0.double(), eps.double()
    den = EmpiricalDenoiser(train_images_uint8_nhwc, diffusion)
    ts = profile_timesteps(diffusion.T, stride)
    n = x0.shape[0]
    keys = ("eps_mse", "x0_mse", "v_mse")
    stats: dict[str, dict[str, list[float]]] = {f: {k: [] for k in keys} for f in ("train", "heldout")}
    sems: dict[str, dict[str, list[float]]] = {f: {k: [] for k in keys} for f in ("train", "heldout")}
    ab_all = diffusion.alpha_bar
    for t_val in ts:
        t = torch.full((n,), t_val, dtype=torch.long)
        a = float(ab_all[t_val])
        x_t = a ** 0.5 * x0 + (1 - a) ** 0.5 * eps
        for floor, ex in (("train", None), ("heldout", exclude)):
            if floor == "heldout" and ex is None:  # nothing to leave out: the same numbers
                for k in keys:
                    stats[floor][k].append(stats["train"][k][-1])
                    sems[floor][k].append(sems["train"][k][-1])
                continue
            err_x0 = den.x0(x_t, t, ex) - x0
            # eps* - eps = -sqrt(a / (1 - a)) (x0* - x0); v* - v = -(x0* - x0) / sqrt(1 - a)
            per = {"x0_mse": err_x0.pow(2).flatten(1).mean(1)}
            per["eps_mse"] = per["x0_mse"] * (a / (1 - a))
            per["v_mse"] = per["x0_mse"] / (1 - a)
            for k, v in per.items():
                stats[floor][k].append(float(v.mean()))
                sems[floor][k].append(float(v.std(unbiased=True) / n ** 0.5) if n > 1 else 0.0)
    out: dict[str, Any] = {
        "format": PROFILE_FORMAT, "T": diffusion.T, "stride": int(stride), "num_images": int(n), "seed": int(seed),
        "prediction": "optimal", "image_shape": list(x0.shape[1:]), "timesteps": ts,
        "model": {"kind": "optimal denoiser", "train_images": int(den.y.shape[0]),
                  "definition": "E[x0 | x_t] = softmax-weighted mean of the training images"},
        **stats["train"], **{f"{k}_sem": v for k, v in sems["train"].items()},
        "heldout": {"definition": "leave-one-out: each bank image scored by the posterior mean of the other "
                                  "training images" if exclude is not None else "the bank is not in the training "
                                  "set: nothing left out, the training floor",
                    **stats["heldout"], **{f"{k}_sem": v for k, v in sems["heldout"].items()}},
    }
    out["loss"], out["loss_sem"] = out["eps_mse"], out["eps_mse_sem"]
    out["grad"] = {"timesteps": [], "norm_mean": [], "norm_var": [], "cov_trace": [], "mean_sq_norm": [], "samples": 0}
    return out
