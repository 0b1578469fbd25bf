"""Timestep contribution at inference (Xie & Agam, arXiv 2502.01990, Fig. 3; docs/methods.md §3.4).

Fig. 3a: during reverse sampling the true x0 of a held-out image replaces the model's x0
prediction inside a t range; the FID per range says which timesteps matter. The paper ran it on
guided-diffusion's super-resolution model (Sec. 2.1), whose chain has the high-resolution image as
its own target; so does this module: each held-out image's chain is conditioned on the
low-resolution copy of that same image (``conds``, :mod:`timestep_lab.models.conditioning`), so the
injected x0 is the chain's own target. (On an unconditional chain the injected image has nothing
to do with the chain's own digit: inside a range the residual to it only shrinks by the closed-form
blend factor ``sqrt((1 - ab_exit) / (1 - ab_enter))`` and the FIDs rank blend factors, not
timesteps; that design is dropped. :func:`blend_factor` is that factor: on a deterministic chain
it stays the contraction of a range that ends just above the final step on any model, the
super-resolution one included; what changes is that "none"'s distance is the model's own error
to the image it was asked for.) The paper's design
is partly trivial: the last reverse step outputs the x0 estimate itself (``c1_0 = 1``,
``c2_0 = 0`` below), so a range that holds the final step returns the held-out image
byte for byte, and a range that ends a few steps above it returns it up to a few levels of
noise: its FID is the held-out set's, whatever the model does elsewhere. Here, therefore
(:func:`contribution_arms`):

* the chain is the full T-step ancestral (DDPM) chain, or any respaced chain in which every
  range holds at least ``min_steps`` steps (checked), e.g. 100-step DDIM with quadratic spacing
  (dense near t = 0, :func:`timestep_lab.generate.sampling.respaced_timesteps`);
* the final step is taken out of every range, and "final step only" is an arm of its own: the
  control that returns the held-out images themselves (the floor at this sample count);
* "none" (no replacement) is the model's own FID;
* :func:`branched_samples` runs every arm from one shared chain: an arm is identical to "none"
  until the top of its range, so the chain forks there (positions and every sample's noise
  generator copied) and the network is only called outside the ranges.

Fig. 3b: the reverse step's mean is the posterior mean
``mu_t = c1_t x0_hat + c2_t x_t`` (DDPM eq. 7), with

    c1_t = beta_t sqrt(ab_{t-1}) / (1 - ab_t),   c2_t = (1 - ab_{t-1}) sqrt(alpha_t) / (1 - ab_t)

(0-based t, ``ab_{-1} = 1``): at t = 0, c1 = 1 and c2 = 0 (the output is x0_hat itself); for
large t the x0 prediction's weight c1 is tiny. :func:`posterior_coefficients` tabulates them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from timestep_lab.data import to_float, to_uint8
from timestep_lab.errors import InputError
from timestep_lab.generate.sampling import Chain, GroundTruth, StackedGenerator, reverse_step
from timestep_lab.processes import exact
from timestep_lab.processes.diffusion import GaussianDiffusion
from timestep_lab.processes.timeranges import scale_range

__all__ = ["posterior_coefficients", "replacement_ranges", "range_label", "ContributionArm", "contribution_arms",
           "branched_samples", "heldout_distance", "blend_factor"]


def posterior_coefficients(diffusion: GaussianDiffusion) -> dict[str, Any]:
    """Per-t coefficients of x0 (``c1``) and x_t (``c2``) in the posterior mean, float64 as lists.

    :returns: ``{"t" [T], "c1" [T], "c2" [T], "alpha_bar" [T], "beta" [T], "x0_share" [T]}`` with
        ``x0_share = c1 / (c1 + c2 sqrt(ab_t))`` (= ``c1 / sqrt(ab_{t-1})``): the fraction of the
        mean's x0 content that comes from the x0 prediction (``x_t`` carries ``sqrt(ab_t) x0``).
    """
    c1 = diffusion._coefs64["post_c1"]
    c2 = diffusion._coefs64["post_c2"]
    ab = diffusion.alpha_bar
    share = c1 / (c1 + c2 * exact.sqrt(ab))
    return {"t": list(range(diffusion.T)), "c1": [float(x) for x in c1], "c2": [float(x) for x in c2],
            "alpha_bar": [float(x) for x in ab], "beta": [float(x) for x in diffusion.betas],
            "x0_share": [float(x) for x in share]}


def range_label(lo: int, hi: int) -> str:
    """The paper's label of a 1-based range, e.g. ``"[1,500]"``."""
    return f"[{int(lo)},{int(hi)}]"


