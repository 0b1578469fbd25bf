"""Anytime-valid paired comparisons: the safe t-test's e-value, its confidence sequence, Holm across claims.

A sequential study looks at a claim after every stage and adds seeds only where it is still open
(docs/methods.md §14). A Student-t interval looked at after every seed is not a 95% interval
any more (its error grows with every look); this module's statistics stay valid however often they
are looked at and whenever the study stops, whatever the stop depends on.

**The e-value** of ``n`` paired per-seed differences ``d_1..d_n`` against "the mean difference is
``mu``" (unknown variance) is the safe t-test's (Grünwald, de Heide & Koolen, *Safe testing*,
JRSS-B 2024, §4; Pérez-Ortiz, Lardy, de Heide & Grünwald, *E-statistics, group invariance and
anytime-valid testing*, Ann. Statist. 52(4) 2024): the Bayes factor with the right Haar prior
``1/sigma`` on the scale and a normal prior ``N(0, g)`` on the standardised effect
``delta = (mean - mu) / sigma``, ``g = prior_sd**2``; with ``t`` the one-sample t-statistic of
``d - mu`` and ``nu = n - 1`` (Gönen et al. 2005; Rouder et al. 2009, eq. 1 at fixed ``g``)::

    E_n = (1 + n g)^(-1/2) * [ (1 + t^2 / nu) / (1 + t^2 / (nu (1 + n g))) ]^(n / 2)

It is 1 below two seeds. Under the null it is a test martingale in the filtration of the
scale-invariant statistic (Pérez-Ortiz et al., Thm. 3), so by Ville's inequality
``P(sup_n E_n >= 1/alpha) <= alpha``: the **anytime p-value** ``p_n = min(1, 1 / max_{k<=n} E_k)``
is a valid p-value at any time, even one chosen after seeing every claim's data (it is at least
the infimum over the whole potential sequence of seeds, whose probability of falling to alpha
is at most alpha). Seeds must enter in their fixed order (0, 1, 2, ...), never picked.

**The confidence sequence**: the means ``mu`` no look has rejected at level ``alpha``. ``E_n`` grows
with ``t^2``, so at each look the set is ``mean ± c_n s / √n`` with ``c_n`` the t where
``E_n = 1/alpha`` (closed form, :func:`cs_multiplier`; infinite while no t reaches it); the
printed interval is the running intersection over looks. It covers the true mean at every look
at once with probability >= 1 - alpha, so also after a data-dependent stop.

**The family**: Holm's step-down on the anytime p-values (valid under any dependence between
claims: shared baselines, and stops that depend on other claims), as
:mod:`timestep_lab.evidence.family` does on fixed-design p-values. A rejection persists: p-values
only fall with more seeds.

Ville's bound is exact for normal per-seed differences only. **Skewed seeds**: with ``horizon``
(the budget's ``max_seeds``) the running maximum of ``log E`` is referred instead to the
scorecard's skew envelope (normal, Student t 3, centred lognormals of log-SD up to 1, §9.6):
:func:`envelope_p` and :func:`envelope_log_bound`, simulated paths of ``horizon`` seeds, valid at
any stop up to ``horizon`` (docs/methods.md §14.1). Pure numpy; every function takes
arrays ``[..., n]`` (the last axis: seeds in order), so a simulation of thousands of studies is one call.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np

from timestep_lab.evidence.calibration import SKEW_SIGMAS, _upper
from timestep_lab.evidence.stats import holm_rows, verdict

__all__ = ["ALPHA", "PRIOR_SD", "Sequential", "log_e_values", "prefix_t", "e_path", "anytime_p", "cs_multiplier",
           "cs_path", "sequential", "judge_sequential", "resolvable_effect", "seeds_to_resolve", "envelope_p",
           "envelope_log_bound", "envelope_anytime_p", "ENVELOPE_DRAWS"]

#: The family-wise error rate the card promises (as :data:`timestep_lab.evidence.family.ALPHA`).
ALPHA = 0.05
#: SD of the normal prior on the standardised effect ``delta`` (``g = PRIOR_SD**2``): the effects
#: the test grows fastest against are a few seed SDs (docs/methods.md §14 on the choice).
PRIOR_SD = 3.0


def log_e_values(t: np.ndarray, n: np.ndarray, prior_sd: float = PRIOR_SD) -> np.ndarray:
    """``log E_n`` (module docstring) of t-statistics ``t`` at ``n`` seeds (broadcast); 0 where ``n < 2``."""
    t = np.asarray(t, dtype=np.float64)
    n = np.broadcast_to(np.asarray(n, dtype=np.float64), t.shape)
    ok = n >= 2
    nu = np.where(ok, n - 1, 1.0)
    r = 1.0 + n * prior_sd ** 2
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.where(ok, np.nan_to_num(t, nan=0.0, posinf=np.inf, neginf=np.inf) ** 2 / nu, 0.0)
        # log((1 + x) / (1 + x / r)) = log r + log1p((1 - r) / (r + x)): finite at x = inf (a zero SD)
        log_e = -0.5 * np.log(r) + 0.5 * n * (np.log(r) + np.log1p((1.0 - r) / (r + x)))
    return np.where(ok, log_e, 0.0)


def prefix_t(d: np.ndarray, mu: float | np.ndarray = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mean, sd, t)`` of ``d - mu`` over every prefix of the last axis: ``[..., N]`` each, the
    k-th entry over seeds ``0..k`` (sd with ``ddof=1``, NaN at one seed; ``t = mean √n / sd``, ±inf
    for a zero sd with a nonzero mean, 0 for both zero)."""
    x = np.asarray(d, dtype=np.float64) - np.asarray(mu, dtype=np.float64)[..., None]
    n = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mean = np.cumsum(x, axis=-1) / n
    # centred second moment by prefix, from sums of the shifted values (shift: the first value)
    y = x - x[..., :1]
    ss = np.cumsum(y * y, axis=-1) - n * (np.cumsum(y, axis=-1) / n) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.where(n >= 2, np.sqrt(np.maximum(ss, 0.0) / np.maximum(n - 1, 1)), np.nan)
        t = np.where(sd > 0, mean * np.sqrt(n) / sd, np.where(mean == 0, 0.0, np.sign(mean) * np.inf))
    return mean + np.asarray(mu, dtype=np.float64)[..., None], sd, t


