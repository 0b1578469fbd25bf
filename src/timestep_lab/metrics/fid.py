"""FID, KID and precision/recall through torch-fidelity and clean-fid: the two library adapters.

Both libraries compute every number we report; :func:`frechet_distance` here is only an
independent cross-check for tests. Each adapter extracts features with its library's own data
loop (``tf_features``, ``cf_features``; used for the reference set too) and scores samples
against reference statistics that are never recomputed, and no global cache is touched:

* torch-fidelity: ``calculate_metrics(input1=<samples>, input2=<placeholder>,
  input2_cache_name="reference", cache_root=<fresh temp dir>)``; the temp dir is filled from
  REF.npz with exactly the files torch-fidelity's cache would hold (FID statistics; features
  too when KID or precision/recall are asked) and deleted afterwards. The placeholder data set
  raises if torch-fidelity ever tries to read reference images, so a change of its cache layout
  fails loudly instead of silently recomputing.
* clean-fid: the samples go to a temp folder of ``.npy`` files and through
  ``cleanfid.fid.get_folder_features``; ``cleanfid.fid.frechet_distance`` (through
  :func:`clean_fid_frechet`, which stands in for it under SciPy >= 1.18) and
  ``cleanfid.fid.kernel_distance`` score them against ``cf_mu/cf_sigma/cf_features`` -- the same
  steps as ``compute_fid``'s folder-vs-statistics mode, whose statistics would otherwise have to
  live inside clean-fid's package folder (``make_custom_stats``). ``compute_kid`` cannot take a
  custom feature model in clean-fid 0.1.35, hence ``kernel_distance`` for KID.

The library submodules are imported inside the functions: they are slow to import and only
needed when a metric is computed.

Must not know: how the reference file is laid out on disk (a reference is anything with
``arrays`` and ``count``), samples files, metrics.json, or sampling.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol

import numpy as np
import torch
from torch import Tensor, nn

from timestep_lab.config import EvalConfig
from timestep_lab.metrics.extractors import CleanFidTrainedCNN, FeatureExtractorSpec, _Images, is_feature_net, keep_pixels
from timestep_lab.metrics.features import load_feature_net

__all__ = ["TF_CACHE_NAME", "PRC_NEIGHBORHOOD", "ReferenceStats", "clean_fid_frechet", "frechet_distance", "tool_versions",
           "tf_features", "cf_features", "torch_fidelity_metrics", "clean_fid_metrics"]

TF_CACHE_NAME = "reference"  # torch-fidelity input2_cache_name inside the per-call temp cache
PRC_NEIGHBORHOOD = 3  # k of the k-NN balls of precision/recall (torch-fidelity's default)


class ReferenceStats(Protocol):
    """What the adapters read from a reference (:class:`timestep_lab.metrics.reference.Reference`):
    ``arrays`` with ``tf_mu``/``tf_sigma``/``tf_features`` and ``cf_mu``/``cf_sigma``/``cf_features``
    (see :mod:`timestep_lab.metrics.reference`), and ``count`` reference images."""

    arrays: Mapping[str, np.ndarray]

    @property
    def count(self) -> int: ...


@functools.lru_cache(maxsize=None)
def _versions() -> tuple[tuple[str, str], ...]:
    from importlib.metadata import version

    import torch_fidelity

    return (("torch-fidelity", torch_fidelity.__version__), ("clean-fid", version("clean-fid")))


def tool_versions() -> dict[str, str]:
    """Installed versions of the two metric libraries."""
    return dict(_versions())


def frechet_distance(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray) -> float:
    """Fréchet distance between N(mu1, sigma1) and N(mu2, sigma2) (Dowson & Landau 1982)::

        d^2 = |mu1 - mu2|^2 + tr(sigma1) + tr(sigma2) - 2 tr((sigma1^1/2 sigma2 sigma1^1/2)^1/2)

    Evaluated through symmetric eigen-decompositions (a different route from both libraries,
    which makes it a useful cross-check). Used by tests only; reported numbers come from the
    libraries.
    """
    mu1, mu2 = np.atleast_1d(np.asarray(mu1, np.float64)), np.atleast_1d(np.asarray(mu2, np.float64))
    s1, s2 = np.atleast_2d(np.asarray(sigma1, np.float64)), np.atleast_2d(np.asarray(sigma2, np.float64))
    if mu1.shape != mu2.shape or s1.shape != s2.shape or s1.shape != (mu1.size, mu1.size):
        raise ValueError(f"shape mismatch: mu {mu1.shape} vs {mu2.shape}, sigma {s1.shape} vs {s2.shape}")
    w, v = np.linalg.eigh((s1 + s1.T) / 2)
    root1 = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    m = root1 @ s2 @ root1
    tr_covmean = np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0, None)).sum()
    diff = mu1 - mu2
    return float(diff @ diff + np.trace(s1) + np.trace(s2) - 2.0 * tr_covmean)


@functools.lru_cache(maxsize=None)
def _takes_disp(sqrtm: Callable) -> bool:
    """Whether this ``scipy.linalg.sqrtm`` still has ``disp`` (SciPy < 1.18); asked once per function,
    not once per Fréchet distance (the bootstrap computes hundreds)."""
    import inspect

    return "disp" in inspect.signature(sqrtm).parameters


def clean_fid_frechet(mu1: np.ndarray, sigma1: np.ndarray, mu2: np.ndarray, sigma2: np.ndarray) -> float:
    """clean-fid's Fréchet distance (``cleanfid.fid.frechet_distance``; ``mu`` [D], ``sigma`` [D, D]).

    clean-fid 0.1.35, its newest release, calls ``scipy.linalg.sqrtm(..., disp=False)``, an
    argument SciPy 1.18 removed (deprecated in 1.16): with a newer SciPy than our lock pins, as on
    the GPU image where the smoke study first ran on CUDA, every clean-fid score raised TypeError.
    There this runs clean-fid's same steps with ``sqrtm(A)``, which returns the root alone in
    every SciPy version: the root of ``sigma1 sigma2`` (with ``1e-6`` added to both diagonals when
    it is not finite), its real part when the imaginary part of its diagonal is under ``1e-3``,
    then ``|mu1 - mu2|^2 + tr(sigma1) + tr(sigma2) - 2 tr(root)``. Same number as the library's
    on the same SciPy.
    """
    from cleanfid import fid as cfid
    from scipy import linalg

    if _takes_disp(linalg.sqrtm):
        return float(cfid.frechet_distance(mu1, sigma1, mu2, sigma2))
    mu1, mu2, sigma1, sigma2 = np.atleast_1d(mu1), np.atleast_1d(mu2), np.atleast_2d(sigma1), np.atleast_2d(sigma2)
    if mu1.shape != mu2.shape or sigma1.shape != sigma2.shape:
        raise ValueError(f"shape mismatch: mu {mu1.shape} vs {mu2.shape}, sigma {sigma1.shape} vs {sigma2.shape}")
    root = linalg.sqrtm(sigma1.dot(sigma2))
    if not np.isfinite(root).all():  # nearly singular product: clean-fid's offset
        offset = np.eye(sigma1.shape[0]) * 1e-6
        root = linalg.sqrtm((sigma1 + offset).dot(sigma2 + offset))
    if np.iscomplexobj(root):
        if not np.allclose(np.diagonal(root).imag, 0, atol=1e-3):
            raise ValueError(f"Imaginary component {np.max(np.abs(root.imag))}")
        root = root.real
    diff = mu1 - mu2
    return float(diff.dot(diff) + np.trace(sigma1) + np.trace(sigma2) - 2 * np.trace(root))


# ------------------------------------------------------------------------------ torch-fidelity


class _ReferenceFromCache(torch.utils.data.Dataset):
    """Stands in for the reference images: torch-fidelity must take their features from the
    cache materialised from REF.npz; reading an item means it did not."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Tensor:
        raise RuntimeError("torch-fidelity tried to read reference images instead of the reference features "
                           "materialised from the reference file; its cache layout may have changed")


