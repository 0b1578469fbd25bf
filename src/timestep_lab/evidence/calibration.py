"""What a paired t-statistic is referred to: its p-value and critical value, by named calibration
(docs/methods.md §9.1, §9.6).

Every paired comparison of the scorecard reduces to ``n`` per-seed differences ``d_s`` and the
studentized mean ``T = d̄ / (s_d / √n)``. Whether a given ``|T|`` is evidence depends on what the
``d_s`` may look like when there is no effect (mean 0). A calibration says that, and gives

* ``pvalue(t, n)``: two-sided ``P(|T| >= |t|)`` under the worst case of what it allows (array in,
  array out, so whole simulated scorecards are judged at once);
* ``critical(n, level)``: the smallest ``c`` with ``P(|T| > c) <= level`` under every allowed
  distribution; ``d̄ ± c · s_d / √n`` is then a ``1 - level`` interval for the mean difference;
* ``condition``, ``beyond``: what the scorecard prints, saying exactly when its promise holds and
  what happens outside that.

Entries (:data:`CALIBRATIONS`):

``student_t``
    ``T ~ t_{n-1}``: exact when the ``d_s`` are normal, not otherwise (the rule before issue 37:
    lognormal per-seed differences of log-SD 1 gave a false finding in 31-54% of null studies).
``skew_envelope`` (the default, :data:`DEFAULT_CALIBRATION`)
    the pointwise maximum of ``P(|T| >= t)`` over a stated family of mean-zero seed
    distributions: normal, Student t with 3 df, and centred lognormals ``exp(sigma Z) -
    exp(sigma^2 / 2)`` with log-SD ``sigma`` in {0.25, 0.5, 0.75, 1.0} (docs/methods.md §9.6's skew
    model is log-SD 0.5-1); a reflection does not change ``|T|``, so skew either way is covered.
    Each distribution's ``|T|`` is simulated ``draws`` times per ``n`` (seeded, so the same ``n``
    always gives the same numbers); with ``k = #{|T*| >= |t|}`` the p-value is the Monte Carlo one
    raised to its one-sided 99% upper confidence bound, ``(k + 1 + 2.326 √(k + 1)) / (draws + 1)``,
    so that the simulation's own error cannot make a p smaller than the truth (without it, 2^17
    draws put the n = 10 lognormal's tail 17% light at the scorecard's Holm level), maximised over
    the family. Costs 2.7x (n = 3), 2.9x (n = 5), 2.5x (n = 10) the Student-t critical value at the
    scorecard's Holm level: the price of a promise that holds under skew.

Why not a distribution-free test: at n = 3-5 seeds a sign-flip test's smallest two-sided p is
``2 / 2^n`` (0.25 at n = 3, 0.0625 at n = 5), above the scorecard's per-test level ``0.05 / m``;
and a sign-flip test assumes symmetry, which a skewed mean-zero difference does not have.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Protocol

import numpy as np
from scipy import special as spf
from scipy import stats as sps

from timestep_lab.registry import Registry, check_range

__all__ = ["Calibration", "CALIBRATIONS", "DEFAULT_CALIBRATION", "StudentT", "SkewEnvelope", "SkewEnvelopeParams",
           "calibration", "studentized", "SKEW_SIGMAS"]

#: The calibration the scorecard uses unless told otherwise.
DEFAULT_CALIBRATION = "skew_envelope"
#: Log-SDs of the centred lognormals in the skew envelope (docs/methods.md §9.6: 0.5 to 1).
SKEW_SIGMAS = (0.25, 0.5, 0.75, 1.0)


class Calibration(Protocol):
    name: str
    condition: str  # when the promise holds, as a clause: "per-seed differences are ..."
    beyond: str  # what happens outside it

    def pvalue(self, t: np.ndarray | float, n: int) -> np.ndarray: ...

    def critical(self, n: int, level: float) -> float: ...


def studentized(diff: np.ndarray | float, sd: np.ndarray | float, n: int) -> np.ndarray:
    """``T = diff / (sd / √n)`` (NaN where ``sd`` is 0 or not finite: no test, not an infinite one)."""
    diff, sd = np.asarray(diff, dtype=np.float64), np.asarray(sd, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(np.isfinite(sd) & (sd > 0), diff / (sd / math.sqrt(n)), np.nan)


CALIBRATIONS: Registry[Calibration] = Registry("error calibration")


@CALIBRATIONS.register("student_t")
@dataclasses.dataclass(frozen=True)
class StudentT:
    """``|T|`` referred to Student's t with ``n - 1`` df: exact for normal per-seed differences."""

    params: object = None
    name: str = "student_t"
    condition: str = "per-seed differences are normal"
    beyond: str = ("skewed ones break it: 41-67% of simulated null studies with lognormal differences of log-SD 1 "
                   "(docs/methods.md §9.2)")

    def pvalue(self, t: np.ndarray | float, n: int) -> np.ndarray:
        t = np.abs(np.asarray(t, dtype=np.float64))
        return np.where(np.isnan(t), np.nan, 2.0 * spf.stdtr(n - 1, -t)) if n >= 2 else np.full(t.shape, np.nan)

    def critical(self, n: int, level: float) -> float:
        return float(sps.t.ppf(1.0 - level / 2.0, n - 1)) if n >= 2 else math.nan


