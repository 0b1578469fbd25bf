"""The small feature networks: the digits CNN trained here, and the rehearsal's random stand-in.

The digits feature extractor: a small CNN classifier trained on the digits training split.

On the embedded default data set (8x8 grey digits) Inception-v3 features are meaningless, so
the pipeline trains this classifier once (``python -m timestep_lab train-features``) and uses
its penultimate layer as the feature space of "FID (digits-CNN features)". It is *not*
Inception FID and the reports say so.

Network (``digits-cnn-v1``), input uint8 (or float holding integers) ``[B, 1, 8, 8]`` in [0, 255]::

    x / 127.5 - 1
    conv3x3(1->16) ReLU  conv3x3(16->32) ReLU  maxpool2      # 4x4
    conv3x3(32->64) ReLU  maxpool2                           # 2x2
    flatten(256)  linear(256->64)                            # = features [B, 64] (pre-activation)
    ReLU  dropout(0.2)  linear(64->10)                       # = logits (classifier head)

The features are the pre-activation of the 64-wide layer, so no unit is dead and the feature
covariance of a few hundred images is full rank.

Weights file (``torch.load(..., weights_only=True)``-loadable dict)::

    format        "timestep_lab.feature_extractor/1"
    arch          "digits-cnn-v1"
    feature_dim   64
    num_classes   10
    state_dict    the network's tensors
    accuracy      held-out accuracy on the test split
    train_data / test_data   {"path", "images_sha256", "labels_sha256", "count"}
    seed, epochs, batch_size, lr, torch_version

and a sidecar ``<weights>.json`` with the sha256 of the weights file itself (a file cannot
hold its own hash). Every metrics file records the sha256 of the weights it used.

The rehearsal stand-in (``rehearsal-cnn-v1``, :class:`RehearsalCNN`): random weights, never
trained, in the same file format (``arch`` names it, ``random: true``); it stands in for
Inception in a fast rehearsal (``python -m timestep_lab rehearse --fast-features``), whose FIDs
of 32-d features cost microseconds where a 2048-d Inception FID costs ~25 CPU-s on a CPU.
Input uint8 ``[B, C, H, W]`` of any size (C of the file)::

    x / 127.5 - 1
    conv3x3(C->16) ReLU  conv3x3(16->32, stride 2) ReLU  adaptive avgpool(4x4)
    flatten(512)  linear(512->32)                            # = features [B, 32]
    ReLU  linear(32->10)                                     # = logits (unused)

:func:`load_feature_net` reads either file; :func:`load_digits_cnn` only the digits CNN.

The metric libraries' adapters for this network are in :mod:`timestep_lab.metrics.extractors`.
Must not know: FID/KID, reference statistics or the metric libraries.
"""

from __future__ import annotations

import contextlib
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from torch import Tensor, nn

from timestep_lab.data import DataError, PreparedData
from timestep_lab.io import ArtifactError, atomic_write_json, load_torch, save_torch, sha256_file

__all__ = ["DIGITS_ARCH", "REHEARSAL_ARCH", "FEATURE_FORMAT", "DigitsCNN", "RehearsalCNN", "TrainedFeatures",
           "train_digits_cnn", "load_digits_cnn", "write_rehearsal_cnn", "load_feature_net", "sidecar_path", "accuracy"]

log = logging.getLogger(__name__)

DIGITS_ARCH = "digits-cnn-v1"
REHEARSAL_ARCH = "rehearsal-cnn-v1"
FEATURE_FORMAT = "timestep_lab.feature_extractor/1"


class DigitsCNN(nn.Module):
    """``features(x) -> [B, feature_dim]``; ``forward(x) -> logits [B, num_classes]``."""

    def __init__(self, feature_dim: int = 64, num_classes: int = 10):
        super().__init__()
        self.feature_dim, self.num_classes = feature_dim, num_classes
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 2 * 2, feature_dim),
        )
        self.head = nn.Sequential(nn.ReLU(), nn.Dropout(0.2), nn.Linear(feature_dim, num_classes))

    def features(self, x: Tensor) -> Tensor:
        """``x``: ``[B, 1, 8, 8]`` pixel values in [0, 255] (uint8 or float)."""
        return self.body(x.float() / 127.5 - 1.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))

    def check_input(self, x: Tensor) -> None:
        """Raise unless ``x`` is uint8 ``[B, 1, 8, 8]`` (what the network was trained on)."""
        if not (torch.is_tensor(x) and x.dtype == torch.uint8 and x.dim() == 4 and x.shape[1:] == (1, 8, 8)):
            raise ValueError(f"digits-cnn expects uint8 [B, 1, 8, 8], got {getattr(x, 'dtype', type(x))} "
                             f"{list(getattr(x, 'shape', []))}")