def _tf_kwargs(spec: FeatureExtractorSpec, device: torch.device, batch_size: int) -> dict[str, Any]:
    return {"feature_extractor": spec.tf_name, "feature_extractor_weights_path": str(spec.weights["torch-fidelity"]),
            "cuda": device.type == "cuda", "batch_size": batch_size, "verbose": False,
            # in-memory tensors: DataLoader worker processes only add start-up time
            "save_cpu_ram": True}


def tf_features(images: np.ndarray, spec: FeatureExtractorSpec, device: torch.device, batch_size: int) -> np.ndarray:
    """Features ``[N, D]`` of uint8 NHWC ``images`` extracted by torch-fidelity's own extractor and data loop."""
    from torch_fidelity.utils import create_feature_extractor, get_featuresdict_from_dataset

    kw = _tf_kwargs(spec, device, batch_size)
    fe = create_feature_extractor(spec.tf_name, [spec.tf_layer], **{k: v for k, v in kw.items() if k != "feature_extractor"})
    feats = get_featuresdict_from_dataset(_Images(images), fe, batch_size, kw["cuda"], True, False)
    return feats[spec.tf_layer].numpy()


def _materialise_tf_cache(ref: ReferenceStats, spec: FeatureExtractorSpec, cache_root: Path, features: bool) -> None:
    """Write the reference FID statistics (and, for KID/PRC, features) where torch-fidelity's
    cache looks for ``input2_cache_name``: ``<name>-<extractor>-stat-fid-<layer>.pt`` and
    ``<name>-<extractor>-features-<layer>.pt``."""
    prefix = f"{TF_CACHE_NAME}-{spec.tf_name}"
    torch.save({"mu": ref.arrays["tf_mu"], "sigma": ref.arrays["tf_sigma"]},
               cache_root / f"{prefix}-stat-fid-{spec.tf_layer}.pt")
    if features:
        torch.save(torch.from_numpy(ref.arrays["tf_features"]), cache_root / f"{prefix}-features-{spec.tf_layer}.pt")