def replacement_ranges(ranges_paper: Sequence[Sequence[int]], T: int, T_paper: int = 1000) -> list[dict[str, Any]]:
    """Map the paper's 1-based inclusive ranges on ``T_paper`` (e.g. ``[1, 500]``, ``[500, 1000]``,
    ``[10, 100]``, ``[100, 500]``, ``[1, 10]``) to 0-based inclusive ranges on ``[0, T-1]`` with
    :func:`timestep_lab.processes.timeranges.scale_range`.

    :returns: ``[{"label": "[1,500]", "paper": [1, 500], "range": [lo, hi]}, ...]`` in input order.
    """
    out = []
    for i, r in enumerate(ranges_paper):
        if len(r) != 2:
            raise InputError(f"range {i} must be [lo, hi], got {list(r)}")
        lo, hi = int(r[0]), int(r[1])
        if not 1 <= lo <= hi <= T_paper:
            raise InputError(f"range {i} [{lo}, {hi}] is not a 1-based range inside [1, {T_paper}]")
        a, b = scale_range(lo, hi, int(T), int(T_paper))
        out.append({"label": range_label(lo, hi), "paper": [lo, hi], "range": [int(a), int(b)]})
    return out


@dataclass(frozen=True)
class ContributionArm:
    """One arm of the contribution analysis: ``kind`` is ``"none"`` (no replacement), ``"final"``
    (the final step only: the control) or ``"range"``; ``replaced`` the 0-based inclusive original
    timesteps replaced (None for "none"); ``paper`` the paper's 1-based range on T = 1000;
    ``steps`` how many chain steps the replacement covers."""

    label: str
    kind: str
    replaced: tuple[int, int] | None
    paper: tuple[int, int] | None
    steps: int


def contribution_arms(ranges_paper: Sequence[Sequence[int]], T: int, used: Sequence[int], *,
                      min_steps: int = 2, T_paper: int = 1000) -> list[ContributionArm]:
    """The arms: "none", "final" and one per paper range, scaled to ``T`` and without the final step.

    :param used: the chain's original timesteps, increasing (``used[0]`` is the final step).
    :raises ValueError: naming the range when it holds fewer than ``min_steps`` chain steps once
        the final step is taken out (e.g. [1, 10] on a 100-step DDIM chain of T = 1000).
    """
    used = [int(u) for u in used]
    final = used[0]
    arms = [ContributionArm("none", "none", None, None, 0), ContributionArm("final", "final", (final, final), None, 1)]
    for r in replacement_ranges(ranges_paper, T, T_paper):
        lo, hi = r["range"]
        lo = max(lo, final + 1)
        k = sum(lo <= u <= hi for u in used)
        if k < min_steps:
            raise ValueError(f"range {r['paper']} (t {lo}..{hi} of T = {T} without the final step) holds {k} step(s) "
                             f"of the {len(used)}-step chain; it needs at least {min_steps}: sample with more steps "
                             f"(the T-step chain: steps null) or drop the range")
        arms.append(ContributionArm(f"t{r['paper'][0]}-{r['paper'][1]}", "range", (lo, hi), tuple(r["paper"]), k))
    return arms