def e_path(d: np.ndarray, mu: float | np.ndarray = 0.0, prior_sd: float = PRIOR_SD) -> np.ndarray:
    """``E_1..E_N`` of ``d`` ``[..., N]`` against mean ``mu`` (``[...]`` or a number): ``[..., N]``."""
    _, _, t = prefix_t(d, mu)
    n = np.arange(1, t.shape[-1] + 1)
    return np.exp(log_e_values(t, n, prior_sd))


def anytime_p(d: np.ndarray, mu: float | np.ndarray = 0.0, prior_sd: float = PRIOR_SD) -> np.ndarray:
    """The anytime p-value after every prefix, ``min(1, 1 / max_{k<=n} E_k)``: ``[..., N]``."""
    return np.minimum(1.0, 1.0 / np.maximum.accumulate(e_path(d, mu, prior_sd), axis=-1))


def cs_multiplier(n: int | np.ndarray, alpha: float = ALPHA, prior_sd: float = PRIOR_SD,
                  horizon: int | None = None) -> np.ndarray:
    """``c_n``: ``E_n(t) = 1/alpha`` at ``|t| = c_n`` (inf when no t reaches it, NaN below 2 seeds);
    with ``horizon``, ``E_n(t) = B`` for the skew envelope's bound ``B`` (:func:`envelope_log_bound`).

    With ``r = 1 + n g``, ``q = (r^(1/2) / alpha)^(2/n)``: ``(1 + x) / (1 + x / r) = q`` at
    ``x = t^2 / nu = (q - 1) / (1 - q / r)``, reachable only when ``q < r`` (the e-value's limit as
    ``|t| -> inf`` is ``r^((n - 1) / 2)``). The interval at ``n`` seeds is ``mean ± c_n s / √n``."""
    n = np.asarray(n, dtype=np.float64)
    r = 1.0 + n * prior_sd ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        log_b = -math.log(alpha) if horizon is None else envelope_log_bound(alpha, horizon, prior_sd)
        q = np.exp((2.0 / np.maximum(n, 1)) * (0.5 * np.log(r) + log_b))
        x = (q - 1.0) / (1.0 - q / r)
        c = np.where(q < r, np.sqrt(np.maximum(n - 1, 0) * x), np.inf)
    return np.where(n >= 2, c, np.nan)


