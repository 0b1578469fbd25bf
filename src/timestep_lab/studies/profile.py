"""Per-timestep loss profile of a trained network (Xie & Agam, arXiv 2502.01990, Sec. 2.1,
Fig. 1a and Table 1; docs/methods.md §3.1) and the per-timestep gradient-norm variance
(arXiv 2411.09998's observation).

The profile bank is fixed: the first ``num_images`` images of the permutation
``torch.randperm(N, generator=manual_seed(seed))`` and one noise tensor ``eps [n, C, H, W]``
drawn from a fresh ``manual_seed(seed)`` generator. Every timestep uses the same images and the same
``eps``, and every model evaluated with the same ``seed`` sees exactly the same inputs, so two
profiles are comparable point by point (the slot fine-tuning study subtracts them).

For each evaluated ``t`` (``range(0, T, stride)``, plus ``T - 1`` when the stride skips it, so
that :func:`full_profile` never extrapolates), with ``x_t = sqrt(ab_t) x0 + sqrt(1 - ab_t) eps``
and ``(x0_hat, eps_hat)`` the prediction type's estimates from ``net(x_t, t)``:

* ``eps_mse[t] = mean_i mean_pixels (eps_hat_i - eps_i)^2``     (dimensionless, eps ~ N(0, 1))
* ``x0_mse[t]  = mean_i mean_pixels (x0_hat_i - x0_i)^2``        (data in [-1, 1]; not clamped)
* ``vlb_bpd[t] = mean_i L_t(x0_i)`` in bits/dim: ``KL(q(x_{t-1}|x_t,x0) || p(x_{t-1}|x_t))``,
  the decoder NLL at t = 0, with ``x0_hat`` clamped to [-1, 1] (:meth:`GaussianDiffusion.vlb_terms`)
* ``loss[t]    = mean_i`` of the prediction type's own unweighted training loss (equal to
  ``eps_mse`` for eps-prediction)

and ``*_sem`` the standard error of each mean over the bank. For ``grad_timesteps`` evenly
spaced ``t`` (``round(linspace(0, T-1, grad_timesteps))``, duplicates removed) it also reports
the mean and the (unbiased, ddof = 1) variance over ``grad_samples`` single samples (bank image
``i``, bank noise ``i``) of ``||d loss_i / d theta||_2`` over all parameters, and the trace of
the gradients' covariance matrix, ``tr Cov(g) = E ||g - E g||^2`` (unbiased), the SGD noise at t.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from timestep_lab.artifacts.io import ArtifactError, atomic_write_json, read_json
from timestep_lab.errors import InputError
from timestep_lab.processes import exact
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import Prediction

__all__ = [
    "PROFILE_FORMAT",
    "profile_bank",
    "profile_timesteps",
    "loss_profile",
    "full_profile",
    "profile_per_t",
    "save_profile",
    "load_profile",
]

PROFILE_FORMAT = "timestep_lab.loss_profile/1"
#: the per-timestep quantities of a profile (``<key>_sem`` their standard errors)
PER_T_KEYS = ("eps_mse", "x0_mse", "vlb_bpd", "loss", "eps_mse_sem", "x0_mse_sem", "vlb_bpd_sem", "loss_sem")


def _images_array(images: Any) -> Any:
    """uint8 NHWC from a numpy array, a torch tensor or anything with ``.images`` (PreparedData);
    or float ``[N, C, H, W]`` already in the model's space (a latent bank: the scaled posterior
    means of an encoded split, :func:`timestep_lab.latents.latent_bank`)."""
    if hasattr(images, "images") and not isinstance(images, (np.ndarray, Tensor)):
        images = images.images
    if getattr(images, "lazy_rows", False) and images.ndim == 4:  # a latent bank: rows read when drawn
        return images
    if isinstance(images, Tensor):
        images = images.cpu().numpy()
    arr = np.asarray(images) if not isinstance(images, np.ndarray) else images
    if arr.ndim != 4 or not (arr.dtype == np.uint8 or np.issubdtype(arr.dtype, np.floating)):
        raise InputError(f"images must be uint8 [N, H, W, C] or float latents [N, C, H, W], got "
                         f"{arr.dtype}{list(arr.shape)}")
    return arr


def profile_bank(images_uint8_nhwc: Any, num_images: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """The fixed profile bank: ``(x0 [n, C, H, W] float32 in [-1, 1], eps [n, C, H, W], indices [n])``
    (x0 as given for float latents ``[N, C, H, W]``).

    ``indices`` are the first ``n = min(num_images, N)`` entries of
    ``randperm(N, generator=manual_seed(seed))``; ``eps`` is drawn from a fresh
    ``manual_seed(seed)`` generator, so it depends only on ``seed`` and the bank's shape.
    """
    arr = _images_array(images_uint8_nhwc)
    N = int(arr.shape[0])
    if num_images < 1 or N < 1:
        raise InputError(f"need num_images >= 1 and a non-empty image set, got num_images={num_images}, N={N}")
    n = min(int(num_images), N)
    idx = torch.randperm(N, generator=torch.Generator().manual_seed(int(seed)))[:n]
    # read a memory map in increasing index order, then put the rows back in bank order
    rows = torch.from_numpy(np.asarray(arr[np.sort(idx.numpy())]))
    x = rows[torch.argsort(torch.argsort(idx))]
    # uint8 images to [-1, 1]; float latents are already the model's x0 (the bank's indices and noise alike)
    x0 = x.float().contiguous() if arr.dtype != np.uint8 else x.permute(0, 3, 1, 2).float().div(127.5).sub(1.0).contiguous()
    eps = torch.randn(x0.shape, generator=torch.Generator().manual_seed(int(seed)))
    return x0, eps, idx


def profile_timesteps(T: int, stride: int) -> list[int]:
    """``range(0, T, stride)`` plus ``T - 1`` if the stride skips it."""
    if stride < 1:
        raise InputError(f"stride must be >= 1, got {stride}")
    ts = list(range(0, T, stride))
    if ts[-1] != T - 1:
        ts.append(T - 1)
    return ts


def _batches(num_t: int, n: int, batch_size: int):
    """Flattened (t index, image index) pairs in batches of ``batch_size``."""
    total = num_t * n
    for start in range(0, total, batch_size):
        flat = torch.arange(start, min(total, start + batch_size))
        yield flat // n, flat % n


class _Eval:
    """Put a module in eval mode and restore its mode afterwards."""

    def __init__(self, net: nn.Module):
        self.net, self.was_training = net, net.training

    def __enter__(self):
        self.net.eval()
        return self.net

    def __exit__(self, *exc):
        self.net.train(self.was_training)
        return False


@torch.no_grad()
def _forward_stats(net: nn.Module, diffusion: GaussianDiffusion, prediction: Prediction, x0: Tensor, eps: Tensor,
                   ts: list[int], batch_size: int, device: torch.device, with_heads: bool = False) -> dict[str, Tensor]:
    """Sums and sums of squares per evaluated t of the per-sample statistics."""
    n, K = x0.shape[0], len(ts)
    t_tab = torch.tensor(ts, dtype=torch.long)
    names = ["eps_mse", "x0_mse", "vlb_bpd", "loss"] + (["head_eps", "head_x0", "head_v"] if with_heads else [])
    sums = {k: torch.zeros(K, dtype=torch.float64) for k in names}
    sq = {k: torch.zeros(K, dtype=torch.float64) for k in names}
    for ti, ii in _batches(K, n, batch_size):
        t = t_tab[ti].to(device)
        xb, eb = x0[ii].to(device), eps[ii].to(device)
        x_t = diffusion.q_sample(xb, t, eb)
        out = net(x_t, t).float()
        x0_hat, eps_hat = prediction.estimates(out, x_t, t, diffusion)
        stats = {
            "eps_mse": ((eps_hat - eb) ** 2).flatten(1).mean(1),
            "x0_mse": ((x0_hat - xb) ** 2).flatten(1).mean(1),
            "vlb_bpd": diffusion.vlb_terms(xb, x_t, t, x0_hat.clamp(-1.0, 1.0)),
            "loss": prediction.loss(out, xb, eb, x_t, t, diffusion).loss,
        }
        if with_heads:
            errs = prediction.head_errors(out, xb, x_t, t, diffusion)  # [3, B]
            stats.update(head_eps=errs[0], head_x0=errs[1], head_v=errs[2])
        for k, v in stats.items():
            v = v.detach().double().cpu()
            sums[k].index_add_(0, ti, v)
            sq[k].index_add_(0, ti, v * v)
    mean = {k: sums[k] / n for k in names}
    var = {k: (sq[k] / n - mean[k] ** 2).clamp(min=0.0) * (n / max(n - 1, 1)) for k in names}
    return {**mean, **{f"{k}_sem": exact.sqrt(var[k] / n) for k in names}}


def _grad_stats(net: nn.Module, diffusion: GaussianDiffusion, prediction: Prediction, x0: Tensor, eps: Tensor,
                ts: list[int], samples: int, device: torch.device) -> dict[str, list[float]]:
    """Per t in ``ts``, over ``samples`` single-sample gradients ``g_i`` (all parameters, float64):
    ``norm_mean``/``norm_var`` of ``||g_i||`` and ``cov_trace`` = ``tr Cov(g)`` =
    ``(sum_i ||g_i||^2 - n ||g_bar||^2) / (n - 1)``, the noise of an SGD step at that t (what the
    adaptive sampler's variance argument is about; the variance of the *norm* is not it: gradients
    of equal norm pointing every way have zero norm variance and the largest covariance);
    ``mean_sq_norm`` = ``||g_bar||^2``, the signal beside it."""
    params = list(net.parameters())
    flags = [p.requires_grad for p in params]
    for p in params:
        p.requires_grad_(True)
    out: dict[str, list[float]] = {k: [] for k in ("norm_mean", "norm_var", "cov_trace", "mean_sq_norm")}
    try:
        for t_val in ts:
            norms_sq, total = [], None
            for s in range(samples):
                i = s % x0.shape[0]
                xb, eb = x0[i : i + 1].to(device), eps[i : i + 1].to(device)
                t = torch.full((1,), t_val, dtype=torch.long, device=device)
                x_t = diffusion.q_sample(xb, t, eb)
                with torch.enable_grad():
                    loss = prediction.loss(net(x_t, t).float(), xb, eb, x_t, t, diffusion).loss.sum()
                    grads = torch.autograd.grad(loss, params, allow_unused=True)
                flat = torch.cat([(g if g is not None else torch.zeros_like(p)).detach().double().reshape(-1)
                                  for g, p in zip(grads, params)])
                norms_sq.append(float(flat.pow(2).sum()))
                total = flat if total is None else total + flat
            n = len(norms_sq)
            arr = np.sqrt(np.asarray(norms_sq, dtype=np.float64))
            mean_sq = float((total / n).pow(2).sum())
            out["norm_mean"].append(float(arr.mean()))
            out["norm_var"].append(float(arr.var(ddof=1)) if n > 1 else 0.0)
            out["mean_sq_norm"].append(mean_sq)
            out["cov_trace"].append(max(0.0, (math.fsum(norms_sq) - n * mean_sq) / (n - 1)) if n > 1 else 0.0)
    finally:
        for p, f in zip(params, flags):
            p.requires_grad_(f)
    return out


def loss_profile(net: nn.Module, diffusion: GaussianDiffusion, prediction: Prediction, images_uint8_nhwc: Any, *,
                 num_images: int = 256, stride: int = 1, seed: int = 1234, batch_size: int = 256,
                 device: Any = "cpu", grad_timesteps: int = 0, grad_samples: int = 16) -> dict[str, Any]:
    """The per-timestep loss profile of ``net`` on the fixed bank (module docstring).

    :param net: ``f(x_t [B, C, H, W], t [B]) -> out``, already on ``device``; evaluated in eval mode
        (its mode is restored). ``out`` is read by ``prediction`` (eps, x0, v or mixed heads).
    :param images_uint8_nhwc: ``uint8 [N, H, W, C]`` (numpy, torch or a ``PreparedData``).
    :param stride: evaluate every ``stride``-th t (and ``T - 1``).
    :param batch_size: (t, image) pairs per forward pass; several t share a batch.
    :param grad_timesteps: how many evenly spaced t get the gradient-norm statistics (0: none).
    :param grad_samples: single-sample gradients per such t.
    :returns: ``{"format", "T", "stride", "num_images", "seed", "prediction", "image_shape" [C, H, W],
        "timesteps" [K], "eps_mse" [K], "x0_mse" [K], "vlb_bpd" [K], "loss" [K], "<key>_sem" [K],
        "grad": {"timesteps" [G], "norm_mean" [G], "norm_var" [G], "cov_trace" [G], "mean_sq_norm" [G],
        "samples"}}`` (:func:`_grad_stats`) -- plain lists, JSON-ready.
    """
    device = torch.device(device)
    T = diffusion.T
    ts = profile_timesteps(T, stride)
    x0, eps, idx = profile_bank(images_uint8_nhwc, num_images, seed)
    with _Eval(net):
        stats = _forward_stats(net, diffusion, prediction, x0, eps, ts, max(1, int(batch_size)), device)
        grad_ts: list[int] = []
        g: dict[str, list[float]] = {k: [] for k in ("norm_mean", "norm_var", "cov_trace", "mean_sq_norm")}
        if grad_timesteps > 0:
            grad_ts = sorted({int(round(v)) for v in np.linspace(0, T - 1, int(grad_timesteps))})
            g = _grad_stats(net, diffusion, prediction, x0, eps, grad_ts, max(1, int(grad_samples)), device)
    out: dict[str, Any] = {
        "format": PROFILE_FORMAT, "T": T, "stride": int(stride), "num_images": int(x0.shape[0]), "seed": int(seed),
        "prediction": getattr(prediction, "name", type(prediction).__name__), "image_shape": list(x0.shape[1:]),
        "timesteps": ts,
    }
    for k, v in stats.items():
        out[k] = [float(x) for x in v]
    out["grad"] = {"timesteps": grad_ts, **g, "samples": int(grad_samples) if grad_ts else 0}
    return out


def full_profile(t: Sequence[int], values: Sequence[float], T: int) -> np.ndarray:
    """Linear interpolation of a strided profile ``values`` at timesteps ``t`` (strictly
    increasing) to every ``t = 0 .. T-1``: float64 ``[T]`` (constant beyond the end points)."""
    t_arr = np.asarray(t, dtype=np.float64)
    v_arr = np.asarray(values, dtype=np.float64)
    if t_arr.ndim != 1 or t_arr.shape != v_arr.shape or t_arr.size == 0:
        raise InputError(f"t and values must be 1-D of the same non-zero length, got {t_arr.shape} and {v_arr.shape}")
    if np.any(np.diff(t_arr) <= 0):
        raise InputError("t must be strictly increasing")
    return np.interp(np.arange(int(T), dtype=np.float64), t_arr, v_arr)


def profile_per_t(profile: Mapping[str, Any], key: str = "eps_mse") -> np.ndarray:
    """``full_profile`` of one quantity of a :func:`loss_profile` dict: ``[T]``."""
    if key not in profile:
        raise InputError(f"profile has no {key!r} (has {sorted(k for k in profile if isinstance(profile[k], list))})")
    return full_profile(profile["timesteps"], profile[key], int(profile["T"]))


def save_profile(path: str | Path, profile: Mapping[str, Any]) -> None:
    """Write a profile as JSON (atomically)."""
    atomic_write_json(path, dict(profile))


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read a profile written by :func:`save_profile`; :class:`ArtifactError` if it is not one."""
    obj = read_json(path)
    if not isinstance(obj, dict) or obj.get("format") != PROFILE_FORMAT:
        raise ArtifactError(f"{path}: not a loss profile ({PROFILE_FORMAT})")
    for k in ("T", "timesteps", "eps_mse"):
        if k not in obj:
            raise ArtifactError(f"{path}: loss profile lacks {k!r}")
    T, ts = obj["T"], obj["timesteps"]
    if isinstance(T, bool) or not isinstance(T, int) or T < 1:
        raise ArtifactError(f"{path}: T must be a positive integer, got {T!r}")
    if (not isinstance(ts, list) or not ts or any(isinstance(t, bool) or not isinstance(t, int) for t in ts)
            or any(b <= a for a, b in zip(ts, ts[1:])) or ts[0] < 0 or ts[-1] >= T):
        raise ArtifactError(f"{path}: timesteps must be increasing integers in [0, {T - 1}]")
    for k in PER_T_KEYS:  # every per-t quantity: one finite number per timestep
        if k not in obj:
            continue
        v = obj[k]
        if not isinstance(v, list) or len(v) != len(ts):
            raise ArtifactError(f"{path}: {k!r} must hold {len(ts)} values, one per timestep")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v):
            raise ArtifactError(f"{path}: {k!r} holds a value that is not a finite number")
    return obj
