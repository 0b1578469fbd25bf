"""Data set preparation and loading.

``prepare(name, source, out_dir, split=..., resolution=...)`` converts a raw data set into a
*prepared folder*::

    out_dir/images.npy      uint8 [N, H, W, C] (NHWC), memory-mappable
    out_dir/labels.npy      int64 [N] class labels (when the data set has them)
    out_dir/manifest.json   {"dataset", "split", "count", "shape", "layout", "source",
                             "source_sha256", "images_sha256", ...}

Preparers (registry ``DATASETS``):

``digits``    scikit-learn's bundled 8x8 handwritten digits (1,797 images, 0..16 scaled to
              0..255), split 80/20 into train/test with a fixed permutation. Needs no network.
``cifar10``   the official ``cifar-10-python.tar.gz`` or a folder with its extracted
              ``data_batch_1..5`` / ``test_batch`` pickles (3x32x32).
``celebahq``  a folder of images, resized (shorter side) and centre-cropped to ``resolution``.
``imagenet``  an ILSVRC-style ``train/<wnid>/*.JPEG`` tree, ADM centre crop to ``resolution``.

Training reads a prepared folder with :class:`PreparedData` and draws batches with
:class:`Loader` (whole array in memory, uint8 -> [-1, 1] conversion and flips on the device).
Every error names the file it is about.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from timestep_lab.io import ArtifactError, atomic_path, atomic_write_json, read_json, sha256_file

__all__ = [
    "DataError",
    "DATASETS",
    "prepare",
    "PreparedData",
    "Loader",
    "IndexStream",
    "to_float",
    "to_uint8",
]


class DataError(ArtifactError):
    """A raw or prepared data file is missing, unreadable or malformed (the message names it)."""


@dataclass
class RawData:
    """What a preparer returns: uint8 NHWC images, optional labels, provenance."""

    images: np.ndarray
    labels: np.ndarray | None
    source: str
    source_sha256: str
    extra: dict[str, Any] | None = None


# name -> function(source: Path | None, split: str, resolution: int | None) -> RawData
DATASETS: dict[str, Callable[..., RawData]] = {}


def register_dataset(name: str) -> Callable:
    def deco(fn: Callable[..., RawData]) -> Callable[..., RawData]:
        DATASETS[name] = fn
        return fn

    return deco


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------ digits

DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


@register_dataset("digits")
def _prepare_digits(source: Path | None, split: str, resolution: int | None) -> RawData:
    """scikit-learn's bundled digits (UCI ML hand-written digits test set), 8x8 grey."""
    import sklearn.datasets

    if split not in ("train", "test", "all"):
        raise DataError(f"digits: split must be train, test or all, got {split!r}")
    if resolution not in (None, 8):
        raise DataError(f"digits: images are 8x8; resolution {resolution} is not supported")
    bunch = sklearn.datasets.load_digits()
    images = np.rint(bunch.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)[..., None]  # [N, 8, 8, 1]
    labels = bunch.target.astype(np.int64)
    perm = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(images))
    n_test = int(round(len(images) * DIGITS_TEST_FRACTION))
    index = {"train": np.sort(perm[n_test:]), "test": np.sort(perm[:n_test]), "all": np.arange(len(images))}[split]
    data_file = Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz"
    src_hash = sha256_file(data_file) if data_file.is_file() else _sha256_bytes(np.ascontiguousarray(bunch.images).tobytes())
    return RawData(images[index], labels[index], f"sklearn.datasets.load_digits ({data_file.name})", src_hash,
                   {"split_seed": DIGITS_SPLIT_SEED, "test_fraction": DIGITS_TEST_FRACTION})


# ------------------------------------------------------------------------------ prepare


def prepare(name: str, source: str | Path | None, out_dir: str | Path, *, split: str = "train",
            resolution: int | None = None) -> Path:
    """Prepare data set ``name`` from ``source`` into ``out_dir`` (see module docstring).

    Files are written atomically; ``manifest.json`` last, so a folder with a manifest is complete.
    """
    if name not in DATASETS:
        raise DataError(f"unknown data set '{name}'; choose one of: {', '.join(sorted(DATASETS))}")
    src = None if source is None else Path(source)
    if src is not None and not src.exists():
        raise DataError(f"{src}: source for data set '{name}' not found")
    raw = DATASETS[name](src, split, resolution)
    images = np.ascontiguousarray(raw.images)
    if images.dtype != np.uint8 or images.ndim != 4:
        raise DataError(f"{name}: preparer returned {images.dtype} array of shape {images.shape}, expected uint8 NHWC")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "images.npy") as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, images)
    manifest: dict[str, Any] = {
        "dataset": name,
        "split": split,
        "count": int(images.shape[0]),
        "shape": [int(s) for s in images.shape[1:]],
        "layout": "NHWC",
        "dtype": "uint8",
        "source": raw.source,
        "source_sha256": raw.source_sha256,
        "images_sha256": sha256_file(out / "images.npy"),
    }
    if raw.labels is not None:
        labels = np.ascontiguousarray(raw.labels.astype(np.int64))
        if labels.shape != (images.shape[0],):
            raise DataError(f"{name}: {labels.shape[0]} labels for {images.shape[0]} images")
        with atomic_path(out / "labels.npy") as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, labels)
        manifest["num_classes"] = int(labels.max()) + 1 if len(labels) else 0
        manifest["labels_sha256"] = sha256_file(out / "labels.npy")
    if raw.extra:
        manifest.update(raw.extra)
    atomic_write_json(out / "manifest.json", manifest)
    return out


