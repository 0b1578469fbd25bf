"""Feature extractors: which network each metric library runs, on what input, from which weights.

Every extractor is run by both libraries (torch-fidelity and clean-fid):

``digits-cnn``,   the small classifiers the pipeline trains itself (:mod:`timestep_lab.metrics.features`,
``mnist-cnn``     registry ``FEATURE_NETS``). Each is registered in torch-fidelity under its name
                  with ``register_feature_extractor`` and passed to clean-fid as its feature
                  model, so the same two libraries compute "FID (digits-CNN features)" and
                  "FID (mnist-cnn features)" -- not Inception FID. Both feed the network the
                  same pixels at their own size (8x8, 32x32): torch-fidelity hands it the uint8
                  batch, clean-fid (mode "clean") reads the images from ``.npy`` files and its
                  resize step is replaced by the identity (``custom_fn_resize``), so no 299x299
                  upsampling happens.
``rehearsal-cnn`` the rehearsal's random stand-in for Inception (same registry, never trained),
                  run exactly as the trained CNNs (any image size, no resize): "FID (rehearsal
                  stand-in features)", a number that only says the pipeline ran.
``inception-v3``  torch-fidelity's ``inception-v3-compat`` (TF-compatible port, weights
                  ``weights-inception-2015-12-05-6726825d.pth``) and clean-fid's TorchScript
                  Inception (``inception-2015-12-05.pt``) with its clean PIL-bicubic resize.
                  Weights come from ``eval.feature_weights`` / ``--weights`` (a folder holding the
                  files, or one of them) or the libraries' own caches; when absent they are
                  downloaded with a short network timeout only if ``eval.download_weights``, else
                  (or on failure) :class:`WeightsMissingError` names the file and where to put it.

Importing this module registers every trained extractor in torch-fidelity's registry, so a direct
``calculate_metrics(feature_extractor="mnist-cnn", feature_extractor_weights_path=...)`` works.

Must not know: reference files, metric values, samples files or how images were generated.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor, nn
from torch_fidelity import FeatureExtractorBase, register_feature_extractor
from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY

from timestep_lab.artifacts.floor import FID_TOOL_ORDER
from timestep_lab.artifacts.io import ArtifactError, load_torch, sha256_file
from timestep_lab.config.schema import FEATURE_EXTRACTORS
from timestep_lab.metrics.download import download_file
from timestep_lab.metrics.features import FEATURE_NETS, load_feature_net

__all__ = [
    "EXTRACTORS", "TOOLS", "LABELS", "TF_INCEPTION_FILE", "CF_INCEPTION_FILE", "CLEANFID_CACHE_DIR",
    "WeightsMissingError", "FeatureExtractorSpec", "TorchFidelityTrainedCNN", "CleanFidTrainedCNN", "keep_pixels",
    "to_extractor_input", "resolve_weights", "make_spec", "load_feature_extractor", "is_feature_net",
]

EXTRACTORS = FEATURE_EXTRACTORS  # the trained ones (FEATURE_NETS), then inception-v3
TOOLS = FID_TOOL_ORDER  # the FID tools, in headline order (artifacts/floor.py)

TF_INCEPTION_FILE = "weights-inception-2015-12-05-6726825d.pth"
CF_INCEPTION_FILE = "inception-2015-12-05.pt"
# clean-fid keeps its Inception in "/tmp" (the current folder on Windows): cleanfid/features.py
CLEANFID_CACHE_DIR = Path("./" if platform.system() == "Windows" else "/tmp")


def _trained_labels(display: str) -> dict[str, str]:
    """metric -> label of a trained extractor, e.g. "FID (mnist-cnn features)"."""
    names = {"fid": "FID", "kid_mean": "KID", "kid_std": "KID std", "precision": "Precision", "recall": "Recall"}
    return {metric: f"{name} ({display} features)" for metric, name in names.items()}


LABELS = {  # metric -> report label, per extractor
    **{name: _trained_labels(net.display) for name, net in FEATURE_NETS.items()},
    "inception-v3": {"fid": "FID (Inception-v3)", "kid_mean": "KID (Inception-v3)", "kid_std": "KID std (Inception-v3)",
                     "precision": "Precision (Inception-v3 pool features)",
                     "recall": "Recall (Inception-v3 pool features)"},
}


def is_feature_net(name: str) -> bool:
    """Whether extractor ``name`` is a small network of :data:`FEATURE_NETS` (weights: one
    timestep_lab feature-network file, from ``train-features`` or, for ``rehearsal-cnn``,
    ``rehearse``), not Inception."""
    return name in FEATURE_NETS


class WeightsMissingError(ArtifactError):
    """Feature-extractor weights are not on disk and could not be downloaded (names the file)."""


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


# ------------------------------------------------------------------------------ the networks


class TorchFidelityTrainedCNN(FeatureExtractorBase):
    """torch-fidelity feature extractor of a trained CNN (one subclass per name, registered below):
    uint8 ``[B, C, H, W]`` at the network's own size -> ``features`` ``[B, feature_dim]`` (FID,
    KID, precision/recall) and ``logits``. Weights: ``feature_extractor_weights_path``."""

    extractor = ""  # the FEATURE_NETS name, set by each subclass

    def __init__(self, name, features_list, feature_extractor_weights_path=None, **kwargs):
        super().__init__(name, features_list)
        if feature_extractor_weights_path is None:
            raise ValueError(f"{self.extractor} needs feature_extractor_weights_path (its weights file)")
        self.net, _ = load_feature_net(feature_extractor_weights_path, expect=self.extractor)
        # None: any size with the file's channels (the rehearsal stand-in)
        self.input_shape = FEATURE_NETS[self.extractor].input_shape or (getattr(self.net, "in_channels", 3), -1, -1)

    @staticmethod
    def get_provided_features_list():
        return ("features", "logits")

    @staticmethod
    def get_default_feature_layer_for_metric(metric):
        return {"isc": "logits", "fid": "features", "kid": "features", "prc": "features"}[metric]

    @staticmethod
    def can_be_compiled():
        return False

    @classmethod
    def get_dummy_input_for_compile(cls):
        return torch.zeros(1, *(FEATURE_NETS[cls.extractor].input_shape or (3, 32, 32)), dtype=torch.uint8)

    def forward(self, x):
        if not (torch.is_tensor(x) and x.dtype == torch.uint8 and x.dim() == 4
                and all(want in (-1, got) for want, got in zip(self.input_shape, x.shape[1:]))):
            raise ValueError(f"{self.extractor} expects uint8 [B, {', '.join(map(str, self.input_shape))}], got "
                             f"{getattr(x, 'dtype', type(x))} {list(getattr(x, 'shape', []))}")
        feats = self.net.features(x)
        out = {"features": feats, "logits": self.net.head(feats)}
        return tuple(out[k] for k in self.features_list)


# importing this module makes every small feature network usable in any torch_fidelity.calculate_metrics call
for _name in FEATURE_NETS:
    if _name not in FEATURE_EXTRACTORS_REGISTRY:
        _cls = type(f"TorchFidelity_{_name.replace('-', '_')}", (TorchFidelityTrainedCNN,), {"extractor": _name})
        register_feature_extractor(_name, _cls)


class CleanFidTrainedCNN(nn.Module):
    """clean-fid adapter: clean-fid's data set yields float ``[B, C, H, W]`` holding the uint8
    pixel values; rounding restores them exactly, so both tools see identical inputs."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    @torch.no_grad()
    def forward(self, x: Tensor) -> Tensor:
        return self.net.features(x.round().clamp(0, 255))


