"""Data set preparation and loading.

``prepare(name, source, out_dir, split=..., resolution=...)`` converts a raw data set into a
*prepared folder*::

    out_dir/images.npy      uint8 [N, H, W, C] (NHWC), memory-mappable
    out_dir/labels.npy      int64 [N] class labels (when the data set has them)
    out_dir/manifest.json   {"dataset", "split", "count", "shape", "layout", "source",
                             "source_sha256", "images_sha256", ...}

Preparers (registry ``DATASETS``; each ``(source, split, resolution) -> RawData``):

``digits``    scikit-learn's bundled 8x8 handwritten digits (1,797 images, 0..16 scaled to
              0..255), split 80/20 into train (1,438) / test (359) with a fixed permutation.
              Needs no network.
``cifar10``   the official ``cifar-10-python.tar.gz`` (read in place) or a folder with its
              extracted ``data_batch_1..5`` (train) / ``test_batch`` (test) pickles -> 32x32x3.
              The pickles are loaded by a restricted unpickler that only rebuilds numpy arrays
              and plain containers; any other global is refused (no code runs).
``celebahq``  a folder of png/jpg/jpeg/webp images (recursive), shorter side resized to
              ``resolution`` (bicubic), centre-cropped; no labels; split ``train`` only.
``imagenet``  an ILSVRC-style ``<root>/{train,val}/<wnid>/*.JPEG`` tree, ADM's
              ``center_crop_arr`` to ``resolution``; label = index of the wnid in sorted order.

Image-folder preparers record ``source_sha256`` over every file's relative path and bytes.
The whole converted array is held in memory while preparing (N * res^2 * 3 bytes).

Training reads a prepared folder with :class:`PreparedData` and draws batches with
:class:`Loader` (whole array in memory, uint8 -> [-1, 1] conversion and flips on the device).
Every error names the file it is about.
"""

from __future__ import annotations

import hashlib
import io
import logging
import pickle
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np
import torch
from PIL import Image
from torch import Tensor

from timestep_lab.io import ArtifactError, atomic_path, atomic_write_json, read_json, sha256_file

log = logging.getLogger(__name__)

__all__ = [
    "DataError",
    "DATASETS",
    "prepare",
    "PreparedData",
    "Loader",
    "IndexStream",
    "to_float",
    "to_uint8",
    "center_crop_arr",
]


class DataError(ArtifactError):
    """A raw or prepared data file is missing, unreadable or malformed (the message names it)."""


@dataclass
class RawData:
    """What a preparer returns: uint8 NHWC images, optional labels, provenance."""

    images: np.ndarray
    labels: np.ndarray | None
    source: str
    source_sha256: str
    extra: dict[str, Any] | None = None


# name -> function(source: Path | None, split: str, resolution: int | None) -> RawData
DATASETS: dict[str, Callable[..., RawData]] = {}


def register_dataset(name: str) -> Callable:
    def deco(fn: Callable[..., RawData]) -> Callable[..., RawData]:
        DATASETS[name] = fn
        return fn

    return deco


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------ digits

DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


@register_dataset("digits")
def _prepare_digits(source: Path | None, split: str, resolution: int | None) -> RawData:
    """scikit-learn's bundled digits (UCI ML hand-written digits test set), 8x8 grey."""
    import sklearn.datasets

    if split not in ("train", "test", "all"):
        raise DataError(f"digits: split must be train, test or all, got {split!r}")
    if resolution not in (None, 8):
        raise DataError(f"digits: images are 8x8; resolution {resolution} is not supported")
    bunch = sklearn.datasets.load_digits()
    images = np.rint(bunch.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)[..., None]  # [N, 8, 8, 1]
    labels = bunch.target.astype(np.int64)
    perm = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(images))
    n_test = int(round(len(images) * DIGITS_TEST_FRACTION))
    index = {"train": np.sort(perm[n_test:]), "test": np.sort(perm[:n_test]), "all": np.arange(len(images))}[split]
    data_file = Path(sklearn.datasets.__file__).parent / "data" / "digits.csv.gz"
    src_hash = sha256_file(data_file) if data_file.is_file() else _sha256_bytes(np.ascontiguousarray(bunch.images).tobytes())
    return RawData(images[index], labels[index], f"sklearn.datasets.load_digits ({data_file.name})", src_hash,
                   {"split_seed": DIGITS_SPLIT_SEED, "test_fraction": DIGITS_TEST_FRACTION})


# ------------------------------------------------------------------------------ shared helpers

PROGRESS_MIN_IMAGES = 300  # show a progress bar only when converting more images than this


