"""Reference statistics: computed once per data set and extractor into one declared file.

:func:`compute_reference` writes ``REF.npz``; :func:`load_reference` opens it, reading each
array on first use::

    meta          JSON string: format, extractor, label, feature_dim, feature layer, weights
                  sha256 and file name per tool, data folder + manifest hashes, count, tool versions
    tf_features   float32 [N, D]  features as torch-fidelity extracted them
    tf_mu         float32 [D]     }  torch-fidelity's fid_features_to_statistics
    tf_sigma      float64 [D, D]  }
    cf_features   float32 [N, D]  features as clean-fid's get_folder_features extracted them
    cf_mu, cf_sigma               mean and covariance of cf_features
    sha256        JSON string     the sha256 of each member above (:func:`timestep_lab.artifacts.io.save_npz`)

Every member is checked when it is read: against its sha256 (a flipped bit is an error naming
the file, never another FID), and the arrays for shape (``[count, feature_dim]``,
``[feature_dim]``, ``[feature_dim, feature_dim]``) and finiteness, and each covariance for
being one (symmetric, positive semi-definite); such statistics are refused when computed, too, so
a NaN or a matrix that is no covariance never reaches a metric.

Must not know: samples files, metrics.json, or how images were generated.
"""

from __future__ import annotations

import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import torch

from timestep_lab.artifacts.checksums import NPZ_CHECKSUMS
from timestep_lab.artifacts.io import ArtifactError, npz_checksums, read_npz_member, save_npz, sha256_file
from timestep_lab.config.schema import MIN_FID_SAMPLES
from timestep_lab.errors import InputError
from timestep_lab.metrics.extractors import TOOLS, FeatureExtractorSpec, is_feature_net, to_extractor_input
from timestep_lab.metrics.fid import cf_features, tf_features, tool_versions
from timestep_lab.metrics.progress import stages

__all__ = ["REFERENCE_FORMAT", "Reference", "compute_reference", "load_reference", "reference_subset",
           "REFERENCE_SUBSET_SEED", "check_statistics"]

NPZ_RESERVED = (NPZ_CHECKSUMS,)

#: seed of the reference subset when only some of the training images are used
REFERENCE_SUBSET_SEED = 0

REFERENCE_FORMAT = "timestep_lab.reference/1"


def _expected_shape(key: str, count: int, dim: int) -> tuple[int, ...]:
    """The shape member ``key`` (``tf_mu``, ``cf_features``, ...) must have."""
    kind = key.split("_", 1)[1]
    return {"features": (count, dim), "mu": (dim,), "sigma": (dim, dim)}[kind]


def check_statistics(path: str | Path, key: str, arr: np.ndarray, count: int, dim: int) -> np.ndarray:
    """``arr`` (member ``key`` of the reference ``path``) if its shape fits ``count`` images of
    ``dim`` features and every value is finite; else :class:`ArtifactError` naming both."""
    want = _expected_shape(key, count, dim)
    if tuple(arr.shape) != want:
        raise ArtifactError(f"{path}: '{key}' is {list(arr.shape)}, expected {list(want)} ({count} images of "
                            f"{dim} features)")
    if not np.isfinite(arr).all():
        raise ArtifactError(f"{path}: '{key}' holds {int((~np.isfinite(arr)).sum())} NaN or infinite values")
    if key.endswith("_sigma"):
        _check_covariance(path, key, arr)
    return arr


def _check_covariance(path: str | Path, key: str, sigma: np.ndarray) -> None:
    """A covariance matrix is symmetric and positive semi-definite: else a valid checksum still
    guards a matrix that gives FID -5774 (or a complex square root). Symmetry to 1e-6 of its
    largest entry; semi-definite by a Cholesky factorisation of ``sigma + eps I`` (eps = 1e-6 of
    its mean variance, room for rounding), a tenth of the cost of its eigenvalues, which are
    computed only to say how far off a refused one is."""
    s = np.asarray(sigma, dtype=np.float64)
    scale = float(np.abs(s).max()) if s.size else 0.0
    asym = float(np.abs(s - s.T).max()) if s.size else 0.0
    if asym > 1e-6 * max(scale, 1e-300):
        raise ArtifactError(f"{path}: '{key}' is not a covariance matrix (not symmetric: entries differ from their "
                            f"transpose by up to {asym:.3g})")
    eps = 1e-6 * max(float(np.trace(s)) / max(len(s), 1), 1e-12)
    try:
        np.linalg.cholesky(s + eps * np.eye(len(s)))
    except np.linalg.LinAlgError:
        lowest = float(np.linalg.eigvalsh((s + s.T) / 2).min())
        raise ArtifactError(f"{path}: '{key}' is not a covariance matrix (not positive semi-definite: an eigenvalue "
                            f"is {lowest:.3g})") from None


class _NpzArrays(Mapping):
    """The arrays of a reference file, each read (and checked: sha256, shape, finite) on first use
    (FID needs only the statistics, KID and precision/recall the features, which are large for
    Inception)."""

    def __init__(self, path: Path, keys: list[str], digests: Mapping[str, str], count: int, dim: int):
        self.path, self.keys_, self.cache = path, keys, {}
        self.digests, self.count, self.dim = digests, count, dim

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.cache:
            if key not in self.keys_:
                raise KeyError(key)
            try:
                with np.load(self.path, allow_pickle=False) as z:
                    arr = read_npz_member(self.path, z, key, self.digests)
            except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
                raise ArtifactError(f"{self.path}: corrupted reference file ({key}: {exc})") from None
            self.cache[key] = check_statistics(self.path, key, arr, self.count, self.dim)
        return self.cache[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_)

    def __len__(self) -> int:
        return len(self.keys_)


