"""The analysis commands that draw or compare samples (the work is in ``timestep_lab.studies``):
``consistency`` (paired vs unpaired sample distances, the test over models, the closed-form
controls) and ``contribution`` (ground-truth replacement per t range). Paths in, paths out.

Registered into :data:`timestep_lab.cli.common.COMMANDS` on import. Must not know the entry
(``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from timestep_lab.artifacts.io import atomic_write_json
from timestep_lab.cli.common import at_least, checkpoint_args, command, device, log, runtime_args
from timestep_lab.cli.common import named_paths as _pairs
from timestep_lab.config import ConfigError
from timestep_lab.config.schema import MIN_FID_SAMPLES

# ------------------------------------------------------------------------------- consistency


def _consistency_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--samples", nargs="+", required=True, metavar="NAME=SAMPLES.npz")
    p.add_argument("--weights", type=Path, default=None, help="train-features weights (digits-cnn, mnist-cnn) for a feature-space distance")
    p.add_argument("--control-data", type=Path, default=None,
                   help="prepared training images: sample the Gaussian and optimal denoisers as controls")
    p.add_argument("--control-model", type=Path, default=None, help="a model whose diffusion process the controls use")
    p.add_argument("--controls-out", type=Path, default=None, help="npz of the controls' samples")
    p.add_argument("--permutations", type=at_least(1), default=999, help="permutations of the model-level test")
    p.add_argument("--out", type=Path, required=True)
    runtime_args(p)


def _control_samples(data: Path, model: Path, meta: dict, seeds) -> dict:
    """Samples of the closed-form denoisers with the sample sets' own sampler and seeds."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.data import PreparedData
    from timestep_lab.generate.sampling import sample_images
    from timestep_lab.studies.optimal import EmpiricalDenoiser, GaussianDenoiser

    diffusion = load_for_inference(model).diffusion
    images = PreparedData(data).images
    shape = (images.shape[3], images.shape[1], images.shape[2])
    method = meta.get("method") or "ddim"
    steps = meta.get("steps")
    eta = meta.get("eta") if meta.get("eta") is not None else 1.0
    if steps is not None and steps >= diffusion.T:
        steps = None
    out = {}
    for name, den in (("gaussian", GaussianDenoiser(images, diffusion)), ("optimal", EmpiricalDenoiser(images, diffusion))):
        out[name] = sample_images(den, diffusion, image_shape=shape, seeds=[int(s) for s in seeds], method=method,
                                  steps=steps, eta=eta)
    return out


@command("consistency", "distance between samples drawn from the same noise by different models", _consistency_args)
def cmd_consistency(args: argparse.Namespace) -> int:
    """Paired (same seed) vs unpaired sample distances for every pair of sample sets, the test over
    models and the closed-form denoisers as controls (docs/methods.md 4.1)."""
    from timestep_lab.artifacts.samples_file import load_samples
    from timestep_lab.evidence.stats import json_safe
    from timestep_lab.studies import paired_distance
    from timestep_lab.studies.consistency import consistency_test

    sets = {name: load_samples(path) for name, path in _pairs(args.samples, "--samples").items()}
    first_name, (_, first, first_meta) = next(iter(sets.items()))
    for name, (_, seeds, _) in sets.items():
        if len(seeds) != len(first) or (seeds != first).any():
            raise ConfigError(f"--samples {name}: drawn with other seeds than {first_name}; pairs need the same seeds")
    features, extractor = None, None
    if args.weights:
        import numpy as np
        import torch

        from timestep_lab.metrics.features import load_feature_net

        cnn, cnn_meta = load_feature_net(args.weights)
        extractor = cnn_meta["extractor"]

        @torch.no_grad()
        def features(images_nhwc: np.ndarray) -> np.ndarray:
            return cnn.features(torch.from_numpy(np.ascontiguousarray(images_nhwc)).permute(0, 3, 1, 2)).numpy()
    pairs = []
    for a, b in itertools.combinations(sets, 2):
        res = paired_distance(sets[a][0], sets[b][0], features)
        pairs.append({"a": a, "b": b, **res})
    controls = {}
    if args.control_data is not None:
        if args.control_model is None:
            raise ConfigError("--control-data needs --control-model (whose diffusion process the controls sample)")
        controls = _control_samples(args.control_data, args.control_model, first_meta, first)
        if args.controls_out is not None:
            from timestep_lab.artifacts.samples_file import save_controls

            save_controls(args.controls_out, first, controls)  # with each member's sha256, as samples.npz
    test = consistency_test({k: v[0] for k, v in sets.items()}, controls, features=features,
                            permutations=args.permutations)
    atomic_write_json(args.out, json_safe({
        "sets": {k: str(v) for k, v in _pairs(args.samples, "--samples").items()},
        "controls_file": str(args.controls_out) if args.controls_out else None, "feature_extractor": extractor,
        "sampler": {k: first_meta.get(k) for k in ("method", "steps", "eta", "seed_range")},
        "pairs": pairs, **test}))
    t = test["pixel"]["test"]
    log.info("consistency over %d models: paired - unpaired %.4g [%s, %s], permutation p %s", t["n"], t["diff"],
             t["ci_low"], t["ci_high"], t["p"])
    return 0


