"""Feature extractors: small CNNs whose penultimate layer is the feature space of FID where
Inception features are meaningless (trained by the pipeline), and the rehearsal's random
stand-in for Inception (never trained).

Registry :data:`FEATURE_NETS` (one entry per extractor, chosen by ``evaluation.extractor``):

``digits-cnn``  arch ``digits-cnn-v1``, input uint8 ``[B, 1, 8, 8]`` (scikit-learn's digits),
                label "FID (digits-CNN features)"::

                    x / 127.5 - 1
                    conv3x3(1->16) ReLU  conv3x3(16->32) ReLU  maxpool2      # 4x4
                    conv3x3(32->64) ReLU  maxpool2                           # 2x2
                    flatten(256)  linear(256->64)                            # = features [B, 64]
                    ReLU  dropout(0.2)  linear(64->10)                       # = logits

                Trained 30 epochs, batch 64, Adam lr 3e-3, random shifts of up to 1 pixel.
``mnist-cnn``   arch ``mnist-cnn-v1``, input uint8 ``[B, 1, 32, 32]`` (``prepare mnist5k``: MNIST
                28x28 zero-padded to 32x32), label "FID (mnist-cnn features)"::

                    x / 127.5 - 1
                    conv3x3(1->16) BN ReLU maxpool2                          # 16x16
                    conv3x3(16->32) BN ReLU maxpool2                         # 8x8
                    conv3x3(32->64) BN ReLU maxpool2                         # 4x4
                    flatten(1024)  linear(1024->128)                         # = features [B, 128]
                    ReLU  dropout(0.3)  linear(128->10)                      # = logits

                BN: batch norm, its running statistics in use once trained (features do not
                depend on the other images of a batch). Trained 15 epochs, batch 64, Adam lr
                2e-3, random shifts of up to 2 pixels (the 2-pixel zero border keeps every digit
                inside the image); its held-out accuracy and training cost are in
                benchmarks/RESULTS.md ("mnist-cnn: the FID feature extractor").

The features are the pre-activation of the wide linear layer, so no unit is dead and the
feature covariance of a few hundred images is full rank. Neither is Inception FID, and the
reports say so.

Training (:func:`train_feature_net`, ``python -m timestep_lab train-features``): Adam with cosine
decay over all steps, cross-entropy, a fixed seed (``torch.manual_seed`` for the initial weights,
one ``torch.Generator`` for the data order and the shifts); the held-out accuracy on the test
split is stored in the file.

Weights file (``torch.load(..., weights_only=True)``-loadable dict)::

    format        "timestep_lab.feature_extractor/1"
    extractor     the registry name ("digits-cnn")
    arch          the network ("digits-cnn-v1"): what :func:`load_feature_net` builds
    feature_dim, num_classes, image_shape [H, W, C]
    state_dict    the network's tensors
    accuracy      held-out accuracy on the test split (train_accuracy too)
    train_data / test_data   {"path", "images_sha256", "labels_sha256", "count", ...}
    seed, epochs, batch_size, lr, max_shift, torch_version

and a sidecar ``<weights>.json`` with the sha256 of the weights file itself (a file cannot
hold its own hash), the same metadata and ``train_cpu_s``, the CPU time of training (kept out of
the weights file, whose bytes depend only on the data, the recipe and the seed). Every metrics
file records the sha256 of the weights it used.

``rehearsal-cnn`` arch ``rehearsal-cnn-v1`` (:class:`RehearsalCNN`): random weights, never trained
(``python -m timestep_lab rehearse`` writes it, same file format, ``random: true``,
``in_channels``); it stands in for Inception in a fast rehearsal (``--fast-features``),
whose FIDs of 32-d features cost a small fraction of a 2048-d Inception FID on a CPU
(benchmarks/RESULTS.md, "Figures the code relies on"). Input uint8 ``[B, C, H, W]`` of any size (C of the file), label "FID (rehearsal
stand-in features)"::

    x / 127.5 - 1
    conv3x3(C->16) ReLU  conv3x3(16->32, stride 2) ReLU  adaptive avgpool(4x4)
    flatten(512)  linear(512->32)                            # = features [B, 32]
    ReLU  linear(32->10)                                     # = logits (unused)

The metric libraries' adapters for these networks are in :mod:`timestep_lab.metrics.extractors`.
Must not know: FID/KID, reference statistics or the metric libraries.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import Tensor, nn

from timestep_lab.artifacts.io import ArtifactError, atomic_write_json, load_torch, save_torch, sha256_file
from timestep_lab.config.schema import TRAINED_FEATURE_EXTRACTORS
from timestep_lab.data import DataError, PreparedData
from timestep_lab.errors import InputError

__all__ = ["FEATURE_FORMAT", "FEATURE_NETS", "FeatureNet", "FeatureCNN", "DigitsCNN", "MnistCNN", "RehearsalCNN",
           "TrainedFeatures", "train_feature_net", "load_feature_net", "write_rehearsal_cnn", "sidecar_path",
           "accuracy"]

log = logging.getLogger(__name__)

FEATURE_FORMAT = "timestep_lab.feature_extractor/1"


class FeatureCNN(nn.Module):
    """``features(x) -> [B, feature_dim]`` (the output of ``body``); ``forward(x) -> logits [B,
    num_classes]`` (``head`` on the features). ``x``: uint8 (or float holding integers) ``[B, C,
    H, W]`` in [0, 255], scaled to [-1, 1] first."""

    body: nn.Sequential
    head: nn.Sequential

    def __init__(self, feature_dim: int, num_classes: int):
        super().__init__()
        self.feature_dim, self.num_classes = feature_dim, num_classes

    def features(self, x: Tensor) -> Tensor:
        return self.body(x.float() / 127.5 - 1.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


class DigitsCNN(FeatureCNN):
    """``digits-cnn-v1``: 8x8 grey digits (see the module docstring)."""

    def __init__(self, feature_dim: int = 64, num_classes: int = 10):
        super().__init__(feature_dim, num_classes)
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 2 * 2, feature_dim),
        )
        self.head = nn.Sequential(nn.ReLU(), nn.Dropout(0.2), nn.Linear(feature_dim, num_classes))


class MnistCNN(FeatureCNN):
    """``mnist-cnn-v1``: MNIST padded to 32x32 grey (see the module docstring)."""

    def __init__(self, feature_dim: int = 128, num_classes: int = 10):
        super().__init__(feature_dim, num_classes)
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 4 * 4, feature_dim),
        )
        self.head = nn.Sequential(nn.ReLU(), nn.Dropout(0.3), nn.Linear(feature_dim, num_classes))


class RehearsalCNN(FeatureCNN):
    """``rehearsal-cnn-v1``: the rehearsal's random stand-in for Inception (module docstring),
    uint8 ``[B, in_channels, H, W]``, any H, W >= 4 (adaptive pooling)."""

    def __init__(self, feature_dim: int = 32, num_classes: int = 10, in_channels: int = 3):
        super().__init__(feature_dim, num_classes)
        self.in_channels = in_channels
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
            nn.Flatten(), nn.Linear(32 * 4 * 4, feature_dim),
        )
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(feature_dim, num_classes))


@dataclass(frozen=True)
class FeatureNet:
    """One trained feature extractor: its network, input, label and training recipe."""

    name: str  # evaluation.extractor; the study's file is results/<study>/eval/<name>.pt
    arch: str  # the network, stored in the weights file
    display: str  # the report label is "FID (<display> features)"
    build: Callable[..., FeatureCNN]  # (feature_dim, num_classes[, in_channels]) -> network
    image_shape: tuple[int, int, int] | None  # uint8 input [H, W, C]; None: any size (the file's channels)
    feature_dim: int  # width of the feature layer
    epochs: int
    batch_size: int
    lr: float
    max_shift: int  # random translation of up to this many pixels while training
    trained: bool = True  # False: random weights written by `rehearse`, never trained

    @property
    def input_shape(self) -> tuple[int, int, int] | None:
        """``[C, H, W]``, the network's input layout (None: any)."""
        if self.image_shape is None:
            return None
        h, w, c = self.image_shape
        return (c, h, w)


