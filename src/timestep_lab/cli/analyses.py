"""Analysis commands (the work is in ``timestep_lab.studies``): ``profile``, ``optimal-profile``,
``slots``, ``interference``, ``interference-control``, ``predictions-profile`` and ``posterior``.
Paths in, paths out. The analyses that sample (``consistency``, ``contribution``) are in
:mod:`timestep_lab.cli.sampled`.

Registered into :data:`timestep_lab.cli.common.COMMANDS` on import. Must not know the entry
(``timestep_lab.cli``) or other commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from timestep_lab.artifacts.io import atomic_write_json
from timestep_lab.cli.common import (
    at_least,
    checkpoint_args,
    command,
    device,
    log,
    runtime_args,
    seed_arg,
)
from timestep_lab.cli.common import (
    named_paths as _pairs,
)
from timestep_lab.config import ConfigError
from timestep_lab.errors import InputError


def _bank_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, required=True, help="prepared images for the fixed bank")
    p.add_argument("--num-images", type=at_least(1), default=256, help="images in the fixed bank")
    p.add_argument("--stride", type=at_least(1), default=1, help="evaluate every stride-th timestep (plus T-1)")
    p.add_argument("--seed", type=seed_arg, default=1234, help="bank and noise seed (same for every model)")
    p.add_argument("--batch-size", type=at_least(1), default=256)


def _bank_images(data: Path, info: dict):
    """The prepared images of ``data`` (uint8 NHWC), or of a latent folder its scaled posterior
    means (float NCHW, :class:`timestep_lab.latents.LatentBank`), for a model whose ``info`` says
    its input size and channels; :class:`InputError` naming both when they differ (a pixel model
    on latents or the reverse: else a convolution's error)."""
    from timestep_lab.data import PreparedData
    from timestep_lab.latents import LatentBank, LatentData, is_latent_folder

    latent = is_latent_folder(data)
    images = LatentBank(LatentData(data)) if latent else PreparedData(data).images
    size, ch = info.get("image_size"), info.get("channels")
    have = tuple(images.shape[1:])
    want = (ch, size, size) if latent else (size, size, ch)
    if None not in want and have != want:
        raise InputError(f"{data}: {'latents' if latent else 'images'} are {list(have)} "
                         f"({'C, H, W' if latent else 'H, W, C'}), the model {info.get('path')} takes {list(want)}")
    return images


# ------------------------------------------------------------------------------- profile


def _profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True)
    checkpoint_args(p)
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
    m = load_for_inference(args.model, args.format, device=dev, image_size=args.image_size)
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
    p.add_argument("--optimal", type=Path, default=None, help="the optimal denoiser's profile: adds the excess x0 error")
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


# ------------------------------------------------------------------------------- posterior coefficients


def _posterior_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True)
    checkpoint_args(p)
    p.add_argument("--ranges", type=at_least(1), nargs="*", default=None, help="paper ranges LO HI LO HI ... (T = 1000, 1-based)")
    p.add_argument("--out", type=Path, required=True)


@command("posterior", "posterior-mean coefficients of x0 and x_t over t for a model's schedule", _posterior_args)
def cmd_posterior(args: argparse.Namespace) -> int:
    """c1_t (x0) and c2_t (x_t) of the posterior mean (seed paper Fig. 3b) -> JSON."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.studies import posterior_coefficients, replacement_ranges

    m = load_for_inference(args.model, args.format, image_size=args.image_size)
    out = posterior_coefficients(m.diffusion)
    if args.ranges:
        pairs = [args.ranges[i:i + 2] for i in range(0, len(args.ranges), 2)]
        out["ranges"] = replacement_ranges(pairs, m.diffusion.T)
    atomic_write_json(args.out, out)
    return 0


# ------------------------------------------------------------------------------- optimal denoiser


def _optimal_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=Path, required=True, help="any model of the study: its diffusion process is used")
    checkpoint_args(p)
    p.add_argument("--out", type=Path, required=True, help="profile JSON of the optimal denoiser")
    _bank_args(p)


@command("optimal-profile", "per-t losses of the training set's optimal denoiser on the profile bank (the floor)",
         _optimal_args)
def cmd_optimal_profile(args: argparse.Namespace) -> int:
    """E[x0 | x_t] of the training images, scored on the same bank and noise as `profile` (docs/methods.md 3.1)."""
    from timestep_lab.checkpoints import load_for_inference
    from timestep_lab.studies.optimal import optimal_profile

    m = load_for_inference(args.model, args.format, image_size=args.image_size)
    images = _bank_images(args.data, m.info)  # the bank of the profiles it is set beside: the model's images
    prof = optimal_profile(images, m.diffusion, num_images=args.num_images, stride=args.stride, seed=args.seed)
    prof["model"]["diffusion_from"] = str(args.model)
    atomic_write_json(args.out, prof)
    log.info("optimal denoiser of %d images: eps-MSE %.3g..%.3g -> %s", len(images), min(prof["eps_mse"]),
             max(prof["eps_mse"]), args.out)
    return 0