@dataclass
class Reference:
    """A reference file: its path and sha256, ``meta`` (see the module docstring) and ``arrays``."""

    path: Path
    sha256: str
    meta: dict[str, Any]
    arrays: Mapping[str, np.ndarray]

    @property
    def count(self) -> int:
        return int(self.meta["count"])


def reference_subset(count: int, n: int | None, seed: int = REFERENCE_SUBSET_SEED) -> tuple[np.ndarray, str]:
    """Which of ``count`` prepared images the reference statistics use, and how to say so.

    All of them when ``n`` is None or >= count; otherwise ``n`` indices drawn without replacement
    by ``numpy.random.default_rng(seed).permutation(count)[:n]``, sorted. Prepared folders can be
    ordered by class (ImageNet's are grouped by wnid), so the first ``n`` would cover only the
    first classes (docs/methods.md §8.5). Returns ``(indices [n] int64, description)``."""
    if n is None or n >= count:
        return np.arange(count, dtype=np.int64), f"all {count}"
    if n <= 0:
        raise InputError(f"reference subset size must be positive, got {n}")
    idx = np.sort(np.random.default_rng(seed).permutation(count)[:n]).astype(np.int64)
    return idx, f"{n} of {count}, seeded random subset (numpy default_rng({seed}).permutation, sorted)"


def compute_reference(images_nhwc: np.ndarray, out: str | Path, spec: FeatureExtractorSpec, *,
                      data_info: dict[str, Any] | None = None, device: Any = "cpu", batch_size: int = 500,
                      progress: bool = False) -> Reference:
    """Extract the reference features with each tool of ``spec`` and write ``out`` (REF.npz) atomically
    (``progress``: a bar over the tools)."""
    device = torch.device(device)
    images = to_extractor_input(images_nhwc, spec)
    if len(images) < MIN_FID_SAMPLES:
        raise ArtifactError(f"a reference set needs at least {MIN_FID_SAMPLES} images, got {len(images)}")
    arrays: dict[str, np.ndarray] = {}
    for tool in stages([t for t in TOOLS if t in spec.weights], "reference", progress):
        if tool == "torch-fidelity":
            from torch_fidelity.metric_fid import fid_features_to_statistics  # slow to import, only needed here

            feats = tf_features(images, spec, device, batch_size)
            stats = fid_features_to_statistics(torch.from_numpy(feats))
            arrays.update(tf_features=feats, tf_mu=stats["mu"], tf_sigma=stats["sigma"])
        else:
            feats = cf_features(images, spec, device, batch_size).astype(np.float32)
            arrays.update(cf_features=feats, cf_mu=np.mean(feats, axis=0), cf_sigma=np.cov(feats, rowvar=False))
    out = Path(out)
    for key, arr in arrays.items():  # a NaN here would become every run's FID: refuse to write it
        check_statistics(out, key, np.asarray(arr), len(images), spec.feature_dim)
    meta = {
        "format": REFERENCE_FORMAT, "extractor": spec.name, "label": spec.label, "feature_dim": spec.feature_dim,
        "torch_fidelity_extractor": spec.tf_name, "feature_layer": spec.tf_layer, "tools": sorted(spec.weights),
        "feature_weights_sha256": dict(spec.sha256), "feature_weights_file": {t: str(p) for t, p in spec.weights.items()},
        "count": int(len(images)), "image_shape": list(images_nhwc.shape[1:]), "tool_versions": tool_versions(),
        "cleanfid_mode": "clean", "cleanfid_resize": "none (pixels fed as-is)" if is_feature_net(spec.name)
        else "clean (PIL bicubic to 299x299)", "data": data_info or {},
    }
    save_npz(out, {"meta": np.array(json.dumps(meta)), **arrays})
    return load_reference(out)


def load_reference(path: str | Path) -> Reference:
    """Open a reference file written by :func:`compute_reference` (arrays are read, and checked,
    lazily: module docstring)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            digests = npz_checksums(path, z)
            keys = [k for k in z.files if k not in ("meta", *NPZ_RESERVED)]
            meta = json.loads(str(read_npz_member(path, z, "meta", digests)))
    except FileNotFoundError:
        raise ArtifactError(f"{path}: reference statistics file not found (write it with "
                            f"`python -m timestep_lab reference-stats`)") from None
    except KeyError:
        raise ArtifactError(f"{path}: not a timestep_lab reference file (no meta)") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path}: corrupted reference file ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != REFERENCE_FORMAT:
        raise ArtifactError(f"{path}: unsupported reference format "
                            f"{meta.get('format') if isinstance(meta, dict) else None!r}, expected {REFERENCE_FORMAT}")
    unknown = [k for k in keys if k.split("_", 1)[-1] not in ("features", "mu", "sigma")]
    if unknown:
        raise ArtifactError(f"{path}: unexpected member(s) {unknown}")
    try:
        count, dim = int(meta["count"]), int(meta["feature_dim"])
    except (KeyError, TypeError, ValueError):
        raise ArtifactError(f"{path}: its meta has no valid count and feature_dim") from None
    return Reference(path, sha256_file(path), meta, _NpzArrays(path, keys, digests, count, dim))