FEATURE_NETS: dict[str, FeatureNet] = {}


def register_feature_net(net: FeatureNet) -> FeatureNet:
    if net.name in FEATURE_NETS:
        raise KeyError(f"feature extractor '{net.name}' is already registered")
    FEATURE_NETS[net.name] = net
    return net


register_feature_net(FeatureNet("digits-cnn", "digits-cnn-v1", "digits-CNN", DigitsCNN, (8, 8, 1), 64,
                                epochs=30, batch_size=64, lr=3e-3, max_shift=1))
register_feature_net(FeatureNet("mnist-cnn", "mnist-cnn-v1", "mnist-cnn", MnistCNN, (32, 32, 1), 128,
                                epochs=15, batch_size=64, lr=2e-3, max_shift=2))
register_feature_net(FeatureNet("rehearsal-cnn", "rehearsal-cnn-v1", "rehearsal stand-in", RehearsalCNN, None, 32,
                                epochs=0, batch_size=0, lr=0.0, max_shift=0, trained=False))
# the torch-free list the config and the workflow check names against must name the same entries
_TRAINED = tuple(name for name, net in FEATURE_NETS.items() if net.trained)
assert _TRAINED == TRAINED_FEATURE_EXTRACTORS, (_TRAINED, TRAINED_FEATURE_EXTRACTORS)


