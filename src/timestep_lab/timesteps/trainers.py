"""The flow trainers' own timestep distributions and their truncated ranges (docs/methods.md §12.2).

OneTrainer (``modules/modelSetup/mixin/ModelSetupNoiseMixin.py``, ``_get_timestep_discrete``) draws
its discrete distributions from a table over the ``n = max_t - min_t`` timesteps
``min_t = int(T min_strength) .. max_t - 1`` (``min/max_noising_strength``), evaluated on
``x = linspace(0, 1, n)`` (shift 1; our ``shift`` wraps any sampler)::

    sigmoid             w(x) = 1 / (1 + exp(-weight (x - (bias + 1/2))))
    inverted_parabola   w(x) = max(2 - weight (x - (bias + 1/2))^2, 0)
    P(t = min_t + i) = w(x_i) / sum_j w(x_j),  0 outside [min_t, max_t)

(``weight`` = ``noising_weight``, ``bias`` = ``noising_bias``; OneTrainer's defaults 0 and 0 make
both uniform). SimpleTuner's Beta schedule (``--flow_use_beta_schedule``, ``flow_beta_schedule_alpha``
and ``_beta``, default 2 and 2): ``sigma ~ Beta(alpha, beta)``, ``t = min(floor(sigma T), T - 1)``, so
``P(t = i) = I((i + 1)/T; alpha, beta) - I(i/T; alpha, beta)`` (regularised incomplete beta). All
three are tables drawn by inverse CDF from the caller's generator; weight 1.

``truncate`` (sd-scripts' ``min_timestep``/``max_timestep``: library/sd3_train_utils.py and
flux_train_utils.py, ``get_noisy_model_input_and_timesteps``, ``t = t (t_max - t_min) + t_min``;
OneTrainer's noising-strength limits on its continuous distributions, ``timestep = u n + min_t``):
any ``base`` sampler's draw, spread over its bin, mapped affinely into ``[lo, hi]`` (the base's
shape is squeezed, not cut: musubi-tuner's ``preserve_distribution_shape``, which rejects draws
outside the range instead, is not built)::

    x = (t_base + u) / T,  x' = lo + (hi - lo) x,  t = min(floor(x' T), T - 1)

``probs()`` exact, as ``shift``'s (:func:`timestep_lab.timesteps.compose.mapped_probs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from scipy.special import betainc
from torch import Tensor

from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TabulatedSampler, discrete_cdf_pmf
from timestep_lab.timesteps.compose import MappedSampler, check_spec
from timestep_lab.timesteps.registry import SAMPLERS

__all__ = ["onetrainer_table", "ONETRAINER_CURVES", "beta_pmf"]

#: OneTrainer's discrete curves w(x; weight, centre) on x = linspace(0, 1, n), float64
ONETRAINER_CURVES = {
    "sigmoid": lambda x, weight, centre: 1.0 / (1.0 + torch.exp(-weight * (x - centre))),
    "inverted_parabola": lambda x, weight, centre: torch.clamp(-weight * (x - centre) ** 2 + 2.0, min=0.0),
}


def onetrainer_table(curve: str, T: int, weight: float, bias: float, min_strength: float,
                     max_strength: float) -> Tensor:
    """Unnormalised ``[T]`` float64 table of OneTrainer's ``curve`` (module docstring)."""
    lo, hi = int(T * min_strength), int(T * max_strength)
    x = torch.linspace(0.0, 1.0, hi - lo, dtype=torch.float64)
    p = torch.zeros(T, dtype=torch.float64)
    p[lo:hi] = ONETRAINER_CURVES[curve](x, weight, bias + 0.5)
    return p


def beta_pmf(T: int, alpha: float, beta: float) -> Tensor:
    """``P(t = i) = I((i+1)/T) - I(i/T)`` of ``sigma ~ Beta(alpha, beta)``, ``[T]`` float64."""
    edges = torch.linspace(0.0, 1.0, T + 1, dtype=torch.float64)
    return discrete_cdf_pmf(torch.from_numpy(betainc(alpha, beta, edges.numpy())))


@dataclass(frozen=True)
class OneTrainerParams:
    weight: float = 0.0  # noising_weight
    bias: float = 0.0  # noising_bias (the curve's centre is bias + 1/2)
    min_strength: float = 0.0  # min_noising_strength
    max_strength: float = 1.0  # max_noising_strength

    def __post_init__(self) -> None:
        check_range("min_strength", self.min_strength, 0.0, 1.0)
        check_range("max_strength", self.max_strength, 0.0, 1.0)
        if self.max_strength <= self.min_strength:
            raise ValueError(f"max_strength must be > min_strength={self.min_strength}, got {self.max_strength}")


def _onetrainer(curve: str):
    def factory(params: OneTrainerParams, *, num_timesteps: int, device="cpu", **_) -> TabulatedSampler:
        p = onetrainer_table(curve, num_timesteps, params.weight, params.bias, params.min_strength,
                             params.max_strength)
        return TabulatedSampler(p, num_timesteps, device)
    return factory


SAMPLERS.register("sigmoid", OneTrainerParams)(_onetrainer("sigmoid"))
SAMPLERS.register("inverted_parabola", OneTrainerParams)(_onetrainer("inverted_parabola"))


@dataclass(frozen=True)
class BetaParams:
    alpha: float = 2.0
    beta: float = 2.0

    def __post_init__(self) -> None:
        check_range("alpha", self.alpha, 0.0, None, lo_open=True)
        check_range("beta", self.beta, 0.0, None, lo_open=True)


@SAMPLERS.register("beta", BetaParams)
def _beta(params: BetaParams, *, num_timesteps: int, device="cpu", **_) -> TabulatedSampler:
    return TabulatedSampler(beta_pmf(num_timesteps, params.alpha, params.beta), num_timesteps, device)


@dataclass(frozen=True)
class TruncateParams:
    base: Mapping[str, Any] = field(default_factory=lambda: {"name": "uniform"})
    lo: float = 0.0  # sd-scripts min_timestep / T, OneTrainer min_noising_strength
    hi: float = 1.0  # sd-scripts max_timestep / T, OneTrainer max_noising_strength

    def __post_init__(self) -> None:
        check_range("lo", self.lo, 0.0, 1.0)
        check_range("hi", self.hi, 0.0, 1.0)
        if self.hi <= self.lo:
            raise ValueError(f"hi must be > lo={self.lo}, got {self.hi}")
        check_spec("base", self.base)


@SAMPLERS.register("truncate", TruncateParams)
class TruncateSampler(MappedSampler):
    """Any ``base`` sampler mapped affinely into ``[lo, hi]`` (module docstring)."""

    def __init__(self, params: TruncateParams, *, num_timesteps: int, alpha_bar: Tensor | None = None,
                 device="cpu", **_):
        lo, hi = float(params.lo), float(params.hi)
        super().__init__(params.base, num_timesteps, alpha_bar, device,
                         forward=lambda x: lo + (hi - lo) * x, inverse=lambda y: ((y - lo) / (hi - lo)).clamp(0, 1))
