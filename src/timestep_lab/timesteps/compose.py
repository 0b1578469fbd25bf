"""Samplers built from other samplers: ``shift`` (SD3's timestep shift around any sampler) and
``curriculum`` (one sampler, then another from a given number of images seen). docs/methods.md §12.3.

A nested sampler is a spec ``{name: ..., params: {...}}``, checked like ``timesteps`` itself
(:func:`check_spec`); errors name the nested key (``timesteps.params.base.params.m``).

``shift`` (Esser et al., arXiv 2403.03206, Sec. 5.3.2, eq. 23; diffusers'
``FlowMatchEulerDiscreteScheduler(shift=s)``): the base sampler's t is spread uniformly over its
bin, mapped through the shift and floored back onto the grid::

    u ~ U[0, 1),  x = (t_base + u) / T,  x' = s x / (1 + (s - 1) x),  t = min(floor(x' T), T - 1)

with ``s`` from ``rule`` (:mod:`timestep_lab.timesteps.shift_rules`: ``fixed`` = ``shift``, or
Flux's and SD3's resolution-dependent rules from ``image_size``).

For the rectified flow x is the noise fraction sigma (t = floor(sigma T) is the grid point whose
sigma_t = (t + 1) / T is the first >= sigma), so ``s > 1`` moves training toward noise exactly as
SD3's shift of sigma does; for the Gaussian process it shifts t / T. ``probs()`` is exact:
``P(t = j) = F(g((j + 1) / T)) - F(g(j / T))`` with ``g`` the inverse shift and ``F`` the
piecewise-linear CDF of ``(t_base + u) / T``. Weight 1 (the shift changes the objective on
purpose; a base's importance weight is dropped). A learning base sampler learns from the shifted t.

``curriculum`` (Curriculum Sampling, Sun, arXiv 2603.12517: logit-normal first, then uniform):
``first`` draws t while the images seen before the step are fewer than ``1000 switch_kimg``,
``then`` afterwards; weight and state are the active sampler's. The progress ``nimg`` comes from
the ``update`` context and is checkpointed (as ``clts``), so a resumed run switches at the same step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
from torch import Tensor

from timestep_lab.config import ConfigError
from timestep_lab.processes.flow import shift_sigma, unshift_sigma
from timestep_lab.registry import check_range
from timestep_lab.timesteps.base import TimestepSampler
from timestep_lab.timesteps.registry import SAMPLERS
from timestep_lab.timesteps.shift_rules import SHIFT_RULES, resolution_shift

__all__ = ["check_spec", "MappedSampler", "mapped_probs", "ShiftSampler", "CurriculumSampler"]

_NESTED = "\x00nested"  # the source placeholder of a nested check, cut from its message


def check_spec(key: str, spec: Any) -> tuple[str, Any]:
    """``(name, params dataclass)`` of a nested sampler spec ``{name, params}``; ``ValueError``
    whose message starts with ``key`` (the field name) when the spec is not a mapping, names an
    unknown sampler or has impossible parameters."""
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str):
        raise ValueError(f"{key} must be a mapping {{name: <sampler>, params: {{...}}}}, got {spec!r}")
    unknown = set(spec) - {"name", "params"}
    if unknown:
        raise ValueError(f"{key} has unknown key(s) {sorted(unknown)}; a sampler spec has name and params")
    try:
        return spec["name"], SAMPLERS.params(spec["name"], spec.get("params"), key=f"{key}.params", source=_NESTED)
    except ConfigError as exc:
        detail = str(exc).replace(f"{_NESTED}: ", "")
        if detail.startswith("name: "):  # an unknown name: the registry spells the key "name"
            detail = f"{key}.name: " + detail[len("name: "):]
        raise ValueError(detail) from None


def _build(spec: Mapping[str, Any], num_timesteps: int, alpha_bar: Tensor | None, device: Any) -> TimestepSampler:
    return SAMPLERS.build(spec["name"], spec.get("params"), num_timesteps=num_timesteps, alpha_bar=alpha_bar,
                          device=device)


# ---------------------------------------------------------------- shift

@dataclass(frozen=True)
class ShiftParams:
    base: Mapping[str, Any] = field(default_factory=lambda: {"name": "uniform"})
    shift: float = 3.0  # SD3's value at 1024^2 (Sec. 5.3.2); the rule "fixed" uses it
    rule: str = "fixed"  # fixed | flux | sd3 (timesteps.shift_rules)
    image_size: int | None = None  # the training images' side in pixels, for flux and sd3

    def __post_init__(self) -> None:
        check_range("shift", self.shift, 0.0, None, lo_open=True)
        if self.rule not in SHIFT_RULES:
            raise ValueError(f"rule must be one of {', '.join(SHIFT_RULES.names())}, got {self.rule!r}")
        if self.image_size is not None:
            check_range("image_size", self.image_size, 1, None)
        check_spec("base", self.base)

    @property
    def value(self) -> float:
        """The shift ``s`` the rule gives (:func:`~timestep_lab.timesteps.shift_rules.resolution_shift`)."""
        return resolution_shift(self.rule, shift=self.shift, image_size=self.image_size)


class MappedSampler(TimestepSampler):
    """A ``base`` sampler whose t, spread uniformly over its bin, goes through a monotone map of
    [0, 1] (``forward``, with its ``inverse``) and is floored back onto the grid:
    ``x = (t_base + u) / T``, ``t = min(floor(forward(x) T), T - 1)``. ``probs()`` is exact (the
    piecewise-linear CDF of ``x`` at the inverse-mapped bin edges); weight 1 (a base's importance
    weight is dropped); a learning base learns from the mapped t."""

    def __init__(self, base: Mapping[str, Any], num_timesteps: int, alpha_bar: Tensor | None, device: Any, *,
                 forward: Any, inverse: Any):
        super().__init__(num_timesteps, device)
        self.forward, self.inverse = forward, inverse
        self.base = _build(base, num_timesteps, alpha_bar, device)
        self.stateful = self.base.stateful

    def sample(self, batch_size, generator, x0=None):
        t_base, _ = self.base.sample(batch_size, generator, x0=x0)
        u = torch.rand(batch_size, generator=generator, device=generator.device, dtype=torch.float64)
        x = (t_base.to(torch.float64) + u) / self.T
        t = torch.floor(self.forward(x) * self.T).long().clamp_(0, self.T - 1)
        return t, torch.ones(batch_size, device=generator.device)

    def probs(self) -> Tensor:
        return mapped_probs(self.base.probs(), self.inverse)

    def before_update(self, **context: Any) -> None:
        self.base.before_update(**context)

    def update(self, t: Tensor, losses: Tensor, **context: Any) -> None:
        self.base.update(t, losses, **context)

    def state_dict(self) -> dict[str, Any]:
        return self.base.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.base.load_state_dict(state)


def mapped_probs(p: Tensor, inverse: Any) -> Tensor:
    """pmf ``[T]`` of ``min(floor(g(x) T), T - 1)``, ``x = (t + u)/T``, ``t ~ p``, ``u ~ U[0, 1)``, for a
    monotone increasing map ``g`` of [0, 1] with ``inverse`` (values clamped into [0, 1]):
    ``P(t' = j) = F(inverse((j + 1)/T)) - F(inverse(j/T))``, ``F`` the piecewise-linear CDF of x."""
    p = p.double()
    T = p.numel()
    cum = torch.cat([p.new_zeros(1), torch.cumsum(p, 0)])  # cum[i] = P(t_base < i)
    edges = inverse(torch.arange(T + 1, dtype=torch.float64) / T) * T
    i = edges.floor().long().clamp(0, T - 1)
    cdf = cum[i] + p[i] * (edges - i)  # P((t_base + u) < edge), piecewise linear
    cdf[-1] = cum[-1]
    return (cdf[1:] - cdf[:-1]).clamp_min(0.0)


@SAMPLERS.register("shift", ShiftParams)
class ShiftSampler(MappedSampler):
    """SD3's timestep shift around the sampler ``base`` (module docstring)."""

    def __init__(self, params: ShiftParams, *, num_timesteps: int, alpha_bar: Tensor | None = None, device="cpu", **_):
        self.shift = s = params.value
        super().__init__(params.base, num_timesteps, alpha_bar, device, forward=lambda x: shift_sigma(x, s),
                         inverse=lambda y: unshift_sigma(y, s))


# ---------------------------------------------------------------- curriculum

@dataclass(frozen=True)
class CurriculumParams:
    first: Mapping[str, Any] = field(default_factory=lambda: {"name": "logit_normal"})
    then: Mapping[str, Any] = field(default_factory=lambda: {"name": "uniform"})
    switch_kimg: float = 50.0  # set it for the run's length

    def __post_init__(self) -> None:
        check_range("switch_kimg", self.switch_kimg, 0.0, None)
        check_spec("first", self.first)
        check_spec("then", self.then)


@SAMPLERS.register("curriculum", CurriculumParams)
class CurriculumSampler(TimestepSampler):
    """``first`` until ``switch_kimg`` thousand images have been seen, ``then`` afterwards."""

    stateful = True

    def __init__(self, params: CurriculumParams, *, num_timesteps: int, alpha_bar: Tensor | None = None,
                 device="cpu", **_):
        super().__init__(num_timesteps, device)
        self.switch = int(math.ceil(1000.0 * params.switch_kimg))
        self.first = _build(params.first, num_timesteps, alpha_bar, device)
        self.then = _build(params.then, num_timesteps, alpha_bar, device)
        self.nimg = 0

    @property
    def active(self) -> TimestepSampler:
        """The sampler that draws the next batch."""
        return self.first if self.nimg < self.switch else self.then

    def sample(self, batch_size, generator, x0=None):
        return self.active.sample(batch_size, generator, x0=x0)

    def probs(self) -> Tensor:
        return self.active.probs()

    def importance_table(self) -> Tensor:
        return self.active.importance_table()

    def before_update(self, **context: Any) -> None:
        self.active.before_update(**context)

    def update(self, t: Tensor, losses: Tensor, **context: Any) -> None:
        self.active.update(t, losses, **context)  # the sampler that drew t learns from it
        self.nimg = int(context.get("nimg", self.nimg))

    def state_dict(self) -> dict[str, Any]:
        return {"nimg": self.nimg, "first": self.first.state_dict(), "then": self.then.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if set(state) != {"nimg", "first", "then"}:
            raise ValueError(f"curriculum state must hold nimg, first and then, got {sorted(state)}")
        self.nimg = int(state["nimg"])
        self.first.load_state_dict(state["first"])
        self.then.load_state_dict(state["then"])