def _need_source(name: str, source: Path | None) -> Path:
    if source is None:
        raise DataError(f"{name}: a source path is required (--source)")
    return source


def _need_resolution(name: str, resolution: int | None) -> int:
    if resolution is None or int(resolution) <= 0:
        raise DataError(f"{name}: a positive resolution is required (--resolution), got {resolution}")
    return int(resolution)


def _progress(items: list, desc: str):
    """``items`` wrapped in a tqdm bar (silent for small jobs)."""
    from tqdm.auto import tqdm

    return tqdm(items, desc=desc, unit="img", disable=len(items) <= PROGRESS_MIN_IMAGES)


def _read_rgb(path: Path) -> tuple[Image.Image, bytes]:
    """Decode one image file as RGB; returns the image and the file's bytes (for hashing)."""
    try:
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            return img.convert("RGB"), data
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise DataError(f"{path}: unreadable or corrupt image ({exc})") from None


def _crop_center(img: Image.Image, size: int) -> np.ndarray:
    """uint8 [size, size, 3]: the centre square of ``img`` (ADM's offsets: ``(h - size) // 2``)."""
    arr = np.asarray(img)
    y, x = (arr.shape[0] - size) // 2, (arr.shape[1] - size) // 2
    return arr[y:y + size, x:x + size]


def _convert_images(root: Path, files: list[Path], size: int, convert: Callable[[Image.Image, int], np.ndarray],
                    desc: str) -> tuple[np.ndarray, str]:
    """Decode and convert ``files`` into one preallocated uint8 [N, size, size, 3] array.

    Also returns the sha256 over every file, in order, of ``relative path (UTF-8), NUL,
    8-byte little-endian length, file bytes`` (paths relative to ``root``, ``/``-separated).
    """
    images = np.empty((len(files), size, size, 3), dtype=np.uint8)
    digest = hashlib.sha256()
    for i, path in enumerate(_progress(files, desc)):
        img, data = _read_rgb(path)
        images[i] = convert(img, size)
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + len(data).to_bytes(8, "little"))
        digest.update(data)
    return images, digest.hexdigest()


def _image_files(folder: Path, suffixes: frozenset[str], recursive: bool) -> list[Path]:
    """Image files under ``folder`` (suffix case-insensitive), sorted by relative path."""
    candidates = folder.rglob("*") if recursive else folder.iterdir()
    files = [p for p in candidates if p.suffix.lower() in suffixes and p.is_file()]
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


# ------------------------------------------------------------------------------ cifar10

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
    source = _need_source("cifar10", source)
    if split not in CIFAR10_BATCHES:
        raise DataError(f"cifar10: split must be train or test, got {split!r}")
    if resolution not in (None, 32):
        raise DataError(f"cifar10: images are 32x32; resolution {resolution} is not supported")
    names = CIFAR10_BATCHES[split]
    if source.is_file():
        blobs, src_hash = _cifar_read_tar(source, names), sha256_file(source)
    else:
        blobs = _cifar_read_folder(source, names)
        src_hash = _sha256_bytes(b"".join(blobs[n][1] for n in sorted(names)))
    parts = [_parse_cifar_batch(blobs[n][1], blobs[n][0]) for n in names]
    images = np.concatenate([p[0] for p in parts])
    labels = np.concatenate([p[1] for p in parts])
    return RawData(images, labels, str(source), src_hash, {"classes": CIFAR10_CLASSES, "num_classes": 10})


# ------------------------------------------------------------------------------ celebahq

CELEBAHQ_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp"})


def _resize_short_side_crop(img: Image.Image, size: int) -> np.ndarray:
    """Bicubic resize (box pre-reduction, ``reducing_gap=3``) so the shorter side is ``size``,
    then the centre square: uint8 [size, size, 3]."""
    w, h = img.size
    scale = size / min(w, h)
    new = (size, max(size, round(h * scale))) if w <= h else (max(size, round(w * scale)), size)
    return _crop_center(img.resize(new, Image.BICUBIC, reducing_gap=3.0), size)


