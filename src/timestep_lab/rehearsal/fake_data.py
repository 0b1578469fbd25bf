"""Fake raw data in each data set's true on-disk format, for a rehearsal (and the data tests).

==============  =================================================================================
data set        what :data:`FAKE_DATA` writes at ``dest`` (the name the study config gives)
==============  =================================================================================
``cifar10``     ``cifar-10-python.tar.gz``: ``cifar-10-batches-py/data_batch_1..5``, ``test_batch``
                and ``batches.meta`` as the official files are: Python 2 ``cPickle`` protocol-2
                byte streams of ``{'data': uint8 [n, 3072], 'labels': [...], ...}``
                (:func:`py2_cifar_batch`); a ``dest`` that is not a ``.tar.gz`` gets the
                extracted folder
``celebahq``    a folder of PNG and JPEG images of several sizes and aspect ratios, some nested
``imagenet``    ``train/<wnid>/*.JPEG`` (ILSVRC's layout), three classes
``digits``      nothing: scikit-learn bundles it
==============  =================================================================================

Pixels are smooth random patterns drawn from ``seed``: the same bytes every time. Must not know
how the data are prepared or used.
"""

from __future__ import annotations

import gzip
import io
import struct
import tarfile
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

__all__ = ["FAKE_DATA", "CIFAR10_BATCHES", "py2_cifar_batch", "write_cifar10", "write_cifar10_folder",
           "write_celebahq", "write_imagenet", "smooth_image"]

CIFAR10_BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


# ------------------------------------------------------------------------------ Python 2 pickles


def _py2_str(b: bytes | str) -> bytes:
    """A Python 2 ``str`` as cPickle writes it (SHORT_BINSTRING / BINSTRING)."""
    b = b.encode("latin-1") if isinstance(b, str) else b
    return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<i", len(b)) + b


def _py2_int(v: int) -> bytes:
    if 0 <= v < 256:
        return b"K" + bytes([v])
    if 0 <= v < 65536:
        return b"M" + struct.pack("<H", v)
    return b"J" + struct.pack("<i", v)


def _py2_uint8_array(a: np.ndarray) -> bytes:
    """A 2-d uint8 numpy array as numpy 1.x under Python 2 pickled it."""
    shape = b"".join(_py2_int(d) for d in a.shape) + b"\x86"  # TUPLE2
    dtype = (b"cnumpy\ndtype\n" + _py2_str("u1") + _py2_int(0) + _py2_int(1) + b"\x87R("
             + _py2_int(3) + _py2_str("|") + b"NNN" + _py2_int(-1) + _py2_int(-1) + _py2_int(0) + b"tb")
    return (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n" + _py2_int(0) + b"\x85" + _py2_str("b")
            + b"\x87R(" + _py2_int(1) + shape + dtype + b"\x89" + _py2_str(np.ascontiguousarray(a).tobytes()) + b"tb")


def py2_cifar_batch(rows: np.ndarray, labels: list[int], batch_label: str) -> bytes:
    """The byte stream of an official CIFAR-10 batch file: a protocol-2 dict
    ``{'data': uint8 [n, 3072], 'labels': [...], 'batch_label': str, 'filenames': [...]}``."""
    names = [f"img_{i:05d}.png" for i in range(len(rows))]
    return (b"\x80\x02}(" + _py2_str("data") + _py2_uint8_array(rows)
            + _py2_str("labels") + b"](" + b"".join(_py2_int(v) for v in labels) + b"e"
            + _py2_str("batch_label") + _py2_str(batch_label)
            + _py2_str("filenames") + b"](" + b"".join(_py2_str(n) for n in names) + b"e" + b"u.")


def _py2_meta() -> bytes:
    """``batches.meta``: ``{'label_names': [...], 'num_cases_per_batch': n, 'num_vis': 3072}``."""
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    return (b"\x80\x02}(" + _py2_str("label_names") + b"](" + b"".join(_py2_str(n) for n in names) + b"e"
            + _py2_str("num_vis") + _py2_int(3072) + b"u.")


# ------------------------------------------------------------------------------ pixels


