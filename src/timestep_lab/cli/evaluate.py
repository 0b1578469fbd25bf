"""Scoring commands: ``evaluate`` (one samples file against a reference) and ``evaluate-snapshots``
(sample + score several checkpoints of one run: FID against images seen) and ``floor`` (the held-out
split against the training reference: the study's FID floor).

The scoring is ``timestep_lab.metrics``; these functions only turn paths and options into its
arguments. Must not know the entry (``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from timestep_lab.artifacts.io import atomic_write_json
from timestep_lab.cli.common import (
    at_least,
    check_run_models,
    code_identity,
    command,
    config_args,
    device,
    eval_config,
    log,
    run_config_arg,
    runtime_args,
    sample_config,
    seed_arg,
)
from timestep_lab.config import ConfigError
from timestep_lab.config.schema import MIN_FID_SAMPLES

# ------------------------------------------------------------------------------- evaluate


def _evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--samples", type=Path, required=True, help="samples.npz (from `sample`)")
    p.add_argument("--reference", type=Path, required=True, help="reference .npz (from `reference-stats`)")
    p.add_argument("--out", type=Path, required=True, help="metrics.json to write")
    p.add_argument("--weights", type=Path, default=None, help="feature weights (default: as recorded / eval.*)")
    config_args(p)
    runtime_args(p)


@command("evaluate", "FID/KID/precision-recall of samples.npz against a reference file (both tools)", _evaluate_args)
def cmd_evaluate(args: argparse.Namespace) -> int:
    """Score samples with torch-fidelity and clean-fid; write metrics.json with the protocol record."""
    from timestep_lab.metrics import evaluate_file

    res = evaluate_file(args.samples, args.reference, args.out, cfg=eval_config(args), weights=args.weights,
                        device=device(args), progress=not args.no_progress, code=code_identity())
    log.info("%s: %s -> %s", res["label"], ", ".join(f"{r['value']:.5g} ({r['tool']})" for r in res["records"]
                                                     if r["metric"] == "fid"), args.out)
    return 0


# ------------------------------------------------------------------------------- evaluate-snapshots


def _evaluate_snapshots_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--snapshots", type=Path, default=None, help="folder holding snapshot-*.pt")
    p.add_argument("--models", type=Path, nargs="+", default=None, help="model or snapshot files")
    p.add_argument("--reference", type=Path, required=True, help="reference .npz (from `reference-stats`)")
    p.add_argument("--out", type=Path, required=True, help="fid_progress.json to write")
    p.add_argument("--weights", type=Path, default=None, help="feature weights (default: as recorded / eval.*)")
    p.add_argument("--events", type=Path, default=None,
                   help="also write FID against images seen as TensorBoard event files into this folder (the run's)")
    run_config_arg(p)
    config_args(p)
    runtime_args(p)


@command("evaluate-snapshots", "sample and score several checkpoints of one run (FID against images seen)",
         _evaluate_snapshots_args)
def cmd_evaluate_snapshots(args: argparse.Namespace) -> int:
    """Sample every snapshot-*.pt of --snapshots (and/or each --models file) into a temporary
    folder, score it against --reference, and write {"points": [...]} sorted by images seen."""
    from timestep_lab.artifacts.events import add_fid_point, fid_events
    from timestep_lab.generate.scoring import PROGRESS_FORMAT, evaluate_models

    models = sorted(Path(args.snapshots).glob("snapshot-*.pt")) if args.snapshots else []
    if args.snapshots and not models:
        raise ConfigError(f"{args.snapshots}: no snapshot-*.pt files (train with train.snapshot_every_kimg set)")
    models += list(args.models or [])
    if not models:
        raise ConfigError("give --snapshots DIR and/or --models FILE ...")
    cfg = eval_config(args, allowed=("eval", "sample"))
    if args.run_config is not None:  # every snapshot must be of this run, before any is sampled
        from timestep_lab.metrics import load_reference

        check_run_models(models, args.run_config, load_reference(args.reference))
    sample_overrides = [o for o in args.overrides if o.startswith("sample.")]
    with contextlib.closing(fid_events(args.events)) if args.events else contextlib.nullcontext() as writer:
        points = evaluate_models(models, args.reference, lambda m: sample_config(m, args.config, sample_overrides),
                                 cfg=cfg, weights=args.weights, device=device(args), progress=not args.no_progress,
                                 on_point=None if writer is None else lambda point: add_fid_point(writer, point),
                                 code=code_identity())
    first = points[0]
    atomic_write_json(args.out, {"format": PROGRESS_FORMAT, "label": first["label"],
                                 "reference_file": first["reference_file"],
                                 "reference_sha256": first["reference_sha256"], "code": first["code"],
                                 "points": points})
    log.info("%d points -> %s", len(points), args.out)
    return 0


# ------------------------------------------------------------------------------- floor


def _floor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="prepared held-out folder (the test split)")
    p.add_argument("--reference", type=Path, required=True, help="reference .npz of the training split")
    p.add_argument("--out", type=Path, required=True, help="floor.json to write")
    p.add_argument("--num-samples", type=at_least(MIN_FID_SAMPLES), default=None,
                   help="the final FID's sample count (evaluation.num_samples); the split's size if smaller")
    p.add_argument("--progress-samples", type=at_least(2), default=None,
                   help="the progress points' sample count (evaluation.progress_num_samples): the floor at it too")
    p.add_argument("--replicates", type=at_least(1), default=None, help="bootstrap replicates (default 200)")
    p.add_argument("--seed", type=seed_arg, default=None, help="bootstrap seed (default 0)")
    p.add_argument("--weights", type=Path, default=None, help="feature weights (default: as recorded / eval.*)")
    config_args(p)
    runtime_args(p)


@command("floor", "FID floor: the held-out split against the training reference, with a bootstrap interval",
         _floor_args)
def cmd_floor(args: argparse.Namespace) -> int:
    """Score the held-out split against the training-set reference statistics with every tool, a
    95% bootstrap interval per tool; write floor.json (format timestep_lab.floor/1)."""
    import numpy as np

    from timestep_lab.data.prepared import PreparedData, data_identity
    from timestep_lab.metrics.floor import BOOTSTRAP_REPLICATES, BOOTSTRAP_SEED, write_floor

    data = PreparedData(args.data, verify=True)
    info = {"path": str(data.path), "dataset": data.manifest.get("dataset"), "split": data.manifest.get("split"),
            "count": len(data), "images_sha256": data.manifest.get("images_sha256"),
            "data_sha256": data_identity(data.manifest)}
    res = write_floor(np.asarray(data.images), args.reference, args.out, num_samples=args.num_samples,
                      cfg=eval_config(args), weights=args.weights, device=device(args), data_info=info,
                      replicates=BOOTSTRAP_REPLICATES if args.replicates is None else args.replicates,
                      seed=BOOTSTRAP_SEED if args.seed is None else args.seed, progress=not args.no_progress,
                      also_at=() if args.progress_samples is None else (args.progress_samples,))
    log.info("%s floor on %d held-out images: %s -> %s", res["label"], res["num_samples"],
             ", ".join(f"{r['value']:.4g} [{r['ci'][0]:.4g}, {r['ci'][1]:.4g}] ({r['tool']})" for r in res["records"]),
             args.out)
    return 0
