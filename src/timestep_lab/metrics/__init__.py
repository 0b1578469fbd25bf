"""FID, KID and precision/recall through torch-fidelity and clean-fid, side by side.

Both libraries compute every number we report; :func:`frechet_distance` here is only an
independent cross-check for tests. Two feature extractors:

``digits-cnn``    the small classifier of :mod:`timestep_lab.features` (embedded default).
                  Registered in torch-fidelity with ``register_feature_extractor`` and passed to
                  clean-fid as its feature model, so the same two libraries compute
                  "FID (digits-CNN features)" -- not Inception FID. Both feed the network the
                  same 8x8 pixels: torch-fidelity hands it the uint8 batch, clean-fid (mode
                  "clean") reads the images from ``.npy`` files and its resize step is replaced by
                  the identity (``custom_fn_resize``), so no 299x299 upsampling happens.
``inception-v3``  torch-fidelity's ``inception-v3-compat`` (TF-compatible port, weights
                  ``weights-inception-2015-12-05-6726825d.pth``) and clean-fid's TorchScript
                  Inception (``inception-2015-12-05.pt``) with its clean PIL-bicubic resize.
                  Weights come from ``eval.feature_weights`` / ``--weights`` (a folder holding the
                  files, or one of them) or the libraries' own caches; when absent they are
                  downloaded with a short network timeout only if ``eval.download_weights``, else
                  (or on failure) :class:`WeightsMissingError` names the file and where to put it.

The reference set is computed once per data set and extractor into one declared file
(:func:`compute_reference`, ``REF.npz``)::

    meta          JSON string: format, extractor, label, feature_dim, feature layer, weights
                  sha256 and file name per tool, data folder + manifest hashes, count, tool versions
    tf_features   float32 [N, D]  features as torch-fidelity extracted them
    tf_mu         float32 [D]     }  torch-fidelity's fid_features_to_statistics
    tf_sigma      float64 [D, D]  }
    cf_features   float32 [N, D]  features as clean-fid's get_folder_features extracted them
    cf_mu, cf_sigma               mean and covariance of cf_features

At evaluation time nothing is recomputed for the reference and no global cache is touched:

* torch-fidelity: ``calculate_metrics(input1=<samples>, input2=<placeholder>,
  input2_cache_name="reference", cache_root=<fresh temp dir>)``; the temp dir is filled from
  REF.npz with exactly the files torch-fidelity's cache would hold (FID statistics; features
  too when KID or precision/recall are asked) and deleted afterwards. The placeholder data set
  raises if torch-fidelity ever tries to read reference images, so a change of its cache layout
  fails loudly instead of silently recomputing. Importing this module registers ``digits-cnn``
  in torch-fidelity's registry, so a direct ``calculate_metrics(feature_extractor="digits-cnn",
  feature_extractor_weights_path=...)`` works too.
* clean-fid: the samples go to a temp folder of ``.npy`` files and through
  ``cleanfid.fid.get_folder_features``; ``cleanfid.fid.frechet_distance`` and
  ``cleanfid.fid.kernel_distance`` score them against ``cf_mu/cf_sigma/cf_features`` -- the same
  steps as ``compute_fid``'s folder-vs-statistics mode, whose statistics would otherwise have to
  live inside clean-fid's package folder (``make_custom_stats``). ``compute_kid`` cannot take a
  custom feature model in clean-fid 0.1.35, hence ``kernel_distance`` for KID.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import socket
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence
from urllib.parse import urlparse

import numpy as np
import torch
from torch import Tensor, nn

from torch_fidelity import FeatureExtractorBase, register_feature_extractor
from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY

from timestep_lab.config import EvalConfig
from timestep_lab.io import ArtifactError, atomic_path, atomic_write_json, load_torch, sha256_file

__all__ = [
    "EXTRACTORS", "TOOLS", "REFERENCE_FORMAT", "METRICS_FORMAT", "PROGRESS_FORMAT", "WeightsMissingError",
    "FeatureExtractorSpec", "Reference", "frechet_distance", "load_feature_extractor", "compute_reference",
    "load_reference", "evaluate_samples", "evaluate_file", "evaluate_models", "tool_versions",
    "TorchFidelityDigitsCNN", "CleanFidDigitsCNN", "keep_pixels",
]

log = logging.getLogger(__name__)

EXTRACTORS = ("digits-cnn", "inception-v3")
TOOLS = ("torch-fidelity", "clean-fid")
REFERENCE_FORMAT = "timestep_lab.reference/1"
METRICS_FORMAT = "timestep_lab.metrics/1"
PROGRESS_FORMAT = "timestep_lab.fid_progress/1"
TF_CACHE_NAME = "reference"  # torch-fidelity input2_cache_name inside the per-call temp cache
PRC_NEIGHBORHOOD = 3  # k of the k-NN balls of precision/recall (torch-fidelity's default)

TF_INCEPTION_FILE = "weights-inception-2015-12-05-6726825d.pth"
CF_INCEPTION_FILE = "inception-2015-12-05.pt"
# clean-fid keeps its Inception in "/tmp" (the current folder on Windows): cleanfid/features.py
CLEANFID_CACHE_DIR = Path("./" if platform.system() == "Windows" else "/tmp")

LABELS = {  # metric -> report label, per extractor
    "digits-cnn": {"fid": "FID (digits-CNN features)", "kid_mean": "KID (digits-CNN features)",
                   "kid_std": "KID std (digits-CNN features)", "precision": "Precision (digits-CNN features)",
                   "recall": "Recall (digits-CNN features)"},
    "inception-v3": {"fid": "FID (Inception-v3)", "kid_mean": "KID (Inception-v3)", "kid_std": "KID std (Inception-v3)",
                     "precision": "Precision (Inception-v3 pool features)",
                     "recall": "Recall (Inception-v3 pool features)"},
}


class WeightsMissingError(ArtifactError):
    """Feature-extractor weights are not on disk and could not be downloaded (names the file)."""


@functools.lru_cache(maxsize=None)
def _versions() -> tuple[tuple[str, str], ...]:
    from importlib.metadata import version

    import torch_fidelity

    return (("torch-fidelity", torch_fidelity.__version__), ("clean-fid", version("clean-fid")))


def tool_versions() -> dict[str, str]:
    """Installed versions of the two metric libraries."""
    return dict(_versions())


# ------------------------------------------------------------------------------ Fréchet distance


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


# ------------------------------------------------------------------------------ feature extractors


@dataclass(frozen=True)
class FeatureExtractorSpec:
    """Which network each tool runs and from which weights file.

    ``weights[tool]`` is the file the tool loads and ``sha256[tool]`` its hash; ``tf_name`` and
    ``tf_layer`` are the torch-fidelity registry name and feature layer.
    """

    name: str
    tf_name: str
    tf_layer: str
    feature_dim: int
    weights: dict[str, Path] = field(default_factory=dict)
    sha256: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LABELS[self.name]["fid"]


class TorchFidelityDigitsCNN(FeatureExtractorBase):
    """torch-fidelity feature extractor ``digits-cnn``: uint8 ``[B, 1, 8, 8]`` -> ``features``
    ``[B, 64]`` (FID, KID, precision/recall) and ``logits``. Weights: ``feature_extractor_weights_path``."""

    def __init__(self, name, features_list, feature_extractor_weights_path=None, **kwargs):
        super().__init__(name, features_list)
        if feature_extractor_weights_path is None:
            raise ValueError("digits-cnn needs feature_extractor_weights_path (the train-features output)")
        from timestep_lab.features import load_digits_cnn

        self.net, _ = load_digits_cnn(feature_extractor_weights_path)

    @staticmethod
    def get_provided_features_list():
        return ("features", "logits")

    @staticmethod
    def get_default_feature_layer_for_metric(metric):
        return {"isc": "logits", "fid": "features", "kid": "features", "prc": "features"}[metric]

    @staticmethod
    def can_be_compiled():
        return False

    @staticmethod
    def get_dummy_input_for_compile():
        return torch.zeros(1, 1, 8, 8, dtype=torch.uint8)

    def forward(self, x):
        if not (torch.is_tensor(x) and x.dtype == torch.uint8 and x.dim() == 4 and x.shape[1:] == (1, 8, 8)):
            raise ValueError(f"digits-cnn expects uint8 [B, 1, 8, 8], got {getattr(x, 'dtype', type(x))} "
                             f"{list(getattr(x, 'shape', []))}")
        feats = self.net.features(x)
        out = {"features": feats, "logits": self.net.head(feats)}
        return tuple(out[k] for k in self.features_list)


# importing this module makes "digits-cnn" usable in any torch_fidelity.calculate_metrics call
if "digits-cnn" not in FEATURE_EXTRACTORS_REGISTRY:
    register_feature_extractor("digits-cnn", TorchFidelityDigitsCNN)


class CleanFidDigitsCNN(nn.Module):
    """clean-fid adapter: clean-fid's data set yields float ``[B, 1, 8, 8]`` holding the uint8
    pixel values; rounding restores them exactly, so both tools see identical inputs."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        return self.net.features(x.round().clamp(0, 255))


