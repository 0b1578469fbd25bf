"""Command line: ``python -m timestep_lab <command> ...`` -- paths in, paths out, nothing else.

Commands are registered in ``COMMANDS`` (one function each); a new stage adds a function and a
parser here and its logic in the library. User errors (bad config, missing or corrupted files,
a diverged run) print one ``error: ...`` line naming the key or file and exit with status 2
(config/data) or 3 (diverged); they never show a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Callable

__all__ = ["main", "COMMANDS"]

from timestep_lab.config import ConfigError  # torch-free

log = logging.getLogger("timestep_lab")

COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, help: str):
    def deco(fn):
        def add(sub):
            p = sub.add_parser(name, help=help, description=(fn.__doc__ or help).strip())
            fn.configure(p)
            p.set_defaults(_run=fn)

        COMMANDS[name] = (add, fn)
        return fn

    return deco


def _config_args(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("--config", type=Path, required=required, help="run config YAML (deltas over the defaults)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (repeatable), e.g. --set train.batch_size=64")


def _runtime_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--device", default=None, help="override train.device (auto, cpu, cuda, cuda:N)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _load_run_config(args: argparse.Namespace):
    from timestep_lab.components import check_config
    from timestep_lab.config import load_config

    overrides = list(args.overrides)
    if getattr(args, "device", None):
        overrides.append(f"train.device={args.device}")
    cfg = load_config(args.config, overrides)
    return check_config(cfg, source=str(args.config or "<defaults>"))


def _setup_torch(args: argparse.Namespace) -> None:
    import torch

    if getattr(args, "threads", None):
        torch.set_num_threads(args.threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))  # for child processes (papermill kernels)


def _world():
    """The process group from torchrun's environment (one process when not launched by it)."""
    from timestep_lab.distributed import World

    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World()
    import torch
    import torch.distributed as dist

    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend=backend)
    return World(rank=rank, size=size, local_rank=local_rank)


# ------------------------------------------------------------------------------- commands


@command("prepare", "convert a raw data set into a prepared folder (uint8 array + manifest)")
def cmd_prepare(args: argparse.Namespace) -> int:
    """Prepare a data set: digits (bundled), cifar10, celebahq or imagenet."""
    from timestep_lab.data import prepare

    out = prepare(args.dataset, args.source, args.out, split=args.split, resolution=args.resolution)
    log.info("prepared %s (%s) -> %s", args.dataset, args.split, out)
    return 0


def _prepare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", help="digits | cifar10 | celebahq | imagenet")
    p.add_argument("--source", type=Path, default=None, help="raw data: tarball, pickle folder, image folder or ImageNet root")
    p.add_argument("--out", type=Path, required=True, help="prepared folder to write")
    p.add_argument("--split", default="train", help="train | test (| all for digits)")
    p.add_argument("--resolution", type=int, default=None, help="output resolution (celebahq, imagenet)")


cmd_prepare.configure = _prepare_args


@command("train", "train one run into an output folder (resumes automatically)")
def cmd_train(args: argparse.Namespace) -> int:
    """Train the run described by --config (plus --set overrides) into --out."""
    _setup_torch(args)
    from timestep_lab.train import train

    cfg = _load_run_config(args)
    world = _world()
    result = train(cfg, args.out, resume=not args.no_resume, progress=not args.no_progress, world=world,
                   stop_after_kimg=args.stop_after_kimg)
    if world.is_main:
        if result.status == "incomplete":
            log.info("stopped at %.1f kimg as asked; rerun to continue", result.nimg / 1000)
        else:
            log.info("%s: %s after %.1f kimg, %d steps, %.1f s, final loss %s -> %s", result.out_dir.name, result.status,
                     result.nimg / 1000, result.step, result.wall_time_s,
                     f"{result.final_loss:.5f}" if result.final_loss is not None else "n/a", result.model_path)
    if result.status == "diverged":
        log.error("%s", result.message)
    return 0


