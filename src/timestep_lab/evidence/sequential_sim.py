"""Whole sequential studies simulated at once: error, coverage and power of the design, and its cost.

A simulated study has ``m`` claims, each an arm against a shared baseline, measured on paired
seeds ``0..n_max-1``: per seed ``s`` the baseline scores ``b_s`` and claim ``j``'s arm ``a_{js}``,
both ``N(0, 1)`` plus the arm's true effect ``effects[j]`` (in units of one run's SD), so the
differences ``a_{js} - b_s`` of two claims share their baseline (correlation 1/2). The design looks
after ``n_start`` seeds and then every ``step`` seeds up to ``n_max`` (every open claim grows, or
only the most promising one: ``allocation``); at every look the open claims'
anytime p-values (:mod:`timestep_lab.evidence.sequential`) are Holm-adjusted with the resolved
claims' frozen ones, and a claim whose adjusted p falls below ``alpha`` is resolved: it stops,
with its direction and its confidence sequence at that look. Claims still open at ``n_max`` stop there.

:func:`simulate` returns every study's outcome (``[R, m]`` arrays); :func:`expected_cost` prices
the design: an arm's seeds are the most any of its claims used. Vectorised over studies and claims
(numpy, one loop over the looks). Randomness: a ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from timestep_lab.evidence.sequential import ALPHA, PRIOR_SD, anytime_p, cs_path, envelope_anytime_p, prefix_t
from timestep_lab.evidence.stats import holm_rows

__all__ = ["Outcome", "looks", "simulate", "expected_cost"]


@dataclass(frozen=True)
class Outcome:
    """Simulated studies: ``finding`` ``[R, m]`` (+1 / -1: resolved with the mean difference of
    that sign, 0: open at the end), ``stop_n`` ``[R, m]`` (seeds when the claim stopped),
    ``covered`` ``[R, m]`` (its ``1 - alpha`` confidence sequence at the stop covers the true
    effect), ``naive_covered`` (the fixed-design 95% Student-t interval at the same stop does)."""

    finding: np.ndarray
    stop_n: np.ndarray
    covered: np.ndarray
    naive_covered: np.ndarray

    def fwer(self, effects: Sequence[float]) -> float:
        """Share of studies with a false finding: a finding on a null claim, or of the wrong sign."""
        e = np.asarray(effects, dtype=np.float64)[None, :]
        wrong = (self.finding != 0) & ((e == 0) | (np.sign(e) != self.finding))
        return float(wrong.any(axis=1).mean())


def looks(n_start: int, step: int, n_max: int) -> list[int]:
    """The seed counts the design looks at: ``n_start, n_start + step, ...``, and ``n_max``."""
    if not (2 <= n_start <= n_max) or step < 1:
        raise ValueError(f"need 2 <= n_start <= n_max and step >= 1, got {n_start}, {n_max}, {step}")
    out = list(range(n_start, n_max + 1, step))
    return out if out[-1] == n_max else [*out, n_max]


def _naive_half(d: np.ndarray) -> np.ndarray:
    """Half-width of the 95% Student-t interval over every prefix ``[..., N]`` (NaN at one seed)."""
    from scipy import stats as sps

    n = np.arange(1, d.shape[-1] + 1)
    mean = np.cumsum(d, axis=-1) / n
    sq = np.cumsum(d * d, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = np.sqrt(np.maximum(sq - n * mean ** 2, 0.0) / (n - 1))
        return sps.t.ppf(0.975, np.maximum(n - 1, 1)) * sd / np.sqrt(n) * np.where(n >= 2, 1.0, np.nan)


def _student_p(d: np.ndarray) -> np.ndarray:
    """The fixed-design two-sided Student-t p-value after every prefix (1 at one seed): what a
    study that peeks without a sequential correction would use."""
    from scipy import special

    _, sd, t = prefix_t(d)
    n = np.arange(1, d.shape[-1] + 1)
    with np.errstate(invalid="ignore"):
        p = 2 * special.stdtr(np.maximum(n - 1, 1), -np.abs(t))
    return np.where(n >= 2, np.nan_to_num(p, nan=1.0), 1.0)


def simulate(effects: Sequence[float], *, n_start: int = 2, step: int = 1, n_max: int = 10, studies: int = 2000,
             alpha: float = ALPHA, prior_sd: float = PRIOR_SD, rng: np.random.Generator,
             test: str = "safe", allocation: str = "all", skew: float | None = None) -> Outcome:
    """``studies`` sequential studies of the claims ``effects`` (module docstring). ``test``:
    "safe" (the anytime p-values) or "student" (Student-t p-values at every look: the uncorrected
    design the tests compare with) or "envelope" (the anytime p-values and intervals referred to
    the skew envelope up to ``n_max`` seeds). ``skew``: None (runs as above) or the log-SD of
    centred lognormal per-seed *differences*, drawn directly, scaled to SD 1, plus the effects
    (no shared baseline: a difference of two iid runs is symmetric). ``allocation``: "all" (every open claim gets ``step`` more
    seeds per stage) or "greedy" (only the open claim with the smallest p, a data-dependent rule
    like the planner's best chance first: the one that favours an uncorrected test most); a stage
    then adds seeds to one claim, until every open claim is at ``n_max``."""
    if test not in ("safe", "student", "envelope") or allocation not in ("all", "greedy"):
        raise ValueError(f"test must be safe or student and allocation all or greedy, got {test!r}, {allocation!r}")
    looks(n_start, step, n_max)  # checks the design
    e = np.asarray(effects, dtype=np.float64)
    m = e.size
    if skew is None:
        base = rng.standard_normal((studies, 1, n_max))
        d = rng.standard_normal((studies, m, n_max)) + e[None, :, None] - base  # [R, m, N]
    else:
        sd = math.sqrt((math.exp(skew * skew) - 1) * math.exp(skew * skew))
        d = (np.exp(skew * rng.standard_normal((studies, m, n_max))) - math.exp(skew * skew / 2)) / sd + e[None, :, None]
    horizon = n_max if test == "envelope" else None
    p_path = {"safe": anytime_p, "student": lambda x, *_: _student_p(x),
              "envelope": lambda x, mu, g: envelope_anytime_p(x, n_max, g)}[test](d, 0.0, prior_sd)
    mean_path = np.cumsum(d, axis=-1) / np.arange(1, n_max + 1)
    rows, cols = np.arange(studies)[:, None], np.arange(m)[None, :]
    n = np.full((studies, m), n_start)
    p_now = np.ones((studies, m))
    open_ = np.ones((studies, m), dtype=bool)
    stop_n = np.full((studies, m), n_max)
    finding = np.zeros((studies, m), dtype=np.int8)
    while True:
        p_now = np.where(open_, p_path[rows, cols, n - 1], p_now)  # resolved claims keep the p they stopped with
        new = open_ & (holm_rows(p_now) < alpha)
        stop_n = np.where(new, n, stop_n)
        finding = np.where(new, np.sign(mean_path[rows, cols, n - 1]), finding).astype(np.int8)
        open_ &= ~new
        grow = open_ & (n < n_max)
        if not grow.any():
            break
        if allocation == "greedy":
            grow &= cols == np.argmin(np.where(grow, p_now, np.inf), axis=1)[:, None]
        n = np.where(grow, np.minimum(n + step, n_max), n)
    stop_n = np.where(open_, n, stop_n)
    low, high = cs_path(d, alpha, prior_sd, horizon)
    at = stop_n - 1
    lo, hi, mean = low[rows, cols, at], high[rows, cols, at], mean_path[rows, cols, at]
    truth = e[None, :]
    return Outcome(finding, stop_n, (lo <= truth) & (truth <= hi), np.abs(mean - truth) <= _naive_half(d)[rows, cols, at])


def expected_cost(claim_arms: Mapping[str, Sequence[str]], effects: Mapping[str, float],
                  seed_cost: Mapping[str, float], *, extend_cost: Mapping[str, float] | None = None,
                  longer: Sequence[str] = (), n_start: int = 2, step: int = 1, n_max: int = 10,
                  studies: int = 2000, alpha: float = ALPHA, prior_sd: float = PRIOR_SD,
                  rng: np.random.Generator, test: str = "safe",
                  start: Mapping[str, int] | None = None) -> dict[str, float]:
    """Expected and worst-case cost of the sequential design of ``claim_arms`` (claim -> the arms it
    needs besides the shared baseline, which every claim needs: list it in ``seed_cost`` under
    ``"baseline"``) when claim ``j``'s true effect is ``effects[j]`` run SDs; ``seed_cost[arm]``: one
    seed of that arm at its length (any unit). An arm's seeds are the most any of its claims used.
    Length: ``extend_cost[arm]`` prices training one seed of the arm from its length to its longest
    (absent: the arm does not grow); the expectation assumes the claims ``longer`` (e.g. those not
    judged at the configured length) need it, for every seed their arms run; the worst case, every
    arm that can grow, for ``n_max`` seeds. ``test``: as :func:`simulate` ("envelope" when the
    verdicts use the skew envelope, ``budget.calibration``). ``start[arm]``: the seeds an arm has in
    the first look when other than ``n_start`` (a run another, unstaged group needs runs whatever the
    claims say): an arm costs ``max(its seeds, start)`` seeds.

    :returns: ``{"expected", "worst", "fixed_at_start", "p_resolved"}``: the mean cost over simulated
        studies, the worst case, the first look's cost (no extension), and the mean share of claims resolved."""
    names = list(claim_arms)
    out = simulate([effects[k] for k in names], n_start=n_start, step=step, n_max=n_max, studies=studies,
                   alpha=alpha, prior_sd=prior_sd, rng=rng, test=test)
    arms = sorted({a for k in names for a in claim_arms[k]} | {"baseline"})
    seeds = np.zeros((out.stop_n.shape[0], len(arms)))
    grows = np.zeros(len(arms), dtype=bool)
    for j, k in enumerate(names):
        for a in {*claim_arms[k], "baseline"}:
            i = arms.index(a)
            seeds[:, i] = np.maximum(seeds[:, i], out.stop_n[:, j])
            grows[i] |= k in longer
    first = np.array([float((start or {}).get(a, n_start)) for a in arms])
    seeds = np.maximum(seeds, first)
    price = np.array([float(seed_cost[a]) for a in arms])
    extend = np.array([float((extend_cost or {}).get(a, 0.0)) for a in arms])
    return {"expected": float((seeds @ (price + np.where(grows, extend, 0.0))).mean()),
            "worst": float(np.maximum(n_max, first) @ (price + extend)), "fixed_at_start": float(first @ price),
            "p_resolved": float((out.finding != 0).mean())}
