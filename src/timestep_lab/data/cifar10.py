"""CIFAR-10 from the official ``cifar-10-python.tar.gz`` (read in place) or a folder of its pickles.

The pickles are loaded by a restricted unpickler that only rebuilds numpy arrays and plain
containers; any other global is refused, so no code in a pickle runs."""

from __future__ import annotations

import io
import pickle
import tarfile
import zlib
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from timestep_lab.data.raw import DataError, RawData, need_source, register_dataset, sha256_bytes
from timestep_lab.artifacts.io import sha256_file

__all__ = ["CIFAR10_CLASSES"]

CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_BATCHES = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """Stand-in for ``_codecs.encode``, which Python 3 pickles (protocol < 3) use for ``bytes``."""
    if not isinstance(text, str) or encoding.lower().replace("-", "") != "latin1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} is not allowed")
    return text.encode("latin-1")


def _cifar_globals() -> dict[tuple[str, str], Any]:
    """The only globals a CIFAR-10 pickle may name: how numpy arrays and bytes are rebuilt."""
    try:
        from numpy._core import multiarray, numeric  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core import multiarray, numeric
    allowed: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
                                           ("_codecs", "encode"): _latin1_encode}
    for module in ("numpy.core", "numpy._core"):  # numpy 1 (the official Python 2 files) and numpy 2 names
        allowed[(f"{module}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{module}.numeric", "_frombuffer")] = numeric._frombuffer  # protocol 5 arrays
    return allowed


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that rebuilds dicts, lists, bytes, ints and numpy arrays, and refuses any other
    global (so a malicious pickle cannot run code)."""

    def __init__(self, fh: BinaryIO, name: str):
        super().__init__(fh, encoding="bytes")
        self._name, self._allowed = name, _cifar_globals()

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._allowed:
            return self._allowed[(module, name)]
        raise DataError(f"{self._name}: refused to unpickle: the file names the global {module}.{name}, "
                        "which a CIFAR-10 batch never contains (it could run code)")


def _cifar_field(batch: dict, key: str) -> Any:
    return batch[key.encode()] if key.encode() in batch else batch[key]


def _parse_cifar_batch(data: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch -> (uint8 [n, 32, 32, 3] NHWC, int64 [n] labels); ``name`` labels errors."""
    try:
        batch = _CifarUnpickler(io.BytesIO(data), name).load()
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - a corrupt pickle can fail in many ways
        raise DataError(f"{name}: corrupted or truncated pickle ({type(exc).__name__}: {exc})") from None
    try:
        pixels, labels = _cifar_field(batch, "data"), _cifar_field(batch, "labels")
    except (KeyError, TypeError):
        raise DataError(f"{name}: not a CIFAR-10 batch (expected a dict with b'data' and b'labels')") from None
    if not isinstance(pixels, np.ndarray) or pixels.dtype != np.uint8 or pixels.ndim != 2 or pixels.shape[1] != 3072:
        got = f"{pixels.dtype}{list(pixels.shape)}" if isinstance(pixels, np.ndarray) else type(pixels).__name__
        raise DataError(f"{name}: b'data' must be uint8 [n, 3072], got {got}")
    labels = np.asarray(labels)
    ok = labels.shape == (pixels.shape[0],) and labels.dtype.kind in "iu"
    if not ok or (labels.size and not 0 <= labels.min() <= labels.max() < 10):
        raise DataError(f"{name}: b'labels' must be {pixels.shape[0]} integers in 0..9")
    images = pixels.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # row = R plane, G plane, B plane (CHW)
    return images, labels.astype(np.int64)


def _cifar_read_tar(path: Path, names: list[str]) -> dict[str, tuple[str, bytes]]:
    """``{name: (display name, bytes)}`` of the batch files inside the tarball ``path`` (read
    from the archive directly; nothing is extracted to disk)."""
    found: dict[str, tuple[str, bytes]] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:  # one pass in archive order (seeking back in a .gz re-decompresses)
                base = member.name.rsplit("/", 1)[-1]
                if member.isfile() and base in names and base not in found:
                    found[base] = (f"{path}:{member.name}", tar.extractfile(member).read())
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: not a readable gzip-compressed tar archive ({exc})") from None
    missing = [n for n in names if n not in found]
    if missing:
        raise DataError(f"{path}: {missing[0]} missing (expected {CIFAR10_DIR}/{missing[0]} in the tarball)")
    return found


def _cifar_read_folder(path: Path, names: list[str]) -> dict[str, tuple[str, bytes]]:
    """``{name: (file path, bytes)}`` of the batch files in ``path`` or ``path/cifar-10-batches-py``."""
    folder = path / CIFAR10_DIR if (path / CIFAR10_DIR).is_dir() else path
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise DataError(f"{folder}: {missing[0]} missing")
    return {n: (str(folder / n), (folder / n).read_bytes()) for n in names}


@register_dataset("cifar10")
def _prepare_cifar10(source: Path | None, split: str, resolution: int | None) -> RawData:
    """CIFAR-10 from ``cifar-10-python.tar.gz`` or its extracted pickles -> uint8 [N, 32, 32, 3].

    ``train``: ``data_batch_1..5`` (50,000 images); ``test``: ``test_batch`` (10,000).
    ``source_sha256``: of the tarball, or of the used pickle files' bytes concatenated in
    sorted name order.
    """
    source = need_source("cifar10", source)
    if split not in CIFAR10_BATCHES:
        raise DataError(f"cifar10: split must be train or test, got {split!r}")
    if resolution not in (None, 32):
        raise DataError(f"cifar10: images are 32x32; resolution {resolution} is not supported")
    names = CIFAR10_BATCHES[split]
    if source.is_file():
        blobs, src_hash = _cifar_read_tar(source, names), sha256_file(source)
    else:
        blobs = _cifar_read_folder(source, names)
        src_hash = sha256_bytes(b"".join(blobs[n][1] for n in sorted(names)))
    parts = [_parse_cifar_batch(blobs[n][1], blobs[n][0]) for n in names]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return RawData(images, labels, str(source), src_hash, {"classes": CIFAR10_CLASSES, "num_classes": 10})