# ------------------------------------------------------------------------------- contribution


def _contribution_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="the reference model")
    checkpoint_args(p)
    p.add_argument("--gt-data", type=Path, required=True, help="prepared held-out images (sample i gets image i)")
    p.add_argument("--ranges", type=int, nargs="*", default=[], help="paper ranges LO HI LO HI ... (1-based, T = 1000)")
    p.add_argument("--num-samples", type=at_least(MIN_FID_SAMPLES), required=True,
                   help=f"held-out images, one sample each, per arm (every arm is scored: >= {MIN_FID_SAMPLES})")
    p.add_argument("--method", default="ddpm", choices=("ddpm", "ddim"))
    p.add_argument("--steps", default=None, type=lambda v: None if v in ("null", "None", "") else int(v),
                   help="chain steps (null: all T)")
    p.add_argument("--eta", type=float, default=1.0, help="DDIM eta")
    p.add_argument("--spacing", default="uniform", choices=("uniform", "quadratic"), help="chain step spacing")
    p.add_argument("--min-steps", type=at_least(1), default=2, help="chain steps every range must hold")
    p.add_argument("--bootstrap", type=at_least(0), default=200, help="bootstrap replicates over samples")
    p.add_argument("--reference", type=Path, required=True)
    p.add_argument("--weights", type=Path, default=None)
    p.add_argument("--out-dir", type=Path, required=True, help="<label>/samples.npz, samples.png, metrics.json")
    p.add_argument("--out", type=Path, required=True, help="contribution.json")
    runtime_args(p)


@command("contribution", "ground-truth replacement per timestep range, the final step as a control (Fig. 3a)",
         _contribution_args)
def cmd_contribution(args: argparse.Namespace) -> int:
    """Every range, "none" and "final step only" from one shared chain, scored with intervals (docs/methods.md 3.4)."""
    from timestep_lab.data import PreparedData
    from timestep_lab.studies.contribution_run import run_contribution

    if len(args.ranges) % 2:
        raise ConfigError(f"--ranges: expected LO HI pairs, got {len(args.ranges)} numbers")
    pairs = [args.ranges[i:i + 2] for i in range(0, len(args.ranges), 2)]
    try:
        res = run_contribution(args.model, PreparedData(args.gt_data).images, args.reference, args.out, args.out_dir,
                               ranges=pairs, num_samples=args.num_samples, fmt=args.format, image_size=args.image_size, method=args.method,
                               steps=args.steps, eta=args.eta, spacing=args.spacing, min_steps=args.min_steps, bootstrap=args.bootstrap,
                               weights=args.weights, device=device(args))
    except ValueError as exc:  # a range with too few chain steps: the config's fault, one line
        raise ConfigError(f"analyses.timestep_contribution: {exc}") from None
    log.info("contribution: %s", ", ".join(f"{a['label']} {a['fid'].get('torch-fidelity', float('nan')):.3g}"
                                           for a in res["arms"]))
    return 0