def cs_path(d: np.ndarray, alpha: float = ALPHA, prior_sd: float = PRIOR_SD,
            horizon: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` of the confidence sequence after every prefix (running intersection of the
    looks' intervals): ``[..., N]`` each, ``(-inf, inf)`` until some look bounds it. An empty
    intersection (possible only when the sequence has already missed the mean) keeps the last
    non-empty interval's bounds, so ``low <= high`` always. ``horizon``: the skew envelope's
    bound up to that many seeds (:func:`envelope_log_bound`) instead of ``1/alpha``."""
    mean, sd, _ = prefix_t(d)
    n = np.arange(1, mean.shape[-1] + 1)
    with np.errstate(invalid="ignore"):  # inf * a zero SD: no look bounds it yet
        half = cs_multiplier(n, alpha, prior_sd, horizon) * sd / np.sqrt(n)
    half = np.where(np.isfinite(half), half, np.inf)
    low = np.maximum.accumulate(np.where(np.isfinite(half), mean - half, -np.inf), axis=-1)
    high = np.minimum.accumulate(np.where(np.isfinite(half), mean + half, np.inf), axis=-1)
    return np.minimum(low, high), np.maximum(low, high)


@dataclass(frozen=True)
class Sequential:
    """One claim's comparison after ``n`` paired seeds (units of the differences).

    ``e_value``: ``E_n`` against no effect; ``p``: the anytime p-value; ``ci_low``/``ci_high``:
    the confidence sequence at ``1 - alpha`` (running intersection); ``p_adj`` after Holm
    (:func:`judge_sequential`); ``detectable``: :func:`resolvable_effect` at ``n`` and ``alpha``;
    ``horizon``: None (exact for normal differences at any number of seeds) or the seeds up to
    which p and interval are referred to the skew envelope."""

    n: int
    diff: float
    sd: float
    e_value: float
    p: float
    ci_low: float
    ci_high: float
    detectable: float
    alpha: float = ALPHA
    prior_sd: float = PRIOR_SD
    p_adj: float = math.nan
    verdict: str = "inconclusive"
    interval: str = "confidence sequence (safe t)"
    horizon: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def sequential(diffs: Sequence[float], alpha: float = ALPHA, prior_sd: float = PRIOR_SD,
               horizon: int | None = None) -> Sequential:
    """:class:`Sequential` of the per-seed differences ``diffs`` in seed order (non-finite values
    are dropped: a failed run is missing data). ``horizon``: refer p and interval to the skew
    envelope up to that many seeds (:func:`envelope_anytime_p`; the budget's ``max_seeds``)."""
    d = np.asarray(diffs, dtype=np.float64)
    d = d[np.isfinite(d)]
    nan = math.nan
    if d.size == 0:
        return Sequential(0, nan, nan, 1.0, 1.0, -math.inf, math.inf, nan, alpha, prior_sd, horizon=horizon)
    mean, sd, _ = prefix_t(d)
    low, high = cs_path(d, alpha, prior_sd, horizon)
    n = int(d.size)
    p = anytime_p(d, 0.0, prior_sd) if horizon is None else envelope_anytime_p(d, horizon, prior_sd)
    return Sequential(n, float(mean[-1]), float(sd[-1]), float(e_path(d, 0.0, prior_sd)[-1]), float(p[-1]),
                      float(low[-1]), float(high[-1]), resolvable_effect(float(sd[-1]), n, alpha, prior_sd, horizon),
                      alpha, prior_sd, horizon=horizon)


def judge_sequential(claims: Mapping[str, tuple[Sequence[float], int]], alpha: float = ALPHA,
                     prior_sd: float = PRIOR_SD, horizon: int | None = None) -> dict[str, Sequential]:
    """Every claim ``name -> (per-seed differences in seed order, expected sign)`` judged as one
    family: anytime p-values Holm-adjusted together, the verdict of
    :func:`timestep_lab.evidence.stats.verdict` on the ``1 - alpha`` confidence sequence and
    ``p_adj``. A claim with fewer than 2 seeds is in the family with p = 1. One entry per distinct
    comparison (two claims on one comparison count once, as in the scorecard's family)."""
    names = list(claims)
    rows = {k: sequential(claims[k][0], alpha, prior_sd, horizon) for k in names}
    if not names:
        return {}
    adj = holm_rows(np.array([[rows[k].p for k in names]]))[0]
    out = {}
    for k, a in zip(names, adj):
        r = rows[k]
        word = verdict(r.ci_low if math.isfinite(r.ci_low) else None,
                       r.ci_high if math.isfinite(r.ci_high) else None, int(claims[k][1]), float(a), alpha)
        out[k] = Sequential(**{**r.as_dict(), "p_adj": float(a), "verdict": word})
    return out


def resolvable_effect(sd: float, n: int, alpha: float = ALPHA, prior_sd: float = PRIOR_SD,
                      horizon: int | None = None) -> float:
    """The smallest |mean difference| that rejects at level ``alpha`` at ``n`` seeds with sample
    SD ``sd``: ``c_n sd / √n`` (inf when no mean can, NaN below 2 seeds or without a finite SD).
    The sequential design's counterpart of a detectable effect, at the point estimate (not at 80%
    power: the planner uses it to rank claims and to count seeds, §14)."""
    if n < 2 or sd is None or not math.isfinite(sd):
        return math.nan
    return float(cs_multiplier(n, alpha, prior_sd, horizon)) * float(sd) / math.sqrt(n)


def seeds_to_resolve(effect: float, sd: float, alpha: float = ALPHA, prior_sd: float = PRIOR_SD,
                     max_n: int = 64, horizon: int | None = None) -> int | None:
    """Fewest seeds ``n >= 2`` whose :func:`resolvable_effect` is at most ``|effect|`` (same ``sd``):
    the seeds a true difference of that size needs when the SD holds. None when ``max_n`` are not
    enough or ``effect``/``sd`` are not finite; 2 for a zero SD (``effect`` nonzero)."""
    if effect is None or sd is None or not (math.isfinite(effect) and math.isfinite(sd)) or effect == 0:
        return None
    if sd == 0:
        return 2
    n = np.arange(2, (max_n if horizon is None else min(max_n, horizon)) + 1)
    ok = cs_multiplier(n, alpha, prior_sd, horizon) * sd / np.sqrt(n) <= abs(effect)
    return int(n[np.argmax(ok)]) if ok.any() else None


# --------------------------------------------------------------------------- skewed seeds: the envelope

#: Simulated studies per distribution of the envelope (2^16: ~230 beyond the bound at 0.05/14).
ENVELOPE_DRAWS = 2 ** 16
_ENVELOPE_SEED = 4040


@functools.lru_cache(maxsize=32)
def _envelope_sup(horizon: int, prior_sd: float, draws: int = ENVELOPE_DRAWS) -> tuple[np.ndarray, ...]:
    """Sorted ``max_{k <= horizon} log E_k`` of null paths, one array per distribution of the
    scorecard's skew envelope (:mod:`timestep_lab.evidence.calibration`: normal, Student t with 3
    df, centred lognormals of log-SD up to 1). Seeded: the same arguments give the same numbers."""
    rng = np.random.default_rng([_ENVELOPE_SEED, horizon])
    z = rng.standard_normal((draws, horizon))
    t3 = rng.standard_normal((draws, horizon)) / np.sqrt(2.0 * rng.standard_gamma(1.5, (draws, horizon)) / 3.0)
    paths = [z, t3, *(np.exp(s * z) - math.exp(s * s / 2) for s in SKEW_SIGMAS)]
    n = np.arange(1, horizon + 1)
    return tuple(np.sort(log_e_values(prefix_t(x)[2], n, prior_sd).max(axis=-1)) for x in paths)


def envelope_p(log_sup: np.ndarray, horizon: int, prior_sd: float = PRIOR_SD) -> np.ndarray:
    """The skew envelope's p-value of a running maximum ``log_sup`` of ``log E`` seen by some look
    at most ``horizon`` seeds: the largest over the envelope's distributions of the 99% upper
    confidence bound of ``P(max_{k <= horizon} log E_k >= log_sup)`` under no effect (the rule of
    the scorecard's calibration). Valid at any stop up to ``horizon`` seeds, chosen however."""
    x = np.asarray(log_sup, dtype=np.float64)
    p = np.zeros(x.shape)
    for ref in _envelope_sup(int(horizon), float(prior_sd)):
        p = np.maximum(p, _upper(ref.size - np.searchsorted(ref, x, side="left"), ref.size))
    return np.minimum(p, 1.0)


@functools.lru_cache(maxsize=1024)
def envelope_log_bound(alpha: float, horizon: int, prior_sd: float = PRIOR_SD) -> float:
    """``log B``: a null path of at most ``horizon`` seeds from any distribution of the envelope
    has ``max_k log E_k > log B`` with probability at most ``alpha`` (the smallest such ``B`` of the
    simulation, its 99% upper bound as :func:`envelope_p`). Replaces Ville's ``1/alpha``."""
    refs = _envelope_sup(int(horizon), float(prior_sd))
    draws = refs[0].size
    k = np.arange(draws)
    allowed = k[_upper(k.astype(np.float64), draws) <= alpha]
    if allowed.size == 0:
        return math.inf
    return max(float(ref[draws - 1 - allowed[-1]]) for ref in refs)


def envelope_anytime_p(d: np.ndarray, horizon: int, prior_sd: float = PRIOR_SD) -> np.ndarray:
    """:func:`anytime_p` referred to the skew envelope up to ``horizon`` seeds: ``[..., N]``, N <= horizon."""
    if d.shape[-1] > horizon:
        raise ValueError(f"{d.shape[-1]} seeds is past the envelope's horizon of {horizon}")
    log_e = log_e_values(prefix_t(d)[2], np.arange(1, d.shape[-1] + 1), prior_sd)
    return envelope_p(np.maximum.accumulate(log_e, axis=-1), horizon, prior_sd)
