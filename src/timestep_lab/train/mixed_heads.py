"""The per-timestep inference head of a trained ``mixed``-prediction model.

A ``mixed`` network predicts eps, x0 and v at once (:class:`~timestep_lab.processes.predictions.MixedPrediction`);
at inference it uses, per timestep, the head whose x0 estimate was best on a fixed bank of
training images. :func:`mixed_head_profile` measures that table once, on the EMA weights, when
training ends; ``model.pt`` stores it (``mixed_head_errors``, ``mixed_head_per_t``). Must not
know the training loop or files.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from timestep_lab.data import Loader, to_float
from timestep_lab.latents import LatentLoader
from timestep_lab.models.conditioning import NONE, Conditioning
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.predictions import HEADS, MixedPrediction

__all__ = ["mixed_head_profile"]


@torch.no_grad()
def mixed_head_profile(model: nn.Module, diffusion: GaussianDiffusion, prediction: MixedPrediction,
                       loader: Loader | LatentLoader, device: torch.device, n_images: int = 256, stride: int | None = None,
                       seed: int = 12345, conditioning: Conditioning = NONE) -> tuple[Tensor, Tensor]:
    """Per-t mean x0 error of each head on a fixed bank: ``(errors [3, T], head_per_t [T])``
    (a conditioned network sees each bank image's own condition).

    Timesteps are evaluated with ``stride`` (default: about 100 points) and filled in between
    by nearest neighbour."""
    T = diffusion.T
    stride = stride or max(1, T // 100)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    idx = torch.randperm(len(loader), generator=gen)[:n_images]
    # a latent run's bank: its images' scaled posterior means (the loss profiles' bank, docs/methods.md 7.9)
    x0 = (loader.bank(idx) if isinstance(loader, LatentLoader) else to_float(loader.images[idx])).to(device)
    noise = torch.randn(x0.shape, generator=gen).to(device)
    cond = conditioning.condition(x0)
    ts = torch.arange(0, T, stride)
    errors = torch.zeros(len(HEADS), len(ts), dtype=torch.float64)
    model.eval()
    for j, tv in enumerate(ts.tolist()):
        t = torch.full((x0.shape[0],), tv, dtype=torch.long, device=device)
        x_t = diffusion.q_sample(x0, t, noise)
        out = model(conditioning.network_input(x_t, cond), t)
        errors[:, j] = prediction.head_errors(out, x0, x_t, t, diffusion).mean(dim=1).double().cpu()
    nearest = torch.clamp(torch.round(torch.arange(T) / stride).long(), max=len(ts) - 1)
    full = errors[:, nearest]
    return full, full.argmin(dim=0)