def keep_pixels(img: np.ndarray) -> np.ndarray:
    """clean-fid ``custom_fn_resize`` for the trained CNNs: no resize, float32 HWC (clean-fid's
    ``ToTensor`` leaves float32 unscaled, so values stay in [0, 255])."""
    return np.asarray(img, dtype=np.float32)


# ------------------------------------------------------------------------------ their input


def to_extractor_input(images_nhwc: np.ndarray, spec: FeatureExtractorSpec) -> np.ndarray:
    """uint8 NHWC as the extractor wants it: grey images become RGB for Inception."""
    images = np.asarray(images_nhwc)
    if images.dtype != np.uint8 or images.ndim != 4:
        raise ArtifactError(f"images must be uint8 [N, H, W, C], got {images.dtype}{list(images.shape)}")
    if is_feature_net(spec.name) and FEATURE_NETS[spec.name].image_shape not in (None, tuple(images.shape[1:])):
        h, w, c = FEATURE_NETS[spec.name].image_shape
        raise ArtifactError(f"{spec.name} scores {h}x{w}x{c} images, got {list(images.shape[1:])}")
    if spec.name == "inception-v3" and images.shape[3] == 1:
        images = np.repeat(images, 3, axis=3)
    return images


class _Images(torch.utils.data.Dataset):
    """uint8 ``[C, H, W]`` tensors, the input torch-fidelity expects."""

    def __init__(self, images_nhwc: np.ndarray):
        self.x = torch.from_numpy(np.array(images_nhwc, dtype=np.uint8)).permute(0, 3, 1, 2).contiguous()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Tensor:
        return self.x[i]


