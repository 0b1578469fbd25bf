"""The ``sample`` command: draw samples from a trained or pretrained model into samples.npz.

Sample settings come from the model file, then --config's ``sample:`` section, then --set
(:func:`timestep_lab.cli.common.sample_config`); the sampler is ``timestep_lab.sampling``.
Must not know the entry (``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.cli.common import (
    FORMATS,
    command,
    config_args,
    device,
    log,
    runtime_args,
    sample_config,
)
from timestep_lab.config import ConfigError


def _sample_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="model.pt, a snapshot, or a pretrained checkpoint")
    p.add_argument("--format", default="timestep_lab", choices=FORMATS, help="checkpoint format of --model")
    p.add_argument("--out", type=Path, required=True, help="samples.npz to write")
    p.add_argument("--grid", type=Path, default=None, help="PNG grid of the first sample.grid_size images")
    p.add_argument("--gt-data", type=Path, default=None, help="prepared held-out images for ground-truth replacement")
    p.add_argument("--gt-range", type=int, nargs=2, default=None, metavar=("LO", "HI"),
                   help="replace the x0 prediction by the truth for original timesteps LO..HI (0-based, inclusive)")
    p.add_argument("--mixed-inference", default=None, choices=("profile", "eps", "x0", "v"),
                   help="mixed models: per-t head from the model file (profile) or a fixed head")
    config_args(p)
    runtime_args(p)


@command("sample", "draw samples from a trained model into samples.npz (+ PNG grid)", _sample_args)
def cmd_sample(args: argparse.Namespace) -> int:
    """Sample with the model's own `sample:` settings, changed by --config/--set. With
    --gt-data/--gt-range the true x0 of held-out images replaces the prediction inside the range."""
    from timestep_lab.sampling import generate

    cfg = sample_config(args.model, args.config, args.overrides, fmt=args.format)
    gt_images = None
    if args.gt_data is not None:
        from timestep_lab.data import PreparedData

        if args.gt_range is None:
            raise ConfigError("--gt-data needs --gt-range LO HI (0-based inclusive original timesteps)")
        gt_images = PreparedData(args.gt_data).images
    elif args.gt_range is not None:
        raise ConfigError("--gt-range needs --gt-data (the held-out images whose x0 replaces the prediction)")
    info = generate(args.model, args.out, cfg, device=device(args), grid_png=args.grid, progress=not args.no_progress,
                    fmt=args.format, gt_images=gt_images, gt_range=tuple(args.gt_range) if args.gt_range else None,
                    mixed_inference=args.mixed_inference)
    log.info("%d samples (%s, %d steps) -> %s", info["num_samples"], info["method"], info["steps"], args.out)
    return 0
