"""Analysis commands (the work is in ``timestep_lab.studies``): ``profile``, ``slots``,
``interference``, ``interference-control``, ``predictions-profile``, ``consistency`` and ``posterior``. Paths in, paths out.

Registered into :data:`timestep_lab.cli.common.COMMANDS` on import. Must not know the entry
(``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

from timestep_lab.cli.common import FORMATS, at_least, command, device, log, runtime_args
from timestep_lab.config import ConfigError
from timestep_lab.errors import InputError
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
    p.add_argument("--num-images", type=at_least(1), default=256, help="images in the fixed bank")
    p.add_argument("--stride", type=at_least(1), default=1, help="evaluate every stride-th timestep (plus T-1)")
    p.add_argument("--seed", type=at_least(0), default=1234, help="bank and noise seed (same for every model)")
    p.add_argument("--batch-size", type=at_least(1), default=256)


def _bank_images(data: Path, info: dict):
    """The prepared images of ``data`` for a model whose ``info`` says its image size and
    channels; :class:`InputError` naming both when they differ (else a convolution's error)."""
    from timestep_lab.data import PreparedData

    images = PreparedData(data).images
    want = (info.get("image_size"), info.get("image_size"), info.get("channels"))
    if None not in want and tuple(images.shape[1:]) != want:
        raise InputError(f"{data}: images are {list(images.shape[1:])} (H, W, C), the model {info.get('path')} "
                         f"takes {list(want)}")
    return images


# ------------------------------------------------------------------------------- profile


def _profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--format", default="timestep_lab", choices=FORMATS)
    p.add_argument("--out", type=Path, required=True, help="profile JSON to write")
    _bank_args(p)
    p.add_argument("--grad-timesteps", type=at_least(0), default=0,
                   help="timesteps at which to measure gradient-norm variance")
    p.add_argument("--grad-samples", type=at_least(2), default=16, help="single-sample gradients per such timestep")
    runtime_args(p)


@command("profile", "per-timestep eps-MSE, VLB term and gradient-norm variance of a model on a fixed bank",
         _profile_args)
def cmd_profile(args: argparse.Namespace) -> int:
    """Loss profile (docs/methods.md 3.1) of --model on a fixed image/noise bank -> JSON."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.studies import loss_profile, save_profile

    dev = device(args)
    m = load_for_inference(args.model, args.format, device=dev)
    prof = loss_profile(m.net, m.diffusion, m.prediction, _bank_images(args.data, m.info), num_images=args.num_images,
                        stride=args.stride, seed=args.seed, batch_size=args.batch_size, device=dev,
                        grad_timesteps=args.grad_timesteps, grad_samples=args.grad_samples)
    prof["model"] = {k: m.info.get(k) for k in ("path", "format", "sha256", "nimg")}
    save_profile(args.out, prof)
    log.info("profile of %s (%d timesteps) -> %s", args.model, len(prof["timesteps"]), args.out)
    return 0


# ------------------------------------------------------------------------------- slots


def _slots_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", type=Path, required=True, help="profile JSON (from `profile`)")
    p.add_argument("--n-slots", type=at_least(1), default=10)
    p.add_argument("--key", default="eps_mse", help="which per-t loss to split (eps_mse, vlb_bpd, ...)")
    p.add_argument("--out", type=Path, required=True)


@command("slots", "split a loss profile into n consecutive slots of equal summed loss", _slots_args)
def cmd_slots(args: argparse.Namespace) -> int:
    """Equal-cumulative-loss slots (docs/methods.md 3.1) of a profile, beside the paper's Table 1."""
    from timestep_lab.studies import PAPER_SLOTS, equal_loss_slots, load_profile, profile_per_t, scale_slots, slot_sums

    prof = load_profile(args.profile)
    loss = profile_per_t(prof, args.key)
    slots = equal_loss_slots(loss, args.n_slots)
    T = int(prof["T"])
    atomic_write_json(args.out, {
        "profile": str(args.profile), "key": args.key, "T": T, "n_slots": args.n_slots,
        "slots": [list(s) for s in slots], "sums": slot_sums(loss, slots), "total": float(loss.sum()),
        "paper_slots": [list(s) for s in PAPER_SLOTS],
        "paper_slots_scaled": [list(s) for s in scale_slots(PAPER_SLOTS, 1000, T)] if T != 1000 else None,
    })
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
    from timestep_lab.studies import interference_matrix, load_profile, load_slots

    pairs = _pairs(args.finetuned, "--finetuned")
    bad = [k for k in pairs if not k.isdigit()]
    if bad:
        raise ConfigError(f"--finetuned: expected SLOT=PROFILE with a 1-based slot number, got {bad[0]}={pairs[bad[0]]}")
    finetuned = {int(k): load_profile(v) for k, v in pairs.items()}
    slots = load_slots(args.slots)
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
    p.add_argument("--out", type=Path, required=True)
    _bank_args(p)
    runtime_args(p)


@command("predictions-profile", "per-t x0 error of several models (prediction types) and the winner per t",
         _predictions_profile_args)
def cmd_predictions_profile(args: argparse.Namespace) -> int:
    """x0 error per timestep of each model, and which prediction type wins where (docs/methods.md 3.5)."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.studies import x0_error_profile

    dev = device(args)
    models, diffusion, images = {}, None, None
    for name, path in _pairs(args.models, "--models").items():
        m = load_for_inference(path, device=dev)
        models[name] = (m.net, m.prediction)
        diffusion = diffusion or m.diffusion
        images = _bank_images(args.data, m.info)
    result = x0_error_profile(models, diffusion, images, num_images=args.num_images,
                              stride=args.stride, seed=args.seed, batch_size=args.batch_size, device=dev)
    atomic_write_json(args.out, result)
    return 0


# ------------------------------------------------------------------------------- consistency


def _consistency_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--samples", nargs="+", required=True, metavar="NAME=SAMPLES.npz")
    p.add_argument("--weights", type=Path, default=None,
                   help="train-features weights (digits-cnn, mnist-cnn) for a feature-space distance")
    p.add_argument("--out", type=Path, required=True)
    runtime_args(p)


@command("consistency", "distance between samples drawn from the same noise by different models", _consistency_args)
def cmd_consistency(args: argparse.Namespace) -> int:
    """Paired (same seed) vs unpaired sample distances for every pair of sample sets (docs/methods.md 4.1)."""
    from timestep_lab.samples_file import load_samples
    from timestep_lab.studies import paired_distance

    sets = {name: load_samples(path) for name, path in _pairs(args.samples, "--samples").items()}
    if len(sets) < 2:
        raise ConfigError("--samples: give at least two sample sets (NAME=SAMPLES.npz ...) to compare")
    for name, (_, seeds, _) in sets.items():
        first = next(iter(sets.values()))[1]
        if len(seeds) != len(first) or (seeds != first).any():
            raise ConfigError(f"--samples {name}: drawn with other seeds than the first set; pairs need the same seeds")
    features, extractor = None, None
    if args.weights:
        import numpy as np
        import torch

        from timestep_lab.features import load_feature_net

        cnn, cnn_meta = load_feature_net(args.weights)
        extractor = cnn_meta["extractor"]

        @torch.no_grad()
        def features(images_nhwc: np.ndarray) -> np.ndarray:
            return cnn.features(torch.from_numpy(np.ascontiguousarray(images_nhwc)).permute(0, 3, 1, 2)).numpy()
    pairs = []
    for a, b in itertools.combinations(sets, 2):
        res = paired_distance(sets[a][0], sets[b][0], features)
        pairs.append({"a": a, "b": b, **res})
    atomic_write_json(args.out, {"sets": {k: str(v) for k, v in _pairs(args.samples, "--samples").items()},
                                 "feature_extractor": extractor, "pairs": pairs})
    return 0


# ------------------------------------------------------------------------------- posterior coefficients


def _posterior_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--format", default="timestep_lab", choices=FORMATS)
    p.add_argument("--ranges", type=at_least(1), nargs="*", default=None, help="paper ranges LO HI LO HI ... (T = 1000, 1-based)")
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