def torch_fidelity_metrics(images: np.ndarray, ref: ReferenceStats, spec: FeatureExtractorSpec, cfg: EvalConfig,
                           device: torch.device) -> dict[str, float]:
    """``calculate_metrics`` on ``images`` vs the reference file (no reference recomputation)."""
    import torch_fidelity

    n, m = len(images), ref.count
    kid = cfg.kid and min(n, m) >= 2
    prc = cfg.precision_recall and min(n, m) > PRC_NEIGHBORHOOD  # k-th nearest neighbour needs k + 1 points
    with tempfile.TemporaryDirectory(prefix="tl-fidelity-") as tmp:
        _materialise_tf_cache(ref, spec, Path(tmp), features=kid or prc)
        out = torch_fidelity.calculate_metrics(
            input1=_Images(images), input2=_ReferenceFromCache(m), input2_cache_name=TF_CACHE_NAME,
            cache=True, cache_root=tmp, fid=True, kid=kid, prc=prc, prc_neighborhood=PRC_NEIGHBORHOOD,
            kid_subsets=cfg.kid_subsets, kid_subset_size=min(cfg.kid_subset_size, n, m), rng_seed=cfg.kid_seed,
            **_tf_kwargs(spec, device, cfg.batch_size))
    res = {"fid": out[torch_fidelity.KEY_METRIC_FID]}
    if kid:
        res.update(kid_mean=out[torch_fidelity.KEY_METRIC_KID_MEAN], kid_std=out[torch_fidelity.KEY_METRIC_KID_STD])
    if prc:
        res.update(precision=out[torch_fidelity.KEY_METRIC_PRECISION], recall=out[torch_fidelity.KEY_METRIC_RECALL])
    return res


# ------------------------------------------------------------------------------ clean-fid


def _cleanfid_model(spec: FeatureExtractorSpec, device: torch.device) -> tuple[nn.Module, Callable | None]:
    """(feature model, custom_fn_resize) for clean-fid in mode "clean"."""
    if is_feature_net(spec.name):
        net, _ = load_feature_net(spec.weights["clean-fid"], device, expect=spec.name)
        return CleanFidTrainedCNN(net).eval(), keep_pixels
    from cleanfid.inception_torchscript import InceptionV3W

    model = InceptionV3W(str(spec.weights["clean-fid"].parent), download=False, resize_inside=False)
    return model.to(device).eval(), None  # None: clean-fid's own clean resize (PIL bicubic to 299)


def cf_features(images: np.ndarray, spec: FeatureExtractorSpec, device: torch.device, batch_size: int) -> np.ndarray:
    """Features ``[N, D]`` of uint8 NHWC ``images`` through ``cleanfid.fid.get_folder_features`` in mode "clean"."""
    from cleanfid import fid as cfid

    model, resize = _cleanfid_model(spec, device)
    with tempfile.TemporaryDirectory(prefix="tl-cleanfid-") as tmp:
        width = len(str(len(images)))
        for i, img in enumerate(images):  # lossless; names sort in sample order
            np.save(os.path.join(tmp, f"{i:0{width}d}.npy"), img)
        return cfid.get_folder_features(tmp, model, num_workers=0, batch_size=batch_size, device=device,
                                        mode="clean", custom_fn_resize=resize, verbose=False)


@contextlib.contextmanager
def _numpy_seed(seed: int) -> Iterator[None]:
    """clean-fid's kernel_distance draws subsets from NumPy's global RNG: seed it, then restore."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def clean_fid_metrics(images: np.ndarray, ref: ReferenceStats, spec: FeatureExtractorSpec, cfg: EvalConfig,
                      device: torch.device) -> dict[str, float]:
    """FID (and KID when ``cfg.kid``) of ``images`` vs the reference's clean-fid statistics."""
    from cleanfid import fid as cfid

    feats = cf_features(images, spec, device, cfg.batch_size)
    mu, sigma = np.mean(feats, axis=0), np.cov(feats, rowvar=False)
    res = {"fid": clean_fid_frechet(mu, sigma, ref.arrays["cf_mu"], ref.arrays["cf_sigma"])}
    if cfg.kid and min(len(feats), ref.count) >= 2:
        with _numpy_seed(cfg.kid_seed):
            res["kid_mean"] = float(cfid.kernel_distance(ref.arrays["cf_features"], feats, num_subsets=cfg.kid_subsets,
                                                         max_subset_size=cfg.kid_subset_size))
    return res