# ------------------------------------------------------------------------------ load


class PreparedData:
    """A prepared folder: ``images`` (uint8 NHWC, memory-mapped), ``labels`` and ``manifest``.

    :param verify: also check the sha256 of ``images.npy`` against the manifest (reads the file).
    """

    def __init__(self, path: str | Path, verify: bool = False):
        self.path = Path(path)
        manifest_file = self.path / "manifest.json"
        if not self.path.is_dir():
            raise DataError(f"{self.path}: prepared data folder not found (run `python -m timestep_lab prepare`)")
        if not manifest_file.is_file():
            raise DataError(f"{manifest_file}: manifest missing; the folder was not prepared completely")
        self.manifest = read_json(manifest_file)
        images_file = self.path / "images.npy"
        try:
            self.images = np.load(images_file, mmap_mode="r")
        except FileNotFoundError:
            raise DataError(f"{images_file}: image array missing") from None
        except (ValueError, OSError) as exc:
            raise DataError(f"{images_file}: unreadable image array ({exc})") from None
        expected = (self.manifest.get("count"), *self.manifest.get("shape", []))
        if self.images.dtype != np.uint8 or tuple(self.images.shape) != tuple(expected):
            raise DataError(f"{images_file}: array is {self.images.dtype}{list(self.images.shape)}, "
                            f"manifest says uint8{list(expected)}")
        if verify and sha256_file(images_file) != self.manifest.get("images_sha256"):
            raise DataError(f"{images_file}: sha256 does not match {manifest_file}; the file is corrupted or was changed")
        labels_file = self.path / "labels.npy"
        self.labels = np.load(labels_file) if labels_file.is_file() else None

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def resolution(self) -> int:
        return int(self.images.shape[1])

    @property
    def channels(self) -> int:
        return int(self.images.shape[3])


def to_float(images_nchw_uint8: Tensor) -> Tensor:
    """uint8 [0, 255] -> float32 [-1, 1]: ``x / 127.5 - 1``."""
    return images_nchw_uint8.float().div_(127.5).sub_(1.0)


def to_uint8(x: Tensor) -> Tensor:
    """float [-1, 1] -> uint8 [0, 255] (rounded, clamped)."""
    return ((x.float() + 1.0) * 127.5).round_().clamp_(0, 255).to(torch.uint8)


class IndexStream:
    """Endless shuffled epochs over ``n`` items, resumable: epoch ``e`` is the permutation
    drawn from ``Generator().manual_seed(seed + e)``; the state is ``(epoch, position)``."""

    def __init__(self, n: int, seed: int):
        if n <= 0:
            raise DataError("cannot draw batches from an empty data set")
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> Tensor:
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + epoch))

    def next(self, batch_size: int) -> Tensor:
        """The next ``batch_size`` indices, ``LongTensor[batch_size]`` (crossing epochs as needed)."""
        out = []
        need = batch_size
        while need:
            take = min(need, self.n - self.pos)
            out.append(self._perm[self.pos:self.pos + take])
            self.pos += take
            need -= take
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
        return torch.cat(out)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos, "seed": self.seed, "n": self.n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["n"] != self.n:
            raise DataError(f"checkpoint was trained on {state['n']} images, the data set has {self.n}")
        self.seed, self.epoch, self.pos = int(state["seed"]), int(state["epoch"]), int(state["pos"])
        self._perm = self._permutation(self.epoch)


class Loader:
    """Batches from a prepared data set held in memory as uint8 NCHW (pinned when on CUDA).

    ``batch(indices, generator)`` returns ``float32 [B, C, H, W]`` in [-1, 1] on ``device``;
    with ``hflip`` each image is flipped with probability 1/2 using ``generator`` (on the
    device, so augmentation never stalls the accelerator).
    """

    def __init__(self, data: PreparedData, device: torch.device | str = "cpu", hflip: bool = False):
        self.device = torch.device(device)
        self.hflip = hflip
        images = torch.from_numpy(np.array(data.images)).permute(0, 3, 1, 2).contiguous()
        if self.device.type == "cuda":
            images = images.pin_memory()
        self.images = images  # uint8 [N, C, H, W] on the host

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def batch(self, indices: Tensor, generator: torch.Generator | None = None) -> Tensor:
        x = self.images.index_select(0, indices.cpu())
        if self.device.type == "cuda":
            x = x.pin_memory().to(self.device, non_blocking=True)
        x = to_float(x)
        if self.hflip:
            if generator is None:
                raise ValueError("hflip needs a generator")
            flip = torch.rand(x.shape[0], generator=generator, device=generator.device) < 0.5
            x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
        return x
