"""Raw data set -> prepared folder (``images.npy``, ``labels.npy``, ``manifest.json``; see
:mod:`timestep_lab.data`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from timestep_lab.data.raw import DATASETS, DataError
from timestep_lab.artifacts.io import atomic_path, atomic_write_json, sha256_file

__all__ = ['prepare']


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
    labels = None if raw.labels is None else np.ascontiguousarray(np.asarray(raw.labels).astype(np.int64))
    if labels is not None and labels.shape != (images.shape[0],):
        raise DataError(f"{name}: labels of shape {list(labels.shape)} for {images.shape[0]} images")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("manifest.json", "labels.npy"):  # a previous preparation must not describe the new files
        (out / stale).unlink(missing_ok=True)
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
    if labels is not None:
        with atomic_path(out / "labels.npy") as tmp:
            with open(tmp, "wb") as fh:
                np.save(fh, labels)
        manifest["num_classes"] = int(labels.max()) + 1 if len(labels) else 0
        manifest["labels_sha256"] = sha256_file(out / "labels.npy")
    if raw.extra:
        manifest.update(raw.extra)
    atomic_write_json(out / "manifest.json", manifest)
    return out