def _train_args(p: argparse.ArgumentParser) -> None:
    _config_args(p)
    _runtime_args(p)
    p.add_argument("--out", type=Path, required=True, help="run folder")
    p.add_argument("--no-resume", action="store_true", help="ignore an existing checkpoint and start over")
    p.add_argument("--stop-after-kimg", type=float, default=None, help="stop (resumably) after this many kimg")


cmd_train.configure = _train_args


@command("sample", "draw samples from a trained model into samples.npz (+ PNG grid)")
def cmd_sample(args: argparse.Namespace) -> int:
    """Sample with the model's own `sample:` settings, changed by --config/--set. With
    --gt-data/--gt-range the true x0 of held-out images replaces the prediction inside the range."""
    _setup_torch(args)
    from timestep_lab.config import SampleConfig, apply_overrides, config_from_dict, load_yaml
    from timestep_lab.io import load_torch
    from timestep_lab.sampling import generate
    from timestep_lab.train import resolve_device

    embedded = {}
    if args.format == "timestep_lab":
        obj = load_torch(args.model)
        embedded = obj.get("config", {}).get("sample", {}) if isinstance(obj, dict) else {}
    data = dict(embedded)
    if args.config:
        data.update(load_yaml(args.config).get("sample", {}))
    data = apply_overrides({"sample": data}, args.overrides)["sample"]
    cfg = config_from_dict(data, f"{args.model} sample settings", SampleConfig)
    gt_images = None
    if args.gt_data is not None:
        from timestep_lab.data import PreparedData

        if args.gt_range is None:
            raise ConfigError("--gt-data needs --gt-range LO HI (0-based inclusive original timesteps)")
        gt_images = PreparedData(args.gt_data).images
    elif args.gt_range is not None:
        raise ConfigError("--gt-range needs --gt-data (the held-out images whose x0 replaces the prediction)")
    device = resolve_device(args.device or "auto")
    info = generate(args.model, args.out, cfg, device=device, grid_png=args.grid, progress=not args.no_progress,
                    fmt=args.format, gt_images=gt_images, gt_range=tuple(args.gt_range) if args.gt_range else None,
                    mixed_inference=args.mixed_inference)
    log.info("%d samples (%s, %d steps) -> %s", info["num_samples"], info["method"], info["steps"], args.out)
    return 0


def _sample_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="model.pt, a snapshot, or a pretrained checkpoint")
    p.add_argument("--format", default="timestep_lab", choices=("timestep_lab", "diffusers", "guided_diffusion"),
                   help="checkpoint format of --model")
    p.add_argument("--out", type=Path, required=True, help="samples.npz to write")
    p.add_argument("--grid", type=Path, default=None, help="PNG grid of the first sample.grid_size images")
    p.add_argument("--gt-data", type=Path, default=None, help="prepared held-out images for ground-truth replacement")
    p.add_argument("--gt-range", type=int, nargs=2, default=None, metavar=("LO", "HI"),
                   help="replace the x0 prediction by the truth for original timesteps LO..HI (0-based, inclusive)")
    p.add_argument("--mixed-inference", default=None, choices=("profile", "eps", "x0", "v"),
                   help="mixed models: per-t head from the model file (profile) or a fixed head")
    _config_args(p)
    _runtime_args(p)


cmd_sample.configure = _sample_args


@command("train-features", "train the digits CNN whose features define FID (digits-CNN features)")
def cmd_train_features(args: argparse.Namespace) -> int:
    """Train the small digits classifier used as the digits feature extractor; print its held-out
    accuracy and write the weights file plus a sidecar <out>.json holding its sha256."""
    from timestep_lab.features import sidecar_path, train_digits_cnn

    res = train_digits_cnn(args.data, args.test_data, args.out, seed=args.seed, epochs=args.epochs,
                           threads=args.threads or 1)
    print(f"held-out accuracy: {res.accuracy:.4f} ({round(res.accuracy * res.num_test)}/{res.num_test})")
    log.info("digits CNN -> %s (sha256 %s, sidecar %s)", res.path, res.sha256, sidecar_path(res.path))
    return 0


