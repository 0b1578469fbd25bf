"""Raw data sets -> :class:`RawData`: the preparer registry and the helpers the preparers share
(reading, resizing and hashing image files). One preparer per file beside this one."""

from __future__ import annotations

import hashlib
import io
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from timestep_lab.artifacts.io import ArtifactError

log = logging.getLogger(__name__)

__all__ = ["DataError", "RawData", "DATASETS", "register_dataset"]


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


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------ shared helpers

PROGRESS_MIN_IMAGES = 300  # show a progress bar only when converting more images than this


def need_source(name: str, source: Path | None) -> Path:
    if source is None:
        raise DataError(f"{name}: a source path is required (--source)")
    return source


def need_resolution(name: str, resolution: int | None) -> int:
    if resolution is None or int(resolution) <= 0:
        raise DataError(f"{name}: a positive resolution is required (--resolution), got {resolution}")
    return int(resolution)


def _progress(items: list, desc: str):
    """``items`` wrapped in a tqdm bar (silent for small jobs)."""
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit="img", disable=len(items) <= PROGRESS_MIN_IMAGES)


def _read_rgb(path: Path) -> tuple[Image.Image, bytes]:
    """Decode one image file as RGB; returns the image and the file's bytes (for hashing)."""
    try:
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            return img.convert("RGB"), data
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise DataError(f"{path}: unreadable or corrupt image ({exc})") from None


def crop_center(img: Image.Image, size: int) -> np.ndarray:
    """uint8 [size, size, 3]: the centre square of ``img`` (ADM's offsets: ``(h - size) // 2``)."""
    arr = np.asarray(img)
    y, x = (arr.shape[0] - size) // 2, (arr.shape[1] - size) // 2
    return arr[y:y + size, x:x + size]


def convert_images(root: Path, files: list[Path], size: int, convert: Callable[[Image.Image, int], np.ndarray],
                    desc: str) -> tuple[np.ndarray, str]:
    """Decode and convert ``files`` into one preallocated uint8 [N, size, size, 3] array.

    Also returns the sha256 over every file, in order, of ``relative path (UTF-8), NUL,
    8-byte little-endian length, file bytes`` (paths relative to ``root``, ``/``-separated).
    """
    images = np.empty((len(files), size, size, 3), dtype=np.uint8)
    digest = hashlib.sha256()
    for i, path in enumerate(_progress(files, desc)):
        img, data = _read_rgb(path)
        images[i] = convert(img, size)
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + len(data).to_bytes(8, "little"))
        digest.update(data)
    return images, digest.hexdigest()


def image_files(folder: Path, suffixes: frozenset[str], recursive: bool) -> list[Path]:
    """Image files under ``folder`` (suffix case-insensitive), sorted by relative path."""
    candidates = folder.rglob("*") if recursive else folder.iterdir()
    files = [p for p in candidates if p.suffix.lower() in suffixes and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())
