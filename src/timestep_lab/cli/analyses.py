"""Analysis commands (the work is in ``timestep_lab.studies``): ``profile``, ``optimal-profile``,
``slots``, ``interference``, ``interference-control``, ``predictions-profile``, ``consistency``,
``contribution`` and ``posterior``. Paths in, paths out.

Registered into :data:`timestep_lab.cli.common.COMMANDS` on import. Must not know the entry
(``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from timestep_lab.cli.common import FORMATS, command, device, log, runtime_args
from timestep_lab.config import ConfigError
from timestep_lab.io import atomic_write_json


def _pairs(items: list[str], what: str) -> dict[str, str]:
    """``["a=x", "b=y"] -> {"a": "x", "b": "y"}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"{what}: expected NAME=PATH, got {item!r}")
        out[key] = value
    return out


def _bank_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="prepared images for the fixed bank")
    p.add_argument("--num-images", type=int, default=256, help="images in the fixed bank")
    p.add_argument("--stride", type=int, default=1, help="evaluate every stride-th timestep (plus T-1)")
    p.add_argument("--seed", type=int, default=1234, help="bank and noise seed (same for every model)")
    p.add_argument("--batch-size", type=int, default=256)


# ------------------------------------------------------------------------------- profile


def _profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--format", default="timestep_lab", choices=FORMATS)
    p.add_argument("--out", type=Path, required=True, help="profile JSON to write")
    _bank_args(p)
    p.add_argument("--grad-timesteps", type=int, default=0, help="timesteps at which to measure gradient-norm variance")
    p.add_argument("--grad-samples", type=int, default=16, help="single-sample gradients per such timestep")
    runtime_args(p)


@command("profile", "per-timestep eps-MSE, VLB term and gradient-norm variance of a model on a fixed bank",
         _profile_args)
def cmd_profile(args: argparse.Namespace) -> int:
    """Loss profile (docs/methods.md 3.1) of --model on a fixed image/noise bank -> JSON."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.data import PreparedData
    from timestep_lab.studies import loss_profile, save_profile

    dev = device(args)
    m = load_for_inference(args.model, args.format, device=dev)
    prof = loss_profile(m.net, m.diffusion, m.prediction, PreparedData(args.data).images, num_images=args.num_images,
                        stride=args.stride, seed=args.seed, batch_size=args.batch_size, device=dev,
                        grad_timesteps=args.grad_timesteps, grad_samples=args.grad_samples)
    prof["model"] = {k: m.info.get(k) for k in ("path", "format", "sha256", "nimg")}
    save_profile(args.out, prof)
    log.info("profile of %s (%d timesteps) -> %s", args.model, len(prof["timesteps"]), args.out)
    return 0


# ------------------------------------------------------------------------------- slots


def _slots_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", type=Path, required=True, help="profile JSON (from `profile`)")
    p.add_argument("--n-slots", type=int, default=10)
    p.add_argument("--key", default="eps_mse", help="which per-t loss to split (eps_mse, vlb_bpd, ...)")
    p.add_argument("--optimal", type=Path, default=None,
                   help="the optimal denoiser's profile (`optimal-profile`): also split the excess loss")
    p.add_argument("--out", type=Path, required=True)


@command("slots", "split a loss profile into n consecutive slots of equal summed loss", _slots_args)
def cmd_slots(args: argparse.Namespace) -> int:
    """Equal-cumulative-loss slots (docs/methods.md 3.1) of a profile, beside the paper's Table 1."""
    from timestep_lab.studies import PAPER_SLOTS, equal_loss_slots, load_profile, profile_per_t, scale_slots, slot_sums

    prof = load_profile(args.profile)
    loss = profile_per_t(prof, args.key)
    slots = equal_loss_slots(loss, args.n_slots)
    T = int(prof["T"])
    out = {
        "profile": str(args.profile), "key": args.key, "T": T, "n_slots": args.n_slots,
        "slots": [list(s) for s in slots], "sums": slot_sums(loss, slots), "total": float(loss.sum()),
        "paper_slots": [list(s) for s in PAPER_SLOTS],
        "paper_slots_scaled": [list(s) for s in scale_slots(PAPER_SLOTS, 1000, T)] if T != 1000 else None,
    }
    if args.optimal is not None:  # the same split of the loss above the optimal denoiser's (docs/methods.md 3.1)
        opt = load_profile(args.optimal)
        if opt["timesteps"] != prof["timesteps"] or opt.get("seed") != prof.get("seed") or \
                opt.get("num_images") != prof.get("num_images"):
            raise ConfigError(f"--optimal {args.optimal}: not measured on the bank and timesteps of {args.profile}")
        excess = (loss - profile_per_t(opt, args.key)).clip(min=0.0)
        ex_slots = equal_loss_slots(excess, args.n_slots)
        out["excess"] = {"key": f"{args.key} - optimal {args.key} (clipped at 0)", "optimal": str(args.optimal),
                         "slots": [list(s) for s in ex_slots], "sums": slot_sums(excess, ex_slots),
                         "total": float(excess.sum()), "share_of_total": float(excess.sum() / max(loss.sum(), 1e-300))}
    atomic_write_json(args.out, out)
    log.info("slots: %s", " ".join(f"[{a},{b}]" for a, b in slots))
    return 0


