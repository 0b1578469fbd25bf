"""Drawing images from a model: one seed per sample, batched; the reverse samplers themselves are
:mod:`timestep_lab.processes.solvers` (``sample.method``: ddpm, ddim for the Gaussian process; euler, heun
for the rectified flow).

Sample ``i`` always uses its own generator seeded ``seed_base + i`` for its initial noise and
every step's noise, so the images do not depend on batch size or device count (EDM's
``--seeds``). Respacing keeps ``steps`` evenly spaced timesteps of the original T (iDDPM
``space_timesteps``) and runs the process whose alpha_bar is the original one at those steps.

Ground-truth replacement (Xie & Agam, Fig. 3; docs/methods.md 3.4): inside an inclusive range
of original timesteps ``[lo, hi]`` the model's x0 prediction is replaced by the true x0 of a
held-out image (the same noise path otherwise).

The ``samples.npz`` layout is :mod:`timestep_lab.artifacts.samples_file` (``save_samples``/``load_samples``
are re-exported here). Must not know: metrics, training or the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image
from torch import Tensor, nn

from timestep_lab.artifacts.io import atomic_path
from timestep_lab.artifacts.samples_file import load_samples, save_samples
from timestep_lab.checkpoints import load_for_inference
from timestep_lab.config import ConfigError, SampleConfig
from timestep_lab.data import to_float, to_uint8
from timestep_lab.generate.guidance import guided_output, sample_classes
from timestep_lab.latents import latent_decoder
from timestep_lab.models.conditioning import NONE, Conditioning
from timestep_lab.processes.predictions import MixedPrediction, Prediction
from timestep_lab.processes.solvers import SPACINGS, Chain, GroundTruth, make_solver, respaced_timesteps, reverse_step

__all__ = ["StackedGenerator", "SPACINGS", "respaced_timesteps", "Denoiser", "Chain", "reverse_step", "reverse_loop",
           "resolved_clip_x0", "sample_images",
           "GroundTruth", "save_grid", "save_samples", "load_samples", "generate"]


class StackedGenerator:
    """One ``torch.Generator`` per sample: ``randn(shape)`` returns ``[B, *shape]`` whose row
    ``i`` depends only on seed ``seeds[i]`` and how many draws that row has made."""

    def __init__(self, seeds: list[int] | Tensor, device: torch.device | str = "cpu"):
        self.device = torch.device(device)
        self.gens = [torch.Generator(device=self.device).manual_seed(int(s)) for s in seeds]

    def clone(self) -> "StackedGenerator":
        """An independent copy at the same point of every row's stream (its next draws equal this one's)."""
        out = StackedGenerator([], self.device)
        for g in self.gens:
            c = torch.Generator(device=self.device)
            c.set_state(g.get_state())
            out.gens.append(c)
        return out

    def randn(self, shape: tuple[int, ...], to: torch.device | str | None = None) -> Tensor:
        """``[B, *shape]`` standard normal, row i from generator i; moved to ``to`` if given. From
        CPU generators to a GPU the rows are stacked into pinned memory and copied without
        blocking, so the reverse loop does not wait for the copy every step."""
        to = torch.device(to) if to is not None else self.device
        if to.type != "cuda" or self.device.type != "cpu":
            return torch.stack([torch.randn(shape, generator=g, device=self.device) for g in self.gens]).to(to)
        out = torch.empty((len(self.gens), *shape), pin_memory=True)
        for row, g in zip(out, self.gens):
            torch.randn(shape, generator=g, out=row)
        return out.to(to, non_blocking=True)


@dataclass
class Denoiser:
    """The network plus its prediction type: ``(x_t, t[, cond]) -> (x0_hat, eps_hat)``, ``t``
    original timesteps. ``clip_x0`` clamps x0_hat to [-1, 1] and recomputes eps_hat from it. A
    conditioned network (``conditioning``, e.g. ``lowres``) needs ``cond [B, C', H, W]``, the
    condition of the images the chain makes (a missing one is a ValueError saying so).

    A class-conditional network (``num_classes`` > 0) is called with ``labels [B]`` (set per
    batch by :meth:`with_labels`) and classifier-free guidance at ``guidance_scale``
    (:func:`timestep_lab.generate.guidance.guided_output`; 1.0: the conditional output)."""

    model: nn.Module
    prediction: Prediction
    diffusion: Any  # GaussianDiffusion or RectifiedFlow
    clip_x0: bool = True
    autocast: Callable[[], Any] | None = None
    conditioning: Conditioning = NONE
    num_classes: int = 0
    guidance_scale: float = 1.0
    labels: Tensor | None = None

    def with_labels(self, labels: Tensor) -> "Denoiser":
        """This denoiser for one batch of class labels ``[B]``."""
        return replace(self, labels=labels)

    def _output(self, x_t: Tensor, t: Tensor) -> Tensor:
        if self.num_classes <= 0:
            return self.model(x_t, t)
        if self.labels is None:
            raise ValueError("a class-conditional model samples with labels (Denoiser.with_labels)")
        return guided_output(self.model, x_t, t, self.labels.to(x_t.device), self.num_classes, self.guidance_scale)

    @torch.no_grad()
    def __call__(self, x_t: Tensor, t: Tensor, cond: Tensor | None = None) -> tuple[Tensor, Tensor]:
        inp = self.conditioning.network_input(x_t, cond)
        if self.autocast is not None:
            with self.autocast():
                out = self._output(inp, t)
        else:
            out = self._output(inp, t)
        x0_hat, eps_hat = self.prediction.estimates(out.float(), x_t, t, self.diffusion)
        if self.clip_x0:
            x0_hat = x0_hat.clamp(-1.0, 1.0)
            eps_hat = self.diffusion.eps_from_x0(x_t, t, x0_hat)
        return x0_hat, eps_hat


def resolved_clip_x0(cfg: SampleConfig, diffusion: Any) -> bool:
    """``sample.clip_x0``, or when null the process' default (``clip_x0_default``: the Gaussian
    process clips x0_hat to [-1, 1] as DDPM's and DDIM's code do; the flow does not, as diffusers'
    flow pipelines do not; docs/methods.md §12.4)."""
    return bool(diffusion.clip_x0_default if cfg.clip_x0 is None else cfg.clip_x0)


@torch.no_grad()
def reverse_loop(denoise: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], diffusion: Any,
                 noise: StackedGenerator, shape: tuple[int, ...], *, method: str = "ddpm", steps: int | None = None,
                 eta: float = 1.0, gt: GroundTruth | None = None, device: torch.device | str = "cpu",
                 on_step: Callable[[int], None] | None = None, spacing: str = "uniform", shift: float = 1.0) -> Tensor:
    """Run the reverse sampler ``method`` (:mod:`timestep_lab.processes.solvers`) for one batch; returns x_0 as
    float ``[B, *shape]`` in about [-1, 1]. ``noise`` supplies the initial x_T and every step's noise,
    per sample; ``spacing`` places the ``steps`` of DDPM and DDIM (:func:`respaced_timesteps`); ``shift``
    is the flow solvers' inference-time shift of their sigma grid."""
    solver = make_solver(method)
    if diffusion.kind not in solver.kinds:
        raise ValueError(f"reverse sampler {method!r} does not apply to a {diffusion.kind} process "
                         f"(it applies to {', '.join(solver.kinds)})")
    return solver.run(denoise, diffusion, noise, shape, steps=steps, eta=eta, gt=gt, device=device, on_step=on_step,
                      spacing=spacing, shift=shift)