class RehearsalCNN(nn.Module):
    """The rehearsal's random stand-in for Inception (module docstring): ``features(x) ->
    [B, feature_dim]`` for uint8 ``[B, in_channels, H, W]``, any H, W >= 4."""

    def __init__(self, in_channels: int = 3, feature_dim: int = 32, num_classes: int = 10):
        super().__init__()
        self.in_channels, self.feature_dim, self.num_classes = in_channels, feature_dim, num_classes
        self.body = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
            nn.Flatten(), nn.Linear(32 * 4 * 4, feature_dim),
        )
        self.head = nn.Sequential(nn.ReLU(), nn.Linear(feature_dim, num_classes))

    def features(self, x: Tensor) -> Tensor:
        return self.body(x.float() / 127.5 - 1.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))

    def check_input(self, x: Tensor) -> None:
        if not (torch.is_tensor(x) and x.dim() == 4 and x.shape[1] == self.in_channels and min(x.shape[2:]) >= 4):
            raise ValueError(f"rehearsal-cnn expects [B, {self.in_channels}, H >= 4, W >= 4], got "
                             f"{list(getattr(x, 'shape', []))}")


#: ``arch`` of a feature-network file -> its network class (built from the file's fields)
FEATURE_NETS: dict[str, Any] = {
    DIGITS_ARCH: lambda obj: DigitsCNN(int(obj["feature_dim"]), int(obj["num_classes"])),
    REHEARSAL_ARCH: lambda obj: RehearsalCNN(int(obj["in_channels"]), int(obj["feature_dim"]), int(obj["num_classes"])),
}


def sidecar_path(weights: str | Path) -> Path:
    """``digits_cnn.pt`` -> ``digits_cnn.json`` (holds the weights file's sha256)."""
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
def accuracy(net: DigitsCNN, images_nhwc: np.ndarray, labels: np.ndarray, batch_size: int = 1024) -> float:
    """Fraction of ``images_nhwc`` (uint8 ``[N, 8, 8, 1]``) classified as ``labels``."""
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


