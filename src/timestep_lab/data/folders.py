"""Image-folder data sets: CelebA-HQ (a flat or nested folder of images) and ImageNet
(``<root>/{train,val}/<wnid>/*.JPEG``, ADM's centre crop)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from timestep_lab.data.raw import (
    DataError,
    RawData,
    convert_images,
    crop_center,
    image_files,
    need_resolution,
    need_source,
    register_dataset,
)

__all__ = ['CELEBAHQ_SUFFIXES', 'IMAGENET_SUFFIXES', 'center_crop_arr']


# -- celebahq

CELEBAHQ_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp"})


def _resize_short_side_crop(img: Image.Image, size: int) -> np.ndarray:
    """Bicubic resize (box pre-reduction, ``reducing_gap=3``) so the shorter side is ``size``,
    then the centre square: uint8 [size, size, 3]."""
    w, h = img.size
    scale = size / min(w, h)
    new = (size, max(size, round(h * scale))) if w <= h else (max(size, round(w * scale)), size)
    return crop_center(img.resize(new, Image.BICUBIC, reducing_gap=3.0), size)


@register_dataset("celebahq")
def _prepare_celebahq(source: Path | None, split: str, resolution: int | None) -> RawData:
    """A folder of images (png/jpg/jpeg/webp, recursive, sorted by relative path) -> uint8
    [N, resolution, resolution, 3]: shorter side resized to ``resolution``, centre-cropped.

    No labels. ``split`` is ``train`` (or ``all``; the same images). ``source_sha256`` covers
    every file's relative path and bytes (see :func:`convert_images`).
    """
    source, size = need_source("celebahq", source), need_resolution("celebahq", resolution)
    if split not in ("train", "all"):
        raise DataError(f"celebahq: only split train (or all) exists, got {split!r}")
    if not source.is_dir():
        raise DataError(f"{source}: celebahq source must be a folder of images")
    files = image_files(source, CELEBAHQ_SUFFIXES, recursive=True)
    if not files:
        raise DataError(f"{source}: no images ({', '.join(sorted(CELEBAHQ_SUFFIXES))}) found")
    images, src_hash = convert_images(source, files, size, _resize_short_side_crop, "celebahq")
    return RawData(images, None, str(source), src_hash)


# -- imagenet

IMAGENET_SUFFIXES = frozenset({".jpeg", ".jpg", ".png"})


def center_crop_arr(img: Image.Image, size: int) -> np.ndarray:
    """ADM (guided-diffusion) ``center_crop_arr``: uint8 [size, size, 3].

    Halve with ``Image.BOX`` while the shorter side is >= 2 * size, resize so the shorter side
    is ``size`` (``round(x * size / min(w, h))``, ``Image.BICUBIC``), crop the centre.
    """
    while min(*img.size) >= 2 * size:
        img = img.resize(tuple(x // 2 for x in img.size), resample=Image.BOX)
    scale = size / min(*img.size)
    img = img.resize(tuple(round(x * scale) for x in img.size), resample=Image.BICUBIC)
    return crop_center(img, size)


def _imagenet_folder(source: Path, split: str) -> Path:
    """``source/<split>``, or ``source`` itself when it is named ``<split>``."""
    if (source / split).is_dir():
        return source / split
    if source.name == split and source.is_dir():
        return source
    raise DataError(f"{source / split}: ImageNet {split} folder missing (expected <root>/{split}/<wnid>/*.JPEG)")


def _wnids(folder: Path) -> list[str]:
    """Sorted class folder names (WordNet ids) of a split folder."""
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


@register_dataset("imagenet")
def _prepare_imagenet(source: Path | None, split: str, resolution: int | None) -> RawData:
    """ILSVRC ``<root>/<split>/<wnid>/*.JPEG`` -> uint8 [N, resolution, resolution, 3] with
    :func:`center_crop_arr`, int64 labels = index of the wnid in sorted order.

    ``split``: ``train`` or ``val`` (``val`` must use the same ``<wnid>/`` layout; its labels
    use the train classes when ``<root>/train`` exists). ``source`` may also be the split
    folder itself. The manifest gets ``classes`` (the wnids). ``source_sha256`` as for celebahq.
    """
    source, size = need_source("imagenet", source), need_resolution("imagenet", resolution)
    if split not in ("train", "val"):
        raise DataError(f"imagenet: split must be train or val, got {split!r}")
    folder = _imagenet_folder(source, split)
    train = folder.parent / "train"
    classes = _wnids(train if split == "val" and train.is_dir() else folder)
    if not classes:
        raise DataError(f"{folder}: no class folders (<wnid>/) found")
    unknown = sorted(set(_wnids(folder)) - set(classes))
    if unknown:
        raise DataError(f"{folder}: class folders {unknown[:3]} are not among the {len(classes)} train classes")
    files, labels = [], []
    for label, wnid in enumerate(classes):
        found = image_files(folder / wnid, IMAGENET_SUFFIXES, recursive=False) if (folder / wnid).is_dir() else []
        files += found
        labels += [label] * len(found)
    if not files:
        raise DataError(f"{folder}: no images ({', '.join(sorted(IMAGENET_SUFFIXES))}) in the class folders")
    images, src_hash = convert_images(folder, files, size, center_crop_arr, f"imagenet {split}")
    return RawData(images, np.asarray(labels, dtype=np.int64), str(folder), src_hash,
                   {"classes": classes, "num_classes": len(classes)})
