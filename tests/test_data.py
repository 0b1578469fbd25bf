"""Data preparation and loading, end to end through ``prepare()`` and ``PreparedData``.

Every raw data set is written by the test in its real on-disk format: CIFAR-10 batches as the
Python 2 ``cPickle`` protocol-2 byte streams of the official files (and as a
``cifar-10-python.tar.gz``), image folders as real PNG/JPEG/WebP files.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from timestep_lab.artifacts.io import sha256_file
from timestep_lab.data import DataError, IndexStream, Loader, PreparedData, prepare
from timestep_lab.rehearsal.fake_data import CIFAR10_BATCHES as BATCHES
from timestep_lab.rehearsal.fake_data import py2_cifar_batch  # the official files' Python 2 byte streams

# ------------------------------------------------------------------------------ CIFAR-10 files


RED_PIXEL = (3, 17, 200)  # R plane, row 3, column 17
GREEN_PIXEL = (5, 2, 77)  # G plane, row 5, column 2


def cifar_rows(batch_index: int) -> tuple[np.ndarray, list[int]]:
    """4 images as the file stores them (uint8 [4, 3072], each row = R, G, B planes of 32x32)."""
    rows = np.random.default_rng(batch_index).integers(0, 256, (4, 3072), dtype=np.uint8)
    rows[0] = 0
    rows[0, :1024] = 255  # image 0: pure red
    rows[1] = 0
    rows[1, RED_PIXEL[0] * 32 + RED_PIXEL[1]] = RED_PIXEL[2]
    rows[1, 1024 + GREEN_PIXEL[0] * 32 + GREEN_PIXEL[1]] = GREEN_PIXEL[2]
    return rows, [(batch_index + i) % 10 for i in range(4)]


def write_cifar_folder(parent: Path, writer=None) -> Path:
    folder = parent / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for b, name in enumerate(BATCHES):
        rows, labels = cifar_rows(b)
        data = writer(rows, labels) if writer else py2_cifar_batch(rows, labels, f"batch {name}")
        (folder / name).write_bytes(data)
    (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"airplane"] * 10}, protocol=2))
    return folder


def write_cifar_tarball(parent: Path, skip: str | None = None) -> Path:
    folder = write_cifar_folder(parent / "src")
    tar_path = parent / "cifar-10-python.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for name in ["batches.meta", *BATCHES]:
            if name != skip:
                tar.add(folder / name, arcname=f"cifar-10-batches-py/{name}")
    return tar_path


def expected_cifar(split: str) -> tuple[np.ndarray, np.ndarray]:
    idx = range(5) if split == "train" else [5]
    rows = np.concatenate([cifar_rows(b)[0] for b in idx])
    labels = np.concatenate([cifar_rows(b)[1] for b in idx])
    return rows, labels


def assert_cifar_pixels(data: PreparedData, split: str) -> None:
    rows, labels = expected_cifar(split)
    n = len(rows)
    assert data.images.shape == (n, 32, 32, 3) and data.images.dtype == np.uint8
    assert data.manifest["count"] == n and data.manifest["shape"] == [32, 32, 3]
    np.testing.assert_array_equal(data.labels, labels)
    assert data.labels.dtype == np.int64
    red = data.images[0]
    assert (red[..., 0] == 255).all() and (red[..., 1:] == 0).all()
    img = np.asarray(data.images[1])
    r, c, v = RED_PIXEL
    assert img[r, c, 0] == v and img[c, r, 0] == 0 and img[r, c, 1:].tolist() == [0, 0]
    r, c, v = GREEN_PIXEL
    assert img[r, c, 1] == v and img[r, c, 0] == 0 and img[r, c, 2] == 0
    assert np.count_nonzero(img) == 2
    # every other pixel: channel k of (y, x) comes from row[k * 1024 + y * 32 + x]
    for i in (2, 3, n - 1):
        k, y, x = 2, 30, 7
        assert data.images[i][y, x, k] == rows[i, k * 1024 + y * 32 + x]
        np.testing.assert_array_equal(data.images[i], rows[i].reshape(3, 32, 32).transpose(1, 2, 0))


def test_cifar10_extracted_folder(tmp_path):
    folder = write_cifar_folder(tmp_path / "raw")
    out = prepare("cifar10", folder.parent, tmp_path / "train")  # the parent of cifar-10-batches-py
    data = PreparedData(out, verify=True)
    assert_cifar_pixels(data, "train")
    concat = b"".join((folder / f"data_batch_{i}").read_bytes() for i in range(1, 6))
    assert data.manifest["source_sha256"] == hashlib.sha256(concat).hexdigest()
    assert data.manifest["images_sha256"] == sha256_file(out / "images.npy")
    assert data.manifest["labels_sha256"] == sha256_file(out / "labels.npy")
    assert data.manifest["dataset"] == "cifar10" and data.manifest["layout"] == "NHWC"
    assert data.manifest["num_classes"] == 10 and data.manifest["classes"][0] == "airplane"
    # the batches folder itself works the same
    same = PreparedData(prepare("cifar10", folder, tmp_path / "train2"))
    np.testing.assert_array_equal(same.images, data.images)
    assert same.manifest["source_sha256"] == data.manifest["source_sha256"]

    test = PreparedData(prepare("cifar10", folder, tmp_path / "test", split="test"))
    assert_cifar_pixels(test, "test")
    assert test.manifest["split"] == "test"
    assert test.manifest["source_sha256"] == sha256_file(folder / "test_batch")


def test_cifar10_tarball(tmp_path):
    tar_path = write_cifar_tarball(tmp_path)
    train = PreparedData(prepare("cifar10", tar_path, tmp_path / "train"), verify=True)
    assert_cifar_pixels(train, "train")
    assert train.manifest["source_sha256"] == sha256_file(tar_path)
    test = PreparedData(prepare("cifar10", tar_path, tmp_path / "test", split="test"))
    assert_cifar_pixels(test, "test")
    from_folder = PreparedData(prepare("cifar10", tmp_path / "src", tmp_path / "folder"))
    np.testing.assert_array_equal(train.images, from_folder.images)
    assert not (tmp_path / "train" / "cifar-10-batches-py").exists()  # nothing extracted


@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_cifar10_pickles_rewritten_by_python3(tmp_path, protocol):
    """Batches re-pickled with Python 3 and numpy 2 (``_codecs.encode`` / ``_frombuffer``) load too."""
    def writer(rows, labels):
        return pickle.dumps({b"batch_label": b"x", b"labels": labels, b"data": rows,
                             b"filenames": [b"a.png"] * len(rows)}, protocol=protocol)

    folder = write_cifar_folder(tmp_path / "raw", writer)
    assert_cifar_pixels(PreparedData(prepare("cifar10", folder, tmp_path / "out")), "train")


def test_cifar10_missing_batch(tmp_path):
    folder = write_cifar_folder(tmp_path / "raw")
    (folder / "data_batch_3").unlink()
    with pytest.raises(DataError, match=rf"{folder}: data_batch_3 missing"):
        prepare("cifar10", folder.parent, tmp_path / "out")
    prepare("cifar10", folder.parent, tmp_path / "out", split="test")  # the test split does not need it
    tar_path = write_cifar_tarball(tmp_path / "t", skip="data_batch_3")
    with pytest.raises(DataError, match=rf"{tar_path}: data_batch_3 missing"):
        prepare("cifar10", tar_path, tmp_path / "out2")


def test_cifar10_truncated_and_malformed_batches(tmp_path):
    folder = write_cifar_folder(tmp_path / "raw")
    full = (folder / "data_batch_2").read_bytes()
    (folder / "data_batch_2").write_bytes(full[: len(full) // 2])
    with pytest.raises(DataError, match=rf"{folder / 'data_batch_2'}: corrupted or truncated pickle"):
        prepare("cifar10", folder, tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()

    rows, labels = cifar_rows(0)
    bad = {"wrong shape": py2_cifar_batch(rows[:, :3000], labels, "x"),
           "wrong keys": pickle.dumps({b"pixels": rows, b"labels": labels}, protocol=2),
           "label count": py2_cifar_batch(rows, labels[:3], "x")}
    for what, data in bad.items():
        (folder / "data_batch_2").write_bytes(data)
        with pytest.raises(DataError, match=str(folder / "data_batch_2")):
            prepare("cifar10", folder, tmp_path / "out")


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"echo hacked > {self.marker}",))


def test_cifar10_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "hacked"
    folder = write_cifar_folder(tmp_path / "raw")
    evil = {b"data": _Exploit(marker), b"labels": [0]}
    (folder / "data_batch_4").write_bytes(pickle.dumps(evil, protocol=2))
    with pytest.raises(DataError, match=rf"{folder / 'data_batch_4'}: refused to unpickle.*system") as info:
        prepare("cifar10", folder, tmp_path / "out")
    assert not marker.exists(), "the pickle ran code"
    assert "refused" in str(info.value)
    # the same inside the tarball
    tar_path = tmp_path / "evil.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for name in BATCHES:
            tar.add(folder / name, arcname=f"cifar-10-batches-py/{name}")
    with pytest.raises(DataError, match=r"evil\.tar\.gz:cifar-10-batches-py/data_batch_4: refused"):
        prepare("cifar10", tar_path, tmp_path / "out")
    assert not marker.exists()


def test_cifar10_bad_archive_and_arguments(tmp_path):
    junk = tmp_path / "cifar-10-python.tar.gz"
    junk.write_bytes(np.random.default_rng(0).bytes(5000))
    with pytest.raises(DataError, match=rf"{junk}: not a readable gzip"):
        prepare("cifar10", junk, tmp_path / "out")
    tar_path = write_cifar_tarball(tmp_path / "ok")
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(tar_path.read_bytes()[:-2000])
    with pytest.raises(DataError, match=str(truncated)):
        prepare("cifar10", truncated, tmp_path / "out")
    with pytest.raises(DataError, match="resolution 64"):
        prepare("cifar10", tar_path, tmp_path / "out", resolution=64)
    with pytest.raises(DataError, match="split"):
        prepare("cifar10", tar_path, tmp_path / "out", split="val")
    with pytest.raises(DataError, match="source"):
        prepare("cifar10", None, tmp_path / "out")


# ------------------------------------------------------------------------------ image folders


def save(img: np.ndarray, path: Path, **kw) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path, **kw)
    return path


def folder_sha256(root: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        data = f.read_bytes()
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def test_celebahq_folder(tmp_path):
    src = tmp_path / "celeba"
    wide = np.zeros((30, 40, 3), np.uint8)  # 40 wide x 30 high, white vertical stripe at the centre
    wide[:, 18:22] = 255
    tall = np.zeros((50, 30, 3), np.uint8)  # 30 wide x 50 high, blue, white band at the top
    tall[..., 2] = 255
    tall[:5] = 255
    grey = np.full((20, 20), 128, np.uint8)
    files = [save(tall, src / "a" / "c.jpg", quality=95), save(wide, src / "b.png"),
             save(grey, src / "d.webp", lossless=True)]
    (src / "notes.txt").write_text("not an image")
    out = prepare("celebahq", src, tmp_path / "out", resolution=16)
    data = PreparedData(out, verify=True)
    assert data.images.shape == (3, 16, 16, 3)
    assert data.labels is None and not (out / "labels.npy").exists()
    assert data.manifest["source_sha256"] == folder_sha256(src, files)  # sorted by relative path
    tall_out, wide_out, grey_out = (np.asarray(x, dtype=np.int32) for x in data.images)
    # sorted order: a/c.jpg (blue, the top band cropped away), b.png (stripe), d.webp (grey)
    assert tall_out[..., 2].min() > 200 and tall_out[..., :2].max() < 40
    col = wide_out[..., 0].mean(axis=0)
    assert np.argmax(col) in (7, 8) and col[7:9].min() > 120 and col[:4].max() < 10 and col[-4:].max() < 10
    assert (wide_out == wide_out[..., :1]).all()  # grey stays grey in RGB
    assert (grey_out == 128).all()


def test_celebahq_errors(tmp_path):
    src = tmp_path / "celeba"
    save(np.zeros((20, 20, 3), np.uint8), src / "ok.png")
    with pytest.raises(DataError, match="resolution"):
        prepare("celebahq", src, tmp_path / "out")
    with pytest.raises(DataError, match="split"):
        prepare("celebahq", src, tmp_path / "out", split="test", resolution=16)
    bad = src / "x.png"
    bad.write_bytes(np.random.default_rng(0).bytes(300))
    with pytest.raises(DataError, match=rf"{bad}: unreadable"):
        prepare("celebahq", src, tmp_path / "out", resolution=16)
    bad.unlink()
    noisy = save(np.random.default_rng(1).integers(0, 256, (20, 20, 3), dtype=np.uint8), src / "noisy.png")
    truncated = src / "y.png"
    truncated.write_bytes(noisy.read_bytes()[:600])  # cut inside the pixel data
    with pytest.raises(DataError, match=rf"{truncated}: unreadable"):
        prepare("celebahq", src, tmp_path / "out", resolution=16)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=rf"{empty}: no images"):
        prepare("celebahq", empty, tmp_path / "out", resolution=16)


def adm_center_crop_arr(pil_image, image_size):
    """guided-diffusion/guided_diffusion/image_datasets.py, verbatim."""
    while min(*pil_image.size) >= 2 * image_size:
        pil_image = pil_image.resize(tuple(x // 2 for x in pil_image.size), resample=Image.BOX)
    scale = image_size / min(*pil_image.size)
    pil_image = pil_image.resize(tuple(round(x * scale) for x in pil_image.size), resample=Image.BICUBIC)
    arr = np.array(pil_image)
    crop_y = (arr.shape[0] - image_size) // 2
    crop_x = (arr.shape[1] - image_size) // 2
    return arr[crop_y: crop_y + image_size, crop_x: crop_x + image_size]


def smooth_image(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([(x * 255 // w), (y * 255 // h), rng.integers(0, 256, (h, w))], -1)
    return img.astype(np.uint8)


@pytest.fixture
def imagenet_root(tmp_path) -> Path:
    root = tmp_path / "ILSVRC"
    save(smooth_image(50, 70, 0), root / "train" / "n0000001" / "b.JPEG", quality=90)
    save(smooth_image(70, 50, 1), root / "train" / "n0000001" / "a.JPEG", quality=90)
    save(smooth_image(40, 40, 2), root / "train" / "n0000002" / "c.jpeg", quality=90)
    save(smooth_image(33, 60, 3), root / "train" / "n0000010" / "d.png")
    (root / "train" / "n0000010" / "LOC.txt").write_text("ignored")
    save(smooth_image(64, 64, 4), root / "val" / "n0000002" / "e.JPEG", quality=90)
    return root


def test_imagenet_train(imagenet_root, tmp_path):
    out = prepare("imagenet", imagenet_root, tmp_path / "out", resolution=16)
    data = PreparedData(out, verify=True)
    assert data.images.shape == (4, 16, 16, 3)
    np.testing.assert_array_equal(data.labels, [0, 0, 1, 2])
    assert data.manifest["classes"] == ["n0000001", "n0000002", "n0000010"]
    assert data.manifest["num_classes"] == 3
    train = imagenet_root / "train"
    files = [train / "n0000001/a.JPEG", train / "n0000001/b.JPEG", train / "n0000002/c.jpeg", train / "n0000010/d.png"]
    for i, f in enumerate(files):
        with Image.open(f) as img:
            expected = adm_center_crop_arr(img.convert("RGB"), 16)
        np.testing.assert_array_equal(data.images[i], expected, err_msg=str(f))
    assert data.manifest["source_sha256"] == folder_sha256(train, files)
    # the train folder itself is accepted and gives the same result
    same = PreparedData(prepare("imagenet", train, tmp_path / "same", resolution=16))
    np.testing.assert_array_equal(same.images, data.images)
    assert same.manifest["source_sha256"] == data.manifest["source_sha256"]


def test_imagenet_val_uses_train_classes(imagenet_root, tmp_path):
    data = PreparedData(prepare("imagenet", imagenet_root, tmp_path / "val", split="val", resolution=8))
    assert data.images.shape == (1, 8, 8, 3)
    assert data.labels.tolist() == [1]  # n0000002 is the second train class
    assert data.manifest["classes"] == ["n0000001", "n0000002", "n0000010"]


def test_imagenet_errors(imagenet_root, tmp_path):
    empty = tmp_path / "empty_root"
    empty.mkdir()
    with pytest.raises(DataError, match=rf"{empty / 'train'}: ImageNet train folder missing"):
        prepare("imagenet", empty, tmp_path / "x", resolution=16)
    with pytest.raises(DataError, match="resolution"):
        prepare("imagenet", imagenet_root, tmp_path / "x")
    save(smooth_image(20, 20, 5), imagenet_root / "val" / "n9999999" / "f.JPEG")
    with pytest.raises(DataError, match=rf"{imagenet_root / 'val'}: class folders \['n9999999'\] are not"):
        prepare("imagenet", imagenet_root, tmp_path / "x", split="val", resolution=16)
    bad = imagenet_root / "train" / "n0000002" / "z.JPEG"
    bad.write_bytes(b"\xff\xd8\xff\xe0" + bytes(200))
    with pytest.raises(DataError, match=rf"{bad}: unreadable"):
        prepare("imagenet", imagenet_root, tmp_path / "x", resolution=16)


# ------------------------------------------------------------------------------ digits and loading


def test_digits_splits_cover_all_images(digits_dir, digits_test_dir, tmp_path):
    train, test = PreparedData(digits_dir), PreparedData(digits_test_dir)
    every = PreparedData(prepare("digits", None, tmp_path / "all", split="all"))
    assert (len(train), len(test), len(every)) == (1438, 359, 1797)
    for d in (train, test, every):
        assert d.images.shape[1:] == (8, 8, 1) and d.images.dtype == np.uint8
        assert d.manifest["shape"] == [8, 8, 1] and d.manifest["num_classes"] == 10
    assert every.images.min() == 0 and every.images.max() == 255
    assert set(train.labels.tolist()) == set(test.labels.tolist()) == set(range(10))

    def rows(d):  # each image with its label, as sortable rows
        return np.concatenate([np.asarray(d.images).reshape(len(d), -1), d.labels[:, None]], axis=1)

    both = np.concatenate([rows(train), rows(test)])
    np.testing.assert_array_equal(np.unique(both, axis=0, return_counts=True)[1],
                                  np.unique(rows(every), axis=0, return_counts=True)[1])
    np.testing.assert_array_equal(np.unique(both, axis=0), np.unique(rows(every), axis=0))


def test_verify_detects_a_modified_image_array(digits_dir, tmp_path):
    folder = shutil.copytree(digits_dir, tmp_path / "copy")
    PreparedData(folder, verify=True)
    raw = bytearray((folder / "images.npy").read_bytes())
    raw[-5] ^= 0xFF  # a byte of the array data, not the header
    (folder / "images.npy").write_bytes(bytes(raw))
    assert PreparedData(folder, verify=False).images.shape == (1438, 8, 8, 1)  # still loads without verify
    with pytest.raises(DataError, match=rf"{folder / 'images.npy'}: sha256 does not match"):
        PreparedData(folder, verify=True)


def test_prepare_again_removes_stale_labels(tmp_path):
    out = tmp_path / "out"
    prepare("digits", None, out, split="test")
    assert (out / "labels.npy").exists()
    src = tmp_path / "faces"
    save(np.zeros((8, 8, 3), np.uint8), src / "a.png")
    data = PreparedData(prepare("celebahq", src, out, resolution=8))
    assert data.labels is None and not (out / "labels.npy").exists()
    assert "labels_sha256" not in json.loads((out / "manifest.json").read_text())


def test_loader_converts_and_flips(digits_dir):
    data = PreparedData(digits_dir)
    idx = torch.arange(64)
    x = Loader(data).batch(idx)
    assert x.dtype == torch.float32 and x.shape == (64, 1, 8, 8)
    assert x.min() >= -1 and x.max() <= 1 and x.min() == -1 and x.max() == 1
    ref = torch.from_numpy(np.array(data.images[:64])).permute(0, 3, 1, 2).float() / 127.5 - 1
    torch.testing.assert_close(x, ref, rtol=0, atol=1e-6)

    flipping = Loader(data, hflip=True)
    y = flipping.batch(idx, torch.Generator().manual_seed(0))
    flipped = [(y[i] == ref[i].flip(-1)).all().item() and not (y[i] == ref[i]).all().item() for i in range(64)]
    kept = [(y[i] == ref[i]).all().item() for i in range(64)]
    assert all(f or k for f, k in zip(flipped, kept))
    assert 10 < sum(flipped) < 54 and sum(kept) > 10
    torch.testing.assert_close(flipping.batch(idx, torch.Generator().manual_seed(0)), y, rtol=0, atol=0)
    with pytest.raises(ValueError):
        flipping.batch(idx)


def test_index_stream_next_zero_is_empty_and_keeps_the_state():
    stream = IndexStream(10, seed=3)
    first = stream.next(4)
    empty = stream.next(0)
    assert empty.dtype == torch.long and empty.shape == (0,)
    assert stream.state_dict() == {"epoch": 0, "pos": 4, "seed": 3, "n": 10}
    untouched = IndexStream(10, seed=3)
    assert torch.equal(torch.cat([first, stream.next(6), stream.next(0), stream.next(3)]), untouched.next(13))
    stream.next(7)  # now exactly at an epoch boundary
    assert stream.next(0).numel() == 0 and stream.state_dict() == {"epoch": 2, "pos": 0, "seed": 3, "n": 10}
    with pytest.raises(ValueError, match="batch_size must be >= 0"):
        stream.next(-1)


def test_loader_staging_path_matches_the_direct_path(digits_dir, caplog):
    """The pinned-staging logic (a ring of preallocated host buffers, one gather per batch, reused
    only after its copy) runs on a CPU-only machine too: pinning is skipped with one warning and
    the batches are unchanged."""
    data = PreparedData(digits_dir)
    direct = Loader(data)
    assert not direct.stage
    staged = Loader(data, stage=True, staging_buffers=2)
    assert staged.stage and torch.equal(staged.images, direct.images) and not staged.images.is_pinned()
    stream = IndexStream(len(data), seed=0)
    batches, buffers = [], []
    with caplog.at_level("WARNING", logger="timestep_lab.data"):
        for size in (64, 64, 64, 32, 64):
            idx = stream.next(size)
            x = staged.batch(idx)
            batches.append((idx, x))
            buffers.append(staged._staging[(staged._slot - 1) % 2].data_ptr())
            torch.testing.assert_close(x, direct.batch(idx), rtol=0, atol=0)
    if torch.cuda.is_available():
        assert staged.pinned and all(b.is_pinned() for b in staged._staging)
    else:  # no driver: ordinary memory, one warning (not one per buffer or batch), no error
        assert staged.pinned is False
        assert sum("cannot pin host memory" in r.getMessage() for r in caplog.records) == 1
    assert buffers[0] == buffers[2] == buffers[4] and buffers[1] == buffers[3] and buffers[0] != buffers[1]  # ring of 2
    for idx, x in batches:  # later batches never overwrite earlier results (a result is never a staging buffer)
        torch.testing.assert_close(x, direct.batch(idx), rtol=0, atol=0)
    with pytest.raises(ValueError, match="staging_buffers"):
        Loader(data, stage=True, staging_buffers=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_loader_cuda_batches_match_cpu(digits_dir):
    data = PreparedData(digits_dir)
    gpu, cpu = Loader(data, "cuda"), Loader(data)
    assert gpu.stage
    for start in range(0, 640, 64):  # more batches than ring slots
        idx = torch.arange(start, start + 64)
        torch.testing.assert_close(gpu.batch(idx).cpu(), cpu.batch(idx), rtol=0, atol=0)
    assert gpu.pinned


def test_index_stream_epochs_and_resume():
    stream = IndexStream(10, seed=3)
    drawn = torch.cat([stream.next(3) for _ in range(10)])  # 30 indices = 3 epochs, batches cross epochs
    for e in range(3):
        assert sorted(drawn[10 * e: 10 * e + 10].tolist()) == list(range(10))
    assert not torch.equal(drawn[:10], drawn[10:20])  # a new permutation each epoch

    stream = IndexStream(10, seed=3)
    stream.next(7)
    state = stream.state_dict()
    expected = stream.next(6)
    resumed = IndexStream(10, seed=99)
    resumed.load_state_dict(state)
    assert torch.equal(resumed.next(6), expected)
    with pytest.raises(DataError, match="10 images"):
        IndexStream(11, seed=3).load_state_dict(state)
    with pytest.raises(DataError):
        IndexStream(0, seed=0)