@torch.no_grad()
def branched_samples(denoise: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]], diffusion: GaussianDiffusion,
                     arms: Sequence[ContributionArm], *, image_shape: tuple[int, int, int], seeds: Sequence[int],
                     gt_images: Tensor, method: str = "ddpm", steps: int | None = None, eta: float = 1.0,
                     spacing: str = "uniform", batch_size: int = 500, device: Any = "cpu",
                     conds: Tensor | None = None) -> dict[str, np.ndarray]:
    """Samples of every arm from one shared chain (module docstring): ``{label: uint8 [N, H, W, C]}``.

    Every arm's samples equal :func:`timestep_lab.generate.sampling.reverse_loop` on the same chain with
    ``gt`` = the arm's ``replaced`` range (none for "none"), byte for byte: same seeds, same noise.

    :param gt_images: float ``[N, C, H, W]`` in [-1, 1], one held-out image per seed.
    :param conds: ``[N, C', H, W]``, the condition of each sample's chain (a super-resolution
        model: the low-resolution copy of ``gt_images[i]``), passed per chunk as
        ``denoise(x, t, cond=...)``; None for an unconditioned ``denoise(x, t)``.
    """
    if method not in ("ddpm", "ddim"):
        raise ValueError(f"method must be ddpm or ddim, got {method!r}")
    device = torch.device(device)
    chain = Chain.of(diffusion, steps, spacing)
    used = [int(u) for u in chain.used]
    # the chain step at which each replacing arm leaves "none": the highest step inside its range
    fork = {a.label: max(i for i, u in enumerate(used) if a.replaced[0] <= u <= a.replaced[1])
            for a in arms if a.replaced is not None}
    out: dict[str, list[np.ndarray]] = {a.label: [] for a in arms}
    for start in range(0, len(seeds), batch_size):
        chunk = list(seeds[start:start + batch_size])
        gt_x0 = gt_images[start:start + len(chunk)].to(device)
        den = denoise if conds is None else partial(denoise, cond=conds[start:start + len(chunk)].to(device))
        base_noise = StackedGenerator(chunk, "cpu")
        branches: dict[str, tuple[Tensor, StackedGenerator, GroundTruth | None]] = {
            "none": (base_noise.randn(image_shape, to=device), base_noise, None)}
        for i in reversed(range(len(used))):
            for a in arms:
                if a.replaced is not None and fork[a.label] == i:
                    x, noise, _ = branches["none"]
                    branches[a.label] = (x.clone(), noise.clone(), GroundTruth(gt_x0, *a.replaced))
            for label, (x, noise, gt) in branches.items():
                branches[label] = (reverse_step(den, diffusion, chain, i, x, noise, method=method, eta=eta, gt=gt),
                                   noise, gt)
        for a in arms:
            out[a.label].append(to_uint8(branches[a.label][0]).permute(0, 2, 3, 1).cpu().numpy())
    return {k: np.concatenate(v) for k, v in out.items()}


def blend_factor(diffusion: GaussianDiffusion, chain_used: Sequence[int], lo: int, hi: int) -> float:
    """The unconditional design's artefact: a DDIM (eta = 0) chain whose x0 is replaced inside the
    original timesteps ``[lo, hi]`` keeps only ``sqrt((1 - ab_exit) / (1 - ab_enter))`` of its
    residual to the injected image, ``ab_enter`` at the range's highest chain step and ``ab_exit``
    at the step the chain leaves it for (1 for x0 itself): eps is recomputed from the injected x0
    at every step inside, so ``x - sqrt(ab) x0_gt`` scales with ``sqrt(1 - ab)``. On an
    unconditional chain every range's distance was about this factor times the "none" arm's, so
    the FIDs ranked blend factors, not timesteps (issue 42); on any chain a range that ends just
    above the final step contracts by it exactly (tests/test_conditioning.py)."""
    used = [int(u) for u in chain_used]
    inside = [i for i, u in enumerate(used) if lo <= u <= hi]
    ab = diffusion.alpha_bar
    enter = float(ab[used[max(inside)]])
    exit_ = float(ab[used[min(inside) - 1]]) if min(inside) > 0 else 1.0
    return float(((1.0 - exit_) / (1.0 - enter)) ** 0.5)


def heldout_distance(images_uint8_nhwc: np.ndarray, heldout_uint8_nhwc: np.ndarray) -> dict[str, Any]:
    """Per-sample RMS pixel distance (images scaled to [0, 1]) of each sample to the held-out
    image injected into its chain, and which samples are that image byte for byte:
    ``{"rms" [N], "copy" [N] bool}``."""
    a = np.asarray(images_uint8_nhwc, np.float64) / 255.0
    b = np.asarray(heldout_uint8_nhwc, np.float64)[: len(a)] / 255.0
    rms = np.sqrt(((a - b) ** 2).reshape(len(a), -1).mean(1))
    return {"rms": rms, "copy": rms == 0.0}


def heldout_float(heldout_uint8_nhwc: np.ndarray, n: int) -> Tensor:
    """The first ``n`` held-out images as float ``[n, C, H, W]`` in [-1, 1] (the chains' true x0)."""
    x = torch.from_numpy(np.array(heldout_uint8_nhwc[:n])).permute(0, 3, 1, 2)  # a writable copy of the memory map
    return to_float(x)