# ------------------------------------------------------------------------------- interference


def _interference_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference", type=Path, required=True, help="profile of the reference model")
    p.add_argument("--finetuned", nargs="+", required=True, metavar="SLOT=PROFILE",
                   help="profiles after fine-tuning on each slot (1-based slot numbers)")
    p.add_argument("--slots", type=Path, required=True, help="slots JSON (from `slots`)")
    p.add_argument("--out", type=Path, required=True)


@command("interference", "relative loss change of every slot after fine-tuning on one slot", _interference_args)
def cmd_interference(args: argparse.Namespace) -> int:
    """Interference matrix (docs/methods.md 3.2): trained slot x evaluated slot, relative change."""
    from timestep_lab.studies import interference_matrix, load_profile

    finetuned = {int(k): load_profile(v) for k, v in _pairs(args.finetuned, "--finetuned").items()}
    slots = json.loads(Path(args.slots).read_text())["slots"]
    result = interference_matrix(load_profile(args.reference), finetuned, slots)
    atomic_write_json(args.out, result)
    big = result["largest_off_diagonal"]
    log.info("largest off-diagonal change %+.1f%% (trained slot %s, evaluated slot %s)", 100 * big["value"],
             big["trained"], big["evaluated"])
    return 0


def _interference_control_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reference", type=Path, required=True, help="profile of the reference model")
    p.add_argument("--finetuned", nargs="+", required=True, metavar="SEED:SLOT=PROFILE",
                   help="profile after fine-tuning seed SEED on slot SLOT (1-based)")
    p.add_argument("--controls", nargs="+", required=True, metavar="SEED=PROFILE",
                   help="profile after the uniform-t control fine-tune of seed SEED")
    p.add_argument("--slots", type=Path, required=True, help="slots JSON (from `slots`)")
    p.add_argument("--out", type=Path, required=True)


@command("interference-control", "slot interference relative to a uniform-t fine-tune, with intervals over seeds",
         _interference_control_args)
def cmd_interference_control(args: argparse.Namespace) -> int:
    """Interference minus the uniform-t control, paired by seed (docs/methods.md 3.2, 9.1) -> JSON."""
    from timestep_lab.studies.interference import write_interference_vs_control

    finetuned: dict[str, dict[int, str]] = {}
    for key, path in _pairs(args.finetuned, "--finetuned").items():
        seed, sep, slot = key.partition(":")
        if not sep or not seed or not slot.isdigit():
            raise ConfigError(f"--finetuned: expected SEED:SLOT=PATH, got {key}={path!r}")
        finetuned.setdefault(seed, {})[int(slot)] = path
    result = write_interference_vs_control(str(args.reference), finetuned, _pairs(args.controls, "--controls"),
                                           str(args.slots), str(args.out))
    off = result["off_diagonal"]
    log.info("off-diagonal change, slot fine-tune minus uniform control: %s over %s seeds", off.get("diff"),
             off.get("n"))
    return 0


# ------------------------------------------------------------------------------- prediction types