def sample_images(denoise: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], diffusion: Any, *,
                  image_shape: tuple[int, int, int], seeds: list[int], method: str = "ddpm", steps: int | None = None,
                  eta: float = 1.0, batch_size: int = 500, device: torch.device | str = "cpu",
                  gt_images: Tensor | None = None, gt_range: tuple[int, int] | None = None,
                  progress: bool = False, desc: str = "sampling", shift: float = 1.0,
                  decode: Callable[[Tensor], Tensor] | None = None, num_classes: int = 0) -> np.ndarray:
    """Draw ``len(seeds)`` images; returns uint8 ``[N, H, W, C]``.

    :param image_shape: ``(C, H, W)`` of what the network generates (latents for a latent model).
    :param decode: latents ``[B, c, h, w]`` -> images ``[B, 3, H, W]`` in [-1, 1] (the VAE's
        decoder, :func:`timestep_lab.latents.latent_decoder`), applied to every batch before the
        uint8 conversion; None: the network generates images.
    :param gt_images: float ``[N, C, H, W]`` true x0 (one per seed) for ground-truth replacement
        inside ``gt_range``.
    :param num_classes: > 0 for a class-conditional network: each sample's class is the first draw
        of its own generator (:func:`~timestep_lab.generate.guidance.sample_classes`), before its
        noise, and ``denoise.with_labels(classes)`` denoises the batch.
    """
    n_steps = make_solver(method).num_steps(diffusion, steps)
    bar = None
    if progress:
        from tqdm.auto import tqdm  # only when a progress bar is asked for: keeps `import sampling` fast

        bar = tqdm(total=len(seeds) * n_steps, desc=desc, unit="step", unit_scale=True, dynamic_ncols=True)
    out = []
    try:
        for start in range(0, len(seeds), batch_size):
            chunk = seeds[start:start + batch_size]
            gt = None
            if gt_images is not None and gt_range is not None:
                gt = GroundTruth(gt_images[start:start + len(chunk)], *gt_range)
            gens = StackedGenerator(chunk, "cpu")
            den = denoise.with_labels(sample_classes(gens.gens, num_classes)) if num_classes > 0 else denoise
            x = reverse_loop(den, diffusion, gens, image_shape, method=method,
                             steps=steps, eta=eta, gt=gt, device=device, shift=shift,
                             on_step=(lambda _i, n=len(chunk): bar.update(n)) if bar else None)
            if decode is not None:
                x = decode(x)
            out.append(to_uint8(x).permute(0, 2, 3, 1).cpu().numpy())
    finally:
        if bar is not None:
            bar.close()
    if not out and decode is not None:
        raise ValueError("no seeds to sample")
    return np.concatenate(out) if out else np.zeros((0, image_shape[1], image_shape[2], image_shape[0]), np.uint8)