@dataclasses.dataclass(frozen=True)
class SkewEnvelopeParams:
    """``draws``: simulated studies per distribution and ``n`` (2^18: about 650 of them beyond the
    critical value at the Holm level 0.05/21 of config/digits-full.yaml, a Monte Carlo error of 4%
    which the upper confidence bound covers); ``seed``: their generator's."""

    draws: int = 2 ** 18
    seed: int = 937

    def __post_init__(self) -> None:
        check_range("draws", self.draws, 1000)


def _sorted_abs_t(x: np.ndarray) -> np.ndarray:
    """Sorted ``|T|`` per row of ``x`` ``[draws, n]`` (sums, not ``np.std``: the envelope is built
    once per ``n`` in every process that judges, so its seconds count)."""
    n = x.shape[1]
    s1 = x.sum(axis=1)
    var = (np.einsum("ij,ij->i", x, x) - s1 * s1 / n) / (n - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(s1 / n) / np.sqrt(np.maximum(var, 0.0) / n)
    return np.sort(np.nan_to_num(t, nan=np.inf))  # a tie (0 / 0) counts against us, never for us


#: One-sided 99% normal quantile: the Monte Carlo p-value's upper confidence bound.
_Z99 = 2.326


def _upper(k: np.ndarray, draws: int) -> np.ndarray:
    """The upper 99% confidence bound of a tail probability seen ``k`` times in ``draws``."""
    return (k + 1.0 + _Z99 * np.sqrt(k + 1.0)) / (draws + 1.0)


@functools.lru_cache(maxsize=16)
def _envelope_draws(n: int, draws: int, seed: int) -> tuple[tuple[str, np.ndarray], ...]:
    """``(model, sorted |T| over draws)`` for every distribution of the envelope at ``n`` seeds.
    One normal matrix serves the normal and every lognormal (common random numbers)."""
    rng = np.random.default_rng([seed, n])
    z = rng.standard_normal((draws, n))
    chi2_3 = 2.0 * rng.standard_gamma(1.5, (draws, n))  # t3 = normal / sqrt(chi2_3 / 3)
    out = [("normal", _sorted_abs_t(z)), ("t3", _sorted_abs_t(rng.standard_normal((draws, n)) / np.sqrt(chi2_3 / 3)))]
    step = np.exp(SKEW_SIGMAS[0] * z)  # the sigmas are multiples of the first: exp(k s z) = step^k
    power = step
    for k, s in enumerate(SKEW_SIGMAS, start=1):
        assert math.isclose(s, k * SKEW_SIGMAS[0])
        out.append((f"lognormal({s:g})", _sorted_abs_t(power - math.exp(s * s / 2))))
        power = power * step
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def _envelope_critical(n: int, level: float, draws: int, seed: int) -> float:
    """:meth:`SkewEnvelope.critical`: ``k`` draws may lie above ``c`` while ``_upper(k) <= level``,
    i.e. ``u = √(k + 1) <= (-z + √(z² + 4 L)) / 2`` with ``L = level (draws + 1)``."""
    if n < 2:
        return math.nan
    u = (-_Z99 + math.sqrt(_Z99 ** 2 + 4.0 * level * (draws + 1.0))) / 2.0
    k = int(math.floor(u * u + 1e-9)) - 1
    while k >= 0 and _upper(np.float64(k), draws) > level:  # guard the floating-point edge
        k -= 1
    if k < 0:
        return math.inf
    return max(float(ref[ref.size - 1 - k]) for _, ref in _envelope_draws(n, draws, seed))


@CALIBRATIONS.register("skew_envelope", SkewEnvelopeParams)
@dataclasses.dataclass(frozen=True)
class SkewEnvelope:
    """The worst case over normal, t3 and centred lognormal (log-SD up to 1) per-seed differences
    (module docstring)."""

    params: SkewEnvelopeParams = SkewEnvelopeParams()
    name: str = "skew_envelope"
    condition: str = ("per-seed differences are no more skewed than a lognormal of log-SD 1 (docs/methods.md §9.6's "
                      "skew model) and no heavier-tailed than Student t with 3 df")
    beyond: str = ("more skew breaks it: 27-38% of simulated null studies with lognormal differences of log-SD 1.5 "
                   "(docs/methods.md §9.2)")

    def models(self, n: int) -> tuple[tuple[str, np.ndarray], ...]:
        return _envelope_draws(int(n), self.params.draws, self.params.seed)

    def pvalue(self, t: np.ndarray | float, n: int) -> np.ndarray:
        t = np.abs(np.asarray(t, dtype=np.float64))
        if n < 2:
            return np.full(t.shape, np.nan)
        p = np.zeros(t.shape)
        for _, ref in self.models(n):
            at_least = ref.size - np.searchsorted(ref, np.nan_to_num(t, nan=0.0), side="left")
            p = np.maximum(p, _upper(at_least, ref.size))
        return np.where(np.isnan(t), np.nan, np.minimum(p, 1.0))

    def critical(self, n: int, level: float) -> float:
        """The smallest ``c`` with ``pvalue(t) <= level`` for every ``|t| > c``."""
        return _envelope_critical(int(n), float(level), self.params.draws, self.params.seed)


@functools.lru_cache(maxsize=None)
def calibration(name: str = DEFAULT_CALIBRATION, draws: int | None = None) -> Calibration:
    """The calibration ``name`` (``draws`` overrides the envelope's simulation size: the seeds-needed
    plan uses a coarser one, its answer being a plan, not a verdict)."""
    params = {"draws": draws} if draws is not None and name == "skew_envelope" else None
    return CALIBRATIONS.build(name, params)