def _train_features_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="prepared digits train split")
    p.add_argument("--test-data", type=Path, required=True, help="prepared digits test split (held-out accuracy)")
    p.add_argument("--out", type=Path, required=True, help="weights file to write (.pt); sidecar .json beside it")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads while training (default 1: the network is too small to gain from more)")


cmd_train_features.configure = _train_features_args


def _eval_config(args: argparse.Namespace, allowed: tuple[str, ...] = ("eval",)):
    """EvalConfig from --config's eval section plus eval.* overrides (other sections refused)."""
    from timestep_lab.config import ConfigError, EvalConfig, apply_overrides, config_from_dict, load_yaml

    bad = [o for o in args.overrides if o.split("=", 1)[0].split(".", 1)[0] not in allowed]
    if bad:
        raise ConfigError(f"--set {bad[0]}: this command takes only {' and '.join(s + '.*' for s in allowed)} overrides")
    data = dict(load_yaml(args.config).get("eval", {}) or {}) if args.config else {}
    data = apply_overrides({"eval": data}, [o for o in args.overrides if o.startswith("eval.")])["eval"]
    source = f"{args.config or '<defaults>'}" + (f" + --set {' '.join(args.overrides)}" if args.overrides else "")
    return config_from_dict(data, f"{source} (eval)", EvalConfig)


def _eval_device(args: argparse.Namespace):
    from timestep_lab.train import resolve_device

    return resolve_device(args.device or "auto")


@command("reference-stats", "compute the reference features/statistics of a prepared data set (once)")
def cmd_reference_stats(args: argparse.Namespace) -> int:
    """Extract reference features with torch-fidelity and clean-fid into one declared .npz."""
    _setup_torch(args)
    import numpy as np

    from timestep_lab.data import PreparedData
    from timestep_lab.io import sha256_file
    from timestep_lab.metrics import compute_reference, load_feature_extractor

    cfg = _eval_config(args)
    name = args.extractor or cfg.feature_extractor or "digits-cnn"
    spec = load_feature_extractor(name, args.weights or cfg.feature_weights, tools=cfg.tools,
                                  download=cfg.download_weights, timeout=cfg.download_timeout_s)
    data = PreparedData(args.data, verify=True)
    n = len(data) if args.max_images is None else min(args.max_images, len(data))
    info = {"path": str(data.path), "dataset": data.manifest.get("dataset"), "split": data.manifest.get("split"),
            "count": len(data), "used": n, "selection": f"first {n}", "images_sha256": data.manifest.get("images_sha256"),
            "manifest_sha256": sha256_file(data.path / "manifest.json")}
    ref = compute_reference(np.asarray(data.images[:n]), args.out, spec, data_info=info, device=_eval_device(args),
                            batch_size=cfg.batch_size)
    log.info("%s reference (%d images, %s) -> %s (sha256 %s)", name, ref.count, ", ".join(ref.meta["tools"]),
             args.out, ref.sha256)
    return 0


def _reference_stats_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="prepared data folder (the reference set)")
    p.add_argument("--extractor", choices=("digits-cnn", "inception-v3"), default=None,
                   help="feature extractor (default: eval.feature_extractor, else digits-cnn)")
    p.add_argument("--weights", type=Path, default=None,
                   help="digits-cnn weights file, or folder with the Inception weights (default: eval.feature_weights)")
    p.add_argument("--out", type=Path, required=True, help="reference .npz to write")
    p.add_argument("--max-images", type=int, default=None, help="use only the first N images")
    _config_args(p)
    _runtime_args(p)


cmd_reference_stats.configure = _reference_stats_args


