"""The ``samples.npz`` file: generated images with their seeds and sampling metadata.

Written by :mod:`timestep_lab.sampling`, read by :mod:`timestep_lab.metrics` (scoring) and the
analyses; it sits below both so that neither has to import the other. Layout::

    images   uint8 [N, H, W, C]
    seeds    int64 [N]          seed of each image (sample i used generator seed seeds[i])
    meta     JSON string        model, model_sha256, nimg, method, steps, eta, use_ema, seed_range, ...

Must not know: models, samplers or metrics.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from timestep_lab.io import ArtifactError, atomic_path

__all__ = ["save_samples", "load_samples"]


def save_samples(path: str | Path, images: np.ndarray, seeds: list[int], meta: dict[str, Any]) -> None:
    """Write ``samples.npz``: ``images`` uint8 NHWC, ``seeds`` int64, ``meta`` (JSON string)."""
    with atomic_path(path, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, images=images, seeds=np.asarray(seeds, dtype=np.int64), meta=np.array(json.dumps(meta)))


def load_samples(path: str | Path) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Read ``samples.npz`` written by :func:`save_samples`; a damaged file is reported by name."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            images, seeds, meta = z["images"], z["seeds"], json.loads(str(z["meta"]))
    except FileNotFoundError:
        raise ArtifactError(f"{path}: samples file not found") from None
    except (zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError) as exc:
        raise ArtifactError(f"{path}: corrupted samples file ({exc})") from None
    if images.dtype != np.uint8 or images.ndim != 4 or len(seeds) != len(images):
        raise ArtifactError(f"{path}: malformed samples (images {images.dtype}{list(images.shape)}, {len(seeds)} seeds)")
    return images, seeds, meta