def feature_net(name: str) -> FeatureNet:
    try:
        return FEATURE_NETS[name]
    except KeyError:
        raise ArtifactError(f"unknown trained feature extractor '{name}'; choose one of: "
                            f"{', '.join(FEATURE_NETS)}") from None

def sidecar_path(weights: str | Path) -> Path:
    """``digits-cnn.pt`` -> ``digits-cnn.json`` (holds the weights file's sha256)."""
    return Path(weights).with_suffix(".json")


def _nchw(images_nhwc: np.ndarray) -> Tensor:
    return torch.from_numpy(np.array(images_nhwc, dtype=np.uint8)).permute(0, 3, 1, 2).contiguous()


def _shift(x: Tensor, gen: torch.Generator, max_shift: int = 1) -> Tensor:
    """Translate each image by up to ``max_shift`` pixels (zero fill): ``[B, 1, H, W]`` uint8."""
    B, _, H, W = x.shape
    padded = nn.functional.pad(x, (max_shift,) * 4)
    oy = torch.randint(0, 2 * max_shift + 1, (B,), generator=gen)
    ox = torch.randint(0, 2 * max_shift + 1, (B,), generator=gen)
    rows = (oy[:, None] + torch.arange(H))[:, :, None]
    cols = (ox[:, None] + torch.arange(W))[:, None, :]
    return padded[torch.arange(B)[:, None, None], 0, rows, cols].unsqueeze(1)


@torch.no_grad()
def accuracy(net: FeatureCNN, images_nhwc: np.ndarray, labels: np.ndarray, batch_size: int = 1024) -> float:
    """Fraction of ``images_nhwc`` (uint8 ``[N, H, W, C]``) classified as ``labels``."""
    net.eval()
    x, y = _nchw(images_nhwc), torch.as_tensor(labels)
    correct = sum(int((net(x[i:i + batch_size]).argmax(1) == y[i:i + batch_size]).sum())
                  for i in range(0, len(x), batch_size))
    return correct / max(1, len(x))


@dataclass
class TrainedFeatures:
    path: Path
    sha256: str
    accuracy: float
    num_test: int
    meta: dict[str, Any]
    train_cpu_s: float