@register_dataset("celebahq")
def _prepare_celebahq(source: Path | None, split: str, resolution: int | None) -> RawData:
    """A folder of images (png/jpg/jpeg/webp, recursive, sorted by relative path) -> uint8
    [N, resolution, resolution, 3]: shorter side resized to ``resolution``, centre-cropped.

    No labels. ``split`` is ``train`` (or ``all``; the same images). ``source_sha256`` covers
    every file's relative path and bytes (see :func:`_convert_images`).
    """
    source, size = _need_source("celebahq", source), _need_resolution("celebahq", resolution)
    if split not in ("train", "all"):
        raise DataError(f"celebahq: only split train (or all) exists, got {split!r}")
    if not source.is_dir():
        raise DataError(f"{source}: celebahq source must be a folder of images")
    files = _image_files(source, CELEBAHQ_SUFFIXES, recursive=True)
    if not files:
        raise DataError(f"{source}: no images ({', '.join(sorted(CELEBAHQ_SUFFIXES))}) found")
    images, src_hash = _convert_images(source, files, size, _resize_short_side_crop, "celebahq")
    return RawData(images, None, str(source), src_hash)


# ------------------------------------------------------------------------------ imagenet

IMAGENET_SUFFIXES = frozenset({".jpeg", ".jpg", ".png"})


def center_crop_arr(img: Image.Image, size: int) -> np.ndarray:
    """ADM (guided-diffusion) ``center_crop_arr``: uint8 [size, size, 3].

    Halve with ``Image.BOX`` while the shorter side is >= 2 * size, resize so the shorter side
    is ``size`` (``round(x * size / min(w, h))``, ``Image.BICUBIC``), crop the centre.
    """
    while min(*img.size) >= 2 * size:
        img = img.resize(tuple(x // 2 for x in img.size), resample=Image.BOX)
    scale = size / min(*img.size)
    img = img.resize(tuple(round(x * scale) for x in img.size), resample=Image.BICUBIC)
    return _crop_center(img, size)


def _imagenet_folder(source: Path, split: str) -> Path:
    """``source/<split>``, or ``source`` itself when it is named ``<split>``."""
    if (source / split).is_dir():
        return source / split
    if source.name == split and source.is_dir():
        return source
    raise DataError(f"{source / split}: ImageNet {split} folder missing (expected <root>/{split}/<wnid>/*.JPEG)")


def _wnids(folder: Path) -> list[str]:
    """Sorted class folder names (WordNet ids) of a split folder."""
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))


@register_dataset("imagenet")
def _prepare_imagenet(source: Path | None, split: str, resolution: int | None) -> RawData:
    """ILSVRC ``<root>/<split>/<wnid>/*.JPEG`` -> uint8 [N, resolution, resolution, 3] with
    :func:`center_crop_arr`, int64 labels = index of the wnid in sorted order.

    ``split``: ``train`` or ``val`` (``val`` must use the same ``<wnid>/`` layout; its labels
    use the train classes when ``<root>/train`` exists). ``source`` may also be the split
    folder itself. The manifest gets ``classes`` (the wnids). ``source_sha256`` as for celebahq.
    """
    source, size = _need_source("imagenet", source), _need_resolution("imagenet", resolution)
    if split not in ("train", "val"):
        raise DataError(f"imagenet: split must be train or val, got {split!r}")
    folder = _imagenet_folder(source, split)
    train = folder.parent / "train"
    classes = _wnids(train if split == "val" and train.is_dir() else folder)
    if not classes:
        raise DataError(f"{folder}: no class folders (<wnid>/) found")
    unknown = sorted(set(_wnids(folder)) - set(classes))
    if unknown:
        raise DataError(f"{folder}: class folders {unknown[:3]} are not among the {len(classes)} train classes")
    files, labels = [], []
    for label, wnid in enumerate(classes):
        found = _image_files(folder / wnid, IMAGENET_SUFFIXES, recursive=False) if (folder / wnid).is_dir() else []
        files += found
        labels += [label] * len(found)
    if not files:
        raise DataError(f"{folder}: no images ({', '.join(sorted(IMAGENET_SUFFIXES))}) in the class folders")
    images, src_hash = _convert_images(folder, files, size, center_crop_arr, f"imagenet {split}")
    return RawData(images, np.asarray(labels, dtype=np.int64), str(folder), src_hash,
                   {"classes": classes, "num_classes": len(classes)})


# ------------------------------------------------------------------------------ prepare


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


# ------------------------------------------------------------------------------ load


