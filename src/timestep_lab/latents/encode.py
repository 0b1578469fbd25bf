"""A prepared image folder -> a latent folder, once per data set, split and VAE.

The folder holds the posterior's moments, so training draws a fresh latent each time it reads an
image (:class:`timestep_lab.latents.data.LatentLoader`):

* ``mean.npy``, ``std.npy``: float16 ``[N, c, h, w]``, ``mu(x)`` and ``sigma(x)`` of every image
  (unscaled; the loader multiplies by the scaling factor);
* ``flip_mean.npy``, ``flip_std.npy``: the same of the horizontally flipped image (``flip``: the
  study flips), since the flip of a latent is not the latent of the flip;
* ``manifest.json`` (written last: a folder with a manifest is complete): ``kind: latents``, the
  count and latent shape, the images' shape, the prepared folder's identity, the
  :class:`VaeInfo` record, and every array's sha256.

float16 halves the disk (ImageNet-256: 1.28M x 4 x 32 x 32 x 2 bytes = 10.5 GB per array):
its relative error 2^-11 is far below the posterior's own spread. Encoding is deterministic
(no noise is drawn here): the same images, VAE and batch size give the same bytes on one machine
(the batch size too: convolution kernels round by batch shape).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from timestep_lab.artifacts.io import atomic_path, atomic_write_json, sha256_file
from timestep_lab.data import PreparedData
from timestep_lab.data.prepared import to_float
from timestep_lab.latents.vae import encode_moments, load_vae

__all__ = ["LATENT_ARRAYS", "encode_folder"]

#: array files of a latent folder: (name, flipped)
LATENT_ARRAYS = (("mean", False), ("std", False), ("flip_mean", True), ("flip_std", True))


def encode_folder(data_dir: str | Path, vae_dir: str | Path, out_dir: str | Path, *, flip: bool,
                  scaling_factor: float | None = None, batch_size: int = 64, device: str = "cpu") -> Path:
    """Encode the prepared folder ``data_dir`` through the VAE in ``vae_dir`` into ``out_dir``
    (module docstring); returns ``out_dir``. Raises the data's or the VAE's one-line errors."""
    data = PreparedData(data_dir)
    vae, info = load_vae(vae_dir, scaling_factor)
    vae = vae.to(device)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").unlink(missing_ok=True)  # a previous encoding must not describe the new files
    n, f = len(data), info.downsample
    shape = (n, info.latent_channels, data.resolution // f, data.resolution // f)
    names = [name for name, flipped in LATENT_ARRAYS if flip or not flipped]
    with contextlib.ExitStack() as stack:
        tmps = [stack.enter_context(atomic_path(out / f"{name}.npy")) for name in names]
        arrays = {name: np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=shape)
                  for name, tmp in zip(names, tmps)}
        for i in range(0, n, batch_size):
            chunk = np.array(data.images[i:i + batch_size])  # uint8 [B, H, W, C]
            x = to_float(torch.from_numpy(chunk).permute(0, 3, 1, 2)).to(device)
            for prefix, images in (("", x), ("flip_", x.flip(3))) if flip else (("", x),):
                mean, std = encode_moments(vae, images)
                arrays[prefix + "mean"][i:i + len(chunk)] = mean.cpu().numpy().astype(np.float16)
                arrays[prefix + "std"][i:i + len(chunk)] = std.cpu().numpy().astype(np.float16)
        for a in arrays.values():
            a.flush()
        del arrays
    manifest: dict[str, Any] = {
        "kind": "latents", "count": n, "shape": list(shape[1:]), "dtype": "float16", "flip": bool(flip),
        "image_shape": list(data.images.shape[1:]), "data": data.identity,
        "dataset": data.manifest.get("dataset"), "split": data.manifest.get("split"),
        "vae": info.record(), "sha256": {name: sha256_file(out / f"{name}.npy") for name in names},
    }
    for key in ("num_classes", "labels_sha256"):
        if key in data.manifest:
            manifest[key] = data.manifest[key]
    if data.labels is not None:
        with atomic_path(out / "labels.npy") as tmp, open(tmp, "wb") as fh:
            np.save(fh, np.asarray(data.labels))
    atomic_write_json(out / "manifest.json", manifest)
    return out