def _predictions_profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", nargs="+", required=True, metavar="NAME=MODEL", help="e.g. eps=runs/a/model.pt")
    p.add_argument("--optimal", type=Path, default=None, help="the optimal denoiser's profile: adds the excess x0 error")
    p.add_argument("--out", type=Path, required=True)
    _bank_args(p)
    runtime_args(p)


@command("predictions-profile", "per-t x0 error of several models (prediction types) and the winner per t",
         _predictions_profile_args)
def cmd_predictions_profile(args: argparse.Namespace) -> int:
    """x0 error per timestep of each model, and which prediction type wins where (docs/methods.md 3.5)."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.data import PreparedData
    from timestep_lab.studies import x0_error_profile

    dev = device(args)
    models, diffusion = {}, None
    for name, path in _pairs(args.models, "--models").items():
        m = load_for_inference(path, device=dev)
        models[name] = (m.net, m.prediction)
        diffusion = diffusion or m.diffusion
    result = x0_error_profile(models, diffusion, PreparedData(args.data).images, num_images=args.num_images,
                              stride=args.stride, seed=args.seed, batch_size=args.batch_size, device=dev)
    if args.optimal is not None:
        from timestep_lab.studies import load_profile

        opt = load_profile(args.optimal)
        if opt["timesteps"] != result["timesteps"] or opt.get("seed") != result["seed"] or \
                opt.get("num_images") != result["num_images"]:
            raise ConfigError(f"--optimal {args.optimal}: not measured on this bank and these timesteps")
        result["optimal_x0_mse"] = opt["x0_mse"]
        result["x0_excess"] = {k: [m - o for m, o in zip(v, opt["x0_mse"])] for k, v in result["x0_mse"].items()}
    atomic_write_json(args.out, result)
    return 0


# ------------------------------------------------------------------------------- consistency


def _consistency_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--samples", nargs="+", required=True, metavar="NAME=SAMPLES.npz")
    p.add_argument("--weights", type=Path, default=None, help="digits-CNN weights for a feature-space distance")
    p.add_argument("--control-data", type=Path, default=None,
                   help="prepared training images: sample the Gaussian and optimal denoisers as controls")
    p.add_argument("--control-model", type=Path, default=None, help="a model whose diffusion process the controls use")
    p.add_argument("--controls-out", type=Path, default=None, help="npz of the controls' samples")
    p.add_argument("--permutations", type=int, default=999, help="permutations of the model-level test")
    p.add_argument("--out", type=Path, required=True)
    runtime_args(p)


def _control_samples(data: Path, model: Path, meta: dict, seeds) -> dict:
    """Samples of the closed-form denoisers with the sample sets' own sampler and seeds."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.data import PreparedData
    from timestep_lab.sampling import sample_images
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
    from timestep_lab.samples_file import load_samples
    from timestep_lab.stats import json_safe
    from timestep_lab.studies import paired_distance
    from timestep_lab.studies.consistency import consistency_test

    sets = {name: load_samples(path) for name, path in _pairs(args.samples, "--samples").items()}
    first_name, (_, first, first_meta) = next(iter(sets.items()))
    for name, (_, seeds, _) in sets.items():
        if len(seeds) != len(first) or (seeds != first).any():
            raise ConfigError(f"--samples {name}: drawn with other seeds than {first_name}; pairs need the same seeds")
    features = None
    if args.weights:
        import numpy as np
        import torch

        from timestep_lab.features import load_digits_cnn

        cnn, _ = load_digits_cnn(args.weights)

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
            import numpy as np

            from timestep_lab.io import atomic_path

            with atomic_path(args.controls_out, suffix=".npz") as tmp:
                with open(tmp, "wb") as fh:
                    np.savez(fh, seeds=first, **controls)
    test = consistency_test({k: v[0] for k, v in sets.items()}, controls, features=features,
                            permutations=args.permutations)
    atomic_write_json(args.out, json_safe({
        "sets": {k: str(v) for k, v in _pairs(args.samples, "--samples").items()},
        "controls_file": str(args.controls_out) if args.controls_out else None,
        "sampler": {k: first_meta.get(k) for k in ("method", "steps", "eta", "seed_range")},
        "pairs": pairs, **test}))
    t = test["pixel"]["test"]
    log.info("consistency over %d models: paired - unpaired %.4g [%s, %s], permutation p %s", t["n"], t["diff"],
             t["ci_low"], t["ci_high"], t["p"])
    return 0