# ------------------------------------------------------------------------------ their weights


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
                why = download_file(urls[tool], cache, fetchers[tool], timeout)
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


def resolve_weights(name: str, weights: str | Path | None, tools: Sequence[str], download: bool,
                    timeout: float) -> dict[str, Path]:
    """The weights file each tool will load (see :func:`load_feature_extractor`); nothing is read."""
    if name not in EXTRACTORS:
        raise ArtifactError(f"unknown feature extractor '{name}'; choose one of: {', '.join(EXTRACTORS)}")
    unknown = [t for t in tools if t not in TOOLS]
    if unknown or not tools:
        raise ArtifactError(f"unknown metric tool(s) {list(unknown or tools)}; choose from {list(TOOLS)}")
    if name == "inception-v3":
        return _resolve_inception(tools, weights, download, timeout)
    writer = (f"train-features --extractor {name} --data ... --test-data ... --out {name}.pt"
              if FEATURE_NETS[name].trained else "rehearse STUDY.yaml --fast-features")
    if weights is None:
        raise WeightsMissingError(f"{name} needs its weights file: write it with `python -m timestep_lab {writer}` "
                                  f"and pass --weights FILE (or eval.feature_weights)")
    path = Path(weights)
    if not path.is_file():
        raise WeightsMissingError(f"{path}: {name} weights file not found (write it with "
                                  f"`python -m timestep_lab {writer}`)")
    return {t: path for t in tools}


def make_spec(name: str, files: dict[str, Path], feature_dim: int) -> FeatureExtractorSpec:
    """The spec of extractor ``name`` loading ``files[tool]``, each file hashed (sha256)."""
    by_file = {p: sha256_file(p) for p in set(files.values())}  # a file shared by both tools is hashed once
    tf_name, layer = (name, "features") if is_feature_net(name) else ("inception-v3-compat", "2048")
    return FeatureExtractorSpec(name, tf_name, layer, feature_dim, dict(files), {t: by_file[p] for t, p in files.items()})


def load_feature_extractor(name: str, weights: str | Path | None = None, *, tools: Sequence[str] = TOOLS,
                           download: bool = True, timeout: float = 10.0) -> FeatureExtractorSpec:
    """Resolve, check and hash the weights of extractor ``name`` for ``tools``.

    Small networks (``digits-cnn``, ``mnist-cnn``, ``rehearsal-cnn``): ``weights`` is the
    network's file (required), and it must hold that extractor. ``inception-v3``:
    ``weights`` is a folder holding the two files (or one of the files), else the libraries'
    caches; missing files raise :class:`WeightsMissingError` before any long network wait.
    The files are loaded once here to check them (weights-only for the state dicts).
    """
    files = resolve_weights(name, weights, tools, download, timeout)
    if is_feature_net(name):
        _, meta = load_feature_net(next(iter(files.values())), expect=name)
        return make_spec(name, files, int(meta["feature_dim"]))
    if "torch-fidelity" in files:  # torch-fidelity unpickles it with weights_only=False: check it is plain tensors
        load_torch(files["torch-fidelity"])
    if "clean-fid" in files:
        try:
            torch.jit.load(str(files["clean-fid"]), map_location="cpu")
        except Exception as exc:
            raise ArtifactError(f"{files['clean-fid']}: not a TorchScript Inception ({exc})") from None
    return make_spec(name, files, 2048)
