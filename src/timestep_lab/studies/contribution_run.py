"""The timestep-contribution analysis from files to files (docs/methods.md §3.4): a model and the
held-out images in; every arm's ``samples.npz``, PNG grid and ``metrics.json`` and one
``contribution.json`` out.

``contribution.json`` (format :data:`CONTRIBUTION_FORMAT`) holds, per arm, the FID of each tool
(the libraries' numbers, as every other FID), a paired bootstrap interval over samples
(:func:`timestep_lab.metrics.bootstrap_fid`) for the FID and for its differences from the
"final step only" control and from "none", and the RMS pixel distance of the samples to the
held-out images injected into their chains (how close an arm's output is to a copy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from timestep_lab.artifacts.io import atomic_write_json
from timestep_lab.checkpoints import load_for_inference
from timestep_lab.config import EvalConfig
from timestep_lab.errors import InputError
from timestep_lab.evidence.stats import json_safe
from timestep_lab.generate.sampling import Chain, Denoiser, save_grid, save_samples
from timestep_lab.metrics import bootstrap_fid, evaluate_samples, load_reference, sample_features
from timestep_lab.studies.contribution import branched_samples, contribution_arms, heldout_distance, heldout_float

__all__ = ["CONTRIBUTION_FORMAT", "run_contribution"]

CONTRIBUTION_FORMAT = "timestep_lab.contribution/2"  # /2: run on a conditioned (super-resolution) model


def _interval(values: np.ndarray, level: float = 0.95, replicates: int = 200, seed: int = 0) -> dict[str, Any]:
    """Mean of per-sample values with a percentile bootstrap interval over samples."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), (replicates, len(values)))
    means = values[idx].mean(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return {"mean": float(values.mean()), "ci": [float(lo), float(hi)]}


def run_contribution(model: str | Path, heldout: np.ndarray, reference: str | Path, out_json: str | Path,
                     out_dir: str | Path, *, ranges: Sequence[Sequence[int]], num_samples: int, fmt: str = "timestep_lab",
                     image_size: int | None = None,
                     method: str = "ddpm", steps: int | None = None, eta: float = 1.0, spacing: str = "uniform",
                     min_steps: int = 2,
                     bootstrap: int = 200, seed_base: int = 0, batch_size: int = 500,
                     cfg: EvalConfig = EvalConfig(), weights: str | Path | None = None,
                     device: Any = "cpu") -> dict[str, Any]:
    """Sample every arm of :func:`~timestep_lab.studies.contribution.contribution_arms` from
    ``model`` (EMA weights, x0 clipped) and score it; writes ``out_dir/<label>/{samples.npz,
    samples.png, metrics.json}`` and ``out_json``. Sample ``i`` uses seed ``seed_base + i`` and
    held-out image ``i``: its chain is conditioned on that image's low-resolution copy and the
    image is what the ranges inject (``model`` must be a conditioned, super-resolution model:
    :class:`InputError` otherwise); ``num_samples`` is capped at the number of held-out images."""
    device = torch.device(device)
    ref = load_reference(reference)  # a missing reference fails before any sampling
    m = load_for_inference(model, fmt, use_ema=True, device=device, image_size=image_size)
    want = (int(m.info["image_size"]), int(m.info["image_size"]), int(m.info["channels"]))
    if tuple(heldout.shape[1:]) != want:  # else a convolution's error after the chain has run
        raise InputError(f"held-out images are {list(heldout.shape[1:])} (H, W, C), the model {model} makes {list(want)}")
    if not m.conditioning.conditioned:  # the unconditional design ranks blend factors (studies.contribution)
        raise InputError(f"{model}: the contribution analysis runs on a super-resolution model (conditioning "
                         f"lowres, the study's run superres), whose chain has the injected image as its own "
                         f"target; this model is unconditioned")
    diffusion = m.diffusion
    chain = Chain.of(diffusion, steps, spacing)
    arms = contribution_arms(ranges, diffusion.T, [int(u) for u in chain.used], min_steps=min_steps)
    n = min(int(num_samples), len(heldout))
    seeds = list(range(seed_base, seed_base + n))
    shape = (int(m.info["channels"]), int(m.info["image_size"]), int(m.info["image_size"]))
    denoise = Denoiser(m.net, m.prediction, diffusion, clip_x0=True, conditioning=m.conditioning)
    gt = heldout_float(heldout, n)
    images = branched_samples(denoise, diffusion, arms, image_shape=shape, seeds=seeds, gt_images=gt,
                              method=method, steps=steps, eta=eta, spacing=spacing, batch_size=batch_size,
                              device=device, conds=m.conditioning.condition(gt))
    held = np.asarray(heldout[:n])
    meta = {"model": str(model), "model_sha256": m.info["sha256"], "model_format": fmt, "nimg": m.info.get("nimg"),
            "status": m.info.get("status", "ok"), "method": method, "steps": len(chain), "num_timesteps": diffusion.T,
            "eta": eta if method == "ddim" else None, "spacing": spacing, "use_ema": m.info.get("use_ema"), "clip_x0": True,
            "seed_range": [seeds[0], seeds[-1]], "num_samples": n, "prediction": m.info.get("prediction"),
            "conditioning": (m.info.get("config") or {}).get("conditioning")}
    rows, feats, scores = [], {}, {}
    for arm in arms:
        row, feats[arm.label], scores = _score_arm(arm, images[arm.label], held, seeds, meta, ref, Path(out_dir),
                                                   cfg=cfg, weights=weights, device=device, bootstrap=bootstrap)
        rows.append(row)
    result = _result(rows, bootstrap_fid(feats, ref, replicates=bootstrap), scores["label"], meta, chain,
                     min_steps=min_steps)
    atomic_write_json(out_json, result)
    return result


def _score_arm(arm, images: np.ndarray, held: np.ndarray, seeds: list[int], meta: dict[str, Any], ref,
               out_dir: Path, *, cfg: EvalConfig, weights, device, bootstrap: int):
    """Write one arm's ``samples.npz``, ``samples.png`` and ``metrics.json`` under ``out_dir/<label>``
    and score it. ``images``: uint8 NHWC ``[n, H, W, C]``; ``held``: the first ``n`` held-out images.
    Returns the arm's row, its features (for the paired bootstrap) and its metrics dict."""
    arm_meta = {**meta, "gt_range": list(arm.replaced) if arm.replaced else None}
    folder = out_dir / arm.label
    folder.mkdir(parents=True, exist_ok=True)
    save_samples(folder / "samples.npz", images, seeds, arm_meta)
    save_grid(images[:100], folder / "samples.png")
    scores = evaluate_samples(images, ref, cfg=cfg, weights=weights, samples_meta=arm_meta, device=device)
    atomic_write_json(folder / "metrics.json", {**scores, "samples_file": str(folder / "samples.npz")})
    feats = sample_features(images, ref, cfg=cfg, weights=weights, device=device)
    dist = heldout_distance(images, held)
    row = {"label": arm.label, "kind": arm.kind, "paper": list(arm.paper) if arm.paper else None,
           "replaced": list(arm.replaced) if arm.replaced else None, "chain_steps": arm.steps,
           "fid": {r["tool"]: r["value"] for r in scores["records"] if r["metric"] == "fid"},
           "rms_to_heldout": _interval(dist["rms"], replicates=bootstrap),
           "copies": float(dist["copy"].mean())}
    return row, feats, scores


def _result(rows: list[dict[str, Any]], boot: dict[str, Any], label: str, meta: dict[str, Any], chain: Chain, *,
            min_steps: int) -> dict[str, Any]:
    """The contribution.json dict: every arm's row with its bootstrap FID and its paired
    differences to the "final" and "none" arms (``boot``: :func:`bootstrap_fid`), the chain,
    the model and the bootstrap's settings."""
    for row in rows:
        row["fid_bootstrap"] = boot["fid"][row["label"]]
        for other in ("final", "none"):
            if row["label"] != other:
                row[f"minus_{other}"] = boot["diff"][f"{row['label']}-{other}"]
    return json_safe({
        "format": CONTRIBUTION_FORMAT, "label": label, "num_samples": meta["num_samples"],
        "chain": {"method": meta["method"], "steps": len(chain), "num_timesteps": meta["num_timesteps"],
                  "eta": meta["eta"], "spacing": meta["spacing"], "timesteps": [int(u) for u in chain.used],
                  "final_step": int(chain.used[0]), "min_steps": int(min_steps)},
        "model": {k: meta[k] for k in ("model", "model_sha256", "model_format", "nimg", "conditioning")},
        "bootstrap": {k: boot[k] for k in ("replicates", "seed", "level", "interval")},
        "units": {"fid": label, "rms_to_heldout": "RMS pixel distance, images scaled to [0, 1]"},
        "arms": rows,
    })
