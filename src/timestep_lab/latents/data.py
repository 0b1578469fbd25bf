"""Reading a latent folder (:mod:`timestep_lab.latents.encode`) and drawing training batches.

:class:`LatentData` has what training asks of a prepared folder (``len``, ``resolution``,
``channels``, ``identity``, ``labels``) at the latent shape; :class:`LatentLoader` has
:class:`timestep_lab.data.Loader`'s ``batch(indices, generator)``, returning a fresh posterior
sample ``s * (mu + sigma * n)`` per image. :func:`open_training_data` picks the reader by the
folder's manifest, so a run config's ``data.path`` may name either kind of folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from timestep_lab.artifacts.io import read_json, sha256_file
from timestep_lab.data import DataError, Loader, PreparedData
from timestep_lab.latents.encode import LATENT_ARRAYS

__all__ = ["LatentBank", "LatentData", "LatentLoader", "is_latent_folder", "open_training_data"]


def is_latent_folder(path: str | Path) -> bool:
    """Whether ``path`` holds a latent folder's manifest (``kind: latents``)."""
    manifest = Path(path) / "manifest.json"
    if not manifest.is_file():
        return False
    obj = read_json(manifest)
    return isinstance(obj, dict) and obj.get("kind") == "latents"


class LatentData:
    """A latent folder: ``arrays`` name -> float16 ``[N, c, h, w]`` (memory-mapped), ``labels``,
    ``manifest``; each array's sha256 checked against the manifest (``verify``)."""

    def __init__(self, path: str | Path, verify: bool = True):
        self.path = Path(path)
        manifest_file = self.path / "manifest.json"
        if not manifest_file.is_file():
            raise DataError(f"{manifest_file}: latent manifest missing; encode the data set again "
                            f"(`python -m timestep_lab encode-latents`)")
        self.manifest: dict[str, Any] = read_json(manifest_file)
        if not isinstance(self.manifest, dict) or self.manifest.get("kind") != "latents":
            raise DataError(f"{manifest_file}: not a latent folder's manifest (kind: latents)")
        recorded = self.manifest.get("sha256") or {}
        expected = (int(self.manifest["count"]), *self.manifest["shape"])
        self.arrays: dict[str, np.ndarray] = {}
        for name, flipped in LATENT_ARRAYS:
            if flipped and not self.manifest.get("flip"):
                continue
            file = self.path / f"{name}.npy"
            try:
                arr = np.load(file, mmap_mode="r")
            except (FileNotFoundError, ValueError, OSError) as exc:
                raise DataError(f"{file}: missing or unreadable latent array ({exc})") from None
            if tuple(arr.shape) != expected:
                raise DataError(f"{file}: array is {list(arr.shape)}, {manifest_file} says {list(expected)}")
            if verify and sha256_file(file) != recorded.get(name):
                raise DataError(f"{file}: sha256 does not match {manifest_file}; the file is corrupted or was changed")
            self.arrays[name] = arr
        labels_file = self.path / "labels.npy"
        self.labels = np.load(labels_file) if labels_file.is_file() else None

    @property
    def identity(self) -> dict[str, Any]:
        """The images' identity (the prepared folder's), the VAE's weights and scaling factor, and
        the latent arrays' sha256: what a model trained on the folder records."""
        vae = self.manifest["vae"]
        return {**self.manifest["data"], "vae_sha256": vae["sha256"], "scaling_factor": vae["scaling_factor"],
                "vae": dict(vae), "latents_sha256": dict(sorted(self.manifest["sha256"].items()))}

    @property
    def scaling_factor(self) -> float:
        return float(self.manifest["vae"]["scaling_factor"])

    @property
    def vae(self) -> dict[str, Any]:
        """The manifest's VAE record (:meth:`timestep_lab.latents.vae.VaeInfo.record`)."""
        return dict(self.manifest["vae"])

    def __len__(self) -> int:
        return int(self.manifest["count"])

    @property
    def resolution(self) -> int:
        return int(self.manifest["shape"][1])

    @property
    def channels(self) -> int:
        return int(self.manifest["shape"][0])


class LatentBank:
    """A latent folder's scaled posterior means ``s * mu``, float32 ``[N, c, h, w]``, read by rows
    (``bank[indices]``) from the memory map: the fixed x0 of a latent model's loss and prediction
    profiles (docs/methods.md 7.9; the mean, not a posterior sample, so the bank is the same every
    time). ``lazy_rows`` tells :func:`timestep_lab.studies.profile.profile_bank` to index it as is."""

    lazy_rows = True
    ndim = 4
    dtype = np.dtype(np.float32)

    def __init__(self, data: LatentData):
        self.mean, self.scale = data.arrays["mean"], data.scaling_factor
        self.shape = tuple(int(n) for n in self.mean.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> np.ndarray:
        return (np.asarray(self.mean[rows], np.float32) * np.float32(self.scale)).astype(np.float32)


class LatentLoader:
    """Batches of fresh latent samples: ``batch(indices, generator) -> float32 [B, c, h, w]``
    on ``device``, ``z = s * (mu + sigma * n)`` with ``n`` drawn from ``generator``; with
    ``hflip`` each image's flipped moments are used with probability 1/2 (drawn first, from the
    same generator). The moments are held in host memory as float16."""

    def __init__(self, data: LatentData, device: torch.device | str = "cpu", hflip: bool = False):
        if hflip and "flip_mean" not in data.arrays:
            raise DataError(f"{data.path}: data.hflip is set but the latents were encoded without flipped "
                            f"images; encode them again with flip")
        self.device, self.hflip, self.scale = torch.device(device), hflip, data.scaling_factor
        self.moments = {name: torch.from_numpy(np.array(a)) for name, a in data.arrays.items()}

    def __len__(self) -> int:
        return int(self.moments["mean"].shape[0])

    def bank(self, indices: Tensor) -> Tensor:
        """The fixed x0 of images ``indices``: their scaled posterior means ``s * mu``, float32
        ``[n, c, h, w]`` on the CPU (no noise, no flip: the same every call, as :class:`LatentBank`)."""
        return self.scale * self.moments["mean"].index_select(0, indices.to("cpu", torch.long)).float()

    def batch(self, indices: Tensor, generator: torch.Generator | None = None) -> Tensor:
        if generator is None:
            raise ValueError("a latent batch needs a generator (its posterior noise)")
        idx = indices.to("cpu", torch.long)
        mean, std = (self.moments[k].index_select(0, idx).to(self.device).float() for k in ("mean", "std"))
        if self.hflip:
            flip = (torch.rand(len(idx), generator=generator, device=generator.device) < 0.5).to(self.device)
            fm, fs = (self.moments[k].index_select(0, idx).to(self.device).float() for k in ("flip_mean", "flip_std"))
            mean = torch.where(flip[:, None, None, None], fm, mean)
            std = torch.where(flip[:, None, None, None], fs, std)
        noise = torch.randn(mean.shape, generator=generator, device=generator.device).to(self.device)
        return self.scale * (mean + std * noise)


def open_training_data(path: str | Path, device: torch.device | str = "cpu",
                       hflip: bool = False) -> tuple[PreparedData | LatentData, Loader | LatentLoader]:
    """``(data, loader)`` for the folder ``path``: a latent folder or a prepared image folder."""
    if is_latent_folder(path):
        data = LatentData(path)
        return data, LatentLoader(data, device, hflip)
    prepared = PreparedData(path)
    return prepared, Loader(prepared, device, hflip)