def train_digits_cnn(train_dir: str | Path, test_dir: str | Path, out: str | Path, *, seed: int = 0,
                     epochs: int = 30, batch_size: int = 64, lr: float = 3e-3, threads: int = 1) -> TrainedFeatures:
    """Train :class:`DigitsCNN` on a prepared digits train split; write the weights and sidecar.

    Adam with cosine decay, random 1-pixel translations, fixed seed (about 10 s on one CPU core).
    The held-out accuracy on ``test_dir`` is stored in the file and returned. ``threads``:
    torch intra-op threads while training (restored after). One is the default because the
    layers are too small to gain from more, and on a busy machine spinning OpenMP workers made
    a step 40x slower.
    """
    train, test = PreparedData(train_dir, verify=True), PreparedData(test_dir, verify=True)
    for d in (train, test):
        if d.labels is None or d.images.shape[1:] != (8, 8, 1):
            raise DataError(f"{d.path}: train-features needs the 8x8 grey digits with labels "
                            f"(got images {list(d.images.shape[1:])}, labels {'yes' if d.labels is not None else 'no'})")
    x, y = _nchw(np.asarray(train.images)), torch.as_tensor(train.labels)
    num_classes = int(max(train.labels.max(), test.labels.max())) + 1
    with torch.random.fork_rng(devices=[]), _intra_op_threads(threads):
        torch.manual_seed(seed)
        net = DigitsCNN(num_classes=num_classes)
        gen = torch.Generator().manual_seed(seed)
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        steps_per_epoch = math.ceil(len(x) / batch_size)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * steps_per_epoch)
        for epoch in range(epochs):
            net.train()
            perm = torch.randperm(len(x), generator=gen)
            total = 0.0
            for i in range(0, len(x), batch_size):
                idx = perm[i:i + batch_size]
                loss = nn.functional.cross_entropy(net(_shift(x[idx], gen)), y[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                total += float(loss.detach()) * len(idx)
            log.debug("epoch %d: loss %.4f", epoch + 1, total / len(x))
    net.eval()
    acc = accuracy(net, np.asarray(test.images), test.labels)
    meta = {
        "format": FEATURE_FORMAT, "arch": DIGITS_ARCH, "feature_dim": net.feature_dim, "num_classes": num_classes,
        "accuracy": acc, "train_accuracy": accuracy(net, np.asarray(train.images), train.labels),
        "num_test": len(test), "train_data": _data_record(train), "test_data": _data_record(test),
        "seed": seed, "epochs": epochs, "batch_size": batch_size, "lr": lr, "torch_version": str(torch.__version__),
    }
    out = Path(out)
    save_torch({**meta, "state_dict": {k: v.detach().clone() for k, v in net.state_dict().items()}}, out)
    digest = sha256_file(out)
    atomic_write_json(sidecar_path(out), {"file": out.name, "sha256": digest, **meta})
    return TrainedFeatures(out, digest, acc, len(test), meta)


_WRITTEN_BY = {DIGITS_ARCH: "`python -m timestep_lab train-features`", REHEARSAL_ARCH: "`python -m timestep_lab rehearse`"}


def load_feature_net(path: str | Path, device: Any = "cpu", arch: str | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """Load a feature-network file (:data:`FEATURE_FORMAT`; ``arch``: require that network):
    ``(network in eval mode, metadata)``."""
    path = Path(path)
    obj = load_torch(path, map_location="cpu")
    if not isinstance(obj, dict) or obj.get("format") != FEATURE_FORMAT or obj.get("arch") not in FEATURE_NETS \
            or arch not in (None, obj.get("arch")):
        want = arch or " or ".join(FEATURE_NETS)
        raise ArtifactError(f"{path}: not a {want} weights file (write one with "
                            f"{_WRITTEN_BY.get(arch, 'train-features or rehearse')})")
    net = FEATURE_NETS[obj["arch"]](obj)
    try:
        net.load_state_dict(obj["state_dict"])
    except RuntimeError as exc:
        raise ArtifactError(f"{path}: weights do not fit {obj['arch']} ({str(exc).splitlines()[0]})") from None
    net.requires_grad_(False)
    return net.to(device).eval(), {k: v for k, v in obj.items() if k != "state_dict"}


def load_digits_cnn(path: str | Path, device: Any = "cpu") -> tuple[DigitsCNN, dict[str, Any]]:
    """Load a weights file written by :func:`train_digits_cnn`: ``(network in eval mode, metadata)``."""
    return load_feature_net(path, device, DIGITS_ARCH)


def write_rehearsal_cnn(out: str | Path, in_channels: int, *, seed: int = 0) -> Path:
    """A :class:`RehearsalCNN` with random weights (Kaiming-normal convolutions, drawn from
    ``seed``: the same bytes every time) -> ``out`` and its sidecar."""
    gen = torch.Generator().manual_seed(seed)
    net = RehearsalCNN(in_channels)
    with torch.no_grad():
        for p in net.parameters():
            fan_in = p[0].numel() if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=gen) * (math.sqrt(2.0 / fan_in) if p.dim() > 1 else 0.1))
    meta = {"format": FEATURE_FORMAT, "arch": REHEARSAL_ARCH, "feature_dim": net.feature_dim,
            "num_classes": net.num_classes, "in_channels": in_channels, "random": True, "seed": seed,
            "torch_version": str(torch.__version__)}
    out = Path(out)
    save_torch({**meta, "state_dict": {k: v.detach().clone() for k, v in net.state_dict().items()}}, out)
    atomic_write_json(sidecar_path(out), {"file": out.name, "sha256": sha256_file(out), **meta})
    return out
