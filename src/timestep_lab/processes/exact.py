"""Square roots that are the same on every CPU: torch's CPU ``sqrt`` is not.

torch computes ``Tensor.sqrt()`` (and ``pow(0.5)``) of a CPU tensor with MKL's VML (``vsSqrt`` /
``vdSqrt``), whatever its size or the ATen capability: not correctly rounded (about 20% of float32
results are one unit in the last place off), and its last bit depends on the CPU's approximate
reciprocal-square-root instruction, whose tables differ between CPU vendors (QEMU's emulated CPUs
gave other bits than the AMD machine). Training turns such a bit into a different model, so the
pinned code paths of ``reproducibility: portable`` (:mod:`timestep_lab.arithmetic`) would not
give the same numbers on another CPU. numpy's ``sqrt`` is the IEEE instruction (correctly
rounded everywhere), and so is CUDA's.

Every square root of a tensor in the library's numeric paths goes through :func:`sqrt`
(``tests/test_arithmetic.py`` runs training, sampling and the samplers under a dispatch mode that
refuses torch's CPU sqrt). Not differentiable: the paths that need it never take its gradient.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["sqrt"]


def sqrt(t: Tensor) -> Tensor:
    """Correctly rounded elementwise square root of ``t`` (any shape), same dtype and device.

    CPU: numpy's ``sqrt`` on the tensor's memory (float32 and float64 as they are; another
    dtype through float64); other devices: torch's, which is IEEE there."""
    if t.device.type != "cpu":
        return t.sqrt()
    x = t.detach()
    if x.dtype not in (torch.float32, torch.float64):
        return sqrt(x.to(torch.float64)).to(t.dtype)
    return torch.from_numpy(np.asarray(np.sqrt(x.numpy())))  # asarray: a 0-d input gives a numpy scalar
