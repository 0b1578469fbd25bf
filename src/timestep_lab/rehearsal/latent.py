"""A latent study's rehearsal (docs/methods.md 7.9): a tiny DiT in place of the study's, a random
``AutoencoderKL`` of sd-vae-ft-ema's family at tiny widths in place of the VAE, and the width arm of
the consistency group (``model.params.hidden``) kept narrower or wider than the tiny DiT.

The VAE stand-in has two levels (8x8 images -> 4x4x4 latents): sd-vae-ft-ema's blocks, latent
channels and scaling, 8 and 16 channels wide, saved with ``save_pretrained`` so the workflow loads
it from a folder as it loads the real one. Pure functions of dicts but :func:`write_vae` (which
imports diffusers and writes the folder).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

__all__ = ["TINY_DIT", "DIT_HIDDEN", "VAE_STAND_IN", "tiny_dit", "tiny_hidden", "write_vae"]

#: the rehearsal's DiT: one block of 16 channels in 2 heads (4 tokens of 4x4x4 latents at patch 2)
TINY_DIT = {"depth": 1, "hidden": 16, "heads": 2}
#: the published DiT widths (models/dit.py DIT_SIZES, which imports torch; tests/test_spaces.py holds them equal)
DIT_HIDDEN = {"S/2": 384, "B/2": 768, "L/2": 1024, "XL/2": 1152}
#: the VAE stand-in's diffusers AutoencoderKL arguments (sd-vae-ft-ema's family: its block types and
#: latent channels, two levels instead of four)
VAE_STAND_IN = {"in_channels": 3, "out_channels": 3, "latent_channels": 4, "block_out_channels": [8, 16],
                "down_block_types": ["DownEncoderBlock2D"] * 2, "up_block_types": ["UpDecoderBlock2D"] * 2,
                "layers_per_block": 1, "norm_num_groups": 4, "sample_size": 8}


def tiny_dit(model: Mapping[str, Any]) -> dict[str, Any]:
    """``model`` (``name: dit``) with :data:`TINY_DIT`'s widths; size (patch), classes and label
    dropout as configured."""
    return {**model, "params": {**(model.get("params") or {}), **TINY_DIT}}


def tiny_hidden(value: int, base: Mapping[str, Any]) -> int:
    """A width arm's ``model.params.hidden`` in the rehearsal: its ratio to the study's DiT width
    (``base``: the base model's params) on :data:`TINY_DIT`, a multiple of 4, and still different."""
    params = base.get("params") or {}
    width0 = int(params.get("hidden") or DIT_HIDDEN.get(str(params.get("size", "XL/2")), 1152))
    tiny = TINY_DIT["hidden"]
    scaled = max(4, round(int(value) / width0 * tiny / 4) * 4)
    if scaled == tiny and int(value) != width0:
        scaled = tiny + (4 if int(value) > width0 else -4)
    return scaled


def write_vae(dest: Path, seed: int = 0) -> Path:
    """The VAE stand-in (:data:`VAE_STAND_IN`), random weights from ``seed``, in diffusers' folder format."""
    import torch

    from timestep_lab.models.diffusers import import_diffusers

    diffusers = import_diffusers()
    torch.manual_seed(seed)
    vae = diffusers.AutoencoderKL(**{k: tuple(v) if isinstance(v, list) else v for k, v in VAE_STAND_IN.items()})
    vae.save_pretrained(dest)
    return dest
