"""Reading a prepared folder, and the uint8 <-> [-1, 1] pixel conversions."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from timestep_lab.data.raw import DataError
from timestep_lab.artifacts.io import read_json, sha256_file

__all__ = ['PreparedData', 'to_float', 'to_uint8', 'LOCATION_KEYS', 'data_identity']

#: manifest fields that say where the raw data lay, not what it is (``source_sha256`` says that)
LOCATION_KEYS = ("source", "source_path")


def data_identity(manifest: dict) -> str:
    """sha256 of what identifies a prepared folder's data: its manifest without
    :data:`LOCATION_KEYS`, as sorted compact JSON. Two machines that prepared the same images
    from the same raw bytes get the same identity wherever the raw file lay (an mnist5k source
    inside a venv, a CIFAR-10 tarball in a home folder); the bytes of ``images.npy`` and
    ``labels.npy`` are in it through their sha256."""
    kept = {k: v for k, v in manifest.items() if k not in LOCATION_KEYS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class PreparedData:
    """A prepared folder: ``images`` (uint8 NHWC, memory-mapped), ``labels`` and ``manifest``.

    Every reader verifies the folder before it uses it (``verify``, the default): the sha256 of
    ``images.npy`` (and of ``labels.npy``, when the manifest records one) must be the one the
    manifest recorded when ``prepare`` wrote it, so a changed or damaged array is a
    :class:`DataError` naming the file, never a model trained or scored on other images.
    :attr:`identity` is that content identity, which every artifact made from the folder records.

    :param verify: check the content hashes (reads the files once; ``False`` only where just the
        shape is needed).
    """

    def __init__(self, path: str | Path, verify: bool = True):
        self.path = Path(path)
        manifest_file = self.path / "manifest.json"
        if not self.path.is_dir():
            raise DataError(f"{self.path}: prepared data folder not found (run `python -m timestep_lab prepare`)")
        if not manifest_file.is_file():
            raise DataError(f"{manifest_file}: manifest missing; the folder was not prepared completely")
        self.manifest = _check_manifest(manifest_file, read_json(manifest_file))
        images_file = self.path / "images.npy"
        try:
            self.images = np.load(images_file, mmap_mode="r")
        except FileNotFoundError:
            raise DataError(f"{images_file}: image array missing") from None
        except (ValueError, OSError) as exc:
            raise DataError(f"{images_file}: unreadable image array ({exc})") from None
        expected = (self.manifest["count"], *self.manifest["shape"])
        if self.images.dtype != np.uint8 or tuple(self.images.shape) != tuple(expected):
            raise DataError(f"{images_file}: array is {self.images.dtype}{list(self.images.shape)}, "
                            f"manifest says uint8{list(expected)}")
        if len(self.images) == 0:
            raise DataError(f"{images_file}: holds no images")
        if verify and sha256_file(images_file) != self.manifest.get("images_sha256"):
            raise DataError(f"{images_file}: sha256 does not match {manifest_file}; the file is corrupted or was changed")
        labels_file = self.path / "labels.npy"
        try:
            self.labels = np.load(labels_file) if labels_file.is_file() else None
        except (ValueError, OSError) as exc:
            raise DataError(f"{labels_file}: unreadable label array ({exc})") from None
        if self.labels is not None and self.labels.shape != (len(self.images),):
            raise DataError(f"{labels_file}: {list(self.labels.shape)} labels for {len(self.images)} images")
        recorded = self.manifest.get("labels_sha256")
        if verify and self.labels is not None and recorded is not None and sha256_file(labels_file) != recorded:
            raise DataError(f"{labels_file}: sha256 does not match {manifest_file}; the file is corrupted or was changed")

    @property
    def identity(self) -> dict[str, str | None]:
        """The content identity of the folder: ``{"images_sha256", "labels_sha256"}`` as its
        manifest records them (checked against the files when the folder was opened with
        ``verify``). Models, training states and reference statistics record it."""
        return {"images_sha256": self.manifest.get("images_sha256"), "labels_sha256": self.manifest.get("labels_sha256")}

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def resolution(self) -> int:
        return int(self.images.shape[1])

    @property
    def channels(self) -> int:
        return int(self.images.shape[3])


def _check_manifest(path: Path, manifest: Any) -> dict[str, Any]:
    """``manifest`` if it is a JSON object with a ``count`` (int >= 0), a ``shape`` (3 ints > 0)
    and an ``images_sha256`` (text); else :class:`DataError` naming ``path`` and what is wrong."""
    if not isinstance(manifest, dict):
        raise DataError(f"{path}: not a manifest (a JSON object is expected, got a {type(manifest).__name__}); "
                        f"prepare the folder again")
    count, shape, sha = manifest.get("count"), manifest.get("shape"), manifest.get("images_sha256")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise DataError(f"{path}: 'count' must be a whole number >= 0, got {count!r}")
    if not isinstance(shape, list) or len(shape) != 3 or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in shape):
        raise DataError(f"{path}: 'shape' must be [height, width, channels] (3 whole numbers > 0), got {shape!r}")
    if not isinstance(sha, str):
        raise DataError(f"{path}: records no images_sha256 (text); prepare the folder again")
    return manifest


def to_float(images_nchw_uint8: Tensor) -> Tensor:
    """uint8 [0, 255] -> float32 [-1, 1]: ``x / 127.5 - 1``."""
    return images_nchw_uint8.float().div_(127.5).sub_(1.0)


def to_uint8(x: Tensor) -> Tensor:
    """float [-1, 1] -> uint8 [0, 255] (rounded, clamped)."""
    return ((x.float() + 1.0) * 127.5).round_().clamp_(0, 255).to(torch.uint8)
