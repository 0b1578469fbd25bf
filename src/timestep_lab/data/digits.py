"""scikit-learn's bundled 8x8 handwritten digits, split 80/20 into train/test with a fixed permutation
(needs no network)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from timestep_lab.data.raw import DataError, RawData, register_dataset, sha256_bytes
from timestep_lab.artifacts.io import sha256_file

__all__ = ['DIGITS_TEST_FRACTION', 'DIGITS_SPLIT_SEED']


DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


@register_dataset("digits")
def _prepare_digits(source: Path | None, split: str, resolution: int | None) -> RawData:
    """scikit-learn's bundled digits (UCI ML hand-written digits test set), 8x8 grey."""
    import sklearn.datasets

    if source is not None:  # it would be ignored, and the user believe the prepared data are theirs
        raise DataError(f"{source}: digits is scikit-learn's bundled set and reads no source; leave --source "
                        f"(data.source) unset, or prepare another data set")
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
    src_hash = sha256_file(data_file) if data_file.is_file() else sha256_bytes(np.ascontiguousarray(bunch.images).tobytes())
    return RawData(images[index], labels[index], f"sklearn.datasets.load_digits ({data_file.name})", src_hash,
                   {"split_seed": DIGITS_SPLIT_SEED, "test_fraction": DIGITS_TEST_FRACTION})