def save_grid(images: np.ndarray, path: str | Path, nrow: int | None = None, scale: int | None = None) -> None:
    """Save uint8 ``[N, H, W, C]`` images as one PNG grid (nearest upscaling for tiny images)."""
    n, h, w, c = images.shape
    if n == 0:
        raise ValueError("no images to put in a grid")
    nrow = nrow or int(np.ceil(np.sqrt(n)))
    rows = int(np.ceil(n / nrow))
    pad = 1
    grid = np.full((rows * (h + pad) + pad, nrow * (w + pad) + pad, c), 255, np.uint8)
    for k in range(n):
        r, q = divmod(k, nrow)
        grid[pad + r * (h + pad):pad + r * (h + pad) + h, pad + q * (w + pad):pad + q * (w + pad) + w] = images[k]
    scale = scale or max(1, 256 // max(grid.shape[:2]) if max(h, w) < 32 else 1)
    img = Image.fromarray(grid[..., 0] if c == 1 else grid)
    if scale > 1:
        img = img.resize((img.width * scale, img.height * scale), Image.NEAREST)
    with atomic_path(path, suffix=".png") as tmp:
        img.save(tmp, format="PNG")


def generate(model_path: str | Path, out_npz: str | Path, cfg: SampleConfig, *, device: torch.device | str = "cpu",
             grid_png: str | Path | None = None, progress: bool = True, fmt: str = "timestep_lab",
             gt_images: np.ndarray | None = None, gt_range: tuple[int, int] | None = None,
             mixed_inference: str | None = None, image_size: int | None = None) -> dict[str, Any]:
    """Sample ``cfg.num_samples`` images from a model file into ``samples.npz`` (+ PNG grid).

    :param fmt: ``timestep_lab`` (our model.pt / snapshots) or a pretrained format.
    :param image_size: the resolution a guided-diffusion file is used at (its file does not say).
    :param gt_images: uint8 NHWC held-out images for ground-truth replacement inside the
        0-based inclusive ``gt_range`` of original timesteps; sample ``i`` uses image ``i``.
    Returns the metadata stored in the file (sampler, steps, eta, EMA, seeds, model hash...).
    """
    device = torch.device(device)
    loaded = load_for_inference(model_path, fmt, use_ema=cfg.use_ema, device=device, mixed_inference=mixed_inference,
                                image_size=image_size)
    diffusion, prediction, meta = loaded.diffusion, loaded.prediction, loaded.info
    solver = make_solver(cfg.method)
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else None
    clip_x0 = resolved_clip_x0(cfg, diffusion)
    num_classes = int(getattr(loaded.net, "num_classes", 0) or 0)
    if num_classes == 0 and cfg.guidance_scale != 1.0:
        raise ConfigError(f"sample.guidance_scale: {cfg.guidance_scale} guides a class-conditional model, but "
                          f"{model_path} is unconditional; set sample.guidance_scale: 1.0")
    denoise = Denoiser(loaded.net, prediction, diffusion, clip_x0=clip_x0, autocast=autocast,
                       num_classes=num_classes, guidance_scale=cfg.guidance_scale, conditioning=loaded.conditioning)
    n = cfg.num_samples
    gt = None
    if gt_images is not None:
        n = min(n, len(gt_images))  # one held-out image per sample
        gt = to_float(torch.from_numpy(np.ascontiguousarray(gt_images[:n])).permute(0, 3, 1, 2))
    seeds = list(range(cfg.seed_base, cfg.seed_base + n))
    shape = (int(meta["channels"]), int(meta["image_size"]), int(meta["image_size"]))
    vae = ((meta.get("inputs") or {}).get("data") or {}).get("vae")  # a model trained on latents
    decode = latent_decoder(vae, device) if vae else None
    images = sample_images(denoise, diffusion, image_shape=shape, seeds=seeds, method=cfg.method, steps=cfg.steps,
                           eta=cfg.eta if cfg.method == "ddim" else 1.0, batch_size=cfg.batch_size, device=device,
                           gt_images=gt, gt_range=gt_range, progress=progress,
                           desc=f"sampling {Path(model_path).parent.name}", shift=cfg.shift, decode=decode,
                           num_classes=num_classes)
    info = {
        "model": str(model_path), "model_sha256": meta["sha256"], "model_format": fmt, "nimg": meta.get("nimg"),
        "status": meta.get("status", "ok"), "method": cfg.method,
        "steps": solver.num_steps(diffusion, cfg.steps), "evaluations": solver.evaluations(diffusion, cfg.steps),
        "num_timesteps": diffusion.T, "process": diffusion.kind,
        "eta": cfg.eta if cfg.method == "ddim" else None, "use_ema": meta.get("use_ema"), "clip_x0": clip_x0,
        "shift": cfg.shift,
        # classifier-free guidance (1.0: none) and the classes the samples were drawn from (0: unconditional)
        "guidance_scale": cfg.guidance_scale, "num_classes": num_classes,
        "seed_range": [cfg.seed_base, cfg.seed_base + n - 1], "num_samples": n,
        "prediction": meta.get("prediction"), "gt_range": list(gt_range) if gt_range else None,
        "vae": vae or None,  # the VAE (folder, weights' sha256, scaling factor) that decoded the samples
    }
    if isinstance(prediction, MixedPrediction):
        info["mixed_head_per_t"] = prediction.head_per_t.tolist()
    save_samples(out_npz, images, seeds, info)
    if grid_png is not None and cfg.grid_size > 0:
        save_grid(images[: cfg.grid_size], grid_png)
    return info