def _data_record(data) -> dict[str, Any]:
    m = data.manifest
    return {"path": str(data.path), "dataset": m.get("dataset"), "split": m.get("split"), "count": len(data),
            "images_sha256": m.get("images_sha256"), "labels_sha256": m.get("labels_sha256")}


@contextlib.contextmanager
def _intra_op_threads(n: int) -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _check_split(d: PreparedData, spec: FeatureNet) -> None:
    h, w, c = spec.image_shape
    if d.labels is None or tuple(d.images.shape[1:]) != spec.image_shape:
        raise DataError(f"{d.path}: train-features --extractor {spec.name} needs {h}x{w}x{c} images with labels "
                        f"(got images {list(d.images.shape[1:])}, labels {'yes' if d.labels is not None else 'no'})")


def _check_splits(train: PreparedData, test: PreparedData, spec: FeatureNet) -> None:
    """Both splits fit ``spec``; the test split is not the training images (its accuracy would not
    be held out); the training labels hold two classes at least (a classifier's features)."""
    for d in (train, test):
        _check_split(d, spec)
    if train.identity["images_sha256"] == test.identity["images_sha256"]:
        raise InputError(f"{test.path}: the test split holds the training images ({train.path}: the same images "
                         f"sha256); the held-out accuracy needs images the network did not train on")
    classes = np.unique(train.labels)
    if len(classes) < 2:
        raise InputError(f"{train.path}: labels of {len(classes)} class; a feature extractor is trained to tell "
                         f"classes apart: at least 2 needed")


