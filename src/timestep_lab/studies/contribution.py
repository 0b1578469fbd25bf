"""Timestep contribution at inference (Xie & Agam, arXiv 2502.01990, Fig. 3; docs/methods.md §3.4).

Fig. 3a: during reverse sampling the true x0 of a held-out image replaces the model's x0
prediction inside a t range (``sampling.sample_images(..., gt_images=, gt_range=)``); the FID per
range says which timesteps matter. :func:`replacement_ranges` maps the paper's ranges (1-based on
T = 1000) to our 0-based inclusive ranges.

Fig. 3b: the reverse step's mean is the posterior mean
``mu_t = c1_t x0_hat + c2_t x_t`` (DDPM eq. 7), with

    c1_t = beta_t sqrt(ab_{t-1}) / (1 - ab_t),   c2_t = (1 - ab_{t-1}) sqrt(alpha_t) / (1 - ab_t)

(0-based t, ``ab_{-1} = 1``): at t = 0, c1 = 1 and c2 = 0 (the output is x0_hat itself); for
large t the x0 prediction's weight c1 is tiny. :func:`posterior_coefficients` tabulates them.
"""

from __future__ import annotations

from typing import Any, Sequence

from timestep_lab.diffusion import GaussianDiffusion
from timestep_lab.errors import InputError
from timestep_lab.timeranges import scale_range

__all__ = ["posterior_coefficients", "replacement_ranges", "range_label"]


def posterior_coefficients(diffusion: GaussianDiffusion) -> dict[str, Any]:
    """Per-t coefficients of x0 (``c1``) and x_t (``c2``) in the posterior mean, float64 as lists.

    :returns: ``{"t" [T], "c1" [T], "c2" [T], "alpha_bar" [T], "beta" [T], "x0_share" [T]}`` with
        ``x0_share = c1 / (c1 + c2 sqrt(ab_t))`` (= ``c1 / sqrt(ab_{t-1})``): the fraction of the
        mean's x0 content that comes from the x0 prediction (``x_t`` carries ``sqrt(ab_t) x0``).
    """
    c1 = diffusion._coefs64["post_c1"]
    c2 = diffusion._coefs64["post_c2"]
    ab = diffusion.alpha_bar
    share = c1 / (c1 + c2 * ab.sqrt())
    return {"t": list(range(diffusion.T)), "c1": [float(x) for x in c1], "c2": [float(x) for x in c2],
            "alpha_bar": [float(x) for x in ab], "beta": [float(x) for x in diffusion.betas],
            "x0_share": [float(x) for x in share]}


def range_label(lo: int, hi: int) -> str:
    """The paper's label of a 1-based range, e.g. ``"[1,500]"``."""
    return f"[{int(lo)},{int(hi)}]"


def replacement_ranges(ranges_paper: Sequence[Sequence[int]], T: int, T_paper: int = 1000) -> list[dict[str, Any]]:
    """Map the paper's 1-based inclusive ranges on ``T_paper`` (e.g. ``[1, 500]``, ``[500, 1000]``,
    ``[10, 100]``, ``[100, 500]``, ``[1, 10]``) to 0-based inclusive ranges on ``[0, T-1]`` with
    :func:`timestep_lab.timeranges.scale_range`.

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