def keep_pixels(img: np.ndarray) -> np.ndarray:
    """clean-fid ``custom_fn_resize`` for the digits CNN: no resize, float32 HWC (clean-fid's
    ``ToTensor`` leaves float32 unscaled, so values stay in [0, 255])."""
    return np.asarray(img, dtype=np.float32)


@contextlib.contextmanager
def _network_timeout(seconds: float) -> Iterator[None]:
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(old)


def _resolves(url: str, timeout: float) -> str | None:
    """``None`` if the host of ``url`` resolves within ``timeout`` s, else the reason (DNS lookups
    ignore socket timeouts, so they run in a daemon thread)."""
    host = urlparse(url).hostname or ""
    result: dict[str, Any] = {}

    def look():
        try:
            socket.getaddrinfo(host, 443)
            result["ok"] = True
        except OSError as exc:
            result["err"] = exc

    th = threading.Thread(target=look, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        return f"resolving {host} took more than {timeout:g} s"
    return None if result.get("ok") else f"cannot resolve {host} ({result.get('err')})"


def _download(url: str, dest: Path, fetch: Callable[[Path], Path], timeout: float) -> str | None:
    """Download ``url`` to ``dest`` with the library's own function ``fetch(tmp_dir) -> file``,
    atomically and with a short network timeout. Returns ``None`` or why it failed."""
    t0 = time.perf_counter()
    reason = _resolves(url, timeout)
    if reason is None:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            with _network_timeout(timeout), tempfile.TemporaryDirectory(dir=dest.parent, prefix=".dl-") as tmp:
                got = fetch(Path(tmp))
                os.replace(got, dest)
            log.info("downloaded %s -> %s", url, dest)
            return None
        except Exception as exc:  # URLError, timeouts, HTTP errors, disk errors
            reason = f"{type(exc).__name__}: {exc}"
    return f"download failed after {time.perf_counter() - t0:.1f} s ({reason})"


def _tf_inception_cache() -> Path:
    return Path(torch.hub.get_dir()) / "checkpoints"


def _inception_sources(configured: str | Path | None) -> dict[str, list[tuple[Path, str]]]:
    """Candidate folders per tool, in order: the configured path, then the library's cache."""
    folders: list[tuple[Path, str]] = []
    if configured:
        p = Path(configured)
        folders.append((p if p.is_dir() or not p.suffix else p.parent, "eval.feature_weights / --weights"))
    return {"torch-fidelity": folders + [(_tf_inception_cache(), "torch-fidelity's cache")],
            "clean-fid": folders + [(CLEANFID_CACHE_DIR, "clean-fid's cache")]}


def _resolve_inception(tools: Sequence[str], configured: str | Path | None, download: bool,
                       timeout: float) -> dict[str, Path]:
    from cleanfid.downloads_helper import check_download_inception, inception_url
    from torch_fidelity.feature_extractor_inceptionv3 import URL_INCEPTION_V3

    files = {"torch-fidelity": TF_INCEPTION_FILE, "clean-fid": CF_INCEPTION_FILE}
    urls = {"torch-fidelity": URL_INCEPTION_V3, "clean-fid": inception_url}
    fetchers = {
        "torch-fidelity": lambda d: (torch.hub.download_url_to_file(URL_INCEPTION_V3, str(d / TF_INCEPTION_FILE),
                                                                     progress=False), d / TF_INCEPTION_FILE)[1],
        "clean-fid": lambda d: Path(check_download_inception(fpath=str(d))),
    }
    sources = _inception_sources(configured)
    found: dict[str, Path] = {}
    problems = []
    for tool in tools:
        hit = next((folder / files[tool] for folder, _ in sources[tool] if (folder / files[tool]).is_file()), None)
        if hit is None:
            cache = sources[tool][-1][0] / files[tool]
            why = "downloads disabled (eval.download_weights=false)"
            if download:
                why = _download(urls[tool], cache, fetchers[tool], timeout)
                hit = cache if why is None else None
            if hit is None:
                looked = ", ".join(f"{f}/ ({what})" for f, what in sources[tool])
                problems.append(f"{tool} needs '{files[tool]}': not in {looked}; {why}. Put the file from "
                                f"{urls[tool]} into {sources[tool][-1][0]}/ or into the folder given by "
                                f"--weights / eval.feature_weights")
                continue
        found[tool] = hit
    if problems:
        raise WeightsMissingError("Inception-v3 weights missing. " + " -- ".join(problems))
    return found


def _resolve_weights(name: str, weights: str | Path | None, tools: Sequence[str], download: bool,
                     timeout: float) -> dict[str, Path]:
    """The weights file each tool will load (see :func:`load_feature_extractor`); nothing is read."""
    if name not in EXTRACTORS:
        raise ArtifactError(f"unknown feature extractor '{name}'; choose one of: {', '.join(EXTRACTORS)}")
    unknown = [t for t in tools if t not in TOOLS]
    if unknown or not tools:
        raise ArtifactError(f"unknown metric tool(s) {list(unknown or tools)}; choose from {list(TOOLS)}")
    if name == "inception-v3":
        return _resolve_inception(tools, weights, download, timeout)
    if weights is None:
        raise WeightsMissingError("digits-cnn needs its weights file: train it with `python -m timestep_lab "
                                  "train-features --data ... --test-data ... --out digits_cnn.pt` and pass "
                                  "--weights digits_cnn.pt (or eval.feature_weights)")
    path = Path(weights)
    if not path.is_file():
        raise WeightsMissingError(f"{path}: digits-cnn weights file not found (write it with "
                                  f"`python -m timestep_lab train-features`)")
    return {t: path for t in tools}


def _make_spec(name: str, files: dict[str, Path], feature_dim: int) -> FeatureExtractorSpec:
    by_file = {p: sha256_file(p) for p in set(files.values())}  # a file shared by both tools is hashed once
    tf_name, layer = ("digits-cnn", "features") if name == "digits-cnn" else ("inception-v3-compat", "2048")
    return FeatureExtractorSpec(name, tf_name, layer, feature_dim, dict(files), {t: by_file[p] for t, p in files.items()})


def load_feature_extractor(name: str, weights: str | Path | None = None, *, tools: Sequence[str] = TOOLS,
                           download: bool = True, timeout: float = 10.0) -> FeatureExtractorSpec:
    """Resolve, check and hash the weights of extractor ``name`` for ``tools``.

    ``digits-cnn``: ``weights`` is the ``train-features`` file (required). ``inception-v3``:
    ``weights`` is a folder holding the two files (or one of the files), else the libraries'
    caches; missing files raise :class:`WeightsMissingError` before any long network wait.
    The files are loaded once here to check them (weights-only for the state dicts).
    """
    files = _resolve_weights(name, weights, tools, download, timeout)
    if name == "digits-cnn":
        from timestep_lab.features import load_digits_cnn

        _, meta = load_digits_cnn(next(iter(files.values())))
        return _make_spec(name, files, int(meta["feature_dim"]))
    if "torch-fidelity" in files:  # torch-fidelity unpickles it with weights_only=False: check it is plain tensors
        load_torch(files["torch-fidelity"])
    if "clean-fid" in files:
        try:
            torch.jit.load(str(files["clean-fid"]), map_location="cpu")
        except Exception as exc:
            raise ArtifactError(f"{files['clean-fid']}: not a TorchScript Inception ({exc})") from None
    return _make_spec(name, files, 2048)


def _to_extractor_input(images_nhwc: np.ndarray, spec: FeatureExtractorSpec) -> np.ndarray:
    """uint8 NHWC as the extractor wants it: grey images become RGB for Inception."""
    images = np.asarray(images_nhwc)
    if images.dtype != np.uint8 or images.ndim != 4:
        raise ArtifactError(f"images must be uint8 [N, H, W, C], got {images.dtype}{list(images.shape)}")
    if spec.name == "digits-cnn" and images.shape[1:] != (8, 8, 1):
        raise ArtifactError(f"digits-cnn scores 8x8 grey images, got {list(images.shape[1:])}")
    if spec.name == "inception-v3" and images.shape[3] == 1:
        images = np.repeat(images, 3, axis=3)
    return images


# ------------------------------------------------------------------------------ running the tools


class _Images(torch.utils.data.Dataset):
    """uint8 ``[C, H, W]`` tensors, the input torch-fidelity expects."""

    def __init__(self, images_nhwc: np.ndarray):
        self.x = torch.from_numpy(np.array(images_nhwc, dtype=np.uint8)).permute(0, 3, 1, 2).contiguous()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Tensor:
        return self.x[i]


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


def _tf_features(images: np.ndarray, spec: FeatureExtractorSpec, device: torch.device, batch_size: int) -> np.ndarray:
    """Features of ``images`` extracted by torch-fidelity's own extractor and data loop."""
    from torch_fidelity.utils import create_feature_extractor, get_featuresdict_from_dataset

    kw = _tf_kwargs(spec, device, batch_size)
    fe = create_feature_extractor(spec.tf_name, [spec.tf_layer], **{k: v for k, v in kw.items() if k != "feature_extractor"})
    feats = get_featuresdict_from_dataset(_Images(images), fe, batch_size, kw["cuda"], True, False)
    return feats[spec.tf_layer].numpy()


def _materialise_tf_cache(ref: "Reference", spec: FeatureExtractorSpec, cache_root: Path, features: bool) -> None:
    """Write the reference FID statistics (and, for KID/PRC, features) where torch-fidelity's
    cache looks for ``input2_cache_name``: ``<name>-<extractor>-stat-fid-<layer>.pt`` and
    ``<name>-<extractor>-features-<layer>.pt``."""
    prefix = f"{TF_CACHE_NAME}-{spec.tf_name}"
    torch.save({"mu": ref.arrays["tf_mu"], "sigma": ref.arrays["tf_sigma"]},
               cache_root / f"{prefix}-stat-fid-{spec.tf_layer}.pt")
    if features:
        torch.save(torch.from_numpy(ref.arrays["tf_features"]), cache_root / f"{prefix}-features-{spec.tf_layer}.pt")


def torch_fidelity_metrics(images: np.ndarray, ref: "Reference", spec: FeatureExtractorSpec, cfg: EvalConfig,
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


def _cleanfid_model(spec: FeatureExtractorSpec, device: torch.device) -> tuple[nn.Module, Callable | None]:
    """(feature model, custom_fn_resize) for clean-fid in mode "clean"."""
    if spec.name == "digits-cnn":
        from timestep_lab.features import load_digits_cnn

        net, _ = load_digits_cnn(spec.weights["clean-fid"], device)
        return CleanFidDigitsCNN(net).eval(), keep_pixels
    from cleanfid.inception_torchscript import InceptionV3W

    model = InceptionV3W(str(spec.weights["clean-fid"].parent), download=False, resize_inside=False)
    return model.to(device).eval(), None  # None: clean-fid's own clean resize (PIL bicubic to 299)


def _cf_features(images: np.ndarray, spec: FeatureExtractorSpec, device: torch.device, batch_size: int) -> np.ndarray:
    """Features of ``images`` through ``cleanfid.fid.get_folder_features`` in mode "clean"."""
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


def clean_fid_metrics(images: np.ndarray, ref: "Reference", spec: FeatureExtractorSpec, cfg: EvalConfig,
                      device: torch.device) -> dict[str, float]:
    from cleanfid import fid as cfid

    feats = _cf_features(images, spec, device, cfg.batch_size)
    mu, sigma = np.mean(feats, axis=0), np.cov(feats, rowvar=False)
    res = {"fid": float(cfid.frechet_distance(mu, sigma, ref.arrays["cf_mu"], ref.arrays["cf_sigma"]))}
    if cfg.kid and min(len(feats), ref.count) >= 2:
        with _numpy_seed(cfg.kid_seed):
            res["kid_mean"] = float(cfid.kernel_distance(ref.arrays["cf_features"], feats, num_subsets=cfg.kid_subsets,
                                                         max_subset_size=cfg.kid_subset_size))
    return res


# ------------------------------------------------------------------------------ reference file


class _NpzArrays(Mapping):
    """The arrays of a reference file, each read on first use (FID needs only the statistics,
    KID and precision/recall the features, which are large for Inception)."""

    def __init__(self, path: Path, keys: list[str]):
        self.path, self.keys_, self.cache = path, keys, {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self.cache:
            if key not in self.keys_:
                raise KeyError(key)
            try:
                with np.load(self.path, allow_pickle=False) as z:
                    self.cache[key] = z[key]
            except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
                raise ArtifactError(f"{self.path}: corrupted reference file ({key}: {exc})") from None
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


def compute_reference(images_nhwc: np.ndarray, out: str | Path, spec: FeatureExtractorSpec, *,
                      data_info: dict[str, Any] | None = None, device: Any = "cpu", batch_size: int = 500) -> Reference:
    """Extract the reference features with each tool of ``spec`` and write ``out`` (REF.npz) atomically."""
    device = torch.device(device)
    images = _to_extractor_input(images_nhwc, spec)
    if len(images) < 2:
        raise ArtifactError(f"a reference set needs at least 2 images, got {len(images)}")
    arrays: dict[str, np.ndarray] = {}
    if "torch-fidelity" in spec.weights:
        from torch_fidelity.metric_fid import fid_features_to_statistics

        feats = _tf_features(images, spec, device, batch_size)
        stats = fid_features_to_statistics(torch.from_numpy(feats))
        arrays.update(tf_features=feats, tf_mu=stats["mu"], tf_sigma=stats["sigma"])
    if "clean-fid" in spec.weights:
        feats = _cf_features(images, spec, device, batch_size).astype(np.float32)
        arrays.update(cf_features=feats, cf_mu=np.mean(feats, axis=0), cf_sigma=np.cov(feats, rowvar=False))
    meta = {
        "format": REFERENCE_FORMAT, "extractor": spec.name, "label": spec.label, "feature_dim": spec.feature_dim,
        "torch_fidelity_extractor": spec.tf_name, "feature_layer": spec.tf_layer, "tools": sorted(spec.weights),
        "feature_weights_sha256": dict(spec.sha256), "feature_weights_file": {t: str(p) for t, p in spec.weights.items()},
        "count": int(len(images)), "image_shape": list(images_nhwc.shape[1:]), "tool_versions": tool_versions(),
        "cleanfid_mode": "clean", "cleanfid_resize": "none (pixels fed as-is)" if spec.name == "digits-cnn"
        else "clean (PIL bicubic to 299x299)", "data": data_info or {},
    }
    out = Path(out)
    with atomic_path(out, suffix=".npz") as tmp:
        with open(tmp, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), **arrays)
    return load_reference(out)


def load_reference(path: str | Path) -> Reference:
    """Open a reference file written by :func:`compute_reference` (arrays are read lazily)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            keys = [k for k in z.files if k != "meta"]
            meta = json.loads(str(z["meta"]))
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
    return Reference(path, sha256_file(path), meta, _NpzArrays(path, keys))


# ------------------------------------------------------------------------------ evaluation


def _spec_for_reference(ref: Reference, cfg: EvalConfig, weights: str | Path | None) -> FeatureExtractorSpec:
    """The extractor the reference was computed with; weights must hash to what it recorded."""
    name = ref.meta["extractor"]
    if cfg.feature_extractor not in (None, name):
        raise ArtifactError(f"{ref.path}: computed with the {name} extractor, but eval.feature_extractor="
                            f"{cfg.feature_extractor}; set eval.feature_extractor={name} or use a matching reference")
    tools = list(cfg.tools)
    missing = [t for t in tools if t not in ref.meta["tools"]]
    if missing:
        raise ArtifactError(f"{ref.path}: has no {', '.join(missing)} features (computed for {ref.meta['tools']})")
    weights = weights or cfg.feature_weights
    if weights is None and name == "digits-cnn":
        weights = next(iter(ref.meta["feature_weights_file"].values()))
    # the reference file recorded the hashes of the (checked) weights it was computed with:
    # the same hash means the same file, so hashing is all that is needed here
    files = _resolve_weights(name, weights, tools, cfg.download_weights, cfg.download_timeout_s)
    spec = _make_spec(name, files, int(ref.meta["feature_dim"]))
    for tool in tools:
        want = ref.meta["feature_weights_sha256"][tool]
        if spec.sha256[tool] != want:
            raise ArtifactError(f"{spec.weights[tool]}: sha256 {spec.sha256[tool][:12]}... differs from the weights "
                                f"{ref.path} was computed with ({want[:12]}...); use the same weights or recompute "
                                f"the reference")
    return spec


def _protocol(spec: FeatureExtractorSpec, ref: Reference, n: int, meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "feature_extractor": spec.name, "feature_dim": spec.feature_dim, "num_generated": n,
        "num_reference": ref.count, "sampler": meta.get("method"), "steps": meta.get("steps"), "eta": meta.get("eta"),
        "ema": meta.get("use_ema"), "seed_range": meta.get("seed_range"), "reference_file": str(ref.path),
        "reference_sha256": ref.sha256,
    }


def evaluate_samples(images_nhwc: np.ndarray, reference: str | Path | Reference, *, cfg: EvalConfig = EvalConfig(),
                     weights: str | Path | None = None, samples_meta: dict[str, Any] | None = None,
                     device: Any = "cpu") -> dict[str, Any]:
    """Score uint8 NHWC images against a reference file with every tool in ``cfg.tools``.

    Returns the ``metrics.json`` dict: ``records`` (one per metric and tool, each with the full
    protocol) and convenience fields ``fid``/``kid`` (torch-fidelity), ``fid_clean_fid``/
    ``kid_clean_fid``, ``precision``/``recall``, ``label``, ``nimg``/``kimg`` when known.
    """
    device = torch.device(device)
    ref = reference if isinstance(reference, Reference) else load_reference(reference)
    spec = _spec_for_reference(ref, cfg, weights)
    meta = samples_meta or {}
    images = np.asarray(images_nhwc)
    if cfg.num_samples is not None:
        if len(images) < cfg.num_samples:
            raise ArtifactError(f"eval.num_samples={cfg.num_samples} but only {len(images)} samples were given")
        images = images[: cfg.num_samples]
    if images.ndim == 4 and list(images.shape[1:3]) != list(ref.meta["image_shape"][:2]):
        raise ArtifactError(f"samples are {list(images.shape[1:])} images, {ref.path} holds "
                            f"{ref.meta['image_shape']} images")
    images = _to_extractor_input(images, spec)
    if len(images) < 2:
        raise ArtifactError(f"FID needs at least 2 samples, got {len(images)}")
    versions = tool_versions()
    protocol = _protocol(spec, ref, len(images), meta)
    runners = {"torch-fidelity": torch_fidelity_metrics, "clean-fid": clean_fid_metrics}
    records, values = [], {}
    for tool in cfg.tools:
        t0 = time.perf_counter()
        values[tool] = runners[tool](images, ref, spec, cfg, device)
        log.debug("%s: %s in %.2f s", tool, values[tool], time.perf_counter() - t0)
        for metric, value in values[tool].items():
            rec = {"metric": metric, "value": float(value), "tool": tool, "tool_version": versions[tool],
                   "label": LABELS[spec.name][metric], "feature_weights_sha256": spec.sha256[tool], **protocol}
            if metric.startswith("kid"):
                rec.update(kid_subsets=cfg.kid_subsets, kid_subset_size=min(cfg.kid_subset_size, len(images), ref.count),
                           kid_seed=cfg.kid_seed)
            records.append(rec)
    out: dict[str, Any] = {"format": METRICS_FORMAT, "label": spec.label, "feature_extractor": spec.name,
                           "status": meta.get("status", "ok")}
    tf, cf = values.get("torch-fidelity", {}), values.get("clean-fid", {})
    out.update({"fid": tf.get("fid"), "kid": tf.get("kid_mean"), "fid_clean_fid": cf.get("fid"),
                "kid_clean_fid": cf.get("kid_mean"), "precision": tf.get("precision"), "recall": tf.get("recall")})
    if "nimg" in meta:
        out.update(nimg=int(meta["nimg"]), kimg=int(meta["nimg"]) / 1000)
    out.update(model=meta.get("model"), model_sha256=meta.get("model_sha256"), protocol=protocol, records=records)
    return out


def evaluate_file(samples_npz: str | Path, reference: str | Path, out_json: str | Path, *, cfg: EvalConfig = EvalConfig(),
                  weights: str | Path | None = None, device: Any = "cpu") -> dict[str, Any]:
    """``samples.npz`` -> ``metrics.json`` (written atomically)."""
    from timestep_lab.sampling import load_samples

    images, _, meta = load_samples(samples_npz)
    result = evaluate_samples(images, reference, cfg=cfg, weights=weights, samples_meta=meta, device=device)
    result["samples_file"] = str(samples_npz)
    atomic_write_json(out_json, result)
    return result


def evaluate_models(models: Sequence[str | Path], reference: str | Path, sample_cfg_for: Callable[[Path], Any], *,
                    cfg: EvalConfig = EvalConfig(), weights: str | Path | None = None, device: Any = "cpu",
                    progress: bool = False) -> list[dict[str, Any]]:
    """Sample each model file (snapshot or model.pt) into a temp folder and score it.

    ``sample_cfg_for(model_path) -> SampleConfig``. Returns one point per model, sorted by
    images seen: ``{nimg, kimg, model, model_sha256, fid: {tool: value}, kid: {tool: value},
    precision, recall, label, ...protocol, records}``.
    """
    from timestep_lab.sampling import generate, load_samples

    ref = load_reference(reference)
    points = []
    with tempfile.TemporaryDirectory(prefix="tl-snapshots-") as tmp:
        for i, model in enumerate(models):
            npz = Path(tmp) / f"samples-{i}.npz"
            generate(model, npz, sample_cfg_for(Path(model)), device=device, progress=progress)
            images, _, meta = load_samples(npz)
            res = evaluate_samples(images, ref, cfg=cfg, weights=weights, samples_meta=meta, device=device)
            npz.unlink()
            by_tool = lambda metric: {r["tool"]: r["value"] for r in res["records"] if r["metric"] == metric}  # noqa: E731
            points.append({"nimg": res.get("nimg", 0), "kimg": res.get("kimg", 0.0), "model": str(model),
                           "model_sha256": meta.get("model_sha256"), "label": res["label"], "fid": by_tool("fid"),
                           "kid": by_tool("kid_mean"), "precision": res["precision"], "recall": res["recall"],
                           **res["protocol"], "records": res["records"]})
            log.info("%s (%.1f kimg): %s = %s", Path(model).name, points[-1]["kimg"], res["label"],
                     ", ".join(f"{v:.4g} ({t})" for t, v in points[-1]["fid"].items()))
    return sorted(points, key=lambda p: (p["nimg"], p["model"]))