# ------------------------------------------------------------------------------- posterior coefficients


def _posterior_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--format", default="timestep_lab", choices=FORMATS)
    p.add_argument("--ranges", type=int, nargs="*", default=None, help="paper ranges LO HI LO HI ... (T = 1000)")
    p.add_argument("--out", type=Path, required=True)


@command("posterior", "posterior-mean coefficients of x0 and x_t over t for a model's schedule", _posterior_args)
def cmd_posterior(args: argparse.Namespace) -> int:
    """c1_t (x0) and c2_t (x_t) of the posterior mean (seed paper Fig. 3b) -> JSON."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.studies import posterior_coefficients, replacement_ranges

    m = load_for_inference(args.model, args.format)
    out = posterior_coefficients(m.diffusion)
    if args.ranges:
        pairs = [args.ranges[i:i + 2] for i in range(0, len(args.ranges), 2)]
        out["ranges"] = replacement_ranges(pairs, m.diffusion.T)
    atomic_write_json(args.out, out)
    return 0


# ------------------------------------------------------------------------------- contribution


def _contribution_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="the reference model")
    p.add_argument("--format", default="timestep_lab", choices=FORMATS)
    p.add_argument("--gt-data", type=Path, required=True, help="prepared held-out images (sample i gets image i)")
    p.add_argument("--ranges", type=int, nargs="*", default=[], help="paper ranges LO HI LO HI ... (1-based, T = 1000)")
    p.add_argument("--num-samples", type=int, required=True)
    p.add_argument("--method", default="ddpm", choices=("ddpm", "ddim"))
    p.add_argument("--steps", default=None, type=lambda v: None if v in ("null", "None", "") else int(v),
                   help="chain steps (null: all T)")
    p.add_argument("--eta", type=float, default=1.0, help="DDIM eta")
    p.add_argument("--spacing", default="uniform", choices=("uniform", "quadratic"), help="chain step spacing")
    p.add_argument("--min-steps", type=int, default=2, help="chain steps every range must hold")
    p.add_argument("--bootstrap", type=int, default=200, help="bootstrap replicates over samples")
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
                               ranges=pairs, num_samples=args.num_samples, fmt=args.format, method=args.method,
                               steps=args.steps, eta=args.eta, spacing=args.spacing, min_steps=args.min_steps, bootstrap=args.bootstrap,
                               weights=args.weights, device=device(args))
    except ValueError as exc:  # a range with too few chain steps: the config's fault, one line
        raise ConfigError(f"analyses.timestep_contribution: {exc}") from None
    log.info("contribution: %s", ", ".join(f"{a['label']} {a['fid'].get('torch-fidelity', float('nan')):.3g}"
                                           for a in res["arms"]))
    return 0


# ------------------------------------------------------------------------------- optimal denoiser


def _optimal_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="any model of the study: its diffusion process is used")
    p.add_argument("--format", default="timestep_lab", choices=FORMATS)
    p.add_argument("--out", type=Path, required=True, help="profile JSON of the optimal denoiser")
    _bank_args(p)


@command("optimal-profile", "per-t losses of the training set's optimal denoiser on the profile bank (the floor)",
         _optimal_args)
def cmd_optimal_profile(args: argparse.Namespace) -> int:
    """E[x0 | x_t] of the training images, scored on the same bank and noise as `profile` (docs/methods.md 3.1)."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.data import PreparedData
    from timestep_lab.studies.optimal import optimal_profile

    m = load_for_inference(args.model, args.format)
    images = PreparedData(args.data).images
    prof = optimal_profile(images, m.diffusion, num_images=args.num_images, stride=args.stride, seed=args.seed)
    prof["model"]["diffusion_from"] = str(args.model)
    atomic_write_json(args.out, prof)
    log.info("optimal denoiser of %d images: eps-MSE %.3g..%.3g -> %s", len(images), min(prof["eps_mse"]),
             max(prof["eps_mse"]), args.out)
    return 0
