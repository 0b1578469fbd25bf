"""``toward_zero``: draw t near 0 more often (the seed paper's retraining sampler, Fig. 1d).

Source: Xie & Agam, "Rethinking Timesteps Samplers and Prediction Types", arXiv 2502.01990,
Sec. 2.1 / Fig. 1d (the exact curve is not given: our exponential form is a reconstruction,
docs/methods.md §1.6)::

    p(t) = exp(-t / scale) / sum_s exp(-s / scale),     t in {0, ..., T-1}

``scale`` is in timesteps (default ``0.15 T``, i.e. 150 for T = 1000). Weight 1 (it changes the
objective on purpose: Fig. 1e-f show what that does to the losses near T).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TabulatedSampler
from timestep_lab.timesteps.registry import SAMPLERS


@dataclass(frozen=True)
class TowardZeroParams:
    scale: float | None = None  # timesteps; None: 0.15 T

    def __post_init__(self) -> None:
        if self.scale is not None:
            check_range("scale", self.scale, 0.0, None, lo_open=True)


@SAMPLERS.register("toward_zero", TowardZeroParams)
class TowardZeroSampler(TabulatedSampler):
    def __init__(self, params: TowardZeroParams, *, num_timesteps: int, device="cpu", **_):
        self.scale = 0.15 * num_timesteps if params.scale is None else params.scale
        p = torch.softmax(-torch.arange(num_timesteps, dtype=torch.float64) / self.scale, dim=0)
        super().__init__(p, num_timesteps, device)