def smooth_image(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 ``[h, w, 3]``: a random colour gradient plus noise (something a CNN responds to)."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    a = rng.uniform(-1, 1, (3, 3))
    img = np.stack([a[c, 0] * x / w + a[c, 1] * y / h + a[c, 2] for c in range(3)], -1)
    img = 127.5 + 90 * img / max(1e-6, np.abs(img).max()) + rng.normal(0, 20, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _cifar_rows(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` images as a CIFAR-10 file stores them: uint8 ``[n, 3072]``, R, G, B planes of 32x32."""
    return np.stack([smooth_image(32, 32, rng).transpose(2, 0, 1).reshape(-1) for _ in range(n)])


# ------------------------------------------------------------------------------ writers


def write_cifar10_folder(folder: Path, train_images: int, test_images: int, seed: int = 0) -> Path:
    """``folder/cifar-10-batches-py/`` with the five data batches (``train_images`` split over
    them), the test batch and ``batches.meta``."""
    rng = np.random.default_rng(seed)
    out = folder / "cifar-10-batches-py"
    out.mkdir(parents=True, exist_ok=True)
    per = [len(a) for a in np.array_split(np.arange(train_images), 5)] + [test_images]
    for name, n in zip(CIFAR10_BATCHES, per):
        labels = [int(v) for v in rng.integers(0, 10, n)]
        (out / name).write_bytes(py2_cifar_batch(_cifar_rows(n, rng), labels, f"batch {name}"))
    (out / "batches.meta").write_bytes(_py2_meta())
    return out


def write_cifar10(dest: Path, train_images: int, test_images: int, seed: int = 0) -> Path:
    """``dest``: the official ``cifar-10-python.tar.gz`` layout (or, for a folder name, the
    extracted batches folder's parent)."""
    if not dest.name.endswith((".tar.gz", ".tgz")):
        write_cifar10_folder(dest, train_images, test_images, seed)
        return dest
    import tempfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".cifar-") as tmp:
        folder = write_cifar10_folder(Path(tmp), train_images, test_images, seed)
        part = Path(tmp) / dest.name
        # gzip's header holds a time too ("w:gz" writes now's): mtime 0 there as in every member,
        # so the same bytes every time (a second apart, the files differed in header byte 4)
        with open(part, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0) as gz, \
                tarfile.open(fileobj=gz, mode="w") as tar:
            for name in ["batches.meta", *CIFAR10_BATCHES]:
                info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
                data = (folder / name).read_bytes()
                info.size, info.mtime, info.mode = len(data), 0, 0o644  # same bytes every time
                tar.addfile(info, io.BytesIO(data))
        part.replace(dest)
    return dest


def _save(img: np.ndarray, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt = "PNG" if path.suffix.lower() == ".png" else "JPEG"
    Image.fromarray(img).save(path, format=fmt, **({"quality": 90} if fmt == "JPEG" else {}))


def write_celebahq(dest: Path, train_images: int, test_images: int = 0, seed: int = 0) -> Path:
    """A folder of ``train_images`` images, PNG and JPEG, wider and taller than square, a few in a
    sub-folder (the preparer reads it recursively)."""
    rng = np.random.default_rng(seed)
    shapes = [(40, 40), (48, 36), (36, 52)]
    for i in range(train_images):
        h, w = shapes[i % len(shapes)]
        sub = "part2/" if i % 5 == 4 else ""
        _save(smooth_image(h, w, rng), dest / f"{sub}{i:05d}.{'png' if i % 2 else 'jpg'}")
    return dest


def write_imagenet(dest: Path, train_images: int, test_images: int = 0, seed: int = 0) -> Path:
    """``dest/train/<wnid>/*.JPEG`` over three classes (ILSVRC's layout, its file suffix)."""
    rng = np.random.default_rng(seed)
    wnids = ["n01440764", "n01443537", "n01484850"]
    for i in range(train_images):
        h, w = (40, 56) if i % 2 else (56, 40)
        _save(smooth_image(h, w, rng), dest / "train" / wnids[i % 3] / f"{wnids[i % 3]}_{i:05d}.JPEG")
    return dest


#: data set -> ``writer(dest, train_images, test_images, seed)``; None: nothing to write (bundled)
FAKE_DATA: dict[str, Callable[..., Path] | None] = {
    "cifar10": write_cifar10,
    "celebahq": write_celebahq,
    "imagenet": write_imagenet,
    "digits": None,
}