def train_feature_net(name: str, train_dir: str | Path, test_dir: str | Path, out: str | Path, *, seed: int = 0,
                      epochs: int | None = None, batch_size: int | None = None, lr: float | None = None,
                      threads: int = 1) -> TrainedFeatures:
    """Train extractor ``name`` of :data:`FEATURE_NETS` on a prepared train split; write the
    weights and the sidecar. ``epochs``/``batch_size``/``lr`` default to the entry's recipe.

    The held-out accuracy on ``test_dir`` is stored in the file and returned. ``threads``:
    torch intra-op threads while training (restored after). One is the default because the
    layers are too small to gain from more, and on a busy machine spinning OpenMP workers made
    a step many times slower (benchmarks/RESULTS.md, "Figures the code relies on", with the
    training cost of each network).
    """
    spec = feature_net(name)
    if not spec.trained:
        raise ArtifactError(f"{name} is not trained: `python -m timestep_lab rehearse` writes its random weights")
    epochs, batch_size, lr = (spec.epochs if epochs is None else epochs, batch_size or spec.batch_size,
                              spec.lr if lr is None else lr)
    train, test = PreparedData(train_dir, verify=True), PreparedData(test_dir, verify=True)
    _check_splits(train, test, spec)
    x, y = _nchw(np.asarray(train.images)), torch.as_tensor(train.labels)
    num_classes = int(max(train.labels.max(), test.labels.max())) + 1
    cpu0 = time.process_time()
    with torch.random.fork_rng(devices=[]), _intra_op_threads(threads):
        torch.manual_seed(seed)
        net = spec.build(spec.feature_dim, num_classes)
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(net.parameters(), lr=lr, fused=True)  # exact sqrt on the CPU (optim.make_optimizer)
        steps_per_epoch = math.ceil(len(x) / batch_size)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch)
        for epoch in range(epochs):
            net.train()
            perm = torch.randperm(len(x), generator=gen)
            total = 0.0
            for i in range(0, len(x), batch_size):
                idx = perm[i:i + batch_size]
                loss = nn.functional.cross_entropy(net(_shift(x[idx], gen, spec.max_shift)), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(idx)
            log.debug("epoch %d: loss %.4f", epoch + 1, total / len(x))
        train_cpu_s = time.process_time() - cpu0
        net.eval()
        acc = accuracy(net, np.asarray(test.images), test.labels)
        train_acc = accuracy(net, np.asarray(train.images), train.labels)
    meta = {
        "format": FEATURE_FORMAT, "extractor": spec.name, "arch": spec.arch, "feature_dim": net.feature_dim,
        "num_classes": num_classes, "image_shape": list(spec.image_shape), "accuracy": acc, "train_accuracy": train_acc,
        "num_test": len(test), "train_data": _data_record(train), "test_data": _data_record(test),
        "seed": seed, "epochs": epochs, "batch_size": batch_size, "lr": lr, "max_shift": spec.max_shift,
        "torch_version": str(torch.__version__),
    }
    out = Path(out)
    save_torch({**meta, "state_dict": {k: v.detach().clone() for k, v in net.state_dict().items()}}, out)
    digest = sha256_file(out)
    atomic_write_json(sidecar_path(out), {"file": out.name, "sha256": digest, **meta,
                                          "train_cpu_s": round(train_cpu_s, 2)})
    return TrainedFeatures(out, digest, acc, len(test), meta, train_cpu_s)


def load_feature_net(path: str | Path, device: Any = "cpu", *,
                     expect: str | None = None) -> tuple[FeatureCNN, dict[str, Any]]:
    """Load a weights file written by :func:`train_feature_net`: ``(network in eval mode,
    metadata)``. ``expect``: the extractor the file must hold (else :class:`ArtifactError`)."""
    path = Path(path)
    obj = load_torch(path, map_location="cpu")
    archs = {s.arch: s for s in FEATURE_NETS.values()}
    spec = archs.get(obj.get("arch")) if isinstance(obj, dict) and obj.get("format") == FEATURE_FORMAT else None
    if spec is None:
        raise ArtifactError(f"{path}: not a feature-extractor weights file ({', '.join(archs)}; write one with "
                            f"`python -m timestep_lab train-features`)")
    if expect is not None and spec.name != expect:
        raise ArtifactError(f"{path}: holds the {spec.name} extractor ({spec.arch}), not {expect}")
    extra = {"in_channels": int(obj["in_channels"])} if "in_channels" in obj else {}  # the stand-in's
    net = spec.build(int(obj["feature_dim"]), int(obj["num_classes"]), **extra)
    try:
        net.load_state_dict(obj["state_dict"])
    except RuntimeError as exc:
        raise ArtifactError(f"{path}: weights do not fit {spec.arch} ({str(exc).splitlines()[0]})") from None
    net.requires_grad_(False)
    meta = {k: v for k, v in obj.items() if k != "state_dict"}
    meta.setdefault("extractor", spec.name)  # files written before the registry held no name
    return net.to(device).eval(), meta


def write_rehearsal_cnn(out: str | Path, in_channels: int, *, seed: int = 0) -> Path:
    """A :class:`RehearsalCNN` with random weights (Kaiming-normal convolutions, drawn from
    ``seed``: the same bytes every time) -> ``out`` and its sidecar."""
    gen = torch.Generator().manual_seed(seed)
    spec = FEATURE_NETS["rehearsal-cnn"]
    net = RehearsalCNN(spec.feature_dim, in_channels=in_channels)
    with torch.no_grad():
        for p in net.parameters():
            fan_in = p[0].numel() if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=gen) * (math.sqrt(2.0 / fan_in) if p.dim() > 1 else 0.1))
    meta = {"format": FEATURE_FORMAT, "extractor": spec.name, "arch": spec.arch, "feature_dim": net.feature_dim,
            "num_classes": net.num_classes, "in_channels": in_channels, "random": True, "seed": seed,
            "torch_version": str(torch.__version__)}
    out = Path(out)
    save_torch({**meta, "state_dict": {k: v.detach().clone() for k, v in net.state_dict().items()}}, out)
    atomic_write_json(sidecar_path(out), {"file": out.name, "sha256": sha256_file(out), **meta})
    return out
