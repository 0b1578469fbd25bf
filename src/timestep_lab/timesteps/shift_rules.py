"""How the ``shift`` sampler gets its shift ``s`` (``timesteps.params.rule``; docs/methods.md §12.3).

==========  =====================================================================================
rule        s
==========  =====================================================================================
fixed       ``timesteps.params.shift`` (SD3's 3.0 at 1024^2, the trainers' default)
flux        ``exp(mu)``, ``mu`` linear in the image's token count ``n = (image_size / 16)^2``
            between ``(256, 0.5)`` and ``(4096, 1.15)``: diffusers' ``calculate_shift``
            (pipelines/flux/pipeline_flux.py) and ``use_dynamic_shifting``'s exponential time shift
            ``e^mu / (e^mu + (1/sigma - 1))``, which is :func:`shift_sigma` with ``s = e^mu``;
            16 pixels per token = Flux's VAE factor 8 times its 2x2 patch (sd-scripts' ``flux_shift``)
sd3         ``sqrt(m / n)``, ``m = image_size^2`` pixels against SD3's base ``n = 256^2``
            (SD3 Sec. 5.3.2 **[paper]**: 4 at 1024^2, where SD3 ships 3)
==========  =====================================================================================

The rule is a function of the params (``shift``, ``image_size``); ``flux`` and ``sd3`` need
``image_size``. At 8x8 (the digits) flux gives ``n = 0.25`` tokens, below its base, and so
``s = exp(0.4567) = 1.58``; sd3 gives ``s = 1/32``, far toward data.
"""

from __future__ import annotations

import math
from typing import Any

from timestep_lab.registry import Registry

__all__ = ["SHIFT_RULES", "flux_mu", "resolution_shift", "FLUX_PIXELS_PER_TOKEN", "SD3_BASE_RESOLUTION"]

#: rule name -> ``f(shift, image_size) -> s``
SHIFT_RULES: Registry[float] = Registry("shift rule")

FLUX_PIXELS_PER_TOKEN = 16  # VAE downsampling 8 x patch 2
SD3_BASE_RESOLUTION = 256


def flux_mu(image_seq_len: float, base_seq_len: int = 256, max_seq_len: int = 4096, base_shift: float = 0.5,
            max_shift: float = 1.15) -> float:
    """``mu`` of Flux's dynamic shifting: the line through ``(base_seq_len, base_shift)`` and
    ``(max_seq_len, max_shift)`` at ``image_seq_len`` tokens (extrapolated outside)."""
    m = (max_shift - base_shift) / (max_seq_len - base_seq_len)
    return base_shift + m * (image_seq_len - base_seq_len)


def _need_size(rule: str, image_size: int | None) -> int:
    if image_size is None:
        raise ValueError(f"rule {rule} needs image_size (the training images' side in pixels)")
    return int(image_size)


@SHIFT_RULES.register("fixed")
def _fixed(_params: Any, *, shift: float, image_size: int | None) -> float:
    return float(shift)


@SHIFT_RULES.register("flux")
def _flux(_params: Any, *, shift: float, image_size: int | None) -> float:
    n = (_need_size("flux", image_size) / FLUX_PIXELS_PER_TOKEN) ** 2
    return math.exp(flux_mu(n))


@SHIFT_RULES.register("sd3")
def _sd3(_params: Any, *, shift: float, image_size: int | None) -> float:
    return _need_size("sd3", image_size) / SD3_BASE_RESOLUTION  # sqrt(m/n) with m, n square pixel counts


def resolution_shift(rule: str, *, shift: float = 3.0, image_size: int | None = None) -> float:
    """The shift ``s`` the rule ``rule`` gives (module docstring); ``ValueError`` naming what is missing."""
    return SHIFT_RULES.build(rule, None, shift=shift, image_size=image_size)