@command("evaluate", "FID/KID/precision-recall of samples.npz against a reference file (both tools)")
def cmd_evaluate(args: argparse.Namespace) -> int:
    """Score samples with torch-fidelity and clean-fid; write metrics.json with the protocol record."""
    _setup_torch(args)
    from timestep_lab.metrics import evaluate_file

    res = evaluate_file(args.samples, args.reference, args.out, cfg=_eval_config(args), weights=args.weights,
                        device=_eval_device(args))
    log.info("%s: %s -> %s", res["label"], ", ".join(f"{r['value']:.5g} ({r['tool']})" for r in res["records"]
                                                     if r["metric"] == "fid"), args.out)
    return 0


def _evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--samples", type=Path, required=True, help="samples.npz (from `sample`)")
    p.add_argument("--reference", type=Path, required=True, help="reference .npz (from `reference-stats`)")
    p.add_argument("--out", type=Path, required=True, help="metrics.json to write")
    p.add_argument("--weights", type=Path, default=None, help="feature weights (default: as recorded / eval.*)")
    _config_args(p)
    _runtime_args(p)


cmd_evaluate.configure = _evaluate_args


def _snapshot_sample_config(model: Path, args: argparse.Namespace):
    """The model's own sample settings, changed by --config's sample section and sample.* overrides."""
    from timestep_lab.config import SampleConfig, apply_overrides, config_from_dict, load_yaml
    from timestep_lab.io import load_torch

    data = dict(load_torch(model).get("config", {}).get("sample", {}))
    if args.config:
        data.update(load_yaml(args.config).get("sample", {}) or {})
    data = apply_overrides({"sample": data}, [o for o in args.overrides if o.startswith("sample.")])["sample"]
    return config_from_dict(data, f"{model} sample settings", SampleConfig)


@command("evaluate-snapshots", "sample and score several checkpoints of one run (FID against images seen)")
def cmd_evaluate_snapshots(args: argparse.Namespace) -> int:
    """Sample every snapshot-*.pt of --snapshots (and/or each --models file) into a temporary
    folder, score it against --reference, and write {"points": [...]} sorted by images seen."""
    _setup_torch(args)
    from timestep_lab.config import ConfigError
    from timestep_lab.io import atomic_write_json
    from timestep_lab.metrics import PROGRESS_FORMAT, evaluate_models

    models = sorted(Path(args.snapshots).glob("snapshot-*.pt")) if args.snapshots else []
    if args.snapshots and not models:
        raise ConfigError(f"{args.snapshots}: no snapshot-*.pt files (train with train.snapshot_every_kimg set)")
    models += list(args.models or [])
    if not models:
        raise ConfigError("give --snapshots DIR and/or --models FILE ...")
    cfg = _eval_config(args, allowed=("eval", "sample"))
    points = evaluate_models(models, args.reference, lambda m: _snapshot_sample_config(m, args), cfg=cfg,
                             weights=args.weights, device=_eval_device(args), progress=not args.no_progress)
    first = points[0]
    atomic_write_json(args.out, {"format": PROGRESS_FORMAT, "label": first["label"],
                                 "reference_file": first["reference_file"],
                                 "reference_sha256": first["reference_sha256"], "points": points})
    log.info("%d points -> %s", len(points), args.out)
    return 0


def _evaluate_snapshots_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--snapshots", type=Path, default=None, help="folder holding snapshot-*.pt")
    p.add_argument("--models", type=Path, nargs="+", default=None, help="model or snapshot files")
    p.add_argument("--reference", type=Path, required=True, help="reference .npz (from `reference-stats`)")
    p.add_argument("--out", type=Path, required=True, help="fid_progress.json to write")
    p.add_argument("--weights", type=Path, default=None, help="feature weights (default: as recorded / eval.*)")
    _config_args(p)
    _runtime_args(p)


cmd_evaluate_snapshots.configure = _evaluate_snapshots_args


# ------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    import timestep_lab.cli_analyses  # noqa: F401  (registers the analysis and report commands)

    parser = argparse.ArgumentParser(prog="python -m timestep_lab", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add, _ in COMMANDS.values():
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)
    from timestep_lab.io import ArtifactError
    from timestep_lab.train import NonFiniteLossError

    try:
        return int(args._run(args) or 0)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ArtifactError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except NonFiniteLossError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
