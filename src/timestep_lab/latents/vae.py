"""The VAE of latent diffusion: diffusers' ``AutoencoderKL`` read offline from a local folder in
diffusers' format (``config.json`` + ``diffusion_pytorch_model.safetensors`` or ``.bin``; the
cluster user downloads ``stabilityai/sd-vae-ft-ema`` once, README "Latent diffusion").

Latents are the posterior's sample times the scaling factor (LDM / Stable Diffusion):

    z = s * (mu(x) + sigma(x) * n),   n ~ N(0, I),   x in [-1, 1] [B, 3, H, W],   z [B, 4, H/8, W/8]
    x_hat = D(z / s)

``s`` is 0.18215 for sd-vae-ft-ema (:data:`DEFAULT_SCALING`); a study config's value wins, else
the folder's ``config.json`` ``scaling_factor``, else the default. :class:`VaeInfo` is what every
artifact made through the VAE records: its folder, its weights' sha256 and ``s``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from timestep_lab.artifacts.io import ArtifactError, sha256_file
from timestep_lab.models.diffusers import DIFFUSERS_WEIGHTS, import_diffusers

__all__ = ["DEFAULT_SCALING", "VaeInfo", "load_vae", "vae_info", "encode_moments", "decode_latents", "latent_decoder"]

#: sd-vae-ft-ema's (and Stable Diffusion 1.x's) latent scaling factor
DEFAULT_SCALING = 0.18215


@dataclass(frozen=True)
class VaeInfo:
    """What identifies the VAE of a latent artifact: ``folder`` (as given), ``weights`` (the
    weight file's name), ``sha256`` (of the weight file), ``scaling_factor``, ``latent_channels``
    and ``downsample`` (pixels per latent along a side: ``2^(levels - 1)``)."""

    folder: str
    weights: str
    sha256: str
    scaling_factor: float
    latent_channels: int
    downsample: int

    def record(self) -> dict[str, Any]:
        """The protocol record's ``vae`` entry."""
        return {"class": "AutoencoderKL", **asdict(self)}


def _read_config(folder: Path) -> tuple[dict[str, Any], Path]:
    if not (folder / "config.json").is_file():
        raise ArtifactError(f"{folder}: no config.json: not a diffusers AutoencoderKL folder (download "
                            f"stabilityai/sd-vae-ft-ema there, README 'Latent diffusion')")
    try:
        config = json.loads((folder / "config.json").read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ArtifactError(f"{folder / 'config.json'}: corrupted JSON ({exc})") from None
    if not isinstance(config, dict) or config.get("_class_name", "AutoencoderKL") != "AutoencoderKL":
        name = config.get("_class_name") if isinstance(config, dict) else type(config).__name__
        raise ArtifactError(f"{folder / 'config.json'}: a {name}, not an AutoencoderKL")
    weights = [folder / w for w in DIFFUSERS_WEIGHTS if (folder / w).is_file()]
    if not weights:
        raise ArtifactError(f"{folder}: no weights ({' or '.join(DIFFUSERS_WEIGHTS)}) next to config.json")
    return config, weights[0]


def vae_info(folder: str | Path, scaling_factor: float | None = None) -> VaeInfo:
    """The :class:`VaeInfo` of the VAE folder (hashes its weights; loads no network)."""
    path = Path(folder)
    if not path.is_dir():
        raise ArtifactError(f"{path}: VAE folder not found (download stabilityai/sd-vae-ft-ema there, "
                            f"README 'Latent diffusion')")
    config, weights = _read_config(path)
    s = scaling_factor if scaling_factor is not None else float(config.get("scaling_factor") or DEFAULT_SCALING)
    levels = len(config.get("block_out_channels") or (128, 256, 512, 512))
    return VaeInfo(str(folder), weights.name, sha256_file(weights), float(s),
                   int(config.get("latent_channels", 4)), 2 ** (levels - 1))


def load_vae(folder: str | Path, scaling_factor: float | None = None) -> tuple[nn.Module, VaeInfo]:
    """``(AutoencoderKL in eval mode, float32, :class:`VaeInfo`)`` read offline from ``folder``;
    :class:`ArtifactError` naming the folder when it is missing or unreadable."""
    info = vae_info(folder, scaling_factor)
    diffusers = import_diffusers()
    try:
        vae = diffusers.AutoencoderKL.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # diffusers raises OSError/ValueError/safetensors errors
        first = str(exc).splitlines()[0] if str(exc) else repr(exc)
        raise ArtifactError(f"{folder}: could not load the diffusers AutoencoderKL ({first})") from None
    return vae.float().eval().requires_grad_(False), info


@torch.no_grad()
def encode_moments(vae: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
    """The posterior's ``(mean, std)``, each ``[B, c, H/f, W/f]`` (unscaled), of images ``x``
    ``[B, 3, H, W]`` in [-1, 1]."""
    dist = vae.encode(x.float()).latent_dist
    return dist.mean, dist.std


@torch.no_grad()
def decode_latents(vae: nn.Module, z: Tensor, scaling_factor: float) -> Tensor:
    """Images ``[B, 3, H, W]`` (about [-1, 1], not clamped) of scaled latents ``z`` ``[B, c, h, w]``:
    ``D(z / s)``."""
    return vae.decode(z.float() / scaling_factor).sample


def latent_decoder(record: dict[str, Any], device: Any = "cpu") -> Callable[[Tensor], Tensor]:
    """``z -> D(z / s)`` (float32, on ``device``) of the VAE a latent model was trained with, from
    its record (:meth:`VaeInfo.record`: the folder and ``s``); :class:`ArtifactError` when the
    folder's weights are no longer the recorded ones (samples decoded by another VAE would be
    scored as this model's)."""
    vae, info = load_vae(record["folder"], float(record["scaling_factor"]))
    if info.sha256 != record["sha256"]:
        raise ArtifactError(f"{record['folder']}: the VAE's weights have sha256 {info.sha256[:12]}, the model was "
                            f"trained on latents of {str(record['sha256'])[:12]}; restore that VAE")
    vae = vae.to(device)
    return lambda z: decode_latents(vae, z.to(device), info.scaling_factor)
