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
    """Sample with the model's own `sample:` settings, changed by --config/--set."""
    _setup_torch(args)
    from timestep_lab.artifacts import load_model
    from timestep_lab.config import SampleConfig, apply_overrides, config_from_dict, config_to_dict, load_yaml
    from timestep_lab.io import load_torch
    from timestep_lab.sampling import generate
    from timestep_lab.train import resolve_device

    embedded = load_torch(args.model).get("config", {}).get("sample", {})
    data = dict(embedded)
    if args.config:
        data.update(load_yaml(args.config).get("sample", {}))
    data = apply_overrides({"sample": data}, args.overrides)["sample"]
    cfg = config_from_dict(data, f"{args.model} sample settings", SampleConfig)
    device = resolve_device(args.device or "auto")
    info = generate(args.model, args.out, cfg, device=device, grid_png=args.grid, progress=not args.no_progress)
    log.info("%d samples (%s, %d steps) -> %s", info["num_samples"], info["method"], info["steps"], args.out)
    return 0


def _sample_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="model.pt or a snapshot")
    p.add_argument("--out", type=Path, required=True, help="samples.npz to write")
    p.add_argument("--grid", type=Path, default=None, help="PNG grid of the first sample.grid_size images")
    _config_args(p)
    _runtime_args(p)


cmd_sample.configure = _sample_args


# ------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
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
    from timestep_lab.config import ConfigError
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
