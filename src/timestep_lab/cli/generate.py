"""The ``sample`` command: draw samples from a trained or pretrained model into samples.npz, and
``sample-score``: the same, then score them into metrics.json in the same process (the workflow's
one job per run; ``sample`` + ``evaluate`` stay for hand use and give the same files).

Sample settings come from the model file, then --config's ``sample:`` section, then --set
(:func:`timestep_lab.cli.common.sample_config`); the sampler is ``timestep_lab.generate.sampling``, the
composition with scoring ``timestep_lab.generate.scoring``.
Must not know the entry (``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.cli.common import (
    at_least,
    check_run_models,
    checkpoint_args,
    code_identity,
    command,
    config_args,
    device,
    eval_config,
    log,
    run_config_arg,
    runtime_args,
    sample_config,
)
from timestep_lab.config import ConfigError


def _sample_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="model.pt, a snapshot, or a pretrained checkpoint")
    checkpoint_args(p)
    p.add_argument("--out", type=Path, required=True, help="samples.npz to write")
    p.add_argument("--grid", type=Path, default=None, help="PNG grid of the first sample.grid_size images")
    p.add_argument("--gt-data", type=Path, default=None, help="prepared held-out images for ground-truth replacement")
    p.add_argument("--gt-range", type=at_least(0), nargs=2, default=None, metavar=("LO", "HI"),
                   help="replace the x0 prediction by the truth for original timesteps LO..HI (0-based, inclusive)")
    p.add_argument("--mixed-inference", default=None, choices=("profile", "eps", "x0", "v"),
                   help="mixed models: per-t head from the model file (profile) or a fixed head")
    config_args(p)
    runtime_args(p)


def _gt_images(args: argparse.Namespace):
    """The held-out images of --gt-data (uint8 NHWC), or None; --gt-data and --gt-range go together."""
    if args.gt_data is None:
        if args.gt_range is not None:
            raise ConfigError("--gt-range needs --gt-data (the held-out images whose x0 replaces the prediction)")
        return None
    if args.gt_range is None:
        raise ConfigError("--gt-data needs --gt-range LO HI (0-based inclusive original timesteps)")
    from timestep_lab.data import PreparedData

    return PreparedData(args.gt_data).images


def _generate_kwargs(args: argparse.Namespace) -> dict:
    """The keyword arguments of ``sampling.generate`` that both commands take from the same options."""
    return {"grid_png": args.grid, "fmt": args.format, "image_size": args.image_size, "gt_images": _gt_images(args),
            "gt_range": tuple(args.gt_range) if args.gt_range else None, "mixed_inference": args.mixed_inference}


@command("sample", "draw samples from a trained model into samples.npz (+ PNG grid)", _sample_args)
def cmd_sample(args: argparse.Namespace) -> int:
    """Sample with the model's own `sample:` settings, changed by --config/--set. With
    --gt-data/--gt-range the true x0 of held-out images replaces the prediction inside the range."""
    from timestep_lab.generate.sampling import generate

    cfg = sample_config(args.model, args.config, args.overrides, fmt=args.format)
    info = generate(args.model, args.out, cfg, device=device(args), progress=not args.no_progress,
                    **_generate_kwargs(args))
    log.info("%d samples (%s, %d steps) -> %s", info["num_samples"], info["method"], info["steps"], args.out)
    return 0


def _sample_score_args(p: argparse.ArgumentParser) -> None:
    _sample_args(p)
    p.add_argument("--reference", type=Path, required=True, help="reference .npz (from `reference-stats`)")
    p.add_argument("--metrics", type=Path, required=True, help="metrics.json to write (as `evaluate --out`)")
    p.add_argument("--weights", type=Path, default=None, help="feature weights (default: as recorded / eval.*)")
    run_config_arg(p)


@command("sample-score", "sample a model into samples.npz (+ PNG grid) and score them into metrics.json, one process",
         _sample_score_args)
def cmd_sample_score(args: argparse.Namespace) -> int:
    """`sample` then `evaluate` in one process: the same samples.npz, PNG grid and metrics.json
    as the two commands run one after the other. --set takes sample.* and eval.* overrides."""
    from timestep_lab.generate.scoring import sample_and_score
    from timestep_lab.metrics import load_reference

    cfg = eval_config(args, allowed=("eval", "sample"))  # refuses other sections before any work
    ref = load_reference(args.reference)  # a missing reference fails before the model is read
    check_run_models([args.model], args.run_config, ref, args.format)  # scored only as its own run
    scfg = sample_config(args.model, args.config, [o for o in args.overrides if o.startswith("sample.")],
                         fmt=args.format)
    info, res = sample_and_score(args.model, args.out, args.metrics, ref, scfg, cfg=cfg,
                                 weights=args.weights, device=device(args), progress=not args.no_progress,
                                 code=code_identity(), **_generate_kwargs(args))
    fids = ", ".join(f"{r['value']:.5g} ({r['tool']})" for r in res["records"] if r["metric"] == "fid")
    log.info("%d samples (%s, %d steps) -> %s; %s: %s -> %s", info["num_samples"], info["method"], info["steps"],
             args.out, res["label"], fids, args.metrics)
    return 0