class PreparedData:
    """A prepared folder: ``images`` (uint8 NHWC, memory-mapped), ``labels`` and ``manifest``.

    :param verify: also check the sha256 of ``images.npy`` against the manifest (reads the file).
    """

    def __init__(self, path: str | Path, verify: bool = False):
        self.path = Path(path)
        manifest_file = self.path / "manifest.json"
        if not self.path.is_dir():
            raise DataError(f"{self.path}: prepared data folder not found (run `python -m timestep_lab prepare`)")
        if not manifest_file.is_file():
            raise DataError(f"{manifest_file}: manifest missing; the folder was not prepared completely")
        self.manifest = read_json(manifest_file)
        images_file = self.path / "images.npy"
        try:
            self.images = np.load(images_file, mmap_mode="r")
        except FileNotFoundError:
            raise DataError(f"{images_file}: image array missing") from None
        except (ValueError, OSError) as exc:
            raise DataError(f"{images_file}: unreadable image array ({exc})") from None
        expected = (self.manifest.get("count"), *self.manifest.get("shape", []))
        if self.images.dtype != np.uint8 or tuple(self.images.shape) != tuple(expected):
            raise DataError(f"{images_file}: array is {self.images.dtype}{list(self.images.shape)}, "
                            f"manifest says uint8{list(expected)}")
        if verify and sha256_file(images_file) != self.manifest.get("images_sha256"):
            raise DataError(f"{images_file}: sha256 does not match {manifest_file}; the file is corrupted or was changed")
        labels_file = self.path / "labels.npy"
        self.labels = np.load(labels_file) if labels_file.is_file() else None
        if self.labels is not None and self.labels.shape != (len(self.images),):
            raise DataError(f"{labels_file}: {list(self.labels.shape)} labels for {len(self.images)} images")

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def resolution(self) -> int:
        return int(self.images.shape[1])

    @property
    def channels(self) -> int:
        return int(self.images.shape[3])


def to_float(images_nchw_uint8: Tensor) -> Tensor:
    """uint8 [0, 255] -> float32 [-1, 1]: ``x / 127.5 - 1``."""
    return images_nchw_uint8.float().div_(127.5).sub_(1.0)


def to_uint8(x: Tensor) -> Tensor:
    """float [-1, 1] -> uint8 [0, 255] (rounded, clamped)."""
    return ((x.float() + 1.0) * 127.5).round_().clamp_(0, 255).to(torch.uint8)


class IndexStream:
    """Endless shuffled epochs over ``n`` items, resumable: epoch ``e`` is the permutation
    drawn from ``Generator().manual_seed(seed + e)``; the state is ``(epoch, position)``."""

    def __init__(self, n: int, seed: int):
        if n <= 0:
            raise DataError("cannot draw batches from an empty data set")
        self.n, self.seed, self.epoch, self.pos = n, seed, 0, 0
        self._perm = self._permutation(0)

    def _permutation(self, epoch: int) -> Tensor:
        return torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + epoch))

    def next(self, batch_size: int) -> Tensor:
        """The next ``batch_size`` indices, ``LongTensor[batch_size]`` (crossing epochs as needed).

        ``next(0)`` returns an empty ``LongTensor[0]`` and leaves the state unchanged.
        """
        if batch_size < 0:
            raise ValueError(f"batch_size must be >= 0, got {batch_size}")
        out = [self._perm[:0]]  # never empty, so torch.cat works (and keeps int64) for batch_size 0
        need = batch_size
        while need:
            take = min(need, self.n - self.pos)
            out.append(self._perm[self.pos:self.pos + take])
            self.pos += take
            need -= take
            if self.pos == self.n:
                self.epoch, self.pos = self.epoch + 1, 0
                self._perm = self._permutation(self.epoch)
        return torch.cat(out)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos, "seed": self.seed, "n": self.n}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["n"] != self.n:
            raise DataError(f"checkpoint was trained on {state['n']} images, the data set has {self.n}")
        self.seed, self.epoch, self.pos = int(state["seed"]), int(state["epoch"]), int(state["pos"])
        self._perm = self._permutation(self.epoch)


LOADER_COPY_CHUNK = 4096  # images converted NHWC -> NCHW per copy while loading (bounds the temporary)


def _host_tensor(shape: tuple[int, ...], pin: bool) -> tuple[Tensor, bool]:
    """An empty uint8 host tensor, page-locked when ``pin`` and the platform allows it.

    Returns ``(tensor, pinned)``. Pinning needs a CUDA driver; without one (a CPU-only machine)
    the tensor is ordinary pageable memory and ``pinned`` is False, so callers degrade to
    synchronous copies instead of failing."""
    if pin:
        try:
            return torch.empty(shape, dtype=torch.uint8, pin_memory=True), True
        except RuntimeError as exc:  # no CUDA driver / accelerator: pinning is impossible, not an error
            log.warning("cannot pin host memory (%s); host-to-device copies will be synchronous",
                        str(exc).splitlines()[0])
    return torch.empty(shape, dtype=torch.uint8), False


