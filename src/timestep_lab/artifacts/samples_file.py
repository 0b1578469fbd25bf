"""The ``samples.npz`` file: generated images with their seeds and sampling metadata.

Written by :mod:`timestep_lab.generate.sampling`, read by :mod:`timestep_lab.metrics` (scoring) and the
analyses; it sits below both so that neither has to import the other. Layout::

    images   uint8 [N, H, W, C]
    seeds    int64 [N]          seed of each image (sample i used generator seed seeds[i])
    meta     JSON string        model, model_sha256, nimg, method, steps, eta, use_ema, seed_range, ...
    sha256   JSON string        the sha256 of each member above, checked on load (timestep_lab.artifacts.io.save_npz)

Must not know: models, samplers or metrics.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from timestep_lab.artifacts.io import ArtifactError, npz_checksums, read_npz_member, save_npz

__all__ = ["save_samples", "load_samples", "save_controls", "load_controls"]


def save_samples(path: str | Path, images: np.ndarray, seeds: list[int], meta: dict[str, Any]) -> None:
    """Write ``samples.npz``: ``images`` uint8 NHWC, ``seeds`` int64, ``meta`` (JSON string)."""
    save_npz(path, {"images": images, "seeds": np.asarray(seeds, dtype=np.int64), "meta": np.array(json.dumps(meta))})


def load_samples(path: str | Path) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Read ``samples.npz`` written by :func:`save_samples`, every member checked against its
    recorded sha256; a damaged file is reported by name (:class:`ArtifactError`)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            digests = npz_checksums(path, z)
            images, seeds, meta = (read_npz_member(path, z, k, digests) for k in ("images", "seeds", "meta"))
            meta = json.loads(str(meta))
    except FileNotFoundError:
        raise ArtifactError(f"{path}: samples file not found") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise ArtifactError(f"{path}: corrupted samples file ({exc})") from None
    if images.dtype != np.uint8 or images.ndim != 4 or len(seeds) != len(images):
        raise ArtifactError(f"{path}: malformed samples (images {images.dtype}{list(images.shape)}, {len(seeds)} seeds)")
    return images, seeds, meta


def save_controls(path: str | Path, seeds: np.ndarray, controls: dict[str, np.ndarray]) -> None:
    """Write ``consistency_controls.npz``: ``seeds`` and one uint8 NHWC image array per closed-form
    control (the same seeds), with each member's sha256 (:func:`save_npz`, atomic)."""
    if "seeds" in controls:
        raise ValueError("a control cannot be called 'seeds'")
    save_npz(path, {"seeds": np.asarray(seeds), **controls})


def load_controls(path: str | Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Read a file written by :func:`save_controls`, every member checked against its recorded
    sha256: ``(seeds, {control: images})``; a damaged file is reported by name (:class:`ArtifactError`)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            digests = npz_checksums(path, z)
            arrays = {k: read_npz_member(path, z, k, digests) for k in z.files if k in digests}  # written order
    except FileNotFoundError:
        raise ArtifactError(f"{path}: controls file not found") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
        raise ArtifactError(f"{path}: corrupted controls file ({exc})") from None
    if "seeds" not in arrays:
        raise ArtifactError(f"{path}: has no 'seeds'")
    seeds = arrays.pop("seeds")
    return seeds, arrays