class Loader:
    """Batches from a prepared data set held in host memory as uint8 NCHW.

    ``batch(indices, generator)`` returns ``float32 [B, C, H, W]`` in [-1, 1] on ``device``;
    with ``hflip`` each image is flipped with probability 1/2 using ``generator`` (on the
    device, so augmentation never stalls the accelerator).

    The whole uint8 array is read into memory once (chunk by chunk from the memory-mapped
    file, so the peak is one copy of the data set plus a chunk).

    Host-to-device path (``stage``; default: when ``device`` is CUDA): each batch is gathered
    with ``index_select(out=...)`` into one of ``staging_buffers`` page-locked (pinned) staging
    buffers, allocated once, and copied with ``non_blocking=True``: the host neither waits for
    the copy nor allocates pinned memory per step. Only the staging buffers are pinned, not the
    data set: the gather runs on the CPU either way, and only the source of a DMA copy has to
    be page-locked (pinning all of ImageNet-64, 15.7 GB, would lock that much RAM, or fail).
    A ring slot is reused only after the copy that last read it has finished (a CUDA event per
    slot; with 2 slots the host runs up to one batch ahead of the copy engine without waiting).
    The uint8 -> float conversion and the flips run on the device after the copy (4x fewer
    bytes over PCIe than float32).

    Without a CUDA driver (``stage=True`` on a CPU-only machine) pinning is skipped with one
    warning and the same ring runs with ordinary memory. On a CPU device with ``stage`` off
    the batch is gathered directly (the float conversion makes a new tensor anyway).
    """

    def __init__(self, data: PreparedData, device: torch.device | str = "cpu", hflip: bool = False, *,
                 stage: bool | None = None, staging_buffers: int = 2):
        self.device = torch.device(device)
        self.hflip = hflip
        if staging_buffers < 1:
            raise ValueError(f"staging_buffers must be >= 1, got {staging_buffers}")
        src = data.images  # uint8 [N, H, W, C], memory-mapped
        n, h, w, c = (int(s) for s in src.shape)
        images = torch.empty((n, c, h, w), dtype=torch.uint8)
        for i in range(0, n, LOADER_COPY_CHUNK):  # NHWC -> NCHW chunk by chunk: no full-size temporaries
            chunk = np.array(src[i:i + LOADER_COPY_CHUNK])  # a writable copy: torch warns on read-only memmaps
            images[i:i + len(chunk)].copy_(torch.from_numpy(chunk).permute(0, 3, 1, 2))
        self.images = images  # uint8 [N, C, H, W] on the host
        self.stage = self.device.type == "cuda" if stage is None else bool(stage)
        self.pinned: bool | None = None  # whether the staging buffers are page-locked (known after the first batch)
        self._staging: list[Tensor | None] = [None] * staging_buffers
        self._events: list[Any] = [None] * staging_buffers  # torch.cuda.Event of the copy that last read a slot
        self._slot = 0

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def _staging_buffer(self, batch: int) -> tuple[int, Tensor]:
        """The next ring slot, at least ``batch`` images long, safe to overwrite now."""
        k = self._slot
        self._slot = (k + 1) % len(self._staging)
        if self._events[k] is not None:
            self._events[k].synchronize()  # normally long done: the copy was queued a ring turn ago
            self._events[k] = None
        buf = self._staging[k]
        if buf is None or buf.shape[0] < batch:  # once per slot (or when a larger batch comes)
            buf, pinned = _host_tensor((batch, *self.images.shape[1:]), self.pinned is not False)
            self.pinned = pinned if self.pinned is None else self.pinned and pinned
            self._staging[k] = buf
        return k, buf[:batch]

    def batch(self, indices: Tensor, generator: torch.Generator | None = None) -> Tensor:
        idx = indices.to("cpu", torch.long)
        if not self.stage:
            x = self.images.index_select(0, idx)
            if self.device.type != "cpu":  # staging switched off: a plain synchronous copy
                x = x.to(self.device)
        else:
            k, buf = self._staging_buffer(len(idx))
            torch.index_select(self.images, 0, idx, out=buf)
            x = buf.to(self.device, non_blocking=bool(self.pinned))
            if self.device.type == "cuda":
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(self.device))
                self._events[k] = event
        # to_float allocates a new tensor, so the result never aliases a staging buffer (even on CPU,
        # where .to() above returns the buffer itself)
        x = to_float(x)
        if self.hflip:
            if generator is None:
                raise ValueError("hflip needs a generator")
            flip = torch.rand(x.shape[0], generator=generator, device=generator.device) < 0.5
            x = torch.where(flip.to(x.device)[:, None, None, None], x.flip(3), x)
        return x
